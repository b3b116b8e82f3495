//! Checks against git itself: our hunks apply with `git apply`, any subset of them applied in
//! any order by us gives the bytes `git apply` gives for that subset, git's own diffs parse and
//! apply with our functions, and `to_unified` prints what `git diff` prints.
//!
//! git runs hermetically: no global or system config, a throwaway HOME, a fresh repository.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{apply_in_order, case, pick, subset_and_order};
use hunkgate_patch::{
    apply_all, apply_hunk, diff_hunks, parse_hunks, split_hunk, split_where, Hunk, HunkLine, Pick,
    SplitError,
};
use proptest::prelude::*;

const FILE_HEADER: &str = "diff --git a/f b/f\n--- a/f\n+++ b/f\n";

fn git(cwd: &Path, home: &Path, args: &[&str]) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    Command::new("git")
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CEILING_DIRECTORIES", home.parent().unwrap_or(home))
        .env("LC_ALL", "C")
        .output()
        .expect("git is on PATH")
}

/// A throwaway repository holding one file, `f`.
struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("repo")).unwrap();
        let repo = Repo { dir };
        let out = git(&repo.worktree(), repo.home(), &["init", "-q"]);
        assert!(out.status.success(), "git init: {out:?}");
        repo
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    fn worktree(&self) -> std::path::PathBuf {
        self.dir.path().join("repo")
    }

    /// `git apply` a patch made of the given hunks (in file order) to a file holding `old`.
    fn git_apply(&self, old: &str, hunks: &[&Hunk]) -> String {
        self.git_apply_with(old, hunks, &[])
    }

    fn git_apply_with(&self, old: &str, hunks: &[&Hunk], flags: &[&str]) -> String {
        let file = self.worktree().join("f");
        std::fs::write(&file, old).unwrap();
        let patch: String = std::iter::once(FILE_HEADER.to_owned())
            .chain(renumbered(hunks).iter().map(Hunk::to_unified))
            .collect();
        let patch_file = self.home().join("change.patch");
        std::fs::write(&patch_file, &patch).unwrap();
        let patch_arg = patch_file.to_str().unwrap();
        let args: Vec<&str> = ["apply", "--whitespace=nowarn"]
            .into_iter()
            .chain(flags.iter().copied())
            .chain([patch_arg])
            .collect();
        let out = git(&self.worktree(), self.home(), &args);
        assert!(
            out.status.success(),
            "git apply failed: {}\npatch:\n{patch:?}\nold: {old:?}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(std::fs::read(&file).unwrap()).unwrap()
    }

    /// `git diff --no-index -U<context>` of two texts, headers included.
    fn git_diff(&self, old: &str, new: &str, context: usize) -> String {
        std::fs::write(self.home().join("old"), old).unwrap();
        std::fs::write(self.home().join("new"), new).unwrap();
        let unified = format!("-U{context}");
        let out = git(
            self.home(),
            self.home(),
            &[
                "diff",
                "--no-index",
                "--no-color",
                "--no-ext-diff",
                &unified,
                "old",
                "new",
            ],
        );
        // 0: no difference, 1: differences; anything else is a failure.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "git diff failed: {out:?}"
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The hunks with their new-side starts recomputed as if only these hunks made up the diff.
///
/// `git apply` starts looking for a hunk at its NEW start in the partly patched file, which is
/// only right when every hunk above it is applied too. A client picking a subset must therefore
/// renumber before handing the patch to git (and for a context-free hunk git does not even
/// check the place). hunkgate itself locates hunks by old start plus offset, so it needs none of
/// this; renumbering only makes git's answer the meaningful one to compare against.
fn renumbered(hunks: &[&Hunk]) -> Vec<Hunk> {
    let mut offset: isize = 0;
    hunks
        .iter()
        .map(|h| {
            let old_begin = if h.old_len == 0 {
                h.old_start
            } else {
                h.old_start - 1
            };
            let new_begin = usize::try_from(old_begin as isize + offset).unwrap();
            offset += h.delta();
            Hunk {
                new_start: if h.new_len == 0 {
                    new_begin
                } else {
                    new_begin + 1
                },
                ..(*h).clone()
            }
        })
        .collect()
}

/// Drop git's file header lines and the function-name suffix of hunk headers, leaving what
/// `to_unified` prints.
fn hunks_only(git_diff: &str) -> String {
    let mut out = String::new();
    let mut in_hunks = false;
    for line in git_diff.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("@@") {
            in_hunks = true;
            let (ranges, _function_name) = rest.split_once(" @@").expect("hunk header closes");
            out.push_str(&format!("@@{ranges} @@\n"));
        } else if in_hunks {
            out.push_str(line);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn agrees_with_git(
        c in prop_oneof![case(false), case(true)],
        (mask, keys) in subset_and_order(),
    ) {
        let repo = Repo::new();
        let hunks = diff_hunks(&c.old, &c.new, 3);

        // Our full diff, applied by git, gives the new text.
        if !hunks.is_empty() {
            let all: Vec<&Hunk> = hunks.iter().collect();
            prop_assert_eq!(&renumbered(&all), &hunks);
            prop_assert_eq!(repo.git_apply(&c.old, &all), c.new.clone());
        }

        // A subset applied by us in a random order equals git applying it in file order.
        let (chosen, order) = pick(hunks.len(), &mask, &keys);
        if !chosen.is_empty() {
            let subset: Vec<&Hunk> = chosen.iter().map(|&i| &hunks[i]).collect();
            let by_git = repo.git_apply(&c.old, &subset);
            prop_assert_eq!(apply_in_order(&c.old, &hunks, &order), Ok(by_git));
        }

        // git's own diff parses (headers, function-name suffixes and all) and applies with us.
        let git_diff = repo.git_diff(&c.old, &c.new, 3);
        if c.old == c.new {
            prop_assert_eq!(git_diff, "");
        } else {
            let parsed = parse_hunks(&git_diff);
            prop_assert!(parsed.is_ok(), "{:?}\n{}", parsed, git_diff);
            let parsed = parsed.unwrap_or_default();
            prop_assert_eq!(parse_hunks(&hunks_only(&git_diff)), Ok(parsed.clone()));
            prop_assert_eq!(apply_all(&c.old, &parsed), Ok(c.new.clone()));
        }
    }
}

fn numbered(range: std::ops::Range<usize>) -> String {
    range.map(|i| format!("line {i}\n")).collect()
}

/// Cases whose diff has only one sensible form, so git's Myers and ours must agree and the
/// printed text must be byte-identical.
#[test]
fn to_unified_prints_what_git_diff_prints() {
    let base = numbered(1..21);
    let crlf = base.replace('\n', "\r\n");
    let cases: Vec<(String, String)> = vec![
        (base.clone(), base.replace("line 10\n", "ten\n")),
        (
            base.clone(),
            base.replace("line 5\n", "five\n")
                .replace("line 12\n", "twelve\n"),
        ),
        (
            base.clone(),
            base.replace("line 5\n", "five\n")
                .replace("line 13\n", "thirteen\n"),
        ),
        (
            base.clone(),
            base.replace("line 1\n", "").replace("line 20\n", ""),
        ),
        (base.clone(), format!("{base}line 21\nline 22\n")),
        (base.clone(), base.trim_end_matches('\n').to_owned()),
        (base.trim_end_matches('\n').to_owned(), base.clone()),
        (
            base.trim_end_matches('\n').to_owned(),
            base.replace("line 20\n", "twenty"),
        ),
        (crlf.clone(), crlf.replace("line 7\r\n", "seven\r\n")),
        (crlf.clone(), crlf.trim_end_matches("\r\n").to_owned()),
        (crlf.clone(), crlf.trim_end_matches('\n').to_owned()),
        (crlf.clone(), base.clone()),
        (String::new(), "a\nb\n".to_owned()),
        ("a\nb\n".to_owned(), String::new()),
        (String::new(), "a".to_owned()),
        ("a".to_owned(), String::new()),
        ("a\n".to_owned(), "b".to_owned()),
    ];
    let repo = Repo::new();
    for (old, new) in &cases {
        for context in [0, 1, 3, 5] {
            let ours: String = diff_hunks(old, new, context)
                .iter()
                .map(Hunk::to_unified)
                .collect();
            let theirs = hunks_only(&repo.git_diff(old, new, context));
            assert_eq!(ours, theirs, "-U{context} {old:?} -> {new:?}");
        }
    }
}

/// Context-free hunks (`-U0`, including the `-0,0` top-of-file form) give git no lines to
/// check, so only the numbers place them; every subset must still land where git puts it.
#[test]
fn zero_context_hunks_apply_like_git() {
    let repo = Repo::new();
    let old = numbered(1..11);
    let new = old
        .replace("line 1\n", "top\nline 1\n")
        .replace("line 5\n", "")
        .replace("line 8\n", "line 8\nafter 8\n");
    let hunks = diff_hunks(&old, &new, 0);
    assert_eq!(hunks.len(), 3);
    for mask in 1u32..8 {
        let chosen: Vec<usize> = (0..3).filter(|i| mask & (1 << i) != 0).collect();
        let subset: Vec<&Hunk> = chosen.iter().map(|&i| &hunks[i]).collect();
        // git needs --unidiff-zero to accept hunks without context.
        let by_git = repo.git_apply_with(&old, &subset, &["--unidiff-zero"]);
        let mut reverse_order = chosen.clone();
        reverse_order.reverse();
        assert_eq!(
            apply_in_order(&old, &hunks, &reverse_order),
            Ok(by_git.clone())
        );
        let owned: Vec<Hunk> = subset.iter().map(|h| (*h).clone()).collect();
        assert_eq!(apply_all(&old, &owned), Ok(by_git), "subset {chosen:?}");
    }
}

/// The changes of `landed` as the zero-context patch a client such as gitsigns builds for the
/// selected lines: one hunk per run of changed lines, each at its place in the file (old
/// numbers) and in the result (new numbers).
fn zero_context(landed: &Hunk) -> Vec<Hunk> {
    let first = |start: usize, len: usize| if len == 0 { start + 1 } else { start };
    let (mut old, mut new) = (
        first(landed.old_start, landed.old_len),
        first(landed.new_start, landed.new_len),
    );
    let mut out: Vec<Hunk> = Vec::new();
    let mut open = false;
    for line in &landed.lines {
        if let HunkLine::Context(_) = line {
            (old, new, open) = (old + 1, new + 1, false);
            continue;
        }
        if !open {
            out.push(Hunk {
                old_start: old,
                old_len: 0,
                new_start: new,
                new_len: 0,
                lines: Vec::new(),
            });
            open = true;
        }
        let h = out.last_mut().expect("a hunk is open");
        h.lines.push(line.clone());
        match line {
            HunkLine::Remove(_) => (h.old_len, old) = (h.old_len + 1, old + 1),
            _ => (h.new_len, new) = (h.new_len + 1, new + 1),
        }
    }
    for h in &mut out {
        // git's start for an empty side is the line after which the other side's lines go.
        if h.old_len == 0 {
            h.old_start -= 1;
        }
        if h.new_len == 0 {
            h.new_start -= 1;
        }
    }
    out
}

/// Cut positions `1..=len` into consecutive ranges at the given cut points.
fn parts(len: usize, cuts: &[usize]) -> Vec<(usize, usize)> {
    let mut at: Vec<usize> = cuts.iter().map(|c| 1 + c % len.max(1)).collect();
    at.push(1);
    at.push(len + 1);
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| (w[0], w[1] - 1)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// A hunk cut into random ranges, decided range by range in a random order (each range
    /// found again in the hunk that is left), ends as the lines accepted say: the whole hunk when
    /// every range is accepted. Each accepted range lands exactly at its header and gives the
    /// file `git apply --unidiff-zero` gives for the zero-context patch of the selected lines.
    #[test]
    fn ranges_decided_one_by_one_add_up_and_each_is_gits_zero_context_patch(
        c in prop_oneof![case(false), case(true)],
        which in any::<u16>(),
        cuts in proptest::collection::vec(any::<u16>().prop_map(usize::from), 0..5),
        keys in proptest::collection::vec(any::<u32>(), 8),
        rejects in proptest::collection::vec(any::<bool>(), 8),
        reject_some in any::<bool>(),
    ) {
        let hunks = diff_hunks(&c.old, &c.new, 3);
        prop_assume!(!hunks.is_empty());
        let h = &hunks[usize::from(which) % hunks.len()];
        let whole = apply_hunk(&c.old, h, 0).expect("a diff's hunk applies").text;
        let mut order = parts(h.lines.len(), &cuts);
        order.sort_by_key(|&(first, _)| (keys[first % keys.len()], first));
        let repo = Repo::new();
        let mut file = c.old.clone();
        let mut rest = Some(h.clone());
        // Where each line of `h` is among the lines of `rest`.
        let mut pos: Vec<Option<usize>> = (0..h.lines.len()).map(Some).collect();
        let mut accepted = vec![false; h.lines.len()];
        for (k, &(first, last)) in order.iter().enumerate() {
            let Some(cur) = rest.as_ref() else { break };
            let at: Vec<usize> = (first - 1..last).map(|i| pos[i].expect("an undecided line is there")).collect();
            prop_assert!(at.windows(2).all(|w| w[1] == w[0] + 1), "a range stays a range: {:?}", at);
            let pick = if reject_some && rejects[k % rejects.len()] { Pick::Reject } else { Pick::Accept };
            let split = match split_hunk(cur, at[0] + 1, at[at.len() - 1] + 1, pick) {
                Ok(s) => s,
                Err(SplitError::NoChange { .. }) => {
                    prop_assert!(at.iter().all(|&i| matches!(cur.lines[i], HunkLine::Context(_))));
                    continue;
                }
                // A range that would join a line lacking its newline to the next: refused, and
                // this case ends here.
                Err(SplitError::NoNewline { .. }) => return Ok(()),
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            };
            if let Some(landed) = &split.landed {
                let applied = apply_hunk(&file, landed, 0).expect("the landed part applies");
                let header_at = if landed.old_len == 0 { landed.old_start } else { landed.old_start - 1 };
                prop_assert_eq!(applied.at, header_at);
                let zero = zero_context(landed);
                let refs: Vec<&Hunk> = zero.iter().collect();
                prop_assert_eq!(&repo.git_apply_with(&file, &refs, &["--unidiff-zero"]), &applied.text);
                file = applied.text;
                accepted[first - 1..last].fill(true);
            }
            for p in pos.iter_mut() {
                *p = p.and_then(|i| split.moved[i]);
            }
            rest = split.rest;
        }
        // What is still undecided is accepted whole, like a pending hunk.
        if let Some(r) = &rest {
            file = apply_hunk(&file, r, 0).expect("the rest applies").text;
            for (i, p) in pos.iter().enumerate() {
                // A rejected `-` line is context there: it stays.
                accepted[i] |= p.is_some_and(|j| !matches!(r.lines[j], HunkLine::Context(_)));
            }
        }
        let want = match split_where(h, |i| accepted[i], Pick::Accept).landed {
            Some(l) => apply_hunk(&c.old, &l, 0).expect("the accepted lines apply").text,
            None => c.old.clone(),
        };
        prop_assert_eq!(&file, &want);
        if !reject_some {
            prop_assert_eq!(&file, &whole);
        }
    }
}

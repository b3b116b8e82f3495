//! Decision replay: a real feedback log (`<state-dir>/feedback.jsonl`) plus the repository that
//! holds its runs' base commits (`<state-dir>/checkpoints.git`, or the user's repository when the
//! hub ran with `--mirror-refs`) become eval tasks, one per run:
//!
//! - `repo/`: the run's base commit (the checkout as the agent saw it), byte for byte;
//! - the prompt;
//! - what the user kept: every accepted hunk, and every modified hunk *in the user's version*,
//!   applied to the base (`solution/`, `solution.delete`, and `expected/` + `check.absent` for the
//!   task's check);
//! - what the user rejected (`rejected/`, `rejected.delete`: the base with only the rejected
//!   hunks applied);
//! - `replay.json`: the changed lines of both sides ([`Unit`]s), which [`ReplayScore`] compares
//!   with what another agent or model proposes for the same prompt on the same base.
//!
//! A hunk's *final* decision counts (an undone accept that was then rejected is a rejection);
//! conflicts are not decisions. Each run is replayed on its own: a follow-up run's prompt
//! ("try again") replays without the session's earlier conversation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::borrow::Cow;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::task::{Check, Review, TaskSpec};

mod family;

/// One changed line (`+text` / `-text`, with its line terminator) of a file, or one whole-file
/// change (`binary`, `rename from A to B`, `old mode … new mode …`). What a replay compares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Unit {
    pub file: String,
    pub change: String,
}

/// The changed lines of one hunk as the hub shows it (`kind`, `diff` of protocol.md's Hunk).
pub fn units_of_hunk(file: &str, kind: &str, diff: &str) -> Vec<Unit> {
    let unit = |change: String| Unit {
        file: file.to_string(),
        change,
    };
    match kind {
        "binary" => vec![unit("binary".into())],
        "rename" | "mode" => vec![unit(diff.trim_end().replace('\n', " "))],
        _ => match hunkgate_patch::parse_hunks(diff) {
            Ok(hunks) => hunks
                .iter()
                .flat_map(|h| h.lines.iter())
                .filter_map(|l| match l {
                    hunkgate_patch::HunkLine::Add(t) => Some(unit(format!("+{t}"))),
                    hunkgate_patch::HunkLine::Remove(t) => Some(unit(format!("-{t}"))),
                    hunkgate_patch::HunkLine::Context(_) => None,
                })
                .collect(),
            // Not a diff the patch crate reads: its +/- lines as they are.
            Err(_) => diff
                .split_inclusive('\n')
                .filter(|l| {
                    (l.starts_with('+') && !l.starts_with("+++"))
                        || (l.starts_with('-') && !l.starts_with("---"))
                })
                .map(|l| unit(l.to_string()))
                .collect(),
        },
    }
}

/// How many units of `want` (a multiset) are also in `got`.
pub fn overlap(want: &[Unit], got: &[Unit]) -> usize {
    let mut have: HashMap<&Unit, usize> = HashMap::new();
    for u in got {
        *have.entry(u).or_default() += 1;
    }
    let mut n = 0;
    for u in want {
        if let Some(c) = have.get_mut(u).filter(|c| **c > 0) {
            *c -= 1;
            n += 1;
        }
    }
    n
}

/// `replay.json` of a replay task: what the user kept and rejected in the original run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayExpect {
    pub run_id: String,
    pub suggestion_ids: Vec<String>,
    /// Who made the original suggestion (`agent` of the log).
    pub agent: Option<String>,
    /// When the user first decided a hunk of the run (RFC 3339).
    pub ts: String,
    pub base_commit: String,
    pub hunks_accepted: usize,
    pub hunks_modified: usize,
    pub hunks_rejected: usize,
    /// Hunks decided in part (a line range accepted or rejected): their changed lines count
    /// in `kept` and `rejected` as the user decided each, their rests' included.
    #[serde(default)]
    pub hunks_partial: usize,
    /// Changed lines the user kept (modified hunks in the user's version).
    pub kept: Vec<Unit>,
    /// Changed lines of the hunks the user rejected.
    pub rejected: Vec<Unit>,
}

/// A candidate's replay of one run: how much of what the user kept it proposed, how much of what
/// the user rejected it avoided.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayScore {
    /// The original run's time (for charts over time) and agent.
    pub ts: String,
    pub original_agent: Option<String>,
    /// Changed lines the user kept, and how many of them the candidate proposed.
    pub kept: usize,
    pub kept_proposed: usize,
    /// Changed lines the user rejected, and how many of them the candidate proposed anyway.
    pub rejected: usize,
    pub rejected_proposed: usize,
    /// Every changed line the candidate proposed.
    pub proposed: usize,
}

impl ReplayScore {
    pub fn of(expect: &ReplayExpect, proposed: &[Unit]) -> ReplayScore {
        ReplayScore {
            ts: expect.ts.clone(),
            original_agent: expect.agent.clone(),
            kept: expect.kept.len(),
            kept_proposed: overlap(&expect.kept, proposed),
            rejected: expect.rejected.len(),
            rejected_proposed: overlap(&expect.rejected, proposed),
            proposed: proposed.len(),
        }
    }
}

/// The fields of a feedback line a replay needs (protocol.md, "Feedback log").
#[derive(Debug, Clone, Deserialize)]
struct Record {
    ts: String,
    suggestion_id: String,
    run_id: String,
    hunk_id: String,
    file: String,
    outcome: String,
    kind: String,
    diff: String,
    #[serde(default)]
    modified_diff: Option<String>,
    #[serde(default)]
    action: String,
    /// The range a line-range decision (`partial`) decided.
    #[serde(default)]
    lines: Option<[usize; 2]>,
    base_commit: String,
    run_commit: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
}

/// A run of the log with the final decision of each of its hunks.
#[derive(Debug, Clone)]
struct Run {
    run_id: String,
    first_ts: String,
    base_commit: String,
    /// suggestion id -> run commit.
    run_commits: BTreeMap<String, String>,
    agent: Option<String>,
    prompt: Option<String>,
    /// hunk id -> its final decision.
    decided: BTreeMap<String, Record>,
}

/// What `extract` wrote and left out.
#[derive(Debug, Default, Serialize)]
pub struct Extracted {
    pub tasks: Vec<PathBuf>,
    /// Runs not turned into tasks, and why.
    pub skipped: Vec<String>,
    /// Lines of the logs that were not feedback records.
    pub bad_lines: usize,
}

/// Read feedback logs into runs, in the order of their first decision.
fn read_runs(logs: &[PathBuf]) -> Result<(Vec<Run>, usize)> {
    let mut runs: BTreeMap<String, Run> = BTreeMap::new();
    let mut bad = 0;
    for log in logs {
        let f = std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
        for line in std::io::BufReader::new(f).lines() {
            let line = line.with_context(|| format!("reading {}", log.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            let Ok(rec) = serde_json::from_str::<Record>(&line) else {
                bad += 1;
                continue;
            };
            let run = runs.entry(rec.run_id.clone()).or_insert_with(|| Run {
                run_id: rec.run_id.clone(),
                first_ts: rec.ts.clone(),
                base_commit: rec.base_commit.clone(),
                run_commits: BTreeMap::new(),
                agent: rec.agent.clone(),
                prompt: rec.prompt.clone(),
                decided: BTreeMap::new(),
            });
            run.run_commits
                .insert(rec.suggestion_id.clone(), rec.run_commit.clone());
            if run.prompt.is_none() {
                run.prompt = rec.prompt.clone();
            }
            match rec.outcome.as_str() {
                "applied" | "modified" | "merged" | "rejected" | "partial" => {
                    run.decided.insert(rec.hunk_id.clone(), rec);
                }
                "undone" => {
                    run.decided.remove(&rec.hunk_id);
                }
                // A conflict is an attempt, not a decision.
                _ => {}
            }
        }
    }
    let mut list: Vec<Run> = runs.into_values().collect();
    list.sort_by(|a, b| a.first_ts.cmp(&b.first_ts).then(a.run_id.cmp(&b.run_id)));
    Ok((list, bad))
}

/// A tree entry: mode and blob id.
#[derive(Debug, Clone)]
struct Entry {
    mode: String,
    oid: String,
}

fn git(repo: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C")
        .arg(repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null());
    c
}

/// The files of a commit's tree (recursively), or `None` when the commit is not in `repo`.
fn tree(repo: &Path, commit: &str) -> Result<Option<BTreeMap<String, Entry>>> {
    let out = git(repo)
        .args(["ls-tree", "-r", "-z", "--full-tree", commit])
        .output()
        .with_context(|| format!("running git ls-tree in {}", repo.display()))?;
    if !out.status.success() {
        return Ok(None);
    }
    let mut map = BTreeMap::new();
    for rec in out.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rec = String::from_utf8_lossy(rec);
        let (meta, path) = rec
            .split_once('\t')
            .ok_or_else(|| anyhow!("git ls-tree: unexpected line {rec:?}"))?;
        let mut it = meta.split(' ');
        let (mode, kind, oid) = (it.next(), it.next(), it.next());
        if let (Some(mode), Some("blob"), Some(oid)) = (mode, kind, oid) {
            map.insert(
                path.to_string(),
                Entry {
                    mode: mode.to_string(),
                    oid: oid.to_string(),
                },
            );
        }
    }
    Ok(Some(map))
}

/// The contents of blobs, by id (`git cat-file --batch`).
fn blobs(repo: &Path, oids: &BTreeSet<String>) -> Result<HashMap<String, Vec<u8>>> {
    let mut child = git(repo)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running git cat-file")?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
    let list: Vec<String> = oids.iter().cloned().collect();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        for o in &list {
            writeln!(stdin, "{o}")?;
        }
        Ok(())
    });
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no stdout"))?
        .read_to_end(&mut out)?;
    writer
        .join()
        .map_err(|_| anyhow!("git cat-file writer panicked"))??;
    child.wait()?;
    let mut map = HashMap::new();
    let mut rest = &out[..];
    for oid in oids {
        let nl = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| anyhow!("git cat-file: output cut short"))?;
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        rest = &rest[nl + 1..];
        let size: usize = match header.split(' ').collect::<Vec<_>>()[..] {
            [_, "blob", size] => size.parse()?,
            _ => bail!("{}: blob {oid} is missing ({header})", repo.display()),
        };
        map.insert(oid.clone(), rest[..size].to_vec());
        rest = &rest[(size + 1).min(rest.len())..];
    }
    Ok(map)
}

/// Each touched file's content after applying `hunks` (a subset of one run's decided hunks,
/// each `(record, diff to apply)`) to the base; `None` = the file does not exist.
fn state_after<D: AsRef<str>>(
    base: &BTreeMap<String, Vec<u8>>,
    run_files: &BTreeMap<String, Vec<u8>>,
    hunks: &[(&Record, D)],
) -> Result<BTreeMap<String, Option<Vec<u8>>>> {
    let mut out: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    // file -> (its hunks, whether one deletes the file)
    let mut text: BTreeMap<&str, (Vec<hunkgate_patch::Hunk>, bool)> = BTreeMap::new();
    for (rec, diff) in hunks {
        let diff = diff.as_ref();
        match rec.kind.as_str() {
            "binary" | "symlink" => {
                out.insert(rec.file.clone(), run_files.get(&rec.file).cloned());
            }
            "rename" => {
                if let Some(from) = diff
                    .lines()
                    .find_map(|l| l.strip_prefix("rename from "))
                    .map(str::to_string)
                {
                    out.insert(rec.file.clone(), base.get(&from).cloned());
                    out.insert(from, None);
                }
            }
            "mode" => {}
            _ => {
                let parsed = hunkgate_patch::parse_hunks(diff)
                    .with_context(|| format!("hunk {}: unreadable diff", rec.hunk_id))?;
                let e = text.entry(&rec.file).or_default();
                e.0.extend(parsed);
                // A hunk decided in part leaves the file (what it kept is in the hunk).
                e.1 |= rec.kind == "delete" && rec.outcome != "partial";
            }
        }
    }
    for (file, (mut hunks, deletes)) in text {
        hunks.sort_by_key(|h| h.old_start);
        let before = match base.get(file) {
            Some(b) => String::from_utf8(b.clone())
                .map_err(|_| anyhow!("{file}: a text hunk on a file that is not UTF-8"))?,
            None => String::new(),
        };
        let after = hunkgate_patch::apply_all(&before, &hunks)
            .map_err(|e| anyhow!("{file}: the decided hunks do not apply to the base: {e}"))?;
        // A delete hunk leaves nothing: the file is gone.
        out.insert(file.to_string(), (!deletes).then(|| after.into_bytes()));
    }
    Ok(out)
}

fn write_file(path: &Path, bytes: &[u8], exec: bool) -> Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    if exec {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Write `files` (a state of the touched files) as `<dir>/` plus `<dir>.delete` for the files
/// present in the base and absent from the state. Files equal to the base are left out.
fn write_state(
    task: &Path,
    name: &str,
    base: &BTreeMap<String, Vec<u8>>,
    files: &BTreeMap<String, Option<Vec<u8>>>,
) -> Result<()> {
    let dir = task.join(name);
    std::fs::create_dir_all(&dir)?;
    let mut deletes = String::new();
    for (path, content) in files {
        match content {
            Some(c) if base.get(path) != Some(c) => write_file(&dir.join(path), c, false)?,
            None if base.contains_key(path) => {
                deletes.push_str(path);
                deletes.push('\n');
            }
            _ => {}
        }
    }
    if !deletes.is_empty() {
        std::fs::write(task.join(format!("{name}.delete")), deletes)?;
    }
    Ok(())
}

/// A task directory name from a run id (only `[A-Za-z0-9._-]`).
fn dir_name(run_id: &str) -> String {
    run_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Turn the runs of `logs` into task directories under `out` (one per run with at least one
/// decided hunk, named after the run). `repo` holds the base commits. Existing task directories
/// of the same runs are replaced.
pub fn extract(logs: &[PathBuf], repo: &Path, out: &Path) -> Result<Extracted> {
    let (runs, bad_lines) = read_runs(logs)?;
    let mut ex = Extracted {
        bad_lines,
        ..Extracted::default()
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for run in runs {
        match extract_run(&run, repo, out) {
            Ok(Some(dir)) => ex.tasks.push(dir),
            Ok(None) => ex
                .skipped
                .push(format!("run {}: no decided hunk", run.run_id)),
            Err(e) => ex.skipped.push(format!("run {}: {e:#}", run.run_id)),
        }
    }
    Ok(ex)
}

fn extract_run(run: &Run, repo: &Path, out: &Path) -> Result<Option<PathBuf>> {
    if run.decided.is_empty() {
        return Ok(None);
    }
    let Some(prompt) = run.prompt.clone() else {
        bail!("the log has no prompt for it");
    };
    let files = RunFiles::read(run, repo)?;
    let (expect, kept, rejected) = expectations(run)?;
    let kept_state = state_after(&files.base, &files.run_files, &kept)?;
    let rejected_state = state_after(&files.base, &files.run_files, &rejected)?;

    let dir = out.join(dir_name(&run.run_id));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("replacing {}", dir.display()))?;
    }
    for (path, e) in &files.base_tree {
        if e.mode == "120000" {
            // A symlink in repo/ would be followed when the runner copies the tree.
            continue;
        }
        write_file(
            &dir.join("repo").join(path),
            &files.base[path],
            e.mode == "100755",
        )?;
    }
    std::fs::create_dir_all(dir.join("repo"))?;
    write_state(&dir, "solution", &files.base, &kept_state)?;
    write_state(&dir, "rejected", &files.base, &rejected_state)?;
    let check = expected_files(&dir, &files.base, &kept_state, &rejected_state)?;
    let spec = TaskSpec {
        prompt,
        tags: vec!["replay".into()],
        timeout_secs: None,
        review: Review::AcceptAll {},
        followup: Vec::new(),
        check,
        scripted: None,
    };
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "# Replay of run {} ({}), by {}: the user kept {} hunks ({} modified) and rejected {}.\n{}",
            run.run_id,
            run.first_ts,
            run.agent.as_deref().unwrap_or("an unknown agent"),
            expect.hunks_accepted + expect.hunks_modified,
            expect.hunks_modified,
            expect.hunks_rejected,
            toml::to_string(&spec)?
        ),
    )?;
    std::fs::write(
        dir.join("replay.json"),
        serde_json::to_string_pretty(&expect)? + "\n",
    )?;
    Ok(Some(dir))
}

/// A run's files from the checkpoint store: its base tree and contents, and the run commits'
/// versions of whole-file (binary, symlink) hunks.
struct RunFiles {
    base_tree: BTreeMap<String, Entry>,
    base: BTreeMap<String, Vec<u8>>,
    run_files: BTreeMap<String, Vec<u8>>,
}

impl RunFiles {
    fn read(run: &Run, repo: &Path) -> Result<Self> {
        let base_tree = tree(repo, &run.base_commit)?.ok_or_else(|| {
            anyhow!(
                "its base commit {} is not in {}: pass --repo <state-dir>/checkpoints.git (or the \
                 repository the hub ran with --mirror-refs)",
                run.base_commit,
                repo.display()
            )
        })?;
        let mut run_entries: BTreeMap<String, Entry> = BTreeMap::new();
        for rec in run.decided.values() {
            if matches!(rec.kind.as_str(), "binary" | "symlink") {
                let commit = &run.run_commits[&rec.suggestion_id];
                let t = tree(repo, commit)?.ok_or_else(|| {
                    anyhow!("its run commit {commit} is not in {}", repo.display())
                })?;
                if let Some(e) = t.get(&rec.file) {
                    run_entries.insert(rec.file.clone(), e.clone());
                }
            }
        }
        let oids: BTreeSet<String> = base_tree
            .values()
            .chain(run_entries.values())
            .map(|e| e.oid.clone())
            .collect();
        let contents = blobs(repo, &oids)?;
        let of = |entries: &BTreeMap<String, Entry>| -> BTreeMap<String, Vec<u8>> {
            entries
                .iter()
                .map(|(p, e)| (p.clone(), contents[&e.oid].clone()))
                .collect()
        };
        Ok(RunFiles {
            base: of(&base_tree),
            run_files: of(&run_entries),
            base_tree,
        })
    }
}

/// Decided hunks, each with the diff that landed (or would have).
type Decided<'a> = Vec<(&'a Record, Cow<'a, str>)>;

/// What the user kept and rejected of a run, and the hunks (with the diff that landed) of each.
/// A hunk decided in part counts with its rests (see [`family`]).
fn expectations(run: &Run) -> Result<(ReplayExpect, Decided<'_>, Decided<'_>)> {
    let mut expect = ReplayExpect {
        run_id: run.run_id.clone(),
        suggestion_ids: run.run_commits.keys().cloned().collect(),
        agent: run.agent.clone(),
        ts: run.first_ts.clone(),
        base_commit: run.base_commit.clone(),
        ..ReplayExpect::default()
    };
    let mut kept: Decided = Vec::new();
    let mut rejected: Decided = Vec::new();
    for rec in run.decided.values() {
        if family::parent_of(&rec.hunk_id).is_some() {
            // A rest: counted with the hunk it was left by.
            continue;
        }
        match rec.outcome.as_str() {
            "applied" | "merged" => {
                expect.hunks_accepted += 1;
                expect
                    .kept
                    .extend(units_of_hunk(&rec.file, &rec.kind, &rec.diff));
                kept.push((rec, Cow::Borrowed(&rec.diff)));
            }
            "modified" => {
                expect.hunks_modified += 1;
                let d = rec.modified_diff.as_deref().unwrap_or(&rec.diff);
                expect.kept.extend(units_of_hunk(&rec.file, &rec.kind, d));
                kept.push((rec, Cow::Borrowed(d)));
            }
            "partial" => {
                expect.hunks_partial += 1;
                let fam = family::follow(rec, &run.decided)?;
                let unit = |change| Unit {
                    file: rec.file.clone(),
                    change,
                };
                expect.kept.extend(fam.kept_changes.into_iter().map(unit));
                expect
                    .rejected
                    .extend(fam.rejected_changes.into_iter().map(unit));
                if let Some(h) = fam.kept {
                    kept.push((rec, Cow::Owned(h.to_unified())));
                }
                if let Some(h) = fam.rejected {
                    rejected.push((rec, Cow::Owned(h.to_unified())));
                }
            }
            _ => {
                expect.hunks_rejected += 1;
                expect
                    .rejected
                    .extend(units_of_hunk(&rec.file, &rec.kind, &rec.diff));
                rejected.push((rec, Cow::Borrowed(&rec.diff)));
            }
        }
    }
    Ok((expect, kept, rejected))
}

/// The check of a replay task: every file the run's decisions touched is as the user left it
/// (written under `dir/expected/`, or listed as absent).
fn expected_files(
    dir: &Path,
    base: &BTreeMap<String, Vec<u8>>,
    kept_state: &BTreeMap<String, Option<Vec<u8>>>,
    rejected_state: &BTreeMap<String, Option<Vec<u8>>>,
) -> Result<Check> {
    let mut check = Check::default();
    // Every touched file is listed (both states name the same files).
    let touched: BTreeSet<&String> = kept_state.keys().chain(rejected_state.keys()).collect();
    for path in touched {
        let content = match kept_state.get(path) {
            Some(c) => c.clone(),
            None => base.get(path).cloned(),
        };
        match content {
            Some(c) => {
                write_file(&dir.join("expected").join(path), &c, false)?;
                check.expected_dir = true;
            }
            None => check.absent.push(path.clone()),
        }
    }
    Ok(check)
}

/// `replay.json` of a task directory, if it is a replay task.
pub fn load_expect(task_dir: &Path) -> Result<Option<ReplayExpect>> {
    let p = task_dir.join("replay.json");
    match std::fs::read_to_string(&p) {
        Ok(t) => Ok(Some(
            serde_json::from_str(&t).with_context(|| format!("{}: invalid", p.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(file: &str, change: &str) -> Unit {
        Unit {
            file: file.into(),
            change: change.into(),
        }
    }

    #[test]
    fn units_are_changed_lines_with_their_terminators() {
        let d = "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n";
        assert_eq!(
            units_of_hunk("f", "modify", d),
            vec![u("f", "-b\n"), u("f", "+B\n")]
        );
        let d = "@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n";
        assert_eq!(
            units_of_hunk("f", "modify", d),
            vec![u("f", "-x"), u("f", "+x\n")],
            "a final newline added is a change"
        );
        assert_eq!(
            units_of_hunk(
                "b.bin",
                "binary",
                "Binary files a/b.bin and b/b.bin differ\n"
            ),
            vec![u("b.bin", "binary")]
        );
        assert_eq!(
            units_of_hunk("n", "rename", "rename from o\nrename to n\n"),
            vec![u("n", "rename from o rename to n")]
        );
    }

    #[test]
    fn overlap_counts_a_multiset() {
        let want = [u("f", "+}\n"), u("f", "+}\n"), u("f", "+x\n")];
        assert_eq!(overlap(&want, &[u("f", "+}\n")]), 1);
        assert_eq!(
            overlap(&want, &[u("f", "+}\n"), u("f", "+}\n"), u("f", "+}\n")]),
            2
        );
        assert_eq!(overlap(&want, &[u("g", "+x\n")]), 0, "another file");
        assert_eq!(overlap(&[], &want), 0);
        let e = ReplayExpect {
            kept: want.to_vec(),
            rejected: vec![u("g", "+no\n")],
            ..ReplayExpect::default()
        };
        let s = ReplayScore::of(&e, &[u("f", "+x\n"), u("g", "+no\n"), u("h", "+y\n")]);
        assert_eq!(
            (
                s.kept,
                s.kept_proposed,
                s.rejected,
                s.rejected_proposed,
                s.proposed
            ),
            (3, 1, 1, 1, 3)
        );
    }

    pub(super) fn rec(file: &str, kind: &str, diff: &str) -> Record {
        Record {
            ts: String::new(),
            suggestion_id: "s".into(),
            run_id: "r".into(),
            hunk_id: format!("s:{file}:0"),
            file: file.into(),
            outcome: "applied".into(),
            kind: kind.into(),
            diff: diff.into(),
            modified_diff: None,
            action: "accept".into(),
            lines: None,
            base_commit: String::new(),
            run_commit: String::new(),
            agent: None,
            prompt: None,
        }
    }

    #[test]
    fn states_apply_a_subset_of_hunks_to_the_base() {
        let text: String = (1..=20).map(|i| format!("l{i}\n")).collect();
        let base = BTreeMap::from([
            ("a".to_string(), text.clone().into_bytes()),
            ("gone".to_string(), b"x\n".to_vec()),
        ]);
        let h1 = "@@ -1,4 +1,4 @@\n-l1\n+L1\n l2\n l3\n l4\n";
        let h2 = "@@ -17,4 +17,4 @@\n l17\n l18\n l19\n-l20\n+L20\n";
        let (r1, r2) = (rec("a", "modify", h1), rec("a", "modify", h2));
        let del = rec("gone", "delete", "@@ -1 +0,0 @@\n-x\n");
        let new = rec("new", "create", "@@ -0,0 +1 @@\n+n\n");
        let empty = BTreeMap::new();
        // Only the second hunk: the first line stays.
        let s = state_after(&base, &empty, &[(&r2, h2)]).unwrap();
        assert_eq!(
            s["a"].as_deref(),
            Some(text.replace("l20", "L20").as_bytes())
        );
        let s = state_after(&base, &empty, &[(&r2, h2), (&r1, h1)]).unwrap();
        assert_eq!(
            s["a"].as_deref(),
            Some(
                text.replace("l20", "L20")
                    .replace("l1\n", "L1\n")
                    .as_bytes()
            )
        );
        let s = state_after(
            &base,
            &empty,
            &[(&del, del.diff.as_str()), (&new, new.diff.as_str())],
        )
        .unwrap();
        assert_eq!(s["gone"], None);
        assert_eq!(s["new"].as_deref(), Some(&b"n\n"[..]));
    }
}

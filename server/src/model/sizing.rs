//! Hunks sized for a human (seed 000 §23, `[review] max_hunk_lines` and `max_hunk_bytes`):
//! a publish cuts a modified file's hunks over the limits into parts that each apply on their
//! own ([`hunkgate_patch::fit_hunk`]), marks what it cannot cut `oversized`, and labels the
//! hunks of a file the change rewrote `rewrite`.
//!
//! A part is an ordinary hunk: its own id, state, events, decisions (line ranges included)
//! and feedback rows. Parts start at strictly increasing old lines, which is what the offsets
//! of [`crate::decide`] (the applied hunks above a hunk, by `old_start`) need.

use hunkgate_patch::{fit_hunk, split_lines, Hunk, Limits};

use super::suggestion::CONTEXT;
use crate::protocol::HunkKind;

/// Lines a hunk shows before it is cut, unless the config says otherwise
/// (`[review] max_hunk_lines`; seed 000 §23).
pub const DEFAULT_MAX_HUNK_LINES: usize = 80;
/// Bytes a hunk shows before it is cut, unless the config says otherwise
/// (`[review] max_hunk_bytes`; seed 000 §23).
pub const DEFAULT_MAX_HUNK_BYTES: usize = 8192;

/// A hunk's kind, patch, and whether it is oversized.
pub(crate) type Sized = (HunkKind, Option<Hunk>, bool);

/// A path's hunks cut to `limits`: a modified file's line hunks into the parts
/// [`fit_hunk`] makes (each applies on its own, all of them are the hunk). A created or deleted
/// file's single hunk stays whole, marked oversized when over the limits: it is the file, which
/// is written or removed at once. Binary, rename and mode hunks have no lines to count.
pub(crate) fn sized(hunks: Vec<(HunkKind, Option<Hunk>)>, limits: Limits) -> Vec<Sized> {
    let mut out = Vec::with_capacity(hunks.len());
    for (kind, patch) in hunks {
        match (kind, patch) {
            (HunkKind::Modify, Some(h)) => out.extend(
                fit_hunk(h, CONTEXT, limits)
                    .into_iter()
                    .map(|p| (kind, Some(p.hunk), p.oversized)),
            ),
            (kind, Some(h)) => {
                let oversized = !limits.fits(&h);
                out.push((kind, Some(h), oversized));
            }
            (kind, None) => out.push((kind, None, false)),
        }
    }
    out
}

/// Whether changing `old` by `hunks` rewrites the file: it had at least [`REWRITE_MIN_LINES`]
/// lines, at least [`REWRITE_PERCENT`] % of them are removed, and lines are added in their
/// place (git's `diff -B` calls a change a rewrite from 60 % on, too). Every hunk of such a
/// file is labelled, so the reviewer knows to read it as new text rather than as edits.
pub fn is_rewrite(old: &str, hunks: &[Hunk]) -> bool {
    let lines = split_lines(old).len();
    let removed: usize = hunks.iter().map(Hunk::removed).sum();
    let added: usize = hunks.iter().map(Hunk::added).sum();
    lines >= REWRITE_MIN_LINES && added > 0 && removed * 100 >= lines * REWRITE_PERCENT
}

/// Files shorter than this are never labelled rewrites: replacing most of a three-line file
/// tells the reviewer nothing its one hunk does not.
pub const REWRITE_MIN_LINES: usize = 10;
/// The share (in %) of a file's old lines a change must remove to be a rewrite.
pub const REWRITE_PERCENT: usize = 60;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::suggestion::{build_hunks, Blobs, HunkRec};
    use hunkgate_patch::{apply_all, diff_hunks};
    use hunkgate_sandbox::store::{Changes, Entry, FlatTree, Mode, Store};

    const LIMITS: Limits = Limits {
        lines: DEFAULT_MAX_HUNK_LINES,
        bytes: DEFAULT_MAX_HUNK_BYTES,
    };

    /// A 300-line file rewritten but for every tenth line; a file created whole; a block of
    /// 200 lines inserted with no blank line; a small edit.
    fn suggestion(limits: Limits) -> (Vec<HunkRec>, String, String) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let file = |text: &str| Entry {
            mode: Mode::File,
            oid: store.write_blob(text.as_bytes()).unwrap(),
        };
        let old: String = (0..300).map(|i| format!("old line {i}\n")).collect();
        let new: String = (0..300)
            .map(|i| match i % 10 {
                0 => format!("old line {i}\n"),
                _ => format!("new line {i}\n"),
            })
            .collect();
        let short: String = (0..20).map(|i| format!("short {i}\n")).collect();
        let block: String = (0..200).map(|i| format!("block {i}\n")).collect();
        let mut base = FlatTree::new();
        let mut changes = Changes::new();
        for (path, before, after) in [
            ("big.txt", Some(old.as_str()), new.clone()),
            (
                "block.txt",
                Some(&short),
                short.replace("short 9\n", &block),
            ),
            ("gen.txt", None, block.clone()),
            (
                "small.txt",
                Some(&short),
                short.replace("short 3\n", "three\n"),
            ),
        ] {
            if let Some(before) = before {
                base.insert(path.into(), file(before));
            }
            changes.insert(path.into(), Some(file(&after)));
        }
        let blobs = Blobs::stored(&store);
        let hunks = build_hunks(blobs, "s", &base, &changes, &|_| true, limits).unwrap();
        (hunks, old, new)
    }

    /// The rewrite arrives as parts within the limits, numbered in file order, which give the
    /// new file in whatever order they land; what cannot be cut is marked; only the rewritten
    /// file's hunks are labelled rewrites.
    #[test]
    fn a_publish_cuts_big_hunks_marks_what_it_cannot_and_labels_rewrites() {
        let (hunks, old, new) = suggestion(LIMITS);
        let of =
            |file: &str| -> Vec<&HunkRec> { hunks.iter().filter(|h| h.file == file).collect() };
        let big = of("big.txt");
        assert_eq!(
            diff_hunks(&old, &new, CONTEXT).len(),
            1,
            "the diff alone makes one hunk of it"
        );
        assert!(big.len() >= 300 * 2 / 80, "{} parts", big.len());
        for (i, h) in big.iter().enumerate() {
            assert_eq!((h.id.clone(), h.index), (format!("s:big.txt:{i}"), i));
            let patch = h.patch.as_ref().unwrap();
            assert!(LIMITS.fits(patch) && !h.oversized, "{}", patch.to_unified());
            assert!(h.rewrite && h.view().rewrite && !h.view().oversized);
        }
        let mut parts: Vec<_> = big.iter().map(|h| h.patch.clone().unwrap()).collect();
        assert_eq!(apply_all(&old, &parts).unwrap(), new);
        // Backwards, each moved by the parts above it that landed (none).
        parts.reverse();
        let mut text = old.clone();
        for p in &parts {
            text = hunkgate_patch::apply_hunk(&text, p, 0).unwrap().text;
        }
        assert_eq!(text, new);

        let block = of("block.txt");
        assert_eq!(block.len(), 1);
        assert!(block[0].oversized && block[0].view().oversized && !block[0].rewrite);
        let created = of("gen.txt");
        assert_eq!(created.len(), 1);
        assert!(created[0].oversized && !created[0].rewrite);
        let small = of("small.txt");
        assert_eq!(small.len(), 1);
        assert!(!small[0].oversized && !small[0].rewrite);

        // Journaled: set only when true.
        let text = serde_json::to_string(&small[0]).unwrap();
        assert!(
            !text.contains("oversized") && !text.contains("rewrite"),
            "{text}"
        );
        let text = serde_json::to_string(block[0]).unwrap();
        assert!(text.contains("\"oversized\":true"), "{text}");
        let back: HunkRec = serde_json::from_str(&serde_json::to_string(big[0]).unwrap()).unwrap();
        assert!(back.rewrite && !back.oversized);
    }

    /// The limits are the publish's: wide enough, nothing is cut or marked.
    #[test]
    fn limits_wide_enough_cut_nothing() {
        let wide = Limits {
            lines: 10_000,
            bytes: 1 << 20,
        };
        let (hunks, _, _) = suggestion(wide);
        assert_eq!(hunks.len(), 4);
        assert!(hunks.iter().all(|h| !h.oversized));
        // And narrower than the default: more parts.
        let (narrow, _, _) = suggestion(Limits {
            lines: 20,
            bytes: 8192,
        });
        let (default, _, _) = suggestion(LIMITS);
        let count = |hs: &[HunkRec]| hs.iter().filter(|h| h.file == "big.txt").count();
        assert!(
            count(&narrow) > count(&default),
            "{} {}",
            count(&narrow),
            count(&default)
        );
    }

    #[test]
    fn a_rewrite_removes_most_of_a_file_of_ten_lines_or_more_and_adds_lines() {
        let file = |n: usize| -> String { (0..n).map(|i| format!("{i}\n")).collect() };
        let replacing = |n: usize, gone: usize| -> bool {
            let old = file(n);
            let new = (0..n)
                .map(|i| {
                    if i < gone {
                        format!("x{i}\n")
                    } else {
                        format!("{i}\n")
                    }
                })
                .collect::<String>();
            is_rewrite(&old, &diff_hunks(&old, &new, CONTEXT))
        };
        assert!(replacing(10, 6));
        assert!(!replacing(10, 5));
        assert!(replacing(100, 100));
        assert!(
            !replacing(9, 9),
            "too short to be told apart from its one hunk"
        );
        let emptied = file(20);
        assert!(!is_rewrite(&emptied, &diff_hunks(&emptied, "", CONTEXT)));
    }
}

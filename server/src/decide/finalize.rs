//! The reviewed checkpoint: the base tree with exactly the applied hunks applied, committed on
//! top of the run when a suggestion is completed with `finalize`.
//!
//! What the tree becomes is worked out apart from the store: whole-entry hunks (renames, binary
//! files, symlinks, modes) change the tree in memory, line hunks fold over a file's text; only
//! reading and writing blobs, the tree and the commit touch the store.

use std::collections::BTreeMap;

use hunkgate_patch::{apply_hunk, ApplyError, Hunk};
use hunkgate_sandbox::store::{Entry, FlatTree, Mode};
use hunkgate_sandbox::ObjectId;

use crate::error::AppError;
use crate::hub::Hub;
use crate::model::suggestion::{oid, HunkRec, Suggestion};
use crate::protocol::{HunkKind, HunkState};

impl Hub {
    /// The base tree with exactly the applied hunks applied, committed on top of the run.
    pub(crate) fn reviewed_commit(&self, s: &Suggestion) -> Result<String, AppError> {
        let ierr = |e: &dyn std::fmt::Display| reviewed_err(s, e);
        let base_id = oid(&s.base_commit).ok_or_else(|| ierr(&"bad base commit id"))?;
        let run_id = oid(&s.run_commit).ok_or_else(|| ierr(&"bad run commit id"))?;
        let mut tree: FlatTree = self.store().read_tree(base_id).map_err(|e| ierr(&e))?;
        for (file, hunks) in applied_by_file(s) {
            put_entry_hunks(&mut tree, file, &hunks);
            self.put_line_hunks(s, &mut tree, file, &hunks)?;
        }
        self.commit_reviewed(s, &tree, run_id)
    }

    /// Fold a file's applied line hunks over its text in `tree` and store the result; a file an
    /// accepted delete leaves empty goes from the tree instead.
    fn put_line_hunks(
        &self,
        s: &Suggestion,
        tree: &mut FlatTree,
        file: &str,
        hunks: &[&HunkRec],
    ) -> Result<(), AppError> {
        let ierr = |e: &dyn std::fmt::Display| reviewed_err(s, e);
        let line_hunks = line_hunks(hunks);
        if line_hunks.is_empty() {
            return Ok(());
        }
        let entry = tree.get(file).copied();
        let text = match entry {
            Some(e) => String::from_utf8(self.store().read_blob(e.oid).map_err(|e| ierr(&e))?)
                .map_err(|e| ierr(&e))?,
            None => String::new(),
        };
        let text = apply_line_hunks(text, &line_hunks).map_err(|e| ierr(&e))?;
        if deletes_file(hunks) && text.is_empty() {
            tree.remove(file);
        } else {
            let oid = self
                .store()
                .write_blob(text.as_bytes())
                .map_err(|e| ierr(&e))?;
            let mode = reviewed_mode(entry, hunks);
            tree.insert(file.to_string(), Entry { mode, oid });
        }
        Ok(())
    }

    /// Commit `tree` on top of the run, under the suggestion's `reviewed` ref; its id.
    fn commit_reviewed(
        &self,
        s: &Suggestion,
        tree: &FlatTree,
        run_id: ObjectId,
    ) -> Result<String, AppError> {
        let ierr = |e: &dyn std::fmt::Display| reviewed_err(s, e);
        let tree_id = self.store().write_tree(tree).map_err(|e| ierr(&e))?;
        let commit = self
            .store()
            .commit(
                tree_id,
                &[run_id],
                &format!("reviewed: {}\n\nsuggestion {}\n", s.description, s.id),
            )
            .map_err(|e| ierr(&e))?;
        self.store()
            .set_ref(
                &format!("refs/hunkgate/suggestions/{}/reviewed", s.id),
                commit,
            )
            .map_err(|e| ierr(&e))?;
        Ok(commit.to_string())
    }
}

/// The internal error for a reviewed commit of `s` that could not be written, saying why.
fn reviewed_err(s: &Suggestion, e: &dyn std::fmt::Display) -> AppError {
    AppError::internal(format!("writing the reviewed commit of {}: {e}", s.id))
}

/// The applied hunks of `s`, by the file they are on (a rename's is on its new name).
fn applied_by_file(s: &Suggestion) -> BTreeMap<&str, Vec<&HunkRec>> {
    let mut by_file: BTreeMap<&str, Vec<&HunkRec>> = BTreeMap::new();
    for h in s.hunks.iter().filter(|h| h.state.applied()) {
        by_file.entry(h.file.as_str()).or_default().push(h);
    }
    by_file
}

/// Apply a file's whole-entry hunks to `tree`: a rename moves the entry, a binary file or a
/// symlink takes its new side, a mode change takes the new mode. Line hunks are left alone.
fn put_entry_hunks(tree: &mut FlatTree, file: &str, hunks: &[&HunkRec]) {
    for h in hunks {
        match h.kind {
            HunkKind::Rename => {
                if let Some(from) = &h.old_path {
                    tree.remove(from);
                }
                put_side(tree, file, h.new.as_ref());
            }
            HunkKind::Binary | HunkKind::Symlink => put_side(tree, file, h.new.as_ref()),
            HunkKind::Mode => {
                if let (Some(e), Some(n)) = (tree.get_mut(file), h.new.as_ref()) {
                    e.mode = n.mode;
                }
            }
            HunkKind::Modify | HunkKind::Create | HunkKind::Delete => {}
        }
    }
}

/// What was applied of a file's line hunks (the user's version where modified), top to bottom,
/// in base line numbers. A hunk that landed through a three-way merge counts as the agent's
/// hunk: what was written is a diff against the user's file, whose edit is not the review's.
fn line_hunks<'a>(hunks: &[&'a HunkRec]) -> Vec<&'a Hunk> {
    let mut line_hunks: Vec<&Hunk> = hunks
        .iter()
        .filter(|h| {
            matches!(
                h.kind,
                HunkKind::Modify | HunkKind::Create | HunkKind::Delete
            )
        })
        .filter_map(|h| match &h.merge {
            Some(_) => h.patch.as_ref(),
            None => h.applied.as_deref().or(h.patch.as_ref()),
        })
        .collect();
    line_hunks.sort_by_key(|h| h.old_start);
    line_hunks
}

/// `text` with `hunks` (sorted top to bottom, in base line numbers) applied in turn, each moved
/// by what the ones above it added or removed. Hunks that start at the same line are a hunk and
/// the rest of its line-range decision, in that order: the rest is written against the file the
/// hunk's landed part left, so they do not move each other ([`crate::decide::lines`]).
fn apply_line_hunks(mut text: String, hunks: &[&Hunk]) -> Result<String, ApplyError> {
    let mut offset = 0isize;
    // The start of the hunks being applied, and what they add up to so far.
    let mut here: Option<(usize, isize)> = None;
    for h in hunks {
        match &mut here {
            Some((start, delta)) if *start == h.old_start => {
                text = apply_hunk(&text, h, offset)?.text;
                *delta += h.delta();
                continue;
            }
            _ => {}
        }
        offset += here.map_or(0, |(_, delta)| delta);
        text = apply_hunk(&text, h, offset)?.text;
        here = Some((h.old_start, h.delta()));
    }
    Ok(text)
}

/// Is one of a file's hunks an accepted delete (so the file goes when nothing is left of it)?
fn deletes_file(hunks: &[&HunkRec]) -> bool {
    hunks
        .iter()
        .any(|h| h.kind == HunkKind::Delete && h.state == HunkState::Accepted)
}

/// The mode of a file the reviewed tree holds: the base's, else the one the run gave it, else
/// a plain file's.
fn reviewed_mode(entry: Option<Entry>, hunks: &[&HunkRec]) -> Mode {
    entry
        .map(|e| e.mode)
        .or_else(|| hunks.iter().find_map(|h| h.new.as_ref().map(|s| s.mode)))
        .unwrap_or(Mode::File)
}

fn put_side(tree: &mut FlatTree, path: &str, side: Option<&crate::model::suggestion::Side>) {
    match side {
        Some(s) => {
            tree.insert(
                path.to_string(),
                Entry {
                    mode: s.mode,
                    oid: s.oid,
                },
            );
        }
        None => {
            tree.remove(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use hunkgate_patch::parse_hunks;
    use hunkgate_sandbox::store::blob_id;
    use serde_json::json;

    use super::*;
    use crate::model::suggestion::Side;

    fn entry(mode: Mode, bytes: &[u8]) -> Entry {
        Entry {
            mode,
            oid: blob_id(bytes),
        }
    }

    /// An applied hunk of `kind` on `file`.
    fn rec(kind: &str, file: &str) -> HunkRec {
        serde_json::from_value(json!({
            "id": format!("s:{file}:0"), "file": file, "index": 0, "kind": kind, "state": "accepted",
        }))
        .unwrap()
    }

    fn side(mode: Mode, bytes: &[u8]) -> Option<Side> {
        Some(Side {
            mode,
            oid: blob_id(bytes),
        })
    }

    #[test]
    fn whole_entry_hunks_move_swap_and_chmod_entries() {
        let mut tree = FlatTree::new();
        tree.insert("old".into(), entry(Mode::File, b"x"));
        tree.insert("run.sh".into(), entry(Mode::File, b"y"));
        tree.insert("lines".into(), entry(Mode::File, b"z"));
        let mut rename = rec("rename", "new");
        rename.old_path = Some("old".into());
        rename.new = side(Mode::File, b"x");
        put_entry_hunks(&mut tree, "new", &[&rename]);
        let mut chmod = rec("mode", "run.sh");
        chmod.new = side(Mode::Executable, b"y");
        put_entry_hunks(&mut tree, "run.sh", &[&chmod]);
        let mut bin = rec("binary", "gone.bin");
        bin.new = None;
        put_entry_hunks(&mut tree, "gone.bin", &[&bin]);
        // Line hunks are not whole-entry changes.
        put_entry_hunks(&mut tree, "lines", &[&rec("modify", "lines")]);
        let mut want = FlatTree::new();
        want.insert("new".into(), entry(Mode::File, b"x"));
        want.insert("run.sh".into(), entry(Mode::Executable, b"y"));
        want.insert("lines".into(), entry(Mode::File, b"z"));
        assert_eq!(tree, want);
    }

    #[test]
    fn line_hunks_apply_top_down_each_moved_by_those_above() {
        let hunks = parse_hunks("@@ -1 +1,2 @@\n a\n+a2\n@@ -3 +4 @@\n-c\n+C\n").unwrap();
        let mut top = rec("modify", "f");
        top.patch = Some(hunks[0].clone());
        let mut below = rec("modify", "f");
        below.patch = Some(hunks[1].clone());
        // The user's version, where modified, is what counts.
        let mut user = hunks[1].clone();
        user.lines[1] = hunkgate_patch::HunkLine::Add("user's C\n".into());
        below.applied = Some(Box::new(user));
        let binary = rec("binary", "f");
        let sorted = line_hunks(&[&below, &top, &binary]);
        assert_eq!(sorted.len(), 2);
        let text = apply_line_hunks("a\nb\nc\n".into(), &sorted).unwrap();
        assert_eq!(text, "a\na2\nb\nuser's C\n");
    }

    /// A hunk decided in part and its rest start at the same line: the rest is written against
    /// what the hunk's part left, so neither moves the other, while a hunk below is moved by
    /// both.
    #[test]
    fn a_partly_decided_hunk_and_its_rest_do_not_move_each_other() {
        let h = parse_hunks("@@ -1,3 +1,4 @@\n a\n-b\n+B\n+B2\n c\n")
            .unwrap()
            .remove(0);
        // `+B2` lands first (one line more); the rest, `-b +B`, then expects `a b B2 c`, which
        // the file holds twice: only its own start, unmoved, tells the places apart.
        let split = hunkgate_patch::split_hunk(&h, 4, 4, hunkgate_patch::Pick::Accept).unwrap();
        let mut part = rec("modify", "f");
        part.patch = Some(h);
        part.applied = split.landed.map(Box::new);
        let mut rest = rec("modify", "f");
        rest.patch = split.rest;
        let mut below = rec("modify", "f");
        below.patch = parse_hunks("@@ -9 +10 @@\n-e\n+E\n").unwrap().pop();
        let sorted = line_hunks(&[&part, &rest, &below]);
        let base = "a\nb\nc\nd\na\nb\nB2\nc\ne\n";
        let text = apply_line_hunks(base.into(), &sorted).unwrap();
        assert_eq!(text, "a\nB\nB2\nc\nd\na\nb\nB2\nc\nE\n");
    }

    #[test]
    fn a_merged_hunk_counts_as_the_agents() {
        let agent = parse_hunks("@@ -2 +2 @@\n-b\n+B\n").unwrap().remove(0);
        // What landed: the merge, against the user's file (which has their `a, mine`).
        let merged = parse_hunks("@@ -1,2 +1,2 @@\n a, mine\n-b\n+B\n")
            .unwrap()
            .remove(0);
        let mut h = rec("modify", "f");
        h.patch = Some(agent.clone());
        h.applied = Some(Box::new(merged.clone()));
        h.merge = Some(crate::protocol::HunkMerge {
            outcome: crate::protocol::MergeOutcome::Clean,
            diff: merged.to_unified(),
            merged_against: "x".into(),
        });
        assert_eq!(line_hunks(&[&h]), [&agent]);
        let text = apply_line_hunks("a\nb\n".into(), &line_hunks(&[&h])).unwrap();
        assert_eq!(text, "a\nB\n");
        // Positive control: without the merge, what was applied counts.
        h.merge = None;
        assert_eq!(line_hunks(&[&h]), [&merged]);
    }

    #[test]
    fn a_file_keeps_its_base_mode_else_the_runs() {
        let mut created = rec("create", "f");
        created.new = side(Mode::Executable, b"");
        let base = Some(entry(Mode::File, b"x"));
        assert_eq!(reviewed_mode(base, &[&created]), Mode::File);
        assert_eq!(reviewed_mode(None, &[&created]), Mode::Executable);
        assert_eq!(reviewed_mode(None, &[&rec("modify", "f")]), Mode::File);
    }

    #[test]
    fn only_an_accepted_delete_removes_the_file() {
        let mut delete = rec("delete", "f");
        assert!(deletes_file(&[&rec("modify", "f"), &delete]));
        delete.state = HunkState::Modified;
        assert!(!deletes_file(&[&delete]));
        assert!(!deletes_file(&[&rec("modify", "f")]));
    }
}

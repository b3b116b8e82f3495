//! The reviewed checkpoint: the base tree with exactly the applied hunks applied, committed on
//! top of the run when a suggestion is completed with `finalize`.

use std::collections::BTreeMap;

use hunkgate_patch::{apply_hunk, Hunk};
use hunkgate_sandbox::store::{Entry, FlatTree, Mode};

use crate::error::AppError;
use crate::hub::Hub;
use crate::model::suggestion::{oid, HunkRec, Suggestion};
use crate::protocol::{HunkKind, HunkState};

impl Hub {
    /// The base tree with exactly the applied hunks applied, committed on top of the run.
    pub(crate) fn reviewed_commit(&self, s: &Suggestion) -> Result<String, AppError> {
        let ierr = |e: &dyn std::fmt::Display| {
            AppError::internal(format!("writing the reviewed commit of {}: {e}", s.id))
        };
        let base_id = oid(&s.base_commit).ok_or_else(|| ierr(&"bad base commit id"))?;
        let run_id = oid(&s.run_commit).ok_or_else(|| ierr(&"bad run commit id"))?;
        let mut tree: FlatTree = self.store.read_tree(base_id).map_err(|e| ierr(&e))?;
        let mut by_file: BTreeMap<&str, Vec<&HunkRec>> = BTreeMap::new();
        for h in s.hunks.iter().filter(|h| h.state.applied()) {
            by_file.entry(h.file.as_str()).or_default().push(h);
        }
        for (file, hunks) in by_file {
            for h in &hunks {
                match h.kind {
                    HunkKind::Rename => {
                        if let Some(from) = &h.old_path {
                            tree.remove(from);
                        }
                        put_side(&mut tree, file, h.new.as_ref());
                    }
                    HunkKind::Binary | HunkKind::Symlink => {
                        put_side(&mut tree, file, h.new.as_ref())
                    }
                    HunkKind::Mode => {
                        if let (Some(e), Some(n)) = (tree.get_mut(file), h.new.as_ref()) {
                            e.mode = n.mode;
                        }
                    }
                    HunkKind::Modify | HunkKind::Create | HunkKind::Delete => {}
                }
            }
            let mut line_hunks: Vec<&Hunk> = hunks
                .iter()
                .filter(|h| {
                    matches!(
                        h.kind,
                        HunkKind::Modify | HunkKind::Create | HunkKind::Delete
                    )
                })
                .filter_map(|h| h.applied.as_ref().or(h.patch.as_ref()))
                .collect();
            if line_hunks.is_empty() {
                continue;
            }
            line_hunks.sort_by_key(|h| h.old_start);
            let entry = tree.get(file).copied();
            let mut text = match entry {
                Some(e) => String::from_utf8(self.store.read_blob(e.oid).map_err(|e| ierr(&e))?)
                    .map_err(|e| ierr(&e))?,
                None => String::new(),
            };
            let mut offset = 0isize;
            for h in line_hunks {
                let applied = apply_hunk(&text, h, offset).map_err(|e| ierr(&e))?;
                offset += h.delta();
                text = applied.text;
            }
            let deleted = hunks
                .iter()
                .any(|h| h.kind == HunkKind::Delete && h.state == HunkState::Accepted);
            if deleted && text.is_empty() {
                tree.remove(file);
            } else {
                let oid = self
                    .store
                    .write_blob(text.as_bytes())
                    .map_err(|e| ierr(&e))?;
                let mode = entry
                    .map(|e| e.mode)
                    .or_else(|| hunks.iter().find_map(|h| h.new.as_ref().map(|s| s.mode)))
                    .unwrap_or(Mode::File);
                tree.insert(file.to_string(), Entry { mode, oid });
            }
        }
        let tree_id = self.store.write_tree(&tree).map_err(|e| ierr(&e))?;
        let commit = self
            .store
            .commit(
                tree_id,
                &[run_id],
                &format!("reviewed: {}\n\nsuggestion {}\n", s.description, s.id),
            )
            .map_err(|e| ierr(&e))?;
        self.store
            .set_ref(
                &format!("refs/hunkgate/suggestions/{}/reviewed", s.id),
                commit,
            )
            .map_err(|e| ierr(&e))?;
        Ok(commit.to_string())
    }
}

fn put_side(tree: &mut FlatTree, path: &str, side: Option<&crate::model::suggestion::Side>) {
    match side.and_then(|s| oid(&s.oid).map(|o| (s.mode, o))) {
        Some((mode, oid)) => {
            tree.insert(path.to_string(), Entry { mode, oid });
        }
        None => {
            tree.remove(path);
        }
    }
}

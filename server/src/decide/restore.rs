//! Restore: bring back a file an accepted hunk deleted (a file deletion, or the old path of a
//! rename), for as long as its suggestion is kept.
//!
//! What a deletion removed is the hunk's `old` side: exact context means the file held exactly
//! that when the hunk landed. Its blob is in the run's base commit, which the collection keeps
//! while it keeps the suggestion ([`crate::gc`]); once the suggestion is collected there is
//! nothing left to restore, and `restore` says so.
//!
//! A restore is a decision like any other (journaled before the file is written, atomic write,
//! a feedback line `action: "restore"`, a `file.restored` event). It never overwrites: when
//! something is at the path again, it refuses with a conflict and changes nothing — the user
//! moves it away first. The hunk keeps its state: it was accepted, and that stays in the
//! record.

use crate::decide::apply::{plan_restore, read_cur, PlanError};
use crate::decide::commit::Decision;
use crate::error::AppError;
use crate::hub::{Hub, State};
use crate::model::decision::LineRec;
use crate::model::fileop::{Cur, Op};
use crate::model::suggestion::{HunkRec, Side};
use crate::protocol::{ErrorCode, Event, HunkKind};

impl Hub {
    /// Put back at `path` the last version an accepted hunk deleted there (see the module).
    pub fn restore(&self, path: &str) -> Result<serde_json::Value, AppError> {
        let path = path.trim_start_matches("./");
        if path.is_empty() {
            return Err(AppError::bad_request("restore needs a path".into()));
        }
        let mut st = self.lock()?;
        let (sid, idx, side) = last_deleted(&st, path).ok_or_else(|| {
            AppError::not_found(format!(
                "no accepted hunk of a kept suggestion deleted {path:?}: nothing to restore (a suggestion's deleted files are kept only while the suggestion is; see `hunkgate gc`)"
            ))
        })?;
        let root = self.checkout()?;
        match read_cur(&root, path) {
            Ok(Cur::Absent) => {}
            Ok(_) => {
                return Err(AppError::conflict(
                    ErrorCode::Conflict,
                    format!("{path} exists in your checkout; restoring it would overwrite it: move it away first, nothing was changed"),
                ))
            }
            Err(e) => {
                return Err(AppError::conflict(
                    ErrorCode::Conflict,
                    format!("cannot restore {path}: {e}"),
                ))
            }
        }
        let s = &st.suggestions[&sid];
        let rec = &s.hunks[idx];
        let op = match plan_restore(&root, self.store(), path, Some(&side)) {
            Ok(Some(mut op)) => {
                // A deletion's accept kept the file's permission bits (not only git's two).
                if let Op::Write { perm, .. } = &mut op.op {
                    *perm = rec.perm;
                }
                op
            }
            Ok(None) => return Err(AppError::internal("restore planned nothing")),
            Err(PlanError::Conflict(m)) => {
                return Err(AppError::conflict(
                    ErrorCode::Conflict,
                    format!("cannot restore {path}: {m}"),
                ))
            }
            Err(e) => return Err(AppError::failed("planning the restore", e)),
        };
        let hunk_id = rec.id.clone();
        let mut line = LineRec::new(s, rec, "restore", "restored");
        line.via = Some("restore".into());
        let event = Event::FileRestored {
            seq: 0,
            path: path.to_string(),
            suggestion_id: sid.clone(),
            hunk_id: hunk_id.clone(),
        };
        let mut d = Decision::new();
        d.ops(vec![op]).line(line, event);
        self.commit(&mut st, d)
            .map_err(|e| e.map_message(|m| format!("cannot restore {path}: {m}")))?;
        Ok(serde_json::json!({
            "path": path,
            "suggestion_id": sid,
            "hunk_id": hunk_id,
            "mode": side.mode.octal(),
            "oid": side.oid.to_string(),
        }))
    }
}

/// The newest kept suggestion's applied hunk that deleted `path` (a file deletion of any
/// kind, or the old path of a rename), with what the file was.
fn last_deleted(st: &State, path: &str) -> Option<(String, usize, Side)> {
    st.order.iter().rev().find_map(|sid| {
        let s = st.suggestions.get(sid)?;
        s.hunks.iter().enumerate().rev().find_map(|(i, h)| {
            let side = deleted_at(h, path)?;
            Some((sid.clone(), i, side))
        })
    })
}

/// What `h` deleted at `path`, when it is applied and deleted it.
pub(crate) fn deleted_at(h: &HunkRec, path: &str) -> Option<Side> {
    if !h.state.applied() {
        return None;
    }
    let deletes = (h.file == path && h.new.is_none())
        || (h.kind == HunkKind::Rename && h.old_path.as_deref() == Some(path));
    deletes.then(|| h.old.clone()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hunkgate_sandbox::store::Mode;
    use serde_json::json;

    fn rec(kind: &str, file: &str, state: &str) -> HunkRec {
        serde_json::from_value(json!({
            "id": format!("s:{file}:0"), "file": file, "index": 0, "kind": kind, "state": state,
            "old": {"mode": "file", "oid": "0123456789012345678901234567890123456789"},
        }))
        .unwrap()
    }

    #[test]
    fn only_an_applied_deletion_or_rename_source_is_restorable() {
        let del = rec("delete", "gone.txt", "accepted");
        assert_eq!(deleted_at(&del, "gone.txt").unwrap().mode, Mode::File);
        assert!(deleted_at(&del, "other.txt").is_none());
        // Pending or rejected: nothing was deleted.
        assert!(deleted_at(&rec("delete", "gone.txt", "pending"), "gone.txt").is_none());
        assert!(deleted_at(&rec("delete", "gone.txt", "rejected"), "gone.txt").is_none());
        let mut mv = rec("rename", "new.txt", "accepted");
        mv.new = mv.old.clone();
        mv.old_path = Some("old.txt".into());
        assert!(deleted_at(&mv, "old.txt").is_some());
        // The rename's new path was created, not deleted.
        assert!(deleted_at(&mv, "new.txt").is_none());
        // A mode change deletes nothing.
        let mut chmod = rec("mode", "run.sh", "accepted");
        chmod.new = chmod.old.clone();
        assert!(deleted_at(&chmod, "run.sh").is_none());
    }
}

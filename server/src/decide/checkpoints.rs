//! Checkpoints and rollback (design notes, seed 000 §27).
//!
//! Every suggestion is a checkpoint: its base commit is the state of the affected files before
//! the agent ran, kept in the hub's store so it can be inspected and restored long after the
//! review. The checkpoint id is the suggestion id.
//!
//! - *hard* rollback puts every affected file back to the base, discarding later edits (so it
//!   needs `confirm`); applied hunks of this and later suggestions on those files become rejected.
//! - *scoped* rollback reverse-applies only the chosen hunks with exact context; where newer edits
//!   overlap, it refuses and touches nothing.
//!
//! Both are decisions like any other: journaled before the files change, logged to the feedback
//! log, announced with `checkpoint.rollback.*` events.

use std::collections::BTreeMap;

use hunkgate_patch::Hunk;
use hunkgate_sandbox::store::{FlatTree, Mode};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::decide::apply::{plan_restore, plan_reverse, plan_reverse_lines, read_cur, PlanError};
use crate::decide::commit::Decision;
use crate::error::{AppError, Kind};
use crate::hub::{Hub, State};
use crate::model::decision::{HunkChange, HunkRef, LineRec};
use crate::model::fileop::Cur;
use crate::model::fileop::FileOp;
use crate::model::suggestion::{oid, HunkRec, Side, Suggestion};
use crate::protocol::ErrorCode;
use crate::protocol::{AppliedAction, Event, HunkKind, HunkState, RollbackMode};

#[derive(Debug, Serialize)]
pub struct AffectedFile {
    pub file_path: String,
    /// `sha256:<hex>` of the file at the checkpoint; null when it did not exist.
    pub base_hash: Option<String>,
    /// `sha256:<hex>` of the file in your checkout now; null when absent.
    pub current_hash: Option<String>,
    pub changed_since_base: bool,
    pub hunk_ids: Vec<String>,
    /// The hunks of this checkpoint that are applied now (what a scoped rollback can undo).
    pub applied_hunk_ids: Vec<String>,
    /// Why the file in your checkout cannot be read (a directory on its path became a symlink,
    /// it is a directory or a FIFO now, …); null when it can. `current_hash` is then null.
    pub unreadable: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CheckpointView {
    pub checkpoint_id: String,
    pub suggestion_id: String,
    pub run_id: String,
    pub description: String,
    pub created_at: String,
    pub base_commit: String,
    pub run_commit: String,
    pub affected_files: Vec<AffectedFile>,
}

fn sha_tag(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn store_err(e: hunkgate_sandbox::store::StoreError) -> AppError {
    AppError::failed("reading the checkpoint store", e)
}

/// Every path a suggestion touches, with the hunks touching it (a rename touches two).
fn affected(s: &Suggestion) -> BTreeMap<String, Vec<&HunkRec>> {
    let mut out: BTreeMap<String, Vec<&HunkRec>> = BTreeMap::new();
    for h in &s.hunks {
        out.entry(h.file.clone()).or_default().push(h);
        if let Some(from) = &h.old_path {
            out.entry(from.clone()).or_default().push(h);
        }
    }
    out
}

/// The hash of what is at `path` in the checkout now (None when absent), or why it cannot be
/// read: a path that cannot be read is reported on, never an internal error.
fn current(
    root: &hunkgate_sandbox::beneath::Beneath,
    path: &str,
) -> (Option<String>, Option<String>) {
    match read_cur(root, path) {
        Ok(Cur::File { bytes, .. }) => (Some(sha_tag(&bytes)), None),
        Ok(Cur::Link(t)) => (Some(sha_tag(&t)), None),
        Ok(Cur::Absent) => (None, None),
        Ok(Cur::Other(what)) => (None, Some(format!("{path} is {what} in your checkout"))),
        Err(e) => (None, Some(e.to_string())),
    }
}

fn side_of(tree: &FlatTree, path: &str) -> Option<Side> {
    Side::of(tree.get(path))
}

impl Hub {
    /// With `--mirror-refs`, copy a run commit into the user's repository under `name`. Only
    /// objects and a ref under `refs/hunkgate/` are written there — never the index, HEAD or a
    /// branch — and a failure is reported, not fatal: the hub's own store has the commit.
    pub fn mirror_ref(&self, name: &str, commit: hunkgate_sandbox::ObjectId) {
        if !self.cfg().mirror_refs {
            return;
        }
        let result =
            hunkgate_sandbox::store::Store::open_existing(&self.cfg().repo).and_then(|user| {
                self.store().copy_commit_into(&user, commit)?;
                user.set_ref(name, commit)
            });
        if let Err(e) = result {
            tracing::warn!(error = %e, refname = name, "mirroring a run ref into the repository");
        }
    }

    fn base_tree(&self, s: &Suggestion) -> Result<FlatTree, AppError> {
        let id = oid(&s.base_commit)
            .ok_or_else(|| AppError::internal("a suggestion has a corrupt base commit id"))?;
        self.store().read_tree(id).map_err(store_err)
    }

    pub fn checkpoint(&self, id: &str) -> Result<CheckpointView, AppError> {
        let st = self.lock()?;
        let sid = Self::resolve_id(&st, id)?;
        let s = st.suggestions[&sid].clone();
        drop(st);
        let base = self.base_tree(&s)?;
        let root = self.checkout()?;
        let mut files = Vec::new();
        for (path, hunks) in affected(&s) {
            let base_hash = match base.get(&path) {
                Some(e) => Some(sha_tag(&self.store().read_blob(e.oid).map_err(store_err)?)),
                None => None,
            };
            let (current_hash, unreadable) = current(&root, &path);
            files.push(AffectedFile {
                changed_since_base: unreadable.is_some() || base_hash != current_hash,
                unreadable,
                file_path: path,
                base_hash,
                current_hash,
                hunk_ids: hunks.iter().map(|h| h.id.clone()).collect(),
                applied_hunk_ids: hunks
                    .iter()
                    .filter(|h| h.state.applied())
                    .map(|h| h.id.clone())
                    .collect(),
            });
        }
        Ok(CheckpointView {
            checkpoint_id: s.id.clone(),
            suggestion_id: s.id.clone(),
            run_id: s.run_id.clone(),
            description: s.description.clone(),
            created_at: s.created_at.clone(),
            base_commit: s.base_commit.clone(),
            run_commit: s.run_commit.clone(),
            affected_files: files,
        })
    }

    /// The three versions of one file: your checkout now, the checkpoint base, the agent's.
    pub fn diff3(&self, id: &str, file_path: &str) -> Result<serde_json::Value, AppError> {
        let st = self.lock()?;
        let sid = Self::resolve_id(&st, id)?;
        let s = st.suggestions[&sid].clone();
        drop(st);
        if !affected(&s).contains_key(file_path) {
            return Err(AppError::not_found(format!(
                "checkpoint {sid} does not affect {file_path:?}; GET /checkpoints/{sid} lists its files"
            )));
        }
        let base = self.base_tree(&s)?;
        let run =
            self.store()
                .read_tree(oid(&s.run_commit).ok_or_else(|| {
                    AppError::internal("a suggestion has a corrupt run commit id")
                })?)
                .map_err(store_err)?;
        let mut binary = false;
        let mut text = |bytes: Option<Vec<u8>>| -> Option<String> {
            let text = hunkgate_patch::into_text(bytes?);
            binary |= text.is_none();
            text
        };
        let blob = |t: &FlatTree| -> Result<Option<Vec<u8>>, AppError> {
            t.get(file_path)
                .filter(|e| e.mode != Mode::Symlink)
                .map(|e| self.store().read_blob(e.oid).map_err(store_err))
                .transpose()
        };
        let base_text = text(blob(&base)?);
        let proposed = text(blob(&run)?);
        let mut unreadable = None;
        let current = match read_cur(&self.checkout()?, file_path) {
            Ok(Cur::File { bytes, .. }) => text(Some(bytes)),
            Ok(Cur::Other(what)) => {
                unreadable = Some(format!("{file_path} is {what} in your checkout"));
                None
            }
            Ok(Cur::Absent | Cur::Link(_)) => None,
            Err(e) => {
                unreadable = Some(e.to_string());
                None
            }
        };
        Ok(serde_json::json!({
            "checkpoint_id": sid,
            "file_path": file_path,
            "current": current,
            "checkpoint_base": base_text,
            "agent_proposed": proposed,
            "binary": binary,
            "unreadable": unreadable,
        }))
    }

    pub fn rollback(
        &self,
        id: &str,
        mode: RollbackMode,
        hunk_ids: &[String],
        confirm: bool,
    ) -> Result<serde_json::Value, AppError> {
        let mut st = self.lock()?;
        let sid = Self::resolve_id(&st, id)?;
        let s = &st.suggestions[&sid];
        check_rollback(s, mode, hunk_ids, confirm)?;
        self.bus().emit(Event::RollbackStarted {
            seq: 0,
            checkpoint_id: sid.clone(),
            mode,
            hunk_ids: hunk_ids.to_vec(),
        });
        let planned = match mode {
            RollbackMode::HardAll => self.plan_hard(&st, s),
            RollbackMode::ScopedSelected => self.plan_scoped(s, hunk_ids),
        };
        let (ops, changes) = match planned {
            Ok(p) => p,
            Err(e) => {
                let (message, err) = plan_refusal(e);
                self.rollback_failed(&sid, mode, message);
                return Err(err);
            }
        };
        let (d, done) = rollback_decision(&st, &sid, mode, ops, changes);
        // The events go with the decision, so each feedback line carries its event's seq.
        if let Err(e) = self.commit(&mut st, d) {
            self.rollback_failed(&sid, mode, e.to_string());
            return Err(if e.kind() == Kind::Conflict {
                e.map_message(|m| format!("rollback refused, nothing was changed: {m}"))
            } else {
                e
            });
        }
        drop(st);
        Ok(serde_json::json!({
            "checkpoint_id": sid,
            "mode": mode,
            "files": done.files,
            "hunk_ids": done.hunk_ids,
        }))
    }

    /// Announce that the rollback of checkpoint `sid` failed, and why.
    fn rollback_failed(&self, sid: &str, mode: RollbackMode, message: String) {
        self.bus().emit(Event::RollbackFailed {
            seq: 0,
            checkpoint_id: sid.to_string(),
            mode,
            message,
        });
    }

    /// Every affected file back to base; applied hunks of this and later suggestions on them
    /// become rejected.
    fn plan_hard(
        &self,
        st: &State,
        s: &Suggestion,
    ) -> Result<(Vec<FileOp>, Vec<HunkChange>), PlanError> {
        let base = self
            .base_tree(s)
            .map_err(|e| PlanError::Conflict(e.to_string()))?;
        let root = self
            .checkout()
            .map_err(|e| PlanError::Conflict(e.to_string()))?;
        let paths: Vec<String> = affected(s).into_keys().collect();
        let mut ops = Vec::new();
        for path in &paths {
            if let Some(op) =
                plan_restore(&root, self.store(), path, side_of(&base, path).as_ref())?
            {
                ops.push(op);
            }
        }
        let touches = |h: &HunkRec| {
            paths.contains(&h.file) || h.old_path.as_ref().is_some_and(|p| paths.contains(p))
        };
        // This suggestion's applied hunks, then those of later ones on the same files: one
        // delta per hunk, no copy of any suggestion.
        let mut changes = rolled_back(s, |h| h.state.applied());
        let pos = st
            .order
            .iter()
            .position(|id| *id == s.id)
            .unwrap_or(usize::MAX);
        for later_id in st.order.iter().skip(pos.saturating_add(1)) {
            if let Some(later) = st.suggestions.get(later_id) {
                changes.extend(rolled_back(later, |h| h.state.applied() && touches(h)));
            }
        }
        Ok((ops, changes))
    }

    /// Reverse-apply the chosen hunks, all or nothing.
    fn plan_scoped(
        &self,
        s: &Suggestion,
        hunk_ids: &[String],
    ) -> Result<(Vec<FileOp>, Vec<HunkChange>), PlanError> {
        let root = self
            .checkout()
            .map_err(|e| PlanError::Conflict(e.to_string()))?;
        let chosen: Vec<&HunkRec> = s
            .hunks
            .iter()
            .filter(|h| hunk_ids.contains(&h.id))
            .collect();
        let mut lines: BTreeMap<&str, Vec<(Hunk, usize, isize)>> = BTreeMap::new();
        let mut ops = Vec::new();
        for rec in &chosen {
            let offset = Self::offset_for(s, rec);
            if rec.kind == HunkKind::Modify {
                let applied = rec.applied.as_deref().or(rec.patch.as_ref()).cloned();
                let base_start = rec.patch.as_ref().map(|p| p.old_start).unwrap_or(0);
                if let Some(a) = applied {
                    lines
                        .entry(rec.file.as_str())
                        .or_default()
                        .push((a, base_start, offset));
                }
            } else {
                ops.extend(plan_reverse(&root, self.store(), rec, offset)?.ops);
            }
        }
        for (path, hunks) in lines {
            ops.push(plan_reverse_lines(&root, self.store(), path, hunks)?);
        }
        Ok((ops, rolled_back(s, |h| hunk_ids.contains(&h.id))))
    }
}

/// The deltas that turn the hunks of `s` that `pick` chooses into rejected, unapplied ones.
fn rolled_back(s: &Suggestion, pick: impl Fn(&HunkRec) -> bool) -> Vec<HunkChange> {
    s.hunks
        .iter()
        .enumerate()
        .filter(|(_, h)| pick(h))
        .map(|(i, h)| {
            let mut c = HunkChange::keep(&s.id, i, h, HunkState::Rejected);
            c.applied = None;
            c
        })
        .collect()
}

/// What a rollback changes: the files it writes and the hunks it rejects.
#[derive(Debug)]
struct RolledBack {
    files: Vec<String>,
    hunk_ids: Vec<String>,
}

/// Why a rollback cannot be planned: the message `rollback_failed` carries, and the error the
/// caller gets (a conflict says nothing was changed).
fn plan_refusal(e: PlanError) -> (String, AppError) {
    let message = match &e {
        PlanError::Conflict(m) => m.clone(),
        other => other.to_string(),
    };
    let err = match e {
        PlanError::Conflict(_) => AppError::conflict(
            ErrorCode::Conflict,
            format!("rollback refused, nothing was changed: {message}"),
        ),
        other => AppError::failed("planning the rollback", other),
    };
    (message, err)
}

/// The decision a planned rollback of checkpoint `sid` commits: its operations, each rolled-back
/// hunk as rejected (with its feedback line and `hunk_applied` event), then `rollback_completed`.
fn rollback_decision(
    st: &State,
    sid: &str,
    mode: RollbackMode,
    ops: Vec<FileOp>,
    changes: Vec<HunkChange>,
) -> (Decision, RolledBack) {
    let via = match mode {
        RollbackMode::HardAll => "hard_all",
        RollbackMode::ScopedSelected => "scoped_selected",
    };
    let done = RolledBack {
        files: ops.iter().map(|o| o.path.clone()).collect(),
        hunk_ids: changes.iter().map(|c| c.hunk_id.clone()).collect(),
    };
    let mut d = Decision::new();
    d.ops(ops);
    // A partly accepted hunk rolled back is a whole hunk again: the rest it left goes, unless
    // it was decided too.
    let rests: Vec<Option<HunkRef>> = changes
        .iter()
        .map(|c| pending_rest(&st.suggestions[&c.suggestion_id], c.index))
        .collect();
    let dropped_in = |sid: &str| {
        rests
            .iter()
            .flatten()
            .filter(|r| r.suggestion_id == sid)
            .count()
    };
    for (mut change, rest) in changes.into_iter().zip(rests.iter().cloned()) {
        let sugg = &st.suggestions[&change.suggestion_id];
        let rec = &sugg.hunks[change.index];
        if rest.is_some() {
            change.lines = None;
        }
        let mut line = LineRec::new(sugg, rec, "rollback", "rejected");
        line.via = Some(via.into());
        // Applied and rejected hunks both count as reviewed: the count stays.
        let event = Event::HunkApplied {
            seq: 0,
            suggestion_id: sugg.id.clone(),
            hunk_id: rec.id.clone(),
            action: AppliedAction::Rejected,
            file: rec.file.clone(),
            state: HunkState::Rejected,
            reviewed_count: sugg.reviewed_count(),
            hunk_count: sugg.hunks.len() - dropped_in(&sugg.id),
            lines: None,
            new_hunks: Vec::new(),
            removed_hunk_ids: rest.iter().map(|r| r.hunk_id.clone()).collect(),
        };
        d.change(change).line(line, event);
        if let Some(r) = rest {
            d.drop_hunk(r);
        }
    }
    d.event(Event::RollbackCompleted {
        seq: 0,
        checkpoint_id: sid.to_string(),
        mode,
        files: done.files.clone(),
        hunk_ids: done.hunk_ids.clone(),
    });
    (d, done)
}

/// The undecided rest of hunk `index` of `s`, when a line-range decision left one.
fn pending_rest(s: &Suggestion, index: usize) -> Option<HunkRef> {
    let rec = &s.hunks[index];
    rec.lines?;
    let at = s
        .hunks
        .iter()
        .position(|h| h.parent.as_deref() == Some(rec.id.as_str()))?;
    (!s.hunks[at].state.reviewed()).then(|| HunkRef {
        suggestion_id: s.id.clone(),
        index: at,
        hunk_id: s.hunks[at].id.clone(),
    })
}

/// Refuse a rollback that is malformed or not confirmed, before anything is announced.
fn check_rollback(
    s: &Suggestion,
    mode: RollbackMode,
    hunk_ids: &[String],
    confirm: bool,
) -> Result<(), AppError> {
    let sid = &s.id;
    match mode {
        RollbackMode::HardAll if !confirm => {
            return Err(AppError::bad_request(format!(
                "hard rollback puts {} file(s) back to the checkpoint and discards every later edit to them; send \"confirm\": true",
                affected(s).len()
            )))
        }
        RollbackMode::HardAll if !hunk_ids.is_empty() => {
            return Err(AppError::bad_request(
                "hard_all rolls back every affected file; use scoped_selected to choose hunks".into(),
            ))
        }
        RollbackMode::ScopedSelected if hunk_ids.is_empty() => {
            return Err(AppError::bad_request("scoped_selected needs hunk_ids".into()))
        }
        _ => {}
    }
    if mode == RollbackMode::ScopedSelected {
        for h in hunk_ids {
            match s.hunk(h) {
                None => {
                    return Err(AppError::not_found(format!(
                        "checkpoint {sid} has no hunk {h:?}"
                    )))
                }
                Some(rec) if !rec.state.applied() => {
                    return Err(AppError::bad_request(
                        format!(
                            "hunk {h} is {:?}, not applied; only applied hunks can be rolled back",
                            rec.state
                        )
                        .to_lowercase(),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflicting_plan_is_refused_saying_nothing_was_changed() {
        let (message, err) = plan_refusal(PlanError::Conflict("a changed since the run".into()));
        assert_eq!(message, "a changed since the run");
        assert_eq!(err.kind(), Kind::Conflict);
        assert_eq!(err.error_code(), ErrorCode::Conflict);
        assert_eq!(
            err.message(),
            "rollback refused, nothing was changed: a changed since the run"
        );
    }

    #[test]
    fn a_plan_that_failed_otherwise_is_a_failure_not_a_conflict() {
        let fs = hunkgate_sandbox::beneath::FsError::Io {
            path: "a".into(),
            source: std::io::Error::other("disk on fire"),
        };
        let (message, err) = plan_refusal(PlanError::Fs(fs));
        assert_eq!(message, "a: disk on fire");
        assert_eq!(err.kind(), Kind::Internal);
        assert_eq!(err.message(), "planning the rollback: a: disk on fire");
    }
}

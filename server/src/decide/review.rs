//! The review decisions on a suggestion's hunks: accept, reject, modify, undo, bulk decisions and
//! `complete`, each planned against the checkout and committed as one decision.

use std::collections::BTreeMap;

use hunkgate_patch::{apply_hunk, parse_file_header, parse_hunks, Hunk};
use hunkgate_sandbox::store::{Entry, FlatTree, Mode};

use crate::decide::apply::{self, plan_forward, plan_reverse, PlanError};
use crate::error::AppError;
use crate::hub::{DecisionResult, Hub, State};
use crate::model::suggestion::{oid, HunkRec, Suggestion};
use crate::protocol::{
    AppliedAction, BulkAction, CompleteAction, ErrorCode, Event, FeedbackAction, HunkKind,
    HunkState,
};

impl Hub {
    /// Line shift at `rec`'s position from this suggestion's other applied hunks in the file.
    pub(crate) fn offset_for(s: &Suggestion, rec: &HunkRec) -> isize {
        let Some(me) = rec.patch.as_ref() else {
            return 0;
        };
        s.hunks
            .iter()
            .filter(|h| h.id != rec.id && h.file == rec.file && h.state.applied())
            .filter_map(|h| {
                let applied = h.applied.as_ref().or(h.patch.as_ref())?;
                let base = h.patch.as_ref()?;
                (base.old_start < me.old_start).then(|| applied.delta())
            })
            .sum()
    }

    /// Accept, reject, modify or undo one hunk.
    pub fn decide(
        &self,
        suggestion_id: &str,
        hunk_id: &str,
        action: FeedbackAction,
        modified_diff: Option<&str>,
        comment: Option<&str>,
    ) -> Result<DecisionResult, AppError> {
        self.decide_as(suggestion_id, hunk_id, action, modified_diff, comment, None)
    }

    /// [`Hub::decide`] as one hunk of a bulk action: its feedback line carries the bulk action's
    /// `decision` id, shared by all the hunks it decided (protocol.md, "Feedback log").
    fn decide_as(
        &self,
        suggestion_id: &str,
        hunk_id: &str,
        action: FeedbackAction,
        modified_diff: Option<&str>,
        comment: Option<&str>,
        decision: Option<&str>,
    ) -> Result<DecisionResult, AppError> {
        let mut st = self.lock()?;
        let sid = Self::resolve_id(&st, suggestion_id)?;
        let s = &st.suggestions[&sid];
        if let Some(how) = &s.closed {
            return Err(AppError::Conflict {
                code: "closed",
                message: format!("suggestion {sid} was already completed ({how})"),
            });
        }
        let idx = s
            .hunks
            .iter()
            .position(|h| h.id == hunk_id)
            .or_else(|| {
                // Shorthands within the suggestion: "<file>:<index>" or the 0-based position.
                s.hunks
                    .iter()
                    .position(|h| hunk_id == format!("{}:{}", h.file, h.index))
                    .or_else(|| hunk_id.parse::<usize>().ok().filter(|i| *i < s.hunks.len()))
            })
            .ok_or_else(|| {
                AppError::NotFound(format!("suggestion {sid} has no hunk {hunk_id:?}"))
            })?;
        let rec = s.hunks[idx].clone();
        let decision = decision
            .map(str::to_string)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut after = s.clone();
        let action_word = match action {
            FeedbackAction::Accept => "accept",
            FeedbackAction::Reject => "reject",
            FeedbackAction::Modify => "modify",
            FeedbackAction::Undo => "undo",
        };

        // Validate the user's diff before anything else: bad input changes nothing.
        let modified: Option<Hunk> = match action {
            FeedbackAction::Modify => {
                let text = modified_diff
                    .filter(|d| !d.trim().is_empty())
                    .ok_or_else(|| {
                        AppError::BadRequest(
                            "action \"modify\" needs modifiedDiff (modified_diff over HTTP)".into(),
                        )
                    })?;
                Some(parse_modified(text, &rec)?)
            }
            _ => {
                if modified_diff.is_some() {
                    return Err(AppError::BadRequest(format!(
                        "modifiedDiff is only allowed with action \"modify\", not {action_word:?}"
                    )));
                }
                None
            }
        };

        let (new_state, plan, applied_action) = match action {
            FeedbackAction::Accept | FeedbackAction::Modify => {
                if rec.state.reviewed() {
                    return Err(AppError::Conflict {
                        code: "already_decided",
                        message: format!(
                            "hunk {} is already {:?}; undo it first to decide again",
                            rec.id, rec.state
                        )
                        .to_lowercase(),
                    });
                }
                let hunk = modified.as_ref().or(rec.patch.as_ref());
                let offset = Self::offset_for(s, &rec);
                let root = self.checkout()?;
                match plan_forward(&root, &self.store, &rec, hunk, offset, modified.is_some()) {
                    Ok(plan) => {
                        let state = if modified.is_some() {
                            HunkState::Modified
                        } else {
                            HunkState::Accepted
                        };
                        let act = if modified.is_some() {
                            AppliedAction::Modified
                        } else {
                            AppliedAction::Accepted
                        };
                        (state, plan, act)
                    }
                    Err(PlanError::Conflict(msg)) => {
                        return self.record_conflict(
                            &mut st,
                            &sid,
                            idx,
                            &decision,
                            action_word,
                            comment,
                            modified_diff,
                            msg,
                        );
                    }
                    Err(e) => return Err(AppError::Internal(e.to_string())),
                }
            }
            FeedbackAction::Reject | FeedbackAction::Undo => {
                let target = if action == FeedbackAction::Reject {
                    HunkState::Rejected
                } else {
                    HunkState::Pending
                };
                if rec.state == target || (action == FeedbackAction::Undo && !rec.state.reviewed())
                {
                    return Err(AppError::Conflict {
                        code: "already_decided",
                        message: format!(
                            "hunk {} is {:?}; nothing to {action_word}",
                            rec.id, rec.state
                        )
                        .to_lowercase(),
                    });
                }
                if rec.state.applied() {
                    let offset = Self::offset_for(s, &rec);
                    let root = self.checkout()?;
                    match plan_reverse(&root, &self.store, &rec, offset) {
                        Ok(plan) => (
                            target,
                            plan,
                            if target == HunkState::Rejected {
                                AppliedAction::Rejected
                            } else {
                                AppliedAction::Undone
                            },
                        ),
                        Err(PlanError::Conflict(msg)) => {
                            return Err(AppError::Conflict {
                                code: "conflict",
                                message: format!("cannot undo hunk {}: {msg}", rec.id),
                            })
                        }
                        Err(e) => return Err(AppError::Internal(e.to_string())),
                    }
                } else {
                    let act = if target == HunkState::Rejected {
                        AppliedAction::Rejected
                    } else {
                        AppliedAction::Undone
                    };
                    (target, apply::Plan::default(), act)
                }
            }
        };

        {
            let h = &mut after.hunks[idx];
            h.state = new_state;
            h.conflict = None;
            if comment.is_some() {
                h.comment = comment.map(str::to_string);
            }
            h.applied = if new_state.applied() {
                plan.applied.clone()
            } else {
                None
            };
            if new_state.applied() && plan.perm.is_some() {
                h.perm = plan.perm;
            }
        }
        let outcome = match applied_action {
            AppliedAction::Accepted => "applied",
            AppliedAction::Modified => "modified",
            AppliedAction::Rejected => "rejected",
            AppliedAction::Undone => "undone",
        };
        let mut fb = Self::feedback_record(&after, &rec, &decision, action_word, outcome);
        fb.comment = comment.map(str::to_string);
        fb.modified_diff = modified.as_ref().map(|h| h.to_unified());
        let events = vec![
            Event::HunkApplied {
                seq: 0,
                suggestion_id: sid.clone(),
                hunk_id: rec.id.clone(),
                action: applied_action,
                file: rec.file.clone(),
                state: new_state,
                reviewed_count: after.reviewed_count(),
                hunk_count: after.hunks.len(),
            },
            Self::status_event(&after),
        ];
        let hunk = after.hunks[idx].view();
        let remaining = after.hunks.len() - after.reviewed_count();
        let applied = !plan.ops.is_empty();
        let forward = matches!(action, FeedbackAction::Accept | FeedbackAction::Modify);
        match self.commit_decision(&mut st, after, Vec::new(), plan.ops, vec![fb], events) {
            Ok(()) => {}
            // The file changed between the plan and the write: a conflict like any other.
            Err(AppError::Conflict {
                code: "conflict",
                message,
            }) if forward => {
                return self.record_conflict(
                    &mut st,
                    &sid,
                    idx,
                    &decision,
                    action_word,
                    comment,
                    modified_diff,
                    message,
                );
            }
            Err(AppError::Conflict {
                code: "conflict",
                message,
            }) => {
                return Err(AppError::Conflict {
                    code: "conflict",
                    message: format!("cannot {action_word} hunk {}: {message}", rec.id),
                })
            }
            Err(e) => return Err(e),
        }
        Ok(DecisionResult {
            applied,
            remaining_hunks: remaining,
            hunk,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn record_conflict(
        &self,
        st: &mut State,
        sid: &str,
        idx: usize,
        decision: &str,
        action_word: &str,
        comment: Option<&str>,
        modified_diff: Option<&str>,
        msg: String,
    ) -> Result<DecisionResult, AppError> {
        let mut after = st.suggestions[sid].clone();
        let rec = after.hunks[idx].clone();
        after.hunks[idx].state = HunkState::Conflict;
        after.hunks[idx].conflict = Some(msg.clone());
        let mut fb = Self::feedback_record(&after, &rec, decision, action_word, "conflict");
        fb.comment = comment.map(str::to_string);
        fb.modified_diff = modified_diff.map(str::to_string);
        fb.error = Some(msg.clone());
        let events = vec![Event::Error {
            seq: 0,
            code: ErrorCode::ApplyFailed,
            message: msg.clone(),
            suggestion_id: Some(sid.to_string()),
            hunk_id: Some(rec.id.clone()),
            run_id: Some(after.run_id.clone()),
        }];
        self.commit_decision(st, after, Vec::new(), Vec::new(), vec![fb], events)?;
        Err(AppError::Conflict {
            code: "conflict",
            message: msg,
        })
    }

    /// Accept or reject every pending (or conflicting) hunk, optionally of one file.
    pub fn decide_all(
        &self,
        suggestion_id: &str,
        action: BulkAction,
        file: Option<&str>,
        comment: Option<&str>,
    ) -> Result<serde_json::Value, AppError> {
        let (sid, ids) = {
            let st = self.lock()?;
            let sid = Self::resolve_id(&st, suggestion_id)?;
            let s = &st.suggestions[&sid];
            if let Some(how) = &s.closed {
                return Err(AppError::Conflict {
                    code: "closed",
                    message: format!("suggestion {sid} was already completed ({how})"),
                });
            }
            if let Some(f) = file {
                if !s.hunks.iter().any(|h| h.file == f) {
                    return Err(AppError::NotFound(format!(
                        "suggestion {sid} has no hunks in {f}"
                    )));
                }
            }
            let ids: Vec<String> = s
                .hunks
                .iter()
                .filter(|h| !h.state.reviewed() && file.is_none_or(|f| h.file == f))
                .map(|h| h.id.clone())
                .collect();
            (sid, ids)
        };
        let fa = match action {
            BulkAction::Accept => FeedbackAction::Accept,
            BulkAction::Reject => FeedbackAction::Reject,
        };
        let mut done = Vec::new();
        let mut failed = Vec::new();
        let decision = uuid::Uuid::new_v4().to_string();
        for id in ids {
            match self.decide_as(&sid, &id, fa, None, comment, Some(&decision)) {
                Ok(r) => done.push(serde_json::json!({"hunk_id": id, "state": r.hunk.state})),
                Err(e) => failed.push(serde_json::json!({"hunk_id": id, "error": e.to_string()})),
            }
        }
        let remaining = {
            let st = self.lock()?;
            let s = &st.suggestions[&sid];
            s.hunks.len() - s.reviewed_count()
        };
        Ok(serde_json::json!({
            "suggestion_id": sid,
            "decided": done,
            "failed": failed,
            "remaining_hunks": remaining,
        }))
    }

    /// Close a suggestion: pending hunks are rejected; `finalize` records the reviewed result as
    /// a checkpoint commit.
    pub fn complete(
        &self,
        suggestion_id: &str,
        action: CompleteAction,
    ) -> Result<serde_json::Value, AppError> {
        let mut st = self.lock()?;
        let sid = Self::resolve_id(&st, suggestion_id)?;
        let s = &st.suggestions[&sid];
        if let Some(how) = &s.closed {
            return Err(AppError::Conflict {
                code: "closed",
                message: format!("suggestion {sid} was already completed ({how})"),
            });
        }
        let decision = uuid::Uuid::new_v4().to_string();
        let via = match action {
            CompleteAction::Finalize => "finalize",
            CompleteAction::Discard => "discard",
        };
        let mut after = s.clone();
        let mut feedback = Vec::new();
        let mut events = Vec::new();
        for i in 0..after.hunks.len() {
            if after.hunks[i].state.reviewed() {
                continue;
            }
            after.hunks[i].state = HunkState::Rejected;
            let rec = after.hunks[i].clone();
            let mut fb = Self::feedback_record(&after, &rec, &decision, "reject", "rejected");
            fb.via = Some(via.into());
            feedback.push(fb);
            events.push(Event::HunkApplied {
                seq: 0,
                suggestion_id: sid.clone(),
                hunk_id: rec.id.clone(),
                action: AppliedAction::Rejected,
                file: rec.file.clone(),
                state: HunkState::Rejected,
                reviewed_count: after.reviewed_count(),
                hunk_count: after.hunks.len(),
            });
        }
        after.closed = Some(via.into());
        if action == CompleteAction::Finalize {
            match self.reviewed_commit(&after) {
                Ok(c) => {
                    after.reviewed_commit = Some(c.clone());
                }
                Err(e) => {
                    tracing::warn!(error = %e, suggestion = %sid, "recording the reviewed checkpoint")
                }
            }
        }
        events.push(Event::Completed {
            seq: 0,
            suggestion_id: sid.clone(),
            action,
            reviewed_commit: after.reviewed_commit.clone(),
        });
        let reviewed_commit = after.reviewed_commit.clone();
        let applied = after.hunks.iter().filter(|h| h.state.applied()).count();
        let total = after.hunks.len();
        self.commit_decision(&mut st, after, Vec::new(), Vec::new(), feedback, events)?;
        Ok(serde_json::json!({
            "suggestion_id": sid,
            "action": via,
            "applied_hunks": applied,
            "hunk_count": total,
            "reviewed_commit": reviewed_commit,
        }))
    }

    /// The base tree with exactly the applied hunks applied, committed on top of the run.
    fn reviewed_commit(&self, s: &Suggestion) -> Result<String, AppError> {
        let ierr = |e: &dyn std::fmt::Display| AppError::Internal(e.to_string());
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

/// Parse the user's edited diff for one hunk: a single hunk, optionally with file headers that
/// must name the hunk's own file.
fn parse_modified(text: &str, rec: &HunkRec) -> Result<Hunk, AppError> {
    if !matches!(
        rec.kind,
        HunkKind::Modify | HunkKind::Create | HunkKind::Delete
    ) {
        return Err(AppError::BadRequest(
            format!(
                "hunk {} is a {:?} change; it can be accepted or rejected, not modified",
                rec.id, rec.kind
            )
            .to_lowercase(),
        ));
    }
    let (old, new) = parse_file_header(text);
    for p in [old, new].into_iter().flatten() {
        if p != rec.file {
            return Err(AppError::BadRequest(format!(
                "modifiedDiff names file {p:?} but hunk {} is in {:?}",
                rec.id, rec.file
            )));
        }
    }
    let mut hunks =
        parse_hunks(text).map_err(|e| AppError::BadRequest(format!("modifiedDiff: {e}")))?;
    if hunks.len() != 1 {
        return Err(AppError::BadRequest(format!(
            "modifiedDiff must hold exactly one hunk, found {}",
            hunks.len()
        )));
    }
    Ok(hunks.remove(0))
}

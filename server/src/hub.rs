//! The hub's state and every decision on it.
//!
//! One lock (`state`) serializes decisions, so two clients accepting hunks of the same file can
//! never interleave their writes. Decisions do blocking file I/O and fsyncs, so callers run them
//! on the blocking pool ([`Hub::blocking`]).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use hunkgate_patch::{apply_hunk, parse_file_header, parse_hunks, Hunk};
use hunkgate_sandbox::beneath::Beneath;
use hunkgate_sandbox::store::{Entry, FlatTree, Mode, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::apply::{
    self, execute, op_state, plan_forward, plan_reverse, ExecError, OpState, PlanError,
};
use crate::config::ServeConfig;
use crate::error::AppError;
use crate::events::Bus;
use crate::feedback::{FeedbackLog, FeedbackRecord};
use crate::journal::{Journal, Prepared, Record};
use crate::protocol::{
    AppliedAction, BulkAction, CompleteAction, ErrorCode, Event, FeedbackAction, HunkKind,
    HunkState, SuggestionSummary, SuggestionView,
};
use crate::review::{oid, HunkRec, Suggestion};
use crate::runs::{RunRec, Runs};

pub struct State {
    pub suggestions: BTreeMap<String, Suggestion>,
    /// Creation order, for listing.
    pub order: Vec<String>,
    pub runs: BTreeMap<String, RunRec>,
    pub sessions: crate::sessions::Sessions,
}

pub struct Hub {
    pub cfg: ServeConfig,
    pub store: Store,
    pub bus: Bus,
    pub journal: Arc<Mutex<Journal>>,
    pub feedback: Mutex<FeedbackLog>,
    pub state: Mutex<State>,
    pub reviewer_token: String,
    pub epoch: String,
    pub ws_clients: AtomicUsize,
    pub runs: Runs,
    pub tasks: TaskTracker,
    pub shutdown: CancellationToken,
    /// Decisions that stand in the checkout but whose feedback lines and `commit` could not be
    /// written yet (decision id, lines): written before the next decision.
    pub unfinished: Mutex<Vec<(String, Vec<FeedbackRecord>)>>,
}

pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The outcome of one decision, as answered to the client.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DecisionResult {
    pub applied: bool,
    pub remaining_hunks: usize,
    pub hunk: crate::protocol::HunkView,
}

impl Hub {
    pub fn lock(&self) -> Result<MutexGuard<'_, State>, AppError> {
        self.state
            .lock()
            .map_err(|_| AppError::Internal("state lock poisoned".into()))
    }

    pub fn journal_append(&self, rec: &Record) -> Result<(), AppError> {
        self.journal
            .lock()
            .map_err(|_| AppError::Internal("journal lock poisoned".into()))?
            .append(rec)
            .map_err(|e| AppError::Internal(e.to_string()))
    }

    /// Run blocking work (file I/O, fsync, gix) off the async workers.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Hub) -> Result<T, AppError> + Send + 'static,
    ) -> Result<T, AppError> {
        let hub = self.clone();
        tokio::task::spawn_blocking(move || f(&hub))
            .await
            .map_err(|e| AppError::Internal(format!("worker failed: {e}")))?
    }

    pub fn checkout(&self) -> Result<Beneath, AppError> {
        Beneath::open(&self.cfg.repo).map_err(|e| AppError::Internal(e.to_string()))
    }

    pub fn list(&self, all: bool) -> Result<Vec<SuggestionSummary>, AppError> {
        let st = self.lock()?;
        Ok(st
            .order
            .iter()
            .filter_map(|id| st.suggestions.get(id))
            .filter(|s| all || s.closed.is_none())
            .map(|s| SuggestionSummary::from(&s.view()))
            .collect())
    }

    /// Find a suggestion by id or unique id prefix (the CLI's short ids).
    pub fn resolve_id(st: &State, id: &str) -> Result<String, AppError> {
        if st.suggestions.contains_key(id) {
            return Ok(id.to_string());
        }
        let matches: Vec<&String> = st
            .suggestions
            .keys()
            .filter(|k| k.starts_with(id))
            .collect();
        match matches.as_slice() {
            [one] if !id.is_empty() => Ok((*one).clone()),
            [] | [_] => Err(AppError::NotFound(format!(
                "no suggestion {id:?}; `hunkgate list` shows them"
            ))),
            _ => Err(AppError::BadRequest(format!(
                "{id:?} matches {} suggestions; give more of the id",
                matches.len()
            ))),
        }
    }

    pub fn get(&self, id: &str) -> Result<SuggestionView, AppError> {
        let st = self.lock()?;
        let id = Self::resolve_id(&st, id)?;
        Ok(st.suggestions[&id].view())
    }

    /// Add a new suggestion (durably) and announce it.
    pub fn add_suggestion(&self, s: Suggestion) -> Result<SuggestionView, AppError> {
        let mut st = self.lock()?;
        self.journal_append(&Record::Suggestion(Box::new(s.clone())))?;
        let view = s.view();
        st.order.push(s.id.clone());
        st.suggestions.insert(s.id.clone(), s);
        drop(st);
        self.bus.emit(Event::Ready {
            seq: 0,
            suggestion: Box::new(view.clone()),
        });
        self.bus.emit(Event::CheckpointCreated {
            seq: 0,
            checkpoint_id: view.id.clone(),
            suggestion_id: view.id.clone(),
            run_id: view.run_id.clone(),
            affected_files: view.files.clone(),
        });
        Ok(view)
    }

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

    pub(crate) fn feedback_record(
        s: &Suggestion,
        rec: &HunkRec,
        decision: &str,
        action: &str,
        outcome: &str,
    ) -> FeedbackRecord {
        FeedbackRecord {
            ts: now(),
            seq: 0,
            decision_id: decision.to_string(),
            suggestion_id: s.id.clone(),
            run_id: s.run_id.clone(),
            hunk_id: rec.id.clone(),
            file: rec.file.clone(),
            action: action.to_string(),
            outcome: outcome.to_string(),
            via: None,
            comment: None,
            kind: serde_json::to_value(rec.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            diff: rec.diff_text(),
            modified_diff: None,
            error: None,
            base_commit: s.base_commit.clone(),
            run_commit: s.run_commit.clone(),
            agent: s.agent.clone(),
            prompt: s.prompt.clone(),
        }
    }

    /// Durably commit a decision: journal `prepare`, change files, log feedback and journal
    /// `commit` (fsynced), then announce. All of it holds, or none of it does:
    /// - a `prepare` that cannot be written changes nothing;
    /// - a file operation that fails (or finds its file changed since the plan) takes back the
    ///   ones done before it;
    /// - when the feedback line or the `commit` cannot be written once the checkout is written
    ///   (a full disk, an fsync error), the files are put back from the prepare record and the
    ///   decision is answered with an error. A hunk never shows pending while its change is in
    ///   the file, so a retry never applies it twice.
    pub(crate) fn commit_decision(
        &self,
        st: &mut State,
        after: Suggestion,
        also: Vec<Suggestion>,
        ops: Vec<apply::FileOp>,
        feedback: Vec<FeedbackRecord>,
        events: Vec<Event>,
    ) -> Result<(), AppError> {
        self.flush_unfinished()?;
        let decision = feedback
            .first()
            .map(|f| f.decision_id.clone())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let record = Record::Prepare(Box::new(Prepared {
            decision: decision.clone(),
            ops,
            after,
            also,
            feedback,
        }));
        self.journal_append(&record).map_err(|e| {
            AppError::Internal(format!("recording the decision: {e}; nothing was changed"))
        })?;
        let Record::Prepare(prepared) = record else {
            return Err(AppError::Internal("journal record mix-up".into()));
        };
        let Prepared {
            ops,
            after,
            also,
            mut feedback,
            ..
        } = *prepared;

        test_hooks::pause("before-write");
        let root = if ops.is_empty() {
            None
        } else {
            match self.checkout() {
                Ok(r) => Some(r),
                Err(e) => {
                    self.abort(&decision);
                    return Err(e);
                }
            }
        };
        if let Some(root) = &root {
            match execute(root, &self.store, &ops) {
                Ok(()) => {}
                Err(ExecError::Undone(e)) => {
                    self.abort(&decision);
                    return Err(match *e {
                        PlanError::Conflict(message) => AppError::Conflict {
                            code: "conflict",
                            message,
                        },
                        other => AppError::Internal(format!(
                            "writing your checkout failed, so nothing was changed: {other}"
                        )),
                    });
                }
                Err(e @ ExecError::Stuck { .. }) => {
                    let files: Vec<&str> = ops.iter().map(|o| o.path.as_str()).collect();
                    return Err(AppError::Internal(format!(
                        "writing your checkout failed half way: {e}; check {}",
                        files.join(", ")
                    )));
                }
            }
        }

        test_hooks::pause("before-commit");
        let committed = self.bus.emit_durably(events, |seqs| {
            self.log_and_commit(&decision, &mut feedback, seqs)
        });
        let Err((e, events)) = committed else {
            Self::adopt(st, after, also);
            return Ok(());
        };
        let undone = match &root {
            Some(root) => apply::undo(root, &self.store, &ops),
            None => Ok(()),
        };
        match undone {
            Ok(()) => {
                self.abort(&decision);
                Err(AppError::Internal(format!(
                    "{e}; the decision was taken back, nothing was changed"
                )))
            }
            Err(u) => {
                // The checkout keeps the change and it cannot be taken back (the file changed
                // again meanwhile): the decision stands. Its feedback line and commit are written
                // before the next decision, or from the prepare record on the next start.
                Self::adopt(st, after, also);
                let seqs: Vec<u64> = events.into_iter().map(|ev| self.bus.emit(ev)).collect();
                for (i, f) in feedback.iter_mut().enumerate() {
                    f.seq = seqs.get(i).or(seqs.last()).copied().unwrap_or(0);
                }
                if let Ok(mut q) = self.unfinished.lock() {
                    q.push((decision, feedback));
                }
                Err(AppError::Internal(format!(
                    "{e}; the change is in your checkout and stays (taking it back failed: {u}); it is recorded once the state directory can be written again"
                )))
            }
        }
    }

    fn adopt(st: &mut State, after: Suggestion, also: Vec<Suggestion>) {
        for s in also {
            st.suggestions.insert(s.id.clone(), s);
        }
        st.suggestions.insert(after.id.clone(), after);
    }

    /// Best effort: a missing `abort` is harmless, since on the next start the files show the
    /// decision was not carried out, and a later `prepare` supersedes it.
    fn abort(&self, decision: &str) {
        if let Err(e) = self.journal_append(&Record::Abort {
            decision: decision.to_string(),
        }) {
            tracing::warn!(error = %e, decision, "journaling an abort");
        }
    }

    /// Write a decision's feedback lines (each with the seq of the event announcing it: events
    /// are built in the same order as the lines, extra events come after) and its `commit`.
    /// If the commit cannot be written the lines are taken back out of the log.
    fn log_and_commit(
        &self,
        decision: &str,
        feedback: &mut [FeedbackRecord],
        seqs: &[u64],
    ) -> Result<(), AppError> {
        for (i, f) in feedback.iter_mut().enumerate() {
            f.seq = seqs.get(i).or(seqs.last()).copied().unwrap_or(0);
        }
        let mut log = self
            .feedback
            .lock()
            .map_err(|_| AppError::Internal("feedback lock poisoned".into()))?;
        let mark = log
            .append(feedback)
            .map_err(|e| AppError::Internal(format!("writing the feedback log: {e}")))?;
        if let Err(e) = self.journal_append(&Record::Commit {
            decision: decision.to_string(),
        }) {
            if let Err(t) = log.truncate_to(mark) {
                tracing::error!(error = %t, "taking an uncommitted decision out of the feedback log");
            }
            return Err(AppError::Internal(format!("recording the decision: {e}")));
        }
        Ok(())
    }

    /// Record decisions that stand in the checkout but whose feedback lines and commit could not
    /// be written, before anything else is decided.
    fn flush_unfinished(&self) -> Result<(), AppError> {
        let mut q = self
            .unfinished
            .lock()
            .map_err(|_| AppError::Internal("lock poisoned".into()))?;
        while let Some((decision, feedback)) = q.first_mut() {
            let seqs: Vec<u64> = feedback.iter().map(|f| f.seq).collect();
            self.log_and_commit(decision, feedback, &seqs).map_err(|e| {
                AppError::Internal(format!(
                    "an earlier decision is not recorded yet ({e}); nothing was changed: free space in the state directory and try again"
                ))
            })?;
            q.remove(0);
        }
        Ok(())
    }

    /// The event announcing a decision that crash recovery finished (its feedback line carries
    /// this event's seq).
    pub(crate) fn recovered_event(s: &Suggestion, f: &FeedbackRecord) -> Event {
        let action = match f.outcome.as_str() {
            "applied" => AppliedAction::Accepted,
            "modified" => AppliedAction::Modified,
            "undone" => AppliedAction::Undone,
            "conflict" => {
                return Event::Error {
                    seq: 0,
                    code: ErrorCode::ApplyFailed,
                    message: f.error.clone().unwrap_or_default(),
                    suggestion_id: Some(s.id.clone()),
                    hunk_id: Some(f.hunk_id.clone()),
                    run_id: Some(s.run_id.clone()),
                }
            }
            _ => AppliedAction::Rejected,
        };
        Event::HunkApplied {
            seq: 0,
            suggestion_id: s.id.clone(),
            hunk_id: f.hunk_id.clone(),
            action,
            file: f.file.clone(),
            state: s
                .hunk(&f.hunk_id)
                .map(|h| h.state)
                .unwrap_or(HunkState::Pending),
            reviewed_count: s.reviewed_count(),
            hunk_count: s.hunks.len(),
        }
    }

    fn status_event(s: &Suggestion) -> Event {
        let reviewed = s.reviewed_count();
        let total = s.hunks.len();
        let applied = s.hunks.iter().filter(|h| h.state.applied()).count();
        Event::Status {
            seq: 0,
            suggestion_id: Some(s.id.clone()),
            run_id: Some(s.run_id.clone()),
            status: if reviewed == total {
                "applied"
            } else {
                "partial"
            }
            .into(),
            message: format!("{reviewed}/{total} hunks reviewed ({applied} applied)"),
        }
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

/// Test seams, in debug builds only: with `HUNKGATE_TEST_PAUSE_DIR=<dir>` set, a decision that
/// reaches a named point while `<dir>/<point>.pause` exists creates `<dir>/<point>.reached` and
/// waits (at most a minute) until the `.pause` file is gone, so a test can bring about a real
/// fault (fill a disk, make a file immutable, edit a file) at exactly that moment. Points:
/// `before-write` (after the `prepare` is fsynced, before the checkout is written) and
/// `before-commit` (after the checkout is written, before the feedback line and `commit`).
pub mod test_hooks {
    #[cfg(debug_assertions)]
    pub fn pause(point: &str) {
        let Some(dir) = std::env::var_os("HUNKGATE_TEST_PAUSE_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let gate = dir.join(format!("{point}.pause"));
        if !gate.exists() {
            return;
        }
        let _ = std::fs::write(dir.join(format!("{point}.reached")), b"");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while gate.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[cfg(not(debug_assertions))]
    #[inline(always)]
    pub fn pause(_point: &str) {}
}

fn put_side(tree: &mut FlatTree, path: &str, side: Option<&crate::review::Side>) {
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

/// Finish or drop decisions that were prepared but not committed when the hub died.
///
/// Returns the feedback lines still to log, each with the event that announces it (the caller
/// gives the line that event's seq).
pub fn recover(
    root: &Beneath,
    store: &Store,
    pending: Vec<Prepared>,
    feedback_path: &std::path::Path,
    journal: &mut Vec<Record>,
    suggestions: &mut BTreeMap<String, Suggestion>,
) -> Result<Vec<(FeedbackRecord, Event)>, String> {
    let logged = FeedbackLog::logged_lines(feedback_path).map_err(|e| e.to_string())?;
    let is_logged =
        |f: &FeedbackRecord| logged.contains(&(f.decision_id.clone(), f.hunk_id.clone()));
    let mut to_log = Vec::new();
    for p in pending {
        if p.ops.is_empty() {
            // Nothing in the checkout tells whether it happened; the feedback log does: its
            // lines are written right before the commit, and taken back if that fails.
            if p.feedback.is_empty() || !p.feedback.iter().all(is_logged) {
                tracing::info!(decision = %p.decision, "dropping an unfinished decision (it changed no file and was not logged)");
                continue;
            }
        }
        let states: Result<Vec<OpState>, _> = p.ops.iter().map(|op| op_state(root, op)).collect();
        let states = states.map_err(|e| e.to_string())?;
        if states.contains(&OpState::Neither) {
            tracing::warn!(decision = %p.decision, "a file changed since an unfinished decision; leaving it undone");
            continue;
        }
        let all_before = !states.is_empty() && states.iter().all(|s| *s == OpState::Before);
        if all_before {
            // Nothing was written and the client never heard back: drop it.
            tracing::info!(decision = %p.decision, "dropping an unfinished decision (no file was written)");
            continue;
        }
        // Some or all writes happened: finish the rest, so the decision holds in full.
        for (op, st) in p.ops.iter().zip(&states) {
            if *st == OpState::Before {
                execute(root, store, std::slice::from_ref(op)).map_err(|e| e.to_string())?;
            }
        }
        // Per line: the hunks of a bulk action share a decision id but are journaled one by one.
        for f in p.feedback.iter().filter(|f| !is_logged(f)) {
            let s = p
                .also
                .iter()
                .find(|s| s.id == f.suggestion_id)
                .unwrap_or(&p.after);
            to_log.push((f.clone(), Hub::recovered_event(s, f)));
        }
        tracing::info!(decision = %p.decision, "finished an interrupted decision");
        for s in p.also.iter().chain(std::iter::once(&p.after)) {
            suggestions.insert(s.id.clone(), s.clone());
            journal.push(Record::Suggestion(Box::new(s.clone())));
        }
    }
    Ok(to_log)
}

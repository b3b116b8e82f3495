//! Committing a decision: journal `prepare` → checkout → feedback lines → journal `commit` →
//! events, and what happens when a step after the checkout write fails.

use crate::decide::apply::{self, execute, ExecError, PlanError};
use crate::error::AppError;
use crate::hub::{test_hooks, Hub, State};
use crate::model::feedback::FeedbackRecord;
use crate::model::now;
use crate::model::suggestion::{HunkRec, Suggestion};
use crate::protocol::{AppliedAction, ErrorCode, Event, HunkState};
use crate::store::journal::{Prepared, Record};

impl Hub {
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
        ops: Vec<crate::model::fileop::FileOp>,
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

    pub(crate) fn adopt(st: &mut State, after: Suggestion, also: Vec<Suggestion>) {
        for s in also {
            st.suggestions.insert(s.id.clone(), s);
        }
        st.suggestions.insert(after.id.clone(), after);
    }

    /// Best effort: a missing `abort` is harmless, since on the next start the files show the
    /// decision was not carried out, and a later `prepare` supersedes it.
    pub(crate) fn abort(&self, decision: &str) {
        if let Err(e) = self.journal_append(&Record::Abort {
            decision: decision.to_string(),
        }) {
            tracing::warn!(error = %e, decision, "journaling an abort");
        }
    }

    /// Write a decision's feedback lines (each with the seq of the event announcing it: events
    /// are built in the same order as the lines, extra events come after) and its `commit`.
    /// If the commit cannot be written the lines are taken back out of the log.
    pub(crate) fn log_and_commit(
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
    pub(crate) fn flush_unfinished(&self) -> Result<(), AppError> {
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

    pub(crate) fn status_event(s: &Suggestion) -> Event {
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
}

//! Committing a decision: journal `prepare` → checkout → feedback lines → journal `commit` →
//! events, and what happens when a step after the checkout write fails.

use crate::decide::apply::PlanError;
use crate::decide::execute::{self, execute, ExecError};
use crate::error::AppError;
use crate::hub::{test_hooks, Hub, State};
use crate::model::decision::{Closing, DecisionRec, HunkAdd, HunkChange, HunkRef, LineRec};
use crate::model::feedback::FeedbackRecord;
use crate::model::fileop::{FileOp, Op};
use crate::model::suggestion::{oid, Suggestion};
use crate::protocol::{AppliedAction, ErrorCode, Event, HunkState};
use crate::store::journal::Record;

/// A decision being built: file operations, hunk-state deltas, and each feedback line paired
/// with the event that announces it at the moment it is added (so the line gets that event's
/// `seq`). Nothing happens until `Hub::commit`.
#[derive(Debug)]
pub struct Decision {
    rec: DecisionRec,
    /// The event of each line in `rec.lines`, in the same order.
    line_events: Vec<Event>,
    /// Events announced after the lines' (status, completed, rollback).
    events: Vec<Event>,
}

impl Decision {
    pub fn new() -> Self {
        Self::with_id(uuid::Uuid::new_v4().to_string())
    }

    /// A decision with a given id (the hunks of a bulk action share one).
    pub fn with_id(id: String) -> Self {
        Decision {
            rec: DecisionRec {
                decision: id,
                ops: Vec::new(),
                changes: Vec::new(),
                closings: Vec::new(),
                lines: Vec::new(),
                drops: Vec::new(),
                adds: Vec::new(),
            },
            line_events: Vec::new(),
            events: Vec::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.rec.decision
    }

    pub fn ops(&mut self, ops: Vec<FileOp>) -> &mut Self {
        self.rec.ops.extend(ops);
        self
    }

    pub fn change(&mut self, change: HunkChange) -> &mut Self {
        self.rec.changes.push(change);
        self
    }

    /// Take a hunk out of its suggestion (by its position before the decision).
    pub fn drop_hunk(&mut self, hunk: HunkRef) -> &mut Self {
        self.rec.drops.push(hunk);
        self
    }

    /// Put a hunk into its suggestion (at its position once the drops are done).
    pub fn add_hunk(&mut self, hunk: HunkAdd) -> &mut Self {
        self.rec.adds.push(hunk);
        self
    }

    pub fn close(&mut self, closing: Closing) -> &mut Self {
        self.rec.closings.push(closing);
        self
    }

    /// A feedback line and the event that announces it.
    pub fn line(&mut self, line: LineRec, event: Event) -> &mut Self {
        self.rec.lines.push(line);
        self.line_events.push(event);
        self
    }

    /// An event with no feedback line of its own.
    pub fn event(&mut self, event: Event) -> &mut Self {
        self.events.push(event);
        self
    }

    pub fn record(&self) -> &DecisionRec {
        &self.rec
    }

    pub fn file_ops(&self) -> &[FileOp] {
        &self.rec.ops
    }

    /// Events in announcement order: the lines' first, so line `i` gets seq `first + i`.
    fn all_events(self) -> (DecisionRec, Vec<Event>) {
        let mut events = self.line_events;
        events.extend(self.events);
        (self.rec, events)
    }
}

impl Default for Decision {
    fn default() -> Self {
        Self::new()
    }
}

impl Hub {
    /// Durably commit a decision: journal `prepare` (fsynced), change files, log feedback
    /// (fsynced) and journal `commit`, then adopt the new hunk states and announce. A decision
    /// of several file operations first fsyncs the loose objects it names, which recovery
    /// would finish it or take it back from ([`hunkgate_sandbox::store::Store::sync_loose`]).
    /// All of it holds, or none of it does:
    /// - a `prepare` that cannot be written changes nothing;
    /// - a file operation that fails (or finds its file changed since the plan) takes back the
    ///   ones done before it;
    /// - when the feedback line or the `commit` cannot be written once the checkout is written
    ///   (a full disk, an fsync error), the files are put back from the prepare record and the
    ///   decision is answered with an error. A hunk never shows pending while its change is in
    ///   the file, so a retry never applies it twice.
    pub(crate) fn commit(&self, st: &mut State, decision: Decision) -> Result<(), AppError> {
        self.flush_unfinished()?;
        let (rec, events) = decision.all_events();
        rec.check(&st.suggestions)
            .map_err(|e| AppError::failed("checking the decision against the state", e))?;
        self.sync_contents(&rec)?;
        let record = Record::Decision(Box::new(rec));
        self.journal_append(&record).map_err(|e| {
            e.map_message(|m| format!("recording the decision: {m}; nothing was changed"))
        })?;
        let Record::Decision(rec) = record else {
            return Err(AppError::internal("journal record mix-up"));
        };
        let id = rec.decision.clone();

        test_hooks::pause("before-write");
        let root = if rec.ops.is_empty() {
            None
        } else {
            match self.checkout() {
                Ok(r) => Some(r),
                Err(e) => {
                    self.abort(&id);
                    return Err(e);
                }
            }
        };
        if let Some(root) = &root {
            self.execute_ops(root, &id, &rec.ops)?;
        }

        test_hooks::pause("before-commit");
        let mut feedback: Vec<FeedbackRecord> = rec
            .lines
            .iter()
            .filter_map(|l| {
                st.suggestions
                    .get(&l.suggestion_id)
                    .map(|s| l.expand(&id, s))
            })
            .collect();
        let committed = self
            .bus()
            .emit_durably(events, |seqs| self.log_and_commit(&id, &mut feedback, seqs));
        let Err((e, events)) = committed else {
            rec.apply(&mut st.suggestions)
                .map_err(|e| AppError::failed("applying the decision to the state", e))?;
            self.compact_if_due(st);
            return Ok(());
        };
        self.take_back_or_keep(st, &rec, root.as_ref(), e, events, feedback)
    }

    /// Carry out a decision's file operations; on failure they are taken back (and the
    /// decision aborted) or, when that is impossible, reported with the files to check.
    fn execute_ops(
        &self,
        root: &hunkgate_sandbox::beneath::Beneath,
        id: &str,
        ops: &[FileOp],
    ) -> Result<(), AppError> {
        match execute(root, self.store(), ops) {
            Ok(()) => Ok(()),
            Err(ExecError::Undone(e)) => {
                self.abort(id);
                Err(match *e {
                    PlanError::Conflict(message) => {
                        AppError::conflict(ErrorCode::Conflict, message)
                    }
                    other => AppError::failed("writing your checkout (nothing was changed)", other),
                })
            }
            Err(e @ ExecError::Stuck { .. }) => {
                let files: Vec<&str> = ops.iter().map(|o| o.path.as_str()).collect();
                Err(AppError::internal(format!(
                    "writing your checkout failed half way: {e}; check {}",
                    files.join(", ")
                )))
            }
        }
    }

    /// Make the contents a decision of several operations writes (and those its files held)
    /// durable before the record: a crash between two of its operations leaves recovery to
    /// finish the rest from those contents, or to take back the done ones from what their
    /// files held, so they must survive a power loss as the record does.
    fn sync_contents(&self, rec: &DecisionRec) -> Result<(), AppError> {
        if rec.ops.len() <= 1 {
            return Ok(());
        }
        let named = rec.ops.iter().flat_map(|op| {
            let written = match &op.op {
                Op::Write { oid: id, .. } | Op::Symlink { oid: id } => oid(id),
                Op::Remove | Op::SetExec { .. } => None,
            };
            written
                .into_iter()
                .chain(op.pre_oid.as_deref().and_then(oid))
        });
        self.store().sync_loose(named).map_err(|e| {
            AppError::failed(
                "making the decision's contents durable (nothing was changed)",
                e,
            )
        })?;
        Ok(())
    }

    /// The decision's checkout writes are done but its feedback line or commit could not be
    /// written: take the writes back and answer the error, or, when they cannot be taken back
    /// (a file changed again meanwhile), let the decision stand and record it later.
    fn take_back_or_keep(
        &self,
        st: &mut State,
        rec: &DecisionRec,
        root: Option<&hunkgate_sandbox::beneath::Beneath>,
        e: AppError,
        events: Vec<Event>,
        mut feedback: Vec<FeedbackRecord>,
    ) -> Result<(), AppError> {
        let id = rec.decision.clone();
        let undone = match root {
            Some(root) => execute::undo(root, self.store(), &rec.ops),
            None => Ok(()),
        };
        match undone {
            Ok(()) => {
                self.abort(&id);
                Err(e.map_message(|m| {
                    format!("{m}; the decision was taken back, nothing was changed")
                }))
            }
            Err(u) => {
                // The checkout keeps the change and it cannot be taken back (the file changed
                // again meanwhile): the decision stands. Its feedback line and commit are written
                // before the next decision, or from the prepare record on the next start.
                rec.apply(&mut st.suggestions)
                    .map_err(|e| AppError::failed("applying the decision to the state", e))?;
                let seqs: Vec<u64> = events.into_iter().map(|ev| self.bus().emit(ev)).collect();
                for (f, seq) in feedback.iter_mut().zip(&seqs) {
                    f.seq = *seq;
                }
                if let Ok(mut q) = self.unfinished().lock() {
                    q.push((id, feedback));
                }
                Err(e.map_message(|m| format!(
                    "{m}; the change is in your checkout and stays (taking it back failed: {u}); it is recorded once the state directory can be written again"
                )))
            }
        }
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
    /// are built in the same order as the lines, extra events come after), fsynced, then its
    /// `commit`. Once the lines are durable so is the decision: a crash that loses the `commit`
    /// leaves a `prepare` whose lines are all logged, which recovery counts as committed
    /// ([`crate::decide::recover`]). So a `commit` after lines is not fsynced on its own (the
    /// journal's next append makes it durable); one without lines is.
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
        let mut log = self.feedback_log()?;
        let mark = log
            .append(feedback)
            .map_err(|e| AppError::failed("writing the feedback log", e))?;
        let commit = Record::Commit {
            decision: decision.to_string(),
        };
        let committed = self.journal().and_then(|mut j| {
            let written = if feedback.is_empty() {
                j.append(&commit)
            } else {
                j.write_unsynced(&commit)
            };
            written.map_err(|e| AppError::failed("writing the journal", e))
        });
        if let Err(e) = committed {
            if let Err(t) = log.truncate_to(mark) {
                tracing::error!(error = %t, "taking an uncommitted decision out of the feedback log");
            }
            return Err(e.map_message(|m| format!("recording the decision: {m}")));
        }
        Ok(())
    }

    /// Record decisions that stand in the checkout but whose feedback lines and commit could not
    /// be written, before anything else is decided.
    pub(crate) fn flush_unfinished(&self) -> Result<(), AppError> {
        let mut q = self.unfinished().lock().map_err(|_| {
            AppError::internal(
                "the unfinished-decisions lock is poisoned (a thread panicked); restart the hub",
            )
        })?;
        while let Some((decision, feedback)) = q.first_mut() {
            let seqs: Vec<u64> = feedback.iter().map(|f| f.seq).collect();
            self.log_and_commit(decision, feedback, &seqs).map_err(|e| {
                e.map_message(|m| format!(
                    "an earlier decision is not recorded yet ({m}); nothing was changed: free space in the state directory and try again"
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
            "applied" | "merged" => AppliedAction::Accepted,
            "partial" if f.action == "accept" => AppliedAction::Accepted,
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
                    merge: s.hunk(&f.hunk_id).and_then(|h| h.merge.clone()),
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
            lines: f.lines.filter(|_| f.outcome == "partial"),
            new_hunks: s
                .hunks
                .iter()
                .filter(|h| f.outcome == "partial" && h.parent.as_deref() == Some(&f.hunk_id))
                .map(|h| h.view())
                .collect(),
            removed_hunk_ids: Vec::new(),
        }
    }

    /// The suggestion's status after a decision, given its counts then.
    pub(crate) fn status_event(s: &Suggestion, reviewed: usize, applied: usize) -> Event {
        Self::status_event_of(s, reviewed, applied, s.hunks.len())
    }

    /// [`Hub::status_event`] for a decision that changes the number of hunks to `total`.
    pub(crate) fn status_event_of(
        s: &Suggestion,
        reviewed: usize,
        applied: usize,
        total: usize,
    ) -> Event {
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

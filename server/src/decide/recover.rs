//! Crash recovery: a decision whose `prepare` reached the journal but whose `commit` did not is
//! committed when its feedback lines are logged (the `commit` was written after them and lost
//! with the crash), else finished or taken back at start, by comparing the checkout with the
//! recorded fingerprints.

use std::collections::BTreeMap;

use hunkgate_sandbox::beneath::Beneath;
use hunkgate_sandbox::store::Store;

use crate::decide::execute::{execute, op_state, undo_found, OpState};
use crate::hub::Hub;
use crate::model::decision::{DecisionRec, LineRec};
use crate::model::feedback::FeedbackRecord;
use crate::model::fileop::FileOp;
use crate::model::suggestion::Suggestion;
use crate::protocol::Event;
use crate::store::feedback::FeedbackLog;

/// Finish or drop decisions that were prepared but not committed when the hub died.
///
/// Returns the feedback lines still to log, each with the event that announces it (the caller
/// gives the line that event's seq).
pub fn recover(
    root: &Beneath,
    store: &Store,
    pending: Vec<DecisionRec>,
    feedback_path: &std::path::Path,
    suggestions: &mut BTreeMap<String, Suggestion>,
) -> Result<Vec<(FeedbackRecord, Event)>, String> {
    let logged = FeedbackLog::logged_lines(feedback_path).map_err(|e| e.to_string())?;
    let is_logged =
        |decision: &str, l: &LineRec| logged.contains(&(decision.to_string(), l.hunk_id.clone()));
    let mut to_log = Vec::new();
    for d in pending {
        // A write the crash interrupted may have left its temporary file beside the file.
        for op in &d.ops {
            match root.remove_stale_temps(&op.path) {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(path = %op.path, removed = n, "removed temporary files an interrupted write left")
                }
                Err(e) => {
                    tracing::warn!(path = %op.path, error = %e, "looking for temporary files an interrupted write left")
                }
            }
        }
        if !finish(root, store, &d, |l| is_logged(&d.decision, l))? {
            continue;
        }
        d.apply(suggestions).map_err(|e| e.to_string())?;
        // Per line: the hunks of a bulk action share a decision id but are journaled one by one.
        for l in d.lines.iter().filter(|l| !is_logged(&d.decision, l)) {
            if let Some(s) = suggestions.get(&l.suggestion_id) {
                let f = l.expand(&d.decision, s);
                let event = Hub::recovered_event(s, &f);
                to_log.push((f, event));
            }
        }
        tracing::info!(decision = %d.decision, "finished an interrupted decision");
    }
    Ok(to_log)
}

/// Whether decision `d` holds: finish its file operations when some happened (so it holds in
/// full), or tell that it never happened and is dropped.
fn finish(
    root: &Beneath,
    store: &Store,
    d: &DecisionRec,
    is_logged: impl Fn(&LineRec) -> bool,
) -> Result<bool, String> {
    if d.ops.is_empty() {
        // Nothing in the checkout tells whether it happened; the feedback log does: its lines
        // are written right before the commit, and taken back if that fails.
        if d.lines.is_empty() || !d.lines.iter().all(is_logged) {
            tracing::info!(decision = %d.decision, "dropping an unfinished decision (it changed no file and was not logged)");
            return Ok(false);
        }
        return Ok(true);
    }
    if !d.lines.is_empty() && d.lines.iter().all(&is_logged) {
        // The lines are logged (fsynced) only once every file operation is done, and the
        // `commit` written after them is fsynced by the next append: this is a committed
        // decision whose `commit` the crash lost. The files may have changed since; it stands.
        tracing::info!(decision = %d.decision, "a decision whose commit was lost is committed (its feedback lines are logged)");
        return Ok(true);
    }
    let states: Result<Vec<OpState>, _> =
        d.ops.iter().map(|op| op_state(root, store, op)).collect();
    let states = states.map_err(|e| e.to_string())?;
    if states.contains(&OpState::Neither) {
        // It cannot be finished, and its client never heard back: what of it was written
        // (another file of the same decision) is taken back, so that it holds not at all.
        let done: Vec<FileOp> = d
            .ops
            .iter()
            .zip(&states)
            .filter(|(_, st)| **st == OpState::Done)
            .map(|(op, _)| op.clone())
            .collect();
        tracing::warn!(decision = %d.decision, taking_back = done.len(), "a file changed since an unfinished decision; taking back what of it was written");
        return take_back(root, store, d, &done, "a file changed since it was planned");
    }
    if states.iter().all(|s| *s == OpState::Before) {
        // Nothing was written and the client never heard back: drop it.
        tracing::info!(decision = %d.decision, "dropping an unfinished decision (no file was written)");
        return Ok(false);
    }
    // What is done, in the decision's order, to take back if the rest cannot be finished.
    let mut done = Vec::with_capacity(d.ops.len());
    for (op, st) in d.ops.iter().zip(&states) {
        if *st == OpState::Before {
            if let Err(e) = execute(root, store, std::slice::from_ref(op)) {
                return take_back(root, store, d, &done, &e.to_string());
            }
        }
        done.push(op.clone());
    }
    Ok(true)
}

/// A decision that cannot be finished (an operation failed: the content it writes cannot be
/// read from the store, say) is taken back instead: its client never heard back, so it is
/// dropped as if nothing had been written. Only when that fails too is the start stopped, with
/// both reasons and the files to look at.
fn take_back(
    root: &Beneath,
    store: &Store,
    d: &DecisionRec,
    done: &[FileOp],
    why: &str,
) -> Result<bool, String> {
    match undo_found(root, store, done) {
        Ok(()) => {
            tracing::warn!(decision = %d.decision, error = why, "an unfinished decision could not be finished and was taken back; its hunks stay as they were");
            Ok(false)
        }
        Err(u) => {
            let files: Vec<&str> = d.ops.iter().map(|op| op.path.as_str()).collect();
            Err(format!(
                "decision {}: finishing it failed ({why}) and taking it back failed too ({u}); check {}",
                d.decision,
                files.join(", ")
            ))
        }
    }
}

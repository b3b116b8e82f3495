//! Crash recovery: a decision whose `prepare` reached the journal but whose `commit` did not is
//! finished or taken back at start, by comparing the checkout with the recorded fingerprints.

use std::collections::BTreeMap;

use hunkgate_sandbox::beneath::Beneath;
use hunkgate_sandbox::store::Store;

use crate::decide::apply::{execute, op_state, OpState};
use crate::hub::Hub;
use crate::model::feedback::FeedbackRecord;
use crate::model::suggestion::Suggestion;
use crate::protocol::Event;
use crate::store::feedback::FeedbackLog;
use crate::store::journal::{Prepared, Record};

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

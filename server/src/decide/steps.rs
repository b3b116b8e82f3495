//! The parts of a decision on one hunk: its delta, its feedback line with the event that
//! announces it, the conflict record, and the counts after it — pure, from the suggestion as
//! it is and the planned step.

use hunkgate_patch::Hunk;

use crate::decide::apply;
use crate::decide::commit::Decision;
use crate::decide::review::Ask;
use crate::hub::Hub;
use crate::model::decision::{HunkChange, LineRec};
use crate::model::fileop::FileOp;
use crate::model::suggestion::{HunkRec, Suggestion};
use crate::protocol::{AppliedAction, ErrorCode, Event, HunkState};

/// A suggestion's reviewed and applied hunks, kept up to date as a decision is planned.
pub(crate) struct Counts {
    pub(crate) reviewed: usize,
    pub(crate) applied: usize,
}

impl Counts {
    pub(crate) fn of(s: &Suggestion) -> Self {
        Counts {
            reviewed: s.reviewed_count(),
            applied: s.hunks.iter().filter(|h| h.state.applied()).count(),
        }
    }

    /// A hunk goes from `before` to `after`.
    fn shift(&mut self, before: HunkState, after: HunkState) {
        self.reviewed = self.reviewed + after.reviewed() as usize - before.reviewed() as usize;
        self.applied = self.applied + after.applied() as usize - before.applied() as usize;
    }
}

/// The decision that carries out a planned step on hunk `idx`: its delta, its feedback line
/// with the `hunk.applied` event, and the suggestion's new status. Counts are those after the
/// decision, worked out without copying the suggestion.
pub(crate) fn decision_for(
    s: &Suggestion,
    idx: usize,
    mut d: Decision,
    ask: &Ask,
    modified: &Option<Hunk>,
    planned: (HunkState, apply::Plan, AppliedAction),
) -> Decision {
    let mut counts = Counts::of(s);
    let (ops, change, line, event) = step_parts(s, idx, ask, modified, planned, &mut counts);
    d.ops(ops)
        .change(change)
        .line(line, event)
        .event(Hub::status_event(s, counts.reviewed, counts.applied));
    d
}

/// The parts of one hunk's step: file operations, delta, feedback line and its event (with
/// `counts` moved on by this hunk).
pub(crate) fn step_parts(
    s: &Suggestion,
    idx: usize,
    ask: &Ask,
    modified: &Option<Hunk>,
    (state, plan, act): (HunkState, apply::Plan, AppliedAction),
    counts: &mut Counts,
) -> (Vec<FileOp>, HunkChange, LineRec, Event) {
    let rec = &s.hunks[idx];
    let change = HunkChange {
        suggestion_id: s.id.clone(),
        index: idx,
        hunk_id: rec.id.clone(),
        state,
        applied: if state.applied() {
            plan.applied.map(Box::new)
        } else {
            None
        },
        conflict: None,
        merge: if state.applied() {
            plan.merge.clone()
        } else {
            None
        },
        comment: ask.comment.map(str::to_string),
        perm: if state.applied() { plan.perm } else { None },
        // A decision on the whole hunk: no line range (an undo takes a partial one back).
        lines: None,
    };
    let outcome = match act {
        // A clean three-way merge of a stale hunk, told apart in the feedback log.
        AppliedAction::Accepted if change.merge.is_some() => "merged",
        AppliedAction::Accepted => "applied",
        AppliedAction::Modified => "modified",
        AppliedAction::Rejected => "rejected",
        AppliedAction::Undone => "undone",
    };
    let mut line = LineRec::new(s, rec, ask.action.word(), outcome);
    line.comment = ask.comment.map(str::to_string);
    line.modified_diff = modified.as_ref().map(|h| h.to_unified());
    line.merged_diff = change.merge.as_ref().map(|m| m.diff.clone());
    counts.shift(rec.state, state);
    let event = hunk_applied(
        s,
        rec,
        (act, state),
        (counts.reviewed, s.hunks.len()),
        Reshaped::default(),
    );
    (plan.ops, change, line, event)
}

/// Hunk `idx` conflicts: its delta (state `conflict`, the message), feedback line and
/// `apply_failed` event.
pub(crate) fn conflict_parts(
    s: &Suggestion,
    idx: usize,
    ask: &Ask,
    msg: &str,
) -> (HunkChange, LineRec, Event) {
    let rec = &s.hunks[idx];
    let mut change = HunkChange::keep(&s.id, idx, rec, HunkState::Conflict);
    change.conflict = Some(msg.to_string());
    let mut line = LineRec::new(s, rec, ask.action.word(), "conflict");
    line.comment = ask.comment.map(str::to_string);
    line.modified_diff = ask.modified_diff.map(str::to_string);
    line.lines = ask.lines;
    line.error = Some(msg.to_string());
    let event = Event::Error {
        seq: 0,
        code: ErrorCode::ApplyFailed,
        message: msg.to_string(),
        suggestion_id: Some(s.id.clone()),
        hunk_id: Some(rec.id.clone()),
        run_id: Some(s.run_id.clone()),
        merge: None,
    };
    (change, line, event)
}

/// What a line-range decision did to a suggestion's hunks, for its event.
#[derive(Default)]
pub(super) struct Reshaped {
    /// The range of the hunk's diff decided.
    pub lines: Option<[usize; 2]>,
    /// The rest it left to decide.
    pub new_hunks: Vec<crate::protocol::HunkView>,
    /// The rests an undo took back.
    pub removed_hunk_ids: Vec<String>,
}

/// The `suggestion.hunk_applied` event of a decision on `rec` (its seq is set when it is sent):
/// `(act, state)` what was done and the state it left, `(reviewed, total)` the suggestion's
/// counts after it.
pub(super) fn hunk_applied(
    s: &Suggestion,
    rec: &HunkRec,
    (act, state): (AppliedAction, HunkState),
    (reviewed, total): (usize, usize),
    reshaped: Reshaped,
) -> Event {
    Event::HunkApplied {
        seq: 0,
        suggestion_id: s.id.clone(),
        hunk_id: rec.id.clone(),
        action: act,
        file: rec.file.clone(),
        state,
        reviewed_count: reviewed,
        hunk_count: total,
        lines: reshaped.lines,
        new_hunks: reshaped.new_hunks,
        removed_hunk_ids: reshaped.removed_hunk_ids,
    }
}

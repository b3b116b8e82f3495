//! Line-range decisions: `feedback` with `lines` accepts or rejects part of a hunk, and what was
//! not decided stays pending as a new, smaller hunk.
//!
//! The hunk math is [`hunkgate_patch::split_hunk`]. Here a partial accept is a decision like
//! any other (journal `prepare`, the checkout write, the feedback line, journal `commit`), in
//! which the hunk takes state `accepted` with `applied` holding exactly what landed and `lines`
//! the range, and which also adds the rest as a hunk of its own, right after it in the
//! suggestion. A partial reject lands nothing: the hunk takes state `rejected` and the rest is
//! the hunk without the rejected lines. The new hunk is journaled whole in the decision, so a
//! restart (or crash recovery) puts back exactly the same hunk set.
//!
//! **Ids.** The rest of hunk `H` decided over lines `a`–`b` is `H~a<a>-<b>` (accept) or
//! `H~r<a>-<b>` (reject): derived from what is journaled, and the same hunk (same content)
//! every time the same decision is made again after an undo.
//!
//! **Where the rest sits.** Its old side starts where the hunk's did, in the file as the
//! landed part leaves it. Every offset the hub computes counts only the applied hunks that
//! start strictly above a hunk, so the hunk and its rest (which start at the same line) never
//! shift each other, while a hunk below counts both of their deltas: what landed plus what
//! the rest lands is what the whole hunk would have.
//!
//! **Undo.** Undoing the partly decided hunk takes back what landed (a reverse apply of
//! `applied`, exactly as for a modified hunk) and takes the rest out of the suggestion again,
//! so the hunk is whole and pending as before. The rest must not be decided then: undo it
//! first (a rest that was itself decided in part has its own rest, and so on: undo goes back
//! one decision at a time).

use hunkgate_patch::{split_hunk, Pick};

use crate::decide::apply::{self, plan_forward, PlanError};
use crate::decide::commit::Decision;
use crate::decide::review::{already, ensure_open, find_hunk, Ask, Step};
use crate::decide::steps::{hunk_applied, Counts, Reshaped};
use crate::error::AppError;
use crate::hub::{DecisionResult, Hub, State};
use crate::model::decision::{HunkAdd, HunkChange, HunkRef, LineRec};
use crate::model::suggestion::{HunkRec, Suggestion};
use crate::protocol::{AppliedAction, ErrorCode, FeedbackAction, HunkKind, HunkState};

impl Hub {
    /// Accept or reject lines `lines[0]..=lines[1]` of a hunk's diff (1-based, after its `@@`
    /// line); the rest stays pending as a new hunk. A range holding every change of the hunk is
    /// a decision on the whole hunk.
    pub fn decide_lines(
        &self,
        suggestion_id: &str,
        hunk_id: &str,
        action: FeedbackAction,
        lines: [usize; 2],
        comment: Option<&str>,
    ) -> Result<DecisionResult, AppError> {
        let pick = pick_of(action)?;
        self.quiet().note();
        let mut st = self.lock()?;
        let sid = Self::resolve_id(&st, suggestion_id)?;
        let s = &st.suggestions[&sid];
        ensure_open(s)?;
        let idx = find_hunk(s, hunk_id)?;
        let rec = &s.hunks[idx];
        let patch = ranged_patch(rec)?;
        let split = split_hunk(patch, lines[0], lines[1], pick)
            .map_err(|e| AppError::bad_request(format!("hunk {}: {e}", rec.id)))?;
        if rec.state.reviewed() {
            return Err(already(format!(
                "hunk {} is already {:?}; undo it first to decide again",
                rec.id, rec.state
            )));
        }
        let ask = Ask {
            action,
            modified_diff: None,
            merged_against: None,
            comment,
            lines: Some(lines),
        };
        let Some(rest) = split.rest else {
            // Every change of the hunk is in the range: that is the whole hunk decided.
            let hunk_id = rec.id.clone();
            drop(st);
            let whole = Ask { lines: None, ..ask };
            return self.decide_as(&sid, &hunk_id, &whole, None);
        };
        let id = uuid::Uuid::new_v4().to_string();
        let plan = match &split.landed {
            Some(landed) => {
                let root = self.checkout()?;
                let offset = Self::offset_for(s, rec);
                match plan_forward(&root, self.store(), rec, Some(landed), offset, false) {
                    Ok(plan) => plan,
                    Err(PlanError::Conflict(msg)) => {
                        return self.record_conflict(&mut st, &sid, idx, &id, &ask, msg)
                    }
                    Err(e) => return Err(AppError::failed("planning the lines", e)),
                }
            }
            None => apply::Plan::default(),
        };
        let child = rest_of(s, rec, rest, lines, pick, self.cfg().review.hunk_limits);
        let d = split_decision(s, idx, Decision::with_id(id.clone()), &ask, plan, child);
        let applied = !d.file_ops().is_empty();
        match self.commit(&mut st, d) {
            Ok(()) => {}
            // The file changed between the plan and the write: a conflict like any other.
            Err(e) if e.error_code() == ErrorCode::Conflict => {
                let message = e.message().to_string();
                return self.record_conflict(&mut st, &sid, idx, &id, &ask, message);
            }
            Err(e) => return Err(e),
        }
        let s = &st.suggestions[&sid];
        Ok(DecisionResult {
            applied,
            remaining_hunks: s.hunks.len() - s.reviewed_count(),
            hunk: s.hunks[idx].view(),
            new_hunks: vec![s.hunks[idx + 1].view()],
            removed_hunk_ids: Vec::new(),
        })
    }

    /// Undo a line-range decision on hunk `idx`: take back what landed, if anything, and take
    /// its rest out of the suggestion, which must still be undecided. A reject of a partly
    /// accepted hunk does the same and leaves the whole hunk rejected.
    pub(super) fn undo_lines(
        &self,
        st: &mut State,
        sid: &str,
        idx: usize,
        ask: &Ask,
        decision: String,
    ) -> Result<DecisionResult, AppError> {
        let s = &st.suggestions[sid];
        let rec = &s.hunks[idx];
        let (at, child) = rest_index(s, rec)?;
        let Step::Planned(state, plan, act) = self.plan_one(s, idx, ask.action, None)? else {
            return Err(AppError::internal("an undo planned as a conflict"));
        };
        let mut counts = Counts::of(s);
        counts.reviewed =
            counts.reviewed + usize::from(state.reviewed()) - usize::from(rec.state.reviewed());
        counts.applied -= usize::from(rec.state.applied());
        let total = s.hunks.len() - 1;
        let outcome = if state == HunkState::Rejected {
            "rejected"
        } else {
            "undone"
        };
        let mut line = LineRec::new(s, rec, ask.action.word(), outcome);
        line.comment = ask.comment.map(str::to_string);
        line.lines = rec.lines;
        let event = hunk_applied(
            s,
            rec,
            (act, state),
            (counts.reviewed, total),
            Reshaped {
                removed_hunk_ids: vec![child.clone()],
                ..Reshaped::default()
            },
        );
        let mut change = HunkChange::keep(&s.id, idx, rec, state);
        (change.applied, change.lines) = (None, None);
        change.comment = ask.comment.map(str::to_string);
        let mut d = Decision::with_id(decision);
        d.ops(plan.ops)
            .change(change)
            .drop_hunk(HunkRef {
                suggestion_id: s.id.clone(),
                index: at,
                hunk_id: child.clone(),
            })
            .line(line, event)
            .event(Hub::status_event_of(
                s,
                counts.reviewed,
                counts.applied,
                total,
            ));
        let applied = !d.file_ops().is_empty();
        let hunk_id = rec.id.clone();
        self.commit(st, d)
            .map_err(|e| e.map_message(|m| format!("cannot undo hunk {hunk_id}: {m}")))?;
        let s = &st.suggestions[sid];
        Ok(DecisionResult {
            applied,
            remaining_hunks: s.hunks.len() - s.reviewed_count(),
            hunk: s.hunks[idx].view(),
            new_hunks: Vec::new(),
            removed_hunk_ids: vec![child],
        })
    }
}

/// What a line-range decision does with the lines: only accept and reject take a range.
fn pick_of(action: FeedbackAction) -> Result<Pick, AppError> {
    match action {
        FeedbackAction::Accept => Ok(Pick::Accept),
        FeedbackAction::Reject => Ok(Pick::Reject),
        other => Err(AppError::bad_request(format!(
            "\"lines\" goes with action \"accept\" or \"reject\", not {:?}; undo takes back a whole decision, a line-range one too",
            other.word()
        ))),
    }
}

/// The patch of a hunk whose lines can be decided one range at a time: a change inside a file
/// that stays (a created or deleted file, a binary, a rename or a mode change is decided whole).
fn ranged_patch(rec: &HunkRec) -> Result<&hunkgate_patch::Hunk, AppError> {
    match (&rec.kind, &rec.patch) {
        (HunkKind::Modify, Some(p)) => Ok(p),
        _ => Err(AppError::bad_request(
            format!(
                "hunk {} is a {:?} change; \"lines\" decides part of a change inside a file, this one is accepted or rejected whole",
                rec.id, rec.kind
            )
            .to_lowercase(),
        )),
    }
}

/// The hunk record of what a line-range decision on `rec` leaves to decide. It is oversized
/// while the hunk was and the rest is still over `limits` (it is never cut into parts).
fn rest_of(
    s: &Suggestion,
    rec: &HunkRec,
    rest: hunkgate_patch::Hunk,
    [first, last]: [usize; 2],
    pick: Pick,
    limits: hunkgate_patch::Limits,
) -> HunkRec {
    let oversized = rec.oversized && !limits.fits(&rest);
    let how = if pick == Pick::Accept { 'a' } else { 'r' };
    // Per file, hunks are numbered from 0 as the publish made them; a rest takes the next
    // number, so `<file>:<index>` names it as well.
    let index = s
        .hunks
        .iter()
        .filter(|h| h.file == rec.file)
        .map(|h| h.index + 1)
        .max()
        .unwrap_or(0);
    HunkRec {
        id: format!("{}~{how}{first}-{last}", rec.id),
        index,
        state: HunkState::Pending,
        patch: Some(rest),
        applied: None,
        comment: None,
        conflict: None,
        perm: None,
        lines: None,
        parent: Some(rec.id.clone()),
        oversized,
        ..rec.clone()
    }
}

/// Where the rest of `rec`'s line-range decision is, and its id; it must be undecided.
fn rest_index(s: &Suggestion, rec: &HunkRec) -> Result<(usize, String), AppError> {
    let at = s
        .hunks
        .iter()
        .position(|h| h.parent.as_deref() == Some(rec.id.as_str()))
        .ok_or_else(|| {
            AppError::internal(format!(
                "hunk {} was decided in part but its rest is missing",
                rec.id
            ))
        })?;
    let child = &s.hunks[at];
    if child.state.reviewed() {
        return Err(AppError::conflict(
            ErrorCode::AlreadyDecided,
            format!(
                "hunk {} holds what was left of hunk {}'s line-range decision and is {:?}; undo it first",
                child.id, rec.id, child.state
            )
            .to_lowercase(),
        ));
    }
    Ok((at, child.id.clone()))
}

/// The decision of a line-range decision on hunk `idx`: its file operations, its new state,
/// the rest added right after it, the feedback line (outcome `partial`) with its event, and the
/// suggestion's status with one hunk more.
fn split_decision(
    s: &Suggestion,
    idx: usize,
    mut d: Decision,
    ask: &Ask,
    plan: apply::Plan,
    child: HunkRec,
) -> Decision {
    let rec = &s.hunks[idx];
    let accept = ask.action == FeedbackAction::Accept;
    let (state, act) = if accept {
        (HunkState::Accepted, AppliedAction::Accepted)
    } else {
        (HunkState::Rejected, AppliedAction::Rejected)
    };
    let mut counts = Counts::of(s);
    counts.reviewed += 1;
    counts.applied += usize::from(accept);
    let total = s.hunks.len() + 1;
    let mut change = HunkChange::keep(&s.id, idx, rec, state);
    change.applied = plan.applied.clone().map(Box::new);
    change.conflict = None;
    change.comment = ask.comment.map(str::to_string);
    change.lines = ask.lines;
    let mut line = LineRec::new(s, rec, ask.action.word(), "partial");
    line.comment = ask.comment.map(str::to_string);
    line.lines = ask.lines;
    line.applied_diff = plan.applied.as_ref().map(|h| h.to_unified());
    let event = hunk_applied(
        s,
        rec,
        (act, state),
        (counts.reviewed, total),
        Reshaped {
            lines: ask.lines,
            new_hunks: vec![child.view()],
            removed_hunk_ids: Vec::new(),
        },
    );
    d.ops(plan.ops)
        .change(change)
        .add_hunk(HunkAdd {
            suggestion_id: s.id.clone(),
            index: idx + 1,
            hunk: child,
        })
        .line(line, event)
        .event(Hub::status_event_of(
            s,
            counts.reviewed,
            counts.applied,
            total,
        ));
    d
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;

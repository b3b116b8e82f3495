//! The review decisions on a suggestion's hunks: accept, reject, modify, undo, bulk decisions and
//! `complete`, each planned against the checkout and committed as one decision.

use std::collections::BTreeMap;

use hunkgate_patch::{parse_one_hunk, Hunk, OneHunkError};

use crate::decide::apply::{
    self, merge_ops, plan_forward, plan_forward_over, plan_reverse, Overlay, PlanError,
};
use crate::decide::commit::Decision;
use crate::decide::steps::{conflict_parts, decision_for, step_parts, Counts};
use crate::error::AppError;
use crate::hub::{DecisionResult, Hub, State};
use crate::model::decision::{Closing, HunkChange, LineRec};
use crate::model::suggestion::{HunkRec, Suggestion};
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
        // Cheapest tests first: this runs over every hunk of the suggestion for each decision
        // (and for each hunk of a bulk one), and most are not applied or are in other files.
        s.hunks
            .iter()
            .filter(|h| h.state.applied())
            .filter_map(|h| {
                let base = h.patch.as_ref()?;
                let before = base.old_start < me.old_start && h.file == rec.file && h.id != rec.id;
                before.then(|| h.applied.as_deref().unwrap_or(base).delta())
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
        let ask = Ask {
            action,
            modified_diff,
            merged_against: None,
            comment,
            lines: None,
        };
        self.quiet().note();
        self.decide_as(suggestion_id, hunk_id, &ask, None)
    }

    /// Accept the clean three-way merge of a stale hunk that was computed against the file of
    /// SHA-256 `merged_against` (the hunk's `merge`): it lands only while the file is still
    /// that one; otherwise the hunk is merged again and the answer is a conflict with the new
    /// outcome ([`crate::decide::merge`]).
    pub fn decide_merged(
        &self,
        suggestion_id: &str,
        hunk_id: &str,
        merged_against: &str,
        comment: Option<&str>,
    ) -> Result<DecisionResult, AppError> {
        let ask = Ask {
            action: FeedbackAction::Accept,
            modified_diff: None,
            merged_against: Some(merged_against),
            comment,
            lines: None,
        };
        self.quiet().note();
        self.decide_as(suggestion_id, hunk_id, &ask, None)
    }

    /// [`Hub::decide`] as one hunk of a bulk action: its feedback line carries the bulk action's
    /// `decision` id, shared by all the hunks it decided (protocol.md, "Feedback log").
    pub(super) fn decide_as(
        &self,
        suggestion_id: &str,
        hunk_id: &str,
        ask: &Ask,
        decision: Option<&str>,
    ) -> Result<DecisionResult, AppError> {
        let mut st = self.lock()?;
        let sid = Self::resolve_id(&st, suggestion_id)?;
        let s = &st.suggestions[&sid];
        ensure_open(s)?;
        let idx = find_hunk(s, hunk_id)?;
        let rec = &s.hunks[idx];
        let id = decision
            .map(str::to_string)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        if matches!(ask.action, FeedbackAction::Undo | FeedbackAction::Reject)
            && rec.lines.is_some()
        {
            return self.undo_lines(&mut st, &sid, idx, ask, id);
        }
        // Validate the user's diff before anything else: bad input changes nothing.
        let modified = modified_hunk(ask, rec)?;
        let planned = match self.plan_step(s, idx, ask, modified.as_ref())? {
            Step::Planned(state, plan, act) => (state, plan, act),
            Step::Conflict(msg) => return self.record_conflict(&mut st, &sid, idx, &id, ask, msg),
        };
        let d = decision_for(
            s,
            idx,
            Decision::with_id(id.clone()),
            ask,
            &modified,
            planned,
        );
        let hunk_id = rec.id.clone();
        let applied = !d.file_ops().is_empty();
        match self.commit(&mut st, d) {
            Ok(()) => {}
            // The file changed between the plan and the write: a conflict like any other.
            Err(e) if e.error_code() == ErrorCode::Conflict && ask.action.forward() => {
                let message = e.message().to_string();
                return self.record_conflict(&mut st, &sid, idx, &id, ask, message);
            }
            Err(e) if e.error_code() == ErrorCode::Conflict => {
                let word = ask.action.word();
                return Err(e.map_message(|m| format!("cannot {word} hunk {hunk_id}: {m}")));
            }
            Err(e) => return Err(e),
        }
        let s = &st.suggestions[&sid];
        Ok(DecisionResult {
            applied,
            remaining_hunks: s.hunks.len() - s.reviewed_count(),
            hunk: s.hunks[idx].view(),
            new_hunks: Vec::new(),
            removed_hunk_ids: Vec::new(),
        })
    }

    /// [`Hub::plan_one`], or the landing of a merge when the accept names one.
    fn plan_step(
        &self,
        s: &Suggestion,
        idx: usize,
        ask: &Ask,
        modified: Option<&Hunk>,
    ) -> Result<Step, AppError> {
        match ask.merged_against {
            Some(against) => self.plan_merged(s, idx, against),
            None => self.plan_one(s, idx, ask.action, modified),
        }
    }

    /// What deciding hunk `idx` of `s` does to the checkout: the new state and file operations,
    /// or the conflict that stops it.
    pub(super) fn plan_one(
        &self,
        s: &Suggestion,
        idx: usize,
        action: FeedbackAction,
        modified: Option<&Hunk>,
    ) -> Result<Step, AppError> {
        let rec = &s.hunks[idx];
        if action.forward() {
            if rec.state.reviewed() {
                return Err(already(format!(
                    "hunk {} is already {:?}; undo it first to decide again",
                    rec.id, rec.state
                )));
            }
            let hunk = modified.or(rec.patch.as_ref());
            let offset = Self::offset_for(s, rec);
            let root = self.checkout()?;
            return match plan_forward(&root, self.store(), rec, hunk, offset, modified.is_some()) {
                Ok(plan) if modified.is_some() => Ok(Step::Planned(
                    HunkState::Modified,
                    plan,
                    AppliedAction::Modified,
                )),
                Ok(plan) => Ok(Step::Planned(
                    HunkState::Accepted,
                    plan,
                    AppliedAction::Accepted,
                )),
                Err(PlanError::Conflict(msg)) => Ok(Step::Conflict(msg)),
                Err(e) => Err(AppError::failed("planning the hunk", e)),
            };
        }
        let (target, act) = if action == FeedbackAction::Reject {
            (HunkState::Rejected, AppliedAction::Rejected)
        } else {
            (HunkState::Pending, AppliedAction::Undone)
        };
        if rec.state == target || (action == FeedbackAction::Undo && !rec.state.reviewed()) {
            return Err(already(format!(
                "hunk {} is {:?}; nothing to {}",
                rec.id,
                rec.state,
                action.word()
            )));
        }
        if !rec.state.applied() {
            return Ok(Step::Planned(target, apply::Plan::default(), act));
        }
        let root = self.checkout()?;
        match plan_reverse(&root, self.store(), rec, Self::offset_for(s, rec)) {
            Ok(plan) => Ok(Step::Planned(target, plan, act)),
            Err(PlanError::Conflict(msg)) => Err(AppError::conflict(
                ErrorCode::Conflict,
                format!("cannot undo hunk {}: {msg}", rec.id),
            )),
            Err(e) => Err(AppError::failed("planning the undo", e)),
        }
    }

    /// Record that hunk `idx` conflicts (state `conflict`, a feedback line, an `apply_failed`
    /// event) and answer the conflict.
    pub(super) fn record_conflict(
        &self,
        st: &mut State,
        sid: &str,
        idx: usize,
        decision: &str,
        ask: &Ask,
        msg: String,
    ) -> Result<DecisionResult, AppError> {
        let (merge, msg) = self.merge_for_conflict(&st.suggestions[sid], idx, ask, msg);
        let (mut change, line, mut event) = conflict_parts(&st.suggestions[sid], idx, ask, &msg);
        // An accept's merge replaces the one before (none: nothing to merge any more).
        if ask.action == FeedbackAction::Accept {
            if let Event::Error { merge: m, .. } = &mut event {
                m.clone_from(&merge);
            }
            change.merge = merge;
        }
        let mut d = Decision::with_id(decision.to_string());
        d.change(change).line(line, event);
        self.commit(st, d)?;
        Err(AppError::conflict(ErrorCode::Conflict, msg))
    }

    /// Accept or reject every pending (or conflicting) hunk, optionally of one file, as one
    /// decision: every hunk of a file is planned against what the hunks before it leave, and
    /// each file is written once. A hunk that does not apply is recorded as a conflict and the
    /// others go on. If the checkout changes between the plan and the write, the hunks are
    /// decided one at a time instead.
    ///
    /// An accept leaves the destructive hunks pending unless `confirm` (see
    /// [`crate::model::suggestion::mark_destructive`]); the answer lists them
    /// (`skipped_destructive`) and says how to land them.
    pub fn decide_all(
        &self,
        suggestion_id: &str,
        action: BulkAction,
        file: Option<&str>,
        comment: Option<&str>,
        confirm: bool,
    ) -> Result<serde_json::Value, AppError> {
        let skip = action == BulkAction::Accept && !confirm;
        let mut answer = self.decide_bulk(suggestion_id, action, file, comment, skip)?;
        if skip {
            self.note_skipped(&mut answer, file)?;
        }
        Ok(answer)
    }

    /// Add to a bulk accept's answer the destructive hunks it left pending (of `file`, when
    /// it was one file's), and a message saying how to accept them.
    fn note_skipped(
        &self,
        answer: &mut serde_json::Value,
        file: Option<&str>,
    ) -> Result<(), AppError> {
        let st = self.lock()?;
        let sid = answer["suggestion_id"].as_str().unwrap_or_default();
        let Some(s) = st.suggestions.get(sid) else {
            return Ok(());
        };
        let left: Vec<&HunkRec> = s
            .hunks
            .iter()
            .filter(|h| skipped_destructive(h) && file.is_none_or(|f| h.file == f))
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        let why: Vec<String> = left.iter().filter_map(|h| h.destructive_why()).collect();
        let n = left.len();
        answer["message"] = serde_json::Value::String(format!(
            "{n} destructive hunk{s} left pending ({list}): accept {them} by name, or accept all again with confirm (hunkgate accept --include-destructive)",
            s = if n == 1 { "" } else { "s" },
            list = why.join("; "),
            them = if n == 1 { "it" } else { "them" },
        ));
        let skipped = left
            .iter()
            .map(|h| {
                serde_json::json!({"hunk_id": h.id, "file": h.file, "kind": h.kind,
                    "why": h.destructive_why()})
            })
            .collect();
        answer["skipped_destructive"] = serde_json::Value::Array(skipped);
        Ok(())
    }

    /// [`Hub::decide_all`]'s decision: `skip_destructive` leaves the destructive hunks out.
    fn decide_bulk(
        &self,
        suggestion_id: &str,
        action: BulkAction,
        file: Option<&str>,
        comment: Option<&str>,
        skip_destructive: bool,
    ) -> Result<serde_json::Value, AppError> {
        self.quiet().note();
        let mut st = self.lock()?;
        let sid = Self::resolve_id(&st, suggestion_id)?;
        let s = &st.suggestions[&sid];
        ensure_open(s)?;
        if let Some(f) = file {
            if !s.hunks.iter().any(|h| h.file == f) {
                return Err(AppError::not_found(format!(
                    "suggestion {sid} has no hunks in {f}"
                )));
            }
        }
        let picked: Vec<usize> = (0..s.hunks.len())
            .filter(|&i| {
                let h = &s.hunks[i];
                !h.state.reviewed()
                    && file.is_none_or(|f| h.file == f)
                    && !(skip_destructive && h.destructive)
            })
            .collect();
        let ask = Ask {
            action: match action {
                BulkAction::Accept => FeedbackAction::Accept,
                BulkAction::Reject => FeedbackAction::Reject,
            },
            modified_diff: None,
            merged_against: None,
            comment,
            lines: None,
        };
        let mut d = Decision::new();
        let (done, failed) = self.plan_bulk(s, &picked, &ask, &mut d)?;
        let decision = d.id().to_string();
        match self.commit(&mut st, d) {
            Ok(()) => {}
            Err(e) if e.error_code() == ErrorCode::Conflict => {
                drop(st);
                return self.decide_each(&sid, &picked, &ask, &decision);
            }
            Err(e) => return Err(e),
        }
        let s = &st.suggestions[&sid];
        let done: Vec<serde_json::Value> = done
            .iter()
            .map(|&i| serde_json::json!({"hunk_id": s.hunks[i].id, "state": s.hunks[i].state}))
            .collect();
        Ok(serde_json::json!({
            "suggestion_id": sid,
            "decided": done,
            "failed": failed,
            "remaining_hunks": s.hunks.len() - s.reviewed_count(),
        }))
    }

    /// Plan a bulk decision into `d`: the hunks that will be decided, and those that conflict
    /// (recorded in `d` as conflicts) with their errors.
    fn plan_bulk(
        &self,
        s: &Suggestion,
        picked: &[usize],
        ask: &Ask,
        d: &mut Decision,
    ) -> Result<(Vec<usize>, Vec<serde_json::Value>), AppError> {
        let root = self.checkout()?;
        let mut overlay = Overlay::for_bulk();
        let mut ops = Vec::new();
        let mut counts = Counts::of(s);
        // Line shifts of the hunks this decision applies, per file: (base start, delta).
        let mut shifts: BTreeMap<&str, Vec<(usize, isize)>> = BTreeMap::new();
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        // A path's hunks before those of the paths below it (by path, each file's hunks in
        // their order): a symlink the run replaced with a directory is removed before the
        // files in that directory are planned (see [`Overlay::removes_above`]).
        let mut picked = picked.to_vec();
        picked.sort_by(|&a, &b| s.hunks[a].file.cmp(&s.hunks[b].file));
        for i in picked {
            let rec = &s.hunks[i];
            let planned = if ask.action.forward() {
                let start = rec.patch.as_ref().map(|p| p.old_start).unwrap_or(0);
                let offset = Self::offset_for(s, rec)
                    + shifts.get(rec.file.as_str()).map_or(0, |v| {
                        v.iter().filter(|(at, _)| *at < start).map(|(_, d)| d).sum()
                    });
                let hunk = rec.patch.as_ref();
                match plan_forward_over(&overlay, &root, self.store(), rec, hunk, offset, false) {
                    Ok(plan) => {
                        for op in &plan.ops {
                            overlay
                                .record(self.store(), &root, op)
                                .map_err(|e| AppError::failed("reading the checkout", e))?;
                        }
                        if let Some(a) = &plan.applied {
                            shifts
                                .entry(&rec.file)
                                .or_default()
                                .push((start, a.delta()));
                        }
                        (HunkState::Accepted, plan, AppliedAction::Accepted)
                    }
                    Err(PlanError::Conflict(msg)) => {
                        let (change, line, event) = conflict_parts(s, i, ask, &msg);
                        d.change(change).line(line, event);
                        let e = AppError::conflict(ErrorCode::Conflict, msg);
                        failed.push(serde_json::json!({"hunk_id": rec.id, "error": e.to_string()}));
                        continue;
                    }
                    Err(e) => return Err(AppError::failed("planning the hunks", e)),
                }
            } else {
                (
                    HunkState::Rejected,
                    apply::Plan::default(),
                    AppliedAction::Rejected,
                )
            };
            let (plan_ops, change, line, event) =
                step_parts(s, i, ask, &None, planned, &mut counts);
            ops.extend(plan_ops);
            d.change(change).line(line, event);
            done.push(i);
        }
        let mut ops = merge_ops(ops);
        overlay.settle(self.store(), &mut ops)?;
        d.ops(ops)
            .event(Hub::status_event(s, counts.reviewed, counts.applied));
        Ok((done, failed))
    }

    /// The hunks of a bulk decision one at a time (each its own transaction, sharing the bulk
    /// decision's id), as before bulk decisions were planned together.
    fn decide_each(
        &self,
        sid: &str,
        picked: &[usize],
        ask: &Ask,
        decision: &str,
    ) -> Result<serde_json::Value, AppError> {
        let ids: Vec<String> = {
            let st = self.lock()?;
            picked
                .iter()
                .map(|&i| st.suggestions[sid].hunks[i].id.clone())
                .collect()
        };
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for id in ids {
            match self.decide_as(sid, &id, ask, Some(decision)) {
                Ok(r) => done.push(serde_json::json!({"hunk_id": id, "state": r.hunk.state})),
                Err(e) => failed.push(serde_json::json!({"hunk_id": id, "error": e.to_string()})),
            }
        }
        let remaining = {
            let st = self.lock()?;
            let s = &st.suggestions[sid];
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
            return Err(AppError::conflict(
                ErrorCode::Closed,
                format!("suggestion {sid} was already completed ({how})"),
            ));
        }
        let via = match action {
            CompleteAction::Finalize => "finalize",
            CompleteAction::Discard => "discard",
        };
        let mut d = Decision::new();
        let mut reviewed = s.reviewed_count();
        for (i, rec) in s.hunks.iter().enumerate() {
            if rec.state.reviewed() {
                continue;
            }
            reviewed += 1;
            let mut line = LineRec::new(s, rec, "reject", "rejected");
            line.via = Some(via.into());
            let event = Event::HunkApplied {
                seq: 0,
                suggestion_id: sid.clone(),
                hunk_id: rec.id.clone(),
                action: AppliedAction::Rejected,
                file: rec.file.clone(),
                state: HunkState::Rejected,
                reviewed_count: reviewed,
                hunk_count: s.hunks.len(),
                lines: None,
                new_hunks: Vec::new(),
                removed_hunk_ids: Vec::new(),
            };
            d.change(HunkChange::keep(&sid, i, rec, HunkState::Rejected))
                .line(line, event);
        }
        // Pending hunks are rejected, so exactly the applied ones make the reviewed commit.
        let reviewed_commit = match action {
            CompleteAction::Finalize => match self.reviewed_commit(s) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, suggestion = %sid, "recording the reviewed checkpoint");
                    s.reviewed_commit.clone()
                }
            },
            CompleteAction::Discard => s.reviewed_commit.clone(),
        };
        d.close(Closing {
            suggestion_id: sid.clone(),
            how: via.into(),
            reviewed_commit: reviewed_commit.clone(),
        })
        .event(Event::Completed {
            seq: 0,
            suggestion_id: sid.clone(),
            action,
            reviewed_commit: reviewed_commit.clone(),
        });
        let applied = s.hunks.iter().filter(|h| h.state.applied()).count();
        let total = s.hunks.len();
        self.commit(&mut st, d)?;
        Ok(serde_json::json!({
            "suggestion_id": sid,
            "action": via,
            "applied_hunks": applied,
            "hunk_count": total,
            "reviewed_commit": reviewed_commit,
        }))
    }
}

/// What the user asked for one hunk.
pub(crate) struct Ask<'a> {
    pub(crate) action: FeedbackAction,
    pub(crate) modified_diff: Option<&'a str>,
    /// An accept of the hunk's three-way merge, computed against the file of this SHA-256.
    pub(crate) merged_against: Option<&'a str>,
    pub(crate) comment: Option<&'a str>,
    /// A line-range decision: the range of the hunk's diff lines.
    pub(crate) lines: Option<[usize; 2]>,
}

/// A planned decision on one hunk, or the conflict that stops it.
pub(crate) enum Step {
    Planned(HunkState, apply::Plan, AppliedAction),
    Conflict(String),
}

/// A destructive hunk an accept-all leaves for the reviewer to confirm: one not decided yet.
fn skipped_destructive(h: &HunkRec) -> bool {
    h.destructive && !h.state.reviewed()
}

pub(super) fn already(message: String) -> AppError {
    AppError::conflict(ErrorCode::AlreadyDecided, message.to_lowercase())
}

pub(super) fn ensure_open(s: &Suggestion) -> Result<(), AppError> {
    match &s.closed {
        Some(how) => Err(AppError::conflict(
            ErrorCode::Closed,
            format!("suggestion {} was already completed ({how})", s.id),
        )),
        None => Ok(()),
    }
}

/// Where the hunk of a publish's id `{suggestion}:{path}:{index}` is, found by a binary search
/// over the hunks in (path, index) order as a publish makes them
/// ([`crate::model::suggestion::build_hunks`]): taken only when the hunk found has exactly that
/// id, so hunks in any other order are looked for one by one instead.
pub(super) fn seek_hunk(s: &Suggestion, hunk_id: &str) -> Option<usize> {
    let rest = hunk_id.strip_prefix(s.id.as_str())?.strip_prefix(':')?;
    let (file, index) = rest.rsplit_once(':')?;
    let index: usize = index.parse().ok()?;
    let at = s
        .hunks
        .partition_point(|h| (h.file.as_str(), h.index) < (file, index));
    (s.hunks.get(at)?.id == hunk_id).then_some(at)
}

/// A hunk by id, or by the shorthands within a suggestion: `<file>:<index>` or its 0-based
/// position.
pub(super) fn find_hunk(s: &Suggestion, hunk_id: &str) -> Result<usize, AppError> {
    seek_hunk(s, hunk_id)
        .or_else(|| s.hunks.iter().position(|h| h.id == hunk_id))
        .or_else(|| {
            s.hunks
                .iter()
                .position(|h| hunk_id == format!("{}:{}", h.file, h.index))
                .or_else(|| hunk_id.parse::<usize>().ok().filter(|i| *i < s.hunks.len()))
        })
        .ok_or_else(|| AppError::not_found(format!("suggestion {} has no hunk {hunk_id:?}", s.id)))
}

/// The user's own version of the hunk (`modify`), checked against it.
fn modified_hunk(ask: &Ask, rec: &HunkRec) -> Result<Option<Hunk>, AppError> {
    if ask.action != FeedbackAction::Modify {
        if ask.modified_diff.is_some() {
            return Err(AppError::bad_request(format!(
                "modifiedDiff is only allowed with action \"modify\", not {:?}",
                ask.action.word()
            )));
        }
        return Ok(None);
    }
    let text = ask
        .modified_diff
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| {
            AppError::bad_request(
                "action \"modify\" needs modifiedDiff (modified_diff over HTTP)".into(),
            )
        })?;
    parse_modified(text, rec).map(Some)
}

/// Parse the user's edited diff for one hunk: a single hunk, optionally with file headers that
/// must name the hunk's own file.
fn parse_modified(text: &str, rec: &HunkRec) -> Result<Hunk, AppError> {
    if !matches!(
        rec.kind,
        HunkKind::Modify | HunkKind::Create | HunkKind::Delete
    ) {
        return Err(AppError::bad_request(
            format!(
                "hunk {} is a {:?} change; it can be accepted or rejected, not modified",
                rec.id, rec.kind
            )
            .to_lowercase(),
        ));
    }
    let hunk = parse_one_hunk(text, &rec.file).map_err(|e| {
        AppError::bad_request(match e {
            OneHunkError::OtherFile(p) => format!(
                "modifiedDiff names file {p:?} but hunk {} is in {:?}",
                rec.id, rec.file
            ),
            OneHunkError::Parse(e) => format!("modifiedDiff: {e}"),
            OneHunkError::Count(n) => {
                format!("modifiedDiff must hold exactly one hunk, found {n}")
            }
        })
    })?;
    if crate::decide::merge::holds_markers(&hunk) {
        return Err(AppError::bad_request(
            "modifiedDiff still holds the merge's conflict markers (<<<<<<< yours, >>>>>>> agent): keep the lines you want and remove the markers".into(),
        ));
    }
    Ok(hunk)
}

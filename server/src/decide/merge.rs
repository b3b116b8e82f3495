//! Three-way landing of a stale hunk: when a hunk's old lines are no longer in the user's file
//! exactly, the hub merges three versions of the file — the run's base (the hunk's `old` side,
//! in the checkpoint store), the user's file as it is now, and the base with only this hunk
//! applied — with gitoxide's blob merge, which is git's `merge-file` algorithm.
//!
//! The agent's side differs from the base only in this hunk's lines, so whatever the user
//! changed elsewhere in the file (other hunks of the run already applied, edits of their own)
//! comes out as it is: the merge touches the hunk's region only, and its result is shown as
//! one hunk of a diff against the user's file now. A clean merge lands only on an accept that
//! names the file it was computed against (its SHA-256, `merged_against`); a merge with
//! conflict markers lands only as a modify, of what the user saved.

use gix_merge::blob::builtin_driver::text::{Conflict, ConflictStyle, Labels, Options};
use gix_merge::blob::Resolution;
use hunkgate_patch::{apply_hunk, diff_hunks, split_lines, Hunk, HunkLine};

use crate::decide::apply::{read_cur, Plan, PlanError};
use crate::decide::review::{Ask, Step};
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::fileop::{sha, Cur, FileOp, Fp, Op};
use crate::model::suggestion::{HunkRec, Suggestion, CONTEXT};
use crate::protocol::{
    AppliedAction, ErrorCode, FeedbackAction, HunkKind, HunkMerge, HunkState, MergeOutcome,
};

/// The conflict markers' labels: the user's side, the run's base, the agent's side (in the
/// order `git merge-file -L yours -L base -L agent` takes them).
pub const LABELS: [&str; 3] = ["yours", "base", "agent"];

/// A hunk merged into the user's file.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// The whole file after the merge.
    pub text: String,
    /// The merged change: one hunk against the user's file now.
    pub hunk: Hunk,
    pub outcome: MergeOutcome,
}

impl Merged {
    /// The merge as the reviewer sees it, naming `current` (the file it was computed against).
    pub fn view(&self, current: &[u8]) -> HunkMerge {
        HunkMerge {
            outcome: self.outcome,
            diff: self.hunk.to_unified(),
            merged_against: sha(current),
        }
    }
}

/// Merge `current` (the user's file), `base` (the run's) and `agent`, as `git merge-file -p
/// -L yours -L base -L agent current base agent` does: the merged text, and whether conflict
/// markers are in it.
pub fn merge_texts(current: &str, base: &str, agent: &str) -> (String, MergeOutcome) {
    let mut input = imara_diff::InternedInput::default();
    let mut out = Vec::new();
    let [yours, ancestor, other] = LABELS;
    let labels = Labels {
        ancestor: Some(ancestor.into()),
        current: Some(yours.into()),
        other: Some(other.into()),
    };
    let options = Options {
        conflict: Conflict::Keep {
            style: ConflictStyle::Merge,
            marker_size: std::num::NonZeroU8::new(Conflict::DEFAULT_MARKER_SIZE)
                .unwrap_or(std::num::NonZeroU8::MIN),
        },
        ..Options::default()
    };
    let resolution = gix_merge::blob::builtin_driver::text(
        &mut out,
        &mut input,
        labels,
        current.as_bytes(),
        base.as_bytes(),
        agent.as_bytes(),
        options,
    );
    let outcome = match resolution {
        Resolution::Conflict => MergeOutcome::Conflicted,
        Resolution::Complete | Resolution::CompleteWithAutoResolvedConflict => MergeOutcome::Clean,
    };
    // Every input is UTF-8 and the markers are ASCII, and the merge cuts only at line ends.
    (String::from_utf8_lossy(&out).into_owned(), outcome)
}

/// Files are merged up to this size (the run's base and the user's file together): a merge
/// diffs both against the base while the hub's state is locked, and one accept must not hold
/// it for long. A bigger stale hunk is a conflict without a merge.
pub const MERGE_CAP: usize = 16 << 20;

/// Merge `hunk` (a hunk of `base`, the run's version of the file) into `current`. None when
/// there is nothing to merge: the files are over [`MERGE_CAP`], the hunk does not apply to its
/// own base (never so for a hunk the hub made), or the merge leaves the file as it is (the
/// change is in it already).
pub fn merge_hunk(base: &str, hunk: &Hunk, current: &str) -> Option<Merged> {
    if base.len().saturating_add(current.len()) > MERGE_CAP {
        return None;
    }
    let agent = apply_hunk(base, hunk, 0).ok()?.text;
    let (text, outcome) = merge_texts(current, base, &agent);
    let hunk = one_hunk(current, &text)?;
    Some(Merged {
        text,
        hunk,
        outcome,
    })
}

/// The change from `old` to `new` as one hunk (with git's three lines of context): the hunks
/// of their diff joined, the lines between them as context. None when they are the same.
pub fn one_hunk(old: &str, new: &str) -> Option<Hunk> {
    let hunks = diff_hunks(old, new, CONTEXT);
    let mut hunks = hunks.into_iter();
    let mut joined = hunks.next()?;
    let old_lines = split_lines(old);
    for next in hunks {
        // Both are 1-based and non-empty on the old side or placed after a line; the lines
        // between them are unchanged, so they read the same on both sides.
        let end = joined.old_start + joined.old_len;
        let start = next.old_start.max(end);
        let between = old_lines.get(end.saturating_sub(1)..start.saturating_sub(1));
        for line in between.unwrap_or_default() {
            joined.lines.push(HunkLine::Context((*line).to_string()));
        }
        let gap = start - end;
        joined.old_len += gap + next.old_len;
        joined.new_len += gap + next.new_len;
        joined.lines.extend(next.lines);
    }
    Some(joined)
}

/// Does `h` add a line that is one of the merge's labelled conflict markers (`<<<<<<< yours`,
/// `>>>>>>> agent`, with any line ending)? A modify that still holds one was not resolved. A
/// bare `=======` is not looked at: text files have such lines of their own (a Markdown
/// heading's underline).
pub fn holds_markers(h: &Hunk) -> bool {
    let [yours, _, agent] = LABELS;
    let open = format!("<<<<<<< {yours}");
    let close = format!(">>>>>>> {agent}");
    h.lines.iter().any(|l| match l {
        HunkLine::Add(t) => {
            let t = t.trim_end_matches(['\n', '\r']);
            t == open || t == close
        }
        _ => false,
    })
}

/// The user's file now and the three-way merge of `rec` into it, for a line hunk of a file
/// that exists on both sides (`modify`). None when there is nothing to merge: another kind of
/// hunk, a file that is not text any more or is gone, or a merge that changes nothing.
pub fn stale_merge(
    root: &hunkgate_sandbox::beneath::Beneath,
    store: &hunkgate_sandbox::store::Store,
    rec: &HunkRec,
) -> Result<Option<(Cur, Merged)>, PlanError> {
    let (HunkKind::Modify, Some(hunk), Some(old)) = (rec.kind, rec.patch.as_ref(), &rec.old) else {
        return Ok(None);
    };
    let cur = read_cur(root, &rec.file)?;
    let Cur::File { bytes, .. } = &cur else {
        return Ok(None);
    };
    let (Ok(current), Some(base)) = (
        std::str::from_utf8(bytes),
        hunkgate_patch::into_text(store.read_blob(old.oid)?),
    ) else {
        return Ok(None);
    };
    Ok(merge_hunk(&base, hunk, current).map(|m| (cur, m)))
}

/// The write that lands a clean merge: `merged` over `cur` (the file it was computed against,
/// which the write checks is still there), keeping the file's executable bit.
pub fn merged_write(
    store: &hunkgate_sandbox::store::Store,
    path: &str,
    cur: &Cur,
    merged: &Merged,
) -> Result<FileOp, PlanError> {
    let Cur::File { bytes, exec } = cur else {
        return crate::decide::apply::conflict(format!("{path} is no longer a file"));
    };
    let new = merged.text.as_bytes();
    Ok(FileOp {
        path: path.to_string(),
        op: Op::Write {
            oid: store.write_blob(new)?.to_string(),
            exec: *exec,
            perm: None,
        },
        pre: Fp::of(cur),
        post: Fp::File {
            sha256: sha(new),
            exec: *exec,
        },
        pre_oid: Some(store.write_blob(bytes)?.to_string()),
    })
}

impl Hub {
    /// Land the clean merge of hunk `idx` that an accept names by the file it was computed
    /// against: planned only while the file is still that one (then the write checks it once
    /// more); otherwise the conflict that makes the hunk merge again (see
    /// [`Hub::merge_for_conflict`]).
    pub(crate) fn plan_merged(
        &self,
        s: &Suggestion,
        idx: usize,
        against: &str,
    ) -> Result<Step, AppError> {
        let rec = &s.hunks[idx];
        if rec.state.reviewed() {
            return Err(AppError::conflict(
                ErrorCode::AlreadyDecided,
                format!(
                    "hunk {} is already {:?}; undo it first to decide again",
                    rec.id, rec.state
                )
                .to_lowercase(),
            ));
        }
        let root = self.checkout()?;
        let merged = match stale_merge(&root, self.store(), rec) {
            Ok(m) => m,
            Err(PlanError::Conflict(msg)) => return Ok(Step::Conflict(msg)),
            Err(e) => return Err(AppError::failed("merging the hunk", e)),
        };
        let Some((cur, m)) = merged else {
            return Ok(Step::Conflict(format!(
                "{}: there is no three-way merge of hunk {} to accept (the file is not a text file any more, or already holds the change)",
                rec.file, rec.id
            )));
        };
        let shown = m.view(cur_bytes(&cur));
        if shown.merged_against != against {
            return Ok(Step::Conflict(format!(
                "{} changed since the merge you accepted was computed (mergedAgainst {against})",
                rec.file
            )));
        }
        if m.outcome == MergeOutcome::Conflicted {
            // Recorded like any conflict, so that every client is told.
            return Ok(Step::Conflict(format!(
                "{}: the merge has conflict markers and cannot be accepted as it is",
                rec.file
            )));
        }
        let op = merged_write(self.store(), &rec.file, &cur, &m)
            .map_err(|e| AppError::failed("planning the merge", e))?;
        let plan = Plan {
            ops: vec![op],
            applied: Some(m.hunk),
            perm: None,
            merge: Some(shown),
        };
        Ok(Step::Planned(
            HunkState::Accepted,
            plan,
            AppliedAction::Accepted,
        ))
    }

    /// The merge an accept that found hunk `idx` stale shows the reviewer, and the conflict
    /// message saying what to do with it. Only accepts merge (a modify is the user's own
    /// version, checked as typed); no merge leaves the message as it is.
    pub(crate) fn merge_for_conflict(
        &self,
        s: &Suggestion,
        idx: usize,
        ask: &Ask,
        msg: String,
    ) -> (Option<HunkMerge>, String) {
        if ask.action != FeedbackAction::Accept {
            return (None, msg);
        }
        let merged = self.checkout().ok().and_then(|root| {
            stale_merge(&root, self.store(), &s.hunks[idx])
                .ok()
                .flatten()
        });
        let Some((cur, m)) = merged else {
            return (None, msg);
        };
        let shown = m.view(cur_bytes(&cur));
        let what = match m.outcome {
            MergeOutcome::Clean => format!(
                "merged three ways with your file, cleanly: review the merged diff and accept it with mergedAgainst {}",
                shown.merged_against
            ),
            MergeOutcome::Conflicted => "merged three ways with your file, with conflicts: resolve the conflict markers of the merged diff with modify".to_string(),
        };
        (Some(shown), format!("{msg}; {what}"))
    }
}

/// The bytes of a file read from the checkout (empty for anything else).
fn cur_bytes(cur: &Cur) -> &[u8] {
    match cur {
        Cur::File { bytes, .. } => bytes,
        _ => &[],
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;

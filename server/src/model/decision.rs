//! A decision as the journal keeps it: the file operations, the hunk-state deltas and the
//! feedback lines, each no bigger than what the decision changed. A suggestion is journaled
//! whole once, when it is published; after that every decision records only its deltas, so a
//! single-hunk decision costs the same on a 10-hunk and a 1,000-hunk suggestion.
//!
//! May import: `crate::protocol`, `crate::model`.

use std::collections::BTreeMap;

use hunkgate_patch::Hunk;
use serde::{Deserialize, Serialize};

use crate::model::feedback::FeedbackRecord;
use crate::model::fileop::FileOp;
use crate::model::suggestion::{HunkRec, Suggestion};
use crate::protocol::{HunkMerge, HunkState};

/// The reviewable fields of one hunk after a decision. `state`, `applied` and `conflict` are
/// the new values; `comment` and `perm` change only when set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HunkChange {
    pub suggestion_id: String,
    /// The hunk's position in its suggestion (hunks never move); `hunk_id` guards it.
    pub index: usize,
    pub hunk_id: String,
    pub state: HunkState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Box<Hunk>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// The hunk's three-way merge after the decision (a new value, like `conflict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<HunkMerge>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perm: Option<u32>,
    /// The range a line-range decision decided (the new value, like `state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<[usize; 2]>,
}

impl HunkChange {
    /// The change that sets `rec` (hunk `index` of suggestion `sid`) to `state`, keeping
    /// everything else as it is.
    pub fn keep(sid: &str, index: usize, rec: &HunkRec, state: HunkState) -> Self {
        HunkChange {
            suggestion_id: sid.to_string(),
            index,
            hunk_id: rec.id.clone(),
            state,
            applied: rec.applied.clone(),
            conflict: rec.conflict.clone(),
            merge: rec.merge.clone(),
            comment: None,
            perm: None,
            lines: rec.lines,
        }
    }

    pub fn apply_to(&self, rec: &mut HunkRec) {
        rec.state = self.state;
        rec.applied = self.applied.clone();
        rec.conflict = self.conflict.clone();
        rec.merge = self.merge.clone();
        rec.lines = self.lines;
        if self.comment.is_some() {
            rec.comment = self.comment.clone();
        }
        if self.perm.is_some() {
            rec.perm = self.perm;
        }
    }
}

/// A suggestion closed by `complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Closing {
    pub suggestion_id: String,
    /// "finalize" or "discard".
    pub how: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewed_commit: Option<String>,
}

/// One feedback line, without what the suggestion already holds (the agent's diff, the prompt,
/// the commits): [`LineRec::expand`] makes the full [`FeedbackRecord`] from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineRec {
    pub ts: String,
    pub suggestion_id: String,
    pub hunk_id: String,
    pub action: String,
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_diff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_diff: Option<String>,
    pub lines: Option<[usize; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_diff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl LineRec {
    pub fn new(s: &Suggestion, rec: &HunkRec, action: &str, outcome: &str) -> Self {
        LineRec {
            ts: crate::model::now(),
            suggestion_id: s.id.clone(),
            hunk_id: rec.id.clone(),
            action: action.to_string(),
            outcome: outcome.to_string(),
            via: None,
            comment: None,
            modified_diff: None,
            merged_diff: None,
            lines: None,
            applied_diff: None,
            error: None,
        }
    }

    /// The feedback line, with the suggestion's own fields filled in (`seq` 0 until the
    /// line's event is numbered).
    pub fn expand(&self, decision: &str, s: &Suggestion) -> FeedbackRecord {
        let rec = s.hunk(&self.hunk_id);
        FeedbackRecord {
            ts: self.ts.clone(),
            seq: 0,
            decision_id: decision.to_string(),
            suggestion_id: s.id.clone(),
            run_id: s.run_id.clone(),
            hunk_id: self.hunk_id.clone(),
            file: rec.map(|r| r.file.clone()).unwrap_or_default(),
            action: self.action.clone(),
            outcome: self.outcome.clone(),
            via: self.via.clone(),
            comment: self.comment.clone(),
            kind: rec
                .and_then(|r| serde_json::to_value(r.kind).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            diff: rec.map(HunkRec::diff_text).unwrap_or_default(),
            modified_diff: self.modified_diff.clone(),
            merged_diff: self.merged_diff.clone(),
            lines: self.lines,
            applied_diff: self.applied_diff.clone(),
            error: self.error.clone(),
            base_commit: s.base_commit.clone(),
            run_commit: s.run_commit.clone(),
            agent: s.agent.clone(),
            prompt: s.prompt.clone(),
        }
    }

    /// The journal's form of a full feedback line (reading older journals).
    pub fn from_record(f: &FeedbackRecord) -> Self {
        LineRec {
            ts: f.ts.clone(),
            suggestion_id: f.suggestion_id.clone(),
            hunk_id: f.hunk_id.clone(),
            action: f.action.clone(),
            outcome: f.outcome.clone(),
            via: f.via.clone(),
            comment: f.comment.clone(),
            modified_diff: f.modified_diff.clone(),
            merged_diff: f.merged_diff.clone(),
            lines: f.lines,
            applied_diff: f.applied_diff.clone(),
            error: f.error.clone(),
        }
    }
}

/// A decision's journal record (`prepare`): written and fsynced before the checkout changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRec {
    pub decision: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<FileOp>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<HunkChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closings: Vec<Closing>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<LineRec>,
    /// Hunks taken out of their suggestions (the rest of a line-range decision, when that
    /// decision is undone), by their position before the decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drops: Vec<HunkRef>,
    /// Hunks added to their suggestions (the rest of a line-range decision), each at its
    /// position once the drops are done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adds: Vec<HunkAdd>,
}

/// A hunk at a position of its suggestion; `hunk_id` guards the position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HunkRef {
    pub suggestion_id: String,
    pub index: usize,
    pub hunk_id: String,
}

/// A hunk to insert at `index` of its suggestion, whole (it is journaled only here).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HunkAdd {
    pub suggestion_id: String,
    pub index: usize,
    pub hunk: HunkRec,
}

impl PartialEq for HunkAdd {
    fn eq(&self, other: &Self) -> bool {
        // A hunk record has no equality of its own; its journal form is what counts.
        self.suggestion_id == other.suggestion_id
            && self.index == other.index
            && serde_json::to_value(&self.hunk).ok() == serde_json::to_value(&other.hunk).ok()
    }
}

/// Why a decision's deltas do not fit the state they are applied to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("decision {decision}: {message}")]
pub struct Mismatch {
    pub decision: String,
    pub message: String,
}

impl DecisionRec {
    /// Check that every delta names a hunk that exists, without changing anything.
    pub fn check(&self, suggestions: &BTreeMap<String, Suggestion>) -> Result<(), Mismatch> {
        let bad = |message: String| Mismatch {
            decision: self.decision.clone(),
            message,
        };
        for c in &self.changes {
            let s = suggestions
                .get(&c.suggestion_id)
                .ok_or_else(|| bad(format!("no suggestion {}", c.suggestion_id)))?;
            match s.hunks.get(c.index) {
                Some(h) if h.id == c.hunk_id => {}
                _ => {
                    return Err(bad(format!(
                        "suggestion {} has no hunk {} at {}",
                        c.suggestion_id, c.hunk_id, c.index
                    )))
                }
            }
        }
        for c in &self.closings {
            if !suggestions.contains_key(&c.suggestion_id) {
                return Err(bad(format!("no suggestion {}", c.suggestion_id)));
            }
        }
        self.check_hunk_set(suggestions).map_err(bad)
    }

    /// Check the drops and adds: a dropped hunk is where it is said to be, and each add's
    /// position and id fit its suggestion as the drops (and the adds before it) leave it.
    fn check_hunk_set(&self, suggestions: &BTreeMap<String, Suggestion>) -> Result<(), String> {
        let mut len: BTreeMap<&str, usize> = BTreeMap::new();
        for d in &self.drops {
            let s = suggestions
                .get(&d.suggestion_id)
                .ok_or_else(|| format!("no suggestion {}", d.suggestion_id))?;
            if s.hunks.get(d.index).is_none_or(|h| h.id != d.hunk_id) {
                return Err(format!(
                    "suggestion {} has no hunk {} at {} to drop",
                    d.suggestion_id, d.hunk_id, d.index
                ));
            }
            *len.entry(&d.suggestion_id).or_insert(s.hunks.len()) -= 1;
        }
        for a in &self.adds {
            let s = suggestions
                .get(&a.suggestion_id)
                .ok_or_else(|| format!("no suggestion {}", a.suggestion_id))?;
            let n = len.entry(&a.suggestion_id).or_insert(s.hunks.len());
            let dropped = |id: &str| self.drops.iter().any(|d| d.hunk_id == id);
            if a.index > *n || s.hunks.iter().any(|h| h.id == a.hunk.id && !dropped(&h.id)) {
                return Err(format!(
                    "suggestion {} cannot take hunk {} at {}",
                    a.suggestion_id, a.hunk.id, a.index
                ));
            }
            *n += 1;
        }
        Ok(())
    }

    /// Apply the deltas: all of them, or (on a mismatch) none.
    pub fn apply(&self, suggestions: &mut BTreeMap<String, Suggestion>) -> Result<(), Mismatch> {
        self.check(suggestions)?;
        for c in &self.changes {
            if let Some(h) = suggestions
                .get_mut(&c.suggestion_id)
                .and_then(|s| s.hunks.get_mut(c.index))
            {
                c.apply_to(h);
            }
        }
        let mut drops: Vec<&HunkRef> = self.drops.iter().collect();
        drops.sort_by_key(|d| std::cmp::Reverse(d.index));
        for d in drops {
            if let Some(s) = suggestions.get_mut(&d.suggestion_id) {
                s.hunks.remove(d.index);
            }
        }
        for a in &self.adds {
            if let Some(s) = suggestions.get_mut(&a.suggestion_id) {
                s.hunks.insert(a.index, a.hunk.clone());
            }
        }
        for c in &self.closings {
            if let Some(s) = suggestions.get_mut(&c.suggestion_id) {
                s.closed = Some(c.how.clone());
                if c.reviewed_commit.is_some() {
                    s.reviewed_commit = c.reviewed_commit.clone();
                }
            }
        }
        Ok(())
    }

    /// The deltas between `before` and `after` (turning an older journal's whole-suggestion
    /// record into this form).
    pub fn between(before: &Suggestion, after: &Suggestion) -> Vec<HunkChange> {
        after
            .hunks
            .iter()
            .enumerate()
            .filter(|(i, h)| {
                before.hunks.get(*i).is_none_or(|b| {
                    b.state != h.state
                        || b.applied != h.applied
                        || b.conflict != h.conflict
                        || b.merge != h.merge
                        || b.comment != h.comment
                        || b.perm != h.perm
                        || b.lines != h.lines
                })
            })
            .map(|(i, h)| HunkChange {
                suggestion_id: after.id.clone(),
                index: i,
                hunk_id: h.id.clone(),
                state: h.state,
                applied: h.applied.clone(),
                conflict: h.conflict.clone(),
                merge: h.merge.clone(),
                comment: h.comment.clone(),
                perm: h.perm,
                lines: h.lines,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HunkKind;

    fn hunk(id: &str, state: HunkState) -> HunkRec {
        HunkRec {
            id: id.into(),
            state,
            ..HunkRec::pending("a.txt", HunkKind::Modify, None)
        }
    }

    fn suggestion(n: usize) -> Suggestion {
        Suggestion {
            id: "s1".into(),
            run_id: "r1".into(),
            description: "d".into(),
            base_commit: "b".into(),
            run_commit: "c".into(),
            change_id: None,
            created_at: "t".into(),
            agent: Some("agent".into()),
            prompt: Some("a long prompt ".repeat(100)),
            hunks: (0..n)
                .map(|i| hunk(&format!("h{i}"), HunkState::Pending))
                .collect(),
            closed: None,
            reviewed_commit: None,
            skipped: Vec::new(),
            checks: None,
            diagnostics: Vec::new(),
        }
    }

    fn decision_on(s: &Suggestion, i: usize) -> DecisionRec {
        let mut c = HunkChange::keep(&s.id, i, &s.hunks[i], HunkState::Accepted);
        c.comment = Some("ok".into());
        DecisionRec {
            decision: "d1".into(),
            ops: Vec::new(),
            changes: vec![c],
            closings: Vec::new(),
            lines: vec![LineRec::new(s, &s.hunks[i], "accept", "applied")],
            drops: Vec::new(),
            adds: Vec::new(),
        }
    }

    #[test]
    fn a_decisions_record_does_not_grow_with_its_suggestion() {
        let small = suggestion(10);
        let large = suggestion(1000);
        let a = serde_json::to_vec(&decision_on(&small, 3)).unwrap().len();
        let b = serde_json::to_vec(&decision_on(&large, 3)).unwrap().len();
        assert_eq!(a, b);
        assert!(a < 1024, "{a} bytes");
    }

    #[test]
    fn deltas_apply_all_or_nothing() {
        let mut map = BTreeMap::new();
        map.insert("s1".to_string(), suggestion(3));
        let ok = decision_on(&map["s1"], 1);
        ok.apply(&mut map).unwrap();
        assert_eq!(map["s1"].hunks[1].state, HunkState::Accepted);
        assert_eq!(map["s1"].hunks[1].comment.as_deref(), Some("ok"));

        let mut bad = decision_on(&map["s1"], 2);
        bad.changes.push(HunkChange {
            hunk_id: "nope".into(),
            ..bad.changes[0].clone()
        });
        let err = bad.apply(&mut map).unwrap_err();
        assert!(err.message.contains("no hunk nope"), "{err}");
        assert_eq!(
            map["s1"].hunks[2].state,
            HunkState::Pending,
            "nothing applied"
        );
    }

    #[test]
    fn a_closing_keeps_an_earlier_reviewed_commit_unless_it_names_one() {
        let mut map = BTreeMap::new();
        let mut s = suggestion(1);
        s.reviewed_commit = Some("old".into());
        map.insert("s1".to_string(), s);
        let rec = DecisionRec {
            decision: "d".into(),
            ops: Vec::new(),
            changes: Vec::new(),
            closings: vec![Closing {
                suggestion_id: "s1".into(),
                how: "discard".into(),
                reviewed_commit: None,
            }],
            lines: Vec::new(),
            drops: Vec::new(),
            adds: Vec::new(),
        };
        rec.apply(&mut map).unwrap();
        assert_eq!(map["s1"].closed.as_deref(), Some("discard"));
        assert_eq!(map["s1"].reviewed_commit.as_deref(), Some("old"));
    }

    #[test]
    fn a_line_expands_to_the_full_feedback_record() {
        let s = suggestion(2);
        let mut line = LineRec::new(&s, &s.hunks[1], "reject", "rejected");
        line.comment = Some("no".into());
        let f = line.expand("dec", &s);
        assert_eq!(f.decision_id, "dec");
        assert_eq!(f.hunk_id, "h1");
        assert_eq!(f.file, "a.txt");
        assert_eq!(f.kind, "modify");
        assert_eq!(f.prompt, s.prompt);
        assert_eq!(f.comment.as_deref(), Some("no"));
        assert_eq!(LineRec::from_record(&f), line);
    }

    #[test]
    fn the_deltas_between_two_states_name_only_what_changed() {
        let before = suggestion(4);
        let mut after = before.clone();
        after.hunks[2].state = HunkState::Rejected;
        after.hunks[3].comment = Some("c".into());
        let changes = DecisionRec::between(&before, &after);
        let idx: Vec<usize> = changes.iter().map(|c| c.index).collect();
        assert_eq!(idx, vec![2, 3]);
        let mut map = BTreeMap::new();
        map.insert("s1".to_string(), before);
        DecisionRec {
            decision: "d".into(),
            ops: Vec::new(),
            changes,
            closings: Vec::new(),
            lines: Vec::new(),
            drops: Vec::new(),
            adds: Vec::new(),
        }
        .apply(&mut map)
        .unwrap();
        assert_eq!(map["s1"].hunks[2].state, HunkState::Rejected);
        assert_eq!(map["s1"].hunks[3].comment.as_deref(), Some("c"));
    }
}

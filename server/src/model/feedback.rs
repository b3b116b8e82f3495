//! One line of the feedback log (`feedback.jsonl`): a decision on one hunk, self-contained for
//! the evals. The format is documented in `protocol/protocol.md` ("Feedback log").
//!
//! May import: nothing of the crate.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackRecord {
    /// RFC 3339 UTC time of the decision.
    pub ts: String,
    /// The `seq` of the event that announced the decision.
    pub seq: u64,
    /// Unique per decision; one decision can log several hunks (accept all, finalize).
    pub decision_id: String,
    pub suggestion_id: String,
    pub run_id: String,
    pub hunk_id: String,
    pub file: String,
    /// What the user asked: accept, reject, modify, undo.
    pub action: String,
    /// What happened: applied, modified, merged (a clean three-way merge of a stale hunk),
    /// rejected, undone, conflict, partial (a line range of the hunk was accepted or rejected
    /// and the rest stays pending).
    pub outcome: String,
    /// Set when the decision came from `complete` or a bulk action rather than a single hunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    pub kind: String,
    /// The agent's hunk, as reviewed.
    pub diff: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_diff: Option<String>,
    /// What landed for outcome "merged": the merged change as a diff against the user's file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_diff: Option<String>,
    /// A line-range decision (outcome "partial"): the range of `diff`'s lines decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<[usize; 2]>,
    /// What a partial accept landed, exactly (the rest of the hunk stays to be decided).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_diff: Option<String>,
    /// Why an accept did not apply (outcome "conflict").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub base_commit: String,
    pub run_commit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}

//! The `data` of command responses that are not one of the views (REST bodies carry the same
//! fields plus `"success": true`), typed for clients such as the CLI.

use serde::{Deserialize, Serialize};

use super::{CompleteAction, HunkState, HunkView, RunView, SuggestionSummary};

/// `feedback`: one decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionReply {
    pub applied: bool,
    pub remaining_hunks: usize,
    pub hunk: HunkView,
    /// What a line-range decision left to decide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_hunks: Vec<HunkView>,
    /// The hunks undoing a line-range decision took back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_hunk_ids: Vec<String>,
}

/// `feedback_all`: every pending hunk (of one file) decided, each on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkReply {
    pub suggestion_id: String,
    pub decided: Vec<BulkDecided>,
    pub failed: Vec<BulkFailed>,
    pub remaining_hunks: usize,
    /// The destructive hunks an accept-all without `confirm` left pending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_destructive: Vec<BulkSkipped>,
    /// What was left pending and how to accept it, when something was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A destructive hunk an accept-all left pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkSkipped {
    pub hunk_id: String,
    pub file: String,
    pub kind: super::HunkKind,
    /// In words: "deletes old.txt", "renames a to b", "deletes 80 lines of big.txt".
    #[serde(default)]
    pub why: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkDecided {
    pub hunk_id: String,
    pub state: HunkState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkFailed {
    pub hunk_id: String,
    pub error: String,
}

/// `complete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteReply {
    pub suggestion_id: String,
    pub action: CompleteAction,
    pub applied_hunks: usize,
    pub hunk_count: usize,
    #[serde(default)]
    pub reviewed_commit: Option<String>,
}

/// `list` / `GET /suggestions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuggestionList {
    pub suggestions: Vec<SuggestionSummary>,
}

/// `GET /runs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunList {
    pub runs: Vec<RunView>,
}

/// `POST /agent/publish`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishReply {
    pub suggestion_id: String,
    pub hunk_count: usize,
    pub files: Vec<String>,
}

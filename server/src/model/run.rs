//! Run records: a run as the hub keeps and journals it, and what an agent is told about the
//! user's decisions on a suggestion.
//!
//! May import: `crate::protocol`.

use serde::{Deserialize, Serialize};

use crate::protocol::{RunState, RunView, SuggestionView};

/// A run as the hub keeps (and journals) it: exactly what clients see.
pub type RunRec = RunView;

impl RunView {
    pub fn finished(&self) -> bool {
        !matches!(
            self.status,
            RunState::Queued | RunState::Working | RunState::WaitingForUser
        )
    }
}

/// What an agent is told about the user's decisions on one suggestion: every hunk with its
/// state, the user's comment, and — when the user modified it — the diff they applied instead.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decisions {
    pub suggestion_id: String,
    pub description: String,
    pub status: crate::protocol::SuggestionStatus,
    pub hunks: Vec<HunkDecision>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HunkDecision {
    pub hunk_id: String,
    pub file: String,
    pub state: crate::protocol::HunkState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// What the user applied instead of the agent's hunk (state `modified`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_diff: Option<String>,
    /// The agent's hunk, so a reader can tell what was turned down or changed.
    pub diff: String,
}

impl From<&SuggestionView> for Decisions {
    fn from(s: &SuggestionView) -> Self {
        Decisions {
            suggestion_id: s.id.clone(),
            description: s.description.clone(),
            status: s.status,
            hunks: s
                .hunks
                .iter()
                .map(|h| HunkDecision {
                    hunk_id: h.id.clone(),
                    file: h.file.clone(),
                    state: h.state,
                    comment: h.comment.clone(),
                    applied_diff: h.applied_diff.clone(),
                    diff: h.diff.clone(),
                })
                .collect(),
        }
    }
}

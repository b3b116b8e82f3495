//! How a built-in run's provider and model were chosen, and each move of `hybrid_auto` to the
//! remote provider (issue #60.3): on the run (`route`) for clients and the evals.

use serde::{Deserialize, Serialize};

/// The route of a built-in run: where it started and why, and where it moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteView {
    /// `local`, `remote` or `hybrid_auto`; absent when no mode was set (every provider's
    /// models were candidates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The provider and model the run started on.
    pub provider: String,
    pub model: String,
    /// Why: the asked model and who asked, or the rules' reasoning.
    pub reason: String,
    /// Moves to another provider, in order (`hybrid_auto`: at most one, to the remote).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<RouteSwitch>,
}

/// One move of a run to another provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteSwitch {
    /// `budget_exhausted`, `schema_fail`, `context_overflow` or `timeout`.
    pub trigger: String,
    /// What happened, in words ("4 invalid tool calls or failed edits").
    pub detail: String,
    /// `provider/model` before and after.
    pub from: String,
    pub to: String,
    pub at: String,
}

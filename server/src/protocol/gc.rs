//! `POST /gc`: a collection of finished work (see "Lifecycle and garbage collection" in
//! protocol.md), asked for or only described.

use serde::{Deserialize, Serialize};

/// The body of `POST /gc`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcCmd {
    /// Say what would be removed, and remove nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a collection removed (or, with `dry_run`, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    pub dry_run: bool,
    /// Finished sessions, runs and suggestions removed from the hub's state (with their
    /// history and journal records).
    pub sessions: usize,
    pub runs: usize,
    pub suggestions: usize,
    /// Run logs (`runs/<run>.log`) removed.
    pub logs: usize,
    /// Refs of the checkpoint store dropped.
    pub refs: usize,
    /// Bytes the state directory shrank by. A dry run counts the journal records and run logs
    /// that would go; the checkpoint objects they free are counted only by the real collection.
    pub bytes: u64,
    /// The state directory's size afterwards, in bytes.
    pub state_bytes: u64,
    /// The checkpoint store: `repacked`, `not needed`, or why it waits for a later collection.
    pub objects: String,
    /// Whether `feedback.jsonl` was rotated to `feedback.jsonl.1`.
    #[serde(default)]
    pub feedback_rotated: bool,
    /// Suggestions still waiting for review (never collected).
    pub pending_suggestions: usize,
}

//! What the hub keeps on disk: the journal (`state.jsonl`, the source of truth for every
//! suggestion, hunk state, run and session) and the feedback log (`feedback.jsonl`).
//!
//! Layer 2: may import `crate::protocol`, `crate::error`, `crate::model`.

pub mod feedback;
pub mod journal;

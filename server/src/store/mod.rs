//! What the hub keeps on disk: the journal (`state.jsonl`, the source of truth for every
//! suggestion, hunk state, run and session), the feedback log (`feedback.jsonl`), and the
//! boot the hub last started in (`boot-id`).
//!
//! Layer 2: may import `crate::protocol`, `crate::error`, `crate::model`.

pub mod boot;
pub mod feedback;
pub mod journal;

//! Review decisions on the user's checkout: accept, reject, modify, undo, complete; checkpoints
//! and rollback; crash recovery of a decision that was prepared but not committed.
//!
//! Layer 5: may import `protocol`, `error`, `model`, `store`, `isolation`, `config`, `hub`.

pub mod apply;
pub mod checkpoints;
pub mod commit;
pub mod execute;
pub mod finalize;
pub mod lines;
pub mod merge;
pub mod overlay;
pub mod recover;
pub mod restore;
pub mod review;
pub mod steps;

#[cfg(test)]
mod tests;

//! The hub's records: suggestions and their hunks, runs, sessions, feedback lines, file
//! operations, and the canonical chat shapes. Data and pure functions over it; no I/O beyond
//! reading blobs a caller hands in.
//!
//! Layer 1: may import `crate::protocol` only.

pub mod chat;
pub mod decision;
pub mod feedback;
pub mod fileop;
pub mod run;
pub mod session;
pub mod suggestion;
pub mod text;

/// Now, as the RFC 3339 UTC timestamp every record carries.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

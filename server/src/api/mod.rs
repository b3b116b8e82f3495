//! The hub's network face: REST and WebSocket handlers, and `run(listener, shutdown)`.
//!
//! Layer 8: may import everything but `cli`.

pub mod http;
pub mod server;
pub mod ws;

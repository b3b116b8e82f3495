//! The hub's network face: REST and WebSocket handlers over one command table, and
//! `run(listener, shutdown)`.
//!
//! Layer 10: may import everything but `mcp` and `cli`.
//!
//! - [`dispatch`]: every client command ([`crate::protocol::ClientMsg`]) carried out, once;
//! - [`ws`]: the WebSocket connection (hello, events, a response per command), over any
//!   `Sink`/`Stream`;
//! - [`handshake`]: the WebSocket opening handshake, answered over hyper's upgrade;
//! - [`http`]: the REST routes, their guard (host, origin, tokens) and thin handlers;
//! - [`server`]: opening the state dir and journal, recovery, serving until shutdown.

pub mod dispatch;
pub mod handshake;
pub mod http;
pub mod server;
pub mod ws;

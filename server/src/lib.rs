//! The hunkgate hub: review an AI agent's changes hunk by hunk before they touch your checkout.
//!
//! The binary is a thin shell over [`cli::main`]; [`server::run`] serves the hub on a listener
//! until a shutdown token fires, which is how the tests run it too.

pub mod agent_loop;
pub mod apply;
pub mod auth;
pub mod checkpoints;
pub mod cli;
pub mod client;
pub mod config;
pub mod error;
pub mod events;
pub mod feedback;
pub mod http;
pub mod hub;
pub mod isolation;
pub mod journal;
pub mod mcp;
pub mod protocol;
pub mod provider;
pub mod review;
pub mod runs;
pub mod server;
pub mod sessions;
pub mod ws;

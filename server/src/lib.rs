//! The hunkgate hub: review an AI agent's changes hunk by hunk before they touch your checkout.
//!
//! The binary is a thin shell over [`cli::main`]; [`api::server::run`] serves the hub on a
//! listener until a shutdown token fires, which is how the tests run it too.
//!
//! The crate is layered; a module imports only from the layers below it (checked by
//! `layering::tests`):
//!
//! | layer | modules | what |
//! |---|---|---|
//! | 0 | `protocol` | wire types, error codes, size limits |
//! | 1 | `error`, `model` | the error type; suggestions, hunks, runs, sessions, feedback, chat shapes |
//! | 2 | `store` | the journal and the feedback log on disk |
//! | 3 | `isolation` | how agents are isolated (modes, sandbox user) |
//! | 4 | `config` | flags > environment > file > defaults; provider and limits |
//! | 5 | `hub`, `discovery` | the shared handle, its state, the run and session registries, the event bus; the hubs' discovery records |
//! | 6 | `decide`, `sessions` | review decisions, checkpoints, rollback, recovery; sessions |
//! | 7 | `agent`, `gc` | model providers and the built-in agent's tool loop; lifecycle and garbage collection of finished work |
//! | 8 | `runs` | agent runs: snapshot, sandbox, agent, publish |
//! | 9 | `api` | REST + WebSocket, `run(listener, shutdown)` |
//! | 10 | `cli`, `mcp` | the command line, the hub client, the MCP server |

pub mod agent;
pub mod api;
pub mod cli;
pub mod config;
pub mod decide;
pub mod discovery;
pub mod error;
pub mod gc;
pub mod hub;
pub mod isolation;

pub mod model;
pub mod protocol;
pub mod runs;
pub mod sessions;
pub mod store;

#[cfg(test)]
mod layering;

//! The built-in agent: the model provider adapters and the tool loop that drives a run.
//!
//! Layer 6: may import everything below `runs`.

pub mod acp;
pub mod checker;
pub mod provider;
pub mod routing;
pub mod run_tool;
pub mod tool_loop;
pub mod tools;
pub mod wire;

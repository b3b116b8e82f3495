//! The end-to-end suite as one test binary: each module is one area of the product, run against
//! the real `hunkgate` binary (build it first: `cargo build --workspace --bins`).

mod acp;
mod bench_smoke;
mod builtin_agent;
mod checkpoints;
mod cli;
mod cli_cockpit;
mod conflict;
mod destructive;
mod discovery;
mod durability;
mod fake_llm;
mod faults;
mod feedback_log;
mod filekinds;
mod isolation;
mod jj;
mod kill_campaign;
mod lifecycle;
mod lines;
mod mcp;
mod merge;
mod nvim;
mod private_slots;
mod protocol;
mod readme;
mod real_agents;
mod real_models;
mod review;
mod runs;
mod security;
mod sensitive;
mod slots;
mod smoke;
mod user_writes;

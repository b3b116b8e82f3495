//! The agent side of hunkgate, in folders by job (each is a module; the crate root re-exports
//! every module under its old flat name, so `hunkgate_sandbox::store` is `odb::store`):
//!
//! - [`odb`]: the checkpoint store, a bare git repository only the hub writes (gix,
//!   in-process) — [`store`], and [`pack`], which writes a batch of its blobs as one pack.
//! - [`fs`]: file access confined beneath a directory, never through a symlink ([`beneath`]) —
//!   used to read the sandbox as data and to write the user's checkout.
//! - [`status`]: worktree status — stat data, git's racy rule and the stat cache
//!   ([`statcache`]); a checkout or a sandbox captured into the store as a tree ([`snapshot`]);
//!   between runs a slot holds exactly its base, and whatever else an agent left there goes
//!   ([`foreign`]); change notification (inotify, [`watch`]); the user's checkout snapshotted at
//!   the cost of what changed ([`checkout`], the hub keeps one [`checkout::CheckoutWatch`]).
//! - [`slot`]: what runs in a slot — the built-in agent's file tools, run inside the sandbox as
//!   the sandbox user ([`tools`]); each run as its own jj change ([`jj`]).
//! - [`supervise`]: command templates and agent processes (process groups, the PID-namespace
//!   init, timeouts, cancellation: [`agent`]); the agent's `PATH` under user isolation and the
//!   lookup of its program ([`agent_path`]); the [`watchdog`]; what one read-back of a sandbox
//!   may bring in ([`limits`]); the system calls no dependency wraps safely ([`supervise::os`]);
//!   what a child does between fork and exec ([`supervise::launch`]); the agent's process tree
//!   under user isolation, as the helper runs it ([`supervise::tree`]).
//!   The only folder that allows `unsafe`; the others are `#![forbid(unsafe_code)]`.
//! - [`threads`]: work shared among threads (fsyncs, `lstat`s, a read-back's reads).
//! - [`sync`]: bringing a sandbox slot to a base writing only what differs, and the stat record
//!   that lets the read-back after a run read only what the agent changed.
//! - [`workspace`]: the [`Sandbox`](workspace::Sandbox) interface and its same-user
//!   implementation.
//! - [`user`]: isolation by a separate OS user — the hub's side ([`user::UserSandbox`]).
//! - [`helper`]: `hunkgate sandbox-helper`, which runs as that user and does everything that
//!   touches its sandbox; [`wire`] is the byte stream between the two.
//!
//! Modules import only downward, in the layers of `layering.rs` (its test fails on any other
//! import): the leaves (`threads`, `wire`, `accel`, `odb::pack`, `status::watch`,
//! `supervise::os`, …) → `fs::beneath` → `odb::store` → `status::statcache` →
//! `status::snapshot`, `status::foreign` → `slot::tools`, `sync`, `status::checkout` →
//! `workspace` → `supervise::agent`, `slot::jj` → `supervise::tree` → `user`, `helper`. So
//! the wire contract is a leaf, the sandbox trait knows nothing of user isolation, and the
//! hub's side (`user`) and the helper never import each other.

// `unsafe` is denied everywhere but in supervision, the one module let have it (the others
// forbid it outright).
#![deny(unsafe_code)]

pub mod accel;
pub mod fs;
pub mod helper;
pub mod odb;
pub mod slot;
pub mod status;
#[allow(unsafe_code)]
pub mod supervise;
pub mod sync;
pub mod threads;
pub mod user;
pub mod wire;
pub mod workspace;

// The flat names every module had before the folders, kept for the code that uses them.
pub use fs::beneath;
pub use odb::{pack, store};
pub use slot::{jj, tools};
pub use status::{checkout, foreign, snapshot, statcache, watch};
pub use supervise::os::{die_on_broken_pipe, idle_priority, return_freed_memory};
pub use supervise::{agent, agent_path, limits, watchdog};
pub use threads::{
    io_threads, on_threads, streamed_on_threads, try_on_threads, STREAM_AHEAD, SYNC_THREADS,
};

pub use gix::hash::ObjectId;

#[cfg(test)]
mod both_ends;
#[cfg(test)]
mod layering;

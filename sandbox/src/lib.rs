//! The agent side of hunkgate.
//!
//! - [`beneath`]: file access confined beneath a directory, never through a symlink — used to
//!   read the sandbox as data and to write the user's checkout.
//! - [`store`]: the checkpoint store, a bare git repository only the hub writes (gix, in-process).
//! - [`snapshot`]: a checkout or a sandbox captured into the store as a tree.
//! - [`workspace`]: the [`Sandbox`](workspace::Sandbox) interface and its same-user implementation.
//! - [`agent`]: command templates and agent processes (process groups, timeouts, cancellation).
//! - [`tools`]: the built-in agent's file tools, run inside the sandbox as the sandbox user.
//! - [`jj`]: each run as its own jj change when the repository uses jj.
//! - [`user`]: isolation by a separate OS user — the hub's side ([`user::UserSandbox`]).
//! - [`helper`]: `hunkgate sandbox-helper`, which runs as that user and does everything that
//!   touches its sandbox; [`wire`] is the byte stream between the two.

pub mod agent;
pub mod beneath;
pub mod helper;
pub mod jj;
pub mod snapshot;
pub mod statcache;
pub mod store;
pub mod sync;
pub mod tools;
pub mod user;
pub mod wire;
pub mod workspace;

pub use gix::hash::ObjectId;

//! Worktree status: stat data and git's racy rule ([`statcache`]), a checkout or sandbox
//! captured into the store and read back ([`snapshot`]), what a slot holds beyond its base
//! ([`foreign`]), change notification ([`watch`], inotify) and the user's checkout snapshotted
//! under it ([`checkout`]).

#![forbid(unsafe_code)]

pub mod checkout;
pub mod foreign;
pub mod snapshot;
pub mod statcache;
pub mod watch;

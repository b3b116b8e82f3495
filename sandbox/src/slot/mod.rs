//! What runs in a sandbox slot: the built-in agent's file tools ([`tools`]) and each run as
//! its own jj change ([`jj`]).

#![forbid(unsafe_code)]

pub mod jj;
pub mod tools;

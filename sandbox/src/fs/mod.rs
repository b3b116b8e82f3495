//! Confined file access ([`beneath`]): reads and atomic, fsynced writes beneath a directory,
//! never through a symlink (`openat` with `O_NOFOLLOW` at every step).

#![forbid(unsafe_code)]

pub mod beneath;

//! File operations as decisions record them: what is at a path ([`Cur`]), a fingerprint of it
//! ([`Fp`]), and one verified operation on the checkout ([`FileOp`]) with the fingerprints before
//! and after, which is what crash recovery compares against.
//!
//! May import: nothing of the crate.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What is at a path in the checkout right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cur {
    Absent,
    File { bytes: Vec<u8>, exec: bool },
    Link(Vec<u8>),
    Other(String),
}

/// A content fingerprint: enough to tell "before", "after" and "something else" apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Fp {
    Absent,
    File { sha256: String, exec: bool },
    Link { sha256: String },
    Other,
}

pub fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Fp {
    /// Not made yet: the `pre` of a bulk decision's later step at a path, which merging the
    /// steps drops (see `decide::overlay`), and a held write's `post` until it is settled.
    /// Never journaled.
    pub(crate) fn unsettled() -> Fp {
        Fp::File {
            sha256: String::new(),
            exec: false,
        }
    }

    /// Whether this is a fingerprint not made yet ([`Fp::unsettled`]).
    pub(crate) fn is_unsettled(&self) -> bool {
        matches!(self, Fp::File { sha256, .. } | Fp::Link { sha256 } if sha256.is_empty())
    }

    pub fn of(cur: &Cur) -> Fp {
        match cur {
            Cur::Absent => Fp::Absent,
            Cur::File { bytes, exec } => Fp::of_file(bytes, *exec),
            Cur::Link(t) => Fp::Link { sha256: sha(t) },
            Cur::Other(_) => Fp::Other,
        }
    }

    /// [`Fp::of`] a regular file holding `bytes`, without owning them as a [`Cur`].
    pub fn of_file(bytes: &[u8], exec: bool) -> Fp {
        Fp::File {
            sha256: sha(bytes),
            exec,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Write the blob `oid` (already in the store, so a crash can redo it).
    Write {
        oid: String,
        exec: bool,
        /// Permission bits for a file this write creates (what the file had before a hunk
        /// removed or renamed it); None: git's 0644 / 0755.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        perm: Option<u32>,
    },
    Symlink {
        oid: String,
    },
    Remove,
    SetExec {
        exec: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOp {
    pub path: String,
    pub op: Op,
    pub pre: Fp,
    pub post: Fp,
    /// The blob holding what `pre` fingerprints (a file's bytes, a symlink's target), so the
    /// operation can be taken back when the decision cannot be committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_oid: Option<String>,
}

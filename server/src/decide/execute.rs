//! Carrying out a decision's file operations on the checkout, each verified against its
//! `pre` fingerprint immediately before the write, and taking them back when a later one fails.

use hunkgate_sandbox::beneath::{Beneath, FsError};
use hunkgate_sandbox::store::Store;

use crate::decide::apply::{conflict, read_cur, PlanError};
use crate::model::fileop::{FileOp, Fp, Op};
use crate::model::suggestion::oid;

/// Carry out planned operations in order, all or nothing: each is checked against the file as
/// it is at that moment (a write right before its rename), and when one fails the ones already
/// done are taken back, last first.
pub fn execute(root: &Beneath, store: &Store, ops: &[FileOp]) -> Result<(), ExecError> {
    for (i, op) in ops.iter().enumerate() {
        if let Err(error) = execute_one(root, store, op) {
            return match undo(root, store, &ops[..i]) {
                Ok(()) => Err(ExecError::Undone(Box::new(error))),
                Err(undo) => Err(ExecError::Stuck {
                    error: Box::new(error),
                    undo: Box::new(undo),
                }),
            };
        }
    }
    Ok(())
}

/// Why [`execute`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// Nothing of the plan stayed in the checkout.
    #[error("{0}")]
    Undone(Box<PlanError>),
    /// Some operations are done and could not be taken back.
    #[error("{error}; taking back what was already written failed too: {undo}")]
    Stuck {
        error: Box<PlanError>,
        undo: Box<PlanError>,
    },
}

/// Take back operations that were carried out, last first (each checked like any operation:
/// a file changed since is never overwritten).
pub fn undo(root: &Beneath, store: &Store, done: &[FileOp]) -> Result<(), PlanError> {
    for op in done.iter().rev() {
        let back = inverse(op).ok_or_else(|| {
            PlanError::Conflict(format!("{}: what was there before is not known", op.path))
        })?;
        execute_one(root, store, &back)?;
    }
    Ok(())
}

/// The operation that takes `op` back: from its `post` state to its `pre` state.
pub fn inverse(op: &FileOp) -> Option<FileOp> {
    let back = match (&op.op, &op.pre) {
        (Op::SetExec { .. }, Fp::File { exec, .. }) => Op::SetExec { exec: *exec },
        (_, Fp::Absent) => Op::Remove,
        (_, Fp::File { exec, .. }) => Op::Write {
            oid: op.pre_oid.clone()?,
            exec: *exec,
            perm: None,
        },
        (_, Fp::Link { .. }) => Op::Symlink {
            oid: op.pre_oid.clone()?,
        },
        (_, Fp::Other) => return None,
    };
    Some(FileOp {
        path: op.path.clone(),
        op: back,
        pre: op.post.clone(),
        post: op.pre.clone(),
        pre_oid: None,
    })
}

fn changed(path: &str) -> PlanError {
    PlanError::Conflict(format!(
        "{path} changed since the hunk was checked against it; your version was kept and nothing was written"
    ))
}

/// The fingerprint of what is at `op.path` now.
fn fp_now(root: &Beneath, path: &str) -> Result<Fp, PlanError> {
    match read_cur(root, path) {
        Err(e @ FsError::Symlink { .. }) => conflict(e.to_string()),
        other => Ok(Fp::of(&other?)),
    }
}

fn execute_one(root: &Beneath, store: &Store, op: &FileOp) -> Result<(), PlanError> {
    let blob = |s: &str| -> Result<Vec<u8>, PlanError> {
        let id = oid(s).ok_or_else(|| PlanError::Conflict(format!("corrupt object id {s}")))?;
        Ok(store.read_blob(id)?)
    };
    let path = op.path.as_str();
    let check = || -> Result<(), PlanError> {
        if fp_now(root, path)? == op.pre {
            Ok(())
        } else {
            Err(changed(path))
        }
    };
    let result = match &op.op {
        Op::Write { oid, exec, perm } => {
            let bytes = blob(oid)?;
            // The last look at the file is right before the rename, after the new content is
            // written and fsynced: a user's save made since the plan is never renamed over.
            root.write_atomic_with(path, &bytes, *exec, *perm, || {
                Ok(Fp::of(&read_cur(root, path)?) == op.pre)
            })
        }
        Op::Symlink { oid } => {
            check()?;
            root.symlink(path, &blob(oid)?)
        }
        Op::Remove => {
            check()?;
            root.remove_entry(path)
        }
        Op::SetExec { exec } => {
            check()?;
            root.set_executable(path, *exec)
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(FsError::Changed { .. }) => Err(changed(path)),
        Err(e @ FsError::Symlink { .. }) => conflict(e.to_string()),
        Err(e) => Err(e.into()),
    }
}

/// Where each operation of a journaled plan stands now: used after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpState {
    Before,
    Done,
    Neither,
}

pub fn op_state(root: &Beneath, op: &FileOp) -> Result<OpState, FsError> {
    let fp = Fp::of(&read_cur(root, &op.path)?);
    Ok(if fp == op.post {
        OpState::Done
    } else if fp == op.pre {
        OpState::Before
    } else {
        OpState::Neither
    })
}

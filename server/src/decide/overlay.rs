//! What a decision's earlier steps leave in the checkout, so a bulk decision plans each hunk of
//! a file against the file as the hunks before it left it, and then writes each file once.

use hunkgate_sandbox::store::Store;

use crate::decide::apply::PlanError;
use crate::model::fileop::{Cur, FileOp, Op};

/// The checkout as a decision's earlier operations leave it: path → what is there then.
#[derive(Debug, Default)]
pub struct Overlay(std::collections::HashMap<String, Cur>);

impl Overlay {
    /// What earlier steps leave at `path`; None when they leave it alone.
    pub(crate) fn get(&self, path: &str) -> Option<&Cur> {
        self.0.get(path)
    }

    /// Note what `op` leaves at its path.
    pub fn record(&mut self, store: &Store, op: &FileOp) -> Result<(), PlanError> {
        let blob = |oid: &str| -> Result<Vec<u8>, PlanError> {
            let id = crate::model::suggestion::oid(oid)
                .ok_or_else(|| PlanError::Conflict(format!("corrupt object id {oid}")))?;
            Ok(store.read_blob(id)?)
        };
        let now = match &op.op {
            Op::Write { oid, exec, .. } => Cur::File {
                bytes: blob(oid)?,
                exec: *exec,
            },
            Op::Symlink { oid } => Cur::Link(blob(oid)?),
            Op::Remove => Cur::Absent,
            Op::SetExec { exec } => match self.0.remove(&op.path) {
                Some(Cur::File { bytes, .. }) => Cur::File { bytes, exec: *exec },
                // Not planned over before: it is read from the checkout when needed.
                _ => return Ok(()),
            },
        };
        self.0.insert(op.path.clone(), now);
        Ok(())
    }
}

/// One operation per path where a later operation fully decides the path's content (a write,
/// a symlink, a removal): the first one's `pre` and the last one's result. So a bulk decision
/// writes each file once, and verifies it against what was there before the decision.
pub fn merge_ops(ops: Vec<FileOp>) -> Vec<FileOp> {
    let mut out: Vec<FileOp> = Vec::with_capacity(ops.len());
    for op in ops {
        let absolute = !matches!(op.op, Op::SetExec { .. });
        match out.iter_mut().rev().find(|o| o.path == op.path) {
            Some(prev) if absolute => {
                prev.op = op.op;
                prev.post = op.post;
            }
            _ => out.push(op),
        }
    }
    out
}

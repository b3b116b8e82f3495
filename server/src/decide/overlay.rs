//! What a decision's earlier steps leave in the checkout, so a bulk decision plans each hunk of
//! a file against the file as the hunks before it left it, and then writes each file once.

use std::cell::RefCell;
use std::collections::HashMap;

use hunkgate_sandbox::beneath::Beneath;
use hunkgate_sandbox::store::{blob_id, Store, StoreError};
use hunkgate_sandbox::ObjectId;

use crate::decide::apply::{read_cur, PlanError};
use crate::error::AppError;
use crate::model::fileop::{sha, Cur, FileOp, Fp, Op};
use crate::model::suggestion::oid;

/// The checkout as a decision's earlier operations leave it: path → what is there then.
///
/// A single decision's overlay is empty, and its plan keeps every content it names in the store
/// as it is made. A bulk decision's ([`Overlay::for_bulk`]) holds them instead: twenty hunks of
/// one file make twenty versions of it, of which the merged operation ([`merge_ops`]) names two
/// — what the file held before the first step, for undoing, and what the last one leaves. Only
/// those are hashed, fingerprinted and written to the store, together ([`Overlay::settle`]).
#[derive(Debug, Default)]
pub struct Overlay {
    paths: HashMap<String, Cur>,
    held: Option<Held>,
}

/// The contents a bulk decision's plans made or found, until [`Overlay::settle`].
#[derive(Debug, Default)]
struct Held {
    /// What the last step at a path made, until [`Overlay::record`] moves it to `paths`.
    made: RefCell<HashMap<String, Vec<u8>>>,
    /// What the checkout held at a path before the decision's first step there, by id.
    before: RefCell<HashMap<ObjectId, Vec<u8>>>,
}

impl Overlay {
    /// A bulk decision's overlay: the contents its plans make are held, and hashed and written
    /// only once the steps are merged (see [`Overlay::settle`]).
    pub fn for_bulk() -> Self {
        Overlay {
            paths: HashMap::new(),
            held: Some(Held::default()),
        }
    }

    /// Whether this is a bulk decision's overlay.
    pub(crate) fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// What earlier steps leave at `path`; None when they leave it alone.
    pub(crate) fn get(&self, path: &str) -> Option<&Cur> {
        self.paths.get(path)
    }

    /// Whether an earlier step removes a path above `path` (`a` or `a/b` for `a/b/c`): a
    /// symlink the run replaced with a directory, which the decision's later writes below it
    /// then create afresh.
    pub(crate) fn removes_above(&self, path: &str) -> bool {
        path.match_indices('/')
            .any(|(at, _)| matches!(self.paths.get(&path[..at]), Some(Cur::Absent)))
    }

    /// Hold `bytes`, what a step writes at `path`, for [`Overlay::record`].
    pub(crate) fn hold_made(&self, path: &str, bytes: &[u8]) {
        if let Some(held) = &self.held {
            held.made
                .borrow_mut()
                .insert(path.to_string(), bytes.to_vec());
        }
    }

    /// Hold what the checkout has at a path before the decision's first step there (`pre`),
    /// for [`Overlay::settle`] to keep in the store; its id, if it has content.
    pub(crate) fn hold_before(&self, pre: &Cur) -> Option<String> {
        let (Cur::File { bytes, .. } | Cur::Link(bytes)) = pre else {
            return None;
        };
        let id = blob_id(bytes);
        if let Some(held) = &self.held {
            held.before
                .borrow_mut()
                .entry(id)
                .or_insert_with(|| bytes.clone());
        }
        Some(id.to_string())
    }

    /// Note what `op` leaves at its path (in the checkout under `root`).
    pub fn record(&mut self, store: &Store, root: &Beneath, op: &FileOp) -> Result<(), PlanError> {
        let blob = |hex: &str| -> Result<Vec<u8>, PlanError> {
            if hex.is_empty() {
                let made = self
                    .held
                    .as_ref()
                    .and_then(|h| h.made.borrow_mut().remove(&op.path));
                return made.ok_or_else(|| {
                    PlanError::Conflict(format!("{}: the planned content is missing", op.path))
                });
            }
            let id =
                oid(hex).ok_or_else(|| PlanError::Conflict(format!("corrupt object id {hex}")))?;
            Ok(store.read_blob(id)?)
        };
        let now = match &op.op {
            Op::Write { oid, exec, .. } => Cur::File {
                bytes: blob(oid)?,
                exec: *exec,
            },
            Op::Symlink { oid } => Cur::Link(blob(oid)?),
            Op::Remove => Cur::Absent,
            // The file with the bit set, so that a later step at the path (a line hunk after
            // a mode change) writes it with the bit, not with the checkout's.
            Op::SetExec { exec } => match self.paths.get_mut(&op.path) {
                Some(Cur::File { exec: now, .. }) => {
                    *now = *exec;
                    return Ok(());
                }
                // A bit is only ever set on a file (the plan checked): nothing to note.
                Some(_) => return Ok(()),
                None => match read_cur(root, &op.path)? {
                    Cur::File { bytes, .. } => Cur::File { bytes, exec: *exec },
                    _ => return Ok(()),
                },
            },
        };
        self.paths.insert(op.path.clone(), now);
        Ok(())
    }

    /// Make `ops` (the decision's merged operations, [`merge_ops`]) whole: each write's
    /// content id and fingerprint from what its path holds after the last step, and every
    /// content they name written to the store, together (one pack when there are many). A
    /// content they name that is neither held nor in the store, or a fingerprint left
    /// unmade, is refused here, before anything is journaled or written to the checkout.
    pub fn settle(&self, store: &Store, ops: &mut [FileOp]) -> Result<(), AppError> {
        let Some(held) = &self.held else {
            return Ok(());
        };
        let stored = |e: StoreError| AppError::failed("keeping the decision's files", e);
        let before = held.before.borrow();
        let mut batch = store.batch();
        for op in ops.iter_mut() {
            if let Some(hex) = &op.pre_oid {
                let id = id_of(hex)?;
                match before.get(&id) {
                    Some(bytes) => {
                        batch.write_blob(bytes).map_err(stored)?;
                    }
                    None if store.has_object(id) => {}
                    None => return Err(unsettled(&op.path, "what it held before")),
                }
            }
            if let Op::Write { oid: hex, exec, .. } = &mut op.op {
                if hex.is_empty() {
                    let Some(Cur::File { bytes, exec: now }) = self.paths.get(&op.path) else {
                        return Err(unsettled(&op.path, "its new content"));
                    };
                    if now != exec {
                        return Err(unsettled(&op.path, "its executable bit"));
                    }
                    *hex = batch.write_blob(bytes).map_err(stored)?.to_string();
                    op.post = Fp::File {
                        sha256: sha(bytes),
                        exec: *exec,
                    };
                }
            }
            if op.pre.is_unsettled() || op.post.is_unsettled() {
                return Err(unsettled(&op.path, "a fingerprint"));
            }
        }
        batch.finish().map_err(stored)
    }
}

fn id_of(hex: &str) -> Result<ObjectId, AppError> {
    oid(hex).ok_or_else(|| {
        AppError::internal(format!("a planned operation names {hex:?}, no object id"))
    })
}

/// A merged operation that [`Overlay::settle`] cannot make whole: a hub bug, refused before
/// anything is written.
fn unsettled(path: &str, what: &str) -> AppError {
    AppError::internal(format!(
        "the bulk decision's operation on {path} lacks {what}; nothing was changed"
    ))
}

/// One operation per path where a later operation fully decides the path's content (a write,
/// a symlink, a removal): the first one's `pre` and the last one's result; an executable bit
/// set after a write is folded into it. So a bulk decision writes each file once, and verifies
/// it against what was there before the decision.
pub fn merge_ops(ops: Vec<FileOp>) -> Vec<FileOp> {
    let mut out: Vec<FileOp> = Vec::with_capacity(ops.len());
    for op in ops {
        let set_exec = match op.op {
            Op::SetExec { exec } => Some(exec),
            _ => None,
        };
        let Some(prev) = out.iter_mut().rev().find(|o| o.path == op.path) else {
            out.push(op);
            continue;
        };
        match set_exec {
            None => {
                prev.op = op.op;
                prev.post = op.post;
            }
            Some(exec) => {
                if let (Op::Write { exec: wrote, .. }, Fp::File { exec: after, .. }) =
                    (&mut prev.op, &mut prev.post)
                {
                    (*wrote, *after) = (exec, exec);
                } else {
                    out.push(op);
                }
            }
        }
    }
    out
}

//! Carrying out a decision's file operations on the checkout, each verified against its
//! `pre` fingerprint immediately before the write, and taking them back when a later one fails.

use std::os::fd::AsFd;

use hunkgate_sandbox::beneath::{AtLink, Beneath, FsError, PendingWrite};
use hunkgate_sandbox::store::Store;

use crate::decide::apply::{conflict, read_cur, PlanError, CHECKOUT_FILE_CAP};
use crate::model::fileop::{Cur, FileOp, Fp, Op};
use crate::model::suggestion::{oid, CONTEXT};

/// Carry out planned operations in order, all or nothing: each is checked against the file as
/// it is at that moment (a write right before its rename), and when one fails the ones already
/// done are taken back, last first.
pub fn execute(root: &Beneath, store: &Store, ops: &[FileOp]) -> Result<(), ExecError> {
    if ops.len() > 1 && ops.iter().all(|op| matches!(op.op, Op::Write { .. })) {
        return execute_writes(root, store, ops);
    }
    for (i, op) in ops.iter().enumerate() {
        if let Err(error) = execute_one(root, store, op) {
            return Err(taken_back(root, store, &ops[..i], error));
        }
    }
    Ok(())
}

/// [`execute`] for a plan of several writes (a bulk decision's files), with the same checks
/// and the same all or nothing, and fewer waits for the disk: every file staged beside its
/// path, all fsynced together, then each put in place right after its own last look, and each
/// directory fsynced once at the end (see [`PendingWrite`]).
fn execute_writes(root: &Beneath, store: &Store, ops: &[FileOp]) -> Result<(), ExecError> {
    let nothing_done = |error| ExecError::Undone(Box::new(error));
    let mut staged = Vec::with_capacity(ops.len());
    for op in ops {
        let Op::Write { oid, exec, perm } = &op.op else {
            return Err(nothing_done(PlanError::Conflict(format!(
                "{}: not a write",
                op.path
            ))));
        };
        let bytes = blob(store, oid).map_err(nothing_done)?;
        let pending = fs_outcome(
            &op.path,
            root.stage_write(&op.path, &bytes, (*exec, *perm), AtLink::Replace),
        );
        staged.push(pending.map_err(nothing_done)?);
    }
    PendingWrite::sync_all(&staged).map_err(|e| nothing_done(e.into()))?;
    // Dropped unplaced (a check failed), the rest remove their temporary files.
    let mut dirs = Vec::with_capacity(ops.len());
    for (i, (op, pending)) in ops.iter().zip(staged).enumerate() {
        let path = op.path.as_str();
        let placed = pending.put_in_place(|at| still_pre(root, op, at));
        match fs_outcome(path, placed) {
            Ok(dir) => dirs.push((path, dir)),
            Err(error) => return Err(taken_back(root, store, &ops[..i], error)),
        }
    }
    let mut synced = std::collections::HashSet::new();
    for (path, dir) in &dirs {
        let once = nix::sys::stat::fstat(dir.as_fd())
            .map_or(true, |st| synced.insert((st.st_dev, st.st_ino)));
        if once {
            if let Err(e) = fs_outcome(path, root.sync_dir(path, dir)) {
                return Err(taken_back(root, store, ops, e));
            }
        }
    }
    Ok(())
}

/// `error` stopped a plan after `done`: take those back, last first.
fn taken_back(root: &Beneath, store: &Store, done: &[FileOp], error: PlanError) -> ExecError {
    match undo(root, store, done) {
        Ok(()) => ExecError::Undone(Box::new(error)),
        Err(undo) => ExecError::Stuck {
            error: Box::new(error),
            undo: Box::new(undo),
        },
    }
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

/// Whether the file at `at` — `op.path` right before the write goes in, or where the file it
/// replaces is kept right after — still is what `op` was planned against.
fn still_pre(root: &Beneath, op: &FileOp, at: &str) -> Result<bool, FsError> {
    let same = Fp::of(&read_cur(root, at)?) == op.pre;
    if same && at == op.path {
        crate::hub::test_hooks::pause("before-rename");
    }
    Ok(same)
}

fn changed(path: &str) -> PlanError {
    PlanError::Conflict(format!(
        "{path} changed since the hunk was checked against it; your version was kept and nothing was written"
    ))
}

/// The content `hex` names, from the store.
fn blob(store: &Store, hex: &str) -> Result<Vec<u8>, PlanError> {
    let id = oid(hex).ok_or_else(|| PlanError::Conflict(format!("corrupt object id {hex}")))?;
    Ok(store.read_blob(id)?)
}

/// What a file operation at `path` came to, in the words a decision answers with: a file
/// changed since its check, or a symlink on the way, is a conflict the user can act on.
fn fs_outcome<T>(path: &str, result: Result<T, FsError>) -> Result<T, PlanError> {
    match result {
        Ok(t) => Ok(t),
        Err(FsError::Changed { .. }) => Err(changed(path)),
        Err(e @ (FsError::Symlink { .. } | FsError::Busy { .. })) => conflict(e.to_string()),
        Err(e) => Err(e.into()),
    }
}

fn execute_one(root: &Beneath, store: &Store, op: &FileOp) -> Result<(), PlanError> {
    let blob = |hex: &str| blob(store, hex);
    let path = op.path.as_str();
    let result = match &op.op {
        Op::Write { oid, exec, perm } => {
            let bytes = blob(oid)?;
            // The last look at the file is right before the rename, after the new content is
            // written and fsynced, and one more at the replaced file after it: a user's save
            // made since the plan is never renamed over (see `PendingWrite::put_in_place`).
            root.write_atomic_with(path, &bytes, (*exec, *perm), AtLink::Replace, |at| {
                still_pre(root, op, at)
            })
        }
        // Like a write: swapped in after a last look, the replaced entry looked at once more.
        Op::Symlink { oid } => {
            root.symlink_checked(path, &blob(oid)?, |at| still_pre(root, op, at))
        }
        // Like a write, a removal looks at the file once more after it is out of the way (and
        // puts it back if a save landed meanwhile): see `Beneath::remove_file_checked`.
        Op::Remove => root.remove_entry_checked(path, |at| still_pre(root, op, at)),
        // Checked and changed on one open file, the path looked at once more after: a save
        // made since the plan keeps its mode (see `Beneath::set_executable_checked`).
        Op::SetExec { exec } => {
            root.set_executable_checked(path, *exec, CHECKOUT_FILE_CAP, |bytes, was_exec| {
                Ok(Fp::of_file(bytes, was_exec) == op.pre)
            })
        }
    };
    fs_outcome(path, result)
}

/// Where each operation of a journaled plan stands now: used after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpState {
    Before,
    Done,
    Neither,
}

pub fn op_state(root: &Beneath, store: &Store, op: &FileOp) -> Result<OpState, FsError> {
    let cur = read_cur(root, &op.path)?;
    let fp = Fp::of(&cur);
    Ok(if fp == op.post {
        OpState::Done
    } else if fp == op.pre {
        OpState::Before
    } else if written_then_edited(store, op, &cur) {
        OpState::Done
    } else {
        OpState::Neither
    })
}

/// Whether `cur`, neither what `op` found nor what it wrote, is what it wrote with the user's
/// edits since: a crash cut the decision between its write and its commit, and the user saved
/// the file before the restart. The change `op` made (its text diff from `pre` to `post`) can
/// be taken back from `cur` exactly, and cannot be made again: it is in the file. Anything
/// else (not text, a change that both applies and reverts, or neither) is not.
fn written_then_edited(store: &Store, op: &FileOp, cur: &Cur) -> bool {
    change_taken_out(store, op, cur).is_some()
}

/// `cur` with the text change `op` made taken back out of it, when `cur` holds that change
/// (it cannot be made again) and taking it back applies with exact context: what a file that
/// `op` wrote and the user edited since would be without `op`.
fn change_taken_out(store: &Store, op: &FileOp, cur: &Cur) -> Option<String> {
    let (Op::Write { oid: post, .. }, Some(pre), Cur::File { bytes, .. }) =
        (&op.op, op.pre_oid.as_deref(), cur)
    else {
        return None;
    };
    let text = |hex: &str| {
        blob(store, hex)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    };
    let (Some(pre), Some(post), Ok(cur)) = (text(pre), text(post), std::str::from_utf8(bytes))
    else {
        return None;
    };
    let change = hunkgate_patch::diff_hunks(&pre, &post, CONTEXT);
    if change.is_empty() || hunkgate_patch::apply_all(cur, &change).is_ok() {
        return None;
    }
    let back: Vec<hunkgate_patch::Hunk> = change.iter().map(|h| h.reversed()).collect();
    hunkgate_patch::apply_all(cur, &back).ok()
}

/// Take back operations a crash left done ([`OpState::Done`]), last first: exactly when the
/// file is what the operation wrote; when the user edited it since, by taking the operation's
/// text change back out of what is there (their edits stay). Each write is checked against
/// the file as it was found, like any other.
pub fn undo_found(root: &Beneath, store: &Store, done: &[FileOp]) -> Result<(), PlanError> {
    for op in done.iter().rev() {
        let cur = read_cur(root, &op.path)?;
        if Fp::of(&cur) == op.post {
            undo(root, store, std::slice::from_ref(op))?;
            continue;
        }
        let (Some(text), Cur::File { exec, .. }) = (change_taken_out(store, op, &cur), &cur) else {
            return Err(changed(&op.path));
        };
        let bytes = text.into_bytes();
        let oid = store.write_blob(&bytes)?;
        let back = Cur::File { bytes, exec: *exec };
        let op = FileOp {
            path: op.path.clone(),
            op: Op::Write {
                oid: oid.to_string(),
                exec: *exec,
                perm: None,
            },
            pre: Fp::of(&cur),
            post: Fp::of(&back),
            pre_oid: None,
        };
        execute_one(root, store, &op)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fileop::sha;

    /// Three files in two directories, and a plan that writes a new version of each.
    fn three() -> (tempfile::TempDir, Beneath, Store, Vec<FileOp>) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join("d")).unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let mut ops = Vec::new();
        for path in ["a.txt", "d/b.txt", "d/c.txt"] {
            let old = format!("old {path}\n");
            std::fs::write(repo.join(path), &old).unwrap();
            let new = format!("new {path}\n");
            let pre = Cur::File {
                bytes: old.clone().into_bytes(),
                exec: false,
            };
            ops.push(FileOp {
                path: path.into(),
                op: Op::Write {
                    oid: store.write_blob(new.as_bytes()).unwrap().to_string(),
                    exec: false,
                    perm: None,
                },
                pre: Fp::of(&pre),
                post: Fp::File {
                    sha256: sha(new.as_bytes()),
                    exec: false,
                },
                pre_oid: Some(store.write_blob(old.as_bytes()).unwrap().to_string()),
            });
        }
        let root = Beneath::open(&repo).unwrap();
        (tmp, root, store, ops)
    }

    fn files(tmp: &tempfile::TempDir) -> Vec<(String, String)> {
        let repo = tmp.path().join("repo");
        let mut out: Vec<(String, String)> = ["", "d"]
            .iter()
            .flat_map(|dir| std::fs::read_dir(repo.join(dir)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| {
                let name = p.strip_prefix(&repo).unwrap().display().to_string();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        out.sort();
        out
    }

    /// Several writes go through the staged path: all land, each verified, no temporary file
    /// left; when one file changed after the plan, none of them stays and the user's change
    /// is kept.
    #[test]
    fn several_writes_land_together_or_not_at_all() {
        let (tmp, root, store, ops) = three();
        execute(&root, &store, &ops).unwrap();
        let want: Vec<(String, String)> = ["a.txt", "d/b.txt", "d/c.txt"]
            .iter()
            .map(|p| (p.to_string(), format!("new {p}\n")))
            .collect();
        assert_eq!(files(&tmp), want);

        let (tmp, root, store, ops) = three();
        std::fs::write(tmp.path().join("repo/d/b.txt"), "the user's b\n").unwrap();
        match execute(&root, &store, &ops) {
            Err(ExecError::Undone(e)) => assert!(e.to_string().contains("d/b.txt changed"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            files(&tmp),
            [
                ("a.txt".to_string(), "old a.txt\n".to_string()),
                ("d/b.txt".to_string(), "the user's b\n".to_string()),
                ("d/c.txt".to_string(), "old d/c.txt\n".to_string()),
            ]
        );
    }

    /// After a crash between a write and its commit, a file the user saved since is still
    /// seen as written when the write's change is in it (so recovery does not report the hunk
    /// pending while its change is in the file), and as neither when it is not.
    #[test]
    fn a_write_the_user_edited_after_is_seen_as_done() {
        let (tmp, root, store, ops) = three();
        let op = &ops[0];
        let state = |text: &str| {
            std::fs::write(tmp.path().join("repo/a.txt"), text).unwrap();
            op_state(&root, &store, op).unwrap()
        };
        assert_eq!(state("old a.txt\n"), OpState::Before);
        assert_eq!(state("new a.txt\n"), OpState::Done);
        assert_eq!(state("new a.txt\nthe user's line\n"), OpState::Done);
        assert_eq!(state("old a.txt\nthe user's line\n"), OpState::Neither);
        assert_eq!(state("the user's own\n"), OpState::Neither);
    }
}

//! Turning a decision on a hunk into verified file operations on the user's checkout.
//!
//! Planning is pure (current file state in, operations or a conflict out); executing the plan is
//! the only I/O, and it goes through [`Beneath`], so every write is atomic, confined to the
//! repository, outside `.git`, and never through a symlink. Each operation carries fingerprints
//! of the file before and after, which is what crash recovery compares against.

use hunkgate_patch::{adopt_line_endings, apply_hunk, EndingsError, Hunk};
use hunkgate_sandbox::beneath::{Beneath, FsError, Kind};
use hunkgate_sandbox::store::{Mode, Store, StoreError};

use crate::model::fileop::{sha, Cur, FileOp, Fp, Op};
use crate::model::suggestion::{oid, HunkRec, Side};
use crate::protocol::HunkKind;

/// Files larger than this in the checkout are not patched.
pub const CHECKOUT_FILE_CAP: u64 = 256 * 1024 * 1024;

pub fn read_cur(root: &Beneath, path: &str) -> Result<Cur, FsError> {
    match root.kind(path)? {
        None => Ok(Cur::Absent),
        Some(Kind::Symlink) => Ok(root.read_link(path)?.map(Cur::Link).unwrap_or(Cur::Absent)),
        Some(Kind::Dir) => Ok(Cur::Other("a directory".into())),
        Some(Kind::Other(what)) => Ok(Cur::Other(format!("a {what}"))),
        Some(Kind::File { .. }) => Ok(match root.read(path, CHECKOUT_FILE_CAP)? {
            Some((bytes, exec)) => Cur::File { bytes, exec },
            None => Cur::Absent,
        }),
    }
}

/// Why a plan could not be made or carried out. `Conflict` is said in words the user can act on.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub(crate) fn conflict<T>(msg: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError::Conflict(msg.into()))
}

/// The plan for one decision.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub ops: Vec<FileOp>,
    /// The hunk that ends up applied (for forward plans of line hunks).
    pub applied: Option<Hunk>,
    /// The permission bits of the file an accepted delete removes, kept on the hunk so that
    /// undoing it brings the file back with them.
    pub perm: Option<u32>,
}

fn text_of<'a>(path: &str, cur: &'a Cur) -> Result<&'a str, PlanError> {
    match cur {
        Cur::File { bytes, .. } => std::str::from_utf8(bytes)
            .or_else(|_| conflict(format!("{path} is no longer a UTF-8 text file"))),
        Cur::Absent => conflict(format!("{path} no longer exists in your checkout")),
        Cur::Link(_) => conflict(format!(
            "{path} is now a symlink; hunkgate never writes through symlinks"
        )),
        Cur::Other(what) => conflict(format!("{path} is now {what}")),
    }
}

struct Ctx<'a> {
    root: &'a Beneath,
    store: &'a Store,
    /// What earlier steps of the same decision leave at a path (a bulk decision plans every
    /// hunk of a file against the file as the hunks before it left it).
    overlay: &'a Overlay,
}

/// The checkout as a decision's earlier operations leave it: path → what is there then.
#[derive(Debug, Default)]
pub struct Overlay(std::collections::HashMap<String, Cur>);

impl Overlay {
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

impl Ctx<'_> {
    fn cur(&self, path: &str) -> Result<Cur, PlanError> {
        if let Some(planned) = self.overlay.0.get(path) {
            return Ok(planned.clone());
        }
        match read_cur(self.root, path) {
            // A directory on the way is now a symlink (or a file): the hunk does not apply to
            // the checkout as it is now, which is a conflict the user can fix, not a hub error.
            Err(e @ FsError::Symlink { .. }) => conflict(e.to_string()),
            other => Ok(other?),
        }
    }

    /// Keep what is at the path now in the store, so the operation can be taken back.
    fn pre_oid(&self, pre: &Cur) -> Result<Option<String>, PlanError> {
        Ok(match pre {
            Cur::File { bytes, .. } | Cur::Link(bytes) => {
                Some(self.store.write_blob(bytes)?.to_string())
            }
            Cur::Absent | Cur::Other(_) => None,
        })
    }

    fn write(&self, path: &str, pre: &Cur, bytes: &[u8], exec: bool) -> Result<FileOp, PlanError> {
        let oid = self.store.write_blob(bytes)?;
        Ok(FileOp {
            path: path.to_string(),
            op: Op::Write {
                oid: oid.to_string(),
                exec,
                perm: None,
            },
            pre: Fp::of(pre),
            post: Fp::File {
                sha256: sha(bytes),
                exec,
            },
            pre_oid: self.pre_oid(pre)?,
        })
    }

    fn remove(&self, path: &str, pre: &Cur) -> Result<FileOp, PlanError> {
        Ok(FileOp {
            path: path.to_string(),
            op: Op::Remove,
            pre: Fp::of(pre),
            post: Fp::Absent,
            pre_oid: self.pre_oid(pre)?,
        })
    }

    fn side_bytes(&self, side: &Side) -> Result<Vec<u8>, PlanError> {
        let id = oid(&side.oid)
            .ok_or_else(|| PlanError::Conflict(format!("corrupt object id {}", side.oid)))?;
        Ok(self.store.read_blob(id)?)
    }

    /// Does the checkout hold exactly `side` at `path`?
    fn matches(&self, cur: &Cur, side: Option<&Side>) -> Result<bool, PlanError> {
        Ok(match (cur, side) {
            (Cur::Absent, None) => true,
            (Cur::File { bytes, exec }, Some(s)) if s.mode != Mode::Symlink => {
                *exec == (s.mode == Mode::Executable) && *bytes == self.side_bytes(s)?
            }
            (Cur::Link(t), Some(s)) if s.mode == Mode::Symlink => *t == self.side_bytes(s)?,
            _ => false,
        })
    }

    /// Operations that put `side` at `path`, replacing `cur`.
    fn put(&self, path: &str, cur: &Cur, side: Option<&Side>) -> Result<FileOp, PlanError> {
        match side {
            None => self.remove(path, cur),
            Some(s) if s.mode == Mode::Symlink => {
                let target = self.side_bytes(s)?;
                Ok(FileOp {
                    path: path.to_string(),
                    op: Op::Symlink { oid: s.oid.clone() },
                    pre: Fp::of(cur),
                    post: Fp::Link {
                        sha256: sha(&target),
                    },
                    pre_oid: self.pre_oid(cur)?,
                })
            }
            Some(s) => {
                let bytes = self.side_bytes(s)?;
                self.write(path, cur, &bytes, s.mode == Mode::Executable)
            }
        }
    }

    /// Whole-entry change `from` -> `to` at `path`, verified against the checkout.
    fn swap(
        &self,
        path: &str,
        from: Option<&Side>,
        to: Option<&Side>,
        what: &str,
    ) -> Result<FileOp, PlanError> {
        let cur = self.cur(path)?;
        if !self.matches(&cur, from)? {
            return conflict(format!(
                "{path} changed since the {what}; it no longer matches what the hunk expects"
            ));
        }
        self.put(path, &cur, to)
    }
}

/// Plan applying `hunk` (the agent's, or the user's modified version: `user_typed`) for `rec`.
/// `offset` is the line shift from this suggestion's already-applied hunks above it.
pub fn plan_forward(
    root: &Beneath,
    store: &Store,
    rec: &HunkRec,
    hunk: Option<&Hunk>,
    offset: isize,
    user_typed: bool,
) -> Result<Plan, PlanError> {
    plan_forward_over(
        &Overlay::default(),
        root,
        store,
        rec,
        hunk,
        offset,
        user_typed,
    )
}

/// [`plan_forward`] against the checkout as `overlay` says earlier steps leave it.
pub fn plan_forward_over(
    overlay: &Overlay,
    root: &Beneath,
    store: &Store,
    rec: &HunkRec,
    hunk: Option<&Hunk>,
    offset: isize,
    user_typed: bool,
) -> Result<Plan, PlanError> {
    let cx = Ctx {
        root,
        store,
        overlay,
    };
    let path = rec.file.as_str();
    match rec.kind {
        HunkKind::Modify => {
            let Some(h) = hunk else {
                return conflict("hunk has no diff");
            };
            let cur = cx.cur(path)?;
            let text = text_of(path, &cur)?;
            let h = adapt_endings(path, h, text, offset, user_typed)?;
            let applied = apply_hunk(text, &h, offset)
                .or_else(|e| conflict(format!("{path}: {e} (your copy changed since the run)")))?;
            let exec = matches!(cur, Cur::File { exec: true, .. });
            let op = cx.write(path, &cur, applied.text.as_bytes(), exec)?;
            Ok(Plan {
                ops: vec![op],
                applied: Some(h),
                perm: None,
            })
        }
        HunkKind::Create => {
            let cur = cx.cur(path)?;
            if cur != Cur::Absent {
                return conflict(format!("{path} already exists in your checkout"));
            }
            let content = match hunk {
                Some(h) => {
                    apply_hunk("", h, 0)
                        .or_else(|e| conflict(format!("{path}: {e}")))?
                        .text
                }
                None => String::new(),
            };
            let exec = rec
                .new
                .as_ref()
                .map(|s| s.mode == Mode::Executable)
                .unwrap_or(false);
            let op = cx.write(path, &cur, content.as_bytes(), exec)?;
            Ok(Plan {
                ops: vec![op],
                applied: hunk.cloned(),
                perm: None,
            })
        }
        HunkKind::Delete => {
            let cur = cx.cur(path)?;
            let text = text_of(path, &cur)?;
            let Some(h) = hunk else {
                return conflict("hunk has no diff");
            };
            let h = adapt_endings(path, h, text, 0, user_typed)?;
            let result = apply_hunk(text, &h, 0)
                .or_else(|e| conflict(format!("{path}: {e} (your copy changed since the run)")))?;
            let removes = result.text.is_empty() && Some(&h) == rec.patch.as_ref();
            let op = if removes {
                cx.remove(path, &cur)?
            } else {
                let exec = matches!(cur, Cur::File { exec: true, .. });
                cx.write(path, &cur, result.text.as_bytes(), exec)?
            };
            Ok(Plan {
                ops: vec![op],
                applied: Some(h),
                perm: if removes {
                    root.perm(path).ok().flatten()
                } else {
                    None
                },
            })
        }
        HunkKind::Binary | HunkKind::Symlink => {
            if hunk.is_some() && hunk != rec.patch.as_ref() {
                return conflict(
                    "binary files and symlinks can only be accepted or rejected whole",
                );
            }
            let op = cx.swap(path, rec.old.as_ref(), rec.new.as_ref(), "run")?;
            Ok(Plan {
                ops: vec![op],
                applied: rec.patch.clone(),
                perm: None,
            })
        }
        HunkKind::Rename => {
            let from = rec.old_path.as_deref().unwrap_or_default();
            let mut write = cx.swap(path, None, rec.new.as_ref(), "run")?;
            // The new name gets the old file's permission bits, not git's defaults.
            with_perm(&mut write, root.perm(from).ok().flatten());
            let remove = cx.swap(from, rec.old.as_ref(), None, "run")?;
            Ok(Plan {
                ops: vec![write, remove],
                applied: None,
                perm: None,
            })
        }
        HunkKind::Mode => mode_plan(&cx, rec, false),
    }
}

/// Give a write that creates a file the permission bits `perm`.
fn with_perm(op: &mut FileOp, perm: Option<u32>) {
    if let Op::Write { perm: p, .. } = &mut op.op {
        *p = perm;
    }
}

fn mode_plan(cx: &Ctx, rec: &HunkRec, reverse: bool) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let exec_of = |s: &Option<Side>| {
        s.as_ref()
            .map(|s| s.mode == Mode::Executable)
            .unwrap_or(false)
    };
    let (from, to) = if reverse {
        (exec_of(&rec.new), exec_of(&rec.old))
    } else {
        (exec_of(&rec.old), exec_of(&rec.new))
    };
    let cur = cx.cur(path)?;
    match &cur {
        Cur::File { bytes, exec } if *exec == from => Ok(Plan {
            ops: vec![FileOp {
                path: path.to_string(),
                op: Op::SetExec { exec: to },
                pre: Fp::of(&cur),
                post: Fp::File {
                    sha256: sha(bytes),
                    exec: to,
                },
                pre_oid: None,
            }],
            applied: None,
            perm: None,
        }),
        Cur::File { .. } => conflict(format!("{path}: its executable bit changed since the run")),
        _ => conflict(format!("{path} is no longer a regular file")),
    }
}

/// Plan undoing an applied hunk (reverse-apply what was applied).
pub fn plan_reverse(
    root: &Beneath,
    store: &Store,
    rec: &HunkRec,
    offset: isize,
) -> Result<Plan, PlanError> {
    let overlay = Overlay::default();
    let cx = Ctx {
        root,
        store,
        overlay: &overlay,
    };
    let path = rec.file.as_str();
    match rec.kind {
        HunkKind::Modify | HunkKind::Delete | HunkKind::Create => {
            let applied = rec.applied.as_ref().or(rec.patch.as_ref());
            let cur = cx.cur(path)?;
            if rec.kind == HunkKind::Create && rec.state == crate::protocol::HunkState::Accepted {
                // Undoing a created file removes it, if it is still what was created.
                let expect = match applied {
                    Some(h) => apply_hunk("", h, 0).map(|a| a.text).unwrap_or_default(),
                    None => String::new(),
                };
                return match &cur {
                    Cur::File { bytes, .. } if *bytes == expect.as_bytes() => Ok(Plan {
                        ops: vec![cx.remove(path, &cur)?],
                        applied: None,
                        perm: None,
                    }),
                    _ => conflict(format!(
                        "{path} changed since it was created; not removing it"
                    )),
                };
            }
            let text = match (&cur, rec.kind) {
                // Undoing a delete: the file comes back from nothing.
                (Cur::Absent, HunkKind::Delete) => "",
                _ => text_of(path, &cur)?,
            };
            let Some(applied) = applied else {
                return conflict("hunk has no diff");
            };
            let rev = reversal(applied);
            let result = apply_hunk(text, &rev, offset)
                .or_else(|e| conflict(format!("{path}: {e} (the applied lines changed since)")))?;
            let exec = match (&cur, &rec.old) {
                (Cur::File { exec, .. }, _) => *exec,
                (_, Some(s)) => s.mode == Mode::Executable,
                _ => false,
            };
            let op = if result.text.is_empty() && rec.kind == HunkKind::Create {
                cx.remove(path, &cur)?
            } else {
                let mut op = cx.write(path, &cur, result.text.as_bytes(), exec)?;
                if cur == Cur::Absent {
                    // An undone delete: the file comes back with the mode it had.
                    with_perm(&mut op, rec.perm);
                }
                op
            };
            Ok(Plan {
                ops: vec![op],
                applied: None,
                perm: None,
            })
        }
        HunkKind::Binary | HunkKind::Symlink => {
            let op = cx.swap(path, rec.new.as_ref(), rec.old.as_ref(), "hunk was applied")?;
            Ok(Plan {
                ops: vec![op],
                applied: None,
                perm: None,
            })
        }
        HunkKind::Rename => {
            let from = rec.old_path.as_deref().unwrap_or_default();
            let mut restore = cx.swap(from, None, rec.old.as_ref(), "hunk was applied")?;
            with_perm(&mut restore, root.perm(path).ok().flatten());
            let remove = cx.swap(path, rec.new.as_ref(), None, "hunk was applied")?;
            Ok(Plan {
                ops: vec![restore, remove],
                applied: None,
                perm: None,
            })
        }
        HunkKind::Mode => mode_plan(&cx, rec, true),
    }
}

/// The hunk that undoes `applied`, positioned in the base's line numbers (the offset of this
/// suggestion's other applied hunks is added by the caller, as for forward applies).
///
/// Its old lines are `applied`'s new lines, which start where `applied`'s old lines started —
/// or, for a pure insertion (no old lines), right after the line the insertion followed. When
/// `applied` only removed lines (a deleted file, a context-free removal), the reversal is a pure
/// insertion, whose header names the line it follows: the one before the removed lines.
fn reversal(applied: &Hunk) -> Hunk {
    let mut rev = applied.reversed();
    rev.old_start = if applied.old_len == 0 {
        applied.old_start + 1
    } else if applied.new_len == 0 {
        applied.old_start.saturating_sub(1)
    } else {
        applied.old_start
    };
    rev
}

/// A user's hand-typed diff (`modify`) usually has LF endings even where the file has CRLF.
///
/// When such a hunk has no CR at all, find where it applies comparing lines without their CR
/// (the usual rule: at the expected place, else at the single place it occurs). If the lines
/// there all end in CRLF, adopt CRLF, so context then compares exactly at that very place; if
/// they all end in LF, the hunk is used as typed. Lines that mix both are not guessed at: that is
/// a conflict. The agent's own hunks are exact and never adapted: converting one would let it
/// match a CRLF copy of its lines somewhere else in a file that mixes endings.
fn adapt_endings(
    path: &str,
    h: &Hunk,
    text: &str,
    offset: isize,
    user_typed: bool,
) -> Result<Hunk, PlanError> {
    if !user_typed {
        return Ok(h.clone());
    }
    adopt_line_endings(h, text, offset).or_else(|e| match e {
        EndingsError::Apply(e) => conflict(format!("{path}: {e} (your copy changed since the run)")),
        EndingsError::Mixed => conflict(format!(
            "{path}: the lines your diff changes mix CRLF and LF endings; send it with the file's exact line endings"
        )),
    })
}

/// Plan putting `side` (a checkpoint's base: a file, a symlink, or absence) at `path`, whatever
/// is there now. None when the checkout already holds exactly that. Used by hard rollback,
/// which by definition discards later edits.
pub fn plan_restore(
    root: &Beneath,
    store: &Store,
    path: &str,
    side: Option<&Side>,
) -> Result<Option<FileOp>, PlanError> {
    let overlay = Overlay::default();
    let cx = Ctx {
        root,
        store,
        overlay: &overlay,
    };
    let cur = cx.cur(path)?;
    if let Cur::Other(what) = &cur {
        return conflict(format!("{path} is now {what}; not replacing it"));
    }
    if cx.matches(&cur, side)? {
        return Ok(None);
    }
    Ok(Some(cx.put(path, &cur, side)?))
}

/// Plan reverse-applying several applied line hunks of one text file together, as one write.
///
/// `hunks` are (what was applied, the agent hunk's base position, offset of this suggestion's
/// other applied hunks above it). They are undone bottom-up, so undoing one never moves the
/// ones above it.
pub fn plan_reverse_lines(
    root: &Beneath,
    store: &Store,
    path: &str,
    mut hunks: Vec<(Hunk, usize, isize)>,
) -> Result<FileOp, PlanError> {
    let overlay = Overlay::default();
    let cx = Ctx {
        root,
        store,
        overlay: &overlay,
    };
    let cur = cx.cur(path)?;
    let mut text = text_of(path, &cur)?.to_string();
    hunks.sort_by_key(|(_, base_start, _)| std::cmp::Reverse(*base_start));
    for (applied, _, offset) in &hunks {
        let rev = reversal(applied);
        text = apply_hunk(&text, &rev, *offset)
            .or_else(|e| conflict(format!("{path}: {e} (newer edits overlap this hunk)")))?
            .text;
    }
    let exec = matches!(cur, Cur::File { exec: true, .. });
    cx.write(path, &cur, text.as_bytes(), exec)
}

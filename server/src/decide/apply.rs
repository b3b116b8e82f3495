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
use crate::model::suggestion::{HunkRec, Side};
use crate::protocol::{HunkKind, HunkState};

pub use crate::decide::overlay::{merge_ops, Overlay};

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
    /// The three-way merge this plan lands ([`crate::decide::merge`]).
    pub merge: Option<crate::protocol::HunkMerge>,
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

impl Ctx<'_> {
    fn cur(&self, path: &str) -> Result<Cur, PlanError> {
        if let Some(planned) = self.overlay.get(path) {
            return Ok(planned.clone());
        }
        match read_cur(self.root, path) {
            // A symlink on the way that an earlier step of this decision removes (the run
            // replaced it with a directory): nothing is at the path once that step is done.
            Err(FsError::Symlink { .. }) if self.overlay.removes_above(path) => Ok(Cur::Absent),
            // A directory on the way is now a symlink (or a file): the hunk does not apply to
            // the checkout as it is now, which is a conflict the user can fix, not a hub error.
            Err(e @ FsError::Symlink { .. }) => conflict(e.to_string()),
            other => Ok(other?),
        }
    }

    /// Keep what is at `path` now (in the store, or held by a bulk decision's overlay), so the
    /// operation can be taken back.
    fn pre_oid(&self, path: &str, pre: &Cur) -> Result<Option<String>, PlanError> {
        if self.overlay.holding() {
            // A later step's is never used (see [`Ctx::held_write`]).
            return Ok(match self.overlay.get(path) {
                None => self.overlay.hold_before(pre),
                Some(_) => None,
            });
        }
        Ok(match pre {
            Cur::File { bytes, .. } | Cur::Link(bytes) => {
                Some(self.store.write_blob(bytes)?.to_string())
            }
            Cur::Absent | Cur::Other(_) => None,
        })
    }

    fn write(&self, path: &str, pre: &Cur, bytes: &[u8], exec: bool) -> Result<FileOp, PlanError> {
        if self.overlay.holding() {
            return self.held_write(path, pre, bytes, exec);
        }
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
            pre_oid: self.pre_oid(path, pre)?,
        })
    }

    /// A bulk decision's write ([`Overlay::holding`]): the new content is held, and its id and
    /// fingerprint are left to [`Overlay::settle`], which makes them only for what the merged
    /// operations write — a file's twentieth version, not each of the nineteen before. What
    /// the file held before is kept and fingerprinted only at the decision's first step there;
    /// a later step's `pre` is never used (see [`merge_ops`]).
    fn held_write(
        &self,
        path: &str,
        pre: &Cur,
        bytes: &[u8],
        exec: bool,
    ) -> Result<FileOp, PlanError> {
        let first = self.overlay.get(path).is_none();
        let pre_oid = self.pre_oid(path, pre)?;
        self.overlay.hold_made(path, bytes);
        Ok(FileOp {
            path: path.to_string(),
            op: Op::Write {
                oid: String::new(),
                exec,
                perm: None,
            },
            pre: if first { Fp::of(pre) } else { Fp::unsettled() },
            post: Fp::File {
                sha256: String::new(),
                exec,
            },
            pre_oid,
        })
    }

    fn remove(&self, path: &str, pre: &Cur) -> Result<FileOp, PlanError> {
        Ok(FileOp {
            path: path.to_string(),
            op: Op::Remove,
            pre: Fp::of(pre),
            post: Fp::Absent,
            pre_oid: self.pre_oid(path, pre)?,
        })
    }

    fn side_bytes(&self, side: &Side) -> Result<Vec<u8>, PlanError> {
        Ok(self.store.read_blob(side.oid)?)
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
                    op: Op::Symlink {
                        oid: s.oid.to_string(),
                    },
                    pre: Fp::of(cur),
                    post: Fp::Link {
                        sha256: sha(&target),
                    },
                    pre_oid: self.pre_oid(path, cur)?,
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

/// What a forward plan applies: the hunk (the agent's, or the user's modified version), the line
/// shift from this suggestion's already-applied hunks above it, and whether the user typed it.
struct Forward<'h> {
    hunk: Option<&'h Hunk>,
    offset: isize,
    user_typed: bool,
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
    let fwd = Forward {
        hunk,
        offset,
        user_typed,
    };
    match rec.kind {
        HunkKind::Modify => forward_modify(&cx, rec, &fwd),
        HunkKind::Create => forward_create(&cx, rec, hunk),
        HunkKind::Delete => forward_delete(&cx, rec, &fwd),
        HunkKind::Binary | HunkKind::Symlink => {
            if hunk.is_some() && hunk != rec.patch.as_ref() {
                return conflict(
                    "binary files and symlinks can only be accepted or rejected whole",
                );
            }
            whole_plan(&cx, rec, false)
        }
        HunkKind::Rename => rename_plan(&cx, rec, false),
        HunkKind::Mode => mode_plan(&cx, rec, false),
    }
}

impl Plan {
    /// A plan of one operation, with no permission bits to keep.
    fn one(op: FileOp, applied: Option<Hunk>) -> Plan {
        Plan {
            ops: vec![op],
            applied,
            perm: None,
            merge: None,
        }
    }
}

/// Apply a line hunk to the text file at its path; the file keeps its executable bit.
fn forward_modify(cx: &Ctx, rec: &HunkRec, fwd: &Forward) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let Some(h) = fwd.hunk else {
        return conflict("hunk has no diff");
    };
    let cur = cx.cur(path)?;
    let text = text_of(path, &cur)?;
    let h = adapt_endings(path, h, text, fwd.offset, fwd.user_typed)?;
    let applied = apply_hunk(text, &h, fwd.offset)
        .or_else(|e| conflict(format!("{path}: {e} (your copy changed since the run)")))?;
    let op = cx.write(path, &cur, applied.text.as_bytes(), is_exec(&cur))?;
    Ok(Plan::one(op, Some(h)))
}

/// Create the file a hunk adds, where nothing is in the checkout yet.
fn forward_create(cx: &Ctx, rec: &HunkRec, hunk: Option<&Hunk>) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let cur = cx.cur(path)?;
    if cur != Cur::Absent {
        return conflict(format!("{path} already exists in your checkout"));
    }
    let content = created_text(path, hunk)?;
    let op = cx.write(path, &cur, content.as_bytes(), side_exec(rec.new.as_ref()))?;
    Ok(Plan::one(op, hunk.cloned()))
}

/// Take the lines of a deleted file out. The file itself goes only when the agent's whole hunk
/// empties it (and then its permission bits are kept on the plan); otherwise it is a write.
fn forward_delete(cx: &Ctx, rec: &HunkRec, fwd: &Forward) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let cur = cx.cur(path)?;
    let text = text_of(path, &cur)?;
    let Some(h) = fwd.hunk else {
        return conflict("hunk has no diff");
    };
    let h = adapt_endings(path, h, text, 0, fwd.user_typed)?;
    let result = apply_hunk(text, &h, 0)
        .or_else(|e| conflict(format!("{path}: {e} (your copy changed since the run)")))?;
    let removes = result.text.is_empty() && Some(&h) == rec.patch.as_ref();
    let op = if removes {
        cx.remove(path, &cur)?
    } else {
        cx.write(path, &cur, result.text.as_bytes(), is_exec(&cur))?
    };
    Ok(Plan {
        ops: vec![op],
        applied: Some(h),
        perm: if removes {
            cx.root.perm(path).ok().flatten()
        } else {
            None
        },
        merge: None,
    })
}

/// The text of the file a create hunk makes (empty for an empty file: no hunk).
fn created_text(path: &str, hunk: Option<&Hunk>) -> Result<String, PlanError> {
    match hunk {
        Some(h) => Ok(apply_hunk("", h, 0)
            .or_else(|e| conflict(format!("{path}: {e}")))?
            .text),
        None => Ok(String::new()),
    }
}

/// Is `cur` an executable file?
fn is_exec(cur: &Cur) -> bool {
    matches!(cur, Cur::File { exec: true, .. })
}

/// Is `side` an executable file? (Absence and symlinks are not.)
fn side_exec(side: Option<&Side>) -> bool {
    side.is_some_and(|s| s.mode == Mode::Executable)
}

/// The run's (old, new) sides of `rec`, swapped when undoing: (what the checkout must hold,
/// what it gets).
fn directed(rec: &HunkRec, reverse: bool) -> (Option<&Side>, Option<&Side>) {
    if reverse {
        (rec.new.as_ref(), rec.old.as_ref())
    } else {
        (rec.old.as_ref(), rec.new.as_ref())
    }
}

/// The moment the checkout must not have changed since, as conflict messages name it.
fn since(reverse: bool) -> &'static str {
    if reverse {
        "hunk was applied"
    } else {
        "run"
    }
}

/// Give a write that creates a file the permission bits `perm`.
fn with_perm(op: &mut FileOp, perm: Option<u32>) {
    if let Op::Write { perm: p, .. } = &mut op.op {
        *p = perm;
    }
}

/// Swap a binary file or a symlink whole: the run's old side for its new one (or back, when
/// `reverse`), verified against the checkout.
fn whole_plan(cx: &Ctx, rec: &HunkRec, reverse: bool) -> Result<Plan, PlanError> {
    let (from, to) = directed(rec, reverse);
    let op = cx.swap(rec.file.as_str(), from, to, since(reverse))?;
    Ok(Plan::one(
        op,
        if reverse { None } else { rec.patch.clone() },
    ))
}

/// Move a renamed file from its old name to its new one (or back, when `reverse`): a write of the
/// name it comes to, then a removal of the name it leaves, both verified against the checkout.
fn rename_plan(cx: &Ctx, rec: &HunkRec, reverse: bool) -> Result<Plan, PlanError> {
    let old_name = rec.old_path.as_deref().unwrap_or_default();
    let (leaves, comes) = if reverse {
        (rec.file.as_str(), old_name)
    } else {
        (old_name, rec.file.as_str())
    };
    let (from, to) = directed(rec, reverse);
    let mut write = cx.swap(comes, None, to, since(reverse))?;
    // The name it comes to gets the permission bits of the name it leaves, not git's defaults.
    with_perm(&mut write, cx.root.perm(leaves).ok().flatten());
    let remove = cx.swap(leaves, from, None, since(reverse))?;
    Ok(Plan {
        ops: vec![write, remove],
        applied: None,
        perm: None,
        merge: None,
    })
}

/// Flip the executable bit of a file as the run did (or back, when `reverse`).
fn mode_plan(cx: &Ctx, rec: &HunkRec, reverse: bool) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let (from, to) = directed(rec, reverse);
    let (from, to) = (side_exec(from), side_exec(to));
    let cur = cx.cur(path)?;
    match &cur {
        Cur::File { bytes, exec } if *exec == from => Ok(Plan::one(
            FileOp {
                path: path.to_string(),
                op: Op::SetExec { exec: to },
                pre: Fp::of(&cur),
                post: Fp::File {
                    sha256: sha(bytes),
                    exec: to,
                },
                // Setting a bit back needs no content, but a bulk decision may merge a later
                // write at the path into this operation, which then takes the content back.
                pre_oid: if cx.overlay.holding() {
                    cx.pre_oid(path, &cur)?
                } else {
                    None
                },
            },
            None,
        )),
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
    match rec.kind {
        HunkKind::Create if rec.state == HunkState::Accepted => reverse_created(&cx, rec),
        HunkKind::Modify | HunkKind::Delete | HunkKind::Create => reverse_lines(&cx, rec, offset),
        HunkKind::Binary | HunkKind::Symlink => whole_plan(&cx, rec, true),
        HunkKind::Rename => rename_plan(&cx, rec, true),
        HunkKind::Mode => mode_plan(&cx, rec, true),
    }
}

/// Undo an accepted create: remove the file, if it is still exactly what was created.
fn reverse_created(cx: &Ctx, rec: &HunkRec) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let applied = rec.applied.as_deref().or(rec.patch.as_ref());
    let cur = cx.cur(path)?;
    let expect = created_text(path, applied).unwrap_or_default();
    match &cur {
        Cur::File { bytes, .. } if *bytes == expect.as_bytes() => {
            Ok(Plan::one(cx.remove(path, &cur)?, None))
        }
        _ => conflict(format!(
            "{path} changed since it was created; not removing it"
        )),
    }
}

/// Reverse-apply the applied line hunk of a modified, deleted or (modified) created file. An
/// undone delete brings the file back from nothing, with the mode it had; a created file that
/// the undo empties is removed.
fn reverse_lines(cx: &Ctx, rec: &HunkRec, offset: isize) -> Result<Plan, PlanError> {
    let path = rec.file.as_str();
    let applied = rec.applied.as_deref().or(rec.patch.as_ref());
    let cur = cx.cur(path)?;
    let text = match (&cur, rec.kind) {
        (Cur::Absent, HunkKind::Delete) => "",
        _ => text_of(path, &cur)?,
    };
    let Some(applied) = applied else {
        return conflict("hunk has no diff");
    };
    let result = apply_hunk(text, &reversal(applied), offset)
        .or_else(|e| conflict(format!("{path}: {e} (the applied lines changed since)")))?;
    let op = if result.text.is_empty() && rec.kind == HunkKind::Create {
        cx.remove(path, &cur)?
    } else {
        let exec = restored_exec(&cur, rec.old.as_ref());
        let mut op = cx.write(path, &cur, result.text.as_bytes(), exec)?;
        if cur == Cur::Absent {
            with_perm(&mut op, rec.perm);
        }
        op
    };
    Ok(Plan::one(op, None))
}

/// The executable bit a file gets back when a hunk on it is undone: the file's own while it
/// exists, else (an undone delete) the run's old side's.
fn restored_exec(cur: &Cur, old: Option<&Side>) -> bool {
    match (cur, old) {
        (Cur::File { exec, .. }, _) => *exec,
        (_, Some(s)) => s.mode == Mode::Executable,
        _ => false,
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
/// other applied hunks above it), in their suggestion's order. They are undone bottom-up, so
/// undoing one never moves the ones above it.
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
    // Bottom-up; of a hunk and the rest of its line-range decision (same start, the rest after
    // it), the rest first: it was applied on top.
    hunks.reverse();
    hunks.sort_by_key(|(_, base_start, _)| std::cmp::Reverse(*base_start));
    for (applied, _, offset) in &hunks {
        let rev = reversal(applied);
        text = apply_hunk(&text, &rev, *offset)
            .or_else(|e| conflict(format!("{path}: {e} (newer edits overlap this hunk)")))?
            .text;
    }
    cx.write(path, &cur, text.as_bytes(), is_exec(&cur))
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;

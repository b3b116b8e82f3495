//! `hunkgate sandbox-helper <op>`: the only code that touches a sandbox directory under
//! `--isolation user`, always running *as the sandbox user* (see [`crate::user`] for how the hub
//! starts it). It refuses to run as root.
//!
//! - `probe`: prove it starts as the sandbox user and that user's home is private.
//! - `prepare`: receive the run's base as frames on stdin and make the sandbox hold exactly that,
//!   with a fresh `.git` (like [`LocalSandbox`](crate::workspace::LocalSandbox) does) that holds
//!   no object of the old one: an earlier agent could have forged any of them. A slot private
//!   to its agent (`private_slot`: see `exec`) keeps its bases' objects beside it, out of its
//!   agents' reach, and its `.git` borrows them; any other slot is sent every blob.
//! - `snapshot`: read the sandbox as data (no symlink followed, FIFOs and devices skipped, files
//!   over the cap skipped) and stream it to stdout; the hub re-checks every byte. As a
//!   standby (see [`crate::wire`]'s module docs) it is started as the run's sync begins,
//!   watches the slot with inotify ([`crate::watch`]) from the sync's end, before the agent
//!   starts, to the run's end, out of its reach
//!   (non-dumpable, outside the agent's PID namespace), and at the hub's go reads back only
//!   where its watch saw something happen. Then it stays, watching on, and makes the slot's
//!   next sync itself when the hub asks for it (sent only the base's changes, against the
//!   record it holds), and stands by for that run in turn.
//! - `tool`: run one of the built-in agent's file tools ([`crate::tools`]) in the sandbox and
//!   answer with its JSON result.
//! - `exec`: run the agent and own its whole process tree. The agent gets a new session (no
//!   controlling terminal), `NO_NEW_PRIVS`, only fds 0–2, exactly the environment it was handed
//!   (its `PATH` completed with the hub's directories this user can search, see
//!   [`crate::agent_path`]), RLIMIT_NPROC and no core dumps. A program it cannot find or run
//!   there is reported, with the fix, before anything starts. On Linux it runs in a fresh PID namespace whose init is a
//!   fork of this helper, so when the agent exits, is cancelled or times out, every process it
//!   started dies with that namespace; where no PID namespace can be had, the helper is a child
//!   subreaper and kills every descendant it can find. The tree is killed when the agent exits,
//!   on SIGTERM, at the deadline, and when stdin — the lifeline from the hub — reaches EOF,
//!   which is how even `kill -9` of the hub ends the run. When the agent exits, the init kills
//!   and reaps what it left, then answers on the lifeline (a socket) with the agent's wait
//!   status: the hub knows the run is over, and its output whole, without waiting for the init,
//!   this helper and sudo to exit. The init is not dumpable: the agent, the same user in the
//!   same namespace, can neither trace it nor speak for it. With a private `/proc` the
//!   namespaces include a mount namespace, in which the init also covers every slot but the
//!   run's own ([`crate::agent::show_only_own_slot`]): no agent can write another run's slot.
//!   The helper checks the request and finds the program; the process tree itself — the
//!   namespaces, their init, the relay, the supervision — is [`crate::supervise::tree`].
//!
//! Everything arrives on stdin; nothing secret is ever in argv.
//!
//! **Layer:** the sandbox user's side of [`crate::wire`]. It imports `wire`, [`crate::sync`],
//! `snapshot`, `tools` and what is below them — never [`crate::user`] (the hub's side) nor
//! [`crate::workspace`].

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::agent_path;
use crate::beneath::Beneath;
use crate::snapshot::{
    capture_each, readback_check, sandbox_candidates_since, split_by_dirty, Captured, Hints,
};
use crate::store::FlatTree;
use crate::supervise::tree::{self, HELPER_FAILED};
use crate::sync::{
    base_from_wire, clear_except_git, fresh_git, store_blob, sync_files, Discard, SyncError,
    SyncFiles,
};
use crate::wire::{self, Frame, Request, WireError};

mod standby;

/// Errors inside the helper; printed on its stderr, which the hub shows to the user.
#[derive(Debug, thiserror::Error)]
pub enum HelperFailure {
    #[error("refusing to run as root: the sandbox helper only ever runs as the sandbox user")]
    Root,
    #[error("unknown operation {0:?} (expected probe, prepare, snapshot, tool or exec)")]
    UnknownOp(String),
    #[error("cannot find this user's home directory: {0}")]
    NoHome(String),
    #[error("home {path}: {problem}; run `sudo hunkgate setup` to fix it")]
    Home { path: PathBuf, problem: String },
    #[error("sandbox key {0:?} is not a plain name")]
    BadKey(String),
    #[error("sandbox directory {path}: {problem}")]
    Dir { path: PathBuf, problem: String },
    #[error("reading the request: {0}")]
    Wire(#[from] WireError),
    #[error("the base sent by the hub has an unacceptable path {path:?}: {why}")]
    BadPath { path: String, why: String },
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error("writing the snapshot: {0}")]
    Output(#[source] std::io::Error),
    #[error("the agent's command line is empty")]
    EmptyArgv,
    #[error("environment variable name {0:?} is not valid")]
    BadEnv(String),
    #[error(transparent)]
    Tree(#[from] tree::TreeError),
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(std::io::Error) -> HelperFailure {
    move |source| HelperFailure::Sys { what, source }
}

/// Entry point of `hunkgate sandbox-helper <op>`. Must be called before any thread is started:
/// `exec` forks without exec'ing (the PID namespace's init).
pub fn main(op: &str) -> ExitCode {
    match run(op) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hunkgate sandbox-helper {op}: {e}");
            ExitCode::from(HELPER_FAILED)
        }
    }
}

fn run(op: &str) -> Result<ExitCode, HelperFailure> {
    if nix::unistd::getuid().is_root() || nix::unistd::geteuid().is_root() {
        return Err(HelperFailure::Root);
    }
    // What the helper and the agent create is theirs alone.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let home = my_home()?;
    match op {
        "probe" => {
            check_my_home(&home)?;
            println!(
                "ok uid={} home={} pidns={} privateproc={}",
                nix::unistd::getuid(),
                home.display(),
                if tree::can_make_pid_namespace() {
                    "yes"
                } else {
                    "no"
                },
                if crate::agent::private_proc_possible() {
                    "yes"
                } else {
                    "no"
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        "prepare" => {
            check_my_home(&home)?;
            let mut input =
                std::io::BufReader::with_capacity(wire::STREAM_BUFFER, std::io::stdin().lock());
            let mut req: Request = wire::read_request(&mut input)?;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            prepare(&mut req, &home, &mut input, &mut out)?;
            out.flush().map_err(HelperFailure::Output)?;
            Ok(ExitCode::SUCCESS)
        }
        "snapshot" => {
            check_my_home(&home)?;
            // A reader of our own, so that a standby can tell whether input is buffered.
            let stdin = std::io::stdin().as_fd().try_clone_to_owned();
            let mut input = std::io::BufReader::with_capacity(
                wire::STREAM_BUFFER,
                std::fs::File::from(stdin.map_err(sys("dup(stdin)"))?),
            );
            snapshot_op(&home, &mut input, std::io::stdout().lock(), || {
                Ok(tree::not_dumpable()?)
            })
        }
        "tool" => {
            check_my_home(&home)?;
            let mut input = std::io::stdin().lock();
            let req: Request = wire::read_request(&mut input)?;
            let tool: crate::tools::ToolRequest = wire::read_header(&mut input)?;
            let dir = sandbox_dir(&home, &req, false)?;
            let reply = crate::tools::execute(&dir, &tool.tool, &tool.limits);
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            wire::write_header(&mut out, &reply).map_err(HelperFailure::Output)?;
            out.flush().map_err(HelperFailure::Output)?;
            Ok(ExitCode::SUCCESS)
        }
        "exec" => {
            check_my_home(&home)?;
            // Unbuffered (the request's blocks are read exactly): with `stdio`, what follows
            // it on stdin is the agent's, and no buffer of this process may hold its start.
            let mut stdin = std::fs::File::from(
                std::io::stdin()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(sys("dup(stdin)"))?,
            );
            let req: Request = wire::read_request(&mut stdin)?;
            drop(stdin);
            exec(req, &home)
        }
        other => Err(HelperFailure::UnknownOp(other.to_string())),
    }
}

/// `snapshot`: read the request from `input`, then read the slot back to `out` — or, for a
/// standby, serve the slot's runs until `input` ends (see [`standby`]), once `guard` has put
/// this process out of the agent's reach (the helper's main passes [`tree::not_dumpable`]; a
/// process-wide step, which the unit tests that run a standby in the test binary leave out).
pub(crate) fn snapshot_op<R: Read + AsFd, W: Write>(
    home: &Path,
    input: &mut std::io::BufReader<R>,
    out: W,
    guard: fn() -> Result<(), HelperFailure>,
) -> Result<ExitCode, HelperFailure> {
    let mut req: Request = wire::read_request(input)?;
    if req.standby {
        // Waiting while the agent runs as this same user: out of its reach.
        guard()?;
        return standby::serve(req, home, input, out);
    }
    let base = base_from_wire(std::mem::take(&mut req.base))
        .map_err(|(path, why)| HelperFailure::BadPath { path, why })?;
    let mut out = std::io::BufWriter::with_capacity(wire::STREAM_BUFFER, out);
    let hints = Hints {
        record: req.record.as_ref(),
        dirty: None,
    };
    snapshot(&req, &base, home, hints, &mut out)?;
    out.flush().map_err(HelperFailure::Output)?;
    Ok(ExitCode::SUCCESS)
}

fn my_home() -> Result<PathBuf, HelperFailure> {
    // From the password database, not $HOME: the environment is the caller's.
    match nix::unistd::User::from_uid(nix::unistd::getuid()) {
        Ok(Some(u)) => Ok(u.dir),
        Ok(None) => Err(HelperFailure::NoHome(format!(
            "uid {} has no passwd entry",
            nix::unistd::getuid()
        ))),
        Err(e) => Err(HelperFailure::NoHome(e.to_string())),
    }
}

fn check_my_home(home: &Path) -> Result<(), HelperFailure> {
    let problem = |problem: String| HelperFailure::Home {
        path: home.to_path_buf(),
        problem,
    };
    let meta = std::fs::symlink_metadata(home).map_err(|e| problem(e.to_string()))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(problem(
            "must be a directory owned by the sandbox user".into(),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(problem(format!(
            "has mode {:o}, must be 700",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// `<home>/sandboxes/<key>/<slot>`, each level a real directory (not a symlink) of ours.
fn sandbox_dir(home: &Path, req: &Request, create: bool) -> Result<PathBuf, HelperFailure> {
    let key = &req.key;
    let plain = !key.is_empty()
        && key.len() <= 128
        && !key.starts_with('.')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !plain {
        return Err(HelperFailure::BadKey(key.clone()));
    }
    let mut dir = home.to_path_buf();
    let me = nix::unistd::getuid().as_raw();
    for part in ["sandboxes", key.as_str(), &req.slot.to_string()] {
        dir.push(part);
        if create {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(HelperFailure::Dir {
                        path: dir,
                        problem: e.to_string(),
                    })
                }
            }
        }
        let meta = std::fs::symlink_metadata(&dir).map_err(|e| HelperFailure::Dir {
            path: dir.clone(),
            problem: e.to_string(),
        })?;
        if !meta.is_dir() || meta.uid() != me {
            return Err(HelperFailure::Dir {
                path: dir,
                problem: "is not a directory of the sandbox user (a symlink?)".into(),
            });
        }
    }
    Ok(dir)
}

pub(crate) fn prepare(
    req: &mut Request,
    home: &Path,
    input: &mut impl Read,
    out: &mut impl Write,
) -> Result<(), HelperFailure> {
    let dir = sandbox_dir(home, req, true)?;
    let base = base_from_wire(std::mem::take(&mut req.base))
        .map_err(|(path, why)| HelperFailure::BadPath { path, why })?;
    // The base's objects: kept beside a private slot (a full prepare, with no record — the
    // first, or the hub's retry after a failure — starts them from nothing, so a damaged one
    // cannot wedge the slot), else none at all.
    let kept = base_objects(&dir, req.private_slot, req.record.is_some())?;
    // A new .git first, with not one object of the old (an earlier agent wrote them all), so
    // the blobs the hub sends can be written as they arrive.
    let alternate = kept.as_ref().map(|k| k.path().join("objects"));
    let (repo, _) = fresh_git(&dir, alternate.as_deref(), false, Discard::Now)?;
    let objects = kept.as_ref().unwrap_or(&repo);
    // A full prepare sends every blob of the base: written as one pack, not 10,000 loose
    // objects (an inode each).
    let mut known = HashSet::new();
    let mut blobs = objects.batch();
    read_blobs(input, |id, bytes| {
        store_blob(&dir, &mut blobs, id, &bytes)?;
        known.insert(id);
        Ok(())
    })?;
    blobs.finish().map_err(SyncError::from)?;
    // Every blob of the base must be here now: kept or just sent.
    crate::sync::ensure_blobs(&dir, objects, &base, &known, |_| Ok(None))?;
    let job = SyncFiles {
        record: req.record.as_ref(),
        ..SyncFiles::from_scratch(&dir, &repo, &base)
    };
    let synced = crate::sync::drop_former_base(&dir, &base).and_then(|()| sync_files(&job));
    let reply = match synced {
        Ok((reply, _)) => reply,
        Err(first) => {
            // The agent may have left shapes an in-place sync cannot fix (a directory where
            // the base has a file): empty the directory, keeping only the new .git, and sync
            // again.
            eprintln!(
                "hunkgate sandbox-helper: resetting {} from scratch ({first})",
                dir.display()
            );
            clear_except_git(&dir).map_err(|e| HelperFailure::Dir {
                path: dir.clone(),
                problem: e.to_string(),
            })?;
            crate::sync::drop_former_base(&dir, &base)?;
            sync_files(&SyncFiles::from_scratch(&dir, &repo, &base))?.0
        }
    };
    wire::write_prepare_reply(out, &reply).map_err(HelperFailure::Output)
}

/// The repository beside a private slot `dir` (`.<slot>.base.git`) that keeps the objects of
/// its bases from one sync to the next: the slot's `.git` borrows them (an alternate), its
/// agent can only read them (bound read-only into its mount namespace, see
/// [`crate::agent::show_only_own_slot`]), and its own objects — anything an earlier agent
/// could have written or forged — are dropped at every sync. None when the slot is not private
/// (its agent could write there too): then the repository is removed, and every blob comes
/// from the hub. `keep` false starts it afresh.
fn base_objects(
    dir: &Path,
    private: bool,
    keep: bool,
) -> Result<Option<crate::store::Store>, HelperFailure> {
    let path = base_objects_path(dir);
    let is_ours = std::fs::symlink_metadata(&path)
        .is_ok_and(|m| m.is_dir() && m.uid() == nix::unistd::getuid().as_raw());
    if !(private && keep && is_ours) {
        crate::sync::remove_any(&path).map_err(|e| HelperFailure::Dir {
            path: path.clone(),
            problem: e.to_string(),
        })?;
    }
    if !private {
        return Ok(None);
    }
    Ok(Some(
        crate::store::Store::open_or_init(&path).map_err(SyncError::from)?,
    ))
}

/// The base objects of the private slot `dir`, for a sync by the helper kept beside it,
/// which has only them to take blobs from. A slot that is not private has no such helper:
/// its objects would be the earlier agent's.
fn kept_base_objects(dir: &Path, private: bool) -> Result<crate::store::Store, HelperFailure> {
    if !private {
        return Err(HelperFailure::Dir {
            path: dir.to_path_buf(),
            problem: "a kept helper syncs only a slot private to its agent".into(),
        });
    }
    base_objects(dir, true, true)?.ok_or_else(|| HelperFailure::Dir {
        path: base_objects_path(dir),
        problem: "no base objects".into(),
    })
}

/// Where [`base_objects`] keeps the base objects of the slot `dir`: beside it, in the
/// directory an agent's mount namespace covers.
pub(crate) fn base_objects_path(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.base.git"))
}

/// The blobs after a `prepare` or `again` request, each given to `each` with its id, up to the
/// end frame; any other frame is refused.
fn read_blobs(
    input: &mut impl Read,
    mut each: impl FnMut(gix::hash::ObjectId, Vec<u8>) -> Result<(), HelperFailure>,
) -> Result<(), HelperFailure> {
    loop {
        match wire::read_frame(input, u64::MAX)? {
            Frame::Blob { oid, bytes } => {
                let id = gix::hash::ObjectId::from_hex(oid.as_bytes()).map_err(|e| {
                    HelperFailure::BadPath {
                        path: oid.clone(),
                        why: format!("not a blob id: {e}"),
                    }
                })?;
                each(id, bytes)?;
            }
            Frame::End => return Ok(()),
            other => {
                return Err(HelperFailure::BadPath {
                    path: format!("{other:?}").chars().take(100).collect(),
                    why: "only blobs may follow the request".into(),
                })
            }
        }
    }
}

/// Read the sandbox back (see [`crate::snapshot::snapshot_sandbox`]): only what differs from
/// `base` (the request's, already read) goes out, as frames. With `dirty` (what a watch saw
/// since the sync of the request's record), only the paths it covers are looked at: every
/// other base path is as the sync left it.
fn snapshot<W: Write>(
    req: &Request,
    base: &FlatTree,
    home: &Path,
    hints: Hints<'_>,
    out: &mut W,
) -> Result<(), HelperFailure> {
    let Hints { record, dirty } = hints;
    let dir = sandbox_dir(home, req, false)?;
    let root = Beneath::open(&dir).map_err(|e| HelperFailure::Dir {
        path: dir.clone(),
        problem: e.to_string(),
    })?;
    let (split, found);
    let (candidates, skipped, looked): (Vec<&str>, _, _) = match (dirty, record) {
        (Some(dirty), Some(record)) => {
            split = split_by_dirty(&dir, &root, base, record, dirty, None);
            let candidates = split.candidates.iter().map(String::as_str).collect();
            (candidates, &split.skipped, Some(&split.looked))
        }
        _ => {
            found = sandbox_candidates_since(&dir, &root, base, record, None);
            (found.with_base(base), &found.skipped, None)
        }
    };
    // Files whose names cannot be carried (never base paths: those are UTF-8) are reported,
    // never silently left out.
    for s in skipped {
        let frame = Frame::Skipped {
            path: s.path.clone(),
            reason: s.reason.clone(),
        };
        wire::write_frame(out, &frame).map_err(HelperFailure::Output)?;
    }
    // The candidates are captured in order: a base path among them that comes back with
    // nothing (gone, or a directory now) is named as gone before the next path that does.
    // (Every base path is a candidate of a whole read-back.)
    let base_paths: Box<dyn Iterator<Item = &str>> = match looked {
        Some(_) => Box::new(candidates.iter().copied().filter(|p| base.contains_key(*p))),
        None => Box::new(base.keys().map(String::as_str)),
    };
    let mut base_paths = base_paths.peekable();
    let mut gone_before = |path: Option<&str>, out: &mut W| -> Result<(), HelperFailure> {
        while let Some(b) = base_paths.next_if(|b| path.is_none_or(|p| *b <= p)) {
            if Some(b) != path {
                let frame = Frame::Gone { path: b.into() };
                wire::write_frame(out, &frame).map_err(HelperFailure::Output)?;
            }
        }
        Ok(())
    };
    let mut sink = |item: Captured| -> Result<(), HelperFailure> {
        // The read-back trusts a stat only for what the base holds.
        if let Captured::Unchanged { path, entry, .. } = &item {
            if base.get(path) != Some(entry) {
                return Err(HelperFailure::BadPath {
                    path: path.clone(),
                    why: "reported unchanged, yet not what the base holds".into(),
                });
            }
        }
        let path = match &item {
            Captured::File { path, .. }
            | Captured::Symlink { path, .. }
            | Captured::Unchanged { path, .. } => path,
            Captured::Skipped(s) => &s.path,
        };
        gone_before(Some(path), out)?;
        match frame_of(item) {
            Some(frame) => wire::write_frame(out, &frame).map_err(HelperFailure::Output),
            None => Ok(()),
        }
    };
    let check = readback_check(base, looked.or(record));
    // The hub hashes what it stores itself: the sandbox's word is data, never an id.
    capture_each(&root, &candidates, req.cap, false, check, &mut sink)?;
    gone_before(None, out)?;
    wire::write_frame(out, &Frame::End).map_err(HelperFailure::Output)
}

/// The frame that sends what a read-back captured; None for what it found unchanged: a base
/// path the helper says nothing of is unchanged, so a read-back costs frames for what changed,
/// not for the whole base.
fn frame_of(item: Captured) -> Option<Frame> {
    Some(match item {
        Captured::File {
            path,
            bytes,
            executable,
            ..
        } => Frame::File {
            path,
            bytes,
            executable,
        },
        Captured::Symlink { path, target, .. } => Frame::Symlink { path, target },
        Captured::Unchanged { .. } => return None,
        Captured::Skipped(s) => Frame::Skipped {
            path: s.path,
            reason: s.reason,
        },
    })
}

fn exec(mut req: Request, home: &Path) -> Result<ExitCode, HelperFailure> {
    let dir = sandbox_dir(home, &req, false)?;
    if req.argv.is_empty() {
        return Err(HelperFailure::EmptyArgv);
    }
    for (k, _) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(HelperFailure::BadEnv(k.clone()));
        }
    }
    let left_out = complete_path(&mut req);
    if let Err(message) = check_program(&req, &dir, &left_out) {
        eprintln!("{}{message}", agent_path::NOT_STARTED);
        return Ok(ExitCode::from(tree::SPAWN_FAILED as u8));
    }
    Ok(tree::run(&req, &dir, &base_objects_path(&dir))?)
}

/// Append to the agent's `PATH` the directories of the hub's that this user can search (see
/// [`crate::agent_path`]); returns those it cannot.
fn complete_path(req: &mut Request) -> Vec<String> {
    let (kept, left_out): (Vec<String>, Vec<String>) = std::mem::take(&mut req.path_if_searchable)
        .into_iter()
        .partition(|d| agent_path::searchable(Path::new(d)));
    if kept.is_empty() {
        return left_out;
    }
    match req.env.iter_mut().find(|(k, _)| k == "PATH") {
        Some((_, path)) => {
            for d in kept {
                if !path.is_empty() {
                    path.push(':');
                }
                path.push_str(&d);
            }
        }
        None => req.env.push(("PATH".into(), kept.join(":"))),
    }
    left_out
}

/// Whether this user can run the agent's program from the sandbox `dir`, looked up on the
/// agent's `PATH` as exec will (exec's default when there is none); if not, what to tell the
/// user. Checked before anything starts, so the run fails saying why and what fixes it.
fn check_program(req: &Request, dir: &Path, left_out: &[String]) -> Result<(), String> {
    let path = req
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/bin:/usr/bin", |(_, v)| v.as_str());
    let program = &req.argv[0];
    agent_path::find_program(program, path, dir)
        .map(drop)
        .map_err(|why| {
            let user = nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
            why.message(program, &user, path, left_out)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot's base objects outlive a sync only where the slot is private (and the sync is
    /// not a full one), and are never reached through what was planted in their place.
    #[test]
    fn base_objects_are_kept_only_for_a_private_slot_and_never_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("0");
        std::fs::create_dir(&dir).unwrap();
        let open = |private, keep| base_objects(&dir, private, keep).unwrap();
        let id = open(true, true).unwrap().write_blob(b"kept\n").unwrap();
        assert!(
            open(true, true).unwrap().has_object(id),
            "kept for the next sync"
        );
        assert!(
            !open(true, false).unwrap().has_object(id),
            "a full prepare starts them afresh"
        );
        open(true, true).unwrap().write_blob(b"kept\n").unwrap();
        assert!(open(false, true).is_none());
        assert!(
            std::fs::symlink_metadata(base_objects_path(&dir)).is_err(),
            "a slot that is not private keeps none"
        );
        // Something planted in their place is removed, never followed.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base_objects_path(&dir)).unwrap();
        let store = open(true, true).unwrap();
        assert!(!store.has_object(id));
        let meta = std::fs::symlink_metadata(base_objects_path(&dir)).unwrap();
        assert!(meta.is_dir() && !meta.file_type().is_symlink());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        // A helper kept beside a slot that is not private refuses to sync it.
        assert!(kept_base_objects(&dir, false).is_err());
        assert!(kept_base_objects(&dir, true).is_ok());
    }

    /// A whole read-back (no watch) sends what differs from the base, names a base path that
    /// is gone, and says nothing of one that still holds the base's content.
    #[test]
    fn a_read_back_sends_only_what_differs_from_the_base() {
        use crate::store::{blob_id, Entry, Mode};
        let tmp = tempfile::tempdir().unwrap();
        let req = Request {
            key: "repo-0123abcd".into(),
            slot: 0,
            cap: u64::MAX,
            ..Request::default()
        };
        let dir = sandbox_dir(tmp.path(), &req, true).unwrap();
        for (p, text) in [
            ("a.txt", "a on disk\n"),
            ("new.txt", "new\n"),
            ("same.txt", "s\n"),
        ] {
            std::fs::write(dir.join(p), text).unwrap();
        }
        let file = |text: &str| Entry {
            mode: Mode::File,
            oid: blob_id(text.as_bytes()),
        };
        let base: FlatTree = [
            ("a.txt", file("a\n")),
            ("gone.txt", file("g\n")),
            ("same.txt", file("s\n")),
        ]
        .into_iter()
        .map(|(p, e)| (p.to_string(), e))
        .collect();
        let mut out = Vec::new();
        snapshot(&req, &base, tmp.path(), Hints::default(), &mut out).unwrap();
        let mut r = std::io::Cursor::new(out);
        let mut frames = Vec::new();
        loop {
            match wire::read_frame(&mut r, u64::MAX).unwrap() {
                Frame::End => break,
                frame => frames.push(frame),
            }
        }
        let f = |path: &str, text: &str| Frame::File {
            path: path.into(),
            bytes: text.as_bytes().to_vec(),
            executable: false,
        };
        let gone = Frame::Gone {
            path: "gone.txt".into(),
        };
        assert_eq!(
            frames,
            [f("a.txt", "a on disk\n"), gone, f("new.txt", "new\n")]
        );
    }

    #[test]
    fn keys_must_be_plain_names() {
        let tmp = tempfile::tempdir().unwrap();
        let req = |key: &str| Request {
            key: key.into(),
            slot: 0,
            ..Request::default()
        };
        for bad in ["", "..", ".hidden", "a/b", "a b", "x\0"] {
            assert!(
                matches!(
                    sandbox_dir(tmp.path(), &req(bad), true),
                    Err(HelperFailure::BadKey(_))
                ),
                "{bad:?}"
            );
        }
        let dir = sandbox_dir(tmp.path(), &req("repo-0123abcd"), true).unwrap();
        assert!(dir.ends_with("sandboxes/repo-0123abcd/0"));
        // A symlink planted where a sandbox level should be is refused, not followed.
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(other.path(), tmp.path().join("sandboxes/evil")).unwrap();
        assert!(matches!(
            sandbox_dir(tmp.path(), &req("evil"), true),
            Err(HelperFailure::Dir { .. })
        ));
    }
}

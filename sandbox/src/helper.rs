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
//!
//! Everything arrives on stdin; nothing secret is ever in argv.
//!
//! **Layer:** the sandbox user's side of [`crate::wire`]. It imports `wire`, [`crate::sync`],
//! `snapshot`, `tools` and what is below them — never [`crate::user`] (the hub's side) nor
//! [`crate::workspace`].

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::agent_path;
use crate::beneath::Beneath;
use crate::snapshot::{
    capture_each, readback_check, sandbox_candidates_since, split_by_dirty, Captured, Hints,
};
use crate::store::FlatTree;
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
    #[error("--agent-network none needs a network namespace, and none could be made ({0}): run the hub as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)")]
    NoNetns(String),
    #[error(
        "--agent-network none was asked for, but this process still sees network interfaces: {0}"
    )]
    NetworkVisible(String),
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

/// Exit status when the helper itself failed before or instead of running an agent.
const HELPER_FAILED: u8 = 125;
/// Exit status when the agent could not be started.
const SPAWN_FAILED: i32 = agent_path::NOT_STARTED_STATUS as i32;
/// After the run's timeout, how long the helper waits for the hub to stop it before doing so
/// on its own.
const DEADLINE_GRACE: Duration = Duration::from_secs(30);
/// Between SIGTERM and SIGKILL of the agent's tree.
const TERM_GRACE: Duration = Duration::from_secs(2);

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
                if can_make_pid_namespace() {
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
            snapshot_op(&home, &mut input, std::io::stdout().lock(), not_dumpable)
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
/// this process out of the agent's reach (the helper's main passes [`not_dumpable`]; a
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

static STOP: AtomicBool = AtomicBool::new(false);

/// The agent's stdin under `stdio`: a pipe whose read end is the agent's fd 0.
struct AgentStdin {
    rd: std::os::fd::OwnedFd,
    wr: std::os::fd::OwnedFd,
}

/// What follows the request on the lifeline (stdin), on its way to the agent's stdin pipe:
/// relayed by the supervisor's loop as both sides are ready (the helper has no other thread:
/// none can be made once it entered a PID namespace for its children), holding at most
/// [`RELAY_HELD`] bytes; once the agent closed its end, the rest is read and dropped.
struct Relay {
    pipe: Option<std::os::fd::OwnedFd>,
    pending: Vec<u8>,
}

/// The most a [`Relay`] holds: while it holds this much, the lifeline is not read.
const RELAY_HELD: usize = 256 * 1024;

impl Relay {
    fn new(pipe: std::os::fd::OwnedFd) -> Self {
        // SAFETY: fcntl on a descriptor this struct owns.
        unsafe {
            let flags = libc::fcntl(pipe.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Self {
            pipe: Some(pipe),
            pending: Vec::new(),
        }
    }

    /// Wait up to `ms` for the lifeline, the pipe or a [`wake`], and move what can be moved;
    /// `Closed` at the lifeline's EOF.
    fn step(&mut self, ms: libc::c_int) -> Readable {
        let want_out = !self.pending.is_empty() && self.pipe.is_some();
        let pipe_fd = self.pipe.as_ref().map_or(-1, |p| p.as_raw_fd());
        let mut pfds = [
            libc::pollfd {
                fd: if self.pending.len() < RELAY_HELD {
                    libc::STDIN_FILENO
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if want_out { pipe_fd } else { -1 },
                events: libc::POLLOUT,
                revents: 0,
            },
            libc::pollfd {
                fd: wake::fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: three pollfds on the stack (a negative fd is ignored by poll).
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 3, ms) };
        if pfds[2].revents != 0 {
            wake::drain();
        }
        if n <= 0 {
            return Readable::No;
        }
        if pfds[1].revents != 0 {
            self.flush();
        }
        if pfds[0].revents == 0 {
            return Readable::No;
        }
        let mut buf = [0u8; 64 * 1024];
        // SAFETY: reading into a stack buffer of the given length.
        let got = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        if got <= 0 {
            return Readable::Closed;
        }
        if self.pipe.is_some() {
            self.pending.extend_from_slice(&buf[..got as usize]);
            self.flush();
        }
        Readable::Yes
    }

    /// Write what the pipe takes now; a closed pipe drops the rest.
    fn flush(&mut self) {
        let Some(pipe) = &self.pipe else { return };
        while !self.pending.is_empty() {
            // SAFETY: writing from a live buffer of the given length.
            let n = unsafe {
                libc::write(
                    pipe.as_raw_fd(),
                    self.pending.as_ptr().cast(),
                    self.pending.len(),
                )
            };
            if n > 0 {
                self.pending.drain(..n as usize);
                continue;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
                self.pipe = None;
                self.pending.clear();
            }
            return;
        }
    }
}

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    wake::poke();
}

/// A self-pipe that wakes the waiting loops (the supervisor's and the namespace init's) the
/// moment a child exits or a stop signal arrives, rather than at their next poll timeout:
/// an agent's exit reaches the hub at once, which is most of a publish's latency otherwise.
mod wake {
    use nix::libc;
    use std::sync::atomic::{AtomicI32, Ordering};

    static READ: AtomicI32 = AtomicI32::new(-1);
    static WRITE: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn on_child(_: libc::c_int) {
        poke();
    }

    /// Make the pipe readable (async-signal-safe: one `write` to a non-blocking pipe; a full
    /// pipe already wakes the reader).
    pub(super) fn poke() {
        let fd = WRITE.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: write(2) of one byte from a static buffer.
            unsafe { libc::write(fd, b"!".as_ptr().cast(), 1) };
        }
    }

    /// A fresh pipe for this process (a forked child must not share its parent's: either
    /// could swallow the other's wake-up) and SIGCHLD pokes it.
    pub(super) fn install() -> std::io::Result<()> {
        let mut fds = [-1; 2];
        // SAFETY: pipe(2) into a two-element array; fcntl on the descriptors it returned.
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        for old in [
            READ.swap(fds[0], Ordering::SeqCst),
            WRITE.swap(fds[1], Ordering::SeqCst),
        ] {
            if old >= 0 {
                // SAFETY: the previous pipe's descriptors, owned by these statics alone.
                unsafe { libc::close(old) };
            }
        }
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let action = SigAction::new(
            SigHandler::Handler(on_child),
            SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
            SigSet::empty(),
        );
        // SAFETY: the handler only writes to a pipe, which is async-signal-safe.
        unsafe { sigaction(Signal::SIGCHLD, &action) }.map_err(std::io::Error::from)?;
        Ok(())
    }

    /// The read end (-1 before [`install`]).
    pub(super) fn fd() -> libc::c_int {
        READ.load(Ordering::SeqCst)
    }

    /// Empty the pipe (every wake-up is handled by the caller's next pass).
    pub(super) fn drain() {
        let mut buf = [0u8; 64];
        // SAFETY: reading into a stack buffer of the given length from a non-blocking fd.
        while unsafe { libc::read(fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

fn catch_stop_signals() -> Result<(), HelperFailure> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }
            .map_err(|e| sys("installing a signal handler")(e.into()))?;
    }
    Ok(())
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
        return Ok(ExitCode::from(SPAWN_FAILED as u8));
    }
    let req = &req;
    // No core dumps from the helper either: they could hold the agent token.
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)
        .map_err(|e| sys("setting RLIMIT_CORE")(e.into()))?;
    catch_stop_signals()?;
    set_no_new_privs()?;
    #[cfg(target_os = "linux")]
    {
        // Orphans of the agent's tree are re-parented to us, not to init, so we can find them.
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(sys("becoming a child subreaper")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    let pid_ns = enter_namespaces(req)?;
    if req.network_none {
        check_no_network()?;
    }
    let deadline = (req.timeout_ms > 0)
        .then(|| Instant::now() + Duration::from_millis(req.timeout_ms) + DEADLINE_GRACE);

    // With `stdio`, the agent's stdin is a pipe this helper fills from the lifeline.
    let stdin_pipe = if req.stdio {
        let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| sys("creating the agent's stdin pipe")(e.into()))?;
        Some(AgentStdin { rd, wr })
    } else {
        None
    };
    let child = if pid_ns {
        spawn_init(req, &dir, stdin_pipe.as_ref())?
    } else {
        match spawn_agent(req, &dir, stdin_pipe.as_ref().map(|p| &p.rd)) {
            Ok(pid) => pid,
            Err(e) => {
                eprintln!("{}{:?}: {e}", agent_path::NOT_STARTED, req.argv[0]);
                return Ok(ExitCode::from(SPAWN_FAILED as u8));
            }
        }
    };
    let relay = stdin_pipe.map(|p| {
        drop(p.rd);
        Relay::new(p.wr)
    });
    let status = supervise(child, pid_ns, deadline, req.lifeline, relay);
    // A namespace init that exited of itself (not killed) has, but for the rare ends where the
    // agent never started, told the hub how the agent ended (on a lifeline that is a socket it
    // can): then the hub does not wait for this exit either. Otherwise it does, and this exit
    // is only slower on a busy machine.
    if pid_ns && req.verdict && matches!(status, WaitStatus::Exited(..)) && stdin_is_socket() {
        let _ = crate::idle_priority();
    }
    // Whatever the agent left running dies now, whether it exited or was stopped. In a PID
    // namespace the kernel has done it already: its init's exit is reported only once every
    // other process of the namespace is gone, and nothing in it can leave it — so the end of
    // the run is not held up by a look at every process of the machine.
    if !pid_ns {
        kill_tree(Signal::SIGKILL);
    }
    exit_like(status)
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

/// Whether stdin is a socket: the hub's lifeline, not a relaying sudo's pipe.
fn stdin_is_socket() -> bool {
    nix::sys::stat::fstat(std::io::stdin().as_fd())
        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK)
}

/// Make this process one that processes of the same user cannot trace or read the memory of
/// (`PR_SET_DUMPABLE` 0; Linux only: elsewhere a standby read-back is never asked for).
fn not_dumpable() -> Result<(), HelperFailure> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(sys("prctl(PR_SET_DUMPABLE)")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

fn set_no_new_privs() -> Result<(), HelperFailure> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(sys("setting NO_NEW_PRIVS")(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Whether the helper's next child starts a fresh PID namespace. A root hub has already
/// unshared PID (and network) namespaces; through sudo, an unprivileged user namespace can own
/// new ones. Without either, the tree is tracked through the subreaper instead.
#[cfg(target_os = "linux")]
fn enter_namespaces(req: &Request) -> Result<bool, HelperFailure> {
    let pending = pid_ns_pending();
    if req.namespaces_ready && (pending || !req.network_none) {
        return Ok(pending);
    }
    if req.no_pid_namespace && !req.network_none {
        return Ok(false);
    }
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let mut flags = libc::CLONE_NEWUSER;
    if !req.no_pid_namespace {
        flags |= libc::CLONE_NEWPID;
    }
    if req.network_none {
        flags |= libc::CLONE_NEWNET;
    }
    if req.private_proc {
        flags |= libc::CLONE_NEWNS;
    }
    // SAFETY: unshare with integer flags; the helper is single-threaded, as a user namespace
    // requires.
    if unsafe { libc::unshare(flags) } != 0 {
        let e = std::io::Error::last_os_error();
        if req.private_proc {
            return Err(sys("making the agent's PID namespace with a private /proc")(e));
        }
        if req.network_none {
            return Err(HelperFailure::NoNetns(e.to_string()));
        }
        eprintln!(
            "hunkgate: no PID namespace for the agent ({e}); tracking its process tree instead"
        );
        return Ok(false);
    }
    // Map only ourselves, so files keep their owners; setgroups must be denied first.
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(sys("writing the user namespace map"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(!req.no_pid_namespace)
}

#[cfg(not(target_os = "linux"))]
fn enter_namespaces(req: &Request) -> Result<bool, HelperFailure> {
    if req.network_none {
        return Err(HelperFailure::NoNetns(
            "network namespaces exist only on Linux".into(),
        ));
    }
    Ok(false)
}

/// Whether an unprivileged user + PID namespace can be made here (tried in a throwaway child).
fn can_make_pid_namespace() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the helper is single-threaded; the child only unshares and exits.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => {
                let ok = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } == 0;
                // SAFETY: exit without running the parent's atexit handlers twice.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            Ok(nix::unistd::ForkResult::Parent { child }) => {
                matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0)))
            }
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(target_os = "linux")]
fn pid_ns_pending() -> bool {
    let a = std::fs::read_link("/proc/self/ns/pid");
    let b = std::fs::read_link("/proc/self/ns/pid_for_children");
    match (a, b) {
        (Ok(a), Ok(b)) => a != b,
        // A fresh PID namespace reads as missing until its first process (our init) exists.
        (Ok(_), Err(e)) => e.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// In a fresh network namespace only `lo` exists; anything else means the request was not met.
fn check_no_network() -> Result<(), HelperFailure> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/self/net/dev")
            .map_err(sys("reading /proc/self/net/dev"))?;
        let others: Vec<&str> = text
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .filter(|name| *name != "lo")
            .collect();
        if !others.is_empty() {
            return Err(HelperFailure::NetworkVisible(others.join(", ")));
        }
    }
    Ok(())
}

/// Fork the PID namespace's init: it starts the agent, reaps everything re-parented to it,
/// forwards SIGTERM to the whole namespace, and exits with the agent's status as soon as the
/// agent exits — at which point the kernel kills every other process in the namespace.
fn spawn_init(req: &Request, dir: &Path, stdin: Option<&AgentStdin>) -> Result<Pid, HelperFailure> {
    // The init watches this pipe: EOF means the helper is gone (however it died).
    let (guard_rd, guard_wr) = nix::unistd::pipe().map_err(|e| sys("creating a pipe")(e.into()))?;
    // SAFETY: the helper is single-threaded (it runs before any runtime is started), so the
    // child may keep running Rust code after fork.
    match unsafe { nix::unistd::fork() }.map_err(|e| sys("forking")(e.into()))? {
        nix::unistd::ForkResult::Parent { child } => {
            drop(guard_rd);
            // Leak the write end on purpose: it must stay open exactly as long as we live.
            std::mem::forget(guard_wr);
            Ok(child)
        }
        nix::unistd::ForkResult::Child => {
            drop(guard_wr);
            // Only the helper writes the agent's stdin: EOF there is the helper's to give.
            let stdin = stdin.map(|p| {
                // SAFETY: the child's own copy of the descriptor, closed once here.
                unsafe { libc::close(p.wr.as_raw_fd()) };
                &p.rd
            });
            let code = init_main(req, dir, guard_rd, stdin);
            std::process::exit(code)
        }
    }
}

/// For a private slot, in the agent's mount namespace: show the agent its own slot (and its
/// base objects, read-only) and no other of the sandbox user's (see
/// [`crate::agent::show_only_own_slot`]). `dir` is `<home>/sandboxes/<key>/<slot>`
/// ([`sandbox_dir`]): every slot of every repository is under `<home>/sandboxes`.
fn hide_other_slots(req: &Request, dir: &Path) -> std::io::Result<()> {
    if !req.private_slot {
        return Ok(());
    }
    let root = dir.ancestors().nth(2).ok_or_else(|| {
        std::io::Error::other(format!("{}: not a slot's directory", dir.display()))
    })?;
    let objects = base_objects_path(dir);
    let objects = std::fs::symlink_metadata(&objects)
        .is_ok_and(|m| m.is_dir())
        .then_some(objects.as_path());
    crate::agent::show_only_own_slot(root, dir, objects)
}

fn init_main(
    req: &Request,
    dir: &Path,
    guard: std::os::fd::OwnedFd,
    stdin: Option<&std::os::fd::OwnedFd>,
) -> i32 {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments. If the helper dies, so does this init, and with it
    // the whole namespace.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    if req.private_proc {
        if let Err(e) = crate::agent::mount_private_proc().and_then(|()| hide_other_slots(req, dir))
        {
            eprintln!("hunkgate: refusing to start the agent: {e}");
            return HELPER_FAILED as i32;
        }
    }
    // The agent runs as the same user in this namespace, and this process holds the hub's
    // lifeline (its stdin): no tracing it, no reading its memory, no writing its words.
    if let Err(e) = not_dumpable() {
        eprintln!("hunkgate: refusing to start the agent: {e}");
        return HELPER_FAILED as i32;
    }
    // Without the pipe the loop below still sees the agent's exit, at its next timeout.
    let _ = wake::install();
    let agent = match spawn_agent(req, dir, stdin) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("{}{:?}: {e}", agent_path::NOT_STARTED, req.argv[0]);
            return SPAWN_FAILED;
        }
    };
    let mut forwarded = false;
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == agent => {
                    return init_done(req, [0, code as u8], code)
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == agent => {
                    return init_done(req, [1, sig as u8], 128 + sig as i32)
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        if STOP.load(Ordering::SeqCst) && !forwarded {
            forwarded = true;
            // From the namespace's init, -1 means every other process in the namespace.
            let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
        }
        if wait_readable(guard.as_raw_fd(), 50) == Readable::Closed {
            return 128 + libc::SIGKILL;
        }
    }
}

/// The agent has exited (`report`: its wait status as the hub reads it, see
/// [`crate::wire::Request::verdict`]): kill and reap whatever it left in the namespace, as the
/// kernel would once this init exits, then tell the hub on the lifeline, if it asked, that
/// nothing the agent started is left. Returns the init's exit code.
fn init_done(req: &Request, report: [u8; 2], code: i32) -> i32 {
    // PID namespaces, and so this init, exist only on Linux.
    #[cfg(target_os = "linux")]
    // Only as the namespace's PID 1 does kill(-1) reach no further than the namespace.
    if std::process::id() == 1 {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        // Any child, clones included, until there is none: each one reaped has closed its
        // files, so what the agent's tree wrote to its output pipes is all in them.
        while let Ok(_) | Err(nix::errno::Errno::EINTR) = waitpid(None, Some(WaitPidFlag::__WALL)) {
        }
        if req.verdict {
            // SAFETY: send(2) of a two-byte stack buffer on stdin; a stdin that is no socket
            // (a relaying sudo's pipe) fails, and the hub waits for the exits instead.
            let sent = unsafe {
                libc::send(
                    libc::STDIN_FILENO,
                    report.as_ptr().cast(),
                    report.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            // The hub has heard: nobody waits for this init's exit.
            if sent == report.len() as isize {
                let _ = crate::idle_priority();
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (req, report);
    code
}

/// Start the agent itself: new session, limits, only fds 0–2, exactly the given environment;
/// its stdin is `stdin` (the read end of the pipe the helper relays the lifeline to) or
/// `/dev/null`.
fn spawn_agent(
    req: &Request,
    dir: &Path,
    stdin: Option<&std::os::fd::OwnedFd>,
) -> std::io::Result<Pid> {
    let mut cmd = std::process::Command::new(&req.argv[0]);
    cmd.args(&req.argv[1..])
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(match stdin {
            Some(fd) => Stdio::from(fd.try_clone()?),
            None => Stdio::null(),
        });
    let nproc = if req.nproc == 0 {
        crate::wire::AGENT_NPROC
    } else {
        req.nproc
    };
    // SAFETY: the closure runs in the forked child before exec and makes only system calls.
    unsafe {
        cmd.pre_exec(move || agent_pre_exec(nproc));
    }
    let child = cmd.spawn()?;
    Ok(Pid::from_raw(child.id() as i32))
}

fn agent_pre_exec(nproc: u64) -> std::io::Result<()> {
    let last = std::io::Error::last_os_error;
    // SAFETY: plain system calls with integer arguments and stack-allocated structs.
    unsafe {
        // A new session: no controlling terminal, so TIOCSTI and /dev/tty have nothing to reach.
        if libc::setsid() < 0 {
            return Err(last());
        }
        let core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &core) != 0 {
            return Err(last());
        }
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NPROC, &mut cur) != 0 {
            return Err(last());
        }
        let n = (nproc as libc::rlim_t).min(cur.rlim_max);
        let lim = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        if libc::setrlimit(libc::RLIMIT_NPROC, &lim) != 0 {
            return Err(last());
        }
        close_fds_from_3_on_exec()
    }
}

/// Mark every descriptor above 2 close-on-exec (not closed now: std's exec-error pipe must
/// stay usable until the exec).
unsafe fn close_fds_from_3_on_exec() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return Ok(());
        }
    }
    // Older kernels and macOS: every possible descriptor, one by one.
    let max = match libc::sysconf(libc::_SC_OPEN_MAX) {
        n if n > 0 => n.min(1 << 20) as libc::c_int,
        _ => 65536,
    };
    for fd in 3..max {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Readable {
    No,
    Yes,
    Closed,
}

/// Wait up to `ms` for `fd` to become readable, or for a [`wake`] (a child exited, a stop
/// signal came: reported as `No`, for the caller's loop to look); report EOF or a hang-up as
/// `Closed` (data is read and discarded: the lifeline carries none after the request).
fn wait_readable(fd: libc::c_int, ms: libc::c_int) -> Readable {
    let mut pfds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake::fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two pollfds on the stack (a negative fd is ignored by poll).
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
    if pfds[1].revents != 0 {
        wake::drain();
    }
    let pfd = &pfds[0];
    if n <= 0 || pfd.revents == 0 {
        return Readable::No;
    }
    if pfd.revents & libc::POLLNVAL != 0 {
        return Readable::Closed;
    }
    let mut buf = [0u8; 512];
    // SAFETY: reading into a stack buffer of the given length.
    let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if got <= 0 {
        Readable::Closed
    } else {
        Readable::Yes
    }
}

/// Wait for `child` (the agent, or the namespace's init), reaping every other process that is
/// re-parented to us, and stop the tree when told to: SIGTERM, lifeline EOF, or the deadline.
///
/// With `relay`, what comes on the lifeline goes on to the agent's stdin as it waits.
fn supervise(
    child: Pid,
    pid_ns: bool,
    deadline: Option<Instant>,
    lifeline: bool,
    mut relay: Option<Relay>,
) -> WaitStatus {
    let mut stopping_since: Option<Instant> = None;
    let mut killed = false;
    let mut lifeline_open = lifeline;
    // Without the pipe the loop below still sees the child's exit, at its next timeout.
    let _ = wake::install();
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                    if pid == child =>
                {
                    return status
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                // No children at all: the child is gone and was reaped by someone else.
                Err(_) => return WaitStatus::Exited(child, HELPER_FAILED as i32),
            }
        }
        if let (true, Some(r)) = (lifeline_open, relay.as_mut()) {
            if r.step(100) == Readable::Closed {
                lifeline_open = false;
                // The agent's stdin ends with the lifeline.
                relay = None;
            }
        } else if lifeline_open {
            if wait_readable(libc::STDIN_FILENO, 100) == Readable::Closed {
                lifeline_open = false;
            }
        } else {
            // No descriptor but the wake-up pipe: a child's exit or a signal, or the timeout.
            wait_readable(-1, 100);
        }
        let stop = STOP.load(Ordering::SeqCst)
            || (lifeline && !lifeline_open)
            || deadline.is_some_and(|d| Instant::now() >= d);
        if stop && stopping_since.is_none() {
            stopping_since = Some(Instant::now());
            let _ = kill(child, Signal::SIGTERM);
            if !pid_ns {
                kill_tree_once(Signal::SIGTERM);
            }
        }
        if let Some(since) = stopping_since {
            if !killed && since.elapsed() >= TERM_GRACE {
                killed = true;
                // Killing the namespace's init kills the namespace.
                let _ = kill(child, Signal::SIGKILL);
                kill_tree(Signal::SIGKILL);
            }
        }
    }
}

/// Signal every descendant until none is left alive (a fork racing the sweep is caught by the
/// next pass; RLIMIT_NPROC bounds how long that can go on).
fn kill_tree(sig: Signal) {
    for _ in 0..200 {
        if kill_tree_once(sig) == 0 {
            return;
        }
        reap_all();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Signal every live descendant once; returns how many there were.
fn kill_tree_once(sig: Signal) -> usize {
    let me = nix::unistd::getpid().as_raw();
    let procs = process_table();
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (&pid, &(ppid, _)) in &procs {
        children.entry(ppid).or_default().push(pid);
    }
    let mut stack = vec![me];
    let mut live = 0;
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            stack.push(c);
            if procs.get(&c).is_some_and(|&(_, zombie)| !zombie) {
                live += 1;
                let _ = kill(Pid::from_raw(c), sig);
            }
        }
    }
    live
}

fn reap_all() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// pid -> (parent pid, is a zombie), for every process we can see.
#[cfg(target_os = "linux")]
fn process_table() -> BTreeMap<i32, (i32, bool)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((ppid, zombie)) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
        {
            out.insert(pid, (ppid, zombie));
        }
    }
    out
}

/// `pid (comm) S ppid ...`; comm may itself contain ") ", so split at the last one.
#[cfg(any(target_os = "linux", test))]
fn parse_stat(stat: &str) -> Option<(i32, bool)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state == "Z"))
}

#[cfg(not(target_os = "linux"))]
fn process_table() -> BTreeMap<i32, (i32, bool)> {
    // No /proc: ask ps (macOS ships it in /bin).
    let mut out = BTreeMap::new();
    let Ok(o) = std::process::Command::new("/bin/ps")
        .args(["-axo", "pid=,ppid=,stat="])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let mut f = line.split_whitespace();
        if let (Some(pid), Some(ppid), Some(stat)) = (f.next(), f.next(), f.next()) {
            if let (Ok(pid), Ok(ppid)) = (pid.parse(), ppid.parse()) {
                out.insert(pid, (ppid, stat.starts_with('Z')));
            }
        }
    }
    out
}

/// Exit the way the agent did: its exit code, or the signal that killed it (re-raised, so the
/// hub — through sudo, which does the same — sees a death by that signal).
fn exit_like(status: WaitStatus) -> Result<ExitCode, HelperFailure> {
    match status {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, sig, _) => {
            use nix::sys::signal::{signal, SigHandler};
            // SAFETY: restoring the default disposition of a signal.
            unsafe {
                let _ = signal(sig, SigHandler::SigDfl);
            }
            let _ = nix::sys::signal::raise(sig);
            std::process::exit(128 + sig as i32)
        }
        _ => Ok(ExitCode::from(HELPER_FAILED)),
    }
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

    #[test]
    fn stat_lines_with_hostile_names_parse() {
        assert_eq!(parse_stat("12 (sh) S 7 12 12 0"), Some((7, false)));
        assert_eq!(parse_stat("13 (a) Z (b) Z 9 1 1"), Some((9, true)));
        assert_eq!(parse_stat("garbage"), None);
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

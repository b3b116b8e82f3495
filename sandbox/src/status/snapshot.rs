//! Snapshots: a directory's files, read as data, written into the checkpoint store as a tree.
//!
//! Two flavours share one reader:
//! - the user's checkout "as the user sees it": tracked files (from the index) plus untracked files
//!   that are not ignored (the user's .gitignore files, `.git/info/exclude`, global excludes);
//! - the sandbox clone: the run's base paths plus untracked, not-ignored files, where only the
//!   `.gitignore` files inside the tree count (the sandbox's git configuration is the agent's, and
//!   is never consulted).
//!
//! Nothing is followed: symlinks are stored as symlinks, FIFOs, sockets and devices are skipped,
//! files over the cap are skipped, and every skip is reported so the user hears about it.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::fs::beneath::{Beneath, FsError, Kind};
use crate::odb::store::{
    blob_id, changes_between, Changes, Entry, FlatTree, Mode, ObjectBatch, Store, StoreError,
};
use crate::status::statcache::{file_stat, is_racy, StatCache};
use crate::status::watch::{Dirty, Within};
pub use crate::supervise::limits::{OverLimit, ReadLimits};
use crate::wire::{FileStat, SyncRecord};
use crate::ObjectId;

/// Files larger than this are left out of snapshots (and reported).
pub const DEFAULT_FILE_CAP: u64 = ReadLimits::FILE_CAP;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Snapshot {
    pub tree: FlatTree,
    pub skipped: Vec<Skipped>,
}

/// A sandbox read back against the base it was synced to: only what differs, so that what
/// follows (hunks, the run's tree) costs what the agent changed, not what the repository holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadBack {
    /// What differs from the base. A base path that could not be read as a file or symlink
    /// (too large, a FIFO, …) is gone here and named in `skipped`.
    pub changes: Changes,
    pub skipped: Vec<Skipped>,
}

impl ReadBack {
    /// Everything the sandbox holds: `base` with the changes.
    pub fn tree(&self, base: &FlatTree) -> FlatTree {
        let mut tree = base.clone();
        for (path, entry) in &self.changes {
            match entry {
                Some(e) => tree.insert(path.clone(), *e),
                None => tree.remove(path),
            };
        }
        tree
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "{path} is not inside a git repository (run hunkgate in a git repository or pass --repo)"
    )]
    NotARepo { path: String },
    #[error("reading the git index of {path}: {message}")]
    Index { path: String, message: String },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    OverLimit(#[from] OverLimit),
}

impl SnapshotError {
    /// The limit a read-back went past, if that is what this is.
    pub fn over_limit(&self) -> Option<OverLimit> {
        match self {
            SnapshotError::OverLimit(o) | SnapshotError::Store(StoreError::OverLimit(o)) => {
                Some(*o)
            }
            _ => None,
        }
    }
}

/// Candidate paths from a walk that honours .gitignore files and never descends into `.git`.
pub(crate) fn walk_not_ignored(root: &Path, user_excludes: bool) -> BTreeSet<String> {
    walk_reporting(root, user_excludes).0
}

/// A name hunkgate cannot carry (not UTF-8), shown with its odd bytes as `\xNN`.
pub fn shown_name(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

const NOT_UTF8: &str = "file name is not UTF-8: hunkgate cannot review it";

/// [`walk_not_ignored`], also reporting the files it leaves out because their names are not
/// UTF-8 (never silently: a file left out of a snapshot must not look deleted or absent).
pub(crate) fn walk_reporting(root: &Path, user_excludes: bool) -> (BTreeSet<String>, Vec<Skipped>) {
    let w = walk(root, user_excludes, None, None);
    (w.files, w.skipped)
}

/// What a walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    /// Files (and symlinks, and other non-directories) not ignored.
    pub files: BTreeSet<String>,
    /// Names it could not carry (not UTF-8), to be reported.
    pub skipped: Vec<Skipped>,
    /// The directories it entered (`""` is the root).
    pub dirs: Vec<String>,
    /// It stopped at its `max_files`: there were more files (and names it could not carry)
    /// than that, and only that many are in `files` and `skipped`.
    pub stopped: bool,
}

/// Walk `root` as git would list it: `.gitignore` files apply (and with `user_excludes` the
/// user's global excludes and `.git/info/exclude`), `.git` and `.jj` are never entered, nothing
/// is followed. With `within`, only the directories it [enters](Within::enters) are entered —
/// the directories where change notification saw something (see [`crate::status::watch`]) and the way
/// to them, each read with the same ignore rules as a whole walk would read it.
///
/// With `max_files`, it stops once it has found more files (and names it cannot carry) than
/// that — [`Walked::stopped`] — holding no more than that many: what a directory the agent
/// filled with millions of files costs the hub is bounded by the caller's limit, not by the
/// directory.
pub(crate) fn walk(
    root: &Path,
    user_excludes: bool,
    within: Option<Within>,
    max_files: Option<usize>,
) -> Walked {
    let restricted = within.is_some();
    let base = root.to_path_buf();
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(false)
        .follow_links(false)
        .parents(false)
        .require_git(false)
        .git_ignore(true)
        .git_global(user_excludes)
        .git_exclude(user_excludes)
        .ignore(false)
        // VCS metadata is never content: .git, and jj's .jj.
        .filter_entry(move |e| {
            if e.file_name() == ".git" || e.file_name() == ".jj" {
                return false;
            }
            match &within {
                Some(within) if e.file_type().is_some_and(|t| t.is_dir()) => e
                    .path()
                    .strip_prefix(&base)
                    .ok()
                    .and_then(|rel| rel.to_str())
                    .is_some_and(|rel| within.enters(rel)),
                _ => true,
            }
        });
    // The parallel walker: a whole walk shares its directories among a few threads (reading
    // 10,000 entries is most of a sandbox read-back); a restricted one gets one worker, the
    // point there being what is not read (the sequential walker opens every directory before
    // its filter can skip it, the parallel one asks the filter first).
    let threads = if restricted {
        1
    } else {
        crate::threads::io_threads()
    };
    let found = std::sync::Mutex::new(Vec::new());
    let budget = Budget {
        left: max_files.map(std::sync::atomic::AtomicUsize::new),
        stopped: std::sync::atomic::AtomicBool::new(false),
    };
    builder
        .threads(threads)
        .build_parallel()
        .visit(&mut Collect {
            root,
            found: &found,
            budget: &budget,
        });
    let parts = found.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut out = Walked {
        stopped: budget.stopped.into_inner(),
        ..Walked::default()
    };
    for part in parts {
        out.files.extend(part.files);
        out.dirs.extend(part.dirs);
        out.skipped.extend(part.skipped);
    }
    out.dirs.sort();
    out.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// What each thread of [`walk`] found, kept apart (no lock per entry) and handed over when the
/// thread's visitor is dropped at the end of the walk.
struct Collect<'a> {
    root: &'a Path,
    found: &'a std::sync::Mutex<Vec<Walked>>,
    budget: &'a Budget,
}

/// How many more files a [`walk`]'s threads may take between them (None: no limit), and
/// whether one of them found a file past that.
struct Budget {
    left: Option<std::sync::atomic::AtomicUsize>,
    stopped: std::sync::atomic::AtomicBool,
}

impl Budget {
    /// Take one file from the budget; false (and the walk stopped) when none is left.
    fn take_one(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(left) = &self.left else {
            return true;
        };
        let took = left
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if !took {
            self.stopped.store(true, Relaxed);
        }
        took
    }
}

/// One thread's share of a [`walk`].
struct CollectOne<'a> {
    root: &'a Path,
    found: &'a std::sync::Mutex<Vec<Walked>>,
    budget: &'a Budget,
    mine: Walked,
}

impl<'s> ignore::ParallelVisitorBuilder<'s> for Collect<'s> {
    fn build(&mut self) -> Box<dyn ignore::ParallelVisitor + 's> {
        Box::new(CollectOne {
            root: self.root,
            found: self.found,
            budget: self.budget,
            mine: Walked::default(),
        })
    }
}

impl ignore::ParallelVisitor for CollectOne<'_> {
    fn visit(&mut self, entry: Result<ignore::DirEntry, ignore::Error>) -> ignore::WalkState {
        let took = match entry {
            Ok(entry) => self.mine.take(self.root, &entry, self.budget),
            Err(e) => self.mine.take_error(self.root, &e, self.budget),
        };
        match took {
            true => ignore::WalkState::Continue,
            false => ignore::WalkState::Quit,
        }
    }
}

impl Drop for CollectOne<'_> {
    fn drop(&mut self) {
        let mine = std::mem::take(&mut self.mine);
        match self.found.lock() {
            Ok(mut found) => found.push(mine),
            Err(poisoned) => poisoned.into_inner().push(mine),
        }
    }
}

impl Walked {
    /// Keep what `entry` is; false when it is a file past the walk's budget (then it is not
    /// kept, and the walk stops).
    fn take(&mut self, root: &Path, entry: &ignore::DirEntry, budget: &Budget) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        // The walker builds each path as `root` + `/` + names: its relative part is a byte
        // slice (`Path::strip_prefix` compares component by component, a tenth of a walk).
        let (path, root) = (
            entry.path().as_os_str().as_bytes(),
            root.as_os_str().as_bytes(),
        );
        let Some(rel) = path.strip_prefix(root) else {
            return true;
        };
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        if rel.len() as u64 > crate::wire::MAX_PATH {
            // Its directory could be read, yet its path is past what hunkgate carries. (A
            // directory cannot be read in turn: that error reports it, see `take_error`.)
            return is_dir || self.skip(rel, TOO_LONG.into(), budget);
        }
        match std::str::from_utf8(rel).ok() {
            Some(s) if is_dir => self.dirs.push(s.to_string()),
            Some("") => {}
            None if is_dir => {}
            _ if !budget.take_one() => return false,
            Some(s) => {
                self.files.insert(s.to_string());
            }
            None => self.skipped.push(Skipped {
                path: shown_path(rel),
                reason: NOT_UTF8.into(),
            }),
        }
        true
    }
}

impl Walked {
    /// Keep what the walker could not read (a directory its user may not list, one whose
    /// path is past `PATH_MAX`) as skipped, with why: never silently left out. An error
    /// without a path under `root` or an I/O cause (a symlink loop is never met: nothing is
    /// followed) is not one. False past the walk's budget, as for [`Walked::take`].
    fn take_error(&mut self, root: &Path, e: &ignore::Error, budget: &Budget) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let (Some(path), Some(io)) = (error_path(e), e.io_error()) else {
            return true;
        };
        let Ok(rel) = path.strip_prefix(root) else {
            return true;
        };
        let reason = match io.raw_os_error() {
            Some(nix::libc::ENAMETOOLONG) => TOO_LONG.to_string(),
            _ => format!("cannot be read ({io}): hunkgate cannot review it"),
        };
        self.skip(rel.as_os_str().as_bytes(), reason, budget)
    }

    /// Report `rel` as skipped for `reason`, within the walk's budget.
    fn skip(&mut self, rel: &[u8], reason: String, budget: &Budget) -> bool {
        if !budget.take_one() {
            return false;
        }
        self.skipped.push(Skipped {
            path: shown_path(rel),
            reason,
        });
        true
    }
}

const TOO_LONG: &str = "path is longer than 4096 bytes: hunkgate cannot review it";

/// The most bytes of a path [`shown_path`] shows.
const SHOWN_PATH_MAX: usize = 256;

/// A path as a skip report shows it: [`shown_name`], cut after its first
/// [`SHOWN_PATH_MAX`] bytes with how long it was (a path past `PATH_MAX` fits no frame).
fn shown_path(rel: &[u8]) -> String {
    if rel.len() <= SHOWN_PATH_MAX {
        return shown_name(rel);
    }
    format!(
        "{}… ({} bytes)",
        shown_name(&rel[..SHOWN_PATH_MAX]),
        rel.len()
    )
}

/// The path an error of the walker names, if it names one.
fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}

/// One candidate path, read as data (see [`capture_each`]).
#[derive(Debug)]
pub enum Captured {
    File {
        path: String,
        bytes: Vec<u8>,
        executable: bool,
        /// The file's stat, taken on the open file before it was read.
        stat: FileStat,
        /// The blob id of `bytes`, when it was computed where the file was read.
        oid: Option<ObjectId>,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
        stat: FileStat,
        /// The blob id of `target`, when it was computed where the link was read.
        oid: Option<ObjectId>,
    },
    /// The path still holds `entry` (see [`Check`]): nothing was read, or what was read is
    /// exactly that entry.
    Unchanged {
        path: String,
        entry: Entry,
        stat: FileStat,
    },
    Skipped(Skipped),
}

/// What [`capture_each`] does with a regular file or symlink, given its `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Read it.
    Read,
    /// Its stat vouches that it holds this entry: report it unchanged without opening it.
    Trust(Entry),
    /// Read it; report it unchanged if its mode and content are exactly this entry.
    Compare(Entry),
}

/// Read each candidate path as data and hand it to `sink`: regular files (up to `cap` bytes)
/// and symlink targets, unless `check` (given the path's `lstat`) vouches for them; FIFOs,
/// sockets, devices and oversized files become [`Captured::Skipped`]. Paths that vanished or
/// turned into directories are left out. With `hash`, each read's blob id is computed by the
/// thread that read it (what a snapshot stores by; a helper that only streams the bytes on
/// leaves it to whoever stores them).
///
/// The sandbox helper streams these to the hub; the hub's own snapshots store them directly.
/// The `lstat`s come first, all at once ([`Beneath::lstat_many`]); then `check` is asked of
/// each path in order; then the reads are made a round at a time — on a few threads when a
/// round has many ([`crate::threads::io_threads`]), at most [`ROUND_BYTES`] held at once — and handed to
/// `sink` in the candidates' order, each as soon as it and those before it are read.
pub fn capture_each<E, P: AsRef<str> + Sync>(
    root: &Beneath,
    candidates: &[P],
    cap: u64,
    hash: bool,
    mut check: impl FnMut(&str, &FileStat) -> Check,
    mut sink: impl FnMut(Captured) -> Result<(), E>,
) -> Result<(), E> {
    let stats = root.lstat_many(candidates);
    let mut round = Vec::new();
    let mut round_bytes = 0u64;
    for (path, st) in candidates.iter().zip(stats) {
        let Some(plan) = plan_one(path.as_ref(), st, cap, &mut check) else {
            continue;
        };
        if let Plan::Read { st, .. } = &plan {
            round_bytes += (st.st_size as u64).min(cap);
        }
        round.push(plan);
        if round_bytes >= ROUND_BYTES || round.len() >= ROUND_PATHS {
            finish_round(root, std::mem::take(&mut round), cap, hash, &mut sink)?;
            round_bytes = 0;
        }
    }
    finish_round(root, round, cap, hash, &mut sink)
}

/// The most bytes of files [`capture_each`] reads before handing them on (a round).
const ROUND_BYTES: u64 = 16 << 20;
/// The most paths in one round of [`capture_each`].
const ROUND_PATHS: usize = 1024;
/// A round with fewer reads per thread than this is read on the calling thread (a thread
/// costs tens of microseconds to start; reading a small file, a few).
const READS_PER_THREAD: usize = 16;

/// Make the reads of one round of [`capture_each`] and hand everything to `sink`, in order.
fn finish_round<E>(
    root: &Beneath,
    round: Vec<Plan>,
    cap: u64,
    hash: bool,
    sink: &mut impl FnMut(Captured) -> Result<(), E>,
) -> Result<(), E> {
    let reads = round
        .iter()
        .filter(|p| matches!(p, Plan::Read { .. }))
        .count();
    let threads = crate::threads::io_threads()
        .min(reads / READS_PER_THREAD)
        .max(1);
    if threads == 1 {
        for plan in round {
            if let Some(captured) = plan.finish(root, cap, hash) {
                sink(captured)?;
            }
        }
        return Ok(());
    }
    // Each read is handed on as soon as those before it are: the sink (hashing, storing,
    // sending to the hub) works while the later files are still being read.
    crate::threads::streamed_on_threads(
        round,
        threads,
        (crate::threads::STREAM_AHEAD, |plan: &Plan| plan.weight(cap)),
        |plan| plan.finish(root, cap, hash),
        |captured| captured.map_or(Ok(()), &mut *sink),
    )
}

/// What [`capture_each`] does with one candidate: settled without reading, or a read to make.
enum Plan {
    Done(Captured),
    Read {
        path: String,
        st: nix::sys::stat::FileStat,
        stat: FileStat,
        how: Check,
    },
}

impl Plan {
    /// What its read holds while it waits for the consumer: the file's size as `lstat` saw it,
    /// at most `cap` (see [`crate::threads::STREAM_AHEAD`]).
    fn weight(&self, cap: u64) -> usize {
        match self {
            Plan::Done(_) => 0,
            Plan::Read { stat, .. } => usize::try_from(stat.size.min(cap)).unwrap_or(usize::MAX),
        }
    }

    /// The candidate as captured (the read made, if it needs one); `None` when it is left out.
    fn finish(self, root: &Beneath, cap: u64, hash: bool) -> Option<Captured> {
        match self {
            Plan::Done(captured) => Some(captured),
            Plan::Read {
                path,
                st,
                stat,
                how,
            } => match read_entry(root, &path, &st, stat, cap) {
                Ok(Some(read)) => Some(captured_from(path, how, read, hash)),
                // Vanished between the stat and the read: report, don't guess.
                Ok(None) => None,
                Err(e) => Some(Captured::Skipped(Skipped {
                    path,
                    reason: e.to_string(),
                })),
            },
        }
    }
}

/// Settle one candidate path, whose `lstat` was `st`, as [`capture_each`] describes, up to the
/// read it may need; `None` when it is left out.
fn plan_one(
    path: &str,
    st: crate::fs::beneath::LstatResult,
    cap: u64,
    check: &mut impl FnMut(&str, &FileStat) -> Check,
) -> Option<Plan> {
    let skip = |reason: String| {
        Plan::Done(Captured::Skipped(Skipped {
            path: path.to_string(),
            reason,
        }))
    };
    if crate::fs::beneath::check_path(path).is_err() {
        return Some(skip("path hunkgate cannot represent".into()));
    }
    let st = match st {
        Ok(Some(st)) => st,
        Ok(None) => return None,
        Err(e) => return Some(skip(e.to_string())),
    };
    let stat = file_stat(&st);
    let how = match crate::fs::beneath::kind_of(&st) {
        Kind::Dir => return None,
        Kind::Other(what) => return Some(skip(format!("{what} skipped"))),
        Kind::File { size, .. } if size > cap => {
            return Some(skip(format!("larger than {cap} bytes")))
        }
        Kind::File { .. } | Kind::Symlink => check(path, &stat),
    };
    if let Check::Trust(entry) = how {
        let path = path.to_string();
        return Some(Plan::Done(Captured::Unchanged { path, entry, stat }));
    }
    Some(Plan::Read {
        path: path.to_string(),
        st,
        stat,
        how,
    })
}

/// A regular file's content or a symlink's target, as read.
struct ReadEntry {
    bytes: Vec<u8>,
    mode: Mode,
    /// For a file, its stat taken on the open file; for a symlink, its `lstat`.
    stat: FileStat,
}

/// Read the file (up to `cap` bytes) or symlink at `path`, whose `lstat` is `st`; `None` if it
/// vanished.
fn read_entry(
    root: &Beneath,
    path: &str,
    st: &nix::sys::stat::FileStat,
    stat: FileStat,
    cap: u64,
) -> Result<Option<ReadEntry>, FsError> {
    if matches!(crate::fs::beneath::kind_of(st), Kind::Symlink) {
        root.read_link(path).map(|t| {
            t.map(|target| ReadEntry {
                bytes: target,
                mode: Mode::Symlink,
                stat,
            })
        })
    } else {
        root.read_stat(path, cap).map(|r| {
            r.map(|(bytes, exec, st)| {
                let mode = if exec { Mode::Executable } else { Mode::File };
                ReadEntry {
                    bytes,
                    mode,
                    stat: file_stat(&st),
                }
            })
        })
    }
}

/// What was read at `path`, as [`capture_each`] reports it: [`Captured::Unchanged`] when
/// `how` compares it with an entry it is exactly; with its blob id when `hash` (or when the
/// comparison computed it).
fn captured_from(path: String, how: Check, read: ReadEntry, hash: bool) -> Captured {
    let ReadEntry { bytes, mode, stat } = read;
    let mut oid = None;
    if let Check::Compare(entry) = how {
        let id = blob_id(&bytes);
        if entry.mode == mode && id == entry.oid {
            return Captured::Unchanged { path, entry, stat };
        }
        oid = Some(id);
    }
    if hash && oid.is_none() {
        oid = Some(blob_id(&bytes));
    }
    match mode {
        Mode::Symlink => Captured::Symlink {
            path,
            target: bytes,
            stat,
            oid,
        },
        Mode::File | Mode::Executable => Captured::File {
            path,
            bytes,
            executable: mode == Mode::Executable,
            stat,
            oid,
        },
    }
}

/// Store one captured item into `snap` (its blob into `blobs`); returns the entry it got.
pub fn store_captured(
    blobs: &mut ObjectBatch<'_>,
    snap: &mut Snapshot,
    item: Captured,
) -> Result<Option<(String, FileStat, Entry)>, StoreError> {
    let (path, stat, entry) = match item {
        Captured::File {
            path,
            bytes,
            executable,
            stat,
            oid,
        } => {
            let oid = blobs.write_blob_hashed(oid, bytes.into())?;
            let mode = if executable {
                Mode::Executable
            } else {
                Mode::File
            };
            (path, stat, Entry { mode, oid })
        }
        Captured::Symlink {
            path,
            target,
            stat,
            oid,
        } => {
            let oid = blobs.write_blob_hashed(oid, target.into())?;
            let mode = Mode::Symlink;
            (path, stat, Entry { mode, oid })
        }
        Captured::Unchanged { path, entry, stat } => (path, stat, entry),
        Captured::Skipped(s) => {
            snap.skipped.push(s);
            return Ok(None);
        }
    };
    snap.tree.insert(path.clone(), entry);
    Ok(Some((path, stat, entry)))
}

/// A path as a snapshot stored it: the stat it had, and its entry.
pub type Stored = (String, FileStat, Entry);

/// Read each candidate path as data and store it, taking unchanged files from `cache`; also
/// what was stored for each path, with its stat.
fn capture(
    root: &Beneath,
    candidates: BTreeSet<String>,
    store: &Store,
    cap: u64,
    cache: Option<&mut StatCache>,
) -> Result<(Snapshot, Vec<Stored>), SnapshotError> {
    let mut snap = Snapshot::default();
    let mut seen = Vec::new();
    let mut blobs = store.batch();
    {
        let cache_ref = cache.as_deref();
        let candidates: Vec<String> = candidates.into_iter().collect();
        capture_each(
            root,
            &candidates,
            cap,
            true,
            |path, stat| match cache_ref.and_then(|c| c.lookup(path, stat, store)) {
                Some(entry) => Check::Trust(entry),
                None => Check::Read,
            },
            |item| {
                if let Some(got) = store_captured(&mut blobs, &mut snap, item)? {
                    seen.push(got);
                }
                Ok::<_, StoreError>(())
            },
        )?;
    }
    // Before the cache names them: a cache entry's blob is always in the store.
    blobs.finish()?;
    if let Some(cache) = cache {
        for (path, stat, entry) in &seen {
            cache.record(path, *stat, *entry);
        }
        if let Err(e) = cache.save() {
            tracing::warn!(error = %e, "cannot write the snapshot stat cache; the next snapshot reads every file");
        }
    }
    Ok((snap, seen))
}

/// A record with fewer paths than the base has, divided by this, makes [`readback_check`]
/// look the base up rather than walk it.
const SPARSE_RECORD: usize = 64;

/// What a sandbox read-back does with `path`, given the run's `base` and the stat record of
/// the sync that wrote it (see [`crate::wire::SyncRecord`]).
///
/// Asked in path order (as [`capture_each`] is, with sorted candidates), it walks the base and
/// the record beside the questions, without a lookup each; a question out of order (or asked
/// again) is answered by a lookup of the base, without the record's word: by content. A record
/// much smaller than the base (one cut down to the few paths change notification named) is
/// walked beside the questions while the base is looked up: walking 10,000 base paths to
/// answer for one costs more than the read it decides on.
pub fn readback_check<'a>(
    base: &'a FlatTree,
    record: Option<&'a SyncRecord>,
) -> impl FnMut(&str, &FileStat) -> Check + 'a {
    let stamp = record.map(|r| (r.stamp_s, r.stamp_ns));
    let files = record.map(|r| r.files.as_slice()).unwrap_or_default();
    // A helper's record lists its base in order; one made from a dirty set may not, and is
    // then looked up instead.
    let recorded: Option<HashMap<&str, &FileStat>> = (!files.is_sorted_by(|a, b| a.0 < b.0))
        .then(|| files.iter().map(|(p, s)| (p.as_str(), s)).collect());
    let look_up_base = record.is_some() && files.len().saturating_mul(SPARSE_RECORD) < base.len();
    let mut bases = base.iter().peekable();
    let mut recs = files.iter().map(|(p, s)| (p, s)).peekable();
    let mut last = String::new();
    move |path, stat| {
        // Strictly after every question before it (the cursors are past those): a repeat is
        // answered by a lookup, too.
        let in_order = path > last.as_str();
        let (entry, was) = if in_order {
            last.clear();
            last.push_str(path);
            let entry = match look_up_base {
                true => base.get(path),
                false => seek(&mut bases, path),
            };
            let was = match &recorded {
                Some(map) => map.get(path).copied(),
                None => seek(&mut recs, path),
            };
            (entry, was)
        } else {
            (base.get(path), None)
        };
        match entry {
            None => Check::Read,
            Some(entry) => match (was, stamp) {
                (Some(was), Some(stamp)) if *was == *stat && !is_racy(was, stamp) => {
                    Check::Trust(*entry)
                }
                _ => Check::Compare(*entry),
            },
        }
    }
}

/// Move the sorted `it` to `path`: its value if `path` is there, leaving the cursor on the
/// first key not before it either way.
fn seek<'a, V>(
    it: &mut std::iter::Peekable<impl Iterator<Item = (&'a String, V)>>,
    path: &str,
) -> Option<V> {
    while it.next_if(|(p, _)| p.as_str() < path).is_some() {}
    it.next_if(|(p, _)| p.as_str() == path).map(|(_, v)| v)
}

/// The paths a sandbox snapshot looks at: `base` paths (tracked by construction) plus untracked
/// files not ignored by the tree's own .gitignore files.
/// Files whose names cannot be carried are returned beside them, to be reported as skipped.
/// Every directory is read: the oracle the tests hold [`sandbox_candidates_since`] to.
#[cfg(test)]
pub fn sandbox_candidates<'a>(
    dir: &Path,
    base_paths: impl IntoIterator<Item = &'a String>,
) -> (BTreeSet<String>, Vec<Skipped>) {
    let (mut candidates, skipped) = walk_reporting(dir, false);
    // Most base paths were walked already: looked up, not cloned and dropped again.
    for path in base_paths {
        if !candidates.contains(path) {
            candidates.insert(path.clone());
        }
    }
    (candidates, skipped)
}

/// The paths a read-back after a sync looks at (see [`sandbox_candidates_since`]).
#[derive(Debug, Default)]
pub struct Candidates {
    /// The files found that are not base paths (and not ignored), in order.
    pub new: Vec<String>,
    /// Files whose names cannot be carried, to be reported as skipped.
    pub skipped: Vec<Skipped>,
    /// How many directories were read; None when every one was (no directory record, or it
    /// could not be used).
    pub dirs_read: Option<usize>,
    /// The directories read (`""` is the slot) — with [`Candidates::dirs_read`], only those.
    pub dirs: Vec<String>,
    /// The walk stopped at its limit: more than `max_new` files are new, and `new` holds only
    /// some of them.
    pub stopped: bool,
}

/// Whether `path` is a `.gitignore` file (one a walk reads for its rules).
fn is_gitignore(path: &str) -> bool {
    path == ".gitignore" || path.ends_with("/.gitignore")
}

/// The candidates of a read-back (base paths and new files) in a sandbox synced to `base`
/// with `record`: with the record's directories (see [`SyncRecord::dirs`]), only the
/// directories whose stat changed since the sync (or is racy), the way to them and the new
/// ones in them are read for new files — git's untracked cache. Every base path is a candidate either way: its own `lstat` tells whether it
/// changed.
///
/// A directory's entries cannot change without its ctime changing, and no one but root can set
/// a ctime. What the directory record cannot vouch for is the ignore rules, so every directory
/// is read when a base `.gitignore` changed (or is racy) or a new one turns up.
///
/// With `max_new`, the walk stops ([`Candidates::stopped`]) once it has found more files than
/// the base has plus that many: past it, more than `max_new` files are new for sure.
pub fn sandbox_candidates_since(
    dir: &Path,
    root: &Beneath,
    base: &FlatTree,
    record: Option<&SyncRecord>,
    max_new: Option<usize>,
) -> Candidates {
    let max_files = walk_budget(base, max_new);
    let whole = || Candidates::found(walk(dir, false, None, max_files), base, false);
    let Some(record) = record.filter(|r| !r.dirs.is_empty()) else {
        return whole();
    };
    let stamp = (record.stamp_s, record.stamp_ns);
    let holds = |was: &FileStat, now: Option<FileStat>| {
        now.is_some_and(|now| now == *was && !is_racy(was, stamp))
    };
    // Only the rules' own entries: no map of the whole record for a handful of lookups.
    let recorded: HashMap<&str, &FileStat> = record
        .files
        .iter()
        .filter(|(p, _)| is_gitignore(p))
        .map(|(p, s)| (p.as_str(), s))
        .collect();
    let ignores: Vec<&str> = base
        .keys()
        .map(String::as_str)
        .filter(|p| is_gitignore(p))
        .collect();
    let rules_hold = ignores
        .iter()
        .zip(root.lstat_many(&ignores))
        .all(|(p, now)| {
            let now = now.ok().flatten().map(|st| file_stat(&st));
            recorded.get(p).is_some_and(|was| holds(was, now))
        });
    if !rules_hold {
        return whole();
    }
    let (top, below): (Vec<_>, Vec<_>) = record.dirs.iter().partition(|(p, _)| p.is_empty());
    let below_paths: Vec<&str> = below.iter().map(|(p, _)| p.as_str()).collect();
    let mut changed: Vec<&str> = below
        .iter()
        .zip(root.lstat_many(&below_paths))
        .filter(|((_, was), now)| {
            let now = now.as_ref().ok().and_then(|n| n.as_ref()).map(file_stat);
            !holds(was, now)
        })
        .map(|((p, _), _)| p.as_str())
        .collect();
    let root_now = nix::sys::stat::lstat(dir).ok().map(|st| file_stat(&st));
    if !top.iter().any(|(_, was)| holds(was, root_now)) {
        changed.push("");
    }
    let known = record.dirs.iter().map(|(p, _)| p.clone()).collect();
    let walked = walk(
        dir,
        false,
        Some(Within::changed_dirs(changed, known)),
        max_files,
    );
    if walked
        .files
        .iter()
        .any(|p| is_gitignore(p) && !base.contains_key(p))
    {
        return whole();
    }
    Candidates::found(walked, base, true)
}

/// The files a read-back's walk may hold when at most `max_new` may be new: past the base's
/// files plus that many, more than `max_new` are new for certain.
fn walk_budget(base: &FlatTree, max_new: Option<usize>) -> Option<usize> {
    max_new.map(|n| n.saturating_add(base.len()))
}

impl Candidates {
    /// What `walked` found beside `base`; `restricted`: it read only some directories.
    fn found(walked: Walked, base: &FlatTree, restricted: bool) -> Self {
        Candidates {
            new: walked
                .files
                .into_iter()
                .filter(|p| !base.contains_key(p))
                .collect(),
            skipped: walked.skipped,
            dirs_read: restricted.then_some(walked.dirs.len()),
            dirs: walked.dirs,
            stopped: walked.stopped,
        }
    }

    /// Every path a read-back looks at — `base`'s and the new ones — in order, borrowed.
    pub fn with_base<'a>(&'a self, base: &'a FlatTree) -> Vec<&'a str> {
        let mut out = Vec::with_capacity(base.len() + self.new.len());
        let mut new = self.new.iter().map(String::as_str).peekable();
        for path in base.keys().map(String::as_str) {
            while let Some(n) = new.next_if(|n| *n < path) {
                out.push(n);
            }
            out.push(path);
        }
        out.extend(new);
        out
    }
}

/// The directory record of a sync (see [`SyncRecord::dirs`]) that found `walked` (every
/// directory a whole walk entered before it wrote anything) and wrote `base`: each of those,
/// and each directory of a base path, with its stat now. Empty — every directory is read then —
/// when a directory holds a `.gitignore` that is not a base path (its rules could change
/// unseen) or there are more directories than a record is worth.
pub fn dir_record(
    dir: &Path,
    root: &Beneath,
    base: &FlatTree,
    walked: Vec<String>,
) -> Vec<(String, FileStat)> {
    let mut dirs: BTreeSet<String> = walked.into_iter().collect();
    dirs.insert(String::new());
    for path in base.keys() {
        let mut d = path.as_str();
        while let Some(i) = d.rfind('/') {
            d = &d[..i];
            if dirs.contains(d) {
                break;
            }
            dirs.insert(d.to_string());
        }
    }
    if dirs.len() > SyncRecord::max_dirs(base.len()) {
        return Vec::new();
    }
    let below: Vec<&str> = dirs
        .iter()
        .map(String::as_str)
        .filter(|d| !d.is_empty())
        .collect();
    let ignores: Vec<String> = dirs
        .iter()
        .map(|d| {
            if d.is_empty() {
                ".gitignore".to_string()
            } else {
                format!("{d}/.gitignore")
            }
        })
        .filter(|p| !base.contains_key(p))
        .collect();
    if root
        .lstat_many(&ignores)
        .iter()
        .any(|r| !matches!(r, Ok(None)))
    {
        return Vec::new();
    }
    let is_dir =
        |st: &nix::sys::stat::FileStat| matches!(crate::fs::beneath::kind_of(st), Kind::Dir);
    let mut out = Vec::with_capacity(dirs.len());
    match nix::sys::stat::lstat(dir) {
        Ok(st) if is_dir(&st) => out.push((String::new(), file_stat(&st))),
        _ => return Vec::new(),
    }
    for (d, st) in below.iter().zip(root.lstat_many(&below)) {
        if let Ok(Some(st)) = st {
            if is_dir(&st) {
                out.push((d.to_string(), file_stat(&st)));
            }
        }
    }
    out
}

/// Where [`snapshot_checkout`] keeps its stat cache: a file inside the store's directory (the
/// hub's state dir), so a cache always goes with the store its blob ids point into.
pub fn stat_cache_path(store: &Store) -> PathBuf {
    store.path().join("hunkgate-stat-cache")
}

/// Snapshot the user's checkout as the user sees it (see module docs), reading only the files
/// that are new or changed since the last snapshot (the stat cache at [`stat_cache_path`]).
pub fn snapshot_checkout(
    repo_root: &Path,
    store: &Store,
    cap: u64,
) -> Result<Snapshot, SnapshotError> {
    let mut cache = StatCache::load(&stat_cache_path(store), repo_root, store);
    snapshot_checkout_cached(repo_root, store, cap, Some(&mut cache))
}

/// [`snapshot_checkout`] with an explicit stat cache (None reads every file).
pub fn snapshot_checkout_cached(
    repo_root: &Path,
    store: &Store,
    cap: u64,
    cache: Option<&mut StatCache>,
) -> Result<Snapshot, SnapshotError> {
    Ok(checkout_parts(repo_root, store, cap, cache)?.snap)
}

/// A whole checkout snapshot and what it was made of.
pub(crate) struct CheckoutParts {
    pub snap: Snapshot,
    /// Every file stored, with the stat it had.
    pub seen: Vec<Stored>,
    /// The directories the walk entered.
    pub dirs: Vec<String>,
    /// The paths the index tracks (None: a jj repository without a colocated .git).
    pub tracked: Option<std::collections::HashSet<String>>,
}

/// [`snapshot_checkout_cached`], also returning what the snapshot was made of.
pub(crate) fn checkout_parts(
    repo_root: &Path,
    store: &Store,
    cap: u64,
    cache: Option<&mut StatCache>,
) -> Result<CheckoutParts, SnapshotError> {
    let walked = walk(repo_root, true, None, None);
    let mut candidates = walked.files;
    let tracked = match gix::open_opts(repo_root, gix::open::Options::isolated()) {
        Ok(repo) => Some(tracked_paths(&repo, repo_root)?),
        // A jj repository without a colocated .git: jj tracks every file that is not ignored,
        // which is exactly the walk.
        Err(_) if repo_root.join(".jj").is_dir() => None,
        Err(_) => {
            return Err(SnapshotError::NotARepo {
                path: repo_root.display().to_string(),
            })
        }
    };
    candidates.extend(tracked.iter().flatten().cloned());
    let root = Beneath::open(repo_root)?;
    let (mut snap, seen) = capture(&root, candidates, store, cap, cache)?;
    snap.skipped.extend(walked.skipped);
    snap.skipped.dedup();
    Ok(CheckoutParts {
        snap,
        seen,
        dirs: walked.dirs,
        tracked,
    })
}

/// The paths the index of `repo` tracks, submodules (gitlinks) aside: directories of their own
/// repository are not reviewed.
pub(crate) fn tracked_paths(
    repo: &gix::Repository,
    repo_root: &Path,
) -> Result<std::collections::HashSet<String>, SnapshotError> {
    let index = repo.index_or_empty().map_err(|e| SnapshotError::Index {
        path: repo_root.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(index
        .entries()
        .iter()
        .filter(|e| e.mode != gix::index::entry::Mode::COMMIT)
        .filter_map(|e| std::str::from_utf8(e.path(&index)).ok().map(str::to_string))
        .collect())
}

/// What a read-back of a sandbox may go by besides the files themselves: the hints its
/// accelerators give. With none ([`Hints::default`]) it reads every file, the slow path that is
/// the correctness baseline; each hint only lets it look at less and must find the same.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hints<'a> {
    /// The record of the sync that wrote the base there: only paths whose stat changed (or
    /// is racy) are read, a base path read back with its base content is not stored again,
    /// and only the directories whose stat moved are read for new files (git's untracked
    /// cache, when the record has its directories).
    pub record: Option<&'a SyncRecord>,
    /// What change notification saw since that sync (see [`crate::status::watch`]), with `record`:
    /// only the paths it covers are even looked at, the other base paths taken as the sync
    /// wrote them, and new files looked for only in the directories where something happened.
    pub dirty: Option<&'a Dirty>,
}

/// Snapshot a sandbox directory: `base` paths (tracked by construction) plus untracked files not
/// ignored by the tree's own .gitignore files, looking only where `hints` say something may
/// have changed.
pub fn snapshot_sandbox(
    dir: &Path,
    base: &FlatTree,
    store: &Store,
    cap: u64,
    hints: Hints<'_>,
) -> Result<ReadBack, SnapshotError> {
    let mut objects = store.batch();
    let back = read_back_sandbox(
        dir,
        base,
        &mut objects,
        ReadLimits::only_file_cap(cap),
        hints,
    )?;
    objects.finish()?;
    Ok(back)
}

/// [`snapshot_sandbox`], the new blobs added to `objects` (written when it is finished).
///
/// Past `limits` it stops with [`SnapshotError::OverLimit`]: before reading anything when the
/// walk found more new files than it allows, else as soon as the new content is over its
/// bytes (the checkpoint store has taken at most that much), or once read, when more paths
/// differ than it allows.
pub fn read_back_sandbox(
    dir: &Path,
    base: &FlatTree,
    objects: &mut ObjectBatch<'_>,
    limits: ReadLimits,
    hints: Hints<'_>,
) -> Result<ReadBack, SnapshotError> {
    let Hints { record, dirty } = hints;
    let started = std::time::Instant::now();
    let cap = limits.file_cap;
    objects.limit_new_blob_bytes(limits.bytes);
    let over_files = || {
        SnapshotError::OverLimit(OverLimit::Files {
            limit: limits.files,
        })
    };
    let root = Beneath::open(dir)?;
    // What was read (or trusted) of the candidates only; every other base path is as the
    // sync left it.
    let mut got = Snapshot::default();
    // The walks for new files stop past the limit, before they hold more than it in memory.
    let max_new = Some(limits.files);
    let (candidates, unnamed, looked) = match (record, dirty) {
        (Some(record), Some(dirty)) => {
            let split = split_by_dirty(dir, &root, base, record, dirty, max_new);
            if split.stopped {
                return Err(over_files());
            }
            (split.candidates, split.skipped, Some(split.looked))
        }
        _ => {
            let found = sandbox_candidates_since(dir, &root, base, record, max_new);
            if found.stopped {
                return Err(over_files());
            }
            let paths = found.with_base(base).into_iter().map(String::from);
            (paths.collect(), found.skipped, None)
        }
    };
    // Each new path is a change: too many, and none is read.
    let new_paths = candidates.iter().filter(|p| !base.contains_key(*p)).count();
    if new_paths.saturating_add(unnamed.len()) > limits.files {
        return Err(over_files());
    }
    tracing::debug!(
        candidates = candidates.len(),
        us = started.elapsed().as_micros() as u64,
        "read-back candidates found"
    );
    // Only a restricted read-back needs its candidates again (a full one compares all).
    let restricted = looked.as_ref().map(|_| candidates.clone());
    let candidates: Vec<String> = candidates.into_iter().collect();
    let check = readback_check(base, looked.as_ref().or(record));
    capture_each(&root, &candidates, cap, true, check, |item| {
        store_captured(objects, &mut got, item).map(drop)
    })?;
    tracing::debug!(
        us = started.elapsed().as_micros() as u64,
        "read-back candidates looked at"
    );
    let changes = match restricted {
        Some(paths) => paths
            .into_iter()
            .filter_map(|p| {
                let now = got.tree.get(&p).copied();
                (base.get(&p).copied() != now).then_some((p, now))
            })
            .collect(),
        None => changes_between(base, &got.tree),
    };
    let mut skipped = got.skipped;
    skipped.extend(unnamed);
    if changes.len().saturating_add(skipped.len()) > limits.files {
        return Err(over_files());
    }
    Ok(ReadBack { changes, skipped })
}

/// A sandbox's paths split by what change notification saw (see [`split_by_dirty`]).
#[derive(Debug, Default)]
pub struct DirtySplit {
    /// Paths to look at: base paths the dirty set covers (or the record lacks), and the files
    /// a walk of the dirty directories found that are new or covered.
    pub candidates: BTreeSet<String>,
    /// Names that walk could not carry.
    pub skipped: Vec<Skipped>,
    /// The record, cut down to the candidates it has a stat for.
    pub looked: SyncRecord,
    /// The walk stopped at its limit (see [`sandbox_candidates_since`]): more than `max_new`
    /// files are new, and `candidates` holds only some of them.
    pub stopped: bool,
}

/// Pick out the paths of the sandbox `dir` (opened as `root`) that may differ from what the
/// sync of `record` (for `base`) left — per `dirty`, what change notification saw since; every
/// other base path is as that sync left it. The covered base paths are found by range scans of
/// `base`, not by asking of every path.
///
/// Directories are walked only where something new may be: the dirty trees, and the parents
/// of named paths outside the base that are there now (a new file is a candidate only if the
/// walk, with the ignore rules, finds it). A named base path is a candidate as it is, and a
/// named new path that is gone again (an editor's temporary file, renamed over the file it
/// wrote) needs no walk: so the usual agent edit reads no directory at all.
///
/// `record` must be the record of a sync for exactly `base` (see [`crate::sync::record_for`]),
/// which names only base paths, each once (the hub checks a helper's record for that).
/// `max_new` stops the walk as it does for [`sandbox_candidates_since`].
pub fn split_by_dirty(
    dir: &Path,
    root: &Beneath,
    base: &FlatTree,
    record: &SyncRecord,
    dirty: &Dirty,
    max_new: Option<usize>,
) -> DirtySplit {
    // A new path whose last event took it away again needs no look (see [`Dirty::gone`]).
    let new_paths: Vec<&str> = dirty
        .paths
        .iter()
        .map(String::as_str)
        .filter(|p| !base.contains_key(*p) && !dirty.gone.contains(*p))
        .collect();
    let there = root.lstat_many(&new_paths);
    let to_walk = Dirty {
        paths: new_paths
            .iter()
            .zip(there)
            // An error (other than nothing there) walks, as if something were there.
            .filter(|(_, st)| !matches!(st, Ok(None)))
            .map(|(p, _)| p.to_string())
            .collect(),
        trees: dirty.trees.clone(),
        gone: BTreeSet::new(),
    };
    let walked = if to_walk.is_empty() {
        Walked::default()
    } else {
        walk(
            dir,
            false,
            Some(to_walk.within()),
            walk_budget(base, max_new),
        )
    };
    let mut candidates: BTreeSet<String> = dirty
        .covered_keys(base)
        .into_iter()
        .map(str::to_string)
        .collect();
    candidates.extend(
        walked
            .files
            .into_iter()
            .filter(|p| !base.contains_key(p) || dirty.covers(p)),
    );
    // The record is in base order: each candidate's stat is found by a binary search, not by
    // a pass over the whole record. (A candidate not found — a record out of order — has no
    // recorded stat, and is read and compared whole: slower, never wrong.)
    let looked = candidates
        .iter()
        .filter_map(|c| {
            record
                .files
                .binary_search_by(|(p, _)| p.as_str().cmp(c))
                .ok()
                .map(|i| record.files[i].clone())
        })
        .collect();
    // A sync records each base path at most once: fewer than the base means some are
    // missing, and those are looked at too.
    if record.files.len() < base.len() {
        let has: std::collections::HashSet<&str> =
            record.files.iter().map(|(p, _)| p.as_str()).collect();
        candidates.extend(base.keys().filter(|p| !has.contains(p.as_str())).cloned());
    }
    DirtySplit {
        candidates,
        skipped: walked.skipped,
        stopped: walked.stopped,
        looked: SyncRecord {
            stamp_s: record.stamp_s,
            stamp_ns: record.stamp_ns,
            files: looked,
            dirs: Vec::new(),
        },
    }
}

/// Find the repository root containing `start`: the nearest directory holding `.jj` (a jj
/// repository, colocated or not) or else the git work tree around it.
pub fn discover_repo_root(start: &Path) -> Result<std::path::PathBuf, SnapshotError> {
    let abs = start.canonicalize().unwrap_or_else(|_| start.to_path_buf());
    for dir in abs.ancestors() {
        if dir.join(".jj").is_dir() {
            return Ok(dir.to_path_buf());
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    let repo = gix::discover(start).map_err(|_| SnapshotError::NotARepo {
        path: start.display().to_string(),
    })?;
    repo.workdir()
        .map(|p| p.to_path_buf())
        .ok_or_else(|| SnapshotError::NotARepo {
            path: start.display().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::odb::store::test_support::{commit, git_in as git, set_mtime};
    use std::os::unix::fs::symlink;

    #[test]
    fn checkout_snapshot_sees_what_the_user_sees() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join(".gitignore"), "ignored.txt\nbuild/\n").unwrap();
        std::fs::write(repo.join("tracked.txt"), "committed\n").unwrap();
        std::fs::write(repo.join("deleted.txt"), "gone soon\n").unwrap();
        std::fs::write(repo.join("forced.txt"), "tracked though ignored\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["add", "-f", "forced.txt"]);
        std::fs::write(repo.join(".gitignore"), "ignored.txt\nbuild/\nforced.txt\n").unwrap();
        commit(&repo, "init");
        std::fs::write(repo.join("tracked.txt"), "edited, uncommitted\n").unwrap();
        std::fs::remove_file(repo.join("deleted.txt")).unwrap();
        std::fs::write(repo.join("untracked.txt"), "new\n").unwrap();
        std::fs::write(repo.join("ignored.txt"), "secret\n").unwrap();
        std::fs::create_dir(repo.join("build")).unwrap();
        std::fs::write(repo.join("build/out"), "artifact\n").unwrap();
        symlink("tracked.txt", repo.join("link")).unwrap();
        nix::unistd::mkfifo(
            &repo.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();

        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let snap = snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).unwrap();
        let paths: Vec<&str> = snap.tree.keys().map(|s| s.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                ".gitignore",
                "forced.txt",
                "link",
                "tracked.txt",
                "untracked.txt"
            ]
        );
        let tracked = &snap.tree["tracked.txt"];
        assert_eq!(
            store.read_blob(tracked.oid).unwrap(),
            b"edited, uncommitted\n"
        );
        assert_eq!(snap.tree["link"].mode, Mode::Symlink);
        assert_eq!(
            store.read_blob(snap.tree["link"].oid).unwrap(),
            b"tracked.txt"
        );
        assert_eq!(snap.skipped.len(), 1, "{:?}", snap.skipped);
        assert_eq!(snap.skipped[0].path, "fifo");
    }

    /// What a walk cannot carry is reported, never silently left out (#54.3): a path longer
    /// than 4096 bytes once, by the first directory past it, its path cut short for the
    /// report, and a read-back of a sandbox names it as skipped. Control: the file beside it
    /// is found.
    #[test]
    fn a_walk_reports_a_path_too_long_to_carry() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ok.txt"), "ok\n").unwrap();
        crate::odb::store::test_support::deep(&dir.join("deep"), 5000);
        let w = walk(&dir, false, None, None);
        assert_eq!(
            Vec::from_iter(w.files.iter().map(String::as_str)),
            ["ok.txt"]
        );
        assert_eq!(w.skipped.len(), 1, "{:?}", w.skipped);
        let s = &w.skipped[0];
        assert!(
            s.path.starts_with("deep/ddd") && s.path.ends_with(" bytes)"),
            "{s:?}"
        );
        assert!(
            s.path.len() < 300 && s.reason.contains("longer than 4096"),
            "{s:?}"
        );
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let snap = snapshot_sandbox(
            &dir,
            &FlatTree::new(),
            &store,
            DEFAULT_FILE_CAP,
            Hints::default(),
        )
        .unwrap();
        assert_eq!(snap.skipped, w.skipped);
        assert_eq!(
            Vec::from_iter(snap.changes.keys().map(String::as_str)),
            ["ok.txt"]
        );
    }

    /// A whole walk is shared among threads: it must find exactly what one thread going through
    /// the tree in order finds — every file not ignored (nested `.gitignore`s apply to their own
    /// directory), every directory entered, the names it cannot carry — in sorted order.
    #[test]
    fn a_parallel_walk_finds_what_a_sequential_one_does() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let mut want_files = BTreeSet::new();
        let mut want_dirs = vec![String::new()];
        for d in 0..40 {
            let dir = format!("d{d:02}");
            std::fs::create_dir_all(root.join(&dir).join("sub")).unwrap();
            want_dirs.push(dir.clone());
            want_dirs.push(format!("{dir}/sub"));
            for f in 0..30 {
                std::fs::write(root.join(&dir).join(format!("f{f}.txt")), "x").unwrap();
                want_files.insert(format!("{dir}/f{f}.txt"));
            }
            std::fs::write(root.join(&dir).join("sub/deep.log"), "x").unwrap();
            if d % 2 == 0 {
                // Ignores its own directory's logs, not its siblings'.
                std::fs::write(root.join(&dir).join(".gitignore"), "*.log\n").unwrap();
                want_files.insert(format!("{dir}/.gitignore"));
            } else {
                want_files.insert(format!("{dir}/sub/deep.log"));
            }
        }
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "not content").unwrap();
        let odd = std::ffi::OsStr::from_bytes(b"d07/bad-\xff");
        std::fs::write(root.join(odd), "x").unwrap();
        want_dirs.sort();

        let w = walk(root, false, None, None);
        assert_eq!(w.files, want_files);
        assert_eq!(w.dirs, want_dirs);
        let skipped: Vec<&str> = w.skipped.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(skipped, ["d07/bad-\\xff"]);
        // A restricted walk (one worker) agrees on what it enters.
        let dirty = crate::status::watch::Dirty {
            paths: ["d03/f1.txt".to_string()].into(),
            ..Default::default()
        };
        let part = walk(root, false, Some(dirty.within()), None);
        let d03: BTreeSet<String> = want_files
            .iter()
            .filter(|p| p.starts_with("d03/") && !p.starts_with("d03/sub/"))
            .cloned()
            .collect();
        assert_eq!(part.files, d03);
    }

    /// A walk with a limit stops past it holding no more than it (a name it cannot carry
    /// counts as a file), whether its threads share the whole tree or one reads only the dirty
    /// directories; at the limit exactly it finds everything. A read-back's candidates stop
    /// past the base's files plus the new files allowed.
    #[test]
    fn a_walk_stops_at_its_limit_holding_no_more() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = &tmp.path().join("sb");
        for d in 0..5 {
            std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
            for f in 0..10 {
                std::fs::write(root.join(format!("d{d}/f{f}")), "x").unwrap();
            }
        }
        std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"d0/bad-\xff")), "x").unwrap();
        let dirty = crate::status::watch::Dirty {
            trees: ["d1".to_string(), "d2".to_string()].into(),
            ..Default::default()
        };
        let held = |w: &Walked| w.files.len() + w.skipped.len();
        for max in [0, 1, 7, 50] {
            let w = walk(root, false, None, Some(max));
            assert!(w.stopped, "{max}");
            assert!(held(&w) <= max, "{max}: {}", held(&w));
            let part = walk(root, false, Some(dirty.within()), Some(max.min(19)));
            assert!(part.stopped && held(&part) <= max.min(19), "{max}");
        }
        // Positive controls: at the limit, and without one, nothing stops.
        for max in [Some(51), None] {
            let w = walk(root, false, None, max);
            assert!(!w.stopped);
            assert_eq!((w.files.len(), w.skipped.len()), (50, 1));
        }
        let part = walk(root, false, Some(dirty.within()), Some(20));
        assert!(!part.stopped);
        assert_eq!(part.files.len(), 20);

        // Candidates of a read-back with 3 of those 50 in its base: 47 new files and a name
        // it cannot carry.
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base: FlatTree = ["d3/f0", "d3/f1", "d4/f9"]
            .into_iter()
            .map(|p| {
                let oid = store.write_blob(b"x").unwrap();
                (
                    p.to_string(),
                    Entry {
                        mode: Mode::File,
                        oid,
                    },
                )
            })
            .collect();
        let beneath = Beneath::open(root).unwrap();
        for max_new in [10, 47] {
            let found = sandbox_candidates_since(root, &beneath, &base, None, Some(max_new));
            assert!(found.stopped, "{max_new}");
            assert!(found.new.len() + found.skipped.len() <= max_new + base.len());
        }
        let found = sandbox_candidates_since(root, &beneath, &base, None, Some(48));
        assert!(!found.stopped);
        assert_eq!((found.new.len(), found.skipped.len()), (47, 1));
    }

    /// The split of a watched read-back walks a directory only where a new file may be: a
    /// named temporary file that is gone again (an editor's, renamed over the file it wrote)
    /// reads no directory; one that is there has its directory walked. What the walk reports
    /// (a name hunkgate cannot carry) shows whether it ran. A record out of base order finds no
    /// stat by its binary search, and the change is read and found all the same.
    #[test]
    fn a_dirty_split_walks_only_where_a_new_file_is() {
        use std::os::unix::ffi::OsStringExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb");
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let mut base = FlatTree::new();
        for d in ["a", "b"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
            let path = format!("{d}/x.txt");
            std::fs::write(dir.join(&path), "base\n").unwrap();
            let oid = store.write_blob(b"base\n").unwrap();
            base.insert(
                path,
                Entry {
                    mode: Mode::File,
                    oid,
                },
            );
            let odd =
                std::ffi::OsString::from_vec(format!("{d}/bad-").bytes().chain([0xff]).collect());
            std::fs::write(dir.join(odd), "x").unwrap();
        }
        let stat_of = |p: &str| file_stat(&nix::sys::stat::lstat(&dir.join(p)).unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let record = SyncRecord {
            stamp_s: now.as_secs() as i64 + 5,
            stamp_ns: 0,
            files: base.keys().map(|p| (p.clone(), stat_of(p))).collect(),
            dirs: Vec::new(),
        };
        let root = Beneath::open(&dir).unwrap();
        let dirty_of = |paths: &[&str]| Dirty {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        };

        // The agent's edit of a/x.txt through a temporary file that is gone.
        std::fs::write(dir.join("a/x.txt"), "edited\n").unwrap();
        let dirty = dirty_of(&["a/x.txt", "a/.tmp-edit"]);
        let split = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
        assert_eq!(split.candidates, BTreeSet::from(["a/x.txt".to_string()]));
        assert!(
            split.skipped.is_empty(),
            "a was walked: {:?}",
            split.skipped
        );
        assert_eq!(
            split.looked.files,
            vec![("a/x.txt".to_string(), stat_of_was(&record, "a/x.txt"))]
        );

        // A new path the watch saw go again is not looked at, even if something is there
        // now (made after the events were read: the next read-back sees it); the same path
        // not marked gone is found — what keeps this from passing for the wrong reason.
        std::fs::write(dir.join("a/late.txt"), "late\n").unwrap();
        let mut dirty = dirty_of(&["a/x.txt", "a/late.txt"]);
        let found = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
        assert!(found.candidates.contains("a/late.txt"));
        dirty.gone.insert("a/late.txt".to_string());
        let split = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
        assert_eq!(split.candidates, BTreeSet::from(["a/x.txt".to_string()]));
        std::fs::remove_file(dir.join("a/late.txt")).unwrap();

        // Positive control: a new file that is there has its directory walked (and found).
        std::fs::write(dir.join("b/new.txt"), "new\n").unwrap();
        let dirty = dirty_of(&["a/x.txt", "a/.tmp-edit", "b/new.txt"]);
        let split = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
        assert_eq!(
            split.candidates,
            BTreeSet::from(["a/x.txt".to_string(), "b/new.txt".to_string()])
        );
        let skipped: Vec<&str> = split.skipped.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(skipped, ["b/bad-\\xff"]);

        // The whole read-back, with the record in order and out of it.
        let mut reversed = record.clone();
        reversed.files.reverse();
        for record in [&record, &reversed] {
            let back = snapshot_sandbox(
                &dir,
                &base,
                &store,
                DEFAULT_FILE_CAP,
                Hints {
                    record: Some(record),
                    dirty: Some(&dirty),
                },
            )
            .unwrap();
            let changed: Vec<&str> = back.changes.keys().map(String::as_str).collect();
            assert_eq!(changed, ["a/x.txt", "b/new.txt"]);
        }
    }

    /// Reads made on a few threads, a round at a time, reach the sink exactly as one thread
    /// makes them: in the candidates' order, each with its own content, the ones `check`
    /// vouches for unread, a vanished one left out, a FIFO reported — across more than one
    /// round.
    #[test]
    fn capture_each_hands_over_in_order_whatever_thread_read_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb");
        let n = ROUND_PATHS + 100;
        let mut candidates = Vec::new();
        for i in 0..n {
            let path = format!("d{}/f{i:05}", i % 7);
            std::fs::create_dir_all(dir.join(format!("d{}", i % 7))).unwrap();
            std::fs::write(dir.join(&path), format!("content {i}\n")).unwrap();
            candidates.push(path);
        }
        candidates.sort();
        candidates.insert(3, "gone/missing".to_string());
        nix::unistd::mkfifo(&dir.join("d0/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        candidates.insert(5, "d0/fifo".to_string());
        let root = Beneath::open(&dir).unwrap();
        let trusted = Entry {
            mode: Mode::File,
            oid: blob_id(b"not read\n"),
        };
        let mut seen = Vec::new();
        capture_each(
            &root,
            &candidates,
            DEFAULT_FILE_CAP,
            true,
            |path, _| {
                if path.ends_with('3') {
                    Check::Trust(trusted)
                } else {
                    Check::Read
                }
            },
            |c| {
                seen.push(c);
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        let want: Vec<&String> = candidates.iter().filter(|p| *p != "gone/missing").collect();
        assert_eq!(seen.len(), want.len());
        for (c, path) in seen.iter().zip(want) {
            match c {
                Captured::File { path: p, bytes, .. } => {
                    assert_eq!(p, path);
                    let i: usize = path.rsplit_once("/f").unwrap().1.parse().unwrap();
                    assert_eq!(bytes, format!("content {i}\n").as_bytes());
                    assert!(!path.ends_with('3'));
                }
                Captured::Unchanged { path: p, entry, .. } => {
                    assert_eq!(p, path);
                    assert_eq!(*entry, trusted);
                    assert!(path.ends_with('3'));
                }
                Captured::Skipped(s) => {
                    assert_eq!(s.path, *path);
                    assert_eq!(path, "d0/fifo");
                }
                other => panic!("{path}: {other:?}"),
            }
        }
    }

    fn stat_of_was(record: &SyncRecord, path: &str) -> FileStat {
        record.files.iter().find(|(p, _)| p == path).unwrap().1
    }

    #[test]
    fn sandbox_snapshot_ignores_sandbox_git_config() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb");
        std::fs::create_dir_all(dir.join(".git/info")).unwrap();
        // The agent's own exclude file must not hide files from review.
        std::fs::write(dir.join(".git/info/exclude"), "hidden.txt\n").unwrap();
        std::fs::write(dir.join("hidden.txt"), "x\n").unwrap();
        std::fs::write(dir.join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir(dir.join("target")).unwrap();
        std::fs::write(dir.join("target/junk"), "x\n").unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let snap = snapshot_sandbox(
            &dir,
            &FlatTree::new(),
            &store,
            DEFAULT_FILE_CAP,
            Hints::default(),
        )
        .unwrap();
        let paths: Vec<&str> = snap.changes.keys().map(|s| s.as_str()).collect();
        assert_eq!(paths, vec![".gitignore", "hidden.txt"]);
    }

    /// Make every entry of the stat cache non-racy, as if the cache had been written a few
    /// seconds after the files (what the passage of time does between two runs).
    fn age_cache(store: &Store) {
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        set_mtime(&stat_cache_path(store), later);
    }

    fn cached_snapshot(repo: &Path, store: &Store) -> (Snapshot, usize, Option<String>) {
        let mut cache = StatCache::load(&stat_cache_path(store), repo, store);
        let snap =
            snapshot_checkout_cached(repo, store, DEFAULT_FILE_CAP, Some(&mut cache)).unwrap();
        (snap, cache.hits(), cache.ignored.clone())
    }

    fn committed_repo(tmp: &Path, files: &[(&str, &str)]) -> std::path::PathBuf {
        let repo = tmp.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        for (name, body) in files {
            std::fs::write(repo.join(name), body).unwrap();
        }
        git(&repo, &["add", "."]);
        repo
    }

    #[test]
    fn stat_cache_rehashes_a_file_when_any_stat_field_changes() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let names = [
            "mtime", "ctime", "size", "inode", "mode", "link", "dir", "same",
        ];
        let files: Vec<(&str, &str)> = names.iter().map(|n| (*n, "0123456789\n")).collect();
        let repo = committed_repo(tmp.path(), &files);
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let n = names.len() + 1; // .git is not a file; the index adds nothing else
        let (first, hits, _) = cached_snapshot(&repo, &store);
        assert_eq!(
            (first.tree.len(), hits),
            (names.len(), 0),
            "a first run reads everything"
        );
        age_cache(&store);
        let (second, hits, _) = cached_snapshot(&repo, &store);
        assert_eq!(second.tree, first.tree);
        assert_eq!(hits, names.len(), "a warm run reads nothing (of {n})");

        let p = |name: &str| repo.join(name);
        let orig_mtime = std::fs::metadata(p("ctime")).unwrap().modified().unwrap();
        // mtime only (same content): re-hashed, same blob.
        set_mtime(
            &p("mtime"),
            orig_mtime - std::time::Duration::from_secs(100),
        );
        // ctime only: same size, mtime put back (`touch -d`), new content.
        std::fs::write(p("ctime"), "abcdefghij\n").unwrap();
        set_mtime(&p("ctime"), orig_mtime);
        // size.
        std::fs::write(p("size"), "0123456789 and more\n").unwrap();
        // inode: replaced by a new file with the same bytes, mtime put back.
        std::fs::write(p("inode.tmp"), "0123456789\n").unwrap();
        std::fs::rename(p("inode.tmp"), p("inode")).unwrap();
        set_mtime(&p("inode"), orig_mtime);
        // mode: made executable.
        std::fs::set_permissions(p("mode"), std::fs::Permissions::from_mode(0o755)).unwrap();
        // A file replaced by a symlink, another by a directory.
        std::fs::remove_file(p("link")).unwrap();
        symlink("same", p("link")).unwrap();
        std::fs::remove_file(p("dir")).unwrap();
        std::fs::create_dir(p("dir")).unwrap();
        std::fs::write(p("dir/inner"), "inside\n").unwrap();
        git(&repo, &["add", "dir/inner"]);

        let (third, hits, _) = cached_snapshot(&repo, &store);
        assert_eq!(hits, 1, "only the untouched file comes from the cache");
        let blob = |name: &str| store.read_blob(third.tree[name].oid).unwrap();
        assert_eq!(third.tree["mtime"], first.tree["mtime"]);
        assert_eq!(blob("ctime"), b"abcdefghij\n");
        assert_eq!(blob("size"), b"0123456789 and more\n");
        assert_eq!(third.tree["inode"], first.tree["inode"]);
        assert_eq!(third.tree["mode"].mode, Mode::Executable);
        assert_eq!(third.tree["link"].mode, Mode::Symlink);
        assert_eq!(blob("link"), b"same");
        assert!(!third.tree.contains_key("dir"));
        assert_eq!(blob("dir/inner"), b"inside\n");
        // And the rebuilt cache serves all of it next time.
        age_cache(&store);
        let (fourth, hits, _) = cached_snapshot(&repo, &store);
        assert_eq!(fourth.tree, third.tree);
        assert_eq!(hits, third.tree.len());
    }

    #[test]
    fn racy_entries_are_rehashed_and_the_rule_is_what_protects_them() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = committed_repo(tmp.path(), &[("a.txt", "new content\n")]);
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let path = stat_cache_path(&store);
        // A cache whose entry has the file's exact current stat but an older content's blob:
        // what a write in the same clock tick as the hashing leaves behind.
        let stale = store.write_blob(b"old content\n").unwrap();
        let st = nix::sys::stat::lstat(&repo.join("a.txt")).unwrap();
        let stat = file_stat(&st);
        let write_cache = |stamp: (i64, u32)| {
            let mut cache = StatCache::load(&path, &repo, &store);
            let entry = Entry {
                mode: Mode::File,
                oid: stale,
            };
            cache.record("a.txt", stat, entry);
            cache.save().unwrap();
            let t = std::time::UNIX_EPOCH + std::time::Duration::new(stamp.0 as u64, stamp.1);
            set_mtime(&path, t);
        };
        let newest = (stat.mtime_s, stat.mtime_ns).max((stat.ctime_s, stat.ctime_ns));
        // Stamp equal to the file's timestamps: racy, so re-hashed.
        write_cache(newest);
        let (snap, hits, _) = cached_snapshot(&repo, &store);
        assert_eq!(hits, 0);
        assert_eq!(
            store.read_blob(snap.tree["a.txt"].oid).unwrap(),
            b"new content\n"
        );
        // Positive control: the same entry one second older than the stamp is trusted (and so
        // would be wrong) — only the racy rule told the two apart.
        write_cache((newest.0 + 1, newest.1));
        let (snap, hits, _) = cached_snapshot(&repo, &store);
        assert_eq!(hits, 1);
        assert_eq!(snap.tree["a.txt"].oid, stale);
        assert!(is_racy(&stat, newest));
        assert!(!is_racy(&stat, (newest.0 + 1, newest.1)));
    }

    #[test]
    fn corrupt_or_foreign_caches_are_ignored_and_rebuilt() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = committed_repo(tmp.path(), &[("a.txt", "a\n"), ("b.txt", "b\n")]);
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let path = stat_cache_path(&store);
        let (good, _, _) = cached_snapshot(&repo, &store);
        age_cache(&store);
        let valid = std::fs::read(&path).unwrap();
        // Positive control: the valid cache is used.
        assert_eq!(cached_snapshot(&repo, &store).1, 2);

        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        let mut flipped = valid.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        let torn = valid[..valid.len() - 7].to_vec();
        for (what, bytes) in [
            ("garbage", b"not a cache at all".to_vec()),
            ("a flipped byte", flipped),
            ("a torn file", torn),
            ("an empty file", Vec::new()),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            set_mtime(&path, later);
            let (snap, hits, ignored) = cached_snapshot(&repo, &store);
            assert_eq!(hits, 0, "{what}");
            assert!(ignored.is_some(), "{what}");
            assert_eq!(snap.tree, good.tree, "{what}");
            // Rebuilt: the next run trusts it again.
            age_cache(&store);
            assert_eq!(cached_snapshot(&repo, &store).1, 2, "{what} rebuilt");
        }

        // Another repository's cache with the same store (same paths, other content): foreign.
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        git(&other, &["init", "-q"]);
        std::fs::write(other.join("a.txt"), "A\n").unwrap();
        std::fs::write(other.join("b.txt"), "B\n").unwrap();
        git(&other, &["add", "."]);
        std::fs::write(&path, &valid).unwrap();
        set_mtime(&path, later);
        let (snap, hits, ignored) = cached_snapshot(&other, &store);
        assert_eq!(hits, 0);
        assert!(ignored.unwrap().contains("another repository"));
        assert_eq!(store.read_blob(snap.tree["a.txt"].oid).unwrap(), b"A\n");

        // A cache naming a blob the store does not have is not trusted for that entry.
        let empty_store = Store::open_or_init(&tmp.path().join("store2")).unwrap();
        let path2 = stat_cache_path(&empty_store);
        let mut cache = StatCache::load(&path2, &repo, &empty_store);
        let st = file_stat(&nix::sys::stat::lstat(&repo.join("a.txt")).unwrap());
        cache.record("a.txt", st, good.tree["a.txt"]);
        cache.save().unwrap();
        set_mtime(&path2, later);
        let (snap, hits, _) = cached_snapshot(&repo, &empty_store);
        assert_eq!(hits, 0);
        assert_eq!(
            empty_store.read_blob(snap.tree["a.txt"].oid).unwrap(),
            b"a\n"
        );
    }

    #[test]
    fn a_cache_entry_matches_only_when_every_stat_field_does() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = committed_repo(tmp.path(), &[("a.txt", "a\n")]);
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let path = stat_cache_path(&store);
        let entry = Entry {
            mode: Mode::File,
            oid: store.write_blob(b"a\n").unwrap(),
        };
        let stat = FileStat {
            mtime_s: 1000,
            mtime_ns: 5,
            ctime_s: 1000,
            ctime_ns: 6,
            size: 2,
            ino: 77,
            mode: 0o100644,
        };
        let mut cache = StatCache::load(&path, &repo, &store);
        cache.record("a.txt", stat, entry);
        cache.save().unwrap();
        let cache = StatCache::load(&path, &repo, &store);
        assert_eq!(cache.lookup("a.txt", &stat, &store), Some(entry));
        let variants = [
            (
                "mtime",
                FileStat {
                    mtime_ns: 4,
                    ..stat
                },
            ),
            (
                "ctime",
                FileStat {
                    ctime_s: 1001,
                    ..stat
                },
            ),
            ("size", FileStat { size: 3, ..stat }),
            ("inode", FileStat { ino: 78, ..stat }),
            (
                "mode",
                FileStat {
                    mode: 0o100755,
                    ..stat
                },
            ),
            (
                "kind",
                FileStat {
                    mode: 0o120777,
                    ..stat
                },
            ),
        ];
        for (field, other) in variants {
            assert_eq!(cache.lookup("a.txt", &other, &store), None, "{field}");
        }
        assert_eq!(cache.lookup("b.txt", &stat, &store), None);
    }

    #[test]
    fn read_entries_compare_by_mode_and_content() {
        let read = |bytes: &[u8], mode| ReadEntry {
            bytes: bytes.to_vec(),
            mode,
            stat: FileStat::default(),
        };
        let entry = Entry {
            mode: Mode::File,
            oid: blob_id(b"x\n"),
        };
        let same = captured_from(
            "a".into(),
            Check::Compare(entry),
            read(b"x\n", Mode::File),
            false,
        );
        assert!(matches!(same, Captured::Unchanged { entry: e, .. } if e == entry));
        // Positive controls: other content, another mode, or no entry to compare with.
        let edited = captured_from(
            "a".into(),
            Check::Compare(entry),
            read(b"y\n", Mode::File),
            false,
        );
        // The comparison's hash is handed on, asked for or not.
        let y = Some(blob_id(b"y\n"));
        assert!(matches!(
            edited,
            Captured::File {
                executable: false,
                oid,
                ..
            } if oid == y
        ));
        let exec = captured_from(
            "a".into(),
            Check::Compare(entry),
            read(b"x\n", Mode::Executable),
            false,
        );
        assert!(matches!(
            exec,
            Captured::File {
                executable: true,
                ..
            }
        ));
        let link = captured_from("a".into(), Check::Read, read(b"x\n", Mode::Symlink), false);
        assert!(matches!(link, Captured::Symlink { target, oid: None, .. } if target == b"x\n"));
        // Hashed where it was read when asked: the id a store would give it.
        let hashed = captured_from("a".into(), Check::Read, read(b"z\n", Mode::File), true);
        let z = Some(blob_id(b"z\n"));
        assert!(matches!(hashed, Captured::File { oid, .. } if oid == z));
        let link = captured_from("a".into(), Check::Read, read(b"x\n", Mode::Symlink), true);
        let x = Some(blob_id(b"x\n"));
        assert!(matches!(link, Captured::Symlink { oid, .. } if oid == x));
    }

    proptest::proptest! {
        /// The read-back's check walking the base and the record beside sorted questions says
        /// what looking each path up says; out of order, or with a record out of order, it
        /// still names the base entry and never trusts a stat the lookup would not. With
        /// `sparse`, the base has far more paths than the record (as after a small change), so
        /// the check looks the base up instead of walking it.
        #[test]
        fn readback_check_is_the_lookup(
            base in proptest::collection::btree_map("[abc]{1,2}(/[abc]{1,2})?", 0u8..3, 0..16),
            recorded in proptest::collection::vec((0usize..16, 0u8..3, proptest::bool::ANY), 0..16),
            asked in proptest::collection::vec(("[abc]{1,2}(/[abc]{1,2})?", 0u8..3), 0..24),
            sort_asked in proptest::bool::ANY,
            shuffle_record in proptest::bool::ANY,
            sparse in proptest::bool::ANY,
        ) {
            let mut base: FlatTree = base
                .into_iter()
                .map(|(p, n)| (p, Entry { mode: Mode::File, oid: gix::hash::ObjectId::from_bytes_or_panic(&[n; 20]) }))
                .collect();
            if sparse {
                // Sorted among the others ('b/…' between 'a…' and 'c…'), so the walk and the
                // lookup differ in where they are.
                for i in 0..16 * SPARSE_RECORD {
                    let oid = gix::hash::ObjectId::from_bytes_or_panic(&[(i % 3) as u8; 20]);
                    base.insert(format!("b/z{i:04}"), Entry { mode: Mode::File, oid });
                }
            }
            let paths: Vec<&String> = base.keys().collect();
            let stat = |n: u8, racy: bool| FileStat {
                mtime_s: if racy { 100 } else { 10 },
                size: n as u64,
                ..FileStat::default()
            };
            let mut files: Vec<(String, FileStat)> = recorded
                .iter()
                .filter_map(|&(i, n, racy)| paths.get(i).map(|p| ((*p).clone(), stat(n, racy))))
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .collect();
            if shuffle_record {
                files.reverse();
            }
            let record = SyncRecord { stamp_s: 50, stamp_ns: 0, files, dirs: Vec::new() };
            let mut asked: Vec<(String, FileStat)> = asked
                .into_iter()
                .map(|(p, n)| (p, stat(n, false)))
                .chain(paths.iter().map(|p| ((*p).clone(), stat(1, false))))
                .collect();
            if sort_asked {
                asked.sort_by(|a, b| a.0.cmp(&b.0));
                asked.dedup_by(|a, b| a.0 == b.0);
            }
            let lookup = |path: &str, st: &FileStat| match base.get(path) {
                None => Check::Read,
                Some(entry) => match record.files.iter().find(|(p, _)| p == path) {
                    Some((_, was)) if was == st && !is_racy(was, (50, 0)) => Check::Trust(*entry),
                    _ => Check::Compare(*entry),
                },
            };
            let mut check = readback_check(&base, Some(&record));
            for (path, st) in &asked {
                let (got, want) = (check(path, st), lookup(path, st));
                if sort_asked {
                    proptest::prop_assert_eq!(got, want, "{}", path);
                } else {
                    let entry = |c: Check| match c {
                        Check::Read => None,
                        Check::Trust(e) | Check::Compare(e) => Some(e),
                    };
                    proptest::prop_assert_eq!(entry(got), entry(want), "{}", path);
                    proptest::prop_assert!(
                        !matches!(got, Check::Trust(_)) || got == want,
                        "{} trusted against the lookup's {:?}", path, want
                    );
                }
            }
        }
    }
}

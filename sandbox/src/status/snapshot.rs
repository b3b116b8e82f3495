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

mod capturing;
mod walking;
pub use capturing::*;
pub use walking::*;

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

#[cfg(test)]
mod tests;

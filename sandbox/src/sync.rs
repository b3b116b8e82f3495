//! Bringing a sandbox slot to a run's base, writing only what differs — shared by
//! [`LocalSandbox`](crate::workspace::LocalSandbox) (in the hub, `--isolation none`) and the
//! sandbox helper (as the sandbox user, `--isolation user`).
//!
//! **A synced slot holds exactly its base — nothing more, nothing less.** Every sync (the
//! put-back once a run is over, the next run's sync, a from-scratch one) first removes
//! whatever is neither a base path nor a directory on the way to one, whatever the ignore
//! rules say (they are the agent's to write): see [`crate::foreign`]. Then it writes every base
//! path that differs, and removes the paths of the slot's former base that this one lacks
//! ([`drop_former_base`]).
//!
//! A sync leaves a [`SyncRecord`]: the stat of every base path right after the sync, and the
//! sync's stamp. The next sync of the slot, and the read-back after the run
//! ([`crate::snapshot::snapshot_sandbox`], the helper's `snapshot`), trust a path whose stat
//! still matches and is strictly older than the stamp; every other path is compared by content
//! (its git blob id against the base's), so an agent that rewrites a file and puts its size and
//! mtime back (`touch -d`) is still seen: its ctime moved, or, within the sync's clock tick,
//! the racy rule sends it to the content comparison.
//!
//! The sandbox's own `.git` is recreated on every sync (the agent may have planted hooks,
//! filters or an fsmonitor in it, forged a loose object or a pack, added an alternate), with
//! not one object of the old: it borrows the base's objects (an alternate) from a repository
//! the sandbox's agents cannot write — the hub's store under `--isolation none` (whose agent
//! runs as the hub's user, so only by convention), the slot's base objects under
//! `--isolation user` (see [`crate::helper`]) — so only the base's new blobs are written, and
//! into that. A blob read from there is still checked against its id before it is written
//! into the sandbox. ([`fresh_git`] can keep the old objects only for a retry within one sync,
//! when no agent ran since they were written.)
//!
//! A slot's last sync ([`Synced`]) is kept by the slot's one owner and handed to every sync
//! of it ([`sync_slot`] takes it and leaves the new one): in the hub, the slot's
//! [`Slot`](crate::workspace::Slot), which its registry owns; in a kept standby helper
//! (`--isolation user`, see [`crate::helper`]), that process's own copy. No process-wide map
//! holds them: a hub restart (or a second hub in one process) starts without, and the next
//! sync compares every file by content once.
//!
//! **Layer:** imports [`crate::wire`], [`crate::beneath`], [`crate::store`],
//! [`crate::statcache`] and [`crate::snapshot`]; nothing of `workspace`, `user` or `helper`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gix::hash::ObjectId;

use crate::beneath::{Beneath, FsError, Kind};
use crate::snapshot::{
    dir_record, readback_check, sandbox_candidates_since, split_by_dirty, Check,
};
use crate::statcache::{file_stat, mtime_of};
use crate::store::{blob_id, Entry, FlatTree, Mode, ObjectBatch, Store, StoreError};
use crate::watch::Dirty;
use crate::wire::{BaseEntry, BaseRef, EntryMode, FileStat, PrepareReply, SyncRecord};

mod former;
mod git;
pub use former::drop_former_base;
pub(crate) use git::remove_any;
pub use git::{fresh_git, Discard};

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("preparing sandbox {dir}: {source}")]
    Fs {
        dir: PathBuf,
        #[source]
        source: FsError,
    },
    #[error("preparing sandbox {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("preparing sandbox {dir}: blob {oid} of the base is not in the sandbox's objects and was not sent (a full prepare fixes it)")]
    MissingBlob { dir: PathBuf, oid: ObjectId },
    #[error("preparing sandbox {dir}: the blob given as {oid} hashes to {got}")]
    BadBlob {
        dir: PathBuf,
        oid: ObjectId,
        got: ObjectId,
    },
}

/// A mode as the wire carries it.
pub fn wire_mode(mode: Mode) -> EntryMode {
    match mode {
        Mode::File => EntryMode::File,
        Mode::Executable => EntryMode::Executable,
        Mode::Symlink => EntryMode::Symlink,
    }
}

/// The base as the wire carries it.
pub fn base_to_wire(base: &FlatTree) -> Vec<BaseEntry> {
    base.iter()
        .map(|(path, e)| BaseEntry {
            path: path.clone(),
            mode: wire_mode(e.mode),
            oid: e.oid.to_string(),
        })
        .collect()
}

/// The base as [`crate::wire::write_request_with`] writes it, borrowed.
pub fn base_refs(base: &FlatTree) -> impl ExactSizeIterator<Item = BaseRef<'_>> {
    base.iter().map(|(path, e)| BaseRef {
        path,
        mode: wire_mode(e.mode),
        oid: e.oid.as_bytes(),
    })
}

/// The base from the wire; every path is checked to be one hunkgate can represent. The paths
/// are moved, not copied, and the map is built in one go from the (sorted) list.
pub fn base_from_wire(base: Vec<BaseEntry>) -> Result<FlatTree, (String, String)> {
    let mut entries = Vec::with_capacity(base.len());
    for e in base {
        if let Err(err) = crate::beneath::components(&e.path) {
            return Err((e.path, err.to_string()));
        }
        let oid = match ObjectId::from_hex(e.oid.as_bytes()) {
            Ok(oid) => oid,
            Err(err) => return Err((e.path, format!("bad blob id: {err}"))),
        };
        let mode = match e.mode {
            EntryMode::File => Mode::File,
            EntryMode::Executable => Mode::Executable,
            EntryMode::Symlink => Mode::Symlink,
        };
        entries.push((e.path, Entry { mode, oid }));
    }
    Ok(entries.into_iter().collect())
}

/// What the last sync of a slot wrote and reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// Shared with the caller that synced it: the read-back of a run on that base knows it by
    /// address, without comparing 10,000 entries.
    pub base: Arc<FlatTree>,
    pub record: SyncRecord,
    /// The id of `base` as a tree, when this process wrote it.
    pub tree: Option<ObjectId>,
}

/// The record of `synced` if it was made for exactly `base` (else None: compare everything).
pub fn record_for<'a>(synced: Option<&'a Synced>, base: &FlatTree) -> Option<&'a SyncRecord> {
    synced.filter(|s| s.is_for(base)).map(|s| &s.record)
}

impl Synced {
    /// Whether this sync was for exactly `base`: the same tree (by address, as a run's
    /// read-back passes it) or an equal one.
    pub fn is_for(&self, base: &FlatTree) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.base), base) || *self.base == *base
    }
}

/// Make sure every blob of `base` is in the sandbox's repository, taking missing ones from
/// `source` (the hub's store, for a local sandbox). Blobs in `known` (the previous base's,
/// whose objects were kept) are not even looked up.
pub fn ensure_blobs(
    dir: &Path,
    repo: &Store,
    base: &FlatTree,
    known: &HashSet<ObjectId>,
    mut source: impl FnMut(ObjectId) -> Result<Option<Vec<u8>>, SyncError>,
) -> Result<(), SyncError> {
    let mut seen = HashSet::new();
    let mut blobs = repo.batch();
    for entry in base.values() {
        if known.contains(&entry.oid) || !seen.insert(entry.oid) || repo.has_object(entry.oid) {
            continue;
        }
        let bytes = source(entry.oid)?.ok_or_else(|| SyncError::MissingBlob {
            dir: dir.to_path_buf(),
            oid: entry.oid,
        })?;
        store_blob(dir, &mut blobs, entry.oid, &bytes)?;
    }
    Ok(blobs.finish()?)
}

/// Write a blob that claims to be `oid` into `blobs`, refusing one that is not.
pub fn store_blob(
    dir: &Path,
    blobs: &mut ObjectBatch<'_>,
    oid: ObjectId,
    bytes: &[u8],
) -> Result<(), SyncError> {
    let got = blobs.write_blob(bytes)?;
    blob_is(dir, oid, got)
}

/// A blob that claims to be `oid` and hashes to `got` is only taken when the two agree.
fn blob_is(dir: &Path, oid: ObjectId, got: ObjectId) -> Result<(), SyncError> {
    if got != oid {
        return Err(SyncError::BadBlob {
            dir: dir.to_path_buf(),
            oid,
            got,
        });
    }
    Ok(())
}

/// Below this many files to write, a sync writes them on the calling thread (a thread costs
/// tens of microseconds to start; a warm sync writes a handful).
const WRITE_PARALLEL_FROM: usize = 256;

/// Write each of `entries` (from `repo`'s blobs) into the sandbox, in contiguous runs on a few
/// threads ([`crate::io_threads`]) when there are many: making a file is a wait on the
/// filesystem (an inode to allocate, and on ext4 without a journal an inode table block to
/// read when inodes were freed recently), and each blob is inflated and hashed first, so the
/// runs overlap both. Returns the stat of each file written, in order; the first error stops
/// the other runs at their next file.
fn write_entries(
    dir: &Path,
    root: &Beneath,
    repo: &Store,
    entries: &[(&String, &Entry)],
) -> Result<Vec<(String, FileStat)>, SyncError> {
    let fs_err = |source| SyncError::Fs {
        dir: dir.to_path_buf(),
        source,
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let run = |run: &[(&String, &Entry)]| -> Result<Vec<(String, FileStat)>, SyncError> {
        let mut out = Vec::with_capacity(run.len());
        // One repository handle for the run: a read through the store makes one per blob (its
        // object cache and decompressor allocated and freed again). With one per blob, a hub's
        // anonymous memory grew through a first run's sync of 10,000 files for as long as it
        // lasted — to 104 MiB in half of the benchmark's runs, when making files was slow —
        // and fell back once it was over.
        let reader = repo.reader();
        for &(path, entry) in run {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let wrote = (|| {
                let bytes = reader.read_blob(entry.oid)?;
                // Kept objects are the agent's to rewrite: only what hashes to the base's id
                // is written.
                blob_is(dir, entry.oid, blob_id(&bytes))?;
                match entry.mode {
                    Mode::Symlink => root.symlink(path, &bytes).map_err(fs_err)?,
                    Mode::File | Mode::Executable => {
                        if matches!(root.kind(path), Ok(Some(Kind::Symlink | Kind::Other(_)))) {
                            root.remove_entry(path).map_err(fs_err)?;
                        }
                        root.write_scratch(path, &bytes, entry.mode == Mode::Executable)
                            .map_err(fs_err)?;
                    }
                }
                root.lstat(path).map_err(fs_err)
            })();
            match wrote {
                Ok(Some(st)) => out.push((path.clone(), file_stat(&st))),
                Ok(None) => {}
                Err(e) => {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(out)
    };
    let threads = crate::io_threads();
    if threads < 2 || entries.len() < WRITE_PARALLEL_FROM {
        return run(entries);
    }
    let runs: Vec<&[(&String, &Entry)]> = entries.chunks(entries.len().div_ceil(threads)).collect();
    let mut out = Vec::with_capacity(entries.len());
    for written in crate::on_threads(runs, run) {
        out.extend(written?);
    }
    Ok(out)
}

/// What [`sync_files`] brings a slot to, and what it may go by.
#[derive(Clone, Copy)]
pub struct SyncFiles<'a> {
    /// The slot.
    pub dir: &'a Path,
    /// The slot's repository, which holds every blob of `base` (see [`ensure_blobs`]).
    pub repo: &'a Store,
    pub base: &'a FlatTree,
    /// The stat record of the slot's last sync, for the paths whose base entry did not change
    /// since (see [`rebase_onto`]); None compares every file by content.
    pub record: Option<&'a SyncRecord>,
    /// What change notification saw since that sync, and every path whose base entry changed
    /// since (see [`sync_slot`]): paths it does not cover are not even looked at, and
    /// leftovers are looked for only where it saw something.
    pub dirty: Option<&'a Dirty>,
    /// `base`'s tree id if the caller knows it (see [`commit_base`]).
    pub known_tree: Option<ObjectId>,
}

impl<'a> SyncFiles<'a> {
    /// A sync of `dir` to `base` that goes by nothing: every file compared by content.
    pub fn from_scratch(dir: &'a Path, repo: &'a Store, base: &'a FlatTree) -> Self {
        SyncFiles {
            dir,
            repo,
            base,
            record: None,
            dirty: None,
            known_tree: None,
        }
    }
}

/// The paths a sync looks at (see [`looked_at`]).
struct LookedAt {
    /// What is there now and may differ (not ignored): leftovers among them are removed.
    current: Vec<String>,
    /// Base paths the dirty set does not cover: they keep their recorded stat.
    untouched: Vec<(String, FileStat)>,
    /// With a dirty set: the record cut down to the candidates.
    looked: Option<SyncRecord>,
    /// A whole walk's directories, for the new record (None: no directory record).
    walked_dirs: Option<Vec<String>>,
}

/// What a sync of `job` looks at: with a dirty set, only its candidates, against the record
/// cut down to them; otherwise what a read-back walks (leftovers looked for where the
/// directory record says something may have changed since the sync before, everywhere
/// without one).
fn looked_at(job: &SyncFiles<'_>, root: &Beneath) -> LookedAt {
    let SyncFiles {
        dir, base, record, ..
    } = *job;
    if let (Some(record), Some(dirty)) = (record, job.dirty) {
        let split = split_by_dirty(dir, root, base, record, dirty, None);
        let untouched = record
            .files
            .iter()
            .filter(|(p, _)| !split.candidates.contains(p))
            .cloned()
            .collect();
        return LookedAt {
            current: split.candidates.into_iter().collect(),
            untouched,
            looked: Some(split.looked),
            walked_dirs: None,
        };
    }
    let found = sandbox_candidates_since(dir, root, base, record, None);
    // A name the walk cannot carry stays (and is reported by every read-back): its directory
    // must be read each time.
    let walked_dirs = found.skipped.is_empty().then(|| {
        let mut dirs = found.dirs;
        if found.dirs_read.is_some() {
            // The directories not read again are still there, or gone: the record made after
            // this sync `lstat`s every one.
            dirs.extend(
                record
                    .into_iter()
                    .flat_map(|r| &r.dirs)
                    .map(|(d, _)| d.clone()),
            );
        }
        dirs
    });
    LookedAt {
        current: found.new.into_iter().collect(),
        untouched: Vec::new(),
        looked: None,
        walked_dirs,
    }
}

/// Of the base paths a sync examines, those that hold (with their stat, for the record) and
/// those to write. A path holds when its stat vouches for it ([`readback_check`]) or its
/// content is the base's; a file with another name (a hard link the agent made to a path
/// outside the slot) can be written through that name with no event and no stat of ours to
/// tell: it never holds, and is replaced by a file of its own (see `Beneath::write_scratch`).
#[allow(clippy::type_complexity)]
fn what_holds<'b>(
    job: &SyncFiles<'b>,
    root: &Beneath,
    look: &'b LookedAt,
) -> Result<(Vec<(String, FileStat)>, Vec<(&'b String, &'b Entry)>), SyncError> {
    let fs_err = |source| SyncError::Fs {
        dir: job.dir.to_path_buf(),
        source,
    };
    let base = job.base;
    // Whether a path's stat vouches for the base entry: asked in path order, as the read-back's.
    let mut check = readback_check(base, look.looked.as_ref().or(job.record));
    let examine: Vec<(&String, &Entry)> = match look.looked {
        Some(_) => look
            .current
            .iter()
            .filter_map(|p| base.get_key_value(p))
            .collect(),
        None => base.iter().collect(),
    };
    // Every `lstat` first, all at once (see `Beneath::lstat_many`).
    let paths: Vec<&str> = examine.iter().map(|(p, _)| p.as_str()).collect();
    let stats = root.lstat_many(&paths);
    let (mut holding, mut to_write) = (Vec::with_capacity(base.len()), Vec::new());
    for ((path, entry), st) in examine.into_iter().zip(stats) {
        let st = st.map_err(fs_err)?;
        let stat = st.as_ref().map(file_stat);
        let alone = st.as_ref().is_none_or(|st| st.st_nlink <= 1);
        let trusted = alone && stat.is_some_and(|now| matches!(check(path, &now), Check::Trust(_)));
        let holds = trusted
            || alone
                && match st.as_ref().map(crate::beneath::kind_of) {
                    Some(Kind::File { executable, .. }) if entry.mode != Mode::Symlink => {
                        executable == (entry.mode == Mode::Executable)
                            && matches!(root.read(path, u64::MAX), Ok(Some((ref b, _))) if blob_id(b) == entry.oid)
                    }
                    Some(Kind::Symlink) if entry.mode == Mode::Symlink => {
                        matches!(root.read_link(path), Ok(Some(ref t)) if blob_id(t) == entry.oid)
                    }
                    _ => false,
                };
        match (holds, stat) {
            (true, Some(stat)) => holding.push((path.clone(), stat)),
            (true, None) => {}
            (false, _) => to_write.push((path, entry)),
        }
    }
    Ok((holding, to_write))
}

/// Bring the files of `job.dir` to exactly `job.base` (whose blobs are all in `job.repo`, see
/// [`ensure_blobs`]) — nothing more: whatever else is there goes, ignored or not (see
/// [`crate::foreign`]) — then commit the base in the sandbox's repository. Only paths whose
/// stat differs from the record (or is racy), and then only those whose content differs, are
/// written. Nothing is followed: every write goes through [`Beneath`]. The tree id of the base
/// is returned with the reply.
pub fn sync_files(job: &SyncFiles<'_>) -> Result<(PrepareReply, ObjectId), SyncError> {
    let SyncFiles {
        dir, repo, base, ..
    } = *job;
    let fs_err = |source| SyncError::Fs {
        dir: dir.to_path_buf(),
        source,
    };
    let root = Beneath::open_scratch(dir).map_err(fs_err)?;
    // Whatever is neither a base path nor a directory on the way to one goes first, ignored
    // or not (see `crate::foreign`): the ignore rules are the agent's to write.
    let dropped =
        crate::foreign::drop_foreign(dir, base, job.record, job.dirty).map_err(|source| {
            SyncError::Io {
                dir: dir.to_path_buf(),
                source,
            }
        })?;
    if dropped > 0 {
        tracing::debug!(dir = %dir.display(), dropped, "removed what the base does not have");
    }
    let mut look = looked_at(job, &root);
    let untouched = std::mem::take(&mut look.untouched);
    for path in look.current.iter().filter(|p| !base.contains_key(*p)) {
        root.remove_entry(path).map_err(fs_err)?;
    }
    // What holds stays; the rest is written afterwards, on a few threads when it is a whole
    // sandbox's worth (a first run's 10,000 files).
    let (mut files, to_write) = what_holds(job, &root, &look)?;
    let written = to_write.len() as u64;
    files.extend(write_entries(dir, &root, repo, &to_write)?);
    // In base order, as a record goes (the untouched ones interleave with the rest).
    files.extend(untouched);
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let stats: HashMap<&str, FileStat> = files.iter().map(|(p, s)| (p.as_str(), *s)).collect();
    let tree = commit_base(dir, repo, base, job.known_tree, |p| stats.get(p).copied())?;
    // The index is written last: its mtime is the sync's stamp (every file written is no
    // newer), from the same filesystem clock as the files' own timestamps.
    let (stamp_s, stamp_ns) =
        mtime_of(&dir.join(".git").join("index")).ok_or_else(|| SyncError::Io {
            dir: dir.to_path_buf(),
            source: std::io::Error::other("the sandbox's fresh .git/index is missing"),
        })?;
    let dirs = look
        .walked_dirs
        .map(|walked| dir_record(dir, &root, base, walked))
        .unwrap_or_default();
    let reply = PrepareReply {
        record: SyncRecord {
            stamp_s,
            stamp_ns,
            files,
            dirs,
        },
        written,
        after_reset: false,
    };
    Ok((reply, tree))
}

/// Commit `base` (whose blobs are already in `repo`) as `main`, point HEAD at it and write the
/// index with the files' stat data (`stat`), so that `git status` in the sandbox is clean
/// without hashing every file. `known_tree`, `base`'s tree id from an earlier sync, is used
/// as it is if `repo` has it; the tree id is returned.
pub fn commit_base(
    dir: &Path,
    repo: &Store,
    base: &FlatTree,
    known_tree: Option<ObjectId>,
    stat: impl Fn(&str) -> Option<FileStat>,
) -> Result<ObjectId, SyncError> {
    let git_dir = dir.join(".git");
    let io = |source| SyncError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let tree = match known_tree {
        Some(tree) if repo.has_object(tree) => tree,
        _ => repo.write_tree(base)?,
    };
    let commit = repo.commit(tree, &[], "hunkgate: your checkout as of this run\n")?;
    repo.set_ref("refs/heads/main", commit)?;
    std::fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n").map_err(io)?;
    repo.write_index_of(base, stat)?;
    Ok(tree)
}

/// Empty `dir` except its `.git` (the fallback when an in-place sync cannot fix what the agent
/// left, such as a directory where the base has a file).
pub fn clear_except_git(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == ".git" {
            continue;
        }
        // file_type does not follow symlinks; remove_dir_all does not follow them inside.
        remove_any(&entry.path())?;
    }
    Ok(())
}

/// A whole sync of the slot `dir` with blobs from `source` (and, with `alternate`, borrowed
/// from that objects directory): fresh `.git` (objects kept), missing blobs, files, commit; on
/// failure every blob is checked again, the directory is emptied (but for `.git`) and synced
/// from nothing.
///
/// `synced` is the slot's last sync, as its owner keeps it (see the module docs): the sync
/// goes by it, forgets it while it works (a sync that fails halfway leaves None), and leaves
/// the new one there for the next sync and the read-back. `dirty` is what change
/// notification saw in the slot since that sync (see [`crate::watch`]); None looks at every
/// file.
pub fn sync_slot(
    dir: &Path,
    base: &Arc<FlatTree>,
    synced: &mut Option<Arc<Synced>>,
    alternate: Option<&Path>,
    dirty: Option<&Dirty>,
    source: impl FnMut(ObjectId) -> Result<Option<Vec<u8>>, SyncError>,
) -> Result<PrepareReply, SyncError> {
    // With an alternate, this is the hub's own process (`--isolation none`): it lives on.
    let discard = if alternate.is_some() {
        Discard::InBackground
    } else {
        Discard::Now
    };
    let slot = SlotSync {
        dir,
        alternate,
        discard,
    };
    sync_slot_with(&slot, base, synced, dirty, source)
}

/// Where and how [`sync_slot_with`] syncs a slot.
pub struct SlotSync<'a> {
    pub dir: &'a Path,
    /// An objects directory the slot's `.git` borrows from, which holds every blob of a base.
    pub alternate: Option<&'a Path>,
    /// How the old `.git` goes (in the background only in a process that lives on after the
    /// sync).
    pub discard: Discard,
}

/// What a sync goes by from the slot's last one, `previous` (see [`sync_slot`]).
struct Resync<'a> {
    /// The last record, for the paths whose base entry did not change since.
    record: Option<Cow<'a, SyncRecord>>,
    /// What may differ from the base now: what change notification saw, and every path whose
    /// base entry changed.
    dirty: Option<Dirty>,
    known_tree: Option<ObjectId>,
}

impl<'a> Resync<'a> {
    fn plan(previous: Option<&'a Synced>, base: &FlatTree, seen: Option<&Dirty>) -> Self {
        // The base's delta since the last sync, found once: it limits the old record, and it
        // is part of what may differ now.
        let changed = previous
            .map(|prev| changed_paths(&prev.base, base))
            .unwrap_or_default();
        let record = previous
            .map(|prev| rebase_onto(prev, &changed))
            .filter(|r| !r.files.is_empty());
        let dirty = match seen {
            Some(seen) if record.is_some() => Some(with_base_changes(seen, &changed)),
            _ => None,
        };
        let known_tree = previous.filter(|p| p.is_for(base)).and_then(|p| p.tree);
        Resync {
            record,
            dirty,
            known_tree,
        }
    }
}

/// [`sync_slot`], where and how `slot` says.
pub fn sync_slot_with(
    slot: &SlotSync<'_>,
    base: &Arc<FlatTree>,
    synced: &mut Option<Arc<Synced>>,
    dirty: Option<&Dirty>,
    mut source: impl FnMut(ObjectId) -> Result<Option<Vec<u8>>, SyncError>,
) -> Result<PrepareReply, SyncError> {
    let SlotSync {
        dir,
        alternate,
        discard,
    } = *slot;
    let previous = synced.take();
    std::fs::create_dir_all(dir).map_err(|source| SyncError::Io {
        dir: dir.to_path_buf(),
        source,
    })?;
    // With an alternate (the hub's store) every blob and tree of a base is there already:
    // nothing of the old .git is worth keeping.
    let start = std::time::Instant::now();
    let (repo, mut known) = fresh_git(dir, alternate, alternate.is_none(), discard)?;
    let git_done = start.elapsed();
    known.extend(previous.iter().flat_map(|s| s.base.values().map(|e| e.oid)));
    ensure_blobs(dir, &repo, base, &known, &mut source)?;
    let blobs_done = start.elapsed();
    let plan = Resync::plan(previous.as_deref(), base, dirty);
    let job = SyncFiles {
        record: plan.record.as_deref(),
        dirty: plan.dirty.as_ref(),
        known_tree: plan.known_tree,
        ..SyncFiles::from_scratch(dir, &repo, base)
    };
    let (reply, tree) = match drop_former_base(dir, base).and_then(|()| sync_files(&job)) {
        Ok(reply) => reply,
        Err(first) => {
            // The agent may have left shapes an in-place sync cannot fix (a directory where
            // the base has a file), or deleted or damaged objects: start from nothing.
            tracing::warn!(error = %first, dir = %dir.display(), "resetting sandbox from scratch");
            from_scratch(slot, base, &mut source)?
        }
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    tracing::debug!(
        dir = %dir.display(),
        git_ms = ms(git_done),
        blobs_ms = ms(blobs_done - git_done),
        files_ms = ms(start.elapsed() - blobs_done),
        written = reply.written,
        "sandbox synced"
    );
    *synced = Some(Arc::new(Synced {
        base: base.clone(),
        record: reply.record.clone(),
        tree: Some(tree),
    }));
    Ok(reply)
}

/// A sync of the slot from nothing, after an in-place one failed: first with the objects kept
/// (a source that has no blobs, the kept helper's put-back, can only go on with them), then,
/// if that fails too, from no objects at all: a damaged one must not wedge the slot.
fn from_scratch(
    slot: &SlotSync<'_>,
    base: &FlatTree,
    mut source: impl FnMut(ObjectId) -> Result<Option<Vec<u8>>, SyncError>,
) -> Result<(PrepareReply, ObjectId), SyncError> {
    let dir = slot.dir;
    let mut once = |keep: bool| -> Result<_, SyncError> {
        let (repo, known) = fresh_git(dir, slot.alternate, keep, Discard::Now)?;
        ensure_blobs(dir, &repo, base, &known, &mut source)?;
        clear_except_git(dir).map_err(|source| SyncError::Io {
            dir: dir.to_path_buf(),
            source,
        })?;
        drop_former_base(dir, base)?;
        sync_files(&SyncFiles::from_scratch(dir, &repo, base))
    };
    match once(true) {
        Ok(synced) => Ok(synced),
        Err(_) => once(false),
    }
}

/// `seen` (what changed in the slot since the last sync) plus `changed`, the paths whose base
/// entry differs since (see [`changed_paths`]); a changed `.gitignore` makes its directory a
/// dirty tree (files there may be ignored or not now).
pub fn with_base_changes(seen: &Dirty, changed: &[&str]) -> Dirty {
    let mut dirty = seen.clone();
    for &path in changed {
        match path.rsplit_once('/') {
            Some((parent, ".gitignore")) => dirty.trees.insert(parent.to_string()),
            None if path == ".gitignore" => dirty.trees.insert(String::new()),
            _ => dirty.paths.insert(path.to_string()),
        };
    }
    dirty
}

/// The paths whose entry differs between `a` and `b` (added, removed or changed), in order, in
/// one pass over both.
pub fn changed_paths<'a>(a: &'a FlatTree, b: &'a FlatTree) -> Vec<&'a str> {
    use std::cmp::Ordering;
    let mut out = Vec::new();
    let (mut x, mut y) = (a.iter().peekable(), b.iter().peekable());
    loop {
        let step = match (x.peek(), y.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((pa, _)), Some((pb, _))) => pa.cmp(pb),
        };
        match step {
            Ordering::Less => out.push(x.next().map(|(p, _)| p.as_str()).unwrap_or_default()),
            Ordering::Greater => out.push(y.next().map(|(p, _)| p.as_str()).unwrap_or_default()),
            Ordering::Equal => {
                if let (Some((p, ea)), Some((_, eb))) = (x.next(), y.next()) {
                    if ea != eb {
                        out.push(p.as_str());
                    }
                }
            }
        }
    }
    out
}

/// The part of a previous sync's record that still speaks for the new base, given the paths
/// whose entry `changed` since `prev`'s base (see [`changed_paths`]): those whose entry did
/// not change (a path whose blob changed must be written whatever its stat says). The record
/// itself, borrowed, when none did.
///
/// A record names only paths of its base, each once: the hub's own syncs make it so, and a
/// helper's record is checked for it on arrival (`checked_record` in [`crate::user`]).
pub fn rebase_onto<'a>(prev: &'a Synced, changed: &[&str]) -> Cow<'a, SyncRecord> {
    if changed.is_empty() {
        return Cow::Borrowed(&prev.record);
    }
    let changed: HashSet<&str> = changed.iter().copied().collect();
    Cow::Owned(SyncRecord {
        stamp_s: prev.record.stamp_s,
        stamp_ns: prev.record.stamp_ns,
        files: prev
            .record
            .files
            .iter()
            .filter(|(p, _)| !changed.contains(p.as_str()))
            .cloned()
            .collect(),
        // The directories' stats do not depend on the base: a changed base `.gitignore` is
        // not in the files above, which makes the next walk a whole one.
        dirs: prev.record.dirs.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{snapshot_sandbox, Hints, DEFAULT_FILE_CAP};
    use crate::store::test_support::{git_in as git_out, set_mtime, tree};
    use std::os::unix::fs::{symlink, PermissionsExt};

    // The slots' owner, for these tests: each slot's last sync, by directory, on the test's
    // own thread (the hub keeps it in the slot's `workspace::Slot`).
    thread_local! {
        static SLOTS: std::cell::RefCell<HashMap<PathBuf, Arc<Synced>>> = Default::default();
    }

    fn recall(dir: &Path) -> Option<Arc<Synced>> {
        SLOTS.with(|s| s.borrow().get(dir).cloned())
    }

    fn remember(dir: &Path, synced: Option<Synced>) {
        SLOTS.with(|s| match synced {
            Some(synced) => s.borrow_mut().insert(dir.to_path_buf(), Arc::new(synced)),
            None => s.borrow_mut().remove(dir),
        });
    }

    /// [`super::sync_slot`] of the slot `dir`, with the last sync its owner here kept.
    fn sync_slot(
        dir: &Path,
        base: &Arc<FlatTree>,
        alternate: Option<&Path>,
        dirty: Option<&Dirty>,
        source: impl FnMut(ObjectId) -> Result<Option<Vec<u8>>, SyncError>,
    ) -> Result<PrepareReply, SyncError> {
        let mut synced = SLOTS.with(|s| s.borrow_mut().remove(dir));
        let reply = super::sync_slot(dir, base, &mut synced, alternate, dirty, source);
        if let Some(synced) = synced {
            SLOTS.with(|s| s.borrow_mut().insert(dir.to_path_buf(), synced));
        }
        reply
    }

    /// The base the helper is sent comes back as it was; a path hunkgate refuses or a blob id
    /// that is not one is refused, naming the path.
    #[test]
    fn a_base_from_the_wire_is_the_base_or_refused() {
        let oid = |n: u8| ObjectId::from_bytes_or_panic(&[n; 20]);
        let base: FlatTree = [
            ("a.txt", Mode::File, 1),
            ("bin/run", Mode::Executable, 2),
            ("dir/link", Mode::Symlink, 3),
            ("dir/ünï cödé", Mode::File, 4),
        ]
        .into_iter()
        .map(|(p, mode, n)| (p.to_string(), Entry { mode, oid: oid(n) }))
        .collect();
        assert_eq!(base_from_wire(base_to_wire(&base)).unwrap(), base);
        for bad in ["../x", ".git/config", "/etc/passwd", "a//b", "dir/./x", ""] {
            let mut wire = base_to_wire(&base);
            wire[1].path = bad.to_string();
            let (path, _) = base_from_wire(wire).unwrap_err();
            assert_eq!(path, bad);
        }
        let mut wire = base_to_wire(&base);
        wire[2].oid = "not hex".into();
        let (path, why) = base_from_wire(wire).unwrap_err();
        assert_eq!(path, "dir/link");
        assert!(why.contains("bad blob id"), "{why}");
    }

    #[test]
    fn a_sync_is_for_its_own_base_by_address_or_equal_content_only() {
        let entry = |b: &[u8]| Entry {
            mode: Mode::File,
            oid: blob_id(b),
        };
        let base = Arc::new(FlatTree::from([("a".to_string(), entry(b"a"))]));
        let synced = Synced {
            base: base.clone(),
            record: SyncRecord::default(),
            tree: None,
        };
        assert!(synced.is_for(&base), "the same tree");
        assert!(synced.is_for(&(*base).clone()), "an equal one");
        let mut other = (*base).clone();
        other.insert("a".to_string(), entry(b"b"));
        assert!(!synced.is_for(&other), "a changed entry");
        assert!(record_for(Some(&synced), &other).is_none());
        assert!(record_for(Some(&synced), &base).is_some());
    }

    /// What `LocalSandbox` does (this layer cannot name it).
    fn prepare(store: &Store, dir: &Path, base: &FlatTree) {
        sync_slot(dir, &Arc::new((*base).clone()), None, None, |oid| {
            Ok(Some(store.read_blob(oid)?))
        })
        .unwrap();
    }

    fn read_back(store: &Store, dir: &Path, base: &FlatTree) -> FlatTree {
        let synced = recall(dir);
        let record = record_for(synced.as_deref(), base);
        snapshot_sandbox(
            dir,
            base,
            store,
            DEFAULT_FILE_CAP,
            Hints {
                record,
                dirty: None,
            },
        )
        .unwrap()
        .tree(base)
    }

    /// A store, and a slot synced to a base of `files` (kept alive by the returned directory).
    fn synced_slot(files: &[(&str, Mode, &str)]) -> (tempfile::TempDir, Store, FlatTree, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base = tree(&store, files);
        let dir = tmp.path().join("sb");
        prepare(&store, &dir, &base);
        (tmp, store, base, dir)
    }

    /// Add a file to `dir/sub` and put the directory's mtime back (`touch -d`): only its ctime
    /// tells.
    fn sneak_in(dir: &Path, sub: &str, name: &str) {
        let sub = dir.join(sub);
        let mtime = std::fs::metadata(&sub).unwrap().modified().unwrap();
        std::fs::write(sub.join(name), "s\n").unwrap();
        std::fs::File::open(&sub)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(std::fs::metadata(&sub).unwrap().modified().unwrap(), mtime);
    }

    /// A blob source from `store` that counts in `asked` how many blobs it was asked for.
    fn counting_source<'a>(
        store: &'a Store,
        asked: &'a std::cell::Cell<usize>,
    ) -> impl Fn(ObjectId) -> Result<Option<Vec<u8>>, SyncError> + Copy + 'a {
        move |oid| {
            asked.set(asked.get() + 1);
            Ok(Some(store.read_blob(oid)?))
        }
    }

    /// Move the remembered sync's stamp `secs` later (what time passing between the sync and
    /// the agent's edits does), so the stat path — not only the content path — is exercised.
    fn shift_stamp(dir: &Path, secs: i64) {
        let mut s = (*recall(dir).unwrap()).clone();
        s.record.stamp_s += secs;
        remember(dir, Some(s));
    }

    /// A read-back after a sync reads only the directories whose stat changed since (git's
    /// untracked cache), yet finds exactly what reading every directory finds — the oracle,
    /// asked after each change: a new file, a new directory, a directory whose mtime was put
    /// back, a renamed directory, a racy directory; and every directory is read again once the
    /// ignore rules may have changed (a new `.gitignore`, a base one edited in place).
    #[test]
    fn a_read_back_reads_only_changed_directories_yet_finds_every_new_file() {
        use crate::snapshot::{sandbox_candidates, sandbox_candidates_since, Candidates};
        let f = Mode::File;
        let (_tmp, _store, base, dir) = synced_slot(&[
            (".gitignore", f, "*.log\n"),
            ("a/1.txt", f, "1\n"),
            ("a/b/2.txt", f, "2\n"),
            ("a/b/c/3.txt", f, "3\n"),
            ("d/4.txt", f, "4\n"),
            ("e/5.txt", f, "5\n"),
            ("f/6.txt", f, "6\n"),
        ]);
        // An ignored file in a directory of its own, recorded as if a sync had left it (a
        // sync removes it: see `crate::foreign`; the read-back reads the record it is given).
        std::fs::create_dir_all(dir.join("f/g")).unwrap();
        std::fs::write(dir.join("f/g/old.log"), "log\n").unwrap();
        let root = Beneath::open(&dir).unwrap();
        let walked = crate::snapshot::walk(&dir, false, None, None).dirs;
        let mut synced = (*recall(&dir).unwrap()).clone();
        synced.record.dirs = dir_record(&dir, &root, &base, walked);
        remember(&dir, Some(synced));
        let recorded = recall(&dir).unwrap().record.dirs.clone();
        let names: Vec<&str> = recorded.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(names, ["", "a", "a/b", "a/b/c", "d", "e", "f", "f/g"]);
        let check = |what: &str, cached: bool| -> Candidates {
            let synced = recall(&dir);
            let record = record_for(synced.as_deref(), &base);
            let got = sandbox_candidates_since(&dir, &root, &base, record, None);
            let (paths, skipped) = sandbox_candidates(&dir, base.keys());
            let mine: Vec<&str> = got.with_base(&base);
            assert_eq!(
                mine,
                paths.iter().map(String::as_str).collect::<Vec<_>>(),
                "{what}"
            );
            assert_eq!(got.skipped.len(), skipped.len(), "{what}");
            assert_eq!(
                got.dirs_read.is_some(),
                cached,
                "{what}: {:?}",
                got.dirs_read
            );
            got
        };

        shift_stamp(&dir, 5);
        // Nothing changed: only the slot itself is read.
        assert_eq!(check("nothing changed", true).dirs_read, Some(1));
        std::fs::write(dir.join("d/new.txt"), "n\n").unwrap();
        let got = check("a new file", true);
        assert_eq!(got.new, ["d/new.txt"]);
        assert_eq!(got.dirs_read, Some(2), "the slot and d");
        std::fs::create_dir_all(dir.join("e/new/deeper")).unwrap();
        std::fs::write(dir.join("e/new/deeper/x.txt"), "x\n").unwrap();
        assert!(check("a new directory", true)
            .new
            .contains(&"e/new/deeper/x.txt".into()));
        // Same mtime as recorded: only the ctime tells.
        sneak_in(&dir, "a/b", "sneaky.txt");
        assert!(check("mtime put back", true)
            .new
            .contains(&"a/b/sneaky.txt".into()));
        std::fs::rename(dir.join("a/b/c"), dir.join("a/b/c2")).unwrap();
        assert!(check("a directory renamed", true)
            .new
            .contains(&"a/b/c2/3.txt".into()));

        // New rules in a changed directory un-ignore a file in one that did not change.
        std::fs::write(dir.join("f/.gitignore"), "!old.log\n").unwrap();
        assert!(check("a new .gitignore", false)
            .new
            .contains(&"f/g/old.log".into()));
        std::fs::remove_file(dir.join("f/.gitignore")).unwrap();
        assert!(!check("the .gitignore gone again", true)
            .new
            .contains(&"f/g/old.log".into()));
        // The base's own rules edited in place: no directory changes, every one is read.
        std::fs::write(dir.join(".gitignore"), "*.tmp\n").unwrap();
        assert!(check("a base .gitignore edited", false)
            .new
            .contains(&"f/g/old.log".into()));
    }

    /// Between runs a slot holds exactly its base (#54.3): whatever the agent planted — ignored
    /// by the base's rules or by its own, unreadable, deeper than `PATH_MAX`, not UTF-8, empty
    /// directories, a `.git` below the slot — is gone after a sync made with the last sync's
    /// record, and after one made by a process that never synced the slot (a restarted hub, a
    /// new helper). Controls: the base's files are all there as the base has them, and what
    /// the agent's symlinks point to outside the slot is untouched.
    #[test]
    fn a_sync_leaves_exactly_the_base_whatever_the_agent_planted() {
        use crate::foreign::test_support::{exactly, listing, plant};
        let f = Mode::File;
        for restart in [false, true] {
            let (tmp, store, base, dir) = synced_slot(&[
                (".gitignore", f, "build/\n*.o\n"),
                ("a.txt", f, "a\n"),
                ("a/b.txt", f, "b\n"),
            ]);
            let outside = tmp.path().join("outside.txt");
            std::fs::write(&outside, "mine\n").unwrap();
            plant(&dir, &outside);
            for planted in [
                "sub/plant.py",
                "plant2.py",
                "locked",
                "deep",
                "empty",
                "a/.git",
            ] {
                assert!(dir.join(planted).symlink_metadata().is_ok(), "{planted}");
            }
            if restart {
                remember(&dir, None);
            }
            prepare(&store, &dir, &base);
            assert_eq!(listing(&dir), exactly(&base), "restart {restart}");
            assert_eq!(read_back(&store, &dir, &base), base, "restart {restart}");
            assert_eq!(
                std::fs::read(dir.join(".gitignore")).unwrap(),
                b"build/\n*.o\n"
            );
            assert_eq!(std::fs::read(&outside).unwrap(), b"mine\n");
        }
    }

    /// A base file under an ignore rule (`t.log` with `*.log`, a `.env`) that leaves the base
    /// (the user untracked it) leaves the slot at the next sync — in this process, and in one
    /// that never synced the slot before (a restarted hub, a new helper), with or without a
    /// watch's word. Control: the base's files stay.
    #[test]
    fn a_file_that_left_the_base_leaves_the_slot_even_when_ignored() {
        let f = Mode::File;
        let with = [
            (".gitignore", f, "*.log\n.env\n"),
            ("a.txt", f, "a\n"),
            ("t.log", f, "tracked log\n"),
            ("sub/.env", f, "SECRET=1\n"),
        ];
        let without = &with[..2];
        for restart in [false, true] {
            for dirty in [false, true] {
                let what = format!("restart {restart}, dirty {dirty}");
                let (_tmp, store, base, dir) = synced_slot(&with);
                std::fs::write(dir.join("build.log"), "the agent's build\n").unwrap();
                assert_eq!(std::fs::read(dir.join("t.log")).unwrap(), b"tracked log\n");
                if restart {
                    remember(&dir, None);
                }
                let next = Arc::new(tree(&store, without));
                let seen = Dirty::default();
                sync_slot(&dir, &next, None, dirty.then_some(&seen), |oid| {
                    Ok(Some(store.read_blob(oid)?))
                })
                .unwrap();
                assert!(!dir.join("t.log").exists(), "{what}");
                assert!(!dir.join("sub/.env").exists(), "{what}");
                assert!(dir.join("a.txt").exists(), "{what}: the control stays");
                assert!(!dir.join("build.log").exists(), "{what}");
                assert_eq!(read_back(&store, &dir, &next), *next, "{what}");
                // Back to the first base: the files come back.
                prepare(&store, &dir, &base);
                assert!(dir.join("t.log").exists(), "{what}");
            }
        }
    }

    /// A sync after a sync looks for leftovers where the directory record says something
    /// changed: every file the agent left is gone again — in the slot itself, in a directory
    /// whose mtime it put back, in a new directory — and the next record still names every
    /// directory there is.
    #[test]
    fn a_sync_finds_every_leftover_through_the_directory_record() {
        let f = Mode::File;
        let (_tmp, store, base, dir) = synced_slot(&[
            ("a/1.txt", f, "1\n"),
            ("a/b/2.txt", f, "2\n"),
            ("d/4.txt", f, "4\n"),
        ]);
        shift_stamp(&dir, 5);
        std::fs::write(dir.join("stray.txt"), "s\n").unwrap();
        sneak_in(&dir, "a/b", "sneaky.txt");
        std::fs::create_dir_all(dir.join("x/y")).unwrap();
        std::fs::write(dir.join("x/y/deep.txt"), "s\n").unwrap();
        std::fs::remove_dir_all(dir.join("d")).unwrap();
        prepare(&store, &dir, &base);
        for gone in ["stray.txt", "a/b/sneaky.txt", "x/y/deep.txt"] {
            assert!(!dir.join(gone).exists(), "{gone} is left");
        }
        assert_eq!(std::fs::read(dir.join("d/4.txt")).unwrap(), b"4\n");
        let synced = recall(&dir).unwrap();
        let names: Vec<&str> = synced.record.dirs.iter().map(|(p, _)| p.as_str()).collect();
        // x and x/y went with the file that was in them (as `git apply` prunes).
        assert!(!dir.join("x").exists());
        assert_eq!(names, ["", "a", "a/b", "d"]);
        assert_eq!(read_back(&store, &dir, &base), base);
    }

    /// A directory whose stat is not strictly older than the sync's stamp may have changed in
    /// the same clock tick without its stat showing it: it is read again.
    #[test]
    fn a_racy_directory_is_read_again() {
        use crate::snapshot::sandbox_candidates_since;
        let (_tmp, _store, base, dir) = synced_slot(&[
            ("a/1.txt", Mode::File, "1\n"),
            ("d/4.txt", Mode::File, "4\n"),
        ]);
        let root = Beneath::open(&dir).unwrap();
        let synced = (*recall(&dir).unwrap()).clone();
        let (_, d) = synced.record.dirs.iter().find(|(p, _)| p == "d").unwrap();
        let read_with_stamp = |stamp: (i64, u32)| {
            let mut record = synced.record.clone();
            (record.stamp_s, record.stamp_ns) = stamp;
            sandbox_candidates_since(&dir, &root, &base, Some(&record), None).dirs_read
        };
        assert_eq!(read_with_stamp((d.ctime_s + 5, 0)), Some(1));
        let racy = read_with_stamp((d.ctime_s, d.ctime_ns)).unwrap();
        assert!(racy >= 2, "the slot and d at least: {racy}");
    }

    /// A directory record vouches for no directory holding a `.gitignore` that is not a base
    /// path (its rules could change unseen): there is none then, and every read-back reads
    /// every directory. A sync leaves no such file (even one the base's rules ignore, even
    /// one that ignores itself), so its record has directories.
    #[test]
    fn a_stray_gitignore_leaves_no_directory_record() {
        let (_tmp, store, base, dir) = synced_slot(&[
            (".gitignore", Mode::File, ".gitignore\n"),
            ("a/1.txt", Mode::File, "1\n"),
        ]);
        assert!(!recall(&dir).unwrap().record.dirs.is_empty());
        std::fs::write(dir.join("a/.gitignore"), "*\n").unwrap();
        let root = Beneath::open(&dir).unwrap();
        let walked = crate::snapshot::walk(&dir, false, None, None).dirs;
        assert!(dir_record(&dir, &root, &base, walked).is_empty());
        prepare(&store, &dir, &base);
        assert!(!dir.join("a/.gitignore").exists());
        assert!(!recall(&dir).unwrap().record.dirs.is_empty());
    }

    #[test]
    fn readback_sees_every_kind_of_agent_change() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let f = Mode::File;
        let base = tree(
            &store,
            &[
                ("grown.txt", f, "0123456789\n"),
                ("backdated.txt", f, "0123456789\n"),
                ("chmod.txt", f, "0123456789\n"),
                ("deleted.txt", f, "0123456789\n"),
                ("to_link.txt", f, "0123456789\n"),
                ("to_dir", f, "0123456789\n"),
                ("untouched.txt", f, "0123456789\n"),
                ("run.sh", Mode::Executable, "#!/bin/sh\n"),
                ("link", Mode::Symlink, "untouched.txt"),
            ],
        );
        let dir = tmp.path().join("sb");
        prepare(&store, &dir, &base);
        shift_stamp(&dir, 5);
        // Nothing changed: everything comes back as the base.
        assert_eq!(read_back(&store, &dir, &base), base);

        let p = |n: &str| dir.join(n);
        let mtime = std::fs::metadata(p("backdated.txt"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(p("grown.txt"), "0123456789 and more\n").unwrap();
        // Same size, mtime put back (touch -d): only ctime tells.
        std::fs::write(p("backdated.txt"), "abcdefghij\n").unwrap();
        set_mtime(&p("backdated.txt"), mtime);
        std::fs::set_permissions(p("chmod.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(p("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::remove_file(p("deleted.txt")).unwrap();
        std::fs::remove_file(p("to_link.txt")).unwrap();
        symlink("untouched.txt", p("to_link.txt")).unwrap();
        std::fs::remove_file(p("to_dir")).unwrap();
        std::fs::create_dir(p("to_dir")).unwrap();
        std::fs::write(p("to_dir/inner.txt"), "inner\n").unwrap();
        std::fs::remove_file(p("link")).unwrap();
        symlink("grown.txt", p("link")).unwrap();
        std::fs::write(p("new.txt"), "new\n").unwrap();

        let got = read_back(&store, &dir, &base);
        // The oracle: a read-back that trusts no stat at all.
        let full = snapshot_sandbox(&dir, &base, &store, DEFAULT_FILE_CAP, Hints::default())
            .unwrap()
            .tree(&base);
        assert_eq!(got, full);
        let blob = |n: &str| store.read_blob(got[n].oid).unwrap();
        assert_eq!(blob("grown.txt"), b"0123456789 and more\n");
        assert_eq!(blob("backdated.txt"), b"abcdefghij\n");
        assert_eq!(got["chmod.txt"].mode, Mode::Executable);
        assert_eq!(got["run.sh"].mode, Mode::File);
        assert!(!got.contains_key("deleted.txt"));
        assert_eq!(got["to_link.txt"].mode, Mode::Symlink);
        assert!(!got.contains_key("to_dir"));
        assert_eq!(blob("to_dir/inner.txt"), b"inner\n");
        assert_eq!(blob("link"), b"grown.txt");
        assert_eq!(blob("new.txt"), b"new\n");
        assert_eq!(got["untouched.txt"], base["untouched.txt"]);

        // The next prepare puts every one of them back, and the read-back agrees.
        prepare(&store, &dir, &base);
        assert_eq!(read_back(&store, &dir, &base), base);
        assert!(!p("new.txt").exists());
    }

    #[test]
    fn an_identical_stat_inside_the_sync_tick_is_compared_by_content() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base = tree(&store, &[("a.txt", Mode::File, "before\n")]);
        let dir = tmp.path().join("sb");
        prepare(&store, &dir, &base);
        // An agent write the stat cannot show (same size, and — forged here, as a write in the
        // sync's own clock tick would leave it — the very stat the sync recorded).
        std::fs::write(dir.join("a.txt"), "after!\n").unwrap();
        let now = crate::statcache::file_stat(&nix::sys::stat::lstat(&dir.join("a.txt")).unwrap());
        let forge = |stamp_s: i64| {
            let mut s = (*recall(&dir).unwrap()).clone();
            s.record.files = vec![("a.txt".into(), now)];
            (s.record.stamp_s, s.record.stamp_ns) = (stamp_s, now.ctime_ns);
            remember(&dir, Some(s));
        };
        forge(now.ctime_s);
        let got = read_back(&store, &dir, &base);
        assert_eq!(store.read_blob(got["a.txt"].oid).unwrap(), b"after!\n");
        // Positive control: the same forged record with a stamp a second later is trusted, and
        // the change is missed — only the racy rule caught it.
        forge(now.ctime_s + 1);
        let got = read_back(&store, &dir, &base);
        assert_eq!(got["a.txt"], base["a.txt"]);
    }

    /// The hub's own sandboxes get a fresh `.git` at once; the old one (and `.jj`, and what a
    /// killed hub left moved aside) is deleted beside the sandbox on a thread.
    #[test]
    fn an_old_git_discarded_in_the_background_is_gone_from_the_sandbox_at_once_and_then_entirely() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let dir = tmp.path().join("sandboxes").join("0");
        std::fs::create_dir_all(dir.join(".git/objects/ab")).unwrap();
        std::fs::write(dir.join(".git/objects/ab/cdef"), "old").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::create_dir_all(dir.join(".jj/repo")).unwrap();
        let left = tmp.path().join("sandboxes/.0.discard-7-0");
        std::fs::create_dir_all(left.join("objects")).unwrap();
        let other_slot = tmp.path().join("sandboxes/.10.discard-1-0");
        std::fs::create_dir_all(&other_slot).unwrap();
        let objects = store.path().join("objects");
        let (repo, kept) = fresh_git(&dir, Some(&objects), false, Discard::InBackground).unwrap();
        assert!(kept.is_empty());
        assert!(
            !dir.join(".git/objects/ab/cdef").exists(),
            "the old objects are out"
        );
        assert!(!dir.join(".jj").exists());
        let config = std::fs::read_to_string(dir.join(".git/config")).unwrap();
        assert!(!config.contains("evil"), "a fresh config: {config}");
        assert!(repo.write_blob(b"x\n").is_ok(), "the new repository works");
        let discarded = || {
            std::fs::read_dir(tmp.path().join("sandboxes"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".0.discard-"))
                .collect::<Vec<_>>()
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !discarded().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(discarded(), Vec::<String>::new());
        assert!(other_slot.exists(), "another slot's are its own business");
    }

    #[test]
    fn prepare_writes_only_what_differs_and_keeps_only_plain_objects() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let f = Mode::File;
        let base1 = tree(
            &store,
            &[
                ("a.txt", f, "a\n"),
                ("b.txt", f, "b\n"),
                ("c.txt", f, "c\n"),
            ],
        );
        let base2 = tree(
            &store,
            &[
                ("a.txt", f, "a\n"),
                ("b.txt", f, "b2\n"),
                ("c.txt", f, "c\n"),
            ],
        );
        let dir = tmp.path().join("sb");
        let asked = std::cell::Cell::new(0);
        let source = counting_source(&store, &asked);
        assert_eq!(
            sync_slot(&dir, &Arc::new(base1.clone()), None, None, source)
                .unwrap()
                .written,
            3
        );
        assert_eq!(asked.replace(0), 3);
        shift_stamp(&dir, 5);
        assert_eq!(
            sync_slot(&dir, &Arc::new(base1.clone()), None, None, source)
                .unwrap()
                .written,
            0
        );
        assert_eq!(asked.replace(0), 0, "the sandbox's objects were kept");

        // The agent edits a file (touch -d) and plants things in .git.
        let mtime = std::fs::metadata(dir.join("a.txt"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(dir.join("a.txt"), "A\n").unwrap();
        set_mtime(&dir.join("a.txt"), mtime);
        let git = dir.join(".git");
        std::fs::write(git.join("hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        std::fs::create_dir_all(git.join("objects/info")).unwrap();
        std::fs::write(git.join("objects/info/alternates"), "/etc\n").unwrap();
        symlink("/etc", git.join("objects/zz")).unwrap();
        let reply = sync_slot(&dir, &Arc::new(base2.clone()), None, None, source).unwrap();
        assert_eq!(
            reply.written, 2,
            "a.txt restored, b.txt changed, c.txt left alone"
        );
        assert_eq!(asked.get(), 1, "only the new blob was asked for");
        assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"a\n");
        assert_eq!(std::fs::read(dir.join("b.txt")).unwrap(), b"b2\n");
        assert!(!git.join("hooks/post-checkout").exists());
        assert!(!git.join("objects/info/alternates").exists());
        assert!(std::fs::symlink_metadata(git.join("objects/zz")).is_err());
        // The objects kept are named as they are found: every blob of the base, and not one
        // the agent deleted (positive control: it was there before).
        let (_, kept) = fresh_git(&dir, None, true, Discard::Now).unwrap();
        for e in base2.values() {
            assert!(kept.contains(&e.oid), "{}", e.oid);
        }
        let victim = base2["b.txt"].oid.to_hex().to_string();
        std::fs::remove_file(git.join("objects").join(&victim[..2]).join(&victim[2..])).unwrap();
        let (_, kept) = fresh_git(&dir, None, true, Discard::Now).unwrap();
        assert!(!kept.contains(&base2["b.txt"].oid) && kept.contains(&base2["a.txt"].oid));
        sync_slot(&dir, &Arc::new(base2.clone()), None, None, source).unwrap();
        // The fresh .git has the new base checked in, with a clean status.
        let out = std::process::Command::new("git")
            .current_dir(&dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["status", "--porcelain"])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    }

    #[test]
    fn a_damaged_object_in_the_kept_objects_does_not_wedge_the_slot() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base = tree(&store, &[("a.txt", Mode::File, "a\n")]);
        let dir = tmp.path().join("sb");
        prepare(&store, &dir, &base);
        // The agent damages the blob's loose object and changes the file, so the next sync
        // must rewrite it from that object.
        let hex = base["a.txt"].oid.to_string();
        let obj = dir.join(".git/objects").join(&hex[..2]).join(&hex[2..]);
        std::fs::set_permissions(&obj, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&obj, b"garbage").unwrap();
        std::fs::write(dir.join("a.txt"), "changed\n").unwrap();
        prepare(&store, &dir, &base);
        assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"a\n");
        assert_eq!(read_back(&store, &dir, &base), base);
    }

    /// A loose object file holding the blob `content`, zlib-compressed as git writes it.
    fn loose_object(content: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(format!("blob {}\0", content.len()).as_bytes())
            .unwrap();
        z.write_all(content).unwrap();
        z.finish().unwrap()
    }

    #[test]
    fn a_rewritten_kept_object_is_never_written_into_the_sandbox() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base = tree(&store, &[("a.txt", Mode::File, "a\n")]);
        let dir = tmp.path().join("sb");
        prepare(&store, &dir, &base);
        // The agent rewrites the blob's loose object into a well-formed object of other
        // content, and changes the file, so the next sync must write it from that object.
        let oid = base["a.txt"].oid;
        let hex = oid.to_string();
        let obj = dir.join(".git/objects").join(&hex[..2]).join(&hex[2..]);
        std::fs::set_permissions(&obj, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&obj, loose_object(b"evil\n")).unwrap();
        std::fs::write(dir.join("a.txt"), "changed\n").unwrap();
        // Control: read by its id, the object now gives the agent's content.
        let planted = Store::open_existing(&dir).unwrap().read_blob(oid).unwrap();
        assert_eq!(planted, b"evil\n");
        prepare(&store, &dir, &base);
        assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"a\n");
        assert_eq!(read_back(&store, &dir, &base), base);
    }

    /// A base of more blobs than a batch keeps loose: the first sync writes them as a pack and
    /// writes every file from it; the next one keeps the pack and asks for no blob.
    #[test]
    fn a_large_base_goes_into_one_pack_that_later_syncs_keep() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let n = ObjectBatch::PACK_AT + 36;
        let files: Vec<(String, String)> = (0..n)
            .map(|i| (format!("d{}/f{i}.txt", i % 7), format!("file {i}\n")))
            .collect();
        let spec: Vec<(&str, Mode, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), Mode::File, c.as_str()))
            .collect();
        let base = tree(&store, &spec);
        let dir = tmp.path().join("sb");
        let asked = std::cell::Cell::new(0);
        let source = counting_source(&store, &asked);
        assert_eq!(
            sync_slot(&dir, &Arc::new(base.clone()), None, None, source)
                .unwrap()
                .written,
            n as u64
        );
        assert_eq!(asked.replace(0), n);
        let packs = || {
            std::fs::read_dir(dir.join(".git/objects/pack"))
                .map(|d| d.flatten().count())
                .unwrap_or(0)
        };
        assert_eq!(packs(), 2, "one pack and its index");
        for (p, c) in &files {
            assert_eq!(std::fs::read_to_string(dir.join(p)).unwrap(), *c);
        }
        // The agent deletes a file: the next sync writes it back from the kept pack.
        std::fs::remove_file(dir.join(&files[5].0)).unwrap();
        assert_eq!(
            sync_slot(&dir, &Arc::new(base.clone()), None, None, source)
                .unwrap()
                .written,
            1
        );
        assert_eq!(asked.get(), 0, "every blob came from the kept pack");
        assert_eq!(
            std::fs::read_to_string(dir.join(&files[5].0)).unwrap(),
            files[5].1
        );
        assert_eq!(packs(), 2);
        assert_eq!(read_back(&store, &dir, &base), base);
    }

    #[test]
    fn a_whole_sandbox_written_on_threads_is_the_base_with_every_stat_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        // Enough to be written on threads, in few directories, so that runs of one directory
        // are split between threads and both make its directories.
        let n = WRITE_PARALLEL_FROM * 3;
        let files: Vec<(String, Mode, String)> = (0..n)
            .map(|i| {
                let mode = match i % 50 {
                    7 => Mode::Executable,
                    13 => Mode::Symlink,
                    _ => Mode::File,
                };
                let text = match mode {
                    Mode::Symlink => format!("../t{i}"),
                    _ => format!("file {i}\n"),
                };
                (format!("a{}/b{}/f{i:04}", i * 3 / n, i % 2), mode, text)
            })
            .collect();
        let spec: Vec<(&str, Mode, &str)> = files
            .iter()
            .map(|(p, m, c)| (p.as_str(), *m, c.as_str()))
            .collect();
        let base = tree(&store, &spec);
        let dir = tmp.path().join("sb");
        // Something of the agent's in the way of one file: a symlink where the base has it,
        // to a file outside the sandbox, which must not be written through.
        let outside = tmp.path().join("outside.txt");
        std::fs::write(&outside, "outside\n").unwrap();
        std::fs::create_dir_all(dir.join("a0/b0")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("a0/b0/f0000")).unwrap();
        let source = |oid| Ok(Some(store.read_blob(oid)?));
        let reply = sync_slot(&dir, &Arc::new(base.clone()), None, None, source).unwrap();
        assert_eq!(reply.written, n as u64);
        for (path, mode, text) in &files {
            let at = dir.join(path);
            let meta = std::fs::symlink_metadata(&at).unwrap();
            match mode {
                Mode::Symlink => {
                    assert!(meta.file_type().is_symlink(), "{path}");
                    assert_eq!(
                        std::fs::read_link(&at).unwrap().to_str(),
                        Some(text.as_str())
                    );
                }
                _ => {
                    assert!(meta.file_type().is_file(), "{path}");
                    assert_eq!(std::fs::read_to_string(&at).unwrap(), *text);
                    let exec = meta.permissions().mode() & 0o111 != 0;
                    assert_eq!(exec, *mode == Mode::Executable, "{path}");
                }
            }
        }
        // The record names every path once, in order, with the stat it has now.
        let record = &reply.record.files;
        assert_eq!(record.len(), n);
        assert!(record.windows(2).all(|w| w[0].0 < w[1].0));
        let root = Beneath::open(&dir).unwrap();
        for (path, stat) in record {
            let now = root.lstat(path).unwrap().unwrap();
            assert_eq!(*stat, file_stat(&now), "{path}");
        }
        assert_eq!(read_back(&store, &dir, &base), base);
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    }

    #[test]
    fn packs_are_kept_when_their_index_reads_and_nothing_else_in_pack_is() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb");
        std::fs::create_dir_all(&dir).unwrap();
        let (repo, _) = fresh_git(&dir, None, false, Discard::Now).unwrap();
        let mut batch = repo.batch();
        let packed: Vec<ObjectId> = (0..=ObjectBatch::PACK_AT)
            .map(|i| batch.write_blob(format!("blob {i}\n").as_bytes()).unwrap())
            .collect();
        batch.finish().unwrap();
        let loose = repo.write_blob(b"loose\n").unwrap();
        let pack_dir = dir.join(".git/objects/pack");
        let real: Vec<String> = std::fs::read_dir(&pack_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(real.len(), 2, "one pack and its index: {real:?}");
        // What the agent adds: junk, a pack without its index, a pair whose index is
        // garbage, and a symlink named like an index.
        let name = |c: char| format!("pack-{}", c.to_string().repeat(40));
        std::fs::write(pack_dir.join("junk.txt"), "x").unwrap();
        std::fs::write(pack_dir.join(format!("{}.pack", name('a'))), "x").unwrap();
        std::fs::write(pack_dir.join(format!("{}.pack", name('b'))), "x").unwrap();
        std::fs::write(pack_dir.join(format!("{}.idx", name('b'))), "garbage").unwrap();
        symlink("/etc/passwd", pack_dir.join(format!("{}.idx", name('c')))).unwrap();
        std::fs::write(pack_dir.join(format!("{}.pack", name('c'))), "x").unwrap();

        let (repo, kept) = fresh_git(&dir, None, true, Discard::Now).unwrap();
        for id in packed.iter().chain([&loose]) {
            assert!(kept.contains(id), "{id} kept");
        }
        assert_eq!(kept.len(), packed.len() + 1);
        let mut left: Vec<String> = std::fs::read_dir(&pack_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = real.clone();
        want.sort();
        assert_eq!(left, want, "only the real pair is left");
        // The kept pack is read by the new repository.
        assert_eq!(repo.read_blob(packed[3]).unwrap(), b"blob 3\n");
        // Not keeping objects (the fallback) drops the pack too.
        let (_, kept) = fresh_git(&dir, None, false, Discard::Now).unwrap();
        assert!(kept.is_empty());
        assert!(!pack_dir.exists() || std::fs::read_dir(&pack_dir).unwrap().next().is_none());
    }

    #[test]
    fn the_sandbox_index_is_the_base_with_stat_data_git_trusts() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let f = Mode::File;
        // Orderings git is particular about, an executable, a symlink, a long name.
        let long = format!("deep/{}/{}.txt", "n".repeat(200), "m".repeat(200));
        let base = tree(
            &store,
            &[
                ("a-b", f, "1\n"),
                ("a/b", f, "2\n"),
                ("a.c", f, "3\n"),
                ("a0", f, "4\n"),
                ("run.sh", Mode::Executable, "#!/bin/sh\n"),
                ("link", Mode::Symlink, "a0"),
                (long.as_str(), f, "5\n"),
            ],
        );
        let dir = tmp.path().join("sb");
        prepare(&store, &dir, &base);
        // git reads our index as exactly the base...
        // In the index's order, the paths' byte order, which is the base's.
        let want: Vec<String> = base
            .iter()
            .map(|(p, e)| {
                let mode = match e.mode {
                    Mode::File => "100644",
                    Mode::Executable => "100755",
                    Mode::Symlink => "120000",
                };
                format!("{mode} {} 0\t{p}", e.oid)
            })
            .collect();
        let listed: Vec<String> = git_out(&dir, &["ls-files", "-s"])
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(listed, want);
        // ...and trusts its stat data: diff-files, which compares stat data without hashing,
        // sees nothing to look at.
        assert_eq!(git_out(&dir, &["diff-files", "--name-only"]), "");
        assert_eq!(git_out(&dir, &["status", "--porcelain"]), "");
        // Positive control: the same index without stat data is all stat-dirty to git.
        let repo = Store::open_existing(&dir).unwrap();
        repo.write_index_of(&base, |_| None).unwrap();
        assert_eq!(
            git_out(&dir, &["diff-files", "--name-only"])
                .lines()
                .count(),
            base.len()
        );
        // An edit after the sync is seen, by stat.
        std::fs::write(dir.join("a0"), "changed\n").unwrap();
        prepare(&store, &dir, &base);
        std::fs::write(dir.join("a-b"), "changed too\n").unwrap();
        assert_eq!(git_out(&dir, &["diff-files", "--name-only"]), "a-b\n");
    }

    proptest::proptest! {
        /// The one-pass delta of two sorted trees is what comparing them path by path gives.
        #[test]
        fn changed_paths_is_the_naive_comparison(
            a in proptest::collection::btree_map("[ab]{1,2}(/[ab]{1,2})?", 0u8..3, 0..12),
            b in proptest::collection::btree_map("[ab]{1,2}(/[ab]{1,2})?", 0u8..3, 0..12),
        ) {
            let tree = |m: &std::collections::BTreeMap<String, u8>| -> FlatTree {
                m.iter()
                    .map(|(p, v)| {
                        let oid = ObjectId::from_bytes_or_panic(&[*v; 20]);
                        (p.clone(), Entry { mode: Mode::File, oid })
                    })
                    .collect()
            };
            let (ta, tb) = (tree(&a), tree(&b));
            let mut naive: Vec<&str> = ta
                .keys()
                .chain(tb.keys())
                .filter(|p| ta.get(*p) != tb.get(*p))
                .map(String::as_str)
                .collect();
            naive.sort();
            naive.dedup();
            proptest::prop_assert_eq!(changed_paths(&ta, &tb), naive);
        }
    }
}

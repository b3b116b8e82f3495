//! The checkpoint store: a bare git repository in the hub's state directory, written only by the
//! hub, in-process with gix (no git process, so nothing a repository configured can run).
//!
//! Trees are handled as flat maps `path -> Entry` because every consumer (snapshot, diff,
//! materialize) thinks in paths; the nesting into git trees happens only at the store boundary.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gix::hash::ObjectId;
use gix::objs::tree::EntryKind;

mod batch;
mod trees;
pub use batch::*;

/// How a path is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    File,
    Executable,
    Symlink,
}

impl Mode {
    fn kind(self) -> EntryKind {
        match self {
            Mode::File => EntryKind::Blob,
            Mode::Executable => EntryKind::BlobExecutable,
            Mode::Symlink => EntryKind::Link,
        }
    }

    /// Git's octal notation, for diff headers ("100644").
    pub fn octal(self) -> &'static str {
        match self {
            Mode::File => "100644",
            Mode::Executable => "100755",
            Mode::Symlink => "120000",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    pub mode: Mode,
    pub oid: ObjectId,
}

/// A whole tree as `repository-relative path -> entry`, sorted by path.
pub type FlatTree = BTreeMap<String, Entry>;

/// How a tree differs from a base: each path whose entry differs, with its new entry, or None
/// where the path is gone.
pub type Changes = BTreeMap<String, Option<Entry>>;

/// What differs between `base` and `tree`, in one merged pass over the two sorted maps.
pub fn changes_between(base: &FlatTree, tree: &FlatTree) -> Changes {
    let mut out = Changes::new();
    let (mut b, mut t) = (base.iter().peekable(), tree.iter().peekable());
    loop {
        match (b.peek(), t.peek()) {
            (None, None) => return out,
            (Some((bp, _)), Some((tp, _))) if bp < tp => {
                out.insert((*bp).clone(), None);
                b.next();
            }
            (Some((bp, be)), Some((tp, te))) if bp == tp => {
                if be != te {
                    out.insert((*tp).clone(), Some(**te));
                }
                b.next();
                t.next();
            }
            (_, Some((tp, te))) => {
                out.insert((*tp).clone(), Some(**te));
                t.next();
            }
            (Some((bp, _)), None) => {
                out.insert((*bp).clone(), None);
                b.next();
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("checkpoint store at {path}: {message}")]
    Git { path: PathBuf, message: String },
    #[error("checkpoint store at {path}: object {oid} is not a {expected}")]
    WrongKind {
        path: PathBuf,
        oid: ObjectId,
        expected: &'static str,
    },
    /// A batch was given more new blob content than it was limited to
    /// ([`ObjectBatch::limit_new_blob_bytes`]).
    #[error(transparent)]
    OverLimit(#[from] crate::supervise::limits::OverLimit),
}

/// The hub's private object store.
pub struct Store {
    /// Replaced by a handle opened anew in [`Store::release_maps`]; a thread-local handle
    /// taken before keeps the old one's object database until it is dropped.
    repo: std::sync::RwLock<gix::ThreadSafeRepository>,
    /// What the repository was opened from, to open it again.
    opened: PathBuf,
    path: PathBuf,
    /// Objects this handle wrote or found, so that asking again costs no `stat` of a loose
    /// object. Only the hub's garbage collection deletes objects from a store while it is
    /// open, and it forgets them all afterwards ([`Store::forget_known_objects`]): otherwise an
    /// id once present stays present.
    present: std::sync::Mutex<std::collections::HashSet<ObjectId>>,
    /// Whether a pack this store writes is fsynced: not for a sandbox's own `.git`
    /// ([`Store::init_worktree`]), a scratch repository a crash may lose.
    durable: bool,
    /// Compressors kept once made: a new one costs more than compressing a tree (its tables
    /// allocated and cleared). One is taken for a whole stream and put back only after it, so
    /// a failure never leaves half of one for the next.
    deflate: std::sync::Mutex<Vec<flate2::write::ZlibEncoder<Vec<u8>>>>,
    /// Whether a batch of many objects is written as one pack (`[accel] pack`, see
    /// [`Store::use_packs`]).
    packs: bool,
    /// Bytes of blobs read since the maps were last released ([`Store::release_maps_after`]).
    read_bytes: std::sync::atomic::AtomicU64,
    /// The last blobs [`Store::write_blob`] wrote, for [`Store::read_blob`] to answer from
    /// memory: a decision stores the new content of a file while it is planned and reads it
    /// back to write it to the checkout.
    recent: std::sync::Mutex<RecentBlobs>,
}

/// The last few blobs written one at a time, by id, within [`RecentBlobs::MAX`] blobs and
/// [`RecentBlobs::MAX_BYTES`] bytes; the oldest go first. An id names one content, so what is
/// kept is exactly what the store holds under it.
#[derive(Default)]
struct RecentBlobs {
    blobs: std::collections::VecDeque<(ObjectId, std::sync::Arc<[u8]>)>,
    bytes: usize,
}

impl RecentBlobs {
    const MAX: usize = 16;
    const MAX_BYTES: usize = 1 << 20;

    fn keep(&mut self, oid: ObjectId, bytes: &[u8]) {
        if bytes.len() > Self::MAX_BYTES || self.get(oid).is_some() {
            return;
        }
        self.blobs.push_back((oid, bytes.into()));
        self.bytes += bytes.len();
        while self.blobs.len() > Self::MAX || self.bytes > Self::MAX_BYTES {
            let Some((_, old)) = self.blobs.pop_front() else {
                break;
            };
            self.bytes -= old.len();
        }
    }

    fn get(&self, oid: ObjectId) -> Option<std::sync::Arc<[u8]>> {
        let found = self.blobs.iter().rev().find(|(id, _)| *id == oid);
        found.map(|(_, bytes)| bytes.clone())
    }
}

const IDENTITY_NAME: &str = "hunkgate";

/// Make the 256 directories loose objects go into (`objects/00` … `objects/ff`) where they
/// are missing. Git makes each when its first object comes; a hub's store gets a few new
/// loose objects per publish and decision, and a new directory made on that path costs more
/// than the object itself (an inode and a directory block, journaled).
fn make_fanout_dirs(objects: &Path) -> std::io::Result<()> {
    for i in 0..=255u8 {
        match std::fs::create_dir(objects.join(format!("{i:02x}"))) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    Ok(())
}
const IDENTITY_EMAIL: &str = "hunkgate@localhost";

impl Store {
    /// Open the store at `path`, creating a bare repository there on first use.
    pub fn open_or_init(path: &Path) -> Result<Self, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError::Git {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let repo = if path.join("HEAD").exists() {
            gix::open_opts(path, isolated_open_options()).map_err(|e| err(&e))?
        } else {
            std::fs::create_dir_all(path).map_err(|e| err(&e))?;
            gix::init_bare(path).map_err(|e| err(&e))?;
            gix::open_opts(path, isolated_open_options()).map_err(|e| err(&e))?
        };
        make_fanout_dirs(&path.join("objects")).map_err(|e| err(&e))?;
        Ok(Self::over(repo, path))
    }

    /// The store over the opened repository at `path`, with nothing read or written yet.
    fn over(repo: gix::Repository, path: &Path) -> Self {
        Self {
            repo: std::sync::RwLock::new(repo.into_sync()),
            opened: path.to_path_buf(),
            path: path.to_path_buf(),
            present: Default::default(),
            durable: true,
            deflate: Default::default(),
            packs: true,
            read_bytes: Default::default(),
            recent: Default::default(),
        }
    }

    /// A fresh non-bare repository whose work tree is `dir` (a sandbox's own `.git`).
    pub fn init_worktree(dir: &Path) -> Result<Self, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError::Git {
            path: dir.to_path_buf(),
            message: e.to_string(),
        };
        gix::init(dir).map_err(|e| err(&e))?;
        let repo = gix::open_opts(dir, isolated_open_options()).map_err(|e| err(&e))?;
        Ok(Self {
            repo: std::sync::RwLock::new(repo.into_sync()),
            opened: dir.to_path_buf(),
            path: dir.join(".git"),
            present: Default::default(),
            durable: false,
            deflate: Default::default(),
            packs: true,
            read_bytes: Default::default(),
            recent: Default::default(),
        })
    }

    /// Write the index of a non-bare repository so that it holds exactly `tree` — the flat
    /// form of the tree just committed, so no object is read back — with the stat data `stat`
    /// gives for each path (owned by this process's user and group), so that `git status`
    /// there is clean without hashing every file again. A path without stat data gets none,
    /// and git looks at it on the next `git status`; a wrong stat only makes git look too.
    /// Git's index version 2, no extensions, written to `index.lock` and renamed into place.
    pub fn write_index_of(
        &self,
        tree: &FlatTree,
        stat: impl Fn(&str) -> Option<crate::wire::FileStat>,
    ) -> Result<(), StoreError> {
        let index = self.local().index_path();
        let io = |e: std::io::Error| self.err(format!("writing {}: {e}", index.display()));
        let bytes = index_v2(tree, stat).map_err(io)?;
        let lock = index.with_extension("lock");
        std::fs::write(&lock, &bytes).map_err(io)?;
        std::fs::rename(&lock, &index).map_err(io)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Git {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    fn local(&self) -> gix::Repository {
        self.repo
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .to_thread_local()
    }

    /// [`Store::release_maps`] if at least `bytes` of blobs were read since the last release;
    /// whether it did. A store nothing was read from keeps the maps it has (the hub's, idle
    /// since the last release: none). Either way the blobs kept from the last writes go.
    pub fn release_maps_after(&self, bytes: u64) -> Result<bool, StoreError> {
        if let Ok(mut recent) = self.recent.lock() {
            *recent = RecentBlobs::default();
        }
        if self.read_bytes.load(std::sync::atomic::Ordering::Relaxed) < bytes {
            return Ok(false);
        }
        self.release_maps().map(|()| true)
    }

    /// Give back the memory that reading objects took: gix maps each pack and pack index it
    /// reads from, and keeps them mapped for the handle's life — after a run's first sync of
    /// a 10,000-file repository, some 8 MiB of resident pages of a process that then idles
    /// for hours. The repository is opened anew (a millisecond), so the old handle's maps go
    /// once the last thread-local handle taken from it is dropped; what is read next maps
    /// again. Objects are never touched. The blobs kept from the last writes go too.
    pub fn release_maps(&self) -> Result<(), StoreError> {
        self.read_bytes
            .store(0, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut recent) = self.recent.lock() {
            *recent = RecentBlobs::default();
        }
        let fresh =
            gix::open_opts(&self.opened, isolated_open_options()).map_err(|e| self.err(e))?;
        let old = std::mem::replace(
            &mut *self
                .repo
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            fresh.into_sync(),
        );
        // Unmapped here, outside the lock, unless a handle taken from it is still in use.
        drop(old);
        Ok(())
    }

    /// Forget every object this handle knew the store to have, make the loose objects'
    /// directories again (`git prune` removes the empty ones, and writes expect them), and
    /// open the repository anew ([`Store::release_maps`]): for after something outside this
    /// handle removed objects (the hub's garbage collection repacking and pruning the store),
    /// so that a blob written again is written, not taken for present, and no old pack's map
    /// answers for it.
    pub fn forget_known_objects(&self) -> Result<(), StoreError> {
        if let Ok(mut present) = self.present.lock() {
            present.clear();
        }
        make_fanout_dirs(&self.path.join("objects")).map_err(|e| self.err(e))?;
        self.release_maps()
    }

    pub fn write_blob(&self, bytes: &[u8]) -> Result<ObjectId, StoreError> {
        let repo = self.local();
        let id = self.write_loose(&repo, gix::objs::Kind::Blob, bytes)?;
        self.remember(id);
        if let Ok(mut recent) = self.recent.lock() {
            recent.keep(id, bytes);
        }
        Ok(id)
    }

    /// Whether a batch of more than [`ObjectBatch::PACK_AT`] new objects is written as one pack
    /// (the default), or every object loose, as `git add` writes them (`[accel] pack =
    /// false`, see [`crate::accel::Accel::pack`]).
    pub fn use_packs(&mut self, on: bool) {
        self.packs = on;
    }

    /// Make the loose objects among `ids` durable: each file fsynced, then the directories
    /// that name them (`objects/xx/`, and `objects/` for a fan-out directory made lately).
    ///
    /// Loose objects are written without an fsync ([`Store::write_loose`]), as git writes
    /// them, and a power loss can leave one empty. That is harmless for most of them, but not
    /// for the contents a decision of several file operations writes: a crash between two of
    /// its operations leaves crash recovery to finish the rest from those objects. Such a
    /// decision makes them durable before it is journaled. Objects in a pack (fsynced when it
    /// was written) are skipped. Returns how many loose objects were fsynced.
    pub fn sync_loose(&self, ids: impl IntoIterator<Item = ObjectId>) -> Result<usize, StoreError> {
        let repo = self.local();
        let objects = repo.objects.store_ref().path().to_path_buf();
        let mut files = Vec::new();
        let mut dirs = std::collections::BTreeSet::new();
        for id in ids {
            let path = loose_object_path(&objects, id);
            if path.is_file() {
                if let Some(dir) = path.parent() {
                    dirs.insert(dir.to_path_buf());
                }
                files.push(path);
            } else if !repo.has_object(id) {
                return Err(self.err(format!(
                    "object {id} is not in the store (looked for {})",
                    path.display()
                )));
            }
        }
        if !dirs.is_empty() {
            dirs.insert(objects);
        }
        let fsync = |path: &PathBuf| {
            std::fs::File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(|e| self.err(format!("fsyncing {}: {e}", path.display())))
        };
        // Files first, then the directories naming them: each on several threads, as the
        // disk takes flushes that come together at once.
        crate::threads::try_on_threads(&files, crate::threads::SYNC_THREADS, fsync)?;
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        crate::threads::try_on_threads(&dirs, crate::threads::SYNC_THREADS, fsync)?;
        Ok(files.len())
    }

    /// Remove every empty loose object file (`objects/xx/…`); returns how many there were.
    ///
    /// What a power loss or a crash of the machine can leave of loose objects written without
    /// an fsync in the seconds before it: their names, and no content. Git then fails on each
    /// ("object file … is empty") until someone removes them; so would every run, whose
    /// snapshot takes unchanged files' blobs from the stat cache. Removed, an object is
    /// missing instead: the stat cache looks it up ([`crate::status::statcache::StatCache::lookup`])
    /// and the next snapshot writes it again from the checkout.
    pub fn drop_empty_loose_objects(&self) -> Result<usize, StoreError> {
        let objects = self.path.join("objects");
        let io = |p: &Path, e: std::io::Error| self.err(format!("{}: {e}", p.display()));
        let mut dropped = 0;
        for fan in std::fs::read_dir(&objects).map_err(|e| io(&objects, e))? {
            let fan = fan.map_err(|e| io(&objects, e))?;
            let name = fan.file_name();
            let is_fan = name.len() == 2
                && name
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_hexdigit()));
            if !is_fan || !fan.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let dir = fan.path();
            for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
                let path = entry.map_err(|e| io(&dir, e))?.path();
                if remove_if_empty(&path).map_err(|e| io(&path, e))? {
                    dropped += 1;
                }
            }
        }
        if let Ok(mut present) = self.present.lock() {
            present.clear();
        }
        Ok(dropped)
    }

    /// Remove the loose object `id` if its file is empty, and say whether it was. A zlib stream
    /// is never empty: an empty file is what a power loss can leave of a loose object written
    /// without an fsync, and the object is written anew rather than taken as present.
    fn drop_empty_loose(&self, repo: &gix::Repository, id: ObjectId) -> Result<bool, StoreError> {
        let path = loose_object_path(repo.objects.store_ref().path(), id);
        let dropped = remove_if_empty(&path)
            .map_err(|e| self.err(format!("removing {}: {e}", path.display())))?;
        if dropped {
            tracing::warn!(path = %path.display(), "an empty loose object (left by a power loss) is written again");
        }
        Ok(dropped)
    }

    /// Write one loose object through gix: a zlib stream of git's header and the content in a
    /// new temporary file, renamed to `objects/xx/…`, and not fsynced, as git writes loose
    /// objects.
    fn write_loose(
        &self,
        repo: &gix::Repository,
        kind: gix::objs::Kind,
        data: &[u8],
    ) -> Result<ObjectId, StoreError> {
        // An object the store has is not written again (as gix's own writes of blobs and
        // commits do not): a decision stores the file it replaces, mostly a blob already there.
        let id =
            gix::objs::compute_hash(repo.object_hash(), kind, data).map_err(|e| self.err(e))?;
        if self.known(id) {
            return Ok(id);
        }
        // Without the pack directory's refresh that a miss costs otherwise (the usual answer
        // here is a miss: a new object), as gix's own blob write asks.
        if repo.objects.exists_without_refresh(&id) && !self.drop_empty_loose(repo, id)? {
            self.remember(id);
            return Ok(id);
        }
        // The id is known already: gix need not hash the object a second time.
        use gix::objs::Write;
        repo.objects
            .write_buf_with_known_id(kind, data, id)
            .map_err(|e| self.err(e))
    }

    /// A blob's content: from memory when [`Store::write_blob`] wrote it lately, else read
    /// from the repository.
    pub fn read_blob(&self, oid: ObjectId) -> Result<Vec<u8>, StoreError> {
        let recent = self.recent.lock().ok().and_then(|r| r.get(oid));
        match recent {
            Some(bytes) => Ok(bytes.to_vec()),
            None => self.reader().read_blob(oid),
        }
    }

    /// A reader for many blobs on one thread: [`Store::read_blob`] makes a repository handle
    /// (its object cache, its decompressor) for each read; a reader makes one.
    pub fn reader(&self) -> BlobReader<'_> {
        BlobReader {
            store: self,
            repo: self.local(),
        }
    }

    /// Record a commit. Author and committer are hunkgate itself at the current time.
    pub fn commit(
        &self,
        tree: ObjectId,
        parents: &[ObjectId],
        message: &str,
    ) -> Result<ObjectId, StoreError> {
        let mut batch = self.batch();
        let commit = self.commit_in(&mut batch, tree, parents, message)?;
        batch.finish()?;
        Ok(commit)
    }

    /// [`Store::commit`], the commit added to `batch` (written when it is finished).
    pub fn commit_in(
        &self,
        batch: &mut ObjectBatch<'_>,
        tree: ObjectId,
        parents: &[ObjectId],
        message: &str,
    ) -> Result<ObjectId, StoreError> {
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let sig = gix::actor::Signature {
            name: IDENTITY_NAME.into(),
            email: IDENTITY_EMAIL.into(),
            time: gix::date::Time::new(seconds, 0),
        };
        let commit = gix::objs::Commit {
            tree,
            parents: parents.iter().copied().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        let mut bytes = Vec::with_capacity(256 + message.len());
        gix::objs::WriteTo::write_to(&commit, &mut bytes).map_err(|e| self.err(e))?;
        batch.add(gix::objs::Kind::Commit, &bytes)
    }

    /// The tree of a commit.
    pub fn commit_tree(&self, commit: ObjectId) -> Result<ObjectId, StoreError> {
        let repo = self.local();
        self.tree_of(&repo, commit)
    }

    /// Point `name` (a full ref name such as `refs/hunkgate/runs/<id>/base`) at `oid`, so the
    /// object stays reachable and `git log` in the store shows it.
    pub fn set_ref(&self, name: &str, oid: ObjectId) -> Result<(), StoreError> {
        self.set_refs(&[name], oid)
    }

    /// [`Store::set_ref`] of each of `names`, in one transaction: one look at `packed-refs`
    /// and every lock taken before any ref is moved.
    pub fn set_refs(&self, names: &[&str], oid: ObjectId) -> Result<(), StoreError> {
        use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
        let edits = names
            .iter()
            .map(|name| {
                Ok(RefEdit {
                    change: Change::Update {
                        log: LogChange {
                            mode: RefLog::AndReference,
                            force_create_reflog: false,
                            message: "hunkgate".into(),
                        },
                        expected: PreviousValue::Any,
                        new: gix::refs::Target::Object(oid),
                    },
                    name: (*name)
                        .try_into()
                        .map_err(|e| self.err(format!("{name}: {e}")))?,
                    deref: false,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.local()
            .edit_references(edits)
            .map_err(|e| self.err(format!("{}: {e}", names.join(", "))))?;
        Ok(())
    }

    /// Every ref under `prefix` (such as `refs/hunkgate/`) that points at an object, loose
    /// and packed, by full name.
    pub fn refs_under(&self, prefix: &str) -> Result<BTreeMap<String, ObjectId>, StoreError> {
        let repo = self.local();
        let platform = repo.references().map_err(|e| self.err(e))?;
        let mut out = BTreeMap::new();
        for r in platform
            .prefixed(prefix)
            .map_err(|e| self.err(format!("{prefix}: {e}")))?
        {
            let r = r.map_err(|e| self.err(format!("{prefix}: {e}")))?;
            if let Some(id) = r.target().try_id() {
                out.insert(r.name().as_bstr().to_string(), id.to_owned());
            }
        }
        Ok(out)
    }

    /// Open an existing repository (the user's own) to mirror commits into it.
    pub fn open_existing(path: &Path) -> Result<Self, StoreError> {
        let repo = gix::open_opts(path, isolated_open_options()).map_err(|e| StoreError::Git {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Self::over(repo, path))
    }

    /// Copy `commit` with its tree, blobs and ancestors into `dest`, skipping what `dest`
    /// already has (most blobs of a checkout snapshot are already in the user's repository).
    pub fn copy_commit_into(&self, dest: &Store, commit: ObjectId) -> Result<(), StoreError> {
        let src = self.local();
        let dst = dest.local();
        let mut stack = vec![commit];
        while let Some(id) = stack.pop() {
            if dst.has_object(id) {
                continue;
            }
            let obj = src.find_object(id).map_err(|e| self.err(e))?;
            let kind = obj.kind;
            let data = obj.detach().data;
            match kind {
                gix::objs::Kind::Commit => {
                    let c = gix::objs::CommitRef::from_bytes(&data, src.object_hash())
                        .map_err(|e| self.err(e))?;
                    stack.push(c.tree());
                    stack.extend(c.parents());
                }
                gix::objs::Kind::Tree => {
                    let t = gix::objs::TreeRef::from_bytes(&data, src.object_hash())
                        .map_err(|e| self.err(e))?;
                    for e in &t.entries {
                        if !matches!(EntryKind::from(e.mode), EntryKind::Commit) {
                            stack.push(e.oid.to_owned());
                        }
                    }
                }
                _ => {}
            }
            use gix::objs::Write;
            let written = dst
                .objects
                .write_buf(kind, &data)
                .map_err(|e| dest.err(e))?;
            debug_assert_eq!(written, id);
        }
        Ok(())
    }

    /// Whether the store has `oid`; an id found once is remembered by this handle.
    pub fn has_object(&self, oid: ObjectId) -> bool {
        if self.known(oid) {
            return true;
        }
        let found = self.local().has_object(oid);
        if found {
            self.remember(oid);
        }
        found
    }

    /// Whether this handle already knows the store has `oid` (no lookup on disk).
    fn known(&self, oid: ObjectId) -> bool {
        self.present.lock().is_ok_and(|p| p.contains(&oid))
    }

    /// Blobs to write together (see [`ObjectBatch`]); a scratch store's (a sandbox's own
    /// `.git`) pack is not fsynced.
    pub fn batch(&self) -> ObjectBatch<'_> {
        ObjectBatch {
            store: self,
            held: Vec::new(),
            held_bytes: 0,
            spilled: false,
            pack: None,
            ids: Default::default(),
            fresh: None,
            buf: Vec::new(),
            new_blob_bytes: crate::supervise::limits::Tally::new(u64::MAX),
        }
    }

    fn remember(&self, oid: ObjectId) {
        if let Ok(mut p) = self.present.lock() {
            p.insert(oid);
        }
    }
}

/// Remove the file at `path` if it is a regular file and empty; whether it was. What a power
/// loss leaves of a loose object written without an fsync ([`Store::drop_empty_loose_objects`]).
fn remove_if_empty(path: &Path) -> std::io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => std::fs::remove_file(path).map(|()| true),
        _ => Ok(false),
    }
}

/// The git blob id of `bytes` (what [`Store::write_blob`] would return), without writing.
pub fn blob_id(bytes: &[u8]) -> ObjectId {
    // Hashing in memory cannot fail for SHA-1 (only a detected collision attack would).
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
        .unwrap_or_else(|_| ObjectId::null(gix::hash::Kind::Sha1))
}

/// Open options that read no global or system git configuration and run nothing: the store's
/// behaviour must not depend on whoever's ~/.gitconfig happens to be around.
pub(crate) fn isolated_open_options() -> gix::open::Options {
    // Reflogs would need a committer identity from some config; hunkgate's refs are its own
    // bookkeeping, so it writes none.
    gix::open::Options::isolated().config_overrides([
        "core.logAllRefUpdates=false",
        "committer.name=hunkgate",
        "committer.email=hunkgate@localhost",
    ])
}

/// Helpers shared by the crate's test modules (kept here, so that every module above `store`
/// may use them without breaking the layering).
#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;

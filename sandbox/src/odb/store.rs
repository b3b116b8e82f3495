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
        Ok(Self {
            repo: std::sync::RwLock::new(repo.into_sync()),
            opened: path.to_path_buf(),
            path: path.to_path_buf(),
            present: Default::default(),
            durable: true,
            deflate: Default::default(),
            packs: true,
            read_bytes: Default::default(),
            recent: Default::default(),
        })
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

    /// Write a flat tree as nested git trees; returns the root tree id.
    ///
    /// Every tree is built from the sorted map in one pass, deepest first, and written as is:
    /// unlike gix's tree editor, nothing looks up whether each entry's object exists (10,000
    /// `stat`s of loose objects per snapshot). Every caller writes or checks the blobs first
    /// (a snapshot stores what it read; a sandbox sync ensures the base's blobs). Path
    /// components are still validated as git would (no `.git`, `..`, empty names), and a path
    /// that is both a file and a directory is refused.
    pub fn write_tree(&self, tree: &FlatTree) -> Result<ObjectId, StoreError> {
        use gix::objs::tree::Entry as TreeEntry;
        let check = |name: &str, path: &str, symlink: bool| self.check_name(name, path, symlink);
        // Directory ("" for the root) -> its entries so far. The flat tree is sorted by path,
        // so a directory's files mostly come in one run: its entries are collected aside and
        // handed to the map when the directory changes, not looked up once per file.
        let mut dirs: BTreeMap<&str, Vec<TreeEntry>> = BTreeMap::new();
        dirs.insert("", Vec::new());
        let mut run: (&str, Vec<TreeEntry>) = ("", Vec::new());
        for (path, entry) in tree {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if path.starts_with('/') {
                // The root's name is "": a leading '/' is an empty first component.
                check("", path, false)?;
            }
            check(name, path, entry.mode == Mode::Symlink)?;
            if dir != run.0 {
                let (done, entries) = std::mem::replace(&mut run, (dir, Vec::new()));
                dirs.entry(done).or_default().extend(entries);
                // Every ancestor directory gets a tree, however deep the first file in it is.
                let mut d = dir;
                while !dirs.contains_key(d) {
                    dirs.insert(d, Vec::new());
                    d = d.rsplit_once('/').map_or("", |(p, _)| p);
                }
            }
            run.1.push(TreeEntry {
                mode: entry.mode.kind().into(),
                filename: name.into(),
                oid: entry.oid,
            });
        }
        dirs.entry(run.0).or_default().extend(run.1);
        let mut batch = self.batch();
        // A child directory sorts after its parent (the parent is its prefix), so walking the
        // directories backwards writes every subtree before the tree that names it.
        let order: Vec<&str> = dirs.keys().rev().copied().collect();
        for dir in order {
            let mut entries = dirs.remove(dir).unwrap_or_default();
            entries.sort();
            if let Some(w) = entries.windows(2).find(|w| w[0].filename == w[1].filename) {
                let name = match dir {
                    "" => w[0].filename.to_string(),
                    _ => format!("{dir}/{}", w[0].filename),
                };
                return Err(self.err(format!("{name}: a path is both a file and a directory")));
            }
            let id = batch.add_tree(&gix::objs::Tree { entries })?;
            if dir.is_empty() {
                batch.finish()?;
                return Ok(id);
            }
            let (parent, name) = dir.rsplit_once('/').unwrap_or(("", dir));
            check(name, dir, false)?;
            dirs.entry(parent).or_default().push(TreeEntry {
                mode: EntryKind::Tree.into(),
                filename: name.into(),
                oid: id,
            });
        }
        Err(self.err("no root tree was written"))
    }

    /// Write the tree `base` (a tree id) with `changes` made to it; returns the new root tree id.
    ///
    /// Only the trees on the way to a changed path are read, rebuilt and written; every other
    /// subtree keeps its id, so the cost follows the change, not the repository (git's
    /// cache-tree idea). A directory left empty disappears, as git has no empty trees. The same
    /// flat tree written whole by [`Store::write_tree`] gets the same id. Names are validated
    /// as [`Store::write_tree`] does; blobs are not looked up (the caller stored them).
    pub fn edit_tree(&self, base: ObjectId, changes: &Changes) -> Result<ObjectId, StoreError> {
        let mut batch = self.batch();
        let root = self.edit_tree_in(&mut batch, base, changes)?;
        batch.finish()?;
        Ok(root)
    }

    /// [`Store::edit_tree`], the trees added to `batch` (written when it is finished).
    pub fn edit_tree_in(
        &self,
        batch: &mut ObjectBatch<'_>,
        base: ObjectId,
        changes: &Changes,
    ) -> Result<ObjectId, StoreError> {
        // Each new entry's path is checked whole first, so a refusal names the path, not
        // only the component (the trees written below are checked again, name by name).
        for (path, entry) in changes {
            if let Some(entry) = entry {
                let mut parts = path.split('/').peekable();
                while let Some(part) = parts.next() {
                    let link = parts.peek().is_none() && entry.mode == Mode::Symlink;
                    self.check_name(part, path, link)?;
                }
            }
        }
        struct InStore<'a, 'b, 's> {
            store: &'a Store,
            repo: gix::Repository,
            batch: &'b mut ObjectBatch<'s>,
        }
        impl crate::odb::tree_edit::Trees for InStore<'_, '_, '_> {
            type Error = StoreError;
            fn read(&mut self, id: ObjectId) -> Result<Vec<u8>, StoreError> {
                let tree = self.repo.find_tree(id).map_err(|e| self.store.err(e))?;
                Ok(tree.detach().data)
            }
            fn write(&mut self, bytes: &[u8]) -> Result<ObjectId, StoreError> {
                self.batch.add(gix::objs::Kind::Tree, bytes)
            }
            fn malformed(&self, id: ObjectId) -> StoreError {
                self.store
                    .err(format!("tree {id}: its entries cannot be read"))
            }
        }
        let changes: Vec<(&str, Option<crate::odb::tree_edit::Put>)> = changes
            .iter()
            .map(|(path, entry)| {
                let put = entry.map(|e| crate::odb::tree_edit::Put {
                    mode: e.mode.kind().as_octal_str(),
                    oid: e.oid,
                });
                (path.as_str(), put)
            })
            .collect();
        let mut trees = InStore {
            store: self,
            repo: self.local(),
            batch,
        };
        let root = crate::odb::tree_edit::edit(&mut trees, base, &changes)?;
        Ok(root)
    }

    /// Validate one path component as git would (no `.git`, `..`, empty names); `path` names
    /// it in the error.
    fn check_name(&self, name: &str, path: &str, symlink: bool) -> Result<(), StoreError> {
        let validate = gix::validate::path::component::Options {
            protect_windows: cfg!(windows),
            protect_hfs: cfg!(target_os = "macos"),
            protect_ntfs: true,
        };
        let mode = symlink.then_some(gix::validate::path::component::Mode::Symlink);
        gix::validate::path::component(name.into(), mode, validate)
            .map(|_| ())
            .map_err(|e| self.err(format!("{path}: {e}")))
    }

    /// A compressor from those kept, or a new one ([`crate::odb::pack::new_deflate`]).
    fn take_deflate(&self) -> flate2::write::ZlibEncoder<Vec<u8>> {
        self.deflate
            .lock()
            .ok()
            .and_then(|mut d| d.pop())
            .unwrap_or_else(crate::odb::pack::new_deflate)
    }

    /// Keep a compressor that finished its last stream (at most one per I/O thread).
    fn give_deflate(&self, z: flate2::write::ZlibEncoder<Vec<u8>>) {
        if let Ok(mut d) = self.deflate.lock() {
            if d.len() < crate::threads::io_threads() {
                d.push(z);
            }
        }
    }

    /// Compress `all` into pack entries — on a few threads when they are many bytes — and
    /// write them as one pack made in memory ([`crate::odb::pack::WholePack`]); returns the pack's
    /// path.
    fn write_whole_pack(&self, objects: &[HeldObject]) -> Result<PathBuf, StoreError> {
        /// Below this many bytes per thread, one thread compresses everything.
        const BYTES_PER_THREAD: usize = 256 << 10;
        let started = std::time::Instant::now();
        let cost = |(_, _, b): &HeldObject| b.len();
        let total: usize = objects.iter().map(cost).sum();
        let threads = crate::threads::io_threads()
            .min(total / BYTES_PER_THREAD)
            .max(1);
        // Contiguous shares of about equal bytes to compress, in order.
        let mut shares: Vec<&[HeldObject]> = Vec::with_capacity(threads);
        let (mut start, mut acc, per) = (0, 0, total.div_ceil(threads));
        for (i, object) in objects.iter().enumerate() {
            acc += cost(object);
            if acc >= per * (shares.len() + 1) && shares.len() + 1 < threads {
                shares.push(&objects[start..=i]);
                start = i + 1;
            }
        }
        shares.push(&objects[start..]);
        let deflate_share = |share: &[HeldObject]| -> std::io::Result<Vec<PackEntry>> {
            let mut z = self.take_deflate();
            let entries = deflate_entries(share, &mut z)?;
            self.give_deflate(z);
            Ok(entries)
        };
        let io = |e: std::io::Error| self.err(format!("writing a pack: {e}"));
        let mut entries = Vec::with_capacity(objects.len());
        if shares.len() == 1 {
            entries.extend(deflate_share(shares[0]).map_err(io)?);
        } else {
            for share in crate::threads::on_threads(shares, deflate_share) {
                entries.extend(share.map_err(io)?);
            }
        }
        let compressed_us = started.elapsed().as_micros() as u64;
        let whole = crate::odb::pack::WholePack::of(&entries).map_err(io)?;
        let made_us = started.elapsed().as_micros() as u64;
        let dir = self.pack_dir();
        let durable = self.durable;
        let placed = whole
            .place(&dir, durable, |dest, bytes| {
                crate::odb::pack::write_file_via_temp(dest, bytes, durable)
            })
            .map_err(io);
        tracing::debug!(
            compressed_us,
            made_us,
            placed_us = started.elapsed().as_micros() as u64,
            bytes = whole.pack.len(),
            "a whole pack written"
        );
        placed
    }

    /// This repository's own `objects/pack` (a worktree store's `path` is the worktree),
    /// known without a thread-local repository handle.
    fn pack_dir(&self) -> PathBuf {
        self.repo
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .git_dir()
            .join("objects")
            .join("pack")
    }

    /// A pack in [`Store::pack_dir`], fsynced when finished unless the store is a scratch
    /// one.
    fn start_pack(&self) -> Result<crate::odb::pack::PackWriter, StoreError> {
        let dir = self.pack_dir();
        let pack = if self.durable {
            crate::odb::pack::PackWriter::new(&dir)
        } else {
            crate::odb::pack::PackWriter::scratch(&dir)
        };
        pack.map_err(|e| self.err(format!("starting a pack: {e}")))
    }

    /// Read a tree (by tree or commit id) back into a flat map. Submodule entries are skipped:
    /// hunkgate does not review them.
    pub fn read_tree(&self, id: ObjectId) -> Result<FlatTree, StoreError> {
        let repo = self.local();
        let tree_id = self.tree_of(&repo, id)?;
        let mut out = FlatTree::new();
        self.walk(&repo, tree_id, String::new(), &mut out)?;
        Ok(out)
    }

    fn tree_of(&self, repo: &gix::Repository, id: ObjectId) -> Result<ObjectId, StoreError> {
        let obj = repo.find_object(id).map_err(|e| self.err(e))?;
        match obj.kind {
            gix::objs::Kind::Tree => Ok(id),
            gix::objs::Kind::Commit => {
                let commit = obj.into_commit();
                Ok(commit.tree_id().map_err(|e| self.err(e))?.detach())
            }
            _ => Err(StoreError::WrongKind {
                path: self.path.clone(),
                oid: id,
                expected: "tree or commit",
            }),
        }
    }

    /// Every file of tree `tree_id` into `out`, its path under `prefix`. The trees still to
    /// read are a list of the walk's own, not calls on the thread's stack: a tree an agent
    /// made may be thousands of directories deep.
    fn walk(
        &self,
        repo: &gix::Repository,
        tree_id: ObjectId,
        prefix: String,
        out: &mut FlatTree,
    ) -> Result<(), StoreError> {
        let mut trees = vec![(tree_id, prefix)];
        while let Some((tree_id, prefix)) = trees.pop() {
            self.walk_one(repo, tree_id, &prefix, out, &mut trees)?;
        }
        Ok(())
    }

    /// The files of one tree of a [`Store::walk`] into `out`, its subtrees onto `trees`.
    fn walk_one(
        &self,
        repo: &gix::Repository,
        tree_id: ObjectId,
        prefix: &str,
        out: &mut FlatTree,
        trees: &mut Vec<(ObjectId, String)>,
    ) -> Result<(), StoreError> {
        let tree = repo.find_tree(tree_id).map_err(|e| self.err(e))?;
        let decoded = tree.decode().map_err(|e| self.err(e))?;
        for entry in &decoded.entries {
            let name = String::from_utf8_lossy(entry.filename);
            let path = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let oid = entry.oid.to_owned();
            match EntryKind::from(entry.mode) {
                EntryKind::Tree => trees.push((oid, path)),
                EntryKind::Blob => {
                    out.insert(
                        path,
                        Entry {
                            mode: Mode::File,
                            oid,
                        },
                    );
                }
                EntryKind::BlobExecutable => {
                    out.insert(
                        path,
                        Entry {
                            mode: Mode::Executable,
                            oid,
                        },
                    );
                }
                EntryKind::Link => {
                    out.insert(
                        path,
                        Entry {
                            mode: Mode::Symlink,
                            oid,
                        },
                    );
                }
                EntryKind::Commit => {}
            }
        }
        Ok(())
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
        Ok(Self {
            repo: std::sync::RwLock::new(repo.into_sync()),
            opened: path.to_path_buf(),
            path: path.to_path_buf(),
            present: Default::default(),
            durable: true,
            deflate: Default::default(),
            packs: true,
            read_bytes: Default::default(),
            recent: Default::default(),
        })
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

/// Where the loose object `id` is in the objects directory `objects`: `xx/…` by its hex id.
pub fn loose_object_path(objects: &Path, id: ObjectId) -> PathBuf {
    let hex = id.to_string();
    objects.join(&hex[..2]).join(&hex[2..])
}

/// Objects written together ([`Store::batch`]): blobs, and the trees and commit a snapshot or
/// publish makes of them. Up to [`ObjectBatch::PACK_AT`] are written loose; more go into one
/// pack ([`crate::odb::pack`]), so a snapshot of thousands of new files creates two files, not
/// thousands. The objects are readable once [`ObjectBatch::finish`] returns; a batch dropped
/// unfinished writes nothing (its temporary pack is removed).
///
/// A batch [`ObjectBatch::keeping`] blob contents also holds them in memory ([`Fresh`]), up to
/// a budget, for what comes next to read without the store; under that budget it compresses
/// nothing until it is finished.
pub struct ObjectBatch<'s> {
    store: &'s Store,
    /// Objects not yet in the pack (or to be written loose), in the order they came.
    held: Vec<HeldObject>,
    held_bytes: usize,
    pack: Option<crate::odb::pack::PackWriter>,
    ids: std::collections::HashSet<ObjectId>,
    fresh: Option<Fresh>,
    /// Where a tree is encoded to be hashed (copied only if it is new).
    buf: Vec<u8>,
    /// The bytes of new blobs taken, against [`ObjectBatch::limit_new_blob_bytes`].
    new_blob_bytes: crate::supervise::limits::Tally,
    /// A new blob was not kept (a batch [`ObjectBatch::keeping`] contents, past its budget):
    /// it is readable from the store only once the batch is finished.
    spilled: bool,
}

/// An object's id and its pack entry ([`crate::odb::pack::deflate_entry`]).
type PackEntry = (ObjectId, Vec<u8>);

/// An object an [`ObjectBatch`] holds: its kind, id and content.
type HeldObject = (gix::objs::Kind, ObjectId, std::sync::Arc<Vec<u8>>);

/// Blob contents an [`ObjectBatch`] kept in memory as it was given them, by id.
#[derive(Default, Clone)]
pub struct Fresh {
    blobs: std::collections::HashMap<ObjectId, std::sync::Arc<Vec<u8>>>,
    bytes: usize,
    budget: usize,
    /// The blobs past the budget that are not text ([`hunkgate_patch::is_text`]): what a diff
    /// needs to know of them without reading them back from the store (a publish of hundreds
    /// of megabytes of binary files would otherwise map the whole pack into memory again).
    not_text: std::collections::HashSet<ObjectId>,
}

impl Fresh {
    /// Whether blob `oid` was given past the budget and is not text: a binary file, whatever
    /// else it holds.
    pub fn not_text(&self, oid: &ObjectId) -> bool {
        self.not_text.contains(oid)
    }

    /// Remember that `bytes` (blob `oid`, not kept) are not text, if they are not.
    fn spilled(&mut self, oid: ObjectId, bytes: &[u8]) {
        if !hunkgate_patch::is_text(bytes) {
            self.not_text.insert(oid);
        }
    }

    /// The content of blob `oid`, if it was kept.
    pub fn get(&self, oid: &ObjectId) -> Option<&[u8]> {
        self.blobs.get(oid).map(|b| b.as_slice())
    }

    /// How many blobs are kept.
    pub fn len(&self) -> usize {
        self.blobs.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Keep `bytes` as blob `oid` if the budget has room — taken over, not copied, when they
    /// are owned — and return it shared; or hand the bytes back.
    fn keep<'a>(
        &mut self,
        oid: ObjectId,
        bytes: Cow<'a, [u8]>,
    ) -> Result<std::sync::Arc<Vec<u8>>, Cow<'a, [u8]>> {
        if let Some(kept) = self.blobs.get(&oid) {
            return Ok(kept.clone());
        }
        if self.bytes + bytes.len() > self.budget {
            return Err(bytes);
        }
        let kept = std::sync::Arc::new(bytes.into_owned());
        self.bytes += kept.len();
        self.blobs.insert(oid, kept.clone());
        Ok(kept)
    }
}

impl std::fmt::Debug for Fresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fresh")
            .field("blobs", &self.blobs.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl ObjectBatch<'_> {
    /// Up to this many new objects are written loose; more make a pack (many tiny packs would
    /// slow every lookup down).
    pub const PACK_AT: usize = 64;

    /// At most this many bytes of objects are held in memory (beyond what a batch
    /// [`ObjectBatch::keeping`] contents keeps): past them the pack is started and what comes
    /// after is compressed into it as it comes, so a publish of hundreds of megabytes of new
    /// files does not hold them all until it finishes.
    pub const HOLD_BYTES: usize = 16 << 20;

    /// Whether a new blob was not kept in memory (a batch [`ObjectBatch::keeping`] contents,
    /// past its budget). Such a blob is readable from the store only once the batch is
    /// [finished](ObjectBatch::finish): what reads the batch's new blobs before that (a
    /// publish's diffs beside its commit being written) must wait for it.
    pub fn spilled(&self) -> bool {
        self.spilled
    }

    /// Keep the blobs' contents, up to `budget` bytes of them, readable from
    /// [`ObjectBatch::take_fresh`]; and hold off compressing while they fit.
    pub fn keeping(mut self, budget: usize) -> Self {
        self.fresh = Some(Fresh {
            budget,
            ..Fresh::default()
        });
        self
    }

    /// The blob contents kept so far (see [`ObjectBatch::keeping`]); later blobs are kept
    /// anew.
    pub fn take_fresh(&mut self) -> Fresh {
        match self.fresh.as_mut() {
            Some(f) => {
                let budget = f.budget.saturating_sub(f.bytes);
                std::mem::replace(
                    f,
                    Fresh {
                        budget,
                        ..Fresh::default()
                    },
                )
            }
            None => Fresh::default(),
        }
    }

    /// Take at most `limit` bytes of new blob content (blobs neither the store nor the batch
    /// has): past it, adding a blob fails with [`OverLimit::Bytes`](crate::supervise::limits::OverLimit)
    /// and the blob is not taken. What was taken before stays, for the caller to finish or
    /// drop.
    pub fn limit_new_blob_bytes(&mut self, limit: u64) {
        self.new_blob_bytes = crate::supervise::limits::Tally::new(limit);
    }

    /// Count `len` bytes of a new blob against the limit.
    fn take_new_blob(&mut self, len: usize) -> Result<(), StoreError> {
        if self.new_blob_bytes.take(len as u64) {
            return Ok(());
        }
        Err(crate::supervise::limits::OverLimit::Bytes {
            limit: self.new_blob_bytes.limit(),
        }
        .into())
    }

    /// Add a blob; returns its id. A blob the store or the batch has already costs nothing
    /// (and is not kept: only new contents are, a publish's new files — one made with
    /// `--files` reads back every earlier change of its run too, whose blobs the store has).
    pub fn write_blob(&mut self, bytes: &[u8]) -> Result<ObjectId, StoreError> {
        self.write_blob_hashed(None, Cow::Borrowed(bytes))
    }

    /// [`ObjectBatch::write_blob`] of a blob whose id `oid`, when given, this process computed
    /// from `bytes` itself (on the thread that read them, say): it is not hashed again. Owned
    /// bytes are taken over, not copied, to be kept or held.
    pub(crate) fn write_blob_hashed(
        &mut self,
        oid: Option<ObjectId>,
        bytes: Cow<'_, [u8]>,
    ) -> Result<ObjectId, StoreError> {
        debug_assert!(oid.is_none_or(|id| id == blob_id(&bytes)));
        let oid = oid.unwrap_or_else(|| blob_id(&bytes));
        if self.ids.contains(&oid) || self.store.known(oid) {
            return Ok(oid);
        }
        self.take_new_blob(bytes.len())?;
        self.ids.insert(oid);
        let bytes = match self.fresh.as_mut() {
            Some(fresh) => fresh.keep(oid, bytes),
            None => Err(bytes),
        };
        match bytes {
            Ok(kept) => self.hold(gix::objs::Kind::Blob, oid, kept)?,
            Err(bytes) => {
                if let Some(fresh) = self.fresh.as_mut() {
                    fresh.spilled(oid, &bytes);
                    self.spilled = true;
                }
                self.put(gix::objs::Kind::Blob, oid, bytes)?
            }
        }
        Ok(oid)
    }

    /// Add a tree; returns its id.
    fn add_tree(&mut self, tree: &gix::objs::Tree) -> Result<ObjectId, StoreError> {
        use gix::objs::WriteTo;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let added = tree
            .write_to(&mut buf)
            .map_err(|e| self.store.err(e))
            .and_then(|()| self.add(gix::objs::Kind::Tree, &buf));
        self.buf = buf;
        added
    }

    /// Add an object of `kind`; returns its id. One the store or the batch has (most trees
    /// of a snapshot are the last snapshot's) costs its hash: less than asking the object
    /// database (a `stat` of a loose object) whether it is there.
    fn add(&mut self, kind: gix::objs::Kind, bytes: &[u8]) -> Result<ObjectId, StoreError> {
        let oid = gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, bytes)
            .map_err(|e| self.store.err(e))?;
        if self.ids.insert(oid) && !self.store.known(oid) {
            self.put(kind, oid, Cow::Borrowed(bytes))?;
        }
        Ok(oid)
    }

    /// Into the pack if one is being written, else held.
    fn put(
        &mut self,
        kind: gix::objs::Kind,
        oid: ObjectId,
        bytes: Cow<'_, [u8]>,
    ) -> Result<(), StoreError> {
        match self.pack.as_mut() {
            Some(pack) => pack
                .add(pack_kind(kind), oid, &bytes)
                .map_err(|e| self.store.err(e)),
            None => self.hold(kind, oid, std::sync::Arc::new(bytes.into_owned())),
        }
    }

    /// Hold a new object; past [`ObjectBatch::PACK_AT`] of them or
    /// [`ObjectBatch::HOLD_BYTES`] of their bytes (and, for a batch keeping contents, past its
    /// budget), start the pack with all held so far.
    fn hold(
        &mut self,
        kind: gix::objs::Kind,
        oid: ObjectId,
        bytes: std::sync::Arc<Vec<u8>>,
    ) -> Result<(), StoreError> {
        if let Some(pack) = self.pack.as_mut() {
            return pack
                .add(pack_kind(kind), oid, &bytes)
                .map_err(|e| self.store.err(e));
        }
        self.held_bytes += bytes.len();
        self.held.push((kind, oid, bytes));
        let deferring = self
            .fresh
            .as_ref()
            .is_some_and(|f| self.held_bytes <= f.budget);
        let many = self.held.len() > Self::PACK_AT || self.held_bytes > Self::HOLD_BYTES;
        if many && !deferring {
            match self.store.packs {
                true => self.start_pack()?,
                // No pack: what is held goes out loose now, not all of it held to the end.
                false => self.write_held_loose()?,
            }
        }
        Ok(())
    }

    /// Write what the batch holds as loose objects, and hold nothing (without packs: see
    /// [`Store::use_packs`]). Readable at once, before the batch is finished: a batch dropped
    /// after that leaves them, unreferenced, for `git gc` to remove.
    fn write_held_loose(&mut self) -> Result<(), StoreError> {
        let repo = self.store.local();
        for (kind, _, bytes) in self.held.drain(..) {
            self.store.write_loose(&repo, kind, &bytes)?;
        }
        self.held_bytes = 0;
        Ok(())
    }

    /// Start the pack and put everything held into it.
    fn start_pack(&mut self) -> Result<(), StoreError> {
        let mut pack = self.store.start_pack()?;
        for (kind, oid, bytes) in self.held.drain(..) {
            pack.add(pack_kind(kind), oid, &bytes)
                .map_err(|e| self.store.err(e))?;
        }
        self.held_bytes = 0;
        self.pack = Some(pack);
        Ok(())
    }

    /// Write what the batch holds: loose objects, or the pack and its index.
    pub fn finish(mut self) -> Result<(), StoreError> {
        let store = self.store;
        match self.pack.take() {
            // All held (a batch keeping contents, under its budget): one pack made whole.
            None if self.held.len() > Self::PACK_AT && store.packs => {
                let path = store.write_whole_pack(&self.held)?;
                tracing::debug!(objects = self.held.len(), pack = %path.display(), "wrote a pack");
            }
            Some(pack) => {
                let n = pack.len();
                let path = pack
                    .finish()
                    .map_err(|e| store.err(format!("writing a pack: {e}")))?;
                tracing::debug!(objects = n, pack = %path.display(), "wrote a pack");
            }
            None => self.write_held_loose()?,
        }
        for oid in &self.ids {
            store.remember(*oid);
        }
        Ok(())
    }
}

/// Blobs read from a [`Store`] through one repository handle ([`Store::reader`]).
pub struct BlobReader<'s> {
    store: &'s Store,
    repo: gix::Repository,
}

impl BlobReader<'_> {
    pub fn read_blob(&self, oid: ObjectId) -> Result<Vec<u8>, StoreError> {
        let obj = self.repo.find_object(oid).map_err(|e| self.store.err(e))?;
        if obj.kind != gix::objs::Kind::Blob {
            return Err(StoreError::WrongKind {
                path: self.store.path.clone(),
                oid,
                expected: "blob",
            });
        }
        let data = obj.detach().data;
        self.store
            .read_bytes
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(data)
    }
}

/// The pack entries of `objects`, in order, compressed with `z`.
fn deflate_entries(
    objects: &[HeldObject],
    z: &mut flate2::write::ZlibEncoder<Vec<u8>>,
) -> std::io::Result<Vec<PackEntry>> {
    objects
        .iter()
        .map(|(kind, oid, bytes)| {
            crate::odb::pack::deflate_entry(pack_kind(*kind), bytes, z).map(|e| (*oid, e))
        })
        .collect()
}

/// Git's pack type number of an object kind.
fn pack_kind(kind: gix::objs::Kind) -> u8 {
    match kind {
        gix::objs::Kind::Commit => crate::odb::pack::OBJ_COMMIT,
        gix::objs::Kind::Tree => crate::odb::pack::OBJ_TREE,
        gix::objs::Kind::Blob => crate::odb::pack::OBJ_BLOB,
        gix::objs::Kind::Tag => crate::odb::pack::OBJ_TAG,
    }
}

/// `tree` as a git index, version 2 (see [`Store::write_index_of`]): entries in byte order
/// of their paths (a [`FlatTree`]'s order), each 62 bytes of stat data, id and flags, then the
/// path and 1–8 NUL bytes to a multiple of 8; a SHA-1 of it all at the end.
fn index_v2(
    tree: &FlatTree,
    stat: impl Fn(&str) -> Option<crate::wire::FileStat>,
) -> std::io::Result<Vec<u8>> {
    let count = u32::try_from(tree.len()).map_err(std::io::Error::other)?;
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let mut out = Vec::with_capacity(12 + tree.len() * 96 + 20);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    for (path, entry) in tree {
        let st = stat(path);
        let mode: u32 = match entry.mode {
            Mode::File => 0o100644,
            Mode::Executable => 0o100755,
            Mode::Symlink => 0o120000,
        };
        // Git keeps the low 32 bits of each field.
        let fields: [u32; 10] = match st {
            Some(st) => [
                st.ctime_s as u32,
                st.ctime_ns,
                st.mtime_s as u32,
                st.mtime_ns,
                0,
                st.ino as u32,
                mode,
                uid,
                gid,
                st.size as u32,
            ],
            None => [0, 0, 0, 0, 0, 0, mode, 0, 0, 0],
        };
        let start = out.len();
        for f in fields {
            out.extend_from_slice(&f.to_be_bytes());
        }
        out.extend_from_slice(entry.oid.as_bytes());
        let flags = path.len().min(0xfff) as u16;
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(path.as_bytes());
        let len = out.len() - start;
        out.resize(start + (len + 8) / 8 * 8, 0);
    }
    let sum = crate::odb::pack::checksum(&out);
    out.extend_from_slice(sum.as_bytes());
    Ok(out)
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
pub(crate) mod test_support {
    use super::*;

    /// A chain of directories below `top` whose path is longer than `bytes`, with a file at
    /// its end (made by descriptor: no path that long can be opened).
    pub(crate) fn deep(top: &Path, bytes: usize) {
        use nix::fcntl::{openat, OFlag};
        use nix::sys::stat::Mode;
        std::fs::create_dir_all(top).unwrap();
        let flags = OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
        let mut fd = nix::fcntl::open(top, flags, Mode::empty()).unwrap();
        let name = "d".repeat(200);
        for _ in 0..bytes / 201 + 1 {
            nix::sys::stat::mkdirat(&fd, name.as_str(), Mode::from_bits_truncate(0o755)).unwrap();
            fd = openat(&fd, name.as_str(), flags, Mode::empty()).unwrap();
        }
        let file = openat(
            &fd,
            "leaf",
            OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        drop(file);
    }

    /// Run git in `dir` with no user or system config and return its stdout; fails the test
    /// if git does.
    pub(crate) fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Set the mtime of the file at `path` (what `touch -d` does).
    pub(crate) fn set_mtime(path: &Path, t: std::time::SystemTime) {
        std::fs::File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    /// Commit what is staged in the repository at `dir`, as a test identity.
    pub(crate) fn commit(dir: &Path, message: &str) {
        let id = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git_in(dir, &[&id[..], &["commit", "-qm", message]].concat());
    }

    /// The flat tree of `files` (path, mode, content), their blobs written to `store`.
    pub(crate) fn tree(store: &Store, files: &[(&str, Mode, &str)]) -> FlatTree {
        files
            .iter()
            .map(|(p, mode, body)| {
                let oid = store.write_blob(body.as_bytes()).unwrap();
                (p.to_string(), Entry { mode: *mode, oid })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run git on the bare repository at `git_dir`.
    fn git(git_dir: &Path, args: &[&str]) -> String {
        test_support::git_in(git_dir, &[&["--git-dir", "."], args].concat())
    }

    /// A tree with every mode and a deep path, its blobs written to `store`; returns the tree
    /// and the id of the blob `a\n`.
    fn sample_tree(store: &Store) -> (FlatTree, ObjectId) {
        let a = store.write_blob(b"a\n").unwrap();
        let b = store.write_blob(b"#!/bin/sh\n").unwrap();
        let mut tree = FlatTree::new();
        for (path, mode, oid) in [
            ("a.txt", Mode::File, a),
            ("bin/run", Mode::Executable, b),
            ("bin/link", Mode::Symlink, a),
            ("a/b/c/d.txt", Mode::File, b),
        ] {
            tree.insert(path.into(), Entry { mode, oid });
        }
        (tree, a)
    }

    #[test]
    fn flat_tree_roundtrip_and_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let (tree, a) = sample_tree(&store);
        let tree_id = store.write_tree(&tree).unwrap();
        let commit = store.commit(tree_id, &[], "base").unwrap();
        store.set_ref("refs/hunkgate/runs/x/base", commit).unwrap();
        assert_eq!(store.read_tree(commit).unwrap(), tree);
        assert_eq!(store.read_tree(tree_id).unwrap(), tree);
        assert_eq!(store.read_blob(a).unwrap(), b"a\n");
        assert_eq!(store.commit_tree(commit).unwrap(), tree_id);

        // Compare with git itself: the store is a valid repository with the same tree.
        let listed = git(
            store.path(),
            &[
                "ls-tree",
                "-r",
                "--format=%(objectmode) %(path)",
                "refs/hunkgate/runs/x/base",
            ],
        );
        assert_eq!(
            listed,
            "100644 a.txt\n100644 a/b/c/d.txt\n100644 bin/link\n100755 bin/run\n"
                .replace("100644 bin/link", "120000 bin/link")
        );
        // Reopening finds the same objects.
        drop(store);
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        assert!(store.has_object(commit));

        // Two refs in one transaction, both seen by git; a bad name moves neither.
        store
            .set_refs(
                &["refs/hunkgate/runs/x/head", "refs/hunkgate/s/y/run"],
                commit,
            )
            .unwrap();
        let shown = git(
            store.path(),
            &["for-each-ref", "--format=%(objectname) %(refname)"],
        );
        let c = commit.to_string();
        assert_eq!(
            shown,
            format!("{c} refs/hunkgate/runs/x/base\n{c} refs/hunkgate/runs/x/head\n{c} refs/hunkgate/s/y/run\n")
        );
        assert!(store
            .set_refs(&["refs/hunkgate/ok", "refs/hunkgate/bad..name"], commit)
            .is_err());
        assert!(!git(store.path(), &["for-each-ref"]).contains("refs/hunkgate/ok"));

        // The refs under a prefix, loose or packed by git, as git lists them.
        git(store.path(), &["pack-refs", "--all"]);
        store.set_ref("refs/hunkgate/s/z/run", tree_id).unwrap();
        store.set_ref("refs/other/x", commit).unwrap();
        let listed: Vec<String> = store
            .refs_under("refs/hunkgate/")
            .unwrap()
            .iter()
            .map(|(name, id)| format!("{id} {name}\n"))
            .collect();
        assert_eq!(
            listed.concat(),
            git(
                store.path(),
                &[
                    "for-each-ref",
                    "--format=%(objectname) %(refname)",
                    "refs/hunkgate/"
                ]
            )
        );
        assert_eq!(listed.len(), 4, "{listed:?}");

        // Every loose-object directory is there from the start, so writing an object never
        // has to make one.
        let fanout = std::fs::read_dir(store.path().join("objects"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().len() == 2)
            .count();
        assert_eq!(fanout, 256);
    }

    /// A blob written lately is read back from memory, the same bytes git reads from the
    /// store; the oldest go once more are written, and a big blob is never kept.
    #[test]
    fn blobs_written_lately_are_read_back_from_memory_within_bounds() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let loose = |oid: ObjectId| {
            let hex = oid.to_string();
            store.path().join("objects").join(&hex[..2]).join(&hex[2..])
        };
        let first = store.write_blob(b"first\n").unwrap();
        assert_eq!(
            git(store.path(), &["cat-file", "-p", &first.to_string()]),
            "first\n"
        );
        // Taken from memory: the object itself is gone from the disk.
        std::fs::remove_file(loose(first)).unwrap();
        assert_eq!(store.read_blob(first).unwrap(), b"first\n");
        // Positive control: an object only on disk is read from there.
        let by_git = tmp.path().join("by-git.txt");
        std::fs::write(&by_git, b"by git\n").unwrap();
        let id = git(
            store.path(),
            &["hash-object", "-w", by_git.to_str().unwrap()],
        );
        assert_eq!(
            store
                .read_blob(ObjectId::from_hex(id.trim().as_bytes()).unwrap())
                .unwrap(),
            b"by git\n"
        );
        // Sixteen more blobs push the first out.
        for i in 0..RecentBlobs::MAX {
            let oid = store.write_blob(format!("blob {i}\n").as_bytes()).unwrap();
            assert_eq!(
                store.read_blob(oid).unwrap(),
                format!("blob {i}\n").as_bytes()
            );
        }
        assert!(
            store.read_blob(first).is_err(),
            "the oldest blob is no longer kept"
        );
        // A blob over the byte bound is read from the disk.
        let big = vec![b'x'; RecentBlobs::MAX_BYTES + 1];
        let oid = store.write_blob(&big).unwrap();
        assert_eq!(store.read_blob(oid).unwrap(), big);
        std::fs::remove_file(loose(oid)).unwrap();
        assert!(
            store.read_blob(oid).is_err(),
            "a big blob is not kept in memory"
        );
        // Giving memory back when the hub is quiet drops them, maps released or not.
        let last = store.write_blob(b"last\n").unwrap();
        std::fs::remove_file(loose(last)).unwrap();
        assert_eq!(store.read_blob(last).unwrap(), b"last\n");
        assert!(!store.release_maps_after(u64::MAX).unwrap());
        assert!(store.read_blob(last).is_err(), "kept after the release");
    }

    /// More blobs than a batch writes loose, so it writes them as one pack: `packed 0\n`, ….
    fn write_a_pack(store: &Store) {
        let mut batch = store.batch();
        for i in 0..=ObjectBatch::PACK_AT {
            batch
                .write_blob(format!("packed {i}\n").as_bytes())
                .unwrap();
        }
        batch.finish().unwrap();
    }

    #[test]
    fn sync_loose_fsyncs_loose_objects_skips_packed_ones_and_names_a_missing_one() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("store.git");
        let store = Store::open_or_init(&path).unwrap();
        write_a_pack(&store);
        let packed = blob_id(b"packed 0\n");
        let loose_path = |id: ObjectId| loose_object_path(&path.join("objects"), id);
        assert!(
            !loose_path(packed).exists() && store.has_object(packed),
            "in the pack"
        );

        let store = Store::open_or_init(&path).unwrap();
        let a = store.write_blob(b"a\n").unwrap();
        let b = store.write_blob(b"b\n").unwrap();
        assert!(loose_path(a).is_file() && loose_path(b).is_file());
        assert_eq!(store.sync_loose([a, packed, b]).unwrap(), 2);
        assert_eq!(store.sync_loose([packed]).unwrap(), 0);
        assert_eq!(store.sync_loose([]).unwrap(), 0);

        let absent = blob_id(b"never written\n");
        let err = store.sync_loose([a, absent]).unwrap_err().to_string();
        assert!(
            err.contains(&absent.to_string()) && err.contains("not in the store"),
            "{err}"
        );
    }

    #[test]
    fn an_empty_loose_object_is_written_again_not_taken_as_present() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("store.git");
        let id = Store::open_or_init(&path)
            .unwrap()
            .write_blob(b"kept\n")
            .unwrap();
        let hex = id.to_string();
        let loose = loose_object_path(&path.join("objects"), id);
        // What a power loss can leave of a loose object written without an fsync.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&loose)
            .unwrap()
            .set_len(0)
            .unwrap();
        let store = Store::open_or_init(&path).unwrap();
        assert!(
            store.read_blob(id).is_err(),
            "an empty object is unreadable"
        );
        assert_eq!(store.write_blob(b"kept\n").unwrap(), id);
        assert_eq!(store.read_blob(id).unwrap(), b"kept\n");
        assert_eq!(git(&path, &["cat-file", "blob", &hex]), "kept\n");
        // Positive control: a whole object is taken as present and left alone.
        let before = std::fs::metadata(&loose).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let store = Store::open_or_init(&path).unwrap();
        assert_eq!(store.write_blob(b"kept\n").unwrap(), id);
        assert_eq!(
            std::fs::metadata(&loose).unwrap().modified().unwrap(),
            before
        );
    }

    #[test]
    fn empty_loose_objects_are_dropped_whole_ones_and_packs_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("store.git");
        let store = Store::open_or_init(&path).unwrap();
        write_a_pack(&store);
        let ids: Vec<ObjectId> = ["a\n", "b\n", "c\n"]
            .iter()
            .map(|b| store.write_blob(b.as_bytes()).unwrap())
            .collect();
        assert_eq!(
            store.drop_empty_loose_objects().unwrap(),
            0,
            "nothing empty"
        );
        for id in &ids[..2] {
            std::fs::File::create(loose_object_path(&path.join("objects"), *id)).unwrap();
        }
        let store = Store::open_or_init(&path).unwrap();
        assert_eq!(store.drop_empty_loose_objects().unwrap(), 2);
        assert!(!store.has_object(ids[0]) && !store.has_object(ids[1]));
        assert_eq!(store.read_blob(ids[2]).unwrap(), b"c\n");
        assert_eq!(
            store.read_blob(blob_id(b"packed 3\n")).unwrap(),
            b"packed 3\n"
        );
        git(&path, &["fsck", "--strict", "--no-dangling"]);
    }

    /// Many new trees go into one pack that git reads as its own (`fsck`, `ls-tree`); a few
    /// stay loose. A whole tree of 100 directories, then an edit reaching 70 of them.
    #[test]
    fn many_new_trees_are_one_pack_that_git_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let packs = || {
            std::fs::read_dir(store.path().join("objects/pack"))
                .map(|d| {
                    d.filter(|e| e.as_ref().unwrap().path().extension() == Some("pack".as_ref()))
                        .count()
                })
                .unwrap_or(0)
        };
        let x = store.write_blob(b"x\n").unwrap();
        let y = store.write_blob(b"y\n").unwrap();
        let mut tree = FlatTree::new();
        for d in 0..100 {
            tree.insert(
                format!("d{d:03}/f{d}"),
                Entry {
                    mode: Mode::File,
                    oid: x,
                },
            );
        }
        let base = store.write_tree(&tree).unwrap();
        assert_eq!(packs(), 1);
        let mut changes = Changes::new();
        for d in 0..70 {
            changes.insert(
                format!("d{d:03}/f{d}"),
                Some(Entry {
                    mode: Mode::File,
                    oid: y,
                }),
            );
        }
        let edited = store.edit_tree(base, &changes).unwrap();
        assert_eq!(packs(), 2);
        // Two directories: loose.
        let few: Changes = [(
            "d098/g".to_string(),
            Some(Entry {
                mode: Mode::File,
                oid: y,
            }),
        )]
        .into();
        let small = store.edit_tree(edited, &few).unwrap();
        assert_eq!(packs(), 2);
        let commit = store.commit(small, &[], "edited").unwrap();
        git(store.path(), &["fsck", "--strict", "--no-dangling"]);
        let listed = git(
            store.path(),
            &[
                "ls-tree",
                "-r",
                "--format=%(objectname) %(path)",
                &commit.to_string(),
            ],
        );
        let lines: Vec<&str> = listed.lines().collect();
        assert_eq!(lines.len(), 101);
        assert_eq!(lines[0], format!("{y} d000/f0"));
        assert_eq!(lines[70], format!("{x} d070/f70"));
        assert!(lines.contains(&format!("{y} d098/g").as_str()));
        // Reopened, the store reads its packed trees back.
        drop(store);
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        assert_eq!(store.read_tree(edited).unwrap().len(), 100);
    }

    /// Git's tree order puts `a/` after `a.c` and `a-b` but before `a0`; deep directories
    /// that hold only directories need trees too. The tree ids must be git's own.
    #[test]
    fn trees_are_the_ones_git_writes_for_the_same_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let x = store.write_blob(b"x\n").unwrap();
        let paths = [
            "a",
            "a-b",
            "a.c",
            "a0",
            "b/a/x",
            "b/a-b",
            "b/a.c/y",
            "b/a0",
            "c/d/e/f/g",
            "c/d.e",
            "z/1",
            "z/10",
            "z/1/",
            "\u{e9}t\u{e9}/\u{fc}",
        ];
        let mut tree = FlatTree::new();
        for (i, path) in paths.iter().enumerate() {
            if path.ends_with('/') {
                continue;
            }
            let mode = [Mode::File, Mode::Executable, Mode::Symlink][i % 3];
            tree.insert(path.to_string(), Entry { mode, oid: x });
        }
        // "a" cannot be a file beside "a/..." paths; it has none here.
        let ours = store.write_tree(&tree).unwrap();
        let index_info: String = tree
            .iter()
            .map(|(p, e)| format!("{} {}\t{p}\n", e.mode.octal(), e.oid))
            .collect();
        let index = tmp.path().join("index");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg("git update-index --index-info && git write-tree")
            .env("GIT_DIR", store.path())
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(index_info.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8(out.stdout).unwrap().trim(),
            ours.to_string()
        );
        assert_eq!(store.read_tree(ours).unwrap(), tree);
        git(store.path(), &["fsck", "--no-dangling"]);
        // The empty tree is git's empty tree.
        assert_eq!(
            store.write_tree(&FlatTree::new()).unwrap(),
            ObjectId::empty_tree(gix::hash::Kind::Sha1)
        );
    }

    /// A flat tree from generated paths, with a path that is also a directory of another
    /// dropped (a file system cannot hold both).
    fn valid_tree(store: &Store, paths: BTreeMap<String, u8>) -> FlatTree {
        let blobs: Vec<ObjectId> = (0..3)
            .map(|i| store.write_blob(format!("{i}\n").as_bytes()).unwrap())
            .collect();
        let dirs: std::collections::HashSet<String> = paths
            .keys()
            .flat_map(|p| {
                p.match_indices('/')
                    .map(|(i, _)| p[..i].to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        paths
            .into_iter()
            .filter(|(p, _)| !dirs.contains(p))
            .map(|(p, k)| {
                let mode = [Mode::File, Mode::Executable, Mode::Symlink][k as usize % 3];
                let oid = blobs[k as usize / 3 % 3];
                (p, Entry { mode, oid })
            })
            .collect()
    }

    /// The same edit made by gix's tree editor (which [`Store::edit_tree_in`] used before it
    /// edited trees' bytes itself): removals first, then upserts in path order.
    fn edited_by_gix(store: &Store, base: ObjectId, changes: &Changes) -> ObjectId {
        let repo = store.local();
        let mut editor = repo.edit_tree(base).unwrap();
        for (path, _) in changes.iter().filter(|(_, e)| e.is_none()) {
            editor.remove(path.as_str()).unwrap();
        }
        for (path, entry) in changes {
            if let Some(entry) = entry {
                editor
                    .upsert(path.as_str(), entry.mode.kind(), entry.oid)
                    .unwrap();
            }
        }
        editor.write().unwrap().detach()
    }

    /// Up to `len` paths of one to three short components over two letters (so that files
    /// and directories of the same name meet), each with a value from `values`.
    fn paths_to(
        values: std::ops::Range<u8>,
        len: std::ops::Range<usize>,
    ) -> impl proptest::strategy::Strategy<Value = BTreeMap<String, u8>> {
        proptest::collection::btree_map("[ab]{1,2}(/[ab]{1,2}){0,2}", values, len)
    }

    /// A fresh store holding the tree of `paths` ([`valid_tree`]): the store's directory (kept
    /// for as long as the store is used), the store, the tree and its id.
    fn store_with(paths: BTreeMap<String, u8>) -> (tempfile::TempDir, Store, FlatTree, ObjectId) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let tree = valid_tree(&store, paths);
        let id = store.write_tree(&tree).unwrap();
        (tmp, store, tree, id)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Editing the base's tree by the changes gives exactly the tree written whole: files
        /// that become directories and back, directories emptied, new nested directories.
        #[test]
        fn an_edited_tree_is_the_tree_written_whole(
            a in paths_to(0u8..9, 0..14),
            b in paths_to(0u8..9, 0..14),
        ) {
            let (_tmp, store, base, base_id) = store_with(a);
            let target = valid_tree(&store, b);
            let changes = changes_between(&base, &target);
            let edited = store.edit_tree(base_id, &changes).unwrap();
            proptest::prop_assert_eq!(edited, store.write_tree(&target).unwrap());
            proptest::prop_assert_eq!(store.read_tree(edited).unwrap(), target);
        }

        /// Any changes — not only those between two trees: removals of paths that are not
        /// there, a file removed and a directory made in its place, removals beneath a path
        /// set — give the tree gix's editor gives. (Not a path set and a path beneath it set
        /// too, which no read-back gives: gix then keeps what the directory held before.)
        #[test]
        fn an_edit_is_the_one_gix_makes_of_any_changes(
            a in paths_to(0u8..9, 0..14),
            edits in paths_to(0u8..12, 0..10),
        ) {
            let (_tmp, store, _, base_id) = store_with(a);
            let blobs: Vec<ObjectId> = (0..3)
                .map(|i| store.write_blob(format!("{i}\n").as_bytes()).unwrap())
                .collect();
            let changes: Changes = edits
                .into_iter()
                .map(|(p, k)| {
                    let entry = (k < 9).then(|| Entry {
                        mode: [Mode::File, Mode::Executable, Mode::Symlink][k as usize % 3],
                        oid: blobs[k as usize / 3 % 3],
                    });
                    (p, entry)
                })
                .collect();
            let set = |p: &str| changes.get(p).is_some_and(Option::is_some);
            let changes: Changes = changes
                .iter()
                .filter(|(p, e)| {
                    e.is_none() || !p.match_indices('/').any(|(i, _)| set(&p[..i]))
                })
                .map(|(p, e)| (p.clone(), *e))
                .collect();
            let ours = store.edit_tree(base_id, &changes).unwrap();
            proptest::prop_assert_eq!(ours, edited_by_gix(&store, base_id, &changes));
        }
    }

    /// An agent may nest directories thousands deep: their trees are edited and read on a
    /// stack of the store's own, not on the thread's (which this 256 KiB one would overflow).
    #[test]
    fn a_change_thousands_of_directories_deep_is_edited_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let file = Entry {
            mode: Mode::File,
            oid: store.write_blob(b"x\n").unwrap(),
        };
        let deep = format!("{}/f", vec!["d"; 3000].join("/"));
        let base = store
            .write_tree(&[("top".to_string(), file)].into())
            .unwrap();
        let changes: Changes = [(deep.clone(), Some(file))].into();
        fn on_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
            std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn_scoped(scope, f)
                    .unwrap()
                    .join()
                    .unwrap()
            })
        }
        let edited = on_small_stack(|| store.edit_tree(base, &changes)).unwrap();
        let target: FlatTree = [("top".to_string(), file), (deep, file)].into();
        assert_eq!(edited, store.write_tree(&target).unwrap());
        // Read back whole on the same small stack: the walk keeps its own list of trees.
        let read = on_small_stack(|| store.read_tree(edited)).unwrap();
        assert_eq!(read, target);
    }

    #[test]
    fn an_edit_git_would_refuse_is_not_written() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let x = store.write_blob(b"x\n").unwrap();
        let file = Entry {
            mode: Mode::File,
            oid: x,
        };
        let base = store
            .write_tree(&[("src/a".to_string(), file)].into())
            .unwrap();
        let edit = |path: &str| {
            let changes: Changes = [(path.to_string(), Some(file))].into();
            store.edit_tree(base, &changes)
        };
        // Positive control: an ordinary new path is written, in its place.
        let ok = edit("src/b").unwrap();
        assert_eq!(
            store.read_tree(ok).unwrap().keys().collect::<Vec<_>>(),
            ["src/a", "src/b"]
        );
        for bad in [
            "src/.git/config",
            ".git/hooks/pre-commit",
            "src/../x",
            "src/./x",
            "a//b",
        ] {
            let err = edit(bad).expect_err(bad).to_string();
            assert!(err.contains(bad), "the error names the path {bad}: {err}");
        }
    }

    #[test]
    fn a_tree_git_would_refuse_is_not_written() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let x = store.write_blob(b"x\n").unwrap();
        let tree_of = |paths: &[&str]| -> FlatTree {
            paths
                .iter()
                .map(|p| {
                    (
                        p.to_string(),
                        Entry {
                            mode: Mode::File,
                            oid: x,
                        },
                    )
                })
                .collect()
        };
        // Positive control: the same shapes with harmless names are written.
        store.write_tree(&tree_of(&["a/b", "c/d/e"])).unwrap();
        for (paths, says) in [
            (
                &["a", "a/b"][..],
                "a: a path is both a file and a directory",
            ),
            (
                &["x/y", "x/y/z"][..],
                "x/y: a path is both a file and a directory",
            ),
            (&[".git/config"][..], ".git"),
            (&["a/.GIT/hooks"][..], ".git"),
            (&["a/../b"][..], "Relative"),
            (&["a//b"][..], "empty"),
            (&["/abs"][..], "empty"),
        ] {
            let err = store.write_tree(&tree_of(paths)).unwrap_err().to_string();
            assert!(err.contains(says), "{paths:?}: {err}");
        }
    }

    fn packs_in(store: &Store) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(store.path().join("objects/pack"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// A batch keeping contents (a publish's) holds the new blobs readable in memory and
    /// writes nothing until it is finished; then the blobs, the trees and the commit made
    /// into it are one pack, made in memory, that git verifies
    /// and reads. Past its budget it keeps no more and writes as it goes; dropped, it leaves
    /// nothing.
    #[test]
    fn a_keeping_batch_writes_blobs_trees_and_commit_as_one_pack() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let file = |body: &str| Entry {
            mode: Mode::File,
            oid: blob_id(body.as_bytes()),
        };
        // A base of 100 directories; a change to one file in each rewrites 101 trees.
        let base: FlatTree = (0..100)
            .flat_map(|d| (0..3).map(move |f| format!("d{d:03}/f{f}.txt")))
            .map(|p| (p.clone(), file(&p)))
            .collect();
        for p in base.keys() {
            store.write_blob(p.as_bytes()).unwrap();
        }
        let base_id = store.write_tree(&base).unwrap();
        let before = packs_in(&store);

        let bodies: Vec<(String, String)> = (0..100)
            .map(|d| {
                (
                    format!("d{d:03}/f1.txt"),
                    format!("new {d}\n").repeat(d + 1),
                )
            })
            .collect();
        let mut batch = store.batch().keeping(1 << 20);
        let mut changes = Changes::new();
        for (path, body) in &bodies {
            let oid = batch.write_blob(body.as_bytes()).unwrap();
            changes.insert(
                path.clone(),
                Some(Entry {
                    mode: Mode::File,
                    oid,
                }),
            );
        }
        // A blob the store has is neither kept nor written again (a diff reads it from the
        // store); a repeat of a new one is kept once.
        let old = batch.write_blob(b"d000/f0.txt").unwrap();
        batch.write_blob(bodies[3].1.as_bytes()).unwrap();
        let fresh = batch.take_fresh();
        assert_eq!(fresh.len(), 100);
        assert!(!batch.spilled(), "every new blob was kept");
        assert_eq!(fresh.get(&old), None);
        for (path, body) in &bodies {
            assert_eq!(
                fresh.get(&changes[path].unwrap().oid),
                Some(body.as_bytes())
            );
        }
        let tree = store.edit_tree_in(&mut batch, base_id, &changes).unwrap();
        let commit = store.commit_in(&mut batch, tree, &[], "run").unwrap();
        assert_eq!(
            packs_in(&store),
            before,
            "nothing written before the batch is finished"
        );
        assert!(!store.has_object(commit));
        batch.finish().unwrap();

        let packs = packs_in(&store);
        let new: Vec<&String> = packs.iter().filter(|p| !before.contains(p)).collect();
        assert_eq!(new.len(), 2, "one .pack and its .idx: {packs:?}");
        let pack = store.path().join("objects/pack").join(new[1]);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&pack).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o444);
        let verified = git(store.path(), &["verify-pack", "-v", pack.to_str().unwrap()]);
        let count = |kind: &str| verified.lines().filter(|l| l.contains(kind)).count();
        assert_eq!(
            (count(" blob "), count(" tree "), count(" commit ")),
            (100, 101, 1)
        );
        let mut want = base.clone();
        for (path, entry) in &changes {
            want.insert(path.clone(), entry.unwrap());
        }
        assert_eq!(store.read_tree(commit).unwrap(), want);
        assert_eq!(
            store.commit_tree(commit).unwrap(),
            store.write_tree(&want).unwrap()
        );
        let (path, body) = &bodies[7];
        let shown = git(store.path(), &["show", &format!("{commit}:{path}")]);
        assert_eq!(&shown, body);
        git(store.path(), &["fsck", "--no-dangling"]);

        // Over the budget: only what fits is kept, the rest goes into a pack as it comes; of
        // those, which are not text is known without reading them back.
        let mut over = store.batch().keeping(100);
        let big: Vec<String> = (0..80).map(|i| format!("big {i}\n").repeat(20)).collect();
        let ids: Vec<ObjectId> = big
            .iter()
            .map(|b| over.write_blob(b.as_bytes()).unwrap())
            .collect();
        let binary = over.write_blob(&[0u8; 200]).unwrap();
        let small_binary = over.write_blob(b"\0").unwrap();
        let fresh = over.take_fresh();
        assert_eq!(fresh.len(), 1, "only the one-byte blob fits: {fresh:?}");
        assert!(fresh.not_text(&binary));
        assert!(!fresh.not_text(&small_binary), "kept: read from memory");
        assert!(ids.iter().all(|id| !fresh.not_text(id)), "text");
        assert!(
            over.spilled(),
            "a blob not kept is readable only once finished"
        );
        over.finish().unwrap();
        for (id, body) in ids.iter().zip(&big) {
            assert_eq!(store.read_blob(*id).unwrap(), body.as_bytes());
        }

        // Dropped unfinished: nothing is written.
        let packs = packs_in(&store);
        let mut dropped = store.batch().keeping(1 << 20);
        for i in 0..200 {
            dropped
                .write_blob(format!("dropped {i}\n").as_bytes())
                .unwrap();
        }
        let dropped_id = dropped.write_blob(b"dropped 0\n").unwrap();
        drop(dropped);
        assert_eq!(packs_in(&store), packs);
        assert!(!store.has_object(dropped_id));
    }

    /// Without packs (`[accel] pack = false`) a batch of many objects — held to the end, or
    /// past what a batch holds — is written loose, each object what the pack would hold:
    /// git reads every one, and no pack is made. Control: the same batch with packs makes one.
    #[test]
    fn without_packs_a_batch_writes_the_same_objects_loose() {
        let tmp = tempfile::tempdir().unwrap();
        let bodies: Vec<String> = (0..200).map(|i| format!("new file {i}\n")).collect();
        let big = vec![b'x'; ObjectBatch::HOLD_BYTES + 1];
        let write = |name: &str, packs: bool, keeping: bool| {
            let mut store = Store::open_or_init(&tmp.path().join(name)).unwrap();
            store.use_packs(packs);
            let mut batch = match keeping {
                true => store.batch().keeping(16 << 20),
                false => store.batch(),
            };
            let mut ids: Vec<ObjectId> = bodies
                .iter()
                .map(|b| batch.write_blob(b.as_bytes()).unwrap())
                .collect();
            if !keeping {
                ids.push(batch.write_blob(&big).unwrap());
            }
            batch.finish().unwrap();
            let loose = ids
                .iter()
                .filter(|id| loose_object_path(&store.path().join("objects"), **id).is_file())
                .count();
            git(store.path(), &["fsck", "--strict", "--no-dangling"]);
            for (id, body) in ids.iter().zip(&bodies) {
                assert_eq!(store.read_blob(*id).unwrap(), body.as_bytes());
            }
            (ids, loose, packs_in(&store).len())
        };
        for keeping in [true, false] {
            let (with, loose, packs) = write(&format!("packs-{keeping}.git"), true, keeping);
            assert_eq!((loose, packs), (0, 2), "control: one pack and its index");
            let (without, loose, packs) = write(&format!("loose-{keeping}.git"), false, keeping);
            assert_eq!(without, with);
            assert_eq!((loose, packs), (without.len(), 0), "keeping {keeping}");
        }
    }

    /// Released, the store's maps go; everything reads as before — through a handle taken
    /// before the release too — and new objects are written and read as ever.
    #[test]
    fn a_store_reads_and_writes_the_same_after_releasing_its_maps() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let mut batch = store.batch();
        let ids: Vec<ObjectId> = (0..200)
            .map(|i| batch.write_blob(format!("blob {i}\n").as_bytes()).unwrap())
            .collect();
        batch.finish().unwrap();
        assert_eq!(store.read_blob(ids[7]).unwrap(), b"blob 7\n");
        // Which of this store's pack files this process has mapped (Linux).
        let mapped = || -> Vec<String> {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
            let dir = store.path().join("objects/pack");
            let mut files: Vec<String> = maps
                .lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .filter(|p| p.starts_with(dir.to_str().unwrap()))
                .map(str::to_string)
                .collect();
            files.dedup();
            files
        };
        let on_linux = cfg!(target_os = "linux");
        assert_eq!(!mapped().is_empty(), on_linux, "read, the pack is mapped");
        let reader = store.reader();
        store.release_maps().unwrap();
        assert_eq!(reader.read_blob(ids[8]).unwrap(), b"blob 8\n");
        assert_eq!(
            !mapped().is_empty(),
            on_linux,
            "a handle in use keeps its maps"
        );
        drop(reader);
        assert_eq!(mapped(), Vec::<String>::new(), "released");
        assert_eq!(store.read_blob(ids[9]).unwrap(), b"blob 9\n");
        let later = store.write_blob(b"after the release\n").unwrap();
        store.release_maps().unwrap();
        assert_eq!(store.read_blob(later).unwrap(), b"after the release\n");
        // Released only after reading enough: 20 bytes so far, the maps stay.
        assert_eq!(store.read_blob(ids[10]).unwrap(), b"blob 10\n");
        assert!(!store.release_maps_after(100).unwrap());
        assert_eq!(!mapped().is_empty(), on_linux, "too little read to release");
        for id in &ids {
            store.read_blob(*id).unwrap();
        }
        assert!(store.release_maps_after(100).unwrap());
        assert_eq!(
            mapped(),
            Vec::<String>::new(),
            "released after reading 1.7 KB"
        );
        assert!(!store.release_maps_after(100).unwrap(), "counted anew");
        assert!(store.has_object(ids[199]));
        git(store.path(), &["fsck", "--no-dangling"]);
    }

    /// Past `PACK_AT` new blobs a batch writes one pack that git verifies and both git and this
    /// same open store read back; a small batch stays loose; an unfinished one leaves nothing.
    /// A few large new blobs — fewer than [`ObjectBatch::PACK_AT`], more bytes than a batch
    /// holds — go into a pack as they come, in a batch keeping contents past its budget as in
    /// one that keeps none: the batch never holds much more than
    /// [`ObjectBatch::HOLD_BYTES`] in memory (before, a 200 MiB publish held all of it until
    /// it finished).
    #[test]
    fn a_batch_of_a_few_large_blobs_streams_them_into_a_pack() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        const SIZE: usize = 2 << 20;
        let bodies: Vec<Vec<u8>> = (0..20u8)
            .map(|i| {
                let mut b = format!("blob {i}\0").into_bytes();
                b.resize(SIZE, i);
                b
            })
            .collect();
        for keeping in [Some(ObjectBatch::HOLD_BYTES), None] {
            let mut batch = match keeping {
                Some(budget) => store.batch().keeping(budget),
                None => store.batch(),
            };
            let mut most = 0;
            let mut ids = Vec::new();
            for (i, body) in bodies.iter().enumerate() {
                let mut body = body.clone();
                body.push(keeping.is_some() as u8);
                ids.push((batch.write_blob(&body).unwrap(), body));
                most = most.max(batch.held_bytes);
                assert!(
                    batch.held_bytes <= ObjectBatch::HOLD_BYTES + SIZE + 1,
                    "{keeping:?}: {} bytes held after {} blobs",
                    batch.held_bytes,
                    i + 1
                );
            }
            assert!(batch.pack.is_some(), "{keeping:?}: the pack was started");
            // Positive control: the bound was reached, so the check above could fail.
            assert!(most > ObjectBatch::HOLD_BYTES / 2, "{keeping:?}: {most}");
            assert_eq!(batch.spilled(), keeping.is_some());
            batch.finish().unwrap();
            for (id, body) in &ids {
                assert_eq!(&store.read_blob(*id).unwrap(), body);
            }
        }
        git(store.path(), &["fsck", "--no-dangling"]);
    }

    #[test]
    fn a_big_batch_of_blobs_is_one_pack_git_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        // Read something first, so the store has loaded its (empty) set of packs.
        let early = store.write_blob(b"early\n").unwrap();
        assert_eq!(store.read_blob(early).unwrap(), b"early\n");

        let n = ObjectBatch::PACK_AT * 3;
        let bodies: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("blob {i}\n").repeat(i % 50 + 1).into_bytes())
            .collect();
        let mut batch = store.batch();
        let mut ids = Vec::new();
        for body in &bodies {
            ids.push(batch.write_blob(body).unwrap());
        }
        // A repeat and a blob the store has cost nothing.
        assert_eq!(batch.write_blob(&bodies[0]).unwrap(), ids[0]);
        assert_eq!(batch.write_blob(b"early\n").unwrap(), early);
        batch.finish().unwrap();

        let packs = packs_in(&store);
        assert_eq!(packs.len(), 2, "one .pack and its .idx: {packs:?}");
        assert!(packs[0].ends_with(".idx") && packs[1].ends_with(".pack"));
        let pack = store.path().join("objects/pack").join(&packs[1]);
        let verified = git(store.path(), &["verify-pack", "-v", pack.to_str().unwrap()]);
        assert_eq!(verified.lines().filter(|l| l.contains(" blob ")).count(), n);
        for (id, body) in ids.iter().zip(&bodies).step_by(37) {
            assert_eq!(blob_id(body), *id);
            assert_eq!(&store.read_blob(*id).unwrap(), body);
            assert_eq!(
                git(store.path(), &["cat-file", "blob", &id.to_string()]).as_bytes(),
                &body[..]
            );
        }
        // Not loose: only the early blob is.
        let loose = |id: &ObjectId| {
            let hex = id.to_string();
            store
                .path()
                .join("objects")
                .join(&hex[..2])
                .join(&hex[2..])
                .exists()
        };
        assert!(loose(&early) && !ids.iter().any(loose));

        // A small batch is written loose; an unfinished big one writes nothing.
        let mut small = store.batch();
        let few = small.write_blob(b"few\n").unwrap();
        small.finish().unwrap();
        assert!(loose(&few));
        let mut dropped = store.batch();
        for i in 0..n {
            dropped
                .write_blob(format!("dropped {i}\n").as_bytes())
                .unwrap();
        }
        drop(dropped);
        assert_eq!(
            packs_in(&store),
            packs,
            "no pack and no temporary file left"
        );
        git(store.path(), &["fsck", "--no-dangling"]);
    }

    #[test]
    fn copied_commits_bring_everything_they_need() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let (tree, _) = sample_tree(&store);
        let tree_id = store.write_tree(&tree).unwrap();
        let commit = store.commit(tree_id, &[], "base").unwrap();
        // Mirroring into another repository copies the commit with everything it needs.
        let other = Store::open_or_init(&tmp.path().join("other.git")).unwrap();
        let child = store.commit(tree_id, &[commit], "child").unwrap();
        store.copy_commit_into(&other, child).unwrap();
        other.set_ref("refs/hunkgate/runs/x/head", child).unwrap();
        git(other.path(), &["fsck", "--strict", "--no-dangling"]);
        assert_eq!(other.read_tree(child).unwrap(), tree);
    }
}

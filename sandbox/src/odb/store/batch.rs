//! Batches of new objects: held in memory and written loose, or streamed into one pack;
//! what a batch kept of its new blobs; reading blobs through one opened repository.

use super::*;

impl Store {
    /// A compressor from those kept, or a new one ([`crate::odb::pack::new_deflate`]).
    pub(super) fn take_deflate(&self) -> flate2::write::ZlibEncoder<Vec<u8>> {
        self.deflate
            .lock()
            .ok()
            .and_then(|mut d| d.pop())
            .unwrap_or_else(crate::odb::pack::new_deflate)
    }

    /// Keep a compressor that finished its last stream (at most one per I/O thread).
    pub(super) fn give_deflate(&self, z: flate2::write::ZlibEncoder<Vec<u8>>) {
        if let Ok(mut d) = self.deflate.lock() {
            if d.len() < crate::threads::io_threads() {
                d.push(z);
            }
        }
    }

    /// Compress `all` into pack entries — on a few threads when they are many bytes — and
    /// write them as one pack made in memory ([`crate::odb::pack::WholePack`]); returns the pack's
    /// path.
    pub(super) fn write_whole_pack(&self, objects: &[HeldObject]) -> Result<PathBuf, StoreError> {
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
    pub(super) fn pack_dir(&self) -> PathBuf {
        self.repo
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .git_dir()
            .join("objects")
            .join("pack")
    }

    /// A pack in [`Store::pack_dir`], fsynced when finished unless the store is a scratch
    /// one.
    pub(super) fn start_pack(&self) -> Result<crate::odb::pack::PackWriter, StoreError> {
        let dir = self.pack_dir();
        let pack = if self.durable {
            crate::odb::pack::PackWriter::new(&dir)
        } else {
            crate::odb::pack::PackWriter::scratch(&dir)
        };
        pack.map_err(|e| self.err(format!("starting a pack: {e}")))
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
    pub(super) store: &'s Store,
    /// Objects not yet in the pack (or to be written loose), in the order they came.
    pub(super) held: Vec<HeldObject>,
    pub(super) held_bytes: usize,
    pub(super) pack: Option<crate::odb::pack::PackWriter>,
    pub(super) ids: std::collections::HashSet<ObjectId>,
    pub(super) fresh: Option<Fresh>,
    /// Where a tree is encoded to be hashed (copied only if it is new).
    pub(super) buf: Vec<u8>,
    /// The bytes of new blobs taken, against [`ObjectBatch::limit_new_blob_bytes`].
    pub(super) new_blob_bytes: crate::supervise::limits::Tally,
    /// A new blob was not kept (a batch [`ObjectBatch::keeping`] contents, past its budget):
    /// it is readable from the store only once the batch is finished.
    pub(super) spilled: bool,
}

/// An object's id and its pack entry ([`crate::odb::pack::deflate_entry`]).
pub(super) type PackEntry = (ObjectId, Vec<u8>);

/// An object an [`ObjectBatch`] holds: its kind, id and content.
pub(super) type HeldObject = (gix::objs::Kind, ObjectId, std::sync::Arc<Vec<u8>>);

/// Blob contents an [`ObjectBatch`] kept in memory as it was given them, by id.
#[derive(Default, Clone)]
pub struct Fresh {
    pub(super) blobs: std::collections::HashMap<ObjectId, std::sync::Arc<Vec<u8>>>,
    pub(super) bytes: usize,
    pub(super) budget: usize,
    /// The blobs past the budget that are not text ([`hunkgate_patch::is_text`]): what a diff
    /// needs to know of them without reading them back from the store (a publish of hundreds
    /// of megabytes of binary files would otherwise map the whole pack into memory again).
    pub(super) not_text: std::collections::HashSet<ObjectId>,
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
    pub(super) fn add_tree(&mut self, tree: &gix::objs::Tree) -> Result<ObjectId, StoreError> {
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
    pub(super) fn add(
        &mut self,
        kind: gix::objs::Kind,
        bytes: &[u8],
    ) -> Result<ObjectId, StoreError> {
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
    pub(super) store: &'s Store,
    pub(super) repo: gix::Repository,
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
pub(super) fn deflate_entries(
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
pub(super) fn pack_kind(kind: gix::objs::Kind) -> u8 {
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
pub(super) fn index_v2(
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

//! Writing many objects (blobs, trees) as one git pack (version 2, no deltas) with its
//! version-2 index.
//!
//! A first snapshot of a 10,000-file checkout would otherwise create 10,000 loose objects: on
//! ext4 each is an inode allocation, and that, not hashing or compression, was most of a first
//! run. A pack is two files. The format is git's own (`Documentation/gitformat-pack.txt`); the
//! tests check every pack with `git verify-pack` and read it back through gix.
//!
//! The pack is written to a temporary file in `objects/pack`, fsynced, and renamed into place
//! before its index (git's order: a pack is used only once its `.idx` exists), so a crash
//! leaves at most an unused temporary file, never a pack that readers would trip over.
//!
//! **Layer:** a leaf: imports nothing of the crate.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gix::hash::ObjectId;

/// Git's object type number for a commit in a pack entry header.
pub const OBJ_COMMIT: u8 = 1;
/// Git's object type number for a tree in a pack entry header.
pub const OBJ_TREE: u8 = 2;
/// Git's object type number for a blob in a pack entry header.
pub const OBJ_BLOB: u8 = 3;
/// Git's object type number for an annotated tag in a pack entry header.
pub const OBJ_TAG: u8 = 4;

/// A pack being written: entries appended one by one, finished into `pack-<sha>.{pack,idx}`.
pub struct PackWriter {
    dir: PathBuf,
    file: tempfile::NamedTempFile,
    /// Each entry's id, offset in the pack and CRC-32 of its bytes there.
    entries: Vec<(ObjectId, u64, u32)>,
    offset: u64,
    /// One compressor for every entry: a fresh one per blob spent most of the time
    /// allocating and clearing its tables.
    deflate: flate2::write::ZlibEncoder<Vec<u8>>,
    /// Entries not yet written to the file (written a megabyte at a time).
    pending: Vec<u8>,
    /// Whether `finish` fsyncs the pack, its index and the directory (not for a sandbox's
    /// scratch repository, which a crash may lose).
    durable: bool,
}

impl PackWriter {
    /// Start a pack in `pack_dir` (a repository's `objects/pack`, created if missing).
    pub fn new(pack_dir: &Path) -> std::io::Result<Self> {
        Self::start(pack_dir, true)
    }

    /// [`PackWriter::new`] for a scratch repository: nothing is fsynced.
    pub fn scratch(pack_dir: &Path) -> std::io::Result<Self> {
        Self::start(pack_dir, false)
    }

    fn start(pack_dir: &Path, durable: bool) -> std::io::Result<Self> {
        std::fs::create_dir_all(pack_dir)?;
        let mut file = tempfile::Builder::new()
            .prefix("tmp_pack_")
            .tempfile_in(pack_dir)?;
        // The object count is filled in by `finish`.
        file.write_all(b"PACK\0\0\0\x02\0\0\0\0")?;
        Ok(Self {
            dir: pack_dir.to_path_buf(),
            file,
            entries: Vec::new(),
            offset: 12,
            deflate: new_deflate(),
            pending: Vec::new(),
            durable,
        })
    }

    /// Append the blob `bytes`, whose id is `oid`.
    pub fn add_blob(&mut self, oid: ObjectId, bytes: &[u8]) -> std::io::Result<()> {
        self.add(OBJ_BLOB, oid, bytes)
    }

    /// Append an object of git's pack type `kind` ([`OBJ_BLOB`], [`OBJ_TREE`]) whose content
    /// (without git's `<type> <size>` header) is `bytes` and whose id is `oid`.
    pub fn add(&mut self, kind: u8, oid: ObjectId, bytes: &[u8]) -> std::io::Result<()> {
        let entry = deflate_entry(kind, bytes, &mut self.deflate)?;
        self.pending.extend_from_slice(&entry);
        if self.pending.len() >= 1 << 20 {
            self.file.write_all(&self.pending)?;
            self.pending.clear();
        }
        self.entries
            .push((oid, self.offset, crc32fast::hash(&entry)));
        self.offset += entry.len() as u64;
        Ok(())
    }

    /// How many objects were added.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Write the count and the trailer, then the index, and move both into place; returns the
    /// pack's path.
    pub fn finish(mut self) -> std::io::Result<PathBuf> {
        let count = u32::try_from(self.entries.len())
            .map_err(|_| std::io::Error::other("more than 2^32 objects in one pack"))?;
        let file = self.file.as_file_mut();
        file.write_all(&self.pending)?;
        file.seek(SeekFrom::Start(8))?;
        file.write_all(&count.to_be_bytes())?;
        file.seek(SeekFrom::Start(0))?;
        let mut hasher = sha1::Sha1::default();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            sha1::Digest::update(&mut hasher, &buf[..n]);
        }
        let checksum = trailer_of(hasher);
        file.seek(SeekFrom::End(0))?;
        file.write_all(checksum.as_bytes())?;
        if self.durable {
            file.sync_all()?;
        }

        let index = index_v2(&mut self.entries, checksum)?;
        let mut idx = tempfile::Builder::new()
            .prefix("tmp_idx_")
            .tempfile_in(&self.dir)?;
        idx.write_all(&index)?;
        if self.durable {
            idx.as_file().sync_all()?;
        }

        let name = format!("pack-{}", checksum.to_hex());
        let pack_path = self.dir.join(format!("{name}.pack"));
        self.file.persist(&pack_path).map_err(|e| e.error)?;
        idx.persist(self.dir.join(format!("{name}.idx")))
            .map_err(|e| e.error)?;
        if self.durable {
            std::fs::File::open(&self.dir)?.sync_all()?;
        }
        Ok(pack_path)
    }
}

/// One object's pack entry: its header and its zlib stream, made with `deflate` (ready for
/// the next entry afterwards). Entries are independent of each other, so a pack's can be
/// made on several threads and put together in any order ([`WholePack::of`]).
///
/// A tree is stored rather than compressed ([`stored_zlib`]): it is mostly object ids, which
/// do not compress — a 100-entry tree shrinks by about a tenth — and compressing trees took
/// twice as long as compressing the new files of the same publish.
pub fn deflate_entry(
    kind: u8,
    bytes: &[u8],
    deflate: &mut flate2::write::ZlibEncoder<Vec<u8>>,
) -> std::io::Result<Vec<u8>> {
    let mut entry = entry_header(kind, bytes.len() as u64);
    if kind == OBJ_TREE {
        stored_zlib(bytes, &mut entry);
        return Ok(entry);
    }
    deflate.write_all(bytes)?;
    // Finishes this entry's zlib stream and starts the next one's.
    entry.extend_from_slice(&deflate.reset(Vec::new())?);
    Ok(entry)
}

/// Append `bytes` as a zlib stream (RFC 1950) of stored deflate blocks (RFC 1951, `BTYPE`
/// 00): at most 65,535 bytes each, the last one marked final, then the Adler-32 of `bytes`.
pub fn stored_zlib(bytes: &[u8], out: &mut Vec<u8>) {
    stored_zlib_of(&[bytes], out);
}

/// [`stored_zlib`] of `parts` one after another, without joining them first (a loose
/// object's header and its content).
pub fn stored_zlib_of(parts: &[&[u8]], out: &mut Vec<u8>) {
    /// Deflate, 32 KiB window, fastest level; `0x7801` is a multiple of 31 as zlib requires.
    const HEADER: [u8; 2] = [0x78, 0x01];
    const BLOCK: usize = u16::MAX as usize;
    let total: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(total + total / BLOCK * 5 + 11);
    out.extend_from_slice(&HEADER);
    let mut adler = adler2::Adler32::new();
    let mut parts = parts.iter().copied();
    let mut part: &[u8] = &[];
    let mut left = total;
    loop {
        let len = left.min(BLOCK);
        left -= len;
        out.push(u8::from(left == 0));
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&(!(len as u16)).to_le_bytes());
        let mut need = len;
        while need > 0 {
            if part.is_empty() {
                match parts.next() {
                    Some(next) => part = next,
                    None => break,
                }
                continue;
            }
            let (now, later) = part.split_at(need.min(part.len()));
            out.extend_from_slice(now);
            adler.write_slice(now);
            need -= now.len();
            part = later;
        }
        if left == 0 {
            break;
        }
    }
    out.extend_from_slice(&adler.checksum().to_be_bytes());
}

/// The compressor [`deflate_entry`] is given: zlib at its fastest level.
pub fn new_deflate() -> flate2::write::ZlibEncoder<Vec<u8>> {
    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast())
}

/// A pack made whole in memory, with its index: for a pack small enough to hold, which is
/// then written as two files in one go — no temporary file to make, no reading it back to
/// hash it.
pub struct WholePack {
    /// The pack's file name without its extension (`pack-<checksum>`).
    pub name: String,
    pub pack: Vec<u8>,
    pub index: Vec<u8>,
}

impl WholePack {
    /// The pack of `entries` (each an object's id and its [`deflate_entry`]), in that order.
    pub fn of(entries: &[(ObjectId, Vec<u8>)]) -> std::io::Result<Self> {
        let count = u32::try_from(entries.len())
            .map_err(|_| std::io::Error::other("more than 2^32 objects in one pack"))?;
        let size: usize = entries.iter().map(|(_, e)| e.len()).sum();
        let mut pack = Vec::with_capacity(12 + size + 20);
        pack.extend_from_slice(b"PACK\0\0\0\x02");
        pack.extend_from_slice(&count.to_be_bytes());
        let mut located = Vec::with_capacity(entries.len());
        for (oid, entry) in entries {
            located.push((*oid, pack.len() as u64, crc32fast::hash(entry)));
            pack.extend_from_slice(entry);
        }
        let checksum = checksum(&pack);
        pack.extend_from_slice(checksum.as_bytes());
        let index = index_v2(&mut located, checksum)?;
        Ok(Self {
            name: format!("pack-{}", checksum.to_hex()),
            pack,
            index,
        })
    }

    /// Put the pack into `pack_dir` (created if missing): the pack, then its index (git's
    /// order: a pack is used only once its `.idx` exists), each written whole by `write` to
    /// the path it is given and durable when `write` makes it so; then, if `durable`, the
    /// directory is fsynced. Returns the pack's path.
    pub fn place(
        &self,
        pack_dir: &Path,
        durable: bool,
        mut write: impl FnMut(&Path, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(pack_dir)?;
        let pack_path = pack_dir.join(format!("{}.pack", self.name));
        write(&pack_path, &self.pack)?;
        write(&pack_dir.join(format!("{}.idx", self.name)), &self.index)?;
        if durable {
            std::fs::File::open(pack_dir)?.sync_all()?;
        }
        Ok(pack_path)
    }
}

/// Write `bytes` as the file `dest` (replacing it) by way of a temporary file beside it,
/// read-only as git makes its pack files, fsynced first if `durable` — [`WholePack::place`]'s
/// writer.
pub fn write_file_via_temp(dest: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = dest
        .parent()
        .ok_or_else(|| std::io::Error::other("a pack file's path has no directory"))?;
    let mut file = tempfile::Builder::new().prefix("tmp_").tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))?;
    if durable {
        file.as_file().sync_all()?;
    }
    file.persist(dest).map_err(|e| e.error)?;
    Ok(())
}

/// A pack entry's header: the type and the inflated size, 4 bits in the first byte and 7 in
/// each next one, least significant first, the high bit saying another byte follows.
fn entry_header(kind: u8, mut size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    let mut byte = (kind << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size > 0 {
        out.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(byte);
    out
}

/// The version-2 index of a pack whose entries are `entries` and whose checksum is
/// `pack_checksum`: fan-out table, sorted ids, CRC-32s, offsets (64-bit ones in a table of
/// their own), the pack's checksum and the index's own.
fn index_v2(
    entries: &mut [(ObjectId, u64, u32)],
    pack_checksum: ObjectId,
) -> std::io::Result<Vec<u8>> {
    entries.sort_by_key(|e| e.0);
    let mut out = Vec::with_capacity(1072 + entries.len() * 28);
    out.extend_from_slice(b"\xfftOc\0\0\0\x02");
    let mut fanout = [0u32; 256];
    for (oid, _, _) in entries.iter() {
        fanout[oid.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for n in fanout {
        total += n;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (oid, _, _) in entries.iter() {
        out.extend_from_slice(oid.as_bytes());
    }
    for (_, _, crc) in entries.iter() {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, offset, _) in entries.iter() {
        let small = match u32::try_from(*offset) {
            Ok(o) if o < 0x8000_0000 => o,
            _ => {
                let i = u32::try_from(large.len())
                    .map_err(|_| std::io::Error::other("too many large offsets"))?;
                large.push(*offset);
                0x8000_0000 | i
            }
        };
        out.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum.as_bytes());
    let own = checksum(&out);
    out.extend_from_slice(own.as_bytes());
    Ok(out)
}

/// The SHA-1 of `data` as a file's trailing checksum (a pack's, a pack index's, a git
/// index's): plain SHA-1, without the collision detection that object ids are hashed with.
/// A trailer only tells a torn or corrupted file from a whole one, and nothing is looked up
/// by it, so a crafted collision gains nothing; git itself hashes these with its faster
/// "unsafe" SHA-1 since 2.48. Several times faster than the detecting hash, which took
/// half a millisecond over a 1,000-hunk publish's pack.
pub fn checksum(data: &[u8]) -> ObjectId {
    let mut hasher = sha1::Sha1::default();
    sha1::Digest::update(&mut hasher, data);
    trailer_of(hasher)
}

fn trailer_of(hasher: sha1::Sha1) -> ObjectId {
    let digest: [u8; 20] = sha1::Digest::finalize(hasher).into();
    ObjectId::from_bytes_or_panic(&digest)
}

#[cfg(test)]
mod tests;

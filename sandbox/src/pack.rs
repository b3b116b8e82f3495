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

/// Git's object type number for a tree in a pack entry header.
pub const OBJ_TREE: u8 = 2;
/// Git's object type number for a blob in a pack entry header.
pub const OBJ_BLOB: u8 = 3;

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
            deflate: flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast()),
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
        let header = entry_header(kind, bytes.len() as u64);
        self.deflate.write_all(bytes)?;
        // Finishes this entry's zlib stream and starts the next one's.
        let data = self.deflate.reset(Vec::new())?;
        self.pending.extend_from_slice(&header);
        self.pending.extend_from_slice(&data);
        if self.pending.len() >= 1 << 20 {
            self.file.write_all(&self.pending)?;
            self.pending.clear();
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header);
        crc.update(&data);
        self.entries.push((oid, self.offset, crc.finalize()));
        self.offset += (header.len() + data.len()) as u64;
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
        let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let checksum = hasher.try_finalize().map_err(std::io::Error::other)?;
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
    let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
    hasher.update(&out);
    let own = hasher.try_finalize().map_err(std::io::Error::other)?;
    out.extend_from_slice(own.as_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_headers_are_gits_varint() {
        // Type 3, size 5: one byte. Size 16 needs a second byte (16 >> 4 = 1).
        assert_eq!(entry_header(3, 5), vec![0x35]);
        assert_eq!(entry_header(3, 16), vec![0xb0, 0x01]);
        assert_eq!(entry_header(3, 0x7ff), vec![0xbf, 0x7f]);
        assert_eq!(entry_header(3, 0x800), vec![0xb0, 0x80, 0x01]);
    }

    #[test]
    fn large_offsets_go_to_the_64_bit_table() {
        let a = ObjectId::from_hex(b"0000000000000000000000000000000000000001").unwrap();
        let b = ObjectId::from_hex(b"ff00000000000000000000000000000000000002").unwrap();
        let mut entries = vec![(b, 5u64 << 32, 7), (a, 12, 9)];
        let idx = index_v2(&mut entries, ObjectId::null(gix::hash::Kind::Sha1)).unwrap();
        let offsets_at = 8 + 1024 + 2 * 20 + 2 * 4;
        let word = |at: usize| u32::from_be_bytes(idx[at..at + 4].try_into().unwrap());
        assert_eq!(
            word(8 + 4 * 255),
            2,
            "the last fan-out entry counts every object"
        );
        assert_eq!(word(offsets_at), 12);
        assert_eq!(word(offsets_at + 4), 0x8000_0000);
        let big = u64::from_be_bytes(idx[offsets_at + 8..offsets_at + 16].try_into().unwrap());
        assert_eq!(big, 5 << 32);
        assert_eq!(idx.len(), offsets_at + 8 + 8 + 40);
    }
}

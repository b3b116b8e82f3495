//! Stat data and the snapshot stat cache (git's index idea).
//!
//! A checkout snapshot reads, hashes and stores only the files that are new or changed since
//! the last one: the cache maps `path -> (mtime, ctime, size, inode, mode) -> blob id`, and a
//! file whose `lstat` still matches its entry is taken from the cache without being opened.
//!
//! Git's racy-timestamp rule applies: an entry whose mtime or ctime is not strictly older than
//! the cache file's own mtime (its *stamp*, taken from the same filesystem clock) may have been
//! written again in the same clock tick after it was hashed, keeping every stat field; it is
//! re-hashed. On a filesystem with whole-second timestamps, a second of slack is added.
//!
//! The cache is a hint, never trusted blindly: a file that is missing, torn, corrupt (its
//! SHA-256 trailer does not match), from another repository or store, or that names a blob the
//! store does not have, is ignored and rebuilt. It is written atomically (temp + rename); a
//! crash loses at most the cache, which the next snapshot rebuilds.
//!
//! **Layer:** imports [`crate::wire`] (the stat record type), [`crate::odb::store`] and nothing else
//! of the crate.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use gix::hash::ObjectId;
use sha2::{Digest, Sha256};

use crate::odb::store::{Entry, Mode, Store};
use crate::wire::FileStat;

/// The stat fields change detection compares, from a raw `lstat`/`fstat`.
// The casts are no-ops on Linux but not on macOS (`st_mode` is u16 there, for one).
#[allow(clippy::unnecessary_cast)]
pub fn file_stat(st: &nix::sys::stat::FileStat) -> FileStat {
    FileStat {
        mtime_s: st.st_mtime as i64,
        mtime_ns: st.st_mtime_nsec as u32,
        ctime_s: st.st_ctime as i64,
        ctime_ns: st.st_ctime_nsec as u32,
        size: st.st_size as u64,
        ino: st.st_ino as u64,
        mode: st.st_mode as u32,
    }
}

/// A point on a filesystem's clock: (seconds, nanoseconds).
pub type Stamp = (i64, u32);

/// The mtime of `path` as a [`Stamp`] (None when it cannot be read).
pub fn mtime_of(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.mtime(), m.mtime_nsec() as u32))
}

/// Git's racy rule: `stat` cannot be trusted to stand for the content it was recorded with if
/// its mtime or ctime is not strictly older than `stamp` (the time the record was made).
/// Timestamps without a sub-second part (a coarse filesystem) get a second of slack.
pub fn is_racy(stat: &FileStat, stamp: Stamp) -> bool {
    let coarse = stat.mtime_ns == 0 && stat.ctime_ns == 0;
    [(stat.mtime_s, stat.mtime_ns), (stat.ctime_s, stat.ctime_ns)]
        .into_iter()
        .any(|t| {
            if coarse {
                t.0 + 1 >= stamp.0
            } else {
                t >= stamp
            }
        })
}

/// The cache, as loaded (entries to trust) and as being rebuilt (entries seen this time).
#[derive(Debug)]
pub struct StatCache {
    path: PathBuf,
    key: Vec<u8>,
    stamp: Option<Stamp>,
    old: HashMap<String, (FileStat, Entry)>,
    new: Vec<(String, FileStat, Entry)>,
    hits: std::cell::Cell<usize>,
    /// Why the cache file was not used, when it was not.
    pub ignored: Option<String>,
}

const MAGIC: &[u8; 8] = b"HGSTAT01";
const TRAILER: usize = 32;

impl StatCache {
    /// Load the cache at `path` for snapshots of `repo_root` into `store`. Anything wrong with
    /// the file makes an empty cache (reported in [`StatCache::ignored`]), never an error.
    pub fn load(path: &Path, repo_root: &Path, store: &Store) -> Self {
        let key = format!("{}\0{}", repo_root.display(), store.path().display()).into_bytes();
        let mut cache = Self {
            path: path.to_path_buf(),
            key,
            stamp: None,
            old: HashMap::new(),
            new: Vec::new(),
            hits: Default::default(),
            ignored: None,
        };
        match std::fs::read(path) {
            Ok(bytes) => match cache.parse(&bytes) {
                Ok(entries) => {
                    cache.stamp = mtime_of(path);
                    cache.old = entries;
                }
                Err(why) => {
                    tracing::warn!(cache = %path.display(), "ignoring the snapshot stat cache: {why}; rebuilding it");
                    cache.ignored = Some(why);
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => cache.ignored = Some(e.to_string()),
        }
        cache
    }

    fn parse(&self, bytes: &[u8]) -> Result<HashMap<String, (FileStat, Entry)>, String> {
        if bytes.len() < MAGIC.len() + TRAILER || &bytes[..MAGIC.len()] != MAGIC {
            return Err("not a hunkgate stat cache (bad magic)".into());
        }
        let (body, trailer) = bytes.split_at(bytes.len() - TRAILER);
        if Sha256::digest(body).as_slice() != trailer {
            return Err("checksum mismatch (torn or corrupt)".into());
        }
        let mut r = Reader(&body[MAGIC.len()..]);
        let key = r.bytes()?;
        if key != self.key {
            return Err("written for another repository or store".into());
        }
        let count = r.u64()? as usize;
        let mut out = HashMap::with_capacity(count.min(1 << 20));
        for _ in 0..count {
            let path = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| "a path is not UTF-8")?;
            let stat = FileStat {
                mtime_s: r.u64()? as i64,
                mtime_ns: r.u32()?,
                ctime_s: r.u64()? as i64,
                ctime_ns: r.u32()?,
                size: r.u64()?,
                ino: r.u64()?,
                mode: r.u32()?,
            };
            let mode = match r.take(1)?[0] {
                b'f' => Mode::File,
                b'x' => Mode::Executable,
                b'l' => Mode::Symlink,
                other => return Err(format!("unknown entry mode {other}")),
            };
            let oid = ObjectId::try_from(r.bytes()?).map_err(|e| format!("bad object id: {e}"))?;
            out.insert(path, (stat, Entry { mode, oid }));
        }
        if !r.0.is_empty() {
            return Err("trailing bytes".into());
        }
        Ok(out)
    }

    /// The blob recorded for `path` if its current `stat` matches the entry exactly, the entry
    /// is not racy, and the store really has the blob. Remembered for the next cache either way
    /// only through [`StatCache::record`].
    pub fn lookup(&self, path: &str, stat: &FileStat, store: &Store) -> Option<Entry> {
        let stamp = self.stamp?;
        let (cached, entry) = self.old.get(path)?;
        if cached != stat || is_racy(cached, stamp) || !store.has_object(entry.oid) {
            return None;
        }
        self.hits.set(self.hits.get() + 1);
        Some(*entry)
    }

    /// How many lookups this cache answered (files taken without being read).
    pub fn hits(&self) -> usize {
        self.hits.get()
    }

    /// How many entries the loaded cache file held.
    pub fn loaded(&self) -> usize {
        self.old.len()
    }

    /// Remember that `path` with `stat` holds `entry` (for the cache written next).
    pub fn record(&mut self, path: &str, stat: FileStat, entry: Entry) {
        self.new.push((path.to_string(), stat, entry));
    }

    /// Write what was recorded as the new cache, atomically (temp file, then rename). The
    /// temp file's mtime, set by its last write, becomes the new cache's stamp.
    pub fn save(&self) -> std::io::Result<()> {
        let mut body = Vec::with_capacity(64 + self.new.len() * 96);
        body.extend_from_slice(MAGIC);
        put_bytes(&mut body, &self.key);
        body.extend_from_slice(&(self.new.len() as u64).to_be_bytes());
        for (path, st, entry) in &self.new {
            put_bytes(&mut body, path.as_bytes());
            body.extend_from_slice(&(st.mtime_s as u64).to_be_bytes());
            body.extend_from_slice(&st.mtime_ns.to_be_bytes());
            body.extend_from_slice(&(st.ctime_s as u64).to_be_bytes());
            body.extend_from_slice(&st.ctime_ns.to_be_bytes());
            body.extend_from_slice(&st.size.to_be_bytes());
            body.extend_from_slice(&st.ino.to_be_bytes());
            body.extend_from_slice(&st.mode.to_be_bytes());
            body.push(match entry.mode {
                Mode::File => b'f',
                Mode::Executable => b'x',
                Mode::Symlink => b'l',
            });
            put_bytes(&mut body, entry.oid.as_bytes());
        }
        let digest = Sha256::digest(&body);
        body.extend_from_slice(&digest);
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".{}.{}",
            self.path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("stat-cache"),
            crate::fs::beneath::temp_name()
        ));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&body)?;
            drop(f);
            std::fs::rename(&tmp, &self.path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().map_err(|_| "truncated")?,
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().map_err(|_| "truncated")?,
        ))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

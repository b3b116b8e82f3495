//! Capturing candidate paths as data: each read (on threads, in rounds bounded by bytes and
//! paths), checked against what is known of it, and stored; the read-back's check of a path
//! against its sync record.

use super::*;

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
pub(super) const ROUND_BYTES: u64 = 16 << 20;
/// The most paths in one round of [`capture_each`].
pub(super) const ROUND_PATHS: usize = 1024;
/// A round with fewer reads per thread than this is read on the calling thread (a thread
/// costs tens of microseconds to start; reading a small file, a few).
pub(super) const READS_PER_THREAD: usize = 16;

/// Make the reads of one round of [`capture_each`] and hand everything to `sink`, in order.
pub(super) fn finish_round<E>(
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
pub(super) enum Plan {
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
pub(super) fn plan_one(
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
pub(super) struct ReadEntry {
    pub(super) bytes: Vec<u8>,
    pub(super) mode: Mode,
    /// For a file, its stat taken on the open file; for a symlink, its `lstat`.
    pub(super) stat: FileStat,
}

/// Read the file (up to `cap` bytes) or symlink at `path`, whose `lstat` is `st`; `None` if it
/// vanished.
pub(super) fn read_entry(
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
pub(super) fn captured_from(path: String, how: Check, read: ReadEntry, hash: bool) -> Captured {
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
pub(super) fn capture(
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
pub(super) const SPARSE_RECORD: usize = 64;

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
pub(super) fn seek<'a, V>(
    it: &mut std::iter::Peekable<impl Iterator<Item = (&'a String, V)>>,
    path: &str,
) -> Option<V> {
    while it.next_if(|(p, _)| p.as_str() < path).is_some() {}
    it.next_if(|(p, _)| p.as_str() == path).map(|(_, v)| v)
}

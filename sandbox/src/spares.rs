//! Empty files made ahead of need, so that a write on a waiting path gets its file without
//! making one.
//!
//! Making a file allocates an inode, and on some filesystems and disks that is the slow part
//! of writing a small file: on ext4 on a virtual disk it takes 0.15–0.6 ms where writing and
//! renaming the file takes tens of microseconds. A publish writes a few small loose objects
//! (a blob, the trees above it, a commit), one after the other, or a pack and its index made
//! in memory, while a client waits for the suggestion. So the store keeps a few files made at
//! a quiet moment — after a publish, once a run's agent has started — and a write takes one,
//! fills it (and fsyncs it, for a pack: [`Spares::write_synced_as`]) and renames it into
//! place (the technique of databases that recycle their log files instead of creating new
//! ones).
//!
//! A decision writes the file it makes as a loose object too, while its client waits for the
//! answer. So after a run (and at start) the store makes as many spares as hunks wait for
//! review, up to a cap, on a thread at idle priority ([`Spares::stock_in_background`]); and
//! when decisions have used half of what it keeps, such a thread makes them again
//! ([`Spares::refill_in_background`]). A reviewer who
//! decides hunk by hunk leaves that thread seconds between decisions; a client that sends
//! decisions back to back may see one of them wait for it.
//!
//! Each spare is made empty with `O_CREAT | O_EXCL` (owner only), in a directory of its own
//! beside the files it becomes (a rename stays on one filesystem), and closed: no descriptor
//! is held, so nothing keeps the filesystem from being remounted read-only. Taking one opens
//! it again (`O_NOFOLLOW`, never through a symlink; an existing inode, so nothing is
//! allocated), writes it, gives it its final mode and renames it. The directory is the hub's
//! alone, like the store it is in; files a stopped process left there are removed when it is
//! opened again.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The spare files of one directory.
pub struct Spares {
    dir: PathBuf,
    /// Made and not yet taken.
    free: Mutex<Vec<PathBuf>>,
    /// How many files [`Spares::refill`] keeps ready.
    keep: usize,
    /// Names made so far (with the process id, each name is new).
    made: AtomicU64,
    /// The mode each file gets once written.
    mode: u32,
    /// Whether a [`Spares::refill_in_background`] thread is at work.
    refilling: AtomicBool,
}

impl Spares {
    /// Spares in `dir` (made if missing, owner only) that become files of `mode`, `keep` of
    /// them once [`Spares::refill`] has run. Whatever `dir` holds from before is removed.
    pub fn open(dir: &Path, keep: usize, mode: u32) -> std::io::Result<Self> {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            free: Mutex::new(Vec::new()),
            keep,
            made: AtomicU64::new(0),
            mode,
            refilling: AtomicBool::new(false),
        })
    }

    /// Make files until [`Spares::open`]'s `keep` are ready; returns how many were made.
    pub fn refill(&self) -> std::io::Result<usize> {
        self.refill_to(self.keep)
    }

    /// Make files until `target` (or `keep`, if more) are ready: a stock for writes that are
    /// expected to come in a row, such as the decisions on the hunks a run just published.
    pub fn refill_to(&self, target: usize) -> std::io::Result<usize> {
        let target = target.max(self.keep);
        let mut made = 0;
        loop {
            let missing = self
                .free
                .lock()
                .map_or(0, |f| target.saturating_sub(f.len()));
            if missing == 0 {
                return Ok(made);
            }
            // Made outside the lock: a write taking a spare meanwhile does not wait for this.
            let mut new = Vec::with_capacity(missing);
            for _ in 0..missing {
                let n = self.made.fetch_add(1, Ordering::Relaxed);
                let path = self.dir.join(format!("spare-{}-{n}", std::process::id()));
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc_nofollow())
                    .open(&path)?;
                new.push(path);
            }
            made += new.len();
            match self.free.lock() {
                Ok(mut free) => free.extend(new),
                Err(_) => return Ok(made),
            }
        }
    }

    /// When no more than half of `keep` are ready, [`Spares::refill`] them on a thread of its
    /// own (one at a time), so that the write that used them — a decision, whose client waits
    /// for its answer — does not make files, and neither do the next ones. A thread that cannot
    /// be started, or a refill that fails, is only logged: writes then make their own files.
    pub fn refill_in_background(self: &Arc<Self>) {
        if self.ready() * 2 > self.keep || self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let spares = self.clone();
        let started = self.on_idle_thread(move || loop {
            spares.log_failure(spares.refill());
            spares.refilling.store(false, Ordering::Release);
            // Writes that took spares after the refill's last look, and found it still at
            // work, asked for nothing: look again.
            if spares.ready() * 2 > spares.keep || spares.refilling.swap(true, Ordering::AcqRel) {
                break;
            }
        });
        if !started {
            self.refilling.store(false, Ordering::Release);
        }
    }

    /// [`Spares::refill_to`] `target` on a thread of its own at idle priority: a stock made
    /// while the hub serves, for decisions that are expected to follow.
    pub fn stock_in_background(self: &Arc<Self>, target: usize) {
        let spares = self.clone();
        self.on_idle_thread(move || spares.log_failure(spares.refill_to(target)));
    }

    /// Run `work` on a thread of its own at idle priority; false (logged) if none can start,
    /// in which case writes make their own files.
    fn on_idle_thread(&self, work: impl FnOnce() + Send + 'static) -> bool {
        let spawned = std::thread::Builder::new()
            .name("hunkgate-spares".into())
            .spawn(move || {
                if let Err(e) = crate::idle_priority() {
                    tracing::debug!(error = %e, "spare files made at normal priority");
                }
                work();
            });
        if let Err(e) = &spawned {
            tracing::debug!(dir = %self.dir.display(), error = %e, "no thread to make spare files; writes make their own");
        }
        spawned.is_ok()
    }

    /// A refill on a thread has no one to tell of its failure but the log.
    fn log_failure(&self, made: std::io::Result<usize>) {
        if let Err(e) = made {
            tracing::warn!(dir = %self.dir.display(), error = %e, "making spare files");
        }
    }

    /// Whether a [`Spares::refill_in_background`] thread is at work.
    pub fn refilling(&self) -> bool {
        self.refilling.load(Ordering::Acquire)
    }

    /// How many spares are ready.
    pub fn ready(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }

    /// Write `bytes` to a spare and rename it to `dest`, which must be on the same filesystem
    /// (and is replaced if it exists). Ok(false) when no spare is ready: nothing was written,
    /// and the caller makes its file the usual way. A spare that fails is removed.
    pub fn write_as(&self, dest: &Path, bytes: &[u8]) -> std::io::Result<bool> {
        self.put(dest, bytes, false)
    }

    /// [`Spares::write_as`], the file fsynced before it is renamed (a pack, say); the rename
    /// itself is durable once the caller fsyncs `dest`'s directory.
    pub fn write_synced_as(&self, dest: &Path, bytes: &[u8]) -> std::io::Result<bool> {
        self.put(dest, bytes, true)
    }

    fn put(&self, dest: &Path, bytes: &[u8], sync: bool) -> std::io::Result<bool> {
        let Some(path) = self.free.lock().ok().and_then(|mut f| f.pop()) else {
            return Ok(false);
        };
        let written = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc_nofollow())
            .open(&path)
            .and_then(|mut file| {
                file.write_all(bytes)?;
                file.set_permissions(std::fs::Permissions::from_mode(self.mode))?;
                if sync {
                    file.sync_all()?;
                }
                Ok(())
            });
        let placed = written.and_then(|()| std::fs::rename(&path, dest));
        if placed.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        placed.map(|()| true)
    }
}

/// `O_NOFOLLOW`: a spare is never made through a symlink.
fn libc_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn a_spare_becomes_the_file_with_its_mode_and_runs_out_until_refilled() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spares");
        let spares = Spares::open(&dir, 2, 0o444).unwrap();
        assert_eq!(spares.ready(), 0);
        let dest = |n: &str| tmp.path().join(n);
        // None ready: nothing is written.
        assert!(!spares.write_as(&dest("a"), b"a\n").unwrap());
        assert!(!dest("a").exists());

        assert_eq!(spares.refill().unwrap(), 2);
        assert_eq!(spares.refill().unwrap(), 0, "already full");
        assert_eq!(names(&dir).len(), 2);
        assert!(spares.write_as(&dest("a"), b"a\n").unwrap());
        assert!(spares.write_as(&dest("b"), b"bb\n").unwrap());
        assert!(!spares.write_as(&dest("c"), b"c\n").unwrap(), "used up");
        assert_eq!(std::fs::read(dest("a")).unwrap(), b"a\n");
        assert_eq!(std::fs::read(dest("b")).unwrap(), b"bb\n");
        let mode = std::fs::metadata(dest("b")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o444, "read-only once written");
        assert!(names(&dir).is_empty(), "both moved out");
        assert_eq!(spares.refill().unwrap(), 2);
        assert_eq!(spares.ready(), 2);
    }

    #[test]
    fn leftovers_are_removed_and_a_failed_rename_loses_only_its_spare() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spares");
        let first = Spares::open(&dir, 3, 0o600).unwrap();
        first.refill().unwrap();
        drop(first);
        assert_eq!(names(&dir).len(), 3);
        let spares = Spares::open(&dir, 1, 0o600).unwrap();
        assert!(names(&dir).is_empty(), "a new process starts clean");

        spares.refill().unwrap();
        let missing_dir = tmp.path().join("no/such/dir/x");
        assert!(spares.write_as(&missing_dir, b"x").is_err());
        assert!(names(&dir).is_empty(), "the failed spare is removed");
        // Positive control: the same write to a directory that is there lands.
        spares.refill().unwrap();
        assert!(spares.write_as(&tmp.path().join("x"), b"x").unwrap());
        assert_eq!(std::fs::read(tmp.path().join("x")).unwrap(), b"x");
    }

    #[test]
    fn a_spare_replaced_by_a_symlink_is_not_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spares");
        let spares = Spares::open(&dir, 1, 0o600).unwrap();
        spares.refill().unwrap();
        let spare = dir.join(&names(&dir)[0]);
        let target = tmp.path().join("target");
        std::fs::write(&target, b"kept\n").unwrap();
        std::fs::remove_file(&spare).unwrap();
        std::os::unix::fs::symlink(&target, &spare).unwrap();
        assert!(spares.write_as(&tmp.path().join("dest"), b"x").is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"kept\n");
        assert!(!tmp.path().join("dest").exists());
        assert!(
            names(&dir).is_empty(),
            "the link is removed with the failed spare"
        );
    }

    #[test]
    fn a_stock_is_made_on_demand_and_the_keep_is_a_floor() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spares");
        let spares = Spares::open(&dir, 2, 0o444).unwrap();
        assert_eq!(spares.refill_to(5).unwrap(), 5);
        assert_eq!(spares.ready(), 5);
        assert_eq!(names(&dir).len(), 5);
        assert_eq!(spares.refill_to(1).unwrap(), 0, "five are more than one");
        for i in 0..4 {
            assert!(spares
                .write_as(&tmp.path().join(format!("f{i}")), b"x")
                .unwrap());
        }
        assert_eq!(spares.ready(), 1);
        // A target below `keep` still makes `keep`.
        assert_eq!(spares.refill_to(0).unwrap(), 1);
        assert_eq!(spares.ready(), 2);
    }

    /// Waits (at most 10 s) until `ok` holds.
    fn eventually(ok: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if ok() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        ok()
    }

    #[test]
    fn a_background_refill_starts_once_half_are_used_and_fills_up_to_keep() {
        let tmp = tempfile::tempdir().unwrap();
        let spares = Arc::new(Spares::open(&tmp.path().join("spares"), 4, 0o444).unwrap());
        spares.refill().unwrap();
        let mut n = 0;
        let mut take = |k: usize| {
            for _ in 0..k {
                n += 1;
                assert!(spares
                    .write_as(&tmp.path().join(format!("f{n}")), b"x")
                    .unwrap());
            }
        };
        // Three of four left: more than half, so nothing is made.
        take(1);
        spares.refill_in_background();
        assert!(eventually(|| !spares.refilling()));
        assert_eq!(spares.ready(), 3);
        // Two of four left: half, so a thread makes the two missing.
        take(1);
        spares.refill_in_background();
        assert!(
            eventually(|| spares.ready() == 4),
            "ready: {}",
            spares.ready()
        );
        assert!(eventually(|| !spares.refilling()));
        assert_eq!(names(&tmp.path().join("spares")).len(), 4);
    }
}

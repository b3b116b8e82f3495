//! The write side: atomic, fsynced writes (a temporary file beside the target, renamed or
//! swapped in), staged writes synced together, and the names of the temporary files.

use super::*;

impl Beneath {
    /// Replace (or create) a regular file atomically: temp file in the same directory, write,
    /// fchmod, fsync, rename over the target, fsync the directory. A reader sees the old bytes or
    /// the new bytes, never a mix, and a crash leaves at most a stray temp file.
    pub fn write_atomic(&self, path: &str, bytes: &[u8], executable: bool) -> Result<(), FsError> {
        self.write_atomic_checked(path, bytes, executable, |_| Ok(true))
    }

    /// [`Beneath::write_atomic`], but `still_expected` is asked right before the rename (after
    /// the new content is written and fsynced, so the window is as small as it can be) whether
    /// the file is still what the new content was made from, and once more after it, about the
    /// replaced file (see [`PendingWrite::put_in_place`]). `false` writes nothing and answers
    /// [`FsError::Changed`]: a user's edit made meanwhile is never renamed over.
    pub fn write_atomic_checked(
        &self,
        path: &str,
        bytes: &[u8],
        executable: bool,
        still_expected: impl FnMut(&str) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        self.write_atomic_with(
            path,
            bytes,
            (executable, None),
            AtLink::Refuse,
            still_expected,
        )
    }

    /// [`Beneath::write_atomic_checked`]; a file it creates (none is at `path`) gets the
    /// permission bits `new_perm` (masked to `0o777`; its executable bits still follow
    /// `executable`) instead of git's 0644 / 0755: how a file a hunk brings back keeps the mode
    /// it had. `at_link` says whether a symlink at `path` is refused or replaced (never written
    /// through either way).
    pub fn write_atomic_with(
        &self,
        path: &str,
        bytes: &[u8],
        (executable, new_perm): (bool, Option<u32>),
        at_link: AtLink,
        still_expected: impl FnMut(&str) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        let pending = self.stage_write(path, bytes, (executable, new_perm), at_link)?;
        pending.sync()?;
        let dir = pending.put_in_place(still_expected)?;
        self.sync_dir(path, &dir)
    }

    /// The first half of [`Beneath::write_atomic_with`], for writing several files together: the
    /// new content in a temporary file beside `path` (its directories made as needed), with the
    /// mode it is to have, not yet fsynced nor in place. See [`PendingWrite`].
    pub fn stage_write(
        &self,
        path: &str,
        bytes: &[u8],
        (executable, new_perm): (bool, Option<u32>),
        at_link: AtLink,
    ) -> Result<PendingWrite, FsError> {
        let parts = components(path)?;
        let dir = self
            .parent_dir(path, &parts, true)?
            .ok_or_else(|| FsError::io(path, Errno::ENOENT))?;
        let name = parts[parts.len() - 1];
        let existing = existing_file_mode(&dir, name, path, at_link)?;
        let mode = file_mode(existing, new_perm, executable);
        // Short and independent of the name: `.{name}.tmp` would not fit a 250-byte name.
        let tmp = temp_name();
        let mut file = create_new(&dir, &tmp, path)?;
        let mut pending = PendingWrite {
            dir: Some(dir),
            tmp,
            name: name.to_string(),
            path: path.to_string(),
            file: None,
            durable: self.durable,
        };
        fill(&mut file, path, bytes, mode)?;
        pending.file = Some(file);
        Ok(pending)
    }

    /// Make a rename or removal in `dir` (the directory of `path`) durable, when writes here
    /// are.
    pub fn sync_dir(&self, path: &str, dir: &OwnedFd) -> Result<(), FsError> {
        if self.durable {
            nix::unistd::fsync(dir.as_fd()).map_err(|e| FsError::io(path, e))?;
        }
        Ok(())
    }

    /// Write a regular file of a scratch tree (see [`Beneath::open_scratch`]), keeping the old
    /// permission bits but for the executable ones, like [`Beneath::write_atomic`]. Not atomic
    /// — a reader may see a half-written file for a moment — which a sandbox being synced, with
    /// no agent running in it, does not mind.
    ///
    /// A regular file of this process's user that has no other name (one link) is overwritten
    /// in place: its blocks are reused, where a new file costs an inode (ext4 without a journal
    /// spends a third of a millisecond finding one) and a rename over the old one makes ext4
    /// write the data out at once (`auto_da_alloc`). Anything else — a file with hard links
    /// (the agent may have linked it from elsewhere), someone else's file, one the kernel
    /// refuses to open for writing (a running program) — is unlinked and created anew
    /// (`O_EXCL`, never through a symlink), so the new bytes never reach another name of an
    /// inode. A durable tree gets [`Beneath::write_atomic`].
    pub fn write_scratch(&self, path: &str, bytes: &[u8], executable: bool) -> Result<(), FsError> {
        if self.durable {
            return self.write_atomic(path, bytes, executable);
        }
        let parts = components(path)?;
        let dir = self
            .parent_dir(path, &parts, true)?
            .ok_or_else(|| FsError::io(path, Errno::ENOENT))?;
        let name = parts[parts.len() - 1];
        let existing = existing_file_mode(&dir, name, path, AtLink::Refuse)?;
        if let Some(mode) = existing {
            if overwrite_sole_link(&dir, name, bytes, file_mode(Some(mode), None, executable)) {
                return Ok(());
            }
            nix::unistd::unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
                .map_err(|e| FsError::io(path, e))?;
        }
        let mut file = create_new(&dir, name, path)?;
        fill(
            &mut file,
            path,
            bytes,
            file_mode(existing, None, executable),
        )
    }
}

/// A file [`Beneath::stage_write`] wrote beside its path and has not put in place yet.
///
/// Several files are written durably and atomically together, with fewer waits for the disk
/// than one [`Beneath::write_atomic`] after another: every one staged, then all fsynced
/// ([`PendingWrite::sync`], on threads of their own: the disk takes concurrent flushes
/// together), then each put in place after its own last look ([`PendingWrite::put_in_place`]),
/// then each directory fsynced once. One dropped before it is in place removes its temporary
/// file.
#[derive(Debug)]
pub struct PendingWrite {
    /// Taken when the file is put in place.
    pub(super) dir: Option<OwnedFd>,
    pub(super) tmp: String,
    pub(super) name: String,
    pub(super) path: String,
    pub(super) file: Option<std::fs::File>,
    pub(super) durable: bool,
}

impl PendingWrite {
    /// [`PendingWrite::sync`] each of `pending`, the first error if any: on up to
    /// [`PendingWrite::SYNC_THREADS`] threads, each waiting for the disk, which takes flushes
    /// that come together at once (see [`crate::threads::try_on_threads`]).
    pub fn sync_all(pending: &[PendingWrite]) -> Result<(), FsError> {
        crate::threads::try_on_threads(pending, Self::SYNC_THREADS, PendingWrite::sync)
    }

    /// At most this many threads fsync at once ([`PendingWrite::sync_all`]).
    pub const SYNC_THREADS: usize = crate::threads::SYNC_THREADS;

    /// Make the new content durable (when writes are: see [`Beneath::open_scratch`]).
    pub fn sync(&self) -> Result<(), FsError> {
        match &self.file {
            Some(file) if self.durable => file.sync_all().map_err(|e| FsError::Io {
                path: self.path.clone(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Put the new content at the path once `still_expected` (asked right before, after the
    /// content is written and fsynced, so the window is as small as it can be; given the path
    /// to look at) says the file is still what the new content was made from; `false` writes
    /// nothing and answers [`FsError::Changed`]. Returns the directory, whose fsync makes the
    /// change durable ([`Beneath::sync_dir`]).
    ///
    /// A save the user makes between that look and the rename, or after it through a
    /// descriptor opened before, would land in the replaced file and be lost with it; so where
    /// the system can, the new content is swapped with the file and the file looked at once
    /// more under its temporary name (`still_expected` asked again, with that name; nobody may
    /// have it open for writing: [`FsError::Busy`]) before it goes, or is swapped back (see
    /// [`swap`]).
    pub fn put_in_place(
        mut self,
        mut still_expected: impl FnMut(&str) -> Result<bool, FsError>,
    ) -> Result<OwnedFd, FsError> {
        drop(self.file.take());
        let dir = self
            .dir
            .as_ref()
            .ok_or_else(|| FsError::io(&self.path, Errno::EBADF))?;
        let held = swap::hold_replaced(dir, &self.name);
        if !still_expected(&self.path)? {
            return Err(FsError::Changed {
                path: self.path.clone(),
            });
        }
        let swapped = swap::swap_in(
            dir,
            &self.tmp,
            &self.name,
            &self.path,
            held,
            &mut still_expected,
        );
        match swapped {
            // The old file has no name now: closed here, its blocks are freed now.
            Ok(swap::Swapped::Done(old)) => drop(old),
            Ok(swap::Swapped::Unsupported) => nix::fcntl::renameat(
                dir.as_fd(),
                self.tmp.as_str(),
                dir.as_fd(),
                self.name.as_str(),
            )
            .map_err(|e| FsError::io(&self.path, e))?,
            Ok(swap::Swapped::Stranded(e)) => {
                // The temporary name holds the user's version: dropped, it is not removed.
                self.dir.take();
                return Err(e);
            }
            // The temporary file holds the new content again: dropped, it is removed.
            Err(e) => return Err(e),
        }
        self.dir
            .take()
            .ok_or_else(|| FsError::io(&self.path, Errno::EBADF))
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ =
                nix::unistd::unlinkat(dir.as_fd(), self.tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

/// The permission bits of the regular file `name` in `dir`, None if nothing is there; an error
/// if something else is (a symlink, a directory: never written through or over).
pub(super) fn existing_file_mode(
    dir: &OwnedFd,
    name: &str,
    path: &str,
    at_link: AtLink,
) -> Result<Option<u32>, FsError> {
    match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        // A symlink the file replaces (a change of type) has no mode to keep; it is replaced
        // itself, never written through.
        Ok(st) if kind_of(&st) == Kind::Symlink && at_link == AtLink::Replace => Ok(None),
        Ok(st) => {
            regular(path, kind_of(&st))?;
            Ok(Some(mode_bits(&st) & 0o7777))
        }
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(FsError::io(path, e)),
    }
}

/// The permission bits a written file gets: a replaced file keeps its own (a 0600 secret stays
/// 0600) and only the executable bits follow `executable`; a new file gets `new_perm` likewise,
/// or 0644 / 0755 like git's checkout.
pub(super) fn file_mode(existing: Option<u32>, new_perm: Option<u32>, executable: bool) -> u32 {
    match (existing, new_perm) {
        (Some(m), _) => with_exec(m, executable),
        (None, Some(p)) => with_exec(p & 0o777, executable),
        (None, None) if executable => 0o755,
        (None, None) => 0o644,
    }
}

/// Create `name` in `dir`: never over anything, never through a symlink, private until
/// [`fill`] gives it its mode.
pub(super) fn create_new(dir: &OwnedFd, name: &str, path: &str) -> Result<std::fs::File, FsError> {
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| FsError::io(path, e))?;
    Ok(std::fs::File::from(fd))
}

/// Overwrite `name` in `dir` with `bytes` and give it `mode`, when it is a regular file of this
/// process's user with no other name; whether it was (see [`Beneath::write_scratch`]). Opened
/// without following a symlink and without blocking (a FIFO swapped in fails), checked on the
/// open descriptor. False leaves the file to be replaced: what a failure half-way wrote goes
/// with it.
pub(super) fn overwrite_sole_link(dir: &OwnedFd, name: &str, bytes: &[u8], mode: u32) -> bool {
    let Ok(fd) = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let mut file = std::fs::File::from(fd);
    let sole = nix::sys::stat::fstat(file.as_fd()).is_ok_and(|st| {
        matches!(kind_of(&st), Kind::File { .. })
            && st.st_nlink == 1
            && st.st_uid == nix::unistd::geteuid().as_raw()
    });
    sole && file.write_all(bytes).is_ok()
        && file.set_len(bytes.len() as u64).is_ok()
        && nix::sys::stat::fchmod(file.as_fd(), Mode::from_bits_truncate(mode as _)).is_ok()
}

/// Write `bytes` into a file [`create_new`] made and give it `mode`.
pub(super) fn fill(
    file: &mut std::fs::File,
    path: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<(), FsError> {
    file.write_all(bytes).map_err(|e| FsError::Io {
        path: path.to_string(),
        source: e,
    })?;
    nix::sys::stat::fchmod(file.as_fd(), Mode::from_bits_truncate(mode as _))
        .map_err(|e| FsError::io(path, e))
}

/// Set executable bits where the file is readable (git's 0644 <-> 0755), or clear them all.
pub(super) fn with_exec(mode: u32, executable: bool) -> u32 {
    if executable {
        mode | ((mode & 0o444) >> 2)
    } else {
        mode & !0o111
    }
}

pub(super) fn map_dir_err(path: &str, e: Errno) -> FsError {
    match e {
        Errno::ELOOP | Errno::ENOTDIR | Errno::EMLINK => FsError::Symlink {
            path: path.to_string(),
        },
        e => FsError::io(path, e),
    }
}

/// A temporary file name for an atomic write: `.hg-<random>.tmp`, at most 40 bytes whatever the
/// target's name, hidden, and unique per process and call.
/// Whether no process `pid` (other than this one) is alive to finish its temporary file.
pub(super) fn writer_gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 || pid == std::process::id() {
        return false;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) == Err(Errno::ESRCH)
}

/// The writer's pid in a name [`temp_name`] made: `.hg-<pid>-<n>-<nanos>.tmp`.
pub(super) fn temp_writer(name: &[u8]) -> Option<u32> {
    let inner = name.strip_prefix(b".hg-")?.strip_suffix(b".tmp")?;
    let inner = std::str::from_utf8(inner).ok()?;
    let mut fields = inner.split('-');
    let pid = fields.next()?.parse().ok()?;
    let rest: Vec<&str> = fields.collect();
    (rest.len() == 2
        && rest
            .iter()
            .all(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit())))
    .then_some(pid)
}

pub fn temp_name() -> String {
    format!(".hg-{}.tmp", random_suffix())
}

pub(super) fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

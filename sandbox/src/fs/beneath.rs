//! File access confined beneath one directory, never through a symlink.
//!
//! Both sides of hunkgate need this: the hub reads the sandbox clone (whose owner is the agent, so
//! every file in it is hostile data) and writes the user's checkout (where a symlink planted by a
//! tool could redirect a write outside the repository). Every operation walks the relative path one
//! component at a time with `openat(O_NOFOLLOW)` from a directory descriptor opened once, so a
//! directory swapped for a symlink between a check and a use cannot redirect us (no TOCTOU on the
//! path string), and it works the same on Linux and macOS.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::UnlinkatFlags;

mod swap;

/// Why a relative path was refused before touching the file system.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error("empty path")]
    Empty,
    #[error("path {0:?} is absolute; paths are relative to the repository root")]
    Absolute(String),
    #[error("path {0:?} contains an empty, '.' or '..' component")]
    Traversal(String),
    #[error("path {0:?} points into .git, which hunkgate never writes")]
    GitDir(String),
    #[error("path {0:?} contains a NUL byte")]
    Nul(String),
}

/// Validate a repository-relative path ("src/main.rs") and split it into components.
///
/// `.git` is refused in any letter case because case-insensitive file systems (macOS) resolve
/// `.GIT` to the repository's own metadata.
pub fn components(path: &str) -> Result<Vec<&str>, PathError> {
    check_path(path)?;
    Ok(path.split('/').collect())
}

/// What [`components`] checks, without collecting the components: for the hot loops that
/// only need to know a path is one hunkgate may touch.
pub fn check_path(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.contains('\0') {
        return Err(PathError::Nul(path.to_string()));
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(path.to_string()));
    }
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(PathError::Traversal(path.to_string()));
        }
        let trimmed = part.trim_end_matches(['.', ' ']);
        if trimmed.eq_ignore_ascii_case(".git") {
            return Err(PathError::GitDir(path.to_string()));
        }
    }
    Ok(())
}

/// Errors of confined file access; each names the path and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(
        "{path}: a path component is a symlink or not a directory; hunkgate never follows symlinks"
    )]
    Symlink { path: String },
    #[error("{path}: not a regular file ({what}); only regular files are read or written")]
    NotRegular { path: String, what: &'static str },
    #[error("{path}: file is larger than the {cap} byte cap")]
    TooLarge { path: String, cap: u64 },
    /// The file changed between the moment its new content was planned and the write.
    #[error("{path} changed while hunkgate was writing it; your version was kept and nothing was written")]
    Changed { path: String },
    /// Another program has the file open for writing: what it writes next would go into a
    /// file with no name if hunkgate replaced it now ([`PendingWrite::put_in_place`]).
    #[error("{path} is open for writing in another program; your version was kept and nothing was written: save or close it there and try again")]
    Busy { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl FsError {
    fn io(path: &str, errno: Errno) -> Self {
        FsError::Io {
            path: path.to_string(),
            source: std::io::Error::from(errno),
        }
    }
}

/// What a write does with a symlink where its file goes. Neither ever writes through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtLink {
    /// Refused ([`FsError::Symlink`]).
    Refuse,
    /// Replaced by the file, as a change of type the reviewer accepted (the write's last look
    /// checks that the link is still the one the change was planned against).
    Replace,
}

/// What is at a path, without following a symlink there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File {
        executable: bool,
        size: u64,
    },
    Symlink,
    Dir,
    /// FIFOs, sockets, devices: never read, never written.
    Other(&'static str),
}

/// `st_mode` is u32 on Linux and u16 on macOS.
#[allow(clippy::unnecessary_cast)]
fn mode_bits(st: &nix::sys::stat::FileStat) -> u32 {
    st.st_mode as u32
}

/// A regular file's (executable, size), or the error that names what is there instead.
fn regular(path: &str, kind: Kind) -> Result<(bool, u64), FsError> {
    match kind {
        Kind::File { executable, size } => Ok((executable, size)),
        Kind::Symlink => Err(FsError::Symlink {
            path: path.to_string(),
        }),
        Kind::Dir => Err(FsError::NotRegular {
            path: path.to_string(),
            what: "directory",
        }),
        Kind::Other(what) => Err(FsError::NotRegular {
            path: path.to_string(),
            what,
        }),
    }
}

/// What a stat says is at a path.
pub fn kind_of(st: &nix::sys::stat::FileStat) -> Kind {
    let fmt = SFlag::from_bits_truncate(st.st_mode as _) & SFlag::S_IFMT;
    if fmt == SFlag::S_IFREG {
        Kind::File {
            executable: mode_bits(st) & 0o100 != 0,
            size: st.st_size as u64,
        }
    } else if fmt == SFlag::S_IFLNK {
        Kind::Symlink
    } else if fmt == SFlag::S_IFDIR {
        Kind::Dir
    } else if fmt == SFlag::S_IFIFO {
        Kind::Other("fifo")
    } else if fmt == SFlag::S_IFSOCK {
        Kind::Other("socket")
    } else {
        Kind::Other("device")
    }
}

/// The last parent directory [`Beneath::lstat_cached`] opened (its path, with the trailing
/// slash, and descriptor).
#[derive(Debug, Default)]
pub struct DirCache(Option<(String, OwnedFd)>);

/// What [`Beneath::lstat_many`] found at one path.
pub type LstatResult = Result<Option<nix::sys::stat::FileStat>, FsError>;

/// A directory that every operation stays beneath.
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    root_path: PathBuf,
    /// Whether writes are fsynced (file and directory). Only a scratch tree whose loss on a
    /// crash costs nothing but a re-sync (a sandbox) turns this off.
    durable: bool,
}

/// A file read as data leaves its access time alone where the kernel allows it (Linux; the
/// file's owner or root): a read of a file written since its last access would otherwise
/// update it — an inode made dirty, which the next fsync on the filesystem writes too. A
/// read-back reads just such files, the agent's.
#[cfg(any(target_os = "linux", target_os = "android"))]
const NO_ATIME: OFlag = OFlag::O_NOATIME;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const NO_ATIME: OFlag = OFlag::empty();

const DIR_FLAGS: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC)
    .union(OFlag::O_RDONLY);

impl Beneath {
    /// Open `root` itself. The root may be reached through symlinks (a user's home often is);
    /// nothing below it is.
    pub fn open(root: &Path) -> Result<Self, FsError> {
        let fd = nix::fcntl::open(
            root,
            OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
            Mode::empty(),
        )
        .map_err(|e| FsError::io(&root.display().to_string(), e))?;
        Ok(Self {
            root: fd,
            root_path: root.to_path_buf(),
            durable: true,
        })
    }

    /// [`Beneath::open`] for a scratch tree (a sandbox): writes are atomic (temp + rename) but
    /// not fsynced — after a crash the next sync rewrites whatever is off.
    pub fn open_scratch(root: &Path) -> Result<Self, FsError> {
        let mut b = Self::open(root)?;
        b.durable = false;
        Ok(b)
    }

    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// Open the directory holding the last component of `parts`, optionally creating missing
    /// directories. Returns None when a directory is missing and `create` is false.
    fn parent_dir(
        &self,
        path: &str,
        parts: &[&str],
        create: bool,
    ) -> Result<Option<OwnedFd>, FsError> {
        let mut dir = self.root.try_clone().map_err(|e| FsError::Io {
            path: path.to_string(),
            source: e,
        })?;
        for part in &parts[..parts.len().saturating_sub(1)] {
            let next = match nix::fcntl::openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if create => {
                    match nix::sys::stat::mkdirat(
                        dir.as_fd(),
                        *part,
                        Mode::from_bits_truncate(0o755),
                    ) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(FsError::io(path, e)),
                    }
                    nix::fcntl::openat(dir.as_fd(), *part, DIR_FLAGS, Mode::empty())
                        .map_err(|e| map_dir_err(path, e))?
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(map_dir_err(path, e)),
            };
            dir = next;
        }
        Ok(Some(dir))
    }

    /// What is at `path` (None when nothing is).
    pub fn kind(&self, path: &str) -> Result<Option<Kind>, FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Ok(None);
        };
        let name = parts[parts.len() - 1];
        match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(kind_of(&st))),
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(FsError::io(path, e)),
        }
    }

    /// A regular file's permission bits (`0o777`, never set-id or sticky bits). None when
    /// nothing is there; an error when it is not a regular file.
    pub fn perm(&self, path: &str) -> Result<Option<u32>, FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Ok(None);
        };
        let name = parts[parts.len() - 1];
        match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                regular(path, kind_of(&st))?;
                Ok(Some(mode_bits(&st) & 0o777))
            }
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(FsError::io(path, e)),
        }
    }

    /// [`Beneath::lstat_cached`] of each of `paths` (best sorted, so that neighbours share a
    /// directory), in order. A long list is split into contiguous runs taken by a few threads
    /// at once ([`crate::threads::io_threads`]): an `lstat` is a system call of a microsecond or two,
    /// and 10,000 of them one after the other are most of a sandbox's read-back (git's
    /// `core.preloadIndex` does the same for `git status`).
    pub fn lstat_many<P: AsRef<str> + Sync>(&self, paths: &[P]) -> Vec<LstatResult> {
        let one = |run: &[P]| -> Vec<LstatResult> {
            let mut dirs = DirCache::default();
            run.iter()
                .map(|p| self.lstat_cached(p.as_ref(), &mut dirs))
                .collect()
        };
        let threads = crate::threads::io_threads();
        if threads < 2 || paths.len() < Self::LSTAT_PARALLEL_FROM {
            return one(paths);
        }
        let run_len = paths.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let runs: Vec<_> = paths
                .chunks(run_len)
                .map(|run| scope.spawn(move || one(run)))
                .collect();
            let mut out = Vec::with_capacity(paths.len());
            for (run, handle) in paths.chunks(run_len).zip(runs) {
                // A thread that panicked (it cannot: no unwrap above) counts as one that
                // could not look: each of its paths fails, never reads as absent.
                out.extend(handle.join().unwrap_or_else(|_| {
                    run.iter()
                        .map(|p| Err(FsError::io(p.as_ref(), Errno::EIO)))
                        .collect()
                }));
            }
            out
        })
    }

    /// [`Beneath::lstat_many`] of fewer paths stays on the calling thread (a thread costs
    /// tens of microseconds to start).
    const LSTAT_PARALLEL_FROM: usize = 512;

    /// Read a regular file. None when it does not exist; an error when it is a symlink, a FIFO
    /// or device, or larger than `cap`.
    pub fn read(&self, path: &str, cap: u64) -> Result<Option<(Vec<u8>, bool)>, FsError> {
        Ok(self
            .read_stat(path, cap)?
            .map(|(bytes, executable, _)| (bytes, executable)))
    }

    /// `lstat` of `path` (None when nothing is there); never follows a symlink.
    pub fn lstat(&self, path: &str) -> Result<Option<nix::sys::stat::FileStat>, FsError> {
        self.lstat_cached(path, &mut DirCache::default())
    }

    /// [`Beneath::lstat`], keeping the last parent directory open in `cache`: walking sorted
    /// paths, most share it. The cached descriptor was opened beneath the root without following
    /// anything, so it stays beneath even if the directory is renamed or replaced meanwhile.
    pub fn lstat_cached(
        &self,
        path: &str,
        cache: &mut DirCache,
    ) -> Result<Option<nix::sys::stat::FileStat>, FsError> {
        check_path(path)?;
        let name = path.rsplit('/').next().unwrap_or(path);
        let parent = &path[..path.len() - name.len()];
        let dir = match &cache.0 {
            Some((p, fd)) if p == parent => fd,
            _ => {
                cache.0 = None;
                let parts: Vec<&str> = path.split('/').collect();
                let Some(fd) = self.parent_dir(path, &parts, false)? else {
                    return Ok(None);
                };
                &cache.0.insert((parent.to_string(), fd)).1
            }
        };
        match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => Ok(None),
            Err(e) => Err(FsError::io(path, e)),
        }
    }

    /// [`read`](Self::read), also returning the file's stat taken on the open file *before*
    /// reading: a write that lands during the read leaves a newer mtime/ctime than this stat,
    /// so a stat cache keyed by it can never pair old stat data with new content.
    pub fn read_stat(
        &self,
        path: &str,
        cap: u64,
    ) -> Result<Option<(Vec<u8>, bool, nix::sys::stat::FileStat)>, FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Ok(None);
        };
        let name = parts[parts.len() - 1];
        // O_NONBLOCK so that opening a FIFO the agent planted cannot hang the hub.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let open = |flags| nix::fcntl::openat(dir.as_fd(), name, flags, Mode::empty());
        let opened = match open(flags | NO_ATIME) {
            // Only a file's owner (or root) may leave its access time alone.
            Err(Errno::EPERM) if !NO_ATIME.is_empty() => open(flags),
            other => other,
        };
        let fd = match opened {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) | Err(Errno::EMLINK) => {
                return Err(FsError::Symlink {
                    path: path.to_string(),
                })
            }
            Err(e) => return Err(FsError::io(path, e)),
        };
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| FsError::io(path, e))?;
        let (executable, size) = regular(path, kind_of(&st))?;
        if size > cap {
            return Err(FsError::TooLarge {
                path: path.to_string(),
                cap,
            });
        }
        let mut file = std::fs::File::from(fd);
        let mut buf = Vec::with_capacity(size as usize);
        // The file may grow after fstat; never read more than the cap.
        (&mut file)
            .take(cap.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| FsError::Io {
                path: path.to_string(),
                source: e,
            })?;
        if buf.len() as u64 > cap {
            return Err(FsError::TooLarge {
                path: path.to_string(),
                cap,
            });
        }
        Ok(Some((buf, executable, st)))
    }

    /// Read a symlink's target (data only: it is never followed).
    pub fn read_link(&self, path: &str) -> Result<Option<Vec<u8>>, FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Ok(None);
        };
        match nix::fcntl::readlinkat(dir.as_fd(), parts[parts.len() - 1]) {
            Ok(target) => Ok(Some(OsString::into_vec(target))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(FsError::io(path, e)),
        }
    }

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

    /// Remove the temporary files [`Beneath::write_atomic_with`] left beside `path` when the
    /// process writing them died between creating and renaming one (a `kill -9`): regular
    /// files named `.hg-<pid>-<n>-<nanos>.tmp` whose `<pid>` is neither this process nor one
    /// alive. Anything else — another name, a live writer's file, a symlink — is left alone.
    /// Returns how many were removed.
    pub fn remove_stale_temps(&self, path: &str) -> Result<usize, FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Ok(0);
        };
        let listing = nix::dir::Dir::from_fd(
            nix::fcntl::openat(dir.as_fd(), ".", DIR_FLAGS, Mode::empty())
                .map_err(|e| FsError::io(path, e))?,
        )
        .map_err(|e| FsError::io(path, e))?;
        let mut stale = Vec::new();
        for entry in listing.into_iter().flatten() {
            let name = entry.file_name().to_bytes();
            let Some(pid) = temp_writer(name) else {
                continue;
            };
            if writer_gone(pid) {
                stale.push(entry.file_name().to_owned());
            }
        }
        let mut removed = 0;
        for name in stale {
            let regular =
                nix::sys::stat::fstatat(dir.as_fd(), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| matches!(kind_of(&st), Kind::File { .. }));
            if regular
                && nix::unistd::unlinkat(dir.as_fd(), name.as_c_str(), UnlinkatFlags::NoRemoveDir)
                    .is_ok()
            {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Remove a regular file, then any directories it leaves empty (as `git apply` does).
    pub fn remove_file(&self, path: &str) -> Result<(), FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Err(FsError::io(path, Errno::ENOENT));
        };
        let name = parts[parts.len() - 1];
        let st = nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| FsError::io(path, e))?;
        regular(path, kind_of(&st))?;
        nix::unistd::unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| FsError::io(path, e))?;
        self.removed_from(path, &parts, &dir)
    }

    /// [`Beneath::remove_file`], but only while `still_expected` says the file is what the
    /// removal was planned against: asked before, and where the system can, once more after
    /// the file was renamed out of the way (given its temporary name then; nobody may have it
    /// open for writing: [`FsError::Busy`]), so that a write made in between is never lost —
    /// the file is renamed back and the answer is [`FsError::Changed`] (see [`swap`]).
    pub fn remove_file_checked(
        &self,
        path: &str,
        mut still_expected: impl FnMut(&str) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        let parts = components(path)?;
        let Some(dir) = self.parent_dir(path, &parts, false)? else {
            return Err(FsError::io(path, Errno::ENOENT));
        };
        let name = parts[parts.len() - 1];
        let held = swap::hold_replaced(&dir, name);
        if !still_expected(path)? {
            return Err(FsError::Changed {
                path: path.to_string(),
            });
        }
        let Some(held) = held else {
            return self.remove_file(path);
        };
        match swap::take_away(&dir, name, &temp_name(), path, held, &mut still_expected)? {
            // Closed here: the file had no name left, its blocks are freed now.
            swap::Taken::Done(held) => drop(held),
            swap::Taken::Unsupported => return self.remove_file(path),
            swap::Taken::Stranded(e) => return Err(e),
        }
        self.removed_from(path, &parts, &dir)
    }

    /// After `path` (`parts`) left `dir`: the directory fsynced, and now-empty parents pruned.
    fn removed_from(&self, path: &str, parts: &[&str], dir: &OwnedFd) -> Result<(), FsError> {
        if self.durable {
            nix::unistd::fsync(dir.as_fd()).map_err(|e| FsError::io(path, e))?;
        }
        // Prune now-empty parents, deepest first; stop at the first that is not empty.
        for depth in (1..parts.len()).rev() {
            let Some(parent) = self.parent_dir(path, &parts[..depth], false)? else {
                break;
            };
            match nix::unistd::unlinkat(parent.as_fd(), parts[depth - 1], UnlinkatFlags::RemoveDir)
            {
                Ok(()) => {
                    let _ = nix::unistd::fsync(parent.as_fd());
                }
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// [`Beneath::remove_entry`] of what `still_expected` (given the path where the entry is
    /// then) says is what the removal was planned against; a regular file through
    /// [`Beneath::remove_file_checked`].
    pub fn remove_entry_checked(
        &self,
        path: &str,
        mut still_expected: impl FnMut(&str) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        if let Some(Kind::File { .. }) = self.kind(path)? {
            return self.remove_file_checked(path, still_expected);
        }
        if !still_expected(path)? {
            return Err(FsError::Changed {
                path: path.to_string(),
            });
        }
        self.remove_entry(path)
    }

    /// Remove a file or a symlink (the link itself; it is not followed). Directories are left.
    pub fn remove_entry(&self, path: &str) -> Result<(), FsError> {
        match self.kind(path)? {
            Some(Kind::Symlink) | Some(Kind::Other(_)) => {
                let parts = components(path)?;
                let dir = self
                    .parent_dir(path, &parts, false)?
                    .ok_or_else(|| FsError::io(path, Errno::ENOENT))?;
                nix::unistd::unlinkat(
                    dir.as_fd(),
                    parts[parts.len() - 1],
                    UnlinkatFlags::NoRemoveDir,
                )
                .map_err(|e| FsError::io(path, e))
            }
            Some(Kind::File { .. }) => self.remove_file(path),
            Some(Kind::Dir) => Err(FsError::NotRegular {
                path: path.to_string(),
                what: "directory",
            }),
            None => Ok(()),
        }
    }

    /// A symlink to `target` at `path`, put in place as a write is
    /// ([`PendingWrite::put_in_place`]): made under a temporary name beside it, swapped with
    /// what is there once `still_expected` (asked right before, and again of the replaced
    /// entry after the swap) says that is still what the operation was planned against, then
    /// the directory fsynced. There is no moment without an entry at `path`, and a save made
    /// meanwhile is a conflict, never lost. The target is data, never resolved.
    pub fn symlink_checked(
        &self,
        path: &str,
        target: &[u8],
        still_expected: impl FnMut(&str) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        let parts = components(path)?;
        let dir = self
            .parent_dir(path, &parts, true)?
            .ok_or_else(|| FsError::io(path, Errno::ENOENT))?;
        let tmp = temp_name();
        let target = std::ffi::OsStr::from_bytes(target);
        nix::unistd::symlinkat(target, dir.as_fd(), tmp.as_str())
            .map_err(|e| FsError::io(path, e))?;
        let pending = PendingWrite {
            dir: Some(dir),
            tmp,
            name: parts[parts.len() - 1].to_string(),
            path: path.to_string(),
            file: None,
            durable: self.durable,
        };
        let dir = pending.put_in_place(still_expected)?;
        self.sync_dir(path, &dir)
    }

    /// Create a symlink (replacing a file or symlink already there). The target is stored as
    /// given; it is data, never resolved by hunkgate.
    pub fn symlink(&self, path: &str, target: &[u8]) -> Result<(), FsError> {
        let parts = components(path)?;
        let dir = self
            .parent_dir(path, &parts, true)?
            .ok_or_else(|| FsError::io(path, Errno::ENOENT))?;
        if self.kind(path)?.is_some() {
            self.remove_entry(path)?;
        }
        let target = std::ffi::OsStr::from_bytes(target);
        nix::unistd::symlinkat(target, dir.as_fd(), parts[parts.len() - 1])
            .map_err(|e| FsError::io(path, e))
    }

    /// Set or clear the executable bits of a regular file.
    pub fn set_executable(&self, path: &str, executable: bool) -> Result<(), FsError> {
        let parts = components(path)?;
        let dir = self
            .parent_dir(path, &parts, false)?
            .ok_or_else(|| FsError::io(path, Errno::ENOENT))?;
        let fd = nix::fcntl::openat(
            dir.as_fd(),
            parts[parts.len() - 1],
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => FsError::Symlink {
                path: path.to_string(),
            },
            e => FsError::io(path, e),
        })?;
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| FsError::io(path, e))?;
        if !matches!(kind_of(&st), Kind::File { .. }) {
            return Err(FsError::NotRegular {
                path: path.to_string(),
                what: "not a file",
            });
        }
        let mode = with_exec(mode_bits(&st) & 0o7777, executable);
        nix::sys::stat::fchmod(fd.as_fd(), Mode::from_bits_truncate(mode as _))
            .map_err(|e| FsError::io(path, e))?;
        nix::unistd::fsync(fd.as_fd()).map_err(|e| FsError::io(path, e))
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
    dir: Option<OwnedFd>,
    tmp: String,
    name: String,
    path: String,
    file: Option<std::fs::File>,
    durable: bool,
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
fn existing_file_mode(
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
fn file_mode(existing: Option<u32>, new_perm: Option<u32>, executable: bool) -> u32 {
    match (existing, new_perm) {
        (Some(m), _) => with_exec(m, executable),
        (None, Some(p)) => with_exec(p & 0o777, executable),
        (None, None) if executable => 0o755,
        (None, None) => 0o644,
    }
}

/// Create `name` in `dir`: never over anything, never through a symlink, private until
/// [`fill`] gives it its mode.
fn create_new(dir: &OwnedFd, name: &str, path: &str) -> Result<std::fs::File, FsError> {
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
fn overwrite_sole_link(dir: &OwnedFd, name: &str, bytes: &[u8], mode: u32) -> bool {
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
fn fill(file: &mut std::fs::File, path: &str, bytes: &[u8], mode: u32) -> Result<(), FsError> {
    file.write_all(bytes).map_err(|e| FsError::Io {
        path: path.to_string(),
        source: e,
    })?;
    nix::sys::stat::fchmod(file.as_fd(), Mode::from_bits_truncate(mode as _))
        .map_err(|e| FsError::io(path, e))
}

/// Set executable bits where the file is readable (git's 0644 <-> 0755), or clear them all.
fn with_exec(mode: u32, executable: bool) -> u32 {
    if executable {
        mode | ((mode & 0o444) >> 2)
    } else {
        mode & !0o111
    }
}

fn map_dir_err(path: &str, e: Errno) -> FsError {
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
fn writer_gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 || pid == std::process::id() {
        return false;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) == Err(Errno::ESRCH)
}

/// The writer's pid in a name [`temp_name`] made: `.hg-<pid>-<n>-<nanos>.tmp`.
fn temp_writer(name: &[u8]) -> Option<u32> {
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

fn random_suffix() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_a_dead_writers_temporary_files_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let names = [
            format!(".hg-{dead}-3-123.tmp"),
            format!(".hg-{me}-1-5.tmp"),
            ".hg-1-1-5.tmp".to_string(),
            ".hg-notes.tmp".to_string(),
            format!(".hg-{dead}-3.tmp"),
            "a.txt".to_string(),
        ];
        for n in &names {
            std::fs::write(d.join(n), b"x").unwrap();
        }
        symlink("a.txt", d.join(format!(".hg-{dead}-4-1.tmp"))).unwrap();
        let root = Beneath::open(tmp.path()).unwrap();
        assert_eq!(root.remove_stale_temps("d/a.txt").unwrap(), 1);
        assert!(
            !d.join(&names[0]).exists(),
            "the dead writer's file is gone"
        );
        for n in &names[1..] {
            assert!(d.join(n).exists(), "{n} was kept");
        }
        assert!(d.join(format!(".hg-{dead}-4-1.tmp")).is_symlink());
        assert_eq!(root.remove_stale_temps("missing/a.txt").unwrap(), 0);
    }

    #[test]
    fn components_refuse_hostile_paths() {
        assert!(components("src/a.rs").is_ok());
        assert_eq!(components(""), Err(PathError::Empty));
        assert!(matches!(
            components("/etc/passwd"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(
            components("a/../../x"),
            Err(PathError::Traversal(_))
        ));
        assert!(matches!(components("a//b"), Err(PathError::Traversal(_))));
        assert!(matches!(components("./a"), Err(PathError::Traversal(_))));
        assert!(matches!(
            components(".git/config"),
            Err(PathError::GitDir(_))
        ));
        assert!(matches!(
            components("sub/.GIT/hooks/x"),
            Err(PathError::GitDir(_))
        ));
        assert!(matches!(components(".git./x"), Err(PathError::GitDir(_))));
        assert!(matches!(components("a\0b"), Err(PathError::Nul(_))));
        // Positive control: names that merely contain ".git" are fine.
        assert!(components(".gitignore").is_ok());
        assert!(components("x.git/y").is_ok());
    }

    /// A file read as data keeps its access time, even one written since it was last read
    /// (which a plain read updates under `relatime`).
    #[cfg(target_os = "linux")]
    #[test]
    fn reading_leaves_the_access_time_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let long_ago =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        let written = |name: &str| {
            let path = tmp.path().join(name);
            std::fs::write(&path, "x\n").unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_times(std::fs::FileTimes::new().set_accessed(long_ago))
                .unwrap();
            path
        };
        let accessed = |p: &Path| std::fs::metadata(p).unwrap().accessed().unwrap();
        // Control: a plain read of such a file updates its access time here.
        let plain = written("plain.txt");
        std::fs::read(&plain).unwrap();
        if accessed(&plain) == long_ago {
            eprintln!("skipped: this filesystem does not update access times (noatime)");
            return;
        }
        let ours = written("ours.txt");
        let b = Beneath::open(tmp.path()).unwrap();
        assert_eq!(b.read("ours.txt", 100).unwrap().unwrap().0, b"x\n");
        assert_eq!(accessed(&ours), long_ago);
    }

    #[test]
    fn write_read_remove_roundtrip() {
        let tmp = tempfile::tempdir().unwrap();
        let b = Beneath::open(tmp.path()).unwrap();
        b.write_atomic("a/b/c.txt", b"hello\n", false).unwrap();
        assert_eq!(
            b.read("a/b/c.txt", 100).unwrap(),
            Some((b"hello\n".to_vec(), false))
        );
        b.write_atomic("a/b/c.txt", b"bye\n", true).unwrap();
        assert_eq!(
            b.read("a/b/c.txt", 100).unwrap(),
            Some((b"bye\n".to_vec(), true))
        );
        assert!(matches!(
            b.read("a/b/c.txt", 2),
            Err(FsError::TooLarge { .. })
        ));
        b.remove_file("a/b/c.txt").unwrap();
        assert!(!tmp.path().join("a").exists(), "empty parents are pruned");
        assert_eq!(b.read("a/b/c.txt", 100).unwrap(), None);
    }

    /// A scratch tree's file is written in place (not renamed over) — overwritten when it is the
    /// file's only name, else replaced — keeping its permission bits but the executable ones,
    /// and never through a symlink, into a directory or into another name of its inode.
    #[test]
    fn scratch_writes_replace_in_place_and_follow_nothing() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let b = Beneath::open_scratch(tmp.path()).unwrap();
        let p = |n: &str| tmp.path().join(n);
        b.write_scratch("a/new.txt", b"new\n", false).unwrap();
        assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"new\n");
        assert_eq!(
            std::fs::metadata(p("a/new.txt")).unwrap().mode() & 0o777,
            0o644
        );
        std::fs::set_permissions(p("a/new.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
        b.write_scratch("a/new.txt", b"run me\n", true).unwrap();
        assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"run me\n");
        assert_eq!(
            std::fs::metadata(p("a/new.txt")).unwrap().mode() & 0o777,
            0o700
        );
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(p("a")).unwrap().count(), 1);
        // Its only name: overwritten, the same inode, cut to the new length.
        let ino = |n: &str| std::fs::symlink_metadata(p(n)).unwrap().ino();
        let before = ino("a/new.txt");
        b.write_scratch("a/new.txt", b"short\n", true).unwrap();
        assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"short\n");
        assert_eq!(
            ino("a/new.txt"),
            before,
            "a sole link is overwritten in place"
        );

        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        symlink(outside.path().join("secret"), p("link")).unwrap();
        symlink(outside.path(), p("dirlink")).unwrap();
        std::fs::create_dir(p("dir")).unwrap();
        assert!(b.write_scratch("link", b"x", false).is_err());
        assert!(b.write_scratch("dirlink/secret", b"x", false).is_err());
        assert!(b.write_scratch("dir", b"x", false).is_err());
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"secret"
        );
        assert!(p("link").is_symlink() && p("dir").is_dir());
        // A hard link to a file elsewhere is cut, not written through.
        std::fs::hard_link(outside.path().join("secret"), p("hard")).unwrap();
        let linked = ino("hard");
        b.write_scratch("hard", b"base\n", false).unwrap();
        assert_eq!(std::fs::read(p("hard")).unwrap(), b"base\n");
        assert_ne!(
            ino("hard"),
            linked,
            "a file with another name gets a new inode"
        );
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"secret"
        );
        // Someone else's file (root can make one) is replaced by one of ours, not written into.
        if nix::unistd::geteuid().is_root() {
            std::fs::write(p("theirs"), b"theirs\n").unwrap();
            std::os::unix::fs::chown(p("theirs"), Some(65534), Some(65534)).unwrap();
            b.write_scratch("theirs", b"ours\n", false).unwrap();
            assert_eq!(std::fs::read(p("theirs")).unwrap(), b"ours\n");
            // (Its inode number may be reused: the owner tells the files apart.)
            assert_eq!(std::fs::symlink_metadata(p("theirs")).unwrap().uid(), 0);
        }

        // A durable tree writes atomically instead.
        let durable = Beneath::open(tmp.path()).unwrap();
        durable
            .write_scratch("a/new.txt", b"durable\n", false)
            .unwrap();
        assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"durable\n");
    }

    /// Many paths are looked at by several threads: each answer is the one a single `lstat`
    /// gives, in the order asked, whatever is there (a file, a symlink, a directory, nothing,
    /// a path through a symlink, a path hunkgate refuses).
    #[test]
    fn lstat_many_answers_each_path_in_order() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        let b = Beneath::open_scratch(tmp.path()).unwrap();
        let mut paths = Vec::new();
        for d in 0..30 {
            for f in 0..30 {
                let path = format!("d{d}/f{f}");
                b.write_scratch(&path, path.as_bytes(), false).unwrap();
                paths.push(path);
            }
        }
        symlink("d0/f0", tmp.path().join("link")).unwrap();
        symlink(outside.path(), tmp.path().join("out")).unwrap();
        let odd = [
            "link",
            "d3",
            "d3/missing",
            "nope/f",
            "out/secret",
            "../x",
            "d9/f9",
        ];
        for (i, p) in odd.iter().enumerate() {
            paths.insert(i * 100, p.to_string());
        }
        assert!(paths.len() >= Beneath::LSTAT_PARALLEL_FROM);
        let many = b.lstat_many(&paths);
        assert_eq!(many.len(), paths.len());
        for (path, got) in paths.iter().zip(&many) {
            let one = b.lstat(path);
            match (got, &one) {
                (Ok(Some(a)), Ok(Some(b))) => {
                    assert_eq!(
                        (a.st_ino, a.st_mode, a.st_size),
                        (b.st_ino, b.st_mode, b.st_size)
                    )
                }
                (Ok(None), Ok(None)) => {}
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                _ => panic!("{path}: lstat_many said {got:?}, lstat {one:?}"),
            }
        }
        // The odd ones are what they are, and the files are themselves.
        let is_link = |st: &nix::sys::stat::FileStat| {
            SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
        };
        assert!(matches!(&many[0], Ok(Some(st)) if is_link(st)));
        assert!(matches!(&many[200], Ok(None)));
        assert!(matches!(&many[300], Ok(None)));
        assert!(many[400].is_err(), "a path through a symlink is refused");
        assert!(many[500].is_err(), "`..` is refused");
        let meta = std::fs::metadata(tmp.path().join("d9/f9")).unwrap();
        assert!(matches!(&many[600], Ok(Some(st)) if st.st_ino == meta.ino()));
    }

    #[test]
    fn never_writes_or_reads_through_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        symlink(outside.path(), tmp.path().join("link")).unwrap();
        symlink(outside.path().join("secret"), tmp.path().join("file-link")).unwrap();
        let b = Beneath::open(tmp.path()).unwrap();
        // Positive control: the same names work as plain files and directories.
        b.write_atomic("dir/secret", b"x", false).unwrap();
        assert!(b.read("dir/secret", 10).unwrap().is_some());

        assert!(matches!(
            b.read("link/secret", 10),
            Err(FsError::Symlink { .. })
        ));
        assert!(matches!(
            b.read("file-link", 10),
            Err(FsError::Symlink { .. })
        ));
        assert!(matches!(
            b.write_atomic("link/secret", b"pwned", false),
            Err(FsError::Symlink { .. })
        ));
        assert!(matches!(
            b.write_atomic("file-link", b"pwned", false),
            Err(FsError::Symlink { .. })
        ));
        assert!(matches!(
            b.remove_file("file-link"),
            Err(FsError::Symlink { .. })
        ));
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"secret"
        );
        assert_eq!(b.kind("file-link").unwrap(), Some(Kind::Symlink));
        assert_eq!(
            b.read_link("file-link").unwrap().unwrap(),
            outside.path().join("secret").as_os_str().as_encoded_bytes()
        );
    }

    /// A change of type the reviewer accepted replaces the link itself (refused by default), a
    /// symlink is swapped in over a file or another link, and a last look that finds the entry
    /// changed leaves it, with no temporary name behind.
    #[test]
    fn a_change_of_type_replaces_the_entry_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        symlink(outside.path().join("secret"), tmp.path().join("file-link")).unwrap();
        std::fs::write(tmp.path().join("plain"), b"plain\n").unwrap();
        let b = Beneath::open(tmp.path()).unwrap();
        let write = |at: AtLink| {
            b.write_atomic_with("file-link", b"a file\n", (false, None), at, |_| Ok(true))
        };
        assert!(matches!(
            write(AtLink::Refuse),
            Err(FsError::Symlink { .. })
        ));
        write(AtLink::Replace).unwrap();
        assert_eq!(
            b.kind("file-link").unwrap(),
            Some(Kind::File {
                executable: false,
                size: 7
            })
        );
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"secret"
        );

        b.symlink_checked("plain", b"target-a", |_| Ok(true))
            .unwrap();
        assert_eq!(b.read_link("plain").unwrap().unwrap(), b"target-a");
        b.symlink_checked("plain", b"target-b", |_| Ok(true))
            .unwrap();
        assert_eq!(b.read_link("plain").unwrap().unwrap(), b"target-b");
        let r = b.symlink_checked("plain", b"target-c", |_| Ok(false));
        assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
        assert_eq!(b.read_link("plain").unwrap().unwrap(), b"target-b");
        b.symlink_checked("new/link", b"../plain", |_| Ok(true))
            .unwrap();
        assert_eq!(b.read_link("new/link").unwrap().unwrap(), b"../plain");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn long_names_fit_and_a_changed_file_is_not_renamed_over() {
        let tmp = tempfile::tempdir().unwrap();
        let b = Beneath::open(tmp.path()).unwrap();
        // 250 bytes: a temporary name built from it would pass the 255-byte limit.
        let long = format!("dir/{}", "l".repeat(250));
        b.write_atomic(&long, b"one\n", false).unwrap();
        b.write_atomic(&long, b"two\n", false).unwrap();
        assert_eq!(b.read(&long, 100).unwrap().unwrap().0, b"two\n");
        let real = tmp.path().join(&long);
        let r = b.write_atomic_checked(&long, b"three\n", false, |_| {
            std::fs::write(&real, b"user\n").unwrap();
            Ok(false)
        });
        assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
        assert_eq!(std::fs::read(&real).unwrap(), b"user\n");
        let names: Vec<_> = std::fs::read_dir(tmp.path().join("dir"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "no stray temporary file: {names:?}");
        // Positive control: a check that passes writes.
        b.write_atomic_checked(&long, b"four\n", false, |_| Ok(true))
            .unwrap();
        assert_eq!(std::fs::read(&real).unwrap(), b"four\n");
    }

    #[test]
    fn fifos_are_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&tmp.path().join("pipe"), Mode::from_bits_truncate(0o644)).unwrap();
        let b = Beneath::open(tmp.path()).unwrap();
        assert!(matches!(
            b.read("pipe", 10),
            Err(FsError::NotRegular { .. })
        ));
        assert_eq!(b.kind("pipe").unwrap(), Some(Kind::Other("fifo")));
    }
}

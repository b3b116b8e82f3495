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
mod write;
pub use write::*;

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
    fn io(path: &str, e: impl Into<std::io::Error>) -> Self {
        FsError::Io {
            path: path.to_string(),
            source: e.into(),
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
        // The file may grow after fstat; never read more than the cap.
        let buf = read_capped(std::fs::File::from(fd), path, cap, size)?;
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

    /// Set or clear the executable bits of the regular file at `path`, if `still` vouches for
    /// it: the file is opened once, `still` is given what that open file holds (its bytes, up
    /// to `cap`, and whether it is executable), and the bits are changed on that same open file
    /// only when it answers yes. Then the path is looked at once more, as a write's is:
    /// - a file put at the path meanwhile (a save by rename) keeps its mode, and the answer is
    ///   [`FsError::Changed`];
    /// - a file written in place meanwhile (its bytes no longer those `still` saw) gets its
    ///   mode back, and the answer is [`FsError::Changed`] too.
    ///
    /// So a mode change lands only on the content it was checked against, never on a save
    /// that came between the check and the change. Nothing at the path, or something other
    /// than a regular file or symlink, is [`FsError::Changed`] as well (not what was checked);
    /// a symlink is [`FsError::Symlink`], never followed.
    pub fn set_executable_checked(
        &self,
        path: &str,
        executable: bool,
        cap: u64,
        still: impl FnOnce(&[u8], bool) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        let changed = || FsError::Changed {
            path: path.to_string(),
        };
        let io = |e| FsError::io(path, e);
        let parts = components(path)?;
        let dir = self.parent_dir(path, &parts, false)?.ok_or_else(changed)?;
        let name = parts[parts.len() - 1];
        let fd = nix::fcntl::openat(
            dir.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP => FsError::Symlink {
                path: path.to_string(),
            },
            Errno::ENOENT => changed(),
            e => io(e),
        })?;
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(io)?;
        let Kind::File {
            executable: was_executable,
            ..
        } = kind_of(&st)
        else {
            return Err(changed());
        };
        let mut file = std::fs::File::from(fd);
        // Just opened: read from where it is, its start.
        let seen = read_capped(&mut file, path, cap, st.st_size as u64)?;
        if !still(&seen, was_executable)? {
            return Err(changed());
        }
        let before = mode_bits(&st) & 0o7777;
        let chmod = |file: &std::fs::File, mode: u32| {
            nix::sys::stat::fchmod(file.as_fd(), Mode::from_bits_truncate(mode as _))
                .map_err(io)?;
            nix::unistd::fsync(file.as_fd()).map_err(io)
        };
        chmod(&file, with_exec(before, executable))?;
        // Still the file at the path, and still what was checked?
        let here = nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW);
        let same_file = here.is_ok_and(|h| (h.st_dev, h.st_ino) == (st.st_dev, st.st_ino));
        if !same_file {
            // Replaced: the mode went to the file that is gone from the path; the one there
            // now is the user's, untouched.
            return Err(changed());
        }
        if read_from_start(&mut file, path, cap, st.st_size as u64)? != seen {
            chmod(&file, before)?;
            return Err(changed());
        }
        Ok(())
    }
}

/// What `reader` holds from where it is, up to `cap` bytes (over it: [`FsError::TooLarge`]);
/// `size` is about how many there are (a file's size as `fstat` saw it).
fn read_capped(reader: impl Read, path: &str, cap: u64, size: u64) -> Result<Vec<u8>, FsError> {
    let mut buf = Vec::with_capacity(size.min(cap) as usize);
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| FsError::io(path, e))?;
    if buf.len() as u64 > cap {
        return Err(FsError::TooLarge {
            path: path.to_string(),
            cap,
        });
    }
    Ok(buf)
}

/// All of an open file's bytes from its start, up to `cap` ([`read_capped`]; `size` as there).
fn read_from_start(
    file: &mut std::fs::File,
    path: &str,
    cap: u64,
    size: u64,
) -> Result<Vec<u8>, FsError> {
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(0))
        .map_err(|e| FsError::io(path, e))?;
    read_capped(file, path, cap, size)
}

#[cfg(test)]
mod tests;

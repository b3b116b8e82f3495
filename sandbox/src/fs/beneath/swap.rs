//! Putting new content in place over a user's file without losing a write the user makes
//! meanwhile.
//!
//! A rename over a file is not atomic with respect to someone writing it: a write that lands
//! between the last look at the file and the rename, or one made afterwards through a
//! descriptor opened before it (an `O_APPEND` logger, an editor's save in progress), goes into
//! the replaced file, which the rename has just taken the name from — lost. So on Linux the
//! new content is not renamed over the file but swapped with it (`renameat2(RENAME_EXCHANGE)`):
//! the user's file keeps a name (the temporary one) until it has been looked at once more,
//! after the swap, where no later save through its path can reach it:
//! - it must still be the same file (an editor saving by rename in the window swapped in
//!   another one),
//! - nobody may have it open for writing (a read lease, which the kernel grants only then,
//!   and at once takes back: [`open_for_writing`]) — a descriptor kept open would write into a
//!   file with no name after this,
//! - and its content must still be what the new content was made from.
//!
//! Then it is unlinked; otherwise the two are swapped back, so the user's file, and every
//! descriptor open on it, is at its path again as if nothing happened, and the caller answers
//! that the file changed. A file that did not exist is created with `RENAME_NOREPLACE`: one the
//! user created in the window is never replaced. Where the kernel or file system has neither
//! (EINVAL, ENOSYS; any other system), the write falls back to a plain rename after the last
//! look, as before.
//!
//! What remains (said in the security notes): an `open` in flight across the swap (its lookup
//! found the old file, its write access is counted a few instructions later) and writing
//! after the look; and, when a conflict is being taken back, a write through the path in the
//! microseconds between the swap and the swap back goes to the new content, which is dropped.

use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::UnlinkatFlags;

use super::{kind_of, FsError, Kind};
use crate::supervise::os::open_for_writing;

/// How the new content went in.
#[derive(Debug)]
pub(super) enum Swapped {
    /// In place; the user's file (if any) has no name left: the descriptor still holding it,
    /// for the caller to close.
    Done(Option<OwnedFd>),
    /// Neither swap nor no-replace rename is supported here: rename over it as before.
    Unsupported,
    /// The file changed and could not be swapped back: the user's version is at the
    /// temporary name (which must not be removed), the new content at the path.
    Stranded(FsError),
}

/// The regular file at `name` in `dir`, opened read-only (never through a symlink, never
/// blocking on a FIFO swapped in), or the symlink there itself: what the write is about to
/// replace, held so that it can be recognized, and a file probed for writers, after the swap.
/// None when nothing (or neither) is there.
pub(super) fn hold_replaced(dir: &OwnedFd, name: &str) -> Option<OwnedFd> {
    let opened = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    let fd = match opened {
        Ok(fd) => fd,
        Err(Errno::ELOOP) => return hold_symlink(dir, name),
        Err(_) => return None,
    };
    let st = nix::sys::stat::fstat(fd.as_fd()).ok()?;
    matches!(kind_of(&st), Kind::File { .. }).then_some(fd)
}

/// The symlink `name` in `dir` itself (an `O_PATH` descriptor of the link, never its target).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn hold_symlink(dir: &OwnedFd, name: &str) -> Option<OwnedFd> {
    let fd = nix::fcntl::openat(
        dir.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = nix::sys::stat::fstat(fd.as_fd()).ok()?;
    matches!(kind_of(&st), Kind::Symlink).then_some(fd)
}

/// Elsewhere a link cannot be held: the write renames over it after the last look.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn hold_symlink(_dir: &OwnedFd, _name: &str) -> Option<OwnedFd> {
    None
}

/// Put `tmp` at `name` in `dir`: swapped with `held` (the file there when the caller last
/// looked) and that file checked after the swap with `unchanged`, given its name then (`tmp`);
/// or, when nothing was there, created without replacing anything one appeared since.
/// `Err(Changed)` / `Err(Busy)` leave the user's file at `name`, untouched.
pub(super) fn swap_in(
    dir: &OwnedFd,
    tmp: &str,
    name: &str,
    path: &str,
    held: Option<OwnedFd>,
    unchanged: impl FnOnce(&str) -> Result<bool, FsError>,
) -> Result<Swapped, FsError> {
    let Some(old) = held else {
        return match rename2(dir, tmp, name, Rename::NoReplace) {
            Ok(()) => Ok(Swapped::Done(None)),
            Err(Errno::EEXIST) => Err(changed(path)),
            Err(e) if unsupported(e) => Ok(Swapped::Unsupported),
            Err(e) => Err(FsError::io(path, e)),
        };
    };
    match rename2(dir, tmp, name, Rename::Exchange) {
        Ok(()) => {}
        Err(e) if unsupported(e) => return Ok(Swapped::Unsupported),
        Err(e) => return Err(FsError::io(path, e)),
    }
    match after_swap(dir, tmp, path, &old, unchanged) {
        Ok(()) => {
            // The new content is in place whatever this says; a file left under the temporary
            // name goes when no live hunkgate wrote it ([`super::Beneath::remove_stale_temps`]).
            if let Err(e) = nix::unistd::unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir) {
                tracing::warn!(path, tmp, error = %e, "removing the replaced file's name");
            }
            Ok(Swapped::Done(Some(old)))
        }
        Err(why) => match rename2(dir, tmp, name, Rename::Exchange) {
            Ok(()) => Err(why),
            Err(e) => Ok(Swapped::Stranded(FsError::Io {
                path: path.to_string(),
                source: std::io::Error::new(
                    std::io::Error::from(e).kind(),
                    format!("{why}, but putting your version back failed ({e}): it is in {tmp} beside it"),
                ),
            })),
        },
    }
}

/// How a file was taken away for a removal.
#[derive(Debug)]
pub(super) enum Taken {
    /// Gone; the descriptor holding the file, for the caller to close.
    Done(OwnedFd),
    /// No rename without replacing here: remove it after the last look, as before.
    Unsupported,
    /// The file changed and could not be put back: the user's version is at the temporary name
    /// (which must not be removed).
    Stranded(FsError),
}

/// Remove the user's file `name` from `dir`, a removal the reviewer accepted, without losing a
/// write made since the last look: the file is first renamed to `tmp` (replacing nothing), and
/// looked at there as after a swap — the same file as `held`, open for writing by nobody, and
/// (`unchanged`, given its path then) still what the removal was planned against — before its
/// name goes; otherwise it is renamed back. A save through the path after the rename makes a new
/// file there, which stays (a later edit of the user's, not a lost one).
/// `Err(Changed)` / `Err(Busy)` leave the user's file at `name`, untouched.
pub(super) fn take_away(
    dir: &OwnedFd,
    name: &str,
    tmp: &str,
    path: &str,
    held: OwnedFd,
    unchanged: impl FnOnce(&str) -> Result<bool, FsError>,
) -> Result<Taken, FsError> {
    match rename2(dir, name, tmp, Rename::NoReplace) {
        Ok(()) => {}
        Err(e) if unsupported(e) => return Ok(Taken::Unsupported),
        Err(e) => return Err(FsError::io(path, e)),
    }
    let looked = after_swap(dir, tmp, path, &held, unchanged).and_then(|()| {
        nix::unistd::unlinkat(dir.as_fd(), tmp, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| FsError::io(path, e))
    });
    match looked {
        Ok(()) => Ok(Taken::Done(held)),
        Err(why) => match rename2(dir, tmp, name, Rename::NoReplace) {
            Ok(()) => Err(why),
            Err(e) => Ok(Taken::Stranded(FsError::Io {
                path: path.to_string(),
                source: std::io::Error::new(
                    std::io::Error::from(e).kind(),
                    format!("{why}, but putting your version back failed ({e}): it is in {tmp} beside it"),
                ),
            })),
        },
    }
}

/// The look after the swap at the user's file, now named `tmp`: the same file as `old`, open
/// for writing by nobody, and (`unchanged`, given its path) still what the new content was
/// made from. The writers are asked first, so that the content read is final.
fn after_swap(
    dir: &OwnedFd,
    tmp: &str,
    path: &str,
    old: &OwnedFd,
    unchanged: impl FnOnce(&str) -> Result<bool, FsError>,
) -> Result<(), FsError> {
    let same = match (
        nix::sys::stat::fstatat(dir.as_fd(), tmp, AtFlags::AT_SYMLINK_NOFOLLOW),
        nix::sys::stat::fstat(old.as_fd()),
    ) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    };
    if !same {
        return Err(changed(path));
    }
    if open_for_writing(old.as_fd()) == Some(true) {
        return Err(FsError::Busy {
            path: path.to_string(),
        });
    }
    let kept = match path.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/{tmp}"),
        None => tmp.to_string(),
    };
    if unchanged(&kept)? {
        Ok(())
    } else {
        Err(changed(path))
    }
}

fn changed(path: &str) -> FsError {
    FsError::Changed {
        path: path.to_string(),
    }
}

/// `renameat2` within `dir`, by the system call (rustix's, which needs no wrapper of the C
/// library's: that is not in every one hunkgate builds against).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn rename2(dir: &OwnedFd, from: &str, to: &str, flags: Rename) -> Result<(), Errno> {
    use rustix::fs::RenameFlags;
    let flags = match flags {
        Rename::Exchange => RenameFlags::EXCHANGE,
        Rename::NoReplace => RenameFlags::NOREPLACE,
    };
    rustix::fs::renameat_with(dir, from, dir, to, flags)
        .map_err(|e| Errno::from_raw(e.raw_os_error()))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn rename2(_dir: &OwnedFd, _from: &str, _to: &str, _flags: Rename) -> Result<(), Errno> {
    Err(Errno::ENOSYS)
}

/// How [`rename2`] renames: swapping two entries, or refusing to replace one.
#[derive(Clone, Copy)]
enum Rename {
    Exchange,
    NoReplace,
}

/// The kernel or the file system cannot swap or refuse to replace.
fn unsupported(e: Errno) -> bool {
    matches!(e, Errno::EINVAL | Errno::ENOSYS | Errno::ENOTSUP)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;
    use std::io::Write;

    fn dir_fd(path: &std::path::Path) -> OwnedFd {
        nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    /// A descriptor open for writing is seen, a read-only one is not; closed, neither is.
    #[test]
    fn a_writer_holding_the_file_open_is_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, "x\n").unwrap();
        let dir = dir_fd(tmp.path());
        let held = hold_replaced(&dir, "f").unwrap();
        assert_eq!(open_for_writing(held.as_fd()), Some(false));
        let reader = std::fs::File::open(&path).unwrap();
        assert_eq!(open_for_writing(held.as_fd()), Some(false));
        let writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        assert_eq!(open_for_writing(held.as_fd()), Some(true));
        drop((reader, writer));
        assert_eq!(open_for_writing(held.as_fd()), Some(false));
    }

    /// A write made after the last look (which a rename over the file would lose) puts the
    /// user's file back at its path, with the write in it; a descriptor still open for writing
    /// on it does too, and keeps writing into the file at the path; without either, the new
    /// content is in place and the old file has no name.
    #[test]
    fn a_write_made_during_the_swap_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_fd(tmp.path());
        let f = tmp.path().join("f");
        std::fs::write(&f, "old\n").unwrap();
        std::fs::write(tmp.path().join("new"), "new\n").unwrap();
        let held = hold_replaced(&dir, "f");
        // The user's write lands after the hub's last look, through a descriptor of its own.
        let mut late = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        late.write_all(b"typed\n").unwrap();
        drop(late);
        let r = swap_in(&dir, "new", "f", "f", held, |at| {
            Ok(std::fs::read(tmp.path().join(at)).unwrap() == b"old\n")
        });
        assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
        assert_eq!(std::fs::read(&f).unwrap(), b"old\ntyped\n");
        // The new content is back under its temporary name, for the caller to remove.
        assert_eq!(std::fs::read(tmp.path().join("new")).unwrap(), b"new\n");

        // Held open for writing: refused as busy, the file back in place, and what the
        // descriptor writes next is in it.
        let mut writer = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        std::fs::write(tmp.path().join("new"), "new\n").unwrap();
        let held = hold_replaced(&dir, "f");
        let r = swap_in(&dir, "new", "f", "f", held, |_| Ok(true));
        assert!(matches!(r, Err(FsError::Busy { .. })), "{r:?}");
        writer.write_all(b"more\n").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"old\ntyped\nmore\n");

        // Positive control: closed, and unchanged, the new content goes in.
        drop(writer);
        std::fs::write(tmp.path().join("new"), "new\n").unwrap();
        let held = hold_replaced(&dir, "f");
        let r = swap_in(&dir, "new", "f", "f", held, |at| {
            Ok(std::fs::read(tmp.path().join(at)).unwrap() == b"old\ntyped\nmore\n")
        });
        assert!(matches!(r, Ok(Swapped::Done(Some(_)))), "{r:?}");
        assert_eq!(std::fs::read(&f).unwrap(), b"new\n");
        assert!(!tmp.path().join("new").exists());
    }

    /// A removal: a write made after the last look, or a descriptor still open for writing,
    /// puts the file back at its path with every write in it; without either it is gone.
    #[test]
    fn a_removal_keeps_a_file_written_meanwhile() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_fd(tmp.path());
        let f = tmp.path().join("f");
        std::fs::write(&f, "old\n").unwrap();
        let held = hold_replaced(&dir, "f").unwrap();
        let mut late = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        late.write_all(b"typed\n").unwrap();
        drop(late);
        let r = take_away(&dir, "f", ".t", "f", held, |at| {
            Ok(std::fs::read(tmp.path().join(at)).unwrap() == b"old\n")
        });
        assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
        assert_eq!(std::fs::read(&f).unwrap(), b"old\ntyped\n");
        assert!(!tmp.path().join(".t").exists());

        let mut writer = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
        let held = hold_replaced(&dir, "f").unwrap();
        let r = take_away(&dir, "f", ".t", "f", held, |_| Ok(true));
        assert!(matches!(r, Err(FsError::Busy { .. })), "{r:?}");
        writer.write_all(b"more\n").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"old\ntyped\nmore\n");

        // Positive control: closed, and unchanged, it goes.
        drop(writer);
        let held = hold_replaced(&dir, "f").unwrap();
        let r = take_away(&dir, "f", ".t", "f", held, |at| {
            Ok(std::fs::read(tmp.path().join(at)).unwrap() == b"old\ntyped\nmore\n")
        });
        assert!(matches!(r, Ok(Taken::Done(_))), "{r:?}");
        assert!(!f.exists());
        assert!(!tmp.path().join(".t").exists());
    }

    /// A file created by the user after the last look is not replaced.
    #[test]
    fn a_file_created_meanwhile_is_not_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = dir_fd(tmp.path());
        std::fs::write(tmp.path().join("new"), "new\n").unwrap();
        let held = hold_replaced(&dir, "f");
        std::fs::write(tmp.path().join("f"), "user's\n").unwrap();
        let r = swap_in(&dir, "new", "f", "f", held, |_| Ok(true));
        assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
        assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), b"user's\n");
        std::fs::remove_file(tmp.path().join("f")).unwrap();
        let r = swap_in(&dir, "new", "f", "f", None, |_| Ok(true));
        assert!(matches!(r, Ok(Swapped::Done(None))), "{r:?}");
        assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), b"new\n");
    }
}

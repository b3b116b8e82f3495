//! **Between runs a slot holds exactly its base — nothing more, nothing less.** Whatever an
//! agent leaves in its slot that the base does not have goes at the slot's next sync (the
//! put-back once its run is over, or the next run's sync if that comes first), whatever it
//! is: a file under an ignore rule (the sandbox's `.gitignore` files are the agent's to write,
//! so no rule of theirs decides what stays — a self-ignoring `sub/.gitignore` of `*`, a line
//! appended to the base's own `.gitignore`, a build cache all go alike), a name that is not
//! UTF-8, an empty directory, a `chmod 000` directory, a tree deeper than `PATH_MAX`. What the
//! next agent reads is what the reviewer's checkout held, and nothing one agent planted can be
//! published by the next as its own. (A run's read-back reports what it cannot review — see
//! [`crate::status::snapshot`] — before this removes it.)
//!
//! Only the base's directories are ever read: an entry of one that is neither a base path nor
//! a base directory is removed whole, never entered as a path. Removal goes by directory
//! descriptor (`openat`, `unlinkat`), never by a path from the slot's root, so no depth is too
//! deep and nothing is followed; a directory its owner cannot search or write is given the
//! owner's `rwx` first (the sync runs as the user who owns what the agent made: the sandbox
//! user under `--isolation user`, the hub's own under `none`).
//!
//! Which base directories are read: with change notification's word ([`Dirty`]), those where
//! it saw something; else, with a sync record's directory stats ([`SyncRecord::dirs`]), those
//! whose stat moved since (or is racy) and those it does not name; else every one. A
//! directory's entries cannot change without its ctime changing.
//!
//! **Layer:** imports [`crate::fs::beneath`], [`crate::odb::store`], [`crate::status::statcache`],
//! [`crate::status::watch`] and [`crate::wire`].

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FchmodatFlags, FileStat, Mode as Perm, SFlag};
use nix::unistd::UnlinkatFlags;

use crate::fs::beneath::Beneath;
use crate::odb::store::FlatTree;
use crate::status::statcache::{file_stat, is_racy};
use crate::status::watch::Dirty;
use crate::wire::SyncRecord;

const DIR_FLAGS: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC)
    .union(OFlag::O_RDONLY);

/// Every directory on the way to a path of `base` (`""`, the slot itself, included).
pub fn base_dirs(base: &FlatTree) -> BTreeSet<&str> {
    let mut dirs = BTreeSet::from([""]);
    for path in base.keys() {
        let mut d = path.as_str();
        while let Some(i) = d.rfind('/') {
            d = &d[..i];
            if !dirs.insert(d) {
                break;
            }
        }
    }
    dirs
}

/// Remove from the slot `dir` every entry of the base's directories that is neither a path of
/// `base` nor a directory on the way to one (its own `.git` aside: the sync makes that anew),
/// reading only the directories `record` or `dirty` cannot vouch for (see the module docs).
/// Returns how many entries were removed (a directory counts once).
///
/// A base path that is now of another kind (a directory where the base has a file, a file
/// where it has a directory) is left for the sync, which writes it or starts from scratch.
pub fn drop_foreign(
    dir: &Path,
    base: &FlatTree,
    record: Option<&SyncRecord>,
    dirty: Option<&Dirty>,
) -> std::io::Result<usize> {
    let dirs = base_dirs(base);
    let read = match (dirty, record.filter(|r| !r.dirs.is_empty())) {
        (Some(dirty), _) => dirs_seen(&dirs, dirty),
        (None, Some(record)) => dirs_moved(dir, &dirs, record)?,
        (None, None) => dirs.iter().copied().collect(),
    };
    let root = nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Perm::empty())?;
    let mut removed = 0;
    for d in read {
        let Some(fd) = open_below(&root, d)? else {
            continue;
        };
        // The agent's: neither the slot's own `.git` nor a base path or directory.
        let theirs = |name: &CStr| {
            let bytes = name.to_bytes();
            if d.is_empty() && bytes == b".git" {
                return false;
            }
            let path = std::str::from_utf8(bytes).ok().map(|n| match d {
                "" => n.to_string(),
                _ => format!("{d}/{n}"),
            });
            !path.is_some_and(|p| base.contains_key(&p) || dirs.contains(p.as_str()))
        };
        for name in entries(fd.as_fd(), theirs)? {
            remove_at(fd.as_fd(), &name)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The base directories where something may have come since the watch that saw `dirty` was
/// cleared: the nearest base directory holding each named path or dirty tree, and every base
/// directory inside a dirty tree.
fn dirs_seen<'a>(dirs: &BTreeSet<&'a str>, dirty: &Dirty) -> Vec<&'a str> {
    let nearest = |path: &str| -> &'a str {
        let mut d = path;
        loop {
            if let Some(found) = dirs.get(d) {
                return found;
            }
            match d.rfind('/') {
                Some(i) => d = &d[..i],
                None => return "",
            }
        }
    };
    let mut out: BTreeSet<&'a str> = BTreeSet::new();
    for p in &dirty.paths {
        out.insert(nearest(p.rfind('/').map_or("", |i| &p[..i])));
    }
    for t in &dirty.trees {
        out.insert(nearest(t));
        if t.is_empty() {
            out.extend(dirs.iter().copied());
            continue;
        }
        let prefix = format!("{t}/");
        let inside = dirs
            .iter()
            .copied()
            .skip_while(|d| *d < prefix.as_str())
            .take_while(|d| d.starts_with(&prefix));
        out.extend(inside);
    }
    out.into_iter().collect()
}

/// The base directories whose stat differs from `record`'s (or is racy against its stamp),
/// and those it does not name.
fn dirs_moved<'a>(
    dir: &Path,
    dirs: &BTreeSet<&'a str>,
    record: &SyncRecord,
) -> std::io::Result<Vec<&'a str>> {
    let stamp = (record.stamp_s, record.stamp_ns);
    let recorded: std::collections::HashMap<&str, &crate::wire::FileStat> =
        record.dirs.iter().map(|(d, s)| (d.as_str(), s)).collect();
    let root = Beneath::open(dir).map_err(std::io::Error::other)?;
    let below: Vec<&str> = dirs.iter().copied().filter(|d| !d.is_empty()).collect();
    let mut now: Vec<Option<crate::wire::FileStat>> =
        vec![nix::sys::stat::lstat(dir).ok().map(|st| file_stat(&st))];
    now.extend(
        root.lstat_many(&below)
            .into_iter()
            .map(|st| st.ok().flatten().map(|st| file_stat(&st))),
    );
    Ok(std::iter::once("")
        .chain(below.iter().copied())
        .zip(now)
        .filter(|(d, now)| {
            !recorded
                .get(d)
                .is_some_and(|was| *now == Some(**was) && !is_racy(was, stamp))
        })
        .map(|(d, _)| d)
        .collect())
}

/// The directory `rel` below `root` (`""` is `root` itself), opened without following
/// anything; None when it is missing or not a directory now (the sync's own checks deal with
/// a base directory the agent replaced).
fn open_below(root: &OwnedFd, rel: &str) -> std::io::Result<Option<OwnedFd>> {
    let mut fd = root.try_clone()?;
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        fd = match open_dir_at(fd.as_fd(), &CString::new(part)?) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
    }
    Ok(Some(fd))
}

/// The names in the open directory `dir` (`.` and `..` aside) that `wanted` picks.
fn entries(dir: BorrowedFd<'_>, wanted: impl Fn(&CStr) -> bool) -> std::io::Result<Vec<CString>> {
    // A copy of the descriptor for the listing (it shares the read position, read to its end
    // here once): the caller keeps `dir` for the removals.
    let mut list = nix::dir::Dir::from_fd(dir.try_clone_to_owned()?)?;
    let mut out = Vec::new();
    for entry in list.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if !matches!(name.to_bytes(), b"." | b"..") && wanted(name) {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Open the directory `name` in `parent`, nothing followed; one its owner may not read
/// (`chmod 000`) is given the owner's `rwx` first.
fn open_dir_at(parent: BorrowedFd<'_>, name: &CStr) -> nix::Result<OwnedFd> {
    match nix::fcntl::openat(parent, name, DIR_FLAGS, Perm::empty()) {
        Err(Errno::EACCES) => {
            let st = nix::sys::stat::fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
            open_up(parent, name, &st)?;
            nix::fcntl::openat(parent, name, DIR_FLAGS, Perm::empty())
        }
        other => other,
    }
}

/// Give the directory `name` in `parent` (whose `lstat` is `st`) its owner's `rwx`, if it
/// lacks any of them.
fn open_up(parent: BorrowedFd<'_>, name: &CStr, st: &FileStat) -> nix::Result<()> {
    let mode = Perm::from_bits_truncate(st.st_mode & 0o7777);
    if mode.contains(Perm::S_IRWXU) {
        return Ok(());
    }
    // `chmod` follows a symlink, and `name` was a directory a moment ago: only something
    // running as the same user could swap it since, and that one could chmod anyway.
    nix::sys::stat::fchmodat(
        parent,
        name,
        mode | Perm::S_IRWXU,
        FchmodatFlags::FollowSymlink,
    )
}

/// One directory on the way down of [`remove_at`]: its name in the one above, its identity
/// (to check `..` on the way back up), and the subdirectories still to remove.
struct Level {
    name: CString,
    id: (nix::libc::dev_t, nix::libc::ino_t),
    pending: Vec<CString>,
    /// It was taken apart once already and was not empty then.
    again: bool,
}

/// Remove the entry `name` of the directory `parent` — a file, a symlink (itself), anything
/// else, or a whole directory tree — following nothing. A directory tree is taken apart one
/// directory at a time, each opened from the one above and left by `..` (checked to be the
/// directory it came from), so neither its depth nor its path length is bounded by file
/// descriptors or `PATH_MAX`. A directory its owner may not search or write is opened up
/// first. Absent is fine.
pub fn remove_at(parent: BorrowedFd<'_>, name: &CStr) -> std::io::Result<()> {
    let st = match nix::sys::stat::fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !is_dir(&st) {
        return Ok(nix::unistd::unlinkat(
            parent,
            name,
            UnlinkatFlags::NoRemoveDir,
        )?);
    }
    let (mut cur, first) = descend(parent, name, &st)?;
    let mut levels = vec![first];
    loop {
        if let Some(child) = levels.last_mut().and_then(|l| l.pending.pop()) {
            let at = cur.as_fd();
            match nix::sys::stat::fstatat(at, child.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) if is_dir(&st) => {
                    let (fd, level) = descend(at, &child, &st)?;
                    cur = fd;
                    levels.push(level);
                }
                Ok(_) => nix::unistd::unlinkat(at, child.as_c_str(), UnlinkatFlags::NoRemoveDir)?,
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let Some(done) = levels.pop() else {
            return Ok(());
        };
        let up = match levels.last() {
            None => parent.try_clone_to_owned()?,
            Some(above) => {
                let up = nix::fcntl::openat(cur.as_fd(), "..", DIR_FLAGS, Perm::empty())?;
                let st = nix::sys::stat::fstat(up.as_fd())?;
                if (st.st_dev, st.st_ino) != above.id {
                    return Err(std::io::Error::other(
                        "a directory being removed was moved away meanwhile",
                    ));
                }
                up
            }
        };
        match nix::unistd::unlinkat(up.as_fd(), done.name.as_c_str(), UnlinkatFlags::RemoveDir) {
            // An entry the listing did not return (one may go unlisted while a directory is
            // emptied as it is read): the directory is taken apart once more.
            Err(Errno::ENOTEMPTY) if !done.again => {
                let st = nix::sys::stat::fstatat(
                    up.as_fd(),
                    done.name.as_c_str(),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
                let (fd, level) = descend(up.as_fd(), &done.name, &st)?;
                cur = fd;
                levels.push(Level {
                    again: true,
                    ..level
                });
                continue;
            }
            other => other?,
        }
        if levels.is_empty() {
            return Ok(());
        }
        cur = up;
    }
}

/// Open the directory `name` of `parent` (whose `lstat` is `st`) for [`remove_at`], opened up
/// first if its owner lacks any of `rwx` (it is emptied next), and remove every entry of it
/// that is not a directory; the subdirectories are its level's `pending`.
fn descend(
    parent: BorrowedFd<'_>,
    name: &CStr,
    st: &FileStat,
) -> std::io::Result<(OwnedFd, Level)> {
    open_up(parent, name, st)?;
    let fd = nix::fcntl::openat(parent, name, DIR_FLAGS, Perm::empty())?;
    let mut pending = Vec::new();
    let mut list = nix::dir::Dir::from_fd(fd.try_clone()?)?;
    for entry in list.iter() {
        let entry = entry?;
        let child = entry.file_name();
        if matches!(child.to_bytes(), b"." | b"..") {
            continue;
        }
        let dir = match entry.file_type() {
            Some(t) => t == nix::dir::Type::Directory,
            None => nix::sys::stat::fstatat(fd.as_fd(), child, AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| is_dir(&st)),
        };
        if dir {
            pending.push(child.to_owned());
        } else {
            match nix::unistd::unlinkat(fd.as_fd(), child, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let level = Level {
        name: name.to_owned(),
        id: (st.st_dev, st.st_ino),
        pending,
        again: false,
    };
    Ok((fd, level))
}

fn is_dir(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;

//! Snapshots: a directory's files, read as data, written into the checkpoint store as a tree.
//!
//! Two flavours share one reader:
//! - the user's checkout "as the user sees it": tracked files (from the index) plus untracked files
//!   that are not ignored (the user's .gitignore files, `.git/info/exclude`, global excludes);
//! - the sandbox clone: the run's base paths plus untracked, not-ignored files, where only the
//!   `.gitignore` files inside the tree count (the sandbox's git configuration is the agent's, and
//!   is never consulted).
//!
//! Nothing is followed: symlinks are stored as symlinks, FIFOs, sockets and devices are skipped,
//! files over the cap are skipped, and every skip is reported so the user hears about it.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::beneath::{Beneath, FsError, Kind};
use crate::statcache::{file_stat, is_racy, StatCache};
use crate::store::{blob_id, Entry, FlatTree, Mode, Store, StoreError};
use crate::wire::{FileStat, SyncRecord};

/// Files larger than this are left out of snapshots (and reported).
pub const DEFAULT_FILE_CAP: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Snapshot {
    pub tree: FlatTree,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "{path} is not inside a git repository (run hunkgate in a git repository or pass --repo)"
    )]
    NotARepo { path: String },
    #[error("reading the git index of {path}: {message}")]
    Index { path: String, message: String },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Candidate paths from a walk that honours .gitignore files and never descends into `.git`.
pub(crate) fn walk_not_ignored(root: &Path, user_excludes: bool) -> BTreeSet<String> {
    walk_reporting(root, user_excludes).0
}

/// A name hunkgate cannot carry (not UTF-8), shown with its odd bytes as `\xNN`.
pub fn shown_name(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

const NOT_UTF8: &str = "file name is not UTF-8: hunkgate cannot review it";

/// [`walk_not_ignored`], also reporting the files it leaves out because their names are not
/// UTF-8 (never silently: a file left out of a snapshot must not look deleted or absent).
pub(crate) fn walk_reporting(root: &Path, user_excludes: bool) -> (BTreeSet<String>, Vec<Skipped>) {
    use std::os::unix::ffi::OsStrExt;
    let mut out = BTreeSet::new();
    let mut skipped = Vec::new();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .follow_links(false)
        .parents(false)
        .require_git(false)
        .git_ignore(true)
        .git_global(user_excludes)
        .git_exclude(user_excludes)
        .ignore(false)
        // VCS metadata is never content: .git, and jj's .jj.
        .filter_entry(|e| e.file_name() != ".git" && e.file_name() != ".jj")
        .build();
    for entry in walker.flatten() {
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        if is_dir {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            match rel.to_str() {
                Some("") => {}
                Some(s) => {
                    out.insert(s.to_string());
                }
                None => skipped.push(Skipped {
                    path: shown_name(rel.as_os_str().as_bytes()),
                    reason: NOT_UTF8.into(),
                }),
            }
        }
    }
    (out, skipped)
}

/// One candidate path, read as data (see [`capture_each`]).
#[derive(Debug)]
pub enum Captured {
    File {
        path: String,
        bytes: Vec<u8>,
        executable: bool,
        /// The file's stat, taken on the open file before it was read.
        stat: FileStat,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
        stat: FileStat,
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
/// turned into directories are left out.
///
/// The sandbox helper streams these to the hub; the hub's own snapshots store them directly.
pub fn capture_each<E>(
    root: &Beneath,
    candidates: BTreeSet<String>,
    cap: u64,
    mut check: impl FnMut(&str, &FileStat) -> Check,
    mut sink: impl FnMut(Captured) -> Result<(), E>,
) -> Result<(), E> {
    for path in candidates {
        let skip = |reason: String| {
            Captured::Skipped(Skipped {
                path: path.clone(),
                reason,
            })
        };
        if crate::beneath::components(&path).is_err() {
            sink(skip("path hunkgate cannot represent".into()))?;
            continue;
        }
        let st = match root.lstat(&path) {
            Ok(Some(st)) => st,
            Ok(None) => continue,
            Err(e) => {
                sink(skip(e.to_string()))?;
                continue;
            }
        };
        let stat = file_stat(&st);
        let how = match crate::beneath::kind_of(&st) {
            Kind::Dir => continue,
            Kind::Other(what) => {
                sink(skip(format!("{what} skipped")))?;
                continue;
            }
            Kind::File { size, .. } if size > cap => {
                sink(skip(format!("larger than {cap} bytes")))?;
                continue;
            }
            Kind::File { .. } | Kind::Symlink => check(&path, &stat),
        };
        if let Check::Trust(entry) = how {
            sink(Captured::Unchanged { path, entry, stat })?;
            continue;
        }
        let read = if matches!(crate::beneath::kind_of(&st), Kind::Symlink) {
            root.read_link(&path)
                .map(|t| t.map(|target| (target, Mode::Symlink, stat)))
        } else {
            root.read_stat(&path, cap).map(|r| {
                r.map(|(bytes, exec, st)| {
                    let mode = if exec { Mode::Executable } else { Mode::File };
                    (bytes, mode, file_stat(&st))
                })
            })
        };
        let (bytes, mode, stat) = match read {
            Ok(Some(got)) => got,
            // Vanished between the stat and the read: report, don't guess.
            Ok(None) => continue,
            Err(e) => {
                sink(skip(e.to_string()))?;
                continue;
            }
        };
        if let Check::Compare(entry) = how {
            if entry.mode == mode && blob_id(&bytes) == entry.oid {
                sink(Captured::Unchanged { path, entry, stat })?;
                continue;
            }
        }
        sink(match mode {
            Mode::Symlink => Captured::Symlink {
                path,
                target: bytes,
                stat,
            },
            Mode::File | Mode::Executable => Captured::File {
                path,
                bytes,
                executable: mode == Mode::Executable,
                stat,
            },
        })?;
    }
    Ok(())
}

/// Store one captured item into `snap`; returns the entry it got.
pub fn store_captured(
    store: &Store,
    snap: &mut Snapshot,
    item: Captured,
) -> Result<Option<(String, FileStat, Entry)>, StoreError> {
    let (path, stat, entry) = match item {
        Captured::File {
            path,
            bytes,
            executable,
            stat,
        } => {
            let oid = store.write_blob(&bytes)?;
            let mode = if executable {
                Mode::Executable
            } else {
                Mode::File
            };
            (path, stat, Entry { mode, oid })
        }
        Captured::Symlink { path, target, stat } => {
            let oid = store.write_blob(&target)?;
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

/// Read each candidate path as data and store it, taking unchanged files from `cache`.
fn capture(
    root: &Beneath,
    candidates: BTreeSet<String>,
    store: &Store,
    cap: u64,
    mut cache: Option<&mut StatCache>,
) -> Result<Snapshot, SnapshotError> {
    let mut snap = Snapshot::default();
    let mut seen = Vec::new();
    {
        let cache_ref = cache.as_deref();
        capture_each(
            root,
            candidates,
            cap,
            |path, stat| match cache_ref.and_then(|c| c.lookup(path, stat, store)) {
                Some(entry) => Check::Trust(entry),
                None => Check::Read,
            },
            |item| {
                if let Some(got) = store_captured(store, &mut snap, item)? {
                    seen.push(got);
                }
                Ok::<_, StoreError>(())
            },
        )?;
    }
    if let Some(cache) = cache.as_deref_mut() {
        for (path, stat, entry) in seen {
            cache.record(&path, stat, entry);
        }
        if let Err(e) = cache.save() {
            tracing::warn!(error = %e, "cannot write the snapshot stat cache; the next snapshot reads every file");
        }
    }
    Ok(snap)
}

/// What a sandbox read-back does with `path`, given the run's `base` and the stat record of
/// the sync that wrote it (see [`crate::wire::SyncRecord`]).
pub fn readback_check<'a>(
    base: &'a FlatTree,
    record: Option<&'a SyncRecord>,
) -> impl FnMut(&str, &FileStat) -> Check + 'a {
    let stamp = record.map(|r| (r.stamp_s, r.stamp_ns));
    let recorded: HashMap<&str, &FileStat> = record
        .map(|r| r.files.iter().map(|(p, s)| (p.as_str(), s)).collect())
        .unwrap_or_default();
    move |path, stat| match base.get(path) {
        None => Check::Read,
        Some(entry) => match (recorded.get(path), stamp) {
            (Some(was), Some(stamp)) if *was == stat && !is_racy(was, stamp) => {
                Check::Trust(*entry)
            }
            _ => Check::Compare(*entry),
        },
    }
}

/// The paths a sandbox snapshot looks at: `base` paths (tracked by construction) plus untracked
/// files not ignored by the tree's own .gitignore files.
/// Files whose names cannot be carried are returned beside them, to be reported as skipped.
pub fn sandbox_candidates<'a>(
    dir: &Path,
    base_paths: impl IntoIterator<Item = &'a String>,
) -> (BTreeSet<String>, Vec<Skipped>) {
    let (mut candidates, skipped) = walk_reporting(dir, false);
    candidates.extend(base_paths.into_iter().cloned());
    (candidates, skipped)
}

/// Where [`snapshot_checkout`] keeps its stat cache: a file inside the store's directory (the
/// hub's state dir), so a cache always goes with the store its blob ids point into.
pub fn stat_cache_path(store: &Store) -> PathBuf {
    store.path().join("hunkgate-stat-cache")
}

/// Snapshot the user's checkout as the user sees it (see module docs), reading only the files
/// that are new or changed since the last snapshot (the stat cache at [`stat_cache_path`]).
pub fn snapshot_checkout(
    repo_root: &Path,
    store: &Store,
    cap: u64,
) -> Result<Snapshot, SnapshotError> {
    let mut cache = StatCache::load(&stat_cache_path(store), repo_root, store);
    snapshot_checkout_cached(repo_root, store, cap, Some(&mut cache))
}

/// [`snapshot_checkout`] with an explicit stat cache (None reads every file).
pub fn snapshot_checkout_cached(
    repo_root: &Path,
    store: &Store,
    cap: u64,
    mut cache: Option<&mut StatCache>,
) -> Result<Snapshot, SnapshotError> {
    let (mut candidates, unnamed) = walk_reporting(repo_root, true);
    let with_unnamed = |mut snap: Snapshot| {
        snap.skipped.extend(unnamed.iter().cloned());
        snap
    };
    let repo = match gix::open_opts(repo_root, gix::open::Options::isolated()) {
        Ok(repo) => repo,
        // A jj repository without a colocated .git: jj tracks every file that is not ignored,
        // which is exactly the walk.
        Err(_) if repo_root.join(".jj").is_dir() => {
            let root = Beneath::open(repo_root)?;
            return capture(&root, candidates, store, cap, cache.as_deref_mut()).map(with_unnamed);
        }
        Err(_) => {
            return Err(SnapshotError::NotARepo {
                path: repo_root.display().to_string(),
            })
        }
    };
    let index = repo.index_or_empty().map_err(|e| SnapshotError::Index {
        path: repo_root.display().to_string(),
        message: e.to_string(),
    })?;
    for entry in index.entries() {
        // Submodules (gitlinks) are directories of their own repository: not reviewed.
        if entry.mode == gix::index::entry::Mode::COMMIT {
            continue;
        }
        let path = entry.path(&index);
        if let Ok(s) = std::str::from_utf8(path) {
            candidates.insert(s.to_string());
        }
    }
    let root = Beneath::open(repo_root)?;
    let mut snap = with_unnamed(capture(&root, candidates, store, cap, cache)?);
    snap.skipped.dedup();
    Ok(snap)
}

/// Snapshot a sandbox directory: `base` paths (tracked by construction) plus untracked files not
/// ignored by the tree's own .gitignore files. With the `record` of the sync that wrote `base`
/// there, only paths whose stat changed (or is racy) are read, and a base path read back with
/// its base content is not stored again.
pub fn snapshot_sandbox(
    dir: &Path,
    base: &FlatTree,
    store: &Store,
    cap: u64,
    record: Option<&SyncRecord>,
) -> Result<Snapshot, SnapshotError> {
    let (candidates, unnamed) = sandbox_candidates(dir, base.keys());
    let root = Beneath::open(dir)?;
    let mut snap = Snapshot::default();
    capture_each(
        &root,
        candidates,
        cap,
        readback_check(base, record),
        |item| store_captured(store, &mut snap, item).map(drop),
    )?;
    snap.skipped.extend(unnamed);
    Ok(snap)
}

/// Find the repository root containing `start`: the nearest directory holding `.jj` (a jj
/// repository, colocated or not) or else the git work tree around it.
pub fn discover_repo_root(start: &Path) -> Result<std::path::PathBuf, SnapshotError> {
    let abs = start.canonicalize().unwrap_or_else(|_| start.to_path_buf());
    for dir in abs.ancestors() {
        if dir.join(".jj").is_dir() {
            return Ok(dir.to_path_buf());
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    let repo = gix::discover(start).map_err(|_| SnapshotError::NotARepo {
        path: start.display().to_string(),
    })?;
    repo.workdir()
        .map(|p| p.to_path_buf())
        .ok_or_else(|| SnapshotError::NotARepo {
            path: start.display().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let st = Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success());
    }

    #[test]
    fn checkout_snapshot_sees_what_the_user_sees() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join(".gitignore"), "ignored.txt\nbuild/\n").unwrap();
        std::fs::write(repo.join("tracked.txt"), "committed\n").unwrap();
        std::fs::write(repo.join("deleted.txt"), "gone soon\n").unwrap();
        std::fs::write(repo.join("forced.txt"), "tracked though ignored\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["add", "-f", "forced.txt"]);
        std::fs::write(repo.join(".gitignore"), "ignored.txt\nbuild/\nforced.txt\n").unwrap();
        git(
            &repo,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "init",
            ],
        );
        std::fs::write(repo.join("tracked.txt"), "edited, uncommitted\n").unwrap();
        std::fs::remove_file(repo.join("deleted.txt")).unwrap();
        std::fs::write(repo.join("untracked.txt"), "new\n").unwrap();
        std::fs::write(repo.join("ignored.txt"), "secret\n").unwrap();
        std::fs::create_dir(repo.join("build")).unwrap();
        std::fs::write(repo.join("build/out"), "artifact\n").unwrap();
        symlink("tracked.txt", repo.join("link")).unwrap();
        nix::unistd::mkfifo(
            &repo.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();

        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let snap = snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).unwrap();
        let paths: Vec<&str> = snap.tree.keys().map(|s| s.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                ".gitignore",
                "forced.txt",
                "link",
                "tracked.txt",
                "untracked.txt"
            ]
        );
        let tracked = &snap.tree["tracked.txt"];
        assert_eq!(
            store.read_blob(tracked.oid).unwrap(),
            b"edited, uncommitted\n"
        );
        assert_eq!(snap.tree["link"].mode, Mode::Symlink);
        assert_eq!(
            store.read_blob(snap.tree["link"].oid).unwrap(),
            b"tracked.txt"
        );
        assert_eq!(snap.skipped.len(), 1, "{:?}", snap.skipped);
        assert_eq!(snap.skipped[0].path, "fifo");
    }

    #[test]
    fn sandbox_snapshot_ignores_sandbox_git_config() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sb");
        std::fs::create_dir_all(dir.join(".git/info")).unwrap();
        // The agent's own exclude file must not hide files from review.
        std::fs::write(dir.join(".git/info/exclude"), "hidden.txt\n").unwrap();
        std::fs::write(dir.join("hidden.txt"), "x\n").unwrap();
        std::fs::write(dir.join(".gitignore"), "target/\n").unwrap();
        std::fs::create_dir(dir.join("target")).unwrap();
        std::fs::write(dir.join("target/junk"), "x\n").unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let snap = snapshot_sandbox(&dir, &FlatTree::new(), &store, DEFAULT_FILE_CAP).unwrap();
        let paths: Vec<&str> = snap.tree.keys().map(|s| s.as_str()).collect();
        assert_eq!(paths, vec![".gitignore", "hidden.txt"]);
    }
}

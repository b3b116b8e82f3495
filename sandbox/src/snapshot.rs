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

use std::collections::BTreeSet;
use std::path::Path;

use crate::beneath::{Beneath, FsError, Kind};
use crate::store::{Entry, FlatTree, Mode, Store, StoreError};

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
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    Skipped(Skipped),
}

/// Read each candidate path as data and hand it to `sink`: regular files (up to `cap` bytes)
/// and symlink targets; FIFOs, sockets, devices and oversized files become [`Captured::Skipped`].
/// Paths that vanished or turned into directories are left out.
///
/// The sandbox helper streams these to the hub; the hub's own snapshots store them directly.
pub fn capture_each<E>(
    root: &Beneath,
    candidates: BTreeSet<String>,
    cap: u64,
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
        let item = match root.kind(&path) {
            Ok(None) | Ok(Some(Kind::Dir)) => None,
            Ok(Some(Kind::Other(what))) => Some(skip(format!("{what} skipped"))),
            Ok(Some(Kind::Symlink)) => match root.read_link(&path) {
                Ok(Some(target)) => Some(Captured::Symlink {
                    path: path.clone(),
                    target,
                }),
                Ok(None) => None,
                Err(e) => Some(skip(e.to_string())),
            },
            Ok(Some(Kind::File { size, .. })) if size > cap => {
                Some(skip(format!("larger than {cap} bytes")))
            }
            Ok(Some(Kind::File { .. })) => match root.read(&path, cap) {
                Ok(Some((bytes, executable))) => Some(Captured::File {
                    path: path.clone(),
                    bytes,
                    executable,
                }),
                // Vanished or changed kind between the walk and the read: report, don't guess.
                Ok(None) => None,
                Err(e) => Some(skip(e.to_string())),
            },
            Err(e) => Some(skip(e.to_string())),
        };
        if let Some(item) = item {
            sink(item)?;
        }
    }
    Ok(())
}

/// Store one captured item into `snap`.
pub fn store_captured(
    store: &Store,
    snap: &mut Snapshot,
    item: Captured,
) -> Result<(), StoreError> {
    match item {
        Captured::File {
            path,
            bytes,
            executable,
        } => {
            let oid = store.write_blob(&bytes)?;
            let mode = if executable {
                Mode::Executable
            } else {
                Mode::File
            };
            snap.tree.insert(path, Entry { mode, oid });
        }
        Captured::Symlink { path, target } => {
            let oid = store.write_blob(&target)?;
            snap.tree.insert(
                path,
                Entry {
                    mode: Mode::Symlink,
                    oid,
                },
            );
        }
        Captured::Skipped(s) => snap.skipped.push(s),
    }
    Ok(())
}

/// Read each candidate path as data and store it.
fn capture(
    root: &Beneath,
    candidates: BTreeSet<String>,
    store: &Store,
    cap: u64,
) -> Result<Snapshot, SnapshotError> {
    let mut snap = Snapshot::default();
    capture_each(root, candidates, cap, |item| {
        store_captured(store, &mut snap, item)
    })?;
    Ok(snap)
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

/// Snapshot the user's checkout as the user sees it (see module docs).
pub fn snapshot_checkout(
    repo_root: &Path,
    store: &Store,
    cap: u64,
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
            return capture(&root, candidates, store, cap).map(with_unnamed);
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
    let mut snap = with_unnamed(capture(&root, candidates, store, cap)?);
    snap.skipped.dedup();
    Ok(snap)
}

/// Snapshot a sandbox directory: `base` paths (tracked by construction) plus untracked files not
/// ignored by the tree's own .gitignore files.
pub fn snapshot_sandbox(
    dir: &Path,
    base: &FlatTree,
    store: &Store,
    cap: u64,
) -> Result<Snapshot, SnapshotError> {
    let (candidates, unnamed) = sandbox_candidates(dir, base.keys());
    let root = Beneath::open(dir)?;
    let mut snap = capture(&root, candidates, store, cap)?;
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

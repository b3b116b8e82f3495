//! The checkpoint store: a bare git repository in the hub's state directory, written only by the
//! hub, in-process with gix (no git process, so nothing a repository configured can run).
//!
//! Trees are handled as flat maps `path -> Entry` because every consumer (snapshot, diff,
//! materialize) thinks in paths; the nesting into git trees happens only at the store boundary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gix::hash::ObjectId;
use gix::objs::tree::EntryKind;

/// How a path is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    File,
    Executable,
    Symlink,
}

impl Mode {
    fn kind(self) -> EntryKind {
        match self {
            Mode::File => EntryKind::Blob,
            Mode::Executable => EntryKind::BlobExecutable,
            Mode::Symlink => EntryKind::Link,
        }
    }

    /// Git's octal notation, for diff headers ("100644").
    pub fn octal(self) -> &'static str {
        match self {
            Mode::File => "100644",
            Mode::Executable => "100755",
            Mode::Symlink => "120000",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub mode: Mode,
    pub oid: ObjectId,
}

/// A whole tree as `repository-relative path -> entry`, sorted by path.
pub type FlatTree = BTreeMap<String, Entry>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("checkpoint store at {path}: {message}")]
    Git { path: PathBuf, message: String },
    #[error("checkpoint store at {path}: object {oid} is not a {expected}")]
    WrongKind {
        path: PathBuf,
        oid: ObjectId,
        expected: &'static str,
    },
}

/// The hub's private object store.
pub struct Store {
    repo: gix::ThreadSafeRepository,
    path: PathBuf,
}

const IDENTITY_NAME: &str = "hunkgate";
const IDENTITY_EMAIL: &str = "hunkgate@localhost";

impl Store {
    /// Open the store at `path`, creating a bare repository there on first use.
    pub fn open_or_init(path: &Path) -> Result<Self, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError::Git {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let repo = if path.join("HEAD").exists() {
            gix::open_opts(path, isolated_open_options()).map_err(|e| err(&e))?
        } else {
            std::fs::create_dir_all(path).map_err(|e| err(&e))?;
            gix::init_bare(path).map_err(|e| err(&e))?;
            gix::open_opts(path, isolated_open_options()).map_err(|e| err(&e))?
        };
        Ok(Self {
            repo: repo.into_sync(),
            path: path.to_path_buf(),
        })
    }

    /// A fresh non-bare repository whose work tree is `dir` (a sandbox's own `.git`).
    pub fn init_worktree(dir: &Path) -> Result<Self, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError::Git {
            path: dir.to_path_buf(),
            message: e.to_string(),
        };
        gix::init(dir).map_err(|e| err(&e))?;
        let repo = gix::open_opts(dir, isolated_open_options()).map_err(|e| err(&e))?;
        Ok(Self {
            repo: repo.into_sync(),
            path: dir.join(".git"),
        })
    }

    /// Write the index of a non-bare repository so that it matches `tree` (stat data is left
    /// empty; git refreshes it on the next `git status`).
    pub fn write_index(&self, tree: ObjectId) -> Result<(), StoreError> {
        let repo = self.local();
        let mut index = repo.index_from_tree(&tree).map_err(|e| self.err(e))?;
        index
            .write(gix::index::write::Options::default())
            .map_err(|e| self.err(e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Git {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    fn local(&self) -> gix::Repository {
        self.repo.to_thread_local()
    }

    pub fn write_blob(&self, bytes: &[u8]) -> Result<ObjectId, StoreError> {
        let repo = self.local();
        let id = repo.write_blob(bytes).map_err(|e| self.err(e))?;
        Ok(id.detach())
    }

    pub fn read_blob(&self, oid: ObjectId) -> Result<Vec<u8>, StoreError> {
        let repo = self.local();
        let obj = repo.find_object(oid).map_err(|e| self.err(e))?;
        if obj.kind != gix::objs::Kind::Blob {
            return Err(StoreError::WrongKind {
                path: self.path.clone(),
                oid,
                expected: "blob",
            });
        }
        Ok(obj.detach().data)
    }

    /// Write a flat tree as nested git trees; returns the root tree id.
    pub fn write_tree(&self, tree: &FlatTree) -> Result<ObjectId, StoreError> {
        let repo = self.local();
        let mut editor = repo
            .edit_tree(ObjectId::empty_tree(repo.object_hash()))
            .map_err(|e| self.err(e))?;
        for (path, entry) in tree {
            editor
                .upsert(path.as_str(), entry.mode.kind(), entry.oid)
                .map_err(|e| self.err(format!("{path}: {e}")))?;
        }
        let id = editor.write().map_err(|e| self.err(e))?;
        Ok(id.detach())
    }

    /// Read a tree (by tree or commit id) back into a flat map. Submodule entries are skipped:
    /// hunkgate does not review them.
    pub fn read_tree(&self, id: ObjectId) -> Result<FlatTree, StoreError> {
        let repo = self.local();
        let tree_id = self.tree_of(&repo, id)?;
        let mut out = FlatTree::new();
        self.walk(&repo, tree_id, String::new(), &mut out)?;
        Ok(out)
    }

    fn tree_of(&self, repo: &gix::Repository, id: ObjectId) -> Result<ObjectId, StoreError> {
        let obj = repo.find_object(id).map_err(|e| self.err(e))?;
        match obj.kind {
            gix::objs::Kind::Tree => Ok(id),
            gix::objs::Kind::Commit => {
                let commit = obj.into_commit();
                Ok(commit.tree_id().map_err(|e| self.err(e))?.detach())
            }
            _ => Err(StoreError::WrongKind {
                path: self.path.clone(),
                oid: id,
                expected: "tree or commit",
            }),
        }
    }

    fn walk(
        &self,
        repo: &gix::Repository,
        tree_id: ObjectId,
        prefix: String,
        out: &mut FlatTree,
    ) -> Result<(), StoreError> {
        let tree = repo.find_tree(tree_id).map_err(|e| self.err(e))?;
        let decoded = tree.decode().map_err(|e| self.err(e))?;
        for entry in &decoded.entries {
            let name = String::from_utf8_lossy(entry.filename);
            let path = if prefix.is_empty() {
                name.into_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let oid = entry.oid.to_owned();
            match EntryKind::from(entry.mode) {
                EntryKind::Tree => self.walk(repo, oid, path, out)?,
                EntryKind::Blob => {
                    out.insert(
                        path,
                        Entry {
                            mode: Mode::File,
                            oid,
                        },
                    );
                }
                EntryKind::BlobExecutable => {
                    out.insert(
                        path,
                        Entry {
                            mode: Mode::Executable,
                            oid,
                        },
                    );
                }
                EntryKind::Link => {
                    out.insert(
                        path,
                        Entry {
                            mode: Mode::Symlink,
                            oid,
                        },
                    );
                }
                EntryKind::Commit => {}
            }
        }
        Ok(())
    }

    /// Record a commit. Author and committer are hunkgate itself at the current time.
    pub fn commit(
        &self,
        tree: ObjectId,
        parents: &[ObjectId],
        message: &str,
    ) -> Result<ObjectId, StoreError> {
        let repo = self.local();
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let sig = gix::actor::Signature {
            name: IDENTITY_NAME.into(),
            email: IDENTITY_EMAIL.into(),
            time: gix::date::Time::new(seconds, 0),
        };
        let commit = gix::objs::Commit {
            tree,
            parents: parents.iter().copied().collect(),
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        let id = repo.write_object(&commit).map_err(|e| self.err(e))?;
        Ok(id.detach())
    }

    /// The tree of a commit.
    pub fn commit_tree(&self, commit: ObjectId) -> Result<ObjectId, StoreError> {
        let repo = self.local();
        self.tree_of(&repo, commit)
    }

    /// Point `name` (a full ref name such as `refs/hunkgate/runs/<id>/base`) at `oid`, so the
    /// object stays reachable and `git log` in the store shows it.
    pub fn set_ref(&self, name: &str, oid: ObjectId) -> Result<(), StoreError> {
        let repo = self.local();
        repo.reference(
            name,
            oid,
            gix::refs::transaction::PreviousValue::Any,
            "hunkgate",
        )
        .map_err(|e| self.err(format!("{name}: {e}")))?;
        Ok(())
    }

    /// Open an existing repository (the user's own) to mirror commits into it.
    pub fn open_existing(path: &Path) -> Result<Self, StoreError> {
        let repo = gix::open_opts(path, isolated_open_options()).map_err(|e| StoreError::Git {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Self {
            repo: repo.into_sync(),
            path: path.to_path_buf(),
        })
    }

    /// Copy `commit` with its tree, blobs and ancestors into `dest`, skipping what `dest`
    /// already has (most blobs of a checkout snapshot are already in the user's repository).
    pub fn copy_commit_into(&self, dest: &Store, commit: ObjectId) -> Result<(), StoreError> {
        let src = self.local();
        let dst = dest.local();
        let mut stack = vec![commit];
        while let Some(id) = stack.pop() {
            if dst.has_object(id) {
                continue;
            }
            let obj = src.find_object(id).map_err(|e| self.err(e))?;
            let kind = obj.kind;
            let data = obj.detach().data;
            match kind {
                gix::objs::Kind::Commit => {
                    let c = gix::objs::CommitRef::from_bytes(&data, src.object_hash())
                        .map_err(|e| self.err(e))?;
                    stack.push(c.tree());
                    stack.extend(c.parents());
                }
                gix::objs::Kind::Tree => {
                    let t = gix::objs::TreeRef::from_bytes(&data, src.object_hash())
                        .map_err(|e| self.err(e))?;
                    for e in &t.entries {
                        if !matches!(EntryKind::from(e.mode), EntryKind::Commit) {
                            stack.push(e.oid.to_owned());
                        }
                    }
                }
                _ => {}
            }
            use gix::objs::Write;
            let written = dst
                .objects
                .write_buf(kind, &data)
                .map_err(|e| dest.err(e))?;
            debug_assert_eq!(written, id);
        }
        Ok(())
    }

    pub fn has_object(&self, oid: ObjectId) -> bool {
        self.local().has_object(oid)
    }
}

/// The git blob id of `bytes` (what [`Store::write_blob`] would return), without writing.
pub fn blob_id(bytes: &[u8]) -> ObjectId {
    // Hashing in memory cannot fail for SHA-1 (only a detected collision attack would).
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
        .unwrap_or_else(|_| ObjectId::null(gix::hash::Kind::Sha1))
}

/// Open options that read no global or system git configuration and run nothing: the store's
/// behaviour must not depend on whoever's ~/.gitconfig happens to be around.
pub(crate) fn isolated_open_options() -> gix::open::Options {
    // Reflogs would need a committer identity from some config; hunkgate's refs are its own
    // bookkeeping, so it writes none.
    gix::open::Options::isolated().config_overrides([
        "core.logAllRefUpdates=false",
        "committer.name=hunkgate",
        "committer.email=hunkgate@localhost",
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run git on the bare repository at `git_dir` (no user config) and return its stdout;
    /// fails the test if git does.
    fn git(git_dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .arg("--git-dir")
            .arg(git_dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A tree with every mode and a deep path, its blobs written to `store`; returns the tree
    /// and the id of the blob `a\n`.
    fn sample_tree(store: &Store) -> (FlatTree, ObjectId) {
        let a = store.write_blob(b"a\n").unwrap();
        let b = store.write_blob(b"#!/bin/sh\n").unwrap();
        let mut tree = FlatTree::new();
        for (path, mode, oid) in [
            ("a.txt", Mode::File, a),
            ("bin/run", Mode::Executable, b),
            ("bin/link", Mode::Symlink, a),
            ("a/b/c/d.txt", Mode::File, b),
        ] {
            tree.insert(path.into(), Entry { mode, oid });
        }
        (tree, a)
    }

    #[test]
    fn flat_tree_roundtrip_and_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let (tree, a) = sample_tree(&store);
        let tree_id = store.write_tree(&tree).unwrap();
        let commit = store.commit(tree_id, &[], "base").unwrap();
        store.set_ref("refs/hunkgate/runs/x/base", commit).unwrap();
        assert_eq!(store.read_tree(commit).unwrap(), tree);
        assert_eq!(store.read_tree(tree_id).unwrap(), tree);
        assert_eq!(store.read_blob(a).unwrap(), b"a\n");
        assert_eq!(store.commit_tree(commit).unwrap(), tree_id);

        // Compare with git itself: the store is a valid repository with the same tree.
        let listed = git(
            store.path(),
            &[
                "ls-tree",
                "-r",
                "--format=%(objectmode) %(path)",
                "refs/hunkgate/runs/x/base",
            ],
        );
        assert_eq!(
            listed,
            "100644 a.txt\n100644 a/b/c/d.txt\n100644 bin/link\n100755 bin/run\n"
                .replace("100644 bin/link", "120000 bin/link")
        );
        // Reopening finds the same objects.
        drop(store);
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        assert!(store.has_object(commit));
    }

    #[test]
    fn copied_commits_bring_everything_they_need() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
        let (tree, _) = sample_tree(&store);
        let tree_id = store.write_tree(&tree).unwrap();
        let commit = store.commit(tree_id, &[], "base").unwrap();
        // Mirroring into another repository copies the commit with everything it needs.
        let other = Store::open_or_init(&tmp.path().join("other.git")).unwrap();
        let child = store.commit(tree_id, &[commit], "child").unwrap();
        store.copy_commit_into(&other, child).unwrap();
        other.set_ref("refs/hunkgate/runs/x/head", child).unwrap();
        git(other.path(), &["fsck", "--strict", "--no-dangling"]);
        assert_eq!(other.read_tree(child).unwrap(), tree);
    }
}

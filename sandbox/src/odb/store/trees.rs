//! The store's trees: a flat tree written as git's nested trees, edited in place by its changes,
//! and read back flat; names git would refuse are refused before anything is written.

use super::*;

impl Store {
    /// Write a flat tree as nested git trees; returns the root tree id.
    ///
    /// Every tree is built from the sorted map in one pass, deepest first, and written as is:
    /// unlike gix's tree editor, nothing looks up whether each entry's object exists (10,000
    /// `stat`s of loose objects per snapshot). Every caller writes or checks the blobs first
    /// (a snapshot stores what it read; a sandbox sync ensures the base's blobs). Path
    /// components are still validated as git would (no `.git`, `..`, empty names), and a path
    /// that is both a file and a directory is refused.
    pub fn write_tree(&self, tree: &FlatTree) -> Result<ObjectId, StoreError> {
        use gix::objs::tree::Entry as TreeEntry;
        let check = |name: &str, path: &str, symlink: bool| self.check_name(name, path, symlink);
        // Directory ("" for the root) -> its entries so far. The flat tree is sorted by path,
        // so a directory's files mostly come in one run: its entries are collected aside and
        // handed to the map when the directory changes, not looked up once per file.
        let mut dirs: BTreeMap<&str, Vec<TreeEntry>> = BTreeMap::new();
        dirs.insert("", Vec::new());
        let mut run: (&str, Vec<TreeEntry>) = ("", Vec::new());
        for (path, entry) in tree {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if path.starts_with('/') {
                // The root's name is "": a leading '/' is an empty first component.
                check("", path, false)?;
            }
            check(name, path, entry.mode == Mode::Symlink)?;
            if dir != run.0 {
                let (done, entries) = std::mem::replace(&mut run, (dir, Vec::new()));
                dirs.entry(done).or_default().extend(entries);
                // Every ancestor directory gets a tree, however deep the first file in it is.
                let mut d = dir;
                while !dirs.contains_key(d) {
                    dirs.insert(d, Vec::new());
                    d = d.rsplit_once('/').map_or("", |(p, _)| p);
                }
            }
            run.1.push(TreeEntry {
                mode: entry.mode.kind().into(),
                filename: name.into(),
                oid: entry.oid,
            });
        }
        dirs.entry(run.0).or_default().extend(run.1);
        let mut batch = self.batch();
        // A child directory sorts after its parent (the parent is its prefix), so walking the
        // directories backwards writes every subtree before the tree that names it.
        let order: Vec<&str> = dirs.keys().rev().copied().collect();
        for dir in order {
            let mut entries = dirs.remove(dir).unwrap_or_default();
            entries.sort();
            if let Some(w) = entries.windows(2).find(|w| w[0].filename == w[1].filename) {
                let name = match dir {
                    "" => w[0].filename.to_string(),
                    _ => format!("{dir}/{}", w[0].filename),
                };
                return Err(self.err(format!("{name}: a path is both a file and a directory")));
            }
            let id = batch.add_tree(&gix::objs::Tree { entries })?;
            if dir.is_empty() {
                batch.finish()?;
                return Ok(id);
            }
            let (parent, name) = dir.rsplit_once('/').unwrap_or(("", dir));
            check(name, dir, false)?;
            dirs.entry(parent).or_default().push(TreeEntry {
                mode: EntryKind::Tree.into(),
                filename: name.into(),
                oid: id,
            });
        }
        Err(self.err("no root tree was written"))
    }

    /// Write the tree `base` (a tree id) with `changes` made to it; returns the new root tree id.
    ///
    /// Only the trees on the way to a changed path are read, rebuilt and written; every other
    /// subtree keeps its id, so the cost follows the change, not the repository (git's
    /// cache-tree idea). A directory left empty disappears, as git has no empty trees. The same
    /// flat tree written whole by [`Store::write_tree`] gets the same id. Names are validated
    /// as [`Store::write_tree`] does; blobs are not looked up (the caller stored them).
    pub fn edit_tree(&self, base: ObjectId, changes: &Changes) -> Result<ObjectId, StoreError> {
        let mut batch = self.batch();
        let root = self.edit_tree_in(&mut batch, base, changes)?;
        batch.finish()?;
        Ok(root)
    }

    /// [`Store::edit_tree`], the trees added to `batch` (written when it is finished).
    pub fn edit_tree_in(
        &self,
        batch: &mut ObjectBatch<'_>,
        base: ObjectId,
        changes: &Changes,
    ) -> Result<ObjectId, StoreError> {
        // Each new entry's path is checked whole first, so a refusal names the path, not
        // only the component (the trees written below are checked again, name by name).
        for (path, entry) in changes {
            if let Some(entry) = entry {
                let mut parts = path.split('/').peekable();
                while let Some(part) = parts.next() {
                    let link = parts.peek().is_none() && entry.mode == Mode::Symlink;
                    self.check_name(part, path, link)?;
                }
            }
        }
        struct InStore<'a, 'b, 's> {
            store: &'a Store,
            repo: gix::Repository,
            batch: &'b mut ObjectBatch<'s>,
        }
        impl crate::odb::tree_edit::Trees for InStore<'_, '_, '_> {
            type Error = StoreError;
            fn read(&mut self, id: ObjectId) -> Result<Vec<u8>, StoreError> {
                let tree = self.repo.find_tree(id).map_err(|e| self.store.err(e))?;
                Ok(tree.detach().data)
            }
            fn write(&mut self, bytes: &[u8]) -> Result<ObjectId, StoreError> {
                self.batch.add(gix::objs::Kind::Tree, bytes)
            }
            fn malformed(&self, id: ObjectId) -> StoreError {
                self.store
                    .err(format!("tree {id}: its entries cannot be read"))
            }
        }
        let changes: Vec<(&str, Option<crate::odb::tree_edit::Put>)> = changes
            .iter()
            .map(|(path, entry)| {
                let put = entry.map(|e| crate::odb::tree_edit::Put {
                    mode: e.mode.kind().as_octal_str(),
                    oid: e.oid,
                });
                (path.as_str(), put)
            })
            .collect();
        let mut trees = InStore {
            store: self,
            repo: self.local(),
            batch,
        };
        let root = crate::odb::tree_edit::edit(&mut trees, base, &changes)?;
        Ok(root)
    }

    /// Validate one path component as git would (no `.git`, `..`, empty names); `path` names
    /// it in the error.
    pub(super) fn check_name(
        &self,
        name: &str,
        path: &str,
        symlink: bool,
    ) -> Result<(), StoreError> {
        let validate = gix::validate::path::component::Options {
            protect_windows: cfg!(windows),
            protect_hfs: cfg!(target_os = "macos"),
            protect_ntfs: true,
        };
        let mode = symlink.then_some(gix::validate::path::component::Mode::Symlink);
        gix::validate::path::component(name.into(), mode, validate)
            .map(|_| ())
            .map_err(|e| self.err(format!("{path}: {e}")))
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

    pub(super) fn tree_of(
        &self,
        repo: &gix::Repository,
        id: ObjectId,
    ) -> Result<ObjectId, StoreError> {
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

    /// Every file of tree `tree_id` into `out`, its path under `prefix`. The trees still to
    /// read are a list of the walk's own, not calls on the thread's stack: a tree an agent
    /// made may be thousands of directories deep.
    pub(super) fn walk(
        &self,
        repo: &gix::Repository,
        tree_id: ObjectId,
        prefix: String,
        out: &mut FlatTree,
    ) -> Result<(), StoreError> {
        let mut trees = vec![(tree_id, prefix)];
        while let Some((tree_id, prefix)) = trees.pop() {
            self.walk_one(repo, tree_id, &prefix, out, &mut trees)?;
        }
        Ok(())
    }

    /// The files of one tree of a [`Store::walk`] into `out`, its subtrees onto `trees`.
    pub(super) fn walk_one(
        &self,
        repo: &gix::Repository,
        tree_id: ObjectId,
        prefix: &str,
        out: &mut FlatTree,
        trees: &mut Vec<(ObjectId, String)>,
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
                EntryKind::Tree => trees.push((oid, path)),
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
}

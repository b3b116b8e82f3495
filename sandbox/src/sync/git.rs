//! The sandbox's own `.git`, made anew at every sync (see the module docs of
//! [`crate::sync`]), and what of the old one a sync may keep.

use super::*;

/// Replace whatever `.git` (and `.jj`) the sandbox has — directory, file or symlink, never
/// followed — with a new, empty repository, carrying over the old one's loose objects (see
/// the module docs).
///
/// With `alternate` (an objects directory the sandbox's user may read: the hub's store, under
/// `--isolation none`), the new repository borrows its objects instead of copying them.
/// `keep_objects` false starts from no objects at all (the fallback after a failed sync: a
/// damaged object must not wedge the slot forever).
/// Returns the new repository and the ids of the loose objects it kept (by name: what
/// [`Store::has_object`] would find there, without a `stat` each).
///
/// The old `.git` and `.jj` are deleted as `discard` says: [`Discard::InBackground`] moves
/// them out of the sandbox (beside it, one `rename` each) and deletes them on a thread of
/// their own, for a process that lives on (the hub's own, under `--isolation none`).
pub fn fresh_git(
    dir: &Path,
    alternate: Option<&Path>,
    keep_objects: bool,
    discard: Discard,
) -> Result<(Store, HashSet<ObjectId>), SyncError> {
    let git_dir = dir.join(".git");
    let io = |source| SyncError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let keep = dir.with_file_name(format!(".{name}.objects"));
    remove_any(&keep).map_err(io)?;
    let objects = git_dir.join("objects");
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let mut kept = HashSet::new();
    if keep_objects && real_dir(&git_dir) && real_dir(&objects) {
        std::fs::rename(&objects, &keep).map_err(io)?;
        match kept_objects(&keep) {
            Ok(ids) => kept = ids,
            Err(e) => {
                tracing::warn!(error = %e, dir = %keep.display(), "dropping the sandbox's old objects");
                remove_any(&keep).map_err(io)?;
            }
        }
    }
    // A previous run's jj metadata goes too: jj is re-initialised on top of the fresh .git.
    let metadata = [git_dir.clone(), dir.join(".jj")];
    match discard {
        Discard::Now => {
            for meta in &metadata {
                remove_any(meta).map_err(io)?;
            }
        }
        Discard::InBackground => discard_in_background(dir, &name, &metadata).map_err(io)?,
    }
    Store::init_worktree(dir)?;
    if real_dir(&keep) {
        remove_tree(&objects).map_err(io)?;
        std::fs::rename(&keep, &objects).map_err(io)?;
    }
    if let Some(alt) = alternate {
        std::fs::create_dir_all(objects.join("info")).map_err(io)?;
        std::fs::write(
            objects.join("info").join("alternates"),
            format!("{}\n", alt.display()),
        )
        .map_err(io)?;
    }
    Ok((Store::open_existing(dir)?, kept))
}

/// How [`fresh_git`] deletes a sandbox's old repository metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// Before the new repository is made.
    Now,
    /// Moved out of the sandbox first, then deleted on a thread: deleting a `.git` (an index
    /// of the whole base, the objects a run wrote) took 3–4 ms of a run's start, and 35–60 ms
    /// while the disk was still busy with a first run's 10,000 files.
    InBackground,
}

/// Move each of `metadata` (in the sandbox `dir`, named `name`) beside the sandbox, as
/// `.<name>.discard-<n>-<i>`, and delete those on a thread, together with whatever an earlier
/// one left (a hub killed while deleting).
pub(super) fn discard_in_background(
    dir: &Path,
    name: &str,
    metadata: &[PathBuf],
) -> std::io::Result<()> {
    let prefix = format!(".{name}.discard-");
    for (i, meta) in metadata.iter().enumerate() {
        match std::fs::symlink_metadata(meta) {
            Ok(_) => move_aside(meta, &dir.with_file_name(&prefix), i)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let Some(parent) = dir.parent().map(Path::to_path_buf) else {
        return Ok(());
    };
    let spawned = std::thread::Builder::new()
        .name("discard".into())
        .spawn(move || {
            let Ok(entries) = std::fs::read_dir(&parent) else {
                return;
            };
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    if let Err(e) = remove_any(&entry.path()) {
                        tracing::debug!(error = %e, path = %entry.path().display(), "deleting an old sandbox .git");
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no thread to delete an old sandbox .git; it waits for the next sync");
    }
    Ok(())
}

/// Rename `meta` to `<prefix><n>-<i>` with the first `n` of this process's counter whose name
/// is free: one an earlier hub left (killed before its thread deleted it) is skipped, not
/// renamed onto (a rename onto a non-empty directory fails, and that sync with it).
fn move_aside(meta: &Path, prefix: &Path, i: usize) -> std::io::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut taken = 0;
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut to = prefix.as_os_str().to_owned();
        to.push(format!("{n}-{i}"));
        match std::fs::rename(meta, &to) {
            Err(e)
                if taken < 1000
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::AlreadyExists
                    ) =>
            {
                taken += 1;
            }
            other => return other,
        }
    }
}

/// Remove a file, symlink or directory tree at `p` (nothing followed); absent is fine.
/// Directories the agent made read-only (`chmod 555`, as Go's module cache leaves them, or
/// `000`) are removed too: see [`remove_tree`].
pub(crate) fn remove_any(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => remove_tree(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Remove the directory tree at `p` (nothing followed; see [`crate::foreign::remove_at`]):
/// directories the agent left without their owner's read, search or write permission are
/// given it first. The reset runs as the user who owns what the agent made (the sandbox user
/// under `--isolation user`), so whatever the agent could create it can remove; neither the
/// tree's depth nor its paths' length (past `PATH_MAX`) stops it.
pub(crate) fn remove_tree(p: &Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return std::fs::remove_dir_all(p);
    };
    let parent = match parent.as_os_str().is_empty() {
        true => Path::new("."),
        false => parent,
    };
    let dir = nix::fcntl::open(
        parent,
        nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(name.as_bytes())?;
    crate::foreign::remove_at(std::os::fd::AsFd::as_fd(&dir), &name)
}

/// Keep of an objects directory only what a later sync may use, each checked to be a plain
/// file: `xx/` fan-out directories (real directories, two hex digits) and the regular files in
/// them, and in `pack/` the `pack-<hex>.pack` and `.idx` pairs whose index reads. No `info/`
/// (alternates), no symlinks, nothing else. Returns the ids kept: by name for loose objects,
/// from the index for packs (no `stat` per object either way).
pub(super) fn kept_objects(objects: &Path) -> std::io::Result<HashSet<ObjectId>> {
    let mut ids = HashSet::new();
    for entry in std::fs::read_dir(objects)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        let is_dir = entry.file_type()?.is_dir();
        if is_dir && name == "pack" {
            keep_packs(&path, &mut ids)?;
            continue;
        }
        let fanout = name.len() == 2
            && name
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_hexdigit()));
        if !fanout || !is_dir {
            remove_any(&path)?;
            continue;
        }
        let prefix = name.to_string_lossy().into_owned();
        for obj in std::fs::read_dir(&path)? {
            let obj = obj?;
            if !obj.file_type()?.is_file() {
                remove_any(&obj.path())?;
                continue;
            }
            let hex = format!("{prefix}{}", obj.file_name().to_string_lossy());
            if let Ok(id) = ObjectId::from_hex(hex.as_bytes()) {
                ids.insert(id);
            }
        }
    }
    Ok(ids)
}

/// [`kept_objects`] for `objects/pack`: a pair is kept, and its ids added to `ids`, only when
/// both files are regular files and the index reads; everything else there is removed.
pub(super) fn keep_packs(dir: &Path, ids: &mut HashSet<ObjectId>) -> std::io::Result<()> {
    // pack name → (has .pack, has .idx)
    let mut pairs: std::collections::BTreeMap<String, (bool, bool)> = Default::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stem = name
            .strip_suffix(".pack")
            .map(|s| (s, true))
            .or_else(|| name.strip_suffix(".idx").map(|s| (s, false)))
            .filter(|(s, _)| {
                s.strip_prefix("pack-")
                    .is_some_and(|h| h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            });
        match stem {
            Some((stem, is_pack)) if entry.file_type()?.is_file() => {
                let pair = pairs.entry(stem.to_string()).or_default();
                if is_pack {
                    pair.0 = true;
                } else {
                    pair.1 = true;
                }
            }
            _ => remove_any(&entry.path())?,
        }
    }
    for (stem, pair) in pairs {
        let idx = dir.join(format!("{stem}.idx"));
        let read = match pair {
            (true, true) => gix::odb::pack::index::File::at(&idx, gix::hash::Kind::Sha1).ok(),
            _ => None,
        };
        match read {
            Some(index) => {
                ids.extend((0..index.num_objects()).map(|i| index.oid_at_index(i).to_owned()))
            }
            None => {
                remove_any(&dir.join(format!("{stem}.pack")))?;
                remove_any(&idx)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Names an earlier hub left (non-empty: it was killed while deleting) are skipped; the
    /// control: the directory moved aside is there, under the prefix, and nothing it held is
    /// lost.
    #[test]
    fn a_discard_never_renames_onto_what_an_earlier_hub_left() {
        let tmp = tempfile::tempdir().unwrap();
        let prefix = tmp.path().join(".0.discard-");
        // This process's counter is shared by every test that discarded before: more names
        // left than any test run moves aside.
        for n in 0..500 {
            let left = tmp.path().join(format!(".0.discard-{n}-0"));
            std::fs::create_dir_all(left.join("objects")).unwrap();
        }
        let git = tmp.path().join("0/.git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        super::move_aside(&git, &prefix, 0).unwrap();
        assert!(!git.exists());
        let moved: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .filter(|e| e.path().join("HEAD").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert!(moved[0].starts_with(".0.discard-"), "{moved:?}");
    }
}

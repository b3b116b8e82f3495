//! The paths of the base a slot was last synced to, kept beside it, so that a process that
//! never synced the slot before still knows them (see [`drop_former_base`]).

use super::*;

/// Where the paths of the base a slot was last synced to are kept: beside the slot (as its
/// kept objects are, see [`fresh_git`]), written by whoever syncs it — the hub under
/// `--isolation none`, the sandbox helper under `--isolation user` — so that a process that
/// never synced the slot before (a restarted hub, a new helper) still knows them.
pub(super) fn former_base_file(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.base"))
}

/// The most bytes [`former_base_paths`] reads: past it, the file is not ours.
pub(super) const FORMER_BASE_CAP: u64 = 64 << 20;

/// The paths of the base the slot at `dir` was last synced to (see [`former_base_file`]);
/// empty when there is none (a slot never synced by this version) or it cannot be read as
/// one. Never followed, never waited on (a FIFO), never read past [`FORMER_BASE_CAP`].
pub(super) fn former_base_paths(dir: &Path) -> Vec<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(former_base_file(dir));
    let Ok(file) = file else {
        return Vec::new();
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if file.take(FORMER_BASE_CAP).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .filter_map(|p| std::str::from_utf8(p).ok().map(str::to_string))
        .collect()
}

/// Remove from the slot at `dir` every path of the base it was last synced to that `base`
/// no longer has — ignored or not: a file the user stopped tracking (`git rm --cached` of a
/// `.env` under an ignore rule) must not stay in the slot for the next agents to read, and
/// [`crate::foreign::drop_foreign`] reads only the directories whose stat moved since the
/// last sync, which a file of the base that stayed untouched in one did not do.
/// Then note `base` as what the slot is synced to, before the files are written: a sync that
/// fails halfway still knows every base path it may have written.
pub fn drop_former_base(dir: &Path, base: &FlatTree) -> Result<(), SyncError> {
    let former = former_base_paths(dir);
    let fs_err = |source| SyncError::Fs {
        dir: dir.to_path_buf(),
        source,
    };
    if former.iter().any(|p| !base.contains_key(p)) {
        let root = Beneath::open_scratch(dir).map_err(fs_err)?;
        for path in former.iter().filter(|p| !base.contains_key(*p)) {
            match root.kind(path) {
                // A directory (the agent's) is for the leftover walk to judge; a path behind
                // a symlink is not in the slot.
                Ok(None | Some(Kind::Dir)) | Err(FsError::Symlink { .. }) => {}
                Ok(Some(_)) => root.remove_entry(path).map_err(fs_err)?,
                Err(e) => return Err(fs_err(e)),
            }
        }
    }
    if former.len() != base.len() || !former.iter().zip(base.keys()).all(|(a, b)| a == b) {
        note_base(dir, base).map_err(|source| SyncError::Io {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Write the paths of `base` to [`former_base_file`], atomically (a temporary file beside it,
/// then `rename`).
pub(super) fn note_base(dir: &Path, base: &FlatTree) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(base.len() * 32);
    for path in base.keys() {
        bytes.extend_from_slice(path.as_bytes());
        bytes.push(0);
    }
    let file = former_base_file(dir);
    let tmp = file.with_extension(format!("tmp-{}", crate::beneath::temp_name()));
    std::fs::write(&tmp, &bytes)?;
    std::fs::rename(&tmp, &file).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

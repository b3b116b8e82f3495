//! The user's checkout, snapshotted at the cost of what changed: a [`CheckoutWatch`] keeps the
//! last snapshot (every file's entry and stat) and an inotify watch over the checkout's
//! directories (see [`crate::status::watch`]), so the next snapshot reads only the paths where
//! something happened since, and walks only the directories they are in — git's fsmonitor
//! idea, where the stat cache ([`crate::status::statcache`]) is git's index.
//!
//! What decides which files a snapshot holds, beyond the files themselves, is checked every
//! time and sends the snapshot back to a whole one when it changed: the index (a path added
//! or removed there is looked at; `git add -f` of an ignored file), the repository's
//! `info/exclude` and the user's git config and global excludes file. The watch gives up (and
//! the snapshot is a whole one, which starts a new watch first) when the kernel dropped
//! events, a directory was renamed, directories came or went since the last whole snapshot (a
//! new directory is not watched yet), or a `.gitignore` changed: the watch is over the
//! directories that were not ignored, and one a rule no longer ignores must be watched from
//! then on, or an edit there would be missed by every later snapshot (#54.5).
//!
//! A whole snapshot starts its watch *before* it walks, so a change made while it runs is seen
//! by the next one. What inotify cannot see (a write through a hard link made from outside the
//! checkout, or through a shared `mmap`) may be missing from a base; a base is only ever what
//! a run starts from, and a hunk whose context no longer matches the checkout is a conflict at
//! accept, never applied over an edit.
//!
//! **Layer:** imports [`crate::fs::beneath`], [`crate::status::snapshot`], [`crate::status::statcache`],
//! [`crate::odb::store`], [`crate::status::watch`] and [`crate::wire`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use crate::fs::beneath::Beneath;
use crate::odb::store::{Entry, Store};
use crate::status::snapshot::{
    capture_each, checkout_parts, stat_cache_path, store_captured, tracked_paths, walk, Check,
    Skipped, Snapshot, SnapshotError,
};
use crate::status::statcache::{file_stat, StatCache};
use crate::status::watch::{Dirty, Watch};
use crate::wire::FileStat;

/// A checkout, its last snapshot, and what changed since (see the module docs).
#[derive(Debug)]
pub struct CheckoutWatch {
    root: PathBuf,
    watch: Watch,
    /// Every file of the last snapshot: its entry, and its stat when it was stored.
    files: BTreeMap<String, (Entry, FileStat)>,
    skipped: Vec<Skipped>,
    /// The index's paths (None: a jj repository without a colocated .git), and the index
    /// file's stat when they were read.
    tracked: Option<HashSet<String>>,
    index: Option<(PathBuf, Option<FileStat>)>,
    /// The files that decide what else is ignored, and their stat.
    rules: Vec<(PathBuf, Option<FileStat>)>,
}

/// How the last [`snapshot`] was made, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Every file was looked at (and a watch started, where there is change notification).
    Whole,
    /// Only the paths change notification named were.
    Changed { looked_at: usize },
}

/// Snapshot the checkout at `repo_root` into `store`, with `state` — None at first — carried
/// from one call to the next: an incremental snapshot when the watch in it can tell what
/// changed, else a whole one (which leaves a new watch in `state`). The result is the same
/// either way.
pub fn snapshot(
    repo_root: &Path,
    store: &Store,
    cap: u64,
    state: &mut Option<CheckoutWatch>,
) -> Result<(Snapshot, How), SnapshotError> {
    if let Some(w) = state.as_mut().filter(|w| w.root == repo_root) {
        match w.incremental(store, cap) {
            Some(Ok(snap)) => return Ok(snap),
            Some(Err(e)) => {
                *state = None;
                return Err(e);
            }
            None => {}
        }
    }
    *state = None;
    // The watch starts before the walk: whatever changes while this snapshot runs is named
    // to the next one.
    let watch = Watch::start(
        repo_root,
        walk(repo_root, true, None, None)
            .dirs
            .iter()
            .map(String::as_str),
    );
    let mut cache = StatCache::load(&stat_cache_path(store), repo_root, store);
    let parts = checkout_parts(repo_root, store, cap, Some(&mut cache))?;
    match watch {
        Ok(mut watch) => {
            // Directories made between the two walks.
            for dir in &parts.dirs {
                if let Err(e) = watch.add(dir) {
                    tracing::debug!(dir, error = %e, "cannot watch a directory of the checkout");
                    return Ok((parts.snap, How::Whole));
                }
            }
            let repo = gix::open_opts(repo_root, gix::open::Options::isolated()).ok();
            let index = repo.as_ref().map(|r| {
                let path = r.index_path();
                let stat = stat_of(&path);
                (path, stat)
            });
            *state = Some(CheckoutWatch {
                root: repo_root.to_path_buf(),
                watch,
                files: parts
                    .seen
                    .into_iter()
                    .map(|(p, stat, entry)| (p, (entry, stat)))
                    .collect(),
                skipped: parts.snap.skipped.clone(),
                tracked: parts.tracked,
                index,
                rules: rules(repo.as_ref())
                    .into_iter()
                    .map(|p| {
                        let st = stat_of(&p);
                        (p, st)
                    })
                    .collect(),
            });
        }
        Err(e) => {
            tracing::debug!(error = %e, "no change notification for the checkout: every snapshot looks at every file");
        }
    }
    Ok((parts.snap, How::Whole))
}

/// [`snapshot`] without change notification (`[accel] watch = false`): a whole snapshot, every
/// file `lstat`ed, the stat cache still used, and no watch started.
pub fn snapshot_unwatched(
    repo_root: &Path,
    store: &Store,
    cap: u64,
) -> Result<(Snapshot, How), SnapshotError> {
    let mut cache = StatCache::load(&stat_cache_path(store), repo_root, store);
    let parts = checkout_parts(repo_root, store, cap, Some(&mut cache))?;
    Ok((parts.snap, How::Whole))
}

/// The files whose content decides what else a checkout snapshot ignores: the repository's
/// `info/exclude`, and git's global and system config and the global excludes file they name.
fn rules(repo: Option<&gix::Repository>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(repo) = repo {
        out.push(repo.common_dir().join("info").join("exclude"));
    }
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    #[allow(deprecated)] // the same home the walker's ignore rules use
    let home = std::env::home_dir();
    let xdg = env_path("XDG_CONFIG_HOME").or_else(|| home.as_ref().map(|h| h.join(".config")));
    out.extend(env_path("GIT_CONFIG_GLOBAL"));
    out.extend(home.map(|h| h.join(".gitconfig")));
    out.extend(xdg.map(|x| x.join("git").join("config")));
    out.push(env_path("GIT_CONFIG_SYSTEM").unwrap_or_else(|| "/etc/gitconfig".into()));
    out.extend(ignore::gitignore::gitconfig_excludes_path());
    out
}

/// The `lstat` of `path`, None if it is absent (or cannot be read: either way, a change to it
/// shows).
fn stat_of(path: &Path) -> Option<FileStat> {
    nix::sys::stat::lstat(path).ok().map(|st| file_stat(&st))
}

impl CheckoutWatch {
    /// The snapshot after what the watch saw; None when it cannot tell (see the module docs).
    fn incremental(
        &mut self,
        store: &Store,
        cap: u64,
    ) -> Option<Result<(Snapshot, How), SnapshotError>> {
        if self.watch.reshaped() {
            return None;
        }
        if self.rules.iter().any(|(p, was)| stat_of(p) != *was) {
            tracing::debug!("the checkout's ignore rules or git config changed: a whole snapshot");
            return None;
        }
        let mut dirty = self.watch.take()?;
        if let Err(e) = self.refresh_index(&mut dirty) {
            return Some(Err(e));
        }
        Some(self.apply(dirty, store, cap))
    }

    /// Read the index again if it changed, naming each path it added or dropped as dirty.
    fn refresh_index(&mut self, dirty: &mut Dirty) -> Result<(), SnapshotError> {
        let Some((path, was)) = &self.index else {
            return Ok(());
        };
        let now = stat_of(path);
        if now == *was {
            return Ok(());
        }
        let repo = gix::open_opts(&self.root, gix::open::Options::isolated()).map_err(|_| {
            SnapshotError::NotARepo {
                path: self.root.display().to_string(),
            }
        })?;
        let tracked = tracked_paths(&repo, &self.root)?;
        if let Some(old) = &self.tracked {
            dirty
                .paths
                .extend(old.symmetric_difference(&tracked).cloned());
        }
        self.tracked = Some(tracked);
        self.index = Some((path.clone(), now));
        Ok(())
    }

    /// Look at what `dirty` covers; keep the rest of the last snapshot as it was.
    fn apply(
        &mut self,
        dirty: Dirty,
        store: &Store,
        cap: u64,
    ) -> Result<(Snapshot, How), SnapshotError> {
        let mut candidates = BTreeSet::new();
        let mut unnamed = Vec::new();
        if !dirty.is_empty() {
            let walked = walk(&self.root, true, Some(dirty.within()), None);
            unnamed = walked.skipped;
            // The walk lists whole directories: of those files, the ones nothing named are
            // kept as they were.
            candidates = walked.files;
            candidates.retain(|p| dirty.covers(p) || !self.files.contains_key(p));
            let tracked = self.tracked.iter().flatten();
            candidates.extend(tracked.filter(|p| dirty.covers(p)).cloned());
            if dirty.trees.is_empty() {
                for p in &dirty.paths {
                    self.files.remove(p);
                }
            } else {
                self.files.retain(|p, _| !dirty.covers(p));
            }
            self.skipped.retain(|s| !dirty.covers(&s.path));
        }
        let looked_at = candidates.len();
        let mut snap = Snapshot::default();
        if looked_at > 0 {
            let root = Beneath::open(&self.root)?;
            let mut blobs = store.batch();
            let mut seen = Vec::new();
            let candidates: Vec<String> = candidates.into_iter().collect();
            capture_each(
                &root,
                &candidates,
                cap,
                true,
                // Dirty paths are read: their stat says nothing the watch did not.
                |_, _| Check::Read,
                |item| {
                    if let Some(got) = store_captured(&mut blobs, &mut snap, item)? {
                        seen.push(got);
                    }
                    Ok::<_, crate::odb::store::StoreError>(())
                },
            )?;
            blobs.finish()?;
            for (path, stat, entry) in seen {
                self.files.insert(path, (entry, stat));
            }
            self.skipped.append(&mut snap.skipped);
            self.skipped.extend(unnamed);
            self.skipped.sort_by(|a, b| a.path.cmp(&b.path));
            self.skipped.dedup();
        }
        snap.tree = self
            .files
            .iter()
            .map(|(p, (entry, _))| (p.clone(), *entry))
            .collect();
        snap.skipped = self.skipped.clone();
        Ok((snap, How::Changed { looked_at }))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;

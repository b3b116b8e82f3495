//! Change notification for a sandbox slot: which paths may have changed since a point in time,
//! so that the read-back after a run and the next sync look at those paths only, instead of
//! walking and `lstat`ing the whole sandbox (what git's fsmonitor does for `git status`).
//!
//! A [`Watch`] holds an inotify watch on every directory of a slot (every base directory,
//! ignored or not: see `workspace`'s `start_watch`) or of the user's checkout (every directory
//! that is not ignored: see [`crate::status::checkout`]), started or cleared right after a sync or a
//! whole snapshot. Each event names a path in a watched directory; [`Dirty`]
//! collects them: `paths` (a file or symlink created, written, removed, renamed or `chmod`ed)
//! and `trees` (a directory created or removed, a directory's own attributes, a `.gitignore`
//! changed: everything beneath may differ, and is walked). A `.gitignore` changed also means
//! the set of watched directories may be out of date, as when a directory comes or goes
//! ([`Watch::reshaped`]): a directory it no longer ignores was not watched, and an edit there
//! later would go unseen by every snapshot.
//!
//! The watch gives up — [`Watch::changes`] says `None`, and the caller falls back to looking at
//! every file — when the kernel dropped events (queue overflow), a watched directory was
//! renamed (its path, which events are named by, went stale) or the slot's root went away.
//!
//! **What it cannot see.** inotify reports writes made through a path inside a watched
//! directory. A write through a hard link made from outside the sandbox, or through a shared
//! `mmap` after its file was closed, makes no event. The cost of a missed change is that
//! change missing from the suggestion — never something unreviewed reaching the checkout: what
//! is applied is what was read back and shown — and the put-back of the slot once its run is
//! over, which `lstat`s every file and never trusts a file with another name (see
//! `sync::sync_files`), puts the file back to the base and cuts the link. Under
//! `--isolation none` the hub keeps a watch per slot from one sync to the next (the agent runs
//! as the hub's own user there and could write anything anyway), reads its events as they
//! come while the agent runs (see `Sandbox::follow_changes`), so that the read-back after the
//! run has only the last few left to read, and puts the slot back to its base on a thread of
//! its own once the run is over (`LocalSandbox`'s `run_over`; the next sync does it if it comes
//! first). Under `--isolation user` the watch is held by the read-back's
//! standby helper (see [`crate::helper`]), as the sandbox user but out of the agent's reach,
//! from the end of the run's sync (before the agent starts) to the run's end; the agent can
//! only make it give up (flood it, rename a directory), and then that read-back looks at
//! every file. A sync under `user` — by that helper, kept for the slot's next sync, or by a
//! new one — always looks at every file (reading again only the directories whose stat
//! changed: see [`crate::wire::SyncRecord::dirs`] and [`Within::changed_dirs`]), so a write
//! the watch could not see is put back all the same. Only Linux has inotify;
//! elsewhere [`Watch::start`] fails and the callers look at every file.
//!
//! **Layer:** a leaf: it imports nothing else of this crate.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Paths that may have changed beneath a slot, `/`-separated and relative to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dirty {
    /// Files, symlinks or other non-directories an event named (each may be new, changed or
    /// gone).
    pub paths: BTreeSet<String>,
    /// Directories whose whole content may have changed (`""` is the slot itself).
    pub trees: BTreeSet<String>,
    /// Those of `paths` whose last event took them away (deleted, or renamed to another
    /// name): nothing is there unless something was made there after the events were read.
    /// An editor's or `sed -i`'s temporary file, renamed over the file it wrote, ends here; a
    /// read-back does not even `lstat` such a path when it is not in the base.
    pub gone: BTreeSet<String>,
}

impl Dirty {
    /// Whether `path` (a file's path) may have changed: it was named, or it lies in a dirty
    /// tree.
    pub fn covers(&self, path: &str) -> bool {
        self.paths.contains(path) || ancestors(path).any(|d| self.trees.contains(d))
    }

    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.trees.is_empty()
    }

    /// The directories a walk must enter to find every changed path that still exists: the
    /// parents of named paths (and their ancestors, to reach them), and the dirty trees (and
    /// their ancestors). A walk asks [`Within::enters`] of each directory it meets.
    pub fn within(&self) -> Within {
        let mut listed = BTreeSet::new();
        for p in &self.paths {
            listed.extend(ancestors(p).map(str::to_string));
        }
        for t in &self.trees {
            listed.insert(t.clone());
            listed.extend(ancestors(t).map(str::to_string));
        }
        Within {
            trees: self.trees.clone(),
            listed,
            known: None,
        }
    }

    /// The keys of `map` (a tree: paths in order) this set covers, found by lookups and range
    /// scans rather than by asking of every key.
    pub fn covered_keys<'a, V>(&self, map: &'a BTreeMap<String, V>) -> BTreeSet<&'a str> {
        let mut out = BTreeSet::new();
        for p in &self.paths {
            if let Some((k, _)) = map.get_key_value(p) {
                out.insert(k.as_str());
            }
        }
        for t in &self.trees {
            if t.is_empty() {
                out.extend(map.keys().map(String::as_str));
                continue;
            }
            let prefix = format!("{t}/");
            out.extend(
                map.range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, _)| k.as_str()),
            );
        }
        out
    }

    fn add_tree(&mut self, dir: String) {
        self.trees.insert(dir);
    }
}

/// Which directories a walk restricted to a [`Dirty`] enters (see [`Dirty::within`]).
#[derive(Debug, Clone)]
pub struct Within {
    trees: BTreeSet<String>,
    listed: BTreeSet<String>,
    /// With [`Within::changed_dirs`]: the directories known before; any other is new and
    /// entered.
    known: Option<HashSet<String>>,
}

impl Within {
    /// Whether a walk enters the directory `dir` (relative; `""` is the root).
    pub fn enters(&self, dir: &str) -> bool {
        self.listed.contains(dir)
            || self.trees.contains(dir)
            || ancestors(dir).any(|d| self.trees.contains(d))
            || self.known.as_ref().is_some_and(|k| !k.contains(dir))
    }

    /// A walk that reads the directories in `changed` (and the way to them) and every
    /// directory not in `known` — a new one, found in a changed directory — but no other:
    /// what a read-back needs when the directories outside `changed` are known to hold the
    /// same entries as when `known` was listed (see [`crate::wire::SyncRecord::dirs`]).
    pub fn changed_dirs<'a>(
        changed: impl IntoIterator<Item = &'a str>,
        known: HashSet<String>,
    ) -> Self {
        let mut listed = BTreeSet::new();
        for d in changed {
            listed.insert(d.to_string());
            listed.extend(ancestors(d).map(str::to_string));
        }
        Within {
            trees: BTreeSet::new(),
            listed,
            known: Some(known),
        }
    }
}

/// The proper ancestors of a relative path, nearest first, ending with `""` (the root).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(path);
    std::iter::from_fn(move || {
        let p = rest?;
        match p.rfind('/') {
            Some(i) => {
                rest = Some(&p[..i]);
                Some(&p[..i])
            }
            None if p.is_empty() => {
                rest = None;
                None
            }
            None => {
                rest = None;
                Some("")
            }
        }
    })
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// An inotify watch over the directories of one slot, and what it has seen since it was
/// started or last cleared.
#[derive(Debug)]
pub struct Watch {
    root: PathBuf,
    #[cfg(target_os = "linux")]
    inotify: nix::sys::inotify::Inotify,
    /// Watch descriptor → the directory it watches, relative to the root.
    #[cfg(target_os = "linux")]
    dirs: HashMap<nix::sys::inotify::WatchDescriptor, String>,
    #[cfg(not(target_os = "linux"))]
    dirs: HashMap<i32, String>,
    dirty: Dirty,
    /// Why the watch can no longer tell what changed (`None` while it can).
    lost: Option<&'static str>,
    /// A directory was created or removed: the set of watched directories is out of date, so
    /// the watch must be started again after the next sync.
    reshaped: bool,
}

impl Watch {
    /// Watch `dirs` (relative to `root`, `""` being the root itself: every directory the
    /// caller must hear of, see the module docs), from now on. No directory is followed through a symlink.
    #[cfg(target_os = "linux")]
    pub fn start<'a>(
        root: &Path,
        dirs: impl IntoIterator<Item = &'a str>,
    ) -> std::io::Result<Watch> {
        use nix::sys::inotify::{InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
        let mut w = Watch {
            root: root.to_path_buf(),
            inotify,
            dirs: HashMap::new(),
            dirty: Dirty::default(),
            lost: None,
            reshaped: false,
        };
        for dir in dirs {
            let wd = w
                .inotify
                .add_watch(&root.join(dir), watch_flags())
                .map_err(std::io::Error::from)?;
            w.dirs.insert(wd, dir.to_string());
        }
        Ok(w)
    }

    /// Watch those of `dirs` that are directories now, like [`Watch::start`]; one that is
    /// missing (or not a directory) is left unwatched — see [`Watch::watched`] — rather than
    /// failing the whole watch.
    pub fn start_present<'a>(
        root: &Path,
        dirs: impl IntoIterator<Item = &'a str>,
    ) -> std::io::Result<Watch> {
        let mut w = Watch::start(root, [])?;
        for dir in dirs {
            w.add_present(dir)?;
        }
        Ok(w)
    }

    /// The directories watched now (relative to the root): each was when the watch started
    /// (or it was added) and has not gone since.
    pub fn watched(&self) -> impl Iterator<Item = &str> {
        self.dirs.values().map(String::as_str)
    }

    /// The inotify descriptor, readable when events are queued (to wait on beside other
    /// input).
    #[cfg(target_os = "linux")]
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.inotify.as_fd()
    }

    /// Change notification is Linux's inotify only: elsewhere there is no watch.
    #[cfg(not(target_os = "linux"))]
    pub fn start<'a>(
        _root: &Path,
        _dirs: impl IntoIterator<Item = &'a str>,
    ) -> std::io::Result<Watch> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "change notification needs Linux's inotify",
        ))
    }

    /// The slot this watch covers.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What may have changed since the watch was started or cleared; `None` when the watch
    /// cannot tell (see the module docs), and the caller must look at everything.
    pub fn changes(&mut self) -> Option<&Dirty> {
        self.drain();
        match self.lost {
            Some(_) => None,
            None => Some(&self.dirty),
        }
    }

    /// Why the watch cannot tell what changed, if it cannot.
    pub fn lost(&self) -> Option<&'static str> {
        self.lost
    }

    /// Whether the watch must be started again (it is lost, or directories came or went)
    /// rather than [`clear`](Self::clear)ed after a sync.
    pub fn needs_restart(&mut self) -> bool {
        self.drain();
        self.lost.is_some() || self.reshaped
    }

    /// What may have changed since the watch was started or last taken from, forgetting it
    /// (what happens from now on goes to the next take); `None` when the watch cannot tell.
    pub fn take(&mut self) -> Option<Dirty> {
        self.drain();
        match self.lost {
            Some(_) => None,
            None => Some(std::mem::take(&mut self.dirty)),
        }
    }

    /// Whether directories came or went since the watch was started, or a `.gitignore`
    /// changed (new or no longer ignored ones are not watched: the watch must be started
    /// again to see inside them).
    pub fn reshaped(&mut self) -> bool {
        self.drain();
        self.reshaped
    }

    /// Watch one more directory (relative to the root) from now on.
    #[cfg(target_os = "linux")]
    pub fn add(&mut self, dir: &str) -> std::io::Result<()> {
        let wd = self
            .inotify
            .add_watch(&self.root.join(dir), watch_flags())
            .map_err(std::io::Error::from)?;
        self.dirs.insert(wd, dir.to_string());
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    pub fn add(&mut self, _dir: &str) -> std::io::Result<()> {
        Ok(())
    }

    /// Like [`Watch::add`], but a directory that is missing (or not a directory) is left
    /// unwatched rather than an error.
    pub fn add_present(&mut self, dir: &str) -> std::io::Result<()> {
        match self.add(dir) {
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(nix::libc::ENOENT | nix::libc::ENOTDIR)
                ) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Read the events queued so far into what the watch has seen (what every other call
    /// does first): while a run goes on, so that fewer are left for its read-back.
    pub fn absorb(&mut self) {
        self.drain();
    }

    /// What the watch has seen so far, without reading the queued events.
    #[cfg(test)]
    pub fn seen(&self) -> &Dirty {
        &self.dirty
    }

    /// Forget what was seen so far (after a sync brought the slot back to a known state): the
    /// events of the sync's own writes are read and dropped.
    pub fn clear(&mut self) {
        self.drain();
        self.dirty = Dirty::default();
    }

    /// Read every queued event into `dirty`.
    #[cfg(target_os = "linux")]
    fn drain(&mut self) {
        use nix::sys::inotify::AddWatchFlags as F;
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(nix::errno::Errno::EAGAIN) => return,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => {
                    self.lost = Some("reading change notifications failed");
                    return;
                }
            };
            if events.is_empty() {
                return;
            }
            for ev in events {
                if ev.mask.contains(F::IN_Q_OVERFLOW) {
                    self.lost = Some("the kernel dropped change notifications (too many)");
                    continue;
                }
                let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                    continue;
                };
                if ev.mask.intersects(F::IN_MOVE_SELF | F::IN_UNMOUNT) {
                    self.lost = Some("a watched directory was moved or unmounted");
                    continue;
                }
                if ev.mask.contains(F::IN_IGNORED) || ev.mask.contains(F::IN_DELETE_SELF) {
                    // The directory is gone; its parent's event names it as a dirty tree.
                    self.dirs.remove(&ev.wd);
                    if dir.is_empty() {
                        self.lost = Some("the sandbox directory itself was removed");
                    }
                    self.reshaped = true;
                    continue;
                }
                let Some(name) = ev.name.as_ref() else {
                    // An event on the directory itself (its mode or owner): what it holds may
                    // read differently now.
                    self.dirty.add_tree(dir);
                    continue;
                };
                let Some(name) = name.to_str() else {
                    // A name hunkgate cannot carry: the walk of its directory reports it.
                    self.dirty.add_tree(dir);
                    continue;
                };
                if name == ".git" || name == ".jj" {
                    // VCS metadata is never content (the walk never enters it either); the
                    // sync recreates the slot's .git each time.
                    continue;
                }
                let path = join(&dir, name);
                if ev.mask.contains(F::IN_ISDIR) {
                    if ev.mask.contains(F::IN_MOVED_FROM) {
                        self.lost = Some("a directory was renamed");
                    }
                    self.reshaped = true;
                    self.dirty.add_tree(path);
                } else if name == ".gitignore" {
                    // Other files of this directory may be ignored or not now — and so may
                    // directories below it, which a watch started over the directories that
                    // were not ignored does not watch (#54.5): it must be started again.
                    self.dirty.add_tree(dir);
                    self.reshaped = true;
                } else {
                    if ev.mask.intersects(F::IN_DELETE | F::IN_MOVED_FROM) {
                        self.dirty.gone.insert(path.clone());
                    } else {
                        self.dirty.gone.remove(&path);
                    }
                    self.dirty.paths.insert(path);
                }
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn drain(&mut self) {}
}

/// What a watched directory reports: entries created, written, removed, renamed, their
/// attributes; the directory's own removal or move. Never through a symlink, only directories.
#[cfg(target_os = "linux")]
fn watch_flags() -> nix::sys::inotify::AddWatchFlags {
    use nix::sys::inotify::AddWatchFlags as F;
    F::IN_CREATE
        | F::IN_DELETE
        | F::IN_MODIFY
        | F::IN_ATTRIB
        | F::IN_CLOSE_WRITE
        | F::IN_MOVED_FROM
        | F::IN_MOVED_TO
        | F::IN_DELETE_SELF
        | F::IN_MOVE_SELF
        | F::IN_DONT_FOLLOW
        | F::IN_ONLYDIR
}

#[cfg(test)]
mod tests;

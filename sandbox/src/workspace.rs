//! The sandbox clone: the directory an agent works in.
//!
//! Every agent-facing operation goes through [`Sandbox`], so the isolation mode can change (the
//! hub's own user with [`LocalSandbox`], a dedicated sandbox user with
//! [`UserSandbox`](crate::user::UserSandbox)) without the hub noticing.
//!
//! **Layer:** the sandbox abstraction. It imports [`crate::sync`] and what is below it
//! (`snapshot`, `statcache`, `store`, `beneath`, `wire`) and [`crate::tools`]'s request
//! types — nothing of the user-isolation side (`user`, `helper`), which builds on it.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::accel::Accel;
use crate::snapshot::{read_back_sandbox, Hints, OverLimit, ReadBack, ReadLimits, SnapshotError};
use crate::store::{FlatTree, ObjectBatch, Store, StoreError};
use crate::sync::{record_for, sync_slot, SyncError, Synced};
use crate::tools::{ToolReply, ToolRequest};
use crate::watch::{Dirty, Watch};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("preparing sandbox {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// What an isolation backend built on this trait reports (the sandbox helper's errors,
    /// [`crate::user::HelperError`]), kept as the source.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// The read-back went past its [`ReadLimits`] (any backend's).
    #[error(transparent)]
    OverLimit(OverLimit),
}

impl SandboxError {
    /// The limit a read-back went past, if that is what this is.
    pub fn over_limit(&self) -> Option<OverLimit> {
        match self {
            SandboxError::OverLimit(o) | SandboxError::Store(StoreError::OverLimit(o)) => Some(*o),
            SandboxError::Snapshot(e) => e.over_limit(),
            _ => None,
        }
    }
}

/// How an agent process is started and, above all, stopped.
pub struct AgentCommand {
    pub command: tokio::process::Command,
    pub stop: Stop,
}

/// How the hub ends an agent's whole process tree.
#[derive(Debug)]
pub enum Stop {
    /// The command leads a new process group that the hub signals itself (same user only).
    ProcessGroup,
    /// The command is a supervisor that the hub cannot signal past: its stdin is a socket,
    /// `request` is written to it, and it then stays open as a lifeline. Closing it (cancel,
    /// timeout, or the hub dying, even by kill -9) or SIGTERM makes the supervisor kill the
    /// agent's whole tree. The supervisor's side may answer on it, once, with the agent's wait
    /// status when nothing the agent started is left (see [`crate::wire::Request::verdict`]):
    /// the run is over then, whether or not the supervisor has exited yet.
    Lifeline { request: Vec<u8> },
}

/// Where and as whom an agent runs.
pub trait Sandbox: Send + Sync + std::fmt::Debug {
    /// The directory the agent sees as its repository root.
    fn workdir(&self) -> &Path;
    /// Make the sandbox hold exactly `base`, nothing more: whatever else is there — ignored
    /// or not, build caches included — goes (see [`crate::foreign`]), and so does every file
    /// of an earlier base that `base` no longer has (see [`crate::sync::drop_former_base`]).
    /// The sync is
    /// remembered with `base` itself: a [`Sandbox::snapshot`] given that same tree (by
    /// address) takes it as the synced base without comparing entries.
    fn prepare(&self, store: &Store, base: &Arc<FlatTree>) -> Result<(), SandboxError>;
    /// Read the sandbox as data into the store.
    fn snapshot(&self, store: &Store, base: &FlatTree, cap: u64) -> Result<ReadBack, SandboxError> {
        let mut objects = store.batch();
        let back = self.read_back(&mut objects, base, ReadLimits::only_file_cap(cap))?;
        objects.finish()?;
        Ok(back)
    }
    /// [`Sandbox::snapshot`], the new blobs added to `objects`, which the caller finishes (a
    /// publish writes its run commit's trees into the same batch). Past `limits` it fails
    /// with an error whose [`SandboxError::over_limit`] says which.
    fn read_back(
        &self,
        objects: &mut ObjectBatch<'_>,
        base: &FlatTree,
        limits: ReadLimits,
    ) -> Result<ReadBack, SandboxError>;
    /// A plain command that runs `argv` inside the sandbox, as the sandbox's user, with exactly
    /// `env` as its environment (short helper commands such as jj; the caller owns stdout and
    /// stderr, and under user isolation stdin is taken by the helper's request).
    fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command;
    /// How to run the agent `argv` inside the sandbox with exactly `env`, for at most `timeout`
    /// (the hub enforces the timeout too; a supervisor enforces it even if the hub hangs), and
    /// how to kill its whole process tree.
    fn agent_command(
        &self,
        argv: &[String],
        env: &[(String, String)],
        _timeout: Duration,
    ) -> AgentCommand {
        AgentCommand {
            command: self.command(argv, env),
            stop: Stop::ProcessGroup,
        }
    }
    /// Like [`Sandbox::agent_command`], for an agent spoken to over its stdio: the returned
    /// command's stdin carries what the hub writes after the request (see
    /// [`crate::wire::Request::stdio`]). Where the hub spawns the agent itself (a process
    /// group) the two are the same: [`crate::agent::spawn_interactive`] pipes its stdin.
    fn interactive_command(
        &self,
        argv: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> AgentCommand {
        self.agent_command(argv, env, timeout)
    }
    /// Run one of the built-in agent's file tools in the sandbox, as the sandbox's user.
    fn tool(&self, request: &ToolRequest) -> Result<ToolReply, SandboxError>;
    /// A short description for logs and status lines.
    fn isolation(&self) -> String;
    /// The run in this slot is over, its last read-back made: nothing runs in the slot until
    /// its next [`Sandbox::prepare`]. (Under user isolation the slot's kept helper then puts it
    /// back to its base, off the next run's start.)
    fn run_over(&self) {}
    /// While the agent runs: take in what change notification reports as it comes, so that
    /// the read-back after the run has only the last moment's events left to read, not the
    /// whole run's. Runs until dropped; where this process watches nothing (no watch, not
    /// Linux, or the watch is another process's, as under user isolation) it only waits.
    fn follow_changes(&self) -> Following {
        Box::pin(std::future::pending())
    }
}

/// What [`Sandbox::follow_changes`] returns: a task to run beside the agent until it ends.
pub type Following = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Everything a sandbox slot keeps from one run to the next: the record of its last sync,
/// its change-notification watch (`--isolation none`), its put-back to its base after a run,
/// and its kept helper (`--isolation user`). One owner holds it — the hub's run registry,
/// which hands it to each run's [`Sandbox`] ([`SharedSlot`]) — so it ends with its hub: two
/// hubs in one process share nothing, and a restarted hub starts without (its first sync of a
/// slot compares every file by content).
#[derive(Default)]
pub struct Slot {
    /// The slot's last sync (None: none yet, or one failed halfway).
    pub(crate) synced: Option<Arc<Synced>>,
    /// The watch started right after the last sync, asked at the read-back and the next sync.
    pub(crate) watch: Option<Watch>,
    /// Its put-back to its base once a run is over.
    pub(crate) reset: Reset,
    /// What an isolation backend above this layer keeps for the slot (the kept helper, under
    /// `--isolation user`): opaque here, since this layer knows nothing of user isolation.
    kept: Option<Box<dyn std::any::Any + Send>>,
}

/// A slot as its owner and the run that borrows it share it: the run's [`Sandbox`] holds it
/// while the run lasts; a put-back after the run may hold it a little longer.
pub type SharedSlot = Arc<std::sync::Mutex<Slot>>;

impl Slot {
    /// A slot that has never been synced, ready to be shared.
    pub fn shared() -> SharedSlot {
        SharedSlot::default()
    }

    /// The slot's last sync, if it has one.
    pub fn synced(&self) -> Option<&Arc<Synced>> {
        self.synced.as_ref()
    }

    /// Keep `kept` for the slot (a kept helper; what was kept before goes).
    pub(crate) fn keep<K: std::any::Any + Send>(&mut self, kept: K) {
        self.kept = Some(Box::new(kept));
    }

    /// What is kept for the slot, taken, if it is a `K`.
    pub(crate) fn take_kept<K: std::any::Any + Send>(&mut self) -> Option<K> {
        let kept = self.kept.take()?.downcast::<K>();
        kept.map(|k| *k).ok()
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("synced", &self.synced.as_ref().map(|s| s.base.len()))
            .field("watched", &self.watch.is_some())
            .field("reset", &self.reset)
            .field("kept", &self.kept.is_some())
            .finish()
    }
}

/// The slot's lock, even if a thread panicked holding it (the state is still whole: every
/// change to it is one assignment).
pub(crate) fn lock(slot: &SharedSlot) -> std::sync::MutexGuard<'_, Slot> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Isolation `none`: the agent runs as the hub's own user in a separate directory. Good for
/// development; it keeps the agent out of the checkout only by convention.
#[derive(Debug)]
pub struct LocalSandbox {
    dir: PathBuf,
    /// The accelerators on (see [`crate::accel`]).
    accel: Accel,
    /// What the slot keeps between runs; its owner's.
    slot: SharedSlot,
}

impl LocalSandbox {
    /// The slot at `dir`, with nothing kept from before (a slot of its own).
    pub fn new(dir: PathBuf) -> Self {
        Self::in_slot(dir, Slot::shared())
    }

    /// The slot at `dir`, whose state between runs `slot` holds (its owner's, borrowed for
    /// the run).
    pub fn in_slot(dir: PathBuf, slot: SharedSlot) -> Self {
        Self {
            dir,
            accel: Accel::ALL,
            slot,
        }
    }

    /// With only the accelerators `accel` has on: without the watch every sync and read-back
    /// looks at every file; without the untracked cache a read-back walks every directory.
    pub fn with_accel(self, accel: Accel) -> Self {
        Self { accel, ..self }
    }
}

/// A local slot's put-back to its base between runs (what a kept helper does under
/// `--isolation user`): whether one is due, and the store's objects its syncs borrow. Each
/// sync of the slot holds the slot's lock, so the put-back made on a thread of its own once a
/// run is over and the next run's sync never overlap.
#[derive(Debug, Default)]
pub(crate) struct Reset {
    /// The run is over and its slot was not yet synced with every file `lstat`ed.
    due: bool,
    objects: Option<PathBuf>,
    /// Whether the slot is watched (`[accel] watch`), as its last sync was told.
    watched: bool,
}

/// Sync the slot `slot` at `dir` to `base`, with the store's `objects` borrowed: with the
/// watch's changes looking only where it saw something, else (`full`) at every file. Then its
/// watch is cleared, or started again (see [`Sandbox::prepare`]); unless the slot is not
/// watched (`[accel] watch`): then it has no watch.
fn sync_watched(
    dir: &Path,
    slot: &mut Slot,
    base: &Arc<FlatTree>,
    full: bool,
    mut source: impl FnMut(crate::ObjectId) -> Result<Option<Vec<u8>>, crate::sync::SyncError>,
) -> Result<(), SyncError> {
    let objects = slot.reset.objects.clone().unwrap_or_default();
    let mut watch = slot.watch.take();
    let dirty = match full {
        true => None,
        false => watch.as_mut().and_then(|w| w.changes().cloned()),
    };
    sync_slot(
        dir,
        base,
        &mut slot.synced,
        Some(&objects),
        dirty.as_ref(),
        &mut source,
    )?;
    if !slot.reset.watched {
        return Ok(());
    }
    // From here on, what the agent changes is seen as it happens.
    let keep = watch
        .as_mut()
        .is_some_and(|w| w.changes().is_some() && !w.needs_restart());
    slot.watch = match watch {
        Some(mut w) if keep => {
            w.clear();
            Some(w)
        }
        _ => start_watch(dir, base),
    };
    Ok(())
}

/// Once a run is over, put its slot back to the base of its last sync with every file
/// `lstat`ed (on a thread of its own, off the next run's start): a write through a hard link
/// the agent made to a path outside the slot makes no inotify event, and a file with another
/// name is never trusted (see [`crate::sync::sync_files`]), so the link is cut here and a later
/// write through it reaches no sandbox. The next sync, if it comes first, does the same.
fn reset_after_run(dir: PathBuf, slot: SharedSlot) {
    lock(&slot).reset.due = true;
    let spawned = std::thread::Builder::new()
        .name("slot-reset".into())
        .spawn(move || {
            let mut st = lock(&slot);
            let Some(synced) = st.synced.clone() else {
                return;
            };
            if !st.reset.due || st.reset.objects.is_none() {
                return;
            }
            // Every blob of the base is in the store the sandbox's `.git` borrows from.
            match sync_watched(&dir, &mut st, &synced.base, true, |_| Ok(None)) {
                Ok(()) => st.reset.due = false,
                Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "the slot's reset after its run failed; its next sync looks at every file"),
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no thread to reset the slot; its next sync looks at every file");
    }
}

/// Follow the slot's watch (see [`Sandbox::follow_changes`]): whenever its events are
/// queued, wait a moment for more to gather, then read them all into the watch's record, on
/// a blocking thread. Waits forever if the slot has no watch.
async fn follow_watch(slot: SharedSlot) {
    #[cfg(target_os = "linux")]
    {
        let fd = lock(&slot)
            .watch
            .as_ref()
            .map(|w| w.fd().try_clone_to_owned());
        // The copy shares the watch's inotify queue (and its non-blocking mode).
        if let Some(Ok(fd)) = fd {
            let fd = crate::supervise::os::async_fd(fd, tokio::io::Interest::READABLE);
            if let Ok(fd) = fd {
                loop {
                    let Ok(mut ready) = fd.readable().await else {
                        break;
                    };
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    let slot = slot.clone();
                    let taken = tokio::task::spawn_blocking(move || {
                        if let Some(w) = lock(&slot).watch.as_mut() {
                            w.absorb();
                        }
                    })
                    .await;
                    if taken.is_err() {
                        break;
                    }
                    // Events queued since are a new readiness, which this does not clear.
                    ready.clear_ready();
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = slot;
    std::future::pending::<()>().await
}

/// What the slot's watch saw since the last sync; None if there is no watch or it cannot
/// tell.
fn changes_in(dir: &Path, slot: &mut Slot) -> Option<Dirty> {
    let w = slot.watch.as_mut()?;
    let dirty = w.changes().cloned();
    if dirty.is_none() {
        tracing::debug!(dir = %dir.display(), why = w.lost(), "reading back every file");
    }
    dirty
}

/// `record` without its directories (`[accel] untracked_cache = false`): a read-back that goes
/// by it reads every directory for new files.
pub(crate) fn without_dirs(record: &crate::wire::SyncRecord) -> crate::wire::SyncRecord {
    crate::wire::SyncRecord {
        dirs: Vec::new(),
        ..record.clone()
    }
}

/// What a hub on Linux says when a sandbox cannot be watched.
pub(crate) const NO_WATCH: &str = "no change notification (inotify) for this sandbox: the \
     read-back after its run looks at every file; raise fs.inotify.max_user_instances or \
     fs.inotify.max_user_watches (sysctl) if either is exhausted";

/// A watch on every directory of the slot, right after its sync to `base`: the base's
/// directories, ignored or not (the slot holds nothing else then, see [`crate::foreign`], and
/// the next sync must see what the agent leaves in an ignored one too). None (every file is
/// looked at) where there is no change notification or it cannot be set up (such as too few
/// inotify watches allowed).
fn start_watch(dir: &Path, base: &FlatTree) -> Option<Watch> {
    let dirs = crate::foreign::base_dirs(base);
    match Watch::start_present(dir, dirs.iter().copied()) {
        Ok(w) => Some(w),
        Err(e) => {
            // Only Linux has it: elsewhere there is nothing to say. On Linux a publish without
            // it looks at every file of the sandbox, ten to a hundred times slower.
            if cfg!(target_os = "linux") {
                tracing::warn!(dir = %dir.display(), error = %e, "{NO_WATCH}");
            }
            None
        }
    }
}

impl Sandbox for LocalSandbox {
    fn workdir(&self) -> &Path {
        &self.dir
    }

    fn prepare(&self, store: &Store, base: &Arc<FlatTree>) -> Result<(), SandboxError> {
        let mut st = lock(&self.slot);
        // Same user: the sandbox's .git borrows the store's objects instead of copying them.
        st.reset.objects = Some(store.path().join("objects"));
        st.reset.watched = self.accel.watch && self.accel.untracked_cache;
        // The put-back after the last run did not come first: this sync makes it.
        let full = std::mem::take(&mut st.reset.due);
        let synced = sync_watched(&self.dir, &mut st, base, full, |oid| {
            Ok(Some(store.read_blob(oid)?))
        });
        // A failed sync leaves the slot without a watch: the next one looks at every file.
        Ok(synced?)
    }

    fn read_back(
        &self,
        objects: &mut ObjectBatch<'_>,
        base: &FlatTree,
        limits: ReadLimits,
    ) -> Result<ReadBack, SandboxError> {
        let started = std::time::Instant::now();
        let mut st = lock(&self.slot);
        let synced = st.synced.clone();
        let record = record_for(synced.as_deref(), base);
        // Without the untracked cache, the record's directories are not gone by (nor the
        // watch, which vouches against them).
        let cut;
        let record = match record {
            Some(r) if !self.accel.untracked_cache => {
                cut = without_dirs(r);
                Some(&cut)
            }
            other => other,
        };
        let watched = self.accel.watch && self.accel.untracked_cache;
        let dirty = record
            .filter(|_| watched)
            .and_then(|_| changes_in(&self.dir, &mut st));
        drop(st);
        tracing::debug!(
            us = started.elapsed().as_micros() as u64,
            paths = dirty.as_ref().map(|d| d.paths.len()),
            trees = dirty.as_ref().map(|d| d.trees.len()),
            "the watch's changes taken"
        );
        let hints = Hints {
            record,
            dirty: dirty.as_ref(),
        };
        Ok(read_back_sandbox(&self.dir, base, objects, limits, hints)?)
    }

    fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&self.dir)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn tool(&self, request: &ToolRequest) -> Result<ToolReply, SandboxError> {
        Ok(crate::tools::execute(
            &self.dir,
            &request.tool,
            &request.limits,
        ))
    }

    fn isolation(&self) -> String {
        "none (same user)".into()
    }

    fn follow_changes(&self) -> Following {
        Box::pin(follow_watch(self.slot.clone()))
    }

    fn run_over(&self) {
        reset_after_run(self.dir.clone(), self.slot.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{set_mtime, tree};
    use crate::store::{blob_id, Entry, Mode};

    /// An agent's output past the read-back's limits is refused with the limit named, and
    /// what the checkpoint store took stays within them; ignored files never count.
    #[test]
    fn a_read_back_past_its_limits_fails_and_names_the_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base = tree(
            &store,
            &[
                (".gitignore", Mode::File, "target/\n"),
                ("a.txt", Mode::File, "a\n"),
                ("b.txt", Mode::File, "b\n"),
            ],
        );
        let sb = LocalSandbox::new(tmp.path().join("sb"));
        sb.prepare(&store, &Arc::new(base.clone())).unwrap();
        let dir = sb.workdir().to_path_buf();
        // Build output the repository ignores: any amount of it is no change.
        std::fs::create_dir_all(dir.join("target")).unwrap();
        for i in 0..100 {
            std::fs::write(dir.join(format!("target/o{i}")), vec![b'o'; 4096]).unwrap();
        }
        std::fs::create_dir_all(dir.join("gen")).unwrap();
        let content = |i: usize| format!("generated {i}\n").repeat(256).into_bytes();
        for i in 0..20 {
            std::fs::write(dir.join(format!("gen/{i}")), content(i)).unwrap();
        }
        let read = |files, bytes| {
            let mut objects = store.batch();
            let limits = ReadLimits {
                file_cap: u64::MAX,
                files,
                bytes,
            };
            let back = sb.read_back(&mut objects, &base, limits);
            if back.is_ok() {
                objects.finish().unwrap();
            }
            back
        };
        let taken = || {
            (0..20)
                .filter(|i| store.has_object(blob_id(&content(*i))))
                .count()
        };
        // Too many new files: refused before any is read (had one been, its content would be
        // over a limit of no bytes).
        let e = read(10, 0).unwrap_err();
        assert_eq!(e.over_limit(), Some(OverLimit::Files { limit: 10 }), "{e}");
        assert!(e.to_string().contains("max_changed_files"), "{e}");
        assert_eq!(taken(), 0);
        // Too much new content (each file 3.5 KiB): refused at the file past it.
        let e = read(100, 10 << 10).unwrap_err();
        assert_eq!(
            e.over_limit(),
            Some(OverLimit::Bytes { limit: 10 << 10 }),
            "{e}"
        );
        assert!(e.to_string().contains("max_changed_bytes"), "{e}");
        assert_eq!(taken(), 0, "a refused batch is not written");
        // Changed base files count as well as new ones.
        std::fs::write(dir.join("a.txt"), "A\n").unwrap();
        std::fs::write(dir.join("b.txt"), "B\n").unwrap();
        let e = read(21, u64::MAX).unwrap_err();
        assert_eq!(e.over_limit(), Some(OverLimit::Files { limit: 21 }), "{e}");
        // Positive control: at the limits exactly, everything is read back.
        let need = (0..20).map(|i| content(i).len() as u64).sum::<u64>() + 4;
        let back = read(22, need).unwrap();
        assert_eq!(back.changes.len(), 22);
        assert_eq!(taken(), 20);
    }

    /// The walk for new files stops past the limit, holding exactly as many new files as the
    /// limit allows: the read-back is refused, never made of the files it held (with an empty
    /// base, a read-back that went by the count it held would see one file fewer than there are
    /// and none over).
    #[test]
    fn a_read_back_whose_walk_stopped_is_refused_not_made_in_part() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let base = FlatTree::new();
        let sb = LocalSandbox::new(tmp.path().join("sb"));
        sb.prepare(&store, &Arc::new(base.clone())).unwrap();
        for i in 0..11 {
            std::fs::write(sb.workdir().join(format!("n{i}")), format!("{i}\n")).unwrap();
        }
        let read = |files| {
            let limits = ReadLimits {
                files,
                ..ReadLimits::default()
            };
            sb.read_back(&mut store.batch(), &base, limits)
        };
        let e = read(10).unwrap_err();
        assert_eq!(e.over_limit(), Some(OverLimit::Files { limit: 10 }), "{e}");
        // Positive control: one more allowed, all eleven are read back.
        assert_eq!(read(11).unwrap().changes.len(), 11);
    }

    #[test]
    fn prepare_brings_sandbox_to_exactly_the_base() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let mut base = FlatTree::new();
        let a = store.write_blob(b"a\n").unwrap();
        base.insert(
            "a.txt".into(),
            Entry {
                mode: Mode::File,
                oid: a,
            },
        );
        base.insert(
            ".gitignore".into(),
            Entry {
                mode: Mode::File,
                oid: store.write_blob(b"target/\n").unwrap(),
            },
        );
        base.insert(
            "bin/x".into(),
            Entry {
                mode: Mode::Executable,
                oid: a,
            },
        );
        let sb = LocalSandbox::new(tmp.path().join("sb"));
        sb.prepare(&store, &Arc::new(base.clone())).unwrap();
        // An agent run leaves things behind.
        std::fs::write(sb.workdir().join("a.txt"), "changed\n").unwrap();
        std::fs::write(sb.workdir().join("stray.txt"), "x\n").unwrap();
        std::fs::create_dir(sb.workdir().join("target")).unwrap();
        std::fs::write(sb.workdir().join("target/cache"), "keep\n").unwrap();
        std::fs::remove_file(sb.workdir().join("bin/x")).unwrap();
        sb.prepare(&store, &Arc::new(base.clone())).unwrap();
        assert_eq!(std::fs::read(sb.workdir().join("a.txt")).unwrap(), b"a\n");
        assert!(!sb.workdir().join("stray.txt").exists());
        // Ignored by the base's rules or not, nothing but the base stays.
        assert!(!sb.workdir().join("target").exists());
        let snap = sb.snapshot(&store, &base, u64::MAX).unwrap();
        assert_eq!(snap.tree(&base), base);
        assert!(snap.changes.is_empty(), "{:?}", snap.changes);
        // The agent finds a repository whose HEAD is the base and whose status is clean.
        let out = std::process::Command::new("git")
            .current_dir(sb.workdir())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["status", "--porcelain"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
        let out = std::process::Command::new("git")
            .current_dir(sb.workdir())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["log", "--format=%s"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hunkgate: your checkout as of this run\n"
        );
        // Its blobs are there (borrowed from the store), so the agent's `git diff` works.
        let out = std::process::Command::new("git")
            .current_dir(sb.workdir())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["cat-file", "-p", "HEAD:a.txt"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a\n");
    }

    /// The oracle: a read-back that trusts neither the sync's record nor change notification.
    fn full_look(sb: &LocalSandbox, store: &Store, base: &FlatTree) -> FlatTree {
        crate::snapshot::snapshot_sandbox(sb.workdir(), base, store, u64::MAX, Default::default())
            .unwrap()
            .tree(base)
    }

    /// What the slot's watch saw since the last sync.
    fn dirty_in(sb: &LocalSandbox) -> Option<Dirty> {
        changes_in(&sb.dir, &mut lock(&sb.slot))
    }

    /// A store with a base of `files` (path, text), and a slot synced to it.
    fn synced_slot(files: &[(&str, &str)]) -> (tempfile::TempDir, Store, FlatTree, LocalSandbox) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let files: Vec<(&str, Mode, &str)> =
            files.iter().map(|(p, t)| (*p, Mode::File, *t)).collect();
        let base = tree(&store, &files);
        let sb = LocalSandbox::new(tmp.path().join("sb"));
        sb.prepare(&store, &Arc::new(base.clone())).unwrap();
        (tmp, store, base, sb)
    }

    /// With accelerators off (no watch, no untracked cache, or neither) a slot is synced and
    /// read back on the slow paths, and finds what a full look finds: edits, a new file in a
    /// new directory, a deletion; and the next sync puts the slot back to its base. Control:
    /// without the watch the slot has none.
    #[test]
    fn without_accelerators_a_slot_reads_back_what_a_full_look_finds() {
        let off = [
            Accel::NONE,
            Accel {
                watch: false,
                ..Accel::ALL
            },
            Accel {
                untracked_cache: false,
                ..Accel::ALL
            },
        ];
        for accel in off {
            let tmp = tempfile::tempdir().unwrap();
            let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
            let files = [("a.txt", Mode::File, "a\n"), ("d/b.txt", Mode::File, "b\n")];
            let base = Arc::new(tree(&store, &files));
            let sb = LocalSandbox::new(tmp.path().join("sb")).with_accel(accel);
            sb.prepare(&store, &base).unwrap();
            assert!(dirty_in(&sb).is_none(), "{accel:?}: no watch");
            let dir = sb.workdir();
            std::fs::write(dir.join("a.txt"), "a, edited\n").unwrap();
            std::fs::remove_file(dir.join("d/b.txt")).unwrap();
            std::fs::create_dir_all(dir.join("new/deep")).unwrap();
            std::fs::write(dir.join("new/deep/n.txt"), "n\n").unwrap();
            let mut objects = store.batch();
            let back = sb
                .read_back(&mut objects, &base, ReadLimits::only_file_cap(u64::MAX))
                .unwrap();
            objects.finish().unwrap();
            let changed: Vec<&str> = back.changes.keys().map(String::as_str).collect();
            assert_eq!(changed, ["a.txt", "d/b.txt", "new/deep/n.txt"], "{accel:?}");
            assert_eq!(back.tree(&base), full_look(&sb, &store, &base), "{accel:?}");
            sb.prepare(&store, &base).unwrap();
            assert_eq!(
                full_look(&sb, &store, &base),
                *base,
                "{accel:?}: synced back"
            );
        }
        // Control: with every accelerator on, the slot is watched (where there is inotify).
        let (_tmp, _store, _base, sb) = synced_slot(&[("a.txt", "a\n")]);
        assert_eq!(
            dirty_in(&sb).is_some(),
            cfg!(target_os = "linux"),
            "watched"
        );
    }

    /// What the slot's watch has taken in so far, without reading its queue.
    #[cfg(target_os = "linux")]
    fn seen(sb: &LocalSandbox) -> Dirty {
        lock(&sb.slot).watch.as_ref().unwrap().seen().clone()
    }

    /// Following the slot while its agent runs reads the watch's events as they come, and the
    /// read-back after finds the same changes as without.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn following_a_slot_takes_its_events_in_as_they_come() {
        let (_tmp, store, base, sb) = synced_slot(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
        std::fs::write(sb.workdir().join("a.txt"), "changed\n").unwrap();
        // Control: queued, but nothing read them yet.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(seen(&sb).is_empty());

        let following = tokio::spawn(sb.follow_changes());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !seen(&sb).paths.contains("a.txt") {
            assert!(std::time::Instant::now() < deadline, "never taken in");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // And what comes later, too.
        std::fs::write(sb.workdir().join("d/b.txt"), "changed\n").unwrap();
        std::fs::write(sb.workdir().join("d/new.txt"), "new\n").unwrap();
        while !seen(&sb).paths.contains("d/new.txt") {
            assert!(std::time::Instant::now() < deadline, "never taken in");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        following.abort();
        let _ = following.await;

        let mut objects = store.batch();
        let back = sb
            .read_back(&mut objects, &base, ReadLimits::only_file_cap(u64::MAX))
            .unwrap();
        objects.finish().unwrap();
        let changed: Vec<&str> = back.changes.keys().map(String::as_str).collect();
        assert_eq!(changed, ["a.txt", "d/b.txt", "d/new.txt"]);
        assert_eq!(back.tree(&base), full_look(&sb, &store, &base));
    }

    /// Between runs a watched slot holds exactly its base (#54.3): what the agent planted —
    /// ignored by the base's rules or its own, unreadable, too deep, not UTF-8 — is gone after
    /// the next run's sync, which looks only where the watch saw something, and after the
    /// put-back once a run is over. Controls: the base's files are there as the base has
    /// them, and the agent's symlinks' targets outside the slot are untouched.
    #[test]
    fn a_watched_slot_holds_exactly_the_base_between_runs() {
        use crate::foreign::test_support::{exactly, listing, plant};
        // `build/kept.o` is tracked though ignored: `build/` is a base directory the
        // agent's leftovers there go from too.
        let (tmp, store, base, sb) = synced_slot(&[
            (".gitignore", "build/\n*.o\n"),
            ("a.txt", "a\n"),
            ("a/b.txt", "b\n"),
            ("build/kept.o", "k\n"),
        ]);
        let dir = sb.workdir().to_path_buf();
        let outside = tmp.path().join("outside.txt");
        std::fs::write(&outside, "mine\n").unwrap();
        let base = Arc::new(base);
        for put_back in [false, true] {
            plant(&dir, &outside);
            assert!(dir.join("sub/plant.py").exists() && dir.join("locked").exists());
            if put_back {
                sb.run_over();
            } else {
                assert!(dirty_in(&sb).is_some(), "the watch still knows");
            }
            sb.prepare(&store, &base).unwrap();
            assert_eq!(listing(&dir), exactly(&base), "put back {put_back}");
            assert_eq!(
                sb.snapshot(&store, &base, u64::MAX).unwrap().tree(&base),
                *base
            );
            assert_eq!(std::fs::read(&outside).unwrap(), b"mine\n");
        }
        // Alone (no `.gitignore` edited, which has every directory read): a file left in the
        // ignored base directory is seen by the watch, and goes.
        std::fs::write(dir.join("build/late.o"), "late\n").unwrap();
        assert!(dirty_in(&sb).is_some_and(|d| d.covers("build/late.o")));
        sb.prepare(&store, &base).unwrap();
        assert_eq!(listing(&dir), exactly(&base));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_watched_slot_reads_back_and_syncs_exactly_like_a_full_look() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let f = Mode::File;
        let base = tree(
            &store,
            &[
                (".gitignore", f, "*.o\nbuild/\n"),
                ("src/a.rs", f, "a\n"),
                ("src/b.rs", f, "b\n"),
                ("src/deep/c.rs", f, "c\n"),
                ("docs/x.md", f, "0123456789\n"),
                ("keep.txt", f, "keep\n"),
                ("gone/only.txt", f, "only\n"),
                ("run.sh", Mode::Executable, "#!/bin/sh\n"),
                ("link", Mode::Symlink, "keep.txt"),
            ],
        );
        let sb = LocalSandbox::new(tmp.path().join("sb"));
        sb.prepare(&store, &Arc::new(base.clone())).unwrap();
        let dir = sb.workdir().to_path_buf();
        let p = |n: &str| dir.join(n);
        assert_eq!(dirty_in(&sb), Some(Dirty::default()), "watched, and quiet");
        assert_eq!(
            sb.snapshot(&store, &base, u64::MAX).unwrap().tree(&base),
            base
        );

        // An agent does a bit of everything.
        let mtime = std::fs::metadata(p("docs/x.md"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::write(p("src/a.rs"), "a changed\n").unwrap();
        std::fs::remove_file(p("src/b.rs")).unwrap();
        std::fs::write(p("src/new.rs"), "new\n").unwrap();
        std::fs::write(p("src/new.o"), "ignored\n").unwrap();
        std::fs::create_dir_all(p("pkg/inner")).unwrap();
        std::fs::write(p("pkg/mod.rs"), "mod\n").unwrap();
        std::fs::write(p("pkg/inner/x.rs"), "x\n").unwrap();
        std::fs::create_dir(p("build")).unwrap();
        std::fs::write(p("build/out.txt"), "ignored\n").unwrap();
        std::fs::remove_dir_all(p("gone")).unwrap();
        std::fs::set_permissions(p("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::remove_file(p("link")).unwrap();
        symlink("src/a.rs", p("link")).unwrap();
        // Same size, mtime put back.
        std::fs::write(p("docs/x.md"), "abcdefghij\n").unwrap();
        set_mtime(&p("docs/x.md"), mtime);
        let dirty = dirty_in(&sb).expect("the watch still knows");
        assert!(!dirty.covers("keep.txt") && !dirty.covers("src/deep/c.rs"));

        let got = sb.snapshot(&store, &base, u64::MAX).unwrap().tree(&base);
        assert_eq!(got, full_look(&sb, &store, &base));
        let blob = |t: &FlatTree, n: &str| store.read_blob(t[n].oid).unwrap();
        assert_eq!(blob(&got, "src/a.rs"), b"a changed\n");
        assert_eq!(blob(&got, "docs/x.md"), b"abcdefghij\n");
        assert_eq!(blob(&got, "pkg/inner/x.rs"), b"x\n");
        assert_eq!(blob(&got, "link"), b"src/a.rs");
        assert_eq!(got["run.sh"].mode, Mode::File);
        for absent in ["src/b.rs", "gone/only.txt", "src/new.o", "build/out.txt"] {
            assert!(!got.contains_key(absent), "{absent}");
        }

        // The next base differs too: a file changed by the user, one removed, one in a new
        // directory, and a rule more in .gitignore. The sync looks only where something
        // happened or the base changed, and leaves exactly the new base.
        let mut base2 = base.clone();
        base2.extend(tree(
            &store,
            &[
                ("keep.txt", f, "keep, edited by the user\n"),
                ("newdir/n.txt", f, "n\n"),
                (".gitignore", f, "*.o\nbuild/\n*.tmp\n"),
            ],
        ));
        base2.remove("src/deep/c.rs");
        sb.prepare(&store, &Arc::new(base2.clone())).unwrap();
        assert_eq!(full_look(&sb, &store, &base2), base2);
        assert_eq!(
            sb.snapshot(&store, &base2, u64::MAX).unwrap().tree(&base2),
            base2
        );
        assert!(!p("src/new.rs").exists() && !p("pkg/mod.rs").exists());
        // Ignored or not, what the agent left goes (see `crate::foreign`).
        assert!(!p("src/new.o").exists() && !p("build").exists());

        // Positive control that the read-back really trusts the watch, and the limit the
        // module documents: a write through a hard link made outside the sandbox makes no
        // event, so only a full look sees it.
        std::fs::hard_link(p("keep.txt"), tmp.path().join("outside")).unwrap();
        std::fs::write(tmp.path().join("outside"), "written from outside\n").unwrap();
        assert_eq!(
            sb.snapshot(&store, &base2, u64::MAX).unwrap().tree(&base2),
            base2
        );
        assert_ne!(full_look(&sb, &store, &base2), base2);
        // The next sync after the watch gave up (a renamed directory) looks at every file
        // again, and repairs that one too.
        std::fs::rename(p("src"), p("src2")).unwrap();
        assert_eq!(dirty_in(&sb), None);
        sb.prepare(&store, &Arc::new(base2.clone())).unwrap();
        assert_eq!(full_look(&sb, &store, &base2), base2);
        assert_eq!(dirty_in(&sb), Some(Dirty::default()), "watched again");
    }

    /// A slot's state is its owner's: a second owner of the same directory (another hub in
    /// this process) starts with nothing of the first's — no record, no watch — and its
    /// read-back, comparing every file by content, still finds what the agent did; the first
    /// keeps its own.
    #[test]
    fn two_owners_of_one_slot_share_nothing() {
        let (_tmp, store, base, sb) = synced_slot(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
        {
            let st = lock(&sb.slot);
            assert!(
                st.synced().is_some_and(|s| s.is_for(&base)),
                "control: synced"
            );
            assert_eq!(st.watch.is_some(), cfg!(target_os = "linux"), "control");
        }
        let other = LocalSandbox::new(sb.workdir().to_path_buf());
        {
            let st = lock(&other.slot);
            assert!(st.synced().is_none() && st.watch.is_none(), "{st:?}");
        }
        std::fs::write(sb.workdir().join("d/b.txt"), "b, edited\n").unwrap();
        for owner in [&other, &sb] {
            let mut objects = store.batch();
            let back = owner
                .read_back(&mut objects, &base, ReadLimits::only_file_cap(u64::MAX))
                .unwrap();
            objects.finish().unwrap();
            let changed: Vec<&str> = back.changes.keys().map(String::as_str).collect();
            assert_eq!(changed, ["d/b.txt"]);
        }
        assert!(lock(&other.slot).synced().is_none());
    }
}

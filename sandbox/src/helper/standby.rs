//! The helper's side of a standby (see the module docs of [`crate::helper`] and the state
//! table in [`crate::wire::standby`]): started as a run's sync begins, it watches the slot
//! from the sync's end, reads the run's request while the agent works, and at the go reads the
//! sandbox back. Then it stays, watching on: told the slot's run is over it puts the slot back
//! to its base ([`Standby::reset`]); asked for the slot's next sync it makes that sync itself
//! ([`Standby::sync_again`]) and is the next run's standby; until the hub closes its input.
//!
//! Every word from the hub is read by [`wire::read_word`] in the state the helper is in, which
//! refuses one the table does not allow there; the helper's answers go to the `out` it is
//! given, never to the process's stdout itself, so its whole life is driven over in-memory
//! pipes by the unit tests (`crate::user::standby`'s), as the same user.

use std::io::{BufReader, BufWriter, Read, Write};
use std::os::fd::AsFd;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[cfg(target_os = "linux")]
use nix::libc;

use super::{kept_base_objects, read_blobs, sandbox_dir, snapshot, HelperFailure};
use crate::beneath::Beneath;
use crate::snapshot::Hints;
use crate::store::FlatTree;
use crate::sync::{
    base_from_wire, store_blob, sync_slot_with, Discard, SlotSync, SyncError, Synced,
};
use crate::watch::Watch;
use crate::wire::{self, Heard, Request, Standing};

/// A standby helper's state: where it is in its life, the slot it serves, this process's
/// record of the slot's last sync (its one copy: the hub keeps its own), and its watch.
struct Standby<'h> {
    state: Standing,
    home: &'h Path,
    /// The run's request (the slot, whether it is private, the read-back's cap).
    req: Request,
    dir: PathBuf,
    synced: Option<Arc<Synced>>,
    watch: Option<Watch>,
    /// Whether the slot was put back to its base since its last read-back.
    was_reset: bool,
}

/// Serve as a standby (`req`, already read from `input`, has `standby` set, and the process is
/// out of the agent's reach) until the hub closes `input`: every word read from `input`, every
/// answer written to `out`.
pub(super) fn serve<R: Read + AsFd, W: Write>(
    req: Request,
    home: &Path,
    input: &mut BufReader<R>,
    out: W,
) -> Result<ExitCode, HelperFailure> {
    let mut out = BufWriter::with_capacity(wire::STREAM_BUFFER, out);
    let mut me = Standby {
        state: Standing::Started,
        home,
        req,
        dir: PathBuf::new(),
        synced: None,
        watch: None,
        was_reset: false,
    };
    loop {
        wait_for_input(input, &mut me.watch);
        let Some(heard) = wire::read_word(input, me.state)? else {
            // The hub is done with this helper (or never wanted its read-back).
            return Ok(ExitCode::SUCCESS);
        };
        let next = wire::standby::after(me.state, heard.word());
        me.state = me.hear(heard, input, &mut out)?;
        debug_assert_eq!(Some(me.state), next, "a transition the table does not have");
        out.flush().map_err(HelperFailure::Output)?;
    }
}

impl Standby<'_> {
    /// Do what `heard` asks, answering on `out`; the state it leaves this standby in.
    fn hear(
        &mut self,
        heard: Heard,
        input: &mut impl Read,
        out: &mut impl Write,
    ) -> Result<Standing, HelperFailure> {
        match heard {
            Heard::Synced(dirs) => {
                self.synced_with(&dirs, input, out)?;
                Ok(Standing::Watching)
            }
            Heard::Go(cap) => {
                self.read_back(cap, out)?;
                // The agent may still be at work (a publish of its own): only once the hub
                // says the slot's run is over is the slot put back to its base, rather than at
                // the next run's start.
                self.was_reset = false;
                Ok(Standing::Kept)
            }
            Heard::Idle => {
                self.was_reset = self.was_reset || self.reset()?;
                Ok(Standing::Idle)
            }
            Heard::Again(again) => {
                let reply = self.sync_again(*again, input)?;
                wire::write_prepare_reply(out, &reply).map_err(HelperFailure::Output)?;
                wire::write_watching(out, self.watch.is_some()).map_err(HelperFailure::Output)?;
                Ok(Standing::Watching)
            }
        }
    }

    /// The run's sync is done and its agent not started yet: watch `dirs`, say whether it
    /// does, then read the run's own request — the base and the record of the sync the hub's
    /// helper made — as this process's record of the slot.
    fn synced_with(
        &mut self,
        dirs: &[String],
        input: &mut impl Read,
        out: &mut impl Write,
    ) -> Result<(), HelperFailure> {
        self.watch = watch_slot(self.home, &self.req, dirs);
        wire::write_watching(out, self.watch.is_some()).map_err(HelperFailure::Output)?;
        out.flush().map_err(HelperFailure::Output)?;
        let mut req = wire::read_request(input)?;
        let base = base_from_wire(std::mem::take(&mut req.base))
            .map_err(|(path, why)| HelperFailure::BadPath { path, why })?;
        self.dir = sandbox_dir(self.home, &req, false)?;
        let record = req.record.take().ok_or_else(|| HelperFailure::BadPath {
            path: String::new(),
            why: "a standby's request must carry the record of the run's sync".into(),
        })?;
        // This process's record of the slot, as a sync of its own would leave it.
        self.synced = Some(Arc::new(Synced {
            base: Arc::new(base),
            record,
            tree: None,
        }));
        self.req = req;
        Ok(())
    }

    /// The go: read the slot back, looking only where the watch saw something since the sync.
    fn read_back(&mut self, cap: u64, out: &mut impl Write) -> Result<(), HelperFailure> {
        self.req.cap = cap;
        let synced = self.last_sync("read back against")?;
        let dirty = self
            .watch
            .as_mut()
            .and_then(|w| seen_since_sync(w, Some(&synced.record)));
        let hints = Hints {
            record: Some(&synced.record),
            dirty: dirty.as_ref(),
        };
        snapshot(&self.req, &synced.base, self.home, hints, out)
    }

    /// The slot's last sync, which every state after [`Standing::Started`] has.
    fn last_sync(&self, to: &str) -> Result<Arc<Synced>, HelperFailure> {
        self.synced.clone().ok_or_else(|| HelperFailure::Dir {
            path: self.dir.clone(),
            problem: format!("no sync of this slot to {to}"),
        })
    }

    /// The slot's syncs: in this process, which lives on (the old `.git` is deleted on a
    /// thread), borrowing the slot's base objects.
    fn sync(
        &mut self,
        base: &Arc<FlatTree>,
        objects: &Path,
        dirty: Option<&crate::watch::Dirty>,
    ) -> Result<wire::PrepareReply, HelperFailure> {
        let slot = SlotSync {
            dir: &self.dir,
            alternate: Some(objects),
            discard: Discard::InBackground,
        };
        Ok(sync_slot_with(
            &slot,
            base,
            &mut self.synced,
            dirty,
            |_| Ok(None),
        )?)
    }

    /// Between runs, put the slot back to the base of its last sync, as a sync of that base by
    /// a new helper would: every file `lstat`ed (so a write through a hard link, which the
    /// watch cannot see, is undone too), every directory whose stat moved read, what differs
    /// rewritten, a fresh `.git`. Then the watch is cleared, or started again over the
    /// directories the reset left. Whether the slot was reset (false: there was no record of a
    /// sync to reset to).
    ///
    /// Only once the hub says the slot's run is over: no agent of this slot runs from then to
    /// its next sync (its whole PID namespace is gone), so the next sync may trust the watch
    /// ([`Standby::sync_again`]).
    fn reset(&mut self) -> Result<bool, HelperFailure> {
        let Some(synced) = self.synced.clone() else {
            return Ok(false);
        };
        // Every blob of the base is in the slot's base objects, out of the agent's reach.
        let objects = kept_base_objects(&self.dir, self.req.private_slot)?;
        let reply = self.sync(&synced.base, &objects.path().join("objects"), None)?;
        watch_on(&self.dir, &mut self.watch, &reply.record);
        Ok(true)
    }

    /// The slot's next sync ([`wire::write_again`]): the new base is the last one with
    /// `again`'s changes (their blobs sent with them), and the sync is made against this
    /// process's record of the last sync (or of the reset since it). Then the watch goes on
    /// for the next run.
    fn sync_again(
        &mut self,
        again: Request,
        input: &mut impl Read,
    ) -> Result<wire::PrepareReply, HelperFailure> {
        let mut blobs = std::collections::HashMap::new();
        read_blobs(input, |id, bytes| {
            blobs.insert(id, bytes);
            Ok(())
        })?;
        let synced = self.last_sync("sync again from")?;
        let base = Arc::new(next_base(&synced.base, again.base, again.removed)?);
        // After a reset, what changed since is what the watch saw (and the paths whose base
        // entry changed): no agent ran. Otherwise every base path is looked at (an `lstat`
        // each) and every directory whose stat moved is read, as a sync by a new helper does:
        // the watch cannot see a write through a hard link made from outside the sandbox,
        // which the read-back then missed, and the file must be put back to the base all the
        // same.
        let dirty = match self.was_reset {
            true => self
                .watch
                .as_mut()
                .and_then(|w| seen_since_sync(w, Some(&synced.record))),
            false => None,
        };
        // The blobs sent join the slot's base objects (each checked against its id), which
        // its new .git borrows. A blob the sync needs and was not sent fails the sync; the hub
        // then starts a helper that is sent every blob.
        let objects = kept_base_objects(&self.dir, again.private_slot)?;
        let mut batch = objects.batch();
        for (id, bytes) in blobs {
            store_blob(&self.dir, &mut batch, id, &bytes)?;
        }
        batch.finish().map_err(SyncError::from)?;
        let mut reply = self.sync(&base, &objects.path().join("objects"), dirty.as_ref())?;
        if reply.record.dirs.is_empty() && dirty.is_some() {
            self.record_dirs(&base, dirty.as_ref(), &mut reply)?;
        }
        watch_on(&self.dir, &mut self.watch, &reply.record);
        reply.after_reset = dirty.is_some();
        Ok(reply)
    }

    /// A sync that looked only where the watch saw something leaves no directory record. When
    /// the watch saw files only (no directory came or went, no `.gitignore` changed, no name
    /// hunkgate cannot carry appeared: each of those marks a tree), the directories are the
    /// watched ones, as they were at the reset, which recorded them all. Otherwise a walk
    /// finds them, unless it meets a name hunkgate cannot carry: then the record stays without
    /// (its directory must be read by every read-back, which reports it).
    fn record_dirs(
        &mut self,
        base: &Arc<FlatTree>,
        dirty: Option<&crate::watch::Dirty>,
        reply: &mut wire::PrepareReply,
    ) -> Result<(), HelperFailure> {
        let reshaped = self.watch.as_mut().is_none_or(|w| w.needs_restart());
        let files_only = dirty.is_some_and(|d| d.trees.is_empty()) && !reshaped;
        let dirs = match self.watch.as_ref() {
            Some(w) if files_only => Some(w.watched().map(String::from).collect::<Vec<_>>()),
            _ => {
                let walked = crate::snapshot::walk(&self.dir, false, None, None);
                walked.skipped.is_empty().then_some(walked.dirs)
            }
        };
        let Some(dirs) = dirs else {
            return Ok(());
        };
        let root = Beneath::open(&self.dir).map_err(|e| HelperFailure::Dir {
            path: self.dir.clone(),
            problem: e.to_string(),
        })?;
        reply.record.dirs = crate::snapshot::dir_record(&self.dir, &root, base, dirs);
        // What this process remembers of the sync must be what the hub is told.
        let tree = self.synced.as_ref().and_then(|s| s.tree);
        self.synced = Some(Arc::new(Synced {
            base: base.clone(),
            record: reply.record.clone(),
            tree,
        }));
        Ok(())
    }
}

/// The base of a slot's next sync: `last` without the `removed` paths and with the `changed`
/// entries (from the wire, each checked).
fn next_base(
    last: &FlatTree,
    changed: Vec<wire::BaseEntry>,
    removed: Vec<String>,
) -> Result<FlatTree, HelperFailure> {
    let changed =
        base_from_wire(changed).map_err(|(path, why)| HelperFailure::BadPath { path, why })?;
    let mut base = last.clone();
    for path in removed {
        if base.remove(&path).is_none() {
            return Err(HelperFailure::BadPath {
                path,
                why: "removed from the base, yet not in it".into(),
            });
        }
    }
    base.extend(changed);
    Ok(base)
}

/// After a sync: from here on, what the next agent does is seen as it happens. The watch is
/// cleared, or started again over the directories of `record` when directories came or went
/// since it started (the sync's own included) or it lost track.
fn watch_on(dir: &Path, watch: &mut Option<Watch>, record: &wire::SyncRecord) {
    let reshaped = watch.as_mut().is_none_or(|w| w.needs_restart());
    match watch.as_mut() {
        Some(w) if !reshaped => w.clear(),
        _ => {
            *watch = None;
            let dirs: Vec<&str> = record.dirs.iter().map(|(d, _)| d.as_str()).collect();
            *watch = watch_dir(dir, &dirs);
        }
    }
}

/// A standby's watch over its slot (see [`crate::watch`]), on `dirs`: the directories the
/// sync left, named by the hub once the sync is done and before the agent starts. None — the
/// read-back looks at every file — when there is nothing to watch, a name is not a plain
/// relative path, or inotify cannot watch them all.
fn watch_slot(home: &Path, req: &Request, dirs: &[String]) -> Option<Watch> {
    let dir = sandbox_dir(home, req, false).ok()?;
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    watch_dir(&dir, &dirs)
}

/// [`watch_slot`] of the slot `dir`.
fn watch_dir(dir: &Path, dirs: &[&str]) -> Option<Watch> {
    let plain = |d: &&str| d.is_empty() || crate::beneath::check_path(d).is_ok();
    if dirs.is_empty() || dirs.len() > MAX_WATCHED || !dirs.iter().all(plain) {
        return None;
    }
    match Watch::start_present(dir, dirs.iter().copied()) {
        Ok(w) => Some(w),
        Err(e) => {
            eprintln!("hunkgate sandbox-helper: no change notification ({e})");
            None
        }
    }
}

/// The most directories a standby watches, and the most paths its watch collects before it
/// gives up on it (and the read-back looks at every file).
const MAX_WATCHED: usize = 100_000;

/// Wait for the hub's next word to be there to read. Meanwhile the watch's events are read as
/// they come, so the kernel's queue does not overflow while the agent works; a watch that
/// loses track, or collects more than [`MAX_WATCHED`] paths, is dropped.
fn wait_for_input<R: Read + AsFd>(input: &mut BufReader<R>, watch: &mut Option<Watch>) {
    // Elsewhere there is no watch to read: the read of the signal just blocks.
    #[cfg(not(target_os = "linux"))]
    let _ = (input, watch);
    #[cfg(target_os = "linux")]
    while input.buffer().is_empty() {
        let Some(w) = watch.as_mut() else {
            break;
        };
        let mut pfds = [
            libc::pollfd {
                fd: input.get_ref().as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: w.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if let Err(e) = crate::supervise::os::poll(&mut pfds, -1) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if pfds[0].revents != 0 {
            break;
        }
        if pfds[1].revents != 0 {
            let keeps = w
                .changes()
                .is_some_and(|d| d.paths.len() + d.trees.len() <= MAX_WATCHED);
            if !keeps {
                *watch = None;
                continue;
            }
        }
    }
}

/// What may differ from the sync of `record`, by the watch started right after it: None —
/// look at every file — when the watch lost track, or the sync left no directory record (then
/// the sandbox's directories are not all known). A directory of the record the watch does
/// not hold (it was gone when the watch started) may have changed throughout.
fn seen_since_sync(
    watch: &mut Watch,
    record: Option<&crate::wire::SyncRecord>,
) -> Option<crate::watch::Dirty> {
    let record = record.filter(|r| !r.dirs.is_empty())?;
    // Not taken: what the agent did is still to be seen by the slot's next sync.
    let mut dirty = watch.changes()?.clone();
    let watched: std::collections::HashSet<&str> = watch.watched().collect();
    for (d, _) in &record.dirs {
        if !watched.contains(d.as_str()) {
            dirty.trees.insert(d.clone());
        }
    }
    Some(dirty)
}

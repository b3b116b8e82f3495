//! [`UserSandbox`]: one sandbox slot of one repository under `--isolation user`, operated
//! through the helper — its syncs (by a `prepare` helper, or by the slot's kept helper), its
//! read-backs (by the helper that stood by, or a new one), the agent's commands — and the
//! checks the hub makes of what the helper answers.

use super::*;
use standby::{ChildStandby, Idle, Kept, Standby, Started, Watching, STANDBY_ANSWER};

/// One sandbox slot of one repository, operated through the helper.
pub struct UserSandbox {
    pub(super) iso: UserIsolation,
    pub(super) key: String,
    pub(super) slot: usize,
    pub(super) workdir: PathBuf,
    /// What the slot keeps between runs (its owner's): the record of its last sync, and its
    /// standby helper ([`SlotHelper`]).
    pub(super) state: SharedSlot,
}

impl std::fmt::Debug for UserSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSandbox")
            .field("iso", &self.iso)
            .field("key", &self.key)
            .field("slot", &self.slot)
            .field("workdir", &self.workdir)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A slot's standby helper ([`standby`]), in whichever state it waits, kept in the slot's
/// [`Slot`](crate::workspace::Slot): watching while the slot's run works, kept once it read
/// that run back (only where the slot is private: such a helper has nothing but the slot's
/// base objects to sync from, and elsewhere the agent could have written them), idle once
/// told the run is over.
#[derive(Debug)]
enum SlotHelper {
    Watching(ChildStandby<Watching>),
    Kept(ChildStandby<Kept>),
    Idle(ChildStandby<Idle>),
}

impl SlotHelper {
    /// A kept or idle helper that holds `synced` (the slot's last sync, by address): the one
    /// to ask for the slot's next sync.
    fn holds(&self, synced: Option<&Arc<Synced>>) -> bool {
        let made_for = match self {
            SlotHelper::Kept(s) => s.made_for(),
            SlotHelper::Idle(s) => s.made_for(),
            SlotHelper::Watching(_) => None,
        };
        made_for.zip(synced).is_some_and(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// Start the standby helper of `request`'s slot.
fn start_standby(
    iso: &UserIsolation,
    request: Request,
) -> Result<ChildStandby<Started>, HelperError> {
    let (child, stdin, stdout, stderr) = iso.spawn_helper("snapshot")?;
    let process = standby::Process::new(child, stderr);
    Ok(Standby::start(stdin, stdout, Some(process), request))
}

impl UserSandbox {
    /// One `prepare` exchange: the base listing and `record` in the header, then the blobs the
    /// helper may lack: with `changed` (the paths whose entry differs from the last sync's
    /// base, whose objects the helper kept), theirs; without, every one.
    fn prepare_with(
        &self,
        store: &Store,
        base: &FlatTree,
        changed: Option<&[&str]>,
        record: Option<&SyncRecord>,
    ) -> Result<PrepareReply, HelperError> {
        let request = self.request();
        let entries: Box<dyn Iterator<Item = &Entry> + Send> = match changed {
            Some(paths) => Box::new(paths.iter().filter_map(|p| base.get(*p))),
            None => Box::new(base.values()),
        };
        self.iso.run_helper(
            "prepare",
            |w| {
                let mut w = std::io::BufWriter::with_capacity(wire::STREAM_BUFFER, w);
                wire::write_request_with(&mut w, &request, base_refs(base), record)?;
                let mut sent = std::collections::HashSet::new();
                for entry in entries {
                    if !sent.insert(entry.oid) {
                        continue;
                    }
                    let bytes = store.read_blob(entry.oid).map_err(std::io::Error::other)?;
                    let frame = Frame::Blob {
                        oid: entry.oid.to_string(),
                        bytes,
                    };
                    wire::write_frame(&mut w, &frame)?;
                }
                wire::write_frame(&mut w, &Frame::End)?;
                w.flush()
            },
            |r| {
                wire::read_prepare_reply(&mut std::io::BufReader::new(r)).map_err(|source| {
                    HelperError::Stream {
                        op: "prepare",
                        source,
                        stderr: String::new(),
                    }
                })
            },
        )
    }

    /// The sync of the slot by its kept helper ([`Standby::again`]), which is then the run's
    /// standby.
    fn sync_by_kept(
        &self,
        kept: SlotHelper,
        store: &Store,
        base: &Arc<FlatTree>,
        previous: Option<&Synced>,
    ) -> Result<(), HelperError> {
        let started = std::time::Instant::now();
        let previous = previous.ok_or_else(|| HelperError::Protocol {
            op: "snapshot",
            message: "no sync of the slot to continue from".into(),
        })?;
        let made = |reply: PrepareReply, watching: bool| {
            let exchanged = started.elapsed();
            let (written, after_reset) = (reply.written, reply.after_reset);
            let record = checked_record(reply.record, base)?;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            tracing::debug!(
                slot = self.slot,
                helper_ms = ms(exchanged),
                check_ms = ms(started.elapsed() - exchanged),
                written,
                watching,
                after_reset,
                "sandbox synced by the kept helper"
            );
            // The read-back must know the sync by address: the one remembered now.
            Ok(self.remember_sync(base, record))
        };
        let request = self.request();
        let standby = match kept {
            SlotHelper::Kept(s) => s.again(request, store, base, previous, made)?,
            SlotHelper::Idle(s) => s.again(request, store, base, previous, made)?,
            SlotHelper::Watching(_) => {
                return Err(HelperError::Protocol {
                    op: "snapshot",
                    message: "the slot's helper has not read its run back".into(),
                })
            }
        };
        lock(&self.state).keep(SlotHelper::Watching(standby));
        Ok(())
    }

    /// Remember the slot's sync of `base`, which left `record` (checked), and return it as
    /// remembered (a read-back knows its sync by address).
    fn remember_sync(&self, base: &Arc<FlatTree>, record: SyncRecord) -> Arc<Synced> {
        let synced = Arc::new(Synced {
            base: base.clone(),
            record,
            tree: None,
        });
        lock(&self.state).synced = Some(synced.clone());
        synced
    }

    /// Start the run's read-back helper ([`Standby`]) as a prepare begins, from a thread,
    /// beside the sync's own helper.
    fn stand_by(
        &self,
    ) -> Option<std::thread::JoinHandle<Result<ChildStandby<Started>, HelperError>>> {
        let accel = self.iso.accel;
        let kept = accel.kept_helper && accel.watch && accel.untracked_cache;
        if !self.iso.agent_walled_off() || !kept {
            return None;
        }
        let (iso, request) = (self.iso.clone(), self.request());
        Some(std::thread::spawn(move || start_standby(&iso, request)))
    }

    /// Once the sync is done: the standby is told so, and kept in the slot for the read-back
    /// if it answered in time.
    fn keep_standby(
        &self,
        standby: std::thread::JoinHandle<Result<ChildStandby<Started>, HelperError>>,
        synced: Arc<Synced>,
    ) {
        let standby = match standby.join() {
            Ok(Ok(standby)) => standby,
            // Not started: the read-back after the run starts a helper of its own, which looks
            // at every file.
            Ok(Err(e)) => return tracing::warn!(error = %e, "no standby read-back"),
            Err(_) => return tracing::warn!("starting the standby read-back panicked"),
        };
        // Asked to watch directories (a sync that could vouch for them all), on Linux it can
        // only fail to when inotify is exhausted: then the read-back looks at every file.
        let asked = !synced.record.dirs.is_empty();
        match standby.synced(STANDBY_ANSWER, self.request(), synced) {
            Ok((standby, watching)) => {
                tracing::debug!(slot = self.slot, watching, "a read-back helper stands by");
                if asked && !watching && cfg!(target_os = "linux") {
                    tracing::warn!(slot = self.slot, "{}", crate::workspace::NO_WATCH);
                }
                lock(&self.state).keep(SlotHelper::Watching(standby));
            }
            Err(e) => tracing::warn!(error = %e, "the standby read-back is not used"),
        }
    }

    /// The standby read-back, if the slot has one and it was made for `synced` (the slot's
    /// sync, when its record holds for the base being read back). One made for another sync
    /// is dismissed; a kept or idle helper stays where it is.
    fn take_standby(&self, synced: Option<&Arc<Synced>>) -> Option<ChildStandby<Watching>> {
        let mut st = lock(&self.state);
        match st.take_kept::<SlotHelper>()? {
            SlotHelper::Watching(standby) => {
                let made_for = standby.made_for()?;
                synced
                    .is_some_and(|s| Arc::ptr_eq(s, made_for))
                    .then_some(standby)
            }
            other => {
                st.keep(other);
                None
            }
        }
    }

    fn request(&self) -> Request {
        Request {
            key: self.key.clone(),
            slot: self.slot as u64,
            // The mount namespace that makes a slot private comes with the private /proc.
            private_slot: self.iso.private_proc,
            ..Request::default()
        }
    }

    /// The `exec` request, framed: argv and the whole environment travel on stdin, never argv.
    fn exec_request(
        &self,
        argv: &[String],
        env: &[(String, String)],
        timeout: Duration,
        lifeline: bool,
    ) -> Vec<u8> {
        self.exec_request_with(argv, env, timeout, lifeline, false)
    }

    /// [`Self::exec_request`], with `stdio`: the agent's stdin is what follows the request on
    /// the lifeline (see [`wire::Request::stdio`]).
    fn exec_request_with(
        &self,
        argv: &[String],
        env: &[(String, String)],
        timeout: Duration,
        lifeline: bool,
        stdio: bool,
    ) -> Vec<u8> {
        let user = &self.iso.user;
        // The agent is the sandbox user: its own home and name, no TMPDIR of the hub's, and a
        // PATH of directories it can search (the helper adds those of the hub's it can).
        let hub_path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let path = crate::agent_path::compose(
            &self.iso.agent_path,
            &crate::agent_path::system_dirs(),
            hub_path,
        );
        let mut env: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "HOME" | "USER" | "LOGNAME" | "TMPDIR" | "PATH"))
            .cloned()
            .collect();
        env.push(("HOME".into(), user.home.display().to_string()));
        env.push(("USER".into(), user.name.clone()));
        env.push(("LOGNAME".into(), user.name.clone()));
        env.push(("PATH".into(), path.fixed.join(":")));
        let mut request = self.request();
        request.argv = argv.to_vec();
        request.env = env;
        request.path_if_searchable = path.if_searchable;
        request.timeout_ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        request.network_none = self.iso.network_none;
        // The helper makes its own namespaces (user + PID + mount with a private /proc, and
        // network when asked) when it can; otherwise a root hub already put it in fresh PID
        // (and network) namespaces.
        request.namespaces_ready = self.iso.launch == Launch::Direct
            && cfg!(target_os = "linux")
            && !self.iso.private_proc;
        request.private_proc = self.iso.private_proc;
        request.nproc = AGENT_NPROC;
        request.lifeline = lifeline;
        // The lifeline is a socket pair (see `agent::run`); a short command's stdin is a pipe.
        request.verdict = lifeline;
        request.stdio = stdio && lifeline;
        request.no_pid_namespace = pid_namespace_disabled();
        let mut bytes = Vec::new();
        // Serializing strings and integers into a Vec cannot fail.
        let _ = wire::write_request(&mut bytes, &request);
        bytes
    }
}

/// Largest request [`launch::stdin_from_bytes`] takes: it must fit in a pipe's buffer (64 KiB on Linux,
/// 16 KiB guaranteed on macOS), or the child would block on its own write forever.
const PIPE_REQUEST_MAX: usize = if cfg!(target_os = "linux") {
    60 * 1024
} else {
    16 * 1024
};

/// The helper's stat record of a prepare, checked: only base paths, each at most once; and
/// directories that are paths hunkgate can name (or `""`, the slot), each at most once, no
/// more of them than a sync records (see [`crate::snapshot::dir_record`]).
pub(crate) fn checked_record(
    record: SyncRecord,
    base: &FlatTree,
) -> Result<SyncRecord, HelperError> {
    // The helper lists them in the base's order: one pass beside the base's sorted keys, each
    // match taken past, refuses a stranger, a repeat and a path out of order alike.
    let mut keys = base.keys();
    for (path, _) in &record.files {
        if !keys.any(|k| k == path) {
            return Err(HelperError::BadPath {
                path: sanitize(path, 300),
                why: "not a base path, reported twice or out of order, in the prepare's record"
                    .into(),
            });
        }
    }
    if record.dirs.len() > SyncRecord::max_dirs(base.len()) {
        return Err(HelperError::Protocol {
            op: "prepare",
            message: format!("{} directories in the record", record.dirs.len()),
        });
    }
    let mut seen = std::collections::HashSet::new();
    for (path, _) in &record.dirs {
        let named = path.is_empty() || crate::beneath::components(path).is_ok();
        if !named || !seen.insert(path.as_str()) {
            return Err(HelperError::BadPath {
                path: sanitize(path, 300),
                why: "not a directory path, or reported twice, in the prepare's record".into(),
            });
        }
    }
    Ok(record)
}

/// Read a `snapshot` stream from the helper. Everything in it is the agent's word: paths are
/// checked, each may come once, an unchanged or gone path must be a base path, lengths are
/// bounded (each frame by the file cap; what differs from the base, and the new content the
/// store takes, by `limits`: so the stream as a whole is bounded too). A base path the stream
/// does not name is unchanged.
pub(super) fn read_snapshot(
    r: &mut impl std::io::Read,
    blobs: &mut ObjectBatch<'_>,
    base: &FlatTree,
    limits: ReadLimits,
) -> Result<ReadBack, HelperError> {
    let cap = limits.file_cap;
    blobs.limit_new_blob_bytes(limits.bytes);
    let mut back = ReadBack::default();
    let mut seen = std::collections::HashSet::new();
    let stream = |source| HelperError::Stream {
        op: "snapshot",
        source,
        stderr: String::new(),
    };
    loop {
        // Past the limit of what may differ, not a frame more is read (the stream ends only
        // with a frame read here, so this is the one place to look).
        if back.changes.len() + back.skipped.len() > limits.files {
            return Err(HelperError::OverLimit(OverLimit::Files {
                limit: limits.files,
            }));
        }
        let frame = wire::read_frame(r, cap).map_err(stream)?;
        let path = match &frame {
            Frame::File { path, .. }
            | Frame::Symlink { path, .. }
            | Frame::Unchanged { path }
            | Frame::Gone { path }
            | Frame::Skipped { path, .. } => path.clone(),
            Frame::Blob { .. } => {
                return Err(HelperError::Protocol {
                    op: "snapshot",
                    message: "sent a blob frame".into(),
                })
            }
            Frame::End => break,
        };
        if let Frame::Skipped { reason, .. } = &frame {
            // A name it could not carry may not be a path at all: reported, never stored.
            back.skipped.push(Skipped {
                path: sanitize(&path, 300),
                reason: sanitize(reason, 300),
            });
            if base.contains_key(&path) && seen.insert(path.clone()) {
                back.changes.insert(path, None);
            }
            continue;
        }
        let bad = |why: &str| HelperError::BadPath {
            path: sanitize(&path, 300),
            why: why.into(),
        };
        if let Err(e) = crate::beneath::components(&path) {
            return Err(bad(&e.to_string()));
        }
        if !seen.insert(path.clone()) {
            return Err(bad("sent twice"));
        }
        if let Some(change) = change_of(frame, base.get(&path), blobs, &bad)? {
            back.changes.insert(path, change);
        }
    }
    back.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(back)
}

/// What a snapshot's frame for a path (checked, and seen once) says changed, given its
/// `base` entry: None when nothing did; `bad` (what is wrong with it) for an unchanged or gone
/// path the base does not have. New content goes into `blobs`, hashed by the hub.
fn change_of(
    frame: Frame,
    base: Option<&Entry>,
    blobs: &mut ObjectBatch<'_>,
    bad: &dyn Fn(&str) -> HelperError,
) -> Result<Option<Option<Entry>>, HelperError> {
    let entry = match frame {
        Frame::Unchanged { .. } => {
            return match base {
                Some(_) => Ok(None),
                None => Err(bad("reported unchanged but not in the base")),
            }
        }
        Frame::Gone { .. } => {
            return match base {
                Some(_) => Ok(Some(None)),
                None => Err(bad("reported gone but not in the base")),
            }
        }
        Frame::File {
            bytes, executable, ..
        } => Entry {
            mode: if executable {
                Mode::Executable
            } else {
                Mode::File
            },
            oid: blobs.write_blob_hashed(None, bytes.into())?,
        },
        Frame::Symlink { target, .. } => Entry {
            mode: Mode::Symlink,
            oid: blobs.write_blob_hashed(None, target.into())?,
        },
        Frame::Skipped { .. } | Frame::Blob { .. } | Frame::End => return Ok(None),
    };
    Ok((base != Some(&entry)).then_some(Some(entry)))
}

/// Make a helper-sent reason printable and short: it is agent-controlled text.
pub(super) fn sanitize(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect()
}

impl Sandbox for UserSandbox {
    fn workdir(&self) -> &Path {
        &self.workdir
    }

    fn prepare(&self, store: &Store, base: &Arc<FlatTree>) -> Result<(), SandboxError> {
        let started = std::time::Instant::now();
        let (previous, helper) = {
            let mut st = lock(&self.state);
            (st.synced.take(), st.take_kept::<SlotHelper>())
        };
        // Any other helper the slot had (one that stood by for a run and never read it back)
        // goes.
        if let Some(kept) = helper.filter(|h| h.holds(previous.as_ref())) {
            match self.sync_by_kept(kept, store, base, previous.as_deref()) {
                Ok(()) => return Ok(()),
                // Whatever went wrong with it, the slot is synced as if it had never been.
                Err(e) => {
                    tracing::warn!(error = %e, "the kept helper's sync failed; starting others")
                }
            }
        }
        let standby = self.stand_by();
        // The base's delta since the last sync: it limits the old record, and only its blobs
        // can be new to the helper.
        let changed = previous
            .as_deref()
            .map(|prev| changed_paths(&prev.base, base));
        let record = previous
            .as_deref()
            .zip(changed.as_deref())
            .map(|(prev, changed)| rebase_onto(prev, changed))
            .filter(|r| !r.files.is_empty());
        // Blobs are left out only alongside a record, and only for a private slot, whose
        // helper keeps its base objects out of its agents' reach: otherwise the helper starts
        // from no objects.
        let changed = changed.filter(|_| record.is_some() && self.iso.private_proc);
        let planned = started.elapsed();
        let reply = match self.prepare_with(store, base, changed.as_deref(), record.as_deref()) {
            Ok(reply) => reply,
            // The helper may lack a blob the agent deleted from the sandbox's objects, or the
            // slot may be in a shape an in-place sync cannot fix: once more, sending everything.
            Err(e) if changed.is_some() => {
                tracing::warn!(error = %e, "incremental sandbox prepare failed; sending the whole base");
                self.prepare_with(store, base, None, None)?
            }
            Err(e) => return Err(e.into()),
        };
        let exchanged = started.elapsed();
        let record = checked_record(reply.record, base)?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            slot = self.slot,
            plan_ms = ms(planned),
            helper_ms = ms(exchanged - planned),
            check_ms = ms(started.elapsed() - exchanged),
            written = reply.written,
            "sandbox synced by the helper"
        );
        let synced = self.remember_sync(base, record);
        if let Some(standby) = standby {
            self.keep_standby(standby, synced);
        }
        Ok(())
    }

    fn read_back(
        &self,
        objects: &mut ObjectBatch<'_>,
        base: &FlatTree,
        limits: ReadLimits,
    ) -> Result<ReadBack, SandboxError> {
        let mut request = self.request();
        request.cap = limits.file_cap;
        let synced = lock(&self.state).synced.clone();
        let record = record_for(synced.as_deref(), base);
        if let Some(standby) = self.take_standby(synced.as_ref().filter(|_| record.is_some())) {
            match standby.read_back(objects, base, limits) {
                Ok((snap, kept)) => {
                    tracing::debug!(
                        slot = self.slot,
                        "sandbox read back by the helper that stood by"
                    );
                    // Kept for the slot's next sync only where the slot is private: such a
                    // helper has nothing but the slot's base objects to sync from, and
                    // elsewhere the agent could have written them.
                    if self.iso.private_proc {
                        lock(&self.state).keep(SlotHelper::Kept(kept));
                    }
                    return Ok(snap);
                }
                // Past the limits: another helper would find the same.
                Err(e) if e.over_limit().is_some() => return Err(e.into()),
                // Whatever else went wrong with it, a helper started now reads the sandbox
                // anew.
                Err(e) => {
                    tracing::warn!(error = %e, "the standby read-back failed; starting another")
                }
            }
        }
        // Without the untracked cache, the helper is sent no directory record to go by.
        let cut;
        let record = match record {
            Some(r) if !self.iso.accel.untracked_cache => {
                cut = crate::workspace::without_dirs(r);
                Some(&cut)
            }
            other => other,
        };
        let snap = self.iso.run_helper(
            "snapshot",
            |w| {
                let mut w = std::io::BufWriter::new(w);
                wire::write_request_with(&mut w, &request, base_refs(base), record)?;
                w.flush()
            },
            |r| {
                read_snapshot(
                    &mut std::io::BufReader::with_capacity(wire::STREAM_BUFFER, r),
                    objects,
                    base,
                    limits,
                )
            },
        )?;
        Ok(snap)
    }

    fn tool(&self, tool: &ToolRequest) -> Result<ToolReply, SandboxError> {
        let request = self.request();
        let reply = self.iso.run_helper(
            "tool",
            |w| {
                let mut w = std::io::BufWriter::new(w);
                wire::write_request(&mut w, &request)?;
                wire::write_header(&mut w, tool)?;
                w.flush()
            },
            |r| {
                // The sandbox user's answer: data for the model, never acted on by the hub.
                wire::read_header::<ToolReply>(&mut std::io::BufReader::new(r)).map_err(|source| {
                    HelperError::Stream {
                        op: "tool",
                        source,
                        stderr: String::new(),
                    }
                })
            },
        )?;
        Ok(reply)
    }

    fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command {
        // A short command (jj, say) whose caller does not keep a lifeline open: the request is
        // put on the helper's stdin by the child itself, just before exec, and stdin then reads
        // EOF. The helper still kills the command's whole tree when it exits, on SIGTERM, and
        // at the deadline.
        let request = self.exec_request(argv, env, Duration::from_secs(30 * 60), false);
        let mut cmd = self.iso.helper_command("exec", true);
        launch::stdin_from_bytes(&mut cmd, request, PIPE_REQUEST_MAX);
        tokio::process::Command::from(cmd)
    }

    fn agent_command(
        &self,
        argv: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> AgentCommand {
        AgentCommand {
            command: tokio::process::Command::from(self.iso.helper_command("exec", true)),
            stop: Stop::Lifeline {
                request: self.exec_request(argv, env, timeout, true),
            },
        }
    }

    fn interactive_command(
        &self,
        argv: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> AgentCommand {
        let mut cmd = self.agent_command(argv, env, timeout);
        if let Stop::Lifeline { request } = &mut cmd.stop {
            *request = self.exec_request_with(argv, env, timeout, true, true);
        }
        cmd
    }

    fn run_over(&self) {
        let mut st = lock(&self.state);
        match st.take_kept::<SlotHelper>() {
            // Told, it puts the slot back to its base; one that cannot be told is dismissed.
            Some(SlotHelper::Kept(kept)) => match kept.idle() {
                Ok(idle) => st.keep(SlotHelper::Idle(idle)),
                Err(e) => {
                    tracing::debug!(error = %e, "the kept helper could not be told its run is over")
                }
            },
            Some(idle @ SlotHelper::Idle(_)) => st.keep(idle),
            // One that stood by and was never asked to read the run back goes with the run.
            Some(SlotHelper::Watching(_)) | None => {}
        }
    }

    fn isolation(&self) -> String {
        let how = match self.iso.launch {
            Launch::Direct => "the root hub drops privileges",
            Launch::Sudo { .. } => "via sudo",
        };
        let net = if self.iso.network_none {
            ", no network"
        } else {
            ""
        };
        format!("user {} ({how}{net})", self.iso.user.name)
    }
}

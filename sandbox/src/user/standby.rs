//! The hub's end of a standby helper, as a typestate: [`Standby<Started>`] →
//! [`Standby<Watching>`] → [`Standby<Kept>`] → [`Standby<Idle>`], and from `Kept` or `Idle`
//! back to `Watching` by the slot's next sync. Each transition is a method of the state it
//! leaves, takes the standby by value and writes the one word [`crate::wire::standby::TABLE`]
//! allows there: a word out of turn does not compile. Whatever goes wrong in a transition
//! (killed, stuck, a malformed or refused answer) dismisses the helper, and the error says so.
//!
//! The helper is reached through its stdin and stdout, of any types (`W`, `R`): a helper
//! process's pipes, with the process itself ([`Process`]: its deadline, its stderr, its reaping),
//! or, in the unit tests, in-memory pipes to the helper's side run on a thread as the same user.
//!
//! A `snapshot` helper started as a prepare begins (its start overlaps the sync) waits for the
//! run's end. Once the sync is done, and before the agent starts, it is told so with the
//! directories the sync left, puts an inotify watch on them and answers whether it watches;
//! then it is sent the run's request (the base and the sync record, 10,000 paths in a large
//! repository) and reads it while the agent works; at the run's end the go makes it look only
//! where its watch saw something happen (or at everything, when it is not watching). Only where
//! the agent is walled off in a PID namespace; the helper also makes itself non-dumpable before
//! it answers. After its read-back it is kept for the slot (in its [`Slot`](crate::workspace::Slot)):
//! the slot's next sync is asked of it with only the base's changes — no helper started for the
//! sync nor for the next read-back, no 10,000-path base and record sent and parsed twice — and
//! it is that run's standby, its watch already on. Told that the slot's run is over, it puts
//! the slot back to its base off the next run's start (never sooner: a read-back may answer a
//! publish the agent makes while it works). Dropped, it is told to go away (its stdin closed)
//! and reaped.

use std::io::{BufReader, Read, Write};
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::libc;

use super::{read_snapshot, HelperError, HELPER_DEADLINE};
use crate::snapshot::{ReadBack, ReadLimits};
use crate::store::{FlatTree, ObjectBatch, Store};
use crate::sync::{base_refs, changed_paths, Synced};
use crate::wire::{self, Frame, PrepareReply, Request, Standing, WireError};

/// Started as the run's sync begins; its request on the way.
#[derive(Debug)]
pub(crate) struct Started;
/// Told the sync is done: watching the slot while the run's agent works.
#[derive(Debug)]
pub(crate) struct Watching;
/// Its read-back answered: kept for the slot's next sync, watching on.
#[derive(Debug)]
pub(crate) struct Kept;
/// Told the slot's run is over: it puts the slot back to its base.
#[derive(Debug)]
pub(crate) struct Idle;

/// A state of the typestate, as the wire's table names it.
pub(crate) trait State {
    const IS: Standing;
}
impl State for Started {
    const IS: Standing = Standing::Started;
}
impl State for Watching {
    const IS: Standing = Standing::Watching;
}
impl State for Kept {
    const IS: Standing = Standing::Kept;
}
impl State for Idle {
    const IS: Standing = Standing::Idle;
}
/// The states from which the slot's next sync may be asked ([`Standby::again`]).
pub(crate) trait Between: State {}
impl Between for Kept {}
impl Between for Idle {}

/// The standby helper, in state `S`, reached through `W` (its stdin) and `R` (its stdout).
pub(crate) struct Standby<S, W: Write + Send + 'static, R: Read + AsFd + Send + 'static> {
    /// The sync whose base and record it holds (every state after [`Started`]).
    synced: Option<Arc<Synced>>,
    /// Taken by a transition; a standby dropped with it is dismissed.
    link: Option<Link<W, R>>,
    state: PhantomData<S>,
}

/// A standby helper process's own standby.
pub(crate) type ChildStandby<S> = Standby<S, std::process::ChildStdin, std::process::ChildStdout>;

/// The hub's end of the helper.
struct Link<W: Write + Send + 'static, R> {
    feed: Feed<W>,
    out: BufReader<R>,
    /// The helper's process, if it is one.
    process: Option<Process>,
}

/// A helper process behind a standby: killed at [`HELPER_DEADLINE`] in an exchange, its
/// stderr drained for as long as it lives, reaped once dismissed.
pub(crate) struct Process {
    child: std::process::Child,
    stderr: StderrTail,
}

impl Process {
    pub(crate) fn new(child: std::process::Child, stderr: std::process::ChildStderr) -> Self {
        Process {
            child,
            stderr: StderrTail::drain(stderr),
        }
    }
}

impl<S, W: Write + Send + 'static, R: Read + AsFd + Send + 'static> std::fmt::Debug
    for Standby<S, W, R>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pid = self
            .link
            .as_ref()
            .and_then(|l| l.process.as_ref())
            .map(|p| p.child.id());
        f.debug_struct("Standby")
            .field("state", &std::any::type_name::<S>())
            .field("pid", &pid)
            .finish_non_exhaustive()
    }
}

/// A broken stream to or from a standby helper; its stderr is logged when it is dismissed.
fn stream(source: WireError) -> HelperError {
    HelperError::Stream {
        op: "snapshot",
        source,
        stderr: String::new(),
    }
}

fn io(e: std::io::Error) -> HelperError {
    stream(WireError::Io(e))
}

/// How long a prepare that is done waits for its standby to say whether it watches, before
/// it goes on without (the standby has had the whole sync to get there).
pub(crate) const STANDBY_ANSWER: Duration = Duration::from_secs(2);

impl<S: State, W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Standby<S, W, R> {
    /// The sync whose base and record the helper holds.
    pub(crate) fn made_for(&self) -> Option<&Arc<Synced>> {
        self.synced.as_ref()
    }

    /// The link to the helper, taken for a transition: the one check that a standby is used
    /// once per state (a transition that failed dismissed it).
    fn take_link(&mut self) -> Result<Link<W, R>, HelperError> {
        self.link.take().ok_or_else(|| HelperError::Protocol {
            op: "snapshot",
            message: format!("the standby helper was used already ({:?})", S::IS),
        })
    }

    /// The same helper, now in state `T` (the word the table allows from `S` was sent).
    fn into_state<T: State>(
        mut self,
        link: Link<W, R>,
        synced: Option<Arc<Synced>>,
    ) -> Standby<T, W, R> {
        debug_assert!(
            wire::standby::TABLE
                .iter()
                .any(|(from, _, to)| *from == S::IS && *to == T::IS),
            "no transition from {:?} to {:?}",
            S::IS,
            T::IS
        );
        self.link = None;
        Standby {
            synced,
            link: Some(link),
            state: PhantomData,
        }
    }
}

impl<W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Standby<Started, W, R> {
    /// A standby helper reached through `stdin` and `stdout`, sent `request` (as a standby) from
    /// a thread of its own.
    pub(crate) fn start(
        stdin: W,
        stdout: R,
        process: Option<Process>,
        mut request: Request,
    ) -> Self {
        request.standby = true;
        Standby {
            synced: None,
            link: Some(Link {
                feed: Feed::write(stdin, request, None),
                out: BufReader::with_capacity(wire::STREAM_BUFFER, stdout),
                process,
            }),
            state: PhantomData,
        }
    }

    /// The run's sync is done: tell the helper, with the sync's directories to watch
    /// ([`wire::write_synced`]), wait up to `wait` for its answer — whether it watches the
    /// slot — and send it the run's request (`request` with `synced`'s base and record) to
    /// read while the agent works. An error (no answer in time, or a malformed one) means it
    /// must not be used: a watch that starts late would miss the agent's first changes.
    pub(crate) fn synced(
        mut self,
        wait: Duration,
        request: Request,
        synced: Arc<Synced>,
    ) -> Result<(Standby<Watching, W, R>, bool), HelperError> {
        let Link {
            feed,
            mut out,
            process,
        } = self.take_link()?;
        let deadline = std::time::Instant::now() + wait;
        let dirs: Vec<&str> = synced.record.dirs.iter().map(|(d, _)| d.as_str()).collect();
        // The first request is a short header, well within the pipe's buffer: its writer is
        // done, or about to be, whatever the helper does.
        let answer = feed.stdin().and_then(|mut stdin| {
            wire::write_synced(&mut stdin, &dirs).map_err(io)?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let fd = out.get_ref().as_fd().as_raw_fd();
            if out.buffer().is_empty() && !readable_within(fd, left) {
                return Err(HelperError::Protocol {
                    op: "snapshot",
                    message: format!("no answer from the standby within {} s", wait.as_secs()),
                });
            }
            let watching = wire::read_watching(&mut out).map_err(stream)?;
            Ok((stdin, watching))
        });
        match answer {
            Ok((stdin, watching)) => {
                let link = Link {
                    feed: Feed::write(stdin, request, Some(synced.clone())),
                    out,
                    process,
                };
                Ok((self.into_state(link, Some(synced)), watching))
            }
            Err(e) => {
                // Its stdin is closed: it ends.
                drop(out);
                if let Some(p) = process {
                    std::thread::spawn(move || p.reap());
                }
                Err(e)
            }
        }
    }
}

impl<W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Standby<Watching, W, R> {
    /// Go: the read-back, as [`super::UserSandbox`]'s read-back reads it. The helper stays,
    /// watching the slot on, and is returned with the read-back, kept for the slot's next sync
    /// ([`Standby::again`]).
    pub(crate) fn read_back(
        mut self,
        objects: &mut ObjectBatch<'_>,
        base: &FlatTree,
        limits: ReadLimits,
    ) -> Result<(ReadBack, Standby<Kept, W, R>), HelperError> {
        let link = self.take_link()?;
        let synced = self.synced.take();
        let (snap, link) = link.converse(|stdin, out| {
            wire::write_go(stdin, limits.file_cap).map_err(io)?;
            read_snapshot(out, objects, base, limits)
        })?;
        Ok((snap, self.into_state(link, synced)))
    }
}

impl<W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Standby<Kept, W, R> {
    /// The slot's run is over ([`wire::write_idle`]): the helper puts the slot back to its
    /// base.
    pub(crate) fn idle(mut self) -> Result<Standby<Idle, W, R>, HelperError> {
        let link = self.take_link()?;
        let synced = self.synced.take();
        // One byte into a pipe that holds nothing else: it does not block.
        let ((), link) = link.converse(|stdin, _| wire::write_idle(stdin).map_err(io))?;
        Ok(self.into_state(link, synced))
    }
}

impl<S: Between, W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Standby<S, W, R> {
    /// The slot's next sync, by the helper that read the last run back (it has the last sync's
    /// base and record, and has watched the slot since): sent only the paths whose base entry
    /// changed since `previous` (that sync) and their blobs, from `store`. Its answer goes to
    /// `made` — which checks it as a `prepare` helper's and returns the sync as the slot now
    /// remembers it — and it is then this run's standby, already watching, or not, as it
    /// answered.
    pub(crate) fn again(
        mut self,
        mut request: Request,
        store: &Store,
        base: &Arc<FlatTree>,
        previous: &Synced,
        made: impl FnOnce(PrepareReply, bool) -> Result<Arc<Synced>, HelperError>,
    ) -> Result<Standby<Watching, W, R>, HelperError> {
        let link = self.take_link()?;
        let changed = changed_paths(&previous.base, base);
        request.removed = changed
            .iter()
            .filter(|p| !base.contains_key(**p))
            .map(|p| p.to_string())
            .collect();
        let delta: FlatTree = changed
            .iter()
            .filter_map(|p| base.get_key_value(*p))
            .map(|(p, e)| (p.clone(), *e))
            .collect();
        let ((reply, watching), link) = link.converse(|stdin, out| {
            let mut w = std::io::BufWriter::with_capacity(wire::STREAM_BUFFER, stdin);
            wire::write_again(&mut w, &request, base_refs(&delta)).map_err(io)?;
            let mut sent = std::collections::HashSet::new();
            for entry in delta.values().filter(|e| sent.insert(e.oid)) {
                let bytes = store
                    .read_blob(entry.oid)
                    .map_err(|e| io(std::io::Error::other(e)))?;
                let frame = Frame::Blob {
                    oid: entry.oid.to_string(),
                    bytes,
                };
                wire::write_frame(&mut w, &frame).map_err(io)?;
            }
            wire::write_frame(&mut w, &Frame::End).map_err(io)?;
            w.flush().map_err(io)?;
            drop(w);
            let reply = wire::read_prepare_reply(out).map_err(stream)?;
            let watching = wire::read_watching(out).map_err(stream)?;
            Ok((reply, watching))
        })?;
        match made(reply, watching) {
            Ok(synced) => Ok(self.into_state(link, Some(synced))),
            // A refused answer: the helper goes.
            Err(e) => {
                link.close();
                Err(e)
            }
        }
    }
}

impl<S, W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Drop for Standby<S, W, R> {
    /// Not wanted after all: its stdin closes once what was being written is written, which
    /// ends the helper; it is reaped from a thread of its own.
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.close();
        }
    }
}

impl<W: Write + Send + 'static, R: Read + AsFd + Send + 'static> Link<W, R> {
    /// One exchange with a helper that stays: `talk` writes to its stdin and reads its answer
    /// from its stdout, within [`HELPER_DEADLINE`] (or a helper process is killed). The link
    /// comes back for the next exchange; on any error the helper is dismissed (killed, its
    /// stderr logged, reaped) and the error returned.
    fn converse<T>(
        self,
        talk: impl FnOnce(&mut W, &mut BufReader<R>) -> Result<T, HelperError>,
    ) -> Result<(T, Link<W, R>), HelperError> {
        let Link {
            feed,
            mut out,
            process,
        } = self;
        let mut stdin = match feed.stdin() {
            Ok(stdin) => stdin,
            Err(e) => {
                Process::dismiss(process);
                return Err(e);
            }
        };
        let watched = process
            .as_ref()
            .map(|p| crate::watchdog::watch(p.child.id() as i32, HELPER_DEADLINE));
        let result = talk(&mut stdin, &mut out);
        let stuck = watched.is_some_and(|w| w.end());
        match result {
            Ok(answer) if !stuck => Ok((
                answer,
                Link {
                    feed: Feed::Ready(stdin),
                    out,
                    process,
                },
            )),
            Ok(_) => {
                Process::dismiss(process);
                Err(HelperError::Stuck {
                    op: "snapshot",
                    secs: HELPER_DEADLINE.as_secs(),
                })
            }
            Err(e) => {
                drop(stdin);
                Process::dismiss(process);
                Err(e)
            }
        }
    }

    /// Let the helper go: its stdin closes once what was being written is written, which ends
    /// it; a process is reaped, from a thread of its own.
    fn close(self) {
        std::thread::spawn(move || {
            drop(self.feed.stdin());
            drop(self.out);
            if let Some(p) = self.process {
                p.reap();
            }
        });
    }
}

impl Process {
    /// Wait for a helper whose pipes are closed (its cue to exit).
    fn reap(mut self) {
        let _ = self.child.wait();
    }

    /// Kill the helper, if it is a process, log what it said, and reap it, from a thread of
    /// its own.
    fn dismiss(process: Option<Process>) {
        let Some(mut p) = process else {
            return;
        };
        std::thread::spawn(move || {
            let _ = p.child.kill();
            let _ = p.child.wait();
            let said = p.stderr.said();
            if !said.is_empty() {
                tracing::warn!(stderr = %said, "the standby helper was dismissed");
            }
        });
    }
}

/// A long-lived helper's stderr, read on a thread for as long as it lives (so it never blocks
/// on a full pipe), its last 16 KiB kept to log if it has to be dismissed.
pub(crate) struct StderrTail(Arc<Mutex<String>>);

impl StderrTail {
    pub(crate) const KEEP: usize = 16 * 1024;

    pub(crate) fn drain(mut stderr: impl Read + Send + 'static) -> StderrTail {
        let tail = Arc::new(Mutex::new(String::new()));
        let keep = tail.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                let n = match stderr.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if let Ok(mut t) = keep.lock() {
                    t.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if t.len() > 2 * Self::KEEP {
                        let cut = t.len() - Self::KEEP;
                        let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                        t.drain(..cut);
                    }
                }
            }
        });
        StderrTail(tail)
    }

    /// What the helper has said so far (its last 16–32 KiB), trimmed.
    pub(crate) fn said(&self) -> String {
        self.0
            .lock()
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    }
}

/// The standby helper's stdin: held by the thread writing a request to it (which gives it
/// back), or ready, nothing being written.
enum Feed<W> {
    Writing(std::thread::JoinHandle<std::io::Result<W>>),
    Ready(W),
}

impl<W: Write + Send + 'static> Feed<W> {
    /// Write `request` (with `synced`'s base and record, if any) from a thread of its own: a
    /// request larger than the pipe must not hold up the caller.
    fn write(stdin: W, request: Request, synced: Option<Arc<Synced>>) -> Feed<W> {
        Feed::Writing(std::thread::spawn(move || {
            let mut stdin = stdin;
            let mut w = std::io::BufWriter::new(&mut stdin);
            match &synced {
                Some(s) => {
                    wire::write_request_with(&mut w, &request, base_refs(&s.base), Some(&s.record))?
                }
                None => wire::write_request(&mut w, &request)?,
            }
            w.flush()?;
            drop(w);
            Ok(stdin)
        }))
    }

    /// The stdin, once what was being written is written.
    fn stdin(self) -> Result<W, HelperError> {
        let writer = match self {
            Feed::Ready(stdin) => return Ok(stdin),
            Feed::Writing(writer) => writer,
        };
        match writer.join() {
            Ok(Ok(stdin)) => Ok(stdin),
            Ok(Err(e)) => Err(io(e)),
            Err(_) => Err(HelperError::Protocol {
                op: "snapshot",
                message: "the writer thread panicked".into(),
            }),
        }
    }
}

/// Whether `fd` becomes readable (or hangs up) within `wait`.
fn readable_within(fd: libc::c_int, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        let n = crate::supervise::os::poll(std::slice::from_mut(&mut pfd), ms);
        if n.as_ref().is_ok_and(|&n| n > 0) {
            return true;
        }
        let interrupted = n.is_err_and(|e| e.kind() == std::io::ErrorKind::Interrupted);
        if !interrupted || left.is_zero() {
            return false;
        }
    }
}

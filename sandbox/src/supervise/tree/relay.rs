//! The supervisor's waiting: the agent's stdin relayed from the lifeline ([`Relay`]), a wait
//! for a descriptor ([`wait_readable`]), and the self-pipe that cuts either wait short
//! ([`wake`]).

use std::os::fd::AsRawFd;

use nix::libc;

/// The agent's stdin under `stdio`: a pipe whose read end is the agent's fd 0.
pub(super) struct AgentStdin {
    pub(super) rd: std::os::fd::OwnedFd,
    pub(super) wr: std::os::fd::OwnedFd,
}

/// What follows the request on the lifeline (stdin), on its way to the agent's stdin pipe:
/// relayed by the supervisor's loop as both sides are ready (the helper has no other thread:
/// none can be made once it entered a PID namespace for its children), holding at most
/// [`RELAY_HELD`] bytes; once the agent closed its end, the rest is read and dropped.
pub(super) struct Relay {
    pipe: Option<std::os::fd::OwnedFd>,
    pending: Vec<u8>,
}

/// The most a [`Relay`] holds: while it holds this much, the lifeline is not read.
const RELAY_HELD: usize = 256 * 1024;

impl Relay {
    pub(in crate::supervise::tree) fn new(pipe: std::os::fd::OwnedFd) -> Self {
        // SAFETY: fcntl on a descriptor this struct owns.
        unsafe {
            let flags = libc::fcntl(pipe.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Self {
            pipe: Some(pipe),
            pending: Vec::new(),
        }
    }

    /// Wait up to `ms` for the lifeline, the pipe or a [`wake`], and move what can be moved;
    /// `Closed` at the lifeline's EOF.
    pub(in crate::supervise::tree) fn step(&mut self, ms: libc::c_int) -> Readable {
        let want_out = !self.pending.is_empty() && self.pipe.is_some();
        let pipe_fd = self.pipe.as_ref().map_or(-1, |p| p.as_raw_fd());
        let mut pfds = [
            libc::pollfd {
                fd: if self.pending.len() < RELAY_HELD {
                    libc::STDIN_FILENO
                } else {
                    -1
                },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if want_out { pipe_fd } else { -1 },
                events: libc::POLLOUT,
                revents: 0,
            },
            libc::pollfd {
                fd: wake::fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: three pollfds on the stack (a negative fd is ignored by poll).
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 3, ms) };
        if pfds[2].revents != 0 {
            wake::drain();
        }
        if n <= 0 {
            return Readable::No;
        }
        if pfds[1].revents != 0 {
            self.flush();
        }
        if pfds[0].revents == 0 {
            return Readable::No;
        }
        let mut buf = [0u8; 64 * 1024];
        // SAFETY: reading into a stack buffer of the given length.
        let got = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
        if got <= 0 {
            return Readable::Closed;
        }
        if self.pipe.is_some() {
            self.pending.extend_from_slice(&buf[..got as usize]);
            self.flush();
        }
        Readable::Yes
    }

    /// Write what the pipe takes now; a closed pipe drops the rest.
    fn flush(&mut self) {
        let Some(pipe) = &self.pipe else { return };
        while !self.pending.is_empty() {
            // SAFETY: writing from a live buffer of the given length.
            let n = unsafe {
                libc::write(
                    pipe.as_raw_fd(),
                    self.pending.as_ptr().cast(),
                    self.pending.len(),
                )
            };
            if n > 0 {
                self.pending.drain(..n as usize);
                continue;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN) {
                self.pipe = None;
                self.pending.clear();
            }
            return;
        }
    }
}

/// A self-pipe that wakes the waiting loops (the supervisor's and the namespace init's) the
/// moment a child exits or a stop signal arrives, rather than at their next poll timeout:
/// an agent's exit reaches the hub at once, which is most of a publish's latency otherwise.
pub(super) mod wake {
    use nix::libc;
    use std::sync::atomic::{AtomicI32, Ordering};

    static READ: AtomicI32 = AtomicI32::new(-1);
    static WRITE: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn on_child(_: libc::c_int) {
        poke();
    }

    /// Make the pipe readable (async-signal-safe: one `write` to a non-blocking pipe; a full
    /// pipe already wakes the reader).
    pub(in crate::supervise::tree) fn poke() {
        let fd = WRITE.load(Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: write(2) of one byte from a static buffer.
            unsafe { libc::write(fd, b"!".as_ptr().cast(), 1) };
        }
    }

    /// A fresh pipe for this process (a forked child must not share its parent's: either
    /// could swallow the other's wake-up) and SIGCHLD pokes it.
    pub(in crate::supervise::tree) fn install() -> std::io::Result<()> {
        let mut fds = [-1; 2];
        // SAFETY: pipe(2) into a two-element array; fcntl on the descriptors it returned.
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        for old in [
            READ.swap(fds[0], Ordering::SeqCst),
            WRITE.swap(fds[1], Ordering::SeqCst),
        ] {
            if old >= 0 {
                // SAFETY: the previous pipe's descriptors, owned by these statics alone.
                unsafe { libc::close(old) };
            }
        }
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let action = SigAction::new(
            SigHandler::Handler(on_child),
            SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
            SigSet::empty(),
        );
        // SAFETY: the handler only writes to a pipe, which is async-signal-safe.
        unsafe { sigaction(Signal::SIGCHLD, &action) }.map_err(std::io::Error::from)?;
        Ok(())
    }

    /// The read end (-1 before [`install`]).
    pub(in crate::supervise::tree) fn fd() -> libc::c_int {
        READ.load(Ordering::SeqCst)
    }

    /// Empty the pipe (every wake-up is handled by the caller's next pass).
    pub(in crate::supervise::tree) fn drain() {
        let mut buf = [0u8; 64];
        // SAFETY: reading into a stack buffer of the given length from a non-blocking fd.
        while unsafe { libc::read(fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Readable {
    No,
    Yes,
    Closed,
}

/// Wait up to `ms` for `fd` to become readable, or for a [`wake`] (a child exited, a stop
/// signal came: reported as `No`, for the caller's loop to look); report EOF or a hang-up as
/// `Closed` (data is read and discarded: the lifeline carries none after the request).
pub(super) fn wait_readable(fd: libc::c_int, ms: libc::c_int) -> Readable {
    let mut pfds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake::fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two pollfds on the stack (a negative fd is ignored by poll).
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
    if pfds[1].revents != 0 {
        wake::drain();
    }
    let pfd = &pfds[0];
    if n <= 0 || pfd.revents == 0 {
        return Readable::No;
    }
    if pfd.revents & libc::POLLNVAL != 0 {
        return Readable::Closed;
    }
    let mut buf = [0u8; 512];
    // SAFETY: reading into a stack buffer of the given length.
    let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if got <= 0 {
        Readable::Closed
    } else {
        Readable::Yes
    }
}

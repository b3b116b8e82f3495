//! The few system calls hunkgate needs that no dependency wraps safely, each behind a safe
//! function: glibc's allocator tunables and `malloc_trim`, `SCHED_IDLE`, `SIGPIPE`'s default,
//! the read lease that tells whether a file is open for writing elsewhere, `poll`, and a
//! descriptor's registration with tokio. The policy —
//! which tunable, when to give memory back — is the caller's (the hub's binary side,
//! `server/src/cli/process.rs`); this module only makes each call sound.

/// A tunable of glibc's allocator that [`set_malloc`] may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malloc {
    /// `M_ARENA_MAX`: at most this many arenas (`MALLOC_ARENA_MAX` in the environment).
    ArenaMax,
    /// `M_MMAP_THRESHOLD`: blocks this large or larger are mapped on their own, and unmapped
    /// when freed (`MALLOC_MMAP_THRESHOLD_` in the environment).
    MmapThreshold,
}

impl Malloc {
    /// The environment variable by which a user sets this tunable for any glibc program.
    pub fn env_var(self) -> &'static str {
        match self {
            Malloc::ArenaMax => "MALLOC_ARENA_MAX",
            Malloc::MmapThreshold => "MALLOC_MMAP_THRESHOLD_",
        }
    }
}

/// Set one of glibc's allocator tunables (`mallopt`); whether it was taken. A no-op, false,
/// elsewhere than on glibc Linux.
pub fn set_malloc(tunable: Malloc, value: i32) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let param = match tunable {
            Malloc::ArenaMax => nix::libc::M_ARENA_MAX,
            Malloc::MmapThreshold => nix::libc::M_MMAP_THRESHOLD,
        };
        // SAFETY: mallopt only sets a tunable of the allocator, under the main arena's lock;
        // it reads and writes none of our memory.
        unsafe { nix::libc::mallopt(param, value) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = (tunable, value);
        false
    }
}

/// Let a write to a closed pipe end this process quietly, as it ends `cat` or `git log`:
/// `hunkgate show … | head` must stop when `head` has read enough, not print a panic. Rust
/// ignores `SIGPIPE` so that a write fails with `EPIPE` instead, which `println!` turns into a
/// panic. Only for the commands that print and exit: the hub and the MCP server keep ignoring
/// it, since a client that hangs up must not end them.
pub fn die_on_broken_pipe() {
    // SAFETY: restoring a signal's default disposition installs no handler, so no code of ours
    // can run in a signal's context.
    unsafe {
        nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_DFL);
    }
}

/// poll(2): wait up to `ms` milliseconds (-1: without limit) until one of `fds` has an event
/// (a negative fd is ignored); how many have one (0 at the timeout), or the error (`EINTR`
/// included, for the caller to decide).
pub fn poll(fds: &mut [nix::libc::pollfd], ms: nix::libc::c_int) -> std::io::Result<usize> {
    // SAFETY: the slice's pointer and length describe live pollfds, which poll only writes
    // the `revents` of.
    let n = unsafe { nix::libc::poll(fds.as_mut_ptr(), fds.len() as nix::libc::nfds_t, ms) };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// `fd` registered with tokio's reactor for `interest` (in a runtime's context).
pub fn async_fd(
    fd: std::os::fd::OwnedFd,
    interest: tokio::io::Interest,
) -> Result<
    tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    tokio::io::unix::AsyncFdRegisterError<std::os::fd::OwnedFd>,
> {
    // SAFETY: an OwnedFd is an open descriptor that stays open, the same one, until the
    // AsyncFd that owns it is dropped.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) }
}

/// Run the calling thread (or single-threaded process) only when nothing else wants its CPU
/// (Linux's `SCHED_IDLE`); where refused or unsupported it runs as it was, and the error says
/// why. For work nobody waits for: the exits of an agent's namespace
/// init, group leader and supervisor once the hub has heard how the agent ended (tearing
/// down an address space takes a few hundred microseconds of CPU on a small machine, which
/// would otherwise be taken from the hub's publish of what the agent left, at the same
/// moment). Async-signal-safe: one system call and no allocation, so a forked child may call
/// it.
pub fn idle_priority() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let param = nix::libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for SCHED_IDLE.
        match unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &param) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// Give the allocator's free memory back to the system (glibc's `malloc_trim`). After a burst
/// that allocates in proportion to a change and frees most of it again — a publish, a run —
/// the freed blocks otherwise stay resident wherever they sit in the heap, so the hub's RSS
/// depended on which worker thread freed what: 53–73 MiB with the same 100 suggestions × 100
/// hunks in the hub benchmark. It takes 0.05–0.6 ms with that heap, on a blocking thread.
/// A no-op elsewhere than on glibc Linux.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's own arenas to the kernel, under
    // the arenas' locks; it touches no memory that is in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Whether some process has the file `fd` (opened read-only) open for writing: a read lease is
/// granted only when nobody has (`F_SETLEASE` answers `EAGAIN` otherwise), and is given back
/// at once. None when leases are not to be had here (not the file's owner without
/// `CAP_LEASE`, a file system without them, leases disabled): then nobody knows.
///
/// While the lease is held (a few instructions), another process opening the file for writing
/// would make the kernel signal this one; the signal is set to `SIGURG`, which is ignored
/// unless handled (nothing in hunkgate handles it), instead of the default `SIGIO`, which
/// would end the process.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn open_for_writing(fd: std::os::fd::BorrowedFd<'_>) -> Option<bool> {
    use nix::errno::Errno;
    use nix::libc;
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function borrows, with integer arguments only; it
    // touches no memory of ours.
    let set_sig = unsafe { libc::fcntl(raw, F_SETSIG, libc::SIGURG) };
    if set_sig != 0 {
        return None;
    }
    // SAFETY: as above.
    let leased = unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_RDLCK) };
    if leased == 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(false);
    }
    (Errno::last() == Errno::EAGAIN).then_some(true)
}

/// `F_SETSIG` (asm-generic/fcntl.h, the same on every Linux architecture), which the `libc`
/// crate does not name.
#[cfg(any(target_os = "linux", target_os = "android"))]
const F_SETSIG: nix::libc::c_int = 10;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn open_for_writing(_fd: std::os::fd::BorrowedFd<'_>) -> Option<bool> {
    None
}

#[cfg(test)]
mod tests;

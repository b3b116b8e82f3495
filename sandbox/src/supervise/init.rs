//! What every agent's PID-namespace init is made of, in both isolation modes: the one
//! user-namespace entry ([`unshare_mapped`]), the one wait for the agent
//! ([`wait_for_agent`]) and, on Linux, the one end ([`crate::agent::pidns::end_of_agent`]).
//!
//! Two processes are such an init:
//! - `--isolation none`: the hub's forked child makes the namespace and forks the init
//!   ([`crate::agent::pidns::enter_for_process_group`]); the init starts the agent and then,
//!   exec'd for its role or still a fork of the hub, waits here with nothing else to watch
//!   (the hub's signals reach the agent's process group directly, and the init dies with its
//!   parent).
//! - `--isolation user`: the helper makes the namespace and forks the init
//!   (`crate::supervise::tree`'s `init.rs`), which mounts its `/proc`, starts the agent and
//!   waits here too, but between children it also passes the helper's SIGTERM on to the
//!   namespace and watches its lifeline to the helper ([`Idle`]).
//!
//! Everything here is async-signal-safe and allocates nothing: the init of the first kind
//! may be a fork of the multi-threaded hub.

use nix::libc;

fn last_errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `waitpid` with `flags`, again when a signal interrupts it.
pub fn waitpid_flags(
    pid: libc::pid_t,
    status: &mut libc::c_int,
    flags: libc::c_int,
) -> libc::pid_t {
    loop {
        // SAFETY: waitpid on integers and a status the caller owns.
        let r = unsafe { libc::waitpid(pid, status, flags) };
        if r >= 0 || last_errno() != libc::EINTR {
            return r;
        }
    }
}

/// A child's wait status as two bytes: `[0, code]` or `[1, signal]` (how the hub is told of
/// the agent's end, and how an init and a group leader exit like it).
pub fn report_of(status: libc::c_int) -> [u8; 2] {
    if libc::WIFSIGNALED(status) {
        [1, libc::WTERMSIG(status) as u8]
    } else {
        [0, libc::WEXITSTATUS(status) as u8]
    }
}

/// The exit code a shell would give a child that ended as `report` says (`128 + signal` for
/// a signal).
pub fn exit_code(report: [u8; 2]) -> i32 {
    if report[0] == 1 {
        128 + i32::from(report[1])
    } else {
        i32::from(report[1])
    }
}

/// What an init does while no child of its has ended; `Some(code)` gives up the wait, and
/// the init exits with `code` (its lifeline is gone, say). It may block for a while: a
/// child's end is seen once it returns.
pub type Idle<'a> = &'a mut dyn FnMut() -> Option<i32>;

/// An agent's namespace init, once it has started `agent` (its child): reap every child —
/// orphans of the agent's tree are re-parented to the init — until `agent` ends; its report
/// ([`report_of`]). Without `idle`, each wait blocks until a child ends; with it, `idle` runs
/// whenever none has, and its `Some(code)` is returned as `Err(code)`. A wait that fails (no
/// child is left, which cannot happen before the agent is reaped) is `Err(127)`.
pub fn wait_for_agent(agent: libc::pid_t, mut idle: Option<Idle<'_>>) -> Result<[u8; 2], i32> {
    let flags = if idle.is_some() { libc::WNOHANG } else { 0 };
    loop {
        let mut st: libc::c_int = 0;
        match waitpid_flags(-1, &mut st, flags) {
            r if r == agent => return Ok(report_of(st)),
            r if r > 0 => continue,
            0 => {
                if let Some(code) = idle.as_mut().and_then(|idle| idle()) {
                    return Err(code);
                }
            }
            _ => return Err(127),
        }
    }
}

/// Enter new namespaces (`flags`, which include `CLONE_NEWUSER`) with this process's user
/// and group mapped to themselves in the new user namespace (`uid_map` and `gid_map` are
/// [`map_of_self`]'s, prepared before a fork; files keep their owners). An error's
/// [`UnshareError::mapping`] is false when the kernel refused the namespaces (nothing changed:
/// the caller may fall back), true when the maps could not be written (the namespaces exist
/// but are unusable). No allocation: for a forked child of a multi-threaded process too.
#[cfg(target_os = "linux")]
pub fn unshare_mapped(
    flags: libc::c_int,
    uid_map: &[u8],
    gid_map: &[u8],
) -> Result<(), UnshareError> {
    // SAFETY: unshare with integer flags; the caller is single-threaded (a helper, or a
    // forked child), as a user namespace requires.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(UnshareError {
            mapping: false,
            errno: last_errno(),
        });
    }
    // setgroups must be denied before an unprivileged process may write gid_map.
    for (path, bytes) in [
        (c"/proc/self/setgroups", &b"deny"[..]),
        (c"/proc/self/uid_map", uid_map),
        (c"/proc/self/gid_map", gid_map),
    ] {
        write_proc(path, bytes).map_err(|errno| UnshareError {
            mapping: true,
            errno,
        })?;
    }
    Ok(())
}

/// [`unshare_mapped`] failed: at the unshare itself (`mapping: false`, nothing changed), or
/// at writing the maps.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy)]
pub struct UnshareError {
    pub mapping: bool,
    pub errno: libc::c_int,
}

#[cfg(target_os = "linux")]
impl UnshareError {
    /// As an I/O error, for a caller that may allocate.
    pub fn io(self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

/// Write `bytes` to the file at `path` (under `/proc/self`), as one write; the errno if not.
#[cfg(target_os = "linux")]
fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), libc::c_int> {
    // SAFETY: open, write and close on a NUL-terminated path and a borrowed buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(last_errno());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let errno = last_errno();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(errno);
        }
    }
    Ok(())
}

/// `"<id> <id> 1\n"`: a user-namespace map of `id` to itself only.
pub fn map_of_self(id: u32) -> Vec<u8> {
    format!("{id} {id} 1\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that exits with `code`, or dies of `signal`.
    fn child(code: i32, signal: Option<libc::c_int>) -> libc::pid_t {
        // SAFETY: the child only raises a signal or exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                if let Some(sig) = signal {
                    libc::signal(sig, libc::SIG_DFL);
                    libc::kill(libc::getpid(), sig);
                }
                libc::_exit(code);
            }
            pid
        }
    }

    /// A child that exits with `code` once `fd` (a pipe's read end) reads EOF; the pipe's
    /// write end, which the caller closes to let it go.
    fn child_until_closed(code: i32) -> (libc::pid_t, libc::c_int) {
        let mut fds = [0; 2];
        // SAFETY: a pipe, and a child that reads it to EOF and exits.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0, "pipe");
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                libc::close(fds[1]);
                let mut b = [0u8; 1];
                while libc::read(fds[0], b.as_mut_ptr().cast(), 1) > 0 {}
                libc::_exit(code);
            }
            libc::close(fds[0]);
            (pid, fds[1])
        }
    }

    /// Run `f` in a forked child of the test and return its exit code: a fresh process whose
    /// only children are those `f` makes, so a wait for any child never reaps another test's.
    fn in_a_child(f: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child runs `f` (forks and waits) and exits without unwinding.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(99);
                libc::_exit(code);
            }
            let mut st = 0;
            assert_eq!(waitpid_flags(pid, &mut st, 0), pid);
            assert!(libc::WIFEXITED(st), "the waiting child died: {st}");
            libc::WEXITSTATUS(st)
        }
    }

    /// No child left to wait for.
    fn none_left() -> bool {
        let mut st = 0;
        waitpid_flags(-1, &mut st, libc::WNOHANG) < 0
    }

    #[test]
    fn reports_and_exit_codes_say_how_the_agent_ended() {
        let a = child(3, None);
        let mut st = 0;
        assert_eq!(waitpid_flags(a, &mut st, 0), a);
        assert_eq!(report_of(st), [0, 3]);
        assert_eq!(exit_code(report_of(st)), 3);
        let b = child(0, Some(libc::SIGKILL));
        assert_eq!(waitpid_flags(b, &mut st, 0), b);
        assert_eq!(report_of(st), [1, libc::SIGKILL as u8]);
        assert_eq!(exit_code(report_of(st)), 128 + libc::SIGKILL);
    }

    #[test]
    fn a_blocking_wait_reaps_the_others_on_the_way_to_the_agent() {
        let code = in_a_child(|| {
            let other = child(9, None);
            let (agent, release) = child_until_closed(4);
            // The other child ends first; the agent only once it is let go.
            // SAFETY: waitid with WNOWAIT only looks; close lets the agent end.
            unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(
                    libc::P_PID,
                    other as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                );
                libc::close(release);
            }
            let report = wait_for_agent(agent, None);
            let left = i32::from(none_left());
            match report {
                Ok([0, 4]) => 10 + left,
                _ => 1,
            }
        });
        assert_eq!(code, 11, "the agent's report, and no child left behind");
    }

    #[test]
    fn idle_runs_while_the_agent_lives_and_its_code_gives_up() {
        // Idle runs until the agent ends, then the agent's report comes back.
        let code = in_a_child(|| {
            let (agent, release) = child_until_closed(5);
            let mut calls = 0;
            let mut idle = || {
                calls += 1;
                if calls == 3 {
                    // SAFETY: closing the write end lets the agent end.
                    unsafe { libc::close(release) };
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
                None
            };
            match wait_for_agent(agent, Some(&mut idle)) {
                Ok([0, 5]) if calls >= 3 => 1,
                _ => 2,
            }
        });
        assert_eq!(code, 1, "idle ran while the agent lived, then its report");
        // Idle gives up while the agent lives: its code comes back at once.
        let code = in_a_child(|| {
            let (agent, release) = child_until_closed(0);
            let mut give_up = || Some(42);
            let waited = wait_for_agent(agent, Some(&mut give_up));
            // SAFETY: let the agent go, and reap it.
            unsafe { libc::close(release) };
            let mut st = 0;
            waitpid_flags(agent, &mut st, 0);
            match waited {
                Err(42) => 1,
                _ => 2,
            }
        });
        assert_eq!(code, 1, "idle's code ends the wait");
    }
}

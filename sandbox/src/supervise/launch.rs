//! What a child of the hub does between its fork and its exec, each behind a safe function
//! that arranges it on a [`Command`]: a new session, the drop to the sandbox user (with the
//! namespaces that need root first), a request put on its stdin. The closures run in the
//! forked child and make only async-signal-safe system calls (no allocation, no locks).

use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::libc;

/// Before `cmd`'s exec: a new session, so it has no controlling terminal.
pub fn new_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Before `cmd`'s exec, in the child of a root hub: become `uid`/`gid` for good, after the
/// namespaces `ns` (0 for none) are made (see [`drop_privileges_now`]).
pub fn drop_privileges(cmd: &mut Command, uid: u32, gid: u32, ns: libc::c_int) {
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || drop_privileges_now(uid, gid, ns));
    }
}

/// Before `cmd`'s exec: its stdin is a pipe that holds `bytes` and then EOF (see
/// [`stdin_from_bytes_now`]); more than `max` bytes (what fits in a pipe's buffer) fail the
/// spawn with E2BIG.
pub fn stdin_from_bytes(cmd: &mut Command, bytes: Vec<u8>, max: usize) {
    // SAFETY: pipe, write, dup2 and close are async-signal-safe; `bytes` was allocated
    // before the fork and is only read here.
    unsafe {
        cmd.pre_exec(move || stdin_from_bytes_now(&bytes, max));
    }
}

/// In the forked child of a root hub: a new session (no controlling terminal), optional fresh
/// namespaces (which need root, so before the drop), then supplementary groups, gid and uid —
/// in that order, since each step needs the privilege the next one gives up — and a check that
/// all of it took and cannot be undone. Only `EPERM`/`last_os_error` are built on failure:
/// nothing here may allocate.
fn drop_privileges_now(uid: u32, gid: u32, ns: libc::c_int) -> std::io::Result<()> {
    let last = std::io::Error::last_os_error;
    // SAFETY: plain system calls on integers; no memory is shared with the parent.
    unsafe {
        if libc::setsid() < 0 {
            return Err(last());
        }
        // Without CAP_SYS_ADMIN (some containers) a PID namespace may be refused: the helper
        // then tracks the tree itself. A network namespace that was asked for is not optional.
        #[cfg(target_os = "linux")]
        if ns != 0 && libc::unshare(ns) != 0 && ns & libc::CLONE_NEWNET != 0 {
            return Err(last());
        }
        #[cfg(not(target_os = "linux"))]
        let _ = ns;
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(last());
        }
        if libc::setgid(gid) != 0 {
            return Err(last());
        }
        if libc::setuid(uid) != 0 {
            return Err(last());
        }
        let denied = std::io::Error::from_raw_os_error(libc::EPERM);
        if libc::getuid() != uid
            || libc::geteuid() != uid
            || libc::getgid() != gid
            || libc::getegid() != gid
            || libc::getgroups(0, std::ptr::null_mut()) != 0
        {
            return Err(denied);
        }
        if libc::setuid(0) == 0 || libc::setgid(0) == 0 {
            return Err(denied);
        }
        // No parent-death signal: when the hub dies the helper must live on for a moment, see
        // its lifeline close, and kill the agent's tree.
    }
    Ok(())
}

/// In a forked child: make fd 0 a pipe that holds `bytes` and then EOF. Requests over
/// `max` fail with E2BIG ("argument list too long"), which is what they are.
fn stdin_from_bytes_now(bytes: &[u8], max: usize) -> std::io::Result<()> {
    if bytes.len() > max {
        return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
    }
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: system calls on descriptors this function creates; `bytes` outlives the calls.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut off = 0;
        while off < bytes.len() {
            let n = libc::write(fds[1], bytes[off..].as_ptr().cast(), bytes.len() - off);
            if n <= 0 {
                return Err(std::io::Error::last_os_error());
            }
            off += n as usize;
        }
        libc::close(fds[1]);
        if libc::dup2(fds[0], 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::close(fds[0]);
    }
    Ok(())
}

#[cfg(test)]
mod tests;

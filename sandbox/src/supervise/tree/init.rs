//! The PID namespace the helper gives the agent's tree under `--isolation user`: entering the
//! namespaces, and the namespace's init, a fork of the helper that starts the agent.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;

use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::relay::{wait_readable, wake, AgentStdin, Readable};
use super::{not_dumpable, spawn_agent, sys, TreeError, HELPER_FAILED, SPAWN_FAILED, STOP};
use crate::agent_path;
use crate::wire::Request;

/// Whether the helper's next child starts a fresh PID namespace. A root hub has already
/// unshared PID (and network) namespaces; through sudo, an unprivileged user namespace can own
/// new ones. Without either, the tree is tracked through the subreaper instead.
#[cfg(target_os = "linux")]
pub(super) fn enter_namespaces(req: &Request) -> Result<bool, TreeError> {
    let pending = pid_ns_pending();
    if req.namespaces_ready && (pending || !req.network_none) {
        return Ok(pending);
    }
    if req.no_pid_namespace && !req.network_none {
        return Ok(false);
    }
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let mut flags = libc::CLONE_NEWUSER;
    if !req.no_pid_namespace {
        flags |= libc::CLONE_NEWPID;
    }
    if req.network_none {
        flags |= libc::CLONE_NEWNET;
    }
    if req.private_proc {
        flags |= libc::CLONE_NEWNS;
    }
    // Prepared before: nothing else is allocated in between.
    let (uid_map, gid_map) = (
        crate::supervise::init::map_of_self(uid),
        crate::supervise::init::map_of_self(gid),
    );
    // The helper is single-threaded, as a user namespace requires.
    if let Err(e) = crate::supervise::init::unshare_mapped(flags, &uid_map, &gid_map) {
        if e.mapping {
            return Err(sys("writing the user namespace map")(e.io()));
        }
        let e = e.io();
        if req.private_proc {
            return Err(sys("making the agent's PID namespace with a private /proc")(e));
        }
        if req.network_none {
            return Err(TreeError::NoNetns(e.to_string()));
        }
        eprintln!(
            "hunkgate: no PID namespace for the agent ({e}); tracking its process tree instead"
        );
        return Ok(false);
    }
    Ok(!req.no_pid_namespace)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn enter_namespaces(req: &Request) -> Result<bool, TreeError> {
    if req.network_none {
        return Err(TreeError::NoNetns(
            "network namespaces exist only on Linux".into(),
        ));
    }
    Ok(false)
}

/// Whether an unprivileged user + PID namespace can be made here (tried in a throwaway child).
pub fn can_make_pid_namespace() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the helper is single-threaded; the child only unshares and exits.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => {
                let ok = unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } == 0;
                // SAFETY: exit without running the parent's atexit handlers twice.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            Ok(nix::unistd::ForkResult::Parent { child }) => {
                matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0)))
            }
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(target_os = "linux")]
fn pid_ns_pending() -> bool {
    let a = std::fs::read_link("/proc/self/ns/pid");
    let b = std::fs::read_link("/proc/self/ns/pid_for_children");
    match (a, b) {
        (Ok(a), Ok(b)) => a != b,
        // A fresh PID namespace reads as missing until its first process (our init) exists.
        (Ok(_), Err(e)) => e.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// In a fresh network namespace only `lo` exists; anything else means the request was not met.
pub(super) fn check_no_network() -> Result<(), TreeError> {
    #[cfg(target_os = "linux")]
    {
        let text = std::fs::read_to_string("/proc/self/net/dev")
            .map_err(sys("reading /proc/self/net/dev"))?;
        let others: Vec<&str> = text
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .filter(|name| *name != "lo")
            .collect();
        if !others.is_empty() {
            return Err(TreeError::NetworkVisible(others.join(", ")));
        }
    }
    Ok(())
}

/// Fork the PID namespace's init: it starts the agent, reaps everything re-parented to it,
/// forwards SIGTERM to the whole namespace, and exits with the agent's status as soon as the
/// agent exits — at which point the kernel kills every other process in the namespace.
pub(super) fn spawn_init(
    req: &Request,
    dir: &Path,
    objects: &Path,
    stdin: Option<&AgentStdin>,
) -> Result<Pid, TreeError> {
    // The init watches this pipe: EOF means the helper is gone (however it died).
    let (guard_rd, guard_wr) = nix::unistd::pipe().map_err(|e| sys("creating a pipe")(e.into()))?;
    // SAFETY: the helper is single-threaded (it runs before any runtime is started), so the
    // child may keep running Rust code after fork.
    match unsafe { nix::unistd::fork() }.map_err(|e| sys("forking")(e.into()))? {
        nix::unistd::ForkResult::Parent { child } => {
            drop(guard_rd);
            // Leak the write end on purpose: it must stay open exactly as long as we live.
            std::mem::forget(guard_wr);
            Ok(child)
        }
        nix::unistd::ForkResult::Child => {
            drop(guard_wr);
            // Only the helper writes the agent's stdin: EOF there is the helper's to give.
            let stdin = stdin.map(|p| {
                // SAFETY: the child's own copy of the descriptor, closed once here.
                unsafe { libc::close(p.wr.as_raw_fd()) };
                &p.rd
            });
            let code = init_main(req, dir, objects, guard_rd, stdin);
            std::process::exit(code)
        }
    }
}

/// For a private slot, in the agent's mount namespace: show the agent its own slot (and its
/// base objects, read-only) and no other of the sandbox user's (see
/// [`crate::agent::show_only_own_slot`]). `dir` is `<home>/sandboxes/<key>/<slot>`
/// (`crate::helper`'s `sandbox_dir`), `objects` the base objects beside it: every slot of
/// every repository is under `<home>/sandboxes`.
fn hide_other_slots(req: &Request, dir: &Path, objects: &Path) -> std::io::Result<()> {
    if !req.private_slot {
        return Ok(());
    }
    let root = dir.ancestors().nth(2).ok_or_else(|| {
        std::io::Error::other(format!("{}: not a slot's directory", dir.display()))
    })?;
    let objects = std::fs::symlink_metadata(objects)
        .is_ok_and(|m| m.is_dir())
        .then_some(objects);
    crate::agent::show_only_own_slot(root, dir, objects)
}

fn init_main(
    req: &Request,
    dir: &Path,
    objects: &Path,
    guard: std::os::fd::OwnedFd,
    stdin: Option<&std::os::fd::OwnedFd>,
) -> i32 {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments. If the helper dies, so does this init, and with it
    // the whole namespace.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    if req.private_proc {
        if let Err(e) =
            crate::agent::mount_private_proc().and_then(|()| hide_other_slots(req, dir, objects))
        {
            eprintln!("hunkgate: refusing to start the agent: {e}");
            return HELPER_FAILED as i32;
        }
    }
    // The agent runs as the same user in this namespace, and this process holds the hub's
    // lifeline (its stdin): no tracing it, no reading its memory, no writing its words.
    if let Err(e) = not_dumpable() {
        eprintln!("hunkgate: refusing to start the agent: {e}");
        return HELPER_FAILED as i32;
    }
    // Without the pipe the loop below still sees the agent's exit, at its next timeout.
    let _ = wake::install();
    let agent = match spawn_agent(req, dir, stdin) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("{}{:?}: {e}", agent_path::NOT_STARTED, req.argv[0]);
            return SPAWN_FAILED;
        }
    };
    // Between children: the helper's SIGTERM goes on to the whole namespace, once, and the
    // lifeline is watched (the wake pipe cuts the wait short when a child ends).
    let mut forwarded = false;
    let mut idle = || {
        if STOP.load(Ordering::SeqCst) && !forwarded {
            forwarded = true;
            // From the namespace's init, -1 means every other process in the namespace.
            let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
        }
        (wait_readable(guard.as_raw_fd(), 50) == Readable::Closed).then_some(128 + libc::SIGKILL)
    };
    match crate::supervise::init::wait_for_agent(agent.as_raw(), Some(&mut idle)) {
        Ok(report) => init_done(req, report),
        Err(code) => code,
    }
}

/// The agent has exited (`report`: its wait status as the hub reads it, see
/// [`crate::wire::Request::verdict`]): end the namespace as every agent's namespace ends
/// ([`crate::agent::pidns::end_of_agent`]: whatever the agent left killed and reaped, then the
/// hub told on the lifeline, if it asked, that nothing the agent started is left). Returns the
/// init's exit code.
fn init_done(req: &Request, report: [u8; 2]) -> i32 {
    // PID namespaces, and so this init, exist only on Linux.
    #[cfg(target_os = "linux")]
    {
        use crate::agent::pidns::{end_of_agent, Tell};
        // Only PID 1 can say that nothing the agent started is left.
        let tell = if req.verdict && std::process::id() == 1 {
            Tell::Socket(libc::STDIN_FILENO)
        } else {
            Tell::Nobody
        };
        // The hub has heard: nobody waits for this init's exit.
        if end_of_agent(report, tell) {
            let _ = crate::idle_priority();
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = req;
    crate::supervise::init::exit_code(report)
}

//! The agent's process tree under `--isolation user`: what `hunkgate sandbox-helper exec` does
//! once it has checked the request ([`crate::helper`]), running as the sandbox user.
//!
//! The agent gets a new session (no controlling terminal), `NO_NEW_PRIVS`, only fds 0–2,
//! exactly the environment it was handed, RLIMIT_NPROC and no core dumps. On Linux it runs in
//! a fresh PID namespace whose init is a fork of the helper (`tree/init.rs`), so when the agent
//! exits, is cancelled or times out, every process it started dies with that namespace; where
//! no PID namespace can be had, the helper is a child subreaper and kills every descendant it
//! can find. The tree is killed when the agent exits, on SIGTERM, at the deadline, and when
//! stdin — the lifeline from the hub — reaches EOF, which is how even `kill -9` of the hub ends
//! the run. What follows the request on the lifeline is relayed to the agent's stdin
//! (`tree/relay.rs`); a self-pipe wakes the waiting loops the moment a child exits or a stop
//! signal comes.
//!
//! **Layer:** above [`crate::supervise::agent`] (the private `/proc` and the covered slots),
//! below `helper`, its one caller.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::agent_path;
use crate::wire::Request;

mod init;
mod relay;

pub use init::can_make_pid_namespace;
use init::{check_no_network, enter_namespaces, spawn_init};
use relay::{wait_readable, wake, AgentStdin, Readable, Relay};

/// What the helper could not do around the agent; printed on its stderr, which the hub shows
/// to the user.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("--agent-network none needs a network namespace, and none could be made ({0}): run the hub as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)")]
    NoNetns(String),
    #[error(
        "--agent-network none was asked for, but this process still sees network interfaces: {0}"
    )]
    NetworkVisible(String),
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(std::io::Error) -> TreeError {
    move |source| TreeError::Sys { what, source }
}

/// Exit status when the helper itself failed before or instead of running an agent.
pub const HELPER_FAILED: u8 = 125;
/// Exit status when the agent could not be started.
pub const SPAWN_FAILED: i32 = agent_path::NOT_STARTED_STATUS as i32;
/// After the run's timeout, how long the helper waits for the hub to stop it before doing so
/// on its own.
const DEADLINE_GRACE: Duration = Duration::from_secs(30);
/// Between SIGTERM and SIGKILL of the agent's tree.
const TERM_GRACE: Duration = Duration::from_secs(2);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    wake::poke();
}

fn catch_stop_signals() -> Result<(), TreeError> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }
            .map_err(|e| sys("installing a signal handler")(e.into()))?;
    }
    Ok(())
}

/// Run the agent of `req` in the sandbox `dir` and own its whole process tree (see the module
/// docs); `objects` is where the slot's base objects are kept, bound read-only into a private
/// slot's mount namespace. Exits the way the agent did; returns only what the helper itself
/// could not do. Must be called before any thread is started: it forks without exec'ing.
pub fn run(req: &Request, dir: &Path, objects: &Path) -> Result<ExitCode, TreeError> {
    // No core dumps from the helper either: they could hold the agent token.
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)
        .map_err(|e| sys("setting RLIMIT_CORE")(e.into()))?;
    catch_stop_signals()?;
    set_no_new_privs()?;
    #[cfg(target_os = "linux")]
    {
        // Orphans of the agent's tree are re-parented to us, not to init, so we can find them.
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(sys("becoming a child subreaper")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    let pid_ns = enter_namespaces(req)?;
    if req.network_none {
        check_no_network()?;
    }
    let deadline = (req.timeout_ms > 0)
        .then(|| Instant::now() + Duration::from_millis(req.timeout_ms) + DEADLINE_GRACE);

    // With `stdio`, the agent's stdin is a pipe this helper fills from the lifeline.
    let stdin_pipe = if req.stdio {
        let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| sys("creating the agent's stdin pipe")(e.into()))?;
        Some(AgentStdin { rd, wr })
    } else {
        None
    };
    let child = if pid_ns {
        spawn_init(req, dir, objects, stdin_pipe.as_ref())?
    } else {
        match spawn_agent(req, dir, stdin_pipe.as_ref().map(|p| &p.rd)) {
            Ok(pid) => pid,
            Err(e) => {
                eprintln!("{}{:?}: {e}", agent_path::NOT_STARTED, req.argv[0]);
                return Ok(ExitCode::from(SPAWN_FAILED as u8));
            }
        }
    };
    let relay = stdin_pipe.map(|p| {
        drop(p.rd);
        Relay::new(p.wr)
    });
    let status = supervise(child, pid_ns, deadline, req.lifeline, relay);
    // A namespace init that exited of itself (not killed) has, but for the rare ends where the
    // agent never started, told the hub how the agent ended (on a lifeline that is a socket it
    // can): then the hub does not wait for this exit either. Otherwise it does, and this exit
    // is only slower on a busy machine.
    if pid_ns && req.verdict && matches!(status, WaitStatus::Exited(..)) && stdin_is_socket() {
        let _ = crate::idle_priority();
    }
    // Whatever the agent left running dies now, whether it exited or was stopped. In a PID
    // namespace the kernel has done it already: its init's exit is reported only once every
    // other process of the namespace is gone, and nothing in it can leave it — so the end of
    // the run is not held up by a look at every process of the machine.
    if !pid_ns {
        kill_tree(Signal::SIGKILL);
    }
    exit_like(status)
}

/// Whether stdin is a socket: the hub's lifeline, not a relaying sudo's pipe.
fn stdin_is_socket() -> bool {
    nix::sys::stat::fstat(std::io::stdin().as_fd())
        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK)
}

/// Make this process one that processes of the same user cannot trace or read the memory of
/// (`PR_SET_DUMPABLE` 0; Linux only: elsewhere a standby read-back is never asked for).
pub fn not_dumpable() -> Result<(), TreeError> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(sys("prctl(PR_SET_DUMPABLE)")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

fn set_no_new_privs() -> Result<(), TreeError> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(sys("setting NO_NEW_PRIVS")(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Start the agent itself: new session, limits, only fds 0–2, exactly the given environment;
/// its stdin is `stdin` (the read end of the pipe the helper relays the lifeline to) or
/// `/dev/null`.
fn spawn_agent(
    req: &Request,
    dir: &Path,
    stdin: Option<&std::os::fd::OwnedFd>,
) -> std::io::Result<Pid> {
    let mut cmd = std::process::Command::new(&req.argv[0]);
    cmd.args(&req.argv[1..])
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(match stdin {
            Some(fd) => Stdio::from(fd.try_clone()?),
            None => Stdio::null(),
        });
    let nproc = if req.nproc == 0 {
        crate::wire::AGENT_NPROC
    } else {
        req.nproc
    };
    // SAFETY: the closure runs in the forked child before exec and makes only system calls.
    unsafe {
        cmd.pre_exec(move || agent_pre_exec(nproc));
    }
    let child = cmd.spawn()?;
    Ok(Pid::from_raw(child.id() as i32))
}

fn agent_pre_exec(nproc: u64) -> std::io::Result<()> {
    let last = std::io::Error::last_os_error;
    // SAFETY: plain system calls with integer arguments and stack-allocated structs.
    unsafe {
        // A new session: no controlling terminal, so TIOCSTI and /dev/tty have nothing to reach.
        if libc::setsid() < 0 {
            return Err(last());
        }
        let core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &core) != 0 {
            return Err(last());
        }
        let mut cur = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NPROC, &mut cur) != 0 {
            return Err(last());
        }
        let n = (nproc as libc::rlim_t).min(cur.rlim_max);
        let lim = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        if libc::setrlimit(libc::RLIMIT_NPROC, &lim) != 0 {
            return Err(last());
        }
        close_fds_from_3_on_exec()
    }
}

/// Mark every descriptor above 2 close-on-exec (not closed now: std's exec-error pipe must
/// stay usable until the exec).
unsafe fn close_fds_from_3_on_exec() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
        if libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return Ok(());
        }
    }
    // Older kernels and macOS: every possible descriptor, one by one.
    let max = match libc::sysconf(libc::_SC_OPEN_MAX) {
        n if n > 0 => n.min(1 << 20) as libc::c_int,
        _ => 65536,
    };
    for fd in 3..max {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

/// Wait for `child` (the agent, or the namespace's init), reaping every other process that is
/// re-parented to us, and stop the tree when told to: SIGTERM, lifeline EOF, or the deadline.
///
/// With `relay`, what comes on the lifeline goes on to the agent's stdin as it waits.
fn supervise(
    child: Pid,
    pid_ns: bool,
    deadline: Option<Instant>,
    lifeline: bool,
    mut relay: Option<Relay>,
) -> WaitStatus {
    let mut stopping_since: Option<Instant> = None;
    let mut killed = false;
    let mut lifeline_open = lifeline;
    // Without the pipe the loop below still sees the child's exit, at its next timeout.
    let _ = wake::install();
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                    if pid == child =>
                {
                    return status
                }
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                // No children at all: the child is gone and was reaped by someone else.
                Err(_) => return WaitStatus::Exited(child, HELPER_FAILED as i32),
            }
        }
        if let (true, Some(r)) = (lifeline_open, relay.as_mut()) {
            if r.step(100) == Readable::Closed {
                lifeline_open = false;
                // The agent's stdin ends with the lifeline.
                relay = None;
            }
        } else if lifeline_open {
            if wait_readable(libc::STDIN_FILENO, 100) == Readable::Closed {
                lifeline_open = false;
            }
        } else {
            // No descriptor but the wake-up pipe: a child's exit or a signal, or the timeout.
            wait_readable(-1, 100);
        }
        let stop = STOP.load(Ordering::SeqCst)
            || (lifeline && !lifeline_open)
            || deadline.is_some_and(|d| Instant::now() >= d);
        if stop && stopping_since.is_none() {
            stopping_since = Some(Instant::now());
            let _ = kill(child, Signal::SIGTERM);
            if !pid_ns {
                kill_tree_once(Signal::SIGTERM);
            }
        }
        if let Some(since) = stopping_since {
            if !killed && since.elapsed() >= TERM_GRACE {
                killed = true;
                // Killing the namespace's init kills the namespace.
                let _ = kill(child, Signal::SIGKILL);
                kill_tree(Signal::SIGKILL);
            }
        }
    }
}

/// Signal every descendant until none is left alive (a fork racing the sweep is caught by the
/// next pass; RLIMIT_NPROC bounds how long that can go on).
fn kill_tree(sig: Signal) {
    for _ in 0..200 {
        if kill_tree_once(sig) == 0 {
            return;
        }
        reap_all();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Signal every live descendant once; returns how many there were.
fn kill_tree_once(sig: Signal) -> usize {
    let me = nix::unistd::getpid().as_raw();
    let procs = process_table();
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (&pid, &(ppid, _)) in &procs {
        children.entry(ppid).or_default().push(pid);
    }
    let mut stack = vec![me];
    let mut live = 0;
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            stack.push(c);
            if procs.get(&c).is_some_and(|&(_, zombie)| !zombie) {
                live += 1;
                let _ = kill(Pid::from_raw(c), sig);
            }
        }
    }
    live
}

fn reap_all() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// pid -> (parent pid, is a zombie), for every process we can see.
#[cfg(target_os = "linux")]
fn process_table() -> BTreeMap<i32, (i32, bool)> {
    crate::supervise::procs::all()
        .filter_map(|(pid, path)| {
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            parse_stat(&stat).map(|parent| (pid, parent))
        })
        .collect()
}

/// `pid (comm) S ppid ...`; comm may itself contain ") ", so split at the last one.
#[cfg(any(target_os = "linux", test))]
fn parse_stat(stat: &str) -> Option<(i32, bool)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state == "Z"))
}

#[cfg(not(target_os = "linux"))]
fn process_table() -> BTreeMap<i32, (i32, bool)> {
    // No /proc: ask ps (macOS ships it in /bin).
    let mut out = BTreeMap::new();
    let Ok(o) = std::process::Command::new("/bin/ps")
        .args(["-axo", "pid=,ppid=,stat="])
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return out;
    };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let mut f = line.split_whitespace();
        if let (Some(pid), Some(ppid), Some(stat)) = (f.next(), f.next(), f.next()) {
            if let (Ok(pid), Ok(ppid)) = (pid.parse(), ppid.parse()) {
                out.insert(pid, (ppid, stat.starts_with('Z')));
            }
        }
    }
    out
}

/// Exit the way the agent did: its exit code, or the signal that killed it (re-raised, so the
/// hub — through sudo, which does the same — sees a death by that signal).
fn exit_like(status: WaitStatus) -> Result<ExitCode, TreeError> {
    match status {
        WaitStatus::Exited(_, code) => std::process::exit(code),
        WaitStatus::Signaled(_, sig, _) => {
            use nix::sys::signal::{signal, SigHandler};
            // SAFETY: restoring the default disposition of a signal.
            unsafe {
                let _ = signal(sig, SigHandler::SigDfl);
            }
            let _ = nix::sys::signal::raise(sig);
            std::process::exit(128 + sig as i32)
        }
        _ => Ok(ExitCode::from(HELPER_FAILED)),
    }
}

#[cfg(test)]
mod tests;

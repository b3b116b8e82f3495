//! PID (and mount) namespaces for agents, on Linux.
//!
//! Two uses:
//! - `--isolation none`: the hub puts the agent in a PID namespace of its own (through an
//!   unprivileged user namespace, or directly when the hub is root) whose init dies with the
//!   hub, so even `kill -9` of the hub takes every process the agent started with it
//!   ([`pidns::enter_for_process_group`]).
//! - `--isolation user`: the helper's namespace init mounts a fresh `/proc` in a mount
//!   namespace of its own ([`pidns::mount_private_proc`]), so an agent sees only its own namespace's
//!   processes — never another run's agent, whose environment holds that run's token — and
//!   covers every other slot ([`pidns::show_only_own_slot`]), so it reaches only its own.
//!
//! In both, the namespace is entered the same way ([`crate::supervise::init::unshare_mapped`]),
//! its init waits for the agent the same way ([`crate::supervise::init::wait_for_agent`]) and
//! ends it the same way once the agent exits ([`pidns::end_of_agent`]); under `--isolation user`
//! the rest of that init, a fork of the helper, is `crate::supervise::tree`'s.

use nix::libc;

use crate::supervise::init::{map_of_self, unshare_mapped, wait_for_agent, waitpid_flags};

/// `HUNKGATE_SANDBOX_PIDNS=off`: no PID namespaces for agents, as machines without
/// (unprivileged) user namespaces must run — so that fallback can be exercised anywhere.
pub fn disabled() -> bool {
    std::env::var_os("HUNKGATE_SANDBOX_PIDNS").is_some_and(|v| v == "off")
}

/// What [`enter_for_process_group`] needs, prepared before the fork (nothing may be
/// allocated after it).
#[derive(Clone)]
pub struct Plan {
    user: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// The write end of the hub's verdict pipe, or -1 (see [`enter_for_process_group`]).
    verdict: libc::c_int,
    /// The program the init and the leader become once set up ([`exec_roles_with`]).
    roles: Option<&'static std::ffi::CStr>,
}

impl Plan {
    pub fn new() -> Self {
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        Self {
            // Root makes a PID namespace directly; anyone else through a user namespace
            // that maps only themselves (so files keep their owners).
            user: uid != 0,
            uid_map: map_of_self(uid),
            gid_map: map_of_self(gid),
            verdict: -1,
            roles: ROLE_PROGRAM.get().map(|p| p.as_c_str()),
        }
    }

    /// The namespace's init writes the agent's wait status to `fd` (two bytes: `[0, code]`
    /// or `[1, signal]`) once the agent has exited and everything else in the namespace
    /// has been killed and reaped. `fd` must stay open until the fork.
    pub fn with_verdict(self, fd: std::os::fd::RawFd) -> Self {
        Self {
            verdict: fd,
            ..self
        }
    }
}

impl Default for Plan {
    fn default() -> Self {
        Self::new()
    }
}

/// The program an agent's namespace init and group leader exec once they are set up; unset,
/// they stay what they are forked as: copies of the hub (see [`exec_roles_with`]).
static ROLE_PROGRAM: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();

/// The first argument that makes the hub's program an agent's namespace init
/// ([`take_role`]): then `<agent pid> <status fd> <verdict fd or -1>`.
pub const INIT_ROLE: &std::ffi::CStr = c"__agent-pidns-init";
/// The first argument that makes it an agent's group leader: then `<init pid> <status fd>`.
pub const LEADER_ROLE: &std::ffi::CStr = c"__agent-pidns-leader";

/// Have the init and the group leader of each agent's PID namespace exec `program` (the
/// hub's own, `/proc/self/exe`, whose `main` calls [`take_role`] first) once they are set
/// up, rather than live on as forks of the hub. A fork shares the hub's memory
/// copy-on-write: while one lives, each page the hub writes is copied first, and its exit
/// tears down a copy of the hub's page tables, right when the hub reads the agent's work
/// back. Exec'd, each is a small program of its own. The first call wins; without one (a
/// test binary, which cannot take the roles) or when the exec fails, they stay forks.
pub fn exec_roles_with(program: &std::ffi::CStr) {
    let _ = ROLE_PROGRAM.set(program.to_owned());
}

/// If `args` (this process's, program name first) make it an agent's namespace init or
/// group leader (see [`exec_roles_with`]), be that and never return; else return at once.
pub fn take_role(args: &[std::ffi::OsString]) {
    use std::os::unix::ffi::OsStrExt;
    let role = args.get(1).map(|a| a.as_bytes());
    let init = role == Some(INIT_ROLE.to_bytes());
    if !init && role != Some(LEADER_ROLE.to_bytes()) {
        return;
    }
    let num = |i: usize| -> libc::c_int {
        match args.get(i).and_then(|a| a.to_str()).map(str::parse) {
            Some(Ok(n)) => n,
            // Not exec'd by the hub: there is nothing to do.
            _ => std::process::exit(127),
        }
    };
    // SAFETY: this process was exec'd for the role, with the descriptors and the child
    // its arguments name; each role only waits, reads, writes and exits.
    unsafe {
        if init {
            be_init(num(2), num(3), num(4))
        } else {
            be_leader(num(2), num(3))
        }
    }
}

/// Exec the role `program` with `nums` after it (see [`take_role`]); returns only when the
/// exec fails. The descriptors among `nums` are kept open across it; nothing else is, and
/// the environment is empty.
///
/// # Safety
/// Only in a forked child: it makes only async-signal-safe calls and allocates nothing.
unsafe fn exec_role(
    program: &std::ffi::CStr,
    role: &std::ffi::CStr,
    nums: &[libc::c_int],
    fds: &[libc::c_int],
) {
    for &fd in fds {
        if fd >= 0 && libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
            return;
        }
    }
    let mut digits = [[0u8; 16]; 3];
    let mut argv: [*const libc::c_char; 6] = [std::ptr::null(); 6];
    argv[0] = c"hunkgate".as_ptr();
    argv[1] = role.as_ptr();
    for (i, (&n, buf)) in nums.iter().zip(digits.iter_mut()).enumerate() {
        write_decimal(n, buf);
        argv[2 + i] = buf.as_ptr().cast();
    }
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
}

/// `n` in decimal into `buf`, NUL-terminated (no allocation: after a fork).
fn write_decimal(n: libc::c_int, buf: &mut [u8; 16]) {
    let mut digits = itoa::Buffer::new();
    let text = digits.format(n).as_bytes();
    buf[..text.len()].copy_from_slice(text);
    buf[text.len()] = 0;
}

fn last() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Close every descriptor except those in `keep` (which must be sorted).
unsafe fn close_all_but(keep: &[libc::c_int]) {
    let mut from: libc::c_uint = 0;
    for &k in keep {
        if k as libc::c_uint > from {
            libc::syscall(libc::SYS_close_range, from, k as libc::c_uint - 1, 0);
        }
        from = k as libc::c_uint + 1;
    }
    libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0);
}

/// Die the way `status` says a child died: by the same signal, or with the same code.
unsafe fn exit_like(kind: u8, value: u8) -> ! {
    if kind == 1 {
        let sig = value as libc::c_int;
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(value as libc::c_int)
}

/// In the forked child of the hub, before exec (`--isolation none`): enter a fresh PID
/// namespace and arrange the processes so that the agent's whole tree lives in it.
///
/// Three processes result: this one (the hub's child and the process group's leader) waits
/// and then exits exactly like the agent; its child is the namespace's init (PID 1), which
/// reaps orphans and, when the agent exits, kills and reaps everything left in the
/// namespace, writes the agent's wait status to the plan's verdict pipe (if it has one:
/// the hub learns of the end from there, before this process could exit) and exits; and
/// its grandchild returns from here and becomes the agent. Each dies with its parent
/// (`PR_SET_PDEATHSIG`), and this one with the hub, so `kill -9` of the hub ends the whole
/// tree. All three stay in the hub's process group, so the hub's SIGTERM and SIGKILL to the
/// group still reach the agent directly. Once set up, the leader and the init exec the
/// hub's program for their roles when the hub has said so ([`exec_roles_with`]); the
/// exec keeps all of the above (pids, children, the death signal, an ignored SIGTERM).
///
/// Returns `Ok(false)` (and changes nothing) when no namespace can be made here; the caller
/// then runs the agent as a plain process group.
///
/// # Safety
/// Only in a forked child before exec: it forks, and makes only async-signal-safe calls.
pub unsafe fn enter_for_process_group(plan: &Plan) -> std::io::Result<bool> {
    if plan.user {
        match unshare_mapped(
            libc::CLONE_NEWUSER | libc::CLONE_NEWPID,
            &plan.uid_map,
            &plan.gid_map,
        ) {
            Ok(()) => {}
            Err(e) if !e.mapping => return Ok(false),
            Err(e) => return Err(e.io()),
        }
    } else if libc::unshare(libc::CLONE_NEWPID) != 0 {
        return Ok(false);
    }
    // status: init -> this process (how the agent ended); guard: EOF tells init we died.
    let mut status = [0 as libc::c_int; 2];
    let mut guard = [0 as libc::c_int; 2];
    if libc::pipe2(status.as_mut_ptr(), libc::O_CLOEXEC) != 0
        || libc::pipe2(guard.as_mut_ptr(), libc::O_CLOEXEC) != 0
    {
        return Err(last());
    }
    let init = libc::fork();
    if init < 0 {
        return Err(last());
    }
    if init == 0 {
        return be_pid_1(plan, status, guard);
    }
    // The hub's child: wait for the init and end like the agent did. The hub's SIGTERM
    // to the group is for the agent; this process waits for its verdict.
    // The guard's write end stays open for as long as this process lives (the exec'd
    // leader's too: the exec keeps it, its close-on-exec flag cleared).
    let mut keep = [status[0], guard[1]];
    keep.sort_unstable();
    close_all_but(&keep);
    libc::signal(libc::SIGTERM, libc::SIG_IGN);
    if let Some(program) = plan.roles {
        exec_role(
            program,
            LEADER_ROLE,
            &[init, status[0]],
            &[status[0], guard[1]],
        );
    }
    be_leader(init, status[0])
}

/// The child of [`enter_for_process_group`] that is PID 1 of the new namespace: it forks the
/// agent (which returns `Ok(true)` to go on to its exec) and becomes the agent's init, never
/// to return. `status` and `guard` are the two pipes its parent made.
///
/// # Safety
/// As [`enter_for_process_group`]: in the forked child of a single-threaded process.
unsafe fn be_pid_1(
    plan: &Plan,
    status: [libc::c_int; 2],
    guard: [libc::c_int; 2],
) -> std::io::Result<bool> {
    // PID 1 of the new namespace.
    libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0,
        0,
        0,
    );
    libc::close(guard[1]);
    libc::close(status[0]);
    // Our parent may have died before the line above: then the guard reads EOF.
    let mut pfd = libc::pollfd {
        fd: guard[0],
        events: libc::POLLIN,
        revents: 0,
    };
    if libc::poll(&mut pfd, 1, 0) > 0 {
        libc::_exit(1);
    }
    let agent = libc::fork();
    if agent < 0 {
        return Err(last());
    }
    if agent == 0 {
        libc::close(guard[0]);
        libc::close(status[1]);
        if plan.verdict >= 0 {
            libc::close(plan.verdict);
        }
        return Ok(true);
    }
    // The init: nothing of the hub's (its pipes, std's exec-error pipe) stays open here.
    let mut keep = [guard[0], status[1], plan.verdict];
    keep.sort_unstable();
    close_all_but(&keep[usize::from(plan.verdict < 0)..]);
    if let Some(program) = plan.roles {
        exec_role(
            program,
            INIT_ROLE,
            &[agent, status[1], plan.verdict],
            &[status[1], plan.verdict],
        );
    }
    be_init(agent, status[1], plan.verdict)
}

/// An agent's namespace init, once the agent (`agent`, its child) is started: reap orphans
/// and, when the agent exits, kill and reap everything left in the namespace, write the
/// agent's wait status to `verdict` (unless it is -1) and to `status` (for the leader, with
/// whether the hub heard it: then both exit at idle priority, [`crate::supervise::os::idle_priority`]), and
/// exit (see [`enter_for_process_group`]).
///
/// # Safety
/// Only in the init of an agent's namespace (forked or exec'd): it kills every process it
/// can see when it is PID 1.
unsafe fn be_init(agent: libc::pid_t, status: libc::c_int, verdict: libc::c_int) -> ! {
    // Nothing to watch but the children: the hub's signals reach the agent's group
    // directly, and this init dies with the leader.
    let report = match wait_for_agent(agent, None) {
        Ok(report) => report,
        Err(code) => libc::_exit(code),
    };
    let tell = if verdict >= 0 {
        Tell::Pipe(verdict)
    } else {
        Tell::Nobody
    };
    let heard = end_of_agent(report, tell);
    // The leader learns how the agent ended, and whether the hub has heard it.
    let told = [report[0], report[1], u8::from(heard)];
    libc::write(status, told.as_ptr().cast(), told.len());
    // Nobody waits for this exit, or the leader's, once the hub has heard.
    if heard {
        let _ = crate::supervise::os::idle_priority();
    }
    libc::_exit(report[1] as libc::c_int)
}

/// Where an agent's namespace init tells the hub how the agent ended.
#[derive(Debug, Clone, Copy)]
pub enum Tell {
    /// Nobody asked: the hub waits for the exits.
    Nobody,
    /// The hub's verdict pipe (`--isolation none`, see [`Plan::with_verdict`]).
    Pipe(libc::c_int),
    /// The helper's lifeline, a socket (`--isolation user`); sent with `MSG_NOSIGNAL`, and a
    /// descriptor that is no socket (a relaying sudo's pipe) fails: the hub waits instead.
    Socket(libc::c_int),
}

/// How every agent's namespace ends, in both isolation modes: its init calls this once the
/// agent has exited as `report` says (`[0, code]` or `[1, signal]`). What the agent left is
/// killed and reaped now, as the kernel would once the init exits, but before the word goes
/// out: then the hub knows that nothing the agent started is left without waiting for the
/// init, nor the processes above it, to exit. (Only as PID 1: kill(-1) reaches no further
/// than the namespace.) Each one reaped has closed its files, so what the agent's tree wrote
/// to its output pipes is all in them. Then `tell` is told the report; returns whether it
/// heard it (then nobody waits for the init's exit, which may go at idle priority).
/// Async-signal-safe, without allocation: a forked init may call it.
pub fn end_of_agent(report: [u8; 2], tell: Tell) -> bool {
    // SAFETY: kill, waitpid, write and send on integers and a two-byte stack buffer.
    unsafe {
        if libc::getpid() == 1 {
            libc::kill(-1, libc::SIGKILL);
            let mut st: libc::c_int = 0;
            // Any child, clones included (`__WALL`), until there is none.
            while waitpid_flags(-1, &mut st, libc::__WALL) > 0 {}
        }
        let sent = match tell {
            Tell::Nobody => return false,
            Tell::Pipe(fd) => libc::write(fd, report.as_ptr().cast(), report.len()),
            Tell::Socket(fd) => {
                libc::send(fd, report.as_ptr().cast(), report.len(), libc::MSG_NOSIGNAL)
            }
        };
        sent == report.len() as isize
    }
}

/// An agent's group leader (the hub's child): wait for the namespace's init (`init`) and
/// end the way the agent did, as `status` says (see [`enter_for_process_group`]).
///
/// # Safety
/// Only in the leader, forked or exec'd: it exits.
unsafe fn be_leader(init: libc::pid_t, status: libc::c_int) -> ! {
    let mut st: libc::c_int = 0;
    waitpid_flags(init, &mut st, 0);
    let mut report = [0u8; 3];
    let n = libc::read(status, report.as_mut_ptr().cast(), 3);
    if n >= 2 {
        if n == 3 && report[2] == 1 {
            let _ = crate::supervise::os::idle_priority();
        }
        exit_like(report[0], report[1]);
    }
    if libc::WIFSIGNALED(st) {
        exit_like(1, libc::WTERMSIG(st) as u8);
    }
    libc::_exit(libc::WEXITSTATUS(st))
}

/// In a namespace's init, right after the helper unshared user, PID and mount namespaces:
/// keep mounts from propagating back, and mount a `/proc` that shows this PID namespace
/// only.
pub fn mount_private_proc() -> std::io::Result<()> {
    mount_proc_of_this_namespace().map_err(|what| {
        let e = last();
        std::io::Error::new(e.kind(), format!("{what}: {e}"))
    })
}

/// [`mount_private_proc`] without allocating (for a forked child of the hub): on failure,
/// what failed, with the error in `errno`.
fn mount_proc_of_this_namespace() -> Result<(), &'static str> {
    // SAFETY: mount(2) with constant NUL-terminated strings.
    unsafe {
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err("making the agent's mounts private");
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
        {
            return Err("mounting a private /proc for the agent");
        }
    }
    Ok(())
}

/// In a namespace's init, after [`mount_private_proc`]: make every slot but the run's own
/// unreachable. `root`, the directory that holds every slot of the sandbox user (of every
/// repository), is covered with an empty tmpfs, and only `slot` (read-write) and
/// `objects` (the slot's base objects, which its `.git` borrows: read-only) are bound back
/// at their own paths; then the tmpfs is made read-only. So whatever way an agent finds
/// another slot's path — the hub's layout, `..`, another agent's `/proc/<pid>/cwd` (out of
/// sight anyway) — there is nothing there, and nothing it writes reaches another run.
///
/// The agent cannot undo it: it runs as a user that is not root in this namespace, so it
/// has no capability here once exec'd, and in a user namespace of its own these mounts
/// are locked (the kernel refuses to unmount one of them, or to make the read-only one
/// writable, from a less privileged namespace).
pub fn show_only_own_slot(
    root: &std::path::Path,
    slot: &std::path::Path,
    objects: Option<&std::path::Path>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fail = |what: String| {
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    let open = |p: &std::path::Path| -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(p)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    // Held open across the tmpfs, which hides their paths; closed on exec.
    let mut binds = vec![(open(slot)?, slot, false)];
    if let Some(objects) = objects {
        binds.push((open(objects)?, objects, true));
    }
    mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some("mode=0700,size=64k"),
    )
    .map_err(fail(format!("covering {}", root.display())))?;
    for (fd, path, read_only) in &binds {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(Some(&source), path, None, libc::MS_BIND, None)
            .map_err(fail(format!("binding {} back", path.display())))?;
        if *read_only {
            remount_read_only(path)?;
        }
    }
    remount_read_only(root)
}

/// Make the mount at `path` read-only, keeping the flags it has (the kernel refuses to
/// clear a flag that was locked by a more privileged namespace).
fn remount_read_only(path: &std::path::Path) -> std::io::Result<()> {
    let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    use nix::sys::statvfs::FsFlags;
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
    for (has, flag) in [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.flags().contains(has) {
            flags |= flag;
        }
    }
    mount(None, path, None, flags, None).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("making {} read-only: {e}", path.display()),
        )
    })
}

/// mount(2) with Rust strings.
fn mount(
    source: Option<&str>,
    target: &std::path::Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &[u8]| {
        std::ffi::CString::new(s).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
    };
    let source = source.map(|s| c(s.as_bytes())).transpose()?;
    let target = c(target.as_os_str().as_bytes())?;
    let fstype = fstype.map(|s| c(s.as_bytes())).transpose()?;
    let data = data.map(|s| c(s.as_bytes())).transpose()?;
    let ptr = |s: &Option<std::ffi::CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: mount(2) with NUL-terminated strings that outlive the call (or null).
    let done = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(last())
    }
}

/// Whether this process could give an agent a PID namespace with a private `/proc`: user,
/// PID and mount namespaces made unprivileged, and `/proc` mounted inside (tried in a
/// throwaway child; the kernel refuses that mount where `/proc` is partly masked, as in
/// many containers).
pub fn can_make_private_proc() -> bool {
    if disabled() {
        return false;
    }
    let plan = Plan::new();
    // SAFETY: the child makes only system calls and exits; nothing is allocated after fork.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS;
            if unshare_mapped(flags, &plan.uid_map, &plan.gid_map).is_err() {
                libc::_exit(1);
            }
            let init = libc::fork();
            if init < 0 {
                libc::_exit(1);
            }
            if init == 0 {
                let ok = mount_proc_of_this_namespace().is_ok();
                libc::_exit(if ok { 0 } else { 1 });
            }
            let mut st = 0;
            waitpid_flags(init, &mut st, 0);
            libc::_exit(if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 {
                0
            } else {
                1
            });
        }
        let mut st = 0;
        waitpid_flags(pid, &mut st, 0);
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
    }
}

#[cfg(test)]
mod tests;

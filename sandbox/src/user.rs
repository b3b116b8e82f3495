//! Isolation `user`: the agent runs as a dedicated sandbox user (default `hunkgate-agent`).
//!
//! The hub never touches the sandbox directory itself. Every operation on it — bringing it to
//! the run's base, reading it back, running the agent — is done by `hunkgate sandbox-helper`
//! ([`crate::helper`]) running *as the sandbox user*, started in one of two ways:
//!
//! - the hub runs as root ([`Launch::Direct`]): it forks the helper and drops privileges itself
//!   in the child before exec (supplementary groups, then gid, then uid, then verifies that none
//!   of it can be undone);
//! - otherwise ([`Launch::Sudo`]): `sudo -n -u <sandbox user> -- <this binary> sandbox-helper
//!   <op>`, allowed by exactly one sudoers rule ([`sudoers_rule`]).
//!
//! Everything the helper needs travels on its stdin (never argv: the agent token must not show
//! in `ps`), and everything it reports back is read as hostile data ([`crate::wire`]).
//!
//! **Layer:** the hub's side of user isolation. It imports [`crate::workspace`] (the trait it
//! implements), [`crate::sync`]'s records, [`crate::wire`] and what is below — never
//! [`crate::helper`], the other end of the wire, which it only ever starts as a process.

#![forbid(unsafe_code)]

use crate::tools::{ToolReply, ToolRequest};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::libc;

use crate::accel::Accel;
use crate::snapshot::{OverLimit, ReadBack, ReadLimits, Skipped};
use crate::store::{Entry, FlatTree, Mode, ObjectBatch, Store, StoreError};
use crate::supervise::launch;
use crate::sync::{base_refs, changed_paths, rebase_onto, record_for, Synced};
use crate::wire::{self, Frame, PrepareReply, Request, SyncRecord, WireError, AGENT_NPROC};
use crate::workspace::{lock, AgentCommand, Sandbox, SandboxError, SharedSlot, Stop};

mod exchange;
pub(crate) mod sandbox;
pub(crate) mod standby;
#[cfg(test)]
use exchange::PIPE_BYTES;
use exchange::{
    exchange_result, helper_verdict, read_helper_stderr, take_pipes, widen_pipe, Helper, HelperEnd,
};
use sandbox::read_snapshot;
pub use sandbox::UserSandbox;
#[cfg(test)]
use sandbox::{checked_record, sanitize};

/// The sandbox user `hunkgate setup` creates unless told otherwise.
pub const DEFAULT_USER: &str = "hunkgate-agent";
/// A prepare or snapshot that takes longer than this is stuck (an agent stopping the helper,
/// say): the hub kills it and reports an error instead of hanging.
const HELPER_DEADLINE: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("the sandbox user {name:?} does not exist: create it with `sudo hunkgate setup --user {name}`, or serve with --isolation none (no isolation)")]
    Missing { name: String },
    #[error("looking up user {name:?}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: nix::Error,
    },
    #[error("the sandbox user {name:?} has uid 0; it must be an unprivileged user of its own (see `hunkgate setup`)")]
    Root { name: String },
    #[error("the hub runs as the sandbox user {name:?} itself; run the hub as your own user (the agent must not be able to read the hub's token)")]
    SameAsHub { name: String },
    #[error(
        "the sandbox user's home {path}: {problem}; `sudo hunkgate setup --user {name}` fixes it"
    )]
    Home {
        name: String,
        path: PathBuf,
        problem: String,
    },
    #[error("the hunkgate binary {path} could be replaced by the sandbox user {name:?} ({why}); the hub would then run the agent's code as you: install hunkgate where only you and root can write (e.g. `cargo install --locked --path server --root /usr/local`)")]
    ExeWritable {
        path: PathBuf,
        name: String,
        why: String,
    },
    #[error("the path of the hunkgate binary ({path}) has characters a sudoers rule cannot hold safely (allowed: letters, digits and / . _ + -): install it somewhere plainer, e.g. `cargo install --locked --path server --root /usr/local`")]
    ExePath { path: PathBuf },
    #[error("finding the hunkgate binary: {0}")]
    Exe(#[source] std::io::Error),
    #[error("sudo is not installed, and the hub is not root: install sudo (e.g. `apt-get install sudo`), then run `hunkgate setup --install`")]
    NoSudo,
    #[error("the sandbox helper does not start as {name:?}: {detail}\n`hunkgate setup --check` says what is missing; the hub needs this sudoers rule (`hunkgate setup --install` writes it):\n    {rule}")]
    Probe {
        name: String,
        detail: String,
        rule: String,
    },
    #[error("{name:?} is not a plain user name (letters, digits, . _ + -)")]
    BadName { name: String },
    #[error("inspecting {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Errors of one helper invocation; each says what the helper was doing and what it said.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("starting the sandbox helper ({cmd}): {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sandbox helper's {op} failed ({status}): {stderr}")]
    Failed {
        op: &'static str,
        status: String,
        stderr: String,
    },
    #[error("the sandbox helper's {op} took longer than {secs}s and was killed")]
    Stuck { op: &'static str, secs: u64 },
    #[error("the sandbox helper's {op}: {source} (helper said: {stderr})")]
    Stream {
        op: &'static str,
        #[source]
        source: WireError,
        stderr: String,
    },
    #[error("the sandbox helper's snapshot sent an unacceptable path {path:?}: {why}")]
    BadPath { path: String, why: String },
    #[error(
        "the sandbox helper's {op}: writing to the checkpoint store: {0}",
        op = "snapshot"
    )]
    Store(#[from] crate::store::StoreError),
    #[error("the sandbox helper's {op}: {message}")]
    Protocol { op: &'static str, message: String },
    /// The helper's snapshot went past the read-back's limits.
    #[error(transparent)]
    OverLimit(#[from] OverLimit),
}

impl HelperError {
    /// The limit a read-back went past, if that is what this is.
    fn over_limit(&self) -> Option<OverLimit> {
        match self {
            HelperError::OverLimit(o) | HelperError::Store(StoreError::OverLimit(o)) => Some(*o),
            _ => None,
        }
    }
}

impl From<HelperError> for SandboxError {
    fn from(e: HelperError) -> Self {
        match e.over_limit() {
            Some(o) => SandboxError::OverLimit(o),
            None => SandboxError::Backend(Box::new(e)),
        }
    }
}

/// An account on this machine, as far as file permissions are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Every group the user is in (primary included): group permission bits apply to these.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

impl SandboxUser {
    /// Look a user up by name (None when there is no such user).
    pub fn lookup(name: &str) -> Result<Option<Self>, UserError> {
        let user = nix::unistd::User::from_name(name).map_err(|source| UserError::Lookup {
            name: name.to_string(),
            source,
        })?;
        Ok(user.map(|u| Self::from_passwd(&u)))
    }

    /// The user this process runs as.
    pub fn current() -> Result<Self, UserError> {
        let uid = nix::unistd::getuid();
        match nix::unistd::User::from_uid(uid) {
            Ok(Some(u)) => Ok(Self::from_passwd(&u)),
            Ok(None) => Ok(Self {
                name: uid.to_string(),
                uid: uid.as_raw(),
                gid: nix::unistd::getgid().as_raw(),
                groups: vec![nix::unistd::getgid().as_raw()],
                home: PathBuf::from("/"),
            }),
            Err(source) => Err(UserError::Lookup {
                name: uid.to_string(),
                source,
            }),
        }
    }

    fn from_passwd(u: &nix::unistd::User) -> Self {
        Self {
            name: u.name.clone(),
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups: group_list(&u.name, u.gid.as_raw()),
            home: u.dir.clone(),
        }
    }

    /// What this user could do to `path`: read it, or write it — directly, or by replacing it
    /// through a directory on the way that it can write (a sticky directory only lets it replace
    /// its own entries). A path it cannot reach (some directory on the way is not searchable for
    /// it) is neither. POSIX ACLs are not consulted.
    pub fn access(&self, path: &Path) -> Result<Access, UserError> {
        let io = |source| UserError::Io {
            path: path.to_path_buf(),
            source,
        };
        let path = path.canonicalize().map_err(io)?;
        let mut access = Access::default();
        let mut prefix = PathBuf::new();
        let components: Vec<_> = path.components().collect();
        for (i, comp) in components.iter().enumerate() {
            prefix.push(comp);
            let meta = std::fs::metadata(&prefix).map_err(io)?;
            let last = i + 1 == components.len();
            if last {
                access.read = self.may(&meta, 0o4);
                access.write |= self.may(&meta, 0o2);
                break;
            }
            if !self.may(&meta, 0o1) {
                return Ok(Access::default());
            }
            if self.may(&meta, 0o2) {
                let child =
                    std::fs::symlink_metadata(prefix.join(components[i + 1])).map_err(io)?;
                let sticky = meta.mode() & 0o1000 != 0;
                if !sticky || meta.uid() == self.uid || child.uid() == self.uid {
                    access.write = true;
                    access.via = Some(prefix.clone());
                }
            }
        }
        Ok(access)
    }

    /// Whether the permission `bit` (4 read, 2 write, 1 search) applies to this user.
    fn may(&self, meta: &std::fs::Metadata, bit: u32) -> bool {
        if self.uid == 0 {
            return true;
        }
        let mode = meta.mode();
        if meta.uid() == self.uid {
            mode & (bit << 6) != 0
        } else if self.groups.contains(&meta.gid()) {
            mode & (bit << 3) != 0
        } else {
            mode & bit != 0
        }
    }
}

/// See [`SandboxUser::access`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Access {
    pub read: bool,
    pub write: bool,
    /// A directory on the way that the user can write (so it can replace what is below).
    pub via: Option<PathBuf>,
}

#[cfg(not(target_vendor = "apple"))]
fn group_list(name: &str, gid: u32) -> Vec<u32> {
    let Ok(cname) = std::ffi::CString::new(name) else {
        return vec![gid];
    };
    match nix::unistd::getgrouplist(&cname, nix::unistd::Gid::from_raw(gid)) {
        Ok(groups) => groups.into_iter().map(|g| g.as_raw()).collect(),
        Err(_) => vec![gid],
    }
}

#[cfg(target_vendor = "apple")]
fn group_list(_name: &str, gid: u32) -> Vec<u32> {
    // nix has no getgrouplist on macOS; the primary group is what `hunkgate setup` creates.
    vec![gid]
}

/// How the hub starts the helper as the sandbox user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// The hub is root: it drops privileges itself in the forked child.
    Direct,
    /// Through `sudo -n -u <user>` and the one sudoers rule.
    Sudo { sudo: PathBuf },
}

/// A verified sandbox user and how to reach it: everything `--isolation user` needs.
#[derive(Debug, Clone)]
pub struct UserIsolation {
    pub user: SandboxUser,
    pub launch: Launch,
    /// This binary (the helper is `<helper_exe> sandbox-helper`).
    pub helper_exe: PathBuf,
    /// `--agent-network none`: the agent gets a fresh network namespace (Linux).
    pub network_none: bool,
    /// Each agent gets a PID namespace made by the helper (through an unprivileged user
    /// namespace) with a private `/proc`: it sees no process outside its own run, so it cannot
    /// read another run's agent token from `/proc/<pid>/environ`. Set by [`Self::establish`]
    /// when the helper's probe shows it works; without it, see [`Self::caveats`].
    pub private_proc: bool,
    /// Absolute directories put first on the agent's `PATH` (`agent_path` in the hub's config;
    /// see [`crate::agent_path`]).
    pub agent_path: Vec<String>,
    /// The accelerators on (`[accel]`): the kept helper ([`standby::Standby`]) only with
    /// `kept_helper`, `watch` and `untracked_cache` all on, since it is the one that watches
    /// the slot and holds its directory record.
    pub accel: Accel,
}

/// The absolute path of this binary, as the sudoers rule names it.
pub fn current_exe() -> Result<PathBuf, UserError> {
    let exe = std::env::current_exe().map_err(UserError::Exe)?;
    exe.canonicalize().map_err(UserError::Exe)
}

/// Find sudo (the hub's PATH is not trusted for this: the usual places first).
pub fn find_sudo() -> Option<PathBuf> {
    [
        "/usr/bin/sudo",
        "/bin/sudo",
        "/usr/local/bin/sudo",
        "/run/wrappers/bin/sudo",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// The one sudoers rule a non-root hub needs: `hub_user` may run exactly this binary's sandbox
/// helper as `sandbox_user`, nothing else.
pub fn sudoers_rule(hub_user: &str, sandbox_user: &str, exe: &Path) -> Result<String, UserError> {
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._+-".contains(c))
    };
    let exe_str = exe.to_str().unwrap_or("");
    if !plain(exe_str) || !exe.is_absolute() {
        return Err(UserError::ExePath {
            path: exe.to_path_buf(),
        });
    }
    for name in [hub_user, sandbox_user] {
        if !plain(name) || name.contains('/') {
            return Err(UserError::BadName {
                name: name.to_string(),
            });
        }
    }
    Ok(format!(
        "{hub_user} ALL=({sandbox_user}) NOPASSWD: {exe_str} sandbox-helper *"
    ))
}

impl UserIsolation {
    /// Resolve `name` and check that it is fit to run agents: it exists, is not root nor the
    /// hub's own user, has a private home, cannot replace this binary, and the helper actually
    /// starts as it (which proves the sudoers rule, when one is needed).
    pub fn establish(name: &str, network_none: bool) -> Result<Self, UserError> {
        let user = SandboxUser::lookup(name)?.ok_or_else(|| UserError::Missing {
            name: name.to_string(),
        })?;
        if user.uid == 0 {
            return Err(UserError::Root {
                name: name.to_string(),
            });
        }
        let me = nix::unistd::getuid().as_raw();
        if user.uid == me {
            return Err(UserError::SameAsHub {
                name: name.to_string(),
            });
        }
        check_home(&user)?;
        let helper_exe = current_exe()?;
        check_exe(&user, &helper_exe)?;
        let launch = if me == 0 {
            Launch::Direct
        } else {
            Launch::Sudo {
                sudo: find_sudo().ok_or(UserError::NoSudo)?,
            }
        };
        let mut iso = Self {
            user,
            launch,
            helper_exe,
            network_none,
            private_proc: false,
            agent_path: Vec::new(),
            accel: Accel::ALL,
        };
        let answer = iso.probe()?;
        iso.private_proc =
            !pid_namespace_disabled() && answer.split_whitespace().any(|w| w == "privateproc=yes");
        Ok(iso)
    }

    /// Put `dirs` (absolute) first on every agent's `PATH`.
    pub fn with_agent_path(self, dirs: Vec<String>) -> Self {
        Self {
            agent_path: dirs,
            ..self
        }
    }

    /// What this isolation cannot guarantee here, for `serve` to say at start (empty when
    /// everything holds).
    pub fn caveats(&self) -> Vec<String> {
        if self.private_proc {
            return Vec::new();
        }
        vec![
            format!(
                "agents of concurrent runs all run as {} and see each other in /proc: one agent could read another run's agent token (HUNKGATE_AGENT_TOKEN) from /proc/<pid>/environ.",
                self.user.name
            ),
            "They also see every sandbox: one agent could write into a concurrent run's sandbox, and its change would show in that run's suggestion, credited to the other agent. (Each run's sandbox is also sent every blob of its base, since nothing of an earlier agent's git objects is kept.)".into(),
            "Each agent gets a private /proc only where the sandbox user can make user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0, no AppArmor restriction such as Ubuntu's kernel.apparmor_restrict_unprivileged_userns, /proc not masked as in some containers); `hunkgate setup --check` tells. Until then, run one agent at a time (--max-runs 1).".into(),
        ]
    }

    /// Start `sandbox-helper probe` and check it answers as the sandbox user.
    pub fn probe(&self) -> Result<String, UserError> {
        self.probe_as(None)
    }

    /// Like [`probe`](Self::probe), but started as `hub` (root only: `hunkgate setup --check`
    /// run as root proves the sudoers rule works for the user the hub will run as).
    pub fn probe_as(&self, hub: Option<&SandboxUser>) -> Result<String, UserError> {
        let fail = |detail: String| {
            let hub = match hub {
                Some(h) => h.name.clone(),
                None => SandboxUser::current()
                    .map(|u| u.name)
                    .unwrap_or_else(|_| "YOU".into()),
            };
            UserError::Probe {
                name: self.user.name.clone(),
                detail,
                rule: sudoers_rule(&hub, &self.user.name, &self.helper_exe)
                    .unwrap_or_else(|e| e.to_string()),
            }
        };
        let mut cmd = self.helper_command("probe", false);
        if let Some(hub) = hub {
            cmd.uid(hub.uid).gid(hub.gid);
        }
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| fail(format!("{}: {e}", self.describe("probe"))))?;
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let expected = format!("ok uid={}", self.user.uid);
        if !out.status.success() || !stdout.starts_with(&expected) {
            return Err(fail(format!(
                "{} exited with {}: {}{}",
                self.describe("probe"),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                if stdout.is_empty() {
                    String::new()
                } else {
                    format!(" (stdout: {stdout})")
                }
            )));
        }
        Ok(stdout)
    }

    /// A sandbox slot: `<home>/sandboxes/<key>/<slot>`, owned by the sandbox user, whose state
    /// between runs `state` holds (its owner's, the hub's registry, borrowed for the run).
    pub fn sandbox(&self, key: &str, slot: usize, state: SharedSlot) -> UserSandbox {
        UserSandbox {
            iso: self.clone(),
            key: key.to_string(),
            slot,
            workdir: self
                .user
                .home
                .join("sandboxes")
                .join(key)
                .join(slot.to_string()),
            state,
        }
    }

    /// Whether the agent always runs in a PID namespace of its own, where it can see no
    /// process outside its run, let alone signal or trace one: then a read-back helper may
    /// wait beside it ([`standby::Standby`]).
    fn agent_walled_off(&self) -> bool {
        cfg!(target_os = "linux")
            && !pid_namespace_disabled()
            && (self.private_proc || self.launch == Launch::Direct)
    }

    fn describe(&self, op: &str) -> String {
        match &self.launch {
            Launch::Direct => format!(
                "{} sandbox-helper {op} (as uid {})",
                self.helper_exe.display(),
                self.user.uid
            ),
            Launch::Sudo { sudo } => format!(
                "{} -n -u {} -- {} sandbox-helper {op}",
                sudo.display(),
                self.user.name,
                self.helper_exe.display()
            ),
        }
    }

    /// The helper for `op`, with no environment and `/` as its working directory. For `exec`
    /// as root, the child also enters fresh PID (and, with `--agent-network none`, network)
    /// namespaces before dropping privileges.
    fn helper_command(&self, op: &str, exec: bool) -> std::process::Command {
        let mut cmd = match &self.launch {
            Launch::Direct => {
                let mut cmd = std::process::Command::new(&self.helper_exe);
                cmd.args(["sandbox-helper", op]);
                let (uid, gid) = (self.user.uid, self.user.gid);
                // With a private /proc the helper makes every namespace itself (a root hub's
                // PID namespace would leave the agent the machine's /proc).
                let ns = if exec && !self.private_proc {
                    namespace_flags(self.network_none, !pid_namespace_disabled())
                } else {
                    0
                };
                launch::drop_privileges(&mut cmd, uid, gid, ns);
                cmd
            }
            Launch::Sudo { sudo } => {
                let mut cmd = std::process::Command::new(sudo);
                cmd.args(["-n", "-u", &self.user.name, "--"])
                    .arg(&self.helper_exe)
                    .args(["sandbox-helper", op]);
                // Without a controlling terminal sudo never allocates a pty nor prompts, and the
                // helper inherits none.
                launch::new_session(&mut cmd);
                cmd
            }
        };
        cmd.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .current_dir("/");
        cmd
    }

    /// Run a blocking helper operation: `feed` writes its stdin (from a thread of its own, so
    /// a helper that talks while it listens cannot deadlock us), `read` consumes its stdout.
    /// The helper is killed if the whole exchange takes longer than [`HELPER_DEADLINE`].
    fn run_helper<T: Send>(
        &self,
        op: &'static str,
        feed: impl FnOnce(&mut dyn Write) -> std::io::Result<()> + Send,
        read: impl FnOnce(&mut dyn std::io::Read) -> Result<T, HelperError>,
    ) -> Result<T, HelperError> {
        let helper = self.spawn_helper(op)?;
        self.exchange(op, helper, feed, read)
    }

    /// The helper for `op`, started, with its three pipes.
    fn spawn_helper(&self, op: &'static str) -> Result<Helper, HelperError> {
        let mut cmd = self.helper_command(op, false);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| HelperError::Spawn {
            cmd: self.describe(op),
            source,
        })?;
        let (stdin, stdout, stderr) = take_pipes(&mut child, op)?;
        widen_pipe(&stdin);
        widen_pipe(&stdout);
        Ok((child, stdin, stdout, stderr))
    }

    /// [`Self::run_helper`]'s exchange with a helper already started: the helper's exit is
    /// part of the verdict.
    fn exchange<T: Send>(
        &self,
        op: &'static str,
        (mut child, mut stdin, mut stdout, stderr): Helper,
        feed: impl FnOnce(&mut dyn Write) -> std::io::Result<()> + Send,
        read: impl FnOnce(&mut dyn std::io::Read) -> Result<T, HelperError>,
    ) -> Result<T, HelperError> {
        let watched = crate::watchdog::watch(child.id() as i32, HELPER_DEADLINE);
        let errors = std::thread::spawn(move || read_helper_stderr(stderr));
        let result = std::thread::scope(|s| {
            let writer = s.spawn(move || {
                let r = feed(&mut stdin);
                drop(stdin);
                r
            });
            let result = read(&mut stdout);
            // Drain whatever is left so the helper can finish writing and exit.
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
            exchange_result(op, result, writer.join())
        });
        // What is left once the helper's answer is in: its exit.
        let describe = self.describe(op);
        let end = move || -> Result<HelperEnd, HelperError> {
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
            let stuck = watched.end();
            let stderr = errors.join().unwrap_or_default();
            let status = child.wait().map_err(|source| HelperError::Spawn {
                cmd: describe,
                source,
            })?;
            Ok(HelperEnd {
                status,
                stuck,
                stderr,
            })
        };
        helper_verdict(op, end()?, result)
    }
}

/// Namespaces a root hub puts the helper's children in (the helper's first child becomes
/// PID 1 of a PID namespace, so every process the agent starts dies with it).
fn namespace_flags(network_none: bool, pid: bool) -> libc::c_int {
    #[cfg(target_os = "linux")]
    {
        (if pid { libc::CLONE_NEWPID } else { 0 })
            | if network_none { libc::CLONE_NEWNET } else { 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (network_none, pid);
        0
    }
}

/// `HUNKGATE_SANDBOX_PIDNS=off`: run agents without a PID namespace, as machines without
/// (unprivileged) user namespaces must — so that fallback can be exercised anywhere.
fn pid_namespace_disabled() -> bool {
    std::env::var_os("HUNKGATE_SANDBOX_PIDNS").is_some_and(|v| v == "off")
}

/// The sandbox user's home must exist, be a directory it owns, and be closed to everyone else
/// (the sandboxes of every repository live in it).
pub fn check_home(user: &SandboxUser) -> Result<(), UserError> {
    let problem = |problem: String| UserError::Home {
        name: user.name.clone(),
        path: user.home.clone(),
        problem,
    };
    let meta = std::fs::symlink_metadata(&user.home)
        .map_err(|e| problem(format!("cannot be inspected ({e})")))?;
    if !meta.is_dir() {
        return Err(problem("is not a directory".into()));
    }
    if meta.uid() != user.uid {
        return Err(problem(format!(
            "is owned by uid {}, not by {}",
            meta.uid(),
            user.name
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(problem(format!(
            "has mode {:o}; it must be 700 so other users cannot see the sandboxes",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// The sandbox user must not be able to replace the binary the hub (and the helper) run.
pub fn check_exe(user: &SandboxUser, exe: &Path) -> Result<(), UserError> {
    let access = user.access(exe)?;
    if access.write {
        let why = match access.via {
            Some(dir) => format!("it can write the directory {}", dir.display()),
            None => "it can write the file".into(),
        };
        return Err(UserError::ExeWritable {
            path: exe.to_path_buf(),
            name: user.name.clone(),
            why,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pipe_to_a_helper_is_widened_as_far_as_the_system_allows() {
        use nix::fcntl::{fcntl, FcntlArg};
        let (read, write) = nix::unistd::pipe().unwrap();
        let before = fcntl(&write, FcntlArg::F_GETPIPE_SZ).unwrap();
        widen_pipe(&write);
        let after = fcntl(&read, FcntlArg::F_GETPIPE_SZ).unwrap();
        let max: i32 = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Both ends are one pipe. As root the system's maximum does not bind; below it, a
        // pipe asked for more than the maximum keeps its size.
        let expected = if nix::unistd::geteuid().is_root() || max >= PIPE_BYTES {
            PIPE_BYTES
        } else {
            before
        };
        assert!(
            before < PIPE_BYTES,
            "a new pipe holds {before} bytes already"
        );
        assert!(after >= expected, "widened to {after}, not {expected}");
        // A descriptor that is no pipe is left alone, and nothing fails.
        let file = tempfile::tempfile().unwrap();
        widen_pipe(&file);
    }

    #[test]
    fn access_follows_modes_and_directories() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let me = SandboxUser::current().unwrap();
        // Someone who is neither the owner nor in the group: only "other" bits apply.
        let stranger = SandboxUser {
            name: "stranger".into(),
            uid: 4_000_000,
            gid: 4_000_000,
            groups: vec![4_000_000],
            home: "/nonexistent".into(),
        };
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let a = stranger.access(&file).unwrap();
        assert!(a.read && !a.write, "{a:?}");
        // The owner (positive control) can write.
        assert!(me.access(&file).unwrap().write);
        // A closed directory on the way hides the file entirely.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(stranger.access(&file).unwrap(), Access::default());
        // A world-writable directory on the way lets others replace the file...
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let a = stranger.access(&file).unwrap();
        assert!(a.write && a.via.as_deref() == Some(dir.as_path()), "{a:?}");
        // ...unless it is sticky (like /tmp) and the file is not theirs.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(!stranger.access(&file).unwrap().write);
    }

    #[test]
    fn sudoers_rule_is_one_exact_line() {
        let rule = sudoers_rule(
            "alice",
            "hunkgate-agent",
            Path::new("/usr/local/bin/hunkgate"),
        )
        .unwrap();
        assert_eq!(
            rule,
            "alice ALL=(hunkgate-agent) NOPASSWD: /usr/local/bin/hunkgate sandbox-helper *"
        );
        // Characters with a meaning in sudoers are refused, not escaped.
        assert!(sudoers_rule("alice", "a", Path::new("/opt/my bin/hunkgate")).is_err());
        assert!(sudoers_rule("alice", "a", Path::new("/x/hunk,wise")).is_err());
        assert!(sudoers_rule("alice", "a", Path::new("relative/hunkgate")).is_err());
        assert!(sudoers_rule("al ice", "a", Path::new("/x/hunkgate")).is_err());
    }

    #[test]
    fn sanitize_strips_control_characters() {
        assert_eq!(sanitize("a\x1b[2Jb\nc", 100), "a?[2Jb?c");
        assert_eq!(sanitize("abcdef", 3), "abc");
    }

    #[test]
    fn the_exchange_reports_the_reader_first_then_the_writer() {
        let ok: Result<u8, HelperError> = Ok(1);
        assert!(matches!(
            exchange_result("op", Ok::<u8, HelperError>(1), Ok(Ok(()))),
            Ok(1)
        ));
        let reader = HelperError::Protocol {
            op: "op",
            message: "bad frame".into(),
        };
        let broken_pipe = || Ok(Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)));
        let e = exchange_result::<u8>("op", Err(reader), broken_pipe()).unwrap_err();
        assert!(e.to_string().contains("bad frame"), "{e}");
        let e = exchange_result("op", ok, broken_pipe()).unwrap_err();
        assert!(
            matches!(
                e,
                HelperError::Stream {
                    source: WireError::Io(_),
                    ..
                }
            ),
            "{e}"
        );
        let e = exchange_result("op", Ok::<u8, HelperError>(1), Err(Box::new(()))).unwrap_err();
        assert!(e.to_string().contains("writer thread panicked"), "{e}");
    }

    /// A prepare's record is the agent's word: its directories must be paths hunkgate can
    /// name (or the slot itself), each once, and no more than a sync records.
    #[test]
    fn a_record_with_hostile_directories_is_refused() {
        let entry = crate::store::Entry {
            mode: crate::store::Mode::File,
            oid: gix::hash::ObjectId::null(gix::hash::Kind::Sha1),
        };
        let base: FlatTree = [("a/1.txt".to_string(), entry)].into_iter().collect();
        let st = crate::wire::FileStat::default();
        let with_dirs = |dirs: &[&str]| SyncRecord {
            files: vec![("a/1.txt".into(), st)],
            dirs: dirs.iter().map(|d| (d.to_string(), st)).collect(),
            ..SyncRecord::default()
        };
        // Control: the slot and a directory in it.
        assert!(checked_record(with_dirs(&["", "a"]), &base).is_ok());
        for bad in [
            &["", "a", "a"][..],
            &["../up"],
            &[".git"],
            &["/etc"],
            &["a//b"],
        ] {
            assert!(
                checked_record(with_dirs(bad), &base).is_err(),
                "{bad:?} was taken"
            );
        }
        let many: Vec<String> = (0..5000).map(|i| format!("d{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(checked_record(with_dirs(&many), &base).is_err());
    }

    /// A record's files must be base paths, each once, in the base's order (as the helper
    /// lists them); any subset of the base in that order is taken.
    #[test]
    fn a_record_with_hostile_files_is_refused() {
        let entry = crate::store::Entry {
            mode: crate::store::Mode::File,
            oid: gix::hash::ObjectId::null(gix::hash::Kind::Sha1),
        };
        let base: FlatTree = ["a", "b/1", "b/2", "c"]
            .into_iter()
            .map(|p| (p.to_string(), entry))
            .collect();
        let st = crate::wire::FileStat::default();
        let with_files = |files: &[&str]| SyncRecord {
            files: files.iter().map(|f| (f.to_string(), st)).collect(),
            ..SyncRecord::default()
        };
        for good in [&["a", "b/1", "b/2", "c"][..], &["b/2"], &["a", "c"], &[]] {
            assert!(
                checked_record(with_files(good), &base).is_ok(),
                "{good:?} was refused"
            );
        }
        for bad in [
            &["a", "x"][..],
            &["b"],
            &["a", "a"],
            &["c", "a"],
            &["b/2", "b/1"],
            &["../a"],
        ] {
            assert!(
                checked_record(with_files(bad), &base).is_err(),
                "{bad:?} was taken"
            );
        }
    }

    /// A kept helper's stderr is read for as long as it lives: one that says far more than a
    /// pipe holds never blocks on it, and its last words are kept.
    #[test]
    fn a_long_lived_helpers_stderr_never_fills_and_its_tail_is_kept() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 3000 ]; do echo \"line $i of a chatty helper\" >&2; i=$((i+1)); done; echo last words >&2",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let tail = standby::StderrTail::drain(child.stderr.take().unwrap());
        // Over 80 KiB written: it exits only if its stderr is being read.
        assert!(child.wait().unwrap().success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !tail.said().ends_with("last words") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let said = tail.said();
        assert!(
            said.ends_with("last words"),
            "{}",
            &said[said.len().saturating_sub(200)..]
        );
        assert!(
            said.len() <= 2 * standby::StderrTail::KEEP,
            "{} bytes kept",
            said.len()
        );
        assert!(!said.contains("line 0 of"), "the beginning is dropped");
    }

    #[test]
    fn stuck_or_failed_helpers_are_errors_whatever_they_sent() {
        use std::os::unix::process::ExitStatusExt;
        let end = |raw, stuck| HelperEnd {
            status: std::process::ExitStatus::from_raw(raw),
            stuck,
            stderr: "helper says".into(),
        };
        // Positive control: a helper that exited 0 in time gives what was read.
        assert!(matches!(
            helper_verdict("op", end(0, false), Ok::<u8, HelperError>(7)),
            Ok(7)
        ));
        let e = helper_verdict("op", end(9, true), Ok::<u8, HelperError>(7)).unwrap_err();
        assert!(matches!(e, HelperError::Stuck { op: "op", .. }), "{e}");
        let e = helper_verdict("op", end(1 << 8, false), Ok::<u8, HelperError>(7)).unwrap_err();
        assert!(
            matches!(&e, HelperError::Failed { stderr, .. } if stderr == "helper says"),
            "{e}"
        );
        let stream = HelperError::Stream {
            op: "op",
            source: WireError::Io(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
            stderr: String::new(),
        };
        let e = helper_verdict::<u8>("op", end(0, false), Err(stream)).unwrap_err();
        assert!(e.to_string().ends_with("(helper said: helper says)"), "{e}");
    }

    /// A snapshot stream names only what changed: a base path it leaves out is unchanged, a
    /// `Gone` one deleted. Everything in it is still the agent's word.
    #[test]
    fn a_snapshot_stream_is_read_as_changes_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let file = |bytes: &[u8]| Entry {
            mode: Mode::File,
            oid: store.write_blob(bytes).unwrap(),
        };
        let base: FlatTree = [
            ("same.txt", file(b"same\n")),
            ("edited.txt", file(b"old\n")),
            ("rewritten.txt", file(b"as before\n")),
            ("deleted.txt", file(b"bye\n")),
            ("fifo", file(b"was a file\n")),
        ]
        .into_iter()
        .map(|(p, e)| (p.to_string(), e))
        .collect();
        let stream = |frames: &[Frame]| {
            let mut buf = Vec::new();
            for f in frames {
                wire::write_frame(&mut buf, f).unwrap();
            }
            buf
        };
        let read = |frames: &[Frame]| {
            let mut objects = store.batch();
            let limits = ReadLimits::only_file_cap(1 << 20);
            let r = stream(frames);
            let back = read_snapshot(&mut r.as_slice(), &mut objects, &base, limits)?;
            objects.finish()?;
            Ok::<_, HelperError>(back)
        };
        let f = |path: &str, bytes: &[u8]| Frame::File {
            path: path.into(),
            bytes: bytes.to_vec(),
            executable: false,
        };
        let gone = |path: &str| Frame::Gone { path: path.into() };
        let back = read(&[
            f("edited.txt", b"new\n"),
            f("rewritten.txt", b"as before\n"),
            f("added.txt", b"added\n"),
            Frame::Unchanged {
                path: "same.txt".into(),
            },
            gone("deleted.txt"),
            Frame::Skipped {
                path: "fifo".into(),
                reason: "fifo skipped".into(),
            },
            Frame::File {
                path: "run.sh".into(),
                bytes: b"#!/bin/sh\n".to_vec(),
                executable: true,
            },
            Frame::End,
        ])
        .unwrap();
        let changed: Vec<(&str, Option<Vec<u8>>)> = back
            .changes
            .iter()
            .map(|(p, e)| (p.as_str(), e.map(|e| store.read_blob(e.oid).unwrap())))
            .collect();
        assert_eq!(
            changed,
            [
                ("added.txt", Some(b"added\n".to_vec())),
                ("deleted.txt", None),
                ("edited.txt", Some(b"new\n".to_vec())),
                ("fifo", None),
                ("run.sh", Some(b"#!/bin/sh\n".to_vec())),
            ]
        );
        let run = back.changes["run.sh"].unwrap();
        assert_eq!(run.mode, Mode::Executable, "its mode too");
        assert_eq!(back.skipped.len(), 1);
        assert_eq!(back.skipped[0].path, "fifo");
        // An empty stream: nothing changed.
        assert_eq!(read(&[Frame::End]).unwrap(), ReadBack::default());

        let refused = |frames: &[Frame], why: &str| {
            let e = read(frames).unwrap_err().to_string();
            assert!(e.contains(why), "{frames:?}: {e}");
        };
        refused(
            &[gone("nowhere.txt"), Frame::End],
            "gone but not in the base",
        );
        refused(
            &[
                Frame::Unchanged {
                    path: "nowhere.txt".into(),
                },
                Frame::End,
            ],
            "unchanged but not in the base",
        );
        refused(
            &[f("edited.txt", b"a"), gone("edited.txt"), Frame::End],
            "sent twice",
        );
        refused(&[f("../escape", b"x"), Frame::End], "'..' component");
        refused(&[gone(".git/config"), Frame::End], "points into .git");
        // Cut short: an error, never "everything after the cut is unchanged".
        refused(&[f("edited.txt", b"new\n")], "ended early");
    }

    /// A hostile helper's stream is bounded as a whole: what differs from the base, and the
    /// new content the store takes, stop the read at the limits, however much more it sends.
    #[test]
    fn a_snapshot_stream_stops_at_the_read_back_limits() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let named: Vec<(String, String)> = (0..5)
            .map(|i| (format!("base{i}"), format!("base {i}\n")))
            .collect();
        let files: Vec<(&str, Mode, &str)> = named
            .iter()
            .map(|(p, body)| (p.as_str(), Mode::File, body.as_str()))
            .collect();
        let base = crate::store::test_support::tree(&store, &files);
        let f = |path: String, bytes: Vec<u8>| Frame::File {
            path,
            bytes,
            executable: false,
        };
        // Frames to no end in sight (an end after 1,000, so that a reader that does not stop
        // by itself fails rather than hangs). Counts the frames taken.
        struct Endless<F: FnMut(usize) -> Frame> {
            make: F,
            sent: usize,
            buf: Vec<u8>,
            at: usize,
        }
        impl<F: FnMut(usize) -> Frame> std::io::Read for Endless<F> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.at == self.buf.len() {
                    self.buf.clear();
                    self.at = 0;
                    let frame = match self.sent {
                        1000.. => Frame::End,
                        n => (self.make)(n),
                    };
                    wire::write_frame(&mut self.buf, &frame)?;
                    self.sent += 1;
                }
                let n = out.len().min(self.buf.len() - self.at);
                out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
                self.at += n;
                Ok(n)
            }
        }
        let read = |limits: ReadLimits, make: &mut dyn FnMut(usize) -> Frame| {
            let mut endless = Endless {
                make,
                sent: 0,
                buf: Vec::new(),
                at: 0,
            };
            let mut objects = store.batch();
            let got = read_snapshot(&mut endless, &mut objects, &base, limits);
            (got, endless.sent)
        };
        let limits = |files, bytes| ReadLimits {
            file_cap: 1 << 20,
            files,
            bytes,
        };
        // New files, each its own content: 10 files allowed, the 11th stops it.
        let (got, sent) = read(limits(10, u64::MAX), &mut |i| {
            f(format!("new/{i}"), format!("new {i}\n").into_bytes())
        });
        assert!(
            matches!(
                got,
                Err(HelperError::OverLimit(OverLimit::Files { limit: 10 }))
            ),
            "{got:?}"
        );
        assert!(sent <= 12, "read {sent} frames");
        // Names it cannot carry count too (each is reported): the stream stops there as well.
        let (got, sent) = read(limits(10, u64::MAX), &mut |i| Frame::Skipped {
            path: format!("odd/{i}"),
            reason: "not UTF-8".into(),
        });
        assert!(matches!(
            got,
            Err(HelperError::OverLimit(OverLimit::Files { .. }))
        ));
        assert!(sent <= 12, "read {sent} frames");
        // New content: 1 KiB files against 10 KiB, the 11th is not taken.
        let (got, sent) = read(limits(usize::MAX, 10 << 10), &mut |i| {
            f(format!("big/{i}"), vec![b'a' + (i % 26) as u8; 1024])
        });
        let e = got.unwrap_err();
        assert!(
            matches!(e, HelperError::Store(StoreError::OverLimit(OverLimit::Bytes { limit })) if limit == 10 << 10),
            "{e:?}"
        );
        assert_eq!(
            SandboxError::from(e).over_limit(),
            Some(OverLimit::Bytes { limit: 10 << 10 })
        );
        assert!(sent <= 12, "read {sent} frames");

        // Positive controls: at the limits, the whole stream is read. A file sent with its
        // base content differs in nothing and counts for nothing, nor does content the store
        // has (the base's, under another name).
        let mut frames: Vec<Frame> = (0..5)
            .map(|i| f(format!("base{i}"), format!("base {i}\n").into_bytes()))
            .collect();
        frames.push(f("copy".into(), b"base 0\n".to_vec()));
        frames.extend((0..9).map(|i| f(format!("new/{i}"), vec![b'a' + i as u8; 1024])));
        frames.push(Frame::End);
        let mut frames = frames.into_iter();
        let (got, sent) = read(limits(10, 9 << 10), &mut |_| frames.next().unwrap());
        let back = got.unwrap();
        assert_eq!(back.changes.len(), 10);
        assert_eq!(sent, 16);
    }
}

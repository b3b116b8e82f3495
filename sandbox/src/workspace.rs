//! The sandbox clone: the directory an agent works in.
//!
//! Every agent-facing operation goes through [`Sandbox`], so the isolation mode can change (the
//! hub's own user with [`LocalSandbox`], a dedicated sandbox user with
//! [`UserSandbox`](crate::user::UserSandbox)) without the hub noticing.
//!
//! **Layer:** the sandbox abstraction. It imports [`crate::sync`] and what is below it
//! (`snapshot`, `statcache`, `store`, `beneath`, `wire`) and [`crate::tools`]'s request
//! types — nothing of the user-isolation side (`user`, `helper`), which builds on it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::snapshot::{snapshot_sandbox, Snapshot, SnapshotError};
use crate::store::{FlatTree, Store, StoreError};
use crate::sync::{recall, record_for, sync_slot, SyncError};
use crate::tools::{ToolReply, ToolRequest};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("preparing sandbox {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// What an isolation backend built on this trait reports (the sandbox helper's errors,
    /// [`crate::user::HelperError`]), kept as the source.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

/// How an agent process is started and, above all, stopped.
pub struct AgentCommand {
    pub command: tokio::process::Command,
    pub stop: Stop,
}

/// How the hub ends an agent's whole process tree.
#[derive(Debug)]
pub enum Stop {
    /// The command leads a new process group that the hub signals itself (same user only).
    ProcessGroup,
    /// The command is a supervisor that the hub cannot signal past: `request` is written to
    /// its stdin, which then stays open as a lifeline. Closing it (cancel, timeout, or the hub
    /// dying, even by kill -9) or SIGTERM makes the supervisor kill the agent's whole tree.
    Lifeline { request: Vec<u8> },
}

/// Where and as whom an agent runs.
pub trait Sandbox: Send + Sync + std::fmt::Debug {
    /// The directory the agent sees as its repository root.
    fn workdir(&self) -> &Path;
    /// Make the sandbox hold exactly `base` (every file that is not ignored), keeping ignored
    /// files such as build caches so the agent's builds stay incremental.
    fn prepare(&self, store: &Store, base: &FlatTree) -> Result<(), SandboxError>;
    /// Read the sandbox as data into the store.
    fn snapshot(&self, store: &Store, base: &FlatTree, cap: u64) -> Result<Snapshot, SandboxError>;
    /// A plain command that runs `argv` inside the sandbox, as the sandbox's user, with exactly
    /// `env` as its environment (short helper commands such as jj; the caller owns stdout and
    /// stderr, and under user isolation stdin is taken by the helper's request).
    fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command;
    /// How to run the agent `argv` inside the sandbox with exactly `env`, for at most `timeout`
    /// (the hub enforces the timeout too; a supervisor enforces it even if the hub hangs), and
    /// how to kill its whole process tree.
    fn agent_command(
        &self,
        argv: &[String],
        env: &[(String, String)],
        _timeout: Duration,
    ) -> AgentCommand {
        AgentCommand {
            command: self.command(argv, env),
            stop: Stop::ProcessGroup,
        }
    }
    /// Run one of the built-in agent's file tools in the sandbox, as the sandbox's user.
    fn tool(&self, request: &ToolRequest) -> Result<ToolReply, SandboxError>;
    /// A short description for logs and status lines.
    fn isolation(&self) -> String;
}

/// Isolation `none`: the agent runs as the hub's own user in a separate directory. Good for
/// development; it keeps the agent out of the checkout only by convention.
#[derive(Debug)]
pub struct LocalSandbox {
    dir: PathBuf,
}

impl LocalSandbox {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }
}

impl Sandbox for LocalSandbox {
    fn workdir(&self) -> &Path {
        &self.dir
    }

    fn prepare(&self, store: &Store, base: &FlatTree) -> Result<(), SandboxError> {
        // Same user: the sandbox's .git borrows the store's objects instead of copying them.
        let objects = store.path().join("objects");
        sync_slot(&self.dir, base, Some(&objects), |oid| {
            Ok(Some(store.read_blob(oid)?))
        })?;
        Ok(())
    }

    fn snapshot(&self, store: &Store, base: &FlatTree, cap: u64) -> Result<Snapshot, SandboxError> {
        let synced = recall(&self.dir);
        let record = record_for(synced.as_deref(), base);
        Ok(snapshot_sandbox(&self.dir, base, store, cap, record)?)
    }

    fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&self.dir)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn tool(&self, request: &ToolRequest) -> Result<ToolReply, SandboxError> {
        Ok(crate::tools::execute(
            &self.dir,
            &request.tool,
            &request.limits,
        ))
    }

    fn isolation(&self) -> String {
        "none (same user)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Entry, Mode};

    #[test]
    fn prepare_brings_sandbox_to_exactly_the_base() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        let mut base = FlatTree::new();
        let a = store.write_blob(b"a\n").unwrap();
        base.insert(
            "a.txt".into(),
            Entry {
                mode: Mode::File,
                oid: a,
            },
        );
        base.insert(
            ".gitignore".into(),
            Entry {
                mode: Mode::File,
                oid: store.write_blob(b"target/\n").unwrap(),
            },
        );
        base.insert(
            "bin/x".into(),
            Entry {
                mode: Mode::Executable,
                oid: a,
            },
        );
        let sb = LocalSandbox::new(tmp.path().join("sb"));
        sb.prepare(&store, &base).unwrap();
        // An agent run leaves things behind.
        std::fs::write(sb.workdir().join("a.txt"), "changed\n").unwrap();
        std::fs::write(sb.workdir().join("stray.txt"), "x\n").unwrap();
        std::fs::create_dir(sb.workdir().join("target")).unwrap();
        std::fs::write(sb.workdir().join("target/cache"), "keep\n").unwrap();
        std::fs::remove_file(sb.workdir().join("bin/x")).unwrap();
        sb.prepare(&store, &base).unwrap();
        assert_eq!(std::fs::read(sb.workdir().join("a.txt")).unwrap(), b"a\n");
        assert!(!sb.workdir().join("stray.txt").exists());
        assert!(
            sb.workdir().join("target/cache").exists(),
            "ignored caches survive"
        );
        let snap = sb.snapshot(&store, &base, u64::MAX).unwrap();
        assert_eq!(snap.tree, base);
        // The agent finds a repository whose HEAD is the base and whose status is clean.
        let out = std::process::Command::new("git")
            .current_dir(sb.workdir())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["status", "--porcelain"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "");
        let out = std::process::Command::new("git")
            .current_dir(sb.workdir())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["log", "--format=%s"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hunkgate: your checkout as of this run\n"
        );
        // Its blobs are there (borrowed from the store), so the agent's `git diff` works.
        let out = std::process::Command::new("git")
            .current_dir(sb.workdir())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["cat-file", "-p", "HEAD:a.txt"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a\n");
    }
}

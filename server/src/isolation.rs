//! Who the agent runs as: choosing the isolation mode at `serve`, the startup checks that go
//! with it, and `hunkgate setup`, which creates and checks the sandbox user.
//!
//! The mechanics (the helper, privilege drop, sudo, namespaces) live in
//! [`hunkgate_sandbox::user`] and [`hunkgate_sandbox::helper`].

use std::path::Path;

use anyhow::{bail, Context};
use hunkgate_sandbox::user::{SandboxUser, UserIsolation};
use sha2::{Digest, Sha256};

/// `--isolation` / `isolation = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationMode {
    /// The agent runs as the sandbox user (the default once `hunkgate setup` was run).
    User,
    /// The agent runs as you: development only.
    None,
}

/// `--agent-network` / `agent_network = "..."`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentNetwork {
    /// The machine's network, like any process of the sandbox user.
    Host,
    /// A network namespace of its own (Linux): no network at all, not even the hub's loopback
    /// address, so such an agent cannot call `hunkgate publish` or `status` either.
    None,
}

/// The resolved isolation of a hub.
#[derive(Debug, Clone, Default)]
pub enum Isolation {
    /// The agent runs as the hub's own user (`LocalSandbox`).
    #[default]
    None,
    /// The agent runs as a verified sandbox user.
    User(UserIsolation),
}

/// Decide the isolation for `serve`: `user` when asked for, or by default when the sandbox user
/// exists (then everything must check out, or the hub refuses to start); `none` when asked for,
/// or when there is no sandbox user — with a loud warning either way.
pub fn resolve(
    mode: Option<IsolationMode>,
    user: &str,
    network: AgentNetwork,
    agent_env: &[String],
    agent_path: Vec<String>,
) -> anyhow::Result<Isolation> {
    check_agent_path(&agent_path)?;
    let network_none = network == AgentNetwork::None;
    let use_user = match mode {
        Some(IsolationMode::User) => true,
        Some(IsolationMode::None) => false,
        None => SandboxUser::lookup(user)?.is_some(),
    };
    if !use_user {
        if network_none {
            bail!("--agent-network none needs --isolation user (run `sudo hunkgate setup` first)");
        }
        let why = if mode.is_some() {
            "--isolation none".to_string()
        } else {
            format!("the sandbox user {user:?} does not exist (`sudo hunkgate setup` creates it)")
        };
        for line in [
            format!("WARNING: {why}: agents run as YOU, not as a sandbox user."),
            "WARNING: an agent can read your hub token, your SSH keys and every file you can,"
                .into(),
            "WARNING: and write your checkout directly. Use this for development only.".into(),
        ] {
            eprintln!("hunkgate: {line}");
        }
        if !agent_path.is_empty() {
            eprintln!("hunkgate: agent_path is for --isolation user: without isolation agents get your own PATH");
        }
        return Ok(Isolation::None);
    }
    if !agent_env.is_empty() {
        bail!(
            "--agent-env {} would hand the hub's environment to the sandbox user; under --isolation user an agent that needs a key reads it from its own configuration in {} (e.g. {}/.config/...)",
            agent_env.join(", "),
            home_hint(user),
            home_hint(user)
        );
    }
    let iso = UserIsolation::establish(user, network_none).with_context(|| {
        format!("--isolation user (sandbox user {user:?}); `hunkgate setup --check --user {user}` says what is missing, `--isolation none` runs without isolation")
    })?;
    let iso = iso.with_agent_path(agent_path);
    for line in iso.caveats() {
        eprintln!("hunkgate: WARNING: {line}");
    }
    Ok(Isolation::User(iso))
}

/// `agent_path` entries must be absolute directories that a `PATH` can hold (no `:`): the
/// agent runs in its sandbox, where a relative one would name its own files.
fn check_agent_path(dirs: &[String]) -> anyhow::Result<()> {
    for d in dirs {
        if !d.starts_with('/') || d.contains(':') || d.contains('\0') {
            bail!("agent_path {d:?}: each entry must be an absolute directory without `:` (e.g. \"/opt/agents/bin\")");
        }
    }
    Ok(())
}

pub(crate) fn home_hint(user: &str) -> String {
    SandboxUser::lookup(user)
        .ok()
        .flatten()
        .map(|u| u.home.display().to_string())
        .unwrap_or_else(|| format!("~{user}"))
}

/// The name of this hub's sandboxes inside the sandbox user's home: the state dir's name plus a
/// hash of the hub's uid and the state dir, so two hubs (or two users) never share a sandbox.
pub fn sandbox_key(state_dir: &Path) -> String {
    let canonical = state_dir
        .canonicalize()
        .unwrap_or_else(|_| state_dir.to_path_buf());
    let mut name: String = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    if name.is_empty() {
        name = "hub".into();
    }
    let mut h = Sha256::new();
    h.update(nix::unistd::getuid().as_raw().to_be_bytes());
    h.update(canonical.as_os_str().as_encoded_bytes());
    format!("{name}-{}", &hex::encode(h.finalize())[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_path_entries_must_be_absolute_directories() {
        assert!(check_agent_path(&["/opt/agents/bin".into(), "/usr/local/bin".into()]).is_ok());
        for bad in ["bin", "./bin", "", "/a:/b"] {
            let err = check_agent_path(&[bad.into()]).unwrap_err().to_string();
            assert!(
                err.contains("agent_path") && err.contains("absolute"),
                "{err}"
            );
        }
    }

    #[test]
    fn sandbox_keys_are_plain_and_distinct() {
        let a = sandbox_key(Path::new("/tmp/x/my proj.state"));
        let b = sandbox_key(Path::new("/tmp/y/my proj.state"));
        assert_ne!(a, b);
        assert!(a.starts_with("my_proj_state-"), "{a}");
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c)));
    }
}

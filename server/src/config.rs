//! Configuration: flags > environment > config file > built-in defaults.
//!
//! Defaults work with no flags at all: `hunkwise serve` inside any git repository binds
//! 127.0.0.1:4097 and keeps its state under `$XDG_STATE_HOME/hunkwise/<repo>-<hash>/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 4097;
pub const DEFAULT_AGENT_TIMEOUT_SECS: u64 = 30 * 60;

/// The optional TOML file (`$XDG_CONFIG_HOME/hunkwise/config.toml`, or `--config`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub host: Option<String>,
    pub port: Option<u16>,
    /// Default agent command template, e.g. `claude -p {prompt}`.
    pub agent: Option<String>,
    pub agent_timeout_secs: Option<u64>,
    /// Names of environment variables passed through to agents (everything else is scrubbed).
    #[serde(default)]
    pub agent_env: Vec<String>,
    /// Origins allowed to talk to the hub (browser extensions, web UIs). Empty: none.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Mirror each run's base and head commits into the repository as
    /// `refs/hunkwise/runs/<id>/{base,head}` (for `git diff` or `:Gitsigns change_base`).
    #[serde(default)]
    pub mirror_refs: bool,
    /// "git" or "jj" (default: jj when the repository has a .jj directory).
    pub vcs: Option<hunkwise_sandbox::jj::Vcs>,
    /// "user" or "none" (default: "user" when the sandbox user exists).
    pub isolation: Option<crate::isolation::IsolationMode>,
    /// The sandbox user agents run as (default `hunkwise-agent`).
    pub sandbox_user: Option<String>,
    /// "host" (default) or "none": a network namespace of its own for the agent (Linux).
    pub agent_network: Option<crate::isolation::AgentNetwork>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{var}={value:?} is not a valid port number")]
    BadPort { var: String, value: String },
    #[error("no home directory: set HOME or XDG_STATE_HOME, or pass --state-dir")]
    NoHome,
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn xdg(var: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home().map(|h| h.join(fallback)))
}

pub fn default_config_path() -> Option<PathBuf> {
    xdg("XDG_CONFIG_HOME", ".config").map(|d| d.join("hunkwise").join("config.toml"))
}

/// Load the config file: an explicit path must exist; the default path may be absent.
pub fn load_file(explicit: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let (path, required) = match explicit {
        Some(p) => (p.to_path_buf(), true),
        None => match std::env::var_os("HUNKWISE_CONFIG") {
            Some(p) => (PathBuf::from(p), true),
            None => match default_config_path() {
                Some(p) => (p, false),
                None => return Ok(FileConfig::default()),
            },
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
            return Ok(FileConfig::default())
        }
        Err(e) => {
            return Err(ConfigError::File {
                path,
                message: e.to_string(),
            })
        }
    };
    toml::from_str(&text).map_err(|e| ConfigError::File {
        path,
        message: e.to_string(),
    })
}

/// The first of several environment variables that is set (the seed's names are aliases).
fn env_first(names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|n| {
        std::env::var(n)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| (n.to_string(), v))
    })
}

pub fn resolve_host(flag: Option<String>, file: &FileConfig) -> String {
    flag.or_else(|| env_first(&["HUNKWISE_HOST", "SUGGESTION_MANAGER_HOST"]).map(|(_, v)| v))
        .or_else(|| file.host.clone())
        .unwrap_or_else(|| DEFAULT_HOST.to_string())
}

pub fn resolve_port(flag: Option<u16>, file: &FileConfig) -> Result<u16, ConfigError> {
    if let Some(p) = flag {
        return Ok(p);
    }
    if let Some((var, value)) = env_first(&["HUNKWISE_PORT", "SUGGESTION_MANAGER_PORT"]) {
        return value
            .parse()
            .map_err(|_| ConfigError::BadPort { var, value });
    }
    Ok(file.port.unwrap_or(DEFAULT_PORT))
}

/// `$XDG_STATE_HOME/hunkwise/<repo-name>-<short hash of the repo path>/`.
pub fn default_state_dir(repo: &Path) -> Result<PathBuf, ConfigError> {
    let base = xdg("XDG_STATE_HOME", ".local/state").ok_or(ConfigError::NoHome)?;
    let canonical = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
    let name = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    let hash = hex::encode(Sha256::digest(canonical.as_os_str().as_encoded_bytes()));
    Ok(base
        .join("hunkwise")
        .join(format!("{name}-{}", &hash[..12])))
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub repo: PathBuf,
    pub host: String,
    pub port: u16,
    pub state_dir: PathBuf,
    pub agent: Option<String>,
    pub agent_timeout: Duration,
    pub agent_env: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub mirror_refs: bool,
    pub vcs: hunkwise_sandbox::jj::Vcs,
    /// Who agents run as (see [`crate::isolation`]).
    pub isolation: crate::isolation::Isolation,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_dir_is_named_after_the_repo_and_stable() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("my-project");
        std::fs::create_dir(&repo).unwrap();
        let a = default_state_dir(&repo).unwrap();
        let b = default_state_dir(&repo.join(".")).unwrap();
        assert_eq!(a, b);
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("my-project-") && name.len() == "my-project-".len() + 12,
            "{name}"
        );
    }

    #[test]
    fn config_file_errors_name_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("c.toml");
        std::fs::write(&p, "port = \"nope\"\n").unwrap();
        let err = load_file(Some(&p)).unwrap_err().to_string();
        assert!(err.contains("c.toml"), "{err}");
        std::fs::write(&p, "port = 5000\nagent = \"claude -p {prompt}\"\n").unwrap();
        let cfg = load_file(Some(&p)).unwrap();
        assert_eq!(cfg.port, Some(5000));
        assert_eq!(resolve_port(Some(6000), &cfg).unwrap(), 6000);
    }
}

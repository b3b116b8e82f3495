//! Configuration: flags > environment > config file > built-in defaults.
//!
//! Defaults work with no flags at all: `hunkgate serve` inside any git repository binds
//! 127.0.0.1:4097 (any free port when that one is taken) and keeps its state under `$XDG_STATE_HOME/hunkgate/<repo>-<hash>/`.

pub mod checkers;
pub mod checks;
pub mod context;
pub mod provider;
pub mod retention;
pub mod routing;
pub mod sensitive;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 4097;
pub const DEFAULT_AGENT_TIMEOUT_SECS: u64 = 30 * 60;

/// The optional TOML file (`$XDG_CONFIG_HOME/hunkgate/config.toml`, or `--config`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub host: Option<String>,
    pub port: Option<u16>,
    /// Default agent command template, e.g. `claude -p {prompt}`.
    pub agent: Option<String>,
    /// `[acp]`: the default agent spoken to over the Agent Client Protocol, and its policy.
    #[serde(default)]
    pub acp: AcpFile,
    pub agent_timeout_secs: Option<u64>,
    /// Names of environment variables passed through to agents (everything else is scrubbed).
    #[serde(default)]
    pub agent_env: Vec<String>,
    /// Directories put first on the agent's PATH under `--isolation user` (absolute, each one
    /// searchable by the sandbox user), e.g. where its program is installed.
    #[serde(default)]
    pub agent_path: Vec<String>,
    /// Origins allowed to talk to the hub (browser extensions, web UIs). Empty: none.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Mirror each run's base and head commits into the repository as
    /// `refs/hunkgate/runs/<id>/{base,head}` (for `git diff` or `:Gitsigns change_base`).
    #[serde(default)]
    pub mirror_refs: bool,
    /// "git" or "jj" (default: jj when the repository has a .jj directory).
    pub vcs: Option<hunkgate_sandbox::jj::Vcs>,
    /// "user" or "none" (default: "user" when the sandbox user exists).
    pub isolation: Option<crate::isolation::IsolationMode>,
    /// The sandbox user agents run as (default `hunkgate-agent`).
    pub sandbox_user: Option<String>,
    /// "host" (default) or "none": a network namespace of its own for the agent (Linux).
    pub agent_network: Option<crate::isolation::AgentNetwork>,
    /// The built-in agent's model server.
    #[serde(default)]
    pub provider: ProviderFile,
    /// `[providers.<name>]`: more model servers, by name ([`routing`]).
    #[serde(default)]
    pub providers: std::collections::BTreeMap<String, ProviderFile>,
    /// `[routing]`: which provider and model a built-in run gets ([`routing`]).
    #[serde(default)]
    pub routing: routing::RoutingFile,
    /// The built-in agent's limits.
    #[serde(default)]
    pub limits: LimitsFile,
    /// How long finished work is kept, and how much of it ([`retention`]).
    #[serde(default)]
    pub retention: retention::RetentionFile,
    /// How reviews go ([`ReviewFile`]).
    #[serde(default)]
    pub review: ReviewFile,
    /// Which files never enter a sandbox nor a suggestion ([`sensitive`]).
    #[serde(default)]
    pub sensitive: sensitive::SensitiveFile,
    /// Which web pages may be pinned to a session, and how much of them is kept ([`context`]).
    #[serde(default)]
    pub context: context::ContextFile,
    /// `[[check]]`: the checkers run on each run's tree and base ([`checkers`]).
    #[serde(default)]
    pub check: Vec<checkers::CheckFile>,
    /// `[accel]`: an off switch for each accelerator (see [`hunkgate_sandbox::accel`]).
    #[serde(default)]
    pub accel: hunkgate_sandbox::accel::Accel,
}

/// `[acp]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpFile {
    /// The ACP agent's command, e.g. `opencode acp` (the default agent when no `agent` is set).
    pub command: Option<String>,
    /// Tool kinds whose permission questions are put to the reviewer (default: none, every
    /// question is allowed: the sandbox is the boundary).
    #[serde(default)]
    pub ask: Vec<String>,
    /// How long a question waits for the reviewer before the agent is told "reject once"
    /// (default 600).
    pub ask_timeout_secs: Option<u64>,
    /// How long an ACP agent is kept alive, idle, after a run of its session ended, for the
    /// session's next run to reach the same process and ACP session (default 300; 0: one
    /// process per run).
    pub keep_alive_secs: Option<u64>,
}

/// ACP's tool kinds: what `[acp] ask` may name.
pub const ACP_TOOL_KINDS: &[&str] = &[
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
];

/// How long an ACP permission question waits for the reviewer by default.
pub const DEFAULT_ACP_ASK_TIMEOUT_SECS: u64 = 600;
/// How long an idle ACP agent is kept for its session's next run by default, and at most (a
/// day: a kept agent's process lives no longer, see `runs::acp_live::MAX_LIFE`).
pub const DEFAULT_ACP_KEEP_ALIVE_SECS: u64 = 300;
pub const MAX_ACP_KEEP_ALIVE_SECS: u64 = 24 * 60 * 60;

/// ACP agents, resolved.
#[derive(Debug, Clone, Default)]
pub struct Acp {
    pub command: Option<String>,
    pub ask: Vec<String>,
    pub ask_timeout: Duration,
    /// How long an idle agent waits for its session's next run (zero: none is kept).
    pub keep_alive: Duration,
}

impl AcpFile {
    /// With the flags (which win): the command, the kinds asked about (flags add to the
    /// file's), the question timeout, the keep-alive. An unknown kind is an error naming the
    /// known ones.
    pub fn resolve(
        &self,
        command: Option<String>,
        ask: Vec<String>,
        ask_timeout_secs: Option<u64>,
        keep_alive_secs: Option<u64>,
    ) -> anyhow::Result<Acp> {
        let mut kinds = self.ask.clone();
        kinds.extend(ask);
        if let Some(bad) = kinds.iter().find(|k| !ACP_TOOL_KINDS.contains(&k.as_str())) {
            anyhow::bail!(
                "ACP permission kind {bad:?} is not one of ACP's tool kinds: {}",
                ACP_TOOL_KINDS.join(", ")
            );
        }
        Ok(Acp {
            command: command.or_else(|| self.command.clone()),
            ask: kinds,
            ask_timeout: Duration::from_secs(
                ask_timeout_secs
                    .or(self.ask_timeout_secs)
                    .unwrap_or(DEFAULT_ACP_ASK_TIMEOUT_SECS)
                    .max(1),
            ),
            keep_alive: Duration::from_secs(
                keep_alive_secs
                    .or(self.keep_alive_secs)
                    .unwrap_or(DEFAULT_ACP_KEEP_ALIVE_SECS)
                    .min(MAX_ACP_KEEP_ALIVE_SECS),
            ),
        })
    }
}

/// `[review]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewFile {
    /// A hunk deleting more lines than this is destructive: an accept-all leaves it pending
    /// unless confirmed (default
    /// [`crate::model::suggestion::DEFAULT_DESTRUCTIVE_DELETED_LINES`]).
    pub destructive_deleted_lines: Option<usize>,
    /// A hunk showing more lines than this is cut into parts, or marked oversized (default
    /// [`crate::model::sizing::DEFAULT_MAX_HUNK_LINES`], seed 000 §23).
    pub max_hunk_lines: Option<usize>,
    /// A hunk showing more bytes than this is cut into parts, or marked oversized (default
    /// [`crate::model::sizing::DEFAULT_MAX_HUNK_BYTES`], seed 000 §23).
    pub max_hunk_bytes: Option<usize>,
}

impl ReviewFile {
    /// The settings, defaults where the file says nothing. A hunk limit of 0 would leave no
    /// hunk within it: it is read as 1.
    pub fn resolve(&self) -> Review {
        use crate::model::sizing::{DEFAULT_MAX_HUNK_BYTES, DEFAULT_MAX_HUNK_LINES};
        Review {
            destructive_deleted_lines: self
                .destructive_deleted_lines
                .unwrap_or(crate::model::suggestion::DEFAULT_DESTRUCTIVE_DELETED_LINES),
            hunk_limits: hunkgate_patch::Limits {
                lines: self.max_hunk_lines.unwrap_or(DEFAULT_MAX_HUNK_LINES).max(1),
                bytes: self.max_hunk_bytes.unwrap_or(DEFAULT_MAX_HUNK_BYTES).max(1),
            },
        }
    }
}

/// The `[review]` settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub destructive_deleted_lines: usize,
    /// `max_hunk_lines` and `max_hunk_bytes`: what a hunk may show before it is cut.
    pub hunk_limits: hunkgate_patch::Limits,
}

impl Default for Review {
    fn default() -> Self {
        ReviewFile::default().resolve()
    }
}

/// `[provider]`: any OpenAI-compatible chat-completions server.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderFile {
    /// e.g. `http://127.0.0.1:11434/v1` (Ollama) or `https://api.openai.com/v1`.
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// Name of the environment variable holding the API key (default HUNKGATE_API_KEY).
    pub api_key_env: Option<String>,
    /// A file (mode 600) whose first line is the API key; wins over the variable.
    pub api_key_file: Option<PathBuf>,
    pub stream: Option<bool>,
    pub max_retries: Option<u32>,
    pub retry_base_ms: Option<u64>,
    pub request_timeout_secs: Option<u64>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// What the user knows of this server's models ([`routing::ModelFile`]); wins over what
    /// its `GET /models` says.
    #[serde(default)]
    pub models: Vec<routing::ModelFile>,
    /// Ask the server's `GET /models` for its models and their context (default true).
    pub discover_models: Option<bool>,
}

/// `[limits]` (seed 000 §1 defaults).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Agent runs at a time (default: the number of CPU cores); the others wait, `queued`.
    pub max_concurrent_runs: Option<usize>,
    pub max_tool_calls: Option<usize>,
    pub max_schema_retries: Option<u32>,
    pub command_timeout_secs: Option<u64>,
    pub max_command_output_bytes: Option<usize>,
    pub max_search_results_default: Option<usize>,
    pub max_search_results_cap: Option<usize>,
    pub max_search_snippet_lines: Option<usize>,
    pub max_read_bytes: Option<u64>,
    pub max_read_lines: Option<usize>,
    pub max_list_files: Option<usize>,
    /// The most files a run's sandbox may differ from its base in (new, changed, deleted or
    /// left out) for a publish to read it back.
    pub max_changed_files: Option<usize>,
    /// The most bytes of new file content a publish reads back from a run's sandbox.
    pub max_changed_bytes: Option<u64>,
    /// How long a run's checks (`[[check]]`, on its tree and its base) may take together.
    pub checks_budget_secs: Option<u64>,
    /// The most bytes of output read from one checker run.
    pub max_check_output_bytes: Option<usize>,
}

impl LimitsFile {
    /// How much one publish may read back from a sandbox (see [`hunkgate_sandbox::limits`]).
    pub fn read_limits(&self) -> hunkgate_sandbox::limits::ReadLimits {
        let d = hunkgate_sandbox::limits::ReadLimits::default();
        hunkgate_sandbox::limits::ReadLimits {
            file_cap: d.file_cap,
            files: self.max_changed_files.unwrap_or(d.files),
            bytes: self.max_changed_bytes.unwrap_or(d.bytes),
        }
    }

    pub fn resolve(&self, max_tool_calls: Option<usize>) -> crate::config::provider::LoopLimits {
        let d = crate::config::provider::LoopLimits::default();
        let t = &d.tools;
        crate::config::provider::LoopLimits {
            max_tool_calls: max_tool_calls
                .or(self.max_tool_calls)
                .unwrap_or(d.max_tool_calls),
            max_schema_retries: self.max_schema_retries.unwrap_or(d.max_schema_retries),
            command_timeout: self
                .command_timeout_secs
                .map(Duration::from_secs)
                .unwrap_or(d.command_timeout),
            max_command_output: self
                .max_command_output_bytes
                .unwrap_or(d.max_command_output),
            tools: hunkgate_sandbox::tools::ToolLimits {
                max_search_results_default: self
                    .max_search_results_default
                    .unwrap_or(t.max_search_results_default),
                max_search_results_cap: self
                    .max_search_results_cap
                    .unwrap_or(t.max_search_results_cap),
                max_search_snippet_lines: self
                    .max_search_snippet_lines
                    .unwrap_or(t.max_search_snippet_lines),
                max_read_bytes: self.max_read_bytes.unwrap_or(t.max_read_bytes),
                max_read_lines: self.max_read_lines.unwrap_or(t.max_read_lines),
                max_list_files: self.max_list_files.unwrap_or(t.max_list_files),
                max_file_bytes: t.max_file_bytes,
            },
        }
    }
}

/// The provider flags of `serve` (they win over the file).
#[derive(Debug, Default, Clone)]
pub struct ProviderFlags {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<PathBuf>,
}

pub const DEFAULT_API_KEY_ENV: &str = "HUNKGATE_API_KEY";

/// The built-in agent's provider, when a base URL is configured anywhere.
pub fn resolve_provider(
    flags: ProviderFlags,
    file: &ProviderFile,
) -> Result<Option<crate::config::provider::ProviderConfig>, ConfigError> {
    let Some(base_url) = flags
        .base_url
        .or_else(|| env_first(&["HUNKGATE_PROVIDER_URL"]).map(|(_, v)| v))
        .or_else(|| file.base_url.clone())
    else {
        return Ok(None);
    };
    check_base_url(&base_url)?;
    let model = flags
        .model
        .or_else(|| env_first(&["HUNKGATE_MODEL"]).map(|(_, v)| v))
        .or_else(|| file.model.clone())
        .unwrap_or_default();
    let key_file = flags.api_key_file.or_else(|| file.api_key_file.clone());
    let key_env = flags
        .api_key_env
        .or_else(|| file.api_key_env.clone())
        .or_else(|| Some(DEFAULT_API_KEY_ENV.to_string()));
    provider_config(base_url, model, key_file, key_env, file).map(Some)
}

/// A provider's settings from its table, once its URL and model are known; its key from
/// `key_file`, else the variable `key_env`, else none.
fn provider_config(
    base_url: String,
    model: String,
    key_file: Option<PathBuf>,
    key_env: Option<String>,
    file: &ProviderFile,
) -> Result<crate::config::provider::ProviderConfig, ConfigError> {
    use crate::config::provider::{read_key_file, KeySource, ProviderConfig, Secret};
    let (api_key, key_source) = match (key_file, key_env) {
        (Some(path), _) => (
            Some(read_key_file(&path).map_err(|e| ConfigError::Provider(e.to_string()))?),
            KeySource::File(path),
        ),
        (None, Some(key_env)) => match std::env::var(&key_env)
            .ok()
            .filter(|k| !k.trim().is_empty())
        {
            Some(k) => (
                Some(Secret::new(k.trim().to_string())),
                KeySource::Env(key_env),
            ),
            None => (None, KeySource::None),
        },
        (None, None) => (None, KeySource::None),
    };
    Ok(ProviderConfig {
        base_url: base_url.trim_end_matches('/').to_string(),
        model,
        api_key,
        key_source,
        stream: file.stream.unwrap_or(true),
        max_retries: file.max_retries.unwrap_or(3),
        retry_base: Duration::from_millis(file.retry_base_ms.unwrap_or(500)),
        request_timeout: Duration::from_secs(file.request_timeout_secs.unwrap_or(300).max(1)),
        temperature: file.temperature,
        max_tokens: file.max_tokens,
    })
}

/// A base URL the hub can talk to: http, or https when built with TLS.
fn check_base_url(base_url: &str) -> Result<(), ConfigError> {
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        return Err(ConfigError::Provider(format!(
            "base URL {base_url:?} must start with http:// or https://"
        )));
    }
    if base_url.starts_with("https://") && !cfg!(feature = "tls") {
        return Err(ConfigError::Provider(format!(
            "{base_url} needs TLS, and this hunkgate was built without the `tls` feature"
        )));
    }
    Ok(())
}

/// `[providers.*]` and `[routing]` around the `default` provider (`[provider]` and its flags).
pub fn resolve_routing(
    default: Option<&crate::config::provider::ProviderConfig>,
    file: &FileConfig,
) -> Result<routing::Routing, ConfigError> {
    use routing::{ModelMeta, NamedProvider};
    let named_of = |name: &str,
                    cfg: crate::config::provider::ProviderConfig,
                    table: &ProviderFile| NamedProvider {
        name: name.to_string(),
        cfg,
        models: table.models.iter().map(ModelMeta::from).collect(),
        discover: table.discover_models.unwrap_or(true),
    };
    let default = default.map(|c| named_of(routing::DEFAULT_PROVIDER, c.clone(), &file.provider));
    let mut named = std::collections::BTreeMap::new();
    // A named provider's key comes only from its own `api_key_env` or `api_key_file`: never
    // `HUNKGATE_API_KEY` by default, so a remote key is not sent to a local server.
    for (name, table) in &file.providers {
        let bad = |m: String| ConfigError::Routing(format!("[providers.{name}]: {m}"));
        let base_url = table
            .base_url
            .clone()
            .ok_or_else(|| bad("base_url is missing".into()))?;
        if let Err(ConfigError::Provider(m)) = check_base_url(&base_url) {
            return Err(bad(m));
        }
        let cfg = provider_config(
            base_url,
            table.model.clone().unwrap_or_default(),
            table.api_key_file.clone(),
            table.api_key_env.clone(),
            table,
        )
        .map_err(|e| match e {
            ConfigError::Provider(m) => bad(m),
            e => bad(e.to_string()),
        })?;
        named.insert(name.clone(), named_of(name, cfg, table));
    }
    routing::Routing::resolve(default, named, &file.routing).map_err(ConfigError::Routing)
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{var}={value:?} is not a valid port number")]
    BadPort { var: String, value: String },
    #[error("no home directory: set HOME or XDG_STATE_HOME, or pass --state-dir")]
    NoHome,
    #[error("[provider]: {0}")]
    Provider(String),
    /// `[providers.*]`, `[routing]`.
    #[error("{0}")]
    Routing(String),
    #[error("[context]: {0}")]
    Context(String),
    #[error("{0}")]
    Check(String),
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
    xdg("XDG_CONFIG_HOME", ".config").map(|d| d.join("hunkgate").join("config.toml"))
}

/// Load the config file: an explicit path must exist; the default path may be absent.
pub fn load_file(explicit: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let (path, required) = match explicit {
        Some(p) => (p.to_path_buf(), true),
        None => match std::env::var_os("HUNKGATE_CONFIG") {
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
    flag.or_else(|| env_first(&["HUNKGATE_HOST", "SUGGESTION_MANAGER_HOST"]).map(|(_, v)| v))
        .or_else(|| file.host.clone())
        .unwrap_or_else(|| DEFAULT_HOST.to_string())
}

/// The port asked for by `--port`, `HUNKGATE_PORT`/`SUGGESTION_MANAGER_PORT` or the file's
/// `port`; `None` when none of them names one: then the hub takes [`DEFAULT_PORT`] if it is
/// free, else any free port (see `cli::serve`).
pub fn resolve_port(flag: Option<u16>, file: &FileConfig) -> Result<Option<u16>, ConfigError> {
    if let Some(p) = flag {
        return Ok(Some(p));
    }
    if let Some((var, value)) = env_first(&["HUNKGATE_PORT", "SUGGESTION_MANAGER_PORT"]) {
        return value
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::BadPort { var, value });
    }
    Ok(file.port)
}

/// `$XDG_STATE_HOME/hunkgate/<repo-name>-<short hash of the repo path>/`.
pub fn default_state_dir(repo: &Path) -> Result<PathBuf, ConfigError> {
    Ok(hunkgate_state_home()?.join(repo_key(repo)))
}

/// `$XDG_STATE_HOME/hunkgate` (default `~/.local/state/hunkgate`): the default state dirs and
/// the hubs' discovery records live under it.
pub fn hunkgate_state_home() -> Result<PathBuf, ConfigError> {
    Ok(xdg("XDG_STATE_HOME", ".local/state")
        .ok_or(ConfigError::NoHome)?
        .join("hunkgate"))
}

/// `<name>-<hash12>`: the basename of the canonical repository path (`root` when it has none)
/// and the first 12 hex digits of the sha256 of that path's bytes. The name of a repository's
/// default state dir and of its discovery record, here and in the Neovim plugin
/// (`nvim/lua/hunkgate/config.lua`): they must agree.
pub fn repo_key(repo: &Path) -> String {
    let canonical = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
    let name = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    let hash = hex::encode(Sha256::digest(canonical.as_os_str().as_encoded_bytes()));
    format!("{name}-{}", &hash[..12])
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub repo: PathBuf,
    pub host: String,
    pub port: u16,
    pub state_dir: PathBuf,
    pub agent: Option<String>,
    /// The ACP agent and its permission policy.
    pub acp: Acp,
    pub agent_timeout: Duration,
    pub agent_env: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub mirror_refs: bool,
    pub vcs: hunkgate_sandbox::jj::Vcs,
    /// Who agents run as (see [`crate::isolation`]).
    pub isolation: crate::isolation::Isolation,
    /// The built-in agent's model server, if one is configured.
    pub provider: Option<crate::config::provider::ProviderConfig>,
    /// Every provider by name (`default` is `provider`), and how a built-in run picks one.
    pub routing: routing::Routing,
    pub limits: crate::config::provider::LoopLimits,
    /// Agent runs at a time; later ones wait in the order they were posted (status `queued`).
    pub max_concurrent_runs: usize,
    /// How much a publish may read back from a run's sandbox.
    pub read_limits: hunkgate_sandbox::limits::ReadLimits,
    /// What finished work is kept, and for how long (see [`crate::gc`]).
    pub retention: retention::Retention,
    /// Which hunks an accept-all leaves pending unless confirmed.
    pub review: Review,
    /// `[sensitive]`: more files that stay home, and files that may go (see [`sensitive`]).
    pub sensitive: sensitive::SensitiveFile,
    /// `[context]`: the hosts whose pages may be pinned, and the limits of a fetch.
    pub url_context: context::UrlPolicy,
    /// `[[check]]`: what is checked after each run, and its bounds.
    pub checks: checkers::Checks,
    /// The accelerators on: `[accel]`, less those `HUNKGATE_ACCEL_OFF` names.
    pub accel: hunkgate_sandbox::accel::Accel,
}

/// The `[[check]]` tables of `file`, resolved with their `[limits]`.
pub fn resolve_checks(file: &FileConfig) -> Result<checkers::Checks, ConfigError> {
    checkers::resolve(
        &file.check,
        file.limits.checks_budget_secs,
        file.limits.max_check_output_bytes,
    )
    .map_err(ConfigError::Check)
}

/// `[accel]`, less the accelerators `off` (`HUNKGATE_ACCEL_OFF`) names.
pub fn resolve_accel(
    file: &FileConfig,
    off: Option<&str>,
) -> Result<hunkgate_sandbox::accel::Accel, String> {
    file.accel
        .turn_off(off.unwrap_or_default())
        .map_err(|e| format!("HUNKGATE_ACCEL_OFF: {e}"))
}

/// `--max-runs` / `[limits] max_concurrent_runs`, else the number of CPU cores (at least 1).
pub fn resolve_max_runs(flag: Option<usize>, file: &LimitsFile) -> usize {
    flag.or(file.max_concurrent_runs)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1)
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
        assert_eq!(resolve_port(Some(6000), &cfg).unwrap(), Some(6000));
    }

    /// `[review]`'s hunk limits: §23's defaults, the file's values, and 0 read as 1.
    #[test]
    fn review_hunk_limits_default_to_the_seed_and_read_the_file() {
        let limits = |text: &str| -> hunkgate_patch::Limits {
            let file: FileConfig = toml::from_str(text).unwrap();
            file.review.resolve().hunk_limits
        };
        let l = limits("");
        assert_eq!((l.lines, l.bytes), (80, 8192));
        let l = limits("[review]\nmax_hunk_lines = 30\nmax_hunk_bytes = 0\n");
        assert_eq!((l.lines, l.bytes), (30, 1));
        assert!(toml::from_str::<FileConfig>("[review]\nmax_hunk = 3\n").is_err());
    }

    /// `[acp] keep_alive_secs`: 300 by default, the flag over the file, 0 kept (one process
    /// per run), and at most a day.
    #[test]
    fn acp_keep_alive_defaults_reads_the_file_and_the_flag_wins() {
        let keep = |text: &str, flag: Option<u64>| -> u64 {
            let file: FileConfig = toml::from_str(text).unwrap();
            file.acp
                .resolve(None, Vec::new(), None, flag)
                .unwrap()
                .keep_alive
                .as_secs()
        };
        assert_eq!(keep("", None), 300);
        assert_eq!(keep("[acp]\nkeep_alive_secs = 0\n", None), 0);
        assert_eq!(keep("[acp]\nkeep_alive_secs = 0\n", Some(60)), 60);
        assert_eq!(keep("", Some(u64::MAX)), 24 * 60 * 60);
        assert!(toml::from_str::<FileConfig>("[acp]\nkeep_alive = 3\n").is_err());
    }

    /// `[accel]` turns accelerators off by name; `HUNKGATE_ACCEL_OFF` turns more off; an
    /// unknown name in either is an error that names it.
    #[test]
    fn accelerators_are_turned_off_by_the_file_and_the_environment() {
        use hunkgate_sandbox::accel::Accel;
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("c.toml");
        std::fs::write(&p, "port = 5000\n").unwrap();
        let none = load_file(Some(&p)).unwrap();
        assert_eq!(resolve_accel(&none, None).unwrap(), Accel::ALL);
        std::fs::write(&p, "[accel]\nwatch = false\n").unwrap();
        let file = load_file(Some(&p)).unwrap();
        assert_eq!(resolve_accel(&file, None).unwrap().off(), ["watch"]);
        let both = resolve_accel(&file, Some("pack")).unwrap();
        assert_eq!(both.off(), ["watch", "pack"]);
        assert_eq!(resolve_accel(&file, Some("all")).unwrap(), Accel::NONE);
        let e = resolve_accel(&file, Some("fsmonitor")).unwrap_err();
        assert!(
            e.contains("HUNKGATE_ACCEL_OFF") && e.contains("fsmonitor"),
            "{e}"
        );
        std::fs::write(&p, "[accel]\nfsmonitor = false\n").unwrap();
        let err = load_file(Some(&p)).unwrap_err().to_string();
        assert!(err.contains("fsmonitor"), "{err}");
    }
}

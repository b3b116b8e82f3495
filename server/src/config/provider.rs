//! Which model provider the hub talks to, and its API key: a [`Secret`] that never prints, is
//! sent only in the `Authorization` header, and never reaches a sandbox.
//!
//! May import: `crate::protocol`, `crate::model`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hunkgate_sandbox::tools::ToolLimits;

use crate::model::chat::ProviderError;

/// An API key. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Self {
        Secret(s)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where the key came from, for error messages (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    None,
    Env(String),
    File(PathBuf),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::None => f.write_str(
                "no API key is configured (set HUNKGATE_API_KEY or [provider] api_key_file)",
            ),
            KeySource::Env(v) => write!(f, "the key comes from ${v}"),
            KeySource::File(p) => write!(f, "the key comes from {}", p.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// e.g. `http://127.0.0.1:11434/v1` (Ollama), `http://127.0.0.1:8080/v1` (llama.cpp).
    pub base_url: String,
    /// The default model; a run may name another.
    pub model: String,
    pub api_key: Option<Secret>,
    pub key_source: KeySource,
    /// Ask for a streamed response (servers that ignore it answer in one piece, which is read
    /// just as well).
    pub stream: bool,
    /// Retries of transient failures (connection errors, timeouts, 408/429/5xx).
    pub max_retries: u32,
    /// First back-off; doubled on each retry (a `Retry-After` header wins, up to a minute).
    pub retry_base: Duration,
    /// For one model call, from sending the request to the last byte of the answer.
    pub request_timeout: Duration,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
}

/// Read the key from a file (first line, trimmed), refusing files others can read: a key file
/// the sandbox user could read would hand the key to the agent.
pub fn read_key_file(path: &Path) -> Result<Secret, ProviderError> {
    use std::os::unix::fs::MetadataExt;
    let bad = |message: String| ProviderError::KeyFile {
        path: path.to_path_buf(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "has mode {:o}; it must be readable by you alone (chmod 600)",
            meta.mode() & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let key = text.lines().next().unwrap_or("").trim().to_string();
    if key.is_empty() {
        return Err(bad("is empty".into()));
    }
    Ok(Secret(key))
}

/// Limits of one built-in agent run (all configurable under `[limits]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopLimits {
    pub max_tool_calls: usize,
    pub max_schema_retries: u32,
    pub command_timeout: Duration,
    /// Bytes of a command's output the model sees (head and tail kept).
    pub max_command_output: usize,
    pub tools: ToolLimits,
}

impl Default for LoopLimits {
    fn default() -> Self {
        Self {
            max_tool_calls: 12,
            max_schema_retries: 5,
            command_timeout: Duration::from_secs(120),
            max_command_output: 16 * 1024,
            tools: ToolLimits::default(),
        }
    }
}

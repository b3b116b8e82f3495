//! Model providers by name and how the built-in agent picks among them (issue #60.3, seed 003
//! "rule-based model selection", seed 000 §12 `agent_mode` and its fallback triggers).
//!
//! `[provider]` stays the provider named `default`; `[providers.<name>]` add more, each with the
//! same keys and a list of models with what the user knows of them (`context`, `tools`,
//! `cost`). What a server's `GET /models` says fills the gaps; the config wins. `[routing]` says
//! which provider is local and which remote, the run mode (`local`, `remote`, `hybrid_auto`),
//! the cost preference, and the thresholds of the hybrid mode's switch to the remote provider.
//!
//! This module holds the settings and the per-hub caches (providers made, `/models` read); the
//! rules and the switch live in `crate::agent::routing`.
//!
//! May import: `crate::protocol`, `crate::model`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use crate::config::provider::ProviderConfig;
use crate::model::chat::Provider;

/// The name `[provider]` goes by among `[providers.*]`.
pub const DEFAULT_PROVIDER: &str = "default";
/// The provider `local` and `hybrid_auto` start on when `[routing] local` names none.
pub const LOCAL: &str = "local";
/// The provider `remote` runs on, and `hybrid_auto` moves to, when `[routing] remote` names none.
pub const REMOTE: &str = "remote";
/// Tokens left free beside the estimated prompt for the answer and the first tool results.
pub const DEFAULT_RESERVE_TOKENS: u64 = 2048;
/// Invalid tool calls (and failed edits) on the local provider before `hybrid_auto` moves on.
pub const DEFAULT_SCHEMA_FAILS: u32 = 3;
/// The longest one local model call may take under `hybrid_auto` before the run moves on.
pub const DEFAULT_LOCAL_TIMEOUT_MS: u64 = 120_000;
/// How long `GET /models` may take, and how much of its body is read.
pub const MODELS_TIMEOUT: Duration = Duration::from_secs(5);
pub const MODELS_MAX_BYTES: usize = 1024 * 1024;

/// What a model costs, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostClass {
    Free,
    Cheap,
    Expensive,
}

impl CostClass {
    pub fn as_str(self) -> &'static str {
        match self {
            CostClass::Free => "free",
            CostClass::Cheap => "cheap",
            CostClass::Expensive => "expensive",
        }
    }
}

/// `[routing] prefer`: which of the models that fit the task is picked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prefer {
    /// The cheapest (`free` < `cheap` < unknown < `expensive`), then the smallest context.
    #[default]
    Cheap,
    /// The most expensive, then the largest context: the most capable the user pays for.
    Capable,
}

/// `agent_mode` (seed 000 §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentMode {
    /// The local provider only.
    Local,
    /// The remote provider only.
    Remote,
    /// Start on the local provider, move to the remote one on a trigger.
    HybridAuto,
}

impl AgentMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentMode::Local => "local",
            AgentMode::Remote => "remote",
            AgentMode::HybridAuto => "hybrid_auto",
        }
    }

    /// `local`, `remote` or `hybrid_auto`, or an error naming them.
    pub fn parse(s: &str) -> Result<AgentMode, String> {
        match s.trim() {
            "local" => Ok(AgentMode::Local),
            "remote" => Ok(AgentMode::Remote),
            "hybrid_auto" => Ok(AgentMode::HybridAuto),
            other => Err(format!(
                "agent_mode {other:?} is not one of local, remote, hybrid_auto"
            )),
        }
    }
}

/// `[[providers.<name>.models]]` (and `[[provider.models]]`): what the user knows of a model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub name: String,
    /// Context window in tokens.
    pub context: Option<u64>,
    /// Whether it calls tools (the built-in agent needs them).
    pub tools: Option<bool>,
    pub cost: Option<CostClass>,
}

/// A model as the rules see it: the config's facts, else the server's, else unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMeta {
    pub name: String,
    pub context: Option<u64>,
    pub tools: Option<bool>,
    pub cost: Option<CostClass>,
}

impl From<&ModelFile> for ModelMeta {
    fn from(m: &ModelFile) -> Self {
        ModelMeta {
            name: m.name.clone(),
            context: m.context,
            tools: m.tools,
            cost: m.cost,
        }
    }
}

/// The config's models with what the server said filling their gaps, then the server's other
/// models, then `default_model` if neither names it. The config wins field by field.
pub fn merge_models(
    config: &[ModelMeta],
    server: &[ModelMeta],
    default_model: &str,
) -> Vec<ModelMeta> {
    let mut out: Vec<ModelMeta> = config
        .iter()
        .map(|c| match server.iter().find(|s| s.name == c.name) {
            Some(s) => ModelMeta {
                name: c.name.clone(),
                context: c.context.or(s.context),
                tools: c.tools.or(s.tools),
                cost: c.cost.or(s.cost),
            },
            None => c.clone(),
        })
        .collect();
    for s in server {
        if !out.iter().any(|m| m.name == s.name) {
            out.push(s.clone());
        }
    }
    if !default_model.trim().is_empty() && !out.iter().any(|m| m.name == default_model) {
        out.push(ModelMeta {
            name: default_model.to_string(),
            context: None,
            tools: None,
            cost: None,
        });
    }
    out
}

/// `[routing]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingFile {
    /// `local`, `remote` or `hybrid_auto`; unset: every provider's models are candidates.
    pub agent_mode: Option<String>,
    /// The local provider's name (default `local`, else `default`).
    pub local: Option<String>,
    /// The remote provider's name (default `remote`).
    pub remote: Option<String>,
    pub prefer: Option<Prefer>,
    /// Tokens kept free beside the estimated prompt when checking that a model's context fits.
    pub reserve_tokens: Option<u64>,
    /// `hybrid_auto`: move on when the tool budget is spent without an edit (default true).
    pub hybrid_remote_on_budget_exhausted: Option<bool>,
    /// `hybrid_auto`: move on after this many invalid tool calls or failed edits (default 3,
    /// 0 = never).
    pub hybrid_remote_on_schema_fail: Option<u32>,
    /// `hybrid_auto`: move on when the conversation does not fit the local model's context —
    /// the server says so, or the estimate is over the known context (default true).
    pub hybrid_remote_on_context_overflow: Option<bool>,
    /// `hybrid_auto`: move on when one local model call takes longer than this, or the local
    /// provider times out (default 120000, 0 = only the provider's own timeout).
    pub hybrid_remote_on_timeout_ms: Option<u64>,
}

/// When `hybrid_auto` moves a run to the remote provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triggers {
    pub budget_exhausted: bool,
    /// Invalid calls or failed edits; 0 = never.
    pub schema_fail: u32,
    pub context_overflow: bool,
    /// The longest local model call; None = only the provider's own timeout.
    pub local_timeout: Option<Duration>,
}

impl Default for Triggers {
    fn default() -> Self {
        Triggers {
            budget_exhausted: true,
            schema_fail: DEFAULT_SCHEMA_FAILS,
            context_overflow: true,
            local_timeout: Some(Duration::from_millis(DEFAULT_LOCAL_TIMEOUT_MS)),
        }
    }
}

/// One provider by name, resolved.
#[derive(Debug, Clone)]
pub struct NamedProvider {
    pub name: String,
    pub cfg: ProviderConfig,
    /// The config's models (the server's are added once read, see [`merge_models`]).
    pub models: Vec<ModelMeta>,
    /// Ask the server's `GET /models` (default true).
    pub discover: bool,
}

/// The providers and the `[routing]` settings, resolved; with the hub's caches.
#[derive(Debug, Clone, Default)]
pub struct Routing {
    /// `default` first (when configured), then the named ones in name order.
    pub providers: Vec<NamedProvider>,
    pub mode: Option<AgentMode>,
    pub local: Option<String>,
    pub remote: Option<String>,
    pub prefer: Prefer,
    pub reserve_tokens: u64,
    pub triggers: Triggers,
    pub cache: Arc<Cache>,
}

/// Per hub: the providers made so far and what each server's `/models` said (read once; a
/// failure counts as "said nothing").
#[derive(Default)]
pub struct Cache {
    pub providers: Mutex<HashMap<String, Arc<dyn Provider>>>,
    pub models: Mutex<HashMap<String, Vec<ModelMeta>>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cache")
    }
}

impl Routing {
    /// `[providers.*]` and `[routing]` resolved around the `default` provider (`[provider]` and
    /// its flags). `named` holds each named provider already resolved; a name is checked, and
    /// so are the names `[routing]` gives.
    pub fn resolve(
        default: Option<NamedProvider>,
        named: BTreeMap<String, NamedProvider>,
        file: &RoutingFile,
    ) -> Result<Routing, String> {
        if named.contains_key(DEFAULT_PROVIDER) {
            return Err(format!(
                "[providers.{DEFAULT_PROVIDER}]: that name is [provider]'s; pick another"
            ));
        }
        if let Some(bad) = named.keys().find(|n| !valid_name(n)) {
            return Err(format!(
                "[providers.{bad}]: a provider's name is letters, digits, '-' and '_'"
            ));
        }
        let mut providers: Vec<NamedProvider> = default.into_iter().collect();
        providers.extend(named.into_values());
        let has = |n: &str| providers.iter().any(|p| p.name == n);
        let mode = file
            .agent_mode
            .as_deref()
            .map(AgentMode::parse)
            .transpose()?;
        for (key, name) in [("local", &file.local), ("remote", &file.remote)] {
            if let Some(n) = name {
                if !has(n) {
                    return Err(format!(
                        "[routing] {key} = {n:?}: no provider has that name"
                    ));
                }
            }
        }
        let triggers = Triggers {
            budget_exhausted: file.hybrid_remote_on_budget_exhausted.unwrap_or(true),
            schema_fail: file
                .hybrid_remote_on_schema_fail
                .unwrap_or(DEFAULT_SCHEMA_FAILS),
            context_overflow: file.hybrid_remote_on_context_overflow.unwrap_or(true),
            local_timeout: match file
                .hybrid_remote_on_timeout_ms
                .unwrap_or(DEFAULT_LOCAL_TIMEOUT_MS)
            {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
        };
        let routing = Routing {
            providers,
            mode,
            local: file.local.clone(),
            remote: file.remote.clone(),
            prefer: file.prefer.unwrap_or_default(),
            reserve_tokens: file.reserve_tokens.unwrap_or(DEFAULT_RESERVE_TOKENS),
            triggers,
            cache: Arc::default(),
        };
        if let Some(mode) = mode {
            routing.check_mode(mode)?;
        }
        Ok(routing)
    }

    pub fn provider(&self, name: &str) -> Option<&NamedProvider> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// The local provider: `[routing] local`, else the one named `local`, else `default`.
    pub fn local_name(&self) -> Option<&str> {
        match &self.local {
            Some(n) => Some(n),
            None => [LOCAL, DEFAULT_PROVIDER]
                .into_iter()
                .find(|n| self.provider(n).is_some()),
        }
    }

    /// The remote provider: `[routing] remote`, else the one named `remote`.
    pub fn remote_name(&self) -> Option<&str> {
        match &self.remote {
            Some(n) => Some(n),
            None => Some(REMOTE).filter(|n| self.provider(n).is_some()),
        }
    }

    /// Whether `mode` can run with these providers; the error says what is missing.
    pub fn check_mode(&self, mode: AgentMode) -> Result<(), String> {
        let local = self.local_name();
        let remote = self.remote_name();
        let need = |what: &str| {
            format!(
                "agent_mode {:?} needs a {what} provider ([providers.{what}], or [routing] {what} = \"<name>\")",
                mode.as_str()
            )
        };
        match mode {
            AgentMode::Local if local.is_none() => Err(need("local")),
            AgentMode::Remote if remote.is_none() => Err(need("remote")),
            AgentMode::HybridAuto if local.is_none() => Err(need("local")),
            AgentMode::HybridAuto if remote.is_none() => Err(need("remote")),
            AgentMode::HybridAuto if local == remote => Err(format!(
                "agent_mode \"hybrid_auto\": the local and the remote provider are both {:?}",
                local.unwrap_or_default()
            )),
            _ => Ok(()),
        }
    }
}

/// A provider's name: what a TOML key and a status line can carry plainly.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
#[path = "routing_tests.rs"]
mod tests;

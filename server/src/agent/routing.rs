//! Which provider and model a built-in run gets, and when `hybrid_auto` moves it (issue #60.3,
//! seed 003 "rule-based model selection", seed 000 §12).
//!
//! The settings are in [`crate::config::routing`]. Here:
//! - [`Ask`]: what the request, the session and the config ask for, each with its level —
//!   request > session > config, as seed 003 orders them;
//! - [`select`]: the rules. Of the candidate models, those that fit the task (the estimated
//!   tokens of the opening conversation plus `reserve_tokens` within a known context; tool
//!   support, which the built-in agent always needs, not known to be missing), ranked by the
//!   cost preference; when none fits, the largest context, and the reason says so;
//! - [`parse_models`]: what a server's `GET /models` says of its models, read defensively (it
//!   is data from another program: bounded, any shape, nothing trusted but plain fields);
//! - the hub's side: [`Hub::route_start`] and [`Hub::route_remote`] resolve a leg to a provider
//!   made once per hub.

use std::sync::Arc;

use serde_json::Value;

use crate::config::routing::{
    merge_models, AgentMode, CostClass, ModelMeta, NamedProvider, Prefer, Routing,
    MODELS_MAX_BYTES, MODELS_TIMEOUT,
};
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::chat::{Message, Provider, ToolSpec};

/// Where a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Request,
    Session,
    Config,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Request => "the request",
            Level::Session => "the session",
            Level::Config => "the config",
        }
    }
}

/// What a run asks of the routing, each setting with its level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ask {
    pub model: Option<(String, Level)>,
    pub provider: Option<(String, Level)>,
    pub mode: Option<(AgentMode, Level)>,
}

/// One setting at three levels: the first that is set wins.
fn first<T>(request: Option<T>, session: Option<T>, config: Option<T>) -> Option<(T, Level)> {
    request
        .map(|v| (v, Level::Request))
        .or_else(|| session.map(|v| (v, Level::Session)))
        .or_else(|| config.map(|v| (v, Level::Config)))
}

/// A request's or a session's setting: what it says, or nothing when it says an empty string.
pub type Setting<'a> = Option<&'a str>;

impl Ask {
    /// Request > session > config, setting by setting. An unknown mode or provider is an error
    /// naming what there is.
    pub fn resolve(
        routing: &Routing,
        request: [Setting<'_>; 3],
        session: [Setting<'_>; 3],
    ) -> Result<Ask, String> {
        let own = |s: Option<&str>| {
            s.map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let [rm, rp, ra] = request.map(own);
        let [sm, sp, sa] = session.map(own);
        let mode = |s: Option<String>| s.as_deref().map(AgentMode::parse).transpose();
        let ask = Ask {
            model: first(rm, sm, None),
            provider: first(rp, sp, None),
            mode: first(mode(ra)?, mode(sa)?, routing.mode),
        };
        if let Some((p, level)) = &ask.provider {
            if routing.provider(p).is_none() {
                let names: Vec<&str> = routing.providers.iter().map(|p| p.name.as_str()).collect();
                return Err(format!(
                    "provider {p:?} (from {}) is not configured; there are: {}",
                    level.as_str(),
                    names.join(", ")
                ));
            }
        }
        if let Some((m, _)) = ask.mode {
            routing.check_mode(m)?;
        }
        Ok(ask)
    }

    /// The model named in the run record while the run waits: the asked one, else the first
    /// provider's default, else none (the rules choose when the run starts).
    pub fn provisional_model(&self, routing: &Routing) -> Option<String> {
        if let Some((m, _)) = &self.model {
            return Some(m.clone());
        }
        let provider = match &self.provider {
            Some((p, _)) => routing.provider(p),
            None => routing.providers.first(),
        }?;
        Some(provider.cfg.model.clone()).filter(|m| !m.is_empty())
    }
}

/// What the task needs of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Estimated tokens of the opening conversation and the tool schemas.
    pub tokens: u64,
    pub tools: bool,
}

/// A model of a provider, as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub provider: String,
    pub meta: ModelMeta,
}

/// What the rules (or an explicit ask) chose, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub provider: String,
    pub model: String,
    /// The model's context window, when known (the hybrid switch checks the conversation
    /// against it).
    pub context: Option<u64>,
    pub reason: String,
}

/// The rules: of `candidates`, those that fit `needs` with `reserve` tokens to spare, ranked by
/// `prefer`; when none fits, the one with the largest known context. Ties keep the order given
/// (the config's).
pub fn select(
    candidates: &[Candidate],
    needs: Needs,
    prefer: Prefer,
    reserve: u64,
) -> Result<Choice, String> {
    if candidates.is_empty() {
        return Err(
            "no model to choose from: name one with \"model\", or give the provider a model ([providers.<name>] model, or [[providers.<name>.models]])".into(),
        );
    }
    let want = needs.tokens.saturating_add(reserve);
    let fits = |c: &&Candidate| {
        c.meta.context.is_none_or(|ctx| ctx >= want)
            && !(needs.tools && c.meta.tools == Some(false))
    };
    let fitting: Vec<&Candidate> = candidates.iter().filter(fits).collect();
    let pick = match prefer {
        Prefer::Cheap => fitting
            .iter()
            .min_by_key(|c| (cost_rank(c.meta.cost), c.meta.context.unwrap_or(u64::MAX))),
        Prefer::Capable => fitting.iter().max_by_key(|c| {
            (
                cost_rank(c.meta.cost),
                c.meta.context.unwrap_or(0),
                std::cmp::Reverse(position(candidates, c)),
            )
        }),
    };
    let needs_text = format!(
        "needs ~{} tokens + {reserve} reserve{}",
        needs.tokens,
        if needs.tools { ", tools" } else { "" }
    );
    let (chosen, why) = match pick {
        Some(c) => (
            *c,
            format!(
                "prefer {}: {} of {} fitting",
                prefer_str(prefer),
                describe(c),
                fitting.len()
            ),
        ),
        None => {
            let c = candidates
                .iter()
                .filter(|c| !(needs.tools && c.meta.tools == Some(false)))
                .max_by_key(|c| {
                    (
                        c.meta.context.unwrap_or(0),
                        std::cmp::Reverse(position(candidates, c)),
                    )
                })
                .unwrap_or(&candidates[0]);
            (
                c,
                format!("no model fits; the largest context: {}", describe(c)),
            )
        }
    };
    Ok(Choice {
        provider: chosen.provider.clone(),
        model: chosen.meta.name.clone(),
        context: chosen.meta.context,
        reason: format!("rules ({needs_text}): {why}"),
    })
}

fn position(all: &[Candidate], c: &Candidate) -> usize {
    all.iter().position(|x| x == c).unwrap_or(usize::MAX)
}

/// Cheapest first; an unknown cost between `cheap` and `expensive`.
fn cost_rank(c: Option<CostClass>) -> u8 {
    match c {
        Some(CostClass::Free) => 0,
        Some(CostClass::Cheap) => 1,
        None => 2,
        Some(CostClass::Expensive) => 3,
    }
}

fn prefer_str(p: Prefer) -> &'static str {
    match p {
        Prefer::Cheap => "cheap",
        Prefer::Capable => "capable",
    }
}

/// `local/gemma (free, 8192 ctx)`.
fn describe(c: &Candidate) -> String {
    let mut facts = Vec::new();
    if let Some(cost) = c.meta.cost {
        facts.push(cost.as_str().to_string());
    }
    if let Some(ctx) = c.meta.context {
        facts.push(format!("{ctx} ctx"));
    }
    let facts = if facts.is_empty() {
        String::new()
    } else {
        format!(" ({})", facts.join(", "))
    };
    format!("{}/{}{facts}", c.provider, c.meta.name)
}

/// About four characters a token, as the servers' own rough estimates go; plus a few tokens of
/// framing per message.
pub fn estimate_tokens(messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let text: usize = messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.as_deref().map_or(0, str::len)
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool { content, name, .. } => content.len() + name.len(),
        })
        .sum();
    let schemas: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    ((text + schemas) / 4 + 4 * messages.len()) as u64
}

/// Why `hybrid_auto` moved a run to the remote provider (seed 000 §12's triggers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The tool budget was spent without a single edit.
    BudgetExhausted,
    /// Invalid tool calls or failed edits, `hybrid_remote_on_schema_fail` of them.
    SchemaFail,
    /// The conversation does not fit the local model: the server said so, or the estimate is
    /// over its known context.
    ContextOverflow,
    /// A local model call took longer than `hybrid_remote_on_timeout_ms`, or the provider
    /// timed out.
    Timeout,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::BudgetExhausted => "budget_exhausted",
            Trigger::SchemaFail => "schema_fail",
            Trigger::ContextOverflow => "context_overflow",
            Trigger::Timeout => "timeout",
        }
    }
}

/// A leg of a run that is to move on: why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    pub trigger: Trigger,
    pub detail: String,
}

/// What the tool loop watches on a `hybrid_auto` run's local leg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    pub triggers: crate::config::routing::Triggers,
    /// The local model's context, when known.
    pub context: Option<u64>,
}

impl Handoff {
    /// The conversation over the local model's known context, by the estimate.
    pub fn overflow(&self, messages: &[Message], tools: &[ToolSpec]) -> Option<Switch> {
        let ctx = self.context.filter(|_| self.triggers.context_overflow)?;
        let tokens = estimate_tokens(messages, tools);
        (tokens > ctx).then(|| Switch {
            trigger: Trigger::ContextOverflow,
            detail: format!(
                "the conversation is ~{tokens} tokens, over the local model's {ctx}-token context"
            ),
        })
    }

    /// A server that cut the conversation to fit its context instead of refusing it
    /// (llama.cpp's `llama-server` does): the answer stopped at the length limit, and the
    /// server counted under half the tokens the hub estimates it sent.
    pub fn truncated(&self, step: &crate::model::chat::StepResult, sent: u64) -> Option<Switch> {
        use crate::model::chat::StopReason;
        let counted = step.usage.as_ref()?.prompt_tokens;
        let cut = self.triggers.context_overflow
            && step.stop_reason == StopReason::Length
            && counted > 0
            && counted.saturating_mul(2) < sent;
        cut.then(|| Switch {
            trigger: Trigger::ContextOverflow,
            detail: format!(
                "the server cut the conversation to {counted} tokens of ~{sent} sent (its context is smaller)"
            ),
        })
    }

    /// The `fails`-th invalid call or failed edit, when that is the threshold (or the loop's
    /// own limit ended the leg: `exhausted`).
    pub fn schema_fail(&self, fails: u32, exhausted: bool) -> Option<Switch> {
        let n = self.triggers.schema_fail;
        (n > 0 && (fails >= n || exhausted)).then(|| Switch {
            trigger: Trigger::SchemaFail,
            detail: format!("{fails} invalid tool calls or failed edits"),
        })
    }

    /// The tool budget spent with no edit made.
    pub fn budget(&self, edits: usize, max_tool_calls: usize) -> Option<Switch> {
        (self.triggers.budget_exhausted && edits == 0).then(|| Switch {
            trigger: Trigger::BudgetExhausted,
            detail: format!("the tool budget ({max_tool_calls} calls) was spent without an edit"),
        })
    }

    /// A provider's failure that moves the run: its context overflow, its timeout.
    pub fn provider_failed(&self, e: &crate::model::chat::ProviderError) -> Option<Switch> {
        use crate::model::chat::ProviderError as E;
        let trigger = match e {
            E::ContextOverflow { .. } if self.triggers.context_overflow => Trigger::ContextOverflow,
            E::Timeout { .. } => Trigger::Timeout,
            _ => return None,
        };
        Some(Switch {
            trigger,
            detail: crate::model::text::one_line(&e.to_string(), 300),
        })
    }
}

/// The most models read from one `/models` answer.
pub const MAX_MODELS: usize = 256;
/// The longest model id kept.
const MAX_ID: usize = 256;
/// A context size over this is not believed.
const MAX_CONTEXT: u64 = 100_000_000;

/// What a server's `GET /models` says: OpenAI's `{"data": [{"id"}]}`, llama.cpp's `meta`
/// (`n_ctx`, else `n_ctx_train`), vLLM's `max_model_len`, OpenRouter's `context_length` and
/// `supported_parameters`, Ollama's `models` and `capabilities`. Anything else — not JSON, not
/// an object, odd types, absurd numbers, control characters in an id — is left out, never an
/// error: the config still says what the user knows.
pub fn parse_models(body: &[u8]) -> Vec<ModelMeta> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    let list = v["data"]
        .as_array()
        .or_else(|| v["models"].as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<ModelMeta> = Vec::new();
    for m in list.iter().take(MAX_MODELS) {
        let Some(name) = ["id", "name", "model"]
            .iter()
            .find_map(|k| m[*k].as_str())
            .filter(|s| !s.is_empty() && s.len() <= MAX_ID && !s.chars().any(char::is_control))
        else {
            continue;
        };
        if out.iter().any(|o| o.name == name) {
            continue;
        }
        let context = [
            &m["meta"]["n_ctx"],
            &m["meta"]["n_ctx_train"],
            &m["context_length"],
            &m["context_window"],
            &m["max_model_len"],
            &m["max_context_length"],
        ]
        .into_iter()
        .find_map(Value::as_u64)
        .filter(|&c| c > 0 && c <= MAX_CONTEXT);
        let lists_tools = |k: &str| {
            m[k].as_array()
                .map(|a| a.iter().any(|x| x.as_str() == Some("tools")))
        };
        let tools = lists_tools("capabilities").or_else(|| lists_tools("supported_parameters"));
        out.push(ModelMeta {
            name: name.to_string(),
            context,
            // A list without "tools" says only that it was not listed: unknown, not false.
            tools: tools.filter(|t| *t),
            cost: None,
        });
    }
    out
}

/// `GET <base_url>/models`, bounded in time and size; nothing on any failure.
async fn fetch_models(p: &NamedProvider) -> Vec<ModelMeta> {
    let url = format!("{}/models", p.cfg.base_url.trim_end_matches('/'));
    let read = async {
        let http = reqwest::Client::builder()
            .timeout(MODELS_TIMEOUT)
            .build()
            .ok()?;
        let mut rb = http.get(&url);
        if let Some(key) = &p.cfg.api_key {
            rb = rb.bearer_auth(key.expose());
        }
        let mut resp = rb.send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.ok()? {
            if body.len() + chunk.len() > MODELS_MAX_BYTES {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        Some(body)
    };
    let body = tokio::time::timeout(MODELS_TIMEOUT, read)
        .await
        .ok()
        .flatten();
    let models = body.as_deref().map(parse_models).unwrap_or_default();
    tracing::info!(provider = %p.name, %url, models = models.len(), "read the provider's /models");
    models
}

impl Hub {
    /// A provider's candidate models: its `[[models]]` and its default model, with what its
    /// `/models` says filling the gaps (read once per hub); only the server's own list when
    /// the config names none. A lone `[provider]` with a model and no `[routing]` is asked
    /// nothing: its model is the only candidate, as before there were rules.
    pub async fn provider_models(&self, p: &NamedProvider) -> Vec<ModelMeta> {
        let routing = &self.cfg().routing;
        let configured = merge_models(&p.models, &[], &p.cfg.model);
        let routed = routing.providers.len() > 1 || routing.mode.is_some();
        if !p.discover || (!routed && !configured.is_empty()) {
            return configured;
        }
        let cached = routing
            .cache
            .models
            .lock()
            .ok()
            .and_then(|m| m.get(&p.name).cloned());
        let server = match cached {
            Some(s) => s,
            None => {
                let s = fetch_models(p).await;
                if let Ok(mut m) = routing.cache.models.lock() {
                    m.insert(p.name.clone(), s.clone());
                }
                s
            }
        };
        if configured.is_empty() {
            return server;
        }
        let known: Vec<ModelMeta> = merge_models(&configured, &server, "");
        known
            .into_iter()
            .filter(|m| configured.iter().any(|c| c.name == m.name))
            .collect()
    }

    /// The candidates of the providers named.
    async fn candidates(&self, names: &[&str]) -> Vec<Candidate> {
        let mut out = Vec::new();
        for name in names {
            if let Some(p) = self.cfg().routing.provider(name) {
                for meta in self.provider_models(p).await {
                    out.push(Candidate {
                        provider: p.name.clone(),
                        meta,
                    });
                }
            }
        }
        out
    }

    /// The first leg of a run: the asked model (on the asked provider, else the first that
    /// lists it, else the mode's provider), or the rules over the mode's providers.
    pub async fn route_start(&self, ask: &Ask, needs: Needs) -> Result<Choice, AppError> {
        let routing = &self.cfg().routing;
        let mode = ask.mode.map(|(m, _)| m);
        let all: Vec<&str> = routing.providers.iter().map(|p| p.name.as_str()).collect();
        let scope: Vec<&str> = match (&ask.provider, mode) {
            (Some((p, _)), _) => vec![p.as_str()],
            (None, Some(AgentMode::Local | AgentMode::HybridAuto)) => {
                routing.local_name().into_iter().collect()
            }
            (None, Some(AgentMode::Remote)) => routing.remote_name().into_iter().collect(),
            (None, None) => all.clone(),
        };
        if let Some((model, level)) = &ask.model {
            // The config's models only: an asked model needs no server asked.
            let mut order = scope.clone();
            if ask.provider.is_none() {
                order.extend(all.iter().copied());
            }
            let mut everywhere = Vec::new();
            for p in order.iter().filter_map(|n| routing.provider(n)) {
                for meta in merge_models(&p.models, &[], &p.cfg.model) {
                    everywhere.push(Candidate {
                        provider: p.name.clone(),
                        meta,
                    });
                }
            }
            let listed = everywhere.iter().find(|c| &c.meta.name == model);
            let provider = listed
                .map(|c| c.provider.clone())
                .or_else(|| scope.first().map(|s| s.to_string()))
                .ok_or_else(|| AppError::bad_request("no model provider is configured".into()))?;
            return Ok(Choice {
                provider,
                model: model.clone(),
                context: listed.and_then(|c| c.meta.context),
                reason: format!("model {model:?} asked by {}", level.as_str()),
            });
        }
        let candidates = self.candidates(&scope).await;
        select(&candidates, needs, routing.prefer, routing.reserve_tokens)
            .map_err(AppError::bad_request)
    }

    /// The remote leg of a `hybrid_auto` run: the rules over the remote provider's models.
    pub async fn route_remote(&self, needs: Needs) -> Result<Choice, AppError> {
        let routing = &self.cfg().routing;
        let remote = routing
            .remote_name()
            .ok_or_else(|| AppError::bad_request("no remote provider is configured".into()))?;
        let candidates = self.candidates(&[remote]).await;
        select(&candidates, needs, routing.prefer, routing.reserve_tokens)
            .map_err(AppError::bad_request)
    }

    /// The provider named, made once per hub (`default` is the hub's one provider of old).
    pub fn named_provider(&self, name: &str) -> Result<Arc<dyn Provider>, AppError> {
        let routing = &self.cfg().routing;
        let Some(p) = routing.provider(name) else {
            return Err(AppError::bad_request(format!(
                "provider {name:?} is not configured"
            )));
        };
        let make = || {
            crate::agent::provider::OpenAiCompatible::new(p.cfg.clone())
                .map(|p| Arc::new(p) as Arc<dyn Provider>)
        };
        let failed = |e: crate::model::chat::ProviderError| {
            AppError::failed("setting up the model provider", e)
        };
        if name == crate::config::routing::DEFAULT_PROVIDER {
            return self.runs().provider(make).map_err(failed);
        }
        let mut cache = routing
            .cache
            .providers
            .lock()
            .map_err(|_| AppError::internal("the provider cache lock is poisoned"))?;
        if let Some(made) = cache.get(name) {
            return Ok(Arc::clone(made));
        }
        let made = make().map_err(failed)?;
        cache.insert(name.to_string(), Arc::clone(&made));
        Ok(made)
    }
}

#[cfg(test)]
#[path = "routing_tests.rs"]
mod tests;

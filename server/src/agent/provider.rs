//! Model providers (seed 000 §11–§15): one interface, and an adapter for every server that speaks
//! OpenAI's chat-completions API — OpenAI itself, OpenRouter, vLLM, LM Studio, Ollama and
//! llama.cpp's server.
//!
//! Everything provider-specific stays in the adapter: the loop in [`crate::agent::tool_loop`] sees only
//! the canonical [`Message`](crate::model::chat::Message), [`ToolCall`](crate::model::chat::ToolCall) and [`StepResult`]. The API key lives in a [`Secret`](crate::config::provider::Secret)
//! that never prints, is sent only in the `Authorization` header, and never reaches a sandbox.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::wire::{parse_completion, read_stream, wire_message};
use crate::config::provider::ProviderConfig;
use crate::model::chat::{Provider, ProviderError, StepRequest, StepResult};
use crate::model::text::{error_chain, shorten};

// ---------------------------------------------------------------------------------------------
// The OpenAI-compatible adapter.

pub struct OpenAiCompatible {
    cfg: ProviderConfig,
    http: reqwest::Client,
    /// Set once the server refused to stream an answer that may call tools (llama-cpp-python:
    /// "Automatic streaming tool choice is not supported"); from then on such requests are sent
    /// unstreamed, for the life of this provider.
    no_streamed_tools: std::sync::atomic::AtomicBool,
}

impl OpenAiCompatible {
    pub fn new(cfg: ProviderConfig) -> Result<Self, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ProviderError::Malformed(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            cfg,
            http,
            no_streamed_tools: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether this request is sent streamed: as configured, unless it offers tools and the
    /// server has refused to stream those.
    fn streams(&self, req: &StepRequest<'_>) -> bool {
        self.cfg.stream
            && (req.tools.is_empty()
                || !self
                    .no_streamed_tools
                    .load(std::sync::atomic::Ordering::Relaxed))
    }

    fn url(&self) -> String {
        format!(
            "{}/chat/completions",
            self.cfg.base_url.trim_end_matches('/')
        )
    }

    fn body(&self, req: &StepRequest<'_>, stream: bool) -> Value {
        let messages: Vec<Value> = req.messages.iter().map(wire_message).collect();
        let mut body = json!({
            "model": req.model,
            "messages": messages,
        });
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(
                req.tools
                    .iter()
                    .map(|t| {
                        json!({"type": "function", "function": {
                            "name": t.name, "description": t.description, "parameters": t.parameters,
                        }})
                    })
                    .collect(),
            );
            body["tool_choice"] = json!("auto");
        }
        if stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(t) = self.cfg.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = self.cfg.max_tokens {
            body["max_tokens"] = json!(m);
        }
        body
    }

    async fn attempt(&self, body: &Value, model: &str) -> Result<(StepResult, bool), Attempt> {
        let mut rb = self
            .http
            .post(self.url())
            .timeout(self.cfg.request_timeout)
            .json(body);
        if let Some(key) = &self.cfg.api_key {
            rb = rb.bearer_auth(key.expose());
        }
        let resp = rb.send().await.map_err(Attempt::from_reqwest)?;
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s.min(60)));
            let text = resp.text().await.unwrap_or_default();
            return Err(Attempt::Status {
                status,
                message: error_message(&text),
                raw: text,
                retry_after,
            });
        }
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let result = if sse {
            read_stream(resp).await?
        } else {
            let text = resp.text().await.map_err(Attempt::from_reqwest)?;
            parse_completion(&text).map_err(Attempt::Fatal)?
        };
        let mut result = result;
        if result.model.is_empty() {
            result.model = model.to_string();
        }
        Ok((result, sse))
    }
}

/// How one attempt failed, before deciding whether to retry.
pub(crate) enum Attempt {
    Status {
        status: u16,
        message: String,
        raw: String,
        retry_after: Option<Duration>,
    },
    Timeout,
    Connect(String),
    Fatal(ProviderError),
    /// The server would not stream this answer: it closed the stream before any of it, or said
    /// so in an error.
    StreamRefused(String),
}

impl Attempt {
    /// Failed on an open (pooled) connection while sending, not while connecting: hyper says
    /// `SendRequest`, a closed connection or a reset.
    fn is_stale_connection(&self) -> bool {
        matches!(self, Attempt::Connect(m) if m.contains("(SendRequest)")
            || m.contains("connection closed before message completed")
            || m.contains("reset by peer"))
    }

    fn refuses_streaming(&self) -> bool {
        match self {
            Attempt::StreamRefused(_) => true,
            Attempt::Status { message, .. } => says_no_streaming(message),
            Attempt::Fatal(ProviderError::Http { message, .. }) => says_no_streaming(message),
            _ => false,
        }
    }

    pub(crate) fn from_reqwest(e: reqwest::Error) -> Attempt {
        if e.is_timeout() {
            Attempt::Timeout
        } else if e.is_connect() || e.is_request() || e.is_body() {
            // Strip the source chain to one line; reqwest errors never carry headers.
            Attempt::Connect(error_chain(&e))
        } else {
            Attempt::Fatal(ProviderError::Malformed(error_chain(&e)))
        }
    }
}

/// Whether a server's error text says it cannot stream (llama-cpp-python: "Automatic streaming
/// tool choice is not supported"; others word it "streaming is not supported with tools").
fn says_no_streaming(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains("stream")
        && [
            "not supported",
            "unsupported",
            "not support",
            "cannot",
            "can't",
        ]
        .iter()
        .any(|p| m.contains(p))
}

impl Provider for OpenAiCompatible {
    fn provider_name(&self) -> &str {
        "openai-compatible"
    }

    fn supports_native_tools(&self) -> bool {
        true
    }

    fn default_model(&self) -> &str {
        &self.cfg.model
    }

    fn run_step<'a>(
        &'a self,
        request: StepRequest<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<StepResult, ProviderError>> {
        Box::pin(async move {
            let mut stream = self.streams(&request);
            let mut body = self.body(&request, stream);
            let started = Instant::now();
            let mut attempts = 0u32;
            // A pooled keep-alive connection the server has just closed fails the request
            // before the server sees it (after a refused stream, llama-cpp-python closes
            // the connection): sent again once at once, not counted as a failure.
            let mut stale_retried = false;
            loop {
                attempts += 1;
                let outcome = tokio::select! {
                    _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                    r = self.attempt(&body, request.model) => r,
                };
                let failure = match outcome {
                    Ok((mut result, streamed)) => {
                        result.latency_ms = started.elapsed().as_millis() as u64;
                        result.attempts = attempts;
                        result.streamed = streamed;
                        return Ok(result);
                    }
                    Err(failure) => failure,
                };
                if stream && !request.tools.is_empty() && failure.refuses_streaming() {
                    // Not a failure of the model: ask again, unstreamed, at once.
                    self.stop_streaming_tools();
                    stream = false;
                    body = self.body(&request, false);
                    attempts -= 1;
                    continue;
                }
                if !stale_retried && failure.is_stale_connection() {
                    stale_retried = true;
                    attempts -= 1;
                    continue;
                }
                let (wait, last) = match self.judge(failure, attempts, request.model) {
                    Verdict::GiveUp(e) => return Err(e),
                    Verdict::Retry { wait, error } => (wait, error),
                };
                if attempts > self.cfg.max_retries {
                    return Err(last);
                }
                let backoff = self.backoff(wait, attempts);
                tracing::warn!(attempt = attempts, error = %last, ?backoff, "model call failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        })
    }
}

/// What to do after an attempt failed: give up with an error, or try again (after the
/// server's `Retry-After`, if it sent one) and report `error` if that was the last try.
#[derive(Debug)]
enum Verdict {
    GiveUp(ProviderError),
    Retry {
        wait: Option<Duration>,
        error: ProviderError,
    },
}

impl OpenAiCompatible {
    /// Remember, for the life of this provider, that the server will not stream answers that
    /// may call tools.
    fn stop_streaming_tools(&self) {
        self.no_streamed_tools
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(
            url = %self.url(),
            "the model provider does not stream answers that may call tools; \
             sending those unstreamed from now on"
        );
    }

    /// Whether the `attempts`-th failed attempt is worth retrying, and the error it stands for.
    fn judge(&self, failure: Attempt, attempts: u32, model: &str) -> Verdict {
        match failure {
            Attempt::Fatal(e) => Verdict::GiveUp(e),
            Attempt::StreamRefused(message) => Verdict::GiveUp(ProviderError::Malformed(message)),
            Attempt::Status {
                status,
                message,
                raw,
                retry_after,
            } => {
                if let Some(e) = classify(status, &message, &raw, model, &self.cfg) {
                    return Verdict::GiveUp(e);
                }
                if !matches!(status, 408 | 409 | 425 | 429 | 500..=599) {
                    return Verdict::GiveUp(ProviderError::Http { status, message });
                }
                Verdict::Retry {
                    wait: retry_after,
                    error: ProviderError::GaveUp {
                        attempts,
                        status,
                        message,
                    },
                }
            }
            Attempt::Timeout => Verdict::Retry {
                wait: None,
                error: ProviderError::Timeout {
                    url: self.url(),
                    secs: self.cfg.request_timeout.as_secs(),
                    attempts,
                },
            },
            Attempt::Connect(message) => Verdict::Retry {
                wait: None,
                error: ProviderError::Unreachable {
                    url: self.url(),
                    attempts,
                    message,
                },
            },
        }
    }

    /// How long to wait before the next attempt: the server's `wait` if it gave one, else
    /// `retry_base` doubled per attempt so far, at most a minute.
    fn backoff(&self, wait: Option<Duration>, attempts: u32) -> Duration {
        wait.unwrap_or_else(|| {
            self.cfg
                .retry_base
                .saturating_mul(1u32 << (attempts - 1).min(10))
                .min(Duration::from_secs(60))
        })
    }
}

/// Errors that retrying cannot fix, recognised across servers' wordings.
fn classify(
    status: u16,
    message: &str,
    raw: &str,
    model: &str,
    cfg: &ProviderConfig,
) -> Option<ProviderError> {
    let lower = raw.to_lowercase();
    if status == 401 || status == 403 {
        return Some(ProviderError::Auth {
            status,
            message: message.to_string(),
            source_hint: cfg.key_source.to_string(),
        });
    }
    let overflow = [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "exceed_context_size",
        "exceeds the available context",
        "too many tokens",
        "prompt is too long",
    ];
    if (status == 400 || status == 413) && overflow.iter().any(|p| lower.contains(p)) {
        return Some(ProviderError::ContextOverflow {
            message: message.to_string(),
        });
    }
    let missing_model = lower.contains("model_not_found")
        || (lower.contains("model")
            && (lower.contains("not found")
                || lower.contains("does not exist")
                || lower.contains("not exist")));
    if (status == 404 || status == 400) && missing_model {
        return Some(ProviderError::ModelNotFound {
            model: model.to_string(),
            status,
            message: message.to_string(),
        });
    }
    // A request the server read and found invalid. Some servers (llama-cpp-python) answer a
    // validation error with a 500, which would otherwise be retried as a transient failure.
    let invalid = [
        "validation error",
        "input should be",
        "field required",
        "invalid_request_error",
        "invalid request",
    ];
    if matches!(status, 400 | 422) || (status >= 500 && invalid.iter().any(|p| lower.contains(p))) {
        return Some(ProviderError::Rejected {
            status,
            message: message.to_string(),
        });
    }
    None
}

/// The human part of an error body: OpenAI's `{"error":{"message"}}`, Ollama's `{"error":"…"}`,
/// or the raw text, shortened.
pub(crate) fn error_message(text: &str) -> String {
    let from_json = serde_json::from_str::<Value>(text).ok().and_then(|v| {
        v["error"]["message"]
            .as_str()
            .or_else(|| v["error"].as_str())
            .or_else(|| v["message"].as_str())
            .map(str::to_string)
    });
    let msg = from_json.unwrap_or_else(|| text.trim().to_string());
    let msg = if msg.is_empty() {
        "(empty body)".to_string()
    } else {
        msg
    };
    shorten(&msg, 500)
}

#[cfg(test)]
#[path = "provider_tests.rs"]
mod tests;

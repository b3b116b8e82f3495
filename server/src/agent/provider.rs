//! Model providers (seed 000 §11–§15): one interface, and an adapter for every server that speaks
//! OpenAI's chat-completions API — OpenAI itself, OpenRouter, vLLM, LM Studio, Ollama and
//! llama.cpp's server.
//!
//! Everything provider-specific stays in the adapter: the loop in [`crate::agent::tool_loop`] sees only
//! the canonical [`Message`], [`ToolCall`] and [`StepResult`]. The API key lives in a [`Secret`]
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
mod tests {
    use super::*;
    use crate::agent::wire::StreamAssembler;
    use crate::config::provider::{read_key_file, KeySource, Secret};
    use crate::model::chat::{Message, StopReason, ToolCall};

    fn test_config() -> ProviderConfig {
        ProviderConfig {
            base_url: "http://x".into(),
            model: "m".into(),
            api_key: None,
            key_source: KeySource::None,
            stream: true,
            max_retries: 0,
            retry_base: Duration::from_millis(1),
            request_timeout: Duration::from_secs(1),
            temperature: None,
            max_tokens: None,
        }
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("sk-very-secret".into());
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let cfg = ProviderConfig {
            api_key: Some(s),
            key_source: KeySource::Env("HUNKGATE_API_KEY".into()),
            ..test_config()
        };
        let dbg = format!("{cfg:?}");
        assert!(
            !dbg.contains("sk-very-secret") && dbg.contains("***"),
            "{dbg}"
        );
    }

    #[test]
    fn parallel_tool_calls_reassemble_from_stream_pieces() {
        let mut a = StreamAssembler::default();
        for chunk in [
            r#"{"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"Look"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c0","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"file_path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c1","type":"function","function":{"name":"list_files","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
            "[DONE]",
        ] {
            a.feed(chunk).unwrap();
        }
        let r = a.finish().unwrap();
        assert_eq!(r.stop_reason, StopReason::NeedsTools);
        assert_eq!(r.assistant_message.as_deref(), Some("Look"));
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].arguments, r#"{"file_path":"a.rs"}"#);
        assert_eq!(r.tool_calls[1].name, "list_files");
        assert_eq!(r.usage.unwrap().total_tokens, 15);
        assert_eq!(r.model, "m1");
        // A stream cut before it finished is an error, not an empty answer.
        let mut cut = StreamAssembler::default();
        cut.feed(r#"{"choices":[{"index":0,"delta":{"content":"par"}}]}"#)
            .unwrap();
        assert!(cut.finish().is_err());
    }

    #[test]
    fn errors_are_classified_across_server_wordings() {
        let cfg = test_config();
        let openai_ctx = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        let llama_ctx = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        let ollama_model = r#"{"error":{"message":"model \"qwen9\" not found, try pulling it first","type":"api_error"}}"#;
        let c = |status, raw: &str| classify(status, &error_message(raw), raw, "qwen9", &cfg);
        assert!(matches!(
            c(400, openai_ctx),
            Some(ProviderError::ContextOverflow { .. })
        ));
        assert!(matches!(
            c(400, llama_ctx),
            Some(ProviderError::ContextOverflow { .. })
        ));
        assert!(matches!(
            c(404, ollama_model),
            Some(ProviderError::ModelNotFound { .. })
        ));
        assert!(matches!(c(401, "{}"), Some(ProviderError::Auth { .. })));
        // Positive control: a plain 500 is not classified (it is retried).
        assert!(c(500, r#"{"error":{"message":"boom"}}"#).is_none());
        assert_eq!(error_message(r#"{"error":"plain"}"#), "plain");
    }

    #[test]
    fn legacy_function_call_is_read_once_and_its_name_cleaned() {
        // llama-cpp-python (chatml-function-calling) sends the same call twice.
        let both = r#"{"model":"local","choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
            "function_call":{"name":"read_file:","arguments":"{\"file_path\":\"a\"}"},
            "tool_calls":[{"id":"call__0_read_file_cmpl-9","type":"function","function":{"name":"read_file","arguments":"{\"file_path\":\"a\"}"}}]}}]}"#;
        let r = parse_completion(both).unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].tool_call_id, "call__0_read_file_cmpl-9");
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.assistant_message, None);
        // Only the legacy field: it becomes the call.
        let legacy = r#"{"choices":[{"finish_reason":"function_call","message":{"role":"assistant",
            "function_call":{"name":"list_files:","arguments":{}}}}]}"#;
        let r = parse_completion(legacy).unwrap();
        assert_eq!(r.stop_reason, StopReason::NeedsTools);
        assert_eq!(r.tool_calls[0].name, "list_files");
        assert_eq!(r.tool_calls[0].arguments, "{}");
        // Streamed legacy deltas too.
        let mut a = StreamAssembler::default();
        a.feed(r#"{"choices":[{"delta":{"function_call":{"name":"finish:","arguments":"{\"summary\""}}}]}"#).unwrap();
        a.feed(r#"{"choices":[{"delta":{"function_call":{"arguments":":\"ok\"}"}},"finish_reason":"function_call"}]}"#).unwrap();
        let r = a.finish().unwrap();
        assert_eq!(r.tool_calls[0].name, "finish");
        assert_eq!(r.tool_calls[0].arguments, r#"{"summary":"ok"}"#);
    }

    #[test]
    fn assistant_content_is_never_null_on_the_wire() {
        let m = Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                tool_call_id: "c".into(),
                name: "list_files".into(),
                arguments: "{}".into(),
            }],
        };
        assert_eq!(wire_message(&m)["content"], "");
    }

    #[test]
    fn refusals_to_stream_and_invalid_requests_are_told_apart() {
        assert!(says_no_streaming(
            "Automatic streaming tool choice is not supported"
        ));
        assert!(!says_no_streaming("model is overloaded"));
        let mut unstarted = StreamAssembler::default();
        assert!(unstarted.is_unstarted());
        unstarted
            .feed(r#"{"choices":[{"delta":{"content":"a"}}]}"#)
            .unwrap();
        assert!(!unstarted.is_unstarted(), "a cut answer is not a refusal");
        let cfg = test_config();
        let pydantic = r#"{"error":{"message":"1 validation error for ChatCompletionRequestAssistantMessage
content
  Input should be a valid string","type":"internal_server_error"}}"#;
        let c = |status, raw: &str| classify(status, &error_message(raw), raw, "m", &cfg);
        assert!(matches!(
            c(500, pydantic),
            Some(ProviderError::Rejected { status: 500, .. })
        ));
        assert!(matches!(c(422, "{}"), Some(ProviderError::Rejected { .. })));
        assert!(c(503, r#"{"error":{"message":"loading model"}}"#).is_none());
    }

    #[test]
    fn only_transient_failures_are_retried() {
        let p = OpenAiCompatible::new(test_config()).unwrap();
        let status = |status, body: &str| Attempt::Status {
            status,
            message: error_message(body),
            raw: body.to_string(),
            retry_after: Some(Duration::from_secs(3)),
        };
        let v = p.judge(status(503, r#"{"error":"busy"}"#), 2, "m");
        assert!(
            matches!(&v, Verdict::Retry { wait: Some(w), error: ProviderError::GaveUp { attempts: 2, status: 503, .. } } if w.as_secs() == 3),
            "{v:?}"
        );
        let v = p.judge(status(404, r#"{"error":"no route"}"#), 1, "m");
        assert!(
            matches!(&v, Verdict::GiveUp(ProviderError::Http { status: 404, message }) if message == "no route"),
            "{v:?}"
        );
        let v = p.judge(status(401, "{}"), 1, "m");
        assert!(
            matches!(v, Verdict::GiveUp(ProviderError::Auth { .. })),
            "{v:?}"
        );
        let v = p.judge(Attempt::Timeout, 1, "m");
        assert!(
            matches!(
                &v,
                Verdict::Retry {
                    wait: None,
                    error: ProviderError::Timeout {
                        secs: 1,
                        attempts: 1,
                        ..
                    }
                }
            ),
            "{v:?}"
        );
        let v = p.judge(Attempt::Connect("refused".into()), 1, "m");
        assert!(
            matches!(
                &v,
                Verdict::Retry {
                    error: ProviderError::Unreachable { .. },
                    ..
                }
            ),
            "{v:?}"
        );
        let v = p.judge(Attempt::StreamRefused("closed".into()), 1, "m");
        assert!(
            matches!(v, Verdict::GiveUp(ProviderError::Malformed(_))),
            "{v:?}"
        );
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_a_minute_unless_the_server_says() {
        let p = OpenAiCompatible::new(ProviderConfig {
            retry_base: Duration::from_millis(500),
            ..test_config()
        })
        .unwrap();
        let ms = |wait, attempts| p.backoff(wait, attempts).as_millis();
        assert_eq!(ms(None, 1), 500);
        assert_eq!(ms(None, 2), 1000);
        assert_eq!(ms(None, 4), 4000);
        assert_eq!(ms(None, 30), 60_000);
        assert_eq!(ms(Some(Duration::from_secs(2)), 4), 2000);
    }

    #[test]
    fn key_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("key");
        std::fs::write(&p, "sk-1\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_key_file(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && !e.contains("sk-1"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_key_file(&p).unwrap().expose(), "sk-1");
    }
}

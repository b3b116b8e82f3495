//! Model providers (seed 000 §11–§15): one interface, and an adapter for every server that speaks
//! OpenAI's chat-completions API — OpenAI itself, OpenRouter, vLLM, LM Studio, Ollama and
//! llama.cpp's server.
//!
//! Everything provider-specific stays in the adapter: the loop in [`crate::agent_loop`] sees only
//! the canonical [`Message`], [`ToolCall`] and [`StepResult`]. The API key lives in a [`Secret`]
//! that never prints, is sent only in the `Authorization` header, and never reaches a sandbox.

use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::StreamExt;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::config::provider::ProviderConfig;
use crate::model::chat::{
    Message, Provider, ProviderError, StepRequest, StepResult, StopReason, ToolCall, Usage,
};

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
enum Attempt {
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

    fn from_reqwest(e: reqwest::Error) -> Attempt {
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
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
                if let Err(refusal) = &outcome {
                    if stream && !request.tools.is_empty() && refusal.refuses_streaming() {
                        // Not a failure of the model: ask again, unstreamed, at once.
                        self.no_streamed_tools
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        tracing::warn!(
                            url = %self.url(),
                            "the model provider does not stream answers that may call tools; \
                             sending those unstreamed from now on"
                        );
                        stream = false;
                        body = self.body(&request, false);
                        attempts -= 1;
                        continue;
                    }
                    if !stale_retried && refusal.is_stale_connection() {
                        stale_retried = true;
                        attempts -= 1;
                        continue;
                    }
                }
                let (wait, last) = match outcome {
                    Ok((mut result, streamed)) => {
                        result.latency_ms = started.elapsed().as_millis() as u64;
                        result.attempts = attempts;
                        result.streamed = streamed;
                        return Ok(result);
                    }
                    Err(Attempt::Fatal(e)) => return Err(e),
                    Err(Attempt::StreamRefused(message)) => {
                        return Err(ProviderError::Malformed(message))
                    }
                    Err(Attempt::Status {
                        status,
                        message,
                        raw,
                        retry_after,
                    }) => {
                        if let Some(e) = classify(status, &message, &raw, request.model, &self.cfg)
                        {
                            return Err(e);
                        }
                        let retryable = matches!(status, 408 | 409 | 425 | 429 | 500..=599);
                        let e = ProviderError::GaveUp {
                            attempts,
                            status,
                            message,
                        };
                        if !retryable {
                            return Err(match e {
                                ProviderError::GaveUp {
                                    status, message, ..
                                } => ProviderError::Http { status, message },
                                e => e,
                            });
                        }
                        (retry_after, e)
                    }
                    Err(Attempt::Timeout) => (
                        None,
                        ProviderError::Timeout {
                            url: self.url(),
                            secs: self.cfg.request_timeout.as_secs(),
                            attempts,
                        },
                    ),
                    Err(Attempt::Connect(message)) => (
                        None,
                        ProviderError::Unreachable {
                            url: self.url(),
                            attempts,
                            message,
                        },
                    ),
                };
                if attempts > self.cfg.max_retries {
                    return Err(last);
                }
                let backoff = wait.unwrap_or_else(|| {
                    self.cfg
                        .retry_base
                        .saturating_mul(1u32 << (attempts - 1).min(10))
                        .min(Duration::from_secs(60))
                });
                tracing::warn!(attempt = attempts, error = %last, ?backoff, "model call failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
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
fn error_message(text: &str) -> String {
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

fn shorten(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .take(max)
        .collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

fn wire_message(m: &Message) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            // Never `null`: servers that validate the OpenAI schema strictly (llama-cpp-python)
            // refuse a null content even beside tool calls, and "" means the same to all.
            let mut v = json!({"role": "assistant", "content": content.as_deref().unwrap_or("")});
            if !tool_calls.is_empty() {
                v["tool_calls"] = Value::Array(
                    tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.tool_call_id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect(),
                );
            }
            v
        }
        Message::Tool {
            tool_call_id,
            name,
            content,
        } => {
            json!({"role": "tool", "tool_call_id": tool_call_id, "name": name, "content": content})
        }
    }
}

fn stop_reason(finish: Option<&str>, has_calls: bool) -> StopReason {
    match finish {
        _ if has_calls => StopReason::NeedsTools,
        Some("tool_calls") | Some("function_call") => StopReason::NeedsTools,
        Some("stop") | None => StopReason::Done,
        Some("length") => StopReason::Length,
        Some(_) => StopReason::Other,
    }
}

fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let p = u["prompt_tokens"].as_u64().unwrap_or(0);
    let c = u["completion_tokens"].as_u64().unwrap_or(0);
    Some(Usage {
        prompt_tokens: p,
        completion_tokens: c,
        total_tokens: u["total_tokens"].as_u64().unwrap_or(p + c),
    })
}

/// A tool call's arguments as JSON text; some servers send an object instead of a string.
fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A tool name as the model meant it: llama-cpp-python's legacy `function_call` names carry
/// a trailing colon (`"read_file:"`).
fn tool_name(raw: &str) -> String {
    let name = raw.trim().trim_end_matches(':').trim_end();
    if name.is_empty() { raw } else { name }.to_string()
}

/// A whole (non-streamed) chat completion.
pub fn parse_completion(text: &str) -> Result<StepResult, ProviderError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ProviderError::Malformed(format!("{e}: {}", shorten(text, 200))))?;
    let choice = v["choices"]
        .get(0)
        .ok_or_else(|| ProviderError::Malformed(format!("no choices in {}", shorten(text, 200))))?;
    let msg = &choice["message"];
    let mut calls = Vec::new();
    if let Some(arr) = msg["tool_calls"].as_array() {
        for (i, c) in arr.iter().enumerate() {
            let name = c["function"]["name"].as_str().unwrap_or("").to_string();
            let arguments = arguments_text(&c["function"]["arguments"]);
            calls.push(ToolCall {
                tool_call_id: c["id"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("call_{i}")),
                name: tool_name(&name),
                arguments,
            });
        }
    }
    // The legacy single `function_call`, read only when there are no `tool_calls` (servers that
    // send both, like llama-cpp-python, describe the same call twice).
    if calls.is_empty() {
        if let Some(f) = msg.get("function_call").filter(|f| f.is_object()) {
            calls.push(ToolCall {
                tool_call_id: "call_0".into(),
                name: tool_name(f["name"].as_str().unwrap_or("")),
                arguments: arguments_text(&f["arguments"]),
            });
        }
    }
    let content = msg["content"].as_str().map(str::to_string);
    Ok(StepResult {
        stop_reason: stop_reason(choice["finish_reason"].as_str(), !calls.is_empty()),
        assistant_message: content.filter(|c| !c.is_empty()),
        tool_calls: calls,
        usage: usage_of(&v),
        latency_ms: 0,
        model: v["model"].as_str().unwrap_or("").to_string(),
        attempts: 1,
        streamed: false,
    })
}

/// Assembles a streamed completion from its chunks.
#[derive(Default)]
pub struct StreamAssembler {
    content: String,
    calls: Vec<ToolCall>,
    /// A legacy `function_call` delta's name and arguments, used only if no `tool_calls` came.
    legacy: Option<(String, String)>,
    finish: Option<String>,
    usage: Option<Usage>,
    model: String,
    done: bool,
}

impl StreamAssembler {
    /// Nothing of an answer arrived and the stream did not finish: what a server sends when it
    /// gives up on streaming before it starts.
    pub fn is_unstarted(&self) -> bool {
        !self.done
            && self.finish.is_none()
            && self.content.is_empty()
            && self.calls.is_empty()
            && self.legacy.is_none()
    }

    /// Feed one SSE `data:` payload.
    pub fn feed(&mut self, data: &str) -> Result<(), ProviderError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::Malformed(format!("stream chunk: {e}: {}", shorten(data, 200)))
        })?;
        if let Some(err) = v.get("error") {
            return Err(ProviderError::Http {
                status: 200,
                message: error_message(&json!({ "error": err }).to_string()),
            });
        }
        if let Some(m) = v["model"].as_str() {
            self.model = m.to_string();
        }
        if let Some(u) = usage_of(&v) {
            self.usage = Some(u);
        }
        let Some(choice) = v["choices"].get(0) else {
            return Ok(());
        };
        let delta = &choice["delta"];
        if let Some(c) = delta["content"].as_str() {
            self.content.push_str(c);
        }
        if let Some(arr) = delta["tool_calls"].as_array() {
            for (n, c) in arr.iter().enumerate() {
                let index = c["index"].as_u64().map(|i| i as usize).unwrap_or(n);
                while self.calls.len() <= index {
                    self.calls.push(ToolCall {
                        tool_call_id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                }
                let call = &mut self.calls[index];
                if let Some(id) = c["id"].as_str() {
                    call.tool_call_id = id.to_string();
                }
                if let Some(name) = c["function"]["name"].as_str() {
                    call.name.push_str(name);
                }
                match &c["function"]["arguments"] {
                    Value::String(s) => call.arguments.push_str(s),
                    Value::Null => {}
                    other => call.arguments.push_str(&other.to_string()),
                }
            }
        }
        if let Some(f) = delta.get("function_call").filter(|f| f.is_object()) {
            let (name, args) = self.legacy.get_or_insert_default();
            if let Some(n) = f["name"].as_str() {
                name.push_str(n);
            }
            args.push_str(&arguments_text(&f["arguments"]));
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            self.finish = Some(f.to_string());
        }
        Ok(())
    }

    pub fn finish(self) -> Result<StepResult, ProviderError> {
        if !self.done && self.finish.is_none() {
            return Err(ProviderError::Malformed(
                "the stream ended before the model finished (no finish_reason, no [DONE])".into(),
            ));
        }
        let mut calls = self.calls;
        if calls.is_empty() {
            if let Some((name, arguments)) = self.legacy {
                calls.push(ToolCall {
                    tool_call_id: String::new(),
                    name,
                    arguments,
                });
            }
        }
        let calls: Vec<ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                if c.tool_call_id.is_empty() {
                    c.tool_call_id = format!("call_{i}");
                }
                c.name = tool_name(&c.name);
                c
            })
            .collect();
        Ok(StepResult {
            stop_reason: stop_reason(self.finish.as_deref(), !calls.is_empty()),
            assistant_message: Some(self.content).filter(|c| !c.is_empty()),
            tool_calls: calls,
            usage: self.usage,
            latency_ms: 0,
            model: self.model,
            attempts: 1,
            streamed: true,
        })
    }
}

/// Largest streamed answer read (a runaway server must not fill the hub's memory).
const MAX_STREAM_BYTES: usize = 32 * 1024 * 1024;

async fn read_stream(resp: reqwest::Response) -> Result<StepResult, Attempt> {
    let mut asm = StreamAssembler::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut total = 0usize;
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // Cut before any of the answer: how a server that gives up on streaming ends a
            // chunked response it has already started.
            Err(e) if asm.is_unstarted() && !e.is_timeout() => {
                return Err(Attempt::StreamRefused(format!(
                    "the model provider broke off the stream before sending any of the answer: {}",
                    error_chain(&e)
                )))
            }
            Err(e) => return Err(Attempt::from_reqwest(e)),
        };
        total += chunk.len();
        if total > MAX_STREAM_BYTES {
            return Err(Attempt::Fatal(ProviderError::Malformed(format!(
                "the streamed answer is larger than {MAX_STREAM_BYTES} bytes"
            ))));
        }
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(data) = line.strip_prefix("data:") {
                asm.feed(data).map_err(Attempt::Fatal)?;
            }
        }
    }
    let rest = String::from_utf8_lossy(&buf);
    if let Some(data) = rest.trim().strip_prefix("data:") {
        asm.feed(data).map_err(Attempt::Fatal)?;
    }
    if asm.is_unstarted() {
        return Err(Attempt::StreamRefused(
            "the model provider closed the stream before sending any of the answer".into(),
        ));
    }
    asm.finish().map_err(Attempt::Fatal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::provider::{read_key_file, KeySource, Secret};

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

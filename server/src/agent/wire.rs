//! OpenAI's chat-completions wire format, both ways: the canonical messages as the request's
//! JSON, and an answer — whole or streamed as server-sent events — as a [`StepResult`]. Pure
//! apart from reading the stream; every server quirk the hub tolerates is handled here.

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::agent::provider::{error_message, Attempt};
use crate::model::chat::{Message, ProviderError, StepResult, StopReason, ToolCall, Usage};
use crate::model::text::{error_chain, shorten};

/// A message as the OpenAI chat-completions API takes it.
///
/// Every text in it goes out with secret-looking strings taken out (see
/// [`crate::model::redact`]): a model provider never receives one the agent came across.
pub(crate) fn wire_message(m: &Message) -> Value {
    let r = crate::model::redact::redacted;
    match m {
        Message::System { content } => json!({"role": "system", "content": r(content)}),
        Message::User { content } => json!({"role": "user", "content": r(content)}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            // Never `null`: servers that validate the OpenAI schema strictly (llama-cpp-python)
            // refuse a null content even beside tool calls, and "" means the same to all.
            let mut v =
                json!({"role": "assistant", "content": r(content.as_deref().unwrap_or(""))});
            if !tool_calls.is_empty() {
                v["tool_calls"] = Value::Array(
                    tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.tool_call_id, "type": "function",
                                "function": {"name": c.name, "arguments": r(&c.arguments)}})
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
            json!({"role": "tool", "tool_call_id": tool_call_id, "name": name, "content": r(content)})
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

pub(crate) async fn read_stream(resp: reqwest::Response) -> Result<StepResult, Attempt> {
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

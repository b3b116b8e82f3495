//! The canonical chat shapes every model provider is translated to and from (seed 000 §14), and
//! the [`Provider`] interface the tool loop talks to. The adapters live in `crate::agent`.
//!
//! May import: `crate::protocol` only.

use std::path::PathBuf;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// Canonical shapes (seed 000 §14).

/// A tool call as the model asked for it. `arguments` is the raw JSON text: the loop parses and
/// validates it, so a malformed one can be fed back to the model instead of failing the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool_call_id: String,
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        name: String,
        content: String,
    },
}

/// A tool the model may call: name, description, JSON Schema of its arguments.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model asked for tools.
    NeedsTools,
    /// The model answered and stopped.
    Done,
    /// The answer was cut at max_tokens.
    Length,
    /// Anything else the server said (content filter, …).
    Other,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub assistant_message: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub stop_reason: StopReason,
    pub usage: Option<Usage>,
    pub latency_ms: u64,
    /// The model that answered, as the server named it.
    pub model: String,
    /// Requests it took (1 without retries).
    pub attempts: u32,
    pub streamed: bool,
}

pub struct StepRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the model provider refused the API key (HTTP {status}): {message}; {source_hint}")]
    Auth {
        status: u16,
        message: String,
        source_hint: String,
    },
    #[error("the model provider has no model {model:?} (HTTP {status}): {message}; pick another with \"model\" on the run or [provider] model (for Ollama: `ollama pull {model}`)")]
    ModelNotFound {
        model: String,
        status: u16,
        message: String,
    },
    #[error("the conversation no longer fits the model's context window: {message}; lower [limits] max_read_bytes / max_read_lines, or use a model with a larger context")]
    ContextOverflow { message: String },
    #[error("the model provider answered HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// The server read the request and refused it as invalid: sending it again cannot help.
    #[error("the model provider rejected the request as invalid (HTTP {status}): {message}; this server does not accept what hunkgate sent — please report it with the server's name and version")]
    Rejected { status: u16, message: String },
    #[error("the model provider at {url} did not answer within {secs}s (after {attempts} attempt(s)); raise [provider] request_timeout_secs if the model is slow")]
    Timeout {
        url: String,
        secs: u64,
        attempts: u32,
    },
    #[error("cannot reach the model provider at {url} after {attempts} attempt(s): {message}; is the server running?")]
    Unreachable {
        url: String,
        attempts: u32,
        message: String,
    },
    #[error(
        "the model provider still fails after {attempts} attempt(s): HTTP {status}: {message}"
    )]
    GaveUp {
        attempts: u32,
        status: u16,
        message: String,
    },
    #[error("the model provider's answer is not a chat completion: {0}")]
    Malformed(String),
    #[error("API key file {path}: {message}")]
    KeyFile { path: PathBuf, message: String },
    #[error("the run was cancelled while waiting for the model")]
    Cancelled,
}

/// A model behind some API.
pub trait Provider: Send + Sync {
    fn provider_name(&self) -> &str;
    fn supports_native_tools(&self) -> bool;
    fn default_model(&self) -> &str;
    /// One model call: the conversation so far in, the model's next message out.
    fn run_step<'a>(
        &'a self,
        request: StepRequest<'a>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<StepResult, ProviderError>>;
}

//! The hub as a client of the Agent Client Protocol (ACP, v1): what it sends an agent and how it
//! reads what comes back — the handshake, the agent's progress, its permission questions.
//! [`crate::runs`] drives the conversation with an agent process in a run's sandbox.
//!
//! The wire types are the official schema crate's (`agent-client-protocol-schema`, pinned: the
//! version the `agent-client-protocol` crate 5.2.0 is built on). The crate's own connection is
//! not used: it reads lines with `BufReader::lines()`, which holds a line of any length, and
//! the hub must bound what a hostile agent makes it hold; [`framing`] does that, and bounds
//! the agent's requests in flight ([`MAX_AGENT_REQUESTS`]).
//!
//! The client advertises no `fs` and no `terminal` capability: the agent uses its own tools in
//! the sandbox, where they belong, and whatever it writes is read back from the sandbox at the
//! end of its turn and reviewed hunk by hunk. Any request of the agent's but
//! `session/request_permission` is answered "method not found".

pub mod framing;

use agent_client_protocol_schema::v1::{
    ClientCapabilities, ContentBlock, EnvVariable, Implementation, InitializeRequest,
    LoadSessionRequest, McpServer, McpServerStdio, NewSessionRequest, PermissionOption,
    PermissionOptionKind, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionUpdate, StopReason, TextContent,
    ToolCallStatus, ToolKind,
};
use agent_client_protocol_schema::ProtocolVersion;
use serde_json::Value;

/// The agent's requests (permission questions) the hub holds at once; more are refused with a
/// JSON-RPC error.
pub const MAX_AGENT_REQUESTS: usize = 16;

/// The method names the hub sends and serves.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const SESSION_NEW: &str = "session/new";
    pub const SESSION_LOAD: &str = "session/load";
    pub const SESSION_PROMPT: &str = "session/prompt";
    pub const SESSION_CANCEL: &str = "session/cancel";
    pub const SESSION_UPDATE: &str = "session/update";
    pub const REQUEST_PERMISSION: &str = "session/request_permission";
}

/// `initialize`'s params: protocol v1, no client capabilities, the hub named.
pub fn initialize_params() -> Value {
    let req = InitializeRequest::new(ProtocolVersion::V1)
        .client_capabilities(ClientCapabilities::default())
        .client_info(Implementation::new("hunkgate", env!("CARGO_PKG_VERSION")));
    serde_json::to_value(req).unwrap_or_default()
}

/// What the agent said of itself in `initialize`'s answer: its protocol version (the hub
/// speaks v1 only) and its name and version, when it gave them.
pub fn check_initialized(result: &Value) -> Result<Option<String>, String> {
    let version = result.get("protocolVersion").and_then(Value::as_u64);
    if version != Some(1) {
        return Err(format!(
            "the agent speaks ACP protocol version {}, and hunkgate speaks version 1",
            version.map_or_else(|| "(none given)".to_string(), |v| v.to_string())
        ));
    }
    let info = result.get("agentInfo");
    let name = info.and_then(|i| i.get("name")).and_then(Value::as_str);
    let ver = info.and_then(|i| i.get("version")).and_then(Value::as_str);
    Ok(name.map(|n| match ver {
        Some(v) => format!("{n} {v}"),
        None => n.to_string(),
    }))
}

/// Whether the agent said in `initialize`'s answer that it can `session/load`.
pub fn can_load_session(result: &Value) -> bool {
    result
        .pointer("/agentCapabilities/loadSession")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// `hunkgate mcp` (the binary at `exe`, with `env`: the hub's URL and the agent's token) as
/// the MCP server offered to a session.
fn hunkgate_mcp(exe: &std::path::Path, env: &[(String, String)]) -> McpServer {
    McpServer::Stdio(
        McpServerStdio::new("hunkgate", exe)
            .args(vec!["mcp".to_string()])
            .env(env.iter().map(|(k, v)| EnvVariable::new(k, v)).collect()),
    )
}

/// `session/new`'s params: the sandbox as `cwd`, and `hunkgate mcp` (the binary at `exe`, with
/// `env`: the hub's URL and the agent's token) offered as an MCP server.
pub fn new_session_params(
    cwd: &std::path::Path,
    exe: &std::path::Path,
    env: &[(String, String)],
) -> Value {
    let req = NewSessionRequest::new(cwd).mcp_servers(vec![hunkgate_mcp(exe, env)]);
    serde_json::to_value(req).unwrap_or_default()
}

/// `session/load`'s params: the earlier session `session_id`, in the sandbox as
/// [`new_session_params`] has it.
pub fn load_session_params(
    session_id: &str,
    cwd: &std::path::Path,
    exe: &std::path::Path,
    env: &[(String, String)],
) -> Value {
    let req = LoadSessionRequest::new(session_id.to_string(), cwd)
        .mcp_servers(vec![hunkgate_mcp(exe, env)]);
    serde_json::to_value(req).unwrap_or_default()
}

/// The session id in `session/new`'s answer.
pub fn session_id(result: &Value) -> Result<String, String> {
    result
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| "session/new answered without a sessionId".to_string())
}

/// `session/prompt`'s params: `text` as one text block.
pub fn prompt_params(session_id: &str, text: &str) -> Value {
    let req = PromptRequest::new(
        session_id.to_string(),
        vec![ContentBlock::Text(TextContent::new(text))],
    );
    serde_json::to_value(req).unwrap_or_default()
}

/// `session/cancel`'s params.
pub fn cancel_params(session_id: &str) -> Value {
    serde_json::json!({ "sessionId": session_id })
}

/// The stop reason in `session/prompt`'s answer, as ACP spells it (`end_turn`, `cancelled`…).
pub fn stop_reason(result: &Value) -> Result<String, String> {
    let reason: StopReason = serde_json::from_value(
        result
            .get("stopReason")
            .cloned()
            .ok_or("session/prompt answered without a stopReason")?,
    )
    .map_err(|e| format!("session/prompt answered with an unknown stopReason: {e}"))?;
    Ok(serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default())
}

/// What one `session/update` means for the run's progress.
#[derive(Debug, PartialEq)]
pub enum Progress {
    /// A chunk of the agent's message (or, `thought`, of its thinking).
    Text { thought: bool, text: String },
    /// A tool call began (or was announced).
    ToolStarted {
        id: String,
        name: String,
        summary: String,
    },
    /// A tool call ended.
    ToolEnded {
        id: String,
        name: String,
        ok: bool,
        summary: String,
    },
    /// The agent's plan, as one line.
    Plan(String),
    /// Nothing to show (commands, modes, usage, a tool call still going).
    Nothing,
}

/// Read a `session/update` notification's params (None: not one the hub can read).
pub fn progress(params: &Value) -> Option<Progress> {
    let update: SessionUpdate = serde_json::from_value(params.get("update")?.clone()).ok()?;
    Some(match update {
        SessionUpdate::AgentMessageChunk(c) => text(false, &c.content),
        SessionUpdate::AgentThoughtChunk(c) => text(true, &c.content),
        SessionUpdate::ToolCall(t) => {
            let name = kind_name(t.kind);
            let summary = tool_summary(&t.title, &t.locations);
            match t.status {
                ToolCallStatus::Completed | ToolCallStatus::Failed => Progress::ToolEnded {
                    id: t.tool_call_id.0.to_string(),
                    name,
                    ok: t.status == ToolCallStatus::Completed,
                    summary,
                },
                _ => Progress::ToolStarted {
                    id: t.tool_call_id.0.to_string(),
                    name,
                    summary,
                },
            }
        }
        SessionUpdate::ToolCallUpdate(u) => match u.fields.status {
            Some(s @ (ToolCallStatus::Completed | ToolCallStatus::Failed)) => Progress::ToolEnded {
                id: u.tool_call_id.0.to_string(),
                name: u.fields.kind.map(kind_name).unwrap_or_default(),
                ok: s == ToolCallStatus::Completed,
                summary: u.fields.title.unwrap_or_default(),
            },
            _ => Progress::Nothing,
        },
        SessionUpdate::Plan(p) => {
            let done = p
                .entries
                .iter()
                .filter(|e| serde_json::to_value(&e.status).ok() == Some("completed".into()))
                .count();
            let items: Vec<&str> = p.entries.iter().map(|e| e.content.as_str()).collect();
            Progress::Plan(format!(
                "Plan ({done}/{} done): {}",
                items.len(),
                items.join("; ")
            ))
        }
        _ => Progress::Nothing,
    })
}

fn text(thought: bool, block: &ContentBlock) -> Progress {
    match block {
        ContentBlock::Text(t) => Progress::Text {
            thought,
            text: t.text.clone(),
        },
        _ => Progress::Nothing,
    }
}

/// A tool kind as ACP spells it (`execute`, `edit`…).
pub fn kind_name(kind: ToolKind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "other".into())
}

/// A tool call in one line: its title, and the first file it touches when the title does not
/// name it. (An edit's diff is the agent's preview only: what counts is read back from the
/// sandbox at the end of the turn.)
fn tool_summary(
    title: &str,
    locations: &[agent_client_protocol_schema::v1::ToolCallLocation],
) -> String {
    let title: String = title.chars().take(200).collect();
    match locations.first() {
        Some(l) if !title.contains(&*l.path.to_string_lossy()) => {
            format!("{title} ({})", l.path.display())
        }
        _ => title,
    }
}

/// A permission question read from its params.
#[derive(Debug)]
pub struct Permission {
    req: RequestPermissionRequest,
}

impl Permission {
    pub fn parse(params: &Value) -> Result<Self, String> {
        serde_json::from_value(params.clone())
            .map(|req| Self { req })
            .map_err(|e| {
                format!("session/request_permission with params hunkgate cannot read: {e}")
            })
    }

    fn kind(&self) -> String {
        kind_name(self.req.tool_call.fields.kind.unwrap_or_default())
    }

    /// Whether the policy puts this question to the reviewer: its tool kind is one of `ask`
    /// (`[acp] ask`). Every other question is allowed: the sandbox is the boundary.
    pub fn must_ask(&self, ask: &[String]) -> bool {
        let kind = self.kind();
        ask.contains(&kind)
    }

    /// The answer without asking: the first "allow once" option (else "allow always", else
    /// the first option).
    pub fn allow(&self) -> Value {
        let pick = self
            .first_of(&[
                PermissionOptionKind::AllowOnce,
                PermissionOptionKind::AllowAlways,
            ])
            .or_else(|| self.req.options.first());
        outcome(pick)
    }

    /// The answer to a skipped, timed-out or unreadable question: "reject once" (else "reject
    /// always"; else the turn's permission is cancelled).
    pub fn reject(&self) -> Value {
        outcome(self.first_of(&[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ]))
    }

    /// The answer for the reviewer's `answer`: an option's id, its name or its kind (any case),
    /// or yes/allow and no/reject; None when it names none of them.
    pub fn answer(&self, answer: &str) -> Option<Value> {
        let a = answer.trim().to_lowercase();
        let by_word = match a.as_str() {
            "y" | "yes" | "allow" | "ok" => self.first_of(&[
                PermissionOptionKind::AllowOnce,
                PermissionOptionKind::AllowAlways,
            ]),
            "n" | "no" | "reject" | "deny" => self.first_of(&[
                PermissionOptionKind::RejectOnce,
                PermissionOptionKind::RejectAlways,
            ]),
            _ => None,
        };
        let pick = self
            .req
            .options
            .iter()
            .find(|o| {
                o.option_id.0.to_lowercase() == a
                    || o.name.to_lowercase() == a
                    || option_kind(o) == a
            })
            .or(by_word)?;
        Some(outcome(Some(pick)))
    }

    /// The question put to the reviewer: the tool call and the options to answer with.
    pub fn question(&self) -> String {
        let f = &self.req.tool_call.fields;
        let title = f.title.as_deref().unwrap_or("a tool call");
        let mut q = format!(
            "Permission for {} ({}): {title}",
            self.kind(),
            self.req.tool_call.tool_call_id.0
        );
        if let Some(input) = &f.raw_input {
            let input: String = input.to_string().chars().take(500).collect();
            q.push_str(&format!("\nInput: {input}"));
        }
        let options: Vec<String> = self
            .req
            .options
            .iter()
            .map(|o| format!("{} ({})", o.option_id.0, o.name))
            .collect();
        q.push_str(&format!(
            "\nAnswer with one of: {} — or yes / no (skip: reject once)",
            options.join(", ")
        ));
        q
    }
}

impl Permission {
    fn first_of(&self, kinds: &[PermissionOptionKind]) -> Option<&PermissionOption> {
        kinds
            .iter()
            .find_map(|k| self.req.options.iter().find(|o| o.kind == *k))
    }
}

fn option_kind(o: &PermissionOption) -> String {
    serde_json::to_value(o.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// `session/request_permission`'s answer selecting `option` (none: cancelled).
fn outcome(option: Option<&PermissionOption>) -> Value {
    let outcome = match option {
        Some(o) => {
            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone()))
        }
        None => RequestPermissionOutcome::Cancelled,
    };
    serde_json::to_value(RequestPermissionResponse::new(outcome)).unwrap_or_default()
}

/// The answer to every permission question still open when the turn is cancelled.
pub fn cancelled_permission() -> Value {
    serde_json::to_value(RequestPermissionResponse::new(
        RequestPermissionOutcome::Cancelled,
    ))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests;

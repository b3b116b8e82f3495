//! `hunkgate mcp`: a Model Context Protocol server over stdio, for agents that bring their own
//! loop (Claude Code, opencode, Codex, …) and talk to tools rather than run `hunkgate publish`.
//!
//! The surface is four tools over the agent API (`/agent/*`, with the run's
//! `HUNKGATE_AGENT_TOKEN`), so the protocol is done by hand: newline-delimited JSON-RPC 2.0 on
//! stdin/stdout, nothing else ever written to stdout (logs go to stderr).
//!
//! [`Server::dispatch`] turns one message into a reply without any I/O; only `tools/call` needs
//! the hub, and [`serve`] runs those as tasks so a slow publish does not hold up a `ping`.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::cli::client::{missing_list, ClientError, HubClient, TOKEN_VAR, URL_VAR};
use crate::protocol::HunkNote;

/// Protocol revisions this server speaks, newest first. Tools, `structuredContent` and
/// `instructions` are all it uses; each of these revisions has them (older clients ignore
/// `structuredContent`). 2025-11-25 is left out on purpose: it turns argument errors into tool
/// results (SEP-1303), while this server answers them with JSON-RPC -32602.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// Longest message read from stdin: the hub takes no request body larger than this, so no tool
/// call that is longer could succeed anyway.
pub const MAX_MESSAGE: usize = crate::api::http::MAX_BODY;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

const INSTRUCTIONS: &str =
    "hunkgate shows your changes to a reviewer, who accepts or rejects them \
hunk by hunk before they reach the user's checkout. Before you start, call get_feedback: rejected \
hunks and the reviewer's comments on earlier suggestions of this session say what to avoid. When \
your change is ready, call publish_suggestion with a description (and hunk_descriptions saying why \
each change was made); suggestion_status then shows how the review is going.";

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("reading standard input")]
    Read(#[source] std::io::Error),
    #[error("writing standard output")]
    Write(#[source] std::io::Error),
    #[error("starting the {0} thread")]
    Thread(&'static str, #[source] std::io::Error),
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

/// `hunkgate mcp`: serve stdin/stdout until stdin closes.
pub async fn run_stdio() -> Result<(), McpError> {
    let server = Arc::new(Server::new(HubClient::for_agent()));
    serve(
        server,
        std::io::BufReader::new(std::io::stdin()),
        std::io::stdout(),
    )
    .await
}

/// The tools and the hub they call. Without `HUNKGATE_URL`/`HUNKGATE_AGENT_TOKEN` it still
/// initializes and lists its tools (clients list them at startup, wherever they run); only a call
/// fails, saying why.
pub struct Server {
    hub: Result<HubClient, ClientError>,
}

/// What one incoming message asks for.
#[derive(Debug)]
pub enum Step {
    /// A notification, or a response from the client: nothing to answer.
    Ignore,
    Reply(Value),
    /// A tool call: the hub must be asked before `id` can be answered.
    Call {
        id: Value,
        call: ToolCall,
    },
    /// `notifications/cancelled` for this request id.
    Cancel(Value),
}

#[derive(Debug, PartialEq)]
pub enum ToolCall {
    Publish(PublishArgs),
    Status(StatusArgs),
    List(NoArgs),
    Feedback(FeedbackArgs),
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishArgs {
    pub description: String,
    #[serde(default)]
    pub files: Option<Vec<String>>,
    #[serde(default)]
    pub hunk_descriptions: Option<Vec<HunkNote>>,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    #[serde(default)]
    pub suggestion_id: Option<String>,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackArgs {
    #[serde(default)]
    pub suggestion_id: Option<String>,
}

const TOOL_NAMES: [&str; 4] = [
    "publish_suggestion",
    "suggestion_status",
    "list_suggestions",
    "get_feedback",
];

/// What a tool hands back: a short text for whoever reads it, and the JSON behind it.
struct ToolOutput {
    summary: String,
    data: Value,
}

impl Server {
    pub fn new(hub: Result<HubClient, ClientError>) -> Self {
        Self { hub }
    }

    /// One JSON-RPC message (not a batch) in, what to do about it out.
    pub fn dispatch(&self, msg: Value) -> Step {
        let Value::Object(mut m) = msg else {
            return Step::Reply(error_response(
                Value::Null,
                INVALID_REQUEST,
                "a JSON-RPC message must be an object",
            ));
        };
        let id = m.remove("id");
        let method = match m.remove("method") {
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                return Step::Reply(error_response(
                    valid_id(id),
                    INVALID_REQUEST,
                    "\"method\" must be a string",
                ))
            }
            None => None,
        };
        // This server sends no requests, so a response from the client answers nothing.
        if method.is_none() && (m.contains_key("result") || m.contains_key("error")) {
            return Step::Ignore;
        }
        if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Step::Reply(error_response(
                valid_id(id),
                INVALID_REQUEST,
                "\"jsonrpc\" must be \"2.0\"",
            ));
        }
        let Some(method) = method else {
            return Step::Reply(error_response(
                valid_id(id),
                INVALID_REQUEST,
                "missing \"method\"",
            ));
        };
        let params = m.remove("params");
        let Some(id) = id else {
            return match (method.as_str(), params) {
                ("notifications/cancelled", Some(p)) => match p.get("requestId") {
                    Some(rid) if is_id(rid) => Step::Cancel(rid.clone()),
                    _ => Step::Ignore,
                },
                _ => Step::Ignore,
            };
        };
        if !is_id(&id) {
            return Step::Reply(error_response(
                Value::Null,
                INVALID_REQUEST,
                "\"id\" must be a string or a number",
            ));
        }
        match method.as_str() {
            "initialize" => Step::Reply(ok_response(id, initialize_result(params.as_ref()))),
            "ping" => Step::Reply(ok_response(id, json!({}))),
            "tools/list" => Step::Reply(ok_response(id, json!({ "tools": tools() }))),
            "tools/call" => match parse_call(params) {
                Ok(call) => Step::Call { id, call },
                Err(msg) => Step::Reply(error_response(id, INVALID_PARAMS, &msg)),
            },
            other => Step::Reply(error_response(
                id,
                METHOD_NOT_FOUND,
                &format!(
                    "unknown method {other:?}: this server answers initialize, ping, tools/list and tools/call"
                ),
            )),
        }
    }

    /// Run a tool against the hub: the `CallToolResult`. Hub trouble of any kind is a result with
    /// `isError`, worded so the agent (or the person behind it) knows what to fix.
    pub async fn call(&self, call: ToolCall) -> Value {
        let hub = match &self.hub {
            Ok(hub) => hub,
            Err(e) => return tool_error(&explain(e)),
        };
        let out = match call {
            ToolCall::Publish(args) => publish(hub, args).await,
            ToolCall::Status(args) => status(hub, args.suggestion_id.as_deref()).await,
            ToolCall::List(NoArgs {}) => list(hub).await,
            ToolCall::Feedback(args) => feedback(hub, args.suggestion_id.as_deref()).await,
        };
        match out {
            Ok(out) => tool_result(out),
            Err(e) => tool_error(&explain(&e)),
        }
    }
}

fn is_id(v: &Value) -> bool {
    v.is_string() || v.is_number()
}

/// The id to answer an invalid request with: its own when it has a usable one.
fn valid_id(id: Option<Value>) -> Value {
    id.filter(is_id).unwrap_or(Value::Null)
}

pub fn ok_response(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn initialize_result(params: Option<&Value>) -> Value {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = asked
        .and_then(|a| PROTOCOL_VERSIONS.iter().find(|v| **v == a))
        .unwrap_or(&PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "hunkgate", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    })
}

/// The four tools, with their input schemas.
pub fn tools() -> Value {
    let id_prop = json!({
        "type": "string",
        "description": "A suggestion id, or a unique prefix of one (as publish_suggestion or list_suggestions gave it)."
    });
    json!([
        {
            "name": "publish_suggestion",
            "title": "Publish a suggestion",
            "description": "Publish your changes in this sandbox as a suggestion the reviewer accepts or rejects hunk by hunk. Snapshots the sandbox now: call it once your change is complete (or call it again later for a further suggestion). Returns the suggestion id, its hunk count and files.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "description": {
                        "type": "string",
                        "minLength": 1,
                        "description": "What the change does and why, for the reviewer; the first line is its title."
                    },
                    "files": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Only publish changed files matching these glob patterns (e.g. \"src/**/*.rs\"); default: every change in the sandbox."
                    },
                    "hunk_descriptions": {
                        "type": "array",
                        "description": "Why each change was made, shown beside its hunk.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "file": {"type": "string", "description": "Path relative to the repository root."},
                                "line": {"type": "integer", "minimum": 1, "description": "A line (1-based) in the new version of the file inside the hunk meant; leave out to describe every hunk of the file."},
                                "description": {"type": "string"}
                            },
                            "required": ["file", "description"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["description"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}
        },
        {
            "name": "suggestion_status",
            "title": "Review status of a suggestion",
            "description": "How the review of a suggestion is going: its status and the state of each hunk (pending, accepted, modified, rejected, conflict), with the reviewer's comments. Without suggestion_id: the newest suggestion of this run or its session.",
            "inputSchema": {
                "type": "object",
                "properties": {"suggestion_id": id_prop},
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        },
        {
            "name": "list_suggestions",
            "title": "List suggestions",
            "description": "The suggestions of this run and of the other runs of its session, oldest first, each with its status and how many of its hunks are reviewed.",
            "inputSchema": {
                "type": "object",
                "properties": {},
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        },
        {
            "name": "get_feedback",
            "title": "Get the reviewer's feedback",
            "description": "The reviewer's decisions: for each hunk its state, the reviewer's comment, the agent's diff and, when the reviewer modified the hunk, the diff applied instead. Read it before starting work, and after publishing. Without suggestion_id: every suggestion of this run and its session.",
            "inputSchema": {
                "type": "object",
                "properties": {"suggestion_id": id_prop},
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }
    ])
}

fn parse_call(params: Option<Value>) -> Result<ToolCall, String> {
    let Some(Value::Object(mut p)) = params else {
        return Err("tools/call needs params {\"name\", \"arguments\"}".into());
    };
    let name = match p.remove("name") {
        Some(Value::String(n)) => n,
        _ => return Err("tools/call needs a tool \"name\" (a string)".into()),
    };
    let args = match p.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(a @ Value::Object(_)) => a,
        Some(_) => return Err(format!("arguments of {name} must be an object")),
    };
    fn parse<T: serde::de::DeserializeOwned>(name: &str, args: Value) -> Result<T, String> {
        serde_json::from_value(args).map_err(|e| format!("invalid arguments for {name}: {e}"))
    }
    Ok(match name.as_str() {
        "publish_suggestion" => ToolCall::Publish(parse(&name, args)?),
        "suggestion_status" => ToolCall::Status(parse(&name, args)?),
        "list_suggestions" => ToolCall::List(parse(&name, args)?),
        "get_feedback" => ToolCall::Feedback(parse(&name, args)?),
        other => {
            return Err(format!(
                "unknown tool {other:?}; the tools are {}",
                TOOL_NAMES.join(", ")
            ))
        }
    })
}

fn tool_result(out: ToolOutput) -> Value {
    let pretty = serde_json::to_string_pretty(&out.data).unwrap_or_default();
    json!({
        "content": [{"type": "text", "text": format!("{}\n\n{pretty}", out.summary)}],
        "structuredContent": out.data,
        "isError": false,
    })
}

fn tool_error(message: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": message}],
        "isError": true,
    })
}

/// A hub error as the agent should read it: what went wrong and what would fix it.
fn explain(e: &ClientError) -> String {
    match e {
        ClientError::MissingEnv { missing } => format!(
            "{} not set: `hunkgate mcp` must run inside a hunkgate agent run, where the hub sets {URL_VAR} and {TOKEN_VAR} (an MCP client that filters its servers' environment must pass both on)",
            missing_list(missing)
        ),
        ClientError::BadUrl { .. } => format!(
            "{e}: {URL_VAR} should be the hub's address as the hub set it, e.g. http://127.0.0.1:4097"
        ),
        ClientError::Unreachable { .. } => format!(
            "{}: is the hub (`hunkgate serve`) still running, and does {URL_VAR} point at it?",
            chain(e)
        ),
        ClientError::Hub {
            status: 401,
            code,
            message,
        } => format!(
            "the hub refused {TOKEN_VAR} (401 {code}: {message}): an agent token is valid only while its run is running; this run may have finished or been cancelled"
        ),
        ClientError::Hub {
            status: 403,
            code,
            message,
        } => format!(
            "the hub refused the request (403 {code}: {message}): {TOKEN_VAR} must be the agent token the hub gave this run, not the reviewer token"
        ),
        ClientError::Hub {
            status,
            code,
            message,
        } => format!("the hub answered {status} {code}: {message}"),
        other => chain(other),
    }
}

/// An error with its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The hub's answer without its `success` flag, which a tool result says with `isError`.
fn without_success(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.remove("success");
    }
    v
}

async fn publish(hub: &HubClient, args: PublishArgs) -> Result<ToolOutput, ClientError> {
    let body = json!({
        "description": args.description,
        "files": args.files.unwrap_or_default(),
        "hunk_descriptions": args.hunk_descriptions.unwrap_or_default(),
    });
    let data = without_success(hub.post("/agent/publish", body).await?);
    Ok(ToolOutput {
        summary: summarize_publish(&data),
        data,
    })
}

async fn status(hub: &HubClient, id: Option<&str>) -> Result<ToolOutput, ClientError> {
    let id = match id {
        Some(id) => id.to_string(),
        None => {
            let list = hub.get_at(&["agent", "suggestions"], &[]).await?;
            match newest(&list["suggestions"]) {
                Some(id) => id,
                None => {
                    return Ok(ToolOutput {
                        summary: "Nothing published yet in this run or its session: call publish_suggestion when your change is ready.".into(),
                        data: json!({"suggestion": null}),
                    })
                }
            }
        }
    };
    let v = hub.get_at(&["agent", "suggestions", &id], &[]).await?;
    let s = compact_suggestion(&v["suggestion"]);
    Ok(ToolOutput {
        summary: summarize_suggestion(&s),
        data: json!({ "suggestion": s }),
    })
}

async fn list(hub: &HubClient) -> Result<ToolOutput, ClientError> {
    let data = without_success(hub.get_at(&["agent", "suggestions"], &[]).await?);
    Ok(ToolOutput {
        summary: summarize_list(&data),
        data,
    })
}

async fn feedback(hub: &HubClient, id: Option<&str>) -> Result<ToolOutput, ClientError> {
    let query: Vec<(&str, &str)> = id.map(|id| ("suggestion_id", id)).into_iter().collect();
    let data = without_success(hub.get_at(&["agent", "feedback"], &query).await?);
    Ok(ToolOutput {
        summary: summarize_feedback(&data),
        data,
    })
}

/// The id of the newest suggestion in a list of summaries (the hub lists them oldest first; the
/// timestamp decides should that ever change).
fn newest(list: &Value) -> Option<String> {
    list.as_array()?
        .iter()
        .enumerate()
        .max_by(|(i, a), (j, b)| {
            let ta = a["created_at"].as_str().unwrap_or_default();
            let tb = b["created_at"].as_str().unwrap_or_default();
            ta.cmp(tb).then(i.cmp(j))
        })
        .and_then(|(_, s)| s["id"].as_str().map(str::to_string))
}

/// A suggestion without its diffs and commits: the state of each hunk is what a status is about
/// (the diffs are in get_feedback).
fn compact_suggestion(s: &Value) -> Value {
    let pick = |v: &Value, keys: &[&str]| -> Value {
        let mut m = Map::new();
        for k in keys {
            if let Some(x) = v.get(*k).filter(|x| !x.is_null()) {
                m.insert((*k).to_string(), x.clone());
            }
        }
        Value::Object(m)
    };
    let mut out = pick(
        s,
        &[
            "id",
            "description",
            "status",
            "closed",
            "hunk_count",
            "reviewed_count",
            "files",
            "run_id",
            "created_at",
        ],
    );
    let hunks: Vec<Value> = s["hunks"]
        .as_array()
        .map(|hs| {
            hs.iter()
                .map(|h| {
                    pick(
                        h,
                        &[
                            "id",
                            "file",
                            "index",
                            "kind",
                            "state",
                            "description",
                            "comment",
                            "conflict",
                        ],
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if let Value::Object(m) = &mut out {
        m.insert("hunks".into(), Value::Array(hunks));
    }
    out
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

fn summarize_publish(v: &Value) -> String {
    let files: Vec<&str> = v["files"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!(
        "Published suggestion {}: {} hunk(s) in {}. The reviewer decides each hunk; suggestion_status and get_feedback show the decisions.",
        text(v, "suggestion_id"),
        v["hunk_count"],
        files.join(", ")
    )
}

fn summarize_suggestion(s: &Value) -> String {
    let mut out = format!(
        "Suggestion {} \"{}\": {}{}, {}/{} hunks reviewed.",
        text(s, "id"),
        text(s, "description").lines().next().unwrap_or_default(),
        text(s, "status"),
        s["closed"]
            .as_str()
            .map(|c| format!(" (closed: {c})"))
            .unwrap_or_default(),
        s["reviewed_count"],
        s["hunk_count"],
    );
    for h in s["hunks"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\n  {:<9} {}:{}",
            text(h, "state"),
            text(h, "file"),
            h["index"]
        ));
        if let Some(c) = h["comment"].as_str() {
            out.push_str(&format!(" (comment: {c:?})"));
        }
        if let Some(c) = h["conflict"].as_str() {
            out.push_str(&format!(" (conflict: {c})"));
        }
    }
    out
}

fn summarize_list(v: &Value) -> String {
    let list = v["suggestions"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "No suggestions yet in this run or its session.".into();
    }
    let mut out = format!("{} suggestion(s), oldest first:", list.len());
    for s in &list {
        out.push_str(&format!(
            "\n  {}  {}{}  {}/{} reviewed  {}",
            text(s, "id"),
            text(s, "status"),
            s["closed"]
                .as_str()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            s["reviewed_count"],
            s["hunk_count"],
            text(s, "description").lines().next().unwrap_or_default()
        ));
    }
    out
}

fn summarize_feedback(v: &Value) -> String {
    let list = v["feedback"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        return "No feedback yet: nothing has been published in this run or its session.".into();
    }
    let mut out = String::new();
    for (i, s) in list.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let sid = text(s, "suggestion_id");
        out.push_str(&format!(
            "Suggestion {sid} \"{}\": {}",
            text(s, "description").lines().next().unwrap_or_default(),
            text(s, "status")
        ));
        for h in s["hunks"].as_array().into_iter().flatten() {
            let hid = text(h, "hunk_id");
            let short = hid
                .strip_prefix(sid)
                .and_then(|r| r.strip_prefix(':'))
                .unwrap_or(hid);
            out.push_str(&format!("\n  {:<9} {short}", text(h, "state")));
            if let Some(c) = h["comment"].as_str() {
                out.push_str(&format!(" (comment: {c:?})"));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The stdio transport.

/// One line of input.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Line(Vec<u8>),
    /// A line longer than [`MAX_MESSAGE`]: dropped as it was read, never held whole.
    TooLong,
}

/// The next line (without its `\n` and a `\r` before it), `None` at the end. A line over `cap`
/// bytes is skipped to its end and reported as [`Incoming::TooLong`].
pub fn read_message(input: &mut impl BufRead, cap: usize) -> std::io::Result<Option<Incoming>> {
    let mut buf = Vec::new();
    let mut too_long = false;
    let mut any = false;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            // End of input; a last line without a newline still counts.
            if !any {
                return Ok(None);
            }
            break;
        }
        any = true;
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        if !too_long {
            if buf.len() + chunk.len() > cap {
                too_long = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let used = newline.map_or(available.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    if too_long {
        return Ok(Some(Incoming::TooLong));
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(Incoming::Line(buf)))
}

/// Serve newline-delimited JSON-RPC from `input` to `output` until `input` ends; then finish the
/// calls in flight and return. Input and output are blocking streams, each on a thread of its
/// own, so a read that never returns cannot keep the process from exiting.
pub async fn serve<I, O>(server: Arc<Server>, mut input: I, output: O) -> Result<(), McpError>
where
    I: BufRead + Send + 'static,
    O: Write + Send + 'static,
{
    // A small queue: a client flooding stdin waits for us rather than filling memory.
    let (in_tx, mut in_rx) = mpsc::channel::<std::io::Result<Incoming>>(4);
    std::thread::Builder::new()
        .name("mcp-stdin".into())
        .spawn(move || loop {
            let msg = read_message(&mut input, MAX_MESSAGE);
            let done = !matches!(msg, Ok(Some(_)));
            let send = match msg {
                Ok(Some(m)) => in_tx.blocking_send(Ok(m)),
                Ok(None) => Ok(()),
                Err(e) => in_tx.blocking_send(Err(e)),
            };
            if done || send.is_err() {
                return;
            }
        })
        .map_err(|e| McpError::Thread("stdin", e))?;
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Value>();
    let writer = std::thread::Builder::new()
        .name("mcp-stdout".into())
        .spawn(move || write_messages(output, out_rx))
        .map_err(|e| McpError::Thread("stdout", e))?;

    let mut tasks: JoinSet<()> = JoinSet::new();
    // Calls in flight, by task: the request id to answer (null for a batch), and how to stop it.
    let mut inflight: HashMap<tokio::task::Id, (Value, tokio::task::AbortHandle)> = HashMap::new();
    let mut read_error = None;
    loop {
        tokio::select! {
            msg = in_rx.recv() => match msg {
                None => break,
                Some(Err(e)) => {
                    read_error = Some(e);
                    break;
                }
                Some(Ok(Incoming::TooLong)) => {
                    let _ = out_tx.send(error_response(
                        Value::Null,
                        INVALID_REQUEST,
                        &format!("message longer than {MAX_MESSAGE} bytes; ignored"),
                    ));
                }
                Some(Ok(Incoming::Line(line))) => {
                    handle_line(&server, &line, &out_tx, &mut tasks, &mut inflight);
                }
            },
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                reap(done, &mut inflight, &out_tx);
            }
            // Nobody reads our answers any more: stop.
            _ = out_tx.closed() => break,
        }
    }
    while let Some(done) = tasks.join_next_with_id().await {
        reap(done, &mut inflight, &out_tx);
    }
    drop(out_tx);
    let written = tokio::task::spawn_blocking(move || writer.join())
        .await
        .map_err(|_| McpError::Panicked("stdout"))?
        .map_err(|_| McpError::Panicked("stdout"))?;
    if let Some(e) = read_error {
        return Err(McpError::Read(e));
    }
    written.map_err(McpError::Write)
}

fn write_messages(
    mut output: impl Write,
    mut rx: mpsc::UnboundedReceiver<Value>,
) -> std::io::Result<()> {
    while let Some(msg) = rx.blocking_recv() {
        // Compact JSON escapes every newline inside strings: one message, one line.
        let mut line = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        output.write_all(&line)?;
        output.flush()?;
    }
    Ok(())
}

fn handle_line(
    server: &Arc<Server>,
    line: &[u8],
    out: &mpsc::UnboundedSender<Value>,
    tasks: &mut JoinSet<()>,
    inflight: &mut HashMap<tokio::task::Id, (Value, tokio::task::AbortHandle)>,
) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let msg: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            let _ = out.send(error_response(
                Value::Null,
                PARSE_ERROR,
                &format!("not JSON: {e}"),
            ));
            return;
        }
    };
    let Value::Array(batch) = msg else {
        match server.dispatch(msg) {
            Step::Ignore => {}
            Step::Reply(r) => {
                let _ = out.send(r);
            }
            Step::Cancel(rid) => cancel(&rid, inflight),
            Step::Call { id, call } => {
                let (server, out) = (server.clone(), out.clone());
                let reply_id = id.clone();
                let handle = tasks.spawn(async move {
                    let result = server.call(call).await;
                    let _ = out.send(ok_response(reply_id, result));
                });
                inflight.insert(handle.id(), (id, handle));
            }
        }
        return;
    };
    // A batch (JSON-RPC 2.0; MCP 2025-03-26 has them): one array answers all its requests.
    if batch.is_empty() {
        let _ = out.send(error_response(
            Value::Null,
            INVALID_REQUEST,
            "an empty batch",
        ));
        return;
    }
    let mut replies = Vec::new();
    let mut calls = Vec::new();
    for msg in batch {
        match server.dispatch(msg) {
            Step::Ignore => {}
            Step::Reply(r) => replies.push(r),
            Step::Cancel(rid) => cancel(&rid, inflight),
            Step::Call { id, call } => calls.push((id, call)),
        }
    }
    if calls.is_empty() {
        if !replies.is_empty() {
            let _ = out.send(Value::Array(replies));
        }
        return;
    }
    let (server, out) = (server.clone(), out.clone());
    let handle = tasks.spawn(async move {
        for (id, call) in calls {
            let result = server.call(call).await;
            replies.push(ok_response(id, result));
        }
        let _ = out.send(Value::Array(replies));
    });
    inflight.insert(handle.id(), (Value::Null, handle));
}

/// The client gave up on a request: stop it, and (as the protocol asks) send no answer.
fn cancel(
    request_id: &Value,
    inflight: &mut HashMap<tokio::task::Id, (Value, tokio::task::AbortHandle)>,
) {
    inflight.retain(|_, (id, handle)| {
        if id == request_id {
            handle.abort();
            false
        } else {
            true
        }
    });
}

fn reap(
    done: Result<(tokio::task::Id, ()), tokio::task::JoinError>,
    inflight: &mut HashMap<tokio::task::Id, (Value, tokio::task::AbortHandle)>,
    out: &mpsc::UnboundedSender<Value>,
) {
    let (task, failure) = match done {
        Ok((task, ())) => (task, None),
        Err(e) => (e.id(), Some(e)),
    };
    let Some((id, _)) = inflight.remove(&task) else {
        // Cancelled: already forgotten on purpose.
        return;
    };
    if let Some(e) = failure {
        tracing::error!(error = %e, "a tool call failed");
        let _ = out.send(error_response(
            id,
            INTERNAL_ERROR,
            "internal error in hunkgate mcp (see its stderr)",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> Server {
        Server::new(Err(ClientError::MissingEnv {
            missing: vec![URL_VAR, TOKEN_VAR],
        }))
    }

    fn reply(s: &Server, msg: Value) -> Value {
        match s.dispatch(msg) {
            Step::Reply(r) => r,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    fn call_params(name: &str, args: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": name, "arguments": args}})
    }

    #[test]
    fn initialize_negotiates_the_version() {
        let s = no_env();
        for v in PROTOCOL_VERSIONS {
            let r = reply(
                &s,
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": v, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
            );
            assert_eq!(r["id"], 1);
            assert_eq!(r["result"]["protocolVersion"], *v);
        }
        let r = reply(
            &s,
            json!({"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {"protocolVersion": "2099-01-01"}}),
        );
        assert_eq!(r["id"], "a");
        let res = &r["result"];
        assert_eq!(res["protocolVersion"], "2025-06-18", "our latest");
        assert_eq!(res["capabilities"], json!({"tools": {}}));
        assert_eq!(res["serverInfo"]["name"], "hunkgate");
        assert_eq!(res["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        let instr = res["instructions"].as_str().unwrap();
        assert!(
            instr.contains("publish_suggestion") && instr.contains("get_feedback"),
            "{instr}"
        );
    }

    #[test]
    fn ping_notifications_and_client_responses() {
        let s = no_env();
        let r = reply(&s, json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
        assert_eq!(r, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
        for n in [
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}}),
            json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
            json!({"jsonrpc": "2.0", "id": 5, "error": {"code": 1, "message": "x"}}),
        ] {
            assert!(matches!(s.dispatch(n.clone()), Step::Ignore), "{n}");
        }
        match s.dispatch(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})) {
            Step::Cancel(id) => assert_eq!(id, 7),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_requests_and_unknown_methods() {
        let s = no_env();
        let r = reply(
            &s,
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}),
        );
        assert_eq!(r["error"]["code"], METHOD_NOT_FOUND);
        assert_eq!(r["id"], 3);
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("resources/list"));
        for (msg, id) in [
            (json!([1]), Value::Null),
            (json!("x"), Value::Null),
            (json!({"id": 4, "method": "ping"}), json!(4)),
            (
                json!({"jsonrpc": "1.0", "id": 4, "method": "ping"}),
                json!(4),
            ),
            (json!({"jsonrpc": "2.0", "id": 4}), json!(4)),
            (json!({"jsonrpc": "2.0", "id": 4, "method": 12}), json!(4)),
            (
                json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
                Value::Null,
            ),
            (
                json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
                Value::Null,
            ),
        ] {
            let r = reply(&s, msg.clone());
            assert_eq!(r["error"]["code"], INVALID_REQUEST, "{msg}");
            assert_eq!(r["id"], id, "{msg}");
        }
    }

    #[test]
    fn the_four_tools_have_closed_schemas() {
        let s = no_env();
        let r = reply(
            &s,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        );
        let tools = r["result"]["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, TOOL_NAMES);
        for t in tools {
            let schema = &t["inputSchema"];
            assert_eq!(schema["type"], "object", "{t}");
            assert_eq!(schema["additionalProperties"], false, "{t}");
            assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
        }
        assert_eq!(tools[0]["inputSchema"]["required"], json!(["description"]));
    }

    #[test]
    fn tool_arguments_are_parsed_strictly() {
        let s = no_env();
        match s.dispatch(call_params(
            "publish_suggestion",
            json!({"description": "d", "files": ["src/*"], "hunk_descriptions": [{"file": "a", "line": 3, "description": "why"}]}),
        )) {
            Step::Call { id, call } => {
                assert_eq!(id, 9);
                assert_eq!(
                    call,
                    ToolCall::Publish(PublishArgs {
                        description: "d".into(),
                        files: Some(vec!["src/*".into()]),
                        hunk_descriptions: Some(vec![HunkNote {
                            file: "a".into(),
                            line: Some(3),
                            description: "why".into()
                        }]),
                    })
                );
            }
            other => panic!("{other:?}"),
        }
        // Optional arguments may be left out, or null.
        for (name, args) in [
            ("suggestion_status", json!({})),
            ("suggestion_status", json!({"suggestion_id": null})),
            ("list_suggestions", json!({})),
            ("list_suggestions", Value::Null),
            ("get_feedback", json!({"suggestion_id": "5f0c"})),
        ] {
            assert!(
                matches!(
                    s.dispatch(call_params(name, args.clone())),
                    Step::Call { .. }
                ),
                "{name} {args}"
            );
        }
        for (name, args, says) in [
            (
                "publish_suggestion",
                json!({}),
                "missing field `description`",
            ),
            (
                "publish_suggestion",
                json!({"description": 5}),
                "invalid type",
            ),
            (
                "publish_suggestion",
                json!({"description": "d", "bogus": 1}),
                "unknown field `bogus`",
            ),
            (
                "publish_suggestion",
                json!({"description": "d", "hunk_descriptions": [{"file": "a"}]}),
                "missing field `description`",
            ),
            (
                "publish_suggestion",
                json!({"description": "d", "hunk_descriptions": [{"file": "a", "description": "x", "line": -1}]}),
                "invalid value",
            ),
            (
                "list_suggestions",
                json!({"all": true}),
                "unknown field `all`",
            ),
            ("get_feedback", json!({"suggestion_id": 3}), "invalid type"),
            ("get_feedback", json!([]), "must be an object"),
            (
                "delete_everything",
                json!({}),
                "unknown tool \"delete_everything\"",
            ),
        ] {
            let r = reply(&s, call_params(name, args.clone()));
            assert_eq!(r["error"]["code"], INVALID_PARAMS, "{name} {args}");
            assert_eq!(r["id"], 9);
            let msg = r["error"]["message"].as_str().unwrap();
            assert!(msg.contains(says), "{name} {args}: {msg}");
        }
        let r = reply(
            &s,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
        );
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
    }

    #[tokio::test]
    async fn without_the_environment_a_call_says_what_is_missing() {
        let s = Server::new(Err(ClientError::MissingEnv {
            missing: vec![TOKEN_VAR],
        }));
        let r = s.call(ToolCall::List(NoArgs {})).await;
        assert_eq!(r["isError"], true);
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("HUNKGATE_AGENT_TOKEN is not set: `hunkgate mcp` must run inside a hunkgate agent run"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_hub_is_a_tool_error() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let s = Server::new(HubClient::new(&format!("http://127.0.0.1:{port}"), "t"));
        let r = s
            .call(ToolCall::Feedback(FeedbackArgs {
                suggestion_id: None,
            }))
            .await;
        assert_eq!(r["isError"], true);
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("cannot reach the hub at http://127.0.0.1:"),
            "{text}"
        );
        assert!(text.contains("HUNKGATE_URL"), "{text}");
    }

    #[test]
    fn hub_refusals_name_the_token() {
        let e = ClientError::Hub {
            status: 401,
            code: "unauthorized".into(),
            message: "invalid token".into(),
        };
        let t = explain(&e);
        assert!(
            t.contains("HUNKGATE_AGENT_TOKEN") && t.contains("invalid token"),
            "{t}"
        );
        let e = ClientError::Hub {
            status: 403,
            code: "forbidden".into(),
            message: "/agent/* is for the agent".into(),
        };
        let t = explain(&e);
        assert!(
            t.contains("not the reviewer token") && t.contains("403 forbidden"),
            "{t}"
        );
        let e = ClientError::Hub {
            status: 404,
            code: "not_found".into(),
            message: "no suggestion \"x\"".into(),
        };
        assert_eq!(
            explain(&e),
            "the hub answered 404 not_found: no suggestion \"x\""
        );
    }

    #[test]
    fn summaries() {
        let s = json!({
            "id": "s1", "description": "Tidy\nmore", "status": "partial", "hunk_count": 2,
            "reviewed_count": 1, "files": ["a"], "run_commit": "c", "hunks": [
                {"id": "s1:a:0", "file": "a", "index": 0, "state": "rejected", "comment": "no", "diff": "@@"},
                {"id": "s1:a:1", "file": "a", "index": 1, "state": "pending", "diff": "@@"},
            ]
        });
        let c = compact_suggestion(&s);
        assert!(
            c.get("run_commit").is_none() && c["hunks"][0].get("diff").is_none(),
            "{c}"
        );
        assert_eq!(c["hunks"][0]["comment"], "no");
        assert_eq!(
            summarize_suggestion(&c),
            "Suggestion s1 \"Tidy\": partial, 1/2 hunks reviewed.\n  rejected  a:0 (comment: \"no\")\n  pending   a:1"
        );
        let fb = json!({"feedback": [{"suggestion_id": "s1", "description": "Tidy", "status": "partial",
            "hunks": [{"hunk_id": "s1:a:0", "file": "a", "state": "rejected", "comment": "no", "diff": "@@"}]}]});
        assert_eq!(
            summarize_feedback(&fb),
            "Suggestion s1 \"Tidy\": partial\n  rejected  a:0 (comment: \"no\")"
        );
        let list = json!([
            {"id": "old", "created_at": "2026-01-01T00:00:00.000Z"},
            {"id": "new", "created_at": "2026-01-02T00:00:00.000Z"},
            {"id": "same-time-later", "created_at": "2026-01-02T00:00:00.000Z"},
        ]);
        assert_eq!(newest(&list).as_deref(), Some("same-time-later"));
        assert_eq!(newest(&json!([])), None);
    }

    #[test]
    fn lines_are_read_with_a_cap() {
        let mut input = std::io::Cursor::new(
            [
                b"one\r\n".to_vec(),
                vec![b'x'; 100],
                b"\n\ntwo\nlast".to_vec(),
            ]
            .concat(),
        );
        let mut input = std::io::BufReader::with_capacity(7, &mut input);
        let mut got = Vec::new();
        while let Some(m) = read_message(&mut input, 10).unwrap() {
            got.push(m);
        }
        assert_eq!(
            got,
            vec![
                Incoming::Line(b"one".to_vec()),
                Incoming::TooLong,
                Incoming::Line(Vec::new()),
                Incoming::Line(b"two".to_vec()),
                Incoming::Line(b"last".to_vec()),
            ]
        );
    }

    /// Output shared with the test, behind a lock.
    #[derive(Clone, Default)]
    struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_loop_survives_garbage_and_answers_in_order() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\",\"pad\":\"{}\"}}",
            "x".repeat(MAX_MESSAGE)
        );
        let input = [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            "this is not json",
            &big,
            "",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":3,"method":"nope"}]"#,
            "[]",
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_suggestions"}}"#,
        ]
        .join("\n");
        let sink = Sink::default();
        serve(
            Arc::new(no_env()),
            std::io::Cursor::new(input.into_bytes()),
            sink.clone(),
        )
        .await
        .unwrap();
        let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let msgs: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(msgs.len(), 6, "{out}");
        assert_eq!(msgs[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        assert_eq!(msgs[1]["error"]["code"], PARSE_ERROR);
        assert_eq!(msgs[1]["id"], Value::Null);
        assert_eq!(msgs[2]["error"]["code"], INVALID_REQUEST);
        assert_eq!(msgs[2]["id"], Value::Null);
        let batch = msgs[3].as_array().unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0]["result"], json!({}));
        assert_eq!(batch[1]["error"]["code"], METHOD_NOT_FOUND);
        assert_eq!(msgs[4]["error"]["code"], INVALID_REQUEST);
        assert_eq!(msgs[5]["id"], 4);
        assert_eq!(msgs[5]["result"]["isError"], true);
    }
}

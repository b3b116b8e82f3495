//! The four tools: their definitions (names, descriptions, input schemas, as JSON), strict
//! parsing of their arguments, the hub calls behind them, and the text summaries they return.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::cli::client::{missing_list, ClientError, HubClient, TOKEN_VAR, URL_VAR};
use crate::model::text::error_chain;
use crate::protocol::HunkNote;
use rmcp::model::{CallToolResult, ContentBlock, Tool};

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

/// The four tools, in this order, as `tools/list` gives them.
pub fn tools() -> Vec<Tool> {
    serde_json::from_value(tools_json()).expect("the tool definitions fit rmcp's Tool")
}

/// The four tools, with their input schemas, as JSON.
fn tools_json() -> Value {
    let id_prop = json!({
        "type": "string",
        "description": "A suggestion id, or a unique prefix of one (as publish_suggestion or list_suggestions gave it)."
    });
    json!([
        publish_tool(),
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

/// The `publish_suggestion` tool, with its input schema, as JSON.
fn publish_tool() -> Value {
    json!({
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
    })
}

/// Why a `tools/call` cannot be made: the text says what is wrong.
#[derive(Debug, PartialEq)]
pub enum BadCall {
    /// No such tool (or no name at all): always a JSON-RPC error.
    UnknownTool(String),
    /// Arguments that do not fit the tool's schema: a JSON-RPC error before MCP 2025-11-25, a
    /// tool result with `isError` from it on (SEP-1303), so the model can correct itself.
    Arguments(String),
}

impl BadCall {
    pub fn message(&self) -> &str {
        match self {
            BadCall::UnknownTool(m) | BadCall::Arguments(m) => m,
        }
    }
}

/// The `params` of a `tools/call` as they came (rmcp's own types refuse a malformed one before
/// it reaches [`parse_args`]; this says what is wrong with it).
pub fn parse_call(params: Option<Value>) -> Result<ToolCall, BadCall> {
    let Some(Value::Object(mut p)) = params else {
        return Err(BadCall::UnknownTool(
            "tools/call needs params {\"name\", \"arguments\"}".into(),
        ));
    };
    let name = match p.remove("name") {
        Some(Value::String(n)) => n,
        _ => {
            return Err(BadCall::UnknownTool(
                "tools/call needs a tool \"name\" (a string)".into(),
            ))
        }
    };
    let args = match p.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(_) => {
            return Err(BadCall::Arguments(format!(
                "arguments of {name} must be an object"
            )))
        }
    };
    parse_args(&name, args)
}

/// A tool's arguments, strictly: unknown fields and wrong types are refused.
pub fn parse_args(name: &str, args: Map<String, Value>) -> Result<ToolCall, BadCall> {
    fn parse<T: serde::de::DeserializeOwned>(
        name: &str,
        args: Map<String, Value>,
    ) -> Result<T, BadCall> {
        serde_json::from_value(Value::Object(args))
            .map_err(|e| BadCall::Arguments(format!("invalid arguments for {name}: {e}")))
    }
    Ok(match name {
        "publish_suggestion" => ToolCall::Publish(parse(name, args)?),
        "suggestion_status" => ToolCall::Status(parse(name, args)?),
        "list_suggestions" => ToolCall::List(parse(name, args)?),
        "get_feedback" => ToolCall::Feedback(parse(name, args)?),
        other => {
            return Err(BadCall::UnknownTool(format!(
                "unknown tool {other:?}; the tools are {}",
                TOOL_NAMES.join(", ")
            )))
        }
    })
}

/// Run a tool against the hub. Hub trouble of any kind is a result with `isError`, worded so
/// the agent (or the person behind it) knows what to fix.
pub async fn call(hub: &Result<HubClient, ClientError>, call: ToolCall) -> CallToolResult {
    let hub = match hub {
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

/// The text, then the data as pretty JSON (for clients that show only text), and the data as
/// `structuredContent`.
fn tool_result(out: ToolOutput) -> CallToolResult {
    let pretty = serde_json::to_string_pretty(&out.data).unwrap_or_default();
    let mut r = CallToolResult::success(vec![ContentBlock::text(format!(
        "{}\n\n{pretty}",
        out.summary
    ))]);
    r.structured_content = Some(out.data);
    r
}

pub fn tool_error(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
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
            error_chain(e)
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
        other => error_chain(other),
    }
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

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;

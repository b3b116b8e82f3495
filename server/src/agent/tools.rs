//! The built-in agent's pure part: the tools the model may call (schemas), validating and
//! parsing its calls, summaries for status lines, the notes it leaves on hunks, and the cap on
//! command output it is shown. No I/O; the driver is [`crate::agent::tool_loop`].

use hunkgate_sandbox::tools::{validate_edit, FileTool};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::provider::LoopLimits;
use crate::model::chat::{ToolCall, ToolSpec};
use crate::model::text::one_line;
use crate::protocol::HunkNote;

/// Why the loop ended (the run's `stop_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Finished,
    Answered,
    BudgetExhausted,
    SchemaRetriesExhausted,
    ProviderError,
    Timeout,
    Cancelled,
}

impl Stop {
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::Finished => "finished",
            Stop::Answered => "answered",
            Stop::BudgetExhausted => "budget_exhausted",
            Stop::SchemaRetriesExhausted => "schema_retries_exhausted",
            Stop::ProviderError => "provider_error",
            Stop::Timeout => "timeout",
            Stop::Cancelled => "cancelled",
        }
    }
}

/// A validated tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    File(FileTool),
    RunCommand {
        command: String,
        timeout_secs: Option<u64>,
    },
    Clarify {
        question: String,
    },
    SuggestionStatus {
        suggestion_id: Option<String>,
    },
    /// Run the configured checkers on the sandbox as it is now.
    Check,
    Finish {
        description: String,
        hunk_descriptions: Vec<HunkNote>,
    },
}

fn schema(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

/// The tools offered to the model, with their JSON Schemas, in the order they are offered.
pub fn tool_specs() -> Vec<ToolSpec> {
    [
        list_files_spec,
        read_file_spec,
        search_project_spec,
        edit_file_spec,
        write_file_spec,
        move_file_spec,
        delete_file_spec,
        run_command_spec,
        clarify_user_spec,
        suggestion_status_spec,
        finish_spec,
    ]
    .iter()
    .map(|spec| spec())
    .collect()
}

/// [`tool_specs`], with `check` before `finish` when the hub has checkers (`[[check]]`).
pub fn tool_specs_for(checks: bool) -> Vec<ToolSpec> {
    let mut specs = tool_specs();
    if checks {
        specs.insert(specs.len() - 1, check_spec());
    }
    specs
}

/// `check`: the configured checkers on the sandbox as it is now.
fn check_spec() -> ToolSpec {
    ToolSpec {
        name: "check",
        description: "Run the repository's checkers (compiler, linters) on your changes as they are now. Returns the diagnostics on the lines you added or changed: fix them before finish.",
        parameters: schema(json!({}), &[]),
    }
}

/// The schema of an argument that names a file in the repository.
fn path_param() -> Value {
    json!({"type": "string", "description": "Path relative to the repository root, e.g. src/main.rs"})
}

/// `list_files`: the project's files, optionally under a prefix or matching a glob.
fn list_files_spec() -> ToolSpec {
    ToolSpec {
        name: "list_files",
        description: "List the project's files (.gitignore respected).",
        parameters: schema(
            json!({"prefix": {"type": "string", "description": "Only under this directory"},
                   "glob": {"type": "string", "description": "Only paths matching this glob, e.g. **/*.rs"}}),
            &[],
        ),
    }
}

/// `read_file`: a file or a line range of it, with the hash edits need.
fn read_file_spec() -> ToolSpec {
    ToolSpec {
        name: "read_file",
        description: "Read a text file (or a line range of it). Returns its lines and file_hash, which edit_file needs as expected_hash.",
        parameters: schema(
            json!({"file_path": path_param(), "start_line": {"type": "integer", "minimum": 1},
                   "end_line": {"type": "integer", "minimum": 1},
                   "max_bytes": {"type": "integer", "minimum": 1}}),
            &["file_path"],
        ),
    }
}

/// `search_project`: a literal search over the project's text files.
fn search_project_spec() -> ToolSpec {
    ToolSpec {
        name: "search_project",
        description: "Search the project's text files for a literal string (case-insensitive unless it has capitals). Returns snippets with line ranges.",
        parameters: schema(
            json!({"query": {"type": "string"}, "glob": {"type": "string"},
                   "limit": {"type": "integer", "minimum": 1}}),
            &["query"],
        ),
    }
}

/// `edit_file`: replace, insert or delete a line range of a file read before.
fn edit_file_spec() -> ToolSpec {
    ToolSpec {
        name: "edit_file",
        description: "Edit a line range of a file. operation: replace (lines start_line..=end_line become new_text), insert (new_text goes before start_line; one past the last line appends), delete (removes start_line..=end_line; no new_text). expected_hash is the file_hash from your last read_file or edit_file of this file; line numbers refer to that version.",
        parameters: schema(
            json!({"file_path": path_param(),
                   "operation": {"type": "string", "enum": ["replace", "insert", "delete"]},
                   "start_line": {"type": "integer", "minimum": 1},
                   "end_line": {"type": "integer", "minimum": 1},
                   "new_text": {"type": "string"},
                   "expected_hash": {"type": "string", "description": "sha256:<hex> as returned by read_file"},
                   "rationale": {"type": "string", "description": "Why: shown to the user beside the change"},
                   "edit_id": {"type": "string"}}),
            &["file_path", "operation", "start_line", "expected_hash"],
        ),
    }
}

/// `write_file`: create a file or replace all of it.
fn write_file_spec() -> ToolSpec {
    ToolSpec {
        name: "write_file",
        description: "Create a file, or replace a whole file (pass expected_hash when it exists).",
        parameters: schema(
            json!({"file_path": path_param(), "content": {"type": "string"},
                   "expected_hash": {"type": "string"}}),
            &["file_path", "content"],
        ),
    }
}

/// `move_file`: move or rename a file.
fn move_file_spec() -> ToolSpec {
    ToolSpec {
        name: "move_file",
        description: "Move or rename a file.",
        parameters: schema(
            json!({"from_path": path_param(), "to_path": path_param()}),
            &["from_path", "to_path"],
        ),
    }
}

/// `delete_file`: delete a file.
fn delete_file_spec() -> ToolSpec {
    ToolSpec {
        name: "delete_file",
        description: "Delete a file.",
        parameters: schema(json!({"file_path": path_param()}), &["file_path"]),
    }
}

/// `run_command`: a shell command in the repository root, with capped output and a timeout.
fn run_command_spec() -> ToolSpec {
    ToolSpec {
        name: "run_command",
        description: "Run a shell command in the repository root (tests, builds, linters). Output is capped; there is a timeout.",
        parameters: schema(
            json!({"command": {"type": "string"}, "timeout_secs": {"type": "integer", "minimum": 1}}),
            &["command"],
        ),
    }
}

/// `clarify_user`: one question to the user, answered or skipped.
fn clarify_user_spec() -> ToolSpec {
    ToolSpec {
        name: "clarify_user",
        description: "Ask the user one question and wait for the answer. The answer is no_user_answer if they skip it.",
        parameters: schema(json!({"question": {"type": "string"}}), &["question"]),
    }
}

/// `suggestion_status`: the user's decisions on the session's earlier suggestions.
fn suggestion_status_spec() -> ToolSpec {
    ToolSpec {
        name: "suggestion_status",
        description: "The user's decisions on this session's earlier suggestions: which hunks were accepted, rejected or modified, with comments.",
        parameters: schema(json!({"suggestion_id": {"type": "string"}}), &[]),
    }
}

/// `finish`: end the run and publish its changes, with a description and per-hunk notes.
fn finish_spec() -> ToolSpec {
    ToolSpec {
        name: "finish",
        description:
            "End the run: your changes are published to the user for review, hunk by hunk.",
        parameters: schema(
            json!({"description": {"type": "string", "description": "One line: what the change does"},
                   "hunk_descriptions": {"type": "array", "items": {"type": "object",
                       "properties": {"file": {"type": "string"}, "line": {"type": "integer"}, "description": {"type": "string"}},
                       "required": ["file", "description"], "additionalProperties": false}}}),
            &["description"],
        ),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandArgs {
    command: String,
    timeout_secs: Option<u64>,
}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClarifyArgs {
    question: String,
}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusArgs {
    suggestion_id: Option<String>,
}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishArgs {
    description: String,
    #[serde(default)]
    hunk_descriptions: Vec<HunkNote>,
}

fn args<T: serde::de::DeserializeOwned>(name: &str, v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("invalid arguments for {name}: {e}"))
}

fn non_empty(what: &str, s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        Err(format!("{what} is empty"))
    } else {
        Ok(())
    }
}

/// Validate a tool call against its schema. The error text goes back to the model (and counts
/// against `max_schema_retries`).
pub fn parse_call(call: &ToolCall) -> Result<Action, String> {
    let v = parse_arguments(call)?;
    let name = call.name.as_str();
    Ok(match name {
        "list_files" | "read_file" | "search_project" | "edit_file" | "write_file"
        | "move_file" | "delete_file" => Action::File(parse_file_tool(name, v)?),
        "run_command" => {
            let a: CommandArgs = args(name, v)?;
            non_empty("command", &a.command)?;
            Action::RunCommand {
                command: a.command,
                timeout_secs: a.timeout_secs,
            }
        }
        "clarify_user" => {
            let a: ClarifyArgs = args(name, v)?;
            non_empty("question", &a.question)?;
            Action::Clarify {
                question: a.question,
            }
        }
        "suggestion_status" => {
            let a: StatusArgs = args(name, v)?;
            Action::SuggestionStatus {
                suggestion_id: a.suggestion_id,
            }
        }
        "check" => {
            let _: NoArgs = args(name, v)?;
            Action::Check
        }
        "finish" => {
            let a: FinishArgs = args(name, v)?;
            non_empty("description", &a.description)?;
            Action::Finish {
                description: a.description,
                hunk_descriptions: a.hunk_descriptions,
            }
        }
        other => {
            let names: Vec<&str> = tool_specs().iter().map(|t| t.name).collect();
            return Err(format!(
                "there is no tool {other:?}; the tools are {}",
                names.join(", ")
            ));
        }
    })
}

/// A call's arguments as one JSON object (empty arguments are `{}`).
fn parse_arguments(call: &ToolCall) -> Result<Value, String> {
    let raw = call.arguments.trim();
    let v: Value = if raw.is_empty() {
        json!({})
    } else {
        serde_json::from_str(raw).map_err(|e| {
            format!(
                "the arguments of {} are not valid JSON ({e}); send one JSON object",
                call.name
            )
        })?
    };
    if !v.is_object() {
        return Err(format!(
            "the arguments of {} must be a JSON object",
            call.name
        ));
    }
    Ok(v)
}

/// A file tool named `name`: the arguments must be exactly that variant's fields, with the
/// paths, query and edit it needs present and valid.
fn parse_file_tool(name: &str, v: Value) -> Result<FileTool, String> {
    // The tool's name is its tag.
    let mut tagged = v;
    tagged["tool"] = json!(name);
    let tool: FileTool = args(name, tagged)?;
    match &tool {
        FileTool::ReadFile { file_path, .. } | FileTool::WriteFile { file_path, .. } => {
            non_empty("file_path", file_path)?
        }
        FileTool::SearchProject { query, .. } => non_empty("query", query)?,
        FileTool::EditFile(e) => {
            non_empty("file_path", &e.file_path)?;
            validate_edit(e).map_err(|err| format!("invalid edit: {err}"))?;
        }
        _ => {}
    }
    Ok(tool)
}

/// What a call is about, for `tool.call.requested` and status lines.
pub fn summarize_request(name: &str, action: Option<&Action>) -> String {
    let detail = match action {
        Some(Action::File(t)) => match t {
            FileTool::ListFiles { prefix, glob } => {
                format!(
                    "{}{}",
                    prefix.as_deref().unwrap_or("."),
                    glob.as_deref().map(|g| format!(" {g}")).unwrap_or_default()
                )
            }
            FileTool::ReadFile {
                file_path,
                start_line,
                end_line,
                ..
            } => match (start_line, end_line) {
                (None, None) => file_path.clone(),
                (s, e) => format!(
                    "{file_path}:{}-{}",
                    s.unwrap_or(1),
                    e.map(|e| e.to_string()).unwrap_or_default()
                ),
            },
            FileTool::SearchProject { query, .. } => format!("{query:?}"),
            FileTool::EditFile(e) => format!(
                "{} {:?} {}{}",
                e.file_path,
                e.operation,
                e.start_line,
                e.end_line.map(|l| format!("-{l}")).unwrap_or_default()
            )
            .to_lowercase(),
            FileTool::WriteFile { file_path, .. } | FileTool::DeleteFile { file_path } => {
                file_path.clone()
            }
            FileTool::MoveFile { from_path, to_path } => format!("{from_path} -> {to_path}"),
        },
        Some(Action::RunCommand { command, .. }) => command.clone(),
        Some(Action::Clarify { question }) => question.clone(),
        Some(Action::SuggestionStatus { suggestion_id }) => {
            suggestion_id.clone().unwrap_or_default()
        }
        Some(Action::Finish { description, .. }) => description.clone(),
        Some(Action::Check) | None => String::new(),
    };
    one_line(&format!("{name} {detail}"), 160)
}

/// What came of a call, for `tool.call.completed`.
pub fn summarize_result(result: &Value) -> String {
    let count = |k: &str| result[k].as_array().map(|a| a.len());
    let s = if let Some(n) = count("files") {
        format!("{n} file(s)")
    } else if let Some(n) = count("results") {
        format!("{n} result(s)")
    } else if let (Some(s), Some(e)) = (result["start_line"].as_u64(), result["end_line"].as_u64())
    {
        format!("lines {s}-{e} of {}", result["total_lines"])
    } else if let Some(n) = result["changed_line_count"].as_u64() {
        format!("{n} line(s) now at {}", result["changed_start_line"])
    } else if let Some(code) = result["exit_code"].as_i64() {
        format!("exit {code}")
    } else if let Some(a) = result["answer"].as_str() {
        format!("answer: {a}")
    } else {
        "ok".to_string()
    };
    one_line(&s, 160)
}

/// Hunk descriptions gathered from edit rationales, kept pointing at the right lines while
/// later edits move them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Notes(pub Vec<HunkNote>);

impl Notes {
    /// Record a successful file tool call.
    pub fn track(&mut self, tool: &FileTool, result: &Value) {
        match tool {
            FileTool::EditFile(e) => {
                let path = result["file_path"]
                    .as_str()
                    .unwrap_or(&e.file_path)
                    .to_string();
                let old_len = match e.operation {
                    hunkgate_sandbox::tools::Operation::Insert => 0,
                    _ => e.end_line.unwrap_or(e.start_line) + 1 - e.start_line,
                };
                let new_len = result["changed_line_count"].as_u64().unwrap_or(0) as usize;
                let old_end = e.start_line + old_len;
                for n in self.0.iter_mut().filter(|n| n.file == path) {
                    if let Some(line) = n.line.as_mut() {
                        if *line >= old_end {
                            *line = (*line + new_len).saturating_sub(old_len).max(1);
                        } else if *line >= e.start_line {
                            *line = e.start_line;
                        }
                    }
                }
                if let Some(r) = e.rationale.as_deref().filter(|r| !r.trim().is_empty()) {
                    self.0.push(HunkNote {
                        file: path,
                        line: Some(e.start_line),
                        description: r.trim().to_string(),
                    });
                }
            }
            FileTool::WriteFile { file_path, .. } => {
                // A whole-file write moves every line: keep the words, drop the positions.
                for n in self.0.iter_mut().filter(|n| &n.file == file_path) {
                    n.line = None;
                }
            }
            FileTool::MoveFile { from_path, to_path } => {
                for n in self.0.iter_mut().filter(|n| &n.file == from_path) {
                    n.file = to_path.clone();
                }
            }
            FileTool::DeleteFile { file_path } => self.0.retain(|n| &n.file != file_path),
            _ => {}
        }
    }
}

pub(crate) fn system_prompt(limits: &LoopLimits, checks: bool) -> String {
    let check = if checks {
        "- Before finish, call check: it runs the repository's checkers and returns the \
         diagnostics on the lines you changed. Fix those your change caused.\n"
    } else {
        ""
    };
    format!(
        "You are a coding agent working in a sandbox copy of the user's repository. Nothing you \
         do reaches the user's files directly: when you call finish, your changes are shown to \
         the user hunk by hunk, and they accept, modify or reject each one.\n\
         - Paths are relative to the repository root. Line numbers start at 1.\n\
         - Read a file before you edit it. edit_file needs the file_hash of the version you \
         read as expected_hash; after an edit, use the file_hash it returns (and its new line \
         numbers) for the next edit of that file.\n\
         - Make focused edits, each with a short rationale; they are shown beside the hunks.\n\
         - You may run tests or builds with run_command.\n\
         - If the request is ambiguous, ask one question with clarify_user.\n\
         {check}- You have at most {} tool calls in this run. When the work is done, call \
         finish with a one-line description of the change.",
        limits.max_tool_calls
    )
}

/// A command's output as it streams by, in bounded memory: the first `max / 2` bytes and the
/// last lines up to `max / 2` bytes (where test failures and the final status usually are).
#[derive(Debug)]
pub struct OutputCap {
    max: usize,
    head: String,
    tail: std::collections::VecDeque<String>,
    tail_bytes: usize,
    cut: usize,
}

impl OutputCap {
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(2),
            head: String::new(),
            tail: std::collections::VecDeque::new(),
            tail_bytes: 0,
            cut: 0,
        }
    }

    pub fn push(&mut self, line: &str) {
        let line = format!("{line}\n");
        if self.tail.is_empty() && self.head.len() + line.len() <= self.max / 2 {
            self.head.push_str(&line);
            return;
        }
        self.tail_bytes += line.len();
        self.tail.push_back(line);
        while self.tail_bytes > self.max / 2 {
            match self.tail.pop_front() {
                Some(old) => {
                    self.tail_bytes -= old.len();
                    self.cut += old.len();
                }
                None => break,
            }
        }
    }

    pub fn finish(self) -> String {
        let tail: String = self.tail.into_iter().collect();
        if self.cut == 0 {
            format!("{}{tail}", self.head)
        } else {
            format!("{}[… {} bytes cut …]\n{tail}", self.head, self.cut)
        }
    }
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;

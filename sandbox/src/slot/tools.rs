//! The built-in agent's file tools, executed inside the sandbox as the sandbox user.
//!
//! The hub validates what the model asked for into a [`FileTool`] and hands it to
//! [`Sandbox::tool`](crate::workspace::Sandbox::tool); under `--isolation user` it travels to
//! `hunkgate sandbox-helper tool`, so the files are only ever touched by the sandbox user. Every
//! path is confined to the sandbox with [`Beneath`] (no `..`, no symlink followed, never `.git`).
//!
//! The edit arithmetic ([`apply_edit`]) is pure; [`execute`] is the thin I/O shell around it.
//! Results are JSON the model reads, shaped as seed 000 §5–6 describes.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::fs::beneath::{components, Beneath, FsError, Kind};

/// Caps on what one tool call may read or return (seed 000 §1; all configurable in the hub).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ToolLimits {
    pub max_search_results_default: usize,
    pub max_search_results_cap: usize,
    pub max_search_snippet_lines: usize,
    pub max_read_bytes: u64,
    pub max_read_lines: usize,
    /// Most paths `list_files` returns.
    pub max_list_files: usize,
    /// Largest file `search_project` looks into, and `edit_file` edits.
    pub max_file_bytes: u64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            max_search_results_default: 20,
            max_search_results_cap: 50,
            max_search_snippet_lines: 20,
            max_read_bytes: 64 * 1024,
            max_read_lines: 800,
            max_list_files: 1000,
            max_file_bytes: 4 * 1024 * 1024,
        }
    }
}

/// An edit operation on a line range (seed 000 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Replace lines `start_line..=end_line` with `new_text`.
    Replace,
    /// Insert `new_text` before `start_line` (one past the last line appends).
    Insert,
    /// Delete lines `start_line..=end_line`; `new_text` must be empty.
    Delete,
}

/// The seed's `ProposedEdit`, as the model sends it to `edit_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposedEdit {
    pub file_path: String,
    pub operation: Operation,
    pub start_line: usize,
    #[serde(default)]
    pub end_line: Option<usize>,
    #[serde(default)]
    pub new_text: String,
    /// `sha256:<hex>` of the whole file as `read_file` (or the last edit) reported it.
    pub expected_hash: String,
    #[serde(default)]
    pub rationale: Option<String>,
    #[serde(default)]
    pub edit_id: Option<String>,
}

/// A file tool call, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileTool {
    ListFiles {
        prefix: Option<String>,
        glob: Option<String>,
    },
    ReadFile {
        file_path: String,
        start_line: Option<usize>,
        end_line: Option<usize>,
        max_bytes: Option<u64>,
    },
    SearchProject {
        query: String,
        glob: Option<String>,
        limit: Option<usize>,
    },
    EditFile(ProposedEdit),
    WriteFile {
        file_path: String,
        content: String,
        expected_hash: Option<String>,
    },
    MoveFile {
        from_path: String,
        to_path: String,
    },
    DeleteFile {
        file_path: String,
    },
}

impl FileTool {
    /// Whether the call changes the sandbox (the hub counts these as edits).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            FileTool::EditFile(_)
                | FileTool::WriteFile { .. }
                | FileTool::MoveFile { .. }
                | FileTool::DeleteFile { .. }
        )
    }
}

/// What the helper is asked (after the usual request header).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolRequest {
    pub tool: FileTool,
    pub limits: ToolLimits,
}

/// The answer: a JSON result for the model, or an error it can act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ToolReply {
    Ok { result: Value },
    Error { message: String },
}

/// `sha256:<hex>` of a file's bytes: the `expected_hash` an edit must carry.
pub fn file_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(7 + 64);
    s.push_str("sha256:");
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Why an edit was refused; the text goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("start_line must be 1 or more (lines are numbered from 1)")]
    ZeroLine,
    #[error("{operation} needs end_line")]
    NoEnd { operation: &'static str },
    #[error("end_line {end} is before start_line {start}")]
    Backwards { start: usize, end: usize },
    #[error("lines {start}..={end} are outside the file, which has {total} lines")]
    OutOfRange {
        start: usize,
        end: usize,
        total: usize,
    },
    #[error("insert at line {start}: the file has {total} lines, so insert before 1..={}", total + 1)]
    InsertOutOfRange { start: usize, total: usize },
    #[error("delete takes no new_text (it was {len} bytes); use replace to change lines")]
    DeleteWithText { len: usize },
    #[error("{operation} with empty new_text: use delete to remove lines")]
    EmptyText { operation: &'static str },
    #[error(
        "expected_hash {expected:?} does not match the file ({actual}); the file changed since \
         you read it: read_file it again and redo the edit against its current lines"
    )]
    HashMismatch { expected: String, actual: String },
    #[error("expected_hash {0:?} is not of the form sha256:<64 hex digits>")]
    BadHash(String),
}

/// Check the shape of an edit before touching anything (the schema check whose failures the
/// hub retries with the error fed back).
pub fn validate_edit(edit: &ProposedEdit) -> Result<(), EditError> {
    if !valid_hash(&edit.expected_hash) {
        return Err(EditError::BadHash(edit.expected_hash.clone()));
    }
    if edit.start_line == 0 {
        return Err(EditError::ZeroLine);
    }
    match edit.operation {
        Operation::Replace | Operation::Delete => {
            let op = if edit.operation == Operation::Replace {
                "replace"
            } else {
                "delete"
            };
            let end = edit.end_line.ok_or(EditError::NoEnd { operation: op })?;
            if end < edit.start_line {
                return Err(EditError::Backwards {
                    start: edit.start_line,
                    end,
                });
            }
            if edit.operation == Operation::Delete && !edit.new_text.is_empty() {
                return Err(EditError::DeleteWithText {
                    len: edit.new_text.len(),
                });
            }
            if edit.operation == Operation::Replace && edit.new_text.is_empty() {
                return Err(EditError::EmptyText { operation: op });
            }
        }
        Operation::Insert => {
            if edit.new_text.is_empty() {
                return Err(EditError::EmptyText {
                    operation: "insert",
                });
            }
        }
    }
    Ok(())
}

fn valid_hash(h: &str) -> bool {
    h.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Where an applied edit's new lines are, for the model's next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub text: String,
    /// 1-based first line of the new text (or where the deletion was).
    pub start_line: usize,
    /// Number of lines the new text occupies (0 for a deletion).
    pub line_count: usize,
}

/// Lines with their terminators (the last may have none).
fn lines_of(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// Apply one edit to `text` (pure). `new_text` lines take the file's line ending, and the
/// file's missing final newline stays missing when the edit reaches the last line.
pub fn apply_edit(text: &str, edit: &ProposedEdit) -> Result<Applied, EditError> {
    validate_edit(edit)?;
    let actual = file_hash(text.as_bytes());
    if !actual.eq_ignore_ascii_case(&edit.expected_hash) {
        return Err(EditError::HashMismatch {
            expected: edit.expected_hash.clone(),
            actual,
        });
    }
    let lines = lines_of(text);
    let total = lines.len();
    let (from, to) = edit_span(edit, total)?;
    let eol = if hunkgate_patch::line_ending(text) == "\r\n" {
        "\r\n"
    } else {
        "\n"
    };
    let mut new_lines = terminated_lines(&edit.new_text, eol);
    // A file without a final newline keeps that shape when the edit reaches its end.
    let ends_open = !text.is_empty() && !text.ends_with('\n');
    let at_end = ends_open && to == total;
    let mut out = String::with_capacity(text.len() + edit.new_text.len());
    for l in &lines[..from] {
        out.push_str(l);
    }
    if at_end {
        if from == total && !new_lines.is_empty() {
            // Appending after the unterminated last line: it needs its newline now.
            out.push_str(eol);
        }
        if let Some(last) = new_lines.last_mut() {
            last.truncate(last.len() - eol.len());
        }
    }
    for l in &new_lines {
        out.push_str(l);
    }
    for l in &lines[to..] {
        out.push_str(l);
    }
    if at_end && new_lines.is_empty() {
        unterminate_last_line(&mut out);
    }
    Ok(Applied {
        text: out,
        start_line: edit.start_line,
        line_count: new_lines.len(),
    })
}

/// The 0-based half-open range of the file's `total` lines that `edit` replaces (empty for
/// an insert), or why it is outside the file.
fn edit_span(edit: &ProposedEdit, total: usize) -> Result<(usize, usize), EditError> {
    let start = edit.start_line;
    match edit.operation {
        Operation::Insert => {
            if start > total + 1 {
                return Err(EditError::InsertOutOfRange { start, total });
            }
            Ok((start - 1, start - 1))
        }
        Operation::Replace | Operation::Delete => {
            let end = edit.end_line.unwrap_or(start);
            if end > total {
                return Err(EditError::OutOfRange { start, end, total });
            }
            Ok((start - 1, end))
        }
    }
}

/// `new_text` as lines each ending in `eol` (whatever line endings it came with); none when
/// it is empty.
fn terminated_lines(new_text: &str, eol: &str) -> Vec<String> {
    if new_text.is_empty() {
        return Vec::new();
    }
    let normalized = new_text.replace("\r\n", "\n");
    let body = normalized.strip_suffix('\n').unwrap_or(&normalized);
    body.split('\n').map(|l| format!("{l}{eol}")).collect()
}

/// After the unterminated last line was deleted: the line before it now ends the file, as
/// unterminated — unless it is blank, which would make it vanish.
fn unterminate_last_line(out: &mut String) {
    let blank = out.ends_with("\n\n")
        || out.ends_with("\n\r\n")
        || out.as_str() == "\n"
        || out.as_str() == "\r\n";
    if out.ends_with('\n') && !blank {
        out.pop();
        if out.ends_with('\r') {
            out.pop();
        }
    }
}

/// Why a tool call failed; the text goes back to the model.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error("{0}: no such file")]
    NotFound(String),
    #[error("{path}: {why}")]
    Unsupported { path: String, why: &'static str },
    #[error("glob {glob:?}: {message}")]
    Glob { glob: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// A path as the model writes it ("./src/a.rs" and "src/a.rs" are the same), validated.
fn clean(path: &str) -> Result<String, ToolError> {
    let mut p = path.trim();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    let p = p.trim_end_matches('/');
    components(p).map_err(FsError::from)?;
    if p.split('/').next().is_some_and(|c| c == ".jj") {
        return Err(ToolError::Unsupported {
            path: p.to_string(),
            why: "jj's metadata is not part of the project",
        });
    }
    Ok(p.to_string())
}

fn glob_matcher(glob: Option<&str>) -> Result<Option<globset::GlobMatcher>, ToolError> {
    match glob
        .map(str::trim)
        .filter(|g| !g.is_empty() && *g != "**/*" && *g != "**")
    {
        None => Ok(None),
        Some(g) => globset::GlobBuilder::new(g)
            .literal_separator(false)
            .build()
            .map(|g| Some(g.compile_matcher()))
            .map_err(|e| ToolError::Glob {
                glob: g.to_string(),
                message: e.to_string(),
            }),
    }
}

/// Run one file tool in the sandbox at `root`.
pub fn execute(root: &Path, tool: &FileTool, limits: &ToolLimits) -> ToolReply {
    match run(root, tool, limits) {
        Ok(result) => ToolReply::Ok { result },
        Err(e) => ToolReply::Error {
            message: e.to_string(),
        },
    }
}

fn read_text(fs: &Beneath, path: &str, cap: u64) -> Result<(String, bool), ToolError> {
    match fs.kind(path)? {
        None => return Err(ToolError::NotFound(path.to_string())),
        Some(Kind::Symlink) => {
            return Err(ToolError::Unsupported {
                path: path.to_string(),
                why: "is a symlink; the tools work on regular files",
            })
        }
        Some(Kind::File { .. }) => {}
        Some(_) => {
            return Err(ToolError::Unsupported {
                path: path.to_string(),
                why: "is not a regular file",
            })
        }
    }
    let (bytes, exec) = fs
        .read(path, cap)?
        .ok_or_else(|| ToolError::NotFound(path.to_string()))?;
    let text = hunkgate_patch::into_text(bytes).ok_or_else(|| ToolError::Unsupported {
        path: path.to_string(),
        why: "is binary or not UTF-8; the tools read and edit text only",
    })?;
    Ok((text, exec))
}

fn run(root: &Path, tool: &FileTool, limits: &ToolLimits) -> Result<Value, ToolError> {
    let fs = Beneath::open(root)?;
    match tool {
        FileTool::ListFiles { prefix, glob } => list_files(root, prefix, glob, limits),
        FileTool::ReadFile {
            file_path,
            start_line,
            end_line,
            max_bytes,
        } => {
            let window = ReadWindow {
                start_line: *start_line,
                end_line: *end_line,
                max_bytes: *max_bytes,
            };
            read_file(&fs, file_path, window, limits)
        }
        FileTool::SearchProject { query, glob, limit } => {
            search(root, &fs, query, glob.as_deref(), *limit, limits)
        }
        FileTool::EditFile(edit) => edit_file(&fs, edit, limits),
        FileTool::WriteFile {
            file_path,
            content,
            expected_hash,
        } => write_file(&fs, file_path, content, expected_hash.as_deref(), limits),
        FileTool::MoveFile { from_path, to_path } => move_file(&fs, from_path, to_path),
        FileTool::DeleteFile { file_path } => delete_file(&fs, file_path),
    }
}

/// `list_files`: the project's paths not ignored by git, under `prefix` and matching `glob`,
/// capped at `max_list_files` (with the total count).
fn list_files(
    root: &Path,
    prefix: &Option<String>,
    glob: &Option<String>,
    limits: &ToolLimits,
) -> Result<Value, ToolError> {
    let prefix = match prefix.as_deref().map(str::trim) {
        None | Some("") | Some(".") | Some("./") => None,
        Some(p) => Some(clean(p)?),
    };
    let matcher = glob_matcher(glob.as_deref())?;
    let mut files = Vec::new();
    let mut total = 0usize;
    for path in crate::status::snapshot::walk_not_ignored(root, false) {
        if !under_prefix(&path, prefix.as_deref()) {
            continue;
        }
        if matcher.as_ref().is_some_and(|m| !m.is_match(&path)) {
            continue;
        }
        total += 1;
        if files.len() < limits.max_list_files {
            files.push(path);
        }
    }
    Ok(json!({
        "files": files,
        "total": total,
        "truncated": total > files.len(),
    }))
}

/// Whether `path` is `prefix` itself or inside it (every path is, without a prefix).
fn under_prefix(path: &str, prefix: Option<&str>) -> bool {
    match prefix {
        None => true,
        Some(p) => path == p || path.starts_with(&format!("{p}/")),
    }
}

/// The lines `read_file` was asked for, as the model sent them.
#[derive(Debug, Clone, Copy)]
struct ReadWindow {
    start_line: Option<usize>,
    end_line: Option<usize>,
    max_bytes: Option<u64>,
}

/// The lines `read_file` returns, within the caps.
#[derive(Debug, PartialEq, Eq)]
struct ReadSlice {
    content: String,
    start: usize,
    /// Last line returned (`start - 1` when none was).
    end: usize,
    /// Last line asked for; the slice is truncated when `end` is before it.
    wanted_end: usize,
    /// Lines in the whole file.
    total: usize,
}

/// Cut the lines `window` asks for out of `text` (pure), stopping at `max_read_lines` lines
/// or the byte cap, whichever comes first.
fn read_slice(
    text: &str,
    path: &str,
    window: ReadWindow,
    limits: &ToolLimits,
) -> Result<ReadSlice, ToolError> {
    let lines = lines_of(text);
    let total = lines.len();
    let start = window.start_line.unwrap_or(1).max(1);
    if start > total.max(1) {
        return Err(ToolError::Invalid(format!(
            "start_line {start} is past the end of {path}, which has {total} lines"
        )));
    }
    let max_bytes = window
        .max_bytes
        .unwrap_or(limits.max_read_bytes)
        .min(limits.max_read_bytes) as usize;
    let wanted_end = window.end_line.unwrap_or(total).min(total);
    if wanted_end < start && total > 0 {
        return Err(ToolError::Invalid(format!(
            "end_line {wanted_end} is before start_line {start}"
        )));
    }
    let mut content = String::new();
    let mut end = start.saturating_sub(1);
    for l in lines.iter().skip(start - 1).take(wanted_end + 1 - start) {
        if end + 1 - start >= limits.max_read_lines || content.len() + l.len() > max_bytes {
            break;
        }
        content.push_str(l);
        end += 1;
    }
    Ok(ReadSlice {
        content,
        start,
        end,
        wanted_end,
        total,
    })
}

/// `read_file`: a window of a text file's lines, with the whole file's hash for later edits.
fn read_file(
    fs: &Beneath,
    file_path: &str,
    window: ReadWindow,
    limits: &ToolLimits,
) -> Result<Value, ToolError> {
    let path = clean(file_path)?;
    let (text, _) = read_text(fs, &path, limits.max_file_bytes)?;
    let slice = read_slice(&text, &path, window, limits)?;
    let truncated = slice.end < slice.wanted_end;
    let mut out = json!({
        "file_path": path,
        "content": slice.content,
        "start_line": slice.start,
        "end_line": slice.end,
        "total_lines": slice.total,
        "file_hash": file_hash(text.as_bytes()),
        "truncated": truncated,
    });
    if truncated {
        out["next_start_line"] = json!(slice.end + 1);
    }
    Ok(out)
}

/// `edit_file`: apply one line-range edit checked against the file's hash, and write it.
fn edit_file(fs: &Beneath, edit: &ProposedEdit, limits: &ToolLimits) -> Result<Value, ToolError> {
    let path = clean(&edit.file_path)?;
    let (text, exec) = read_text(fs, &path, limits.max_file_bytes)?;
    let applied = apply_edit(&text, edit)?;
    fs.write_atomic(&path, applied.text.as_bytes(), exec)?;
    Ok(json!({
        "file_path": path,
        "file_hash": file_hash(applied.text.as_bytes()),
        "total_lines": lines_of(&applied.text).len(),
        "changed_start_line": applied.start_line,
        "changed_line_count": applied.line_count,
        "preview": edit_preview(&applied),
    }))
}

/// The changed lines of an applied edit with up to three lines of context on each side,
/// numbered like `   12| text`.
fn edit_preview(applied: &Applied) -> String {
    let lines = lines_of(&applied.text);
    let from = applied.start_line.saturating_sub(4);
    let to = (applied.start_line + applied.line_count + 2).min(lines.len());
    lines
        .get(from..to)
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>5}| {}", from + i + 1, l.trim_end_matches(['\n', '\r'])))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `write_file`: create or overwrite a regular file (keeping its executable bit), first
/// checking `expected_hash` against the current content when one is given.
fn write_file(
    fs: &Beneath,
    file_path: &str,
    content: &str,
    expected_hash: Option<&str>,
    limits: &ToolLimits,
) -> Result<Value, ToolError> {
    let path = clean(file_path)?;
    let mut exec = false;
    let existed = match fs.kind(&path)? {
        None => false,
        Some(Kind::File { executable, .. }) => {
            exec = executable;
            true
        }
        Some(_) => {
            return Err(ToolError::Unsupported {
                path,
                why: "exists and is not a regular file",
            })
        }
    };
    if let Some(expected) = expected_hash {
        check_current_hash(fs, &path, expected, limits)?;
    }
    fs.write_atomic(&path, content.as_bytes(), exec)?;
    Ok(json!({
        "file_path": path,
        "created": !existed,
        "bytes": content.len(),
        "file_hash": file_hash(content.as_bytes()),
    }))
}

/// Refuse unless the file at `path` exists and hashes to `expected`.
fn check_current_hash(
    fs: &Beneath,
    path: &str,
    expected: &str,
    limits: &ToolLimits,
) -> Result<(), ToolError> {
    if !valid_hash(expected) {
        return Err(EditError::BadHash(expected.to_string()).into());
    }
    let current = fs
        .read(path, limits.max_file_bytes)?
        .map(|(b, _)| file_hash(&b))
        .ok_or_else(|| ToolError::NotFound(path.to_string()))?;
    if !current.eq_ignore_ascii_case(expected) {
        return Err(EditError::HashMismatch {
            expected: expected.to_string(),
            actual: current,
        }
        .into());
    }
    Ok(())
}

/// `move_file`: move a file or symlink to a path that does not exist yet.
fn move_file(fs: &Beneath, from_path: &str, to_path: &str) -> Result<Value, ToolError> {
    let from = clean(from_path)?;
    let to = clean(to_path)?;
    if from == to {
        return Err(ToolError::Invalid(format!(
            "{from}: moving a file onto itself"
        )));
    }
    if fs.kind(&to)?.is_some() {
        return Err(ToolError::Invalid(format!(
            "{to} already exists; delete it first if you mean to replace it"
        )));
    }
    match fs.kind(&from)? {
        None => return Err(ToolError::NotFound(from)),
        Some(Kind::Symlink) => {
            let target = fs
                .read_link(&from)?
                .ok_or_else(|| ToolError::NotFound(from.clone()))?;
            fs.symlink(&to, &target)?;
        }
        Some(Kind::File { .. }) => {
            let (bytes, exec) = fs
                .read(&from, u64::MAX)?
                .ok_or_else(|| ToolError::NotFound(from.clone()))?;
            fs.write_atomic(&to, &bytes, exec)?;
        }
        Some(_) => {
            return Err(ToolError::Unsupported {
                path: from,
                why: "is not a regular file",
            })
        }
    }
    fs.remove_file(&from)?;
    Ok(json!({ "from_path": from, "to_path": to }))
}

/// `delete_file`: remove a file or symlink (never a directory).
fn delete_file(fs: &Beneath, file_path: &str) -> Result<Value, ToolError> {
    let path = clean(file_path)?;
    match fs.kind(&path)? {
        None => Err(ToolError::NotFound(path)),
        Some(Kind::File { .. }) | Some(Kind::Symlink) => {
            fs.remove_file(&path)?;
            Ok(json!({ "file_path": path, "deleted": true }))
        }
        Some(_) => Err(ToolError::Unsupported {
            path,
            why: "is not a file; only files are deleted",
        }),
    }
}

/// Case-insensitive literal search (case-sensitive when the query has an upper-case letter,
/// like ripgrep's smart case), with snippets of nearby lines merged per file.
fn search(
    root: &Path,
    fs: &Beneath,
    query: &str,
    glob: Option<&str>,
    limit: Option<usize>,
    limits: &ToolLimits,
) -> Result<Value, ToolError> {
    if query.trim().is_empty() {
        return Err(ToolError::Invalid("query is empty".into()));
    }
    let limit = limit
        .unwrap_or(limits.max_search_results_default)
        .clamp(1, limits.max_search_results_cap.max(1));
    let matcher = glob_matcher(glob)?;
    let needle = Needle::new(query);
    // Context around each hit, within the snippet cap.
    let context = (limits.max_search_snippet_lines.saturating_sub(1) / 2).min(2);
    let mut results = Vec::new();
    let mut truncated = false;
    'files: for path in crate::status::snapshot::walk_not_ignored(root, false) {
        if matcher.as_ref().is_some_and(|m| !m.is_match(&path)) {
            continue;
        }
        let Some(text) = read_searchable(fs, &path, limits) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let hits: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| needle.is_in(l))
            .map(|(i, _)| i)
            .collect();
        let max_lines = limits.max_search_snippet_lines;
        for (from, to) in snippet_ranges(&hits, lines.len(), context, max_lines) {
            if results.len() == limit {
                truncated = true;
                break 'files;
            }
            results.push(json!({
                "file_path": path,
                "start_line": from + 1,
                "end_line": to + 1,
                "snippet": lines[from..=to].join("\n"),
            }));
        }
    }
    Ok(json!({ "results": results, "truncated": truncated }))
}

/// A search query with smart case: case-sensitive only when it has an upper-case letter.
struct Needle {
    text: String,
    sensitive: bool,
}

impl Needle {
    fn new(query: &str) -> Self {
        let sensitive = query.chars().any(char::is_uppercase);
        let text = if sensitive {
            query.to_string()
        } else {
            query.to_lowercase()
        };
        Self { text, sensitive }
    }

    /// Whether `line` contains the query.
    fn is_in(&self, line: &str) -> bool {
        if self.sensitive {
            line.contains(&self.text)
        } else {
            line.to_lowercase().contains(&self.text)
        }
    }
}

/// The text of the regular file at `path` if search looks into it: not larger than
/// `max_file_bytes`, text and UTF-8; `None` for anything else or anything unreadable.
fn read_searchable(fs: &Beneath, path: &str, limits: &ToolLimits) -> Option<String> {
    let Ok(Some(Kind::File { size, .. })) = fs.kind(path) else {
        return None;
    };
    if size > limits.max_file_bytes {
        return None;
    }
    let Ok(Some((bytes, _))) = fs.read(path, limits.max_file_bytes) else {
        return None;
    };
    hunkgate_patch::into_text(bytes)
}

/// The snippets (0-based inclusive line ranges) around `hits`, ascending line numbers in a
/// file of `len` lines: `context` lines each side of a hit, hits whose snippets touch merged
/// while the merged snippet fits `max_lines`, and every snippet cut to `max_lines`.
fn snippet_ranges(
    hits: &[usize],
    len: usize,
    context: usize,
    max_lines: usize,
) -> Vec<(usize, usize)> {
    let max_lines = max_lines.max(1);
    let mut out = Vec::new();
    let mut i = 0;
    while i < hits.len() {
        let from = hits[i].saturating_sub(context);
        let mut to = (hits[i] + context).min(len - 1);
        let mut j = i + 1;
        while j < hits.len()
            && hits[j].saturating_sub(context) <= to + 1
            && (hits[j] + context).min(len - 1) + 1 - from <= max_lines
        {
            to = (hits[j] + context).min(len - 1);
            j += 1;
        }
        out.push((from, to.min(from + max_lines - 1)));
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn edit(
        op: Operation,
        start: usize,
        end: Option<usize>,
        text: &str,
        base: &str,
    ) -> ProposedEdit {
        ProposedEdit {
            file_path: "f.txt".into(),
            operation: op,
            start_line: start,
            end_line: end,
            new_text: text.into(),
            expected_hash: file_hash(base.as_bytes()),
            rationale: None,
            edit_id: None,
        }
    }

    #[test]
    fn replace_insert_delete_follow_the_seed() {
        let base = "a\nb\nc\nd\n";
        let r = apply_edit(base, &edit(Operation::Replace, 2, Some(3), "B\nC\nX", base)).unwrap();
        assert_eq!(r.text, "a\nB\nC\nX\nd\n");
        assert_eq!((r.start_line, r.line_count), (2, 3));
        let r = apply_edit(base, &edit(Operation::Insert, 1, None, "top\n", base)).unwrap();
        assert_eq!(r.text, "top\na\nb\nc\nd\n");
        let r = apply_edit(base, &edit(Operation::Insert, 5, None, "end", base)).unwrap();
        assert_eq!(r.text, "a\nb\nc\nd\nend\n");
        let r = apply_edit(base, &edit(Operation::Delete, 1, Some(4), "", base)).unwrap();
        assert_eq!(r.text, "");
    }

    #[test]
    fn edits_keep_line_endings_and_a_missing_final_newline() {
        let crlf = "a\r\nb\r\nc\r\n";
        let r = apply_edit(crlf, &edit(Operation::Replace, 2, Some(2), "x\ny\n", crlf)).unwrap();
        assert_eq!(r.text, "a\r\nx\r\ny\r\nc\r\n");
        let open = "a\nb\nc";
        let r = apply_edit(open, &edit(Operation::Replace, 3, Some(3), "C\n", open)).unwrap();
        assert_eq!(r.text, "a\nb\nC");
        let r = apply_edit(open, &edit(Operation::Insert, 4, None, "d", open)).unwrap();
        assert_eq!(r.text, "a\nb\nc\nd");
        let r = apply_edit(open, &edit(Operation::Delete, 3, Some(3), "", open)).unwrap();
        assert_eq!(r.text, "a\nb");
        let r = apply_edit(open, &edit(Operation::Replace, 1, Some(1), "A", open)).unwrap();
        assert_eq!(r.text, "A\nb\nc");
        let blank = "a\n\nX";
        let r = apply_edit(blank, &edit(Operation::Delete, 3, Some(3), "", blank)).unwrap();
        assert_eq!(
            r.text, "a\n\n",
            "a blank last line is kept, with its newline"
        );
    }

    #[test]
    fn bad_edits_are_refused_with_the_reason() {
        let base = "a\nb\n";
        let cases = [
            (
                edit(Operation::Replace, 0, Some(1), "x", base),
                "start_line",
            ),
            (
                edit(Operation::Replace, 1, None, "x", base),
                "needs end_line",
            ),
            (edit(Operation::Replace, 2, Some(1), "x", base), "before"),
            (edit(Operation::Replace, 2, Some(3), "x", base), "outside"),
            (
                edit(Operation::Insert, 4, None, "x", base),
                "insert before 1..=3",
            ),
            (
                edit(Operation::Delete, 1, Some(1), "x", base),
                "no new_text",
            ),
            (edit(Operation::Replace, 1, Some(1), "", base), "use delete"),
        ];
        for (e, want) in cases {
            let err = apply_edit(base, &e).unwrap_err().to_string();
            assert!(err.contains(want), "{e:?}: {err}");
        }
        let mut stale = edit(Operation::Replace, 1, Some(1), "x", "other\n");
        let err = apply_edit(base, &stale).unwrap_err();
        assert!(matches!(err, EditError::HashMismatch { .. }), "{err}");
        stale.expected_hash = "md5:abc".into();
        assert!(matches!(
            apply_edit(base, &stale).unwrap_err(),
            EditError::BadHash(_)
        ));
        // Positive control: the same edit with the right hash applies.
        assert!(apply_edit(base, &edit(Operation::Replace, 1, Some(1), "x", base)).is_ok());
    }

    proptest! {
        /// Replacing a range and then replacing the new lines with the old ones gives the file
        /// back; deleting and re-inserting does too.
        #[test]
        fn edits_round_trip(
            lines in proptest::collection::vec("[a-z]{0,3}", 1..12),
            final_nl in any::<bool>(),
            a in 0usize..12, b in 0usize..12,
            new in proptest::collection::vec("[A-Z]{1,3}", 1..4),
        ) {
            let mut base = lines.join("\n");
            if final_nl { base.push('\n'); }
            let total = lines_of(&base).len();
            prop_assume!(total > 0);
            let (s, e) = (a.min(b) % total + 1, a.max(b) % total + 1);
            let (s, e) = (s.min(e), s.max(e));
            let old: String = lines_of(&base)[s - 1..e].concat();
            let r = apply_edit(&base, &edit(Operation::Replace, s, Some(e), &new.join("\n"), &base)).unwrap();
            prop_assert_eq!(r.line_count, new.len());
            let back = apply_edit(
                &r.text,
                &edit(Operation::Replace, s, Some(s + r.line_count - 1), &old, &r.text),
            ).unwrap();
            prop_assert_eq!(&back.text, &base);
            let d = apply_edit(&base, &edit(Operation::Delete, s, Some(e), "", &base)).unwrap();
            // Deleting the unterminated end changes where the file ends (see the unit test).
            if final_nl || e < total {
                let re = apply_edit(&d.text, &edit(Operation::Insert, s, None, &old, &d.text)).unwrap();
                prop_assert_eq!(&re.text, &base);
            }
        }
    }

    fn sandbox(files: &[(&str, &str)]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let path = tmp.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, c).unwrap();
        }
        tmp
    }

    fn ok(r: ToolReply) -> Value {
        match r {
            ToolReply::Ok { result } => result,
            ToolReply::Error { message } => panic!("tool failed: {message}"),
        }
    }

    fn err(r: ToolReply) -> String {
        match r {
            ToolReply::Ok { result } => panic!("tool succeeded: {result}"),
            ToolReply::Error { message } => message,
        }
    }

    /// A project with an ignored `target/`, hits for "fixme" in several cases, and a 30-line
    /// file; returns it with its numbered file's content.
    fn project() -> (tempfile::TempDir, String) {
        let numbered: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let tmp = sandbox(&[
            (".gitignore", "target/\n"),
            ("src/a.rs", "fn main() {\n    // fixme\n}\n"),
            ("src/b.rs", &numbered),
            ("target/out.rs", "// fixme\n"),
            ("docs/x.md", "FIXME: write\n"),
        ]);
        (tmp, numbered)
    }

    #[test]
    fn list_files_respects_gitignore_and_prefix() {
        let (tmp, _) = project();
        let run = |t: FileTool| execute(tmp.path(), &t, &ToolLimits::default());
        let files = ok(run(FileTool::ListFiles {
            prefix: Some("./src".into()),
            glob: None,
        }));
        assert_eq!(files["files"], json!(["src/a.rs", "src/b.rs"]));
        let all = ok(run(FileTool::ListFiles {
            prefix: None,
            glob: Some("**/*.rs".into()),
        }));
        assert_eq!(
            all["files"],
            json!(["src/a.rs", "src/b.rs"]),
            "ignored target/ is left out"
        );
    }

    #[test]
    fn read_file_is_capped_at_max_read_lines() {
        let (tmp, numbered) = project();
        let limits = ToolLimits {
            max_read_lines: 10,
            ..ToolLimits::default()
        };
        let read = ok(execute(
            tmp.path(),
            &FileTool::ReadFile {
                file_path: "src/b.rs".into(),
                start_line: Some(5),
                end_line: None,
                max_bytes: None,
            },
            &limits,
        ));
        assert_eq!(read["start_line"], 5);
        assert_eq!(read["end_line"], 14, "capped at max_read_lines");
        assert_eq!(read["truncated"], true);
        assert_eq!(read["next_start_line"], 15);
        assert_eq!(read["file_hash"], json!(file_hash(numbered.as_bytes())));
        assert!(read["content"].as_str().unwrap().starts_with("line 5\n"));
    }

    #[test]
    fn search_is_smart_case_skips_ignored_files_and_caps() {
        let (tmp, _) = project();
        let search = |query: &str, glob: Option<&str>, limit: Option<usize>| {
            let tool = FileTool::SearchProject {
                query: query.into(),
                glob: glob.map(Into::into),
                limit,
            };
            ok(execute(tmp.path(), &tool, &ToolLimits::default()))
        };
        let found = search("fixme", None, None);
        let hits: Vec<&str> = found["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["file_path"].as_str().unwrap())
            .collect();
        assert_eq!(
            hits,
            vec!["docs/x.md", "src/a.rs"],
            "smart case, ignored files skipped"
        );
        assert_eq!(found["results"][1]["start_line"], 1);
        assert_eq!(found["results"][1]["end_line"], 3);
        let exact = search("FIXME", None, None);
        assert_eq!(exact["results"].as_array().unwrap().len(), 1);
        let capped = search("line", Some("src/*.rs"), Some(1));
        assert_eq!(capped["results"][0]["start_line"], 1);
        assert_eq!(capped["results"][0]["end_line"], 20, "snippets are capped");
        assert_eq!(capped["results"].as_array().unwrap().len(), 1);
        assert_eq!(capped["truncated"], true);
    }

    #[test]
    fn paths_outside_the_sandbox_are_refused() {
        let tmp = sandbox(&[("a.txt", "one\ntwo\n")]);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("link")).unwrap();
        let limits = ToolLimits::default();
        let run = |t: FileTool| execute(tmp.path(), &t, &limits);
        for bad in [
            "../x",
            "/etc/passwd",
            ".git/config",
            "link/secret",
            "a/../../x",
        ] {
            let e = err(run(FileTool::WriteFile {
                file_path: bad.into(),
                content: "x".into(),
                expected_hash: None,
            }));
            assert!(!e.is_empty(), "{bad}");
            let e = err(run(FileTool::ReadFile {
                file_path: bad.into(),
                start_line: None,
                end_line: None,
                max_bytes: None,
            }));
            assert!(!e.is_empty(), "{bad}");
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "s\n"
        );
        // Positive control: ordinary paths work, parents are created.
        let w = ok(run(FileTool::WriteFile {
            file_path: "new/dir/b.txt".into(),
            content: "b\n".into(),
            expected_hash: None,
        }));
        assert_eq!(w["created"], true);
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("new/dir/b.txt")).unwrap(),
            "b\n"
        );
    }

    /// `edit_file` replacing line 2 of `a.txt` by `TWO`, against `expected_hash`.
    fn replace_line_2(expected_hash: &str) -> FileTool {
        FileTool::EditFile(ProposedEdit {
            file_path: "a.txt".into(),
            operation: Operation::Replace,
            start_line: 2,
            end_line: Some(2),
            new_text: "TWO".into(),
            expected_hash: expected_hash.into(),
            rationale: None,
            edit_id: None,
        })
    }

    #[test]
    fn edit_move_and_delete_change_the_sandbox() {
        let tmp = sandbox(&[("a.txt", "one\ntwo\n")]);
        let limits = ToolLimits::default();
        let run = |t: FileTool| execute(tmp.path(), &t, &limits);
        let hash = file_hash(b"one\ntwo\n");
        let e = ok(run(replace_line_2(&hash)));
        assert_eq!(e["file_hash"], json!(file_hash(b"one\nTWO\n")));
        assert!(e["preview"].as_str().unwrap().contains("2| TWO"));
        // The same edit again is stale now.
        let stale = err(run(replace_line_2(&hash)));
        assert!(stale.contains("read_file it again"), "{stale}");
        ok(run(FileTool::MoveFile {
            from_path: "a.txt".into(),
            to_path: "moved/a.txt".into(),
        }));
        assert!(!tmp.path().join("a.txt").exists());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("moved/a.txt")).unwrap(),
            "one\nTWO\n"
        );
        ok(run(FileTool::DeleteFile {
            file_path: "moved/a.txt".into(),
        }));
        assert!(!tmp.path().join("moved/a.txt").exists());
        let e = err(run(FileTool::DeleteFile {
            file_path: "moved/a.txt".into(),
        }));
        assert!(e.contains("no such file"), "{e}");
    }

    #[test]
    fn snippets_merge_touching_hits_and_stay_under_the_cap() {
        // (hits, lines in the file, context, max lines) -> snippets
        type Case = (
            &'static [usize],
            usize,
            usize,
            usize,
            &'static [(usize, usize)],
        );
        let cases: &[Case] = &[
            (&[], 10, 2, 20, &[]),
            (&[0], 1, 2, 20, &[(0, 0)]),
            (&[5], 30, 2, 20, &[(3, 7)]),
            // Snippets that touch (7 and 8) merge; a gap keeps them apart.
            (&[5, 10], 30, 2, 20, &[(3, 12)]),
            (&[5, 11], 30, 2, 20, &[(3, 7), (9, 13)]),
            (&[5, 20], 30, 2, 20, &[(3, 7), (18, 22)]),
            // A merge that would pass the cap starts a new snippet.
            (&[0, 3, 6], 30, 2, 6, &[(0, 5), (4, 8)]),
            // A snippet is cut to the cap even alone.
            (&[5], 30, 2, 1, &[(3, 3)]),
            (&[29], 30, 2, 20, &[(27, 29)]),
        ];
        for (hits, len, context, max, want) in cases {
            assert_eq!(
                snippet_ranges(hits, *len, *context, *max),
                want.to_vec(),
                "{hits:?} in {len} lines, context {context}, max {max}"
            );
        }
    }

    #[test]
    fn needles_are_smart_case() {
        let lower = Needle::new("fixme");
        assert!(lower.is_in("// FIXME later") && lower.is_in("fixme"));
        let upper = Needle::new("FIXME");
        assert!(upper.is_in("// FIXME later"));
        assert!(
            !upper.is_in("// fixme later"),
            "an upper-case letter makes it exact"
        );
    }

    #[test]
    fn read_slices_stop_at_either_cap() {
        let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
        let window = |start, end, max_bytes| ReadWindow {
            start_line: start,
            end_line: end,
            max_bytes,
        };
        let limits = ToolLimits {
            max_read_lines: 4,
            ..ToolLimits::default()
        };
        let s = read_slice(&text, "f", window(Some(2), None, None), &limits).unwrap();
        assert_eq!(
            (s.content.as_str(), s.start, s.end),
            ("l2\nl3\nl4\nl5\n", 2, 5)
        );
        assert_eq!((s.wanted_end, s.total), (10, 10));
        let s = read_slice(&text, "f", window(None, Some(9), Some(7)), &limits).unwrap();
        assert_eq!(
            (s.content.as_str(), s.end, s.wanted_end),
            ("l1\nl2\n", 2, 9)
        );
        let s = read_slice(&text, "f", window(Some(3), Some(4), None), &limits).unwrap();
        assert_eq!((s.content.as_str(), s.end), ("l3\nl4\n", 4), "nothing cut");
        let past = read_slice(&text, "f", window(Some(11), None, None), &limits);
        assert!(matches!(past, Err(ToolError::Invalid(m)) if m.contains("past the end of f")));
        let back = read_slice(&text, "f", window(Some(5), Some(4), None), &limits);
        assert!(matches!(back, Err(ToolError::Invalid(m)) if m.contains("before start_line")));
        let empty = read_slice("", "f", window(None, None, None), &limits).unwrap();
        assert_eq!((empty.start, empty.end, empty.total), (1, 0, 0));
    }

    #[test]
    fn new_text_takes_the_file_line_ending() {
        assert_eq!(terminated_lines("", "\n"), Vec::<String>::new());
        assert_eq!(terminated_lines("a\r\nb", "\n"), ["a\n", "b\n"]);
        assert_eq!(terminated_lines("a\nb\n", "\r\n"), ["a\r\n", "b\r\n"]);
        assert_eq!(terminated_lines("\n", "\n"), ["\n"]);
    }

    #[test]
    fn edit_previews_show_numbered_context() {
        let applied = Applied {
            text: (1..=10).map(|i| format!("l{i}\n")).collect(),
            start_line: 6,
            line_count: 1,
        };
        let want = "    3| l3\n    4| l4\n    5| l5\n    6| l6\n    7| l7\n    8| l8\n    9| l9";
        assert_eq!(edit_preview(&applied), want);
        assert!(under_prefix("src/a.rs", Some("src")) && under_prefix("src", Some("src")));
        assert!(!under_prefix("srcx/a.rs", Some("src")) && under_prefix("x", None));
    }
}

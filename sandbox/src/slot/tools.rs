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

mod edit;
pub use edit::*;

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
mod tests;

//! Reading what a checker (`[[check]]`) printed into diagnostics: the generic `gnu`
//! `file:line:col: message` lines, `tsc`'s `file(line,col): …`, and the JSON of cargo, ruff and
//! eslint.
//!
//! The output is hostile data: the sandbox's own code (a build script, a linter plugin) runs
//! inside the checker and can print anything. So it arrives already bounded (the runner keeps
//! at most `[limits] max_check_output_bytes`, each line at most
//! [`hunkgate_sandbox::agent::MAX_LINE`] bytes), every field read is bounded again here, what
//! does not parse is skipped (never an error that loses the rest), paths are only kept when they
//! name a file inside the repository, and nothing of it is ever run or opened.

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::{Diagnostic, Severity};

/// How a checker's output is read (`format` in `[[check]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `file:line[:col]: [error|warning|note][[CODE]]: message` (gcc, cargo `--message-format
    /// short`, ruff `--output-format concise`, go vet, mypy, flake8, …), on stdout or stderr.
    Gnu,
    /// `file(line,col): error TS2322: message` (tsc `--pretty false`).
    Tsc,
    /// cargo's `--message-format json` lines (`compiler-message`s), on stdout.
    CargoJson,
    /// ruff's `--output-format json` array, or its `json-lines`, on stdout.
    RuffJson,
    /// eslint's `--format json` array, on stdout.
    EslintJson,
}

/// What a checker printed, as lines (each already cut to a bounded length).
#[derive(Debug, Default, Clone)]
pub struct Output {
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
}

/// One diagnostic as a checker reported it, before it is compared with the other tree's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Found {
    /// Relative to the repository root, `/`-separated, no `..`.
    pub file: String,
    pub line: usize,
    pub column: Option<usize>,
    pub severity: Severity,
    pub code: Option<String>,
    pub message: String,
}

/// The most diagnostics read from one checker's output; the rest is not read.
pub const MAX_FOUND: usize = 2000;
/// A code longer than this is dropped (codes are short: `E0308`, `clippy::needless_borrow`).
const MAX_CODE: usize = 100;
/// A path longer than this is not a file of the repository anyone reviews.
const MAX_PATH: usize = 4096;

/// Read `out` as `format`. `root` is the directory the checker ran in (the sandbox's tree):
/// an absolute path under it is made relative; any other absolute path, or one that climbs
/// out with `..`, is dropped. Duplicates (cargo reports a library's warning once per target)
/// are kept once; the result is sorted.
pub fn parse(format: Format, out: &Output, root: &str) -> Vec<Found> {
    let mut found = match format {
        Format::Gnu => lines_of(out, true)
            .filter_map(|l| gnu_line(l, root))
            .collect(),
        Format::Tsc => lines_of(out, false)
            .filter_map(|l| tsc_line(l, root))
            .collect(),
        Format::CargoJson => lines_of(out, false)
            .filter_map(|l| cargo_line(l, root))
            .collect(),
        Format::RuffJson => ruff(out, root),
        Format::EslintJson => eslint(out, root),
    };
    found.truncate(MAX_FOUND);
    found.sort();
    found.dedup();
    found
}

fn lines_of(out: &Output, with_stderr: bool) -> impl Iterator<Item = &str> {
    let stderr: &[String] = if with_stderr { &out.stderr } else { &[] };
    out.stdout
        .iter()
        .chain(stderr)
        .map(String::as_str)
        .take(MAX_FOUND * 4)
}

/// `path` as a repository path: relative to `root` when it is under it, `./` dropped; None when
/// it is empty, too long, absolute elsewhere, or climbs out of the tree.
pub fn repo_path(path: &str, root: &str) -> Option<String> {
    let path = path.trim();
    if path.is_empty() || path.len() > MAX_PATH || path.contains('\0') {
        return None;
    }
    let root = root.trim_end_matches('/');
    let rel = match path.strip_prefix('/') {
        Some(_) => path.strip_prefix(root)?.strip_prefix('/')?,
        None => path,
    };
    let mut parts = Vec::new();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn message(s: &str) -> String {
    cut(s.trim(), Diagnostic::MAX_MESSAGE)
}

fn code(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty() && s.len() <= MAX_CODE && !s.chars().any(char::is_control))
        .then(|| s.to_string())
}

/// A positive line or column number of at most 9 digits.
fn number(s: &str) -> Option<usize> {
    let s = s.trim();
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|n| *n > 0)
}

/// `file:line[:col]: rest`.
fn gnu_line(line: &str, root: &str) -> Option<Found> {
    let (file, rest) = line.split_once(':')?;
    let (line_no, rest) = rest.split_once(':')?;
    let line_no = number(line_no)?;
    let (column, rest) = match rest.split_once(':') {
        Some((c, r)) if number(c).is_some() => (number(c), r),
        _ => (None, rest),
    };
    let (severity, code_found, text) = severity_prefix(rest.trim_start());
    let (code_found, text) = match code_found {
        Some(c) => (Some(c), text),
        None => leading_code(text),
    };
    Some(Found {
        file: repo_path(file, root)?,
        line: line_no,
        column,
        severity: severity.unwrap_or(Severity::Warning),
        code: code_found.and_then(code),
        message: message(text),
    })
    .filter(|f| !f.message.is_empty())
}

/// `error[E0308]: text`, `warning: text`, `note: text` → (severity, code, text); otherwise
/// (None, None, the whole).
fn severity_prefix(s: &str) -> (Option<Severity>, Option<&str>, &str) {
    for (word, severity) in [
        ("error", Severity::Error),
        ("warning", Severity::Warning),
        ("note", Severity::Info),
        ("info", Severity::Info),
        ("help", Severity::Info),
    ] {
        let Some(rest) = s.strip_prefix(word) else {
            continue;
        };
        if let Some(text) = rest.strip_prefix(':') {
            return (Some(severity), None, text.trim_start());
        }
        if let Some((code, text)) = rest
            .strip_prefix('[')
            .and_then(|r| r.split_once("]:"))
            .filter(|(c, _)| !c.contains(' '))
        {
            return (Some(severity), Some(code), text.trim_start());
        }
    }
    (None, None, s)
}

/// ruff's concise `F401 [*] text`: a leading code of capitals then digits.
fn leading_code(s: &str) -> (Option<&str>, &str) {
    let Some((first, rest)) = s.split_once(' ') else {
        return (None, s);
    };
    let letters = first.bytes().take_while(u8::is_ascii_uppercase).count();
    let digits = first.len() - letters;
    if letters == 0 || digits == 0 || !first[letters..].bytes().all(|b| b.is_ascii_digit()) {
        return (None, s);
    }
    let rest = rest.strip_prefix("[*] ").unwrap_or(rest);
    (Some(first), rest)
}

/// `file(line,col): error TS2322: text`.
fn tsc_line(line: &str, root: &str) -> Option<Found> {
    let (head, rest) = line.split_once("): ")?;
    let (file, pos) = head.rsplit_once('(')?;
    let (l, c) = pos.split_once(',')?;
    let (kind, text) = rest.split_once(": ")?;
    let (word, code_found) = kind.split_once(' ').unwrap_or((kind, ""));
    let severity = match word {
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        _ => Severity::Info,
    };
    Some(Found {
        file: repo_path(file, root)?,
        line: number(l)?,
        column: number(c),
        severity,
        code: code(code_found),
        message: message(text),
    })
}

#[derive(Deserialize)]
struct CargoLine {
    reason: String,
    #[serde(default)]
    message: Option<CargoMessage>,
}

#[derive(Deserialize)]
struct CargoMessage {
    #[serde(default)]
    level: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    code: Option<CargoCode>,
    #[serde(default)]
    spans: Vec<CargoSpan>,
}

#[derive(Deserialize)]
struct CargoCode {
    #[serde(default)]
    code: String,
}

#[derive(Deserialize)]
struct CargoSpan {
    #[serde(default)]
    file_name: String,
    #[serde(default)]
    line_start: usize,
    #[serde(default)]
    column_start: usize,
    #[serde(default)]
    is_primary: bool,
    #[serde(default)]
    label: Option<String>,
}

/// One `compiler-message` line: its level, code, message (with its primary span's label) at
/// its primary span. Summary messages (`N warnings emitted`) have no span and are skipped.
fn cargo_line(line: &str, root: &str) -> Option<Found> {
    if !line.starts_with('{') {
        return None;
    }
    let parsed: CargoLine = serde_json::from_str(line).ok()?;
    if parsed.reason != "compiler-message" {
        return None;
    }
    let m = parsed.message?;
    let severity = match m.level.as_str() {
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        _ => return None,
    };
    let span = m.spans.iter().find(|s| s.is_primary)?;
    let text = match span.label.as_deref().map(str::trim) {
        Some(label) if !label.is_empty() => format!("{}: {label}", m.message),
        _ => m.message.clone(),
    };
    Some(Found {
        file: repo_path(&span.file_name, root)?,
        line: number(&span.line_start.to_string())?,
        column: number(&span.column_start.to_string()),
        severity,
        code: m.code.and_then(|c| code(&c.code)),
        message: message(&text),
    })
}

/// The JSON values of `lines`: one array of them, or one value per line (json-lines).
fn json_items(lines: &[String]) -> Vec<Value> {
    let whole = lines.join("\n");
    match serde_json::from_str::<Value>(&whole) {
        Ok(Value::Array(items)) => items,
        Ok(one @ Value::Object(_)) => vec![one],
        _ => lines
            .iter()
            .filter(|l| l.trim_start().starts_with('{'))
            .filter_map(|l| serde_json::from_str(l.trim().trim_end_matches(',')).ok())
            .collect(),
    }
}

fn uint(v: &Value) -> Option<usize> {
    number(&v.as_u64()?.to_string())
}

/// ruff: `{code, message, filename, location: {row, column}}` per diagnostic; a null code is
/// a syntax error.
fn ruff(out: &Output, root: &str) -> Vec<Found> {
    json_items(&out.stdout)
        .iter()
        .take(MAX_FOUND)
        .filter_map(|item| {
            let code_found = item.get("code").and_then(Value::as_str);
            Some(Found {
                file: repo_path(item.get("filename")?.as_str()?, root)?,
                line: uint(item.pointer("/location/row")?)?,
                column: item.pointer("/location/column").and_then(uint),
                severity: match code_found {
                    Some(_) => Severity::Warning,
                    None => Severity::Error,
                },
                code: code_found.and_then(code),
                message: message(item.get("message")?.as_str()?),
            })
        })
        .collect()
}

/// eslint: `[{filePath, messages: [{ruleId, severity: 1|2, message, line, column}]}]`.
fn eslint(out: &Output, root: &str) -> Vec<Found> {
    let mut found = Vec::new();
    for file in json_items(&out.stdout).iter().take(MAX_FOUND) {
        let Some(path) = file
            .get("filePath")
            .and_then(Value::as_str)
            .and_then(|p| repo_path(p, root))
        else {
            continue;
        };
        let Some(messages) = file.get("messages").and_then(Value::as_array) else {
            continue;
        };
        for m in messages.iter().take(MAX_FOUND) {
            let (Some(line), Some(text)) = (
                m.get("line").and_then(uint),
                m.get("message").and_then(Value::as_str),
            ) else {
                continue;
            };
            found.push(Found {
                file: path.clone(),
                line,
                column: m.get("column").and_then(uint),
                severity: match m.get("severity").and_then(Value::as_u64) {
                    Some(2) => Severity::Error,
                    _ => Severity::Warning,
                },
                code: m.get("ruleId").and_then(Value::as_str).and_then(code),
                message: message(text),
            });
        }
    }
    found
}

#[cfg(test)]
#[path = "checker_output_tests.rs"]
mod tests;

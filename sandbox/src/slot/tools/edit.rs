//! Edits as the agent proposes them: validated, and applied to a file's text by line span,
//! against the hash of the text the agent read.

use super::*;

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

pub(super) fn valid_hash(h: &str) -> bool {
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
pub(super) fn lines_of(text: &str) -> Vec<&str> {
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
pub(super) fn edit_span(edit: &ProposedEdit, total: usize) -> Result<(usize, usize), EditError> {
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
pub(super) fn terminated_lines(new_text: &str, eol: &str) -> Vec<String> {
    if new_text.is_empty() {
        return Vec::new();
    }
    let normalized = new_text.replace("\r\n", "\n");
    let body = normalized.strip_suffix('\n').unwrap_or(&normalized);
    body.split('\n').map(|l| format!("{l}{eol}")).collect()
}

/// After the unterminated last line was deleted: the line before it now ends the file, as
/// unterminated — unless it is blank, which would make it vanish.
pub(super) fn unterminate_last_line(out: &mut String) {
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

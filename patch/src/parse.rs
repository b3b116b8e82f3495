//! Strict parsing of one file's unified diff.
//!
//! The text usually comes from a person who edited a hunk by hand, so the parser checks what
//! `git apply` would check and says precisely where and what went wrong, instead of guessing
//! what the user meant.

use std::fmt;

use crate::hunk::{Hunk, HunkLine};
use crate::lines::split_lines;

/// Which side of a hunk a count refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Context + removed lines.
    Old,
    /// Context + added lines.
    New,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Old => "old",
            Side::New => "new",
        })
    }
}

/// Why a diff could not be parsed. Line numbers are 1-based lines of the diff text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    /// A line starting with "@@" is not a well-formed hunk header.
    #[error(
        "line {line}: bad hunk header {text:?}: expected \"@@ -OLD_START[,OLD_COUNT] +NEW_START[,NEW_COUNT] @@\" ({reason})"
    )]
    BadHeader {
        line: usize,
        text: String,
        reason: String,
    },
    /// A hunk's body has a different number of lines than its header announced.
    #[error(
        "line {line}: hunk {hunk} header says {expected} {side} lines but the body has {found}"
    )]
    CountMismatch {
        /// The line of the hunk's header.
        line: usize,
        /// 1-based index of the hunk within the diff.
        hunk: usize,
        side: Side,
        expected: usize,
        found: usize,
    },
    /// A line that is neither a header nor a hunk body line.
    #[error(
        "line {line}: unexpected {text:?}: expected a hunk line starting with ' ', '-', '+' or '\\', or a \"@@\" hunk header"
    )]
    StrayLine { line: usize, text: String },
    /// A line before the first hunk that is not part of a git file header.
    #[error(
        "line {line}: unexpected {text:?} before the first hunk: expected \"@@\" or a diff header line (\"diff --git\", \"index\", \"---\", \"+++\", mode lines)"
    )]
    StrayHeaderLine { line: usize, text: String },
    /// A "\ No newline at end of file" marker with no line to attach to, or one that would leave
    /// an unterminated line in the middle of a side.
    #[error(
        "line {line}: misplaced \"\\ No newline at end of file\": expected it right after the last line of the old or new side of a hunk"
    )]
    MisplacedNoNewline { line: usize },
    /// A "\ No newline at end of file" marker after an empty line: a line without a newline
    /// has at least one character, so the pair describes no line at all.
    #[error(
        "line {line}: \"\\ No newline at end of file\" follows an empty line, which leaves a line with no text and no newline: drop the marker (or the empty line before it)"
    )]
    EmptyUnterminatedLine { line: usize },
    /// The text contains no hunk at all.
    #[error("line {line}: no hunk found: expected a \"@@ -OLD_START,OLD_COUNT +NEW_START,NEW_COUNT @@\" header")]
    NoHunks {
        /// The last line of the text (0 for empty text): where a hunk was still expected.
        line: usize,
    },
}

/// Prefixes of the extended header lines git writes before a file's first hunk. They carry
/// paths and modes, never hunk content, so the hunk parser can skip them.
const HEADER_PREFIXES: &[&str] = &[
    "diff ",
    "index ",
    "--- ",
    "+++ ",
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
];

struct HunkInProgress {
    header_line: usize,
    old_start: usize,
    old_len: usize,
    new_start: usize,
    new_len: usize,
    body: Vec<HunkLine>,
    /// The old and the new lines of `body` so far: counted as lines are added, as a diff of
    /// blank lines asks for them at each one (see [`HunkInProgress::wants_more`]).
    old_seen: usize,
    new_seen: usize,
    /// (diff line of each "\ No newline" marker, index of the body line it applies to), kept to
    /// report a marker that leaves an unterminated line in the middle of a side.
    markers: Vec<(usize, usize)>,
}

impl HunkInProgress {
    fn push(&mut self, line: HunkLine) {
        match line {
            HunkLine::Context(_) => {
                self.old_seen += 1;
                self.new_seen += 1;
            }
            HunkLine::Remove(_) => self.old_seen += 1,
            HunkLine::Add(_) => self.new_seen += 1,
        }
        self.body.push(line);
    }

    fn counts(&self) -> (usize, usize) {
        (self.old_seen, self.new_seen)
    }

    fn wants_more(&self) -> bool {
        let (old, new) = self.counts();
        old < self.old_len && new < self.new_len
    }

    fn finish(mut self, index: usize) -> Result<Hunk, ParseError> {
        let (old, new) = self.counts();
        for (side, expected, found) in [
            (Side::Old, self.old_len, old),
            (Side::New, self.new_len, new),
        ] {
            if expected != found {
                return Err(ParseError::CountMismatch {
                    line: self.header_line,
                    hunk: index,
                    side,
                    expected,
                    found,
                });
            }
        }
        // Only a side's last line may lack its terminator: anything else describes a file
        // that cannot exist, and applying it would glue two lines together.
        for &(marker_at, body_index) in &self.markers {
            let line = &self.body[body_index];
            let later_on_same_side = self.body[body_index + 1..].iter().any(|b| {
                matches!(
                    (line, b),
                    (_, HunkLine::Context(_))
                        | (HunkLine::Context(_), _)
                        | (HunkLine::Remove(_), HunkLine::Remove(_))
                        | (HunkLine::Add(_), HunkLine::Add(_))
                )
            });
            if later_on_same_side {
                return Err(ParseError::MisplacedNoNewline { line: marker_at });
            }
        }
        // The body grew by doubling; a hub keeps the hunks it reads (a journal's, at a
        // restart) for as long as it runs. (The header's counts are not trusted to size it
        // beforehand: they come from the diff's author.)
        self.body.shrink_to_fit();
        Ok(Hunk {
            old_start: self.old_start,
            old_len: self.old_len,
            new_start: self.new_start,
            new_len: self.new_len,
            lines: self.body,
        })
    }
}

/// Parse one file's hunks from unified diff text.
///
/// Accepts bare hunks starting at `"@@"`, optionally preceded by git's file header lines
/// (`"diff --git"`, `"index"`, `"---"`, `"+++"`, mode, rename and copy lines), which are
/// ignored; [`parse_file_header`] reads the paths.
///
/// Strict on purpose, because a hunk that parses "roughly" would apply somewhere roughly:
/// - each header's counts must match its body exactly;
/// - any line that is not part of a hunk body is an error, except blank lines at the very end;
/// - a diff with no hunk is an error.
///
/// Leniencies that match `git apply`: text after the header's closing `"@@"` (git's
/// function-name suffix) is ignored; an empty line inside a hunk that still expects lines is an
/// empty context line (editors strip the lone space); the diff's final line may lack its
/// `"\n"`. `"\ No newline at end of file"` removes the previous line's `"\n"`. Lines of the diff
/// may end in `"\r\n"`: the `"\r"` is content of the line, as it is for git.
pub fn parse_hunks(diff: &str) -> Result<Vec<Hunk>, ParseError> {
    let lines = split_lines(diff);
    let mut hunks = Vec::new();
    let mut current: Option<HunkInProgress> = None;

    for (i, raw) in lines.iter().enumerate() {
        let line_no = i + 1;
        if raw.starts_with("@@") {
            if let Some(done) = current.take() {
                hunks.push(done.finish(hunks.len() + 1)?);
            }
            current = Some(parse_header(raw, line_no)?);
            continue;
        }
        let Some(hunk) = current.as_mut() else {
            if raw.trim_end().is_empty() || HEADER_PREFIXES.iter().any(|p| raw.starts_with(p)) {
                continue;
            }
            return Err(ParseError::StrayHeaderLine {
                line: line_no,
                text: display_line(raw),
            });
        };
        // A diff line without "\n" can only be the diff's last line: the user's text simply
        // did not end in a newline, which says nothing about the file's own final newline.
        let owned;
        let text = if raw.ends_with('\n') {
            *raw
        } else {
            owned = format!("{raw}\n");
            owned.as_str()
        };
        let (prefix, rest) = text.split_at(text.chars().next().map_or(0, char::len_utf8));
        match prefix {
            " " => hunk.push(HunkLine::Context(rest.to_owned())),
            "-" => hunk.push(HunkLine::Remove(rest.to_owned())),
            "+" => hunk.push(HunkLine::Add(rest.to_owned())),
            "\\" => {
                let Some(last) = hunk.body.last_mut() else {
                    return Err(ParseError::MisplacedNoNewline { line: line_no });
                };
                let t = match last {
                    HunkLine::Context(t) | HunkLine::Remove(t) | HunkLine::Add(t) => t,
                };
                if t.pop() != Some('\n') {
                    // Two markers in a row: the line had already lost its newline.
                    return Err(ParseError::MisplacedNoNewline { line: line_no });
                }
                if t.is_empty() {
                    // "+" then the marker would count as a line but add nothing: the header
                    // would lie, and the hunk applied could never be undone.
                    return Err(ParseError::EmptyUnterminatedLine { line: line_no });
                }
                let body_index = hunk.body.len() - 1;
                hunk.markers.push((line_no, body_index));
            }
            "\n" if hunk.wants_more() => hunk.push(HunkLine::Context("\n".to_owned())),
            _ if text.trim_end().is_empty()
                && lines[i + 1..].iter().all(|l| l.trim_end().is_empty()) =>
            {
                // Trailing blank lines (a text box, an editor) are not part of any hunk.
                break;
            }
            _ => {
                return Err(ParseError::StrayLine {
                    line: line_no,
                    text: display_line(raw),
                });
            }
        }
    }

    match current {
        Some(done) => hunks.push(done.finish(hunks.len() + 1)?),
        None => {
            return Err(ParseError::NoHunks { line: lines.len() });
        }
    }
    Ok(hunks)
}

fn display_line(raw: &str) -> String {
    let trimmed = raw.strip_suffix('\n').unwrap_or(raw);
    if trimmed.chars().count() > 80 {
        let mut short: String = trimmed.chars().take(77).collect();
        short.push_str("...");
        short
    } else {
        trimmed.to_owned()
    }
}

/// Parse `"@@ -a[,b] +c[,d] @@[anything]"`, git's only hunk header form for a two-way diff.
fn parse_header(raw: &str, line: usize) -> Result<HunkInProgress, ParseError> {
    let bad = |reason: &str| ParseError::BadHeader {
        line,
        text: display_line(raw),
        reason: reason.to_owned(),
    };
    let rest = raw
        .strip_prefix("@@ -")
        .ok_or_else(|| bad("it must start with \"@@ -\""))?;
    let (old, rest) = rest
        .split_once(" +")
        .ok_or_else(|| bad("missing \" +\" before the new range"))?;
    let (new, _suffix) = rest
        .split_once(" @@")
        .ok_or_else(|| bad("missing the closing \" @@\""))?;
    let (old_start, old_len) = parse_range(old).map_err(|r| bad(&format!("old range: {r}")))?;
    let (new_start, new_len) = parse_range(new).map_err(|r| bad(&format!("new range: {r}")))?;
    Ok(HunkInProgress {
        header_line: line,
        old_start,
        old_len,
        new_start,
        new_len,
        body: Vec::new(),
        old_seen: 0,
        new_seen: 0,
        markers: Vec::new(),
    })
}

fn parse_range(text: &str) -> Result<(usize, usize), String> {
    let (start, len) = match text.split_once(',') {
        Some((s, l)) => (parse_number(s)?, parse_number(l)?),
        None => (parse_number(text)?, 1),
    };
    if start == 0 && len != 0 {
        // Line 0 only exists as "before the first line", i.e. for an empty range.
        return Err(format!("{text:?} starts at line 0 but is not empty"));
    }
    Ok((start, len))
}

fn parse_number(text: &str) -> Result<usize, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a number"));
    }
    text.parse::<usize>()
        .map_err(|_| format!("{text:?} is too large"))
}

/// Paths named by `"--- a/x"` / `"+++ b/y"` headers before the first hunk, if present.
///
/// `None` for `/dev/null` (a created or deleted file) or when the header is absent. The `a/` and
/// `b/` prefixes are removed; git's C-style quoting (`"a/with \"quotes\""`) is undone; a tab and
/// what follows it (the timestamp of non-git diffs) is dropped.
pub fn parse_file_header(diff: &str) -> (Option<String>, Option<String>) {
    let mut old = None;
    let mut new = None;
    for raw in split_lines(diff) {
        if raw.starts_with("@@") {
            break;
        }
        if let Some(rest) = raw.strip_prefix("--- ") {
            old = header_path(rest, "a/");
        } else if let Some(rest) = raw.strip_prefix("+++ ") {
            new = header_path(rest, "b/");
        }
    }
    (old, new)
}

fn header_path(rest: &str, prefix: &str) -> Option<String> {
    let rest = rest.trim_end_matches(['\n', '\r']);
    let path = if rest.starts_with('"') {
        unquote_c_style(rest)?
    } else {
        rest.split('\t').next().unwrap_or(rest).to_owned()
    };
    if path == "/dev/null" {
        return None;
    }
    let path = path.strip_prefix(prefix).map(str::to_owned).unwrap_or(path);
    if path.is_empty() {
        None
    } else {
        Some(path)
    }
}

/// Undo git's `quote_c_style`: the path between double quotes, with `\"`, `\\`, `\t`, `\n`
/// and octal `\NNN` escapes (git writes non-ASCII bytes as octal, so bytes are rebuilt first
/// and decoded as UTF-8 last).
fn unquote_c_style(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?;
    let mut bytes = Vec::with_capacity(inner.len());
    let mut iter = inner.bytes();
    loop {
        match iter.next()? {
            b'"' => break,
            b'\\' => {
                let c = iter.next()?;
                let byte = match c {
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'v' => 0x0b,
                    b'0'..=b'3' => {
                        let d2 = iter.next()?;
                        let d3 = iter.next()?;
                        if !(b'0'..=b'7').contains(&d2) || !(b'0'..=b'7').contains(&d3) {
                            return None;
                        }
                        (c - b'0') * 64 + (d2 - b'0') * 8 + (d3 - b'0')
                    }
                    other => other,
                };
                bytes.push(byte);
            }
            b => bytes.push(b),
        }
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(s: &str) -> HunkLine {
        HunkLine::Context(s.into())
    }
    fn rem(s: &str) -> HunkLine {
        HunkLine::Remove(s.into())
    }
    fn add(s: &str) -> HunkLine {
        HunkLine::Add(s.into())
    }

    #[test]
    fn bare_hunk() {
        let hunks = parse_hunks("@@ -1,2 +1,2 @@\n a\n-b\n+B\n").unwrap();
        assert_eq!(
            hunks,
            vec![Hunk {
                old_start: 1,
                old_len: 2,
                new_start: 1,
                new_len: 2,
                lines: vec![ctx("a\n"), rem("b\n"), add("B\n")],
            }]
        );
    }

    #[test]
    fn git_headers_and_function_suffix_are_ignored() {
        let diff = "diff --git a/src/x.rs b/src/x.rs\n\
                    index 83db48f..bf269f4 100644\n\
                    --- a/src/x.rs\n\
                    +++ b/src/x.rs\n\
                    @@ -3 +3 @@ fn main() {\n\
                    -a\n\
                    +b\n\
                    @@ -10,0 +11 @@ impl Foo @@ bar\n\
                    +c\n";
        let hunks = parse_hunks(diff).unwrap();
        assert_eq!(hunks.len(), 2);
        assert_eq!((hunks[0].old_start, hunks[0].old_len), (3, 1));
        assert_eq!((hunks[1].old_start, hunks[1].old_len), (10, 0));
        assert_eq!((hunks[1].new_start, hunks[1].new_len), (11, 1));
        assert_eq!(hunks[1].lines, vec![add("c\n")]);
    }

    #[test]
    fn mode_and_rename_lines_are_accepted_before_the_first_hunk() {
        let diff = "diff --git a/old b/new\nold mode 100644\nnew mode 100755\n\
                    similarity index 90%\nrename from old\nrename to new\n\
                    --- a/old\n+++ b/new\n@@ -1 +1 @@\n-x\n+y\n";
        assert_eq!(parse_hunks(diff).unwrap().len(), 1);
    }

    #[test]
    fn round_trips_to_unified() {
        let h = Hunk {
            old_start: 4,
            old_len: 3,
            new_start: 4,
            new_len: 3,
            lines: vec![ctx("a\r\n"), rem("b\r\n"), add("B\r\n"), ctx("c")],
        };
        assert_eq!(parse_hunks(&h.to_unified()).unwrap(), vec![h]);
    }

    #[test]
    fn no_newline_markers() {
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n";
        let hunks = parse_hunks(diff).unwrap();
        assert_eq!(hunks[0].lines, vec![ctx("a\n"), rem("b"), add("b\n")]);
        let diff = "@@ -1 +1 @@\n-b\n+c\n\\ No newline at end of file\n";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![rem("b\n"), add("c")]
        );
        let diff = "@@ -1 +1 @@\n b\n\\ No newline at end of file\n";
        assert_eq!(parse_hunks(diff).unwrap()[0].lines, vec![ctx("b")]);
    }

    #[test]
    fn no_newline_marker_keeps_a_carriage_return() {
        let diff = "@@ -1 +1 @@\n-b\r\n\\ No newline at end of file\n+b\r\n";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![rem("b\r"), add("b\r\n")]
        );
    }

    #[test]
    fn crlf_diff_text_keeps_the_carriage_return_as_content() {
        let diff = "@@ -1,2 +1,2 @@\r\n a\r\n-b\r\n+B\r\n";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![ctx("a\r\n"), rem("b\r\n"), add("B\r\n")]
        );
    }

    #[test]
    fn final_diff_line_without_newline_is_accepted() {
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\n+B";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![ctx("a\n"), rem("b\n"), add("B\n")]
        );
        let diff = "@@ -1 +1 @@\n-b\n+B\n\\ No newline at end of file";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![rem("b\n"), add("B")]
        );
    }

    #[test]
    fn empty_line_inside_a_hunk_is_empty_context() {
        let diff = "@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![ctx("a\n"), ctx("\n"), rem("b\n"), add("B\n")]
        );
    }

    #[test]
    fn trailing_blank_lines_after_the_last_hunk_are_ignored() {
        let diff = "@@ -1 +1 @@\n-b\n+B\n\n\n";
        assert_eq!(parse_hunks(diff).unwrap().len(), 1);
    }

    #[test]
    fn empty_side_headers() {
        let hunks = parse_hunks("@@ -0,0 +1,2 @@\n+a\n+b\n").unwrap();
        assert_eq!(
            (
                hunks[0].old_start,
                hunks[0].old_len,
                hunks[0].new_start,
                hunks[0].new_len
            ),
            (0, 0, 1, 2)
        );
        let hunks = parse_hunks("@@ -1,2 +0,0 @@\n-a\n-b\n").unwrap();
        assert_eq!(
            (
                hunks[0].old_start,
                hunks[0].old_len,
                hunks[0].new_start,
                hunks[0].new_len
            ),
            (1, 2, 0, 0)
        );
    }

    #[test]
    fn bad_headers() {
        for (header, reason) in [
            ("@@ 1,2 +1,2 @@", "start with"),
            ("@@ -1,2 1,2 @@", "\" +\""),
            ("@@ -1,2 +1,2", "closing"),
            ("@@ -x,2 +1,2 @@", "old range: \"x\" is not a number"),
            ("@@ -1,2 +1,y @@", "new range: \"y\" is not a number"),
            ("@@ -1, +1 @@", "not a number"),
            ("@@ -0,3 +1,3 @@", "starts at line 0"),
            ("@@@ -1 -1 +1 @@@", "start with"),
        ] {
            let err = parse_hunks(&format!("{header}\n a\n")).unwrap_err();
            assert!(
                matches!(err, ParseError::BadHeader { line: 1, .. }),
                "{header}: {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.starts_with("line 1: bad hunk header"), "{msg}");
            assert!(msg.contains(reason), "{header}: {msg}");
            assert!(msg.contains("expected \"@@ -OLD_START"), "{msg}");
        }
    }

    /// Blank lines are empty context lines while the hunk wants lines, which is asked at each
    /// one: in a constant time, so a diff of a million of them (a user's edit, and within
    /// the hub's 8 MiB request limit) is read in one pass — counted from the body each time,
    /// it did not finish in 120 s here (half a million million steps). Then the hunk's blank
    /// lines end with its counts, and the rest are trailing.
    #[test]
    fn a_million_blank_lines_are_read_in_one_pass() {
        let n = 1_000_000;
        let diff = format!("@@ -1,{n} +1,{n} @@\n{}", "\n".repeat(n + 3));
        assert!(diff.len() < 8 << 20);
        let hunks = parse_hunks(&diff).unwrap();
        assert_eq!(hunks.len(), 1);
        assert_eq!((hunks[0].old_len, hunks[0].new_len), (n, n));
        assert_eq!(hunks[0].lines.len(), n);
        assert!(hunks[0].lines.iter().all(|l| *l == ctx("\n")));
        // One short: the counts still tell.
        let short = format!("@@ -1,{n} +1,{n} @@\n{}", "\n".repeat(n - 1));
        assert!(matches!(
            parse_hunks(&short),
            Err(ParseError::CountMismatch { found, .. }) if found == n - 1
        ));
    }

    #[test]
    fn count_mismatch_too_few_body_lines() {
        let diff = "@@ -1 +1 @@\n-a\n+b\n@@ -10,7 +10,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n";
        let err = parse_hunks(diff).unwrap_err();
        assert_eq!(
            err,
            ParseError::CountMismatch {
                line: 4,
                hunk: 2,
                side: Side::Old,
                expected: 7,
                found: 6,
            }
        );
        assert_eq!(
            err.to_string(),
            "line 4: hunk 2 header says 7 old lines but the body has 6"
        );
    }

    #[test]
    fn count_mismatch_too_many_body_lines() {
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\n+B\n+C\n";
        let err = parse_hunks(diff).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 1: hunk 1 header says 2 new lines but the body has 3"
        );
    }

    #[test]
    fn stray_line_inside_hunks() {
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\nstray\n+B\n";
        let err = parse_hunks(diff).unwrap_err();
        assert_eq!(
            err,
            ParseError::StrayLine {
                line: 4,
                text: "stray".into()
            }
        );
        assert!(err
            .to_string()
            .starts_with("line 4: unexpected \"stray\": expected"));
    }

    #[test]
    fn a_second_file_is_a_stray_line() {
        let diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/y b/y\n--- a/y\n";
        assert_eq!(
            parse_hunks(diff).unwrap_err(),
            ParseError::StrayLine {
                line: 6,
                text: "diff --git a/y b/y".into()
            }
        );
    }

    #[test]
    fn blank_line_between_complete_hunks_is_stray() {
        let diff = "@@ -1 +1 @@\n-a\n+b\n\n@@ -5 +5 @@\n-c\n+d\n";
        assert_eq!(
            parse_hunks(diff).unwrap_err(),
            ParseError::StrayLine {
                line: 4,
                text: "".into()
            }
        );
    }

    #[test]
    fn stray_line_before_the_first_hunk() {
        let err = parse_hunks("hello\n@@ -1 +1 @@\n-a\n+b\n").unwrap_err();
        assert_eq!(
            err,
            ParseError::StrayHeaderLine {
                line: 1,
                text: "hello".into()
            }
        );
        assert!(err.to_string().contains("expected \"@@\""));
    }

    #[test]
    fn no_hunks() {
        assert_eq!(
            parse_hunks("").unwrap_err(),
            ParseError::NoHunks { line: 0 }
        );
        let err = parse_hunks("diff --git a/x b/x\n--- a/x\n+++ b/x\n").unwrap_err();
        assert_eq!(err, ParseError::NoHunks { line: 3 });
        assert_eq!(
            err.to_string(),
            "line 3: no hunk found: expected a \"@@ -OLD_START,OLD_COUNT +NEW_START,NEW_COUNT @@\" header"
        );
    }

    #[test]
    fn misplaced_no_newline_markers() {
        // Before any body line.
        let err = parse_hunks("@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n").unwrap_err();
        assert_eq!(err, ParseError::MisplacedNoNewline { line: 2 });
        // Twice in a row.
        let diff =
            "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n\\ No newline at end of file\n+b\n";
        assert_eq!(
            parse_hunks(diff).unwrap_err(),
            ParseError::MisplacedNoNewline { line: 4 }
        );
        // On a line that is not its side's last.
        let diff = "@@ -1,2 +1,2 @@\n a\n\\ No newline at end of file\n-b\n+c\n";
        let err = parse_hunks(diff).unwrap_err();
        assert_eq!(err, ParseError::MisplacedNoNewline { line: 3 });
        assert!(err
            .to_string()
            .contains("expected it right after the last line"));
        // Removing an unterminated line and then adding lines is fine.
        let diff = "@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n+a\n+b\n";
        assert_eq!(
            parse_hunks(diff).unwrap()[0].lines,
            vec![rem("a"), add("a\n"), add("b\n")]
        );
    }

    #[test]
    fn no_newline_marker_after_an_empty_line_is_refused() {
        // Found while writing the fuzz targets (regression seed
        // fuzz/seeds/parse/empty-unterminated): "+" and the marker parsed as an added line ""
        // that counted in the header but added nothing, so an accepted `modify` with it could
        // not be undone.
        for (diff, line) in [
            ("@@ -1 +1 @@\n-a\n+\n\\ No newline at end of file\n", 4),
            ("@@ -1 +1 @@\n-\n\\ No newline at end of file\n+a\n", 3),
            ("@@ -1,2 +1,2 @@\n a\n \n\\ No newline at end of file\n", 4),
            ("@@ -1,2 +1,2 @@\n a\n\n\\ No newline at end of file\n", 4),
        ] {
            let err = parse_hunks(diff).unwrap_err();
            assert_eq!(err, ParseError::EmptyUnterminatedLine { line }, "{diff:?}");
            assert!(err.to_string().contains("drop the marker"), "{err}");
        }
        // Positive control: a one-character line without newline is fine.
        assert_eq!(
            parse_hunks("@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n").unwrap()[0].lines,
            vec![rem("a\n"), add("b")]
        );
    }

    #[test]
    fn file_header_paths() {
        let diff = "diff --git a/src/x.rs b/src/y.rs\n--- a/src/x.rs\n+++ b/src/y.rs\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(
            parse_file_header(diff),
            (Some("src/x.rs".into()), Some("src/y.rs".into()))
        );
    }

    #[test]
    fn file_header_dev_null_and_absent() {
        assert_eq!(
            parse_file_header("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+a\n"),
            (None, Some("new.txt".into()))
        );
        assert_eq!(
            parse_file_header("--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
            (Some("old.txt".into()), None)
        );
        assert_eq!(parse_file_header("@@ -1 +1 @@\n-a\n+b\n"), (None, None));
        // Lines that look like headers inside a hunk are content, not headers.
        assert_eq!(
            parse_file_header("@@ -1 +1 @@\n--- a/x\n+++ b/x\n"),
            (None, None)
        );
    }

    #[test]
    fn file_header_quoting_timestamps_and_crlf() {
        assert_eq!(
            parse_file_header("--- \"a/with \\\"q\\\"\\tand\\303\\251\"\n+++ \"b/x y\"\n"),
            (Some("with \"q\"\tand\u{e9}".into()), Some("x y".into()))
        );
        assert_eq!(
            parse_file_header("--- a/f.txt\t2024-01-01 00:00:00\n+++ b/f.txt\t2024-01-02\n"),
            (Some("f.txt".into()), Some("f.txt".into()))
        );
        assert_eq!(
            parse_file_header("--- a/f\r\n+++ b/f\r\n"),
            (Some("f".into()), Some("f".into()))
        );
        // Without git's prefixes the path is taken as written.
        assert_eq!(
            parse_file_header("--- f\n+++ f\n"),
            (Some("f".into()), Some("f".into()))
        );
    }
}

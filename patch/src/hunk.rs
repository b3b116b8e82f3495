//! The hunk model and its unified-diff rendering.

use serde::{Deserialize, Serialize};

use crate::lines::split_terminator;

/// What git prints after a line that has no terminator. git localizes nothing here in diff
/// output, and `git apply` only looks at the leading `"\\ "`, so this exact text is both what we
/// print and all we need to recognize.
pub(crate) const NO_NEWLINE_MARKER: &str = "\\ No newline at end of file";

/// One line of a hunk body.
///
/// Each `String` includes its line terminator; a `String` without `"\n"` at its end is a line
/// with "no newline at end of file" (it can only be the last line of its side).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", content = "text", rename_all = "lowercase")]
pub enum HunkLine {
    /// A line present, unchanged, on both sides.
    Context(String),
    /// A line only on the old side.
    Remove(String),
    /// A line only on the new side.
    Add(String),
}

impl HunkLine {
    /// The line's text, terminator included.
    pub fn text(&self) -> &str {
        match self {
            HunkLine::Context(t) | HunkLine::Remove(t) | HunkLine::Add(t) => t,
        }
    }

    /// The prefix character unified diffs use for this kind of line.
    pub fn prefix(&self) -> char {
        match self {
            HunkLine::Context(_) => ' ',
            HunkLine::Remove(_) => '-',
            HunkLine::Add(_) => '+',
        }
    }

    fn map_text(&self, f: impl FnOnce(&str) -> String) -> HunkLine {
        match self {
            HunkLine::Context(t) => HunkLine::Context(f(t)),
            HunkLine::Remove(t) => HunkLine::Remove(f(t)),
            HunkLine::Add(t) => HunkLine::Add(f(t)),
        }
    }
}

/// One hunk of a unified diff.
///
/// Starts follow git's convention: 1-based, except that when a side's length is 0 its start is
/// the line AFTER which the other side's lines go (0 = top of file). Keeping git's numbers
/// (rather than normalizing to 0-based indexes) means a hunk prints, parses and compares exactly
/// like the text the user sees.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hunk {
    /// First old line (1-based), or the line after which new lines go when `old_len == 0`.
    pub old_start: usize,
    /// Number of context + removed lines.
    pub old_len: usize,
    /// First new line (1-based), or the line after which it sits when `new_len == 0`.
    pub new_start: usize,
    /// Number of context + added lines.
    pub new_len: usize,
    /// The body, in diff order.
    pub lines: Vec<HunkLine>,
}

impl Hunk {
    /// A hunk of `lines` whose old side begins at 0-based line `old_begin` of the old text and
    /// its new side at `new_begin`: its lengths counted, its starts written git's way (an empty
    /// side's start is the line after which it sits).
    pub fn anchored(lines: Vec<HunkLine>, old_begin: usize, new_begin: usize) -> Hunk {
        let old_len = lines
            .iter()
            .filter(|l| !matches!(l, HunkLine::Add(_)))
            .count();
        let new_len = lines
            .iter()
            .filter(|l| !matches!(l, HunkLine::Remove(_)))
            .count();
        let start = |begin: usize, len: usize| if len == 0 { begin } else { begin + 1 };
        Hunk {
            old_start: start(old_begin, old_len),
            old_len,
            new_start: start(new_begin, new_len),
            new_len,
            lines,
        }
    }

    /// Context and removed lines, in order: what the hunk expects to find in the file.
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    /// Context and added lines, in order: what the hunk leaves in the file.
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Add(t) => Some(t.as_str()),
                HunkLine::Remove(_) => None,
            })
            .collect()
    }

    /// Number of added lines.
    pub fn added(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| matches!(l, HunkLine::Add(_)))
            .count()
    }

    /// Number of removed lines.
    pub fn removed(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| matches!(l, HunkLine::Remove(_)))
            .count()
    }

    /// How many lines the file grows by when this hunk is applied (`new_len - old_len`).
    pub fn delta(&self) -> isize {
        // Counts of parsed or computed hunks match their bodies, so they are small; a hunk
        // deserialized with absurd counts saturates instead of wrapping.
        let signed = |n: usize| isize::try_from(n).unwrap_or(isize::MAX);
        signed(self.new_len).saturating_sub(signed(self.old_len))
    }

    /// The hunk as unified-diff text: `"@@ -a,b +c,d @@\n"` then the body (`" ctx"`, `"-old"`,
    /// `"+new"`), every line ending in `"\n"`; a line whose text lacks a terminator is followed
    /// by `"\\ No newline at end of file\n"`.
    ///
    /// Byte-for-byte what `git diff` prints for the same hunk (minus the function-name suffix
    /// git may add after the closing `@@`), so users see the format they already know and the
    /// text can be fed to `git apply`.
    pub fn to_unified(&self) -> String {
        let body_len: usize = self.lines.iter().map(|l| l.text().len() + 2).sum();
        let mut out = String::with_capacity(body_len + 32);
        out.push_str("@@ -");
        push_range(&mut out, self.old_start, self.old_len);
        out.push_str(" +");
        push_range(&mut out, self.new_start, self.new_len);
        out.push_str(" @@\n");
        for line in &self.lines {
            out.push(line.prefix());
            let text = line.text();
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push('\n');
                out.push_str(NO_NEWLINE_MARKER);
                out.push('\n');
            }
        }
        out
    }

    /// Swap sides (Add <-> Remove, starts and lengths swapped): applying the result to the new
    /// text undoes the hunk. Context and line order stay, so the reversed hunk is still in git's
    /// "removals before additions" order within each change.
    pub fn reversed(&self) -> Hunk {
        let lines = self
            .lines
            .iter()
            .map(|l| match l {
                HunkLine::Context(t) => HunkLine::Context(t.clone()),
                HunkLine::Remove(t) => HunkLine::Add(t.clone()),
                HunkLine::Add(t) => HunkLine::Remove(t.clone()),
            })
            .collect::<Vec<_>>();
        Hunk {
            old_start: self.new_start,
            old_len: self.new_len,
            new_start: self.old_start,
            new_len: self.old_len,
            lines: reorder_removals_first(lines),
        }
    }

    /// Convert to the given line ending: every terminated line's terminator becomes `ending`
    /// (`"\n"` or `"\r\n"`). Unterminated lines stay as they are, since they have no ending to
    /// convert. Used when a user's hand-edited diff (LF) targets a CRLF file.
    pub fn with_line_ending(&self, ending: &str) -> Hunk {
        let lines = self
            .lines
            .iter()
            .map(|l| {
                l.map_text(|t| {
                    let (body, term) = split_terminator(t);
                    if term.is_empty() {
                        t.to_owned()
                    } else {
                        format!("{body}{ending}")
                    }
                })
            })
            .collect();
        Hunk {
            lines,
            ..self.clone()
        }
    }
}

/// git omits the count when it is 1 (`xdl_format_hunk_hdr`); copying that keeps our headers
/// byte-identical to `git diff`.
fn push_range(out: &mut String, start: usize, len: usize) {
    out.push_str(&start.to_string());
    if len != 1 {
        out.push(',');
        out.push_str(&len.to_string());
    }
}

/// Within each run of changed lines, put removals before additions.
///
/// Swapping Add and Remove turns git's "-a -b +c" into "+a +b -c"; git would print the reverse
/// diff as "-c +a +b", and keeping to git's order means `to_unified` of a reversed hunk is what
/// `git diff -R` prints.
fn reorder_removals_first(lines: Vec<HunkLine>) -> Vec<HunkLine> {
    let mut out = Vec::with_capacity(lines.len());
    let mut adds = Vec::new();
    let mut removes = Vec::new();
    for line in lines {
        match line {
            HunkLine::Context(_) => {
                out.append(&mut removes);
                out.append(&mut adds);
                out.push(line);
            }
            HunkLine::Remove(_) => removes.push(line),
            HunkLine::Add(_) => adds.push(line),
        }
    }
    out.append(&mut removes);
    out.append(&mut adds);
    out
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

    fn sample() -> Hunk {
        Hunk {
            old_start: 3,
            old_len: 4,
            new_start: 3,
            new_len: 5,
            lines: vec![
                ctx("a\n"),
                rem("b\n"),
                rem("c\n"),
                add("B\n"),
                add("C\n"),
                add("D\n"),
                ctx("e\n"),
                ctx("f\n"),
            ],
        }
    }

    #[test]
    fn old_and_new_lines() {
        let h = sample();
        assert_eq!(h.old_lines(), ["a\n", "b\n", "c\n", "e\n", "f\n"]);
        assert_eq!(h.new_lines(), ["a\n", "B\n", "C\n", "D\n", "e\n", "f\n"]);
        assert_eq!(h.added(), 3);
        assert_eq!(h.removed(), 2);
    }

    #[test]
    fn delta_is_new_minus_old() {
        let mut h = sample();
        h.old_len = 5;
        h.new_len = 6;
        assert_eq!(h.delta(), 1);
        assert_eq!(h.reversed().delta(), -1);
        h.new_len = 0;
        assert_eq!(h.delta(), -5);
        h.new_len = usize::MAX;
        assert_eq!(h.delta(), isize::MAX - 5);
        h.old_len = usize::MAX;
        h.new_len = 0;
        assert_eq!(h.delta(), -isize::MAX);
    }

    #[test]
    fn to_unified_basic() {
        let mut h = sample();
        h.old_len = 5;
        h.new_len = 6;
        assert_eq!(
            h.to_unified(),
            "@@ -3,5 +3,6 @@\n a\n-b\n-c\n+B\n+C\n+D\n e\n f\n"
        );
    }

    #[test]
    fn to_unified_omits_count_of_one_and_prints_empty_sides_like_git() {
        let one = Hunk {
            old_start: 7,
            old_len: 1,
            new_start: 7,
            new_len: 1,
            lines: vec![rem("x\n"), add("y\n")],
        };
        assert_eq!(one.to_unified(), "@@ -7 +7 @@\n-x\n+y\n");

        let from_empty = Hunk {
            old_start: 0,
            old_len: 0,
            new_start: 1,
            new_len: 2,
            lines: vec![add("a\n"), add("b\n")],
        };
        assert_eq!(from_empty.to_unified(), "@@ -0,0 +1,2 @@\n+a\n+b\n");

        let to_empty = from_empty.reversed();
        assert_eq!(to_empty.to_unified(), "@@ -1,2 +0,0 @@\n-a\n-b\n");
    }

    #[test]
    fn to_unified_marks_missing_newline() {
        let h = Hunk {
            old_start: 1,
            old_len: 2,
            new_start: 1,
            new_len: 2,
            lines: vec![ctx("a\n"), rem("b"), add("b\n")],
        };
        assert_eq!(
            h.to_unified(),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
        );
        let both = Hunk {
            old_start: 2,
            old_len: 1,
            new_start: 2,
            new_len: 1,
            lines: vec![rem("b"), add("c")],
        };
        assert_eq!(
            both.to_unified(),
            "@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn to_unified_keeps_crlf_as_content() {
        let h = Hunk {
            old_start: 1,
            old_len: 1,
            new_start: 1,
            new_len: 1,
            lines: vec![rem("a\r\n"), add("b\r")],
        };
        assert_eq!(
            h.to_unified(),
            "@@ -1 +1 @@\n-a\r\n+b\r\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn reversed_swaps_sides_and_keeps_git_order() {
        let h = sample();
        let r = h.reversed();
        assert_eq!(
            (r.old_start, r.old_len, r.new_start, r.new_len),
            (h.new_start, h.new_len, h.old_start, h.old_len)
        );
        assert_eq!(
            r.lines,
            vec![
                ctx("a\n"),
                rem("B\n"),
                rem("C\n"),
                rem("D\n"),
                add("b\n"),
                add("c\n"),
                ctx("e\n"),
                ctx("f\n"),
            ]
        );
        assert_eq!(r.old_lines(), h.new_lines());
        assert_eq!(r.new_lines(), h.old_lines());
        assert_eq!(r.reversed(), h);
    }

    #[test]
    fn with_line_ending_converts_terminated_lines_only() {
        let h = Hunk {
            old_start: 1,
            old_len: 3,
            new_start: 1,
            new_len: 3,
            lines: vec![ctx("a\n"), rem("b\r\n"), rem("c"), add("B\n"), add("C")],
        };
        let crlf = h.with_line_ending("\r\n");
        assert_eq!(
            crlf.lines,
            vec![ctx("a\r\n"), rem("b\r\n"), rem("c"), add("B\r\n"), add("C")]
        );
        assert_eq!(
            (crlf.old_start, crlf.old_len, crlf.new_start, crlf.new_len),
            (1, 3, 1, 3)
        );
        let lf = crlf.with_line_ending("\n");
        assert_eq!(
            lf.lines,
            vec![ctx("a\n"), rem("b\n"), rem("c"), add("B\n"), add("C")]
        );
    }

    #[test]
    fn serde_shape_is_op_and_text() {
        let h = Hunk {
            old_start: 0,
            old_len: 0,
            new_start: 1,
            new_len: 1,
            lines: vec![add("x\r\n")],
        };
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "old_start": 0, "old_len": 0, "new_start": 1, "new_len": 1,
                "lines": [{"op": "add", "text": "x\r\n"}],
            })
        );
        let back: Hunk = serde_json::from_value(json).unwrap();
        assert_eq!(back, h);
        let ops = [ctx("c\n"), rem("r\n")]
            .iter()
            .map(|l| serde_json::to_value(l).map(|v| v["op"].clone()).ok())
            .collect::<Vec<_>>();
        assert_eq!(
            ops,
            [
                Some(serde_json::json!("context")),
                Some(serde_json::json!("remove"))
            ]
        );
    }
}

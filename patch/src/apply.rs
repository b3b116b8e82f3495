//! Exact-context application of hunks.
//!
//! Applying a hunk means: find the hunk's old lines in the file, byte for byte, and put its new
//! lines in their place. There is deliberately no fuzz and no whitespace normalization: the user
//! accepted one specific change, and a hunk that no longer matches exactly must be reported, not
//! bent into a place that merely looks similar.

use crate::hunk::Hunk;
use crate::lines::split_lines;

/// Why a hunk could not be applied. `start` is the hunk's `old_start` as its header shows it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApplyError {
    /// The hunk's old lines appear nowhere in the file (or, for a pure insertion, its position
    /// is outside the file).
    #[error("the hunk's context (old lines {start}..) is not in the file")]
    NoMatch { start: usize },
    /// The hunk's old lines are not at the expected place and appear at several other places.
    #[error(
        "the hunk's context (old lines {start}..) matches {count} places in the file; refusing to guess"
    )]
    Ambiguous { start: usize, count: usize },
}

/// Where and how a hunk applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The whole text after applying the hunk.
    pub text: String,
    /// 0-based line index (in the text given to [`apply_hunk`]) where the hunk's old lines began.
    pub at: usize,
}

/// Apply one hunk with EXACT context (no fuzz, no whitespace normalization).
///
/// `offset` is the line delta from hunks already applied above this one (the caller tracks it).
/// 1. Expected index = `old_start - 1 + offset` (`old_start + offset` for a hunk with no old
///    lines). If the old lines are there exactly, apply there.
/// 2. Otherwise search the whole file: exactly one place applies there; none gives
///    [`ApplyError::NoMatch`]; several give [`ApplyError::Ambiguous`].
///
/// A hunk with no old lines (a pure insertion without context: only possible in an empty or new
/// file, or from a `-U0` diff) has nothing to search for, so it applies only at the expected
/// index and only when that index is within the file.
///
/// End-of-file semantics come from comparing whole lines with their terminators: an old line
/// without terminator only matches the file's last line when that also lacks one. On top of
/// that, two placements that would glue lines together are refused: a hunk whose new side ends
/// without a terminator must replace lines that reach the end of the file, and a pure insertion
/// cannot go after a last line that lacks its terminator.
pub fn apply_hunk(text: &str, hunk: &Hunk, offset: isize) -> Result<Applied, ApplyError> {
    let lines = split_lines(text);
    let old = hunk.old_lines();
    let new = hunk.new_lines();
    let no_match = ApplyError::NoMatch {
        start: hunk.old_start,
    };

    let expected = expected_index(hunk, offset);

    let at = if old.is_empty() {
        match expected {
            Some(at) if fits(&lines, &old, &new, at) => at,
            _ => return Err(no_match),
        }
    } else if let Some(at) = expected.filter(|&at| fits(&lines, &old, &new, at)) {
        at
    } else {
        let mut found =
            (0..=lines.len().saturating_sub(old.len())).filter(|&at| fits(&lines, &old, &new, at));
        match (found.next(), found.clone().count()) {
            (None, _) => return Err(no_match),
            (Some(at), 0) => at,
            (Some(_), more) => {
                return Err(ApplyError::Ambiguous {
                    start: hunk.old_start,
                    count: more + 1,
                });
            }
        }
    };

    let mut out = String::with_capacity(text.len() + new.iter().map(|l| l.len()).sum::<usize>());
    for line in &lines[..at] {
        out.push_str(line);
    }
    for line in &new {
        out.push_str(line);
    }
    for line in &lines[at + old.len()..] {
        out.push_str(line);
    }
    Ok(Applied { text: out, at })
}

/// The 0-based line index the header names: the first old line, or for a hunk without old
/// lines the insertion point, which git's header gives as the line it follows.
fn nominal_index(hunk: &Hunk) -> usize {
    if hunk.old_lines().is_empty() {
        hunk.old_start
    } else {
        hunk.old_start.saturating_sub(1)
    }
}

/// The header's index moved by `offset`, or `None` when that is before the file's start or
/// not a number at all: the parser takes any `usize` start, so a hand-typed header can name a
/// line far beyond `isize::MAX`, and such a hunk is only looked for by the search.
fn expected_index(hunk: &Hunk, offset: isize) -> Option<usize> {
    let nominal = isize::try_from(nominal_index(hunk)).ok()?;
    usize::try_from(nominal.checked_add(offset)?).ok()
}

/// Whether the hunk's old lines are exactly at `lines[at..]` and replacing them with `new`
/// keeps every line whole.
fn fits(lines: &[&str], old: &[&str], new: &[&str], at: usize) -> bool {
    let Some(end) = at.checked_add(old.len()).filter(|&end| end <= lines.len()) else {
        return false;
    };
    if lines[at..end] != *old {
        return false;
    }
    let at_eof = end == lines.len();
    let new_unterminated = new.last().is_some_and(|l| !l.ends_with('\n'));
    if new_unterminated && !at_eof {
        return false;
    }
    let inserting_after_unterminated = old.is_empty()
        && !new.is_empty()
        && at_eof
        && lines.last().is_some_and(|l| !l.ends_with('\n'));
    !inserting_after_unterminated
}

/// Apply hunks (sorted by `old_start`, as [`diff_hunks`](crate::diff_hunks) and
/// [`parse_hunks`](crate::parse_hunks) produce them) in order, tracking offsets.
///
/// The offset carried to the next hunk is where the previous hunk really applied relative to
/// where its header said, plus its line delta. When the file has drifted (lines added above),
/// later hunks are then looked for where the drift put them first, instead of being searched
/// for across the whole file.
pub fn apply_all(text: &str, hunks: &[Hunk]) -> Result<String, ApplyError> {
    let mut text = text.to_owned();
    let mut offset: isize = 0;
    for hunk in hunks {
        let applied = apply_hunk(&text, hunk, offset)?;
        // Measured from the body rather than the header counts, because the body is what
        // apply_hunk actually put in the text.
        let delta = hunk.new_lines().len() as isize - hunk.old_lines().len() as isize;
        // Saturating: a header with an absurd start (see `expected_index`) gives an absurd
        // offset, which only makes the next hunk miss its expected place and be searched for.
        let nominal = isize::try_from(nominal_index(hunk)).unwrap_or(isize::MAX);
        offset = (applied.at as isize)
            .saturating_sub(nominal)
            .saturating_add(delta);
        text = applied.text;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::diff_hunks;
    use crate::hunk::HunkLine;
    use crate::parse::parse_hunks;

    fn numbered(range: std::ops::Range<usize>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    fn hunk(diff: &str) -> Hunk {
        let mut hunks = parse_hunks(diff).unwrap();
        assert_eq!(hunks.len(), 1);
        hunks.remove(0)
    }

    #[test]
    fn applies_at_the_expected_place() {
        let text = numbered(1..11);
        let h = hunk("@@ -4,3 +4,3 @@\n line 4\n-line 5\n+five\n line 6\n");
        let applied = apply_hunk(&text, &h, 0).unwrap();
        assert_eq!(applied.at, 3);
        assert_eq!(applied.text, text.replace("line 5\n", "five\n"));
    }

    #[test]
    fn applies_with_an_offset() {
        let text = numbered(1..11);
        // A hunk above this one added two lines, so its old line 4 is now line 6.
        let shifted = text.replace("line 2\n", "line 2\nnew a\nnew b\n");
        let h = hunk("@@ -4,3 +4,3 @@\n line 4\n-line 5\n+five\n line 6\n");
        let applied = apply_hunk(&shifted, &h, 2).unwrap();
        assert_eq!(applied.at, 5);
        assert_eq!(applied.text, shifted.replace("line 5\n", "five\n"));
        // A negative offset works the same way.
        let shrunk = text.replace("line 2\n", "");
        let applied = apply_hunk(&shrunk, &h, -1).unwrap();
        assert_eq!(applied.at, 2);
    }

    #[test]
    fn search_finds_the_unique_place_after_the_file_gained_lines_above() {
        let old = numbered(1..21);
        let new = old.replace("line 15\n", "fifteen\n");
        let hunks = diff_hunks(&old, &new, 3);
        assert_eq!(hunks.len(), 1);
        // The user's file gained lines above the hunk since the diff was made; offset 0 is
        // stale, so the expected place does not match and the search must find the hunk.
        let grown = old.replace("line 3\n", "line 3\nuser 1\nuser 2\nuser 3\n");
        let applied = apply_hunk(&grown, &hunks[0], 0).unwrap();
        assert_eq!(applied.at, 11 + 3);
        assert_eq!(applied.text, grown.replace("line 15\n", "fifteen\n"));
        assert_eq!(
            apply_all(&grown, &hunks).unwrap(),
            grown.replace("line 15\n", "fifteen\n")
        );
    }

    #[test]
    fn apply_all_carries_drift_to_later_hunks() {
        let old = numbered(1..41);
        let new = old
            .replace("line 10\n", "ten\n")
            .replace("line 30\n", "thirty\nthirty b\n");
        let hunks = diff_hunks(&old, &new, 3);
        assert_eq!(hunks.len(), 2);
        let grown = format!("top 1\ntop 2\n{old}");
        let want = format!("top 1\ntop 2\n{new}");
        assert_eq!(apply_all(&grown, &hunks).unwrap(), want);
    }

    #[test]
    fn exact_place_wins_over_other_matches() {
        let text = "x\ny\nx\ny\n";
        let h = hunk("@@ -3,2 +3,2 @@\n x\n-y\n+Y\n");
        assert_eq!(apply_hunk(text, &h, 0).unwrap().text, "x\ny\nx\nY\n");
    }

    #[test]
    fn ambiguous_when_the_expected_place_is_gone_and_several_match() {
        let text = "x\ny\nx\ny\nx\ny\n";
        let h = hunk("@@ -10,2 +10,2 @@\n x\n-y\n+Y\n");
        let err = apply_hunk(text, &h, 0).unwrap_err();
        assert_eq!(
            err,
            ApplyError::Ambiguous {
                start: 10,
                count: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "the hunk's context (old lines 10..) matches 3 places in the file; refusing to guess"
        );
    }

    #[test]
    fn no_match_when_context_changed() {
        let text = numbered(1..11);
        let h = hunk("@@ -4,3 +4,3 @@\n line 4\n-line 5\n+five\n line 6 \n");
        let err = apply_hunk(&text, &h, 0).unwrap_err();
        assert_eq!(err, ApplyError::NoMatch { start: 4 });
        assert_eq!(
            err.to_string(),
            "the hunk's context (old lines 4..) is not in the file"
        );
    }

    #[test]
    fn no_fuzz_on_line_endings() {
        let crlf = "a\r\nb\r\nc\r\n";
        let lf_hunk = hunk("@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
        assert_eq!(
            apply_hunk(crlf, &lf_hunk, 0).unwrap_err(),
            ApplyError::NoMatch { start: 1 }
        );
        // Converting the hand-written LF hunk to the file's ending is the supported way.
        let converted = lf_hunk.with_line_ending(crate::line_ending(crlf));
        assert_eq!(
            apply_hunk(crlf, &converted, 0).unwrap().text,
            "a\r\nB\r\nc\r\n"
        );
    }

    #[test]
    fn crlf_file_round_trip() {
        let old = "a\r\nb\r\nc\r\nd\r\n";
        let new = "a\r\nB\r\nc\r\nd\r\ne\r\n";
        assert_eq!(apply_all(old, &diff_hunks(old, new, 1)).unwrap(), new);
    }

    #[test]
    fn empty_file_to_content() {
        let hunks = diff_hunks("", "a\nb", 3);
        assert_eq!(apply_all("", &hunks).unwrap(), "a\nb");
        // A pure insertion has no context to check, so only its position can be refused: it
        // must fall within the file.
        let h = hunk("@@ -5,0 +6 @@\n+x\n");
        assert_eq!(
            apply_hunk("a\n", &h, 0).unwrap_err(),
            ApplyError::NoMatch { start: 5 }
        );
        assert_eq!(apply_hunk("a\n", &h, -5).unwrap().text, "x\na\n");
        assert_eq!(
            apply_hunk("a\n", &h, -6).unwrap_err(),
            ApplyError::NoMatch { start: 5 }
        );
    }

    #[test]
    fn content_to_empty_file() {
        let hunks = diff_hunks("a\nb\n", "", 3);
        assert_eq!(apply_all("a\nb\n", &hunks).unwrap(), "");
        assert_eq!(
            apply_all("a\nb\nc\n", &hunks).unwrap(),
            "c\n",
            "the old lines are found; what follows them is kept"
        );
    }

    #[test]
    fn final_newline_changes() {
        for (old, new) in [
            ("a\nb", "a\nb\n"),
            ("a\nb\n", "a\nb"),
            ("a\nb", "a\nc"),
            ("a", ""),
            ("", "a"),
            ("x\r\ny", "x\r\ny\r\n"),
        ] {
            for context in [0, 3] {
                let hunks = diff_hunks(old, new, context);
                assert_eq!(apply_all(old, &hunks).unwrap(), new, "{old:?} -> {new:?}");
                let back: Vec<Hunk> = hunks.iter().map(Hunk::reversed).collect();
                assert_eq!(apply_all(new, &back).unwrap(), old, "{new:?} -> {old:?}");
            }
        }
    }

    #[test]
    fn unterminated_old_line_only_matches_the_files_last_line() {
        let h = hunk("@@ -1 +1 @@\n-b\n\\ No newline at end of file\n+c\n");
        assert_eq!(apply_hunk("a\nb", &h, -1).unwrap().text, "a\nc\n");
        assert_eq!(
            apply_hunk("b\nb\n", &h, 0).unwrap_err(),
            ApplyError::NoMatch { start: 1 }
        );
    }

    #[test]
    fn unterminated_new_line_must_land_at_the_end_of_the_file() {
        let h = hunk("@@ -1 +1 @@\n-b\n+c\n\\ No newline at end of file\n");
        assert_eq!(apply_hunk("b\n", &h, 0).unwrap().text, "c");
        // Anywhere else it would glue "c" to the next line.
        assert_eq!(
            apply_hunk("b\nz\n", &h, 0).unwrap_err(),
            ApplyError::NoMatch { start: 1 }
        );
        // The search only considers the place that reaches the end of the file.
        assert_eq!(apply_hunk("b\nz\nb\n", &h, 0).unwrap().text, "b\nz\nc");
    }

    #[test]
    fn insertion_after_an_unterminated_last_line_is_refused() {
        let h = Hunk {
            old_start: 1,
            old_len: 0,
            new_start: 2,
            new_len: 1,
            lines: vec![HunkLine::Add("x\n".into())],
        };
        assert_eq!(apply_hunk("a\n", &h, 0).unwrap().text, "a\nx\n");
        assert_eq!(
            apply_hunk("a", &h, 0).unwrap_err(),
            ApplyError::NoMatch { start: 1 }
        );
    }

    #[test]
    fn a_header_start_beyond_isize_max_neither_panics_nor_wraps() {
        // Found while writing the fuzz targets (regression seed fuzz/seeds/apply/huge-start):
        // `old_start as isize` wrapped to a negative number, and adding the offset overflowed
        // (a panic in debug builds; in release a wrapped index could place the hunk at line 0).
        let h = hunk("@@ -9223372036854775809 +1 @@\n-a\n+b\n");
        for offset in [isize::MIN, -1, 0, 1, isize::MAX] {
            // The expected place does not exist, so the search finds the only "a".
            assert_eq!(apply_hunk("x\na\n", &h, offset).unwrap().at, 1);
        }
        let insertion = hunk("@@ -18446744073709551615,0 +1 @@\n+b\n");
        for offset in [isize::MIN, -1, 0, 1, 2, isize::MAX] {
            assert_eq!(
                apply_hunk("a\n", &insertion, offset).unwrap_err(),
                ApplyError::NoMatch { start: usize::MAX },
                "offset {offset}"
            );
        }
        // The offset carried past such a hunk saturates: the next hunk is searched for.
        let hunks = parse_hunks(
            "@@ -9223372036854775809 +1 @@\n-a\n+b\n@@ -9223372036854775810 +2 @@\n-c\n+d\n",
        )
        .unwrap();
        assert_eq!(apply_all("a\nc\n", &hunks).unwrap(), "b\nd\n");
        // Positive control: an ordinary header still applies where it says.
        assert_eq!(
            apply_all("a\na\n", &[hunk("@@ -2 +2 @@\n-a\n+b\n")]).unwrap(),
            "a\nb\n"
        );
    }

    #[test]
    fn errors_stop_apply_all() {
        let old = numbered(1..21);
        let new = old
            .replace("line 2\n", "two\n")
            .replace("line 18\n", "eighteen\n");
        let hunks = diff_hunks(&old, &new, 3);
        let edited = old.replace("line 17\n", "line seventeen\n");
        assert_eq!(
            apply_all(&edited, &hunks).unwrap_err(),
            ApplyError::NoMatch { start: 15 }
        );
    }
}

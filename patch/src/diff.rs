//! Line diff grouped into hunks the way `git diff -U<n>` groups them.

use std::ops::Range;

use similar::{capture_diff_slices, Algorithm, DiffOp};

use crate::hunk::{Hunk, HunkLine};
use crate::lines::split_lines;

/// A maximal run of changed lines: `old` is removed and `new` takes its place. Either range may
/// be empty (pure insertion or pure deletion), never both.
#[derive(Clone, Debug)]
struct Change {
    old: Range<usize>,
    new: Range<usize>,
}

/// Line diff of `old` -> `new` (Myers, via the `similar` crate) grouped into hunks with
/// `context` lines of context, exactly as `git diff -U<context>` groups them.
///
/// Two changes share a hunk when at most `2 * context` unchanged lines separate them, i.e. when
/// their context would touch or overlap (git's `xdl_get_hunk`). Empty when `old == new`.
///
/// Lines are compared with their terminators, so a CRLF line differs from the same LF line, and
/// a final line that gains or loses its newline shows up as a remove + add pair, as in git.
pub fn diff_hunks(old: &str, new: &str, context: usize) -> Vec<Hunk> {
    if old == new {
        return Vec::new();
    }
    let old_lines = split_lines(old);
    let new_lines = split_lines(new);
    let changes = changes(&old_lines, &new_lines);
    group(&changes, context)
        .into_iter()
        .map(|group| build_hunk(group, &old_lines, &new_lines, context))
        .collect()
}

/// Collapse similar's ops into maximal changed runs.
///
/// similar may emit a Delete next to an Insert (or the reverse) where git sees one change;
/// merging adjacent non-equal ops is what makes each change print as "all removals, then all
/// additions" the way git prints it.
fn changes(old_lines: &[&str], new_lines: &[&str]) -> Vec<Change> {
    let ops = capture_diff_slices(Algorithm::Myers, old_lines, new_lines);
    let mut out: Vec<Change> = Vec::new();
    for op in ops {
        if let DiffOp::Equal { .. } = op {
            continue;
        }
        let (old, new) = (op.old_range(), op.new_range());
        if old.is_empty() && new.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.old.end == old.start && last.new.end == new.start => {
                last.old.end = old.end;
                last.new.end = new.end;
            }
            _ => out.push(Change { old, new }),
        }
    }
    out
}

/// Split the changes into hunks: a gap of more than `2 * context` unchanged lines starts a new
/// hunk, because only then would the two hunks' context lines neither touch nor overlap.
fn group(changes: &[Change], context: usize) -> Vec<&[Change]> {
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..changes.len() {
        let gap = changes[i].old.start - changes[i - 1].old.end;
        if gap > context.saturating_mul(2) {
            groups.push(&changes[start..i]);
            start = i;
        }
    }
    if start < changes.len() {
        groups.push(&changes[start..]);
    }
    groups
}

fn build_hunk(group: &[Change], old_lines: &[&str], new_lines: &[&str], context: usize) -> Hunk {
    let (Some(first), Some(last)) = (group.first(), group.last()) else {
        // group() never yields an empty slice; an empty hunk is the harmless answer anyway.
        return Hunk {
            old_start: 0,
            old_len: 0,
            new_start: 0,
            new_len: 0,
            lines: Vec::new(),
        };
    };
    // Unchanged lines before the first change are the same count on both sides (they are equal
    // runs), and groups are separated by more than 2 * context of them, so only the file edges
    // can cut the context short.
    let lead = context.min(first.old.start);
    let trail = context.min(old_lines.len() - last.old.end);
    let old_begin = first.old.start - lead;
    let new_begin = first.new.start - lead;

    let old_len = last.old.end + trail - old_begin;
    let new_len = last.new.end + trail - new_begin;
    // Exactly its lines (the old side's, and the added ones): a suggestion keeps its hunks for
    // as long as the hub runs, and a vector grown by doubling would hold up to twice that.
    let added: usize = group.iter().map(|c| c.new.len()).sum();
    let mut lines = Vec::with_capacity(old_len + added);
    let mut old_pos = old_begin;
    for change in group {
        for line in &old_lines[old_pos..change.old.start] {
            lines.push(HunkLine::Context((*line).to_owned()));
        }
        for line in &old_lines[change.old.clone()] {
            lines.push(HunkLine::Remove((*line).to_owned()));
        }
        for line in &new_lines[change.new.clone()] {
            lines.push(HunkLine::Add((*line).to_owned()));
        }
        old_pos = change.old.end;
    }
    for line in &old_lines[old_pos..last.old.end + trail] {
        lines.push(HunkLine::Context((*line).to_owned()));
    }

    debug_assert_eq!(lines.len(), old_len + added);
    Hunk {
        old_start: git_start(old_begin, old_len),
        old_len,
        new_start: git_start(new_begin, new_len),
        new_len,
        lines,
    }
}

/// git numbers a non-empty range by its first line (1-based) and an empty one by the line it
/// follows, which is the 0-based index of where it sits.
fn git_start(begin: usize, len: usize) -> usize {
    if len == 0 {
        begin
    } else {
        begin + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(range: Range<usize>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    fn unified(hunks: &[Hunk]) -> String {
        hunks.iter().map(Hunk::to_unified).collect()
    }

    /// A hunk holds exactly its lines, whether diffed or parsed back from its text (a hub
    /// keeps every hunk it shows): 1,000 lines in a vector of 1,000, not of the 1,024 that
    /// growing by doubling gives.
    #[test]
    fn hunks_hold_no_spare_room_for_lines() {
        let old = numbered(0..600);
        let new = numbered(0..100) + &numbered(5000..5400) + &numbered(500..600);
        let hunks = diff_hunks(&old, &new, 3);
        assert_eq!(hunks.len(), 1);
        let lines = &hunks[0].lines;
        assert_eq!(lines.len(), 3 + 400 + 400 + 3);
        assert_eq!(lines.capacity(), lines.len());
        let parsed = crate::parse_hunks(&unified(&hunks)).unwrap();
        assert_eq!(parsed, hunks);
        assert_eq!(parsed[0].lines.capacity(), parsed[0].lines.len());
    }

    #[test]
    fn identical_texts_have_no_hunks() {
        assert!(diff_hunks("", "", 3).is_empty());
        assert!(diff_hunks("a\nb\n", "a\nb\n", 3).is_empty());
        assert!(diff_hunks("a\r\nb", "a\r\nb", 0).is_empty());
    }

    #[test]
    fn single_change_with_context() {
        let old = numbered(1..11);
        let new = old.replace("line 5\n", "line five\n");
        assert_eq!(
            unified(&diff_hunks(&old, &new, 3)),
            "@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
        );
    }

    #[test]
    fn context_is_cut_at_file_edges() {
        let old = "a\nb\nc\n";
        let new = "A\nb\nC\n";
        assert_eq!(
            unified(&diff_hunks(old, new, 3)),
            "@@ -1,3 +1,3 @@\n-a\n+A\n b\n-c\n+C\n"
        );
    }

    #[test]
    fn gap_of_six_merges_with_context_three() {
        let old = numbered(1..21);
        // Changes at lines 5 and 12: lines 6..=11 (six lines) separate them.
        let new = old
            .replace("line 5\n", "line five\n")
            .replace("line 12\n", "line twelve\n");
        let hunks = diff_hunks(&old, &new, 3);
        assert_eq!(hunks.len(), 1, "{}", unified(&hunks));
        assert_eq!((hunks[0].old_start, hunks[0].old_len), (2, 14));
        assert_eq!(hunks[0].lines.len(), 16);
    }

    #[test]
    fn gap_of_seven_splits_with_context_three() {
        let old = numbered(1..21);
        // Changes at lines 5 and 13: lines 6..=12 (seven lines) separate them.
        let new = old
            .replace("line 5\n", "line five\n")
            .replace("line 13\n", "line thirteen\n");
        let hunks = diff_hunks(&old, &new, 3);
        assert_eq!(hunks.len(), 2, "{}", unified(&hunks));
        assert_eq!((hunks[0].old_start, hunks[0].old_len), (2, 7));
        assert_eq!((hunks[1].old_start, hunks[1].old_len), (10, 7));
    }

    #[test]
    fn context_zero_never_merges_separated_changes() {
        let old = numbered(1..6);
        let new = old
            .replace("line 2\n", "two\n")
            .replace("line 4\n", "four\n");
        let hunks = diff_hunks(&old, &new, 0);
        assert_eq!(
            unified(&hunks),
            "@@ -2 +2 @@\n-line 2\n+two\n@@ -4 +4 @@\n-line 4\n+four\n"
        );
    }

    #[test]
    fn context_zero_insertion_and_deletion_use_the_line_before() {
        let old = "a\nb\nc\n";
        assert_eq!(
            unified(&diff_hunks(old, "a\nb\nx\ny\nc\n", 0)),
            "@@ -2,0 +3,2 @@\n+x\n+y\n"
        );
        assert_eq!(
            unified(&diff_hunks(old, "a\nc\n", 0)),
            "@@ -2 +1,0 @@\n-b\n"
        );
        assert_eq!(
            unified(&diff_hunks(old, "x\na\nb\nc\n", 0)),
            "@@ -0,0 +1 @@\n+x\n"
        );
    }

    #[test]
    fn empty_file_to_content_and_back() {
        assert_eq!(
            unified(&diff_hunks("", "a\nb\n", 3)),
            "@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
        assert_eq!(
            unified(&diff_hunks("a\nb\n", "", 3)),
            "@@ -1,2 +0,0 @@\n-a\n-b\n"
        );
        assert_eq!(
            unified(&diff_hunks("", "a", 3)),
            "@@ -0,0 +1 @@\n+a\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn adding_the_final_newline_is_a_remove_add_pair() {
        assert_eq!(
            unified(&diff_hunks("a\nb", "a\nb\n", 3)),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
        );
    }

    #[test]
    fn removing_the_final_newline_is_a_remove_add_pair() {
        assert_eq!(
            unified(&diff_hunks("a\nb\n", "a\nb", 3)),
            "@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn change_with_no_final_newline_on_both_sides() {
        assert_eq!(
            unified(&diff_hunks("a\nb\nc", "a\nb\nC", 3)),
            "@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+C\n\\ No newline at end of file\n"
        );
        // An unterminated last line that is unchanged is plain context.
        assert_eq!(
            unified(&diff_hunks("a\nb\nc", "A\nb\nc", 3)),
            "@@ -1,3 +1,3 @@\n-a\n+A\n b\n c\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn crlf_lines_are_kept_and_compared_with_their_terminator() {
        let old = "a\r\nb\r\nc\r\n";
        let new = "a\r\nB\r\nc\r\n";
        let hunks = diff_hunks(old, new, 3);
        assert_eq!(unified(&hunks), "@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n");
        // Converting line endings changes every line.
        let hunks = diff_hunks("a\r\nb\r\n", "a\nb\n", 3);
        assert_eq!(hunks.len(), 1);
        assert_eq!(hunks[0].removed(), 2);
        assert_eq!(hunks[0].added(), 2);
    }

    #[test]
    fn removals_come_before_additions_in_each_change() {
        let hunks = diff_hunks("x\na\nb\ny\n", "x\nc\nd\ne\ny\n", 1);
        assert_eq!(
            unified(&hunks),
            "@@ -1,4 +1,5 @@\n x\n-a\n-b\n+c\n+d\n+e\n y\n"
        );
    }

    #[test]
    fn hunk_counts_match_bodies() {
        let old = numbered(1..40);
        let new = old
            .replace("line 3\n", "")
            .replace("line 20\n", "line 20\nextra\nextra 2\n")
            .replace("line 39\n", "line 39");
        for context in 0..5 {
            for h in diff_hunks(&old, &new, context) {
                assert_eq!(h.old_lines().len(), h.old_len);
                assert_eq!(h.new_lines().len(), h.new_len);
            }
        }
    }
}

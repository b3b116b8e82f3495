//! Deciding part of a hunk: a range of its lines accepted (lazygit's rule) or rejected, and the
//! rest left as a smaller hunk to decide later.
//!
//! Positions count the lines of the hunk's body (what follows its `@@` header), from 1, as a
//! reviewer sees them. Accepting a range lands a hunk in which the selected `+` lines are added
//! and the selected `-` lines removed, while unselected `-` lines stay as context and unselected
//! `+` lines are left out; what is left to decide is the hunk from the file as that leaves it to
//! the hunk's new side. Rejecting a range drops the selected lines from the hunk: a rejected `-`
//! line stays in the file (it becomes context) and a rejected `+` line is never added; nothing
//! lands.
//!
//! Both hunks keep all of the original hunk's context, so they apply with exact context like
//! any other, and the remaining hunk sits where the original did: its old side starts where the
//! original's old side started, in the file after the landed part.

use crate::hunk::{Hunk, HunkLine};

/// What a range decision does with the selected lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Land the selected changes now.
    Accept,
    /// Drop the selected changes from the hunk; nothing lands.
    Reject,
}

/// The two parts of a hunk decided in part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// What lands in the file now (an accept); `None` for a reject.
    pub landed: Option<Hunk>,
    /// What is left to decide, re-anchored to the file as it is once `landed` is in; `None` when
    /// the selection held every change of the hunk.
    pub rest: Option<Hunk>,
    /// For each line of the hunk (0-based), its 0-based position among `rest`'s lines, or
    /// `None` when the decision took it out of the hunk (or left nothing to decide).
    pub moved: Vec<Option<usize>>,
}

/// Why a range cannot be decided.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error("lines {first}-{last} are not a range within the hunk's {len} lines (positions count the lines after the @@ header, from 1)")]
    OutOfRange {
        first: usize,
        last: usize,
        len: usize,
    },
    #[error("lines {first}-{last} hold no + or - line of the hunk; select at least one change")]
    NoChange { first: usize, last: usize },
    #[error("lines {first}-{last} would put a line without a newline (the file's last line) before another line; select the lines around it as well, or decide the whole hunk")]
    NoNewline { first: usize, last: usize },
}

/// Decide lines `first..=last` (1-based positions among the hunk's body lines) of `hunk`.
///
/// ```
/// use hunkgate_patch::{parse_hunks, split_hunk, Pick};
///
/// let h = &parse_hunks("@@ -1,3 +1,3 @@\n a\n-b\n-c\n+B\n+C\n")?[0];
/// // Accept `-b` and `+B` (lines 2 and 4 would not be a range; 2-4 selects -b -c +B).
/// let split = split_hunk(h, 2, 4, Pick::Accept)?;
/// assert_eq!(split.landed.unwrap().to_unified(), "@@ -1,3 +1,2 @@\n a\n-b\n-c\n+B\n");
/// assert_eq!(split.rest.unwrap().to_unified(), "@@ -1,2 +1,3 @@\n a\n B\n+C\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn split_hunk(hunk: &Hunk, first: usize, last: usize, pick: Pick) -> Result<Split, SplitError> {
    let len = hunk.lines.len();
    if first == 0 || first > last || last > len {
        return Err(SplitError::OutOfRange { first, last, len });
    }
    let range = first - 1..last;
    if hunk.lines[range.clone()]
        .iter()
        .all(|l| matches!(l, HunkLine::Context(_)))
    {
        return Err(SplitError::NoChange { first, last });
    }
    let split = split_where(hunk, |i| range.contains(&i), pick);
    let sound = |h: &Option<Hunk>| h.as_ref().is_none_or(newlines_sound);
    if !sound(&split.landed) || !sound(&split.rest) {
        return Err(SplitError::NoNewline { first, last });
    }
    Ok(split)
}

/// [`split_hunk`] for any set of lines (`picked(i)`, 0-based), unchecked: the selection may
/// hold no change, and a side may end up with a line lacking its newline before another line.
pub fn split_where(hunk: &Hunk, picked: impl Fn(usize) -> bool, pick: Pick) -> Split {
    let mut landed = Vec::new();
    let mut rest = Vec::new();
    let mut moved = Vec::with_capacity(hunk.lines.len());
    for (i, line) in hunk.lines.iter().enumerate() {
        let (now, later) = decide_line(line, picked(i), pick);
        landed.extend(now);
        moved.push(later.is_some().then_some(rest.len()));
        rest.extend(later);
    }
    let first_old = first_line(hunk.old_start, hunk.old_len);
    let first_new = first_line(hunk.new_start, hunk.new_len);
    let landed =
        (pick == Pick::Accept).then(|| Hunk::anchored(landed, first_old - 1, first_old - 1));
    // The rest's old side is the file once the landed part is in (or as it was, after a
    // reject), starting where the hunk's old side started; its new side is where the hunk's was.
    let rest = Hunk::anchored(rest, first_old - 1, first_new - 1);
    let rest = has_change(&rest).then_some(rest);
    if rest.is_none() {
        moved.iter_mut().for_each(|m| *m = None);
    }
    Split {
        landed: landed.filter(has_change),
        rest,
        moved,
    }
}

/// What becomes of one line: its form in the landed hunk and in the rest (`None`: not there).
fn decide_line(line: &HunkLine, picked: bool, pick: Pick) -> (Option<HunkLine>, Option<HunkLine>) {
    let text = line.text().to_string();
    let ctx = || HunkLine::Context(text.clone());
    match (line, picked, pick) {
        (HunkLine::Context(_), _, _) => (Some(ctx()), Some(ctx())),
        // Accept: a selected change lands and is no longer a change in the rest.
        (HunkLine::Remove(_), true, Pick::Accept) => (Some(line.clone()), None),
        (HunkLine::Add(_), true, Pick::Accept) => (Some(line.clone()), Some(ctx())),
        // An unselected change does not land and stays to be decided.
        (HunkLine::Remove(_), false, Pick::Accept) => (Some(ctx()), Some(line.clone())),
        (HunkLine::Add(_), false, Pick::Accept) => (None, Some(line.clone())),
        // Reject: a selected `-` line stays in the file, a selected `+` line never comes.
        (HunkLine::Remove(_), true, Pick::Reject) => (None, Some(ctx())),
        (HunkLine::Add(_), true, Pick::Reject) => (None, None),
        (_, false, Pick::Reject) => (None, Some(line.clone())),
    }
}

/// The 1-based number of a side's first line, from git's start (which, for an empty side, is
/// the line after which the other side's lines go).
fn first_line(start: usize, len: usize) -> usize {
    if len == 0 {
        start + 1
    } else {
        start
    }
}

fn has_change(h: &Hunk) -> bool {
    h.lines.iter().any(|l| !matches!(l, HunkLine::Context(_)))
}

/// Whether only the last line of each side may lack its newline.
fn newlines_sound(h: &Hunk) -> bool {
    let sound = |side: Vec<&str>| side.iter().rev().skip(1).all(|l| l.ends_with('\n'));
    sound(h.old_lines()) && sound(h.new_lines())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apply_hunk, diff_hunks, parse_hunks};

    fn hunk(text: &str) -> Hunk {
        parse_hunks(text).unwrap().remove(0)
    }

    /// A 12-line hunk: the example of the issue.
    const TWELVE: &str = "@@ -1,8 +1,8 @@\n a\n b\n c\n-d\n-e\n-f\n+D\n+E\n g\n-h\n+H\n+I\n";

    #[test]
    fn accepting_lines_lands_those_changes_and_leaves_the_rest_re_anchored() {
        let h = hunk(TWELVE);
        assert_eq!(h.lines.len(), 12);
        let split = split_hunk(&h, 3, 7, Pick::Accept).unwrap();
        let landed = split.landed.unwrap();
        assert_eq!(
            landed.to_unified(),
            "@@ -1,8 +1,6 @@\n a\n b\n c\n-d\n-e\n-f\n+D\n g\n h\n"
        );
        let rest = split.rest.unwrap();
        assert_eq!(
            rest.to_unified(),
            "@@ -1,6 +1,8 @@\n a\n b\n c\n D\n+E\n g\n-h\n+H\n+I\n"
        );
        // Landing both, one after the other, is landing the hunk.
        let old = "a\nb\nc\nd\ne\nf\ng\nh\nz\n";
        let whole = apply_hunk(old, &h, 0).unwrap().text;
        let step = apply_hunk(old, &landed, 0).unwrap();
        assert_eq!(step.at, 0);
        let done = apply_hunk(&step.text, &rest, 0).unwrap();
        assert_eq!(done.at, 0);
        assert_eq!(done.text, whole);
        assert_eq!(
            split.moved,
            vec![
                Some(0),
                Some(1),
                Some(2),
                None,
                None,
                None,
                Some(3),
                Some(4),
                Some(5),
                Some(6),
                Some(7),
                Some(8)
            ]
        );
    }

    #[test]
    fn rejecting_lines_drops_them_from_the_hunk() {
        let h = hunk(TWELVE);
        let split = split_hunk(&h, 6, 8, Pick::Reject).unwrap();
        assert_eq!(split.landed, None);
        assert_eq!(
            split.rest.unwrap().to_unified(),
            "@@ -1,8 +1,7 @@\n a\n b\n c\n-d\n-e\n f\n g\n-h\n+H\n+I\n"
        );
    }

    #[test]
    fn a_range_with_every_change_leaves_nothing_to_decide() {
        let h = hunk("@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n");
        let accept = split_hunk(&h, 1, 4, Pick::Accept).unwrap();
        assert_eq!(accept.landed.as_ref(), Some(&h));
        assert_eq!((accept.rest, accept.moved), (None, vec![None; 4]));
        let reject = split_hunk(&h, 2, 3, Pick::Reject).unwrap();
        assert_eq!((reject.landed, reject.rest), (None, None));
    }

    #[test]
    fn a_range_of_context_or_outside_the_hunk_is_refused() {
        let h = hunk(TWELVE);
        assert_eq!(
            split_hunk(&h, 1, 3, Pick::Accept),
            Err(SplitError::NoChange { first: 1, last: 3 })
        );
        for (first, last) in [(0, 2), (5, 4), (12, 13)] {
            let err = split_hunk(&h, first, last, Pick::Reject).unwrap_err();
            assert_eq!(
                err,
                SplitError::OutOfRange {
                    first,
                    last,
                    len: 12
                }
            );
            assert!(err.to_string().contains("12 lines"), "{err}");
        }
        // The positive control: the same hunk, a range with a change.
        assert!(split_hunk(&h, 3, 4, Pick::Accept).is_ok());
    }

    #[test]
    fn a_range_that_would_join_lines_is_refused() {
        // The old last line lacks its newline; accepting only `+a\n` would put the old
        // unterminated `a` before another line.
        let h = diff_hunks("x\na", "x\na\nb", 3).remove(0);
        assert_eq!(h.to_unified(), "@@ -1,2 +1,3 @@\n x\n-a\n\\ No newline at end of file\n+a\n+b\n\\ No newline at end of file\n");
        assert_eq!(
            split_hunk(&h, 3, 3, Pick::Accept),
            Err(SplitError::NoNewline { first: 3, last: 3 })
        );
        assert!(split_hunk(&h, 2, 4, Pick::Accept).is_ok());
    }

    #[test]
    fn pure_insertions_and_deletions_keep_git_starts() {
        // No context: a file of one line replaced.
        let h = diff_hunks("a\n", "b\nc\n", 3).remove(0);
        let split = split_hunk(&h, 1, 1, Pick::Accept).unwrap();
        let landed = split.landed.unwrap();
        assert_eq!(landed.to_unified(), "@@ -1 +0,0 @@\n-a\n");
        let rest = split.rest.unwrap();
        assert_eq!(rest.to_unified(), "@@ -0,0 +1,2 @@\n+b\n+c\n");
        let mid = apply_hunk("a\n", &landed, 0).unwrap().text;
        assert_eq!(apply_hunk(&mid, &rest, 0).unwrap().text, "b\nc\n");
    }
}

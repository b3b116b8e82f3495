//! Hunks sized for a human (seed 000 §23): a hunk over the limits is cut into parts, first at
//! its edit boundaries (the unchanged runs between its changes), then, for one change still too
//! big, at blank lines; what no cut can bring within the limits stays whole, marked oversized.
//!
//! Every cut keeps the parts independent: each applies on its own, in any order, with exact
//! context, and all of them together are the whole hunk. That holds because no part quotes a
//! line another part changes:
//!
//! - At an edit boundary, each part keeps at most `context` lines of the unchanged run on its
//!   side of the cut, never more than the run: two parts may quote the same unchanged lines,
//!   which neither changes, so one landing leaves the other's lines where they were.
//! - Inside one change (its `-` lines, then its `+` lines), a cut after a blank line of each
//!   side gives parts that replace consecutive runs of the old lines; the parts quote no
//!   context at the cut (the first keeps the change's leading context, the last its trailing
//!   context). With no context to find it by there, each such part must remove at least
//!   `context` old lines (or keep that much context), so it is found as surely as a hunk by
//!   its context.
//!
//! Parts start at strictly increasing old lines, so a client that moves a hunk by the hunks
//! already applied above it (by `old_start`) moves each part by exactly the parts before it.

use std::ops::Range;

use crate::hunk::{Hunk, HunkLine};

/// The most a reviewer is shown as one hunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Lines of the hunk's body (context, removed and added lines; not the `@@` header).
    pub lines: usize,
    /// Bytes of those lines' text, terminators included.
    pub bytes: usize,
}

impl Limits {
    /// Whether `hunk` is within both limits.
    pub fn fits(&self, hunk: &Hunk) -> bool {
        let bytes: usize = hunk.lines.iter().map(|l| l.text().len()).sum();
        hunk.lines.len() <= self.lines && bytes <= self.bytes
    }
}

/// One part of a hunk cut to size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub hunk: Hunk,
    /// Over the limits, and no cut that keeps parts independent brings it within them.
    pub oversized: bool,
}

/// `hunk` (from [`diff_hunks`](crate::diff_hunks) with `context` lines of context) cut into
/// parts within `limits`, in file order; a hunk within them is its own single part.
///
/// With `context` 0 there is no context to find a part by, so nothing is cut.
///
/// ```
/// use hunkgate_patch::{apply_all, diff_hunks, fit_hunk, Limits};
///
/// let old: String = (0..20).map(|i| format!("line {i}\n")).collect();
/// let new = old.replace("line 3\n", "three\n").replace("line 9\n", "nine\n");
/// let whole = diff_hunks(&old, &new, 3).remove(0);
/// let parts = fit_hunk(whole, 3, Limits { lines: 8, bytes: 8192 });
/// assert_eq!(parts.len(), 2);
/// assert!(parts.iter().all(|p| !p.oversized && p.hunk.lines.len() <= 8));
/// let hunks: Vec<_> = parts.into_iter().map(|p| p.hunk).collect();
/// assert_eq!(apply_all(&old, &hunks)?, new);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fit_hunk(hunk: Hunk, context: usize, limits: Limits) -> Vec<Part> {
    if limits.fits(&hunk) {
        return vec![Part {
            hunk,
            oversized: false,
        }];
    }
    if context == 0 {
        return vec![Part {
            hunk,
            oversized: true,
        }];
    }
    let body = Body::new(&hunk, context, limits);
    let mut parts = Vec::new();
    let groups = body.pack();
    for (g, group) in groups.iter().enumerate() {
        let span = body.span(group.clone());
        if body.fits(span.clone()) {
            parts.push(body.part(span, false));
            continue;
        }
        // The next part's first old line, which every part of this one must start before.
        let bound = groups
            .get(g + 1)
            .map_or(usize::MAX, |next| body.old[body.span(next.clone()).start]);
        let cut = (group.len() == 1)
            .then(|| body.at_blank_lines(group.start, span.clone(), bound))
            .flatten();
        match cut {
            Some(cut) => parts.extend(cut),
            None => parts.push(body.part(span, true)),
        }
    }
    parts
}

/// A hunk's body, with what cutting it needs at hand.
struct Body<'h> {
    lines: &'h [HunkLine],
    /// Each change: the range of `lines` of a maximal run of `-`/`+` lines.
    changes: Vec<Range<usize>>,
    /// `bytes[i]`: bytes of `lines[..i]`; `old[i]`, `new[i]`: old and new lines among them.
    bytes: Vec<usize>,
    old: Vec<usize>,
    new: Vec<usize>,
    /// 0-based line of the hunk's first old line, and of its first new line.
    old_begin: usize,
    new_begin: usize,
    context: usize,
    limits: Limits,
}

impl<'h> Body<'h> {
    fn new(hunk: &'h Hunk, context: usize, limits: Limits) -> Self {
        let lines = hunk.lines.as_slice();
        let mut changes: Vec<Range<usize>> = Vec::new();
        let (mut bytes, mut old, mut new) = (vec![0], vec![0], vec![0]);
        for (i, line) in lines.iter().enumerate() {
            let is_old = !matches!(line, HunkLine::Add(_));
            let is_new = !matches!(line, HunkLine::Remove(_));
            bytes.push(bytes[i] + line.text().len());
            old.push(old[i] + usize::from(is_old));
            new.push(new[i] + usize::from(is_new));
            if is_old && is_new {
                continue;
            }
            match changes.last_mut() {
                Some(run) if run.end == i => run.end = i + 1,
                _ => changes.push(i..i + 1),
            }
        }
        Body {
            lines,
            changes,
            bytes,
            old,
            new,
            old_begin: first_index(hunk.old_start, hunk.old_len),
            new_begin: first_index(hunk.new_start, hunk.new_len),
            context,
            limits,
        }
    }

    fn fits(&self, span: Range<usize>) -> bool {
        span.len() <= self.limits.lines
            && self.bytes[span.end] - self.bytes[span.start] <= self.limits.bytes
    }

    /// The lines a part of changes `group` shows: those changes, what lies between them, and at
    /// most `context` unchanged lines on each side, never reaching the changes around.
    fn span(&self, group: Range<usize>) -> Range<usize> {
        let first = &self.changes[group.start];
        let last = &self.changes[group.end - 1];
        let before = group
            .start
            .checked_sub(1)
            .map_or(0, |p| self.changes[p].end);
        let after = self
            .changes
            .get(group.end)
            .map_or(self.lines.len(), |n| n.start);
        let lead = self.context.min(first.start - before);
        let trail = self.context.min(after - last.end);
        first.start - lead..last.end + trail
    }

    /// The changes grouped into parts, greedily: a part takes the next change while it stays
    /// within the limits. A cut is made only where the next part starts at a later old line
    /// than this one (see the module's doc); otherwise the part grows past the limits.
    fn pack(&self) -> Vec<Range<usize>> {
        let mut groups = Vec::new();
        let mut first = 0;
        for next in 1..self.changes.len() {
            if self.fits(self.span(first..next + 1)) {
                continue;
            }
            let here = self.span(first..next).start;
            let there = self.span(next..next + 1).start;
            if self.old[there] > self.old[here] {
                groups.push(first..next);
                first = next;
            }
        }
        if !self.changes.is_empty() {
            groups.push(first..self.changes.len());
        }
        groups
    }

    /// The hunk of `lines[span]`, where it sits in the file.
    fn part(&self, span: Range<usize>, oversized: bool) -> Part {
        let hunk = Hunk::anchored(
            self.lines[span.clone()].to_vec(),
            self.old_begin + self.old[span.start],
            self.new_begin + self.new[span.start],
        );
        Part { hunk, oversized }
    }

    /// Change `c`, shown as `span`, cut after blank lines of its old and new sides into parts
    /// within the limits; `None` when there is no such cut (see the module's doc for the rules).
    /// Every part starts before old line `bound` (counted from the hunk's first).
    fn at_blank_lines(&self, c: usize, span: Range<usize>, bound: usize) -> Option<Vec<Part>> {
        let change = self.changes[c].clone();
        let removed = change.start
            + self.lines[change.clone()]
                .iter()
                .take_while(|l| matches!(l, HunkLine::Remove(_)))
                .count();
        // Removals, then additions, as a diff makes them; anything else is left whole.
        if self.lines[removed..change.end]
            .iter()
            .any(|l| !matches!(l, HunkLine::Add(_)))
        {
            return None;
        }
        let block = Block {
            body: self,
            lead: span.start..change.start,
            removes: change.start..removed,
            adds: removed..change.end,
            trail: change.end..span.end,
            bound,
        };
        block.cut()
    }
}

/// One change cut at blank lines: `lead` context, then `removes`, `adds`, `trail` context
/// (ranges of the body's lines).
struct Block<'b, 'h> {
    body: &'b Body<'h>,
    lead: Range<usize>,
    removes: Range<usize>,
    adds: Range<usize>,
    trail: Range<usize>,
    /// Old line (counted from the hunk's first) the next part starts at: each of these parts
    /// must start before it, so that parts start at strictly increasing old lines.
    bound: usize,
}

/// The share of a side gone through: `.0` of its `.1` lines.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Share((usize, usize));

impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Share {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let ((a, b), (c, d)) = (self.0, other.0);
        // Line counts: far from overflowing when widened.
        (a as u128 * d as u128).cmp(&(c as u128 * b as u128))
    }
}

/// How far a part goes through a change: the share of the side it goes least far through,
/// then the lines it takes; compared in that order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Progress {
    least: Share,
    gain: usize,
}

/// Where a part of a [`Block`] starts: how many of its removed and added lines came before.
#[derive(Clone, Copy)]
struct At {
    removed: usize,
    added: usize,
}

impl Block<'_, '_> {
    fn cut(&self) -> Option<Vec<Part>> {
        let cuts_old = self.cuts(self.removes.clone());
        let cuts_new = self.cuts(self.adds.clone());
        let mut from = At {
            removed: 0,
            added: 0,
        };
        let mut parts = Vec::new();
        loop {
            let end = At {
                removed: self.removes.len(),
                added: self.adds.len(),
            };
            if self.fits(from, end, parts.is_empty()) {
                parts.push(self.part(from, end, parts.is_empty()));
                return Some(parts);
            }
            let to = self.next_cut(from, parts.is_empty(), &cuts_old, &cuts_new)?;
            parts.push(self.part(from, to, parts.is_empty()));
            from = to;
        }
    }

    /// Where a part may end on one side (offsets within `range`): at its start, just after
    /// each blank line, and at its end.
    fn cuts(&self, range: Range<usize>) -> Vec<usize> {
        let len = range.len();
        let blank = self.body.lines[range]
            .iter()
            .enumerate()
            .filter(|(_, l)| l.text().ends_with('\n') && l.text().trim().is_empty())
            .map(|(i, _)| i + 1);
        let mut cuts: Vec<usize> = std::iter::once(0).chain(blank).collect();
        if cuts.last() != Some(&len) {
            cuts.push(len);
        }
        cuts
    }

    /// Whether a part ending at `to` (not the last) ends both its sides with a whole line:
    /// only the file's last line may lack its newline.
    fn ends_whole(&self, to: At) -> bool {
        let whole = |range: &Range<usize>, n: usize| {
            n == 0 || self.body.lines[range.start + n - 1].text().ends_with('\n')
        };
        whole(&self.removes, to.removed) && whole(&self.adds, to.added)
    }

    /// The cut after `from` whose part is within the limits and found surely, leaves a rest
    /// that can be found surely too, and goes furthest through the side it goes least far
    /// through (then furthest in all): taking all the old lines and none of the new ones would
    /// leave a rest with nothing to find it by. `None` when there is no such cut.
    fn next_cut(
        &self,
        from: At,
        first: bool,
        cuts_old: &[usize],
        cuts_new: &[usize],
    ) -> Option<At> {
        let context = self.body.context;
        // A part shows each line it takes: no cut further than the line limit can fit, so
        // only those are looked at, and cutting a change of any length takes time in
        // proportion to it.
        let reach = self.body.limits.lines;
        let within_reach = |cuts: &[usize], from: usize| -> Vec<usize> {
            let start = cuts.partition_point(|&c| c < from);
            cuts[start..]
                .iter()
                .copied()
                .take_while(|&c| c - from <= reach)
                .collect()
        };
        let news = within_reach(cuts_new, from.added);
        let mut best: Option<(Progress, At)> = None;
        for removed in within_reach(cuts_old, from.removed) {
            let lead = if first { self.lead.len() } else { 0 };
            let anchor = lead + removed - from.removed;
            let rest = self.removes.len() - removed + self.trail.len();
            let rest_begins = self.body.old[self.removes.start] + removed;
            if anchor < context || rest < context || rest_begins >= self.bound {
                continue;
            }
            let within =
                news.partition_point(|&added| self.fits(from, At { removed, added }, first));
            // On the new side: the furthest end that fits, short of the whole rest, and with
            // whole lines at both ends.
            let to = news[..within]
                .iter()
                .rev()
                .map(|&added| At { removed, added })
                .find(|&to| !self.is_end(to) && self.ends_whole(to));
            let Some(to) = to else {
                continue;
            };
            let progress = self.progress(from, to);
            if progress.gain > 0 && best.as_ref().is_none_or(|(p, _)| progress > *p) {
                best = Some((progress, to));
            }
        }
        best.map(|(_, at)| at)
    }

    /// How far a part from `from` to `to` goes through the change.
    fn progress(&self, from: At, to: At) -> Progress {
        // A side with no lines is all gone through.
        let share = |n: usize, len: usize| if len == 0 { (1, 1) } else { (n, len) };
        let old = share(to.removed, self.removes.len());
        let new = share(to.added, self.adds.len());
        let less = |(a, b): (usize, usize), (c, d): (usize, usize)| a * d < c * b;
        Progress {
            least: Share(if less(new, old) { new } else { old }),
            gain: to.removed - from.removed + to.added - from.added,
        }
    }

    fn is_end(&self, to: At) -> bool {
        to.removed == self.removes.len() && to.added == self.adds.len()
    }

    /// The lines of the part from `from` to `to`, in hunk order.
    fn lines(&self, from: At, to: At, first: bool) -> Vec<Range<usize>> {
        let last = self.is_end(to);
        let r = self.removes.start;
        let a = self.adds.start;
        let mut out = Vec::with_capacity(4);
        if first {
            out.push(self.lead.clone());
        }
        out.push(r + from.removed..r + to.removed);
        out.push(a + from.added..a + to.added);
        if last {
            out.push(self.trail.clone());
        }
        out
    }

    fn fits(&self, from: At, to: At, first: bool) -> bool {
        let ranges = self.lines(from, to, first);
        let lines: usize = ranges.iter().map(Range::len).sum();
        let b = &self.body.bytes;
        let bytes: usize = ranges.iter().map(|r| b[r.end] - b[r.start]).sum();
        lines <= self.body.limits.lines && bytes <= self.body.limits.bytes
    }

    fn part(&self, from: At, to: At, first: bool) -> Part {
        let lines: Vec<HunkLine> = self
            .lines(from, to, first)
            .into_iter()
            .flat_map(|r| self.body.lines[r].iter().cloned())
            .collect();
        let body = self.body;
        let (old_at, new_at) = if first {
            (body.old[self.lead.start], body.new[self.lead.start])
        } else {
            // The old side resumes at the next removed line, the new one after the added
            // lines placed so far (with the lead context before both).
            (
                body.old[self.removes.start] + from.removed,
                body.new[self.adds.start] + from.added,
            )
        };
        Part {
            hunk: Hunk::anchored(lines, body.old_begin + old_at, body.new_begin + new_at),
            oversized: false,
        }
    }
}

/// The 0-based index of a side's first line, from git's start (for an empty side, the line
/// after which it sits, which is the index where it sits).
fn first_index(start: usize, len: usize) -> usize {
    if len == 0 {
        start
    } else {
        start.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apply_all, apply_hunk, diff_hunks};

    fn numbered(range: Range<usize>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    fn limits(lines: usize) -> Limits {
        Limits {
            lines,
            bytes: usize::MAX,
        }
    }

    fn one_hunk(old: &str, new: &str) -> Hunk {
        let mut hunks = diff_hunks(old, new, 3);
        assert_eq!(hunks.len(), 1);
        hunks.remove(0)
    }

    fn unified(parts: &[Part]) -> String {
        parts.iter().map(|p| p.hunk.to_unified()).collect()
    }

    #[test]
    fn a_hunk_within_the_limits_is_its_own_part() {
        let old = numbered(0..10);
        let hunk = one_hunk(&old, &old.replace("line 4\n", "four\n"));
        assert_eq!(hunk.lines.len(), 8);
        let parts = fit_hunk(hunk.clone(), 3, limits(8));
        assert_eq!(
            parts,
            vec![Part {
                hunk,
                oversized: false
            }]
        );
    }

    /// Two edits four unchanged lines apart are one hunk; cut, each part keeps at most three
    /// of those lines, so both quote lines 5 and 6, which neither changes.
    #[test]
    fn parts_at_an_edit_boundary_may_quote_the_same_unchanged_lines() {
        let old = numbered(0..12);
        let new = old
            .replace("line 3\n", "three\n")
            .replace("line 8\n", "eight\n");
        let hunk = one_hunk(&old, &new);
        let parts = fit_hunk(hunk, 3, limits(8));
        assert_eq!(
            unified(&parts),
            "@@ -1,7 +1,7 @@\n line 0\n line 1\n line 2\n-line 3\n+three\n line 4\n line 5\n line 6\n\
             @@ -6,7 +6,7 @@\n line 5\n line 6\n line 7\n-line 8\n+eight\n line 9\n line 10\n line 11\n"
        );
        assert!(parts.iter().all(|p| !p.oversized));
        let (a, b) = (&parts[0].hunk, &parts[1].hunk);
        // Either alone, and the other after it (moved by what the first added: nothing).
        let after_a = apply_hunk(&old, a, 0).unwrap().text;
        let after_b = apply_hunk(&old, b, 0).unwrap().text;
        assert_eq!(apply_hunk(&after_a, b, 0).unwrap().text, new);
        assert_eq!(apply_hunk(&after_b, a, 0).unwrap().text, new);
    }

    /// A rewrite with nothing unchanged inside (its paragraphs end in an empty line on the old
    /// side, in a line of spaces on the new one) is cut after blank lines of both sides; the
    /// parts in between quote no context and remove at least three lines each.
    #[test]
    fn one_long_change_is_cut_after_blank_lines() {
        let para = |tag: &str, n: usize, blank: &str| -> String {
            (0..n).map(|i| format!("{tag} {i}\n")).collect::<String>() + blank
        };
        let old: String = ["a", "b", "c"].map(|t| para(t, 5, "\n")).concat();
        let new: String = ["x", "y", "z"].map(|t| para(t, 4, "    \n")).concat();
        let (old, new) = (format!("head\n{old}tail\n"), format!("head\n{new}tail\n"));
        let hunk = one_hunk(&old, &new);
        assert_eq!(hunk.lines.len(), 2 + 18 + 15);
        let parts = fit_hunk(hunk, 3, limits(13));
        assert!(parts.len() > 1, "{}", unified(&parts));
        assert!(parts
            .iter()
            .all(|p| !p.oversized && p.hunk.lines.len() <= 13));
        let hunks: Vec<Hunk> = parts.iter().map(|p| p.hunk.clone()).collect();
        assert_eq!(apply_all(&old, &hunks).unwrap(), new);
        // The first part keeps the leading context, the last the trailing one, and each part
        // but the last ends after a blank line on both sides.
        assert_eq!(hunks[0].lines[0], HunkLine::Context("head\n".into()));
        let last = hunks.last().unwrap();
        assert_eq!(last.lines.last(), Some(&HunkLine::Context("tail\n".into())));
        for h in &hunks[..hunks.len() - 1] {
            assert_eq!(h.old_lines().last(), Some(&"\n"), "{}", h.to_unified());
        }
        // Each part lands alone where the file is untouched around it, found by at least
        // three old lines.
        for h in &hunks {
            assert!(h.old_len >= 3, "{}", h.to_unified());
            assert!(apply_hunk(&old, h, 0).is_ok(), "{}", h.to_unified());
        }
    }

    /// A 300-line insertion has only its two ends to be found by: at most two parts, so with
    /// a limit of 80 it stays whole, marked; and so does any hunk when there is no context.
    #[test]
    fn what_no_cut_brings_within_the_limits_is_oversized() {
        let old = numbered(0..10);
        let inserted: String = (0..300)
            .map(|i| {
                if i % 10 == 9 {
                    "\n".to_owned()
                } else {
                    format!("new {i}\n")
                }
            })
            .collect();
        let new = format!("{}{inserted}{}", numbered(0..5), numbered(5..10));
        let hunk = one_hunk(&old, &new);
        let parts = fit_hunk(hunk.clone(), 3, limits(80));
        assert_eq!(
            parts,
            vec![Part {
                hunk: hunk.clone(),
                oversized: true
            }]
        );
        // The positive control: within a limit two parts can meet, it is cut in two.
        let parts = fit_hunk(hunk.clone(), 3, limits(160));
        assert_eq!(parts.len(), 2, "{}", unified(&parts));
        assert!(parts.iter().all(|p| !p.oversized));
        // No context: nothing to find a part by.
        let bare = diff_hunks(&old, &new, 0).remove(0);
        assert_eq!(
            fit_hunk(bare.clone(), 0, limits(10)),
            vec![Part {
                hunk: bare,
                oversized: true
            }]
        );
    }

    /// A change of tens of thousands of lines is cut like a short one, every part within the
    /// limits (each part looks only at the cuts within its reach).
    #[test]
    fn a_long_change_is_cut_all_the_way() {
        let text = |tag: &str, blank: &str| -> String {
            (0..20_000)
                .map(|i| match i % 10 {
                    9 => blank.to_owned(),
                    _ => format!("{tag} {i}\n"),
                })
                .collect()
        };
        let old = format!("head\n{}tail\n", text("old", "\n"));
        let new = format!("head\n{}tail\n", text("new", " \n"));
        let hunk = one_hunk(&old, &new);
        let parts = fit_hunk(hunk, 3, limits(80));
        assert!(parts.len() >= 40_000 / 80, "{}", parts.len());
        assert!(parts
            .iter()
            .all(|p| !p.oversized && p.hunk.lines.len() <= 80));
        let hunks: Vec<Hunk> = parts.into_iter().map(|p| p.hunk).collect();
        assert_eq!(apply_all(&old, &hunks).unwrap(), new);
    }

    /// The byte limit cuts as the line limit does.
    #[test]
    fn the_byte_limit_cuts_too() {
        let old = numbered(0..40);
        let new = old
            .replace("line 5\n", &format!("{}\n", "x".repeat(300)))
            .replace("line 30\n", "thirty\n");
        let whole = diff_hunks(&old, &new, 12).remove(0);
        let limits = Limits {
            lines: 1000,
            bytes: 550,
        };
        assert!(!limits.fits(&whole));
        let parts = fit_hunk(whole, 12, limits);
        assert_eq!(parts.len(), 2, "{}", unified(&parts));
        assert!(parts.iter().all(|p| !p.oversized && limits.fits(&p.hunk)));
    }
}

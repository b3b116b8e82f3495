//! Which of a checker's diagnostics a run brought in (`new`) or took away (`fixed`), and the
//! hunk each falls on: a pure function of the base's diagnostics, the run's, and the hunks.
//!
//! A base diagnostic is carried to the run's tree through the hunks (a line the run left alone
//! moves by the lines added and removed above it; a line the run removed has no place there). A
//! run diagnostic that some base diagnostic lands on exactly — same file, line, severity, code
//! and message — was there before; every other one is `new`, and every base diagnostic left
//! unmatched is `fixed`. Matching is exact on purpose: a looser one (same message anywhere in
//! the file) would let a warning the run fixed in one place hide the same warning it added in
//! another. A line the run rewrote keeps none of its diagnostics' identity: they count as fixed
//! and new, on the hunk that rewrote it.
//!
//! A `new` diagnostic belongs to the hunk whose new-side lines (context included) hold its line;
//! a `fixed` one to the hunk whose old-side lines hold its line; otherwise to the suggestion.
//! Only line ranges are used, so hunks cut any way (split into parts, say) map the same way.

use std::collections::HashMap;

use hunkgate_patch::{Hunk, HunkLine};

use crate::model::checker_output::Found;
use crate::model::suggestion::HunkRec;
use crate::protocol::{Diagnostic, DiagnosticChange};

/// The new and fixed diagnostics of one checker (`source`), from what it found on the base and
/// on the run, mapped to `hunks`.
pub fn classify(source: &str, base: &[Found], run: &[Found], hunks: &[HunkRec]) -> Vec<Diagnostic> {
    // Each base diagnostic where the run's tree has its line, by what identifies it there.
    let mut before: HashMap<Key<'_>, Vec<usize>> = HashMap::new();
    for (i, f) in base.iter().enumerate().rev() {
        if let Some((file, line)) = carry(f, hunks) {
            before.entry(Key::of(f, file, line)).or_default().push(i);
        }
    }
    let mut matched = vec![false; base.len()];
    let mut out = Vec::new();
    for f in run {
        match before
            .get_mut(&Key::of(f, &f.file, f.line))
            .and_then(Vec::pop)
        {
            Some(i) => matched[i] = true,
            None => out.push(diagnostic(
                source,
                f,
                DiagnosticChange::New,
                new_side_hunk(f, hunks),
            )),
        }
    }
    for (f, _) in base.iter().zip(&matched).filter(|(_, m)| !**m) {
        out.push(diagnostic(
            source,
            f,
            DiagnosticChange::Fixed,
            old_side_hunk(f, hunks),
        ));
    }
    out
}

/// What identifies a diagnostic across the two trees: where it is (in the run's tree) and
/// what it says.
#[derive(PartialEq, Eq, Hash)]
struct Key<'a> {
    file: &'a str,
    line: usize,
    severity: crate::protocol::Severity,
    code: Option<&'a str>,
    message: &'a str,
}

impl<'a> Key<'a> {
    fn of(f: &'a Found, file: &'a str, line: usize) -> Self {
        Key {
            file,
            line,
            severity: f.severity,
            code: f.code.as_deref(),
            message: &f.message,
        }
    }
}

fn diagnostic(
    source: &str,
    f: &Found,
    change: DiagnosticChange,
    hunk: Option<&HunkRec>,
) -> Diagnostic {
    Diagnostic {
        severity: f.severity,
        source: source.to_string(),
        code: f.code.clone(),
        message: f.message.clone(),
        file: f.file.clone(),
        line: f.line,
        column: f.column,
        change,
        hunk_id: hunk.map(|h| h.id.clone()),
    }
}

/// Where a base diagnostic's line is in the run's tree: its file (renamed, if a hunk renamed
/// it) and line; None when the run removed that line or the whole file.
fn carry<'a>(f: &'a Found, hunks: &'a [HunkRec]) -> Option<(&'a str, usize)> {
    let of_file: Vec<&HunkRec> = hunks
        .iter()
        .filter(|h| h.old_path.as_deref().unwrap_or(&h.file) == f.file)
        .collect();
    if of_file.iter().any(|h| h.old.is_some() && h.new.is_none()) {
        return None;
    }
    let file = of_file.first().map_or(f.file.as_str(), |h| h.file.as_str());
    let mut shift: isize = 0;
    for p in of_file.iter().filter_map(|h| h.patch.as_ref()) {
        if ends_before(p, f.line) {
            shift += p.new_len as isize - p.old_len as isize;
        } else if p.old_len > 0 && f.line >= p.old_start && f.line < p.old_start + p.old_len {
            return carry_within(p, f.line).map(|n| (file, n));
        }
    }
    let line = f.line as isize + shift;
    (line > 0).then_some((file, line as usize))
}

/// Whether the hunk's old lines all come before `line` (an insertion after line `old_start`
/// comes before every line after it).
fn ends_before(p: &Hunk, line: usize) -> bool {
    if p.old_len == 0 {
        p.old_start < line
    } else {
        p.old_start + p.old_len <= line
    }
}

/// The new line of old line `line` inside hunk `p`: a context line's; None for a removed one.
fn carry_within(p: &Hunk, line: usize) -> Option<usize> {
    let (mut old, mut new) = (p.old_start, p.new_start);
    for l in &p.lines {
        match l {
            HunkLine::Context(_) => {
                if old == line {
                    return Some(new);
                }
                old += 1;
                new += 1;
            }
            HunkLine::Remove(_) => {
                if old == line {
                    return None;
                }
                old += 1;
            }
            HunkLine::Add(_) => new += 1,
        }
    }
    None
}

/// The hunk whose new lines hold a run diagnostic's line.
fn new_side_hunk<'h>(f: &Found, hunks: &'h [HunkRec]) -> Option<&'h HunkRec> {
    hunks.iter().find(|h| {
        h.file == f.file
            && h.patch.as_ref().is_some_and(|p| {
                p.new_len > 0 && f.line >= p.new_start && f.line < p.new_start + p.new_len
            })
    })
}

/// The hunk whose old lines hold a base diagnostic's line.
fn old_side_hunk<'h>(f: &Found, hunks: &'h [HunkRec]) -> Option<&'h HunkRec> {
    hunks.iter().find(|h| {
        h.old_path.as_deref().unwrap_or(&h.file) == f.file
            && h.patch.as_ref().is_some_and(|p| {
                p.old_len > 0 && f.line >= p.old_start && f.line < p.old_start + p.old_len
            })
    })
}

/// The diagnostics of `found` (on the run's tree) that fall on a line a hunk adds: those the
/// run's own lines carry, new by construction (a line the run wrote keeps no base diagnostic).
/// What the built-in agent's `check` tool reports, having no base to compare with.
pub fn on_added_lines<'a>(found: &'a [Found], hunks: &[HunkRec]) -> Vec<&'a Found> {
    let mut added: std::collections::HashSet<(&str, usize)> = Default::default();
    for h in hunks {
        let Some(p) = &h.patch else { continue };
        let mut new = p.new_start;
        for l in &p.lines {
            match l {
                HunkLine::Add(_) => {
                    added.insert((h.file.as_str(), new));
                    new += 1;
                }
                HunkLine::Context(_) => new += 1,
                HunkLine::Remove(_) => {}
            }
        }
    }
    found
        .iter()
        .filter(|f| added.contains(&(f.file.as_str(), f.line)))
        .collect()
}

#[cfg(test)]
#[path = "diagnostics_tests.rs"]
mod tests;

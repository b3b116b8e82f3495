//! New and fixed diagnostics, mapped to hunks: by example, and as a property over random
//! edits with a toy checker that flags every line saying `bad`.

use hunkgate_patch::diff_hunks;
use proptest::prelude::*;

use super::*;
use crate::protocol::{HunkKind, Severity};

fn rec(id: &str, file: &str, patch: Hunk) -> HunkRec {
    HunkRec {
        id: id.into(),
        ..HunkRec::pending(file, HunkKind::Modify, Some(patch))
    }
}

fn hunks_of(file: &str, old: &str, new: &str) -> Vec<HunkRec> {
    diff_hunks(old, new, 3)
        .into_iter()
        .enumerate()
        .map(|(i, p)| rec(&format!("{file}:{i}"), file, p))
        .collect()
}

fn found(file: &str, line: usize, message: &str) -> Found {
    Found {
        file: file.into(),
        line,
        column: None,
        severity: Severity::Warning,
        code: Some("W1".into()),
        message: message.into(),
    }
}

/// The toy checker: a warning on every line that says `bad…`, its message the line.
fn toy_check(file: &str, text: &str) -> Vec<Found> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("bad"))
        .map(|(i, l)| found(file, i + 1, l))
        .collect()
}

fn numbered(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("line {i}")).collect()
}

fn text(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn a_diagnostic_the_run_left_alone_is_neither_new_nor_fixed() {
    let mut old = numbered(40);
    old[4] = "bad old".into(); // line 5, untouched: moves to line 7
    old[29] = "bad rewritten".into(); // line 30, rewritten by the run
    let mut new = old.clone();
    new.insert(0, "added 1".into());
    new.insert(0, "added 2".into());
    new[31] = "fixed now".into();
    new.insert(20, "bad new".into()); // line 21
    let (old, new) = (text(&old), text(&new));
    let hunks = hunks_of("a.rs", &old, &new);
    assert_eq!(hunks.len(), 3, "three separate hunks");
    let got = classify(
        "lint",
        &toy_check("a.rs", &old),
        &toy_check("a.rs", &new),
        &hunks,
    );
    let got: Vec<(DiagnosticChange, usize, &str, Option<&str>)> = got
        .iter()
        .map(|d| (d.change, d.line, d.message.as_str(), d.hunk_id.as_deref()))
        .collect();
    assert_eq!(
        got,
        vec![
            (DiagnosticChange::New, 21, "bad new", Some("a.rs:1")),
            (DiagnosticChange::Fixed, 30, "bad rewritten", Some("a.rs:2")),
        ]
    );
}

#[test]
fn the_same_warning_fixed_in_one_place_and_added_in_another_is_both() {
    let old = text(&[
        "bad x".into(),
        "a".into(),
        "b".into(),
        "c".into(),
        "d".into(),
        "e".into(),
        "f".into(),
        "g".into(),
        "h".into(),
    ]);
    let new = text(&[
        "y".into(),
        "a".into(),
        "b".into(),
        "c".into(),
        "d".into(),
        "e".into(),
        "f".into(),
        "g".into(),
        "bad x".into(),
    ]);
    let hunks = hunks_of("a.py", &old, &new);
    let got = classify(
        "lint",
        &toy_check("a.py", &old),
        &toy_check("a.py", &new),
        &hunks,
    );
    let changes: Vec<(DiagnosticChange, usize)> = got.iter().map(|d| (d.change, d.line)).collect();
    assert_eq!(
        changes,
        vec![(DiagnosticChange::New, 9), (DiagnosticChange::Fixed, 1)]
    );
    assert!(got
        .iter()
        .all(|d| d.hunk_id.is_some() && d.source == "lint"));
}

#[test]
fn outside_every_hunk_belongs_to_the_suggestion_and_a_deleted_file_fixes_all_of_its() {
    let old = text(&numbered(30));
    let mut new = numbered(30);
    new[0] = "changed".into();
    let new = text(&new);
    let mut hunks = hunks_of("a.rs", &old, &new);
    // A diagnostic far from the hunk, new in the run (another file changed its meaning).
    let got = classify("c", &[], &[found("a.rs", 25, "m")], &hunks);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].change, got[0].hunk_id.as_deref()),
        (DiagnosticChange::New, None)
    );
    // A file the run deleted: its diagnostics are fixed, on the delete hunk.
    let gone = text(&numbered(5));
    let mut delete = rec("gone.rs:0", "gone.rs", diff_hunks(&gone, "", 3).remove(0));
    delete.old = Some(crate::model::suggestion::Side {
        mode: hunkgate_sandbox::store::Mode::File,
        oid: hunkgate_sandbox::ObjectId::from_hex(&[b'0'; 40]).unwrap(),
    });
    hunks.push(delete);
    let got = classify("c", &[found("gone.rs", 2, "m")], &[], &hunks);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].change, got[0].hunk_id.as_deref()),
        (DiagnosticChange::Fixed, Some("gone.rs:0"))
    );
    // The positive control: the same diagnostic on both sides of an untouched file is nothing.
    let same = [found("other.rs", 3, "m")];
    assert_eq!(classify("c", &same, &same, &hunks), vec![]);
}

#[test]
fn on_added_lines_keeps_only_what_falls_on_a_line_the_run_wrote() {
    let old = text(&numbered(20));
    let mut new = numbered(20);
    new[9] = "bad ten".into(); // line 10, rewritten
    new.insert(15, "bad added".into()); // line 16, new
    let new = text(&new);
    let hunks = hunks_of("a.rs", &old, &new);
    let found = vec![
        found("a.rs", 10, "bad ten"),
        found("a.rs", 12, "on context"),
        found("a.rs", 16, "bad added"),
        found("b.rs", 10, "other file"),
    ];
    let kept: Vec<usize> = on_added_lines(&found, &hunks)
        .iter()
        .map(|f| f.line)
        .collect();
    assert_eq!(kept, vec![10, 16]);
    assert!(
        on_added_lines(&found, &[]).is_empty(),
        "no change, nothing of the run's"
    );
}

proptest! {
    /// Whatever the edit, the new diagnostics are exactly the run's `bad` lines that the diff
    /// adds, each on the hunk that adds it, and the fixed ones exactly the base's `bad` lines
    /// that it removes, each on the hunk that removes it.
    #[test]
    fn new_and_fixed_follow_the_diff(
        old in proptest::collection::vec(prop_oneof!["[a-c]", "bad[a-c]"], 0..40),
        new in proptest::collection::vec(prop_oneof!["[a-c]", "bad[a-c]"], 0..40),
    ) {
        let (old, new) = (text(&old), text(&new));
        let hunks = hunks_of("f", &old, &new);
        let got = classify("toy", &toy_check("f", &old), &toy_check("f", &new), &hunks);
        let mut added = Vec::new();
        let mut removed = Vec::new();
        for h in &hunks {
            let p = h.patch.as_ref().unwrap();
            let (mut o, mut n) = (p.old_start, p.new_start);
            for l in &p.lines {
                match l {
                    HunkLine::Context(_) => { o += 1; n += 1; }
                    HunkLine::Add(t) => {
                        if t.starts_with("bad") { added.push((n, h.id.clone())); }
                        n += 1;
                    }
                    HunkLine::Remove(t) => {
                        if t.starts_with("bad") { removed.push((o, h.id.clone())); }
                        o += 1;
                    }
                }
            }
        }
        let pick = |c: DiagnosticChange| -> Vec<(usize, String)> {
            let mut v: Vec<(usize, String)> = got
                .iter()
                .filter(|d| d.change == c)
                .map(|d| (d.line, d.hunk_id.clone().expect("on a hunk")))
                .collect();
            v.sort();
            v
        };
        added.sort();
        removed.sort();
        prop_assert_eq!(pick(DiagnosticChange::New), added);
        prop_assert_eq!(pick(DiagnosticChange::Fixed), removed);
    }
}

//! Property tests of hunk sizing: the parts a hunk is cut into apply on their own, in any
//! subset and any order, and all of them give the new text.

mod common;

use common::{apply_in_order, case, pick, subset_and_order};
use hunkgate_patch::{apply_all, diff_hunks, fit_hunk, Hunk, HunkLine, Limits, Part};
use proptest::prelude::*;

/// Every part of every hunk of the diff, cut to `limits`.
fn parts(old: &str, new: &str, context: usize, limits: Limits) -> Vec<Part> {
    diff_hunks(old, new, context)
        .into_iter()
        .flat_map(|h| fit_hunk(h, context, limits))
        .collect()
}

fn limits() -> impl Strategy<Value = Limits> {
    (1usize..40, 1usize..400).prop_map(|(lines, bytes)| Limits { lines, bytes })
}

/// Texts whose changes are long runs with blank lines, between runs of 0 to 4 unchanged lines,
/// so that one change is often over the limits and the cuts at blank lines are exercised. The
/// old side's blank lines hold a space, so that they are not the new side's (which would make
/// them unchanged lines, edit boundaries).
fn blocky() -> impl Strategy<Value = (String, String)> {
    let line = prop_oneof![
        3 => (0u32..1000).prop_map(|i| format!("text {i}\n")),
        1 => Just("\n".to_owned()),
    ];
    let run = proptest::collection::vec(line, 0..30);
    let block = (run.clone(), run, 0usize..5);
    proptest::collection::vec(block, 1..8).prop_map(|blocks| {
        let (mut old, mut new) = (String::new(), String::new());
        for (i, (gone, came, same)) in blocks.into_iter().enumerate() {
            for j in 0..same {
                let line = format!("same {i} {j}\n");
                old.push_str(&line);
                new.push_str(&line);
            }
            old.extend(gone.iter().map(|l| match l.as_str() {
                "\n" => " \n".to_owned(),
                _ => format!("old {l}"),
            }));
            new.extend(came);
        }
        (old, new)
    })
}

/// What the parts promise, whatever the texts: each part fits unless marked, its header
/// agrees with its body, the parts start at strictly increasing old lines, and any subset in
/// any order applies (offsets from the parts applied above, as the hub computes them) to the
/// same text as that subset in file order; all of them give `new`.
fn check(
    old: &str,
    new: &str,
    parts: &[Part],
    limits: Limits,
    mask: &[bool],
    keys: &[u32],
) -> Result<(), TestCaseError> {
    for p in parts {
        prop_assert!(
            p.oversized || limits.fits(&p.hunk),
            "{}",
            p.hunk.to_unified()
        );
        prop_assert_eq!(p.hunk.old_lines().len(), p.hunk.old_len);
        prop_assert_eq!(p.hunk.new_lines().len(), p.hunk.new_len);
        prop_assert!(p.hunk.added() + p.hunk.removed() > 0);
    }
    let hunks: Vec<Hunk> = parts.iter().map(|p| p.hunk.clone()).collect();
    for pair in hunks.windows(2) {
        prop_assert!(
            pair[0].old_start < pair[1].old_start,
            "{}{}",
            pair[0].to_unified(),
            pair[1].to_unified()
        );
    }
    let (chosen, order) = pick(hunks.len(), mask, keys);
    let in_file_order: Vec<Hunk> = chosen.iter().map(|&i| hunks[i].clone()).collect();
    let reference = apply_all(old, &in_file_order);
    prop_assert!(reference.is_ok(), "{:?}", reference);
    prop_assert_eq!(apply_in_order(old, &hunks, &order), reference);
    let mut all: Vec<usize> = (0..hunks.len()).collect();
    all.sort_by_key(|&i| (keys[i % keys.len()], i));
    prop_assert_eq!(apply_in_order(old, &hunks, &all), Ok(new.to_owned()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Edits scattered over a text (CRLF lines, missing final newlines, repeated lines).
    #[test]
    fn parts_apply_in_any_subset_and_order(
        c in case(true),
        context in 1usize..5,
        limits in limits(),
        (mask, keys) in subset_and_order(),
    ) {
        let parts = parts(&c.old, &c.new, context, limits);
        check(&c.old, &c.new, &parts, limits, &mask, &keys)?;
    }

    /// Long changed runs with blank lines: cut inside a change as well.
    #[test]
    fn changes_cut_at_blank_lines_apply_in_any_subset_and_order(
        (old, new) in blocky(),
        context in 1usize..5,
        limits in limits(),
        (mask, keys) in subset_and_order(),
    ) {
        let parts = parts(&old, &new, context, limits);
        check(&old, &new, &parts, limits, &mask, &keys)?;
    }

    /// Sizing changes nothing of a hunk within the limits, and cuts only what is over them.
    #[test]
    fn hunks_within_the_limits_are_left_alone(c in case(true), context in 0usize..5, limits in limits()) {
        for hunk in diff_hunks(&c.old, &c.new, context) {
            let parts = fit_hunk(hunk.clone(), context, limits);
            if limits.fits(&hunk) {
                prop_assert_eq!(parts, vec![Part { hunk, oversized: false }]);
            } else {
                // Together the parts show every change of the hunk, once.
                let changes = |lines: &[HunkLine]| lines.iter().filter(|l| !matches!(l, HunkLine::Context(_))).cloned().collect::<Vec<_>>();
                let shown: Vec<HunkLine> = parts.iter().flat_map(|p| changes(&p.hunk.lines)).collect();
                let mut whole = changes(&hunk.lines);
                let mut shown_sorted = shown.clone();
                whole.sort_by(|a, b| a.text().cmp(b.text()));
                shown_sorted.sort_by(|a, b| a.text().cmp(b.text()));
                prop_assert_eq!(shown_sorted, whole);
            }
        }
    }
}

/// The property's generators do make cuts of both kinds and oversized parts: without that the
/// properties above would hold of a `fit_hunk` that never cuts.
#[test]
fn generated_cases_exercise_every_kind_of_cut() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut cut, mut oversized, mut inside) = (0, 0, 0);
    for _ in 0..300 {
        let (old, new) = blocky().new_tree(&mut runner).unwrap().current();
        let limits = Limits {
            lines: 12,
            bytes: 8192,
        };
        for hunk in diff_hunks(&old, &new, 3) {
            let parts = fit_hunk(hunk, 3, limits);
            cut += usize::from(parts.len() > 1);
            oversized += parts.iter().filter(|p| p.oversized).count();
            // A part that starts with a change below the file's first line was cut inside
            // a change: a part cut at an edit boundary keeps context there.
            inside += parts
                .iter()
                .filter(|p| {
                    p.hunk.old_start > 1
                        && !matches!(p.hunk.lines.first(), Some(HunkLine::Context(_)))
                })
                .count();
        }
    }
    assert!(
        cut > 0 && oversized > 0 && inside > 0,
        "cut {cut}, oversized {oversized}, inside {inside}"
    );
}

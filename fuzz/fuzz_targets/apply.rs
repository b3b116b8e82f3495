//! The applier. Two properties:
//! - arbitrary hunks (parsed from arbitrary text) applied to arbitrary text at an arbitrary
//!   offset never panic, and a hunk that applies puts exactly its new lines where its old lines
//!   were;
//! - the crate's own diff applies back exactly: `apply_all(old, diff_hunks(old, new))` is `new`,
//!   the reversed hunks take `new` back to `old`, and accepting any subset of the hunks one by
//!   one, in any order, with the offsets the hub uses (the deltas of the applied hunks above),
//!   gives the same text as applying that subset in order.
#![no_main]

use arbitrary::Arbitrary;
use hunkgate_patch::{apply_all, apply_hunk, diff_hunks, parse_hunks, split_lines, Hunk};
use libfuzzer_sys::fuzz_target;

/// A text: raw, or lines drawn from a small alphabet (with CRLF, blank and repeated lines), so
/// that diffs have several hunks and contexts repeat the way real code does.
#[derive(Arbitrary, Debug)]
enum Text {
    Raw(String),
    Lines(Vec<u8>, bool),
}

impl Text {
    fn render(&self) -> String {
        const ALPHABET: [&str; 8] = ["a\n", "b\n", "c\n", "a\r\n", "\n", "}\n", "x\r\n", "{\n"];
        match self {
            Text::Raw(s) => s.clone(),
            Text::Lines(picks, unterminated) => {
                let mut s: String = picks
                    .iter()
                    .map(|&b| ALPHABET[usize::from(b % 8)])
                    .collect();
                if *unterminated {
                    s.pop();
                }
                s
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    old: Text,
    new: Text,
    context: u8,
    offset: i64,
    /// For the subset/order property: bit i picks hunk i; the order is a rotation plus reversal.
    pick: u64,
    rotate: u8,
    reverse_order: bool,
    /// Arbitrary diff text for the "no panic on anything" half.
    diff: String,
}

fuzz_target!(|input: Input| {
    let (old, new) = (input.old.render(), input.new.render());
    let (old, new) = (old.as_str(), new.as_str());

    if let Ok(hunks) = parse_hunks(&input.diff) {
        let _ = apply_all(old, &hunks);
        for h in &hunks {
            let offset = input.offset as isize;
            if let Ok(applied) = apply_hunk(old, h, offset) {
                check_applied(old, h, &applied.text, applied.at);
            }
        }
    }

    let context = usize::from(input.context % 8);
    let hunks = diff_hunks(old, new, context);
    assert_eq!(hunks.is_empty(), old == new);
    for h in &hunks {
        assert_eq!(
            parse_hunks(&h.to_unified()).as_deref(),
            Ok(std::slice::from_ref(h))
        );
    }
    assert_eq!(
        apply_all(old, &hunks).as_deref(),
        Ok(new),
        "hunks: {hunks:?}"
    );
    let back: Vec<Hunk> = hunks.iter().map(Hunk::reversed).collect();
    assert_eq!(
        apply_all(new, &back).as_deref(),
        Ok(old),
        "reversed: {back:?}"
    );

    // The hub accepts hunks one at a time, in the reviewer's order; each one's offset is the
    // sum of the deltas of the already-applied hunks above it (Hub::offset_for).
    let mut chosen: Vec<usize> = (0..hunks.len().min(64))
        .filter(|i| input.pick >> i & 1 == 1)
        .collect();
    if !chosen.is_empty() {
        let r = usize::from(input.rotate) % chosen.len();
        chosen.rotate_left(r);
    }
    if input.reverse_order {
        chosen.reverse();
    }
    let mut text = old.to_owned();
    let mut applied: Vec<usize> = Vec::new();
    for &i in &chosen {
        let offset: isize = applied
            .iter()
            .filter(|&&j| hunks[j].old_start < hunks[i].old_start)
            .map(|&j| hunks[j].delta())
            .sum();
        let a = apply_hunk(&text, &hunks[i], offset)
            .unwrap_or_else(|e| panic!("hunk {i} of {hunks:?} after {applied:?}: {e}"));
        check_applied(&text, &hunks[i], &a.text, a.at);
        text = a.text;
        applied.push(i);
    }
    let mut in_order = chosen.clone();
    in_order.sort_unstable();
    let subset: Vec<Hunk> = in_order.iter().map(|&i| hunks[i].clone()).collect();
    assert_eq!(apply_all(old, &subset).as_deref(), Ok(text.as_str()));
});

/// `after` is `before` with the hunk's old lines at line `at` replaced by its new lines.
fn check_applied(before: &str, h: &Hunk, after: &str, at: usize) {
    let lines = split_lines(before);
    let old = h.old_lines();
    assert!(at + old.len() <= lines.len());
    assert_eq!(lines[at..at + old.len()], old[..]);
    let expected: String = lines[..at]
        .iter()
        .copied()
        .chain(h.new_lines())
        .chain(lines[at + old.len()..].iter().copied())
        .collect();
    assert_eq!(after, expected);
    // Every line stays whole: only the text's last line may lack a terminator.
    let out = split_lines(after);
    if let Some((_, init)) = out.split_last() {
        assert!(init.iter().all(|l| l.ends_with('\n')));
    }
}

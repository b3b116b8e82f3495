//! Property tests: the diff, print, parse and apply functions agree with each other on
//! generated texts that include CRLF lines and missing final newlines.

mod common;

use common::{apply_in_order, case, pick, subset_and_order};
use hunkgate_patch::{
    apply_all, diff_hunks, line_ending, parse_hunks, split_lines, Hunk, ParseError,
};
use proptest::prelude::*;

fn unified(hunks: &[Hunk]) -> String {
    hunks.iter().map(Hunk::to_unified).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// (a) Applying all hunks of a diff to the old text gives the new text.
    #[test]
    fn diff_then_apply_gives_new(c in case(true), context in 0usize..5) {
        let hunks = diff_hunks(&c.old, &c.new, context);
        prop_assert_eq!(apply_all(&c.old, &hunks), Ok(c.new.clone()));
        prop_assert_eq!(hunks.is_empty(), c.old == c.new);
    }

    /// (b) Printing hunks and parsing the text back gives the same hunks.
    #[test]
    fn unified_text_round_trips(c in case(true), context in 0usize..5) {
        let hunks = diff_hunks(&c.old, &c.new, context);
        let text = unified(&hunks);
        if hunks.is_empty() {
            prop_assert_eq!(parse_hunks(&text), Err(ParseError::NoHunks { line: 0 }));
        } else {
            prop_assert_eq!(parse_hunks(&text), Ok(hunks.clone()));
            // With git's file header in front, too.
            let with_header = format!("diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n{text}");
            prop_assert_eq!(parse_hunks(&with_header), Ok(hunks));
        }
    }

    /// (c) Applying the reversed hunks to the new text gives the old text back.
    #[test]
    fn reversed_hunks_undo(c in case(true), context in 0usize..5) {
        let hunks = diff_hunks(&c.old, &c.new, context);
        let reversed: Vec<Hunk> = hunks.iter().map(Hunk::reversed).collect();
        prop_assert_eq!(apply_all(&c.new, &reversed), Ok(c.old.clone()));
        // Reversing the diff is the same as diffing the other way round, as far as applying goes.
        let back = diff_hunks(&c.new, &c.old, context);
        prop_assert_eq!(apply_all(&c.new, &back), Ok(c.old.clone()));
    }

    /// (d) Any subset of the hunks, applied in any order with offsets from the hunks already
    /// applied above, gives the same bytes as that subset applied in file order.
    #[test]
    fn any_subset_in_any_order_matches_file_order(
        c in case(false),
        context in 0usize..5,
        (mask, keys) in subset_and_order(),
    ) {
        let hunks = diff_hunks(&c.old, &c.new, context);
        let (chosen, order) = pick(hunks.len(), &mask, &keys);
        let in_file_order: Vec<Hunk> = chosen.iter().map(|&i| hunks[i].clone()).collect();
        let reference = apply_all(&c.old, &in_file_order);
        prop_assert!(reference.is_ok(), "{:?}", reference);
        prop_assert_eq!(apply_in_order(&c.old, &hunks, &order), reference);
        // And all of them, in any order, give the new text.
        let all: Vec<usize> = {
            let mut all: Vec<usize> = (0..hunks.len()).collect();
            all.sort_by_key(|&i| (keys[i % keys.len()], i));
            all
        };
        prop_assert_eq!(apply_in_order(&c.old, &hunks, &all), Ok(c.new.clone()));
    }

    /// Hunks are in file order, separated by at least one line no hunk shows, and each header
    /// agrees with its body; this is what lets a client apply them independently.
    #[test]
    fn hunks_are_ordered_disjoint_and_consistent(c in case(true), context in 0usize..5) {
        let hunks = diff_hunks(&c.old, &c.new, context);
        for h in &hunks {
            prop_assert_eq!(h.old_lines().len(), h.old_len);
            prop_assert_eq!(h.new_lines().len(), h.new_len);
            prop_assert!(h.added() + h.removed() > 0);
            prop_assert_eq!(h.delta(), h.added() as isize - h.removed() as isize);
        }
        for pair in hunks.windows(2) {
            // 0-based: where the first hunk's old lines end and the second's begin.
            let old_end = if pair[0].old_len == 0 { pair[0].old_start } else { pair[0].old_start - 1 + pair[0].old_len };
            let next_begin = if pair[1].old_len == 0 { pair[1].old_start } else { pair[1].old_start - 1 };
            prop_assert!(next_begin > old_end, "{}", unified(&hunks));
        }
    }

    /// Converting a diff's line endings to the file's own is harmless for single-ending files.
    #[test]
    fn line_ending_conversion_is_idempotent_on_uniform_files(c in case(true)) {
        let ending = line_ending(&c.old);
        let uniform: String = split_lines(&c.old)
            .iter()
            .map(|l| match l.strip_suffix('\n') {
                Some(body) => format!("{}{ending}", body.strip_suffix('\r').unwrap_or(body)),
                None => (*l).to_owned(),
            })
            .collect();
        let new_uniform: String = split_lines(&c.new)
            .iter()
            .map(|l| match l.strip_suffix('\n') {
                Some(body) => format!("{}{ending}", body.strip_suffix('\r').unwrap_or(body)),
                None => (*l).to_owned(),
            })
            .collect();
        let hunks = diff_hunks(&uniform, &new_uniform, 3);
        let converted: Vec<Hunk> = hunks.iter().map(|h| h.with_line_ending(ending)).collect();
        prop_assert_eq!(&converted, &hunks);
        prop_assert_eq!(apply_all(&uniform, &converted), Ok(new_uniform));
    }

    /// split_lines gives the input back and ends lines only at "\n".
    #[test]
    fn split_lines_round_trips(s in "[a\r\n]{0,20}") {
        let lines = split_lines(&s);
        prop_assert_eq!(lines.concat(), s.clone());
        for (i, l) in lines.iter().enumerate() {
            prop_assert!(!l.is_empty());
            let last = i + 1 == lines.len();
            prop_assert_eq!(l.ends_with('\n'), !last || s.ends_with('\n'));
            prop_assert_eq!(l.matches('\n').count(), usize::from(l.ends_with('\n')));
        }
    }
}

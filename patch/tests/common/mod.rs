//! Generators shared by the property tests and the comparison with git.
//!
//! A case is an old text plus a new text made from it by random line edits, so diffs have the
//! shape real edits have (several hunks separated by unchanged runs) rather than being two
//! unrelated texts that differ everywhere.

#![allow(dead_code)] // each test binary uses a different part of this module

use proptest::collection::vec;
use proptest::prelude::*;

/// Lines that may occur many times in a file, to exercise positions that only offsets make
/// unambiguous. The empty string becomes a blank line once a terminator is added.
const REPEATED: &[&str] = &["a", "b", "", "}", "    return x;", "a "];

#[derive(Clone, Debug)]
pub enum Tok {
    /// A line that occurs nowhere else in either text.
    Fresh,
    /// `REPEATED[i]`.
    Repeated(usize),
}

#[derive(Clone, Debug)]
pub enum Edit {
    Keep,
    Delete,
    Replace(Tok, &'static str),
    InsertBefore(Tok, &'static str),
}

/// How the last line of a text ends.
#[derive(Clone, Copy, Debug)]
pub enum Final {
    Terminated,
    /// Drop the final "\n" only, so a CRLF last line keeps its "\r".
    NoLf,
    /// Drop the whole final terminator.
    NoTerminator,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub old: String,
    pub new: String,
}

fn ending() -> impl Strategy<Value = &'static str> {
    prop_oneof![3 => Just("\n"), 1 => Just("\r\n")]
}

fn tok(repeats: bool) -> BoxedStrategy<Tok> {
    if repeats {
        prop_oneof![
            2 => Just(Tok::Fresh),
            1 => (0..REPEATED.len()).prop_map(Tok::Repeated),
        ]
        .boxed()
    } else {
        Just(Tok::Fresh).boxed()
    }
}

fn edit(repeats: bool, keep_weight: u32) -> impl Strategy<Value = Edit> {
    prop_oneof![
        keep_weight => Just(Edit::Keep),
        1 => Just(Edit::Delete),
        1 => (tok(repeats), ending()).prop_map(|(t, e)| Edit::Replace(t, e)),
        1 => (tok(repeats), ending()).prop_map(|(t, e)| Edit::InsertBefore(t, e)),
    ]
}

fn final_kind() -> impl Strategy<Value = Final> {
    prop_oneof![
        3 => Just(Final::Terminated),
        1 => Just(Final::NoLf),
        1 => Just(Final::NoTerminator),
    ]
}

const MAX_LINES: usize = 80;

/// Old/new pairs. With `repeats` false every line of both texts is unique, so each hunk's old
/// lines occur exactly once in the old text.
pub fn case(repeats: bool) -> impl Strategy<Value = Case> {
    // The density of edits varies per case: dense cases make big merged hunks, sparse ones make
    // many small hunks and exercise grouping.
    prop_oneof![Just(2u32), Just(10u32), Just(40u32)].prop_flat_map(move |keep_weight| {
        (
            vec((tok(repeats), ending()), 0..MAX_LINES),
            vec(edit(repeats, keep_weight), MAX_LINES),
            vec((tok(repeats), ending()), 0..3),
            final_kind(),
            final_kind(),
        )
            .prop_map(|(old_toks, edits, appended, old_final, new_final)| {
                let mut fresh = 0usize;
                let mut render = |t: &Tok, e: &str| match t {
                    Tok::Fresh => {
                        fresh += 1;
                        format!("new {fresh}{e}")
                    }
                    Tok::Repeated(i) => format!("{}{e}", REPEATED[*i]),
                };
                let old_lines: Vec<String> = old_toks
                    .iter()
                    .enumerate()
                    .map(|(i, (t, e))| match t {
                        Tok::Fresh => format!("line {i}{e}"),
                        Tok::Repeated(r) => format!("{}{e}", REPEATED[*r]),
                    })
                    .collect();
                let mut new_lines = Vec::new();
                for (line, edit) in old_lines.iter().zip(&edits) {
                    match edit {
                        Edit::Keep => new_lines.push(line.clone()),
                        Edit::Delete => {}
                        Edit::Replace(t, e) => new_lines.push(render(t, e)),
                        Edit::InsertBefore(t, e) => {
                            new_lines.push(render(t, e));
                            new_lines.push(line.clone());
                        }
                    }
                }
                for (t, e) in &appended {
                    new_lines.push(render(t, e));
                }
                Case {
                    old: finish(old_lines.concat(), old_final),
                    new: finish(new_lines.concat(), new_final),
                }
            })
    })
}

fn finish(mut text: String, kind: Final) -> String {
    match kind {
        Final::Terminated => {}
        Final::NoLf => {
            if text.ends_with('\n') {
                text.pop();
            }
        }
        Final::NoTerminator => {
            if text.ends_with("\r\n") {
                text.truncate(text.len() - 2);
            } else if text.ends_with('\n') {
                text.pop();
            }
        }
    }
    text
}

/// Random keys used to pick a subset of hunks (bit set) and an order (sort by key).
pub fn subset_and_order() -> impl Strategy<Value = (Vec<bool>, Vec<u32>)> {
    (vec(any::<bool>(), 64), vec(any::<u32>(), 64))
}

/// Indexes of the chosen hunks (in file order) and the same indexes in application order.
pub fn pick(n: usize, mask: &[bool], keys: &[u32]) -> (Vec<usize>, Vec<usize>) {
    let chosen: Vec<usize> = (0..n).filter(|&i| mask[i % mask.len()]).collect();
    let mut order = chosen.clone();
    order.sort_by_key(|&i| (keys[i % keys.len()], i));
    (chosen, order)
}

/// Apply `order` (indexes into `hunks`) one by one, as a client accepting hunks in whatever
/// order the user clicks them would: each hunk's offset is the total delta of the already
/// applied hunks that sit above it.
pub fn apply_in_order(
    old: &str,
    hunks: &[hunkgate_patch::Hunk],
    order: &[usize],
) -> Result<String, hunkgate_patch::ApplyError> {
    let mut text = old.to_owned();
    let mut applied: Vec<usize> = Vec::new();
    for &i in order {
        let offset: isize = applied
            .iter()
            .filter(|&&j| hunks[j].old_start < hunks[i].old_start)
            .map(|&j| hunks[j].delta())
            .sum();
        text = hunkgate_patch::apply_hunk(&text, &hunks[i], offset)?.text;
        applied.push(i);
    }
    Ok(text)
}

//! The unified-diff parser: arbitrary text never panics, and whatever parses prints and parses
//! back to the same hunks (parse -> print -> parse is the identity), byte-identical on reprint.
//! Every parsed hunk also applies to its own old side, whatever the offset, giving its new side.
#![no_main]

use hunkgate_patch::{apply_all, apply_hunk, parse_file_header, parse_hunks, Hunk, HunkLine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Every diff the hub sees arrived as a JSON string, so it is UTF-8.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_file_header(text);
    let Ok(hunks) = parse_hunks(text) else {
        return;
    };
    for h in &hunks {
        check_well_formed(h);
    }
    let printed: String = hunks.iter().map(Hunk::to_unified).collect();
    let again = parse_hunks(&printed).unwrap_or_else(|e| {
        panic!("printed hunks do not parse: {e}\ninput: {text:?}\nprinted: {printed:?}")
    });
    assert_eq!(
        again, hunks,
        "parse -> print -> parse changed the hunks; printed: {printed:?}"
    );
    let reprinted: String = again.iter().map(Hunk::to_unified).collect();
    assert_eq!(reprinted, printed);
    // One hunk at a time too: that is how the hub stores and shows them.
    for h in &hunks {
        assert_eq!(
            parse_hunks(&h.to_unified()).as_deref(),
            Ok(std::slice::from_ref(h))
        );
    }
    for h in &hunks {
        applies_to_its_own_old_side(h);
    }
    // Reversing swaps the sides exactly (twice gives the same sides back; the body may be put
    // in git's removals-first order, which a hand-typed hunk need not follow), and a reversed
    // hunk prints and parses like any other.
    for h in &hunks {
        let r = h.reversed();
        assert_eq!(
            (r.old_lines(), r.new_lines()),
            (h.new_lines(), h.old_lines())
        );
        assert_eq!(
            (r.old_start, r.old_len, r.new_start, r.new_len),
            (h.new_start, h.new_len, h.old_start, h.old_len)
        );
        let rr = r.reversed();
        assert_eq!(
            (rr.old_lines(), rr.new_lines()),
            (h.old_lines(), h.new_lines())
        );
        assert_eq!(rr.reversed(), r);
        assert_eq!(parse_hunks(&r.to_unified()), Ok(vec![r]));
    }
});

/// The text made of the hunk's old lines turns into its new lines: at the expected place when
/// the offset points there, else found by the search (it is the only place), never a panic.
fn applies_to_its_own_old_side(h: &Hunk) {
    let old: String = h.old_lines().concat();
    let new: String = h.new_lines().concat();
    for offset in [0, -1, 1, isize::MIN, isize::MAX] {
        let result = apply_hunk(&old, h, offset);
        if !old.is_empty() {
            let applied =
                result.unwrap_or_else(|e| panic!("{h:?} on its old side, offset {offset}: {e}"));
            assert_eq!((applied.at, applied.text.as_str()), (0, new.as_str()));
        }
    }
    let result = apply_all(&old, std::slice::from_ref(h));
    if !old.is_empty() {
        assert_eq!(result.as_deref(), Ok(new.as_str()));
    }
}

/// What the parser promises about every hunk it returns: counts match the body, and only a
/// side's last line may lack its "\n".
fn check_well_formed(h: &Hunk) {
    let old = h.old_lines();
    let new = h.new_lines();
    assert_eq!(old.len(), h.old_len);
    assert_eq!(new.len(), h.new_len);
    for side in [&old, &new] {
        if let Some((_, init)) = side.split_last() {
            assert!(
                init.iter().all(|l| l.ends_with('\n')),
                "unterminated line inside a side: {h:?}"
            );
        }
    }
    assert!(
        h.lines.iter().all(|l| match l {
            HunkLine::Context(t) | HunkLine::Remove(t) | HunkLine::Add(t) =>
                !t.strip_suffix('\n').unwrap_or(t).contains('\n'),
        }),
        "a body line holds a newline before its end: {h:?}"
    );
    assert!(
        h.lines.iter().all(|l| !l.text().is_empty()),
        "an empty line without newline: {h:?}"
    );
    assert!(h.old_start != 0 || h.old_len == 0);
    assert!(h.new_start != 0 || h.new_len == 0);
}

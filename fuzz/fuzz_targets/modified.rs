//! `modified_diff` validation: what the hub does with a user-typed diff for one hunk (`modify`).
//!
//! The hub (server/src/decide/review.rs `parse_modified`) reads the file header, requires any
//! path it names to be the hunk's own file, parses the text and requires exactly one hunk
//! (`hunkgate_patch::parse_one_hunk`); then (decide/apply.rs `plan_forward`) it adopts CRLF when
//! a hand-typed LF hunk lands on CRLF lines (`hunkgate_patch::adopt_line_endings`), and applies
//! it with exact context. This target runs those same functions on an original text and one of
//! the agent's hunks, with the user's text derived from that hunk or typed by the fuzzer.
//!
//! Properties: no panic; an accepted modification puts exactly its new lines in place of its
//! old lines, and undoing it (the reversed hunk at the same place) gives the original back byte
//! for byte; the agent's own hunk, retyped with LF endings, lands where the agent's hunk lands
//! and produces the same text when the file's lines there are CRLF.
#![no_main]

use arbitrary::Arbitrary;
use hunkgate_patch::{
    adopt_line_endings, apply_hunk, diff_hunks, parse_one_hunk, split_lines, Hunk,
};
use libfuzzer_sys::fuzz_target;

const FILE: &str = "src/main.rs";

#[derive(Arbitrary, Debug)]
enum Header {
    None,
    /// `--- a/FILE` / `+++ b/FILE`, as `git diff` prints them.
    Own,
    /// Headers naming some other path (must be refused).
    Other(String),
}

#[derive(Arbitrary, Debug)]
enum Typed {
    /// Exactly the agent's hunk, as shown to the user.
    Agent,
    /// The agent's hunk with CRs removed: what a user retypes in an LF editor.
    AgentLf,
    /// The agent's hunk text with bytes of the fuzzer's spliced in at a position.
    Spliced(u16, String),
    /// Anything at all.
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    base: Vec<u8>,
    agent: Vec<u8>,
    unterminated: bool,
    crlf: bool,
    pick: u8,
    header: Header,
    typed: Typed,
    offset: i8,
}

fn render(picks: &[u8], crlf: bool, unterminated: bool) -> String {
    const ALPHABET: [&str; 8] = [
        "fn a() {",
        "}",
        "",
        "    x += 1;",
        "    y",
        "b",
        "a",
        "// c",
    ];
    let end = if crlf { "\r\n" } else { "\n" };
    let mut s = String::new();
    for &b in picks {
        s.push_str(ALPHABET[usize::from(b % 8)]);
        // A mixed-ending file when the pick's high bit says so.
        s.push_str(if b & 0x80 != 0 && crlf { "\n" } else { end });
    }
    if unterminated {
        while s.ends_with(['\n', '\r']) {
            s.pop();
        }
    }
    s
}

fuzz_target!(|input: Input| {
    let base = render(&input.base, input.crlf, input.unterminated);
    let agent_new = render(&input.agent, input.crlf, input.unterminated);
    let hunks = diff_hunks(&base, &agent_new, 3);
    if hunks.is_empty() {
        return;
    }
    let rec = &hunks[usize::from(input.pick) % hunks.len()];
    // The agent's hunks apply in any order; this one's offset is 0 because none above is applied.
    let agent_applied =
        apply_hunk(&base, rec, 0).expect("the agent's own hunk applies to its base");

    let body = match &input.typed {
        Typed::Agent => rec.to_unified(),
        Typed::AgentLf => rec.to_unified().replace("\r\n", "\n"),
        Typed::Spliced(at, s) => {
            let mut t = rec.to_unified();
            let mut at = usize::from(*at) % (t.len() + 1);
            while !t.is_char_boundary(at) {
                at -= 1;
            }
            t.insert_str(at, s);
            t
        }
        Typed::Raw(s) => s.clone(),
    };
    let text = match &input.header {
        Header::None => body,
        Header::Own => format!("diff --git a/{FILE} b/{FILE}\n--- a/{FILE}\n+++ b/{FILE}\n{body}"),
        Header::Other(p) => format!("--- a/{p}\n+++ b/{p}\n{body}"),
    };

    let Some(h) = validate(&text) else {
        return;
    };
    if matches!(input.typed, Typed::Agent) {
        assert!(matches!(input.header, Header::None | Header::Own) || h == *rec);
    }

    let offset = isize::from(input.offset);
    let Ok(h) = adapt_endings(&h, &base, offset) else {
        return;
    };
    let Ok(applied) = apply_hunk(&base, &h, offset) else {
        return;
    };
    check_applied(&base, &h, &applied.text, applied.at);
    // The retyped hunk must land where the agent's did, with the same result, whenever the
    // hunk's own lines have no CRLF, or all end in CRLF and at least one of its old lines does
    // (the hub adopts CRLF only from the lines the hunk replaces; otherwise adopting it rightly
    // changes the added lines, keeping LF is right, or the hub refuses to guess).
    let uniform = |crlf: bool| {
        rec.lines
            .iter()
            .map(|l| l.text())
            .filter(|t| t.ends_with('\n'))
            .all(|t| t.ends_with("\r\n") == crlf)
    };
    let same_as_agent = match input.typed {
        Typed::Agent => true,
        Typed::AgentLf => {
            uniform(false) || (uniform(true) && rec.old_lines().iter().any(|l| l.ends_with('\n')))
        }
        _ => false,
    };
    if same_as_agent && offset == 0 {
        assert_eq!(
            applied.at, agent_applied.at,
            "the retyped hunk landed elsewhere"
        );
        assert_eq!(
            applied.text, agent_applied.text,
            "the retyped hunk changed the file differently"
        );
    }

    // Undo: the reversed hunk at the place it landed gives the original back exactly.
    let rev = h.reversed();
    let nominal = if rev.old_lines().is_empty() {
        rev.old_start
    } else {
        rev.old_start.saturating_sub(1)
    };
    let Some(undo_offset) = (applied.at as isize).checked_sub_unsigned(nominal) else {
        return;
    };
    let undone = apply_hunk(&applied.text, &rev, undo_offset)
        .unwrap_or_else(|e| panic!("undo failed: {e}; applied {h:?} at {}", applied.at));
    assert_eq!(undone.at, applied.at);
    assert_eq!(undone.text, base);
});

/// The hub's `parse_modified` after its kind check: the patch crate's `parse_one_hunk`.
fn validate(text: &str) -> Option<Hunk> {
    if text.trim().is_empty() {
        return None;
    }
    parse_one_hunk(text, FILE).ok()
}

/// The hub's `adapt_endings` for a user-typed hunk: the patch crate's `adopt_line_endings`.
fn adapt_endings(h: &Hunk, text: &str, offset: isize) -> Result<Hunk, ()> {
    adopt_line_endings(h, text, offset).map_err(|_| ())
}

fn check_applied(before: &str, h: &Hunk, after: &str, at: usize) {
    let lines = split_lines(before);
    let old = h.old_lines();
    assert_eq!(lines[at..at + old.len()], old[..]);
    let expected: String = lines[..at]
        .iter()
        .copied()
        .chain(h.new_lines())
        .chain(lines[at + old.len()..].iter().copied())
        .collect();
    assert_eq!(after, expected);
}

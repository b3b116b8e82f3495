//! Printing what came from the hub on a terminal: control characters shown, not obeyed.

use serde::Serialize;

/// Text that came from the hub (an agent's diff, description, output lines, file names) made
/// safe to print on a terminal: every control character is shown, not obeyed — `ESC` as `^[`,
/// other C0 controls as `^@`…`^_`, `DEL` as `^?`, C1 controls and Unicode bidi overrides as
/// `<U+009B>` — so an agent cannot move the cursor, erase lines, set the title or write the
/// clipboard. Newlines and tabs stay.
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\x00'..='\x1f' => {
                out.push('^');
                out.push((c as u8 + 0x40) as char);
            }
            '\x7f' => out.push_str("^?"),
            '\u{80}'..='\u{9f}'
            | '\u{200e}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{061c}' => out.push_str(&format!("<U+{:04X}>", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

/// [`visible`] for text that must stay on one line: newlines show as `^J` too.
pub fn visible_line(s: &str) -> String {
    visible(s).replace('\n', "^J")
}

/// The first 8 characters of an id, for one line.
pub fn short(id: &str) -> String {
    visible_line(&id.chars().take(8).collect::<String>())
}

/// How a wire enum (a state, a kind, a status) is spelled in JSON, e.g. `pending`.
pub fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => visible_line(&s),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{HunkState, RunState};

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(visible("a\x1b[2Jb\tc\n"), "a^[[2Jb\tc\n");
        assert_eq!(visible("\x07\x7f\u{9b}\u{202e}"), "^G^?<U+009B><U+202E>");
        assert_eq!(visible_line("two\nlines"), "two^Jlines");
        assert_eq!(short("0123456789abcdef"), "01234567");
        assert_eq!(short("\x1b]0;x"), "^[]0;x");
    }

    #[test]
    fn wire_names_are_the_json_spelling() {
        assert_eq!(wire(&HunkState::Pending), "pending");
        assert_eq!(wire(&RunState::WaitingForUser), "waiting_for_user");
    }
}

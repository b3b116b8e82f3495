//! Text helpers shared by every layer that shows agent text to people: one place, so every
//! view flattens and cuts text the same way.
//!
//! May import: `error` (whose `error_chain` it re-exports).

/// One printable line, at most `max` characters (agent text goes to status lines).
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    } else {
        flat
    }
}

pub use crate::error::error_chain;

/// At most `max` characters, control characters but newlines blanked, `…` when cut.
pub fn shorten(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .take(max)
        .collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// The first non-blank line, trimmed, at most 100 characters (`…` when cut).
pub fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut out: String = line.chars().take(100).collect();
    if line.chars().count() > 100 {
        out.push('…');
    }
    out
}

//! Line splitting and the small text heuristics the rest of the crate builds on.
//!
//! Every line keeps its own terminator. That single choice is what lets the crate handle CRLF
//! files and files without a final newline without special cases: `"a\r\n"`, `"a\n"` and `"a"`
//! are three different lines, exactly as git's diff machinery sees them, and joining lines back
//! together reproduces the input byte for byte.

/// How far into a file git looks for a NUL byte before calling it binary (`FIRST_FEW_BYTES` in
/// git's `xdiff-interface.c`); matching it means we call the same files binary that git does.
const BINARY_SNIFF_LEN: usize = 8000;

/// Split text into lines; each line keeps its terminator (`"\n"`, or `"\r\n"` as part of it).
///
/// The last line may lack a terminator. `""` gives no lines. Concatenating the result gives the
/// input back. Only `"\n"` ends a line: a lone `"\r"` is ordinary content, as it is for git.
pub fn split_lines(text: &str) -> Vec<&str> {
    // What `split_inclusive('\n')` gives, found with a SIMD search: a diff splits both sides
    // of every file it compares.
    let mut lines = Vec::with_capacity(text.len() / 32 + 1);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', text.as_bytes()) {
        // `end` is the index of an ASCII byte, so both cuts are on char boundaries.
        lines.push(&text[start..=end]);
        start = end + 1;
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// `true` when `bytes` is valid UTF-8 and has no NUL byte in its first 8000 bytes (git's
/// heuristic, plus UTF-8 because every text API of this crate works on `&str`).
pub fn is_text(bytes: &[u8]) -> bool {
    as_text(bytes).is_some()
}

/// `bytes` as text when [`is_text`] holds: checked as UTF-8 once, for a caller that goes on
/// to use the text.
pub fn as_text(bytes: &[u8]) -> Option<&str> {
    if nul_in_sniff(bytes) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// [`as_text`] of an owned buffer, which becomes the string without a copy.
pub fn into_text(bytes: Vec<u8>) -> Option<String> {
    if nul_in_sniff(&bytes) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// Whether git would call `bytes` binary: a NUL within its first 8000 bytes.
fn nul_in_sniff(bytes: &[u8]) -> bool {
    memchr::memchr(0, &bytes[..bytes.len().min(BINARY_SNIFF_LEN)]).is_some()
}

/// The file's dominant line ending: `"\r\n"` when more than half of the terminated lines use it,
/// else `"\n"` (so a file with no terminated line at all counts as LF).
pub fn line_ending(text: &str) -> &'static str {
    let mut terminated = 0usize;
    let mut crlf = 0usize;
    for line in split_lines(text) {
        if line.ends_with('\n') {
            terminated += 1;
            if line.ends_with("\r\n") {
                crlf += 1;
            }
        }
    }
    if crlf * 2 > terminated {
        "\r\n"
    } else {
        "\n"
    }
}

/// The line without its terminator (`"\n"` or `"\r\n"`), and the terminator itself.
pub(crate) fn split_terminator(line: &str) -> (&str, &str) {
    if let Some(body) = line.strip_suffix("\r\n") {
        (body, "\r\n")
    } else if let Some(body) = line.strip_suffix('\n') {
        (body, "\n")
    } else {
        (line, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_empty_is_no_lines() {
        assert!(split_lines("").is_empty());
    }

    #[test]
    fn split_keeps_terminators_and_round_trips() {
        let cases: &[(&str, &[&str])] = &[
            ("a\n", &["a\n"]),
            ("a", &["a"]),
            ("a\nb", &["a\n", "b"]),
            ("a\r\nb\r\n", &["a\r\n", "b\r\n"]),
            ("a\r\nb\nc", &["a\r\n", "b\n", "c"]),
            ("\n\n", &["\n", "\n"]),
            ("a\rb\n", &["a\rb\n"]),
            ("a\r", &["a\r"]),
        ];
        for (text, want) in cases {
            let got = split_lines(text);
            assert_eq!(&got, want, "splitting {text:?}");
            assert_eq!(got.concat(), *text);
        }
    }

    proptest::proptest! {
        /// The SIMD split is `split_inclusive('\n')`, on any text: multi-byte characters,
        /// lone `\r`, runs of newlines, a missing final newline.
        #[test]
        fn split_is_split_inclusive(text in "(\\PC|\n|\r|\u{0}|é|💡){0,300}") {
            let want: Vec<&str> = text.split_inclusive('\n').collect();
            proptest::prop_assert_eq!(split_lines(&text), want);
        }

        /// `is_text`, `as_text` and `into_text` follow git's rule, the last two with the bytes as
        /// the text.
        #[test]
        fn the_text_forms_agree_with_is_text(bytes in proptest::collection::vec(
            proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::strategy::Just(b'a'), proptest::strategy::Just(b'\n'), proptest::strategy::Just(0xc3), proptest::strategy::Just(0xa9), proptest::strategy::Just(0xff)],
            0..40,
        )) {
            // git's rule, written out: no NUL in the first 8000 bytes, and UTF-8.
            let text = !bytes[..bytes.len().min(8000)].contains(&0) && std::str::from_utf8(&bytes).is_ok();
            proptest::prop_assert_eq!(is_text(&bytes), text);
            proptest::prop_assert_eq!(as_text(&bytes).map(str::as_bytes), text.then_some(&bytes[..]));
            proptest::prop_assert_eq!(into_text(bytes.clone()).map(String::into_bytes), text.then(|| bytes.clone()));
        }

        /// A NUL in the first 8000 bytes makes binary, one after them does not.
        #[test]
        fn a_nul_is_binary_only_within_the_sniff(at in 0usize..9000) {
            let mut bytes = vec![b'a'; 9000];
            bytes[at] = 0;
            proptest::prop_assert_eq!(is_text(&bytes), at >= BINARY_SNIFF_LEN);
        }
    }

    #[test]
    fn is_text_accepts_utf8_without_nul() {
        assert!(is_text(b""));
        assert!(is_text(b"hello\r\nworld"));
        assert!(is_text("h\u{e9}llo \u{1f600}\n".as_bytes()));
    }

    #[test]
    fn is_text_rejects_nul_and_invalid_utf8() {
        assert!(!is_text(b"abc\0def"));
        assert!(!is_text(&[0xff, 0xfe, b'a']));
    }

    #[test]
    fn is_text_only_sniffs_the_first_8000_bytes_for_nul() {
        let mut late_nul = vec![b'a'; BINARY_SNIFF_LEN];
        late_nul.push(0);
        assert!(is_text(&late_nul));
        let mut edge_nul = vec![b'a'; BINARY_SNIFF_LEN - 1];
        edge_nul.push(0);
        assert!(!is_text(&edge_nul));
    }

    #[test]
    fn line_ending_picks_the_majority() {
        assert_eq!(line_ending(""), "\n");
        assert_eq!(line_ending("no terminator"), "\n");
        assert_eq!(line_ending("a\nb\n"), "\n");
        assert_eq!(line_ending("a\r\nb\r\n"), "\r\n");
        assert_eq!(line_ending("a\r\nb\r\nc\n"), "\r\n");
        // Exactly half is not "more than half".
        assert_eq!(line_ending("a\r\nb\n"), "\n");
        // The unterminated last line does not vote.
        assert_eq!(line_ending("a\r\nb"), "\r\n");
    }

    #[test]
    fn split_terminator_cases() {
        assert_eq!(split_terminator("a\r\n"), ("a", "\r\n"));
        assert_eq!(split_terminator("a\n"), ("a", "\n"));
        assert_eq!(split_terminator("a"), ("a", ""));
        assert_eq!(split_terminator("a\r"), ("a\r", ""));
    }
}

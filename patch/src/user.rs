//! A hunk the user typed: checked to be exactly one hunk of one file, and given the file's
//! line endings where it is unambiguous (an LF-typed hunk over CRLF lines).

use crate::apply::{apply_hunk, ApplyError};
use crate::hunk::Hunk;
use crate::lines::split_lines;
use crate::parse::{parse_file_header, parse_hunks, ParseError};

/// Why a user's edited diff is not one hunk of the given file.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OneHunkError {
    #[error("the diff names file {0:?}")]
    OtherFile(String),
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("the diff must hold exactly one hunk, found {0}")]
    Count(usize),
}

/// Parse `text` as exactly one hunk for `file`; file headers, when present, must name `file`.
pub fn parse_one_hunk(text: &str, file: &str) -> Result<Hunk, OneHunkError> {
    let (old, new) = parse_file_header(text);
    if let Some(p) = [old, new].into_iter().flatten().find(|p| p != file) {
        return Err(OneHunkError::OtherFile(p));
    }
    let mut hunks = parse_hunks(text)?;
    if hunks.len() != 1 {
        return Err(OneHunkError::Count(hunks.len()));
    }
    Ok(hunks.remove(0))
}

/// Why a hunk cannot take the file's line endings.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndingsError {
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("the lines the hunk changes mix CRLF and LF endings")]
    Mixed,
}

/// A hunk with no CR in it, applied to `text` with CRLF lines: where the lines it replaces (for
/// a pure insertion, its neighbours) all end in CRLF, the hunk with CRLF endings; where they
/// all end in LF, the hunk as it is; where they mix, [`EndingsError::Mixed`]. A hunk that has a
/// CR already, or a text without CRLF, is returned as it is.
pub fn adopt_line_endings(h: &Hunk, text: &str, offset: isize) -> Result<Hunk, EndingsError> {
    let has_cr = h.lines.iter().any(|l| l.text().contains('\r'));
    if has_cr || !text.contains("\r\n") {
        return Ok(h.clone());
    }
    let lf_text = text.replace("\r\n", "\n");
    let at = apply_hunk(&lf_text, h, offset)?.at;
    let lines = split_lines(text);
    let old = h.old_lines().len();
    let region = if old > 0 {
        &lines[at.min(lines.len())..(at + old).min(lines.len())]
    } else {
        &lines[at.saturating_sub(1).min(lines.len())..(at + 1).min(lines.len())]
    };
    let ends: Vec<bool> = region
        .iter()
        .filter(|l| l.ends_with('\n'))
        .map(|l| l.ends_with("\r\n"))
        .collect();
    if ends.iter().all(|crlf| !crlf) {
        Ok(h.clone())
    } else if ends.iter().all(|crlf| *crlf) {
        Ok(h.with_line_ending("\r\n"))
    } else {
        Err(EndingsError::Mixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::diff_hunks;

    #[test]
    fn one_hunk_of_its_own_file_only() {
        let h = diff_hunks("a\nb\n", "a\nB\n", 3).remove(0);
        let text = format!("--- a/f.txt\n+++ b/f.txt\n{}", h.to_unified());
        assert_eq!(parse_one_hunk(&text, "f.txt").unwrap(), h);
        assert_eq!(
            parse_one_hunk(&text, "g.txt"),
            Err(OneHunkError::OtherFile("f.txt".into()))
        );
        let two = diff_hunks(&"x\n".repeat(20), &format!("y\n{}y\n", "x\n".repeat(18)), 1);
        let both: String = two.iter().map(Hunk::to_unified).collect();
        assert_eq!(parse_one_hunk(&both, "f.txt"), Err(OneHunkError::Count(2)));
    }

    #[test]
    fn an_lf_hunk_takes_crlf_only_where_the_lines_agree() {
        let lf = diff_hunks("a\nb\nc\n", "a\nB\nc\n", 1).remove(0);
        let crlf = adopt_line_endings(&lf, "a\r\nb\r\nc\r\n", 0).unwrap();
        assert_eq!(crlf, lf.with_line_ending("\r\n"));
        assert_eq!(adopt_line_endings(&lf, "a\nb\nc\n", 0).unwrap(), lf);
        assert_eq!(
            adopt_line_endings(&lf, "a\r\nb\nc\r\n", 0),
            Err(EndingsError::Mixed)
        );
        // Positive control for the mixed case: an LF line outside the hunk's lines is fine.
        assert_eq!(
            adopt_line_endings(&lf, "a\r\nb\r\nc\r\nd\n", 0).unwrap(),
            lf.with_line_ending("\r\n")
        );
    }
}

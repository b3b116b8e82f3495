//! Pure hunk math for hunkgate: line diffs grouped into unified hunks, strict parsing of
//! unified diffs, and exact-context application of hunks.
//!
//! hunkgate lets a user accept an agent's change hunk by hunk and applies the accepted hunks to
//! the user's own checkout, which may have moved on since the agent started. This crate is the
//! part of that which must never surprise anyone, so it follows a few rules:
//!
//! - **git's model, git's numbers, git's text.** Lines keep their terminators, so CRLF files and
//!   a missing final newline need no special cases; hunks are grouped like `git diff -U<n>`
//!   and print byte-for-byte like it, so what the user reviews is what they would see in git,
//!   and the text can be handed to `git apply`.
//! - **Exact context, no fuzz.** A hunk applies only where its old lines appear byte for byte:
//!   first where its header (plus the caller's offset) says, otherwise at the single place in
//!   the file where they appear. Zero or several places is an error
//!   ([`ApplyError::NoMatch`], [`ApplyError::Ambiguous`]) rather than a guess: a fuzzy patch
//!   that lands in the wrong function is worse than a refusal the user can act on.
//! - **Strict parsing.** Hand-edited hunks are checked the way `git apply` checks them (counts
//!   must match the body) and every error names the line and what was expected.
//! - **Pure.** No I/O and no processes, so the server, the CLI and the tests all share one
//!   deterministic implementation.
//!
//! ```
//! use hunkgate_patch::{apply_all, apply_hunk, diff_hunks, parse_hunks};
//!
//! let old = "fn a() {}\nfn b() {}\nfn c() {}\n";
//! let new = "fn a() {}\nfn b() { 2 }\nfn c() {}\n";
//! let hunks = diff_hunks(old, new, 3);
//! let text = hunks[0].to_unified();
//! assert_eq!(
//!     text,
//!     "@@ -1,3 +1,3 @@\n fn a() {}\n-fn b() {}\n+fn b() { 2 }\n fn c() {}\n"
//! );
//! assert_eq!(parse_hunks(&text)?, hunks);
//! assert_eq!(apply_all(old, &hunks)?, new);
//!
//! // The user's file gained a line above the hunk: the exact context is found one line down.
//! let moved = format!("use x;\n{old}");
//! let applied = apply_hunk(&moved, &hunks[0], 0)?;
//! assert_eq!((applied.at, applied.text), (1, format!("use x;\n{new}")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod apply;
mod diff;
mod hunk;
mod lines;
mod parse;
mod select;
mod size;
mod user;

pub use apply::{apply_all, apply_hunk, Applied, ApplyError};
pub use diff::diff_hunks;
pub use hunk::{Hunk, HunkLine};
pub use lines::{as_text, into_text, is_text, line_ending, split_lines};
pub use parse::{parse_file_header, parse_hunks, ParseError, Side};
pub use select::{split_hunk, split_where, Pick, Split, SplitError};
pub use size::{fit_hunk, Limits, Part};
pub use user::{adopt_line_endings, parse_one_hunk, EndingsError, OneHunkError};

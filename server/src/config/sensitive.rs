//! `[sensitive]` and `.hunkgateignore`: the files that stay home (issue #58.1).
//!
//! A sensitive file — `.env`, a private key, cloud credentials — never enters a run's base (so
//! never its sandbox: a slot holds exactly its base), is refused by the built-in agent's tools,
//! and a suggestion that creates, changes or deletes one lists it as skipped with reason
//! [`SENSITIVE`] instead of offering a hunk. Which files are sensitive, in gitignore syntax,
//! last match winning: the built-in [`DEFAULTS`], then `[sensitive] extra` of the config file,
//! then the repository's `.hunkgateignore` (a `!pattern` there narrows what came before); a
//! path matching `[sensitive] allow` is never sensitive, whatever the rest say.
//!
//! `.hunkgateignore` is read by the hub from the user's checkout at every run's snapshot, never
//! from a sandbox; it is itself among the defaults, so an agent can neither read nor propose a
//! change to it. Matching is case-insensitive (`.ENV` is `.env` on a case-insensitive disk).

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::Deserialize;

/// The `reason` of a skipped file that the sensitive-file policy kept out of a suggestion.
pub const SENSITIVE: &str = "sensitive";

/// The repository's own sensitive-file patterns, read from the root of the checkout.
pub const REPO_FILE: &str = ".hunkgateignore";

/// The built-in sensitive-file patterns (gitignore syntax).
pub const DEFAULTS: &[&str] = &[
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_ed25519*",
    "*credential*",
    "*secret*",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".aws/",
    ".ssh/",
    ".gnupg/",
    "**/.docker/config.json",
    "*.kdbx",
    REPO_FILE,
];

/// `[sensitive]` in the config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SensitiveFile {
    /// More sensitive patterns (gitignore syntax), after the defaults.
    #[serde(default)]
    pub extra: Vec<String>,
    /// Patterns that are never sensitive: such a file enters the sandbox and may be changed.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// A pattern of `[sensitive]` that is not valid gitignore syntax, named with its list.
#[derive(Debug, thiserror::Error)]
#[error("[sensitive] {list}: {pattern:?} is not a valid gitignore pattern ({cause}); fix or remove it in the config file")]
pub struct BadPattern {
    list: &'static str,
    pattern: String,
    cause: String,
}

impl SensitiveFile {
    /// Check every pattern now, so a typo is an error at `serve`, not a silently wider policy.
    pub fn check(&self) -> Result<(), BadPattern> {
        for (list, pats) in [("extra", &self.extra), ("allow", &self.allow)] {
            for p in pats {
                valid(p).map_err(|e| BadPattern {
                    list,
                    pattern: p.clone(),
                    cause: e.to_string(),
                })?;
            }
        }
        Ok(())
    }
}

/// The sensitive-file policy of one checkout at one moment (see the module docs).
#[derive(Debug)]
pub struct Policy {
    deny: Gitignore,
    allow: Gitignore,
}

impl Policy {
    /// The policy of the checkout at `repo`: the defaults, `cfg`, and `repo/.hunkgateignore`
    /// when there is one (a line that is not a valid pattern is left out, with a warning: the
    /// defaults still hold).
    pub fn load(repo: &Path, cfg: &SensitiveFile) -> Policy {
        let mut deny = builder();
        let defaults = DEFAULTS.iter().copied();
        for line in defaults.chain(cfg.extra.iter().map(String::as_str)) {
            add(&mut deny, line, "[sensitive] extra");
        }
        // Read through no symlink: the file is the user's, at the checkout's root.
        if let Some(text) = read_repo_file(&repo.join(REPO_FILE)) {
            for line in text.lines() {
                add(&mut deny, line, REPO_FILE);
            }
        }
        let mut allow = builder();
        for line in &cfg.allow {
            add(&mut allow, line, "[sensitive] allow");
        }
        Policy {
            deny: build(deny),
            allow: build(allow),
        }
    }

    /// Whether the file at `path` (relative to the checkout, `/`-separated) is sensitive: it or
    /// a directory above it matches the policy, and nothing in `allow` matches it.
    pub fn is_sensitive(&self, path: &str) -> bool {
        let path = path.trim_start_matches("./");
        if path.is_empty() {
            return false;
        }
        let hit = |g: &Gitignore| g.matched_path_or_any_parents(path, false).is_ignore();
        hit(&self.deny) && !hit(&self.allow)
    }
}

fn builder() -> GitignoreBuilder {
    let mut b = GitignoreBuilder::new("");
    let _ = b.case_insensitive(true);
    b
}

/// Whether `line` compiles as a gitignore pattern on its own (a builder reports a bad glob only
/// when it is built, for all its lines at once).
fn valid(line: &str) -> Result<(), ignore::Error> {
    let mut b = GitignoreBuilder::new("");
    b.add_line(None, line)?;
    b.build().map(|_| ())
}

/// Add `line` when it is valid; one that is not is left out with a warning, so it can never
/// take the rest of the policy down with it.
fn add(b: &mut GitignoreBuilder, line: &str, from: &str) {
    match valid(line).and_then(|()| b.add_line(None, line).map(|_| ())) {
        Ok(()) => {}
        Err(e) => tracing::warn!(from, line, error = %e, "sensitive-file pattern left out"),
    }
}

fn build(b: GitignoreBuilder) -> Gitignore {
    b.build().unwrap_or_else(|e| {
        // Unreachable: every line compiled on its own before it was added.
        tracing::error!(error = %e, "sensitive-file patterns");
        Gitignore::empty()
    })
}

/// `.hunkgateignore` when it is a regular file (not a symlink) of at most 1 MiB.
fn read_repo_file(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.len() > 1 << 20 {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
#[path = "sensitive_tests.rs"]
mod tests;

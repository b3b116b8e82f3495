//! How much one read-back of a sandbox may bring to the hub.
//!
//! What an agent leaves in its sandbox is hostile data, and so is the size of it: an agent
//! that runs `npm install` in a repository that does not ignore `node_modules`, or one that
//! writes files in a loop, must not fill the hub's disk (the checkpoint store keeps every new
//! file's content) or its memory (every changed path is held until the suggestion is made).
//! A read-back past a limit stops there with [`OverLimit`], which names the limit and how to
//! raise it; nothing is published. The checkpoint store has taken at most
//! [`ReadLimits::bytes`] of new content by then (unreferenced, as any failed publish leaves).

/// The limits of one read-back of a sandbox (`[limits]` in the hub's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Files larger than this are left out of the read-back, and reported.
    pub file_cap: u64,
    /// The most paths that may differ from the base: new, changed, deleted or left out.
    pub files: usize,
    /// The most bytes of new content: files whose content the checkpoint store did not hold.
    pub bytes: u64,
}

impl ReadLimits {
    /// Files larger than this are left out (64 MiB).
    pub const FILE_CAP: u64 = 64 * 1024 * 1024;
    /// `[limits] max_changed_files`: twice a 10,000-file repository rewritten whole.
    pub const FILES: usize = 20_000;
    /// `[limits] max_changed_bytes`: 512 MiB.
    pub const BYTES: u64 = 512 * 1024 * 1024;

    /// No limit but the size of a single file (tests, and the hub's own checkout).
    pub fn only_file_cap(file_cap: u64) -> Self {
        ReadLimits {
            file_cap,
            files: usize::MAX,
            bytes: u64::MAX,
        }
    }
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            file_cap: Self::FILE_CAP,
            files: Self::FILES,
            bytes: Self::BYTES,
        }
    }
}

/// A read-back that went past one of its [`ReadLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    #[error(
        "the sandbox differs from the run's base in more than {limit} files \
         (`[limits] max_changed_files`); nothing was published — if the agent made \
         build output or dependencies, have the repository's .gitignore ignore them, \
         or raise the limit"
    )]
    Files { limit: usize },
    #[error(
        "the sandbox holds more than {} of new file content (`[limits] max_changed_bytes`); \
         nothing was published — if the agent made build output or dependencies, have the \
         repository's .gitignore ignore them, or raise the limit",
        shown_bytes(*limit)
    )]
    Bytes { limit: u64 },
}

/// `n` bytes for people: whole MiB or KiB when it is that, else bytes.
fn shown_bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    match n {
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} bytes"),
    }
}

/// A count of what a read-back brought in, against its limits.
#[derive(Debug, Clone, Copy)]
pub struct Tally {
    limit: u64,
    used: u64,
}

impl Tally {
    /// Nothing counted yet, against `limit`.
    pub fn new(limit: u64) -> Self {
        Tally { limit, used: 0 }
    }

    /// What it counts against.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Count `n` more; false once the count is past the limit.
    pub fn take(&mut self, n: u64) -> bool {
        self.used = self.used.saturating_add(n);
        self.used <= self.limit
    }
}

#[cfg(test)]
mod tests;

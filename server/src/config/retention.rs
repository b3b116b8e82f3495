//! `[retention]`: how long the hub keeps finished work, and how much of it (seed 000 §25).
//!
//! Work that is queued, running, waiting for the user's answer or has a hunk waiting for
//! review is never collected, whatever these say; they bound only what is finished (every hunk
//! decided, or the suggestion discarded; the run ended with nothing pending). See
//! [`crate::gc`] for what collecting means.

use std::time::Duration;

use serde::Deserialize;

/// Seed 000 §25: finished work is kept for three days.
pub const DEFAULT_COMPLETED_TTL_HOURS: u64 = 72;
/// Seed 000 §25 `max_sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 25;
/// Seed 000 §25 `max_jobs_per_session` (a job is a run here).
pub const DEFAULT_MAX_RUNS_PER_SESSION: usize = 40;
/// Objects the collection finds unreferenced are removed only once they have been for this
/// long: a write in flight (a run's snapshot before its ref is set) is never taken for garbage.
pub const DEFAULT_PRUNE_GRACE_MINUTES: u64 = 60;
/// `feedback.jsonl` is rotated to `feedback.jsonl.1` (the older `.1` dropped) past this size.
pub const DEFAULT_MAX_FEEDBACK_BYTES: u64 = 64 * 1024 * 1024;
/// How often the hub looks for finished work past its time, besides at start and after each
/// new run.
pub const DEFAULT_GC_INTERVAL_MINUTES: u64 = 15;

/// `[retention]` in the config file; every key optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionFile {
    /// Hours finished work is kept after it finished (0: collected at the next collection).
    pub completed_ttl_hours: Option<u64>,
    /// Sessions kept; past it the oldest finished sessions go first, before their time.
    pub max_sessions: Option<usize>,
    /// Runs kept per session; past it the session's oldest finished runs go first.
    pub max_runs_per_session: Option<usize>,
    /// Minutes an unreferenced object of the checkpoint store is kept before it is pruned.
    pub prune_grace_minutes: Option<u64>,
    /// Bytes of `feedback.jsonl` before it is rotated to `feedback.jsonl.1`.
    pub max_feedback_bytes: Option<u64>,
    /// Minutes between the collections the hub makes on its own (0: only at start, after each
    /// new run and on `hunkgate gc`).
    pub gc_interval_minutes: Option<u64>,
}

/// The retention policy, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    pub completed_ttl: Duration,
    pub max_sessions: usize,
    pub max_runs_per_session: usize,
    pub prune_grace: Duration,
    pub max_feedback_bytes: u64,
    /// None: no collection on a timer.
    pub interval: Option<Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        RetentionFile::default().resolve()
    }
}

impl RetentionFile {
    /// The policy, the seed's defaults where the file says nothing. A limit of 0 sessions or
    /// runs would collect finished work the moment it finishes: it is read as 1.
    pub fn resolve(&self) -> Retention {
        Retention {
            completed_ttl: Duration::from_secs(
                self.completed_ttl_hours
                    .unwrap_or(DEFAULT_COMPLETED_TTL_HOURS)
                    .saturating_mul(3600),
            ),
            max_sessions: self.max_sessions.unwrap_or(DEFAULT_MAX_SESSIONS).max(1),
            max_runs_per_session: self
                .max_runs_per_session
                .unwrap_or(DEFAULT_MAX_RUNS_PER_SESSION)
                .max(1),
            prune_grace: Duration::from_secs(
                self.prune_grace_minutes
                    .unwrap_or(DEFAULT_PRUNE_GRACE_MINUTES)
                    .saturating_mul(60),
            ),
            max_feedback_bytes: self
                .max_feedback_bytes
                .unwrap_or(DEFAULT_MAX_FEEDBACK_BYTES),
            interval: match self
                .gc_interval_minutes
                .unwrap_or(DEFAULT_GC_INTERVAL_MINUTES)
            {
                0 => None,
                m => Some(Duration::from_secs(m.saturating_mul(60))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds_and_the_file_overrides_them() {
        let d = Retention::default();
        assert_eq!(d.completed_ttl, Duration::from_secs(72 * 3600));
        assert_eq!((d.max_sessions, d.max_runs_per_session), (25, 40));
        assert_eq!(d.interval, Some(Duration::from_secs(15 * 60)));
        let file: RetentionFile = toml::from_str(
            "completed_ttl_hours = 0\nmax_sessions = 0\nmax_runs_per_session = 3\nprune_grace_minutes = 0\ngc_interval_minutes = 0\n",
        )
        .unwrap();
        let r = file.resolve();
        assert_eq!(r.completed_ttl, Duration::ZERO);
        assert_eq!(r.max_sessions, 1, "0 is read as 1");
        assert_eq!(r.max_runs_per_session, 3);
        assert_eq!(r.prune_grace, Duration::ZERO);
        assert_eq!(r.interval, None);
        let err = toml::from_str::<RetentionFile>("completed_ttl = 3\n").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}

//! Lifecycle and garbage collection (seed 000 §25): finished work is kept for
//! `[retention] completed_ttl_hours` after it finished, within `max_sessions` and
//! `max_runs_per_session`, then collected; live work never is ([`select::select`] says which
//! is which).
//!
//! A collection runs when the hub starts, after each new run, every `gc_interval_minutes`, and
//! on `POST /gc` (`hunkgate gc [--dry-run]`). Its steps are ordered so that a `kill -9` at any
//! point leaves a state the next start opens cleanly, and the next collection finishes:
//!
//! 1. under the state lock, what goes is appended to `archive.jsonl` (fsynced; rotated to
//!    `archive.jsonl.1` past [`ARCHIVE_MAX`]), then the journal is rewritten without it (the
//!    atomic rewrite of every compaction), then the state forgets it. Until the rewrite the old
//!    journal stands whole; after it, the work is gone for good.
//! 2. `gc-ledger.json` keeps when each piece of finished work was first seen finished.
//! 3. the checkpoint store's refs of runs and suggestions the state no longer has are dropped
//!    (those of a crash after step 1 included), marked first by `gc-repack-owed`;
//! 4. with no run going and the state lock held (no decision writes objects meanwhile), every
//!    suggestion's commits get their refs, the store is repacked and what no ref reaches and is
//!    older than `prune_grace_minutes` is pruned; then the mark goes;
//! 5. run logs of runs the state no longer has are removed.
//!
//! The feedback log is rotated to `feedback.jsonl.1` past `max_feedback_bytes`, right after a
//! compaction made every committed decision part of the journal's snapshot.
//!
//! Test seams (debug builds, see [`crate::hub::test_hooks`]): `gc-after-state` once the
//! journal is rewritten, `gc-after-refs` once the refs are dropped, before the repack.
//!
//! Layer 8 (beside `agent`): may import `protocol`, `error`, `model`, `store`, `config`, `hub`.

pub mod files;
pub mod objects;
pub mod select;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hunkgate_sandbox::ObjectId;

use crate::error::AppError;
use crate::gc::select::{select, suggestion_live, Ledger, Plan};
use crate::hub::{Hub, State};
use crate::model::session::SessionRec;
use crate::protocol::GcReport;
use crate::store::journal::RecordRef;

/// Why a collection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Start,
    NewRun,
    Timer,
    /// `POST /gc`: waits for a collection in progress, repacks even when no ref was dropped,
    /// and measures what it freed.
    Asked,
}

/// `archive.jsonl` is rotated to `archive.jsonl.1` past this size.
pub const ARCHIVE_MAX: u64 = 16 * 1024 * 1024;
const ARCHIVE: &str = "archive.jsonl";
const LEDGER: &str = "gc-ledger.json";
/// Present while refs were dropped and the store not yet repacked (a crash in between).
const OWED: &str = "gc-repack-owed";

/// One collection at a time in this process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What stays after the collection's state step.
struct Kept {
    runs: BTreeSet<String>,
    suggestions: BTreeSet<String>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn internal(doing: &str) -> impl Fn(String) -> AppError + '_ {
    move |e| AppError::internal(format!("{doing}: {e}"))
}

impl Hub {
    /// Collect finished work past its retention (see the module docs); with `dry_run`, only
    /// say what would go. A background collection that finds another one going leaves it.
    pub fn collect_garbage(&self, trigger: Trigger, dry_run: bool) -> Result<GcReport, AppError> {
        let _one = match ONE_AT_A_TIME.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if trigger != Trigger::Asked => {
                return Ok(GcReport {
                    objects: "another collection is going".into(),
                    ..GcReport::default()
                })
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
            }
        };
        let dir = self.cfg().state_dir.clone();
        let measure = trigger == Trigger::Asked || dry_run;
        let before = if measure { files::dir_bytes(&dir) } else { 0 };
        let policy = self.cfg().retention.clone();
        let ledger_path = dir.join(LEDGER);
        let mut report = GcReport {
            dry_run,
            ..GcReport::default()
        };
        let ledger = files::read_ledger(&ledger_path);
        let (plan, kept) = self.purge_state(&ledger, dry_run, &mut report)?;
        crate::hub::test_hooks::pause("gc-after-state");
        if !dry_run && plan.ledger != ledger {
            if let Err(e) = files::write_ledger(&ledger_path, &plan.ledger) {
                tracing::warn!(error = %e, "writing the retention ledger; finished work is stamped anew next time");
            }
        }
        report.refs = self.drop_refs(&kept, dry_run)?;
        crate::hub::test_hooks::pause("gc-after-refs");
        let owed = dir.join(OWED).exists();
        report.objects = if dry_run {
            "not touched (dry run)".into()
        } else if owed || trigger == Trigger::Asked {
            self.maintain_objects(policy.prune_grace)
        } else {
            "not needed".into()
        };
        let (logs, log_bytes) = files::run_logs(&dir.join("runs"), &kept.runs, !dry_run);
        report.logs = logs;
        if measure {
            let after = files::dir_bytes(&dir);
            remember_size(&dir, after);
            report.state_bytes = after;
            report.bytes = if dry_run {
                report.bytes + log_bytes
            } else {
                before.saturating_sub(after)
            };
        }
        if !plan.is_empty() || report.refs > 0 || report.logs > 0 {
            tracing::info!(?trigger, dry_run, sessions = report.sessions, runs = report.runs, suggestions = report.suggestions, refs = report.refs, logs = report.logs, objects = %report.objects, "collected finished work");
        }
        Ok(report)
    }

    /// Step 1: choose, archive, compact the journal without what goes, forget it. Counts go
    /// into `report` (and, for a dry run, the bytes of the journal records that would go).
    fn purge_state(
        &self,
        ledger: &Ledger,
        dry_run: bool,
        report: &mut GcReport,
    ) -> Result<(Plan, Kept), AppError> {
        let policy = &self.cfg().retention;
        let feedback_path = self.cfg().state_dir.join("feedback.jsonl");
        let rotate = !dry_run
            && std::fs::metadata(&feedback_path).is_ok_and(|m| m.len() > policy.max_feedback_bytes);
        let mut st = self.lock()?;
        // A decision whose feedback lines and commit are still owed is not in a state to
        // snapshot: collect next time.
        let unfinished = self.unfinished().lock().map_or(true, |u| !u.is_empty());
        let plan = if unfinished {
            Plan::default()
        } else {
            select(&st, ledger, now_secs(), policy)
        };
        report.sessions = plan.sessions.len();
        report.runs = plan.runs.len();
        report.suggestions = plan.suggestions.len();
        report.pending_suggestions = st
            .suggestions
            .values()
            .filter(|s| suggestion_live(s))
            .count();
        let archived = files::lines(&going(&st, &plan))
            .map_err(|e| AppError::failed("encoding the collected records", e))?;
        report.bytes = archived.len() as u64;
        if !dry_run && !unfinished && (!plan.is_empty() || rotate) {
            if !plan.is_empty() {
                files::append_rotated(&self.cfg().state_dir.join(ARCHIVE), &archived, ARCHIVE_MAX)
                    .map_err(|e| AppError::failed("archiving collected work", e))?;
            }
            self.compact_without(&st, &plan)?;
            forget(&mut st, &plan);
            if rotate {
                report.feedback_rotated =
                    self.rotate_feedback(&feedback_path, policy.max_feedback_bytes)?;
            }
        }
        // What a dry run would keep; after a real one, what the state has.
        let kept = Kept {
            runs: st
                .runs
                .keys()
                .filter(|r| !plan.runs.contains(*r))
                .cloned()
                .collect(),
            suggestions: st
                .suggestions
                .keys()
                .filter(|s| !plan.suggestions.contains(*s))
                .cloned()
                .collect(),
        };
        Ok((plan, kept))
    }

    /// Replace the journal with a snapshot of `st` without what `plan` removes (and with the
    /// kept sessions' run lists trimmed of removed runs).
    fn compact_without(&self, st: &State, plan: &Plan) -> Result<(), AppError> {
        let trimmed: BTreeMap<&str, SessionRec> = st
            .sessions
            .sessions
            .iter()
            .filter(|(id, s)| {
                !plan.sessions.contains(*id) && s.run_ids.iter().any(|r| plan.runs.contains(r))
            })
            .map(|(id, s)| {
                let mut s = s.clone();
                s.run_ids.retain(|r| !plan.runs.contains(r));
                (id.as_str(), s)
            })
            .collect();
        self.bus().with_reserved(|upto| {
            let records: Vec<RecordRef<'_>> = st
                .records(upto)
                .into_iter()
                .filter(|r| !removes(plan, r))
                .map(|r| match r {
                    RecordRef::Session(s) => {
                        RecordRef::Session(trimmed.get(s.id.as_str()).unwrap_or(s))
                    }
                    other => other,
                })
                .collect();
            let mut j = self.journal()?;
            let before = j.len();
            j.replace(&records).map_err(|e| {
                AppError::failed("compacting the journal without collected work", e)
            })?;
            tracing::debug!(
                before,
                after = j.len(),
                "compacted the journal for a collection"
            );
            Ok(())
        })
    }

    /// Move the feedback log to `feedback.jsonl.1` and open a new one, under its lock.
    fn rotate_feedback(&self, path: &Path, max: u64) -> Result<bool, AppError> {
        let mut log = self.feedback_log()?;
        let rotated = files::rotate_if_over(path, max)
            .map_err(|e| AppError::failed("rotating the feedback log", e))?;
        if rotated {
            *log = crate::store::feedback::FeedbackLog::open(path)
                .map_err(|e| AppError::failed("opening the new feedback log", e))?;
        }
        Ok(rotated)
    }

    /// Step 3: drop the refs of runs and suggestions the state does not keep. Every such ref
    /// was made for work the state had (a run's base once it is journaled, a suggestion's
    /// refs once it is), and work leaves the state only here, so a ref whose owner is gone is
    /// garbage whenever it is looked at.
    fn drop_refs(&self, kept: &Kept, dry_run: bool) -> Result<usize, AppError> {
        let _refs = self.refs_lock();
        let have = self
            .store()
            .refs_under("refs/hunkgate/")
            .map_err(|e| AppError::failed("listing the checkpoint store's refs", e))?;
        let doomed: BTreeSet<String> = have
            .into_keys()
            .filter(|r| match objects::owner(r) {
                Some(("run", id)) => !kept.runs.contains(id),
                Some((_, id)) => !kept.suggestions.contains(id),
                None => false,
            })
            .collect();
        if dry_run || doomed.is_empty() {
            return Ok(doomed.len());
        }
        let owed = self.cfg().state_dir.join(OWED);
        crate::store::journal::write_file_atomic(&owed, b"", 0o600)
            .map_err(|e| AppError::failed("marking the checkpoint store for a repack", e))?;
        objects::delete_refs(self.store().path(), &doomed)
            .map_err(internal("dropping collected refs"))?;
        Ok(doomed.len())
    }

    /// Step 4: repack and prune the store, when no run is going; what happened, in words.
    fn maintain_objects(&self, grace: Duration) -> String {
        let Ok(st) = self.lock() else {
            return "skipped: the state lock is poisoned".into();
        };
        let going = st.runs.values().any(|r| !r.finished())
            || self.runs().active.lock().map_or(true, |a| !a.is_empty());
        if going {
            return "waits: a run is going; a later collection repacks".into();
        }
        let result = self
            .keep_commits_referenced(&st)
            .and_then(|()| objects::repack_and_prune(self.store().path(), grace));
        // Whatever git did, this handle's idea of what the store holds is stale now.
        if let Err(e) = self.store().forget_known_objects() {
            tracing::warn!(error = %e, "reopening the checkpoint store after a repack");
        }
        // The checkout's last snapshot may name blobs the prune removed: the next one looks
        // at every file (and writes what is missing).
        if let Ok(mut watch) = self.runs().checkout.lock() {
            *watch = None;
        }
        drop(st);
        match result {
            Ok(()) => {
                let _ = std::fs::remove_file(self.cfg().state_dir.join(OWED));
                "repacked".into()
            }
            Err(e) => {
                tracing::warn!(error = %e, "repacking the checkpoint store; a later collection tries again");
                format!("failed: {e}")
            }
        }
    }

    /// Every commit a kept suggestion or run needs has a ref before the store is pruned: a
    /// publish sets its suggestion's refs only after the suggestion is journaled, and a
    /// suggestion whose run is gone has no base ref of its run. Refs already set are left.
    fn keep_commits_referenced(&self, st: &State) -> Result<(), String> {
        let have = self
            .store()
            .refs_under("refs/hunkgate/")
            .map_err(|e| e.to_string())?;
        let mut want: Vec<(String, &str)> = Vec::new();
        for s in st.suggestions.values() {
            let at = |what: &str| format!("refs/hunkgate/suggestions/{}/{what}", s.id);
            want.push((at("run"), s.run_commit.as_str()));
            want.push((at("base"), s.base_commit.as_str()));
            if let Some(r) = &s.reviewed_commit {
                want.push((at("reviewed"), r.as_str()));
            }
        }
        for r in st.runs.values() {
            if let Some(b) = &r.base_commit {
                want.push((format!("refs/hunkgate/runs/{}/base", r.run_id), b.as_str()));
            }
        }
        let referenced: std::collections::HashSet<ObjectId> = have.values().copied().collect();
        for (name, hex) in want {
            let Ok(oid) = ObjectId::from_hex(hex.as_bytes()) else {
                continue;
            };
            if have.contains_key(&name) || referenced.contains(&oid) {
                continue;
            }
            if self.store().has_object(oid) {
                self.store()
                    .set_ref(&name, oid)
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Collect on a blocking thread, off the caller's path; failures are logged.
    pub fn collect_in_background(self: &Arc<Self>, trigger: Trigger) {
        let hub = self.clone();
        self.tasks().spawn(async move {
            match hub
                .blocking(move |h| h.collect_garbage(trigger, false))
                .await
            {
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(?trigger, error = %e.message(), "collecting finished work")
                }
            }
        });
    }
}

/// Collect every `every` until the hub shuts down.
pub async fn collect_on_a_timer(
    hub: std::sync::Weak<Hub>,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let Some(hub) = hub.upgrade() else { return };
        hub.collect_in_background(Trigger::Timer);
    }
}

/// Whether `plan` removes what `r` records.
fn removes(plan: &Plan, r: &RecordRef<'_>) -> bool {
    match r {
        RecordRef::Run(x) => plan.runs.contains(&x.run_id),
        RecordRef::Suggestion(x) => plan.suggestions.contains(&x.id),
        RecordRef::Session(x) => plan.sessions.contains(&x.id),
        RecordRef::History(e) => plan.sessions.contains(&e.session_id),
        RecordRef::Seq { .. } => false,
    }
}

/// The records of what `plan` removes, as the journal had them (for the archive).
fn going<'a>(st: &'a State, plan: &Plan) -> Vec<RecordRef<'a>> {
    if plan.is_empty() {
        return Vec::new();
    }
    st.records(0)
        .into_iter()
        .filter(|r| !matches!(r, RecordRef::Seq { .. }) && removes(plan, r))
        .collect()
}

/// Take what `plan` removes out of the state.
fn forget(st: &mut State, plan: &Plan) {
    st.runs.retain(|id, _| !plan.runs.contains(id));
    st.suggestions
        .retain(|id, _| !plan.suggestions.contains(id));
    st.order.retain(|id| !plan.suggestions.contains(id));
    let sessions = &mut st.sessions;
    sessions
        .sessions
        .retain(|id, _| !plan.sessions.contains(id));
    sessions.history.retain(|id, _| !plan.sessions.contains(id));
    for s in sessions.sessions.values_mut() {
        s.run_ids.retain(|r| !plan.runs.contains(r));
    }
}

/// The state directory's size as last measured, and when.
static SIZES: Mutex<BTreeMap<PathBuf, (Instant, u64)>> = Mutex::new(BTreeMap::new());

/// How long a measured size stands before `/health` measures again.
const SIZE_FRESH: Duration = Duration::from_secs(30);

fn remember_size(dir: &Path, bytes: u64) {
    if let Ok(mut s) = SIZES.lock() {
        s.insert(dir.to_path_buf(), (Instant::now(), bytes));
    }
}

/// The bytes of the files under the state directory `dir`, measured at most every
/// [`SIZE_FRESH`] (a walk of the directory; `/health` asks for it, and anyone may ask
/// `/health`). While one request walks the directory, the others answer the last size measured: a flood
/// of `/health` walks it once.
pub fn state_bytes(dir: &Path) -> u64 {
    static MEASURING: Mutex<()> = Mutex::new(());
    let last = SIZES.lock().ok().and_then(|s| s.get(dir).copied());
    if let Some((at, bytes)) = last {
        if at.elapsed() < SIZE_FRESH {
            return bytes;
        }
    }
    let Ok(_measuring) = MEASURING.try_lock() else {
        return last.map_or(0, |(_, bytes)| bytes);
    };
    let bytes = files::dir_bytes(dir);
    remember_size(dir, bytes);
    bytes
}

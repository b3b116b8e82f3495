//! The hub's state and every decision on it.
//!
//! One lock (`state`) serializes decisions, so two clients accepting hunks of the same file can
//! never interleave their writes. Decisions do blocking file I/O and fsyncs, so callers run them
//! on the blocking pool ([`Hub::blocking`]).

pub mod auth;
pub mod events;
pub mod quiet;
pub mod registry;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use hunkgate_sandbox::beneath::Beneath;
use hunkgate_sandbox::store::Store;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ServeConfig;
use crate::error::AppError;
use crate::hub::events::Bus;
use crate::hub::registry::Runs;
use crate::model::feedback::FeedbackRecord;
use crate::model::run::RunRec;
use crate::model::suggestion::Suggestion;
use crate::protocol::{Event, ReadyJson, SuggestionSummary, SuggestionView};
use crate::store::feedback::FeedbackLog;
use crate::store::journal::{Journal, Record, RecordRef};

pub struct State {
    pub suggestions: BTreeMap<String, Suggestion>,
    /// Creation order, for listing.
    pub order: Vec<String>,
    pub runs: BTreeMap<String, RunRec>,
    pub sessions: crate::hub::registry::Sessions,
}

impl State {
    /// Records that restore this state: one per run and suggestion (in creation order), the
    /// sessions, and the event-sequence mark. What the journal is compacted to.
    pub fn records(&self, seq_upto: u64) -> Vec<RecordRef<'_>> {
        let mut out: Vec<RecordRef<'_>> = self.runs.values().map(RecordRef::Run).collect();
        out.extend(
            self.order
                .iter()
                .filter_map(|id| self.suggestions.get(id))
                .map(RecordRef::Suggestion),
        );
        out.extend(self.sessions.records());
        out.push(RecordRef::Seq { upto: seq_upto });
        out
    }
}

/// The shared handle every layer above works through. Its fields are private: state is reached
/// through [`Hub::lock`], the journal through [`Hub::journal_append`] and the compaction here,
/// the feedback log through `Hub::feedback_log`; the rest through read-only accessors.
pub struct Hub {
    cfg: ServeConfig,
    store: Store,
    bus: Bus,
    journal: Arc<Mutex<Journal>>,
    feedback: Mutex<FeedbackLog>,
    state: Mutex<State>,
    reviewer_token: String,
    epoch: String,
    ws_clients: AtomicUsize,
    runs: Runs,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// Decisions that stand in the checkout but whose feedback lines and `commit` could not be
    /// written yet (decision id, lines): written before the next decision.
    unfinished: Mutex<Vec<(String, Vec<FeedbackRecord>)>>,
    /// When the hub was last busy, for giving freed memory back once it is quiet.
    quiet: Arc<quiet::Quiet>,
    /// Held while the checkpoint store's refs are set for a suggestion announced before
    /// (after checking it is still in the state), and while a collection drops refs: a
    /// collection never misses refs set behind its back for work it just removed.
    refs: Mutex<()>,
}

/// What [`Hub::new`] is made from: the state recovered from the state directory.
pub struct Parts {
    pub cfg: ServeConfig,
    pub store: Store,
    pub journal: Journal,
    /// The last event sequence number the journal knows.
    pub seq_upto: u64,
    pub feedback: FeedbackLog,
    pub state: State,
    pub reviewer_token: String,
    pub shutdown: CancellationToken,
}

impl Hub {
    pub fn new(p: Parts) -> Hub {
        let journal = Arc::new(Mutex::new(p.journal));
        let sandbox_root = p.cfg.state_dir.join("sandboxes");
        Hub {
            bus: Bus::new(journal.clone(), p.seq_upto),
            journal,
            store: p.store,
            feedback: Mutex::new(p.feedback),
            state: Mutex::new(p.state),
            reviewer_token: p.reviewer_token,
            epoch: uuid::Uuid::new_v4().to_string(),
            ws_clients: AtomicUsize::new(0),
            runs: Runs::new(sandbox_root),
            tasks: TaskTracker::new(),
            shutdown: p.shutdown,
            cfg: p.cfg,
            unfinished: Mutex::new(Vec::new()),
            quiet: Arc::default(),
            refs: Mutex::new(()),
        }
    }

    pub fn cfg(&self) -> &ServeConfig {
        &self.cfg
    }

    /// The checkpoint store (only the hub writes it).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The event bus, with its replay buffer.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The running agents: slots, queue, cancel tokens, agent tokens, pending questions.
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// The tasks the hub waits for on shutdown.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Fires when the hub shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Changes on every start: a client that sees a new epoch resyncs.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// When the hub was last busy (see [`quiet`]).
    pub fn quiet(&self) -> &Arc<quiet::Quiet> {
        &self.quiet
    }

    /// Open WebSocket connections.
    pub fn ws_clients(&self) -> &AtomicUsize {
        &self.ws_clients
    }

    /// Whether `token` is the reviewer's (compared in constant time).
    pub fn is_reviewer_token(&self, token: &str) -> bool {
        crate::hub::auth::constant_time_eq(token.as_bytes(), self.reviewer_token.as_bytes())
    }

    /// The feedback log, locked.
    pub(crate) fn feedback_log(&self) -> Result<MutexGuard<'_, FeedbackLog>, AppError> {
        self.feedback.lock().map_err(|_| {
            AppError::internal("the feedback lock is poisoned (a thread panicked); restart the hub")
        })
    }

    /// Compact the journal once it passes `bytes` (tests; the hub reads
    /// `HUNKGATE_JOURNAL_COMPACT_MIN`).
    #[cfg(test)]
    pub(crate) fn set_journal_compact_min(&self, bytes: u64) {
        self.journal.lock().unwrap().set_compact_min(bytes);
    }

    /// The lock between setting a suggestion's refs after its announcement and a
    /// collection dropping refs (see the field).
    pub(crate) fn refs_lock(&self) -> MutexGuard<'_, ()> {
        self.refs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Decisions written to the checkout whose feedback lines and commit are still owed.
    pub(crate) fn unfinished(&self) -> &Mutex<Vec<(String, Vec<FeedbackRecord>)>> {
        &self.unfinished
    }
}

/// The outcome of one decision, as answered to the client.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DecisionResult {
    pub applied: bool,
    pub remaining_hunks: usize,
    pub hunk: crate::protocol::HunkView,
    /// What a line-range decision left to decide, as a new hunk.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub new_hunks: Vec<crate::protocol::HunkView>,
    /// The hunks undoing a line-range decision took back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_hunk_ids: Vec<String>,
}

impl Hub {
    pub fn lock(&self) -> Result<MutexGuard<'_, State>, AppError> {
        self.state.lock().map_err(|_| {
            AppError::internal("the state lock is poisoned (a thread panicked); restart the hub")
        })
    }

    /// Compact the journal to a snapshot of `st` once it has grown enough (see
    /// [`Journal::due`]). Called with the state lock held, after a decision committed, so the
    /// snapshot holds every committed decision and no decision is half-way. A failure is
    /// logged: the old journal is still whole and correct, only larger.
    pub(crate) fn compact_if_due(&self, st: &State) {
        let due = self.journal.lock().map(|j| j.due()).unwrap_or(false);
        if !due {
            return;
        }
        self.bus.with_reserved(|upto| {
            let records = st.records(upto);
            let Ok(mut j) = self.journal.lock() else {
                return;
            };
            let before = j.len();
            match j.replace(&records) {
                Ok(()) => tracing::info!(before, after = j.len(), "compacted the journal"),
                Err(e) => tracing::warn!(error = %e, "compacting the journal"),
            }
        });
    }

    pub fn journal_append(&self, rec: &Record) -> Result<(), AppError> {
        self.journal()?
            .append(rec)
            .map_err(|e| AppError::failed("writing the journal", e))
    }

    /// [`Hub::journal_append`] of a record encoded beforehand ([`Journal::line_of`]).
    fn journal_append_line(&self, line: &[u8]) -> Result<(), AppError> {
        self.journal()?
            .append_line(line)
            .map_err(|e| AppError::failed("writing the journal", e))
    }

    /// The journal itself, for a commit that writes and fsyncs it beside the feedback log.
    pub(crate) fn journal(&self) -> Result<std::sync::MutexGuard<'_, Journal>, AppError> {
        self.journal.lock().map_err(|_| {
            AppError::internal("the journal lock is poisoned (a thread panicked); restart the hub")
        })
    }

    /// [`Hub::blocking`] for work whose wait is the caller's answer (a publish that a run
    /// ends with): on the multi-thread runtime the work runs on this worker thread, which
    /// hands its other tasks on first (`block_in_place`), so it starts without waking a
    /// blocking thread (up to a millisecond on a busy machine). Only for a task that runs
    /// nothing else beside it: everything else in the same task waits too.
    pub async fn blocking_here<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Hub) -> Result<T, AppError> + Send + 'static,
    ) -> Result<T, AppError> {
        match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(|| f(self)),
            _ => self.blocking(f).await,
        }
    }

    /// Run blocking work (file I/O, fsync, gix) off the async workers.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Hub) -> Result<T, AppError> + Send + 'static,
    ) -> Result<T, AppError> {
        let hub = self.clone();
        tokio::task::spawn_blocking(move || f(&hub))
            .await
            .map_err(|e| AppError::failed("a blocking worker", e))?
    }

    pub fn checkout(&self) -> Result<Beneath, AppError> {
        Beneath::open(&self.cfg.repo).map_err(|e| {
            AppError::failed(
                &format!("opening the checkout {}", self.cfg.repo.display()),
                e,
            )
        })
    }

    pub fn list(&self, all: bool) -> Result<Vec<SuggestionSummary>, AppError> {
        let st = self.lock()?;
        Ok(st
            .order
            .iter()
            .filter_map(|id| st.suggestions.get(id))
            .filter(|s| all || s.closed.is_none())
            .map(|s| SuggestionSummary::from(&s.view()))
            .collect())
    }

    /// Find a suggestion by id or unique id prefix (the CLI's short ids).
    pub fn resolve_id(st: &State, id: &str) -> Result<String, AppError> {
        crate::model::resolve_id(
            id,
            st.suggestions.keys(),
            "",
            "suggestion",
            "`hunkgate list` shows them",
        )
    }

    pub fn get(&self, id: &str) -> Result<SuggestionView, AppError> {
        let st = self.lock()?;
        let id = Self::resolve_id(&st, id)?;
        Ok(st.suggestions[&id].view())
    }

    /// Add a new suggestion (durably) and announce it.
    pub fn add_suggestion(&self, s: Suggestion) -> Result<SuggestionView, AppError> {
        let (view, ready, line) =
            self.record_suggestion(NewSuggestion::prepare(s)?, None::<fn(&mut RunRec)>)?;
        self.emit_suggestion_ready(&view, ready);
        drop(line);
        Ok(view)
    }

    /// Journal the new suggestion and add it to the state, without saying so to clients yet
    /// (see [`Hub::emit_suggestion_ready`]): whatever else a client will read when it reacts
    /// to `suggestion.ready` (its run, say) is recorded in between. `run_update`, if any, is
    /// made to the suggestion's run in the same journal append — one write and one fsync for
    /// both records, and neither is adopted if that append fails. Returns the suggestion's
    /// view and its event, which a big suggestion's [`NewSuggestion::prepare`] encodes on
    /// another thread meanwhile: the journal's write and fsync take as long. Also returns the
    /// journal line written, for the caller to drop once the event is sent: for a big
    /// suggestion it is hundreds of kilobytes, and freeing it had the allocator consolidate
    /// its free lists and give memory back — about a millisecond — before the event went out.
    pub(crate) fn record_suggestion(
        &self,
        new: NewSuggestion,
        run_update: Option<impl FnOnce(&mut RunRec)>,
    ) -> Result<(SuggestionView, ReadyJson, Vec<u8>), AppError> {
        let NewSuggestion {
            suggestion: s,
            mut line,
            viewing,
        } = new;
        test_hooks::pause("before-suggestion-journal");
        let mut st = self.lock()?;
        let run = match (run_update, st.runs.get(&s.run_id)) {
            (Some(update), Some(run)) => {
                let mut run = run.clone();
                update(&mut run);
                let rec = Record::Run(Box::new(run));
                line.extend(
                    Journal::line_of(&rec)
                        .map_err(|e| AppError::failed("encoding the run for the journal", e))?,
                );
                let Record::Run(run) = rec else {
                    unreachable!("the record was made as a run just above")
                };
                Some(run)
            }
            _ => None,
        };
        self.journal_append_line(&line)?;
        if let Some(run) = run {
            st.runs.insert(s.run_id.clone(), *run);
        }
        let id = s.id.clone();
        st.order.push(id.clone());
        st.suggestions.insert(id.clone(), *s);
        drop(st);
        match viewing.wait() {
            Ok((view, ready)) => Ok((view, ready, line)),
            // It cannot fail (a view is plain data) and its thread cannot panic; were either
            // to happen, the suggestion is recorded by now and is announced all the same.
            Err(e) => {
                tracing::error!(error = %e, suggestion = id, "encoding a new suggestion's view; encoding it again");
                let view = self.get(&id)?;
                let ready = ReadyJson::encode(&view, 0)
                    .map_err(|e| AppError::failed("encoding the suggestion's view", e))?;
                Ok((view, ready, line))
            }
        }
    }

    /// `suggestion.ready` and `checkpoint.created` for a recorded suggestion (`ready`, its
    /// event as [`Hub::record_suggestion`] returned it).
    pub(crate) fn emit_suggestion_ready(&self, view: &SuggestionView, ready: ReadyJson) {
        self.bus.emit_json(|seq| ready.finish(seq));
        test_hooks::pause("suggestion-ready");
        self.bus.emit(Event::CheckpointCreated {
            seq: 0,
            checkpoint_id: view.id.clone(),
            suggestion_id: view.id.clone(),
            run_id: view.run_id.clone(),
            affected_files: view.files.clone(),
        });
    }
}

/// A new suggestion with its journal line made in advance ([`NewSuggestion::prepare`]), and
/// its view and `suggestion.ready` made or being made: for a big suggestion each takes
/// milliseconds, which [`Hub::record_suggestion`] then spends on no lock and no async worker.
pub(crate) struct NewSuggestion {
    suggestion: Box<Suggestion>,
    line: Vec<u8>,
    viewing: Viewing,
}

/// A new suggestion's view and its `suggestion.ready`: made already, or on a thread of their
/// own.
enum Viewing {
    Made(Box<serde_json::Result<(SuggestionView, ReadyJson)>>),
    Apart(std::thread::JoinHandle<serde_json::Result<(SuggestionView, ReadyJson)>>),
}

impl Viewing {
    fn wait(self) -> serde_json::Result<(SuggestionView, ReadyJson)> {
        match self {
            Viewing::Made(made) => *made,
            Viewing::Apart(thread) => thread.join().unwrap_or_else(|_| {
                Err(serde::ser::Error::custom(
                    "the thread encoding the view panicked",
                ))
            }),
        }
    }
}

impl NewSuggestion {
    /// From this many hunks on, the journal line, the view and the view's JSON are made on
    /// more than one thread: each takes about a millisecond per 500 hunks, a thread a
    /// fraction of one.
    const APART_AT: usize = 256;

    /// Encode `s` for the journal, and make its view and `suggestion.ready`. For a big one,
    /// the view is made beside the journal line, and its JSON (the larger of the two) goes
    /// on being encoded on a thread of its own while the caller journals the suggestion
    /// ([`Hub::record_suggestion`]) — that is, while the disk writes.
    pub(crate) fn prepare(s: Suggestion) -> Result<Self, AppError> {
        let apart = s.hunks.len() >= Self::APART_AT;
        // About what each encoding of the suggestion takes: its hunks' lines, and some room
        // for each hunk's other fields.
        let size: usize = s
            .hunks
            .iter()
            .filter_map(|h| h.patch.as_ref())
            .flat_map(|p| &p.lines)
            .map(|l| l.text().len() + 4)
            .sum::<usize>()
            + 400 * s.hunks.len()
            + 4096;
        // Encoded as it is, then taken back out of the record: no copy of its hunks.
        let rec = Record::Suggestion(Box::new(s));
        let Record::Suggestion(suggestion) = &rec else {
            unreachable!("the record was made as a suggestion just above")
        };
        let encoded = move |view: SuggestionView| ReadyJson::encode(&view, size).map(|r| (view, r));
        let (line, viewing) = if apart {
            let (line, view) = std::thread::scope(|scope| {
                let viewing = scope.spawn(|| suggestion.view());
                let line = Journal::line_sized(&rec, size);
                let view = viewing
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (line, view)
            });
            // Only once there is a line to journal: nothing is left running on an error.
            let line =
                line.map_err(|e| AppError::failed("encoding the suggestion for the journal", e))?;
            (
                line,
                Viewing::Apart(std::thread::spawn(move || encoded(view))),
            )
        } else {
            let line = Journal::line_sized(&rec, size)
                .map_err(|e| AppError::failed("encoding the suggestion for the journal", e))?;
            (line, Viewing::Made(Box::new(encoded(suggestion.view()))))
        };
        let Record::Suggestion(suggestion) = rec else {
            unreachable!("the record was made as a suggestion just above")
        };
        Ok(Self {
            suggestion,
            line,
            viewing,
        })
    }

    pub(crate) fn suggestion(&self) -> &Suggestion {
        &self.suggestion
    }
}

/// Test seams, in debug builds only: with `HUNKGATE_TEST_PAUSE_DIR=<dir>` set, a decision that
/// reaches a named point while `<dir>/<point>.pause` exists creates `<dir>/<point>.reached` and
/// waits (at most a minute) until the `.pause` file is gone (then creates `<point>.left`), so a test can bring about a real
/// fault (fill a disk, make a file immutable, edit a file) at exactly that moment. Points:
/// `before-write` (after the `prepare` is fsynced, before the checkout is written) and
/// `before-commit` (after the checkout is written, before the feedback line and `commit`);
/// `before-rename`, when a file's new content is written and found still made from the file,
/// right before it is put in place (the window a user's save used to be lost in);
/// `suggestion-ready`, right after a new suggestion's `suggestion.ready` is sent;
/// `before-suggestion-journal`, once a publish's run commit is written, before the suggestion
/// and its run are journaled; `before-run-refs`, once a suggestion is announced, before its
/// refs are set in the checkpoint store; `gc-after-state` and `gc-after-refs`, between a garbage
/// collection's steps ([`crate::gc`]).
pub mod test_hooks {
    #[cfg(debug_assertions)]
    pub fn pause(point: &str) {
        let Some(dir) = std::env::var_os("HUNKGATE_TEST_PAUSE_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        let gate = dir.join(format!("{point}.pause"));
        if !gate.exists() {
            return;
        }
        let _ = std::fs::write(dir.join(format!("{point}.reached")), b"");
        let wait = || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while gate.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        // A point reached on one of the runtime's workers hands that worker's other tasks
        // on, so the hub keeps serving the test's requests while it waits.
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            _ => wait(),
        }
        let _ = std::fs::write(dir.join(format!("{point}.left")), b"");
    }

    #[cfg(not(debug_assertions))]
    #[inline(always)]
    pub fn pause(_point: &str) {}
}

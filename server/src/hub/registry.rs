//! What the hub keeps in memory beside its journaled state: the live runs (sandbox slots, agent
//! tokens, pending questions, the queue of runs waiting for a slot, the shared model provider)
//! and the sessions registry rebuilt from the journal.
//!
//! May import: `protocol`, `error`, `model`, `store`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hunkgate_sandbox::store::FlatTree;
use hunkgate_sandbox::workspace::{Sandbox, SharedSlot, Slot};
use hunkgate_sandbox::ObjectId;
use tokio_util::sync::CancellationToken;

use crate::error::AppError;
use crate::model::chat::{Provider, ProviderError};
use crate::model::session::{Entry, SessionRec};
use crate::protocol::ErrorCode;
use crate::store::journal::{Record, RecordRef};

/// What a run in progress needs for `publish`.
pub(crate) struct Active {
    pub(crate) base_commit: ObjectId,
    pub(crate) base_tree: Arc<FlatTree>,
    /// The id of `base_tree` in the checkpoint store.
    pub(crate) base_tree_id: ObjectId,
    pub(crate) sandbox: Arc<dyn Sandbox>,
    /// The run's jj change, when the sandbox uses jj.
    pub(crate) change_id: Option<String>,
    /// The sensitive-file policy the base was made with: what it withheld, the publish
    /// refuses (see [`crate::config::sensitive`]).
    pub(crate) sensitive: Arc<crate::config::sensitive::Policy>,
}

/// Live run bookkeeping (not persisted: a run does not survive a hub restart).
pub struct Runs {
    pub(crate) sandbox_root: PathBuf,
    /// The sandbox slots, each the one owner of what its slot keeps between runs (see
    /// [`Slot`]): they end with the hub.
    pub(crate) slots: Mutex<Vec<SlotEntry>>,
    pub(crate) cancels: Mutex<HashMap<String, CancellationToken>>,
    pub(crate) agent_tokens: Mutex<HashMap<String, String>>,
    pub(crate) active: Mutex<HashMap<String, Arc<Active>>>,
    /// The question each waiting built-in agent run asked, and where its answer goes.
    pub(crate) questions: Mutex<HashMap<String, (String, tokio::sync::oneshot::Sender<String>)>>,
    /// The built-in agent's model provider, made on first use and shared by every run: one
    /// connection pool, and what it learned about the server (e.g. that it will not stream
    /// tool calls) holds for the hub's life.
    pub(crate) provider: std::sync::OnceLock<Arc<dyn Provider>>,
    /// Runs waiting for one of the `max_concurrent_runs` slots, in the order they were posted.
    pub(crate) gate: Mutex<Gate>,
    /// Woken whenever a slot frees or a queued run leaves the queue.
    pub(crate) gate_changed: tokio::sync::Notify,
    /// The checkout's last snapshot and the change-notification watch that lets the next one
    /// look only at what changed (held for the whole snapshot: snapshots take turns).
    pub(crate) checkout: Mutex<Option<hunkgate_sandbox::checkout::CheckoutWatch>>,
    /// The ACP agents kept between the runs of their sessions, with the slots they hold
    /// (`runs::acp_live`, a layer above: made and read there).
    pub(crate) acp_live: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
}

/// A sandbox slot as the registry holds it.
#[derive(Default)]
pub(crate) struct SlotEntry {
    /// A run has it.
    busy: bool,
    /// What it keeps between runs, lent to the run that has it.
    state: SharedSlot,
}

#[derive(Default)]
pub(crate) struct Gate {
    pub(crate) running: usize,
    pub(crate) queue: std::collections::VecDeque<String>,
}

pub(crate) fn poisoned() -> AppError {
    AppError::internal("the run bookkeeping lock is poisoned (a thread panicked); restart the hub")
}

impl Runs {
    pub fn new(sandbox_root: PathBuf) -> Self {
        Self {
            sandbox_root,
            slots: Mutex::new(Vec::new()),
            cancels: Mutex::new(HashMap::new()),
            agent_tokens: Mutex::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
            questions: Mutex::new(HashMap::new()),
            provider: std::sync::OnceLock::new(),
            gate: Mutex::new(Gate::default()),
            gate_changed: tokio::sync::Notify::new(),
            checkout: Mutex::new(None),
            acp_live: std::sync::OnceLock::new(),
        }
    }

    /// The hub's one model provider, made by `make` on first use.
    pub(crate) fn provider(
        &self,
        make: impl FnOnce() -> Result<Arc<dyn Provider>, ProviderError>,
    ) -> Result<Arc<dyn Provider>, ProviderError> {
        if let Some(p) = self.provider.get() {
            return Ok(Arc::clone(p));
        }
        let made = make()?;
        Ok(Arc::clone(self.provider.get_or_init(|| made)))
    }

    /// Register `run_id`'s question (one at a time, seed 000 §21); the answer arrives on the
    /// returned channel.
    pub fn ask(
        &self,
        run_id: &str,
        question_id: &str,
    ) -> Result<tokio::sync::oneshot::Receiver<String>, AppError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut q = self.questions.lock().map_err(|_| poisoned())?;
        if q.contains_key(run_id) {
            return Err(AppError::conflict(
                ErrorCode::QuestionPending,
                "one question at a time: the last one is not answered yet".into(),
            ));
        }
        q.insert(run_id.to_string(), (question_id.to_string(), tx));
        Ok(rx)
    }

    /// Deliver an answer; returns the question's id.
    pub fn reply(
        &self,
        run_id: &str,
        question_id: Option<&str>,
        answer: String,
    ) -> Result<String, AppError> {
        let mut q = self.questions.lock().map_err(|_| poisoned())?;
        let Some((qid, _)) = q.get(run_id) else {
            return Err(AppError::conflict(
                ErrorCode::NoQuestion,
                format!("run {run_id} is not waiting for an answer"),
            ));
        };
        if question_id.is_some_and(|given| given != qid) {
            return Err(AppError::conflict(
                ErrorCode::StaleQuestion,
                format!(
                    "question {qid} is the one pending, not {}",
                    question_id.unwrap_or("")
                ),
            ));
        }
        let Some((qid, tx)) = q.remove(run_id) else {
            return Err(AppError::internal(format!(
                "run {run_id}: its pending question vanished while answering"
            )));
        };
        // The run may have been cancelled meanwhile; then nobody listens, which is fine.
        let _ = tx.send(answer);
        Ok(qid)
    }

    pub fn forget_question(&self, run_id: &str) {
        if let Ok(mut q) = self.questions.lock() {
            q.remove(run_id);
        }
    }

    /// A sandbox directory no other run is using; reused across runs so a sync writes only what
    /// differs from its last base (between runs it holds exactly that base, nothing more).
    ///
    /// `local`: the slots are directories under `sandbox_root` that agents run in as the hub's
    /// own user (`--isolation none`). A slot where some process still has its working directory
    /// is then skipped: an agent's child left by an earlier hub (killed with `kill -9` where no
    /// PID namespace could be had) must never write into the sandbox of the next run.
    pub(crate) fn acquire_slot(&self, local: bool) -> Result<(usize, SharedSlot), AppError> {
        let mut slots = self.slots.lock().map_err(|_| poisoned())?;
        for i in 0.. {
            if i == slots.len() {
                slots.push(SlotEntry {
                    busy: false,
                    state: Slot::shared(),
                });
            }
            if slots[i].busy {
                continue;
            }
            if local {
                if let Some(pid) = process_inside(&self.sandbox_root.join(i.to_string())) {
                    tracing::warn!(
                        slot = i,
                        pid,
                        "a process left by an earlier run still works in this sandbox; using another"
                    );
                    continue;
                }
            }
            slots[i].busy = true;
            return Ok((i, slots[i].state.clone()));
        }
        unreachable!("an unbounded range ends only by returning")
    }

    /// The state of slot `i`, which its holder already has marked busy (a kept ACP agent's
    /// slot, handed on to its session's next run).
    pub(crate) fn held_slot(&self, i: usize) -> Result<SharedSlot, AppError> {
        let slots = self.slots.lock().map_err(|_| poisoned())?;
        match slots.get(i) {
            Some(s) if s.busy => Ok(s.state.clone()),
            _ => Err(AppError::internal("a kept agent's slot is not held")),
        }
    }

    pub(crate) fn release_slot(&self, i: usize) {
        if let Ok(mut slots) = self.slots.lock() {
            if let Some(s) = slots.get_mut(i) {
                s.busy = false;
            }
        }
    }

    /// The run an agent token belongs to.
    pub fn run_for_token(&self, token: &str) -> Option<String> {
        let tokens = self.agent_tokens.lock().ok()?;
        tokens
            .iter()
            .find(|(t, _)| crate::hub::auth::constant_time_eq(t.as_bytes(), token.as_bytes()))
            .map(|(_, r)| r.clone())
    }
}

#[derive(Debug, Default)]
pub struct Sessions {
    pub sessions: BTreeMap<String, SessionRec>,
    pub history: BTreeMap<String, Vec<Entry>>,
}

impl Sessions {
    /// Rebuild from journal records (the newest record of a session wins).
    pub fn replay(&mut self, rec: Record) {
        match rec {
            Record::Session(s) => {
                self.sessions.insert(s.id.clone(), *s);
            }
            Record::History(e) => {
                let list = self.history.entry(e.session_id.clone()).or_default();
                if e.index == list.len() {
                    list.push(*e);
                }
            }
            _ => {}
        }
    }

    /// Records that restore this state (for journal compaction).
    pub fn records(&self) -> Vec<RecordRef<'_>> {
        let mut out: Vec<RecordRef<'_>> = self.sessions.values().map(RecordRef::Session).collect();
        for list in self.history.values() {
            out.extend(list.iter().map(RecordRef::History));
        }
        out
    }
}

/// Some process whose working directory is `dir` or beneath it (Linux; elsewhere none is found).
fn process_inside(dir: &std::path::Path) -> Option<i32> {
    hunkgate_sandbox::supervise::procs::working_in(dir).next()
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;

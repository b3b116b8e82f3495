//! Agent runs: snapshot the checkout as a base commit, bring a sandbox to it, run the agent,
//! record what it left as the run commit, and publish the difference as a suggestion.
//!
//! `mod.rs` starts, queues and cancels runs; `exec.rs` runs the agent in its sandbox;
//! `builtin.rs` drives the built-in agent; `acp.rs` drives an agent over the Agent Client
//! Protocol, and `acp_live.rs` keeps it between the runs of its session; `publish.rs` turns a
//! sandbox into a suggestion.

mod acp;
mod acp_live;
mod builtin;
mod checks;
mod exec;
mod pages;
mod publish;

pub use exec::{LOG_HEAD, LOG_TAIL};
pub use publish::{restore_run_refs, MAX_DESCRIPTIONS_TOTAL, MAX_HUNK_DESCRIPTION};

use std::sync::Arc;
use std::time::Duration;

use hunkgate_sandbox::agent::build_argv;
use tokio_util::sync::CancellationToken;

use crate::error::AppError;
use crate::hub::registry::poisoned;
use crate::hub::Hub;
use crate::model::now;
use crate::model::run::RunRec;
use crate::model::text::first_line;
use crate::protocol::{ErrorCode, Event, RunCmd, RunState, RunView};
use crate::store::journal::Record;

/// The `error` of an `interrupted` run.
pub const INTERRUPTED: &str = "interrupted: the hub restarted while this run was in progress; \
its suggestions, session and history are kept, start the session's next run to go on";

/// A run's place in the gate: a slot once `holding`, a place in the queue before. Dropping it
/// gives either back (also when the run's task ends early or panics).
struct Slot {
    hub: Arc<Hub>,
    run_id: String,
    holding: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut g) = self.hub.runs().gate.lock() {
            if self.holding {
                g.running = g.running.saturating_sub(1);
            } else {
                g.queue.retain(|r| r != &self.run_id);
            }
        }
        self.hub.runs().gate_changed.notify_waiters();
    }
}

impl Hub {
    pub fn update_run(
        &self,
        run_id: &str,
        f: impl FnOnce(&mut RunRec),
    ) -> Result<RunRec, AppError> {
        let mut st = self.lock()?;
        let run = st
            .runs
            .get_mut(run_id)
            .ok_or_else(|| AppError::not_found(format!("no run {run_id:?}")))?;
        let was_running = !run.finished();
        f(run);
        // A failed run's error carries the agent's stderr: no secret-looking string in it is
        // kept (see [`crate::model::redact`]).
        if let Some(e) = run.error.as_mut() {
            *e = crate::model::redact::redacted(e);
        }
        // A run stopped because the hub itself is shutting down was not cancelled by anyone:
        // it was interrupted, and says so (the hub marks those it finds unfinished at start
        // the same way).
        if was_running && run.status == RunState::Cancelled && self.shutdown().is_cancelled() {
            run.status = RunState::Interrupted;
            run.question = None;
            run.error = Some(INTERRUPTED.into());
        }
        let rec = run.clone();
        self.journal_append(&Record::Run(Box::new(rec.clone())))?;
        Ok(rec)
    }

    pub fn run_view(&self, run_id: &str) -> Result<RunView, AppError> {
        let st = self.lock()?;
        st.runs
            .get(run_id)
            .cloned()
            .ok_or_else(|| AppError::not_found(format!("no run {run_id:?}")))
    }

    pub fn list_runs(&self) -> Result<Vec<RunView>, AppError> {
        let st = self.lock()?;
        let mut runs: Vec<RunView> = st.runs.values().cloned().collect();
        runs.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(runs)
    }

    /// `suggestion.error` for a run that failed (or was cancelled).
    fn run_error(&self, run_id: &str, code: ErrorCode, message: String) {
        self.bus().emit(Event::Error {
            seq: 0,
            code,
            message,
            suggestion_id: None,
            hunk_id: None,
            run_id: Some(run_id.to_string()),
            merge: None,
        });
    }

    fn run_status(&self, run_id: &str, status: &str, message: String) {
        self.bus().emit(Event::Status {
            seq: 0,
            suggestion_id: None,
            run_id: Some(run_id.to_string()),
            status: status.to_string(),
            message,
        });
    }

    /// Which agent a run gets: the request's, the session's model, the hub's default. The
    /// built-in agent's settings go request > session > config (seed 003).
    fn resolve_driver(
        &self,
        cmd: &RunCmd,
        session: Option<&crate::model::session::SessionRec>,
    ) -> Result<Driver, AppError> {
        let session_model = session.and_then(|s| s.model.as_deref());
        let builtin = |model: Option<&str>| -> Result<Driver, AppError> {
            let routing = &self.cfg().routing;
            if routing.providers.is_empty() {
                return Err(AppError::bad_request(
                    "the built-in agent needs a model server: start the hub with --provider-url (e.g. http://127.0.0.1:11434/v1 for Ollama) or [provider] base_url".into(),
                ));
            }
            let ask = crate::agent::routing::Ask::resolve(
                routing,
                [model, cmd.provider.as_deref(), cmd.agent_mode.as_deref()],
                [
                    session_model,
                    session.and_then(|s| s.provider.as_deref()),
                    session.and_then(|s| s.agent_mode.as_deref()),
                ],
            )
            .map_err(AppError::bad_request)?;
            let model = ask.provisional_model(routing).unwrap_or_default();
            let rules = routing
                .providers
                .iter()
                .any(|p| !p.models.is_empty() || p.discover);
            if model.trim().is_empty() && !rules {
                return Err(AppError::bad_request(
                    "no model: pass \"model\" with the run, or start the hub with --model".into(),
                ));
            }
            Ok(Driver::Builtin { model, ask })
        };
        if let Some(acp) = cmd.acp.as_deref() {
            if cmd.agent.is_some()
                || cmd.model.is_some()
                || cmd.provider.is_some()
                || cmd.agent_mode.is_some()
            {
                return Err(AppError::bad_request(
                    "\"acp\" names the run's agent: leave out \"agent\" and \"model\"".into(),
                ));
            }
            return Ok(Driver::Acp(acp.to_string()));
        }
        let wants_builtin =
            cmd.model.is_some() || cmd.provider.is_some() || cmd.agent_mode.is_some();
        match (cmd.agent.as_deref(), wants_builtin) {
            (Some(BUILTIN), _) | (None, true) => builtin(cmd.model.as_deref()),
            (Some(_), true) => Err(AppError::bad_request(
                "\"model\", \"provider\" and \"agent_mode\" are for the built-in agent; an agent command chooses its own".into(),
            )),
            (Some(t), false) => Ok(Driver::Command(t.to_string())),
            (None, false) => match self.cfg().agent.as_deref() {
                _ if session_model.is_some() => builtin(None),
                None if self.cfg().acp.command.is_some() => Ok(Driver::Acp(
                    self.cfg().acp.command.clone().unwrap_or_default(),
                )),
                Some(BUILTIN) => builtin(None),
                Some(t) => Ok(Driver::Command(t.to_string())),
                None if !self.cfg().routing.providers.is_empty() => builtin(None),
                None => Err(AppError::bad_request(
                    "no agent configured: pass \"agent\" (e.g. \"claude -p {prompt}\"), or start the hub with --agent, or with --provider-url for the built-in agent".into(),
                )),
            },
        }
    }

    /// Queue a run of an agent on a prompt, in a session (a new one unless named).
    pub fn start_run(self: &Arc<Self>, cmd: &RunCmd) -> Result<RunView, AppError> {
        let (driver, timeout) = self.plan_run(cmd)?;
        let prompt = cmd.prompt.as_str();
        let run_id = uuid::Uuid::new_v4().to_string();
        let session = self.session_for_run(cmd.session_id.as_deref(), prompt, &run_id)?;
        let run = new_run_rec(run_id, prompt, &driver, session.id);
        {
            let mut st = self.lock()?;
            self.journal_append(&Record::Run(Box::new(run.clone())))?;
            st.runs.insert(run.run_id.clone(), run.clone());
        }
        self.history(
            &run.run_id,
            crate::model::session::Entry::message("user", prompt),
        );
        let cancel = self.shutdown().child_token();
        self.runs()
            .cancels
            .lock()
            .map_err(|_| poisoned())?
            .insert(run.run_id.clone(), cancel.clone());
        let ahead = self.enqueue(&run.run_id)?;
        self.run_status(
            &run.run_id,
            "queued",
            queued_message(prompt, ahead, self.cfg().max_concurrent_runs),
        );
        let hub = self.clone();
        let job = RunJob {
            run_id: run.run_id.clone(),
            driver,
            prompt: prompt.to_string(),
            timeout,
            cancel,
        };
        self.tasks()
            .spawn(async move { hub.drive_queued(job).await });
        // Seed 000 §25: collect finished work after each new run (off this request's path).
        self.collect_in_background(crate::gc::Trigger::NewRun);
        Ok(run.clone())
    }

    /// Check a run request and choose its agent and time limit, before anything is recorded.
    fn plan_run(&self, cmd: &RunCmd) -> Result<(Driver, Duration), AppError> {
        let prompt = cmd.prompt.as_str();
        if prompt.trim().is_empty() {
            return Err(AppError::bad_request("prompt is empty".into()));
        }
        let session = match &cmd.session_id {
            Some(id) => Some(self.session_view(id)?.session),
            None => None,
        };
        let driver = self.resolve_driver(cmd, session.as_ref())?;
        match &driver {
            // Refuse a broken template now rather than as a failed run later.
            Driver::Command(template) => {
                build_argv(template, prompt).map_err(|e| AppError::bad_request(e.to_string()))?;
            }
            Driver::Acp(command) => check_acp_command(command)?,
            Driver::Builtin { .. } => {}
        }
        let timeout = Duration::from_secs(
            cmd.timeout_secs
                .unwrap_or(self.cfg().agent_timeout.as_secs())
                .max(1),
        );
        Ok((driver, timeout))
    }

    /// Put `run_id` at the back of the queue; how many runs are ahead of it beyond the free
    /// slots.
    fn enqueue(&self, run_id: &str) -> Result<usize, AppError> {
        let mut g = self.runs().gate.lock().map_err(|_| poisoned())?;
        g.queue.push_back(run_id.to_string());
        Ok((g.running + g.queue.len()).saturating_sub(self.cfg().max_concurrent_runs.max(1)))
    }

    /// A queued run's task: wait for a slot, run it, record how it ended, and forget its live
    /// bookkeeping.
    async fn drive_queued(self: Arc<Self>, job: RunJob) {
        let run_id = job.run_id.clone();
        let result = match self.wait_for_slot(&run_id, &job.cancel).await {
            Some(slot) => {
                let r = self.run_task(job).await;
                drop(slot);
                r
            }
            None => {
                let _ = self.update_run(&run_id, |r| {
                    r.status = RunState::Cancelled;
                    r.error = Some("cancelled while queued".into());
                });
                self.run_error(
                    &run_id,
                    ErrorCode::ExperimentFailed,
                    "agent cancelled while queued".into(),
                );
                Ok(())
            }
        };
        if let Err(e) = result {
            e.report();
            let msg = e.to_string();
            let _ = self.update_run(&run_id, |r| {
                r.status = RunState::Failed;
                r.error = Some(msg.clone());
            });
            self.run_error(&run_id, ErrorCode::ExperimentFailed, msg);
        }
        self.forget_run(&run_id);
        // The run's snapshots, sandbox exchanges and read-backs are freed now. The maps of the
        // packs it read go once the hub is quiet (`hub::quiet`).
        let hub = self.clone();
        tokio::task::spawn_blocking(move || {
            hunkgate_sandbox::return_freed_memory();
            hub.quiet().note();
        });
    }

    /// Drop a finished run's cancel token and open question, and note its outcome in its
    /// session's history.
    fn forget_run(&self, run_id: &str) {
        if let Ok(mut c) = self.runs().cancels.lock() {
            c.remove(run_id);
        }
        self.runs().forget_question(run_id);
        if let Ok(v) = self.run_view(run_id) {
            self.history(
                run_id,
                crate::model::session::Entry::message("system", &outcome_line(&v)),
            );
        }
    }

    /// Wait until `run_id` is first in the queue and a slot is free (`max_concurrent_runs`), or
    /// until it is cancelled (None: it left the queue).
    async fn wait_for_slot(
        self: &Arc<Self>,
        run_id: &str,
        cancel: &CancellationToken,
    ) -> Option<Slot> {
        let mut slot = Slot {
            hub: self.clone(),
            run_id: run_id.to_string(),
            holding: false,
        };
        let max = self.cfg().max_concurrent_runs.max(1);
        loop {
            let changed = self.runs().gate_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut g = self.runs().gate.lock().ok()?;
                if g.running < max && g.queue.front().map(String::as_str) == Some(run_id) {
                    g.queue.pop_front();
                    g.running += 1;
                    slot.holding = true;
                    return Some(slot);
                }
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = cancel.cancelled() => return None,
            }
        }
    }

    pub fn cancel_run(&self, run_id: &str) -> Result<RunView, AppError> {
        let view = self.run_view(run_id)?;
        if !matches!(
            view.status,
            RunState::Queued | RunState::Working | RunState::WaitingForUser
        ) {
            return Err(AppError::conflict(
                ErrorCode::Finished,
                format!("run {run_id} already finished ({:?})", view.status).to_lowercase(),
            ));
        }
        if let Some(token) = self
            .runs()
            .cancels
            .lock()
            .map_err(|_| poisoned())?
            .get(run_id)
        {
            token.cancel();
        }
        Ok(view)
    }
}

pub const BUILTIN: &str = "builtin";
/// A run's `agent` for an ACP agent: this, then its command.
pub const ACP_PREFIX: &str = "acp:";

/// An ACP agent's command: words split like a shell's, and no `{prompt}` (the prompt goes over
/// ACP).
fn check_acp_command(command: &str) -> Result<(), AppError> {
    if command.contains("{prompt}") {
        return Err(AppError::bad_request(format!(
            "ACP agent {command:?}: the prompt goes over ACP (session/prompt), so the command takes no {{prompt}}"
        )));
    }
    build_argv(command, "")
        .map(drop)
        .map_err(|e| AppError::bad_request(e.to_string()))
}

/// What drives a run: an agent command in the sandbox, an ACP agent in the sandbox (its
/// command), or the hub's own tool loop.
#[derive(Debug, Clone)]
enum Driver {
    Command(String),
    Acp(String),
    /// `model`: the one named while the run waits (the rules may choose another when it
    /// starts, and say so in its `route`).
    Builtin {
        model: String,
        ask: crate::agent::routing::Ask,
    },
}

/// What a queued run needs once it gets a slot.
struct RunJob {
    run_id: String,
    driver: Driver,
    prompt: String,
    timeout: Duration,
    cancel: CancellationToken,
}

/// A new run's record, `queued`.
fn new_run_rec(run_id: String, prompt: &str, driver: &Driver, session_id: String) -> RunRec {
    RunRec {
        run_id,
        status: RunState::Queued,
        prompt: prompt.to_string(),
        agent: Some(match driver {
            Driver::Command(t) => t.clone(),
            Driver::Acp(c) => format!("{ACP_PREFIX}{c}"),
            Driver::Builtin { model, .. } if model.is_empty() => BUILTIN.to_string(),
            Driver::Builtin { model, .. } => format!("{BUILTIN}:{model}"),
        }),
        suggestion_ids: Vec::new(),
        base_commit: None,
        error: None,
        created_at: now(),
        last_message: None,
        session_id: Some(session_id),
        model: match driver {
            Driver::Builtin { model, .. } => Some(model.clone()).filter(|m| !m.is_empty()),
            Driver::Command(_) | Driver::Acp(_) => None,
        },
        stop_reason: None,
        usage: None,
        question: None,
        agent_info: None,
        provider: None,
        route: None,
        acp_session_id: None,
    }
}

/// The `queued` status line: the prompt, and the wait when `ahead` runs are before it.
fn queued_message(prompt: &str, ahead: usize, max_concurrent_runs: usize) -> String {
    let slots = max_concurrent_runs.max(1);
    let waiting = if ahead > 0 {
        format!(
            " (waiting for a free slot: {slots} run{} at a time, {ahead} waiting)",
            if slots == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    format!("Run queued: {}{waiting}", first_line(prompt))
}

/// How a run ended, in one line for its session's history.
fn outcome_line(v: &RunView) -> String {
    let mut s = format!(
        "Run ended: {}",
        serde_json::to_value(v.status)
            .ok()
            .and_then(|x| x.as_str().map(str::to_string))
            .unwrap_or_default()
    );
    if let Some(r) = &v.stop_reason {
        s.push_str(&format!(" ({r})"));
    }
    if !v.suggestion_ids.is_empty() {
        s.push_str(&format!("; suggestion {}", v.suggestion_ids.join(", ")));
    }
    if let Some(e) = &v.error {
        s.push_str(&format!("; error: {e}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_run_names_its_agent_and_model() {
        let cmd = Driver::Command("claude -p {prompt}".into());
        let r = new_run_rec("r1".into(), "do it", &cmd, "s1".into());
        assert_eq!(r.status, RunState::Queued);
        assert_eq!(r.agent.as_deref(), Some("claude -p {prompt}"));
        assert_eq!(r.model, None);
        assert_eq!(r.session_id.as_deref(), Some("s1"));
        assert_eq!(r.prompt, "do it");
        let builtin = Driver::Builtin {
            model: "gemma".into(),
            ask: Default::default(),
        };
        let r = new_run_rec("r2".into(), "do it", &builtin, "s1".into());
        assert_eq!(r.agent.as_deref(), Some("builtin:gemma"));
        assert_eq!(r.model.as_deref(), Some("gemma"));
    }

    #[test]
    fn the_queued_message_says_the_wait_only_when_there_is_one() {
        assert_eq!(queued_message("fix it\nmore", 0, 2), "Run queued: fix it");
        assert_eq!(
            queued_message("fix it", 3, 1),
            "Run queued: fix it (waiting for a free slot: 1 run at a time, 3 waiting)"
        );
        assert_eq!(
            queued_message("fix it", 1, 2),
            "Run queued: fix it (waiting for a free slot: 2 runs at a time, 1 waiting)"
        );
        // A limit of 0 acts as 1.
        assert_eq!(
            queued_message("fix it", 1, 0),
            "Run queued: fix it (waiting for a free slot: 1 run at a time, 1 waiting)"
        );
    }
}

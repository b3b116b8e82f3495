//! Agent runs: snapshot the checkout as a base commit, bring a sandbox to it, run the agent,
//! record what it left as the run commit, and publish the difference as a suggestion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, build_argv, scrubbed_env, Exit};
use hunkgate_sandbox::jj::{self, Vcs};
use hunkgate_sandbox::snapshot::{snapshot_checkout, DEFAULT_FILE_CAP};
use hunkgate_sandbox::store::FlatTree;
use hunkgate_sandbox::workspace::{LocalSandbox, Sandbox};
use hunkgate_sandbox::ObjectId;
use tokio_util::sync::CancellationToken;

use crate::error::AppError;
use crate::hub::registry::{poisoned, Active};
use crate::hub::Hub;
use crate::model::now;
use crate::model::run::RunRec;
use crate::model::suggestion::{attach_notes, build_hunks, Suggestion};
use crate::protocol::{ErrorCode, Event, HunkNote, RunCmd, RunState, RunView, SuggestionView};
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
        if let Ok(mut g) = self.hub.runs.gate.lock() {
            if self.holding {
                g.running = g.running.saturating_sub(1);
            } else {
                g.queue.retain(|r| r != &self.run_id);
            }
        }
        self.hub.runs.gate_changed.notify_waiters();
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
            .ok_or_else(|| AppError::NotFound(format!("no run {run_id:?}")))?;
        let was_running = !run.finished();
        f(run);
        // A run stopped because the hub itself is shutting down was not cancelled by anyone:
        // it was interrupted, and says so (the hub marks those it finds unfinished at start
        // the same way).
        if was_running && run.status == RunState::Cancelled && self.shutdown.is_cancelled() {
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
            .ok_or_else(|| AppError::NotFound(format!("no run {run_id:?}")))
    }

    pub fn list_runs(&self) -> Result<Vec<RunView>, AppError> {
        let st = self.lock()?;
        let mut runs: Vec<RunView> = st.runs.values().cloned().collect();
        runs.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(runs)
    }

    /// `suggestion.error` for a run that failed (or was cancelled).
    fn run_error(&self, run_id: &str, code: ErrorCode, message: String) {
        self.bus.emit(Event::Error {
            seq: 0,
            code,
            message,
            suggestion_id: None,
            hunk_id: None,
            run_id: Some(run_id.to_string()),
        });
    }

    fn run_status(&self, run_id: &str, status: &str, message: String) {
        self.bus.emit(Event::Status {
            seq: 0,
            suggestion_id: None,
            run_id: Some(run_id.to_string()),
            status: status.to_string(),
            message,
        });
    }

    /// Which agent a run gets: the request's, the session's model, the hub's default.
    fn resolve_driver(
        &self,
        cmd: &RunCmd,
        session_model: Option<&str>,
    ) -> Result<Driver, AppError> {
        let builtin = |model: Option<&str>| -> Result<Driver, AppError> {
            let Some(p) = &self.cfg.provider else {
                return Err(AppError::BadRequest(
                    "the built-in agent needs a model server: start the hub with --provider-url (e.g. http://127.0.0.1:11434/v1 for Ollama) or [provider] base_url".into(),
                ));
            };
            let model = model
                .or(session_model)
                .map(str::to_string)
                .unwrap_or_else(|| p.model.clone());
            if model.trim().is_empty() {
                return Err(AppError::BadRequest(
                    "no model: pass \"model\" with the run, or start the hub with --model".into(),
                ));
            }
            Ok(Driver::Builtin { model })
        };
        match (cmd.agent.as_deref(), cmd.model.as_deref()) {
            (Some(BUILTIN), m) | (None, m @ Some(_)) => builtin(m),
            (Some(_), Some(_)) => Err(AppError::BadRequest(
                "\"model\" is for the built-in agent; an agent command chooses its own".into(),
            )),
            (Some(t), None) => Ok(Driver::Command(t.to_string())),
            (None, None) => match self.cfg.agent.as_deref() {
                _ if session_model.is_some() => builtin(None),
                Some(BUILTIN) => builtin(None),
                Some(t) => Ok(Driver::Command(t.to_string())),
                None if self.cfg.provider.is_some() => builtin(None),
                None => Err(AppError::BadRequest(
                    "no agent configured: pass \"agent\" (e.g. \"claude -p {prompt}\"), or start the hub with --agent, or with --provider-url for the built-in agent".into(),
                )),
            },
        }
    }

    /// Queue a run of an agent on a prompt, in a session (a new one unless named).
    pub fn start_run(self: &Arc<Self>, cmd: &RunCmd) -> Result<RunView, AppError> {
        let prompt = cmd.prompt.as_str();
        if prompt.trim().is_empty() {
            return Err(AppError::BadRequest("prompt is empty".into()));
        }
        let session_model = match &cmd.session_id {
            Some(id) => self.session_view(id)?.session.model,
            None => None,
        };
        let driver = self.resolve_driver(cmd, session_model.as_deref())?;
        if let Driver::Command(template) = &driver {
            // Refuse a broken template now rather than as a failed run later.
            build_argv(template, prompt).map_err(|e| AppError::BadRequest(e.to_string()))?;
        }
        let timeout = Duration::from_secs(
            cmd.timeout_secs
                .unwrap_or(self.cfg.agent_timeout.as_secs())
                .max(1),
        );
        let run_id = uuid::Uuid::new_v4().to_string();
        let session = self.session_for_run(cmd.session_id.as_deref(), prompt, &run_id)?;
        let run = RunRec {
            run_id,
            status: RunState::Queued,
            prompt: prompt.to_string(),
            agent: Some(match &driver {
                Driver::Command(t) => t.clone(),
                Driver::Builtin { model } => format!("{BUILTIN}:{model}"),
            }),
            suggestion_ids: Vec::new(),
            base_commit: None,
            error: None,
            created_at: now(),
            last_message: None,
            session_id: Some(session.id),
            model: match &driver {
                Driver::Builtin { model } => Some(model.clone()),
                Driver::Command(_) => None,
            },
            stop_reason: None,
            usage: None,
            question: None,
        };
        {
            let mut st = self.lock()?;
            self.journal_append(&Record::Run(Box::new(run.clone())))?;
            st.runs.insert(run.run_id.clone(), run.clone());
        }
        self.history(
            &run.run_id,
            crate::model::session::Entry::message("user", prompt),
        );
        let cancel = self.shutdown.child_token();
        self.runs
            .cancels
            .lock()
            .map_err(|_| poisoned())?
            .insert(run.run_id.clone(), cancel.clone());
        let ahead = {
            let mut g = self.runs.gate.lock().map_err(|_| poisoned())?;
            g.queue.push_back(run.run_id.clone());
            (g.running + g.queue.len()).saturating_sub(self.cfg.max_concurrent_runs.max(1))
        };
        let waiting = if ahead > 0 {
            format!(
                " (waiting for a free slot: {} run{} at a time, {ahead} waiting)",
                self.cfg.max_concurrent_runs.max(1),
                if self.cfg.max_concurrent_runs == 1 {
                    ""
                } else {
                    "s"
                }
            )
        } else {
            String::new()
        };
        self.run_status(
            &run.run_id,
            "queued",
            format!("Run queued: {}{waiting}", first_line(prompt)),
        );
        let hub = self.clone();
        let run_id = run.run_id.clone();
        let prompt = prompt.to_string();
        self.tasks.spawn(async move {
            let result = match hub.wait_for_slot(&run_id, &cancel).await {
                Some(slot) => {
                    let r = hub
                        .run_task(&run_id, &driver, &prompt, timeout, cancel)
                        .await;
                    drop(slot);
                    r
                }
                None => {
                    let _ = hub.update_run(&run_id, |r| {
                        r.status = RunState::Cancelled;
                        r.error = Some("cancelled while queued".into());
                    });
                    hub.run_error(
                        &run_id,
                        ErrorCode::ExperimentFailed,
                        "agent cancelled while queued".into(),
                    );
                    Ok(())
                }
            };
            if let Err(e) = result {
                let msg = e.to_string();
                let _ = hub.update_run(&run_id, |r| {
                    r.status = RunState::Failed;
                    r.error = Some(msg.clone());
                });
                hub.run_error(&run_id, ErrorCode::ExperimentFailed, msg);
            }
            if let Ok(mut c) = hub.runs.cancels.lock() {
                c.remove(&run_id);
            }
            hub.runs.forget_question(&run_id);
            if let Ok(v) = hub.run_view(&run_id) {
                hub.history(
                    &run_id,
                    crate::model::session::Entry::message("system", &outcome_line(&v)),
                );
            }
        });
        Ok(run.clone())
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
        let max = self.cfg.max_concurrent_runs.max(1);
        loop {
            let changed = self.runs.gate_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut g = self.runs.gate.lock().ok()?;
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
            return Err(AppError::Conflict {
                code: ErrorCode::Finished,
                message: format!("run {run_id} already finished ({:?})", view.status)
                    .to_lowercase(),
            });
        }
        if let Some(token) = self
            .runs
            .cancels
            .lock()
            .map_err(|_| poisoned())?
            .get(run_id)
        {
            token.cancel();
        }
        Ok(view)
    }

    async fn run_task(
        self: &Arc<Self>,
        run_id: &str,
        driver: &Driver,
        prompt: &str,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> Result<(), AppError> {
        self.update_run(run_id, |r| r.status = RunState::Working)?;
        self.run_status(run_id, "working", "Snapshotting your checkout".into());
        let rid = run_id.to_string();
        let (base_commit, base_tree, skipped) = self
            .blocking(move |hub| {
                let snap = snapshot_checkout(&hub.cfg.repo, &hub.store, DEFAULT_FILE_CAP)
                    .map_err(|e| AppError::Internal(format!("snapshotting the checkout: {e}")))?;
                let ierr =
                    |e: hunkgate_sandbox::store::StoreError| AppError::Internal(e.to_string());
                let tree = hub.store.write_tree(&snap.tree).map_err(ierr)?;
                let commit = hub
                    .store
                    .commit(tree, &[], &format!("base of run {rid}\n"))
                    .map_err(ierr)?;
                hub.store
                    .set_ref(&format!("refs/hunkgate/runs/{rid}/base"), commit)
                    .map_err(ierr)?;
                hub.mirror_ref(&format!("refs/hunkgate/runs/{rid}/base"), commit);
                Ok((commit, snap.tree, snap.skipped))
            })
            .await?;
        if !skipped.is_empty() {
            let names: Vec<String> = skipped
                .iter()
                .take(5)
                .map(|s| format!("{} ({})", s.path, s.reason))
                .collect();
            self.run_status(
                run_id,
                "working",
                format!("Left out of the snapshot: {}", names.join(", ")),
            );
        }
        self.update_run(run_id, |r| r.base_commit = Some(base_commit.to_string()))?;

        let local = matches!(self.cfg.isolation, crate::isolation::Isolation::None);
        let slot = self.runs.acquire_slot(local)?;
        let sandbox: Arc<dyn Sandbox> = match &self.cfg.isolation {
            crate::isolation::Isolation::None => Arc::new(LocalSandbox::new(
                self.runs.sandbox_root.join(slot.to_string()),
            )),
            // In the sandbox user's home, reached only through the sandbox helper.
            crate::isolation::Isolation::User(iso) => {
                Arc::new(iso.sandbox(&crate::isolation::sandbox_key(&self.cfg.state_dir), slot))
            }
        };
        let result = self
            .run_in_sandbox(
                run_id,
                driver,
                prompt,
                timeout,
                cancel,
                base_commit,
                base_tree,
                sandbox,
            )
            .await;
        self.runs.release_slot(slot);
        if let Ok(mut a) = self.runs.active.lock() {
            a.remove(run_id);
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_in_sandbox(
        self: &Arc<Self>,
        run_id: &str,
        driver: &Driver,
        prompt: &str,
        timeout: Duration,
        cancel: CancellationToken,
        base_commit: ObjectId,
        base_tree: FlatTree,
        sandbox: Arc<dyn Sandbox>,
    ) -> Result<(), AppError> {
        self.run_status(run_id, "working", "Preparing the sandbox".into());
        {
            let sb = sandbox.clone();
            let tree = base_tree.clone();
            self.blocking(move |hub| {
                sb.prepare(&hub.store, &tree)
                    .map_err(|e| AppError::Internal(e.to_string()))
            })
            .await?;
        }
        let change_id = if self.cfg.vcs == Vcs::Jj {
            match jj::start_change(
                sandbox.as_ref(),
                &scrubbed_env(&self.cfg.agent_env),
                &first_line(prompt),
            )
            .await
            {
                Ok(id) => Some(id),
                Err(e) => {
                    let msg = e.to_string();
                    self.update_run(run_id, |r| {
                        r.status = RunState::Failed;
                        r.error = Some(msg.clone());
                    })?;
                    self.run_error(run_id, ErrorCode::JjError, msg);
                    return Ok(());
                }
            }
        } else {
            None
        };
        self.runs.active.lock().map_err(|_| poisoned())?.insert(
            run_id.to_string(),
            Arc::new(Active {
                base_commit,
                base_tree,
                sandbox: sandbox.clone(),
                change_id,
            }),
        );
        let template = match driver {
            Driver::Command(t) => t.as_str(),
            Driver::Builtin { model } => {
                return self
                    .drive_builtin(run_id, model, prompt, timeout, cancel, sandbox)
                    .await;
            }
        };
        let agent_token = crate::hub::auth::random_token();
        self.runs
            .agent_tokens
            .lock()
            .map_err(|_| poisoned())?
            .insert(agent_token.clone(), run_id.to_string());

        let argv = build_argv(template, prompt).map_err(|e| AppError::BadRequest(e.to_string()))?;
        let mut env = scrubbed_env(&self.cfg.agent_env);
        env.push(("HUNKGATE_PROMPT".into(), prompt.to_string()));
        env.push(("HUNKGATE_RUN_ID".into(), run_id.to_string()));
        env.push(("HUNKGATE_URL".into(), self.url()));
        env.push(("HUNKGATE_AGENT_TOKEN".into(), agent_token.clone()));
        self.run_status(
            run_id,
            "working",
            format!(
                "Agent started ({}, isolation: {})",
                argv[0],
                sandbox.isolation()
            ),
        );
        let log_path = self
            .cfg
            .state_dir
            .join("runs")
            .join(format!("{run_id}.log"));
        let mut log = std::fs::create_dir_all(log_path.parent().unwrap_or(&self.cfg.state_dir))
            .and_then(|_| std::fs::File::create(&log_path))
            .ok()
            .map(RunLog::new);
        let mut last_emit: Option<Instant> = None;
        let hub = self.clone();
        let rid = run_id.to_string();
        let outcome = agent::run(
            sandbox.as_ref(),
            &argv,
            &env,
            timeout,
            cancel,
            |stream, line| {
                if let Some(f) = log.as_mut() {
                    let tag = if stream == agent::Stream::Stderr {
                        "err"
                    } else {
                        "out"
                    };
                    f.line(tag, line);
                }
                let line = line.trim();
                if line.is_empty() {
                    return;
                }
                // Status lines are for humans: at most ten a second.
                if last_emit.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
                    last_emit = Some(Instant::now());
                    hub.run_status(&rid, "working", line.chars().take(200).collect());
                }
            },
        )
        .await;
        if let Some(log) = log.take() {
            log.finish();
        }
        if let Ok(mut t) = self.runs.agent_tokens.lock() {
            t.remove(&agent_token);
        }

        match &outcome.exit {
            Exit::Code(0) => {}
            exit => {
                let state = if *exit == Exit::Cancelled {
                    RunState::Cancelled
                } else {
                    RunState::Failed
                };
                let tail: Vec<&str> = outcome
                    .stderr_tail
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let mut message = format!("agent {exit}");
                if !tail.is_empty() {
                    message.push_str(": ");
                    message.push_str(&tail.join("\n"));
                }
                let msg = message.clone();
                self.update_run(run_id, |r| {
                    r.status = state;
                    r.error = Some(msg);
                })?;
                self.run_error(run_id, ErrorCode::ExperimentFailed, message);
                return Ok(());
            }
        }

        let already = self.run_view(run_id)?.suggestion_ids.len();
        if already > 0 {
            self.update_run(run_id, |r| r.status = RunState::Ready)?;
            self.run_status(
                run_id,
                "ready",
                format!("Agent finished; it published {already} suggestion(s)"),
            );
            return Ok(());
        }
        match self.publish(run_id, &first_line(prompt), &[], &[]).await {
            Ok(_) => {}
            Err(AppError::NoChanges(msg)) => {
                self.update_run(run_id, |r| r.status = RunState::NoChanges)?;
                self.run_status(run_id, "no_changes", msg);
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    pub fn url(&self) -> String {
        let host = if self.cfg.host.contains(':') {
            format!("[{}]", self.cfg.host)
        } else {
            self.cfg.host.clone()
        };
        format!("http://{host}:{}", self.cfg.port)
    }

    /// Turn the sandbox's current state into a suggestion (the agent's `publish`, or the hub's
    /// when the agent exits).
    pub async fn publish(
        self: &Arc<Self>,
        run_id: &str,
        description: &str,
        globs: &[String],
        notes: &[HunkNote],
    ) -> Result<SuggestionView, AppError> {
        if description.trim().is_empty() {
            return Err(AppError::BadRequest("description is empty".into()));
        }
        let active = self
            .runs
            .active
            .lock()
            .map_err(|_| poisoned())?
            .get(run_id)
            .cloned()
            .ok_or_else(|| AppError::Conflict {
                code: ErrorCode::NotRunning,
                message: format!("run {run_id} is not running; only a running agent can publish"),
            })?;
        let filter = if globs.is_empty() {
            None
        } else {
            let mut b = globset::GlobSetBuilder::new();
            for g in globs {
                b.add(
                    globset::Glob::new(g)
                        .map_err(|e| AppError::BadRequest(format!("--files {g:?}: {e}")))?,
                );
            }
            Some(b.build().map_err(|e| AppError::BadRequest(e.to_string()))?)
        };
        let rid = run_id.to_string();
        let desc = description.to_string();
        let notes = notes.to_vec();
        let (prompt, agent) = {
            let st = self.lock()?;
            let r = st.runs.get(run_id);
            (r.map(|r| r.prompt.clone()), r.and_then(|r| r.agent.clone()))
        };
        let jj_change = active.change_id.clone();
        let jj_sandbox = active.sandbox.clone();
        let suggestion = self
            .blocking(move |hub| {
                let ierr = |e: &dyn std::fmt::Display| AppError::Internal(e.to_string());
                let mut snap = active
                    .sandbox
                    .snapshot(&hub.store, &active.base_tree, DEFAULT_FILE_CAP)
                    .map_err(|e| ierr(&e))?;
                let only = |p: &str| filter.as_ref().is_none_or(|f| f.is_match(p));
                let skipped = keep_skipped_as_base(&mut snap, &active.base_tree, &only);
                if snap.tree == active.base_tree {
                    let mut msg = "The agent made no changes".to_string();
                    if !skipped.is_empty() {
                        msg.push_str(&format!(
                            " that hunkgate can review; left out: {}",
                            skipped_list(&skipped)
                        ));
                    }
                    return Err(AppError::NoChanges(msg));
                }
                let sid = uuid::Uuid::new_v4().to_string();
                let mut hunks = build_hunks(&hub.store, &sid, &active.base_tree, &snap.tree, &only)
                    .map_err(|e| ierr(&e))?;
                let notes = if notes.len() > MAX_NOTES {
                    tracing::info!(
                        dropped = notes.len() - MAX_NOTES,
                        "hunk descriptions beyond the first {MAX_NOTES} are ignored"
                    );
                    &notes[..MAX_NOTES]
                } else {
                    &notes[..]
                };
                let unmatched = attach_notes(&mut hunks, notes);
                cap_descriptions(&mut hunks);
                if !unmatched.is_empty() {
                    tracing::info!(?unmatched, "hunk descriptions that match no hunk");
                }
                if hunks.is_empty() {
                    return Err(AppError::NoChanges(
                        "No changes match the given files".into(),
                    ));
                }
                let tree = hub.store.write_tree(&snap.tree).map_err(|e| ierr(&e))?;
                let commit = hub
                    .store
                    .commit(
                        tree,
                        &[active.base_commit],
                        &format!("suggestion: {desc}\n\nrun {rid}\n"),
                    )
                    .map_err(|e| ierr(&e))?;
                hub.store
                    .set_ref(&format!("refs/hunkgate/runs/{rid}/head"), commit)
                    .and_then(|_| {
                        hub.store
                            .set_ref(&format!("refs/hunkgate/suggestions/{sid}/run"), commit)
                    })
                    .map_err(|e| ierr(&e))?;
                hub.mirror_ref(&format!("refs/hunkgate/runs/{rid}/head"), commit);
                Ok(Suggestion {
                    id: sid,
                    run_id: rid,
                    description: desc,
                    base_commit: active.base_commit.to_string(),
                    run_commit: commit.to_string(),
                    change_id: active.change_id.clone(),
                    created_at: now(),
                    agent,
                    prompt,
                    hunks,
                    closed: None,
                    reviewed_commit: None,
                    skipped,
                })
            })
            .await?;
        if let Some(change) = &jj_change {
            // Best effort: the change keeps its provisional description if this fails.
            if let Err(e) = jj::describe(
                jj_sandbox.as_ref(),
                &scrubbed_env(&self.cfg.agent_env),
                change,
                description,
            )
            .await
            {
                tracing::warn!(error = %e, "describing the run's jj change");
            }
        }
        let sid = suggestion.id.clone();
        let files = suggestion.files().len();
        let hunks = suggestion.hunks.len();
        let view = self.add_suggestion(suggestion)?;
        self.update_run(run_id, |r| r.suggestion_ids.push(sid.clone()))?;
        self.bus.emit(Event::Status {
            seq: 0,
            suggestion_id: Some(sid),
            run_id: Some(run_id.to_string()),
            status: "ready".into(),
            message: format!(
                "Suggestion ready: {} ({hunks} hunk{} in {files} file{}){}",
                view.description,
                if hunks == 1 { "" } else { "s" },
                if files == 1 { "" } else { "s" },
                if view.skipped.is_empty() {
                    String::new()
                } else {
                    format!("; left out: {}", skipped_list(&view.skipped))
                }
            ),
        });
        if self.run_view(run_id)?.status == RunState::Working && !self.is_agent_running(run_id) {
            self.update_run(run_id, |r| r.status = RunState::Ready)?;
        }
        Ok(view)
    }

    fn is_agent_running(&self, run_id: &str) -> bool {
        self.runs
            .agent_tokens
            .lock()
            .map(|t| t.values().any(|r| r == run_id))
            .unwrap_or(false)
    }

    /// A status line from the agent (`hunkgate status`).
    pub fn agent_status(
        &self,
        run_id: &str,
        message: &str,
        status: Option<&str>,
    ) -> Result<(), AppError> {
        let message: String = message.trim().chars().take(500).collect();
        if message.is_empty() {
            return Err(AppError::BadRequest("status message is empty".into()));
        }
        let status = status.unwrap_or("working");
        if status.is_empty()
            || status.len() > 32
            || !status
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(AppError::BadRequest(format!(
                "status {status:?} must be one short word"
            )));
        }
        let m = message.clone();
        self.update_run(run_id, |r| r.last_message = Some(m))?;
        self.run_status(run_id, status, message);
        Ok(())
    }
}

/// Files the sandbox snapshot left out (over the size cap, FIFOs and other special files,
/// names that are not UTF-8) are not part of what the agent left as far as review goes: a base
/// file among them keeps its base version in the run tree — so it is never offered as a
/// deletion, and accepting everything cannot remove it — and every one of them (those `only`
/// lets through) is returned to be shown on the suggestion.
fn keep_skipped_as_base(
    snap: &mut hunkgate_sandbox::snapshot::Snapshot,
    base: &FlatTree,
    only: &dyn Fn(&str) -> bool,
) -> Vec<crate::protocol::SkippedFile> {
    let mut out = Vec::new();
    for s in std::mem::take(&mut snap.skipped) {
        if let Some(entry) = base.get(&s.path) {
            snap.tree.insert(s.path.clone(), *entry);
        }
        if only(&s.path) {
            out.push(crate::protocol::SkippedFile {
                path: s.path,
                reason: s.reason,
            });
        }
    }
    out
}

/// The first this many bytes of an agent's output go to its log as they come.
pub const LOG_HEAD: usize = 1024 * 1024;
/// After the head, only the last this many bytes are kept (in memory), and written after a
/// line saying how much was dropped when the agent ends.
pub const LOG_TAIL: usize = 1024 * 1024;

/// An agent's output log (`<state>/runs/<run>.log`), capped: the head as it comes, then the
/// tail, with what was dropped between them said in the file.
struct RunLog {
    file: std::fs::File,
    written: usize,
    tail: std::collections::VecDeque<String>,
    tail_bytes: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl RunLog {
    fn new(file: std::fs::File) -> Self {
        Self {
            file,
            written: 0,
            tail: std::collections::VecDeque::new(),
            tail_bytes: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    fn line(&mut self, tag: &str, line: &str) {
        use std::io::Write;
        let text = format!("{tag} {line}\n");
        if self.written + text.len() <= LOG_HEAD && self.tail.is_empty() {
            self.written += text.len();
            let _ = self.file.write_all(text.as_bytes());
            return;
        }
        self.tail_bytes += text.len();
        self.tail.push_back(text);
        while self.tail_bytes > LOG_TAIL {
            let Some(old) = self.tail.pop_front() else {
                break;
            };
            self.tail_bytes -= old.len();
            self.dropped_lines += 1;
            self.dropped_bytes += old.len() as u64;
        }
    }

    fn finish(mut self) {
        use std::io::Write;
        if self.dropped_lines > 0 {
            let _ = writeln!(
                self.file,
                "hunkgate: [{} lines ({} bytes) of agent output dropped here: the log keeps the first {} KiB and the last {} KiB]",
                self.dropped_lines,
                self.dropped_bytes,
                LOG_HEAD / 1024,
                LOG_TAIL / 1024
            );
        }
        for l in self.tail.drain(..) {
            let _ = self.file.write_all(l.as_bytes());
        }
    }
}

/// At most this many hunk descriptions are read from one publish.
const MAX_NOTES: usize = 256;
/// A hunk's description (every note that landed on it) is cut at this many characters.
pub const MAX_HUNK_DESCRIPTION: usize = 4000;
/// All hunk descriptions of one suggestion together: past this many bytes, the descriptions of
/// the remaining hunks are dropped (one description can land on every hunk of a file, so a
/// small publish must not turn into a huge suggestion).
pub const MAX_DESCRIPTIONS_TOTAL: usize = 64 * 1024;

/// Apply [`MAX_HUNK_DESCRIPTION`] and [`MAX_DESCRIPTIONS_TOTAL`], saying so in the text.
fn cap_descriptions(hunks: &mut [crate::model::suggestion::HunkRec]) {
    let mut total = 0usize;
    let mut dropped = 0usize;
    for h in hunks.iter_mut() {
        let Some(d) = h.description.as_mut() else {
            continue;
        };
        if d.chars().count() > MAX_HUNK_DESCRIPTION {
            let cut: String = d.chars().take(MAX_HUNK_DESCRIPTION).collect();
            *d = format!("{cut}… [hunkgate: description cut at {MAX_HUNK_DESCRIPTION} characters]");
        }
        if total + d.len() > MAX_DESCRIPTIONS_TOTAL {
            dropped += 1;
            *d = format!(
                "[hunkgate: description dropped: this suggestion's hunk descriptions exceed {} KiB]",
                MAX_DESCRIPTIONS_TOTAL / 1024
            );
        }
        total += d.len();
    }
    if dropped > 0 {
        tracing::info!(dropped, "hunk descriptions over the per-suggestion budget");
    }
}

/// Up to five skipped files, for a message.
fn skipped_list(skipped: &[crate::protocol::SkippedFile]) -> String {
    let mut names: Vec<String> = skipped
        .iter()
        .take(5)
        .map(|s| format!("{} ({})", s.path, s.reason))
        .collect();
    if skipped.len() > 5 {
        names.push(format!("and {} more", skipped.len() - 5));
    }
    names.join(", ")
}

pub const BUILTIN: &str = "builtin";

/// What drives a run: an agent command in the sandbox, or the hub's own tool loop.
#[derive(Debug, Clone)]
enum Driver {
    Command(String),
    Builtin { model: String },
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

impl Hub {
    /// The built-in agent's run: the tool loop, then whatever it changed becomes a suggestion
    /// (also when a limit, a timeout or a provider failure ended it early).
    async fn drive_builtin(
        self: &Arc<Self>,
        run_id: &str,
        model: &str,
        prompt: &str,
        timeout: Duration,
        cancel: CancellationToken,
        sandbox: Arc<dyn Sandbox>,
    ) -> Result<(), AppError> {
        let Some(pcfg) = &self.cfg.provider else {
            return Err(AppError::BadRequest(
                "the built-in agent has no model server configured".into(),
            ));
        };
        let provider = self
            .runs
            .provider(|| {
                Ok(
                    Arc::new(crate::agent::provider::OpenAiCompatible::new(pcfg.clone())?)
                        as Arc<dyn crate::model::chat::Provider>,
                )
            })
            .map_err(|e| AppError::Internal(e.to_string()))?;
        let rid = run_id.to_string();
        let context = self.blocking(move |hub| hub.session_context(&rid)).await?;
        self.run_status(
            run_id,
            "working",
            format!(
                "Built-in agent started ({model}, isolation: {})",
                sandbox.isolation()
            ),
        );
        let end = self
            .run_builtin(crate::agent::tool_loop::BuiltinRun {
                run_id: run_id.to_string(),
                model: model.to_string(),
                prompt: prompt.to_string(),
                context,
                sandbox,
                provider,
                limits: self.cfg.limits.clone(),
                cancel,
                deadline: Instant::now() + timeout,
            })
            .await;
        let stop = end.stop;
        let err = end.error.clone();
        self.update_run(run_id, |r| {
            r.stop_reason = Some(stop.as_str().to_string());
            if err.is_some() {
                r.error = err.clone();
            }
        })?;
        use crate::agent::tools::Stop;
        if stop == Stop::Cancelled {
            self.update_run(run_id, |r| r.status = RunState::Cancelled)?;
            self.run_error(
                run_id,
                ErrorCode::ExperimentFailed,
                "the built-in agent was cancelled".into(),
            );
            return Ok(());
        }
        let why = match stop {
            Stop::BudgetExhausted => Some(format!(
                "Tool budget exhausted ({} calls)",
                self.cfg.limits.max_tool_calls
            )),
            Stop::SchemaRetriesExhausted => Some(format!(
                "Too many invalid tool calls ({} allowed)",
                self.cfg.limits.max_schema_retries
            )),
            Stop::Timeout => Some(format!("Timed out after {}s", timeout.as_secs())),
            Stop::ProviderError => Some(format!(
                "The model provider failed: {}",
                end.error.as_deref().unwrap_or("")
            )),
            _ => None,
        };
        if let Some(why) = &why {
            self.run_status(
                run_id,
                "working",
                format!("{why}; publishing the edits made so far"),
            );
        }
        let description = end
            .description
            .clone()
            .unwrap_or_else(|| first_line(prompt));
        match self.publish(run_id, &description, &[], &end.notes).await {
            Ok(_) => Ok(()),
            Err(AppError::NoChanges(msg)) => {
                if stop == Stop::ProviderError {
                    let message = end.error.unwrap_or_default();
                    self.update_run(run_id, |r| r.status = RunState::Failed)?;
                    self.run_error(run_id, ErrorCode::ExperimentFailed, message);
                } else {
                    self.update_run(run_id, |r| r.status = RunState::NoChanges)?;
                    let msg = match why {
                        Some(w) => format!("{w}; {msg}"),
                        None => msg,
                    };
                    self.run_status(run_id, "no_changes", msg);
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut out: String = line.chars().take(100).collect();
    if line.chars().count() > 100 {
        out.push('…');
    }
    out
}

impl Hub {
    /// The suggestions the agent of `run_id` may see: its run's own, and those of the other runs
    /// of its session.
    pub fn agent_suggestions(&self, run_id: &str) -> Result<Vec<SuggestionView>, AppError> {
        let st = self.lock()?;
        let run = st
            .runs
            .get(run_id)
            .ok_or_else(|| AppError::NotFound(format!("no run {run_id:?}")))?;
        let runs: Vec<&RunRec> = match &run.session_id {
            Some(sess) => st
                .runs
                .values()
                .filter(|r| r.session_id.as_deref() == Some(sess))
                .collect(),
            None => vec![run],
        };
        let ids: std::collections::HashSet<&String> =
            runs.iter().flat_map(|r| r.suggestion_ids.iter()).collect();
        Ok(st
            .order
            .iter()
            .filter(|id| ids.contains(id))
            .filter_map(|id| st.suggestions.get(id))
            .map(|s| s.view())
            .collect())
    }
}

//! Running an agent command in its sandbox: the slot, the sandbox brought to the base, the
//! agent process and its capped log, and what it left.

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
use crate::model::text::first_line;
use crate::protocol::{ErrorCode, RunState};

use super::*;

impl Hub {
    pub(super) async fn run_task(
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
                    .map_err(|e| AppError::failed("snapshotting the checkout", e))?;
                let ierr = |e: hunkgate_sandbox::store::StoreError| {
                    AppError::failed("writing the run's base to the checkpoint store", e)
                };
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
                    .map_err(|e| AppError::failed("preparing the sandbox", e))
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

        let argv =
            build_argv(template, prompt).map_err(|e| AppError::bad_request(e.to_string()))?;
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
            Err(e) if e.error_code() == ErrorCode::NoChanges => {
                let msg = e.message().to_string();
                self.update_run(run_id, |r| r.status = RunState::NoChanges)?;
                self.run_status(run_id, "no_changes", msg);
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }
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

//! Running an agent command in its sandbox: the slot, the sandbox brought to the base, the
//! agent process and its capped log, and what it left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, build_argv, scrubbed_env, Exit};
use hunkgate_sandbox::jj::{self, Vcs};
use hunkgate_sandbox::snapshot::DEFAULT_FILE_CAP;
use hunkgate_sandbox::store::FlatTree;
use hunkgate_sandbox::workspace::{LocalSandbox, Sandbox, SharedSlot};
use hunkgate_sandbox::ObjectId;

use crate::config::sensitive::Policy;
use crate::error::AppError;
use crate::hub::registry::{poisoned, Active};
use crate::hub::Hub;
use crate::model::text::first_line;
use crate::protocol::{ErrorCode, RunState};

use super::*;

impl Hub {
    /// A run that has its slot: its base snapshotted, a sandbox slot taken, the agent run in it,
    /// and the slot and live bookkeeping given back however it ends.
    pub(super) async fn run_task(self: &Arc<Self>, job: RunJob) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        self.update_run(run_id, |r| r.status = RunState::Working)?;
        self.run_status(run_id, "working", "Snapshotting your checkout".into());
        let started = Instant::now();
        let (base, skipped) = self.snapshot_base(run_id).await?;
        tracing::debug!(
            run = run_id,
            ms = started.elapsed().as_millis() as u64,
            "base snapshot"
        );
        if !skipped.is_empty() {
            self.run_status(run_id, "working", snapshot_skipped_message(&skipped));
        }
        if base.withheld > 0 {
            self.run_status(run_id, "working", withheld_message(base.withheld));
        }
        self.update_run(run_id, |r| r.base_commit = Some(base.commit.to_string()))?;

        let local = matches!(self.cfg().isolation, crate::isolation::Isolation::None);
        // A kept ACP agent of the run's session comes with its slot (see `acp_live`).
        let (slot, state) =
            match self.acp_kept_slot(run_id, super::acp_live::acp_command(&job.driver)) {
                Some(slot) => (slot, self.runs().held_slot(slot)?),
                None => self.runs().acquire_slot(local)?,
            };
        let sandbox = self.sandbox_for_slot(slot, state);
        let result = self.run_in_sandbox(&job, base, sandbox.clone()).await;
        // The slot is still the run's: the checks use it, after the suggestion is out.
        if result.is_ok() && !job.cancel.is_cancelled() {
            if let Ok(Some(base)) = super::checks::active_base(self, run_id) {
                self.check_run(run_id, &sandbox, base).await;
            }
        }
        sandbox.run_over();
        if !self.acp_park(run_id, slot) {
            self.runs().release_slot(slot);
        }
        if let Ok(mut a) = self.runs().active.lock() {
            a.remove(run_id);
        }
        result
    }

    /// Snapshot the checkout into the checkpoint store as the run's base commit (and its
    /// `refs/hunkgate/runs/<run>/base`); the files the snapshot left out come back too.
    async fn snapshot_base(
        self: &Arc<Self>,
        run_id: &str,
    ) -> Result<(RunBase, Vec<SkippedEntry>), AppError> {
        let rid = run_id.to_string();
        self.blocking(move |hub| {
            let (snap, how) = {
                let mut watch = hub.runs().checkout.lock().map_err(|_| poisoned())?;
                let (repo, store) = (&hub.cfg().repo, hub.store());
                match hub.cfg().accel.watch {
                    true => hunkgate_sandbox::checkout::snapshot(
                        repo,
                        store,
                        DEFAULT_FILE_CAP,
                        &mut watch,
                    ),
                    false => hunkgate_sandbox::checkout::snapshot_unwatched(
                        repo,
                        store,
                        DEFAULT_FILE_CAP,
                    ),
                }
                .map_err(|e| AppError::failed("snapshotting the checkout", e))?
            };
            tracing::debug!(run = rid, ?how, "checkout snapshot");
            let mut snap = snap;
            let policy = Policy::load(&hub.cfg().repo, &hub.cfg().sensitive);
            let withheld = withhold_sensitive(&mut snap.tree, &policy);
            let ierr = |e: hunkgate_sandbox::store::StoreError| {
                AppError::failed("writing the run's base to the checkpoint store", e)
            };
            let tree = hub.store().write_tree(&snap.tree).map_err(ierr)?;
            let commit = hub
                .store()
                .commit(tree, &[], &format!("base of run {rid}\n"))
                .map_err(ierr)?;
            hub.store()
                .set_ref(&format!("refs/hunkgate/runs/{rid}/base"), commit)
                .map_err(ierr)?;
            hub.mirror_ref(&format!("refs/hunkgate/runs/{rid}/base"), commit);
            Ok((
                RunBase {
                    commit,
                    tree: Arc::new(snap.tree),
                    tree_id: tree,
                    sensitive: Arc::new(policy),
                    withheld,
                },
                snap.skipped,
            ))
        })
        .await
    }

    /// The sandbox of slot `slot` under the hub's isolation, with `state`, what the slot keeps
    /// between runs (the registry's, lent to the run).
    fn sandbox_for_slot(&self, slot: usize, state: SharedSlot) -> Arc<dyn Sandbox> {
        match &self.cfg().isolation {
            crate::isolation::Isolation::None => Arc::new(
                LocalSandbox::in_slot(self.runs().sandbox_root.join(slot.to_string()), state)
                    .with_accel(self.cfg().accel),
            ),
            // In the sandbox user's home, reached only through the sandbox helper.
            crate::isolation::Isolation::User(iso) => Arc::new(iso.sandbox(
                &crate::isolation::sandbox_key(&self.cfg().state_dir),
                slot,
                state,
            )),
        }
    }

    /// The sandbox brought to the base, the run made active (publishable), then its driver:
    /// the built-in agent or an agent command.
    async fn run_in_sandbox(
        self: &Arc<Self>,
        job: &RunJob,
        base: RunBase,
        sandbox: Arc<dyn Sandbox>,
    ) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        self.run_status(run_id, "working", "Preparing the sandbox".into());
        {
            let sb = sandbox.clone();
            let tree = base.tree.clone();
            let started = Instant::now();
            self.blocking(move |hub| {
                sb.prepare(hub.store(), &tree)
                    .map_err(|e| AppError::failed("preparing the sandbox", e))
            })
            .await?;
            tracing::debug!(
                run = run_id,
                ms = started.elapsed().as_millis() as u64,
                "sandbox prepared"
            );
        }
        let change_id = if self.cfg().vcs == Vcs::Jj {
            match jj::start_change(
                sandbox.as_ref(),
                &scrubbed_env(&self.cfg().agent_env),
                &first_line(&job.prompt),
            )
            .await
            {
                Ok(id) => Some(id),
                Err(e) => {
                    return self.fail_run(
                        run_id,
                        RunState::Failed,
                        ErrorCode::JjError,
                        e.to_string(),
                    )
                }
            }
        } else {
            None
        };
        let sensitive = base.sensitive.clone();
        self.runs().active.lock().map_err(|_| poisoned())?.insert(
            run_id.to_string(),
            Arc::new(Active {
                base_commit: base.commit,
                base_tree: base.tree,
                base_tree_id: base.tree_id,
                sandbox: sandbox.clone(),
                change_id,
                sensitive: base.sensitive,
            }),
        );
        match &job.driver {
            Driver::Command(template) => self.run_agent_command(job, template, sandbox).await,
            Driver::Acp(command) => self.drive_acp(job, command, sandbox).await,
            Driver::Builtin { ask, .. } => self.drive_builtin(job, ask, sandbox, sensitive).await,
        }
    }

    /// Mark the run ended in `state` with `message` as its error, and say so as a
    /// `suggestion.error` with `code`.
    pub(super) fn fail_run(
        &self,
        run_id: &str,
        state: RunState,
        code: ErrorCode,
        message: String,
    ) -> Result<(), AppError> {
        let msg = message.clone();
        self.update_run(run_id, |r| {
            r.status = state;
            r.error = Some(msg);
        })?;
        self.run_error(run_id, code, message);
        Ok(())
    }

    /// An agent command's run: the process in the sandbox with its own agent token, then a
    /// failure, or what it left published.
    async fn run_agent_command(
        self: &Arc<Self>,
        job: &RunJob,
        template: &str,
        sandbox: Arc<dyn Sandbox>,
    ) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        let prompt = match self.prompt_with_pages(job, sandbox.as_ref()).await {
            Ok(p) => p,
            Err(e) => {
                return self.fail_run(
                    run_id,
                    RunState::Failed,
                    ErrorCode::ExperimentFailed,
                    e.message().to_string(),
                )
            }
        };
        let agent_token = self.register_agent_token(run_id)?;
        let argv =
            build_argv(template, &prompt).map_err(|e| AppError::bad_request(e.to_string()))?;
        let env = self.agent_env(job, &prompt, &agent_token);
        self.run_status(
            run_id,
            "working",
            format!(
                "Agent started ({}, isolation: {})",
                argv[0],
                sandbox.isolation()
            ),
        );
        // Beside the agent, the sandbox takes in its change notifications as they come.
        let outcome = {
            let process = self.run_agent_process(job, sandbox.as_ref(), &argv, &env);
            tokio::pin!(process);
            tokio::select! {
                outcome = &mut process => outcome,
                () = sandbox.follow_changes() => process.await,
            }
        };
        tracing::debug!(run = run_id, exit = ?outcome.exit, "agent process ended");
        self.forget_agent_token(&agent_token);
        if let Some((state, message)) = agent_failure(&outcome) {
            return self.fail_run(run_id, state, ErrorCode::ExperimentFailed, message);
        }
        self.publish_after_exit(run_id, &job.prompt).await
    }

    /// A new agent token for the run `run_id`: what its agent calls the agent API with.
    pub(super) fn register_agent_token(&self, run_id: &str) -> Result<String, AppError> {
        let agent_token = crate::hub::auth::random_token();
        self.runs()
            .agent_tokens
            .lock()
            .map_err(|_| poisoned())?
            .insert(agent_token.clone(), run_id.to_string());
        Ok(agent_token)
    }

    /// The run is over: its agent token opens nothing any more.
    pub(super) fn forget_agent_token(&self, agent_token: &str) {
        if let Ok(mut t) = self.runs().agent_tokens.lock() {
            t.remove(agent_token);
        }
    }

    /// The agent command's environment: the scrubbed host environment, then its `prompt`
    /// (the run's, with the pinned pages named), the run's id, hub URL and agent token.
    pub(super) fn agent_env(
        &self,
        job: &RunJob,
        prompt: &str,
        agent_token: &str,
    ) -> Vec<(String, String)> {
        let mut env = scrubbed_env(&self.cfg().agent_env);
        env.push(("HUNKGATE_PROMPT".into(), prompt.to_string()));
        env.push(("HUNKGATE_RUN_ID".into(), job.run_id.clone()));
        env.push(("HUNKGATE_URL".into(), self.url()));
        env.push(("HUNKGATE_AGENT_TOKEN".into(), agent_token.to_string()));
        env
    }

    /// Run the agent process to its end: every output line to the run's log, and some of them
    /// as status lines.
    async fn run_agent_process(
        self: &Arc<Self>,
        job: &RunJob,
        sandbox: &dyn Sandbox,
        argv: &[String],
        env: &[(String, String)],
    ) -> agent::Outcome {
        let mut log = self.open_run_log(&job.run_id);
        let mut last_emit: Option<Instant> = None;
        let hub = self.clone();
        let rid = job.run_id.clone();
        let outcome = agent::run(
            sandbox,
            argv,
            env,
            job.timeout,
            job.cancel.clone(),
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
        outcome
    }

    /// The run's output log, `<state>/runs/<run>.log` (None when it cannot be created).
    pub(super) fn open_run_log(&self, run_id: &str) -> Option<RunLog> {
        let log_path = self
            .cfg()
            .state_dir
            .join("runs")
            .join(format!("{run_id}.log"));
        std::fs::create_dir_all(log_path.parent().unwrap_or(&self.cfg().state_dir))
            .and_then(|_| std::fs::File::create(&log_path))
            .ok()
            .map(RunLog::new)
    }

    /// After an agent command exited 0: `ready` if it published already, else what it left
    /// becomes a suggestion (or the run ends `no_changes`).
    pub(super) async fn publish_after_exit(
        self: &Arc<Self>,
        run_id: &str,
        prompt: &str,
    ) -> Result<(), AppError> {
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

/// The run's base in the checkpoint store: its commit and tree.
struct RunBase {
    commit: ObjectId,
    /// Shared by the sandbox's sync and the run, so the read-back knows it as the synced base
    /// without comparing it entry by entry.
    tree: Arc<FlatTree>,
    /// The id of `tree` in the checkpoint store.
    tree_id: ObjectId,
    /// The sensitive-file policy `tree` was made with.
    sensitive: Arc<Policy>,
    /// How many sensitive files of the checkout it left out.
    withheld: usize,
}

/// Leave the files `policy` names sensitive out of a base `tree` (so out of the sandbox, which
/// holds exactly its base); how many there were.
fn withhold_sensitive(tree: &mut FlatTree, policy: &Policy) -> usize {
    let before = tree.len();
    tree.retain(|path, _| !policy.is_sensitive(path));
    before - tree.len()
}

/// The status line saying how many sensitive files the sandbox does not get (never which:
/// a name can say too much, and the user knows their own files).
fn withheld_message(n: usize) -> String {
    format!(
        "Withheld {n} sensitive file(s) from the sandbox (the [sensitive] policy and .hunkgateignore)"
    )
}

/// A file the checkout snapshot left out.
type SkippedEntry = hunkgate_sandbox::snapshot::Skipped;

/// The status line naming (up to five of) the files the base snapshot left out.
fn snapshot_skipped_message(skipped: &[SkippedEntry]) -> String {
    let names: Vec<String> = skipped
        .iter()
        .take(5)
        .map(|s| format!("{} ({})", s.path, s.reason))
        .collect();
    format!("Left out of the snapshot: {}", names.join(", "))
}

/// How an agent command that did not exit 0 ends its run: `cancelled` or `failed`, with its
/// exit and the last 20 lines of its stderr. None when it exited 0.
pub(super) fn agent_failure(outcome: &agent::Outcome) -> Option<(RunState, String)> {
    let exit = &outcome.exit;
    if *exit == Exit::Code(0) {
        return None;
    }
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
    Some((state, message))
}

/// The first this many bytes of an agent's output go to its log as they come.
pub const LOG_HEAD: usize = 1024 * 1024;
/// After the head, only the last this many bytes are kept (in memory), and written after a
/// line saying how much was dropped when the agent ends.
pub const LOG_TAIL: usize = 1024 * 1024;

/// An agent's output log (`<state>/runs/<run>.log`), capped: the head as it comes, then the
/// tail, with what was dropped between them said in the file.
pub(super) struct RunLog {
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

    pub(super) fn line(&mut self, tag: &str, line: &str) {
        use std::io::Write;
        // A secret the agent printed never reaches the log (see [`crate::model::redact`]).
        let text = format!("{tag} {}\n", crate::model::redact::redact(line));
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

    pub(super) fn finish(mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(exit: Exit, stderr_tail: &str) -> agent::Outcome {
        agent::Outcome {
            exit,
            stderr_tail: stderr_tail.into(),
            stdout_tail: String::new(),
        }
    }

    #[test]
    fn only_a_zero_exit_is_not_a_failure() {
        assert!(agent_failure(&outcome(Exit::Code(0), "noise")).is_none());
        assert_eq!(
            agent_failure(&outcome(Exit::Code(2), "")),
            Some((RunState::Failed, "agent exited with status 2".into()))
        );
        assert_eq!(
            agent_failure(&outcome(Exit::Cancelled, "bye")),
            Some((RunState::Cancelled, "agent cancelled: bye".into()))
        );
    }

    #[test]
    fn a_failure_keeps_the_last_twenty_stderr_lines() {
        let stderr: Vec<String> = (1..=25).map(|i| format!("line {i}")).collect();
        let (state, message) = agent_failure(&outcome(Exit::TimedOut, &stderr.join("\n"))).unwrap();
        assert_eq!(state, RunState::Failed);
        assert_eq!(
            message,
            format!("agent timed out: {}", stderr[5..].join("\n"))
        );
    }

    #[test]
    fn the_snapshot_message_names_at_most_five_files() {
        let skipped: Vec<SkippedEntry> = (0..7)
            .map(|i| SkippedEntry {
                path: format!("f{i}"),
                reason: "fifo".into(),
            })
            .collect();
        assert_eq!(
            snapshot_skipped_message(&skipped[..1]),
            "Left out of the snapshot: f0 (fifo)"
        );
        assert_eq!(
            snapshot_skipped_message(&skipped),
            "Left out of the snapshot: f0 (fifo), f1 (fifo), f2 (fifo), f3 (fifo), f4 (fifo)"
        );
    }
}

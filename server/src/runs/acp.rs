//! An ACP agent's run: the agent process in the sandbox exactly as a command agent runs (same
//! environment, namespaces, limits, supervision), spoken to over its stdio with the Agent
//! Client Protocol ([`crate::agent::acp`]): `initialize`, `session/new` (or `session/load`) in
//! the sandbox with `hunkgate mcp` offered, then one `session/prompt`; its updates become the
//! run's progress, its permission questions are answered by the policy or put to the reviewer.
//! The end of the turn ends the run: the sandbox's diff becomes the suggestion, as for a
//! command agent. The agent may stay alive for its session's next run, which then only sends
//! the next `session/prompt` ([`super::acp_live`]).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, build_argv};
use hunkgate_sandbox::workspace::Sandbox;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::acp::framing::{self, Frame, Incoming};
use crate::agent::acp::{self, method, Permission, Progress};
use crate::agent::run_tool::ToolFailure;
use crate::error::AppError;
use crate::hub::registry::poisoned;
use crate::hub::Hub;
use crate::model::chat::Message;
use crate::model::session::Entry;
use crate::model::text::one_line;
use crate::protocol::{ErrorCode, Event, RunState, NO_USER_ANSWER};

use super::acp_live::LiveAgent;
use super::exec::agent_failure;
use super::RunJob;

/// After `session/cancel` (a cancel or the timeout), how long the agent has to end its turn
/// before its process tree is killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// After the agent's output ended, how long it has to exit of itself before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// Lines on the agent's stdout that are not ACP messages before the run fails.
const MAX_MALFORMED: usize = 100;
/// Tool events one run emits at most (the log keeps the rest).
const MAX_TOOL_EVENTS: usize = 2000;
/// How much of the agent's message is kept for the session's history.
const MESSAGE_KEEP: usize = 8000;

/// How an ACP turn ended.
#[derive(Debug, PartialEq)]
enum TurnEnd {
    /// The prompt's answer came: ACP's stop reason (`end_turn`, `max_tokens`, `refusal`…).
    Stopped(String),
    /// Cancelled by the user (`session/cancel` sent, the tree then killed).
    Cancelled,
    /// The run's time limit passed (`session/cancel` sent, the tree then killed).
    TimedOut,
    /// The agent broke the protocol, refused the handshake, or its output ended mid-turn.
    Failed(String),
}

impl Hub {
    /// The run of the ACP agent `command` in `sandbox`: the session's kept agent when the run
    /// holds one (see [`super::acp_live`]), else a new one; one turn; then the agent is left for
    /// the run's end to park, or stopped.
    pub(super) async fn drive_acp(
        self: &Arc<Self>,
        job: &RunJob,
        command: &str,
        sandbox: Arc<dyn Sandbox>,
    ) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        let argv = build_argv(command, "").map_err(|e| AppError::bad_request(e.to_string()))?;
        // A kept agent that died while idle is dropped here: a new one takes its slot.
        let held = self.acp_live().take_held(run_id).filter(LiveAgent::alive);
        let continued = held.is_some();
        let mut agent = match held {
            Some(a) => a,
            None => match self.start_acp_agent(job, command, &argv, sandbox.as_ref()) {
                Ok(a) => a,
                Err(outcome) => {
                    return self
                        .finish_acp(job, TurnEnd::Failed(String::new()), Some(&outcome))
                        .await
                }
            },
        };
        self.runs()
            .agent_tokens
            .lock()
            .map_err(|_| poisoned())?
            .insert(agent.token.clone(), run_id.to_string());
        let last = agent
            .log
            .lock()
            .ok()
            .and_then(|mut l| std::mem::replace(&mut *l, self.open_run_log(run_id)));
        if let Some(l) = last {
            l.finish();
        }
        let how = if continued {
            format!("ACP agent continues its session (turn {})", agent.turns + 1)
        } else {
            "ACP agent started".to_string()
        };
        self.run_status(
            run_id,
            "working",
            format!("{how} ({}, isolation: {})", argv[0], sandbox.isolation()),
        );
        let (end, output_ended) = {
            let work = self.converse(job, &mut agent, sandbox.workdir());
            tokio::pin!(work);
            tokio::select! {
                r = &mut work => r,
                () = sandbox.follow_changes() => work.await,
            }
        };
        self.forget_agent_token(&agent.token);
        let outcome = self.after_turn(job, agent, &end, output_ended).await;
        self.finish_acp(job, end, outcome.as_ref()).await
    }

    /// After the turn: a turn that ended of itself leaves the agent for the run's end to park
    /// (None; the run's log stays open for what it still writes on stderr); any other end stops
    /// it and waits for its tree to be gone (how it ended), and closes the run's log.
    async fn after_turn(
        self: &Arc<Self>,
        job: &RunJob,
        mut agent: LiveAgent,
        end: &TurnEnd,
        output_ended: bool,
    ) -> Option<agent::Outcome> {
        let keep = matches!(end, TurnEnd::Stopped(_))
            && !job.cancel.is_cancelled()
            && !self.cfg().acp.keep_alive.is_zero()
            && !self.shutdown().is_cancelled()
            && agent.alive();
        let outcome = if keep {
            agent.turns += 1;
            self.acp_live().hold(&job.run_id, agent);
            None
        } else {
            // A crashing agent's own exit says more than a kill would.
            let grace = if output_ended {
                EXIT_GRACE
            } else {
                Duration::ZERO
            };
            Some(agent.end(grace).await)
        };
        tracing::debug!(run = job.run_id, ?end, exit = ?outcome.as_ref().map(|o| &o.exit), kept = keep, "ACP turn ended");
        outcome
    }

    /// Speak ACP with `agent` until its turn ends: the handshake and session first when it is
    /// new, then the prompt. Also whether its output ended (it is exiting).
    async fn converse(
        self: &Arc<Self>,
        job: &RunJob,
        agent: &mut LiveAgent,
        cwd: &std::path::Path,
    ) -> (TurnEnd, bool) {
        let context = self.acp_context(job).await;
        let full = match context.is_empty() {
            true => job.prompt.clone(),
            false => format!("{}\n\nThe task:\n{}", context.join("\n\n"), job.prompt),
        };
        let pinned = context
            .iter()
            .find(|c| c.starts_with(crate::sessions::PINNED_HEADING))
            .map_or("", String::as_str);
        let (followup, told) = self.acp_followup(job, &agent.told, pinned);
        let earlier = match agent.session_id {
            Some(_) => None,
            None => self.earlier_acp_session(&job.run_id, &agent.command),
        };
        let prompts = Prompts { full, followup };
        let mut conv = Conversation::new(self.clone(), job, agent);
        let end = conv.turn(cwd, &prompts, earlier.as_deref()).await;
        conv.keep_message();
        let output_ended = conv.output_ended;
        if matches!(end, TurnEnd::Stopped(_)) {
            agent.told = told;
        }
        (end, output_ended)
    }

    /// What a new ACP session's prompt begins with: the session's context (pinned files,
    /// earlier conversation, the reviewer's decisions on earlier suggestions), as texts.
    async fn acp_context(self: &Arc<Self>, job: &RunJob) -> Vec<String> {
        let rid = job.run_id.clone();
        let context = self
            .blocking(move |hub| hub.session_context(&rid))
            .await
            .unwrap_or_default();
        context
            .into_iter()
            .filter_map(|m| match m {
                Message::User { content } | Message::System { content } => Some(content),
                _ => None,
            })
            .collect()
    }

    /// Record how the turn ended; on a stop reason, what the agent left becomes a suggestion.
    async fn finish_acp(
        self: &Arc<Self>,
        job: &RunJob,
        end: TurnEnd,
        outcome: Option<&agent::Outcome>,
    ) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        let reason = match &end {
            TurnEnd::Stopped(r) => r.clone(),
            TurnEnd::Cancelled => "cancelled".into(),
            TurnEnd::TimedOut => "timeout".into(),
            TurnEnd::Failed(_) => "failed".into(),
        };
        self.update_run(run_id, |r| {
            r.stop_reason = Some(reason);
            // A question still open when the turn ended is answered by nobody now.
            r.question = None;
        })?;
        match end {
            TurnEnd::Stopped(_) if job.cancel.is_cancelled() => self.acp_cancelled(run_id),
            TurnEnd::Stopped(_) => self.publish_after_exit(run_id, &job.prompt).await,
            TurnEnd::Cancelled => self.acp_cancelled(run_id),
            TurnEnd::TimedOut => self.fail_run(
                run_id,
                RunState::Failed,
                ErrorCode::ExperimentFailed,
                format!(
                    "the ACP agent timed out after {}s (session/cancel sent, then its process tree killed)",
                    job.timeout.as_secs()
                ),
            ),
            TurnEnd::Failed(why) => {
                let exit = outcome.and_then(agent_failure).map(|(_, m)| m);
                let message = match (why.is_empty(), exit) {
                    (true, Some(exit)) => exit,
                    (true, None) => "the ACP agent ended without answering".into(),
                    (false, Some(exit)) => format!("{why}; {exit}"),
                    (false, None) => why,
                };
                self.fail_run(run_id, RunState::Failed, ErrorCode::ExperimentFailed, message)
            }
        }
    }

    fn acp_cancelled(&self, run_id: &str) -> Result<(), AppError> {
        self.fail_run(
            run_id,
            RunState::Cancelled,
            ErrorCode::ExperimentFailed,
            "the ACP agent was cancelled (session/cancel sent, then its process tree killed)"
                .into(),
        )
    }
}

/// A permission question being put to the reviewer: resolves to the agent's request id and
/// the answer to send.
type Asking = Pin<Box<dyn Future<Output = (Value, Value)> + Send>>;

/// The two prompts of a turn: for a new ACP session, the whole session context and the task;
/// for a continued one (the same process, or `session/load`), what the agent was not told yet.
struct Prompts {
    full: String,
    followup: String,
}

/// One ACP turn: the hub's side of the JSON-RPC connection and the run's progress.
struct Conversation<'a> {
    hub: Arc<Hub>,
    agent: &'a mut LiveAgent,
    run_id: String,
    cancel: CancellationToken,
    /// Ends the question put to the reviewer: cancelled with the run, or by the timeout.
    asks_cancel: CancellationToken,
    deadline: tokio::time::Instant,
    /// The question put to the reviewer now, and those waiting behind it.
    asking: Option<Asking>,
    waiting: VecDeque<(Value, Permission)>,
    /// Set once `session/cancel` is sent: the turn must end within [`CANCEL_GRACE`].
    cancelling: bool,
    timed_out: bool,
    /// The agent's stdout has ended.
    output_ended: bool,
    /// The awaited answer was a JSON-RPC error.
    refused: bool,
    /// Within `session/load`: the updates are the agent replaying the conversation.
    replaying: bool,
    malformed: usize,
    tool_events: usize,
    tools_started: HashMap<String, Instant>,
    last_status: Option<Instant>,
    message: String,
}

impl<'a> Conversation<'a> {
    fn new(hub: Arc<Hub>, job: &RunJob, agent: &'a mut LiveAgent) -> Self {
        Self {
            hub,
            agent,
            run_id: job.run_id.clone(),
            cancel: job.cancel.clone(),
            asks_cancel: job.cancel.child_token(),
            deadline: tokio::time::Instant::now() + job.timeout,
            asking: None,
            waiting: VecDeque::new(),
            cancelling: false,
            timed_out: false,
            output_ended: false,
            refused: false,
            replaying: false,
            malformed: 0,
            tool_events: 0,
            tools_started: HashMap::new(),
            last_status: None,
            message: String::new(),
        }
    }

    /// The whole turn: for a new agent the handshake and the session (`earlier` loaded when
    /// it can be), then the prompt.
    async fn turn(
        &mut self,
        cwd: &std::path::Path,
        prompts: &Prompts,
        earlier: Option<&str>,
    ) -> TurnEnd {
        match self.turn_steps(cwd, prompts, earlier).await {
            Ok(reason) if self.timed_out => {
                self.note(&format!("after the timeout the agent stopped: {reason}"));
                TurnEnd::TimedOut
            }
            Ok(reason) => TurnEnd::Stopped(reason),
            Err(end) => end,
        }
    }

    async fn turn_steps(
        &mut self,
        cwd: &std::path::Path,
        prompts: &Prompts,
        earlier: Option<&str>,
    ) -> Result<String, TurnEnd> {
        let continued = match &self.agent.session_id {
            Some(id) => {
                self.note(&format!("continuing ACP session {id}"));
                true
            }
            None => {
                self.handshake().await?;
                self.open_session(cwd, earlier).await?
            }
        };
        let (sid, info) = (self.agent.session_id.clone(), self.agent.info.clone());
        let _ = self.hub.update_run(&self.run_id, |r| {
            r.acp_session_id = sid.clone();
            r.agent_info = info;
        });
        let prompt = if continued {
            &prompts.followup
        } else {
            &prompts.full
        };
        let params = acp::prompt_params(sid.as_deref().unwrap_or(""), prompt);
        let result = self.call(method::SESSION_PROMPT, params).await?;
        acp::stop_reason(&result).map_err(TurnEnd::Failed)
    }

    /// `initialize`: the protocol version checked, the agent's name and whether it can load
    /// a session kept.
    async fn handshake(&mut self) -> Result<(), TurnEnd> {
        let init = self
            .call(method::INITIALIZE, acp::initialize_params())
            .await?;
        let name = acp::check_initialized(&init).map_err(TurnEnd::Failed)?;
        self.agent.can_load = acp::can_load_session(&init);
        if let Some(name) = name {
            self.note(&format!("initialized: {name}"));
            self.status(format!("ACP agent: {name}"));
            self.agent.info = Some(name.chars().take(200).collect());
        }
        Ok(())
    }

    /// Open the ACP session in `cwd`: `session/load` of `earlier` when the agent can (true:
    /// the conversation goes on), else — or when it refuses — `session/new`.
    async fn open_session(
        &mut self,
        cwd: &std::path::Path,
        earlier: Option<&str>,
    ) -> Result<bool, TurnEnd> {
        let exe = std::env::current_exe().unwrap_or_else(|_| "hunkgate".into());
        if let (Some(id), true) = (earlier, self.agent.can_load) {
            let params = acp::load_session_params(id, cwd, &exe, &self.agent.mcp_env);
            self.replaying = true;
            let loaded = self.call(method::SESSION_LOAD, params).await;
            self.replaying = false;
            match loaded {
                Ok(_) => {
                    self.note(&format!("session/load {id}: the session goes on"));
                    self.status(format!("ACP session {id} loaded"));
                    self.agent.session_id = Some(id.to_string());
                    return Ok(true);
                }
                Err(TurnEnd::Failed(why)) if self.refused => {
                    self.note(&format!("{why}: a new session instead"));
                }
                Err(end) => return Err(end),
            }
        }
        let params = acp::new_session_params(cwd, &exe, &self.agent.mcp_env);
        let session = self.call(method::SESSION_NEW, params).await?;
        self.agent.session_id = Some(acp::session_id(&session).map_err(TurnEnd::Failed)?);
        Ok(false)
    }

    /// Send a request and serve the connection until its answer comes (or the turn ends).
    async fn call(&mut self, method: &str, params: Value) -> Result<Value, TurnEnd> {
        let id = self.agent.io.next_id;
        self.agent.io.next_id += 1;
        self.refused = false;
        self.send(framing::request(id, method, params)).await?;
        let mut grace_until: Option<tokio::time::Instant> = None;
        loop {
            let deadline = grace_until.unwrap_or(self.deadline);
            tokio::select! {
                frame = self.agent.io.framer.next() => match frame {
                    None => {
                        self.output_ended = true;
                        return Err(TurnEnd::Failed(format!(
                            "the ACP agent's output ended before it answered {method}"
                        )))
                    }
                    Some(Frame::Message(Incoming::Response { id: rid, result })) if rid == id => {
                        self.refused = result.is_err();
                        return result.map_err(|e| {
                            TurnEnd::Failed(format!("the ACP agent refused {method}: {e}"))
                        });
                    }
                    Some(frame) => self.handle(frame).await?,
                },
                (rid, answer) = poll_asking(&mut self.asking), if self.asking.is_some() => {
                    self.asking = None;
                    self.send(framing::response(&rid, answer)).await?;
                    self.ask_next();
                }
                _ = self.cancel.cancelled(), if !self.cancelling => {
                    if self.agent.session_id.is_none() {
                        return Err(TurnEnd::Cancelled);
                    }
                    grace_until = Some(self.start_cancelling().await?);
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if self.cancelling || self.agent.session_id.is_none() {
                        return Err(if self.cancel.is_cancelled() {
                            TurnEnd::Cancelled
                        } else {
                            TurnEnd::TimedOut
                        });
                    }
                    self.timed_out = true;
                    grace_until = Some(self.start_cancelling().await?);
                }
            }
        }
    }

    /// Send `session/cancel`, answer every open permission question "cancelled" (as ACP
    /// asks of a client); the turn now has [`CANCEL_GRACE`] to end.
    async fn start_cancelling(&mut self) -> Result<tokio::time::Instant, TurnEnd> {
        self.cancelling = true;
        let sid = self.agent.session_id.clone().unwrap_or_default();
        self.send(framing::notification(
            method::SESSION_CANCEL,
            acp::cancel_params(&sid),
        ))
        .await?;
        self.note("session/cancel sent");
        // The question put to the reviewer is withdrawn (and answered "cancelled" as it ends);
        // those behind it are answered now.
        self.asks_cancel.cancel();
        while let Some((id, _)) = self.waiting.pop_front() {
            self.send(framing::response(&id, acp::cancelled_permission()))
                .await?;
        }
        Ok(tokio::time::Instant::now() + CANCEL_GRACE)
    }

    async fn send(&mut self, line: Vec<u8>) -> Result<(), TurnEnd> {
        self.agent
            .io
            .stdin
            .send(line)
            .await
            .map_err(|_| TurnEnd::Failed("the ACP agent's stdin is closed".into()))
    }

    /// One frame that is not the awaited answer.
    async fn handle(&mut self, frame: Frame) -> Result<(), TurnEnd> {
        match frame {
            Frame::Message(Incoming::Notification { method, params }) => {
                if method == method::SESSION_UPDATE && self.replaying {
                    // The conversation `session/load` replays is not this run's progress.
                } else if method == method::SESSION_UPDATE {
                    self.on_update(&params);
                } else {
                    self.note(&format!("notification {method} ignored"));
                }
            }
            Frame::Message(Incoming::Request { id, method, params }) => {
                self.on_request(id, &method, &params).await?;
            }
            Frame::Message(Incoming::Response { id, .. }) => {
                self.note(&format!(
                    "an answer to id {id}, which is not awaited, ignored"
                ));
            }
            Frame::Malformed(why) => {
                self.malformed += 1;
                self.note(&format!("not an ACP message: {why}"));
                if self.malformed > MAX_MALFORMED {
                    return Err(TurnEnd::Failed(format!(
                        "the ACP agent wrote more than {MAX_MALFORMED} lines that are not JSON-RPC messages on its stdout (the last: {why})"
                    )));
                }
            }
            Frame::TooLong(n) => {
                return Err(TurnEnd::Failed(format!(
                    "the ACP agent sent a message of {n} bytes, over hunkgate's limit of {} MiB",
                    framing::MAX_MESSAGE / (1024 * 1024)
                )));
            }
        }
        Ok(())
    }

    /// A request of the agent's: a permission question is answered (by the policy, or the
    /// reviewer's answer later); anything else is a JSON-RPC error.
    async fn on_request(&mut self, id: Value, method: &str, params: &Value) -> Result<(), TurnEnd> {
        if method != method::REQUEST_PERMISSION {
            self.note(&format!("request {method} refused: not served"));
            let msg = format!(
                "hunkgate does not serve {method}: it offers no client capabilities; use your own tools in the sandbox"
            );
            return self
                .send(framing::error_response(
                    &id,
                    framing::METHOD_NOT_FOUND,
                    &msg,
                ))
                .await;
        }
        let open = self.waiting.len() + usize::from(self.asking.is_some());
        if open >= acp::MAX_AGENT_REQUESTS {
            let msg = format!(
                "too many permission questions at once ({} are open)",
                acp::MAX_AGENT_REQUESTS
            );
            return self
                .send(framing::error_response(&id, framing::INTERNAL_ERROR, &msg))
                .await;
        }
        let perm = match Permission::parse(params) {
            Ok(p) => p,
            Err(e) => {
                return self
                    .send(framing::error_response(&id, framing::INVALID_PARAMS, &e))
                    .await
            }
        };
        if self.cancelling {
            return self
                .send(framing::response(&id, acp::cancelled_permission()))
                .await;
        }
        if !perm.must_ask(&self.hub.cfg().acp.ask) {
            self.note("permission allowed by the policy");
            return self.send(framing::response(&id, perm.allow())).await;
        }
        self.waiting.push_back((id, perm));
        self.ask_next();
        Ok(())
    }

    /// Put the next waiting question to the reviewer, if none is being asked.
    fn ask_next(&mut self) {
        if self.asking.is_some() {
            return;
        }
        let Some((id, perm)) = self.waiting.pop_front() else {
            return;
        };
        let hub = self.hub.clone();
        let run_id = self.run_id.clone();
        let cancel = self.asks_cancel.clone();
        let timeout = hub.cfg().acp.ask_timeout;
        self.asking = Some(Box::pin(async move {
            let answer = ask_reviewer(&hub, &run_id, &perm, &cancel, timeout).await;
            (id, answer)
        }));
    }

    /// A `session/update`: progress for the reviewer.
    fn on_update(&mut self, params: &Value) {
        match acp::progress(params) {
            Some(Progress::Text { thought, text }) => self.on_text(thought, &text),
            Some(Progress::ToolStarted { id, name, summary }) => {
                self.note(&format!("tool call {id} ({name}): {summary}"));
                if self.tools_started.len() < MAX_TOOL_EVENTS {
                    self.tools_started.insert(id.clone(), Instant::now());
                }
                if self.count_tool_event() {
                    self.hub.bus().emit(Event::ToolRequested {
                        seq: 0,
                        run_id: self.run_id.clone(),
                        tool_call_id: id,
                        name,
                        summary,
                    });
                }
            }
            Some(Progress::ToolEnded {
                id,
                name,
                ok,
                summary,
            }) => {
                self.note(&format!("tool call {id} ended (ok: {ok})"));
                let started = self.tools_started.remove(&id);
                if self.count_tool_event() {
                    self.hub.bus().emit(Event::ToolCompleted {
                        seq: 0,
                        run_id: self.run_id.clone(),
                        tool_call_id: id,
                        name,
                        ok,
                        summary,
                        duration_ms: started.map_or(0, |t| t.elapsed().as_millis() as u64),
                    });
                }
            }
            Some(Progress::Plan(plan)) => self.status(one_line(&plan, 300)),
            Some(Progress::Nothing) => {}
            None => self.note("session/update hunkgate cannot read, ignored"),
        }
    }

    /// Whether one more tool event may be emitted (at most [`MAX_TOOL_EVENTS`] a run).
    fn count_tool_event(&mut self) -> bool {
        self.tool_events += 1;
        if self.tool_events == MAX_TOOL_EVENTS + 1 {
            self.status(format!(
                "More than {MAX_TOOL_EVENTS} tool events: the rest are only in the run's log"
            ));
        }
        self.tool_events <= MAX_TOOL_EVENTS
    }

    /// A chunk of the agent's message or thought: kept (the message), and shown as a status
    /// line at most ten times a second.
    fn on_text(&mut self, thought: bool, text: &str) {
        if !thought && self.message.len() < MESSAGE_KEEP {
            self.message.extend(text.chars().take(MESSAGE_KEEP));
        }
        let shown = if thought {
            format!("Thinking: {}", text.trim())
        } else {
            self.message.lines().last().unwrap_or("").to_string()
        };
        if self
            .last_status
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(100))
            && !shown.trim().is_empty()
        {
            self.last_status = Some(Instant::now());
            self.status(one_line(&shown, 200));
        }
    }

    fn status(&self, message: String) {
        self.hub.run_status(&self.run_id, "working", message);
    }

    /// A line for the run's log (ACP traffic, summarised).
    fn note(&self, what: &str) {
        if let Ok(mut l) = self.agent.log.lock() {
            if let Some(f) = l.as_mut() {
                f.line("acp", &one_line(what, 500));
            }
        }
    }

    /// The agent's message goes to the session's history (the next run's context).
    fn keep_message(&self) {
        if !self.message.trim().is_empty() {
            self.hub
                .history(&self.run_id, Entry::message("assistant", &self.message));
        }
    }
}

/// Wait for the question being asked (None never comes: the branch is guarded).
async fn poll_asking(asking: &mut Option<Asking>) -> (Value, Value) {
    match asking.as_mut() {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Put a permission question to the reviewer as the built-in agent's `clarify_user` is (the
/// run `waiting_for_user`), and turn the answer into the agent's: the option it names; "reject
/// once" for a skip, an answer naming no option, or no answer within `timeout`; "cancelled"
/// once the turn is being cancelled (`run_cancel`: the run's cancel or its timeout).
async fn ask_reviewer(
    hub: &Arc<Hub>,
    run_id: &str,
    perm: &Permission,
    run_cancel: &CancellationToken,
    timeout: Duration,
) -> Value {
    let cancel = run_cancel.child_token();
    let timer = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            cancel.cancel();
        })
    };
    let answer = hub.clarify(run_id, &perm.question(), &cancel).await;
    timer.abort();
    match answer {
        Ok(v) => {
            let text = v.get("answer").and_then(Value::as_str).unwrap_or("");
            if text == NO_USER_ANSWER {
                return perm.reject();
            }
            perm.answer(text).unwrap_or_else(|| {
                hub.run_status(
                    run_id,
                    "working",
                    one_line(
                        &format!("The answer {text:?} names no option: the agent is told \"reject once\""),
                        300,
                    ),
                );
                perm.reject()
            })
        }
        Err(ToolFailure::Cancelled) if run_cancel.is_cancelled() => acp::cancelled_permission(),
        Err(_) => {
            hub.run_status(
                run_id,
                "working",
                format!(
                    "No answer within {}s: the agent is told \"reject once\"",
                    timeout.as_secs()
                ),
            );
            perm.reject()
        }
    }
}

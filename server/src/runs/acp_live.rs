//! ACP agents that outlive a run. Within one hub session, the agent process and its ACP session
//! stay alive between runs: the next run of the session with the same ACP command reaches the
//! same process and sends a new `session/prompt` on the same `sessionId`, beginning with what
//! the reviewer did since the agent's last turn (the agent remembers its own conversation).
//!
//! An agent between runs is *parked*: it keeps its sandbox slot (its cwd), which no other run
//! takes, and waits at most `[acp] keep_alive_secs`. It is killed — its whole process tree,
//! through the same stop as a command agent's — when that passes, when its session is archived,
//! when the hub shuts down, when a run of another session needs the room (live agents and runs
//! together stay within `max_concurrent_runs`), and whenever its turn did not end of itself
//! (cancel, timeout, a broken agent). It is then made again transparently by the session's next
//! run: a new process, and `session/load` of the ACP session the journal recorded for the
//! session's last run (`acp_session_id`) when the agent offers `loadSession`, else
//! `session/new` with the whole session context as for a first run.
//!
//! Who holds an agent holds its slot: a run from its start (it took the parked agent and its
//! slot, see [`Hub::acp_kept_slot`]) to its end, where [`Hub::acp_park`] parks it again or the
//! slot is released; a parked agent until it is retired, which releases the slot once the
//! process tree is gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, Interactive, Pipe, Stream};
use hunkgate_sandbox::workspace::Sandbox;
use tokio_util::sync::CancellationToken;

use crate::agent::acp::framing::Framer;
use crate::hub::Hub;
use crate::model::run::Decisions;
use crate::model::session::SessionStatus;

use super::exec::RunLog;
use super::{Driver, RunJob, ACP_PREFIX};

/// The longest a kept agent's process lives, idle or not (its supervisor's deadline: a
/// backstop should the hub hang; the hub's own limits are the turn's timeout and the
/// keep-alive).
pub const MAX_LIFE: Duration = Duration::from_secs(24 * 60 * 60);
/// Where [`LiveAgent::told`] keeps the pinned context the agent saw (no hunk id: those are
/// `suggestion:path:index`).
const PINNED_KEY: &str = "pinned context";
/// How much of the reviewer's decisions one prompt of a continued session carries at most.
const DECISIONS_BUDGET: usize = 24 * 1024;

/// The log of the run an agent works (or last worked) for: its stderr and the ACP traffic. An
/// idle agent's stderr goes on to its last run's log, which is closed when the next run takes
/// the agent or the agent is stopped.
pub(super) type Log = Arc<Mutex<Option<RunLog>>>;

/// The hub's side of an agent's stdio.
pub(super) struct AgentIo {
    pub(super) stdin: tokio::sync::mpsc::Sender<Vec<u8>>,
    pub(super) framer: Framer<Pipe>,
    /// The id of the hub's next request.
    pub(super) next_id: u64,
}

/// A started ACP agent, held by a run or parked.
pub(super) struct LiveAgent {
    id: u64,
    pub(super) command: String,
    pub(super) io: AgentIo,
    pub(super) log: Log,
    /// Kills its whole process tree.
    pub(super) stop: CancellationToken,
    /// Cancelled once the process tree is gone (and `outcome` is set).
    pub(super) exited: CancellationToken,
    outcome: Arc<Mutex<Option<agent::Outcome>>>,
    /// Its agent token: the `hunkgate mcp` it was offered calls the hub with it. Registered
    /// for the run in progress only.
    pub(super) token: String,
    /// `HUNKGATE_*` variables for `hunkgate mcp` (the hub's URL, the agent token).
    pub(super) mcp_env: Vec<(String, String)>,
    /// The ACP session, once opened; whether the agent offers `session/load`; its name.
    pub(super) session_id: Option<String>,
    pub(super) can_load: bool,
    pub(super) info: Option<String>,
    /// Per hunk of the session's suggestions, its decision as the agent was last told it (and
    /// the pinned context it saw).
    pub(super) told: HashMap<String, String>,
    /// Turns it has ended (for the run's status line).
    pub(super) turns: u64,
}

/// An agent nobody holds any more is never left running (its slot, if it was parked, is
/// then given up by [`Hub::retire_acp`] only).
impl Drop for LiveAgent {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl LiveAgent {
    pub(super) fn alive(&self) -> bool {
        !self.exited.is_cancelled()
    }

    /// Stop it (after `grace` for it to exit of itself) and wait until its tree is gone, then
    /// close the log of its last run: how it ended.
    pub(super) async fn end(self, grace: Duration) -> agent::Outcome {
        tokio::select! {
            () = self.exited.cancelled() => {}
            () = tokio::time::sleep(grace) => {}
        }
        self.stop.cancel();
        self.exited.cancelled().await;
        if let Some(l) = self.log.lock().ok().and_then(|mut l| l.take()) {
            l.finish();
        }
        let outcome = self.outcome.lock().ok().and_then(|mut o| o.take());
        outcome.unwrap_or_else(|| agent::Outcome {
            exit: agent::Exit::Cancelled,
            stderr_tail: String::new(),
            stdout_tail: String::new(),
        })
    }
}

/// An agent between runs.
struct Parked {
    agent: LiveAgent,
    slot: usize,
    /// Ends its idle watch (the agent was taken).
    taken: CancellationToken,
    since: Instant,
}

/// The kept ACP agents: parked ones by hub session, and those runs hold, by run.
#[derive(Default)]
pub(super) struct LiveAcp {
    parked: Mutex<HashMap<String, Parked>>,
    held: Mutex<HashMap<String, LiveAgent>>,
    next_id: AtomicU64,
}

impl LiveAcp {
    fn take_parked(&self, session: &str, id: Option<u64>) -> Option<Parked> {
        let mut parked = self.parked.lock().ok()?;
        match parked.get(session) {
            Some(p) if id.is_none_or(|id| p.agent.id == id) => {
                let p = parked.remove(session)?;
                p.taken.cancel();
                Some(p)
            }
            _ => None,
        }
    }

    pub(super) fn hold(&self, run_id: &str, agent: LiveAgent) {
        if let Ok(mut h) = self.held.lock() {
            h.insert(run_id.to_string(), agent);
        }
    }

    pub(super) fn take_held(&self, run_id: &str) -> Option<LiveAgent> {
        self.held.lock().ok()?.remove(run_id)
    }
}

impl Hub {
    /// The kept ACP agents (made on first use; the registry holds them, unnamed).
    pub(super) fn acp_live(&self) -> &LiveAcp {
        self.runs()
            .acp_live
            .get_or_init(|| Box::new(LiveAcp::default()))
            .downcast_ref::<LiveAcp>()
            .expect("only runs::acp_live fills the registry's acp_live, with a LiveAcp")
    }

    /// Start the ACP agent `command` in `sandbox` for `job`: the process, and the task that
    /// waits for it for its whole life (its stderr to the log of the run it works for).
    pub(super) fn start_acp_agent(
        self: &Arc<Self>,
        job: &RunJob,
        command: &str,
        argv: &[String],
        sandbox: &dyn Sandbox,
    ) -> Result<LiveAgent, agent::Outcome> {
        let token = crate::hub::auth::random_token();
        // (The prompt goes as `session/prompt`; the variable has the first run's.)
        let env = self.agent_env(job, &job.prompt, &token);
        let limit = if self.cfg().acp.keep_alive.is_zero() {
            job.timeout + super::acp::CANCEL_GRACE * 2
        } else {
            MAX_LIFE
        };
        let Interactive {
            stdin,
            stdout,
            process,
        } = agent::spawn_interactive(sandbox, argv, &env, limit)?;
        let log: Log = Arc::new(Mutex::new(None));
        let stop = self.shutdown().child_token();
        let exited = CancellationToken::new();
        let outcome = Arc::new(Mutex::new(None));
        {
            let (log, stop, exited, outcome) =
                (log.clone(), stop.clone(), exited.clone(), outcome.clone());
            self.tasks().spawn(async move {
                let ended = process
                    .wait(limit, stop, move |stream, line| {
                        let tag = if stream == Stream::Stderr {
                            "err"
                        } else {
                            "out"
                        };
                        if let Some(f) = log.lock().ok().as_mut().and_then(|l| l.as_mut()) {
                            f.line(tag, line);
                        }
                    })
                    .await;
                if let Ok(mut o) = outcome.lock() {
                    *o = Some(ended);
                }
                exited.cancel();
            });
        }
        let mcp_env = env
            .iter()
            .filter(|(k, _)| k.starts_with("HUNKGATE_") && k != agent::PROMPT_VAR)
            .cloned()
            .collect();
        Ok(LiveAgent {
            id: self.acp_live().next_id.fetch_add(1, Ordering::Relaxed),
            command: command.to_string(),
            io: AgentIo {
                stdin,
                framer: Framer::new(stdout),
                next_id: 0,
            },
            log,
            stop,
            exited,
            outcome,
            token,
            mcp_env,
            session_id: None,
            can_load: false,
            info: None,
            told: HashMap::new(),
            turns: 0,
        })
    }

    /// At a run's start: the slot of its session's parked agent, when the run is of the same
    /// ACP command (the run now holds the agent, see [`LiveAcp::take_held`]). A parked agent of
    /// another command is retired. Before a new agent is started, parked agents of other
    /// sessions are retired, the longest idle first, until live agents and runs fit in
    /// `max_concurrent_runs`.
    pub(super) fn acp_kept_slot(
        self: &Arc<Self>,
        run_id: &str,
        driver_is_acp: Option<&str>,
    ) -> Option<usize> {
        let command = driver_is_acp?;
        let session = self.run_view(run_id).ok()?.session_id?;
        let found = self.acp_live().take_parked(&session, None);
        match found {
            Some(p) if p.agent.command == command => {
                self.acp_live().hold(run_id, p.agent);
                Some(p.slot)
            }
            other => {
                if let Some(p) = other {
                    self.retire_acp(
                        p.agent,
                        Some(p.slot),
                        "its session's run names another ACP command",
                    );
                }
                self.make_room_for_acp(&session);
                None
            }
        }
    }

    /// At a run's end, with its slot `slot`: the agent the run left is parked with the slot,
    /// unless the hub is shutting down, the session was archived meanwhile or the agent ended
    /// (then it is retired, and the slot released once its tree is gone). False: the run left
    /// no agent, and the caller releases the slot.
    pub(super) fn acp_park(self: &Arc<Self>, run_id: &str, slot: usize) -> bool {
        let Some(agent) = self.acp_live().take_held(run_id) else {
            return false;
        };
        let session = self.run_view(run_id).ok().and_then(|r| r.session_id);
        let active = session.as_deref().is_some_and(|s| {
            self.lock().is_ok_and(|st| {
                st.sessions
                    .sessions
                    .get(s)
                    .is_some_and(|x| x.status == SessionStatus::Active)
            })
        });
        let keep_alive = self.cfg().acp.keep_alive;
        let (Some(session), true) = (session, active && agent.alive()) else {
            self.retire_acp(agent, Some(slot), "its session ended, or it did");
            return true;
        };
        if keep_alive.is_zero() || self.shutdown().is_cancelled() {
            self.retire_acp(agent, Some(slot), "the hub is shutting down");
            return true;
        }
        self.make_room_for_acp(&session);
        let taken = CancellationToken::new();
        let (id, exited) = (agent.id, agent.exited.clone());
        let replaced = self.acp_live().parked.lock().ok().and_then(|mut parked| {
            parked.insert(
                session.clone(),
                Parked {
                    agent,
                    slot,
                    taken: taken.clone(),
                    since: Instant::now(),
                },
            )
        });
        // Two runs of one session at once: the agent parked first makes way.
        if let Some(old) = replaced {
            old.taken.cancel();
            self.retire_acp(
                old.agent,
                Some(old.slot),
                "another agent of its session was parked",
            );
        }
        let hub = self.clone();
        self.tasks().spawn(async move {
            let why = tokio::select! {
                () = taken.cancelled() => return,
                () = tokio::time::sleep(keep_alive) => "idle for [acp] keep_alive_secs",
                () = exited.cancelled() => "its process ended while idle",
            };
            if let Some(p) = hub.acp_live().take_parked(&session, Some(id)) {
                hub.retire_acp(p.agent, Some(p.slot), why);
            }
        });
        true
    }

    /// The session `session` ended (archived): its parked agent is retired.
    pub fn acp_session_ended(self: &Arc<Self>, session: &str) {
        if let Some(p) = self.acp_live().take_parked(session, None) {
            self.retire_acp(p.agent, Some(p.slot), "its session was archived");
        }
    }

    /// Retire parked agents of sessions other than `session`, the longest idle first, while
    /// they and the runs in progress are more than `max_concurrent_runs`.
    fn make_room_for_acp(self: &Arc<Self>, session: &str) {
        let max = self.cfg().max_concurrent_runs.max(1);
        loop {
            let running = self.runs().gate.lock().map(|g| g.running).unwrap_or(0);
            let oldest = {
                let Ok(parked) = self.acp_live().parked.lock() else {
                    return;
                };
                if parked.len() + running <= max {
                    return;
                }
                parked
                    .iter()
                    .filter(|(s, _)| s.as_str() != session)
                    .min_by_key(|(_, p)| p.since)
                    .map(|(s, p)| (s.clone(), p.agent.id))
            };
            let Some((s, id)) = oldest else { return };
            if let Some(p) = self.acp_live().take_parked(&s, Some(id)) {
                self.retire_acp(p.agent, Some(p.slot), "a run needs its room");
            }
        }
    }

    /// Kill `agent`'s process tree (in the background); once it is gone, release `slot`.
    pub(super) fn retire_acp(self: &Arc<Self>, agent: LiveAgent, slot: Option<usize>, why: &str) {
        tracing::info!(agent = %agent.command, why, "ACP agent stopped");
        let hub = self.clone();
        self.tasks().spawn(async move {
            hub.forget_agent_token(&agent.token);
            drop(agent.end(Duration::ZERO).await);
            if let Some(slot) = slot {
                hub.runs().release_slot(slot);
            }
        });
    }

    /// The ACP session the session's last run of `command` ran in, as the journal has it.
    pub(super) fn earlier_acp_session(&self, run_id: &str, command: &str) -> Option<String> {
        let st = self.lock().ok()?;
        let session = st.runs.get(run_id)?.session_id.clone()?;
        let agent = format!("{ACP_PREFIX}{command}");
        let ids = &st.sessions.sessions.get(&session)?.run_ids;
        ids.iter()
            .rev()
            .filter(|r| *r != run_id)
            .filter_map(|r| st.runs.get(r))
            .find(|r| r.agent.as_deref() == Some(agent.as_str()) && r.acp_session_id.is_some())
            .and_then(|r| r.acp_session_id.clone())
    }

    /// The prompt of a continued ACP session: the session's pinned context when it changed
    /// since the agent saw it (`pinned`, as the whole context has it), the reviewer's decisions
    /// the agent was not told yet (per hunk of the session's earlier suggestions: accepted,
    /// rejected with the comment, modified into the reviewer's version, or not reviewed yet),
    /// then the task. Returns it with what the agent then knows (for [`LiveAgent::told`]).
    pub(super) fn acp_followup(
        &self,
        job: &RunJob,
        told: &HashMap<String, String>,
        pinned: &str,
    ) -> (String, HashMap<String, String>) {
        let (news, mut now) = self.untold_decisions(&job.run_id, told);
        let mut parts = Vec::new();
        if !pinned.is_empty() && told.get(PINNED_KEY).map(String::as_str) != Some(pinned) {
            parts.push(pinned.to_string());
        }
        now.insert(PINNED_KEY.to_string(), pinned.to_string());
        if !news.is_empty() {
            parts.push(format!(
                "What the reviewer did with the suggestions of this session since your last turn (accepted hunks are in the files now, rejected ones are not, a modified hunk is there as the reviewer's version):\n{}",
                news.join("\n")
            ));
        }
        if parts.is_empty() {
            return (job.prompt.clone(), now);
        }
        parts.push(format!("The task:\n{}", job.prompt));
        (parts.join("\n"), now)
    }

    /// Per earlier suggestion of the run's session with hunks whose decision differs from
    /// `told`, its account (newest first within [`DECISIONS_BUDGET`], then in order); and every
    /// hunk's decision now.
    fn untold_decisions(
        &self,
        run_id: &str,
        told: &HashMap<String, String>,
    ) -> (Vec<String>, HashMap<String, String>) {
        let views = self.agent_suggestions(run_id).unwrap_or_default();
        let mut now = HashMap::new();
        let mut news = Vec::new();
        for v in views.iter().filter(|v| v.run_id != run_id) {
            let mut d = Decisions::from(v);
            d.hunks.retain(|h| {
                let said = format!("{:?} {:?} {:?}", h.state, h.comment, h.applied_diff);
                let new = told.get(&h.hunk_id) != Some(&said);
                now.insert(h.hunk_id.clone(), said);
                new
            });
            if !d.hunks.is_empty() {
                news.push(crate::sessions::render_decisions(&d));
            }
        }
        let mut kept = Vec::new();
        let mut used = 0;
        for n in news.into_iter().rev() {
            used += n.len();
            if used > DECISIONS_BUDGET {
                break;
            }
            kept.push(n);
        }
        kept.reverse();
        (kept, now)
    }
}

/// Whether a run's driver is an ACP agent: its command.
pub(super) fn acp_command(driver: &Driver) -> Option<&str> {
    match driver {
        Driver::Acp(c) => Some(c),
        _ => None,
    }
}

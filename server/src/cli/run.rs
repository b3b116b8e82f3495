//! `hunkgate run` (start a run and follow its events until its suggestion is ready; Ctrl-C
//! cancels the run or leaves it running) and `hunkgate answer` (answer the built-in agent's
//! question).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{bail, Context};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli::client::{HubClient, WsStream};
use crate::cli::review::print_suggestion;
use crate::cli::runs::{cancel_and_wait, is_active};
use crate::cli::term::{short, visible, visible_line, wire};
use crate::cli::{reviewer_client, typed, ClientArgs};
use crate::protocol::{Event, RunState, RunView};

/// What `hunkgate run` asks for.
pub struct RunRequest {
    pub prompt: String,
    pub agent: Option<String>,
    pub acp: Option<String>,
    pub timeout: Option<u64>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub agent_mode: Option<String>,
    pub session: Option<String>,
    pub no_wait: bool,
}

pub async fn run(client: ClientArgs, req: RunRequest) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    // Subscribe first, so no event of the run can slip by between starting it and listening.
    let mut ws = if req.no_wait {
        None
    } else {
        Some(c.websocket().await?)
    };
    // From here Ctrl-C no longer kills the command: once the run has an id, it asks what to do
    // with the run (one pressed while the run is being started is seen then).
    let mut interrupt = if req.no_wait {
        None
    } else {
        Some(signal(SignalKind::interrupt()).context("listening for Ctrl-C")?)
    };
    let session = match req.session.as_deref() {
        Some(LAST) => Some(last_session(&c).await?),
        _ => req.session.clone(),
    };
    let body = json!({"prompt": req.prompt, "agent": req.agent, "acp": req.acp,
        "timeout_secs": req.timeout, "model": req.model, "provider": req.provider,
        "agent_mode": req.agent_mode, "session_id": session});
    let v = c.post("/runs", body).await?;
    let run_id = v["run_id"].as_str().unwrap_or("").to_string();
    if req.no_wait {
        println!("{}", if client.json { v.to_string() } else { run_id });
        return Ok(ExitCode::SUCCESS);
    }
    if !client.json {
        match v["session_id"].as_str() {
            // How to go on in the same session (its agent sees this run and its review).
            Some(sess) => {
                eprintln!("run {run_id} queued in session {sess} (--session last continues it)")
            }
            None => eprintln!("run {run_id} queued"),
        }
    }
    let (Some(ws), Some(interrupt)) = (ws.as_mut(), interrupt.as_mut()) else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut input = Input::default();
    loop {
        tokio::select! {
            step = next_event(&c, &client, &run_id, ws, &mut input) => {
                if let Some(code) = step? {
                    return Ok(code);
                }
            }
            _ = interrupt.recv() => {
                return interrupted(&c, &run_id, interrupt, &mut input).await;
            }
        }
    }
}

/// `--session last`: the session of the newest run.
pub const LAST: &str = "last";

/// The session of the hub's newest run, for `--session last`.
async fn last_session(c: &HubClient) -> anyhow::Result<String> {
    let runs = crate::cli::runs::fetch(c).await?;
    runs.into_iter()
        .rev()
        .find_map(|r| r.session_id)
        .context("--session last continues the session of the newest run, and there is no run yet")
}

/// Read the next event and act on it if it is about the run; `Some(code)` when the command is
/// done.
async fn next_event(
    c: &HubClient,
    client: &ClientArgs,
    run_id: &str,
    ws: &mut WsStream,
    input: &mut Input,
) -> anyhow::Result<Option<ExitCode>> {
    let Some(msg) = ws.next().await else {
        bail!("the hub closed the connection before run {run_id} finished")
    };
    let msg = msg.context("reading hub events")?;
    let Ok(text) = msg.to_text() else {
        return Ok(None);
    };
    // Frames that are no event (the hello, a resync) are skipped.
    let Ok(raw) = serde_json::from_str::<Value>(text) else {
        return Ok(None);
    };
    let Ok(ev) = serde_json::from_value::<Event>(raw.clone()) else {
        return Ok(None);
    };
    if run_of(&ev) != Some(run_id) {
        return Ok(None);
    }
    if client.json {
        println!("{raw}");
    }
    follow(c, client, run_id, ev, input).await
}

/// Ctrl-C while following the run: on a terminal ask whether to cancel it (a second Ctrl-C or
/// `y` does, Enter leaves it running); off a terminal nobody can answer, and a script that is
/// interrupted wants its agent stopped, so cancel it. Either way, say which and how to get back
/// to it.
async fn interrupted(
    c: &HubClient,
    run_id: &str,
    interrupt: &mut Signal,
    input: &mut Input,
) -> anyhow::Result<ExitCode> {
    let cancel = if std::io::stdin().is_terminal() {
        eprint!("\ncancel run {run_id}? [y/N] (Ctrl-C again: yes) ");
        tokio::select! {
            line = input.line() => {
                line.is_some_and(|l| matches!(l.trim().to_lowercase().as_str(), "y" | "yes"))
            }
            _ = interrupt.recv() => {
                eprintln!();
                true
            }
        }
    } else {
        eprintln!("interrupted: cancelling run {run_id} (no terminal to ask)");
        true
    };
    if !cancel {
        eprintln!(
            "left run {run_id} running: `hunkgate runs` shows it, `hunkgate cancel {}` stops it",
            short(run_id)
        );
        return Ok(ExitCode::from(INTERRUPTED));
    }
    match cancel_and_wait(c, run_id).await {
        Ok(v) if is_active(v.status) => {
            eprintln!("run {run_id} is being cancelled: `hunkgate runs` shows when it has stopped")
        }
        Ok(v) => eprintln!(
            "cancelled run {run_id}: it is {} now (`hunkgate runs` lists it)",
            wire(&v.status)
        ),
        Err(e) => {
            eprintln!(
                "could not cancel run {run_id}: {} (`hunkgate runs` shows it)",
                visible(&format!("{e:#}"))
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::from(INTERRUPTED))
}

/// What a shell reports for a command stopped by Ctrl-C (128 + SIGINT).
const INTERRUPTED: u8 = 130;

/// Lines typed on stdin, read by one thread for the whole command: an answer that is no longer
/// awaited (the question was interrupted) goes to the next question, not to a stray reader, and
/// a thread blocked on the terminal never holds up the exit.
#[derive(Default)]
struct Input {
    lines: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
}

impl Input {
    /// The next line, without its end; `None` at the end of the input.
    async fn line(&mut self) -> Option<String> {
        let rx = self.lines.get_or_insert_with(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            std::thread::spawn(move || {
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            rx
        });
        rx.recv().await
    }
}

/// The run an event is about, if any.
fn run_of(ev: &Event) -> Option<&str> {
    match ev {
        Event::Status { run_id, .. } | Event::Error { run_id, .. } => run_id.as_deref(),
        Event::CheckpointCreated { run_id, .. }
        | Event::ToolRequested { run_id, .. }
        | Event::ToolCompleted { run_id, .. }
        | Event::ClarificationRequested { run_id, .. }
        | Event::ClarificationReceived { run_id, .. } => Some(run_id),
        // `suggestion.ready` carries the run only inside its suggestion: the `ready` status
        // that follows it is what the command acts on.
        _ => None,
    }
}

/// React to one event of the run; `Some(code)` when the command is done.
async fn follow(
    c: &HubClient,
    client: &ClientArgs,
    run_id: &str,
    ev: Event,
    input: &mut Input,
) -> anyhow::Result<Option<ExitCode>> {
    match ev {
        Event::ClarificationRequested {
            question,
            question_id,
            ..
        } if !client.json => {
            ask(c, run_id, &question, &question_id, input).await?;
            Ok(None)
        }
        Event::Error { message, .. } => {
            if !client.json {
                eprintln!("error: {}", visible(&message));
            }
            Ok(Some(ExitCode::FAILURE))
        }
        Event::Status {
            status,
            message,
            suggestion_id,
            ..
        } => {
            if !client.json {
                eprintln!("[{}] {}", visible_line(&status), visible_line(&message));
            }
            match status.as_str() {
                "no_changes" => Ok(Some(ExitCode::SUCCESS)),
                "ready" => ready(c, client, run_id, suggestion_id.as_deref()).await,
                _ => Ok(None),
            }
        }
        _ => Ok(None),
    }
}

/// A suggestion of the run is ready: show it; done unless the agent goes on working.
async fn ready(
    c: &HubClient,
    client: &ClientArgs,
    run_id: &str,
    suggestion_id: Option<&str>,
) -> anyhow::Result<Option<ExitCode>> {
    let run: RunView = typed(c.get(&format!("/runs/{run_id}")).await?)?;
    let finished = !matches!(run.status, RunState::Working | RunState::WaitingForUser);
    if let Some(sid) = suggestion_id {
        let s = c.get(&format!("/suggestions/{sid}")).await?;
        if !client.json {
            print_suggestion(&typed(s)?);
        }
    }
    Ok(finished.then_some(ExitCode::SUCCESS))
}

/// Ask the agent's question on the terminal; the answer may also come from another client.
async fn ask(
    c: &HubClient,
    run_id: &str,
    question: &str,
    question_id: &str,
    input: &mut Input,
) -> anyhow::Result<()> {
    let question = visible(question);
    eprintln!("\nThe agent asks: {question}\nYour answer (empty line: skip; or `hunkgate answer {run_id} …` later):");
    let Some(text) = input.line().await else {
        return Ok(());
    };
    let text = text.trim();
    let body = if text.is_empty() {
        json!({"question_id": question_id, "skip": true})
    } else {
        json!({"question_id": question_id, "answer": text})
    };
    if let Err(e) = c.post(&format!("/runs/{run_id}/clarify"), body).await {
        eprintln!("(not sent: {})", visible(&e.to_string()));
    }
    Ok(())
}

pub async fn answer(
    run: String,
    answer: Option<String>,
    skip: bool,
    client: ClientArgs,
) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let v = c
        .post(
            &format!("/runs/{run}/clarify"),
            json!({"answer": answer, "skip": skip}),
        )
        .await?;
    if client.json {
        println!("{v}");
    }
    Ok(ExitCode::SUCCESS)
}

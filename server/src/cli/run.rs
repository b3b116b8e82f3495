//! `hunkgate run` (start a run and follow its events until its suggestion is ready) and
//! `hunkgate answer` (answer the built-in agent's question).

use std::process::ExitCode;

use anyhow::{bail, Context};
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::cli::client::HubClient;
use crate::cli::review::print_suggestion;
use crate::cli::term::{visible, visible_line};
use crate::cli::{reviewer_client, typed, ClientArgs};
use crate::protocol::{Event, RunState, RunView};

/// What `hunkgate run` asks for.
pub struct RunRequest {
    pub prompt: String,
    pub agent: Option<String>,
    pub timeout: Option<u64>,
    pub model: Option<String>,
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
    let body = json!({"prompt": req.prompt, "agent": req.agent, "timeout_secs": req.timeout,
        "model": req.model, "session_id": req.session});
    let v = c.post("/runs", body).await?;
    let run_id = v["run_id"].as_str().unwrap_or("").to_string();
    if req.no_wait {
        println!("{}", if client.json { v.to_string() } else { run_id });
        return Ok(ExitCode::SUCCESS);
    }
    if !client.json {
        eprintln!("run {run_id} queued");
    }
    let Some(ws) = ws.as_mut() else {
        return Ok(ExitCode::SUCCESS);
    };
    while let Some(msg) = ws.next().await {
        let msg = msg.context("reading hub events")?;
        let Ok(text) = msg.to_text() else { continue };
        // Frames that are no event (the hello, a resync) are skipped.
        let Ok(raw) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let Ok(ev) = serde_json::from_value::<Event>(raw.clone()) else {
            continue;
        };
        if run_of(&ev) != Some(run_id.as_str()) {
            continue;
        }
        if client.json {
            println!("{raw}");
        }
        if let Some(code) = follow(&c, &client, &run_id, ev).await? {
            return Ok(code);
        }
    }
    bail!("the hub closed the connection before run {run_id} finished")
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
) -> anyhow::Result<Option<ExitCode>> {
    match ev {
        Event::ClarificationRequested {
            question,
            question_id,
            ..
        } if !client.json => {
            ask(c, run_id, &question, &question_id).await?;
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
async fn ask(c: &HubClient, run_id: &str, question: &str, question_id: &str) -> anyhow::Result<()> {
    let question = visible(question);
    eprintln!("\nThe agent asks: {question}\nYour answer (empty line: skip; or `hunkgate answer {run_id} …` later):");
    let line = tokio::task::spawn_blocking(|| {
        let mut s = String::new();
        std::io::stdin().read_line(&mut s).map(|n| (n, s))
    })
    .await?;
    let Ok((n, text)) = line else { return Ok(()) };
    if n == 0 {
        return Ok(());
    }
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

//! ACP sessions that continue (`server/src/runs/acp_live.rs`), against the scripted agent on
//! the official Python SDK (`tests/acp_agent.py`), which writes `turn.txt` — its pid, how many
//! prompts its process has had, and the ACP session it was prompted in — with each turn: two
//! runs of one session reach the same process and ACP session, the second prompt carrying the
//! reviewer's decisions on the first suggestion and only what the agent was not told yet; the
//! idle timeout, the session's archiving, another session's need of the room and the hub's
//! shutdown end the process (checked in /proc); after that, a crash or a restart, the next run
//! makes a new process that loads the session (`session/load`), or opens a new one with the
//! whole context when the agent cannot load.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use hunkgate_tests::{pid_alive, wait_for, wait_run_finished, Hub, Workspace, Ws};
use serde_json::{json, Value};

use crate::acp::{added, agent, run_log, start};

const SECS: Duration = Duration::from_secs(60);

/// What the agent wrote in `turn.txt`.
#[derive(Debug, PartialEq)]
struct Turn {
    pid: u32,
    turn: u32,
    session: String,
}

fn turn_of(s: &Value) -> Result<Turn> {
    let files = added(s);
    let line = files
        .get("turn.txt")
        .context("turn.txt in the suggestion")?;
    let w: Vec<&str> = line.split_whitespace().collect();
    anyhow::ensure!(
        w.len() == 6 && w[0] == "pid" && w[2] == "turn" && w[4] == "session",
        "turn.txt: {line:?}"
    );
    Ok(Turn {
        pid: w[1].parse()?,
        turn: w[3].parse()?,
        session: w[5].to_string(),
    })
}

/// A run of the hub's default agent in `session` (a new one when None), to its suggestion:
/// the run and the suggestion.
async fn run(
    hub: &Hub,
    ws: &mut Ws,
    session: Option<&Value>,
    prompt: &str,
) -> Result<(Value, Value)> {
    let mut body = json!({ "prompt": prompt });
    if let Some(s) = session {
        body["session_id"] = s.clone();
    }
    let run_id = start(hub, body)?;
    let ev = ws
        .event(
            "suggestion.ready",
            |v| v["suggestion"]["run_id"] == run_id.as_str(),
            SECS,
        )
        .await
        .with_context(|| format!("run {run_id}: {}", run_log(hub, &run_id)))?;
    let run = wait_run_finished(hub, &run_id, SECS).await?;
    Ok((run, ev["suggestion"].clone()))
}

fn decide(hub: &Hub, s: &Value, file: &str, action: &str, comment: Option<&str>) -> Result<()> {
    let mut body = json!({
        "suggestion_id": s["id"],
        "hunk_id": hunkgate_tests::hunk_id(s, file, 0),
        "action": action,
    });
    if let Some(c) = comment {
        body["comment"] = json!(c);
    }
    let r = hub.curl().post("/feedback", &body)?;
    anyhow::ensure!(r.status == 200, "{}", r.body);
    Ok(())
}

/// Processes whose working directory is in `dir` (read from /proc).
fn processes_in(dir: &Path) -> Vec<i32> {
    hunkgate_sandbox::supervise::procs::working_in(dir).collect()
}

/// The agent's process is gone, and nothing else works in the hub's sandboxes.
async fn gone(hub: &Hub, pid: u32) -> Result<()> {
    wait_for("the agent to be gone", SECS, || !pid_alive(pid)).await?;
    let sandboxes = hub.state.join("sandboxes");
    wait_for("no process in the sandboxes", SECS, || {
        processes_in(&sandboxes).is_empty()
    })
    .await
}

/// The prompt the agent got in this suggestion's turn.
fn prompt_of(s: &Value) -> Result<String> {
    added(s).remove("prompt.txt").context("prompt.txt")
}

const FOLLOWUP: &str =
    "What the reviewer did with the suggestions of this session since your last turn";

/// The accounts of suggestions in a prompt (their headers, not lines of a hunk quoted in one).
fn accounts(prompt: &str) -> usize {
    prompt
        .lines()
        .filter(|l| l.starts_with("Suggestion \""))
        .count()
}

/// Two runs of a session: the second reaches the same process and ACP session, with no new
/// handshake, and its prompt opens with the reviewer's decisions on the first suggestion — one
/// hunk accepted, one rejected with a comment — and not the whole context again. A third run
/// is told only what is new since: the second suggestion, not the first again.
#[tokio::test]
async fn the_next_run_of_a_session_reaches_the_same_agent_with_the_decisions() -> Result<()> {
    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let hub = ws_dir.serve(&["--acp", &agent("edit")])?;
    let mut ws = hub.ws().await?;
    let (run1, s1) = run(&hub, &mut ws, None, "write hello").await?;
    let t1 = turn_of(&s1)?;
    assert_eq!(t1.turn, 1, "{t1:?}");
    assert_eq!(run1["acp_session_id"], t1.session.as_str(), "{run1}");
    let session = run1["session_id"].clone();
    decide(&hub, &s1, "hello.txt", "accept", None)?;
    decide(
        &hub,
        &s1,
        "shell.txt",
        "reject",
        Some("no shell-made files, please"),
    )?;
    // Kept between the runs.
    assert!(pid_alive(t1.pid), "the agent was not kept");

    let (run2, s2) = run(&hub, &mut ws, Some(&session), "and now the rest").await?;
    let t2 = turn_of(&s2)?;
    assert_eq!(
        t2,
        Turn {
            pid: t1.pid,
            turn: 2,
            session: t1.session.clone()
        }
    );
    assert_eq!(run2["acp_session_id"], t1.session.as_str(), "{run2}");
    assert_eq!(run2["agent_info"], "scripted-acp-agent 0.1", "{run2}");
    let log2 = run_log(&hub, run2["run_id"].as_str().unwrap_or(""));
    assert!(
        log2.contains(&format!("acp continuing ACP session {}", t1.session)),
        "{log2}"
    );
    assert!(
        !log2.contains("acp_agent: initialize"),
        "a new handshake: {log2}"
    );
    let prompt2 = prompt_of(&s2)?;
    assert!(prompt2.starts_with(FOLLOWUP), "{prompt2}");
    assert!(
        prompt2.contains("\n- hello.txt hunk 0: accepted\n"),
        "{prompt2}"
    );
    assert!(
        prompt2.contains(
            "\n- shell.txt hunk 0: rejected — comment: no shell-made files, please\n  your hunk:\n"
        ) && prompt2.contains("    +made by a shell\n"),
        "{prompt2}"
    );
    // The hunks not decided yet are said to be so.
    assert!(
        prompt2.contains("\n- prompt.txt hunk 0: not reviewed yet\n"),
        "{prompt2}"
    );
    assert!(
        prompt2.ends_with("The task:\nand now the rest"),
        "{prompt2}"
    );
    assert!(!prompt2.contains("Earlier in this session"), "{prompt2}");
    assert_eq!(accounts(&prompt2), 1, "{prompt2}");

    // Nothing decided since: only the second suggestion's account is new.
    let (_, s3) = run(&hub, &mut ws, Some(&session), "once more").await?;
    assert_eq!(turn_of(&s3)?.turn, 3);
    assert_eq!(turn_of(&s3)?.pid, t1.pid);
    let prompt3 = prompt_of(&s3)?;
    assert_eq!(accounts(&prompt3), 1, "{prompt3}");
    assert!(
        !prompt3.lines().any(|l| l.starts_with("- hello.txt hunk")),
        "told again: {prompt3}"
    );
    assert!(
        prompt3
            .lines()
            .any(|l| l.starts_with("- turn.txt hunk 0: not reviewed yet")),
        "{prompt3}"
    );
    Ok(())
}

/// Past `--acp-keep-alive` the idle agent is killed, nothing left in the sandboxes; the
/// session's next run starts a new process, which loads the session (`session/load`, its
/// replay not shown as progress) and is told the decisions as a continued session is.
#[tokio::test]
async fn an_idle_agent_is_killed_and_the_next_run_loads_its_session() -> Result<()> {
    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let hub = ws_dir.serve(&["--acp", &agent("edit"), "--acp-keep-alive", "1"])?;
    let mut ws = hub.ws().await?;
    let (run1, s1) = run(&hub, &mut ws, None, "write hello").await?;
    let t1 = turn_of(&s1)?;
    gone(&hub, t1.pid).await?;
    decide(&hub, &s1, "shell.txt", "reject", Some("not this one"))?;

    let (run2, s2) = run(&hub, &mut ws, Some(&run1["session_id"]), "go on").await?;
    let t2 = turn_of(&s2)?;
    assert_ne!(t2.pid, t1.pid);
    assert_eq!(t2.turn, 1, "{t2:?}");
    assert_eq!(t2.session, t1.session, "the session was not loaded");
    let id2 = run2["run_id"].as_str().unwrap_or("");
    // The agent's word on stderr, which reaches the run's log beside the ACP traffic.
    wait_for("the agent's load_session in the run's log", SECS, || {
        run_log(&hub, id2).contains(&format!("err acp_agent: load_session {}", t1.session))
    })
    .await?;
    let log2 = run_log(&hub, id2);
    assert!(
        log2.contains(&format!(
            "acp session/load {}: the session goes on",
            t1.session
        )),
        "{log2}"
    );
    let prompt2 = prompt_of(&s2)?;
    assert!(prompt2.starts_with(FOLLOWUP), "{prompt2}");
    assert!(
        prompt2.contains("\n- shell.txt hunk 0: rejected — comment: not this one\n"),
        "{prompt2}"
    );
    // The replayed conversation is not this run's message.
    let history = hub
        .curl()
        .get(&format!(
            "/sessions/{}/history",
            run1["session_id"].as_str().unwrap_or("")
        ))?
        .body;
    assert!(
        !history.to_string().contains("replayed: an earlier answer"),
        "{history}"
    );
    Ok(())
}

/// An agent killed between runs (a crash): the next run makes a new process that loads the
/// session; an agent that cannot load gets a new session with the whole context instead.
#[tokio::test]
async fn after_a_crash_between_runs_a_new_agent_loads_the_session_or_starts_anew() -> Result<()> {
    for loads in [true, false] {
        let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
        let command = if loads {
            agent("edit")
        } else {
            agent("edit noload")
        };
        let hub = ws_dir.serve(&["--acp", &command])?;
        let mut ws = hub.ws().await?;
        let (run1, s1) = run(&hub, &mut ws, None, "write hello").await?;
        let t1 = turn_of(&s1)?;
        decide(&hub, &s1, "hello.txt", "accept", None)?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(t1.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        wait_for("the agent to be gone", SECS, || !pid_alive(t1.pid)).await?;

        let (run2, s2) = run(&hub, &mut ws, Some(&run1["session_id"]), "go on").await?;
        let t2 = turn_of(&s2)?;
        assert_ne!(t2.pid, t1.pid);
        assert_eq!(t2.turn, 1);
        let prompt2 = prompt_of(&s2)?;
        let log2 = run_log(&hub, run2["run_id"].as_str().unwrap_or(""));
        if loads {
            assert_eq!(t2.session, t1.session, "{log2}");
            assert!(prompt2.starts_with(FOLLOWUP), "{prompt2}");
        } else {
            assert_ne!(t2.session, t1.session, "{log2}");
            assert!(!log2.contains("load_session"), "{log2}");
            assert!(prompt2.contains("Earlier in this session"), "{prompt2}");
        }
        assert!(
            prompt2.contains("\n- hello.txt hunk 0: accepted\n"),
            "{prompt2}"
        );
        assert_eq!(run2["acp_session_id"], t2.session.as_str(), "{run2}");
    }
    Ok(())
}

/// Each session has its own agent; archiving a session stops its agent, and only its own.
/// With one run slot, a run of another session takes the idle agent's room: it is stopped.
#[tokio::test]
async fn sessions_have_their_own_agents_within_the_run_slots() -> Result<()> {
    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let hub = ws_dir.serve(&["--acp", &agent("edit"), "--max-runs", "2"])?;
    let mut ws = hub.ws().await?;
    let (ra, sa) = run(&hub, &mut ws, None, "write hello").await?;
    let (_, sb) = run(&hub, &mut ws, None, "write hello").await?;
    let (ta, tb) = (turn_of(&sa)?, turn_of(&sb)?);
    assert_ne!(ta.pid, tb.pid);
    assert_ne!(ta.session, tb.session);
    assert!(pid_alive(ta.pid) && pid_alive(tb.pid));
    let r = hub.curl().delete(&format!(
        "/sessions/{}",
        ra["session_id"].as_str().unwrap_or("")
    ))?;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_for("the archived session's agent to be gone", SECS, || {
        !pid_alive(ta.pid)
    })
    .await?;
    assert!(
        pid_alive(tb.pid),
        "the other session's agent was stopped too"
    );

    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let hub = ws_dir.serve(&["--acp", &agent("edit"), "--max-runs", "1"])?;
    let mut ws = hub.ws().await?;
    let (_, sa) = run(&hub, &mut ws, None, "write hello").await?;
    let ta = turn_of(&sa)?;
    assert!(pid_alive(ta.pid));
    let (_, sb) = run(&hub, &mut ws, None, "write hello").await?;
    let tb = turn_of(&sb)?;
    wait_for("the idle agent to make room", SECS, || !pid_alive(ta.pid)).await?;
    assert!(pid_alive(tb.pid));
    Ok(())
}

/// The hub's shutdown stops its kept agents; the next hub's run of the session makes a new
/// one that loads the session the journal recorded.
#[tokio::test]
async fn a_restarted_hub_loads_the_session_its_journal_recorded() -> Result<()> {
    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let mut hub = ws_dir.serve(&["--acp", &agent("edit")])?;
    let mut ws = hub.ws().await?;
    let (run1, s1) = run(&hub, &mut ws, None, "write hello").await?;
    let t1 = turn_of(&s1)?;
    assert!(pid_alive(t1.pid));
    hub.stop()?;
    gone(&hub, t1.pid).await?;

    let hub = ws_dir.serve(&["--acp", &agent("edit")])?;
    let mut ws = hub.ws().await?;
    let (run2, s2) = run(&hub, &mut ws, Some(&run1["session_id"]), "go on").await?;
    let t2 = turn_of(&s2)?;
    assert_ne!(t2.pid, t1.pid);
    assert_eq!(
        t2.session,
        t1.session,
        "{}",
        run_log(&hub, run2["run_id"].as_str().unwrap_or(""))
    );
    Ok(())
}

/// Cancel during a continued turn sends `session/cancel` and then kills the process, kept or
/// not: the session's next run starts a new one, which loads the session.
#[tokio::test]
async fn cancel_of_a_continued_turn_ends_the_agent_and_the_next_run_loads_the_session() -> Result<()>
{
    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let hub = ws_dir.serve(&["--acp", &agent("edit-then-polite")])?;
    let mut ws = hub.ws().await?;
    let (run1, s1) = run(&hub, &mut ws, None, "write hello").await?;
    let t1 = turn_of(&s1)?;
    let session = run1["session_id"].clone();
    let id2 = start(&hub, json!({"prompt": "wait", "session_id": session}))?;
    wait_for("the second prompt", SECS, || {
        run_log(&hub, &id2).contains(&format!("acp_agent: prompt {} turn 2", t1.session))
    })
    .await?;
    let r = hub
        .curl()
        .post(&format!("/runs/{id2}/cancel"), &json!({}))?;
    assert_eq!(r.status, 200, "{}", r.body);
    let run2 = wait_run_finished(&hub, &id2, SECS).await?;
    assert_eq!(run2["status"], "cancelled", "{run2}");
    assert!(run_log(&hub, &id2).contains("got session/cancel"));
    gone(&hub, t1.pid).await?;

    let (_, s3) = run(&hub, &mut ws, Some(&session), "write hello again").await?;
    let t3 = turn_of(&s3)?;
    assert_ne!(t3.pid, t1.pid);
    assert_eq!((t3.turn, t3.session.as_str()), (1, t1.session.as_str()));
    Ok(())
}

/// Context pinned to the session between runs reaches the continued agent once, in the next
/// prompt, and is not repeated after.
#[tokio::test]
async fn context_pinned_between_runs_reaches_the_continued_agent_once() -> Result<()> {
    let ws_dir = Workspace::new(&[("a.txt", b"a\n")])?;
    let hub = ws_dir.serve(&["--acp", &agent("edit")])?;
    let mut ws = hub.ws().await?;
    let (run1, s1) = run(&hub, &mut ws, None, "write hello").await?;
    let session = run1["session_id"].clone();
    let sid = session.as_str().unwrap_or("");
    let r = hub.curl().post(
        &format!("/sessions/{sid}/context"),
        &json!({"kind": "note", "content": "Tabs, never spaces."}),
    )?;
    assert_eq!(r.status, 200, "{}", r.body);
    let (_, s2) = run(&hub, &mut ws, Some(&session), "go on").await?;
    assert_eq!(turn_of(&s2)?.pid, turn_of(&s1)?.pid);
    let prompt2 = prompt_of(&s2)?;
    assert!(
        prompt2.starts_with(
            "Context the user pinned to this session:\n### Note\n```\nTabs, never spaces.\n```"
        ),
        "{prompt2}"
    );
    let (_, s3) = run(&hub, &mut ws, Some(&session), "once more").await?;
    let prompt3 = prompt_of(&s3)?;
    assert!(prompt3.starts_with(FOLLOWUP), "{prompt3}");
    assert!(
        !prompt3.lines().any(|l| l == "Tabs, never spaces."),
        "pinned context told again: {prompt3}"
    );
    Ok(())
}

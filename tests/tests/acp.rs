//! Agents over the Agent Client Protocol (`hunkgate serve --acp`), against a scripted ACP agent
//! built on the official Python SDK (`tests/acp_agent.py`, the pinned `agent-client-protocol`
//! that `scripts/install-test-deps` puts in a venv): a turn to a reviewed suggestion with its
//! progress, a permission asked and answered from the CLI, cancel and timeout ending the
//! session and the process, and broken agents (a crash mid-turn, garbage, a 100 MiB line, a
//! flood of updates) ending their runs with clear errors and bounded memory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use hunkgate_tests::{pid_alive, wait_for, wait_run_finished, Hub, Workspace, Ws};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(60);

/// The Python that has the ACP SDK: `HUNKGATE_TEST_ACP_PYTHON`, else the venv
/// `scripts/install-test-deps` makes in the target dir (target/py-acp).
pub(crate) fn python() -> PathBuf {
    static PY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PY.get_or_init(|| {
        let py = match std::env::var_os("HUNKGATE_TEST_ACP_PYTHON") {
            Some(p) => PathBuf::from(p),
            None => hunkgate_tests::in_target_dir("py-acp/bin/python"),
        };
        let works = Command::new(&py)
            .args(["-c", "import acp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            works,
            "{} cannot import the ACP Python SDK: run scripts/install-test-deps (it makes that \
             venv with the pinned `agent-client-protocol`), or point HUNKGATE_TEST_ACP_PYTHON at \
             a python that has it",
            py.display()
        );
        py
    })
    .clone()
}

/// The `--acp` command of the scripted agent playing `scenario`.
pub(crate) fn agent(scenario: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("acp_agent.py");
    format!("{} {} {scenario}", python().display(), script.display())
}

fn workspace() -> Result<Workspace> {
    Workspace::new(&[("a.txt", b"a\n")])
}

/// A hub whose default agent is the scripted ACP agent playing `scenario`.
fn hub(ws: &Workspace, scenario: &str, extra: &[&str]) -> Result<Hub> {
    let acp = agent(scenario);
    let mut args = vec!["--acp", acp.as_str()];
    args.extend_from_slice(extra);
    ws.serve(&args)
}

/// Start a run of the hub's default agent; its id.
pub(crate) fn start(hub: &Hub, body: Value) -> Result<String> {
    let r = hub.curl().post("/runs", &body)?;
    anyhow::ensure!(r.status == 200, "POST /runs: {} {}", r.status, r.body);
    Ok(r.body["run_id"].as_str().context("run_id")?.to_string())
}

/// The run's log (`<state>/runs/<run>.log`): the agent's stderr and the ACP traffic.
pub(crate) fn run_log(hub: &Hub, run_id: &str) -> String {
    std::fs::read_to_string(hub.state.join("runs").join(format!("{run_id}.log")))
        .unwrap_or_default()
}

/// The agent's pid, as it said it on stderr.
pub(crate) async fn agent_pid(hub: &Hub, run_id: &str) -> Result<u32> {
    let mut pid = None;
    wait_for("the agent's pid in the run log", SECS, || {
        pid = run_log(hub, run_id)
            .lines()
            .find_map(|l| l.strip_prefix("err acp_agent: pid ")?.trim().parse().ok());
        pid.is_some()
    })
    .await?;
    pid.context("pid")
}

/// The hub process's peak resident memory (VmHWM), in KiB.
fn peak_kib(hub: &Hub) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", hub.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The files of a suggestion and, per file, its added lines.
pub(crate) fn added(s: &Value) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
    for h in s["hunks"].as_array().into_iter().flatten() {
        let lines = h["diff"]
            .as_str()
            .unwrap_or("")
            .lines()
            .filter(|l| !l.starts_with("+++"))
            .filter_map(|l| l.strip_prefix('+').map(str::to_string));
        out.entry(h["file"].as_str().unwrap_or("").to_string())
            .or_default()
            .extend(lines);
    }
    out.into_iter().map(|(k, v)| (k, v.join("\n"))).collect()
}

async fn ready(ws: &mut Ws, run_id: &str) -> Result<Value> {
    let ev = ws
        .event(
            "suggestion.ready",
            |v| v["suggestion"]["run_id"] == run_id,
            SECS,
        )
        .await?;
    Ok(ev["suggestion"].clone())
}

/// A whole turn: the plan, the thought and the tool call reach the reviewer as they happen,
/// the requests the hub does not serve are refused with JSON-RPC errors, and what the agent
/// wrote in the sandbox — with its edit tool or a shell — is one suggestion, reviewed as any
/// other.
#[tokio::test]
async fn an_acp_turn_ends_in_a_reviewed_suggestion() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "edit", &[])?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "write hello"}))?;
    let s = ready(&mut ws, &run_id).await?;
    let files = added(&s);
    assert_eq!(
        files.get("hello.txt").map(String::as_str),
        Some("hello from the ACP agent"),
        "{s}"
    );
    assert_eq!(
        files.get("shell.txt").map(String::as_str),
        Some("made by a shell")
    );
    // fs/read_text_file and terminal/create: "method not found".
    assert_eq!(
        files.get("refused.txt").map(String::as_str),
        Some("-32601 -32601")
    );
    assert_eq!(
        files.get("prompt.txt").map(String::as_str),
        Some("write hello")
    );
    for (ty, pred) in [
        (
            "suggestion.status",
            json!({"message": "Plan (1/2 done): read the task; write hello.txt"}),
        ),
        (
            "suggestion.status",
            json!({"message": "Thinking: pondering"}),
        ),
        (
            "suggestion.status",
            json!({"message": "ACP agent: scripted-acp-agent 0.1"}),
        ),
        (
            "tool.call.requested",
            json!({"tool_call_id": "call-1", "name": "edit"}),
        ),
        (
            "tool.call.completed",
            json!({"tool_call_id": "call-1", "ok": true}),
        ),
    ] {
        ws.event(
            ty,
            |v| {
                v["run_id"] == run_id.as_str()
                    && pred
                        .as_object()
                        .unwrap()
                        .iter()
                        .all(|(k, want)| &v[k] == want)
            },
            SECS,
        )
        .await
        .with_context(|| format!("{ty} {pred}"))?;
    }
    let run = wait_run_finished(&hub, &run_id, SECS).await?;
    assert_eq!(run["status"], "ready");
    assert_eq!(run["stop_reason"], "end_turn");
    assert_eq!(run["agent_info"], "scripted-acp-agent 0.1", "{run}");
    assert!(
        run["agent"].as_str().unwrap_or("").starts_with("acp:"),
        "{run}"
    );
    // `hunkgate mcp` was offered, and the agent ran in the sandbox, not the checkout.
    let log = run_log(&hub, &run_id);
    assert!(log.contains("mcp: hunkgate"), "{log}");
    assert!(!ws_dir.exists("hello.txt"));
    // Reviewed as any other: the accepted hunk, and only it, reaches the checkout.
    let sid = s["id"].as_str().unwrap();
    let hunk = hunkgate_tests::hunk_id(&s, "hello.txt", 0);
    ws.decide(sid, &hunk, "accept").await?;
    assert_eq!(
        ws_dir.read_string("hello.txt")?,
        "hello from the ACP agent\n"
    );
    assert!(!ws_dir.exists("shell.txt"));
    Ok(())
}

/// A permission question of a kind the policy lists waits for the reviewer as a
/// `waiting_for_user` question; the CLI's answer is the option the agent receives. Without the
/// kind listed (the positive control), the policy allows it at once.
#[tokio::test]
async fn a_listed_permission_is_asked_and_the_cli_answer_reaches_the_agent() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "permission", &["--acp-ask", "execute"])?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "clean up"}))?;
    let asked = ws
        .event(
            "clarification.requested",
            |v| v["run_id"] == run_id.as_str(),
            SECS,
        )
        .await?;
    let question = asked["question"].as_str().unwrap_or("");
    assert!(
        question.contains("execute") && question.contains("make clean"),
        "{question}"
    );
    let run = hub.curl().get(&format!("/runs/{run_id}"))?.body;
    assert_eq!(run["status"], "waiting_for_user", "{run}");
    let out = ws_dir.cli(&["answer", &run_id, "reject-once"])?;
    assert!(out.status.success(), "{out:?}");
    let s = ready(&mut ws, &run_id).await?;
    assert_eq!(
        added(&s).get("permission.txt").map(String::as_str),
        Some("reject-once")
    );

    let ws_dir = workspace()?;
    let hub = self::hub(&ws_dir, "permission", &[])?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "clean up"}))?;
    let s = ready(&mut ws, &run_id).await?;
    assert_eq!(
        added(&s).get("permission.txt").map(String::as_str),
        Some("allow-once")
    );
    let run = wait_run_finished(&hub, &run_id, SECS).await?;
    assert!(run.get("question").is_none_or(Value::is_null), "{run}");

    // Nobody answers within --acp-ask-timeout: the agent is told "reject once".
    let ws_dir = workspace()?;
    let hub = self::hub(
        &ws_dir,
        "permission",
        &["--acp-ask", "execute", "--acp-ask-timeout", "1"],
    )?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "clean up"}))?;
    let s = ready(&mut ws, &run_id).await?;
    assert_eq!(
        added(&s).get("permission.txt").map(String::as_str),
        Some("reject-once")
    );
    Ok(())
}

/// Cancel sends `session/cancel`: an agent that ends its turn then is `cancelled` at once; one
/// that ignores it is killed with its whole tree after the grace. Either way nothing is left.
#[tokio::test]
async fn cancel_sends_session_cancel_and_leaves_no_process() -> Result<()> {
    for scenario in ["polite", "hang"] {
        let ws_dir = workspace()?;
        let hub = hub(&ws_dir, scenario, &[])?;
        let run_id = start(&hub, json!({"prompt": "wait"}))?;
        let pid = agent_pid(&hub, &run_id).await?;
        wait_for("the prompt to be sent", SECS, || {
            run_log(&hub, &run_id).contains("new_session")
        })
        .await?;
        let r = hub
            .curl()
            .post(&format!("/runs/{run_id}/cancel"), &json!({}))?;
        assert_eq!(r.status, 200, "{}", r.body);
        let run = wait_run_finished(&hub, &run_id, SECS).await?;
        assert_eq!(run["status"], "cancelled", "{scenario}: {run}");
        assert_eq!(run["stop_reason"], "cancelled", "{scenario}: {run}");
        assert!(
            run_log(&hub, &run_id).contains("got session/cancel"),
            "{scenario}: {}",
            run_log(&hub, &run_id)
        );
        wait_for("the agent to be gone", SECS, || !pid_alive(pid)).await?;
    }
    Ok(())
}

/// The time limit ends even a turn the agent never answers (here: not even `initialize`),
/// with an error that says so, and no process left.
#[tokio::test]
async fn an_agent_that_never_answers_times_out() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "mute", &[])?;
    let run_id = start(&hub, json!({"prompt": "anything", "timeout_secs": 10}))?;
    let pid = agent_pid(&hub, &run_id).await?;
    let run = wait_run_finished(&hub, &run_id, SECS).await?;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["stop_reason"], "timeout", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or("")
            .contains("timed out after 10s"),
        "{run}"
    );
    wait_for("the agent to be gone", SECS, || !pid_alive(pid)).await?;
    Ok(())
}

/// An agent that dies mid-turn fails its run with what it was doing and how it ended.
#[tokio::test]
async fn a_crash_mid_turn_fails_the_run_saying_how() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "crash", &[])?;
    let run_id = start(&hub, json!({"prompt": "anything"}))?;
    let run = wait_run_finished(&hub, &run_id, SECS).await?;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or("");
    assert!(
        error.contains("output ended before it answered session/prompt")
            && error.contains("exited with status 3"),
        "{error}"
    );
    Ok(())
}

/// Lines that are not JSON-RPC on the agent's stdout are logged and skipped; the turn goes on
/// to its suggestion.
#[tokio::test]
async fn garbage_on_stdout_is_logged_and_the_turn_goes_on() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "garbage", &[])?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "write hello"}))?;
    let s = ready(&mut ws, &run_id).await?;
    assert!(added(&s).contains_key("hello.txt"), "{s}");
    let log = run_log(&hub, &run_id);
    assert!(log.contains("acp not an ACP message: not JSON"), "{log}");
    assert!(
        log.contains("acp not an ACP message: no \"jsonrpc\""),
        "{log}"
    );
    Ok(())
}

/// A 100 MiB line ends the run with an error naming the limit, and is never held: the hub's
/// peak memory grows by far less than the line. A flood of 20,000 updates (the positive
/// control of a long output that is not one line) ends in its suggestion.
#[tokio::test]
async fn a_huge_line_fails_the_run_without_being_held_and_a_flood_ends_in_a_suggestion(
) -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "huge", &[])?;
    let before = peak_kib(&hub);
    let run_id = start(&hub, json!({"prompt": "anything"}))?;
    let run = wait_run_finished(&hub, &run_id, SECS).await?;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap_or("");
    assert!(
        error.contains("sent a message of") && error.contains("over hunkgate's limit of 8 MiB"),
        "{error}"
    );
    let grew = peak_kib(&hub).saturating_sub(before);
    assert!(grew < 48 * 1024, "the hub's peak memory grew by {grew} KiB");

    let ws_dir = workspace()?;
    let hub = self::hub(&ws_dir, "flood", &[])?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "write hello"}))?;
    let s = ready(&mut ws, &run_id).await?;
    assert!(added(&s).contains_key("hello.txt"), "{s}");
    Ok(())
}

/// A run may name its ACP agent (REST, and `hunkgate run --acp`); a command for ACP takes no
/// `{prompt}`.
#[tokio::test]
async fn a_run_names_its_acp_agent_and_a_prompt_placeholder_is_refused() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = ws_dir.serve(&[])?;
    let mut ws = hub.ws().await?;
    let run_id = start(&hub, json!({"prompt": "write hello", "acp": agent("edit")}))?;
    ready(&mut ws, &run_id).await?;
    let out = ws_dir.cli(&["run", "--acp", &agent("edit"), "write hello"])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("+hello from the ACP agent"), "{stdout}");
    let r = hub.curl().post(
        "/runs",
        &json!({"prompt": "x", "acp": "opencode acp {prompt}"}),
    )?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body.to_string().contains("takes no {prompt}"),
        "{}",
        r.body
    );
    Ok(())
}

/// The next run of a session tells the ACP agent what the reviewer did with its last
/// suggestion: per hunk accepted, or rejected with the reviewer's comment.
#[tokio::test]
async fn the_next_run_of_a_session_hears_the_reviewers_decisions() -> Result<()> {
    let ws_dir = workspace()?;
    let hub = hub(&ws_dir, "edit", &[])?;
    let mut ws = hub.ws().await?;
    let first = start(&hub, json!({"prompt": "write hello"}))?;
    let s = ready(&mut ws, &first).await?;
    let sid = s["id"].as_str().context("id")?;
    for (file, action, comment) in [
        ("hello.txt", "accept", None),
        ("shell.txt", "reject", Some("no shell-made files, please")),
    ] {
        let mut body = json!({"suggestion_id": sid, "hunk_id": hunkgate_tests::hunk_id(&s, file, 0), "action": action});
        if let Some(c) = comment {
            body["comment"] = json!(c);
        }
        let r = hub.curl().post("/feedback", &body)?;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let session = wait_run_finished(&hub, &first, SECS).await?["session_id"].clone();
    let second = start(
        &hub,
        json!({"prompt": "and now the rest", "session_id": session}),
    )?;
    let s = ready(&mut ws, &second).await?;
    let prompt = added(&s).remove("prompt.txt").context("prompt.txt")?;
    assert!(prompt.contains("- hello.txt hunk 0: accepted"), "{prompt}");
    assert!(
        prompt.contains("- shell.txt hunk 0: rejected — comment: no shell-made files, please"),
        "{prompt}"
    );
    assert!(prompt.ends_with("and now the rest"), "{prompt}");
    Ok(())
}

//! Model selection and `hybrid_auto` (issue #60.3) end to end: the real hub with two providers
//! by name, each a real HTTP server. The remote is the project's scripted OpenAI-compatible
//! server, answering with a valid edit; the local is a scripted one too where a trigger cannot
//! be provoked deterministically with a real model (an invalid call, a spent budget, a slow
//! call), and llama.cpp's `llama-server` with Gemma 3 270M and a small `--ctx-size` where it
//! can (`real_local_model_overflows_and_the_run_moves_to_remote`).
//!
//! Each trigger has its own test: the run moved to the remote provider, continued in the same
//! sandbox from the prompt, and says why on the run (`route.switches`), in a status line and in
//! the session history.

use std::time::Duration;

use hunkgate_tests::fake_llm::{Call, FakeLlm, Recorded, Reply};
use hunkgate_tests::model_server::{require, server_installed, Kind, ModelServer};
use hunkgate_tests::{wait_run_finished, Hub, Workspace};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(60);
const PROMPT: &str = "Create hello.txt saying hi.";

/// The remote: writes hello.txt, then finishes.
async fn remote() -> FakeLlm {
    FakeLlm::scripted(vec![
        Reply::tool(
            "write_file",
            json!({"file_path": "hello.txt", "content": "hi\n"}),
        ),
        Reply::tool("finish", json!({"description": "Say hi"})),
    ])
    .await
}

/// The chat-completions requests a fake received (the hub also asks `GET /models`).
fn chats(f: &FakeLlm) -> Vec<Recorded> {
    f.requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect()
}

/// A config with `local` and `remote` providers, `[routing]` extras and `[limits]` extras.
fn config(ws: &Workspace, local: &str, remote: &str, routing: &str, extra: &str) -> String {
    let p = ws.path("hunkgate.toml");
    let text = format!(
        "[providers.local]\nbase_url = \"{local}\"\nmodel = \"small\"\nretry_base_ms = 10\n\
         [[providers.local.models]]\nname = \"small\"\ntools = true\ncost = \"free\"\n\
         [providers.remote]\nbase_url = \"{remote}\"\nmodel = \"big\"\n\
         [[providers.remote.models]]\nname = \"big\"\ncontext = 128000\ntools = true\ncost = \"expensive\"\n\
         [routing]\n{routing}\n{extra}"
    );
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn serve(ws: &Workspace, cfg: &str) -> Hub {
    ws.serve(&["--isolation", "none", "--config", cfg]).unwrap()
}

fn start(hub: &Hub, body: Value) -> String {
    let r = hub.curl().post("/runs", &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["run_id"].as_str().unwrap().to_string()
}

/// What every moved run shows: ready with the remote's edit (the checkout untouched), on the
/// remote provider, one switch with `trigger`, the move in the session history, and the remote
/// restarted from the prompt (it never saw the local model's conversation).
async fn assert_moved(
    hub: &Hub,
    ws: &Workspace,
    fake_remote: &FakeLlm,
    run_id: &str,
    trigger: &str,
) -> Value {
    let run = wait_run_finished(hub, run_id, SECS).await.unwrap();
    assert_eq!(run["status"], "ready", "{run}\n{}", hub.log_text());
    assert_eq!(run["provider"], "remote", "{run}");
    assert_eq!(run["model"], "big", "{run}");
    assert_eq!(run["agent"], "builtin:big", "{run}");
    let route = &run["route"];
    assert_eq!(route["mode"], "hybrid_auto", "{run}");
    assert_eq!(route["provider"], "local", "{run}");
    assert_eq!(route["model"], "small", "{run}");
    let switches = route["switches"].as_array().unwrap();
    assert_eq!(switches.len(), 1, "{run}");
    assert_eq!(switches[0]["trigger"], trigger, "{run}");
    assert_eq!(switches[0]["from"], "local/small", "{run}");
    assert_eq!(switches[0]["to"], "remote/big", "{run}");
    assert!(!switches[0]["detail"].as_str().unwrap().is_empty(), "{run}");
    assert!(
        !ws.exists("hello.txt"),
        "the checkout changes only on a decision"
    );
    let id = run["suggestion_ids"][0].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{id}")).unwrap().body;
    assert_eq!(s["description"], "Say hi", "{s}");
    assert!(
        s["hunks"][0]["diff"].as_str().unwrap().contains("+hi"),
        "{s}"
    );

    let sid = run["session_id"].as_str().unwrap();
    let h = hub
        .curl()
        .get(&format!("/sessions/{sid}/history"))
        .unwrap()
        .body;
    let moved = h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["role"] == "system"
                && e["content"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Moved to remote/big")
        })
        .unwrap_or_else(|| panic!("no move in the history: {h}"));
    assert!(
        moved["content"].as_str().unwrap().contains(trigger),
        "{moved}"
    );

    let first: &Recorded = &chats(fake_remote)[0];
    let roles: Vec<Value> = first.messages().iter().map(|m| m["role"].clone()).collect();
    assert!(
        !roles.contains(&json!("assistant")) && !roles.contains(&json!("tool")),
        "{roles:?}"
    );
    assert_eq!(first.model().as_deref(), Some("big"));
    run
}

/// Trigger: invalid tool calls repeated `hybrid_remote_on_schema_fail` times.
#[tokio::test]
async fn invalid_calls_repeated_move_the_run_to_remote() {
    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let local = FakeLlm::scripted(vec![
        Reply::tools(vec![Call::raw("write_file", "{\"file_path\": ")]),
        Reply::tool("edit_file", json!({"operation": "replace"})),
    ])
    .await;
    let remote_llm = remote().await;
    let cfg = config(
        &ws,
        &local.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"hybrid_auto\"\nhybrid_remote_on_schema_fail = 2\n",
        "",
    );
    let hub = serve(&ws, &cfg);
    let mut events = hub.ws().await.unwrap();
    let run_id = start(&hub, json!({"prompt": PROMPT}));
    let run = assert_moved(&hub, &ws, &remote_llm, &run_id, "schema_fail").await;
    assert_eq!(
        chats(&local).len(),
        2,
        "the local model had its two invalid calls"
    );
    assert!(
        run["route"]["switches"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("2 invalid"),
        "{run}"
    );
    assert_eq!(run["usage"]["schema_failures"], 2, "{run}");
    assert_eq!(run["stop_reason"], "finished", "{run}");
    // The move as a status line, as clients see it.
    let status = events
        .next_matching(
            |v| {
                v["type"] == "suggestion.status"
                    && v["run_id"] == run_id
                    && v["message"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("Moved to remote/big (schema_fail)")
            },
            SECS,
        )
        .await;
    assert!(status.is_ok(), "no status line for the move");
}

/// Trigger: the tool budget spent without an edit.
#[tokio::test]
async fn a_budget_spent_without_an_edit_moves_the_run_to_remote() {
    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let local = FakeLlm::with(|_| Reply::tool("list_files", json!({}))).await;
    let remote_llm = remote().await;
    let cfg = config(
        &ws,
        &local.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"hybrid_auto\"\n",
        "[limits]\nmax_tool_calls = 2\n",
    );
    let hub = serve(&ws, &cfg);
    let run_id = start(&hub, json!({"prompt": PROMPT}));
    let run = assert_moved(&hub, &ws, &remote_llm, &run_id, "budget_exhausted").await;
    assert_eq!(
        chats(&local).len(),
        3,
        "two calls in the budget, the third over it"
    );
    // The remote leg has a budget of its own: its write and finish went through.
    assert_eq!(run["usage"]["tool_calls"], 3, "{run}");

    // Positive control: with the trigger off, the run stays local and ends on its budget.
    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let remote_llm = remote().await;
    let cfg = config(
        &ws,
        &local.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"hybrid_auto\"\nhybrid_remote_on_budget_exhausted = false\n",
        "[limits]\nmax_tool_calls = 2\n",
    );
    let hub = serve(&ws, &cfg);
    let run_id = start(&hub, json!({"prompt": PROMPT}));
    let run = wait_run_finished(&hub, &run_id, SECS).await.unwrap();
    assert_eq!(run["status"], "no_changes", "{run}");
    assert_eq!(run["stop_reason"], "budget_exhausted", "{run}");
    assert_eq!(run["provider"], "local", "{run}");
    assert!(run["route"].get("switches").is_none(), "{run}");
    assert!(chats(&remote_llm).is_empty());
}

/// Trigger: context overflow — the local server's own error, and the estimate over the
/// context the config gives the local model (then the local model is never called).
#[tokio::test]
async fn a_context_overflow_moves_the_run_to_remote() {
    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let local = FakeLlm::scripted(vec![Reply::error(
        400,
        "This model's maximum context length is 512 tokens. However, your messages resulted in 3000 tokens.",
        Some("context_length_exceeded"),
    )])
    .await;
    let remote_llm = remote().await;
    let cfg = config(
        &ws,
        &local.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"hybrid_auto\"\n",
        "",
    );
    let hub = serve(&ws, &cfg);
    let run_id = start(&hub, json!({"prompt": PROMPT}));
    let run = assert_moved(&hub, &ws, &remote_llm, &run_id, "context_overflow").await;
    assert!(
        run["route"]["switches"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("maximum context length"),
        "{run}"
    );

    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let unused = FakeLlm::scripted(vec![]).await;
    let remote_llm = remote().await;
    let cfg = config(
        &ws,
        &unused.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"hybrid_auto\"\n",
        "",
    );
    let cfg_text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("name = \"small\"\n", "name = \"small\"\ncontext = 64\n");
    std::fs::write(&cfg, cfg_text).unwrap();
    let hub = serve(&ws, &cfg);
    let run_id = start(&hub, json!({"prompt": PROMPT}));
    let run = assert_moved(&hub, &ws, &remote_llm, &run_id, "context_overflow").await;
    let detail = run["route"]["switches"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("over the local model's 64-token context"),
        "{run}"
    );
    assert!(
        run["route"]["reason"]
            .as_str()
            .unwrap()
            .contains("no model fits"),
        "{run}"
    );
    assert!(chats(&unused).is_empty(), "the local model was not called");
}

/// Trigger: a local model call slower than `hybrid_remote_on_timeout_ms`.
#[tokio::test]
async fn a_slow_local_call_moves_the_run_to_remote() {
    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let local = FakeLlm::scripted(vec![Reply::Delay(
        Duration::from_secs(30),
        Box::new(Reply::tool("finish", json!({"description": "late"}))),
    )])
    .await;
    let remote_llm = remote().await;
    let cfg = config(
        &ws,
        &local.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"hybrid_auto\"\nhybrid_remote_on_timeout_ms = 300\n",
        "",
    );
    let hub = serve(&ws, &cfg);
    let run_id = start(&hub, json!({"prompt": PROMPT}));
    let run = assert_moved(&hub, &ws, &remote_llm, &run_id, "timeout").await;
    assert!(
        run["route"]["switches"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("300ms"),
        "{run}"
    );
}

/// Seed 003: request > session > config, for the model, the provider and the mode; and the
/// rules when nobody names a model.
#[tokio::test]
async fn the_request_beats_the_session_beats_the_config() {
    let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
    let finish = |_: &Recorded| Reply::tool("finish", json!({"description": "nothing"}));
    let local = FakeLlm::with(finish).await;
    let remote_llm = FakeLlm::with(finish).await;
    let cfg = config(
        &ws,
        &local.base_url(),
        &remote_llm.base_url(),
        "agent_mode = \"local\"\nprefer = \"cheap\"\n",
        "",
    );
    let hub = serve(&ws, &cfg);
    let run = |body: Value| {
        let hub = &hub;
        async move {
            let id = start(hub, body);
            wait_run_finished(hub, &id, SECS).await.unwrap()
        }
    };

    // Config: mode local, the rules over the local provider's models.
    let r = run(json!({"prompt": "p"})).await;
    assert_eq!(
        (r["provider"].as_str(), r["model"].as_str()),
        (Some("local"), Some("small")),
        "{r}"
    );
    assert_eq!(r["route"]["mode"], "local");
    assert!(
        r["route"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("rules ("),
        "{r}"
    );

    // Session: remote provider, its model, mode remote.
    let s = hub
        .curl()
        .post(
            "/sessions",
            &json!({"provider": "remote", "model": "big", "agent_mode": "remote"}),
        )
        .unwrap();
    assert_eq!(s.status, 200, "{}", s.body);
    let sid = s.body["session_id"].as_str().unwrap().to_string();
    let r = run(json!({"prompt": "p", "session_id": sid})).await;
    assert_eq!(
        (r["provider"].as_str(), r["model"].as_str()),
        (Some("remote"), Some("big")),
        "{r}"
    );
    assert_eq!(r["route"]["mode"], "remote");
    assert_eq!(
        r["route"]["reason"], "model \"big\" asked by the session",
        "{r}"
    );

    // Request: beats the session, setting by setting.
    let r = run(json!({"prompt": "p", "session_id": sid, "provider": "local", "model": "small", "agent_mode": "local"})).await;
    assert_eq!(
        (r["provider"].as_str(), r["model"].as_str()),
        (Some("local"), Some("small")),
        "{r}"
    );
    assert_eq!(r["route"]["mode"], "local");
    assert_eq!(
        r["route"]["reason"], "model \"small\" asked by the request",
        "{r}"
    );

    // Each server got exactly the runs routed to it, with the model chosen.
    let models = |f: &FakeLlm| {
        chats(f)
            .iter()
            .filter_map(|r| r.model())
            .collect::<Vec<_>>()
    };
    assert_eq!(models(&local), ["small", "small"]);
    assert_eq!(models(&remote_llm), ["big"]);

    // Bad settings are refused before anything runs, naming what is wrong.
    let bad = hub
        .curl()
        .post("/runs", &json!({"prompt": "p", "provider": "cloud"}))
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.to_string().contains("cloud"), "{}", bad.body);
    let bad = hub
        .curl()
        .post("/sessions", &json!({"agent_mode": "turbo"}))
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
    let bad = hub
        .curl()
        .post(
            "/runs",
            &json!({"prompt": "p", "agent": "echo {prompt}", "agent_mode": "local"}),
        )
        .unwrap();
    assert_eq!(bad.status, 400, "{}", bad.body);
}

/// The real local model: llama.cpp's `llama-server` serving Gemma 3 270M with a context of
/// 256 tokens, less than the agent's system prompt. Twice: its `/models` reports that context
/// (`meta.n_ctx`) and the hub's estimate moves the run before the first local call; then the
/// config claims a larger context (the config wins), the request goes out, and the real
/// server — which cuts an overlong prompt rather than refusing it — answers from a cut
/// conversation, stopped at the length limit: the hub sees the cut and moves the run.
#[tokio::test]
async fn real_local_model_overflows_and_the_run_moves_to_remote() {
    let test = "real_local_model_overflows_and_the_run_moves_to_remote";
    if !require(
        test,
        "llama-server and the model",
        server_installed(&Kind::LlamaServer),
    ) {
        return;
    }
    let server = ModelServer::start_with_ctx(Kind::LlamaServer, 256);
    for claimed in [None, Some(32768)] {
        let ws = Workspace::new(&[("README.md", b"# demo\n".as_slice())]).unwrap();
        let remote_llm = remote().await;
        let local_models = match claimed {
            Some(c) => format!("[[providers.local.models]]\nname = \"local\"\ncontext = {c}\n"),
            None => String::new(),
        };
        let p = ws.path("hunkgate.toml");
        std::fs::write(
            &p,
            format!(
                "[providers.local]\nbase_url = \"{}\"\nrequest_timeout_secs = 240\nmax_tokens = 64\nmax_retries = 0\n{local_models}\
                 [providers.remote]\nbase_url = \"{}\"\nmodel = \"big\"\n\
                 [[providers.remote.models]]\nname = \"big\"\ncontext = 128000\n\
                 [routing]\nagent_mode = \"hybrid_auto\"\n",
                server.base_url(),
                remote_llm.base_url()
            ),
        )
        .unwrap();
        let hub = serve(&ws, &p.display().to_string());
        let run_id = start(&hub, json!({"prompt": PROMPT}));
        let run = wait_run_finished(&hub, &run_id, Duration::from_secs(300))
            .await
            .unwrap();
        let ctx = || {
            format!(
                "{run}\nhub:\n{}\nmodel server:\n{}",
                hub.log_text(),
                server.log_text()
            )
        };
        assert_eq!(run["status"], "ready", "{}", ctx());
        assert_eq!(run["provider"], "remote", "{}", ctx());
        assert!(!chats(&remote_llm).is_empty());
        // The local model is the one the server lists.
        assert_eq!(run["route"]["provider"], "local", "{}", ctx());
        assert_eq!(run["route"]["model"], "local", "{}", ctx());
        let reason = run["route"]["reason"].as_str().unwrap();
        let sw = &run["route"]["switches"][0];
        assert_eq!(sw["trigger"], "context_overflow", "{}", ctx());
        let detail = sw["detail"].as_str().unwrap();
        match claimed {
            None => {
                // The context the real server reports, read from its /models.
                assert!(reason.contains("local/local (256 ctx)"), "{}", ctx());
                assert!(
                    detail.contains("over the local model's 256-token context"),
                    "{}",
                    ctx()
                );
                assert_eq!(
                    run["usage"]["model_calls"],
                    2,
                    "the remote's two calls only: {}",
                    ctx()
                );
            }
            Some(_) => {
                // The request went out; llama-server does not refuse an overlong prompt, it
                // cuts it to its context and stops at the length limit: the hub sees the cut.
                assert!(reason.contains("local/local (32768 ctx)"), "{}", ctx());
                assert!(
                    detail.starts_with("the server cut the conversation to "),
                    "{}",
                    ctx()
                );
                assert_eq!(
                    run["usage"]["model_calls"],
                    3,
                    "one local call, two remote: {}",
                    ctx()
                );
            }
        }
    }
}

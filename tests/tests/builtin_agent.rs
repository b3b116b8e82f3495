//! The built-in agent end to end: the real hub drives a fake model server that speaks OpenAI's
//! chat-completions wire format (streamed and not), and every tool runs in the real sandbox.
//!
//! Each test checks what the model was sent (tool results, context), what happened in the
//! sandbox and the checkout, the events clients saw, and what the run reports.

use std::time::Duration;

use hunkgate_sandbox::tools::file_hash;
use hunkgate_tests::fake_llm::{Call, FakeLlm, Recorded, Reply};
use hunkgate_tests::{hunk_id, wait_for, wait_run_finished, Hub, Workspace, Ws};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(60);
const LIB: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";

fn serve(ws: &Workspace, fake: &FakeLlm, extra: &[&str]) -> Hub {
    serve_env(ws, fake, extra, &[])
}

fn serve_env(ws: &Workspace, fake: &FakeLlm, extra: &[&str], env: &[(&str, &str)]) -> Hub {
    let url = fake.base_url();
    let mut args = vec!["--provider-url", &url, "--model", "test-model"];
    args.extend_from_slice(extra);
    ws.serve_env(&args, env).unwrap()
}

fn start(hub: &Hub, body: Value) -> String {
    let r = hub.curl().post("/runs", &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["run_id"].as_str().unwrap().to_string()
}

/// The parsed JSON of every tool result the model received in its last request.
fn tool_results(req: &Recorded) -> Vec<Value> {
    req.tool_results()
        .iter()
        .map(|(_, c)| serde_json::from_str(c).unwrap_or(Value::String(c.clone())))
        .collect()
}

/// The first suggestion a finished run published.
fn first_suggestion(hub: &Hub, run: &Value) -> Value {
    let id = run["suggestion_ids"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no suggestion: {run}"));
    hub.curl().get(&format!("/suggestions/{id}")).unwrap().body
}

fn config(ws: &Workspace, toml: &str) -> String {
    let p = ws.path("hunkgate.toml");
    std::fs::write(&p, toml).unwrap();
    p.display().to_string()
}

#[tokio::test]
async fn the_model_edits_the_sandbox_and_the_user_reviews_it() {
    let ws = Workspace::new(&[("src/lib.rs", LIB.as_bytes()), ("README.md", b"# demo\n")]).unwrap();
    let hash = file_hash(LIB.as_bytes());
    let fake = FakeLlm::scripted(vec![
        // Two tools at once: the loop must answer both, in order.
        Reply::tools(vec![
            Call::new("list_files", json!({})),
            Call::new("read_file", json!({"file_path": "src/lib.rs"})),
        ]),
        Reply::tool(
            "edit_file",
            json!({"file_path": "src/lib.rs", "operation": "replace", "start_line": 2,
                   "end_line": 2, "new_text": "    a.wrapping_add(b)", "expected_hash": hash,
                   "rationale": "avoid overflow panics in debug builds"}),
        ),
        Reply::WithUsage {
            prompt_tokens: 1000,
            completion_tokens: 20,
            inner: Box::new(Reply::tool(
                "finish",
                json!({"description": "Use wrapping addition"}),
            )),
        },
    ])
    .await;
    let hub = serve(&ws, &fake, &[]);
    let mut c = hub.ws().await.unwrap();
    let run = start(
        &hub,
        json!({"prompt": "make add overflow-safe", "model": "other-model"}),
    );
    let ready = c
        .event(
            "suggestion.ready",
            |v| v["suggestion"]["run_id"] == run,
            SECS,
        )
        .await
        .unwrap();
    let s = &ready["suggestion"];
    assert_eq!(s["description"], "Use wrapping addition");
    assert_eq!(s["agent"], "builtin:other-model");
    assert_eq!(s["hunk_count"], 1);
    assert!(s["hunks"][0]["diff"]
        .as_str()
        .unwrap()
        .contains("+    a.wrapping_add(b)"));
    assert_eq!(
        s["hunks"][0]["description"], "avoid overflow panics in debug builds",
        "the edit's rationale is the hunk's description"
    );

    // What the model saw: the offered tools, the per-run model, both parallel results.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs
        .iter()
        .all(|r| r.model().as_deref() == Some("other-model")));
    assert!(reqs[0].stream(), "streaming is asked for by default");
    let mut names = reqs[0].tool_names();
    names.sort();
    assert_eq!(
        names,
        [
            "clarify_user",
            "delete_file",
            "edit_file",
            "finish",
            "list_files",
            "move_file",
            "read_file",
            "run_command",
            "search_project",
            "suggestion_status",
            "write_file"
        ]
    );
    let first = tool_results(&reqs[1]);
    assert_eq!(first.len(), 2);
    assert_eq!(
        first[0]["result"]["files"],
        json!(["README.md", "src/lib.rs"])
    );
    assert_eq!(first[1]["result"]["file_hash"], json!(hash));
    assert_eq!(first[1]["result"]["content"], LIB);
    let edit = &tool_results(&reqs[2])[2];
    assert_eq!(edit["ok"], true, "{edit}");

    // The checkout is untouched until the user accepts.
    assert_eq!(ws.read_string("src/lib.rs").unwrap(), LIB);
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready");
    assert_eq!(r["stop_reason"], "finished");
    assert_eq!(r["model"], "other-model");
    let u = &r["usage"];
    assert_eq!(u["model_calls"], 3);
    assert_eq!(u["tool_calls"], 3, "finish is not counted: {u}");
    assert!(u["prompt_tokens"].as_u64().unwrap() >= 1000, "{u}");
    let hunk = hunk_id(s, "src/lib.rs", 0);
    let sid = s["id"].as_str().unwrap();
    let d = c.decide(sid, &hunk, "accept").await.unwrap();
    assert_eq!(d["success"], true, "{d}");
    assert_eq!(
        ws.read_string("src/lib.rs").unwrap(),
        LIB.replace("    a + b", "    a.wrapping_add(b)")
    );

    // The evals read the journal and the feedback log and score the model.
    let evals = hunkgate_tests::hunkgate_bin().with_file_name("hunkgate-evals");
    let out = std::process::Command::new(&evals)
        .arg("--json")
        .arg(hub.state.join("state.jsonl"))
        .arg(hub.state.join("feedback.jsonl"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/test builds it)", evals.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &report["agents"][0];
    assert_eq!(a["agent"], "builtin:other-model", "{report}");
    assert_eq!(a["accepted"], 1);
    assert_eq!(a["runs"]["succeeded"], 1, "{report}");
    assert_eq!(a["runs"]["tool_calls_per_success"], 3.0);
    assert_eq!(a["runs"]["stop_reasons"]["finished"], 1);
}

#[tokio::test]
async fn tool_calls_are_events_in_order_before_the_suggestion() {
    let ws = Workspace::new(&[("a.txt", b"one\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::tool("read_file", json!({"file_path": "a.txt"})),
        Reply::tool(
            "write_file",
            json!({"file_path": "b.txt", "content": "two\n"}),
        ),
        Reply::tool("finish", json!({"description": "add b"})),
    ])
    .await;
    let hub = serve(&ws, &fake, &[]);
    let mut c = hub.ws().await.unwrap();
    let run = start(&hub, json!({"prompt": "add b"}));
    let mut seen = Vec::new();
    loop {
        let ev = c
            .next_matching(
                |v| v["run_id"] == run || v["suggestion"]["run_id"] == run,
                SECS,
            )
            .await
            .unwrap();
        let ty = ev["type"].as_str().unwrap().to_string();
        if ty.starts_with("tool.call") {
            seen.push(format!("{ty} {}", ev["name"].as_str().unwrap()));
            if ty == "tool.call.completed" {
                assert_eq!(ev["ok"], true, "{ev}");
            }
        }
        if ty == "suggestion.ready" {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "tool.call.requested read_file",
            "tool.call.completed read_file",
            "tool.call.requested write_file",
            "tool.call.completed write_file",
            "tool.call.completed finish",
        ]
    );
    let log = hub.log_text();
    assert!(
        log.contains("tool call") && log.contains("write_file"),
        "traced: {log}"
    );
}

#[tokio::test]
async fn malformed_and_invalid_calls_are_fed_back_and_stale_hashes_refused() {
    let ws = Workspace::new(&[("a.txt", b"one\ntwo\n")]).unwrap();
    let hash = file_hash(b"one\ntwo\n");
    let fake = FakeLlm::scripted(vec![
        Reply::tools(vec![Call::raw("edit_file", "{\"file_path\": \"a.txt\", ")]),
        Reply::tool(
            "edit_file",
            json!({"file_path": "a.txt", "operation": "delete", "start_line": 1, "end_line": 1,
                   "new_text": "not allowed", "expected_hash": hash}),
        ),
        Reply::tool("no_such_tool", json!({})),
        Reply::tool(
            "edit_file",
            json!({"file_path": "a.txt", "operation": "replace", "start_line": 1, "end_line": 1,
                   "new_text": "ONE", "expected_hash": file_hash(b"stale\n")}),
        ),
        Reply::tool(
            "edit_file",
            json!({"file_path": "../outside.txt", "operation": "replace", "start_line": 1,
                   "end_line": 1, "new_text": "x", "expected_hash": hash}),
        ),
        Reply::tool(
            "edit_file",
            json!({"file_path": "a.txt", "operation": "replace", "start_line": 1, "end_line": 1,
                   "new_text": "ONE", "expected_hash": hash}),
        ),
        Reply::tool("finish", json!({"description": "shout one"})),
    ])
    .await;
    let hub = serve(&ws, &fake, &[]);
    let run = start(&hub, json!({"prompt": "shout"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    let last = fake.requests().pop().unwrap();
    let results = tool_results(&last);
    let errors: Vec<String> = results
        .iter()
        .map(|v| v["error"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        errors[0].contains("not valid JSON") && errors[0].contains("4 more allowed"),
        "{errors:?}"
    );
    assert!(errors[1].contains("no new_text"), "{errors:?}");
    assert!(errors[2].contains("no tool \"no_such_tool\""), "{errors:?}");
    assert!(
        errors[3].contains("read_file it again"),
        "a stale hash is a conflict: {errors:?}"
    );
    assert!(errors[4].contains(".."), "{errors:?}");
    assert_eq!(results[5]["ok"], true, "{results:?}");
    assert_eq!(r["usage"]["schema_failures"], 3);
    assert!(!ws.path("outside.txt").exists() && !ws.dir.path().join("outside.txt").exists());
    let s = first_suggestion(&hub, &r);
    assert!(
        s["hunks"][0]["diff"].as_str().unwrap().contains("+ONE"),
        "{}",
        s
    );
}

#[tokio::test]
async fn exhausted_schema_retries_end_the_run_but_keep_the_edits() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let mut script = vec![Reply::tool(
        "write_file",
        json!({"file_path": "new.txt", "content": "kept\n"}),
    )];
    for _ in 0..6 {
        script.push(Reply::tools(vec![Call::raw("edit_file", "not json")]));
    }
    script.push(Reply::tool(
        "finish",
        json!({"description": "never reached"}),
    ));
    let fake = FakeLlm::scripted(script).await;
    let hub = serve(&ws, &fake, &[]);
    let run = start(&hub, json!({"prompt": "do things"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["stop_reason"], "schema_retries_exhausted", "{r}");
    assert_eq!(
        r["status"], "ready",
        "the edits made so far are a suggestion: {r}"
    );
    assert_eq!(
        fake.requests().len(),
        7,
        "five retries after the first invalid call, then stop"
    );
    let s = first_suggestion(&hub, &r);
    assert_eq!(s["files"], json!(["new.txt"]));
    assert_eq!(
        s["description"], "do things",
        "no finish: the prompt describes it"
    );
}

#[tokio::test]
async fn the_tool_budget_ends_the_run_with_a_clear_status() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::with(|req: &Recorded| {
        if req.tool_results().is_empty() {
            Reply::tool(
                "write_file",
                json!({"file_path": "a.txt", "content": "b\n", "expected_hash": file_hash(b"a\n")}),
            )
        } else {
            Reply::tool("list_files", json!({}))
        }
    })
    .await;
    let hub = serve(&ws, &fake, &["--max-tool-calls", "3"]);
    let mut c = hub.ws().await.unwrap();
    let run = start(&hub, json!({"prompt": "loop forever"}));
    let status = c
        .event(
            "suggestion.status",
            |v| {
                v["run_id"] == run
                    && v["message"]
                        .as_str()
                        .unwrap_or("")
                        .contains("Tool budget exhausted (3 calls)")
            },
            SECS,
        )
        .await
        .unwrap();
    assert!(
        status["message"].as_str().unwrap().contains("publishing"),
        "{status}"
    );
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["stop_reason"], "budget_exhausted");
    assert_eq!(r["status"], "ready");
    assert_eq!(r["usage"]["tool_calls"], 3);
    assert_eq!(
        fake.requests().len(),
        4,
        "the fourth call was refused, not run"
    );
    let refused = tool_results(&fake.requests()[3]);
    assert_eq!(
        refused.len(),
        3,
        "the refused call was never answered to the model"
    );
    let s = first_suggestion(&hub, &r);
    assert!(
        s["hunks"][0]["diff"].as_str().unwrap().contains("+b"),
        "{}",
        s
    );
    assert_eq!(ws.read_string("a.txt").unwrap(), "a\n");
}

#[tokio::test]
async fn clarifications_wait_for_the_user_and_skip_sends_no_user_answer() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::tool("clarify_user", json!({"question": "Tabs or spaces?"})),
        Reply::tool(
            "clarify_user",
            json!({"question": "Unix or Windows line endings?"}),
        ),
        Reply::tool("finish", json!({"description": "nothing to do"})),
    ])
    .await;
    let hub = serve(&ws, &fake, &[]);
    let mut c = hub.ws().await.unwrap();
    let run = start(&hub, json!({"prompt": "format things"}));
    let q = c
        .event("clarification.requested", |v| v["run_id"] == run, SECS)
        .await
        .unwrap();
    assert_eq!(q["question"], "Tabs or spaces?");
    let view = hub.curl().get(&format!("/runs/{run}")).unwrap().body;
    assert_eq!(view["status"], "waiting_for_user");
    assert_eq!(view["question"]["question"], "Tabs or spaces?");
    // Nothing happens while the question is open: the model is not asked again.
    assert_eq!(fake.requests().len(), 1);
    // A wrong question id and an empty answer are refused and change nothing.
    let bad = hub
        .curl()
        .post(
            &format!("/runs/{run}/clarify"),
            &json!({"question_id": "q_nope", "answer": "x"}),
        )
        .unwrap();
    assert_eq!(bad.status, 409, "{}", bad.body);
    let empty = hub
        .curl()
        .post(&format!("/runs/{run}/clarify"), &json!({"answer": " "}))
        .unwrap();
    assert_eq!(empty.status, 400, "{}", empty.body);
    let ok = hub
        .curl()
        .post(
            &format!("/runs/{run}/clarify"),
            &json!({"question_id": q["question_id"], "answer": "tabs"}),
        )
        .unwrap();
    assert_eq!(ok.status, 200, "{}", ok.body);
    // From the moment the answer is accepted, the run no longer waits on that question.
    let now = hub.curl().get(&format!("/runs/{run}")).unwrap().body;
    assert_ne!(now["question"]["question_id"], q["question_id"], "{now}");
    let got = c
        .event("clarification.received", |v| v["run_id"] == run, SECS)
        .await
        .unwrap();
    assert_eq!(got["answer"], "tabs");
    assert_eq!(got["skipped"], false);

    c.event(
        "clarification.requested",
        |v| v["run_id"] == run && v["question"] == "Unix or Windows line endings?",
        SECS,
    )
    .await
    .unwrap();
    let skip = c
        .call(json!({"type": "clarify", "runId": run, "skip": true}))
        .await
        .unwrap();
    assert_eq!(skip["success"], true, "{skip}");
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "no_changes", "{r}");
    assert!(r.get("question").is_none(), "{r}");
    let answers: Vec<Value> = tool_results(&fake.requests()[2]);
    assert_eq!(answers[0]["result"]["answer"], "tabs");
    assert_eq!(answers[1]["result"]["answer"], "no_user_answer");
    // No question is pending now.
    let late = hub
        .curl()
        .post(&format!("/runs/{run}/clarify"), &json!({"answer": "late"}))
        .unwrap();
    assert_eq!(late.status, 409);
    let unknown = hub
        .curl()
        .post("/runs/nope/clarify", &json!({"answer": "x"}))
        .unwrap();
    assert_eq!(unknown.status, 404);
    let extra = hub
        .curl()
        .post(
            &format!("/runs/{run}/clarify"),
            &json!({"answer": "x", "extra": 1}),
        )
        .unwrap();
    assert_eq!(extra.status, 400);
}

#[tokio::test]
async fn transient_failures_are_retried_and_non_streaming_servers_work() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::error(500, "overloaded", None),
        Reply::Status {
            status: 429,
            body: "{\"error\":{\"message\":\"slow down\"}}".into(),
            retry_after: Some(0),
        },
        Reply::tool(
            "write_file",
            json!({"file_path": "b.txt", "content": "b\n"}),
        ),
        Reply::text("Added b.txt.\nIt holds one line."),
    ])
    .await;
    let cfg = config(
        &ws,
        "[provider]\nstream = false\nretry_base_ms = 10\nmax_retries = 3\n",
    );
    let hub = serve(&ws, &fake, &["--config", &cfg]);
    let run = start(&hub, json!({"prompt": "add b"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    assert_eq!(r["usage"]["retries"], 2, "{r}");
    assert_eq!(
        r["stop_reason"], "answered",
        "the model stopped without calling finish"
    );
    assert!(fake.requests().iter().all(|q| !q.stream()));
    let s = first_suggestion(&hub, &r);
    assert_eq!(
        s["description"], "Added b.txt.",
        "the answer's first line describes it"
    );
}

#[tokio::test]
async fn provider_failures_end_the_run_with_errors_that_name_the_fix() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::error(500, "still down", None),
        Reply::error(500, "still down", None),
        Reply::error(401, "Incorrect API key provided", Some("invalid_api_key")),
        Reply::error(404, "model \"nope\" not found, try pulling it first", None),
        Reply::error(
            400,
            "This model's maximum context length is 8192 tokens",
            Some("context_length_exceeded"),
        ),
        Reply::Delay(Duration::from_secs(5), Box::new(Reply::text("too late"))),
        Reply::Delay(Duration::from_secs(5), Box::new(Reply::text("too late"))),
    ])
    .await;
    let cfg = config(
        &ws,
        "[provider]\nretry_base_ms = 10\nmax_retries = 1\nrequest_timeout_secs = 1\n",
    );
    let hub = serve_env(
        &ws,
        &fake,
        &["--config", &cfg],
        &[("HUNKGATE_API_KEY", "sk-e2e-key")],
    );
    let mut c = hub.ws().await.unwrap();
    let expect = |run: String, want: &'static [&'static str]| {
        let hub = &hub;
        async move {
            let r = wait_run_finished(hub, &run, SECS).await.unwrap();
            assert_eq!(r["status"], "failed", "{r}");
            assert_eq!(r["stop_reason"], "provider_error", "{r}");
            let e = r["error"].as_str().unwrap();
            for w in want {
                assert!(e.contains(w), "{w:?} not in {e:?}");
            }
            assert!(!e.contains("sk-e2e-key"), "{e}");
            r
        }
    };
    let r1 = start(&hub, json!({"prompt": "p"}));
    let ev = c
        .event("suggestion.error", |v| v["run_id"] == r1, SECS)
        .await
        .unwrap();
    assert!(
        ev["message"]
            .as_str()
            .unwrap()
            .contains("after 2 attempt(s)"),
        "{ev}"
    );
    expect(r1, &["HTTP 500", "still down"]).await;
    expect(
        start(&hub, json!({"prompt": "p"})),
        &["refused the API key", "HUNKGATE_API_KEY"],
    )
    .await;
    expect(
        start(&hub, json!({"prompt": "p", "model": "nope"})),
        &["no model \"nope\"", "ollama pull"],
    )
    .await;
    expect(start(&hub, json!({"prompt": "p"})), &["context window"]).await;
    expect(
        start(&hub, json!({"prompt": "p"})),
        &["did not answer within 1s"],
    )
    .await;
    // The timed-out request was retried once: 1 + 1 + 1 + 1 + 1 + 2 requests.
    assert!(fake.requests().len() >= 6);
}

#[tokio::test]
async fn the_api_key_reaches_the_provider_and_nothing_else() {
    const KEY: &str = "sk-hunkgate-e2e-0123456789";
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::tool(
            "run_command",
            json!({"command": "env; echo marker-$((6*7))"}),
        ),
        Reply::tool(
            "run_command",
            json!({"command": "tr '\\0' '\\n' < /proc/self/environ"}),
        ),
        Reply::tool(
            "write_file",
            json!({"file_path": "env.txt", "content": "x\n"}),
        ),
        Reply::tool("finish", json!({"description": "looked around"})),
        // (Under --isolation none the agent is the hub's own user and could read the hub's
        // /proc/<pid>/environ; the isolation suite checks that the sandbox user cannot.)
    ])
    .await;
    let hub = serve_env(
        &ws,
        &fake,
        &[],
        &[("HUNKGATE_API_KEY", KEY), ("HUNKGATE_LOG", "debug")],
    );
    let run = start(&hub, json!({"prompt": "inspect"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    let reqs = fake.requests();
    // Positive controls: the key is sent to the provider, and the commands really ran.
    assert!(reqs
        .iter()
        .all(|q| q.authorization().as_deref() == Some(&format!("Bearer {KEY}"))));
    let outputs = tool_results(&reqs[2]);
    let env_out = outputs[0]["result"]["output"].as_str().unwrap();
    assert!(
        env_out.contains("marker-42") && env_out.contains("PATH="),
        "{env_out}"
    );
    for q in &reqs {
        assert!(!q.raw.contains(KEY), "the key reached the model's context");
    }
    assert!(!hub.log_text().contains(KEY), "the key is in the hub's log");
    for f in ["state.jsonl", "feedback.jsonl"] {
        let text = std::fs::read_to_string(hub.state.join(f)).unwrap_or_default();
        assert!(!text.contains(KEY), "the key is in {f}");
    }
    // And the hub refuses to pass the key variable on to agents.
    let refused = ws.serve_env(
        &[
            "--provider-url",
            &fake.base_url(),
            "--agent-env",
            "HUNKGATE_API_KEY",
            "--port",
            "0",
        ],
        &[("HUNKGATE_API_KEY", KEY)],
    );
    assert!(refused.is_err());
}

#[tokio::test]
async fn sessions_carry_history_context_and_the_users_decisions_into_the_next_run() {
    let ws = Workspace::new(&[
        ("a.txt", b"one\ntwo\n"),
        ("notes.md", b"Use British spelling.\n"),
    ])
    .unwrap();
    let fake = FakeLlm::with(|req: &Recorded| {
        let n = req.tool_results().len();
        match n {
            0 => Reply::tool("write_file", json!({"file_path": "a.txt", "content": "ONE\ntwo\n", "expected_hash": file_hash(b"one\ntwo\n"), })),
            _ => Reply::tool("finish", json!({"description": "capitalise", "hunk_descriptions": [{"file": "a.txt", "description": "shout"}]})),
        }
    })
    .await;
    let hub = serve(&ws, &fake, &[]);
    let curl = hub.curl();
    let s = curl
        .post(
            "/sessions",
            &json!({"title": "tidy", "context": [
            {"kind": "note", "content": "Never touch tests."},
            {"kind": "file", "file_path": "notes.md"}]}),
        )
        .unwrap();
    assert_eq!(s.status, 200, "{}", s.body);
    let sid = s.body["session_id"].as_str().unwrap().to_string();
    let bad = curl
        .post(
            "/sessions",
            &json!({"context": [{"kind": "file", "file_path": "../x"}]}),
        )
        .unwrap();
    assert_eq!(bad.status, 400);

    let r1 = start(
        &hub,
        json!({"prompt": "capitalise the first line", "session_id": sid}),
    );
    let v1 = wait_run_finished(&hub, &r1, SECS).await.unwrap();
    assert_eq!(v1["session_id"], json!(sid));
    let sug = first_suggestion(&hub, &v1);
    assert_eq!(sug["hunks"][0]["description"], "shout");
    let d = curl
        .post("/feedback", &json!({"suggestion_id": sug["id"], "hunk_id": hunk_id(&sug, "a.txt", 0), "action": "reject", "comment": "keep it lower case"}))
        .unwrap();
    assert_eq!(d.status, 200, "{}", d.body);

    let before = fake.requests().len();
    let r2 = curl
        .post(
            &format!("/sessions/{sid}/runs"),
            &json!({"prompt": "try again"}),
        )
        .unwrap();
    assert_eq!(r2.status, 200, "{}", r2.body);
    let r2 = r2.body["run_id"].as_str().unwrap().to_string();
    wait_run_finished(&hub, &r2, SECS).await.unwrap();
    let first_of_run2 = &fake.requests()[before];
    let context: String = first_of_run2
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
        .join("\n");
    for want in [
        "Never touch tests.",
        "Use British spelling.",
        "capitalise the first line",
        "rejected",
        "keep it lower case",
        "-one",
    ] {
        assert!(
            context.contains(want),
            "{want:?} missing from the second run's context:\n{context}"
        );
    }
    // Positive control: the first run had none of the earlier-run context.
    let first_of_run1: String = fake.requests()[0].raw.clone();
    assert!(!first_of_run1.contains("keep it lower case"));

    let view = curl.get(&format!("/sessions/{}", &sid[..12])).unwrap().body;
    assert_eq!(view["runs"].as_array().unwrap().len(), 2, "{view}");
    let total = view["history_count"].as_u64().unwrap() as usize;
    // Pages of 3 cover the whole history once, in order.
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let p = curl
            .get(&format!("/sessions/{sid}/history?cursor={cursor}&limit=3"))
            .unwrap()
            .body;
        let entries = p["entries"].as_array().unwrap();
        assert!(entries.len() <= 3);
        seen.extend(
            entries
                .iter()
                .map(|e| e["index"].as_u64().unwrap() as usize),
        );
        match p["next_cursor"].as_u64() {
            Some(n) => cursor = n as usize,
            None => break,
        }
    }
    assert_eq!(seen, (0..total).collect::<Vec<_>>());
    let tools = curl
        .get(&format!("/sessions/{sid}/history?kind=tools&limit=500"))
        .unwrap()
        .body;
    assert!(tools["entries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["kind"] == "tool"));
    assert!(tools["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["tool"] == "write_file"));
    let bad = curl
        .get(&format!("/sessions/{sid}/history?kind=bogus"))
        .unwrap();
    assert_eq!(bad.status, 400);

    // Sessions and history survive a restart.
    let mut hub = hub;
    hub.stop().unwrap();
    let hub = serve(&ws, &fake, &[]);
    let again = hub.curl().get(&format!("/sessions/{sid}")).unwrap().body;
    assert_eq!(again["history_count"].as_u64().unwrap() as usize, total);
    // An archived session takes no more runs.
    assert_eq!(
        hub.curl()
            .delete(&format!("/sessions/{sid}"))
            .unwrap()
            .status,
        200
    );
    let r = hub
        .curl()
        .post(&format!("/sessions/{sid}/runs"), &json!({"prompt": "more"}))
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
}

#[tokio::test]
async fn cancel_stops_the_loop_and_run_command_is_bounded() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::tool(
            "run_command",
            json!({"command": "yes hunkgate | head -c 200000; echo done"}),
        ),
        Reply::tool(
            "run_command",
            json!({"command": "sleep 30", "timeout_secs": 1}),
        ),
        Reply::tool("run_command", json!({"command": "sleep 60"})),
    ])
    .await;
    let hub = serve(&ws, &fake, &[]);
    let mut c: Ws = hub.ws().await.unwrap();
    let run = start(&hub, json!({"prompt": "busy"}));
    // The third command is running: cancel the run.
    wait_for("the third model call", SECS, || fake.requests().len() >= 3)
        .await
        .unwrap();
    c.event(
        "tool.call.requested",
        |v| v["run_id"] == run && v["summary"].as_str().unwrap_or("").contains("sleep 60"),
        SECS,
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let cancel = hub
        .curl()
        .post(&format!("/runs/{run}/cancel"), &json!({}))
        .unwrap();
    assert_eq!(cancel.status, 200);
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "cancelled", "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the sleep was killed"
    );
    let results = tool_results(&fake.requests()[2]);
    let big = results[0]["result"]["output"].as_str().unwrap();
    assert!(
        big.len() < 20 * 1024 && big.contains("bytes cut") && big.trim_end().ends_with("done"),
        "{}",
        big.len()
    );
    assert!(
        results[1]["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 1s"),
        "{results:?}"
    );
}

#[tokio::test]
async fn concurrent_sessions_keep_their_sandboxes_and_histories_apart() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    // Each run writes a file named after its prompt, after a pause that makes the two overlap.
    let fake = FakeLlm::with(|req: &Recorded| {
        let prompt = req
            .messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str().map(str::to_string))
            .unwrap_or_default();
        let who = if prompt.contains("red") {
            "red"
        } else {
            "blue"
        };
        match req.tool_results().len() {
            0 => Reply::Delay(
                Duration::from_millis(300),
                Box::new(Reply::tool(
                    "write_file",
                    json!({"file_path": format!("{who}.txt"), "content": format!("{who}\n")}),
                )),
            ),
            _ => Reply::tool("finish", json!({"description": who})),
        }
    })
    .await;
    let hub = serve(&ws, &fake, &[]);
    let red = start(&hub, json!({"prompt": "paint it red"}));
    let blue = start(&hub, json!({"prompt": "paint it blue"}));
    let (r, b) = (
        wait_run_finished(&hub, &red, SECS).await.unwrap(),
        wait_run_finished(&hub, &blue, SECS).await.unwrap(),
    );
    assert_ne!(
        r["session_id"], b["session_id"],
        "each run started its own session"
    );
    for (run, who) in [(&r, "red"), (&b, "blue")] {
        assert_eq!(run["status"], "ready", "{run}");
        let s = first_suggestion(&hub, run);
        assert_eq!(
            s["files"],
            json!([format!("{who}.txt")]),
            "only its own sandbox's change: {s}"
        );
        let h = hub
            .curl()
            .get(&format!(
                "/sessions/{}/history?kind=messages",
                run["session_id"].as_str().unwrap()
            ))
            .unwrap()
            .body;
        let text = h["entries"].to_string();
        assert!(text.contains(&format!("paint it {who}")), "{text}");
        let other = if who == "red" { "blue" } else { "red" };
        assert!(!text.contains(&format!("paint it {other}")), "{text}");
    }
}

/// What llama-cpp-python's server does (seen against the real one; `real_models.rs` drives it):
/// it closes the stream at once when asked to stream an answer that may call tools, refuses an
/// assistant message whose `content` is `null` with an HTTP 500, and answers tool calls twice —
/// as `tool_calls` and as a legacy `function_call` whose name ends in a colon.
fn llama_cpp_python_like(req: &Recorded) -> Reply {
    let has_tools = req.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    if req.stream() && has_tools {
        return Reply::ClosedStream;
    }
    let messages = req.messages();
    if messages
        .iter()
        .any(|m| m["role"] == "assistant" && m["content"].is_null())
    {
        return Reply::error(
            500,
            "1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n  Input should be a valid string",
            None,
        );
    }
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return Reply::text("Wrote b.txt.");
    }
    let args = json!({"file_path": "b.txt", "content": "b\n"}).to_string();
    Reply::Raw(
        json!({
            "id": "cmpl-1", "object": "chat.completion", "model": "local",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "function_call": {"name": "write_file:", "arguments": args},
                "tool_calls": [{"id": "call__0_write_file_cmpl-1", "type": "function",
                    "function": {"name": "write_file", "arguments": args}}]
            }}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        })
        .to_string(),
    )
}

#[tokio::test]
async fn a_server_that_will_not_stream_tool_calls_is_asked_again_unstreamed_and_remembered() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::with(llama_cpp_python_like).await;
    let hub = serve(&ws, &fake, &[]);
    let run = start(&hub, json!({"prompt": "add b"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    let s = first_suggestion(&hub, &r);
    assert_eq!(s["files"], json!(["b.txt"]), "{s}");
    let asked: Vec<bool> = fake.requests().iter().map(|q| q.stream()).collect();
    // Positive control: the first request was streamed (the default), the server closed it,
    // and the same call went again unstreamed; the tool call was executed once, not twice.
    assert_eq!(asked, [true, false, false], "{asked:?}");
    let last = fake.requests().pop().unwrap();
    let assistant = last
        .messages()
        .into_iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["content"], "", "never null: {assistant}");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "write_file");
    assert_eq!(
        tool_results(&last).len(),
        1,
        "one call, not the legacy twin"
    );
    // Remembered for the provider: the next run does not try streaming again.
    let before = fake.requests().len();
    let run = start(&hub, json!({"prompt": "add b again"}));
    wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert!(fake.requests()[before..].iter().all(|q| !q.stream()));
}

#[tokio::test]
async fn a_request_the_server_rejects_as_invalid_is_not_retried() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::with(|_| {
        Reply::error(
            500,
            "1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n  Input should be a valid string",
            None,
        )
    })
    .await;
    let cfg = config(&ws, "[provider]\nretry_base_ms = 10\nmax_retries = 3\n");
    let hub = serve(&ws, &fake, &["--config", &cfg]);
    let run = start(&hub, json!({"prompt": "p"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "failed", "{r}");
    let e = r["error"].as_str().unwrap();
    assert!(e.contains("rejected the request as invalid"), "{e}");
    assert_eq!(fake.requests().len(), 1, "a validation error is final");
    // Positive control: a plain 500 is still retried (transient_failures_… above).
}

/// With checkers configured the model is offered `check` (and told to call it before finish):
/// it runs them in the sandbox on the agent's work as it is, and returns the diagnostics on the
/// lines the agent wrote — here ruff's `== None` — not those of lines it left alone (the
/// unused import above them). Without checkers it is not offered.
#[tokio::test]
async fn the_check_tool_returns_the_diagnostics_on_the_agents_lines() {
    let (ws, _agent, path) = crate::checks::python_repo();
    let base = ws.read("app.py").unwrap();
    let edited = String::from_utf8(base.clone())
        .unwrap()
        .replace("    return y\n", "    return y == None\n");
    let fake = FakeLlm::with(move |req: &Recorded| match req.tool_results().len() {
        0 => Reply::tool(
            "write_file",
            json!({"file_path": "app.py", "content": edited, "expected_hash": file_hash(&base)}),
        ),
        1 => Reply::tool("check", json!({})),
        _ => Reply::tool("finish", json!({"description": "compare with None"})),
    })
    .await;
    let hub = serve_env(&ws, &fake, &[], &[("PATH", &path)]);
    let run = start(&hub, json!({"prompt": "compare y with None"}));
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    let first = &fake.requests()[0];
    let names = first.tool_names();
    assert_eq!(&names[names.len() - 2..], ["check", "finish"], "{names:?}");
    assert!(first.messages()[0]["content"]
        .as_str()
        .unwrap()
        .contains("call check"));
    let results = tool_results(&fake.requests()[2]);
    assert_eq!(
        results[1]["result"],
        json!({
            "diagnostics": [{
                "checker": "ruff", "severity": "warning", "code": "E711", "file": "app.py",
                "line": 23, "column": 17,
                "message": "Comparison to `None` should be `cond is None`",
            }],
            "more": 0,
            "notes": [],
        }),
        "{results:?}"
    );

    // The control: without checkers, no `check` among the tools.
    let plain = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake =
        FakeLlm::with(|_: &Recorded| Reply::tool("finish", json!({"description": "x"}))).await;
    let hub = serve(&plain, &fake, &[]);
    let run = start(&hub, json!({"prompt": "nothing"}));
    wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert!(!fake.requests()[0]
        .tool_names()
        .contains(&"check".to_string()));
}

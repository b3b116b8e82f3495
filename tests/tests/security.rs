//! Security: bearer tokens on REST and the WebSocket upgrade, the Host and Origin checks, no
//! CORS headers, the agent token's narrow scope, the agent's scrubbed environment, private state
//! files, and user diffs that name another file. Every refusal has its positive control.

use std::time::Duration;

use hunkgate_tests::curl::Curl;
use hunkgate_tests::{hunk_id, mode_of, run_agent, wait_run_finished, Hub, Workspace, Ws};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite;

const SECS: Duration = Duration::from_secs(30);

/// The HTTP status a WebSocket upgrade was refused with, or None when it connected.
async fn ws_refusal(hub: &Hub, token: Option<&str>, headers: &[(&str, &str)]) -> Option<u16> {
    match Ws::connect(&hub.url, token, headers).await {
        Ok(_) => None,
        Err(e) => match e.downcast_ref::<tungstenite::Error>() {
            Some(tungstenite::Error::Http(resp)) => Some(resp.status().as_u16()),
            _ => panic!("upgrade failed without an HTTP status: {e:#}"),
        },
    }
}

fn anon(hub: &Hub) -> Curl {
    Curl {
        base: hub.url.clone(),
        token: None,
    }
}

fn with_token(hub: &Hub, token: &str) -> Curl {
    Curl {
        base: hub.url.clone(),
        token: Some(token.to_string()),
    }
}

#[tokio::test]
async fn tokens_are_required_on_rest_and_on_the_websocket_upgrade() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let wrong = "0".repeat(64);

    for (name, curl) in [("none", anon(&hub)), ("wrong", with_token(&hub, &wrong))] {
        let r = curl.get("/suggestions").unwrap();
        assert_eq!(r.status, 401, "{name}: {}", r.body);
        assert_eq!(r.body["code"], "unauthorized");
        let r = curl
            .post(
                "/feedback",
                &json!({"suggestion_id": "x", "hunk_id": "y", "action": "accept"}),
            )
            .unwrap();
        assert_eq!(r.status, 401, "{name}");
        let r = curl
            .post("/runs", &json!({"prompt": "p", "agent": "true"}))
            .unwrap();
        assert_eq!(r.status, 401, "{name}");
    }
    // A token with a different length, and a non-Bearer scheme.
    let r = with_token(&hub, "short").get("/runs").unwrap();
    assert_eq!(r.status, 401);
    let r = anon(&hub)
        .request(
            "GET",
            "/suggestions",
            None,
            &[("Authorization", &format!("Basic {}", hub.token))],
        )
        .unwrap();
    assert_eq!(r.status, 401);

    // Positive controls.
    let r = hub.curl().get("/suggestions").unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["suggestions"], json!([]));
    let r = anon(&hub).get("/health").unwrap();
    assert_eq!(r.status, 200, "/health needs no token");
    assert_eq!(r.body["healthy"], true);

    // The WebSocket upgrade.
    assert_eq!(ws_refusal(&hub, None, &[]).await, Some(401));
    assert_eq!(ws_refusal(&hub, Some(&wrong), &[]).await, Some(401));
    assert_eq!(ws_refusal(&hub, Some(&hub.token), &[]).await, None);
}

#[tokio::test]
async fn a_foreign_host_header_is_refused() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let port = hub.port;
    let evil = format!("evil.example:{port}");
    for path in ["/suggestions", "/health"] {
        let r = hub
            .curl()
            .request("GET", path, None, &[("Host", &evil)])
            .unwrap();
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert_eq!(r.body["code"], "forbidden");
    }
    // Same name, wrong port; a name that merely starts like ours.
    for host in [
        "127.0.0.1:1".to_string(),
        format!("localhost.evil.example:{port}"),
    ] {
        let r = hub
            .curl()
            .request("GET", "/suggestions", None, &[("Host", &host)])
            .unwrap();
        assert_eq!(r.status, 403, "{host}");
    }
    assert_eq!(
        ws_refusal(&hub, Some(&hub.token), &[("Host", &evil)]).await,
        Some(403)
    );
    // Positive controls: the names of this server.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = hub
            .curl()
            .request("GET", "/suggestions", None, &[("Host", &host)])
            .unwrap();
        assert_eq!(r.status, 200, "{host}: {}", r.body);
    }
    let localhost = format!("localhost:{port}");
    assert_eq!(
        ws_refusal(&hub, Some(&hub.token), &[("Host", &localhost)]).await,
        None
    );
}

#[tokio::test]
async fn origins_are_refused_unless_allowed_and_no_cors_headers_are_sent() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let no_cors = |headers: &[(String, String)], what: &str| {
        assert!(
            !headers
                .iter()
                .any(|(k, _)| k.starts_with("access-control-")),
            "{what}: {headers:?}"
        );
    };
    let evil = [("Origin", "https://evil.example")];
    let r = hub
        .curl()
        .request("GET", "/suggestions", None, &evil)
        .unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    let r = anon(&hub).request("GET", "/health", None, &evil).unwrap();
    assert_eq!(r.status, 403);
    assert_eq!(ws_refusal(&hub, Some(&hub.token), &evil).await, Some(403));
    let (status, headers) = hub
        .curl()
        .headers(
            "OPTIONS",
            "/feedback",
            &[
                ("Origin", "https://evil.example"),
                ("Access-Control-Request-Method", "POST"),
            ],
        )
        .unwrap();
    assert_eq!(status, 403);
    no_cors(&headers, "preflight");
    let (status, headers) = hub.curl().headers("GET", "/suggestions", &[]).unwrap();
    assert_eq!(status, 200, "positive control");
    no_cors(&headers, "plain GET");

    // Allowed explicitly: that origin (only) gets in, still without CORS headers.
    hub.stop().unwrap();
    let hub = ws.serve(&["--allow-origin", "https://ok.example"]).unwrap();
    let ok = [("Origin", "https://ok.example")];
    let (status, headers) = hub.curl().headers("GET", "/suggestions", &ok).unwrap();
    assert_eq!(status, 200);
    no_cors(&headers, "allowed origin");
    let (_, headers) = hub
        .curl()
        .headers(
            "OPTIONS",
            "/feedback",
            &[
                ("Origin", "https://ok.example"),
                ("Access-Control-Request-Method", "POST"),
            ],
        )
        .unwrap();
    no_cors(&headers, "allowed preflight");
    assert_eq!(ws_refusal(&hub, Some(&hub.token), &ok).await, None);
    let r = hub
        .curl()
        .request("GET", "/suggestions", None, &evil)
        .unwrap();
    assert_eq!(r.status, 403, "other origins stay refused");
    assert_eq!(ws_refusal(&hub, Some(&hub.token), &evil).await, Some(403));
    let r = hub
        .curl()
        .request(
            "GET",
            "/suggestions",
            None,
            &[("Origin", "https://ok.example.evil")],
        )
        .unwrap();
    assert_eq!(r.status, 403, "exact match only");
}

#[tokio::test]
async fn the_agent_token_only_reaches_the_agent_endpoints_of_its_run() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let results = ws.path("agent-results");
    let token_file = ws.path("agent-token");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                r#"out={out}
code() {{ curl -s -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" "$@"; }}
json='Content-Type: application/json'
echo "suggestions $(code "$HUNKGATE_URL/suggestions")" >> $out
echo "feedback $(code -X POST -H "$json" --data '{{"suggestion_id":"x","hunk_id":"y","action":"accept"}}' "$HUNKGATE_URL/feedback")" >> $out
echo "runs $(code -X POST -H "$json" --data '{{"prompt":"again","agent":"true"}}' "$HUNKGATE_URL/runs")" >> $out
echo "events $(code "$HUNKGATE_URL/events?since=0")" >> $out
echo "ws $(code -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' "$HUNKGATE_URL/ws")" >> $out
echo "status $(code -X POST -H "$json" --data '{{"message":"hello from the agent"}}' "$HUNKGATE_URL/agent/status")" >> $out
printf '%s' "$HUNKGATE_AGENT_TOKEN" > {token}
echo changed > a.txt"#,
                out = results.display(),
                token = token_file.display(),
            ),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "probe").await.unwrap();
    let got = std::fs::read_to_string(&results).unwrap();
    assert_eq!(
        got,
        "suggestions 403\nfeedback 403\nruns 403\nevents 403\nws 403\nstatus 200\n"
    );
    let ev = c
        .event(
            "suggestion.status",
            |v| v["message"] == "hello from the agent",
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(ev["run_id"], s["run_id"]);
    assert_eq!(ev["status"], "working");
    // Nothing the agent tried got through.
    assert_eq!(ws.feedback_log().unwrap().len(), 0);
    let runs = hub.curl().get("/runs").unwrap().body;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");

    // The reviewer token is refused on the agent's endpoints ...
    let publish = json!({"description": "sneaky"});
    let r = hub.curl().post("/agent/publish", &publish).unwrap();
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "forbidden");
    let r = hub
        .curl()
        .post("/agent/status", &json!({"message": "x"}))
        .unwrap();
    assert_eq!(r.status, 403);
    // ... and the agent's token dies with its run.
    let agent_token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(agent_token.len(), 64);
    assert_ne!(agent_token, hub.token);
    let r = with_token(&hub, &agent_token)
        .post("/agent/status", &json!({"message": "late"}))
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.body);
    let r = with_token(&hub, &agent_token)
        .post("/agent/publish", &publish)
        .unwrap();
    assert_eq!(r.status, 401);
    let all = hub.curl().get("/suggestions?all=true").unwrap().body;
    assert_eq!(all["suggestions"].as_array().unwrap().len(), 1);
}

fn env_of(path: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn the_agent_environment_is_scrubbed_unless_a_variable_is_passed_on() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!("env > {}/env-$1.txt", ws.path("").display()),
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let secret = [("HUNKGATE_TEST_SECRET", "s3cret-value-123")];

    let mut hub = ws.serve_env(&[], &secret).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("one", &template, None).await.unwrap();
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "no_changes", "{r}");
    let env = env_of(&ws.path("env-one.txt"));
    let raw = std::fs::read_to_string(ws.path("env-one.txt")).unwrap();
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert!(!raw.contains("s3cret-value-123"), "{raw}");
    assert!(!names.contains(&"HUNKGATE_TEST_SECRET"));
    assert!(
        !names.iter().any(|n| n.starts_with("GIT_")),
        "the hub's GIT_* variables stay with the hub: {names:?}"
    );
    assert!(
        !raw.contains(&hub.token),
        "the reviewer token never reaches the agent"
    );
    for (k, v) in [
        ("HUNKGATE_PROMPT", "one"),
        ("HUNKGATE_RUN_ID", run.as_str()),
        ("HUNKGATE_URL", hub.url.as_str()),
    ] {
        assert!(
            env.contains(&(k.to_string(), v.to_string())),
            "{k}={v} in {env:?}"
        );
    }
    assert!(
        names.contains(&"PATH") && names.contains(&"HOME"),
        "{names:?}"
    );
    assert!(names.contains(&"HUNKGATE_AGENT_TOKEN"));

    // Passed on by name, it arrives.
    hub.stop().unwrap();
    drop(c);
    let hub = ws
        .serve_env(&["--agent-env", "HUNKGATE_TEST_SECRET"], &secret)
        .unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("two", &template, None).await.unwrap();
    wait_run_finished(&hub, &run, SECS).await.unwrap();
    let env = env_of(&ws.path("env-two.txt"));
    assert!(
        env.contains(&("HUNKGATE_TEST_SECRET".into(), "s3cret-value-123".into())),
        "{env:?}"
    );
    assert!(!env.iter().any(|(k, _)| k.starts_with("GIT_")));
}

#[tokio::test]
async fn the_state_dir_and_its_files_are_private() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws.agent_script("agent.sh", "echo b > a.txt").unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "b").await.unwrap();
    let r = c
        .decide(
            s["id"].as_str().unwrap(),
            &hunk_id(&s, "a.txt", 0),
            "accept",
        )
        .await
        .unwrap();
    assert_eq!(r["success"], true);
    let state = ws.state();
    assert_eq!(mode_of(&state).unwrap(), 0o700);
    for f in ["token", "feedback.jsonl", "state.jsonl", "hub.json"] {
        assert_eq!(mode_of(&state.join(f)).unwrap(), 0o600, "{f}");
    }
    let token = std::fs::read_to_string(state.join("token")).unwrap();
    assert_eq!(token.trim().len(), 64);
    assert!(token.trim().bytes().all(|b| b.is_ascii_hexdigit()));

    // A token others can read, or a state dir others can enter, stops the hub from starting.
    hub.stop().unwrap();
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    set(&state.join("token"), 0o644);
    let err = ws.serve(&[]).err().expect("refused with a readable token");
    assert!(format!("{err:#}").contains("chmod 600"), "{err:#}");
    set(&state.join("token"), 0o600);
    set(&state, 0o755);
    let err = ws.serve(&[]).err().expect("refused with an open state dir");
    assert!(format!("{err:#}").contains("chmod 700"), "{err:#}");
    set(&state, 0o700);
    let hub = ws.serve(&[]).unwrap();
    assert_eq!(hub.token, token.trim(), "same token after a restart");
}

/// A modified diff of a million blank lines (each an empty context line while the header
/// wants lines; 1 MB, within the request limit) is read in one pass and refused at once as a
/// hunk that does not fit the file: the parser once counted the hunk's lines again at each
/// blank line, minutes of a hub thread. The checkout is untouched and the hunk can still be
/// modified (the positive control).
#[tokio::test]
async fn a_modified_diff_of_a_million_blank_lines_is_refused_at_once() {
    let ws = Workspace::new(&[("a.txt", b"line 1\nline 2\nline 3\n")]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^line 2$/LINE 2/' a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "edit").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, "a.txt", 0);
    let modify = |diff: String| {
        json!({"type": "feedback", "suggestionId": sid, "hunkId": hid,
               "action": "modify", "modifiedDiff": diff})
    };
    let n = 1_000_000;
    let blanks = format!("@@ -1,{n} +1,{n} @@\n{}", "\n".repeat(n));
    let r = tokio::time::timeout(Duration::from_secs(120), c.call(modify(blanks)))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["code"], "conflict", "{r}");
    assert_eq!(ws.read("a.txt").unwrap(), b"line 1\nline 2\nline 3\n");

    let mine = "@@ -1,3 +1,3 @@\n line 1\n-line 2\n+line two\n line 3\n".to_string();
    let r = c.call(modify(mine)).await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(ws.read("a.txt").unwrap(), b"line 1\nline two\nline 3\n");
}

#[tokio::test]
async fn a_modified_diff_naming_another_file_is_refused() {
    let ws = Workspace::new(&[("a.txt", b"line 1\nline 2\nline 3\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 2$/LINE 2/' a.txt\n\
             mkdir -p .git/hooks && printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit\n\
             chmod +x .git/hooks/pre-commit",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "edit").await.unwrap();
    assert_eq!(
        s["files"],
        json!(["a.txt"]),
        "nothing under .git is ever a suggestion"
    );
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, "a.txt", 0);
    let git_config = ws.repo().join(".git/config");
    let config_before = std::fs::read(&git_config).unwrap();
    let body = "@@ -1,3 +1,3 @@\n line 1\n-line 2\n+pwned\n line 3\n";
    for (old, new) in [
        ("a/../../etc/passwd", "b/../../etc/passwd"),
        ("a/.git/config", "b/.git/config"),
        ("a/a.txt", "b/.git/config"),
        ("a/../a.txt", "b/../a.txt"),
        ("/etc/passwd", "/etc/passwd"),
        ("a/b.txt", "b/b.txt"),
    ] {
        let diff = format!("--- {old}\n+++ {new}\n{body}");
        let r = c
            .call(
                json!({"type": "feedback", "suggestionId": sid, "hunkId": hid,
                         "action": "modify", "modifiedDiff": diff}),
            )
            .await
            .unwrap();
        assert_eq!(r["success"], false, "{old} -> {new}: {r}");
        assert_eq!(r["code"], "bad_request", "{r}");
        assert_eq!(ws.read("a.txt").unwrap(), b"line 1\nline 2\nline 3\n");
        assert_eq!(std::fs::read(&git_config).unwrap(), config_before);
    }
    assert!(!ws.repo().join(".git/hooks/pre-commit").exists());
    let got: Value = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(got["hunks"][0]["state"], "pending");
    assert_eq!(ws.feedback_log().unwrap().len(), 0, "refusals log nothing");

    // Positive control: the same diff naming the hunk's own file is applied.
    let diff = format!("--- a/a.txt\n+++ b/a.txt\n{body}");
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": hid,
                     "action": "modify", "modifiedDiff": diff}),
        )
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(ws.read("a.txt").unwrap(), b"line 1\npwned\nline 3\n");
    assert_eq!(std::fs::read(&git_config).unwrap(), config_before);
}

#[test]
fn a_state_dir_of_another_user_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").is_err(),
            "CI runs as root; this test needs it to chown"
        );
        eprintln!("SKIPPED a_state_dir_of_another_user_is_refused: needs root to chown");
        return;
    }
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    // Control: a state dir of our own starts.
    let mut hub = ws.serve(&[]).unwrap();
    hub.stop().unwrap();
    drop(hub);
    let nobody = nix::unistd::Uid::from_raw(65534);
    nix::unistd::chown(&ws.state(), Some(nobody), None).unwrap();
    let err = ws
        .serve(&[])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("belongs to uid 65534"), "{err}");
}

/// `GET /agent/suggestions/:id` finds the run's own suggestion by a unique id prefix, as the
/// reviewer API does, and answers `not_found` (404) for an id it cannot see.
#[tokio::test]
async fn an_agent_reads_its_own_suggestion_by_id_prefix() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let results = ws.path("agent-results");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                r#"out={out}
auth="Authorization: Bearer $HUNKGATE_AGENT_TOKEN"
echo changed > a.txt
resp=$(curl -s -H "$auth" -H 'Content-Type: application/json' --data '{{"description":"mid-run"}}' "$HUNKGATE_URL/agent/publish")
id=$(printf '%s' "$resp" | sed -n 's/.*"suggestion_id":"\([0-9a-f-]*\)".*/\1/p')
short=$(printf '%s' "$id" | cut -c1-8)
echo "$id" > $out
curl -s -H "$auth" "$HUNKGATE_URL/agent/suggestions/$short" >> $out
echo >> $out
curl -s -o /dev/null -w '%{{http_code}}' -H "$auth" "$HUNKGATE_URL/agent/suggestions/ffffffff-nope" >> $out"#,
                out = results.display(),
            ),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "peek").await.unwrap();
    let run = s["run_id"].as_str().unwrap();
    wait_run_finished(&hub, run, Duration::from_secs(30))
        .await
        .unwrap();
    let got = std::fs::read_to_string(&results).unwrap();
    let mut lines = got.lines();
    let id = lines.next().unwrap();
    assert_eq!(id.len(), 36, "{got}");
    let found: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(found["suggestion"]["id"], id, "{got}");
    assert_eq!(found["suggestion"]["files"], json!(["a.txt"]), "{got}");
    assert_eq!(lines.next(), Some("404"), "{got}");
}

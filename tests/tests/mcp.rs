//! `hunkgate mcp`, driven by a real MCP client — the official Python SDK, in
//! `tests/mcp_client.py` — from inside a real agent run: the agent script starts the client, the
//! client starts `hunkgate mcp`, which reaches the hub with the run's agent token. Plus the raw
//! protocol (bad JSON, unknown methods, a huge line) from Rust, with piped stdio.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hunkgate_tests::{hunkgate_bin, numbered, wait_run_finished, wait_until, Hub, Workspace, Ws};
use serde_json::{json, Value};

const LONG: Duration = Duration::from_secs(120);

/// The Python that has the MCP SDK: `HUNKGATE_TEST_PYTHON`, else the venv
/// `scripts/install-test-deps` makes in the target dir. Checked once per test binary.
fn python() -> PathBuf {
    static PY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PY.get_or_init(find_python).clone()
}

fn find_python() -> PathBuf {
    let py = match std::env::var_os("HUNKGATE_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => hunkgate_tests::in_target_dir("py-mcp/bin/python"),
    };
    let works = Command::new(&py)
        .args(["-c", "import mcp.client.stdio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        works,
        "{} cannot import the MCP Python SDK: run scripts/install-test-deps (it makes that venv \
         with the pinned `mcp`), or point HUNKGATE_TEST_PYTHON at a python that has it",
        py.display()
    );
    py
}

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp_client.py")
}

/// `'…'` for sh (the paths here are temp dirs and the build tree: no quotes in them).
fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

fn template(agent: &Path) -> String {
    format!("{} {{prompt}}", agent.display())
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// Wait for a file the agent writes, failing early (with the run's error) if the run ends first.
async fn wait_file(hub: &Hub, run: &str, path: &Path) {
    let deadline = Instant::now() + LONG;
    loop {
        if path.exists() {
            return;
        }
        let r = hub.curl().get(&format!("/runs/{run}")).unwrap().body;
        if !matches!(r["status"].as_str(), Some("queued" | "working")) && !path.exists() {
            panic!(
                "the run ended before {} appeared: {r:#}\n{}",
                path.display(),
                hub.log_text()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no {} after {LONG:?}: {r:#}\n{}",
            path.display(),
            hub.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Run `tests/mcp_client.py probe` outside any run, with exactly `env` (plus PATH and HOME).
fn probe(ws: &Workspace, name: &str, env: &[(&str, &str)]) -> Value {
    let out = ws.path(&format!("{name}.json"));
    let mut cmd = Command::new(python());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", ws.home())
        .arg(client_script())
        .arg("probe")
        .arg(hunkgate_bin())
        .arg(&out)
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "probe {name} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    read_json(&out)
}

/// A probe outside any run: its name, its environment, and what its tool error must say.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<&'a str>);

fn assert_tool_error(v: &Value, says: &[&str]) {
    assert_eq!(v["isError"], true, "{v:#}");
    let text = v["text"].as_str().unwrap();
    for s in says {
        assert!(text.contains(s), "{s:?} not in {text:?}");
    }
}

#[tokio::test]
async fn an_agent_publishes_and_reads_the_review_through_a_real_mcp_client() {
    let ws = Workspace::new(&[("notes.txt", numbered(10).as_bytes())]).unwrap();
    let out = ws.path("mcp-out");
    std::fs::create_dir(&out).unwrap();
    let (py, client, bin) = (python(), client_script(), hunkgate_bin());
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "sed -i 's/^line 5$/line five/' notes.txt\n\
                 {py} {client} probe {bin} {probe}\n\
                 {py} {client} agent {bin} {out}",
                py = q(&py),
                client = q(&client),
                bin = q(&bin),
                probe = q(&out.join("probe-live.json")),
                out = q(&out),
            ),
        )
        .unwrap();
    let hub = ws.serve(&["--isolation", "none"]).unwrap();
    let mut c: Ws = hub.ws().await.unwrap();
    let run = c
        .start_run("spell out five", &template(&agent), None)
        .await
        .unwrap();
    wait_file(&hub, &run, &out.join("published.json")).await;
    let r = read_json(&out.join("published.json"));

    // The handshake: the SDK asks for its newest revision, which is ours too.
    let init = &r["initialize"];
    assert_eq!(init["protocolVersion"], "2025-11-25", "{init:#}");
    assert_eq!(init["serverInfo"]["name"], "hunkgate");
    assert_eq!(init["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(init["capabilities"]["tools"].is_object(), "{init:#}");
    let instructions = init["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("publish_suggestion") && instructions.contains("get_feedback"),
        "{instructions}"
    );

    // Exactly the four tools, each with a closed object schema.
    let tools = r["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "publish_suggestion",
            "suggestion_status",
            "list_suggestions",
            "get_feedback"
        ]
    );
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t:#}");
        assert_eq!(t["inputSchema"]["additionalProperties"], false, "{t:#}");
        assert!(!t["description"].as_str().unwrap().is_empty());
    }
    let publish = &tools[0]["inputSchema"];
    assert_eq!(publish["required"], json!(["description"]));
    let mut props: Vec<&str> = publish["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    props.sort_unstable();
    assert_eq!(props, ["description", "files", "hunk_descriptions"]);
    assert_eq!(
        publish["properties"]["hunk_descriptions"]["items"]["required"],
        json!(["file", "description"])
    );
    for t in &tools[1..] {
        assert!(t["inputSchema"].get("required").is_none(), "{t:#}");
    }

    // Before publishing there is nothing to read, and that is not an error.
    assert_eq!(
        r["feedback_before"]["isError"], false,
        "{:#}",
        r["feedback_before"]
    );
    assert_eq!(r["feedback_before"]["structured"], json!({"feedback": []}));
    assert_eq!(
        r["status_before"]["structured"],
        json!({"suggestion": null})
    );
    assert!(r["status_before"]["text"]
        .as_str()
        .unwrap()
        .contains("Nothing published yet"));

    // publish_suggestion made a real suggestion, which the reviewer sees with the hunk's note.
    let p = &r["publish"];
    assert_eq!(p["isError"], false, "{p:#}");
    let sid = p["structured"]["suggestion_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(p["structured"]["hunk_count"], 1);
    assert_eq!(p["structured"]["files"], json!(["notes.txt"]));
    assert!(p["text"]
        .as_str()
        .unwrap()
        .starts_with(&format!("Published suggestion {sid}")));
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap();
    assert_eq!(s.status, 200, "{}", s.body);
    let s = s.body;
    assert_eq!(s["run_id"], run.as_str());
    assert_eq!(
        s["description"],
        "Spell out five\n\nDigits read badly here."
    );
    assert_eq!(s["hunk_count"], 1);
    assert_eq!(s["hunks"][0]["description"], "five, as asked");
    assert!(s["hunks"][0]["diff"]
        .as_str()
        .unwrap()
        .contains("+line five\n"));
    let hunk = s["hunks"][0]["id"].as_str().unwrap().to_string();

    // list_suggestions, suggestion_status (by prefix and newest) and get_feedback all see it.
    let list = &r["list"]["structured"]["suggestions"];
    assert_eq!(list.as_array().unwrap().len(), 1, "{list:#}");
    assert_eq!(list[0]["id"], sid.as_str());
    assert_eq!(list[0]["status"], "pending");
    for key in ["status", "status_newest"] {
        let st = &r[key];
        assert_eq!(st["isError"], false, "{st:#}");
        let sug = &st["structured"]["suggestion"];
        assert_eq!(sug["id"], sid.as_str(), "{key}");
        assert_eq!(sug["reviewed_count"], 0);
        assert_eq!(sug["hunks"][0]["state"], "pending");
        assert_eq!(sug["hunks"][0]["description"], "five, as asked");
        assert!(
            sug["hunks"][0].get("diff").is_none(),
            "status leaves diffs to get_feedback"
        );
        assert!(st["text"].as_str().unwrap().contains("0/1 hunks reviewed"));
    }
    let fb = &r["feedback"]["structured"]["feedback"];
    assert_eq!(fb[0]["suggestion_id"], sid.as_str());
    assert_eq!(fb[0]["hunks"][0]["hunk_id"], hunk.as_str());
    assert_eq!(fb[0]["hunks"][0]["state"], "pending");
    assert!(fb[0]["hunks"][0]["diff"]
        .as_str()
        .unwrap()
        .contains("+line five"));

    // The hub's refusal is a tool error, and so are bad arguments at 2025-11-25 (SEP-1303; older
    // revisions get JSON-RPC -32602, see the raw test); an unknown tool is JSON-RPC -32602.
    assert_tool_error(&r["no_such_suggestion"], &["404 not_found", "ffffffff"]);
    assert_tool_error(
        &r["wrong_type"],
        &["invalid arguments for publish_suggestion", "invalid type"],
    );
    assert_tool_error(
        &r["unknown_field"],
        &[
            "invalid arguments for get_feedback",
            "unknown field `suggestion`",
        ],
    );
    assert_eq!(r["unknown_tool"]["code"], -32602, "{:#}", r["unknown_tool"]);
    let msg = r["unknown_tool"]["message"].as_str().unwrap();
    assert!(msg.contains("unknown tool \"delete_everything\""), "{msg}");

    // The reviewer rejects the hunk with a comment; the agent, polling get_feedback, reads both.
    let d = hub
        .curl()
        .post(
            "/feedback",
            &json!({"suggestion_id": sid, "hunk_id": hunk, "action": "reject", "comment": "keep the digits"}),
        )
        .unwrap();
    assert_eq!(d.status, 200, "{}", d.body);
    let done = wait_run_finished(&hub, &run, LONG).await.unwrap();
    assert_eq!(done["status"], "ready", "{done:#}\n{}", hub.log_text());
    assert_eq!(
        done["suggestion_ids"],
        json!([sid]),
        "no second suggestion at exit"
    );
    let f = read_json(&out.join("final.json"));
    let h = &f["feedback"]["structured"]["feedback"][0]["hunks"][0];
    assert_eq!(h["state"], "rejected", "{f:#}");
    assert_eq!(h["comment"], "keep the digits");
    assert!(f["feedback"]["text"]
        .as_str()
        .unwrap()
        .contains("rejected  notes.txt:0 (comment: \"keep the digits\")"));
    let st = &f["status"]["structured"]["suggestion"];
    assert_eq!(st["reviewed_count"], 1);
    assert_eq!(st["hunks"][0]["state"], "rejected");
    assert_eq!(st["hunks"][0]["comment"], "keep the digits");
    assert_eq!(ws.read("notes.txt").unwrap(), numbered(10).as_bytes());

    // The probe the agent ran before publishing worked with the same token.
    let live = read_json(&out.join("probe-live.json"));
    assert_eq!(live["list"]["isError"], false, "{live:#}");
}

#[tokio::test]
async fn without_a_live_agent_token_tools_are_listed_but_calls_say_what_is_wrong() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let live = ws.path("probe-live.json");
    let token_file = ws.path("agent-token");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "printf '%s' \"$HUNKGATE_AGENT_TOKEN\" > {token}\n{py} {client} probe {bin} {live}",
                token = q(&token_file),
                py = q(&python()),
                client = q(&client_script()),
                bin = q(&hunkgate_bin()),
                live = q(&live),
            ),
        )
        .unwrap();
    let hub = ws.serve(&["--isolation", "none"]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("probe", &template(&agent), None).await.unwrap();
    let r = wait_run_finished(&hub, &run, LONG).await.unwrap();
    assert_eq!(r["status"], "no_changes", "{r:#}\n{}", hub.log_text());

    // Positive control: inside the run, with its token, the same probe works.
    let v = read_json(&live);
    assert_eq!(v["list"]["isError"], false, "{v:#}");
    assert_eq!(v["list"]["structured"], json!({"suggestions": []}));
    assert_eq!(v["tools"].as_array().unwrap().len(), 4);

    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead_url = format!("http://127.0.0.1:{dead_port}");
    let finished_token = std::fs::read_to_string(&token_file).unwrap();
    assert!(!finished_token.is_empty());
    let cases: Vec<Case> = vec![
        (
            "no-env",
            vec![],
            vec![
                "HUNKGATE_URL and HUNKGATE_AGENT_TOKEN are not set",
                "`hunkgate mcp` must run inside a hunkgate agent run",
            ],
        ),
        (
            "no-token",
            vec![("HUNKGATE_URL", hub.url.as_str())],
            vec!["HUNKGATE_AGENT_TOKEN is not set"],
        ),
        (
            "invalid-token",
            vec![
                ("HUNKGATE_URL", hub.url.as_str()),
                ("HUNKGATE_AGENT_TOKEN", "not-a-token"),
            ],
            vec!["the hub refused HUNKGATE_AGENT_TOKEN (401 unauthorized: invalid token)"],
        ),
        (
            "finished-run-token",
            vec![
                ("HUNKGATE_URL", hub.url.as_str()),
                ("HUNKGATE_AGENT_TOKEN", finished_token.as_str()),
            ],
            vec!["401", "this run may have finished"],
        ),
        (
            "reviewer-token",
            vec![
                ("HUNKGATE_URL", hub.url.as_str()),
                ("HUNKGATE_AGENT_TOKEN", hub.token.as_str()),
            ],
            vec!["403 forbidden", "not the reviewer token"],
        ),
        (
            "hub-gone",
            vec![
                ("HUNKGATE_URL", dead_url.as_str()),
                ("HUNKGATE_AGENT_TOKEN", "t"),
            ],
            vec!["cannot reach the hub at http://127.0.0.1:", "HUNKGATE_URL"],
        ),
    ];
    for (name, env, says) in cases {
        let v = probe(&ws, name, &env);
        assert_eq!(v["initialize"]["serverInfo"]["name"], "hunkgate", "{name}");
        assert_eq!(
            v["tools"],
            json!([
                "publish_suggestion",
                "suggestion_status",
                "list_suggestions",
                "get_feedback"
            ]),
            "{name}"
        );
        assert_tool_error(&v["list"], &says);
    }
}

/// `hunkgate mcp` with piped stdio, and the lines it answers.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    fn start() -> Self {
        let mut child = Command::new(hunkgate_bin())
            .arg("mcp")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the server writes, which must be one JSON message.
    fn recv(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(LONG)
            .expect("no answer from hunkgate mcp");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    fn ask(&mut self, line: &str) -> Value {
        self.send(line);
        self.recv()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn protocol_errors_are_answered_and_the_server_keeps_going() {
    let help = Command::new(hunkgate_bin()).arg("--help").output().unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains(
            "(Agent side) MCP server over stdio: publish_suggestion, suggestion_status, list_suggestions, get_feedback"
        ),
        "{}",
        String::from_utf8_lossy(&help.stdout)
    );

    let mut s = Raw::start();
    let init = s.ask(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#);
    assert_eq!(init["id"], 1);
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26");
    // A notification gets no answer: the next line answers the next request.
    s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // Positive control for what follows: a ping is answered.
    let pong = s.ask(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));

    let e = s.ask("{this is not json");
    assert_eq!(e["id"], Value::Null);
    assert_eq!(e["error"]["code"], -32700, "{e}");

    let e = s.ask(r#"{"jsonrpc":"2.0","id":3,"method":"resources/list"}"#);
    assert_eq!(e["id"], 3);
    assert_eq!(e["error"]["code"], -32601, "{e}");

    // Nine MiB in one line: refused without the server holding it, and the server goes on.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"ping","pad":"{}"}}"#,
        "x".repeat(9 << 20)
    );
    let e = s.ask(&huge);
    assert_eq!(e["id"], Value::Null);
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("longer than"));

    // Bad arguments: JSON-RPC -32602 at 2025-03-26 (a tool result from 2025-11-25 on).
    let e = s.ask(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"publish_suggestion","arguments":{"description":"x","bogus":1}}}"#);
    assert_eq!(e["id"], 5);
    assert_eq!(e["error"]["code"], -32602, "{e}");

    // Without the agent's environment a call is a tool error, not a protocol error.
    let r = s.ask(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"get_feedback","arguments":{}}}"#);
    assert_eq!(r["id"], 6);
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("HUNKGATE_URL and HUNKGATE_AGENT_TOKEN are not set"));

    let pong = s.ask(r#"{"jsonrpc":"2.0","id":"after","method":"ping"}"#);
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": "after", "result": {}}));

    // End of input: exit 0.
    drop(s.stdin.take());
    let mut status = None;
    wait_until("hunkgate mcp to exit at EOF", LONG, || {
        status = s.child.try_wait().unwrap();
        status.is_some()
    })
    .unwrap();
    let status = status.unwrap();
    assert!(status.success(), "{status}");
    assert!(
        s.lines.recv_timeout(Duration::from_secs(5)).is_err(),
        "nothing more on stdout"
    );
}

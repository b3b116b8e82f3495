//! The Neovim plugin (`nvim/`) against the real hub: a headless Neovim runs a Lua scenario
//! (`nvim/tests/e2e/*.lua`) while this side starts, stops and drives hubs and checks the files
//! on disk. The plugin's pure-Lua unit tests run from here too, so `cargo test` covers them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hunkgate_tests::fake_llm::{FakeLlm, Recorded, Reply};
use hunkgate_tests::{hermetic_env, wait_until, Hub, Workspace};
use serde_json::{json, Value};

/// `nvim/` in this checkout.
fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nvim")
        .canonicalize()
        .expect("nvim/ plugin directory")
}

/// The `nvim` binary; a missing one fails the test (never a silent skip).
fn nvim() -> PathBuf {
    let ok = Command::new("nvim")
        .args([
            "--headless",
            "-u",
            "NONE",
            "-c",
            "if has('nvim-0.10') | qa! | else | cq | endif",
        ])
        .stdin(Stdio::null())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "Neovim >= 0.10 (`nvim`) is required for these tests and was not found on PATH: \
         run scripts/install-test-deps (scripts/test does)"
    );
    PathBuf::from("nvim")
}

fn report(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Wait for a child with a deadline; kill it when the deadline passes.
fn wait_output(mut child: Child, timeout: Duration) -> Output {
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("nvim output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("nvim output");
            panic!("{}", report("nvim timed out", &out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A headless Neovim running `nvim/tests/e2e/<scenario>.lua` in the workspace's repository,
/// with the plugin on 'runtimepath' and no user config.
struct Scenario {
    child: Option<Child>,
    out: PathBuf,
}

impl Scenario {
    fn start(ws: &Workspace, scenario: &str, state_dir: Option<&Path>) -> Self {
        Self::start_env(ws, scenario, state_dir, &[])
    }

    /// [`Scenario::start`] with extra environment for Neovim (and the hubs it starts).
    fn start_env(
        ws: &Workspace,
        scenario: &str,
        state_dir: Option<&Path>,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Self {
        let plugin = plugin_dir();
        let out = ws.path("nvim-out");
        std::fs::create_dir_all(&out).unwrap();
        let mut cmd = Command::new(nvim());
        hermetic_env(&mut cmd, &ws.home());
        cmd.current_dir(ws.repo())
            .env("HUNKGATE_TEST_OUT", &out)
            .env_remove("HUNKGATE_TEST_STATE")
            .env("XDG_DATA_HOME", ws.home().join(".local/share"))
            .env("XDG_CACHE_HOME", ws.home().join(".cache"))
            .args(["--headless", "-u", "NONE", "-i", "NONE", "--cmd"])
            .arg(format!("set rtp^={}", plugin.display()))
            .arg("-l")
            .arg(plugin.join(format!("tests/e2e/{scenario}.lua")))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = state_dir {
            cmd.env("HUNKGATE_TEST_STATE", dir);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("starting nvim");
        Self {
            child: Some(child),
            out,
        }
    }

    /// Wait for the Lua side to write marker `name`; fail early if Neovim exits first.
    fn wait_mark(&mut self, name: &str) -> String {
        let path = self.out.join(name);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(s) = std::fs::read_to_string(&path) {
                return s;
            }
            let child = self.child.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() {
                let out = self.child.take().unwrap().wait_with_output().unwrap();
                panic!(
                    "{}",
                    report(&format!("nvim exited before marker {name}"), &out)
                );
            }
            if Instant::now() > deadline {
                let mut child = self.child.take().unwrap();
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!("{}", report(&format!("no marker {name}"), &out));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn mark(&self, name: &str, content: &str) {
        // Written aside and renamed: Neovim reads a marker as soon as it exists.
        let path = self.out.join(name);
        let tmp = self.out.join(format!("{name}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }

    /// Wait for the scenario to finish and require success.
    fn finish(mut self, hubs: &[&Hub]) -> Output {
        let out = wait_output(self.child.take().unwrap(), Duration::from_secs(60));
        if !out.status.success() {
            let logs: Vec<String> = hubs.iter().map(|h| h.log_text()).collect();
            panic!(
                "{}\n--- hub log ---\n{}",
                report("nvim scenario failed", &out),
                logs.join("\n")
            );
        }
        // An error in a scheduled callback is printed, not raised into the scenario.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("Error") && !stderr.contains("E5108"),
            "{}",
            report("nvim printed an error", &out)
        );
        println!("{}", String::from_utf8_lossy(&out.stdout));
        out
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The hub's default state dir for `repo` (`$XDG_STATE_HOME/hunkgate/<name>-<sha256[..12]>`),
/// computed here with coreutils' sha256sum so the plugin's derivation is checked against an
/// independent one.
fn default_state_dir(home: &Path, repo: &Path) -> PathBuf {
    let real = repo.canonicalize().unwrap();
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sha256sum");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(real.as_os_str().as_encoded_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    let name = real.file_name().unwrap().to_string_lossy().into_owned();
    home.join(".local/state/hunkgate")
        .join(format!("{name}-{}", &hex[..12]))
}

#[test]
fn lua_unit_tests() {
    let plugin = plugin_dir();
    let out = Command::new(nvim())
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-l"])
        .arg(plugin.join("tests/unit/run.lua"))
        .stdin(Stdio::null())
        .output()
        .expect("running nvim");
    assert!(
        out.status.success(),
        "{}",
        report("Lua unit tests failed", &out)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// A stale hunk in the floating review (`nvim/tests/e2e/merge.lua`): a clean merge shown first
/// and landed with `a`, a conflicted one resolved in the modify buffer; the files are what
/// `git merge-file` makes of a clean merge and what the user wrote.
#[test]
fn stale_hunks_merge_three_ways_in_the_review() {
    let base = numbered(20);
    let ws = Workspace::new(&[("a.txt", base.as_bytes()), ("b.txt", base.as_bytes())]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^line 10$/LINE 10/' a.txt b.txt")
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &template]).unwrap();
    let state = ws.state();
    Scenario::start(&ws, "merge", Some(&state)).finish(&[&hub]);

    let yours = base.replace("line 8\n", "line 8, mine\n");
    let agents = base.replace("line 10\n", "LINE 10\n");
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("yours", &yours), ("base", &base), ("agent", &agents)] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let git = Command::new("git")
        .args(["merge-file", "-p", "yours", "base", "agent"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(git.status.success(), "{git:?}");
    assert_eq!(ws.read_string("a.txt").unwrap().as_bytes(), git.stdout);
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        base.replace("line 10\n", "line ten, both\n")
    );
    let log = std::fs::read_to_string(state.join("feedback.jsonl")).unwrap();
    let outcomes: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["outcome"].to_string())
        .collect();
    assert_eq!(
        outcomes,
        [
            r#""conflict""#,
            r#""merged""#,
            r#""conflict""#,
            r#""conflict""#,
            r#""modified""#
        ],
        "{log}"
    );
}

/// Connect, get notified, navigate, accept, undo, reject, be refused under unsaved changes,
/// modify (a CRLF file), accept the rest (a new file large enough that its suggestion comes in
/// fragments) and complete — all through the review keymaps.
#[test]
fn floating_review_through_keymaps() {
    let a = numbered(30);
    let ws = Workspace::new(&[
        ("a.txt", a.as_bytes()),
        ("b.txt", b"bravo\n"),
        ("c.txt", b"one\r\ntwo\r\nthree\r\n"),
    ])
    .unwrap();
    let prompt_file = ws.path("prompt.txt");
    // The session's second run ("try again") only saves what the agent is told of the review.
    let told_file = ws.path("told.json");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "case \"$HUNKGATE_PROMPT\" in 'try again'*) curl -sS -H \"Authorization: Bearer $HUNKGATE_AGENT_TOKEN\" \"$HUNKGATE_URL/agent/feedback\" > '{told}.part' && mv '{told}.part' '{told}'; exit 0;; esac\n\
                 printf '%s' \"$HUNKGATE_PROMPT\" > '{}'\n\
                 sed -i -e 's/^line 2$/LINE 2/' -e 's/^line 25$/LINE 25/' a.txt\n\
                 echo BRAVO > b.txt\n\
                 printf 'one\\r\\nTWO\\r\\nthree\\r\\n' > c.txt\n\
                 {{ echo 'new file'; seq -f 'filler line %g, so that the suggestion is sent in fragments' 2000; }} > new.txt",
                prompt_file.display(),
                told = told_file.display()
            ),
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &template]).unwrap();
    let state = ws.state();
    let scenario = Scenario::start(&ws, "review_float", Some(&state));
    scenario.finish(&[&hub]);

    let a_now = ws.read_string("a.txt").unwrap();
    let lines: Vec<&str> = a_now.lines().collect();
    assert_eq!(lines[1], "LINE 2", "accepted hunk applied");
    assert_eq!(lines[24], "line 25", "rejected hunk not applied");
    assert_eq!(ws.read_string("b.txt").unwrap(), "BRAVO\n");
    assert_eq!(
        ws.read_string("c.txt").unwrap(),
        "one\r\nTwo (edited)\r\nand a new line\r\nthree\r\n"
    );
    // The new file makes the `suggestion.ready` over 64 KiB: the hub sends it in fragments,
    // which the plugin put back together whole.
    let new = ws.read_string("new.txt").unwrap();
    assert!(new.starts_with("new file\nfiller line 1, "), "{new}");
    assert_eq!(new.lines().count(), 2001);
    assert!(new.len() > 64 << 10);

    // The visual selection went to the agent with the prompt.
    let prompt = std::fs::read_to_string(&prompt_file).unwrap();
    assert!(prompt.starts_with("make it louder\n"), "{prompt}");
    assert!(
        prompt.contains("Selected code from a.txt (lines 1-3):\n```"),
        "{prompt}"
    );
    assert!(prompt.contains("\nline 1\nline 2\nline 3\n```"), "{prompt}");

    // The hub logged the user's own version for the modified hunk.
    let log = std::fs::read_to_string(state.join("feedback.jsonl")).unwrap();
    let modify: Value = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["action"] == "modify")
        .expect("a modify decision in the feedback log");
    assert_eq!(modify["outcome"], "modified");
    assert!(
        modify["modified_diff"]
            .as_str()
            .unwrap()
            .contains("+Two (edited)"),
        "{modify}"
    );

    // The comment typed at the reject prompt is in the feedback log (#55: it was null)...
    let rejects: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["action"] == "reject" && v["file"] == "a.txt")
        .collect();
    assert_eq!(
        rejects.len(),
        1,
        "one reject, none from the cancelled prompt: {log}"
    );
    assert_eq!(rejects[0]["comment"], "keep the old name", "{}", rejects[0]);

    // ...and the session's next run is told about it.
    let runs = hub.curl().get("/runs").unwrap().body;
    let session = runs["runs"][0]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the run's session: {runs}"))
        .to_string();
    let again = hub
        .curl()
        .post(
            &format!("/sessions/{session}/runs"),
            &json!({"prompt": "try again"}),
        )
        .unwrap();
    assert_eq!(again.status, 200, "{}", again.body);
    wait_until("the second run's feedback", Duration::from_secs(60), || {
        told_file.exists()
    })
    .unwrap();
    let told: Value = serde_json::from_str(&std::fs::read_to_string(&told_file).unwrap()).unwrap();
    let hunk = told["feedback"]
        .as_array()
        .unwrap_or_else(|| panic!("no feedback list: {told}"))
        .iter()
        .flat_map(|s| s["hunks"].as_array().into_iter().flatten())
        .find(|h| h["file"] == "a.txt" && h["state"] == "rejected")
        .unwrap_or_else(|| panic!("the rejected hunk in the next run's feedback: {told}"));
    assert_eq!(hunk["comment"], "keep the old name", "{hunk}");
}

/// Restart the hub while Neovim stays up: the plugin finds the new port in the default state
/// dir, sees the new epoch and resyncs (a decision and a suggestion made while it was away);
/// then a dropped connection to the same hub catches up by replay.
#[tokio::test]
async fn reconnect_and_resync_after_hub_restart() {
    let ws = Workspace::new(&[("x.txt", b"x\n"), ("y.txt", b"y\n")]).unwrap();
    let agent1 = ws.agent_script("agent1.sh", "echo X > x.txt").unwrap();
    let agent2 = ws.agent_script("agent2.sh", "echo Y > y.txt").unwrap();
    let mut hub1 = ws.serve(&[]).unwrap();
    let mut client = hub1.ws().await.unwrap();
    let s1 = hunkgate_tests::run_agent(&hub1, &mut client, &agent1, "first change")
        .await
        .unwrap();
    drop(client);

    // The plugin is given no state dir: it must derive the hub's default one. The hub runs with
    // --state-dir, so put the default path there as a symlink to it.
    let default_dir = default_state_dir(&ws.home(), &ws.repo());
    std::fs::create_dir_all(default_dir.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(ws.state(), &default_dir).unwrap();

    // Nor its discovery record: the plugin must find the hub the way it finds an older hub's,
    // so that the test decides when the plugin can see it.
    let no_records = ws.path("no-records");
    let mut scenario = Scenario::start_env(
        &ws,
        "reconnect",
        None,
        &[("HUNKGATE_DISCOVERY_DIR", no_records.as_os_str())],
    );
    let seen = scenario.wait_mark("synced-1");
    assert_eq!(seen.trim(), s1["id"].as_str().unwrap());

    // Hide the hub from the plugin while it is down, so that everything below happens while
    // the plugin is away and has to be found by resync, not by live events.
    std::fs::remove_file(&default_dir).unwrap();
    hub1.stop().unwrap();
    scenario.wait_mark("offline-1");

    // Keep the old port taken so the new hub gets another one: the plugin must read it from
    // hub.json rather than retry the address it knew.
    let old_port = std::net::TcpListener::bind(("127.0.0.1", hub1.port)).ok();
    let hub2 = ws.serve(&[]).unwrap();
    if old_port.is_some() {
        assert_ne!(hub2.port, hub1.port, "the restarted hub is on a new port");
    }
    drop(old_port);
    let mut client = hub2.ws().await.unwrap();
    let hunk = s1["hunks"][0]["id"].as_str().unwrap().to_string();
    let r = client
        .call(json!({"type": "feedback", "suggestionId": s1["id"], "hunkId": hunk, "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    let s2 = hunkgate_tests::run_agent(&hub2, &mut client, &agent2, "second change")
        .await
        .unwrap();
    std::os::unix::fs::symlink(ws.state(), &default_dir).unwrap();
    scenario.mark("restarted", s2["id"].as_str().unwrap());

    // The plugin now drops its connection to the same hub and stays away until told.
    scenario.wait_mark("offline-2");
    let hunk2 = s2["hunks"][0]["id"].as_str().unwrap().to_string();
    let r = client
        .call(json!({"type": "feedback", "suggestionId": s2["id"], "hunkId": hunk2, "action": "reject"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    scenario.mark("rejected", "");

    scenario.finish(&[&hub1, &hub2]);
    assert_eq!(ws.read_string("x.txt").unwrap(), "X\n");
    assert_eq!(ws.read_string("y.txt").unwrap(), "y\n");
    wait_until("hub2 still healthy", Duration::from_secs(5), || {
        hub2.curl()
            .get("/health")
            .map(|r| r.status == 200)
            .unwrap_or(false)
    })
    .unwrap();
}

/// Accept-all over a destructive hunk (`nvim/tests/e2e/destructive.lua`): `A` asks; without
/// the destructive ones, the edit lands and the deleted file is still there; with them, it goes.
#[test]
fn accept_all_asks_before_destructive_hunks() {
    let ws = Workspace::new(&[
        (
            "a.txt", b"alpha
",
        ),
        (
            "gone.txt",
            b"keep me?
",
        ),
    ])
    .unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "echo ALPHA > a.txt
rm gone.txt",
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &template]).unwrap();
    let state = ws.state();
    let mut scenario = Scenario::start(&ws, "destructive", Some(&state));
    scenario.wait_mark("partial");
    assert_eq!(ws.read_string("a.txt").unwrap(), "ALPHA\n");
    assert_eq!(
        ws.read_string("gone.txt").unwrap(),
        "keep me?\n",
        "left pending"
    );
    scenario.mark("checked", "");
    scenario.finish(&[&hub]);
    assert!(!ws.exists("gone.txt"), "confirmed: deleted");
}

/// Hunks sized for a reviewer (`nvim/tests/e2e/sizing.lua`): a rewrite in parts, each marked
/// REWRITE in the review bar, a block that cannot be cut marked OVERSIZED; `A` lands them all.
#[test]
fn a_rewrite_in_parts_and_an_oversized_block_are_marked_in_the_review() {
    let ws = Workspace::new(&[
        ("big.txt", numbered(200).as_bytes()),
        ("block.txt", b"one\n"),
    ])
    .unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i '/0$/!s/^line /new line /' big.txt\n\
             seq 1 100 | sed 's/^/block /' >> block.txt",
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &template]).unwrap();
    let state = ws.state();
    let scenario = Scenario::start(&ws, "sizing", Some(&state));
    scenario.finish(&[&hub]);
    let rewritten: String = (1..=200)
        .map(|i| match i % 10 {
            0 => format!("line {i}\n"),
            _ => format!("new line {i}\n"),
        })
        .collect();
    assert_eq!(ws.read_string("big.txt").unwrap(), rewritten);
    let block: String = (1..=100).map(|i| format!("block {i}\n")).collect();
    assert_eq!(
        ws.read_string("block.txt").unwrap(),
        format!("one\n{block}")
    );
}

/// `ui.style = "inline"`: the hunk overlaid in the real buffer and a quickfix list of all
/// hunks; the inline keymaps decide. Also `:checkhealth hunkgate` and command completion.
#[test]
fn inline_review_health_and_commands() {
    let ws = Workspace::new(&[("doc.md", numbered(20).as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i -e 's/^line 3$/line three/' -e 's/^line 18$/line eighteen/' doc.md",
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &template]).unwrap();
    let state = ws.state();
    let scenario = Scenario::start(&ws, "inline", Some(&state));
    scenario.finish(&[&hub]);
    let doc = ws.read_string("doc.md").unwrap();
    assert!(doc.contains("line three\n"), "{doc}");
    assert!(
        doc.contains("line 17, edited by the user\nline 18\n") && !doc.contains("eighteen"),
        "{doc}"
    );
}

/// The hub's built-in agent (against the fake model) asks two questions. The first is answered
/// "tabs" in the prompt the plugin opens; the second, asked while the plugin is away, is found
/// by the resync, left open by a cancelled prompt and skipped with `:Hunkgate skip`. The model
/// gets both outcomes as the clarify_user results, and the run goes on to its end.
#[tokio::test]
async fn clarify_questions_of_the_builtin_agent() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    // The second question waits until the plugin is away.
    let away = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&away);
    let fake = FakeLlm::with(move |req: &Recorded| match req.tool_results().len() {
        0 => Reply::tool("clarify_user", json!({"question": "Tabs or spaces?"})),
        1 => {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !gate.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            Reply::tool("clarify_user", json!({"question": "Which license?"}))
        }
        _ => Reply::tool("finish", json!({"description": "nothing to change"})),
    })
    .await;
    let url = fake.base_url();
    let hub = ws
        .serve(&["--provider-url", &url, "--model", "test-model"])
        .unwrap();
    let mut scenario = Scenario::start(&ws, "clarify", Some(&ws.state()));
    scenario.wait_mark("synced");

    let r = hub
        .curl()
        .post(
            "/runs",
            &json!({"prompt": "tidy up the indentation", "model": "test-model"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let run_id = r.body["run_id"].as_str().expect("run_id").to_string();
    let run = |hub: &Hub| hub.curl().get(&format!("/runs/{run_id}")).unwrap().body;

    // The plugin answered the first question and went away; the run goes on to the model (the
    // hub marks it working once the agent has taken the answer).
    scenario.wait_mark("offline");
    wait_until("the run working again", Duration::from_secs(10), || {
        let v = run(&hub);
        v["status"] == "working" && v.get("question").is_none()
    })
    .unwrap();
    away.store(true, Ordering::SeqCst);
    wait_until("the second question", Duration::from_secs(30), || {
        let v = run(&hub);
        v["status"] == "waiting_for_user" && v["question"]["question"] == "Which license?"
    })
    .unwrap();
    scenario.mark("asked-2", "");
    scenario.finish(&[&hub]);

    let requests = fake.wait_requests(3, Duration::from_secs(30)).await;
    assert_eq!(requests.len(), 3, "model calls: {requests:?}");
    let answers: Vec<Value> = requests[2]
        .tool_results()
        .iter()
        .map(|(_, content)| serde_json::from_str::<Value>(content).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["ok"], true, "{answers:?}");
    assert_eq!(answers[0]["result"]["answer"], "tabs", "{answers:?}");
    assert_eq!(
        answers[1]["result"]["answer"], "no_user_answer",
        "{answers:?}"
    );
    wait_until("the run ended", Duration::from_secs(30), || {
        run(&hub)["status"] == "no_changes"
    })
    .unwrap();
}

/// An ACP agent's permission question (`--acp-ask execute`, the scripted agent on the Python
/// SDK) reaches Neovim: the plugin prompts with the tool call and its options
/// (`nvim/tests/e2e/acp_permission.lua`), and the option typed there — "reject-once", not the
/// "allow-once" the policy gives unasked (tests/tests/acp.rs) — is what the agent receives.
#[tokio::test]
async fn an_acp_permission_question_is_answered_in_neovim() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let acp = crate::acp::agent("permission");
    let hub = ws.serve(&["--acp", &acp, "--acp-ask", "execute"]).unwrap();
    let mut scenario = Scenario::start(&ws, "acp_permission", Some(&ws.state()));
    scenario.wait_mark("synced");
    let run_id = crate::acp::start(&hub, json!({"prompt": "clean up"})).unwrap();
    let run = hunkgate_tests::wait_run_finished(&hub, &run_id, Duration::from_secs(60))
        .await
        .unwrap();
    scenario.finish(&[&hub]);
    assert_eq!(run["status"], "ready", "{run}");
    let sid = run["suggestion_ids"][0].as_str().expect("a suggestion");
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(
        crate::acp::added(&s)
            .get("permission.txt")
            .map(String::as_str),
        Some("reject-once"),
        "{s}"
    );
    // The agent's own word (its stderr, in the run's log).
    hunkgate_tests::wait_for(
        "the agent's word in the run's log",
        Duration::from_secs(30),
        || crate::acp::run_log(&hub, &run_id).contains("permission answered: reject-once"),
    )
    .await
    .unwrap();
}

/// `hunkgate serve` as a user starts it: no `--state-dir`, no `--port` (the default state dir;
/// port 4097 when free, else a free one), writing its discovery record into `hubs`.
fn serve_default(ws: &Workspace, hubs: &Path) -> Hub {
    let log = ws.path("hub-default.log");
    let logf = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(hunkgate_tests::hunkgate_bin());
    hermetic_env(&mut cmd, &ws.home());
    cmd.current_dir(ws.repo())
        .env("HUNKGATE_DISCOVERY_DIR", hubs)
        .args(["serve", "--isolation", "none"])
        .stdin(Stdio::null())
        .stdout(logf.try_clone().unwrap())
        .stderr(logf);
    let child = cmd.spawn().expect("starting hunkgate serve");
    Hub::wait_ready(child, default_state_dir(&ws.home(), &ws.repo()), log).unwrap()
}

/// #55: one Neovim, two repositories whose hubs were started differently (one as a user
/// would, one with `--state-dir` on a free port): each buffer is reviewed against its own
/// repository's hub, found by its discovery record, and the decisions land in the right
/// checkout. Then the first hub is killed with SIGKILL: its stale record is ignored (and said
/// so by :checkhealth), and a hub of the other repository is never taken for it.
#[tokio::test]
async fn two_repositories_each_against_its_own_hub() {
    let ws_a = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let ws_b = Workspace::new(&[("b.txt", b"b\n")]).unwrap();
    let hubs = ws_a.path("hubs");
    let agent_a = ws_a.agent_script("agent.sh", "echo A > a.txt").unwrap();
    let agent_b = ws_b.agent_script("agent.sh", "echo B > b.txt").unwrap();

    let mut hub_a = serve_default(&ws_a, &hubs);
    let b_state = ws_b.path("custom-state");
    let hub_b = Hub::start_in(
        &ws_b.repo(),
        &ws_b.home(),
        &b_state,
        &ws_b.path("hub-b.log"),
        &[],
        &[("HUNKGATE_DISCOVERY_DIR", hubs.as_os_str())],
    )
    .unwrap();
    assert_ne!(hub_a.port, hub_b.port);
    let mut client = hub_a.ws().await.unwrap();
    let sa = hunkgate_tests::run_agent(&hub_a, &mut client, &agent_a, "change a")
        .await
        .unwrap();
    drop(client);
    let mut client = hub_b.ws().await.unwrap();
    let sb = hunkgate_tests::run_agent(&hub_b, &mut client, &agent_b, "change b")
        .await
        .unwrap();
    drop(client);

    let repo_b = ws_b.repo().canonicalize().unwrap();
    let mut scenario = Scenario::start_env(
        &ws_a,
        "multi",
        None,
        &[
            ("HUNKGATE_DISCOVERY_DIR", hubs.as_os_str()),
            ("HUNKGATE_TEST_REPO_B", repo_b.as_os_str()),
        ],
    );
    let seen = scenario.wait_mark("decided");
    assert_eq!(
        seen.trim(),
        format!(
            "{} {}",
            sa["id"].as_str().unwrap(),
            sb["id"].as_str().unwrap()
        )
    );
    assert_eq!(
        ws_a.read_string("a.txt").unwrap(),
        "a\n",
        "a's hunk rejected"
    );
    assert_eq!(
        ws_b.read_string("b.txt").unwrap(),
        "B\n",
        "b's hunk accepted"
    );
    hub_a.kill9();
    scenario.mark("killed", "");
    scenario.finish(&[&hub_a, &hub_b]);
    assert_eq!(ws_a.read_string("a.txt").unwrap(), "a\n");
}

/// #55: from a Neovim with no hub running, `:Hunkgate run …` starts the hub (detached, as
/// `server.cmd serve --repo <root>`) and the run, and the suggestion arrives.
#[test]
fn run_starts_the_hub_when_none_runs() {
    let ws = Workspace::new(&[("x.txt", b"x\n")]).unwrap();
    let agent = ws.agent_script("agent.sh", "echo X > x.txt").unwrap();
    // The hub Neovim starts reads the user's config: this agent, no sandbox user here.
    let config = ws.home().join(".config/hunkgate/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            "agent = \"{} {{prompt}}\"\nisolation = \"none\"\n",
            agent.display()
        ),
    )
    .unwrap();
    let hubs = ws.path("hubs");
    let bin = hunkgate_tests::hunkgate_bin();

    /// The hub Neovim started, stopped however the test ends.
    struct Started(Option<u32>);
    impl Drop for Started {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
        }
    }
    let mut started = Started(None);
    let mut scenario = Scenario::start_env(
        &ws,
        "autostart",
        None,
        &[
            ("HUNKGATE_DISCOVERY_DIR", hubs.as_os_str()),
            ("HUNKGATE_TEST_BIN", bin.as_os_str()),
        ],
    );
    let pid: u32 = scenario.wait_mark("started").trim().parse().unwrap();
    started.0 = Some(pid);
    scenario.finish(&[]);
    assert!(
        hunkgate_tests::pid_alive(pid),
        "the detached hub outlives Neovim"
    );
    let records: Vec<_> = std::fs::read_dir(&hubs).unwrap().collect();
    assert_eq!(records.len(), 1, "one discovery record: {records:?}");
    drop(started);
    wait_until("the started hub stopped", Duration::from_secs(20), || {
        !hunkgate_tests::pid_alive(pid)
    })
    .unwrap();
    assert_eq!(ws.read_string("x.txt").unwrap(), "x\n", "nothing accepted");
}

/// The first ```lua block after `heading` in the Markdown file `path` (relative to the
/// repository's root).
fn lua_block_after(path: &str, heading: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("{path} has no {heading:?}"));
    let block = text[at..]
        .split("```lua\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no lua block after {heading:?} in {path}"));
    block.split("```").next().unwrap().to_string()
}

/// What `nvim/tests/install.lua` found in a headless Neovim (`-u NONE`): `mode` `lazy` runs
/// the spec in `spec` as lazy.nvim would with `clone` as the plugin's directory; `rtp` only
/// looks, with `extra` (e.g. `--cmd 'set rtp+=…'`) given to Neovim.
fn install_check(mode: &str, clone: &Path, spec: &Path, extra: &[String]) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("found.json");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new(nvim());
    hermetic_env(&mut cmd, &home);
    let output = cmd
        .current_dir(tmp.path())
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .args(["--headless", "-u", "NONE", "-i", "NONE"])
        .args(extra)
        .arg("-l")
        .arg(plugin_dir().join("tests/install.lua"))
        .arg(mode)
        .arg(clone)
        .arg(spec)
        .arg(&out)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let found = std::fs::read_to_string(&out)
        .unwrap_or_else(|_| panic!("{}", report("install.lua wrote nothing", &output)));
    serde_json::from_str(&found).unwrap()
}

/// The lazy.nvim spec that README.md and nvim/README.md show (the same block in both) works
/// as lazy.nvim runs it: evaluated, the plugin's directory — a fresh `git clone` of this
/// repository, as lazy.nvim makes from `url` — on 'runtimepath', then `config(plugin, opts)`,
/// in a Neovim whose startup is over and sources no plugin file itself. Then
/// `require('hunkgate')` works, `:Hunkgate` exists and `:help hunkgate` opens. A plain
/// 'runtimepath' install (`set rtp+=<clone>/nvim`) has `:help hunkgate` too, from the shipped
/// `nvim/doc/tags`; without `nvim/` on 'runtimepath' it fails (the control).
///
/// The clone holds what is committed: commit changes to `nvim/` before trusting this test.
#[test]
fn install_from_git_with_lazy_nvim_as_documented() {
    let spec = lua_block_after("nvim/README.md", "## Install (lazy.nvim)");
    assert_eq!(
        spec,
        lua_block_after("README.md", "## Neovim"),
        "README.md and nvim/README.md show different lazy.nvim specs"
    );
    let tmp = tempfile::tempdir().unwrap();
    let clone = tmp.path().join("hunkgate");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = Command::new("git")
        .args(["clone", "-q", "--no-hardlinks"])
        .arg(&root)
        .arg(&clone)
        .output()
        .unwrap();
    assert!(git.status.success(), "{}", report("git clone", &git));
    let spec_file = tmp.path().join("spec.lua");
    std::fs::write(&spec_file, format!("return {spec}")).unwrap();

    let lazy = install_check("lazy", &clone, &spec_file, &[]);
    assert_eq!(
        lazy,
        json!({"name": "hunkgate", "url": true, "module": true, "command": true, "help": true}),
        "the documented lazy.nvim install"
    );
    let rtp = format!("set rtp+={}", clone.join("nvim").display());
    let plain = install_check("rtp", &clone, &spec_file, &["--cmd".into(), rtp]);
    assert_eq!(
        plain,
        json!({"help": true}),
        "a plain 'runtimepath' install"
    );
    let none = install_check("rtp", &clone, &spec_file, &[]);
    assert_eq!(none["help"], false, "control: {none}");
    assert!(
        none["help_error"].as_str().unwrap_or("").contains("E149"),
        "control: {none}"
    );
}

/// `:Hunkgate cancel` stops the run that is working (see `nvim/tests/e2e/cancel.lua`): the run
/// ends `cancelled` and its agent's processes, the one it started in the background too, are
/// gone. Control: they were alive before.
#[test]
fn cancel_stops_the_working_run() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pids = ws.path("pids");
    let agent = crate::runs::sleeper(&ws, &pids);
    let hub = ws.serve(&[]).unwrap();
    let mut scenario = Scenario::start(&ws, "cancel", Some(&ws.state()));
    scenario.wait_mark("synced");
    let r = hub
        .curl()
        .post(
            "/runs",
            &json!({"prompt": "sleep", "agent": format!("{} {{prompt}}", agent.display())}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let run_id = r.body["run_id"].as_str().unwrap().to_string();
    let started = crate::cli_cockpit::wait_pids(&pids);
    scenario.mark("working", "");
    scenario.wait_mark("cancelled");
    let run = hub.curl().get(&format!("/runs/{run_id}")).unwrap().body;
    wait_until("the run ended cancelled", Duration::from_secs(20), || {
        let v = hub.curl().get(&format!("/runs/{run_id}")).unwrap().body;
        v["status"] == "cancelled"
    })
    .unwrap_or_else(|e| panic!("{e}: {run}"));
    crate::cli_cockpit::assert_gone(&started);
    scenario.mark("checked", "");
    let out = scenario.finish(&[&hub]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok: nothing left to cancel"),
        "{}",
        report("nvim", &out)
    );
}

/// Line-range decisions from Visual selections (see `nvim/tests/e2e/lines.lua`): lines 3-7 of
/// a 12-line hunk accepted and one line of its rest rejected in the floating review, what is
/// left accepted from a selection of the file's own lines in the inline review. The file is
/// what those decisions land, byte for byte, and the feedback log tells them apart.
#[test]
fn visual_selections_decide_lines_in_the_float_and_inline_views() {
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 5$/five/; s/^line 6$/six/; s/^line 7$/seven/; s/^line 30$/thirty/' a.txt",
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &template]).unwrap();
    let state = ws.state();
    Scenario::start(&ws, "lines", Some(&state)).finish(&[&hub]);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        numbered(40).replace("line 5\nline 6\nline 7\n", "five\nseven\n"),
        "+six was rejected, the hunk at line 30 is still pending"
    );
    let log: Vec<(String, String, Value, Value)> = ws
        .feedback_log()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["action"].as_str().unwrap().to_string(),
                l["outcome"].as_str().unwrap().to_string(),
                l["lines"].clone(),
                l["comment"].clone(),
            )
        })
        .collect();
    let want = [
        ("accept", "partial", json!([3, 7]), Value::Null),
        ("reject", "partial", json!([5, 5]), json!("not six")),
        ("accept", "applied", Value::Null, Value::Null),
    ];
    assert_eq!(
        log,
        want.map(|(a, o, l, c)| (a.to_string(), o.to_string(), l, c)),
        "the reject's comment, asked for as a whole hunk's is, is logged"
    );
}

/// Checks per hunk in a real Neovim (`nvim/tests/e2e/checks.lua`): ruff's new warning and the
/// one the run fixed as `vim.diagnostic` entries in the file and in the review window.
#[test]
fn checker_diagnostics_show_in_the_file_and_the_review() {
    let (ws, agent, path) = crate::checks::python_repo();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws
        .serve_env(&["--agent", &template], &[("PATH", &path)])
        .unwrap();
    let state = ws.state();
    Scenario::start(&ws, "checks", Some(&state)).finish(&[&hub]);
}

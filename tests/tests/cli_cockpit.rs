//! The command line as the user's cockpit, against a real hub: `status` (the user's view),
//! `runs`, `cancel`, Ctrl-C on `run` (off a terminal and on one, through a pty), `modify` (with a
//! real editor process or `--diff`), and a reject comment reaching the feedback log and the
//! session's next run.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hunkgate_tests::{hermetic_env, hunkgate_bin, numbered, pid_alive, wait_until, Workspace};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(30);

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// `hunkgate ARGS --state-dir <the hub's>` in the repository, with `env` on top of the hermetic
/// environment.
fn cli_env(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new(hunkgate_bin());
    hermetic_env(&mut cmd, &ws.home());
    cmd.current_dir(ws.repo())
        .env("HUNKGATE_LOG", "warn")
        .env_remove("VISUAL")
        .env_remove("EDITOR")
        .args(args)
        .arg("--state-dir")
        .arg(ws.state())
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn cli(ws: &Workspace, args: &[&str]) -> Out {
    cli_env(ws, args, &[])
}

fn ok(ws: &Workspace, args: &[&str]) -> Out {
    let o = cli(ws, args);
    assert!(
        o.ok,
        "hunkgate {args:?} failed\nstdout: {}\nstderr: {}",
        o.stdout, o.stderr
    );
    o
}

/// The agent's pids once it has started (and removes the file, for the next run).
pub(crate) fn wait_pids(pids: &Path) -> Vec<u32> {
    wait_until("the agent to start", SECS, || pids.exists()).unwrap();
    let got: Vec<u32> = std::fs::read_to_string(pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    std::fs::remove_file(pids).unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|p| pid_alive(*p)), "positive control");
    got
}

pub(crate) fn assert_gone(pids: &[u32]) {
    for p in pids {
        wait_until(&format!("process {p} to be gone"), SECS, || !pid_alive(*p)).unwrap();
    }
}

fn template(agent: &Path) -> String {
    format!("{} {{prompt}}", agent.display())
}

/// The one run the hub has whose prompt is `prompt`.
fn run_with_prompt(hub: &hunkgate_tests::Hub, prompt: &str) -> Value {
    let runs = hub.curl().get("/runs").unwrap().body;
    let hits: Vec<Value> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["prompt"] == prompt)
        .cloned()
        .collect();
    assert_eq!(hits.len(), 1, "{runs}");
    hits[0].clone()
}

#[test]
fn status_runs_and_cancel_show_and_stop_runs() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pids_path = ws.path("pids");
    let agent = crate::runs::sleeper(&ws, &pids_path);
    let changer = ws.agent_script("changer.sh", "echo b > a.txt").unwrap();
    let hub = ws.serve(&[]).unwrap();

    // A finished run with a suggestion to review, and a running one.
    ok(&ws, &["run", "change a", "--agent", &template(&changer)]);
    let sid = run_with_prompt(&hub, "change a")["suggestion_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let run_id = ok(
        &ws,
        &["run", "sleep", "--agent", &template(&agent), "--no-wait"],
    )
    .stdout
    .trim()
    .to_string();
    let pids = wait_pids(&pids_path);

    let o = ok(&ws, &["status"]);
    assert!(
        o.stdout.contains(&format!("hub        {}", hub.url)),
        "{}",
        o.stdout
    );
    let repo = ws.repo().canonicalize().unwrap();
    assert!(
        o.stdout.contains(&format!("repository {}", repo.display())),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("state dir  {}", ws.state().display())),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("version    "), "{}", o.stdout);
    assert!(
        o.stdout.contains("runs: 1 queued or running"),
        "{}",
        o.stdout
    );
    let line = |text: &str, id: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&id[..8]))
            .unwrap_or_else(|| panic!("no line for {id} in:\n{text}"))
            .to_string()
    };
    assert!(line(&o.stdout, &run_id).contains("working"), "{}", o.stdout);
    assert!(
        o.stdout.contains("suggestions with pending hunks: 1"),
        "{}",
        o.stdout
    );
    assert!(
        line(&o.stdout, &sid).contains("1 of 1 hunks pending  change a"),
        "{}",
        o.stdout
    );
    let v: Value = serde_json::from_str(&ok(&ws, &["status", "--json"]).stdout).unwrap();
    assert_eq!(v["url"], hub.url.as_str());
    assert_eq!(v["pending"][0]["id"], sid.as_str());

    let o = ok(&ws, &["runs"]);
    assert!(
        line(&o.stdout, &run_id).contains("working  "),
        "{}",
        o.stdout
    );
    assert!(line(&o.stdout, &run_id).contains("sleep"), "{}", o.stdout);
    assert!(
        line(&o.stdout, &sid_run(&hub, "change a")).contains("ready"),
        "{}",
        o.stdout
    );
    let v: Value = serde_json::from_str(&ok(&ws, &["runs", "--json"]).stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2, "{v}");

    // cancel by a prefix: the agent and its child are gone, the run is cancelled.
    let o = ok(&ws, &["cancel", &run_id[..8]]);
    assert_eq!(o.stdout.trim(), format!("run {run_id} cancelled"));
    assert_gone(&pids);
    assert_eq!(
        hub.curl().get(&format!("/runs/{run_id}")).unwrap().body["status"],
        "cancelled"
    );
    assert!(line(&ok(&ws, &["runs"]).stdout, &run_id).contains("cancelled"));
    let again = cli(&ws, &["cancel", &run_id]);
    assert!(!again.ok);
    assert!(
        again.stderr.contains("already finished"),
        "{}",
        again.stderr
    );
    let unknown = cli(&ws, &["cancel", "zzzz"]);
    assert!(!unknown.ok);
    assert!(
        unknown.stderr.contains("no run \"zzzz\""),
        "{}",
        unknown.stderr
    );

    // Once reviewed, nothing is pending; no run is going.
    ok(&ws, &["accept", &sid]);
    let o = ok(&ws, &["status"]);
    assert!(
        o.stdout.contains("runs: 0 queued or running"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("suggestions with pending hunks: 0"),
        "{}",
        o.stdout
    );
}

fn sid_run(hub: &hunkgate_tests::Hub, prompt: &str) -> String {
    run_with_prompt(hub, prompt)["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The agent's side of `status` is not reachable by mistake: a message without the variables
/// the hub sets is the agent's call and fails naming them, as does `agent-status`; with the
/// variables set and no message it says a message is needed, not show the user's view.
#[test]
fn status_stays_the_agents_command_where_the_agent_could_mean_it() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let _hub = ws.serve(&[]).unwrap();
    for args in [
        &["status", "Running tests"][..],
        &["agent-status", "Running tests"][..],
    ] {
        let mut cmd = Command::new(hunkgate_bin());
        hermetic_env(&mut cmd, &ws.home());
        let out = cmd.current_dir(ws.repo()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("HUNKGATE_URL and HUNKGATE_AGENT_TOKEN are not set"),
            "{args:?}: {err}"
        );
    }
    let o = cli_env(
        &ws,
        &["status"],
        &[
            ("HUNKGATE_URL", "http://127.0.0.1:9"),
            ("HUNKGATE_AGENT_TOKEN", "t"),
        ],
    );
    assert!(!o.ok);
    assert!(o.stderr.contains("give it a MESSAGE"), "{}", o.stderr);
    assert!(!o.stdout.contains("hub "), "{}", o.stdout);
    // Positive control: without them, the user's view.
    assert!(ok(&ws, &["status"]).stdout.starts_with("hub "));
}

/// Off a terminal nobody can answer: Ctrl-C (SIGINT) on `hunkgate run` cancels the run, and the
/// agent is gone.
#[test]
fn ctrl_c_on_run_off_a_terminal_cancels_the_run() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pids_path = ws.path("pids");
    let agent = crate::runs::sleeper(&ws, &pids_path);
    let hub = ws.serve(&[]).unwrap();
    let mut cmd = Command::new(hunkgate_bin());
    hermetic_env(&mut cmd, &ws.home());
    let child = cmd
        .current_dir(ws.repo())
        .env("HUNKGATE_LOG", "warn")
        .args(["run", "sleep", "--agent", &template(&agent), "--state-dir"])
        .arg(ws.state())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pids = wait_pids(&pids_path);
    let run_id = sid_run(&hub, "sleep");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "interrupted: cancelling run {run_id} (no terminal to ask)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("cancelled run {run_id}: it is cancelled now")),
        "{stderr}"
    );
    assert!(stderr.contains("hunkgate runs"), "{stderr}");
    assert_gone(&pids);
    assert_eq!(
        hub.curl().get(&format!("/runs/{run_id}")).unwrap().body["status"],
        "cancelled"
    );
}

/// `hunkgate run` on a terminal (a pty, through util-linux `script`), its output collected as
/// it comes.
struct OnPty {
    child: std::process::Child,
    output: Arc<Mutex<String>>,
}

impl OnPty {
    fn start(ws: &Workspace, args: &[&str]) -> Self {
        let quoted: Vec<String> = std::iter::once(hunkgate_bin().display().to_string())
            .chain(args.iter().map(|a| a.to_string()))
            .chain(["--state-dir".into(), ws.state().display().to_string()])
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
        let mut cmd = Command::new("script");
        hermetic_env(&mut cmd, &ws.home());
        let mut child = cmd
            .current_dir(ws.repo())
            .env("HUNKGATE_LOG", "warn")
            // `exec`: hunkgate alone in the terminal's foreground, as when typed at a prompt.
            .args(["-q", "-f", "-e", "-c", &format!("exec {}", quoted.join(" ")), "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let output = Arc::new(Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, output }
    }

    fn type_in(&mut self, bytes: &[u8]) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn wait_for(&self, text: &str) {
        wait_until(&format!("{text:?} on the terminal"), SECS, || {
            self.output.lock().unwrap().contains(text)
        })
        .unwrap_or_else(|e| panic!("{e}: {}", self.output.lock().unwrap()));
    }

    fn finish(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        // The reader thread ends with the pty.
        wait_until("the output to end", SECS, || {
            Arc::strong_count(&self.output) == 1
        })
        .ok();
        let out = self.output.lock().unwrap().clone();
        (status.code(), out)
    }
}

/// On a terminal Ctrl-C asks: Enter (no) leaves the run running and says how to get back to it;
/// `y` or a second Ctrl-C cancels it and the agent is gone.
#[test]
fn ctrl_c_on_run_on_a_terminal_asks_whether_to_cancel() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pids_path = ws.path("pids");
    let agent = crate::runs::sleeper(&ws, &pids_path);
    let hub = ws.serve(&[]).unwrap();

    // Leave it running.
    let mut term = OnPty::start(&ws, &["run", "first", "--agent", &template(&agent)]);
    let pids = wait_pids(&pids_path);
    term.wait_for("queued");
    let first = sid_run(&hub, "first");
    term.type_in(b"\x03");
    term.wait_for(&format!("cancel run {first}? [y/N]"));
    term.type_in(b"\n");
    let (code, out) = term.finish();
    assert_eq!(code, Some(130), "{out}");
    assert!(
        out.contains(&format!(
            "left run {first} running: `hunkgate runs` shows it, `hunkgate cancel {}` stops it",
            &first[..8]
        )),
        "{out}"
    );
    assert!(pids.iter().all(|p| pid_alive(*p)), "left running: {out}");
    assert_eq!(
        hub.curl().get(&format!("/runs/{first}")).unwrap().body["status"],
        "working"
    );
    ok(&ws, &["cancel", &first[..8]]);
    assert_gone(&pids);

    // Cancel it.
    let mut term = OnPty::start(&ws, &["run", "second", "--agent", &template(&agent)]);
    let pids = wait_pids(&pids_path);
    term.wait_for("queued");
    let second = sid_run(&hub, "second");
    term.type_in(b"\x03");
    term.wait_for(&format!("cancel run {second}? [y/N]"));
    term.type_in(b"y\n");
    let (code, out) = term.finish();
    assert_eq!(code, Some(130), "{out}");
    assert!(
        out.contains(&format!("cancelled run {second}: it is cancelled now")),
        "{out}"
    );
    assert_gone(&pids);
    assert_eq!(
        hub.curl().get(&format!("/runs/{second}")).unwrap().body["status"],
        "cancelled"
    );
    // A second Ctrl-C is a yes.
    let mut term = OnPty::start(&ws, &["run", "third", "--agent", &template(&agent)]);
    let pids = wait_pids(&pids_path);
    term.wait_for("queued");
    let third = sid_run(&hub, "third");
    term.type_in(b"\x03");
    term.wait_for(&format!("cancel run {third}? [y/N]"));
    term.type_in(b"\x03");
    let (code, out) = term.finish();
    assert_eq!(code, Some(130), "{out}");
    assert!(
        out.contains(&format!("cancelled run {third}: it is cancelled now")),
        "{out}"
    );
    assert_gone(&pids);
}

/// A workspace with a two-hunk suggestion (lines 3 and 25 shouted), its id and the text.
fn two_hunks() -> (Workspace, hunkgate_tests::Hub, String, String) {
    let text = numbered(30);
    let ws = Workspace::new(&[("a.txt", text.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' a.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    ok(&ws, &["run", "shout", "--agent", &template(&agent)]);
    let sid = sid_run(&hub, "shout");
    let sid = hub.curl().get(&format!("/runs/{sid}")).unwrap().body["suggestion_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    (ws, hub, sid, text)
}

/// `modify` opens the hunk's new side in `$EDITOR` (a real process editing the file) and
/// applies what was saved; an editor that fails or saves nothing new changes nothing.
#[test]
fn modify_applies_what_the_editor_saved_and_nothing_when_it_fails() {
    let (ws, hub, sid, text) = two_hunks();
    let editor = |name: &str, body: &str| -> String {
        let p = ws.path(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p.display().to_string()
    };
    let failing = editor("fail.sh", "sed -i 's/^LINE 3$/Line three/' \"$1\"; exit 1");
    let unchanged = editor("same.sh", "touch \"$1\"");
    let good = editor("good.sh", "sed -i 's/^LINE 3$/Line three/' \"$1\"");
    let pending = |n: usize| {
        let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
        s["hunks"][n]["state"].clone()
    };

    let o = cli_env(&ws, &["modify", &sid[..8], "1"], &[("EDITOR", &failing)]);
    assert!(!o.ok);
    assert!(o.stderr.contains("exited with"), "{}", o.stderr);
    let o = cli_env(&ws, &["modify", &sid[..8], "1"], &[("EDITOR", &unchanged)]);
    assert!(!o.ok);
    assert!(o.stderr.contains("unchanged"), "{}", o.stderr);
    assert_eq!(ws.read_string("a.txt").unwrap(), text);
    assert_eq!(pending(0), "pending");
    assert!(ws.feedback_log().unwrap().is_empty());

    // Positive control: the same hunk, an editor that saves a change. VISUAL wins over EDITOR.
    let o = cli_env(
        &ws,
        &["modify", &sid[..8], "1", "--comment", "not so loud"],
        &[("VISUAL", &good), ("EDITOR", &failing)],
    );
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.starts_with("modified  "), "{}", o.stdout);
    let after = text.replace("line 3\n", "Line three\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), after);
    assert_eq!(pending(0), "modified");
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["outcome"], "modified");
    assert_eq!(log[0]["comment"], "not so loud");

    // `--diff FILE`: the user's own diff for hunk 2, no editor.
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let diff = s["hunks"][1]["diff"]
        .as_str()
        .unwrap()
        .replace("+LINE 25\n", "+line twenty-five\n");
    std::fs::write(ws.path("mine.diff"), &diff).unwrap();
    let mine = ws.path("mine.diff").display().to_string();
    let o = cli_env(
        &ws,
        &["modify", &sid[..8], "2", "--diff", &mine],
        &[("EDITOR", &failing)],
    );
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        after.replace("line 25\n", "line twenty-five\n")
    );
    assert_eq!(pending(1), "modified");
}

/// A reject comment typed on the command line reaches the feedback log and the next run of the
/// session (the built-in agent's context).
#[tokio::test]
async fn a_reject_comment_reaches_the_feedback_log_and_the_sessions_next_run() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = greeting_model().await;
    let hub = ws.serve(&["--provider-url", &fake.base_url()]).unwrap();
    let session = hub
        .curl()
        .post("/sessions", &json!({"title": "greet"}))
        .unwrap();
    assert_eq!(session.status, 200, "{}", session.body);
    let session = session.body["session_id"].as_str().unwrap().to_string();

    ok(
        &ws,
        &["run", "greet", "--model", "m1", "--session", &session],
    );
    let sid = hub
        .curl()
        .get(&format!("/runs/{}", sid_run(&hub, "greet")))
        .unwrap()
        .body["suggestion_ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    ok(
        &ws,
        &["reject", &sid[..8], "1", "--comment", "say it quietly"],
    );
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["outcome"], "rejected");
    assert_eq!(log[0]["comment"], "say it quietly");

    let before = fake.requests().len();
    ok(
        &ws,
        &["run", "again", "--model", "m1", "--session", &session],
    );
    let second = context_of(&fake.requests()[before]);
    assert!(
        second.contains("rejected — comment: say it quietly"),
        "{second}"
    );
    // Positive control: the first run had no such context.
    assert!(!context_of(&fake.requests()[0]).contains("say it quietly"));
}

/// `hunkgate run` says which session its run is in, and `--session last` goes on in the
/// newest run's session: the agent of the next run sees what the reviewer did with the first.
#[tokio::test]
async fn session_last_continues_the_newest_runs_session() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = greeting_model().await;
    let hub = ws.serve(&["--provider-url", &fake.base_url()]).unwrap();
    // No run yet: nothing to continue, and a clear error.
    let none = cli(&ws, &["run", "greet", "--model", "m1", "--session", "last"]);
    assert!(!none.ok);
    assert!(
        none.stderr.contains("there is no run yet"),
        "{}",
        none.stderr
    );

    let first = ok(&ws, &["run", "greet", "--model", "m1"]);
    let run1 = hub
        .curl()
        .get(&format!("/runs/{}", sid_run(&hub, "greet")))
        .unwrap()
        .body;
    let session = run1["session_id"].as_str().unwrap().to_string();
    assert!(
        first
            .stderr
            .contains(&format!("queued in session {session}")),
        "{}",
        first.stderr
    );
    let sid = run1["suggestion_ids"][0].as_str().unwrap().to_string();
    ok(
        &ws,
        &["reject", &sid[..8], "1", "--comment", "say it quietly"],
    );

    // The session's next run, by `last`: the agent sees the reviewer's comment.
    let before = fake.requests().len();
    ok(&ws, &["run", "again", "--model", "m1", "--session", "last"]);
    let again = hub
        .curl()
        .get(&format!("/runs/{}", sid_run(&hub, "again")))
        .unwrap()
        .body;
    assert_eq!(again["session_id"].as_str(), Some(session.as_str()));
    let second = context_of(&fake.requests()[before]);
    assert!(
        second.contains("rejected — comment: say it quietly"),
        "{second}"
    );
    // The control: a run without --session has a session of its own, and no such context.
    let before = fake.requests().len();
    ok(&ws, &["run", "other", "--model", "m1"]);
    let other = hub
        .curl()
        .get(&format!("/runs/{}", sid_run(&hub, "other")))
        .unwrap()
        .body;
    assert_ne!(other["session_id"].as_str(), Some(session.as_str()));
    let fresh = context_of(&fake.requests()[before]);
    assert!(!fresh.contains("say it quietly"), "{fresh}");
}

/// A model that writes hello.txt in its first turn and then finishes, each run.
async fn greeting_model() -> hunkgate_tests::fake_llm::FakeLlm {
    use hunkgate_tests::fake_llm::{FakeLlm, Recorded, Reply};
    FakeLlm::with(|req: &Recorded| match req.tool_results().len() {
        0 => Reply::tool(
            "write_file",
            json!({"file_path": "hello.txt", "content": "HELLO\n"}),
        ),
        _ => Reply::tool("finish", json!({"description": "Add a greeting"})),
    })
    .await
}

/// The text of every message a model request carried.
fn context_of(req: &hunkgate_tests::fake_llm::Recorded) -> String {
    req.messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect::<Vec<_>>()
        .join("\n")
}

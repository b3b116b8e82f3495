//! Agent runs: failures with the stderr tail, no changes, timeout and cancel killing the whole
//! process group, the prompt as exactly one argument, the agent-driven flow (`hunkgate status` /
//! `hunkgate publish` from inside the run), and what of the user's checkout the sandbox holds.

use std::time::{Duration, Instant};

use hunkgate_tests::{
    hunkgate_bin, pid_alive, run_agent, wait_for, wait_run_finished, Workspace, Ws,
};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(30);
const SECS5: Duration = Duration::from_secs(5);

fn template(agent: &std::path::Path) -> String {
    format!("{} {{prompt}}", agent.display())
}

async fn run_error(c: &mut Ws, run_id: &str) -> Value {
    c.event("suggestion.error", |v| v["run_id"] == run_id, SECS)
        .await
        .unwrap()
}

/// The `suggestion.ready` of a suggestion of `run_id`.
async fn ready_of(c: &mut Ws, run_id: &str) -> Value {
    c.event(
        "suggestion.ready",
        |v| v["suggestion"]["run_id"] == run_id,
        SECS,
    )
    .await
    .unwrap()
}

/// Run `agent` through `POST /runs` (over a WebSocket), wait until the run is `ready`, and
/// return its first suggestion as `GET /suggestions/<id>` has it.
async fn run_to_suggestion(
    hub: &hunkgate_tests::Hub,
    prompt: &str,
    agent: &std::path::Path,
) -> Value {
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run(prompt, &template(agent), None).await.unwrap();
    let r = wait_run_finished(hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    let sid = r["suggestion_ids"][0].as_str().unwrap();
    hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body
}

fn all_suggestions(hub: &hunkgate_tests::Hub) -> Vec<Value> {
    hub.curl().get("/suggestions?all=true").unwrap().body["suggestions"]
        .as_array()
        .unwrap()
        .clone()
}

/// An agent killed by a signal is reported as killed by that signal: the word travels from the
/// agent through its namespace's init and group leader (each the hub's program, exec'd) to the
/// hub, and an exit code is not mistaken for one (the control).
#[tokio::test]
async fn an_agent_killed_by_a_signal_is_reported_as_such() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    for (name, body, says) in [
        (
            "kill.sh",
            "echo changed > a.txt\nkill -s USR1 $$",
            "killed by signal 10",
        ),
        (
            "code.sh",
            "echo changed > a.txt\nexit 10",
            "exited with status 10",
        ),
    ] {
        let agent = ws.agent_script(name, body).unwrap();
        let run = c.start_run(name, &template(&agent), None).await.unwrap();
        let ev = run_error(&mut c, &run).await;
        let msg = ev["message"].as_str().unwrap();
        assert!(msg.contains(says), "{name}: {msg}");
        let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
        assert_eq!(r["status"], "failed", "{r}");
    }
    assert_eq!(ws.read("a.txt").unwrap(), b"a\n");
}

#[tokio::test]
async fn a_failing_agent_is_reported_with_its_stderr_tail() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "echo 'on stdout'\necho 'first problem' >&2\necho changed > a.txt\necho 'boom: the detail' >&2\nexit 3",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("fail", &template(&agent), None).await.unwrap();
    let ev = run_error(&mut c, &run).await;
    assert_eq!(ev["code"], "experiment_failed");
    let msg = ev["message"].as_str().unwrap();
    assert!(msg.contains("exited with status 3"), "{msg}");
    assert!(
        msg.ends_with("first problem\nboom: the detail"),
        "the message ends with the stderr tail: {msg:?}"
    );
    assert!(!msg.contains("on stdout"), "{msg}");
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"], msg);
    assert_eq!(r["suggestion_ids"], json!([]));
    assert!(
        all_suggestions(&hub).is_empty(),
        "a failed run publishes nothing"
    );
    assert_eq!(ws.read("a.txt").unwrap(), b"a\n");

    // An agent that cannot even start.
    let run = c
        .start_run("nope", "/nonexistent/agent {prompt}", None)
        .await
        .unwrap();
    let ev = run_error(&mut c, &run).await;
    assert_eq!(ev["code"], "experiment_failed");
    assert!(
        ev["message"]
            .as_str()
            .unwrap()
            .contains("could not be started"),
        "{ev}"
    );
    // A template that cannot be split is refused up front.
    let r = c
        .call(json!({"type": "run", "prompt": "p", "agent": "sh -c 'unterminated"}))
        .await
        .unwrap();
    assert_eq!(r["code"], "bad_request", "{r}");
}

#[tokio::test]
async fn an_agent_that_changes_nothing_leaves_no_suggestion() {
    let ws = Workspace::new(&[("a.txt", b"a\n"), (".gitignore", b"build/\n")]).unwrap();
    // It reads, rewrites a file with the same bytes, and writes only ignored files.
    let idle = ws
        .agent_script(
            "idle.sh",
            "cat a.txt > /dev/null\nprintf 'a\\n' > a.txt\nmkdir -p build && echo obj > build/x.o",
        )
        .unwrap();
    let busy = ws.agent_script("busy.sh", "echo b > a.txt").unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("idle", &template(&idle), None).await.unwrap();
    let ev = c
        .event(
            "suggestion.status",
            |v| v["run_id"] == run.as_str() && v["status"] == "no_changes",
            SECS,
        )
        .await
        .unwrap();
    assert!(ev.get("suggestion_id").is_none(), "{ev}");
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "no_changes");
    assert_eq!(r["suggestion_ids"], json!([]));
    assert!(all_suggestions(&hub).is_empty());
    // Positive control: a run that does change something gives a suggestion.
    let s = run_agent(&hub, &mut c, &busy, "busy").await.unwrap();
    assert_eq!(s["files"], json!(["a.txt"]));
    assert_eq!(all_suggestions(&hub).len(), 1);
}

/// A client that reacts to `suggestion.ready` or to the run's `ready` status by reading the run
/// (as `hunkgate run` does) finds the run already `ready` and holding the suggestion: the hub
/// records both before it says so. The hub is held just after sending `suggestion.ready`, so
/// the read cannot win a race it would otherwise only rarely win.
#[tokio::test]
async fn a_run_read_on_its_ready_events_is_already_ready() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws.agent_script("agent.sh", "echo edited > a.txt").unwrap();
    let (hub, pauses) = ws.serve_pausable().unwrap();
    let mut c = hub.ws().await.unwrap();
    let pause = hunkgate_tests::Pause::arm(&pauses, "suggestion-ready");
    let run = c.start_run("edit", &template(&agent), None).await.unwrap();
    let ready = ready_of(&mut c, &run).await;
    pause.reached();
    let r = hub.curl().get(&format!("/runs/{run}")).unwrap().body;
    assert_eq!(r["status"], "ready", "read on suggestion.ready: {r}");
    assert_eq!(
        r["suggestion_ids"],
        json!([ready["suggestion"]["id"]]),
        "{r}"
    );
    pause.release();
    let st = c
        .event(
            "suggestion.status",
            |v| v["run_id"] == run.as_str() && v["status"] == "ready",
            SECS,
        )
        .await
        .unwrap();
    assert_eq!(st["suggestion_id"], ready["suggestion"]["id"], "{st}");
    let r = hub.curl().get(&format!("/runs/{run}")).unwrap().body;
    assert_eq!(r["status"], "ready", "read on the ready status: {r}");
}

/// An agent that starts a background child, records both pids, and sleeps. The agent may run
/// in a PID namespace of its own, where `$$` and `$!` are not the pids the test sees: each
/// process reads its own from `/proc/self/stat` (the machine's `/proc`), before `exec`. A second
/// run in the same workspace must not read the first run's (dead) child from a stale `.bg` file.
/// An agent that records its pid and its background child's in `pids` (host pids, from
/// `/proc/self/stat`: the agent's PID namespace has its own `$$`), then sleeps.
pub(crate) fn sleeper(ws: &Workspace, pids: &std::path::Path) -> std::path::PathBuf {
    ws.agent_script(
        "sleeper.sh",
        &format!(
            "rm -f {p}.bg\nsh -c 'read -r me _ < /proc/self/stat; echo $me > {p}.bg; exec sleep 300' &\nwhile [ ! -s {p}.bg ]; do sleep 0.01; done\nread -r me _ < /proc/self/stat\ncat {p}.bg > {p}.tmp\necho $me >> {p}.tmp\nmv {p}.tmp {p}\nsleep 300",
            p = pids.display()
        ),
    )
    .unwrap()
}

async fn wait_pids(pids: &std::path::Path) -> Vec<u32> {
    wait_for("the agent to start", SECS, || pids.exists())
        .await
        .unwrap();
    let pids: Vec<u32> = std::fs::read_to_string(pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| pid_alive(*p)), "positive control");
    pids
}

async fn assert_gone(pids: &[u32]) {
    for p in pids {
        wait_for(&format!("process {p} to be gone"), SECS5, || !pid_alive(*p))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_timeout_kills_the_agent_and_everything_it_started() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pids = ws.path("pids");
    let agent = sleeper(&ws, &pids);
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let started = Instant::now();
    let run = c
        .start_run("sleep", &template(&agent), Some(1))
        .await
        .unwrap();
    let pids = wait_pids(&pids).await;
    let ev = run_error(&mut c, &run).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ev["code"], "experiment_failed");
    assert!(
        ev["message"].as_str().unwrap().contains("timed out"),
        "{ev}"
    );
    assert_gone(&pids).await;
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "failed");
}

#[tokio::test]
async fn cancel_kills_the_agent_and_everything_it_started() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pids_path = ws.path("pids");
    let agent = sleeper(&ws, &pids_path);
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();

    // Over WebSocket.
    let run = c.start_run("sleep", &template(&agent), None).await.unwrap();
    let pids = wait_pids(&pids_path).await;
    let r = c
        .call(json!({"type": "cancel", "runId": run}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["run_id"], run.as_str());
    let ev = run_error(&mut c, &run).await;
    assert_eq!(ev["code"], "experiment_failed");
    assert!(
        ev["message"].as_str().unwrap().contains("cancelled"),
        "{ev}"
    );
    assert_gone(&pids).await;
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "cancelled");
    // A finished run cannot be cancelled again; an unknown one is not found.
    let r = c
        .call(json!({"type": "cancel", "runId": run}))
        .await
        .unwrap();
    assert_eq!(r["code"], "finished", "{r}");
    let r = c
        .call(json!({"type": "cancel", "runId": "no-such-run"}))
        .await
        .unwrap();
    assert_eq!(r["code"], "not_found", "{r}");

    // Over REST.
    std::fs::remove_file(&pids_path).unwrap();
    let run = c.start_run("sleep", &template(&agent), None).await.unwrap();
    let pids = wait_pids(&pids_path).await;
    let r = hub
        .curl()
        .post(&format!("/runs/{run}/cancel"), &json!({}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["cancelling"], true);
    assert_gone(&pids).await;
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "cancelled");
    assert!(all_suggestions(&hub).is_empty());
}

#[tokio::test]
async fn the_prompt_is_exactly_one_argument_and_in_the_environment() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let pwned = ws.path("pwned");
    let prompt = format!(
        "it's a \"quoted\" prompt; $(touch {p}) `touch {p}` $HOME ${{PATH}} *\nsecond line\n\ttabbed 'single' \\ back",
        p = pwned.display()
    );
    let out = |name: &str| ws.path(name);
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "printf '%s' \"$#\" > {argc}\nprintf '%s' \"$1\" > {arg1}\nprintf '%s' \"$HUNKGATE_PROMPT\" > {env}",
                argc = out("argc").display(),
                arg1 = out("arg1").display(),
                env = out("envprompt").display(),
            ),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run(&prompt, &template(&agent), None).await.unwrap();
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "no_changes", "{r}");
    assert_eq!(r["prompt"], prompt.as_str());
    assert_eq!(std::fs::read_to_string(out("argc")).unwrap(), "1");
    assert_eq!(std::fs::read_to_string(out("arg1")).unwrap(), prompt);
    assert_eq!(std::fs::read_to_string(out("envprompt")).unwrap(), prompt);

    // A template that is itself a shell script gets the prompt quoted inside it.
    let sh = format!(
        "sh -c 'printf %s {{prompt}} > {}'",
        out("shprompt").display()
    );
    let run = c.start_run(&prompt, &sh, None).await.unwrap();
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "no_changes", "{r}");
    assert_eq!(std::fs::read_to_string(out("shprompt")).unwrap(), prompt);
    assert!(!pwned.exists(), "the prompt was executed");

    // Every position a shell script can put {prompt} in: inside double quotes, after `--`,
    // behind `env`, inside single quotes of a double-quoted script.
    let target = out("shprompt2");
    let t = target.display();
    for sh in [
        format!("sh -c 'printf %s \"{{prompt}}\" > {t}'"),
        format!("sh -c -- 'printf %s {{prompt}} > {t}'"),
        format!("env sh -c 'printf %s \"{{prompt}}\" > {t}'"),
        format!("sh -c \"printf %s '{{prompt}}' > {t}\""),
    ] {
        let _ = std::fs::remove_file(&target);
        let run = c.start_run(&prompt, &sh, None).await.unwrap();
        let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
        assert_eq!(r["status"], "no_changes", "{sh}: {r}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), prompt, "{sh}");
        assert!(!pwned.exists(), "{sh} executed the prompt");
    }
    // Code of another language with the prompt inside is refused at start, naming the fix.
    let r = c
        .call(json!({"type": "run", "prompt": prompt, "agent": "python3 -c 'print(\"{prompt}\")'"}))
        .await
        .unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("HUNKGATE_PROMPT"),
        "{r}"
    );
}

#[tokio::test]
async fn the_agent_reports_status_and_publishes_its_own_suggestion() {
    let ws = Workspace::new(&[("src/a.txt", b"a\n"), ("other.txt", b"other\n")]).unwrap();
    let bin = hunkgate_bin();
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "echo changed > src/a.txt\n\
                 echo changed too > other.txt\n\
                 {bin} status 'Running tests'\n\
                 {bin} status --state testing 'Still testing'\n\
                 {bin} agent-status 'Checked'\n\
                 {bin} publish -m 'Tidy src' --files 'src/*'\n\
                 echo after publishing > src/late.txt",
                bin = bin.display()
            ),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("tidy", &template(&agent), None).await.unwrap();
    let st = c
        .event(
            "suggestion.status",
            |v| v["run_id"] == run.as_str() && v["message"] == "Running tests",
            SECS,
        )
        .await
        .unwrap();
    assert_eq!(st["status"], "working");
    let st = c
        .event(
            "suggestion.status",
            |v| v["run_id"] == run.as_str() && v["message"] == "Still testing",
            SECS,
        )
        .await
        .unwrap();
    assert_eq!(st["status"], "testing");
    // `agent-status` is the same command under its agent-only name.
    let st = c
        .event(
            "suggestion.status",
            |v| v["run_id"] == run.as_str() && v["message"] == "Checked",
            SECS,
        )
        .await
        .unwrap();
    assert_eq!(st["status"], "working");
    let ready = ready_of(&mut c, &run).await;
    let s = &ready["suggestion"];
    assert_eq!(s["description"], "Tidy src");
    assert_eq!(
        s["files"],
        json!(["src/a.txt"]),
        "only files matching --files"
    );
    assert_eq!(s["hunk_count"], 1);

    // When the agent exits, the hub does not publish a second suggestion.
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    assert_eq!(r["suggestion_ids"], json!([s["id"]]));
    let done = c
        .event(
            "suggestion.status",
            |v| {
                v["run_id"] == run.as_str()
                    && v["status"] == "ready"
                    && v.get("suggestion_id").is_none()
            },
            SECS,
        )
        .await
        .unwrap();
    assert!(
        done["message"]
            .as_str()
            .unwrap()
            .contains("published 1 suggestion"),
        "{done}"
    );
    let all = all_suggestions(&hub);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(!c
        .seen
        .iter()
        .any(|v| v["type"] == "suggestion.ready" && v["suggestion"]["id"] != s["id"]));
    // The published snapshot is the sandbox at that moment.
    let commit = s["run_commit"].as_str().unwrap();
    let names = ws
        .checkpoint_git(&["ls-tree", "-r", "--name-only", commit])
        .unwrap();
    assert_eq!(
        String::from_utf8(names).unwrap(),
        "other.txt\nsrc/a.txt\n",
        "src/late.txt came after the publish"
    );
    // `publish` outside a run is an error a person can read.
    let out = ws.cli(&["publish", "-m", "x"]).unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HUNKGATE_AGENT_TOKEN"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_sandbox_holds_the_checkout_as_the_user_sees_it() {
    let ws = Workspace::new(&[
        ("tracked.txt", b"committed\n"),
        ("gone.txt", b"deleted by the user\n"),
        (".gitignore", b"build/\n*.log\n"),
    ])
    .unwrap();
    ws.write("tracked.txt", b"uncommitted edit\n").unwrap();
    ws.write("untracked.txt", b"untracked\n").unwrap();
    ws.write("staged.txt", b"staged\n").unwrap();
    ws.git(&["add", "staged.txt"]).unwrap();
    ws.write("build/out.o", b"ignored object\n").unwrap();
    ws.write("debug.log", b"ignored log\n").unwrap();
    std::fs::remove_file(ws.repo().join("gone.txt")).unwrap();
    let seen = ws.path("seen");
    let kept = ws.path("kept");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "case \"$1\" in\n\
                 first)\n\
                   ls -A | grep -vx .git > {seen}\n\
                   cat tracked.txt untracked.txt staged.txt >> {seen}\n\
                   test -e build/out.o && echo 'user build/out.o' >> {seen} || true\n\
                   test -e debug.log && echo 'user debug.log' >> {seen} || true\n\
                   mkdir -p build && echo cache > build/cache.o ;;\n\
                 second)\n\
                   (test -e build && echo kept || echo gone) > {kept} ;;\n\
                 esac",
                seen = seen.display(),
                kept = kept.display()
            ),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c.start_run("first", &template(&agent), None).await.unwrap();
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(
        r["status"], "no_changes",
        "ignored files are not changes: {r}"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        ".gitignore\nstaged.txt\ntracked.txt\nuntracked.txt\n\
         uncommitted edit\nuntracked\nstaged\n"
    );
    let base = r["base_commit"].as_str().unwrap();
    let names = ws
        .checkpoint_git(&["ls-tree", "-r", "--name-only", base])
        .unwrap();
    assert_eq!(
        String::from_utf8(names).unwrap(),
        ".gitignore\nstaged.txt\ntracked.txt\nuntracked.txt\n"
    );
    assert_eq!(
        ws.checkpoint_git(&["show", &format!("{base}:tracked.txt")])
            .unwrap(),
        b"uncommitted edit\n"
    );
    // Between runs the slot holds exactly the base: the first run's build cache, ignored or
    // not, is gone by the second (its agent made it: the script stops at any failure).
    let run = c
        .start_run("second", &template(&agent), None)
        .await
        .unwrap();
    let r = wait_run_finished(&hub, &run, SECS).await.unwrap();
    assert_eq!(r["status"], "no_changes", "{r}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "gone\n");
    // And nothing of this touched the user's checkout.
    assert_eq!(ws.read("build/out.o").unwrap(), b"ignored object\n");
    assert!(!ws.exists("build/cache.o"));
    assert!(!ws.exists("gone.txt"));
}

/// Test hubs state the isolation they run under, so the suite behaves the same on a machine
/// where `hunkgate setup` created the sandbox user (where `serve` alone would pick `user`).
#[test]
fn test_hubs_state_their_isolation() {
    use hunkgate_tests::{isolation_args, MACHINE_DEFAULT_ISOLATION};
    assert_eq!(isolation_args(&[]), vec!["--isolation", "none"]);
    assert!(isolation_args(&["--isolation", "user"]).is_empty());
    assert!(isolation_args(&[MACHINE_DEFAULT_ISOLATION]).is_empty());
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    // A sandbox user that does exist on every machine: without an explicit choice, `serve`
    // would try to use it.
    let hub = ws.serve(&["--sandbox-user", "root"]).unwrap();
    let log = hub.log_text();
    assert!(
        log.contains("WARNING: --isolation none"),
        "the harness chose no isolation explicitly: {log}"
    );
    drop(hub);
    // Positive control: left to the machine, `serve` does pick up the existing user (and
    // refuses it: root is no sandbox user), so the explicit flag above is what made the
    // difference.
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let err = ws
        .serve(&[MACHINE_DEFAULT_ISOLATION, "--sandbox-user", "root"])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("--isolation user"), "{err}");
}

/// `--max-runs 1`: one agent at a time; the others are `queued` (in GET /runs and as a
/// `suggestion.status` event), start in the order they were posted as the slot frees, and a
/// queued run can be cancelled without ever starting.
#[tokio::test]
async fn runs_beyond_the_limit_wait_queued_and_start_in_order() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let order = ws.path("order");
    let go = ws.path("go");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "echo \"$HUNKGATE_PROMPT\" >> {order}\n\
                 while [ ! -e {go}-\"$HUNKGATE_PROMPT\" ]; do sleep 0.05; done\n\
                 echo \"$HUNKGATE_PROMPT\" > \"out-$HUNKGATE_PROMPT.txt\"",
                order = order.display(),
                go = go.display()
            ),
        )
        .unwrap();
    let hub = ws.serve(&["--max-runs", "1"]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let mut runs = Vec::new();
    for p in ["one", "two", "three"] {
        runs.push(c.start_run(p, &template(&agent), None).await.unwrap());
    }
    let read_order = || std::fs::read_to_string(&order).unwrap_or_default();
    wait_for("the first run to start", SECS, || read_order() == "one\n")
        .await
        .unwrap();
    let status = |id: &str| {
        hub.curl().get(&format!("/runs/{id}")).unwrap().body["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(status(&runs[0]), "working");
    assert_eq!(status(&runs[1]), "queued");
    assert_eq!(status(&runs[2]), "queued");
    let queued = c
        .event(
            "suggestion.status",
            |v| v["run_id"] == runs[1].as_str() && v["status"] == "queued",
            SECS5,
        )
        .await
        .unwrap();
    assert!(
        queued["message"]
            .as_str()
            .unwrap()
            .contains("waiting for a free slot"),
        "{queued}"
    );
    // Still only one agent, a while later.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read_order(), "one\n", "a second agent started");

    // A queued run is cancelled without ever starting.
    let r = hub
        .curl()
        .post(&format!("/runs/{}/cancel", runs[1]), &json!({}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = wait_run_finished(&hub, &runs[1], SECS).await.unwrap();
    assert_eq!(r["status"], "cancelled", "{r}");

    // The slot frees: the next one in line (three) starts.
    std::fs::write(format!("{}-one", go.display()), "").unwrap();
    let r = wait_run_finished(&hub, &runs[0], SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    wait_for("the third run to start", SECS, || {
        read_order() == "one\nthree\n"
    })
    .await
    .unwrap();
    std::fs::write(format!("{}-three", go.display()), "").unwrap();
    let r = wait_run_finished(&hub, &runs[2], SECS).await.unwrap();
    assert_eq!(r["status"], "ready", "{r}");
    assert_eq!(
        read_order(),
        "one\nthree\n",
        "the cancelled run never started"
    );
}

/// An agent's output log in the state dir keeps its head and its tail and says what it dropped
/// in between, however much the agent prints.
#[tokio::test]
async fn the_agent_log_is_capped_keeping_head_and_tail() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "echo FIRST-LINE\n\
             head -c 40000000 /dev/zero | tr '\\0' x | fold -w 1000\n\
             echo\n\
             echo LAST-LINE",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run = c
        .start_run("talk", &template(&agent), Some(120))
        .await
        .unwrap();
    let r = wait_run_finished(&hub, &run, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(r["status"], "no_changes", "{r}");
    let log = std::fs::read_to_string(hub.state.join("runs").join(format!("{run}.log"))).unwrap();
    assert!(
        log.len() < 3 * 1024 * 1024,
        "the log is {} bytes for 40 MB of output",
        log.len()
    );
    assert!(log.starts_with("out FIRST-LINE\n"), "{}", &log[..100]);
    assert!(
        log.ends_with("out LAST-LINE\n"),
        "{}",
        &log[log.len() - 100..]
    );
    assert!(
        log.contains("of agent output dropped here"),
        "no word of what was dropped"
    );
}

/// Hunk descriptions are capped per hunk and per suggestion: one long description for a file
/// lands on each of its hunks, but the suggestion stays small and says what it cut.
#[tokio::test]
async fn hunk_descriptions_are_capped_per_hunk_and_in_total() {
    let text = hunkgate_tests::numbered(400);
    let ws = Workspace::new(&[("a.txt", text.as_bytes())]).unwrap();
    let body = ws.path("publish.json");
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "sed -i 's/^line \\([0-9]*0\\)$/LINE \\1/' a.txt\n\
                 desc=$(head -c 20000 /dev/zero | tr '\\0' d)\n\
                 notes=''\n\
                 for i in 1 2 3 4 5 6 7 8 9 10; do notes=\"$notes{{\\\"file\\\":\\\"a.txt\\\",\\\"description\\\":\\\"$i$desc\\\"}},\"; done\n\
                 printf '{{\"description\":\"many\",\"hunk_descriptions\":[%s{{\"file\":\"a.txt\",\"description\":\"short\"}}]}}' \"$notes\" > {body}\n\
                 curl -sS -f -H \"Authorization: Bearer $HUNKGATE_AGENT_TOKEN\" -H 'Content-Type: application/json' --data-binary @{body} \"$HUNKGATE_URL/agent/publish\"",
                body = body.display()
            ),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let s = run_to_suggestion(&hub, "many", &agent).await;
    let hunks = s["hunks"].as_array().unwrap();
    assert!(hunks.len() >= 20, "{}", hunks.len());
    let descs: Vec<&str> = hunks
        .iter()
        .map(|h| h["description"].as_str().unwrap_or(""))
        .collect();
    // Positive control: the first hunk got the agent's words.
    assert!(descs[0].starts_with("1ddd"), "{}", &descs[0][..20]);
    assert!(
        descs[0].contains("[hunkgate: description cut at"),
        "{}",
        &descs[0][descs[0].len() - 100..]
    );
    for d in &descs {
        assert!(d.chars().count() < 4200, "{}", d.len());
    }
    let total: usize = descs.iter().map(|d| d.len()).sum();
    assert!(total < 80 * 1024, "descriptions total {total} bytes");
    assert!(
        descs
            .last()
            .unwrap()
            .contains("[hunkgate: description dropped"),
        "{}",
        descs.last().unwrap()
    );
    let size = s.to_string().len();
    assert!(size < 512 * 1024, "the suggestion is {size} bytes");
}

/// Files the sandbox-sync scenario starts from (every one 11 bytes, so a same-size edit fits).
pub(crate) const SYNC_FILES: &[&str] = &[
    "keep.txt",
    "same.txt",
    "edit.txt",
    "mode.txt",
    "gone.txt",
    "tolink.txt",
    "todir.txt",
    "user.txt",
];

/// The agent of [`sandbox_sync_sees_every_change`]: `dirty` leaves edits and a stray file in
/// the slot; `changes` writes what it finds to `<out>/seen`, then makes one change of each
/// kind — among them a same-size edit whose mtime it puts back (`touch -r`), which only ctime
/// (or the racy rule) can reveal.
pub(crate) fn sync_agent_body(out: &std::path::Path) -> String {
    format!(
        r#"
case "$HUNKGATE_PROMPT" in
dirty)
  for f in {files}; do echo dirt >> "$f"; done
  echo stray > stray.txt ;;
changes)
  for f in {files}; do printf '%s:' "$f"; cat "$f"; done > {out}/seen
  if test -e stray.txt; then echo stray-left >> {out}/seen; fi
  touch -r same.txt .ref
  printf 'abcdefghij\n' > same.txt
  touch -r .ref same.txt
  rm .ref
  echo more >> edit.txt
  chmod +x mode.txt
  rm gone.txt
  rm tolink.txt && ln -s keep.txt tolink.txt
  rm todir.txt && mkdir todir.txt && echo inner > todir.txt/inner
  echo new > new.txt ;;
esac"#,
        files = SYNC_FILES.join(" "),
        out = out.display()
    )
}

/// Start a run of `agent` with `prompt` and wait until it is neither queued nor working.
pub(crate) fn start_and_wait(
    hub: &hunkgate_tests::Hub,
    prompt: &str,
    agent: &std::path::Path,
) -> Value {
    let r = hub
        .curl()
        .post(
            "/runs",
            &json!({"prompt": prompt, "agent": agent.display().to_string()}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "POST /runs: {}", r.body);
    let id = r.body["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let r = hub.curl().get(&format!("/runs/{id}")).unwrap();
        if !matches!(r.body["status"].as_str(), Some("queued" | "working") | None) {
            return r.body;
        }
        assert!(Instant::now() < deadline, "run {id}: {}", r.body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two runs in the same sandbox slot (the hub must run with `--max-runs 1`): the second starts
/// from exactly the new base — the first run's edits and stray file gone, the user's same-size
/// edit with its mtime put back present — and every kind of change its agent makes is in the
/// suggestion. `agent` runs [`sync_agent_body`]; `write` writes a file of the user's checkout.
pub(crate) fn sandbox_sync_sees_every_change(
    hub: &hunkgate_tests::Hub,
    agent: &std::path::Path,
    out: &std::path::Path,
    write: impl Fn(&str, &[u8]),
    checkout: &std::path::Path,
) {
    for f in SYNC_FILES {
        write(f, b"0123456789\n");
    }
    let r = start_and_wait(hub, "dirty", agent);
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    // The user edits user.txt keeping its size, and puts its mtime back.
    let user = checkout.join("user.txt");
    let mtime = std::fs::metadata(&user).unwrap().modified().unwrap();
    write("user.txt", b"USER-EDIT!\n");
    std::fs::File::options()
        .append(true)
        .open(&user)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let r = start_and_wait(hub, "changes", agent);
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    let expected_seen: String = SYNC_FILES
        .iter()
        .map(|f| {
            let body = if *f == "user.txt" {
                "USER-EDIT!\n"
            } else {
                "0123456789\n"
            };
            format!("{f}:{body}")
        })
        .collect();
    assert_eq!(
        std::fs::read_to_string(out.join("seen")).unwrap(),
        expected_seen,
        "the second run's sandbox holds exactly the new base"
    );
    let sid = r["suggestion_ids"][0].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let mut files: Vec<String> = s["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    files.sort();
    assert_eq!(
        files,
        vec![
            "edit.txt",
            "gone.txt",
            "mode.txt",
            "new.txt",
            "same.txt",
            "todir.txt",
            "todir.txt/inner",
            "tolink.txt"
        ],
        "{s}"
    );
    let diffs = s["hunks"].to_string();
    assert!(diffs.contains("+abcdefghij"), "the back-dated edit: {s}");
}

/// A hard link the agent makes from a sandbox file to a path outside the slot does not let a
/// later write through it reach the slot: run one links `linked.txt` out, run two writes
/// through the link, run three finds the base's `linked.txt` and its edit's hunk carries none
/// of run two's line. Control: the link was made, and the write through it landed in it.
#[test]
fn a_write_through_a_hard_link_to_outside_reaches_no_later_sandbox() {
    let ws = Workspace::new(&[("linked.txt", b"base\n"), ("README", b"r\n")]).unwrap();
    let out = ws.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let agent = ws
        .agent_script(
            "link.sh",
            &format!(
                r#"case "$HUNKGATE_PROMPT" in
one) ln linked.txt {out}/link; echo one >> README ;;
two) echo planted >> {out}/link; echo two >> README ;;
three) cat linked.txt > {out}/seen; echo three >> linked.txt ;;
esac"#,
                out = out.display()
            ),
        )
        .unwrap();
    let hub = ws
        .serve(&["--isolation", "none", "--max-runs", "1"])
        .unwrap();
    for prompt in ["one", "two"] {
        let r = start_and_wait(&hub, prompt, &agent);
        assert_eq!(r["status"], "ready", "{prompt}: {r}\n{}", hub.log_text());
    }
    assert_eq!(
        std::fs::read_to_string(out.join("link")).unwrap(),
        "base\nplanted\n",
        "the link was made and written through"
    );
    let r = start_and_wait(&hub, "three", &agent);
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    assert_eq!(std::fs::read_to_string(out.join("seen")).unwrap(), "base\n");
    let sid = r["suggestion_ids"][0].as_str().unwrap();
    let sug = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let hunks = sug["hunks"].to_string();
    assert!(hunks.contains("+three"), "{sug}");
    assert!(!hunks.contains("planted"), "{sug}");
}

#[test]
fn untracked_files_leave_every_sandbox_without_isolation() {
    let ws = Workspace::new(&[("README", b"untrack\n")]).unwrap();
    let out = ws.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let agent = ws
        .agent_script("list.sh", &listing_agent_body(&out))
        .unwrap();
    untracked_files_leave_every_sandbox(
        || {
            ws.serve(&["--isolation", "none", "--max-runs", "1"])
                .unwrap()
        },
        |script| {
            let out = std::process::Command::new("sh")
                .args(["-c", &in_repo(&ws.repo(), script)])
                .output()
                .unwrap();
            assert!(out.status.success(), "{script}: {out:?}");
        },
        &agent,
        &out,
    );
}

#[test]
fn sandbox_sync_sees_every_change_without_isolation() {
    let ws = Workspace::new(&[("README", b"sync\n")]).unwrap();
    let out = ws.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let agent = ws.agent_script("sync.sh", &sync_agent_body(&out)).unwrap();
    let hub = ws
        .serve(&["--isolation", "none", "--max-runs", "1"])
        .unwrap();
    sandbox_sync_sees_every_change(
        &hub,
        &agent,
        &out,
        |f, b| ws.write(f, b).unwrap(),
        &ws.repo(),
    );
}

/// The agent of [`untracked_files_leave_every_sandbox`]: it lists the slot's files into
/// `<out>/files-<prompt>` and makes one edit (so every run publishes).
pub(crate) fn listing_agent_body(out: &std::path::Path) -> String {
    format!(
        "find . -path ./.git -prune -o -type f -print | sort > {out}/files-$HUNKGATE_PROMPT\n\
         echo \"$HUNKGATE_PROMPT\" >> README",
        out = out.display()
    )
}

/// `script`, run in the checkout at `repo` with a committer git knows and no user or system
/// git config.
pub(crate) fn in_repo(repo: &std::path::Path, script: &str) -> String {
    format!(
        "export GIT_AUTHOR_NAME=T GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=T \
         GIT_COMMITTER_EMAIL=t@example.com GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null\n\
         cd '{}' && {script}",
        repo.display()
    )
}

/// A file tracked under an ignore rule (`t.log` with `*.log`, `local.conf`) that the user then
/// untracks (`git rm --cached`, committed) reaches no later run's sandbox — with the hub that
/// synced it there, and with a hub started afresh over the same state (the untracking made
/// while it was down). Control: while tracked, the agent sees both files. `start` starts the hub (`--max-runs 1`), `git`
/// runs a shell command in the checkout as its owner; `agent` runs [`listing_agent_body`].
pub(crate) fn untracked_files_leave_every_sandbox(
    start: impl Fn() -> hunkgate_tests::Hub,
    git: impl Fn(&str),
    agent: &std::path::Path,
    out: &std::path::Path,
) {
    git(
        "printf '*.log\\nlocal.conf\\nbuild/\\n' > .gitignore && echo log > t.log && \
         echo SETTING=1 > local.conf && git add .gitignore && git add -f t.log local.conf && \
         git commit -qm tracked",
    );
    let listed =
        |prompt: &str| std::fs::read_to_string(out.join(format!("files-{prompt}"))).unwrap();
    let mut hub = start();
    let run = |hub: &hunkgate_tests::Hub, prompt: &str| {
        let r = start_and_wait(hub, prompt, agent);
        assert_eq!(r["status"], "ready", "{prompt}: {r}\n{}", hub.log_text());
    };
    run(&hub, "one");
    let one = listed("one");
    assert!(
        one.contains("./t.log\n") && one.contains("./local.conf\n"),
        "tracked: {one}"
    );
    git("git rm -q --cached t.log local.conf && git commit -qm untracked");
    run(&hub, "two");
    let two = listed("two");
    assert!(
        !two.contains("t.log") && !two.contains("local.conf"),
        "untracked: {two}"
    );

    git("git add -f t.log local.conf && git commit -qm again");
    run(&hub, "three");
    assert!(listed("three").contains("./t.log\n"), "{}", listed("three"));
    hub.stop().unwrap();
    git("git rm -q --cached t.log local.conf && git commit -qm untracked && echo touched >> t.log");
    let hub = start();
    run(&hub, "four");
    let four = listed("four");
    assert!(
        !four.contains("t.log") && !four.contains("local.conf"),
        "after a restart: {four}"
    );
}

/// The `[limits]` a read-back test hub runs with: 10 files, 64 KiB of new content.
pub(crate) const READ_LIMITS_TOML: &str =
    "[limits]\nmax_changed_files = 10\nmax_changed_bytes = 65536\n";

/// An agent's output past the read-back limits (`READ_LIMITS_TOML`) is refused with the
/// limit named, to the agent's own publish (413 `too_large`) and as the run's failure, and
/// nothing of it reaches the checkout; exactly at the limits it is a suggestion. `script`
/// writes an agent script every user can run; `out` is a directory the agent may write.
pub(crate) fn check_read_back_limits(
    hub: &hunkgate_tests::Hub,
    script: &dyn Fn(&str, &str) -> std::path::PathBuf,
    checkout: &std::path::Path,
    out: &std::path::Path,
) {
    let publish = format!(
        r#"code=$(curl -sS -o {out}/body -w '%{{http_code}}' -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" -H 'Content-Type: application/json' -d '{{"description":"mine"}}' "$HUNKGATE_URL/agent/publish")
echo "$code" > {out}/code"#,
        out = out.display()
    );
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    // Eleven new files, one past the limit: generated output the repository does not ignore.
    let many = script(
        "many.sh",
        &format!("mkdir -p gen\nfor i in $(seq 1 11); do echo \"line $i\" > gen/f$i.txt; done\n{publish}"),
    );
    let r = start_and_wait(hub, "many", &many);
    assert_eq!(r["status"], "failed", "{r}\n{}", hub.log_text());
    let error = r["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("more than 10 files") && error.contains("max_changed_files"),
        "{r}"
    );
    assert_eq!(read("code").trim(), "413", "{}", read("body"));
    let body: Value = serde_json::from_str(&read("body")).unwrap();
    assert_eq!(body["code"], "too_large", "{body}");
    assert!(!checkout.join("gen").exists());
    // Two files of 46 KiB each against 64 KiB of new content.
    let big = script(
        "big.sh",
        &format!(
            "for i in 1 2; do awk -v i=$i 'BEGIN {{ for (n = 0; n < 1024; n++) printf \"%s line %038d\\n\", i, n }}' > big$i.txt; done\n{publish}"
        ),
    );
    let r = start_and_wait(hub, "big", &big);
    assert_eq!(r["status"], "failed", "{r}\n{}", hub.log_text());
    let error = r["error"].as_str().unwrap_or_default();
    assert!(error.contains("more than 64 KiB"), "{r}");
    assert!(error.contains("max_changed_bytes"), "{r}");
    assert_eq!(read("code").trim(), "413", "{}", read("body"));
    assert!(!checkout.join("big1.txt").exists());
    // Positive control: ten new files, one of them 46 KiB, are a suggestion, whole.
    let ten = script(
        "ten.sh",
        "mkdir -p gen\nfor i in $(seq 1 10); do echo \"line $i\" > gen/f$i.txt; done\nawk 'BEGIN { for (n = 0; n < 1024; n++) printf \"1 line %038d\\n\", n }' > gen/f1.txt",
    );
    let r = start_and_wait(hub, "ten", &ten);
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    let sid = r["suggestion_ids"][0].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let files: std::collections::BTreeSet<&str> = s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["file"].as_str())
        .collect();
    assert_eq!(files.len(), 10, "{s}");
}

/// Under `--isolation none`, see [`check_read_back_limits`].
#[test]
fn a_run_past_the_read_back_limits_is_refused_with_the_limit_named() {
    let ws = Workspace::new(&[("hello.txt", b"hello\n".as_slice())]).unwrap();
    let cfg = ws.path("hunkgate.toml");
    std::fs::write(&cfg, READ_LIMITS_TOML).unwrap();
    let out = ws.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let hub = ws
        .serve(&["--config", cfg.to_str().unwrap(), "--max-runs", "1"])
        .unwrap();
    let script = |name: &str, body: &str| ws.agent_script(name, body).unwrap();
    check_read_back_limits(&hub, &script, &ws.repo(), &out);
}

/// A run that adds more new content than a publish keeps in memory (twenty 2 MiB files, 40 MiB
/// against its 16 MiB) is a suggestion with every file, its run commit holds each file whole,
/// and accepting it all writes each to the checkout byte for byte. Before the fix it failed
/// with "An object with id … could not be found": the hunks were diffed while the files past
/// the memory budget were still being written. Random content, so that writing them takes
/// long enough for that to show every time; the agent records their checksums in
/// `sums.txt`, which the suggestion carries too. `script` writes an agent script every user
/// can run.
pub(crate) fn check_multi_megabyte_publish(
    ws: &Workspace,
    hub: &hunkgate_tests::Hub,
    script: &dyn Fn(&str, &str) -> std::path::PathBuf,
) {
    const FILES: usize = 20;
    let agent = script(
        "big-publish.sh",
        &format!(
            "for i in $(seq 1 {FILES}); do head -c 2097152 /dev/urandom > big$i.bin; done\nsha256sum big*.bin > sums.txt"
        ),
    );
    let r = start_and_wait(hub, "forty megabytes", &agent);
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    let sid = r["suggestion_ids"][0].as_str().unwrap().to_string();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let files: std::collections::BTreeSet<String> = s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["file"].as_str().map(str::to_string))
        .collect();
    let mut want: std::collections::BTreeSet<String> =
        (1..=FILES).map(|i| format!("big{i}.bin")).collect();
    want.insert("sums.txt".into());
    assert_eq!(files, want, "{s}");
    let r = hub
        .curl()
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "accept"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let check = std::process::Command::new("sha256sum")
        .args(["--check", "--strict", "sums.txt"])
        .current_dir(ws.repo())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{said}");
    assert_eq!(said.matches(": OK").count(), FILES, "{said}");
    // The run commit holds them whole too.
    let commit = s["run_commit"].as_str().expect("run_commit");
    let shown = ws
        .checkpoint_git(&["cat-file", "blob", &format!("{commit}:big7.bin")])
        .unwrap();
    assert!(shown == ws.read("big7.bin").unwrap());
}

/// Under `--isolation none`, see [`check_multi_megabyte_publish`].
#[test]
fn a_run_adding_forty_megabytes_is_published_whole() {
    let ws = Workspace::new(&[("hello.txt", b"hello\n".as_slice())]).unwrap();
    let hub = ws.serve(&["--max-runs", "1"]).unwrap();
    let script = |name: &str, body: &str| ws.agent_script(name, body).unwrap();
    check_multi_megabyte_publish(&ws, &hub, &script);
}

/// A review with every accelerator off (`[accel]` in the config, see docs/configuration.md):
/// two runs, each accepted whole, land in the checkout exactly as with them on — the slow paths
/// are the correctness baseline. The hub says which are off, and its checkpoint store holds no
/// pack although the first snapshot had more new objects than a batch writes loose (control:
/// a hub with them on packs the same snapshot).
#[tokio::test]
async fn a_review_with_every_accelerator_off_lands_as_with_them_on() {
    // Each file its own blob: 80 new objects in the first snapshot, past the 64 written loose.
    let names: Vec<(String, String)> = (0..80)
        .map(|i| (format!("f{i:02}.txt"), format!("one {i}\n")))
        .collect();
    let files: Vec<(&str, &[u8])> = names
        .iter()
        .map(|(n, body)| (n.as_str(), body.as_bytes()))
        .collect();
    let packs = |ws: &Workspace| {
        std::fs::read_dir(ws.state().join("checkpoints.git/objects/pack"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "pack")
            })
            .count()
    };
    let accept_all = |hub: &hunkgate_tests::Hub, s: &Value| {
        let sid = s["id"].as_str().unwrap();
        let r = hub
            .curl()
            .post(
                "/feedback/all",
                // A deletion is destructive: accepted with the rest only when confirmed.
                &json!({"suggestion_id": sid, "action": "accept", "confirm": true}),
            )
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["remaining_hunks"], 0, "{}", r.body);
    };
    let hunk_files = |s: &Value| -> Vec<String> {
        let mut f: Vec<String> = s["hunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["file"].as_str().unwrap().to_string())
            .collect();
        f.dedup();
        f
    };

    let ws = Workspace::new(&files).unwrap();
    let cfg = ws.path("accel-off.toml");
    std::fs::write(
        &cfg,
        "[accel]\nwatch = false\nkept_helper = false\nuntracked_cache = false\npack = false\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &cfg,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o644),
    )
    .unwrap();
    let hub = ws.serve(&["--config", cfg.to_str().unwrap()]).unwrap();
    let first = ws
        .agent_script(
            "first.sh",
            "printf 'two\\n' > f01.txt\nmkdir -p new/dir\nprintf 'n\\n' > new/dir/n.txt\n",
        )
        .unwrap();
    let s = run_to_suggestion(&hub, "first", &first).await;
    assert_eq!(hunk_files(&s), ["f01.txt", "new/dir/n.txt"], "{s}");
    accept_all(&hub, &s);
    // The next run's sync and read-back, after the first one's changes were accepted.
    let second = ws
        .agent_script("second.sh", "printf 'three\\n' > f02.txt\nrm f03.txt\n")
        .unwrap();
    let s = run_to_suggestion(&hub, "second", &second).await;
    assert_eq!(hunk_files(&s), ["f02.txt", "f03.txt"], "{s}");
    accept_all(&hub, &s);
    assert_eq!(ws.read("f01.txt").unwrap(), b"two\n");
    assert_eq!(ws.read("new/dir/n.txt").unwrap(), b"n\n");
    assert_eq!(ws.read("f02.txt").unwrap(), b"three\n");
    assert!(ws.read("f03.txt").is_err(), "f03.txt deleted");
    assert_eq!(ws.read("f04.txt").unwrap(), b"one 4\n");
    let log = hub.log_text();
    assert!(
        log.contains("accelerators off") && log.contains("untracked_cache"),
        "{log}"
    );
    assert_eq!(packs(&ws), 0, "every object loose");

    // Control: with them on, the same first snapshot is a pack.
    let on = Workspace::new(&files).unwrap();
    let hub = on.serve(&[]).unwrap();
    let agent = on
        .agent_script("first.sh", "printf 'two\\n' > f01.txt\n")
        .unwrap();
    let s = run_to_suggestion(&hub, "first", &agent).await;
    assert_eq!(hunk_files(&s), ["f01.txt"]);
    assert!(packs(&on) >= 1, "the first snapshot packed");
}

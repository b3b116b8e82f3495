//! Durability: the hub restarted mid-review (SIGTERM and kill -9) comes back with every
//! suggestion and hunk state, never applies a hunk twice, logs each decision exactly once, and
//! hands out event sequence numbers above anything a client saw before; a run in progress does
//! not outlive the hub, and is reported `interrupted` by the restarted hub.

use std::collections::HashSet;
use std::time::Duration;

use hunkgate_tests::fake_llm::{FakeLlm, Recorded, Reply};
use hunkgate_tests::isolation::{hub_pid, processes_of};
use hunkgate_tests::{
    hunk_id, numbered, parent_of, pid_alive, run_agent, wait_run_finished, wait_until, Hub, Pause,
    Workspace, Ws,
};
use serde_json::{json, Value};

const SECS5: Duration = Duration::from_secs(5);

fn ok(r: &Value) -> &Value {
    assert_eq!(r["success"], true, "expected success: {r}");
    &r["data"]
}

/// Wait until this client has seen the event announcing the newest feedback line.
async fn settle(c: &mut Ws, ws: &Workspace) {
    let seq = ws.feedback_log().unwrap().last().unwrap()["seq"].clone();
    c.event("suggestion.hunk_applied", |v| v["seq"] == seq, SECS5)
        .await
        .unwrap();
}

fn get(hub: &Hub, sid: &str) -> Value {
    let r = hub.curl().get(&format!("/suggestions/{sid}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

/// One line per decision: unique decision ids, increasing seqs.
fn assert_log_sane(ws: &Workspace, expected_lines: usize) -> Vec<Value> {
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), expected_lines, "{log:#?}");
    let ids: HashSet<&str> = log
        .iter()
        .map(|l| l["decision_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), log.len(), "a decision logged twice: {log:#?}");
    let seqs: Vec<u64> = log.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    log
}

#[tokio::test]
async fn sigterm_restart_mid_review_restores_everything() {
    let a = numbered(40);
    let ws = Workspace::new(&[("a.txt", a.as_bytes()), ("z.txt", b"zed\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 20$/LINE 20/; s/^line 37$/LINE 37/' a.txt\n\
             echo created > b.txt",
        )
        .unwrap();
    let small = ws.agent_script("small.sh", "echo ZED > z.txt").unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "three edits")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let s2 = run_agent(&hub, &mut c, &small, "one edit").await.unwrap();
    let sid2 = s2["id"].as_str().unwrap().to_string();

    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 0), "accept")
        .await
        .unwrap());
    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 1), "reject")
        .await
        .unwrap());
    ok(&c
        .decide(&sid, &hunk_id(&s, "b.txt", 0), "accept")
        .await
        .unwrap());
    ok(&c
        .decide(&sid2, &hunk_id(&s2, "z.txt", 0), "accept")
        .await
        .unwrap());
    let r = c
        .call(json!({"type": "complete", "suggestionId": sid2, "action": "finalize"}))
        .await
        .unwrap();
    let reviewed = ok(&r)["reviewed_commit"].as_str().unwrap().to_string();
    settle(&mut c, &ws).await;
    c.event(
        "suggestion.completed",
        |v| v["suggestion_id"] == sid2.as_str(),
        SECS5,
    )
    .await
    .unwrap();
    let seen_before = c.max_seq();
    let epoch_before = c.hello()["epoch"].as_str().unwrap().to_string();
    let before = get(&hub, &sid);
    let before2 = get(&hub, &sid2);
    let runs_before = hub.curl().get("/runs").unwrap().body;
    let a_expected = a.replace("line 3\n", "LINE 3\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), a_expected);
    assert_eq!(assert_log_sane(&ws, 4).len(), 4);

    hub.stop().unwrap();
    drop(c);
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let hello = c.hello();
    assert_ne!(hello["epoch"], epoch_before.as_str(), "a new epoch");
    assert!(
        hello["seq"].as_u64().unwrap() >= seen_before,
        "hello.seq {} went below {seen_before}",
        hello["seq"]
    );

    // Events from before the restart cannot be replayed, and replay says so.
    let r = c
        .call(json!({"type": "replay", "since": seen_before}))
        .await
        .unwrap();
    assert_eq!(ok(&r)["complete"], false, "{r}");
    assert_eq!(r["data"]["epoch"], hello["epoch"]);

    // Every suggestion and hunk state is back, exactly.
    assert_eq!(get(&hub, &sid), before);
    assert_eq!(get(&hub, &sid2), before2);
    assert_eq!(before2["reviewed_commit"], reviewed.as_str());
    assert_eq!(hub.curl().get("/runs").unwrap().body, runs_before);
    let all = hub.curl().get("/suggestions?all=true").unwrap().body;
    assert_eq!(all["suggestions"].as_array().unwrap().len(), 2);
    let open = hub.curl().get("/suggestions").unwrap().body;
    assert_eq!(open["suggestions"].as_array().unwrap().len(), 1);

    // Decided stays decided; the file shows the change once.
    let r = c
        .decide(&sid, &hunk_id(&s, "a.txt", 0), "accept")
        .await
        .unwrap();
    assert_eq!(r["code"], "already_decided", "{r}");
    let r = c
        .decide(&sid2, &hunk_id(&s2, "z.txt", 0), "undo")
        .await
        .unwrap();
    assert_eq!(r["code"], "closed", "{r}");
    assert_eq!(ws.read_string("a.txt").unwrap(), a_expected);
    assert_eq!(ws.read("b.txt").unwrap(), b"created\n");
    assert_eq!(ws.read("z.txt").unwrap(), b"ZED\n");

    // The review goes on; new events are numbered above everything seen before.
    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 2), "accept")
        .await
        .unwrap());
    settle(&mut c, &ws).await;
    let ev = c
        .event(
            "suggestion.hunk_applied",
            |v| v["hunk_id"] == hunk_id(&s, "a.txt", 2).as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert!(ev["seq"].as_u64().unwrap() > seen_before);
    assert!(ev["seq"].as_u64().unwrap() > hello["seq"].as_u64().unwrap());
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        a_expected.replace("line 37\n", "LINE 37\n")
    );
    let log = assert_log_sane(&ws, 5);
    assert!(log[4]["seq"].as_u64().unwrap() > seen_before);
}

#[tokio::test]
async fn kill9_right_after_an_acknowledged_decision_keeps_it() {
    let a = numbered(40);
    let ws = Workspace::new(&[("a.txt", a.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 20$/LINE 20/; s/^line 37$/LINE 37/' a.txt",
        )
        .unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "three edits")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let mut expected = a.clone();
    let mut highest_seen = 0;
    let mut epochs = HashSet::new();

    // Three rounds: decide (WebSocket, REST, WebSocket), kill -9 at once, restart, check.
    let steps = [
        (0, "accept", "line 3\n", "LINE 3\n"),
        (1, "accept", "line 20\n", "LINE 20\n"),
        (0, "reject", "LINE 3\n", "line 3\n"),
    ];
    for (round, (index, action, from, to)) in steps.into_iter().enumerate() {
        let hid = hunk_id(&s, "a.txt", index);
        if round == 1 {
            let r = hub
                .curl()
                .post(
                    "/feedback",
                    &json!({"suggestion_id": sid, "hunk_id": hid, "action": action}),
                )
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
        } else {
            ok(&c.decide(&sid, &hid, action).await.unwrap());
        }
        hub.kill9();
        expected = expected.replace(from, to);
        highest_seen = highest_seen.max(c.max_seq());
        epochs.insert(c.hello()["epoch"].as_str().unwrap().to_string());

        hub = ws.serve(&[]).unwrap();
        c = hub.ws().await.unwrap();
        let hello = c.hello();
        assert!(
            epochs.insert(hello["epoch"].as_str().unwrap().to_string()),
            "epoch reused"
        );
        assert!(hello["seq"].as_u64().unwrap() >= highest_seen);
        let got = get(&hub, &sid);
        let state = if action == "accept" {
            "accepted"
        } else {
            "rejected"
        };
        assert_eq!(
            got["hunks"][index]["state"], state,
            "round {round}: {got:#}"
        );
        assert_eq!(ws.read_string("a.txt").unwrap(), expected, "round {round}");
        let r = c.decide(&sid, &hid, action).await.unwrap();
        assert_eq!(r["code"], "already_decided", "round {round}: {r}");
        assert_eq!(ws.read_string("a.txt").unwrap(), expected);
        assert_log_sane(&ws, round + 1);
        // Without a fresh event the next seq is still above everything seen: ping tells.
        let r = c.call(json!({"type": "ping"})).await.unwrap();
        assert!(ok(&r)["seq"].as_u64().unwrap() >= highest_seen);
    }
    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 2), "accept")
        .await
        .unwrap());
    settle(&mut c, &ws).await;
    assert!(c.max_seq() > highest_seen);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        a.replace("line 20\n", "LINE 20\n")
            .replace("line 37\n", "LINE 37\n")
    );
    assert_log_sane(&ws, 4);
}

/// Processes of this user whose command line contains `marker` (the agent may run in a PID
/// namespace of its own, so the pids it sees are not ours: it is found by what it runs).
fn processes_marked(marker: &str) -> Vec<(i32, String)> {
    processes_of(nix::unistd::getuid().as_raw())
        .into_iter()
        .filter(|(_, cmd)| cmd.contains(marker))
        .collect()
}

#[tokio::test]
async fn a_run_in_progress_does_not_outlive_the_hub() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let started = ws.path("started");
    let marker = format!("hunkgate-outlive-{}", std::process::id());
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "sh -c 'sleep 300' {marker}-bg &\ntouch {s}\nexec sh -c 'wait; sleep 300' {marker}-leader",
                s = started.display()
            ),
        )
        .unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let run_id = c
        .start_run("sleep", &format!("{} {{prompt}}", agent.display()), None)
        .await
        .unwrap();
    wait_until("the agent to start", Duration::from_secs(20), || {
        started.exists() && processes_marked(&marker).len() >= 2
    })
    .unwrap();
    let pids: Vec<u32> = processes_marked(&marker)
        .iter()
        .map(|(p, _)| *p as u32)
        .collect();
    assert!(pids.iter().all(|p| pid_alive(*p)), "positive control");

    hub.stop().unwrap();
    for p in &pids {
        wait_until(&format!("agent process {p} to go"), SECS5, || {
            !pid_alive(*p)
        })
        .unwrap();
    }
    let hub = ws.serve(&[]).unwrap();
    let run = wait_run_finished(&hub, &run_id, SECS5).await.unwrap();
    assert_interrupted(&run);
    assert_eq!(ws.read("a.txt").unwrap(), b"a\n");
}

/// The agent's group leader and its PID namespace's init are the hub's own program exec'd for
/// those roles, never forks of the hub that live beside it while the agent works: a fork
/// shares the hub's memory copy-on-write, so while it lived each page the hub wrote was copied
/// first, and its exit tore down a copy of the hub's page tables — right when the hub reads
/// the agent's work back. (The roles themselves — the tree dying with the hub, the agent's exit
/// status — are what the other tests here and in `runs` check.)
#[tokio::test]
async fn an_agents_leader_and_init_are_exec_d_not_copies_of_the_hub() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let marker = format!("hunkgate-roles-{}", std::process::id());
    let agent = ws
        .agent_script("agent.sh", &format!("exec sh -c 'sleep 300' {marker}"))
        .unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    c.start_run("sleep", &format!("{} {{prompt}}", agent.display()), None)
        .await
        .unwrap();
    wait_until("the agent to start", Duration::from_secs(20), || {
        processes_marked(&marker).len() == 1
    })
    .unwrap();
    let hub_pid = hub_pid(&hub).unwrap();
    let agent_pid = processes_marked(&marker)[0].0;
    // The agent's ancestors, up to the hub.
    let parent = |pid: i32| parent_of(pid).unwrap();
    let cmdline = |pid: i32| -> Vec<String> {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap()
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    };
    let mut chain = vec![];
    let mut at = parent(agent_pid);
    while at != hub_pid {
        assert!(
            at > 1 && chain.len() < 4,
            "the agent is not the hub's: {chain:?}"
        );
        chain.push(at);
        at = parent(at);
    }
    let roles: Vec<Vec<String>> = chain.iter().map(|p| cmdline(*p)).collect();
    // Positive control: the chain is there, and a copy of the hub (whose command line is the
    // hub's memory) would read as the hub does.
    assert_eq!(
        roles.len(),
        2,
        "init and leader between hub and agent: {roles:?}"
    );
    assert_eq!(cmdline(hub_pid)[1], "serve");
    assert_eq!(roles[0][1], "__agent-pidns-init", "{roles:?}");
    assert_eq!(roles[1][1], "__agent-pidns-leader", "{roles:?}");
    hub.stop().unwrap();
    wait_until("the agent to go with the hub", SECS5, || {
        !pid_alive(agent_pid as u32)
    })
    .unwrap();
}

/// `--isolation none`: an agent leaves a child behind that writes into the sandbox every 50 ms,
/// in a new session and ignoring SIGTERM and SIGHUP; the hub is killed with `kill -9`. The
/// agent runs in a PID namespace whose init dies with the hub, so the child dies too: it is
/// gone, the sandbox stops changing, and the next run, which reuses the slot, starts from a
/// clean copy and finds no write from it.
#[tokio::test]
async fn kill9_of_the_hub_leaves_no_agent_child_writing_into_a_reused_slot() {
    leftover_writer(true).await;
}

/// The same where no PID namespace can be had (forced with `HUNKGATE_SANDBOX_PIDNS=off`): the
/// child outlives the hub (the control that this is the fallback), and the restarted hub never
/// hands its slot to the next run — the next run gets another slot, whose sandbox holds no
/// write from it.
#[tokio::test]
async fn without_a_pid_namespace_a_slot_with_a_live_leftover_is_not_reused() {
    leftover_writer(false).await;
}

async fn leftover_writer(pid_namespace: bool) {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let env: &[(&str, &str)] = if pid_namespace {
        &[]
    } else {
        &[("HUNKGATE_SANDBOX_PIDNS", "off")]
    };
    let marker = format!("hunkgate-bgwriter-{}-{pid_namespace}", std::process::id());
    let agent = ws
        .agent_script(
            "writer.sh",
            &format!(
                "setsid sh -c 'trap \"\" TERM HUP; while :; do date +%s%N >> \"$1/bg-writes\"; sleep 0.05; done' {marker} \"$PWD\" </dev/null >/dev/null 2>&1 &\nsleep 300"
            ),
        )
        .unwrap();
    let writes = ws.state().join("sandboxes/0/bg-writes");
    let mut hub = ws.serve_env(&[], env).unwrap();
    let mut c = hub.ws().await.unwrap();
    c.start_run("write", &format!("{} {{prompt}}", agent.display()), None)
        .await
        .unwrap();
    // Positive control: the child runs and writes into slot 0.
    let size = || std::fs::metadata(&writes).map(|m| m.len()).unwrap_or(0);
    wait_until(
        "the child to write into the sandbox",
        Duration::from_secs(20),
        || size() > 0,
    )
    .unwrap_or_else(|e| panic!("{e}: {}", hub.log_text()));
    let first = size();
    wait_until("the child to write again", SECS5, || size() > first).unwrap();
    assert_eq!(processes_marked(&marker).len(), 1, "positive control");

    hub.kill9();
    let leftover = if pid_namespace {
        wait_until("the agent's child to die with the hub", SECS5, || {
            processes_marked(&marker).is_empty()
        })
        .unwrap_or_else(|e| panic!("{e}: {:?}", processes_marked(&marker)));
        let after_kill = size();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            size(),
            after_kill,
            "something still writes into the sandbox"
        );
        None
    } else {
        // The fallback cannot kill it: it is still there, still writing.
        let before = size();
        wait_until("the leftover to write again", SECS5, || size() > before).unwrap();
        let leftover = processes_marked(&marker);
        assert_eq!(
            leftover.len(),
            1,
            "control: no PID namespace, so it survives"
        );
        Some(leftover[0].0)
    };

    let hub = ws.serve_env(&[], env).unwrap();
    let mut c = hub.ws().await.unwrap();
    let seen = ws.path("seen");
    let next = ws
        .agent_script(
            "next.sh",
            &format!(
                "sleep 0.3\npwd > {seen}\nls -a >> {seen}\necho b > a.txt",
                seen = seen.display()
            ),
        )
        .unwrap();
    let suggestion = run_agent(&hub, &mut c, &next, "next").await.unwrap();
    let listing = std::fs::read_to_string(&seen).unwrap();
    if let Some(pid) = leftover {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert!(
            !listing
                .lines()
                .next()
                .unwrap_or("")
                .ends_with("/sandboxes/0"),
            "the slot of a live leftover was reused: {listing}"
        );
        assert!(
            hub.log_text().contains("using another"),
            "{}",
            hub.log_text()
        );
    }
    assert!(
        !listing.lines().any(|l| l == "bg-writes"),
        "the next run's sandbox holds the old child's writes: {listing}"
    );
    assert!(listing.lines().any(|l| l == "a.txt"), "control: {listing}");
    assert!(
        suggestion.to_string().contains("a.txt") && !suggestion.to_string().contains("bg-writes"),
        "{suggestion}"
    );
    if pid_namespace {
        assert!(processes_marked(&marker).is_empty());
    }
}

/// A run the hub stopped under: `interrupted` (not the agent's failure, not the user's cancel),
/// saying why, with no question left open.
fn assert_interrupted(run: &Value) {
    assert_eq!(run["status"], "interrupted", "{run}");
    let error = run["error"].as_str().unwrap_or("");
    assert!(error.contains("hub restarted"), "{run}");
    assert!(run["question"].is_null(), "{run}");
}

/// The built-in agent asks a question; the hub is killed (and, in a second round, stopped
/// cleanly) while the run waits for the answer. The restarted hub reports the run
/// `interrupted` everywhere (`GET /runs/:id`, `GET /runs`, the session), and the session's next
/// run starts and gets the interrupted run's history.
#[tokio::test]
async fn a_run_waiting_for_an_answer_is_interrupted_by_a_restart_and_its_session_goes_on() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::with(|req: &Recorded| {
        if req.raw.contains("go on after the restart") {
            Reply::tool("finish", json!({"description": "nothing to do"}))
        } else {
            Reply::tool("clarify_user", json!({"question": "Tabs or spaces?"}))
        }
    })
    .await;
    let url = fake.base_url();
    let args = ["--provider-url", &url, "--model", "test-model"];
    let mut hub = ws.serve(&args).unwrap();
    let s = hub
        .curl()
        .post("/sessions", &json!({"title": "tidy"}))
        .unwrap();
    assert_eq!(s.status, 200, "{}", s.body);
    let sid = s.body["session_id"].as_str().unwrap().to_string();

    let mut interrupted = Vec::new();
    for (round, prompt) in ["format things (kill -9)", "format more (SIGTERM)"]
        .iter()
        .enumerate()
    {
        let r = hub
            .curl()
            .post(&format!("/sessions/{sid}/runs"), &json!({"prompt": prompt}))
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let run_id = r.body["run_id"].as_str().unwrap().to_string();
        wait_until("the run to ask", Duration::from_secs(30), || {
            hub.curl()
                .get(&format!("/runs/{run_id}"))
                .is_ok_and(|r| r.body["status"] == "waiting_for_user")
        })
        .unwrap();
        if round == 0 {
            hub.kill9();
        } else {
            hub.stop().unwrap();
        }
        hub = ws.serve(&args).unwrap();
        interrupted.push(run_id);
        for run_id in &interrupted {
            let run = wait_run_finished(&hub, run_id, SECS5).await.unwrap();
            assert_interrupted(&run);
            let listed = hub.curl().get("/runs").unwrap().body;
            let listed = listed["runs"]
                .as_array()
                .and_then(|a| a.iter().find(|r| r["run_id"] == json!(run_id)))
                .unwrap_or_else(|| panic!("{run_id} not in GET /runs: {listed}"))
                .clone();
            assert_interrupted(&listed);
        }
    }
    let view = hub.curl().get(&format!("/sessions/{sid}")).unwrap().body;
    assert_eq!(view["status"], "active", "{view}");
    let states: Vec<&str> = view["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["interrupted", "interrupted"], "{view}");

    // The session goes on: its next run starts and is sent what the interrupted runs asked.
    let before = fake.requests().len();
    let r = hub
        .curl()
        .post(
            &format!("/sessions/{sid}/runs"),
            &json!({"prompt": "go on after the restart"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let next = r.body["run_id"].as_str().unwrap().to_string();
    let run = wait_run_finished(&hub, &next, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(run["status"], "no_changes", "{run}");
    let sent = &fake.requests()[before].raw;
    for want in ["format things (kill -9)", "format more (SIGTERM)"] {
        assert!(sent.contains(want), "{want:?} missing from {sent}");
    }
}

#[tokio::test]
async fn a_decision_finished_by_recovery_logs_the_seq_of_its_event() {
    let a = numbered(40);
    let ws = Workspace::new(&[("a.txt", a.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 30$/LINE 30/' a.txt",
        )
        .unwrap();
    let (mut hub, pauses) = ws.serve_pausable().unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "two edits").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let (h0, h1) = (hunk_id(&s, "a.txt", 0), hunk_id(&s, "a.txt", 1));
    ok(&c.decide(&sid, &h0, "accept").await.unwrap());
    settle(&mut c, &ws).await;

    // The checkout is written, then the hub dies before the feedback line and the commit.
    let pause = Pause::arm(&pauses, "before-commit");
    let curl = hub.curl();
    let body = json!({"suggestion_id": sid, "hunk_id": h1, "action": "accept"});
    let answer = std::thread::spawn(move || curl.post("/feedback", &body));
    pause.reached();
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        a.replace("line 3\n", "LINE 3\n")
            .replace("line 30\n", "LINE 30\n")
    );
    hub.kill9();
    pause.release();
    let _ = answer.join();
    drop(c);

    let (hub, _) = ws.serve_pausable().unwrap();
    let mut c = hub.ws().await.unwrap();
    assert_eq!(get(&hub, &sid)["hunks"][1]["state"], "accepted");
    let log = assert_log_sane(&ws, 2);
    let seq = log[1]["seq"].as_u64().unwrap();
    assert!(seq > 0, "{log:#?}");
    assert_eq!(log[1]["hunk_id"], h1.as_str());
    // That seq is the event the restarted hub announced the finished decision with.
    let r = c.call(json!({"type": "replay", "since": 0})).await.unwrap();
    let events = ok(&r)["events"].as_array().unwrap().clone();
    let ev = events
        .iter()
        .find(|e| e["type"] == "suggestion.hunk_applied" && e["hunk_id"] == h1.as_str())
        .unwrap_or_else(|| panic!("no event for the recovered decision: {events:#?}"));
    assert_eq!(ev["seq"].as_u64(), Some(seq), "{ev}");
    assert_eq!(ev["state"], "accepted");
    assert!(seq <= c.hello()["seq"].as_u64().unwrap());
}

#[tokio::test]
async fn a_torn_journal_tail_is_cut_and_kept_aside_on_start() {
    let a = numbered(40);
    let ws = Workspace::new(&[("a.txt", a.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 30$/LINE 30/' a.txt",
        )
        .unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "two edits").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let (h0, h1) = (hunk_id(&s, "a.txt", 0), hunk_id(&s, "a.txt", 1));
    ok(&c.decide(&sid, &h0, "reject").await.unwrap());
    hub.kill9();
    drop(c);

    let journal = ws.state().join("state.jsonl");
    let append = |bytes: &[u8]| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&journal)
            .unwrap();
        f.write_all(bytes).unwrap();
    };
    let broken = || -> Vec<Vec<u8>> {
        let mut v: Vec<_> = std::fs::read_dir(ws.state())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("state.jsonl.broken-"))
            .collect();
        v.sort();
        v.iter().map(|p| std::fs::read(p).unwrap()).collect()
    };

    // A crash mid-append left half a record.
    let torn = br#"{"t":"commit","decision":"cut sh"#;
    append(torn);
    let mut hub = ws.serve(&[]).unwrap();
    assert_eq!(get(&hub, &sid)["hunks"][0]["state"], "rejected");
    assert_eq!(broken(), vec![torn.to_vec()], "the torn tail is kept aside");
    hub.kill9();

    // What older versions left after a failed append: the torn bytes, then the next good
    // record on the same line, then more records. The records are kept, the hub starts.
    append(torn);
    append(b"{\"t\":\"seq\",\"upto\":5}\n{\"t\":\"seq\",\"upto\":6}\n");
    let hub = ws.serve(&[]).unwrap();
    assert_eq!(get(&hub, &sid)["hunks"][0]["state"], "rejected");
    assert_eq!(broken().len(), 2);
    let r = hub
        .curl()
        .post(
            "/feedback",
            &json!({"suggestion_id": sid, "hunk_id": h1, "action": "accept"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        a.replace("line 30\n", "LINE 30\n")
    );
}

/// A restarted hub reads its journal whole and decodes every suggestion in it, a heap in
/// proportion to the journal that is mostly freed again. It is given back, so the restarted
/// hub holds about what the hub before it held with the same suggestion; it kept the heap of
/// the reading (233 MiB of its own memory for 85 MB in use, after a restart on three
/// suggestions of 300,000 lines).
#[tokio::test]
async fn a_restarted_hub_gives_back_what_reading_its_journal_freed() {
    use hunkgate::hub::quiet::QUIET;
    use hunkgate_tests::hub_bench::{anon_at_rest, memory_of};
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws.table_agent(200_000).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "a table").await.unwrap();
    wait_run_finished(&hub, s["run_id"].as_str().unwrap(), SECS5)
        .await
        .unwrap();
    drop(c);
    let at_rest = |hub: &Hub| {
        anon_at_rest(hub_pid(hub).unwrap() as u32, QUIET + Duration::from_secs(2)).unwrap()
    };
    // The hub that made it, at rest after its run.
    let before = at_rest(&hub);
    hub.stop().unwrap();

    let hub = ws.serve(&[]).unwrap();
    let sid = s["id"].as_str().unwrap();
    let got: Value = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(
        got["hunks"][0]["file"], "table.txt",
        "the suggestion is back"
    );
    // Positive control: the reading's heap is there to give back, far over what stays.
    let peak = memory_of(hub_pid(&hub).unwrap() as u32).unwrap().hwm_kib;
    assert!(
        peak > before + 40 * 1024,
        "peak {peak} KiB, before {before} KiB"
    );
    // Asked for the whole suggestion again (a 12 MB reply): that is given back too. With
    // glibc's moving bar for mapped blocks, each such reply left 12 MiB in a thread's arena.
    for _ in 0..2 {
        let r = hub.curl().get(&format!("/suggestions/{sid}")).unwrap();
        assert_eq!(r.status, 200);
    }
    let after = at_rest(&hub);
    assert!(
        after <= before + 4 * 1024,
        "{after} KiB of its own memory after the restart, {before} KiB before it"
    );
}

/// A bulk accept of two files, the hub killed after its `prepare` was journaled and before it
/// wrote a file; then the checkout made to look as if the crash had come between the two
/// files (the first one written), and, if `lose_object`, the second file's new content left
/// empty in the store, as a power loss can leave an object written without an fsync. Returns
/// the workspace, the restarted hub, the suggestion, and both files' contents before and after.
async fn bulk_accept_cut_between_its_files(
    lose_object: bool,
) -> (Workspace, Hub, String, [(String, String); 2]) {
    let (a, b) = (numbered(30), numbered(30).replace("line", "row"));
    let ws = Workspace::new(&[("a.txt", a.as_bytes()), ("b.txt", b.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/' a.txt\nsed -i 's/^row 9$/ROW 9/' b.txt",
        )
        .unwrap();
    let (mut hub, pauses) = ws.serve_pausable().unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "two files").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();

    let pause = Pause::arm(&pauses, "before-write");
    let curl = hub.curl();
    let body = json!({"suggestion_id": sid, "action": "accept"});
    let answer = std::thread::spawn(move || curl.post("/feedback/all", &body));
    pause.reached();
    hub.kill9();
    pause.release();
    let _ = answer.join();
    drop(c);
    assert_eq!(ws.read_string("a.txt").unwrap(), a, "nothing written yet");

    // The prepare names what each file becomes, as an object of the checkpoint store.
    let journal = std::fs::read_to_string(ws.state().join("state.jsonl")).unwrap();
    let prepare: Value = journal
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["t"] == "decision")
        .unwrap_or_else(|| panic!("no decision journaled: {journal}"));
    let ops = prepare["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 2, "{prepare}");
    let store = ws.state().join("checkpoints.git");
    let store = store.to_str().unwrap();
    let new_of = |path: &str| -> (String, String) {
        let op = ops.iter().find(|o| o["path"] == path).unwrap();
        let id = op["op"]["oid"].as_str().unwrap().to_string();
        let text = ws
            .git(&["--git-dir", store, "cat-file", "blob", &id])
            .unwrap();
        (id, text)
    };
    let ((_, a_new), (b_id, b_new)) = (new_of("a.txt"), new_of("b.txt"));
    assert_eq!(a_new, a.replace("line 3\n", "LINE 3\n"));
    assert_eq!(b_new, b.replace("row 9\n", "ROW 9\n"));

    ws.write("a.txt", a_new.as_bytes()).unwrap();
    if lose_object {
        let loose = ws
            .state()
            .join("checkpoints.git/objects")
            .join(&b_id[..2])
            .join(&b_id[2..]);
        assert!(loose.is_file(), "{} is a loose object", loose.display());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&loose)
            .unwrap()
            .set_len(0)
            .unwrap();
    }
    let (hub, _) = ws.serve_pausable().unwrap();
    (ws, hub, sid, [(a, a_new), (b, b_new)])
}

#[tokio::test]
async fn a_bulk_decision_cut_between_its_files_is_finished_on_start() {
    let (ws, hub, sid, [(_, a_new), (_, b_new)]) = bulk_accept_cut_between_its_files(false).await;
    assert_eq!(ws.read_string("a.txt").unwrap(), a_new);
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        b_new,
        "finished from the store"
    );
    let s = get(&hub, &sid);
    for h in s["hunks"].as_array().unwrap() {
        assert_eq!(h["state"], "accepted", "{s}");
    }
}

#[tokio::test]
async fn a_bulk_decision_that_cannot_be_finished_is_taken_back_and_the_hub_starts() {
    let (ws, hub, sid, [(a, _), (b, _)]) = bulk_accept_cut_between_its_files(true).await;
    assert_eq!(ws.read_string("a.txt").unwrap(), a, "taken back");
    assert_eq!(ws.read_string("b.txt").unwrap(), b);
    let s = get(&hub, &sid);
    for h in s["hunks"].as_array().unwrap() {
        assert_eq!(h["state"], "pending", "{s}");
    }
    assert!(ws.feedback_log().unwrap().is_empty());
    // The review goes on: the hunks can be accepted again, each once.
    post_ok(
        &hub,
        "/feedback/all",
        json!({"suggestion_id": sid, "action": "accept"}),
    );
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        a.replace("line 3\n", "LINE 3\n")
    );
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        b.replace("row 9\n", "ROW 9\n")
    );
}

/// POST `body` to `path`, which must answer 200; its answer.
fn post_ok(hub: &Hub, path: &str, body: Value) -> Value {
    let r = hub.curl().post(path, &body).unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    r.body
}

/// Start a run of `agent` over HTTP and wait for it to end; the run as the hub reports it.
async fn run_to_end(hub: &Hub, agent: &std::path::Path) -> Value {
    let agent = format!("{} {{prompt}}", agent.display());
    let r = post_ok(hub, "/runs", json!({"prompt": "edit", "agent": agent}));
    let run_id = r["run_id"].as_str().unwrap().to_string();
    wait_run_finished(hub, &run_id, Duration::from_secs(60))
        .await
        .unwrap()
}

#[tokio::test]
async fn after_the_machine_went_down_under_the_hub_empty_objects_are_dropped_and_runs_work() {
    let (a, b) = (numbered(30), numbered(30).replace("line", "row"));
    let ws = Workspace::new(&[("a.txt", a.as_bytes()), ("b.txt", b.as_bytes())]).unwrap();
    let first = ws
        .agent_script("first.sh", "sed -i 's/^line 3$/LINE 3/' a.txt")
        .unwrap();
    let second = ws
        .agent_script("second.sh", "sed -i 's/^row 9$/ROW 9/' b.txt")
        .unwrap();
    let (mut hub, _) = ws.serve_pausable().unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &first, "first").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    drop(c);
    hub.kill9();

    // What the machine going down right after can leave: every loose object written in the
    // seconds before, named but empty (they are written without an fsync, as git's are).
    let objects = ws.state().join("checkpoints.git/objects");
    let mut emptied = 0;
    for fan in std::fs::read_dir(&objects).unwrap() {
        let fan = fan.unwrap().path();
        if fan.file_name().unwrap().len() != 2 {
            continue;
        }
        for o in std::fs::read_dir(&fan).unwrap() {
            std::fs::File::create(o.unwrap().path()).unwrap();
            emptied += 1;
        }
    }
    assert!(emptied > 3, "the runs wrote loose objects ({emptied})");
    let boot_id = ws.state().join("boot-id");
    assert!(boot_id.is_file(), "the hub recorded its boot");

    if cfg!(target_os = "linux") {
        // The control: a start in the same boot (a hub killed, the machine up) looks nothing
        // over, and the empty objects fail the next run's publish.
        let mut hub = ws.serve_pausable().unwrap().0;
        let run = run_to_end(&hub, &second).await;
        assert_eq!(run["status"], "failed", "{run}");
        assert!(
            run["error"]
                .as_str()
                .unwrap_or_default()
                .contains("loose object"),
            "{run}"
        );
        hub.kill9();
    }

    // The machine restarted: the hub finds another boot id than the one it recorded.
    std::fs::write(&boot_id, "00000000-0000-0000-0000-000000000000\n").unwrap();
    let hub = ws.serve_pausable().unwrap().0;
    assert!(
        hub.log_text().contains("removed empty objects"),
        "{}",
        hub.log_text()
    );
    assert_ne!(
        std::fs::read_to_string(&boot_id).unwrap().trim(),
        "00000000-0000-0000-0000-000000000000",
        "this boot is recorded"
    );
    let run = run_to_end(&hub, &second).await;
    assert_eq!(run["status"], "ready", "{run}\n{}", hub.log_text());
    let new = run["suggestion_ids"][0].as_str().unwrap();
    let s2 = get(&hub, new);
    assert_eq!(s2["files"], json!(["b.txt"]), "{s2}");
    let diff = s2["hunks"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("-row 9\n+ROW 9\n"), "{diff}");
    // The review goes on: the first suggestion's hunk and the new one apply.
    for (s, h) in [
        (&sid, hunk_id(&get(&hub, &sid), "a.txt", 0)),
        (&new.to_string(), hunk_id(&s2, "b.txt", 0)),
    ] {
        let body = json!({"suggestion_id": s, "hunk_id": h, "action": "accept"});
        post_ok(&hub, "/feedback", body);
    }
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        a.replace("line 3\n", "LINE 3\n")
    );
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        b.replace("row 9\n", "ROW 9\n")
    );
}

//! Lifecycle and garbage collection (seed 000 §25): finished work past its retention leaves
//! the hub's state, journal, run logs and checkpoint store, so the state directory stays
//! bounded however long the repository is used; nothing pending is ever collected, and a
//! `kill -9` in the middle of a collection loses nothing.
//!
//! The retention is moved to 0 hours by the config file (`[retention] completed_ttl_hours = 0`,
//! `prune_grace_minutes = 0`): what is finished is collected at the next collection, which is
//! what 72 hours of waiting comes to.

use std::path::Path;
use std::time::Duration;

use hunkgate_tests::{run_agent, wait_until, Hub, Pause, Workspace, Ws};
use serde_json::{json, Value};

/// Runs per batch: `HUNKGATE_LIFECYCLE_RUNS` (default 30; each run is a snapshot, an agent, a
/// publish and a decision, some 0.1–0.3 s on a busy two-core machine). The bound asserted does
/// not depend on it: the second and third batches must not grow the state beyond the first.
fn runs_per_batch() -> usize {
    std::env::var("HUNKGATE_LIFECYCLE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

const RETENTION_NOW: &str = "[retention]\ncompleted_ttl_hours = 0\nprune_grace_minutes = 0\ngc_interval_minutes = 0\nmax_sessions = 10000\nmax_runs_per_session = 10000\n";

/// A workspace whose hub collects finished work at once.
fn workspace(retention: &str) -> Workspace {
    let ws = Workspace::new(&[("notes.txt", b"notes\n")]).unwrap();
    let cfg = ws.home().join(".config/hunkgate");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), retention).unwrap();
    ws
}

/// An agent whose every run writes a different 20 KB file of random text (about 15 KB
/// compressed): each run leaves objects of its own in the checkpoint store, which only a
/// collection removes again. A prompt `pending-N` writes `pending-N.txt`, every other one
/// `data.txt`.
fn agent(ws: &Workspace) -> std::path::PathBuf {
    ws.agent_script(
        "agent.sh",
        "case \"$1\" in pending-*) f=\"$1.txt\" ;; *) f=data.txt ;; esac\n\
         { echo \"$1\"; head -c 15000 /dev/urandom | base64; } > \"$f\"",
    )
    .unwrap()
}

/// Bytes of the regular files under `dir`.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => du(&e.path()),
                    Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                    _ => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Bytes of the logs bounded by rotation rather than by retention: `feedback.jsonl` (the
/// evals' input) and `archive.jsonl` (what collections removed), each with its `.1`.
fn rotated_logs(ws: &Workspace) -> u64 {
    [
        "feedback.jsonl",
        "feedback.jsonl.1",
        "archive.jsonl",
        "archive.jsonl.1",
    ]
    .iter()
    .map(|f| std::fs::metadata(ws.state().join(f)).map_or(0, |m| m.len()))
    .sum()
}

/// The state directory without the sandbox slots (copies of the checkout, one per slot) and
/// the logs bounded by rotation ([`rotated_logs`]).
fn state_bytes(ws: &Workspace) -> u64 {
    du(&ws.state()) - du(&ws.state().join("sandboxes")) - rotated_logs(ws)
}

fn gc(ws: &Workspace, dry_run: bool) -> Value {
    let mut args = vec!["gc", "--json", "--state-dir"];
    let state = ws.state().display().to_string();
    args.push(&state);
    if dry_run {
        args.push("--dry-run");
    }
    let out = ws.cli(&args).unwrap();
    assert!(
        out.status.success(),
        "hunkgate gc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn suggestion(hub: &Hub, id: &str) -> Value {
    let r = hub.curl().get(&format!("/suggestions/{id}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn hunk_of(s: &Value) -> String {
    s["hunks"][0]["id"].as_str().unwrap().to_string()
}

/// Run `n` agents and decide each suggestion (accept or reject, alternately).
async fn batch(hub: &Hub, c: &mut Ws, agent: &Path, tag: &str, n: usize) {
    for i in 0..n {
        let s = run_agent(hub, c, agent, &format!("{tag}-{i}"))
            .await
            .unwrap();
        let id = s["id"].as_str().unwrap();
        let action = if i % 2 == 0 { "accept" } else { "reject" };
        let r = c.decide(id, &hunk_of(&s), action).await.unwrap();
        assert_eq!(r["success"], true, "{r}");
    }
}

/// Every pending suggestion is there with its hunk pending, and its checkpoint (base and run
/// commits in the store) still answers.
fn assert_pending(hub: &Hub, ids: &[String]) {
    for id in ids {
        let s = suggestion(hub, id);
        assert_eq!(s["hunks"][0]["state"], "pending", "{s}");
        let cp = hub.curl().get(&format!("/checkpoints/{id}")).unwrap();
        assert_eq!(cp.status, 200, "checkpoint of {id}: {}", cp.body);
    }
}

#[tokio::test]
async fn a_month_of_use_stays_bounded_and_keeps_every_pending_hunk() {
    let ws = workspace(RETENTION_NOW);
    let agent = agent(&ws);
    let n = runs_per_batch();
    let mut hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    // Three suggestions left pending throughout, the oldest work there is.
    let mut pending = Vec::new();
    for i in 0..3 {
        let s = run_agent(&hub, &mut c, &agent, &format!("pending-{i}"))
            .await
            .unwrap();
        pending.push(s["id"].as_str().unwrap().to_string());
    }
    // What the pending work takes: all that may stay, however many runs come after.
    let baseline = state_bytes(&ws);
    let mut after = Vec::new();
    for b in 0..3 {
        batch(&hub, &mut c, &agent, &format!("batch{b}"), n).await;
        let r = gc(&ws, false);
        assert_eq!(r["objects"], "repacked", "{r}");
        assert_eq!(r["pending_suggestions"], 3, "{r}");
        after.push(state_bytes(&ws));
    }
    eprintln!("{n} runs a batch; state bytes with the pending work only: {baseline}, after each batch's collection: {after:?}");
    // Each batch wrote n files of 20 KB (15 KB compressed) into the store and as many
    // suggestions of 20 KB into the journal; none of it stays (some 32 KB of slack for the
    // ledger, the pack's index and the run logs of the pending runs).
    assert!(
        after.iter().all(|a| *a < baseline + 32 * 1024),
        "state grew with the runs: {baseline} then {after:?}"
    );
    // The archive is rotated at 16 MiB, the feedback log at 64 MiB: each at most twice that.
    assert!(
        rotated_logs(&ws) < (2 * (16 + 64)) << 20,
        "{}",
        rotated_logs(&ws)
    );
    // Nothing finished is left in the hub's state, and every pending suggestion is.
    let runs = hub.curl().get("/runs").unwrap().body;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 3, "{runs}");
    assert_pending(&hub, &pending);
    let health = hub.curl().get("/health").unwrap().body;
    assert!(health["stateBytes"].as_u64().unwrap() > 0, "{health}");
    // A restart brings them all back, and each one can still be accepted.
    drop(c);
    hub.stop().unwrap();
    let hub = ws.serve(&[]).unwrap();
    assert_pending(&hub, &pending);
    let mut c = hub.ws().await.unwrap();
    for id in &pending {
        let s = suggestion(&hub, id);
        let r = c.decide(id, &hunk_of(&s), "accept").await.unwrap();
        assert_eq!(r["success"], true, "{r}");
        assert_eq!(r["data"]["applied"], true, "{r}");
    }
    for i in 0..3 {
        let text = ws.read_string(&format!("pending-{i}.txt")).unwrap();
        assert!(text.starts_with(&format!("pending-{i}\n")), "{text:.40}");
    }
}

#[tokio::test]
async fn a_dry_run_changes_nothing_and_the_real_collection_removes() {
    let ws = workspace(RETENTION_NOW);
    let agent = agent(&ws);
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    // Three suggestions, all decided only after the last run started: no collection saw
    // them finished yet.
    let mut made = Vec::new();
    for i in 0..3 {
        made.push(
            run_agent(&hub, &mut c, &agent, &format!("dry-{i}"))
                .await
                .unwrap(),
        );
    }
    for s in &made {
        let r = c
            .decide(s["id"].as_str().unwrap(), &hunk_of(s), "reject")
            .await
            .unwrap();
        assert_eq!(r["success"], true, "{r}");
    }
    let snapshot = || {
        (
            std::fs::read(ws.state().join("state.jsonl")).unwrap(),
            ws.checkpoint_git(&["for-each-ref"]).unwrap(),
            std::fs::read_dir(ws.state().join("runs")).unwrap().count(),
        )
    };
    let before = snapshot();
    let dry = gc(&ws, true);
    assert_eq!(
        (
            &dry["dry_run"],
            &dry["runs"],
            &dry["suggestions"],
            &dry["sessions"],
            &dry["logs"]
        ),
        (&json!(true), &json!(3), &json!(3), &json!(3), &json!(3)),
        "{dry}"
    );
    assert!(
        dry["refs"].as_u64().unwrap() >= 6,
        "base and head of each run: {dry}"
    );
    assert!(dry["bytes"].as_u64().unwrap() > 0, "{dry}");
    assert!(before == snapshot(), "a dry run changed the state dir");
    for s in &made {
        assert_eq!(suggestion(&hub, s["id"].as_str().unwrap())["id"], s["id"]);
    }
    // Positive control: the real collection removes all of it.
    let real = gc(&ws, false);
    assert_eq!(
        (&real["runs"], &real["suggestions"], &real["logs"]),
        (&dry["runs"], &dry["suggestions"], &dry["logs"]),
        "{real}"
    );
    assert_eq!(real["refs"], dry["refs"], "{real}");
    assert!(real["bytes"].as_u64().unwrap() > 0, "{real}");
    let journal = std::fs::read_to_string(ws.state().join("state.jsonl")).unwrap();
    for s in &made {
        let id = s["id"].as_str().unwrap();
        assert!(!journal.contains(id), "{id} still journaled");
        let r = hub.curl().get(&format!("/suggestions/{id}")).unwrap();
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let refs = String::from_utf8(ws.checkpoint_git(&["for-each-ref"]).unwrap()).unwrap();
    assert!(!refs.contains("refs/hunkgate/runs/"), "{refs}");
    assert_eq!(
        std::fs::read_dir(ws.state().join("runs")).unwrap().count(),
        0
    );
    let archive = std::fs::read_to_string(ws.state().join("archive.jsonl")).unwrap();
    for s in &made {
        assert!(
            archive.contains(s["id"].as_str().unwrap()),
            "archived first"
        );
    }
    // The feedback log (the evals' input) keeps every decision.
    assert_eq!(ws.feedback_log().unwrap().len(), 3);
    let again = gc(&ws, false);
    assert_eq!(
        (&again["runs"], &again["refs"]),
        (&json!(0), &json!(0)),
        "{again}"
    );
}

/// A suggestion reviewed and collected in the moment between its announcement and the
/// setting of its refs in the checkpoint store gets no refs: none outlive it for a later
/// collection to find. (A race CI met: the collection after the real one found two refs.)
#[tokio::test]
async fn a_suggestion_collected_before_its_refs_are_set_leaves_no_refs() {
    let ws = workspace(RETENTION_NOW);
    let agent = agent(&ws);
    let (pause_dir, env) = ws.pause_env();
    let env = [(env[0].0, env[0].1.as_str())];
    let hub = ws.serve_env(&[], &env).unwrap();
    let mut c = hub.ws().await.unwrap();
    let pause = Pause::arm(&pause_dir, "before-run-refs");
    let s = run_agent(&hub, &mut c, &agent, "quick").await.unwrap();
    let id = s["id"].as_str().unwrap();
    let run_id = s["run_id"].as_str().unwrap();
    pause.reached();
    let r = c.decide(id, &hunk_of(&s), "reject").await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    let real = gc(&ws, false);
    assert_eq!(
        (&real["runs"], &real["suggestions"]),
        (&json!(1), &json!(1)),
        "collected while its refs wait: {real}"
    );
    pause.release_and_wait();
    let again = gc(&ws, false);
    assert_eq!(again["refs"], json!(0), "{again}");
    let refs = String::from_utf8(ws.checkpoint_git(&["for-each-ref"]).unwrap()).unwrap();
    assert!(!refs.contains(run_id) && !refs.contains(id), "{refs}");
    // Positive control: a suggestion still here when its refs are set gets them.
    let kept = run_agent(&hub, &mut c, &agent, "pending-1").await.unwrap();
    let kept_id = kept["id"].as_str().unwrap().to_string();
    wait_until(
        "the kept suggestion's refs",
        Duration::from_secs(10),
        || {
            let refs = ws.checkpoint_git(&["for-each-ref"]).unwrap();
            String::from_utf8_lossy(&refs).contains(&format!("suggestions/{kept_id}/run"))
        },
    )
    .unwrap();
}

/// A hub killed at each step of a collection starts cleanly, the restarted hub finishes the
/// collection, and the pending suggestion survives with its checkpoint and can be accepted.
#[tokio::test]
async fn kill_9_during_a_collection_loses_nothing_pending() {
    let ws = workspace(RETENTION_NOW);
    let agent = agent(&ws);
    let (pause_dir, env) = ws.pause_env();
    let env = [(env[0].0, env[0].1.as_str())];
    let mut hub = ws.serve_env(&[], &env).unwrap();
    let mut c = hub.ws().await.unwrap();
    let pending = run_agent(&hub, &mut c, &agent, "keep me").await.unwrap();
    let pending_id = pending["id"].as_str().unwrap().to_string();
    for point in ["gc-after-state", "gc-after-refs"] {
        let done = run_agent(&hub, &mut c, &agent, point).await.unwrap();
        let done_id = done["id"].as_str().unwrap().to_string();
        let run_id = done["run_id"].as_str().unwrap().to_string();
        let r = c.decide(&done_id, &hunk_of(&done), "reject").await.unwrap();
        assert_eq!(r["success"], true, "{r}");
        let pause = Pause::arm(&pause_dir, point);
        let state = ws.state().display().to_string();
        let mut collecting = std::process::Command::new(hunkgate_tests::hunkgate_bin());
        hunkgate_tests::hermetic_env(&mut collecting, &ws.home());
        let mut collecting = collecting
            .current_dir(ws.repo())
            .args(["gc", "--state-dir", &state])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        pause.reached();
        drop(c);
        hub.kill9();
        let _ = collecting.wait();
        drop(pause);
        hub = ws.serve_env(&[], &env).unwrap();
        c = hub.ws().await.unwrap();
        // The start's collection finishes what the killed one began.
        wait_until("the collection at start", Duration::from_secs(20), || {
            let refs = ws.checkpoint_git(&["for-each-ref"]).unwrap();
            !String::from_utf8_lossy(&refs).contains(&run_id)
        })
        .unwrap();
        let r = hub.curl().get(&format!("/suggestions/{done_id}")).unwrap();
        assert_eq!(r.status, 404, "{point}: {}", r.body);
        assert_pending(&hub, std::slice::from_ref(&pending_id));
    }
    let r = gc(&ws, false);
    assert_eq!(r["objects"], "repacked", "{r}");
    assert_pending(&hub, std::slice::from_ref(&pending_id));
    let r = c
        .decide(&pending_id, &hunk_of(&pending), "accept")
        .await
        .unwrap();
    assert_eq!(r["data"]["applied"], true, "{r}");
    assert!(ws.read_string("data.txt").unwrap().starts_with("keep me\n"));
}

/// Past `max_sessions`, the oldest finished sessions go before their time is up; a session
/// with a pending suggestion stays, however old.
#[tokio::test]
async fn past_max_sessions_the_oldest_finished_go_first() {
    let ws = workspace("[retention]\nmax_sessions = 2\ngc_interval_minutes = 0\n");
    let agent = agent(&ws);
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let pending = run_agent(&hub, &mut c, &agent, "oldest, pending")
        .await
        .unwrap();
    let mut decided = Vec::new();
    for i in 0..3 {
        let s = run_agent(&hub, &mut c, &agent, &format!("finished {i}"))
            .await
            .unwrap();
        let r = c
            .decide(s["id"].as_str().unwrap(), &hunk_of(&s), "reject")
            .await
            .unwrap();
        assert_eq!(r["success"], true, "{r}");
        decided.push(s["id"].as_str().unwrap().to_string());
    }
    // The collections after each new run did it: four sessions, two allowed, so the oldest
    // finished ones went, 72 hours or not (this one waits for any still going).
    let r = gc(&ws, false);
    assert_eq!(
        (&r["sessions"], &r["pending_suggestions"]),
        (&json!(0), &json!(1)),
        "{r}"
    );
    for (id, status) in [(&decided[0], 404), (&decided[1], 404), (&decided[2], 200)] {
        assert_eq!(
            hub.curl()
                .get(&format!("/suggestions/{id}"))
                .unwrap()
                .status,
            status,
            "{id}"
        );
    }
    assert_pending(&hub, &[pending["id"].as_str().unwrap().to_string()]);
}

/// A run of `agent` on `prompt`, its suggestion rejected.
async fn rejected(hub: &Hub, c: &mut Ws, agent: &Path, prompt: &str) {
    let s = run_agent(hub, c, agent, prompt).await.unwrap();
    let r = c
        .decide(s["id"].as_str().unwrap(), &hunk_of(&s), "reject")
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
}

/// Past `max_feedback_bytes` the feedback log moves to `feedback.jsonl.1` whole, and the next
/// decision starts the new one: every decision is in one of the two, once.
#[tokio::test]
async fn the_feedback_log_is_rotated_and_keeps_every_decision() {
    let ws = workspace(&format!("{RETENTION_NOW}max_feedback_bytes = 30000\n"));
    let agent = agent(&ws);
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    rejected(&hub, &mut c, &agent, "one").await;
    rejected(&hub, &mut c, &agent, "two").await;
    let lines = |name: &str| -> Vec<Value> {
        std::fs::read_to_string(ws.state().join(name))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    assert_eq!(lines("feedback.jsonl").len(), 2);
    let r = gc(&ws, false);
    assert_eq!(r["feedback_rotated"], true, "{r}");
    assert_eq!(lines("feedback.jsonl.1").len(), 2);
    assert!(lines("feedback.jsonl").is_empty());
    rejected(&hub, &mut c, &agent, "three").await;
    let (old, new) = (lines("feedback.jsonl.1"), lines("feedback.jsonl"));
    assert_eq!((old.len(), new.len()), (2, 1));
    assert!(new[0]["seq"].as_u64() > old[1]["seq"].as_u64());
    // Positive control: under the size, nothing moves.
    let r = gc(&ws, false);
    assert_eq!(r["feedback_rotated"], false, "{r}");
    assert_eq!(lines("feedback.jsonl").len(), 1);
    // `hunkgate status` says how big the state dir is.
    let state = ws.state().display().to_string();
    let out = ws.cli(&["status", "--state-dir", &state]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("state size "), "{text}");
}

/// Past `max_runs_per_session`, a session that stays loses its oldest finished runs (and the
/// journal says so across a restart); the session itself, its newest runs and a pending one
/// stay.
#[tokio::test]
async fn past_max_runs_per_session_the_oldest_finished_runs_go() {
    let ws = workspace("[retention]\nmax_runs_per_session = 2\ngc_interval_minutes = 0\n");
    let agent = agent(&ws);
    let mut hub = ws.serve(&[]).unwrap();
    let session = hub
        .curl()
        .post("/sessions", &json!({"title": "long"}))
        .unwrap();
    let sid = session.body["id"].as_str().unwrap().to_string();
    let mut c = hub.ws().await.unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let mut runs = Vec::new();
    for i in 0..4 {
        let r = c
            .call(json!({"type": "run", "prompt": format!("step {i}"), "agent": template, "sessionId": sid}))
            .await
            .unwrap();
        let run = r["data"]["run_id"].as_str().unwrap().to_string();
        let s = c
            .event(
                "suggestion.ready",
                |v| v["suggestion"]["run_id"] == run,
                Duration::from_secs(60),
            )
            .await
            .unwrap()["suggestion"]
            .clone();
        if i > 0 {
            let r = c
                .decide(s["id"].as_str().unwrap(), &hunk_of(&s), "reject")
                .await
                .unwrap();
            assert_eq!(r["success"], true, "{r}");
        }
        runs.push(run);
    }
    gc(&ws, false);
    // Four runs, two allowed: the oldest finished ones (1 and 2; 0 is pending) went.
    let expect = |hub: &Hub| {
        let s = hub.curl().get(&format!("/sessions/{sid}")).unwrap().body;
        assert_eq!(s["run_ids"], json!([runs[0], runs[3]]), "{s}");
        for (run, status) in [
            (&runs[0], 200),
            (&runs[1], 404),
            (&runs[2], 404),
            (&runs[3], 200),
        ] {
            assert_eq!(
                hub.curl().get(&format!("/runs/{run}")).unwrap().status,
                status,
                "{run}"
            );
        }
    };
    expect(&hub);
    drop(c);
    hub.stop().unwrap();
    let hub = ws.serve(&[]).unwrap();
    expect(&hub);
}

/// The agent's token cannot drive a collection (reviewer API): its `POST /gc` is refused.
#[tokio::test]
async fn an_agent_cannot_ask_for_a_collection() {
    let ws = workspace(RETENTION_NOW);
    let agent = ws
        .agent_script(
            "agent.sh",
            "curl -s -o /dev/null -w '%{http_code}\\n' -X POST \
             -H \"Authorization: Bearer $HUNKGATE_AGENT_TOKEN\" \"$HUNKGATE_URL/gc\" > gc-status.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "collect").await.unwrap();
    let diff = s["hunks"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("+403"), "{diff}");
    // Positive control: the reviewer's token may.
    let r = hub.curl().post("/gc", &json!({"dry_run": true})).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

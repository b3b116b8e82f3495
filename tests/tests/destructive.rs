//! Destructive changes ask first (issue #58 item 2): hunks that delete a file, rename one,
//! change its mode or delete many lines are marked `destructive`; an accept-all over REST, the
//! WebSocket or the CLI lands the others and leaves those pending, saying so, until confirmed;
//! a named accept lands one; and `hunkgate restore PATH` brings back a file an accepted hunk
//! deleted, byte for byte and with its mode, after a hub restart too.

use std::collections::BTreeSet;

use hunkgate_tests::{hunk_id, mode_of, run_agent, Hub, Workspace};
use serde_json::{json, Value};

/// Lines of `big.txt`; the agent deletes all but the first, more than the default threshold.
const BIG: usize = 61;

/// The hunks of the suggestion below that an accept-all must leave pending.
const DESTRUCTIVE: [&str; 4] = ["big.txt", "new.txt", "run.sh", "tool.sh"];

fn big() -> String {
    (1..=BIG).map(|i| format!("line {i}\n")).collect()
}

/// A repository and an agent that deletes the executable `tool.sh`, renames `old.txt` to
/// `new.txt`, makes `run.sh` executable, deletes 60 lines of `big.txt`, and makes two
/// ordinary changes (edits `a.txt`, creates `b.txt`).
fn workspace() -> (Workspace, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let big = big();
    let ws = Workspace::new(&[
        ("a.txt", b"one\ntwo\nthree\n"),
        ("tool.sh", b"#!/bin/sh\necho tool\n"),
        ("old.txt", b"moved content\n"),
        ("run.sh", b"#!/bin/sh\necho run\n"),
        ("big.txt", big.as_bytes()),
    ])
    .unwrap();
    let perm = |p: &str, m: u32| {
        std::fs::set_permissions(ws.repo().join(p), std::fs::Permissions::from_mode(m)).unwrap()
    };
    perm("tool.sh", 0o755);
    perm("run.sh", 0o644);
    ws.git(&["commit", "-qam", "tool.sh is executable"])
        .unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "printf 'one\\nTWO\\nthree\\n' > a.txt\n\
             printf 'brand new\\n' > b.txt\n\
             rm tool.sh\n\
             mv old.txt new.txt\n\
             chmod +x run.sh\n\
             printf 'line 1\\n' > big.txt",
        )
        .unwrap();
    (ws, agent)
}

async fn published(ws: &Workspace, agent: &std::path::Path) -> (Hub, Value, String) {
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, agent, "destructive").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    (hub, s, sid)
}

fn ids(s: &Value, files: &[&str]) -> BTreeSet<String> {
    files.iter().map(|f| hunk_id(s, f, 0)).collect()
}

fn listed(v: &Value, key: &str) -> BTreeSet<String> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {v}"))
        .iter()
        .map(|d| d["hunk_id"].as_str().unwrap().to_string())
        .collect()
}

/// Nothing destructive landed: the deleted, renamed, chmodded and shrunk files are as they were.
fn assert_destructive_not_applied(ws: &Workspace) {
    assert!(ws.exists("tool.sh") && ws.exists("old.txt") && !ws.exists("new.txt"));
    assert_eq!(mode_of(&ws.repo().join("run.sh")).unwrap(), 0o644);
    assert_eq!(ws.read_string("big.txt").unwrap(), big());
}

fn assert_destructive_applied(ws: &Workspace) {
    assert!(!ws.exists("tool.sh") && !ws.exists("old.txt"));
    assert_eq!(ws.read_string("new.txt").unwrap(), "moved content\n");
    assert_eq!(mode_of(&ws.repo().join("run.sh")).unwrap(), 0o755);
    assert_eq!(ws.read_string("big.txt").unwrap(), "line 1\n");
}

#[tokio::test]
async fn hunks_are_marked_destructive_at_publish() {
    let (ws, agent) = workspace();
    let (_hub, s, _) = published(&ws, &agent).await;
    let marked: BTreeSet<String> = s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["destructive"] == true)
        .map(|h| h["file"].as_str().unwrap().to_string())
        .collect();
    let expected: BTreeSet<String> = DESTRUCTIVE.iter().map(|f| f.to_string()).collect();
    assert_eq!(marked, expected, "{:#}", s["hunks"]);
    // The ordinary ones say so too.
    for f in ["a.txt", "b.txt"] {
        let h = hunkgate_tests::find_hunk(&s, f, 0);
        assert_eq!(h["destructive"], false, "{h}");
    }
}

#[tokio::test]
async fn rest_accept_all_leaves_destructive_pending_until_confirmed_and_restore_brings_a_deletion_back(
) {
    let (ws, agent) = workspace();
    let (mut hub, s, sid) = published(&ws, &agent).await;
    let curl = hub.curl();
    let r = curl
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "accept"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(listed(&r.body, "decided"), ids(&s, &["a.txt", "b.txt"]));
    assert_eq!(
        listed(&r.body, "skipped_destructive"),
        ids(&s, &DESTRUCTIVE)
    );
    assert_eq!(r.body["remaining_hunks"], 4);
    let message = r.body["message"].as_str().unwrap();
    assert!(
        message.starts_with("4 destructive hunks left pending")
            && message.contains("deletes tool.sh")
            && message.contains("renames old.txt to new.txt")
            && message.contains("deletes 60 lines of big.txt")
            && message.contains("confirm"),
        "{message}"
    );
    assert_eq!(ws.read_string("a.txt").unwrap(), "one\nTWO\nthree\n");
    assert_eq!(ws.read_string("b.txt").unwrap(), "brand new\n");
    assert_destructive_not_applied(&ws);

    // Confirmed, they land.
    let r = curl
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "accept", "confirm": true}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(listed(&r.body, "decided"), ids(&s, &DESTRUCTIVE));
    assert!(r.body.get("skipped_destructive").is_none(), "{}", r.body);
    assert_destructive_applied(&ws);

    // After a restart, one command brings the deleted file back, bytes and mode.
    hub.stop().unwrap();
    let hub = ws.serve(&[]).unwrap();
    let out = ws.cli(&["restore", "tool.sh"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(ws.read("tool.sh").unwrap(), b"#!/bin/sh\necho tool\n");
    assert_eq!(mode_of(&ws.repo().join("tool.sh")).unwrap(), 0o755);
    // The rename's old path too, over REST.
    let r = hub
        .curl()
        .post("/restore", &json!({"path": "old.txt"}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("old.txt").unwrap(), "moved content\n");

    // It never overwrites: with the file there again (edited by the user), it refuses and
    // changes nothing.
    ws.write("tool.sh", b"my own tool\n").unwrap();
    let out = ws.cli(&["restore", "tool.sh"]).unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("move it away first"), "{err}");
    assert_eq!(ws.read("tool.sh").unwrap(), b"my own tool\n");
    // A path nothing deleted is not found.
    let r = hub
        .curl()
        .post("/restore", &json!({"path": "a.txt"}))
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.body);

    // Each restore is in the feedback log.
    let restored: Vec<String> = ws
        .feedback_log()
        .unwrap()
        .iter()
        .filter(|l| l["action"] == "restore")
        .map(|l| l["hunk_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        restored,
        vec![hunk_id(&s, "tool.sh", 0), hunk_id(&s, "new.txt", 0)]
    );
}

#[tokio::test]
async fn ws_accept_all_skips_destructive_and_a_named_accept_lands_one() {
    let (ws, agent) = workspace();
    let (hub, s, sid) = published(&ws, &agent).await;
    let mut c = hub.ws().await.unwrap();
    // One file's accept-all: its only hunk is destructive, so nothing is decided.
    let r = c
        .call(
            json!({"type": "feedback_all", "suggestionId": sid, "action": "accept",
                     "file": "tool.sh"}),
        )
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["decided"], json!([]), "{r}");
    assert_eq!(
        listed(&r["data"], "skipped_destructive"),
        ids(&s, &["tool.sh"])
    );
    assert!(
        r["data"]["message"]
            .as_str()
            .unwrap()
            .starts_with("1 destructive hunk left pending (deletes tool.sh): accept it by name"),
        "{r}"
    );
    assert!(ws.exists("tool.sh"));
    let r = c
        .call(json!({"type": "feedback_all", "suggestionId": sid, "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    let d = &r["data"];
    assert_eq!(listed(d, "decided"), ids(&s, &["a.txt", "b.txt"]));
    assert_eq!(listed(d, "skipped_destructive"), ids(&s, &DESTRUCTIVE));
    assert_destructive_not_applied(&ws);

    // A destructive hunk accepted by name is the reviewer's explicit choice.
    let r = c
        .decide(&sid, &hunk_id(&s, "tool.sh", 0), "accept")
        .await
        .unwrap();
    assert_eq!(r["data"]["applied"], true, "{r}");
    assert!(!ws.exists("tool.sh"));
    // The rest still wait; confirmed over the WebSocket, they land.
    let r = c
        .call(
            json!({"type": "feedback_all", "suggestionId": sid, "action": "accept",
                     "confirm": true}),
        )
        .await
        .unwrap();
    assert_eq!(
        listed(&r["data"], "decided"),
        ids(&s, &["big.txt", "new.txt", "run.sh"])
    );
    assert_destructive_applied(&ws);
}

#[tokio::test]
async fn cli_accept_all_needs_include_destructive() {
    let (ws, agent) = workspace();
    let (_hub, s, sid) = published(&ws, &agent).await;
    let out = ws.cli(&["show", &sid]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8(out.stdout).unwrap();
    let marked: BTreeSet<String> = shown
        .lines()
        .filter(|l| l.ends_with("  DESTRUCTIVE"))
        .map(|l| l.split_whitespace().nth(3).unwrap().to_string())
        .collect();
    assert_eq!(marked, ids(&s, &DESTRUCTIVE), "{shown}");

    let out = ws.cli(&["accept", &sid]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for id in ids(&s, &DESTRUCTIVE) {
        assert!(text.contains(&format!("SKIPPED   {id}: ")), "{text}");
    }
    assert!(text.contains("--include-destructive"), "{text}");
    assert_eq!(ws.read_string("a.txt").unwrap(), "one\nTWO\nthree\n");
    assert_destructive_not_applied(&ws);

    let out = ws.cli(&["accept", &sid, "--include-destructive"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_destructive_applied(&ws);
}

/// `[review] destructive_deleted_lines` sets the threshold; what a deletion removed stays
/// restorable across a collection while its suggestion is kept (the collection keeps the
/// suggestion's base commit, and with it the deleted file), and once retention collected the
/// suggestion, `restore` says there is nothing to restore and changes nothing.
#[tokio::test]
async fn restore_lasts_as_long_as_retention_keeps_the_suggestion() {
    let ws = Workspace::new(&[
        ("a.txt", b"one\n"),
        ("list.txt", b"1\n2\n3\n4\n"),
        ("tool.sh", b"#!/bin/sh\necho tool\n"),
    ])
    .unwrap();
    let cfg = ws.home().join(".config/hunkgate");
    std::fs::create_dir_all(&cfg).unwrap();
    let config = |ttl_hours: u32| {
        let text = format!(
            "[review]\ndestructive_deleted_lines = 2\n[retention]\ncompleted_ttl_hours = {ttl_hours}\nprune_grace_minutes = 0\ngc_interval_minutes = 0\n"
        );
        std::fs::write(cfg.join("config.toml"), text).unwrap();
    };
    config(1);
    let agent = ws
        .agent_script(
            "agent.sh",
            "echo ONE > a.txt\nprintf '4\\n' > list.txt\nrm tool.sh",
        )
        .unwrap();
    let (mut hub, s, sid) = published(&ws, &agent).await;
    let curl = hub.curl();
    let all = |confirm: bool| json!({"suggestion_id": sid, "action": "accept", "confirm": confirm});
    let r = curl.post("/feedback/all", &all(false)).unwrap();
    assert_eq!(
        listed(&r.body, "skipped_destructive"),
        ids(&s, &["list.txt", "tool.sh"]),
        "3 lines deleted is over the configured 2: {}",
        r.body
    );
    let r = curl.post("/feedback/all", &all(true)).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!ws.exists("tool.sh"));

    // Kept (finished an hour ago at the earliest): a collection prunes unreferenced objects at
    // once, and the deleted file is still there to restore.
    let out = ws.cli(&["gc"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = ws.cli(&["restore", "tool.sh"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(ws.read("tool.sh").unwrap(), b"#!/bin/sh\necho tool\n");

    // Collected: nothing to restore, nothing changed.
    std::fs::remove_file(ws.repo().join("tool.sh")).unwrap();
    hub.stop().unwrap();
    config(0);
    let _hub = ws.serve(&[]).unwrap();
    let out = ws.cli(&["gc"]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = ws.cli(&["restore", "tool.sh"]).unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing to restore"), "{err}");
    assert!(!ws.exists("tool.sh"));
}

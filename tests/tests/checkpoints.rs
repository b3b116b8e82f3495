//! Checkpoints and rollback (seed 000 §27) against the real hub: inspect a checkpoint, its
//! three-way view, scoped rollback (with a positive case and a conflicting newer edit) and hard
//! rollback.

use std::time::Duration;

use hunkgate_tests::{run_agent, Workspace};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

fn sha_tag(s: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(s.as_bytes())))
}

#[tokio::test]
async fn scoped_and_hard_rollback() {
    let original = numbered(30);
    let ws = Workspace::new(&[("a.txt", original.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE THREE/; s/^line 25$/LINE TWENTY-FIVE/' a.txt\necho fresh > new.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut client = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut client, &agent, "shout").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let created = client
        .event(
            "checkpoint.created",
            |v| v["checkpoint_id"] == sid.as_str(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(created["affected_files"], json!(["a.txt", "new.txt"]));
    let agent_text = original
        .replace("line 3\n", "LINE THREE\n")
        .replace("line 25\n", "LINE TWENTY-FIVE\n");

    let r = client
        .call(json!({"type": "feedback_all", "suggestionId": sid, "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(ws.read_string("a.txt").unwrap(), agent_text);

    let curl = hub.curl();
    let cp = curl.get(&format!("/checkpoints/{sid}")).unwrap();
    assert_eq!(cp.status, 200, "{}", cp.body);
    let files = cp.body["affected_files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["file_path"], "a.txt");
    assert_eq!(files[0]["base_hash"], sha_tag(&original));
    assert_eq!(files[0]["current_hash"], sha_tag(&agent_text));
    assert_eq!(files[0]["applied_hunk_ids"].as_array().unwrap().len(), 2);
    assert_eq!(files[1]["file_path"], "new.txt");
    assert_eq!(files[1]["base_hash"], Value::Null);

    let d3 = curl
        .get(&format!("/checkpoints/{sid}/diff3?file_path=a.txt"))
        .unwrap();
    assert_eq!(d3.status, 200, "{}", d3.body);
    assert_eq!(d3.body["checkpoint_base"], original.as_str());
    assert_eq!(d3.body["agent_proposed"], agent_text.as_str());
    assert_eq!(d3.body["current"], agent_text.as_str());
    let missing = curl
        .get(&format!("/checkpoints/{sid}/diff3?file_path=nope.txt"))
        .unwrap();
    assert_eq!(missing.status, 404);

    // Scoped rollback of the first hunk keeps the second hunk and an unrelated newer edit.
    let with_user_edit = agent_text.replace("line 12\n", "line 12 (mine)\n");
    ws.write("a.txt", with_user_edit.as_bytes()).unwrap();
    let first = format!("{sid}:a.txt:0");
    let second = format!("{sid}:a.txt:1");
    let r = curl
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "scoped_selected", "hunk_ids": [first]}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        with_user_edit.replace("LINE THREE\n", "line 3\n")
    );
    client
        .event(
            "checkpoint.rollback.completed",
            |v| v["checkpoint_id"] == sid.as_str(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let got = curl.get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(got["hunks"][0]["state"], "rejected");
    assert_eq!(got["hunks"][1]["state"], "accepted");

    // A newer edit overlapping the second hunk: refused, nothing touched.
    let overlapping = ws
        .read_string("a.txt")
        .unwrap()
        .replace("line 24\n", "line 24 (mine)\n");
    ws.write("a.txt", overlapping.as_bytes()).unwrap();
    let r = curl
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "scoped_selected", "hunk_ids": [second]}),
        )
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "conflict");
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        overlapping,
        "a refused rollback changes nothing"
    );
    client
        .event(
            "checkpoint.rollback.failed",
            |v| v["checkpoint_id"] == sid.as_str(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    // Rolling back a hunk that is not applied is a clear error.
    let r = curl
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "scoped_selected", "hunk_ids": [first]}),
        )
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);

    // Hard rollback needs confirmation, then restores every affected file to the base.
    let r = curl
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "hard_all"}),
        )
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body["error"].as_str().unwrap().contains("confirm"),
        "{}",
        r.body
    );
    assert!(
        ws.exists("new.txt"),
        "an unconfirmed hard rollback changes nothing"
    );
    let r = curl
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "hard_all", "confirm": true}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), original);
    assert!(!ws.exists("new.txt"));
    let got = curl.get(&format!("/suggestions/{sid}")).unwrap().body;
    for h in got["hunks"].as_array().unwrap() {
        assert_eq!(h["state"], "rejected", "{h}");
    }
    let log = std::fs::read_to_string(hub.state.join("feedback.jsonl")).unwrap();
    let rollbacks: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["action"] == "rollback")
        .collect();
    assert_eq!(rollbacks.len(), 3, "one scoped + two hard: {log}");
    assert_eq!(rollbacks[0]["via"], "scoped_selected");
    assert_eq!(rollbacks[1]["via"], "hard_all");
}

#[tokio::test]
async fn hard_rollback_reaches_later_suggestions_on_the_same_file() {
    let original = numbered(20);
    let ws = Workspace::new(&[("a.txt", original.as_bytes())]).unwrap();
    let first = ws
        .agent_script("first.sh", "sed -i 's/^line 2$/TWO/' a.txt")
        .unwrap();
    let second = ws
        .agent_script("second.sh", "sed -i 's/^line 18$/EIGHTEEN/' a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut client = hub.ws().await.unwrap();
    let s1 = run_agent(&hub, &mut client, &first, "one").await.unwrap();
    let s1id = s1["id"].as_str().unwrap().to_string();
    let r = client
        .call(json!({"type": "feedback_all", "suggestionId": s1id, "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true);
    let s2 = run_agent(&hub, &mut client, &second, "two").await.unwrap();
    let s2id = s2["id"].as_str().unwrap().to_string();
    let r = client
        .call(json!({"type": "feedback_all", "suggestionId": s2id, "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        original
            .replace("line 2\n", "TWO\n")
            .replace("line 18\n", "EIGHTEEN\n")
    );

    let r = hub
        .curl()
        .post(
            &format!("/checkpoints/{s1id}/rollback"),
            &json!({"mode": "hard_all", "confirm": true}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), original);
    let later = hub
        .curl()
        .get(&format!("/suggestions/{s2id}"))
        .unwrap()
        .body;
    assert_eq!(
        later["hunks"][0]["state"], "rejected",
        "the later edit to the file was rolled back too"
    );
}

#[tokio::test]
async fn mirrored_run_refs_show_a_run_in_the_users_repository() {
    for mirror in [false, true] {
        let ws = Workspace::new(&[("a.txt", b"one\ntwo\n")]).unwrap();
        ws.write("wip.txt", b"uncommitted work\n").unwrap();
        let status_before = ws.git(&["status", "--porcelain"]).unwrap();
        let agent = ws.agent_script("agent.sh", "echo three >> a.txt").unwrap();
        let flags: &[&str] = if mirror { &["--mirror-refs"] } else { &[] };
        let hub = ws.serve(flags).unwrap();
        let mut client = hub.ws().await.unwrap();
        let s = run_agent(&hub, &mut client, &agent, "count").await.unwrap();
        let run = s["run_id"].as_str().unwrap();
        let refs = ws.git(&["for-each-ref", "refs/hunkgate/"]).unwrap();
        if !mirror {
            assert_eq!(refs, "", "refs are mirrored only when asked");
            continue;
        }
        assert!(
            refs.contains(&format!("refs/hunkgate/runs/{run}/base")),
            "{refs}"
        );
        let diff = ws
            .git(&[
                "diff",
                &format!("refs/hunkgate/runs/{run}/base"),
                &format!("refs/hunkgate/runs/{run}/head"),
            ])
            .unwrap();
        assert!(diff.contains("+three"), "{diff}");
        // The base includes uncommitted work, as the user saw it when the run started.
        let wip = ws
            .git(&["show", &format!("refs/hunkgate/runs/{run}/base:wip.txt")])
            .unwrap();
        assert_eq!(wip, "uncommitted work\n");
        assert_eq!(
            ws.git(&["status", "--porcelain"]).unwrap(),
            status_before,
            "index and HEAD untouched"
        );
        ws.git(&["fsck", "--no-dangling"]).unwrap();
    }
}

#[tokio::test]
async fn rollback_feedback_lines_carry_the_seq_of_their_event() {
    let ws = Workspace::new(&[("a.txt", numbered(30).as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' a.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "two").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let ids: Vec<String> = s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect();
    let r = hub
        .curl()
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "accept"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = hub
        .curl()
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "scoped_selected", "hunk_ids": [ids[0]]}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let r = hub
        .curl()
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "hard_all", "confirm": true}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(30));

    let log = ws.feedback_log().unwrap();
    let rollbacks: Vec<&Value> = log.iter().filter(|l| l["action"] == "rollback").collect();
    assert_eq!(rollbacks.len(), 2, "{log:#?}");
    for line in &rollbacks {
        let seq = line["seq"].as_u64().unwrap();
        assert!(seq > 0, "{line}");
        let ev = c
            .event(
                "suggestion.hunk_applied",
                |v| v["seq"].as_u64() == Some(seq),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(ev["hunk_id"], line["hunk_id"]);
        assert_eq!(ev["action"], "rejected");
    }
    let seqs: Vec<u64> = log.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[tokio::test]
async fn a_directory_turned_symlink_is_reported_unreadable_not_an_internal_error() {
    let ws = Workspace::new(&[("sub/a.txt", numbered(10).as_bytes())]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^line 3$/LINE 3/' sub/a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "one").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let curl = hub.curl();

    // Positive control: readable.
    let r = curl.get(&format!("/checkpoints/{sid}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let f = &r.body["affected_files"][0];
    assert_eq!(f["file_path"], "sub/a.txt");
    assert!(f["unreadable"].is_null(), "{f}");
    assert_eq!(f["current_hash"], sha_tag(&numbered(10)));

    // The directory becomes a symlink to one outside the repository.
    let outside = ws.path("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("a.txt"), "outside\n").unwrap();
    std::fs::rename(ws.repo().join("sub"), ws.path("sub-moved")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.repo().join("sub")).unwrap();

    let r = curl.get(&format!("/checkpoints/{sid}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let f = &r.body["affected_files"][0];
    assert!(
        f["unreadable"]
            .as_str()
            .is_some_and(|w| w.contains("symlink")),
        "{f}"
    );
    assert!(f["current_hash"].is_null(), "{f}");
    assert_eq!(f["changed_since_base"], true);

    let r = curl
        .get(&format!("/checkpoints/{sid}/diff3?file_path=sub/a.txt"))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body["current"].is_null(), "{}", r.body);
    assert!(
        r.body["unreadable"]
            .as_str()
            .is_some_and(|w| w.contains("symlink")),
        "{}",
        r.body
    );
    assert_eq!(r.body["checkpoint_base"], numbered(10));
}

/// Peak resident memory of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_hard_rollback_of_many_hunks_takes_memory_in_proportion() {
    // 250 hunks of long lines: a copy of the whole suggestion per hunk would take well over
    // 100 MiB; in proportion, it is a few MiB.
    let n = 250;
    let original: String = (0..n * 10)
        .map(|i| format!("{i:05} {}\n", "x".repeat(290)))
        .collect();
    let ws = Workspace::new(&[("big.txt", original.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^\\([0-9]\\{4\\}5\\) x/\\1 Y/' big.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "many").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["hunks"].as_array().unwrap().len(), n);
    let r = hub
        .curl()
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "accept"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["decided"].as_array().unwrap().len(), n, "{}", r.body);

    let pid = hub.child.id();
    let before = peak_rss_kib(pid);
    let r = hub
        .curl()
        .post(
            &format!("/checkpoints/{sid}/rollback"),
            &json!({"mode": "hard_all", "confirm": true}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let grew = peak_rss_kib(pid).saturating_sub(before);
    assert_eq!(ws.read_string("big.txt").unwrap(), original);
    assert_eq!(r.body["hunk_ids"].as_array().unwrap().len(), n);
    assert!(
        grew < 48 * 1024,
        "a hard rollback of {n} hunks raised the hub's peak memory by {grew} KiB"
    );
}

#[tokio::test]
async fn a_publish_of_binary_files_takes_memory_in_proportion_to_a_file_not_to_all() {
    // New files of 4 MiB of random bytes (nothing compresses them away): 25 of them (100
    // MiB), then 50 (200 MiB). What a publish holds is bounded by its budgets (the read
    // rounds', the batch's and the kept contents': about 50 MiB, whatever the total), so the peak of the second is about the peak of the first. Holding the files
    // whole, or reading them all back for their diffs (they are binary: there is nothing to
    // diff), it would be 100 MiB more.
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "for i in $(seq 1 \"$1\"); do head -c 4194304 /dev/urandom > big$1-$i.bin; done",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let mut peaks = Vec::new();
    for files in [25, 50] {
        let s = run_agent(&hub, &mut c, &agent, &files.to_string())
            .await
            .unwrap();
        assert_eq!(s["hunks"].as_array().unwrap().len(), files, "{s}");
        peaks.push(peak_rss_kib(hub.child.id()));
    }
    let grew = peaks[1].saturating_sub(peaks[0]);
    assert!(
        grew < 32 * 1024,
        "a 200 MiB publish raised the hub's peak memory by {grew} KiB over a 100 MiB one's ({peaks:?} KiB)"
    );
}

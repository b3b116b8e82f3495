//! The feedback log (`<state>/feedback.jsonl`): one self-contained JSON line per decision, with
//! every documented field, the user's comments and modified diffs, conflicts, and the hunks
//! `complete` rejected.

use std::collections::HashMap;
use std::time::Duration;

use hunkgate_tests::{find_hunk, hunk_id, numbered, run_agent, Workspace};
use serde_json::{json, Value};

const SECS5: Duration = Duration::from_secs(5);

fn ok(r: &Value) -> &Value {
    assert_eq!(r["success"], true, "expected success: {r}");
    &r["data"]
}

/// RFC 3339 in UTC, e.g. `2026-11-21T22:10:00.123Z`.
fn is_rfc3339_utc(ts: &str) -> bool {
    let b = ts.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && ts.ends_with('Z')
}

#[tokio::test]
async fn every_decision_is_one_complete_line() {
    let a = numbered(45);
    let ws = Workspace::new(&[("a.txt", a.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 15$/LINE 15/; s/^line 27$/LINE 27/; s/^line 39$/LINE 39/' a.txt",
        )
        .unwrap();
    let prompt = "make it \"loud\"\nplease";
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, prompt).await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let template = format!("{} {{prompt}}", agent.display());
    assert_eq!(s["agent"], template.as_str());
    assert_eq!(s["prompt"], prompt);
    let h: Vec<String> = (0..4).map(|i| hunk_id(&s, "a.txt", i)).collect();

    // accept with a comment
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": h[0], "action": "accept",
                     "comment": "nice one"}),
        )
        .await
        .unwrap();
    ok(&r);
    // modify
    let mine = "@@ -12,7 +12,7 @@\n line 12\n line 13\n line 14\n-line 15\n+line 15 (mine)\n line 16\n line 17\n line 18\n";
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": h[1], "action": "modify",
                     "modifiedDiff": mine}),
        )
        .await
        .unwrap();
    ok(&r);
    // a conflict (the user changed the hunk's context), then a reject with a comment, an undo
    let before = ws.read_string("a.txt").unwrap();
    ws.write(
        "a.txt",
        before.replace("line 26\n", "line 26 (me)\n").as_bytes(),
    )
    .unwrap();
    let r = c.decide(&sid, &h[2], "accept").await.unwrap();
    assert_eq!(r["code"], "conflict", "{r}");
    ws.write("a.txt", before.as_bytes()).unwrap();
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": h[2], "action": "reject",
                     "comment": "not this one"}),
        )
        .await
        .unwrap();
    ok(&r);
    ok(&c.decide(&sid, &h[2], "undo").await.unwrap());
    // finalize: the two pending hunks are rejected in one decision
    let r = c
        .call(json!({"type": "complete", "suggestionId": sid, "action": "finalize"}))
        .await
        .unwrap();
    ok(&r);
    c.event(
        "suggestion.completed",
        |v| v["suggestion_id"] == sid.as_str(),
        SECS5,
    )
    .await
    .unwrap();

    let log = ws.feedback_log().unwrap();
    let summary: Vec<(&str, &str, &str)> = log
        .iter()
        .map(|l| {
            (
                l["hunk_id"].as_str().unwrap(),
                l["action"].as_str().unwrap(),
                l["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (h[0].as_str(), "accept", "applied"),
            (h[1].as_str(), "modify", "modified"),
            (h[2].as_str(), "accept", "conflict"),
            (h[2].as_str(), "reject", "rejected"),
            (h[2].as_str(), "undo", "undone"),
            (h[2].as_str(), "reject", "rejected"),
            (h[3].as_str(), "reject", "rejected"),
        ]
    );

    // Every line is self-contained.
    let events: HashMap<u64, &Value> = c
        .seen
        .iter()
        .filter_map(|v| v["seq"].as_u64().map(|s| (s, v)))
        .collect();
    let mut last_ts = String::new();
    for (i, l) in log.iter().enumerate() {
        let ts = l["ts"].as_str().unwrap();
        assert!(is_rfc3339_utc(ts), "ts {ts:?}");
        assert!(ts >= last_ts.as_str(), "ts goes back: {ts} < {last_ts}");
        last_ts = ts.to_string();
        assert_eq!(l["suggestion_id"], sid.as_str());
        assert_eq!(l["run_id"], s["run_id"]);
        assert_eq!(l["file"], "a.txt");
        assert_eq!(l["kind"], "modify");
        let idx = h.iter().position(|x| l["hunk_id"] == x.as_str()).unwrap();
        assert_eq!(l["diff"], find_hunk(&s, "a.txt", idx)["diff"], "line {i}");
        assert_eq!(l["base_commit"], s["base_commit"]);
        assert_eq!(l["run_commit"], s["run_commit"]);
        assert_eq!(l["agent"], template.as_str());
        assert_eq!(l["prompt"], prompt);
        assert_eq!(l["decision_id"].as_str().unwrap().len(), 36, "{l}");
        // seq is the event that announced the decision
        let seq = l["seq"].as_u64().unwrap();
        let ev = events
            .get(&seq)
            .unwrap_or_else(|| panic!("no event with seq {seq} for line {i}: {l}"));
        if l["outcome"] == "conflict" {
            assert_eq!(ev["type"], "suggestion.error");
            assert_eq!(ev["code"], "apply_failed");
        } else {
            assert_eq!(ev["type"], "suggestion.hunk_applied", "{ev}");
        }
        assert_eq!(ev["hunk_id"], l["hunk_id"]);
    }
    assert_eq!(log[0]["comment"], "nice one");
    assert_eq!(log[3]["comment"], "not this one");
    assert!(log[1].get("comment").is_none(), "{}", log[1]);
    assert_eq!(log[1]["modified_diff"], mine);
    assert!(log
        .iter()
        .enumerate()
        .all(|(i, l)| i == 1 || l.get("modified_diff").is_none()));
    assert!(log[2]["error"]
        .as_str()
        .is_some_and(|e| e.contains("a.txt")));
    assert!(log.iter().take(5).all(|l| l.get("via").is_none()));
    assert_eq!(log[5]["via"], "finalize");
    assert_eq!(log[6]["via"], "finalize");
    // Single decisions have their own ids; `complete` shares one across its lines.
    for i in 0..5 {
        for j in i + 1..7 {
            assert_ne!(log[i]["decision_id"], log[j]["decision_id"], "{i} vs {j}");
        }
    }
    assert_eq!(log[5]["decision_id"], log[6]["decision_id"]);
    // The raw file is JSON lines: one object per line, each ending in "\n".
    let raw = std::fs::read_to_string(ws.state().join("feedback.jsonl")).unwrap();
    assert!(raw.ends_with('\n'));
    assert_eq!(raw.lines().count(), 7);
}

#[tokio::test]
async fn a_bulk_action_logs_one_decision_across_its_lines() {
    let text = numbered(30);
    let ws = Workspace::new(&[("a.txt", text.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' a.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout").await.unwrap();
    let r = c
        .call(
            json!({"type": "feedback_all", "suggestionId": s["id"], "action": "accept",
                     "comment": "all good"}),
        )
        .await
        .unwrap();
    assert_eq!(ok(&r)["decided"].as_array().unwrap().len(), 2);
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|l| l["comment"] == "all good"));
    assert!(log.iter().all(|l| l["outcome"] == "applied"));
    // protocol.md: "decision_id — unique per decision (a bulk action or `complete` shares one
    // across its lines)".
    assert_eq!(
        log[0]["decision_id"], log[1]["decision_id"],
        "feedback_all logged its hunks as separate decisions, but protocol.md says a bulk \
         action shares one decision_id across its lines"
    );
}

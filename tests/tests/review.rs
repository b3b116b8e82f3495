//! The review flow end to end: a scripted agent's suggestion reviewed hunk by hunk (accept,
//! reject, modify, undo, reject after accept), bulk decisions, `complete` (finalize and discard),
//! and several suggestions pending at once. Every file is checked byte for byte.

use std::time::Duration;

use hunkgate_tests::{find_hunk, hunk_id, numbered, run_agent, Workspace};
use serde_json::{json, Value};

const SECS5: Duration = Duration::from_secs(5);

fn ok(r: &Value) -> &Value {
    assert_eq!(r["success"], true, "expected success: {r}");
    &r["data"]
}

fn refused<'a>(r: &'a Value, code: &str) -> &'a Value {
    assert_eq!(r["success"], false, "expected a refusal ({code}): {r}");
    assert_eq!(r["code"], code, "{r}");
    r
}

/// `hunk_applied` events for one suggestion, in order, as (hunk id, action).
fn applied_events(seen: &[Value], sid: &str) -> Vec<(String, String)> {
    seen.iter()
        .filter(|v| v["type"] == "suggestion.hunk_applied" && v["suggestion_id"] == sid)
        .map(|v| {
            (
                v["hunk_id"].as_str().unwrap().to_string(),
                v["action"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn accept_reject_modify_undo_hunk_by_hunk() {
    let lib = numbered(30);
    let ws = Workspace::new(&[
        ("src/lib.txt", lib.as_bytes()),
        ("mod.txt", b"alpha\nbeta\ngamma\n"),
        ("old.txt", b"obsolete\n"),
    ])
    .unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' src/lib.txt\n\
             printf 'alpha\\nBETA\\ngamma\\n' > mod.txt\n\
             rm old.txt\n\
             printf 'fresh\\nfile\\n' > new.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "edit things")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["hunk_count"], 5, "{s:#}");
    assert_eq!(s["status"], "pending");
    assert_eq!(
        s["files"],
        json!(["mod.txt", "new.txt", "old.txt", "src/lib.txt"])
    );
    assert_eq!(find_hunk(&s, "new.txt", 0)["kind"], "create");
    assert_eq!(find_hunk(&s, "old.txt", 0)["kind"], "delete");
    assert_eq!(find_hunk(&s, "src/lib.txt", 0)["kind"], "modify");
    assert_eq!(
        find_hunk(&s, "mod.txt", 0)["diff"],
        "@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n"
    );
    // Nothing reaches the checkout before a decision.
    assert_eq!(ws.read("src/lib.txt").unwrap(), lib.as_bytes());
    assert!(!ws.exists("new.txt"));
    assert_eq!(ws.read("old.txt").unwrap(), b"obsolete\n");

    let lib0 = hunk_id(&s, "src/lib.txt", 0);
    let lib1 = hunk_id(&s, "src/lib.txt", 1);
    let modh = hunk_id(&s, "mod.txt", 0);
    let newh = hunk_id(&s, "new.txt", 0);
    let oldh = hunk_id(&s, "old.txt", 0);
    let lib_3 = lib.replace("line 3\n", "LINE 3\n");
    let lib_25 = lib.replace("line 25\n", "LINE 25\n");
    let lib_both = lib_3.replace("line 25\n", "LINE 25\n");

    // Accept the first edit of lib.txt: only that region changes.
    let r = c.decide(&sid, &lib0, "accept").await.unwrap();
    let d = ok(&r);
    assert_eq!(d["applied"], true);
    assert_eq!(d["remaining_hunks"], 4);
    assert_eq!(d["hunk"]["state"], "accepted");
    assert_eq!(ws.read_string("src/lib.txt").unwrap(), lib_3);

    // Reject the second: the checkout is not touched.
    let r = c.decide(&sid, &lib1, "reject").await.unwrap();
    assert_eq!(ok(&r)["applied"], false);
    assert_eq!(ws.read_string("src/lib.txt").unwrap(), lib_3);

    // The created file appears; the rejected deletion leaves old.txt alone.
    ok(&c.decide(&sid, &newh, "accept").await.unwrap());
    assert_eq!(ws.read("new.txt").unwrap(), b"fresh\nfile\n");
    ok(&c.decide(&sid, &oldh, "reject").await.unwrap());
    assert_eq!(ws.read("old.txt").unwrap(), b"obsolete\n");

    // Modify: the user's hand-written hunk is applied instead of the agent's.
    let mine = "@@ -1,3 +1,3 @@\n alpha\n-beta\n+beta (mine)\n gamma\n";
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": modh,
                     "action": "modify", "modifiedDiff": mine, "comment": "keep it lowercase"}),
        )
        .await
        .unwrap();
    let d = ok(&r);
    assert_eq!(d["hunk"]["state"], "modified");
    assert_eq!(d["hunk"]["applied_diff"], mine);
    assert_eq!(d["hunk"]["comment"], "keep it lowercase");
    assert_eq!(d["remaining_hunks"], 0);
    assert_eq!(ws.read("mod.txt").unwrap(), b"alpha\nbeta (mine)\ngamma\n");

    let got = hub.curl().get(&format!("/suggestions/{sid}")).unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(got.body["reviewed_count"], 5);
    assert_eq!(got.body["status"], "complete");
    assert!(
        got.body.get("closed").is_none(),
        "reviewed is not completed"
    );

    // Reject after accept restores the original, byte for byte.
    let r = c.decide(&sid, &lib0, "reject").await.unwrap();
    let d = ok(&r);
    assert_eq!(d["applied"], true, "reverse-applied: {r}");
    assert_eq!(d["hunk"]["state"], "rejected");
    assert_eq!(ws.read("src/lib.txt").unwrap(), lib.as_bytes());

    // A decided hunk must be undone before it is decided again.
    let r = c.decide(&sid, &lib0, "accept").await.unwrap();
    refused(&r, "already_decided");
    assert_eq!(ws.read("src/lib.txt").unwrap(), lib.as_bytes());

    // Undo: a rejected hunk just becomes pending; an applied one is reverse-applied.
    let r = c.decide(&sid, &lib1, "undo").await.unwrap();
    assert_eq!(ok(&r)["hunk"]["state"], "pending");
    assert_eq!(ws.read("src/lib.txt").unwrap(), lib.as_bytes());
    let r = c.decide(&sid, &modh, "undo").await.unwrap();
    let d = ok(&r);
    assert_eq!(d["hunk"]["state"], "pending");
    assert!(d["hunk"].get("applied_diff").is_none(), "{d}");
    assert_eq!(ws.read("mod.txt").unwrap(), b"alpha\nbeta\ngamma\n");
    ok(&c.decide(&sid, &newh, "undo").await.unwrap());
    assert!(!ws.exists("new.txt"), "undoing a create removes the file");
    // Undo of a pending hunk has nothing to undo (the undo just above is the positive control).
    refused(
        &c.decide(&sid, &lib1, "undo").await.unwrap(),
        "already_decided",
    );

    // Decide again after undo: the second edit lands, then the first one on top of it.
    ok(&c.decide(&sid, &lib1, "accept").await.unwrap());
    assert_eq!(ws.read_string("src/lib.txt").unwrap(), lib_25);
    refused(
        &c.decide(&sid, &lib1, "accept").await.unwrap(),
        "already_decided",
    );
    assert_eq!(ws.read_string("src/lib.txt").unwrap(), lib_25);
    ok(&c.decide(&sid, &lib0, "undo").await.unwrap());
    ok(&c.decide(&sid, &lib0, "accept").await.unwrap());
    assert_eq!(ws.read_string("src/lib.txt").unwrap(), lib_both);

    // The deletion: undo the rejection, accept it (file gone), reject it again (file back).
    ok(&c.decide(&sid, &oldh, "undo").await.unwrap());
    assert_eq!(ws.read("old.txt").unwrap(), b"obsolete\n");
    ok(&c.decide(&sid, &oldh, "accept").await.unwrap());
    assert!(!ws.exists("old.txt"));
    ok(&c.decide(&sid, &oldh, "reject").await.unwrap());
    assert_eq!(ws.read("old.txt").unwrap(), b"obsolete\n");

    // Final state of every file.
    assert_eq!(ws.read_string("src/lib.txt").unwrap(), lib_both);
    assert_eq!(ws.read("mod.txt").unwrap(), b"alpha\nbeta\ngamma\n");
    assert!(!ws.exists("new.txt"));
    assert_eq!(ws.read("old.txt").unwrap(), b"obsolete\n");

    // Every decision was announced, in order, with the right action (events arrive in order,
    // so once the last one is here, all are).
    let last_seq = ws.feedback_log().unwrap().last().unwrap()["seq"].clone();
    c.event("suggestion.hunk_applied", |v| v["seq"] == last_seq, SECS5)
        .await
        .unwrap();
    let evs = applied_events(&c.seen, &sid);
    let expected: Vec<(String, String)> = [
        (&lib0, "accepted"),
        (&lib1, "rejected"),
        (&newh, "accepted"),
        (&oldh, "rejected"),
        (&modh, "modified"),
        (&lib0, "rejected"),
        (&lib1, "undone"),
        (&modh, "undone"),
        (&newh, "undone"),
        (&lib1, "accepted"),
        (&lib0, "undone"),
        (&lib0, "accepted"),
        (&oldh, "undone"),
        (&oldh, "accepted"),
        (&oldh, "rejected"),
    ]
    .iter()
    .map(|(h, a)| (h.to_string(), a.to_string()))
    .collect();
    assert_eq!(evs, expected);
    // One feedback line per successful decision; refusals log nothing.
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), expected.len(), "{log:#?}");
    let actions: Vec<&str> = log.iter().map(|l| l["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "accept", "reject", "accept", "reject", "modify", "reject", "undo", "undo", "undo",
            "accept", "undo", "accept", "undo", "accept", "reject"
        ]
    );
}

#[tokio::test]
async fn feedback_all_for_one_file_and_for_the_whole_suggestion() {
    let text = numbered(30);
    let ws = Workspace::new(&[("a.txt", text.as_bytes()), ("b.txt", text.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' a.txt b.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["hunk_count"], 4);
    let changed = text
        .replace("line 3\n", "LINE 3\n")
        .replace("line 25\n", "LINE 25\n");

    // A file the suggestion does not touch is an error, and decides nothing.
    let r = c
        .call(json!({"type": "feedback_all", "suggestionId": sid, "action": "accept", "file": "zzz.txt"}))
        .await
        .unwrap();
    refused(&r, "not_found");
    assert_eq!(ws.read_string("a.txt").unwrap(), text);

    // Accept every hunk of a.txt only.
    let r = c
        .call(
            json!({"type": "feedback_all", "suggestionId": sid, "action": "accept",
                     "file": "a.txt", "comment": "a is fine"}),
        )
        .await
        .unwrap();
    let d = ok(&r);
    assert_eq!(d["suggestion_id"], sid.as_str());
    assert_eq!(
        d["decided"],
        json!([
            {"hunk_id": hunk_id(&s, "a.txt", 0), "state": "accepted"},
            {"hunk_id": hunk_id(&s, "a.txt", 1), "state": "accepted"},
        ])
    );
    assert_eq!(d["failed"], json!([]));
    assert_eq!(d["remaining_hunks"], 2);
    assert_eq!(ws.read_string("a.txt").unwrap(), changed);
    assert_eq!(ws.read_string("b.txt").unwrap(), text);

    // Reject the rest of the suggestion: b.txt stays as it was.
    let r = c
        .call(json!({"type": "feedback_all", "suggestionId": sid, "action": "reject"}))
        .await
        .unwrap();
    let d = ok(&r);
    assert_eq!(
        d["decided"],
        json!([
            {"hunk_id": hunk_id(&s, "b.txt", 0), "state": "rejected"},
            {"hunk_id": hunk_id(&s, "b.txt", 1), "state": "rejected"},
        ])
    );
    assert_eq!(d["remaining_hunks"], 0);
    assert_eq!(ws.read_string("a.txt").unwrap(), changed);
    assert_eq!(ws.read_string("b.txt").unwrap(), text);

    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 4, "{log:#?}");
    assert!(log[..2]
        .iter()
        .all(|l| l["comment"] == "a is fine" && l["outcome"] == "applied"));
    assert!(log[2..].iter().all(|l| l["outcome"] == "rejected"));

    // The same over REST, on a second run: accept everything at once.
    let s2 = run_agent(&hub, &mut c, &agent, "shout again")
        .await
        .unwrap();
    let r = hub
        .curl()
        .post(
            "/feedback/all",
            &json!({"suggestion_id": s2["id"], "action": "accept", "file": "b.txt"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["success"], true);
    assert_eq!(r.body["decided"].as_array().unwrap().len(), 2);
    assert_eq!(ws.read_string("b.txt").unwrap(), changed);
}

#[tokio::test]
async fn complete_finalize_records_the_reviewed_commit_and_discard_keeps_applied_hunks() {
    let a = numbered(40);
    let b = numbered(30);
    let ws = Workspace::new(&[("a.txt", a.as_bytes()), ("b.txt", b.as_bytes())]).unwrap();
    let agent_a = ws
        .agent_script(
            "agent-a.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 20$/LINE 20/; s/^line 37$/LINE 37/' a.txt\n\
             echo new > c.txt",
        )
        .unwrap();
    let agent_b = ws
        .agent_script(
            "agent-b.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' b.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent_a, "three edits and a file")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["hunk_count"], 4, "{s:#}");

    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 0), "accept")
        .await
        .unwrap());
    let mine = "@@ -17,7 +17,7 @@\n line 17\n line 18\n line 19\n-line 20\n+line 20 (mine)\n line 21\n line 22\n line 23\n";
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": hunk_id(&s, "a.txt", 1),
                     "action": "modify", "modifiedDiff": mine}),
        )
        .await
        .unwrap();
    ok(&r);
    ok(&c
        .decide(&sid, &hunk_id(&s, "c.txt", 0), "accept")
        .await
        .unwrap());
    let expected_a = a
        .replace("line 3\n", "LINE 3\n")
        .replace("line 20\n", "line 20 (mine)\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), expected_a);
    assert_eq!(ws.read("c.txt").unwrap(), b"new\n");

    // Finalize: the pending third hunk counts as rejected; the reviewed commit is recorded.
    let r = c
        .call(json!({"type": "complete", "suggestionId": sid, "action": "finalize"}))
        .await
        .unwrap();
    let d = ok(&r).clone();
    assert_eq!(d["action"], "finalize");
    assert_eq!(d["applied_hunks"], 3);
    assert_eq!(d["hunk_count"], 4);
    let reviewed = d["reviewed_commit"]
        .as_str()
        .expect("reviewed_commit")
        .to_string();
    let ev = c
        .event(
            "suggestion.completed",
            |v| v["suggestion_id"] == sid.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(ev["action"], "finalize");
    assert_eq!(ev["reviewed_commit"], reviewed.as_str());
    let third = hunk_id(&s, "a.txt", 2);
    let ev = c
        .event(
            "suggestion.hunk_applied",
            |v| v["hunk_id"] == third.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(ev["action"], "rejected");
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        expected_a,
        "finalize writes nothing"
    );

    let got = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(got["closed"], "finalize");
    assert_eq!(got["status"], "complete");
    assert_eq!(got["reviewed_commit"], reviewed.as_str());
    assert_eq!(find_hunk(&got, "a.txt", 2)["state"], "rejected");
    let log = ws.feedback_log().unwrap();
    let last = log.last().unwrap();
    assert_eq!(last["hunk_id"], third.as_str());
    assert_eq!(
        (&last["action"], &last["outcome"], &last["via"]),
        (&json!("reject"), &json!("rejected"), &json!("finalize"))
    );

    // The reviewed commit holds exactly base + the applied hunks, on top of the run commit.
    let show = |spec: &str| ws.checkpoint_git(&["show", spec]).unwrap();
    assert_eq!(show(&format!("{reviewed}:a.txt")), expected_a.as_bytes());
    assert_eq!(show(&format!("{reviewed}:c.txt")), b"new\n");
    assert_eq!(show(&format!("{reviewed}:b.txt")), b.as_bytes());
    let names = ws
        .checkpoint_git(&["ls-tree", "-r", "--name-only", &reviewed])
        .unwrap();
    assert_eq!(String::from_utf8(names).unwrap(), "a.txt\nb.txt\nc.txt\n");
    let parent = ws
        .checkpoint_git(&["rev-parse", &format!("{reviewed}^")])
        .unwrap();
    assert_eq!(String::from_utf8(parent).unwrap().trim(), s["run_commit"]);
    // The run commit is what the agent left (positive control for the comparison above).
    assert_eq!(
        show(&format!("{}:a.txt", s["run_commit"].as_str().unwrap())),
        a.replace("line 3\n", "LINE 3\n")
            .replace("line 20\n", "LINE 20\n")
            .replace("line 37\n", "LINE 37\n")
            .as_bytes()
    );
    assert_eq!(
        show(&format!("{}:a.txt", s["base_commit"].as_str().unwrap())),
        a.as_bytes()
    );
    let r = ws
        .checkpoint_git(&[
            "rev-parse",
            &format!("refs/hunkgate/suggestions/{sid}/reviewed"),
        ])
        .unwrap();
    assert_eq!(String::from_utf8(r).unwrap().trim(), reviewed);

    // A completed suggestion takes no more decisions, and nothing changes.
    let log_len = ws.feedback_log().unwrap().len();
    refused(&c.decide(&sid, &third, "accept").await.unwrap(), "closed");
    refused(
        &c.decide(&sid, &hunk_id(&s, "a.txt", 0), "undo")
            .await
            .unwrap(),
        "closed",
    );
    refused(
        &c.decide(&sid, &hunk_id(&s, "a.txt", 0), "reject")
            .await
            .unwrap(),
        "closed",
    );
    let r = c
        .call(json!({"type": "feedback_all", "suggestionId": sid, "action": "accept"}))
        .await
        .unwrap();
    refused(&r, "closed");
    let r = c
        .call(json!({"type": "complete", "suggestionId": sid, "action": "discard"}))
        .await
        .unwrap();
    refused(&r, "closed");
    let r = hub
        .curl()
        .post(
            "/feedback",
            &json!({"suggestion_id": sid, "hunk_id": third, "action": "accept"}),
        )
        .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "closed");
    assert_eq!(ws.read_string("a.txt").unwrap(), expected_a);
    assert_eq!(ws.feedback_log().unwrap().len(), log_len);

    // Discard: pending hunks are rejected, applied ones stay; no reviewed commit.
    let s2 = run_agent(&hub, &mut c, &agent_b, "two edits")
        .await
        .unwrap();
    let sid2 = s2["id"].as_str().unwrap().to_string();
    ok(&c
        .decide(&sid2, &hunk_id(&s2, "b.txt", 0), "accept")
        .await
        .unwrap());
    let r = hub
        .curl()
        .post(
            "/complete",
            &json!({"suggestion_id": sid2, "action": "discard"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["action"], "discard");
    assert_eq!(r.body["applied_hunks"], 1);
    assert_eq!(r.body["reviewed_commit"], Value::Null);
    let ev = c
        .event(
            "suggestion.completed",
            |v| v["suggestion_id"] == sid2.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(ev["action"], "discard");
    assert!(ev.get("reviewed_commit").is_none(), "{ev}");
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        b.replace("line 3\n", "LINE 3\n")
    );
    let got = hub
        .curl()
        .get(&format!("/suggestions/{sid2}"))
        .unwrap()
        .body;
    assert_eq!(got["closed"], "discard");
    assert_eq!(find_hunk(&got, "b.txt", 0)["state"], "accepted");
    assert_eq!(find_hunk(&got, "b.txt", 1)["state"], "rejected");

    // Completed suggestions leave the default list but stay in `all`.
    let open = c.call(json!({"type": "list"})).await.unwrap();
    assert_eq!(ok(&open)["suggestions"], json!([]));
    let all = c.call(json!({"type": "list", "all": true})).await.unwrap();
    let all = ok(&all)["suggestions"].as_array().unwrap().clone();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["id"], sid.as_str());
    assert_eq!(all[0]["closed"], "finalize");
    assert_eq!(all[1]["closed"], "discard");
}

#[tokio::test]
async fn several_suggestions_pending_at_once() {
    let text = numbered(30);
    let ws = Workspace::new(&[("a.txt", text.as_bytes()), ("b.txt", text.as_bytes())]).unwrap();
    let one = ws
        .agent_script("one.sh", "sed -i 's/^line 3$/ONE/' a.txt")
        .unwrap();
    let two = ws
        .agent_script("two.sh", "sed -i 's/^line 10$/TWO/' b.txt")
        .unwrap();
    let three = ws
        .agent_script("three.sh", "sed -i 's/^line 25$/THREE/' a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s1 = run_agent(&hub, &mut c, &one, "one").await.unwrap();
    let s2 = run_agent(&hub, &mut c, &two, "two").await.unwrap();
    let s3 = run_agent(&hub, &mut c, &three, "three").await.unwrap();
    let ids: Vec<&str> = [&s1, &s2, &s3]
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();

    let r = c.call(json!({"type": "list"})).await.unwrap();
    let list = ok(&r)["suggestions"].as_array().unwrap().clone();
    let listed: Vec<&str> = list.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(listed, ids, "all three pending, in creation order");
    assert!(list.iter().all(|s| s["status"] == "pending"));
    assert!(list.iter().all(|s| s.get("hunks").is_none()), "summaries");

    // Decide them out of order; two of them touch the same file in different places.
    ok(&c
        .decide(ids[2], &hunk_id(&s3, "a.txt", 0), "accept")
        .await
        .unwrap());
    ok(&c
        .decide(ids[0], &hunk_id(&s1, "a.txt", 0), "accept")
        .await
        .unwrap());
    ok(&c
        .decide(ids[1], &hunk_id(&s2, "b.txt", 0), "accept")
        .await
        .unwrap());
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        text.replace("line 3\n", "ONE\n")
            .replace("line 25\n", "THREE\n")
    );
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        text.replace("line 10\n", "TWO\n")
    );
    for (id, s) in ids.iter().zip([&s1, &s2, &s3]) {
        let got = hub.curl().get(&format!("/suggestions/{id}")).unwrap().body;
        assert_eq!(got["reviewed_count"], 1, "{got:#}");
        assert_eq!(got["hunks"][0]["state"], "accepted");
        assert_eq!(got["run_id"], s["run_id"]);
    }
}

#[tokio::test]
async fn hunks_applied_above_shift_the_expected_place_of_those_below() {
    // Two identical blocks: the lower hunk's context occurs twice, so only the expected place
    // (shifted by the applied hunk above it) can tell where it goes.
    let block = [
        "dup a", "dup b", "dup c", "dup MID", "dup d", "dup e", "dup f",
    ];
    let base: String = (1..=30)
        .map(|i| match i {
            5..=11 => format!("{}\n", block[i - 5]),
            20..=26 => format!("{}\n", block[i - 20]),
            _ => format!("line {i}\n"),
        })
        .collect();
    let mut agent_lines: Vec<String> = base.lines().map(|l| format!("{l}\n")).collect();
    agent_lines[22] = "dup MID (changed)\n".into();
    for k in (1..=4).rev() {
        agent_lines.insert(1, format!("inserted {k}\n"));
    }
    let agent_text: String = agent_lines.concat();
    let ws = Workspace::new(&[("a.txt", base.as_bytes())]).unwrap();
    std::fs::write(ws.path("agent-version.txt"), &agent_text).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!("cp {} a.txt", ws.path("agent-version.txt").display()),
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "insert and change")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["hunk_count"], 2, "{s:#}");
    let (top, low) = (hunk_id(&s, "a.txt", 0), hunk_id(&s, "a.txt", 1));
    assert_eq!(find_hunk(&s, "a.txt", 1)["header"]["old_start"], 20);
    let with_insert = {
        let mut l: Vec<String> = base.lines().map(|l| format!("{l}\n")).collect();
        for k in (1..=4).rev() {
            l.insert(1, format!("inserted {k}\n"));
        }
        l.concat()
    };

    ok(&c.decide(&sid, &top, "accept").await.unwrap());
    assert_eq!(ws.read_string("a.txt").unwrap(), with_insert);
    ok(&c.decide(&sid, &low, "accept").await.unwrap());
    assert_eq!(ws.read_string("a.txt").unwrap(), agent_text);
    // Reverse-applying the lower hunk uses the same shift.
    ok(&c.decide(&sid, &low, "reject").await.unwrap());
    assert_eq!(ws.read_string("a.txt").unwrap(), with_insert);
    ok(&c.decide(&sid, &top, "undo").await.unwrap());
    assert_eq!(ws.read_string("a.txt").unwrap(), base);
    // Without the hunk above, the lower one goes to its own place (and the upper one after it).
    ok(&c.decide(&sid, &low, "undo").await.unwrap());
    ok(&c.decide(&sid, &low, "accept").await.unwrap());
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        base.replace(
            "dup MID\ndup d\ndup e\ndup f\nline 27",
            "dup MID (changed)\ndup d\ndup e\ndup f\nline 27"
        )
    );
    ok(&c.decide(&sid, &top, "accept").await.unwrap());
    assert_eq!(ws.read_string("a.txt").unwrap(), agent_text);
}

#[tokio::test]
async fn in_a_file_mixing_crlf_and_lf_a_hunk_applies_where_it_was_made() {
    // Mostly CRLF, with an LF copy of a CRLF block: the agent edits the LF copy.
    let head: String = (1..=8).map(|i| format!("h{i}\r\n")).collect();
    let block = |x: &str, nl: &str| -> String {
        ["k1", "k2", "k3", x, "k4", "k5", "k6"]
            .iter()
            .map(|l| format!("{l}{nl}"))
            .collect()
    };
    // Lines 1-8 head, 9-15 the CRLF block, 16 "mid", 17-23 the LF block.
    let file = |crlf_x: &str, mid: &str, lf_x: &str| {
        format!(
            "{head}{}{mid}\n{}",
            block(crlf_x, "\r\n"),
            block(lf_x, "\n")
        )
    };
    let base = file("X", "mid", "X");
    let ws = Workspace::new(&[("mixed.txt", base.as_bytes())]).unwrap();
    let run_text = ws.path("run.txt");
    std::fs::write(&run_text, file("X", "mid", "Y")).unwrap();
    let agent = ws
        .agent_script("agent.sh", &format!("cp {} mixed.txt", run_text.display()))
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "edit the lf copy")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, "mixed.txt", 0);

    // The agent's hunk lands on the LF lines it was made on, not on their CRLF copy.
    ok(&c.decide(&sid, &hid, "accept").await.unwrap());
    assert_eq!(ws.read_string("mixed.txt").unwrap(), file("X", "mid", "Y"));
    ok(&c.decide(&sid, &hid, "undo").await.unwrap());
    assert_eq!(ws.read_string("mixed.txt").unwrap(), base);

    let modify = |diff: &str| {
        json!({"type": "feedback", "suggestionId": sid, "hunkId": hid,
               "action": "modify", "modifiedDiff": diff})
    };
    // A user's LF diff of the LF lines is used as typed, in place.
    let lf_diff = "@@ -17,7 +17,7 @@\n k1\n k2\n k3\n-X\n+Z\n k4\n k5\n k6\n";
    ok(&c.call(modify(lf_diff)).await.unwrap());
    assert_eq!(ws.read_string("mixed.txt").unwrap(), file("X", "mid", "Z"));
    ok(&c.decide(&sid, &hid, "undo").await.unwrap());
    // A user's LF diff of the CRLF lines takes their endings.
    let crlf_diff = "@@ -9,7 +9,7 @@\n k1\n k2\n k3\n-X\n+W\n k4\n k5\n k6\n";
    ok(&c.call(modify(crlf_diff)).await.unwrap());
    assert_eq!(ws.read_string("mixed.txt").unwrap(), file("W", "mid", "X"));
    ok(&c.decide(&sid, &hid, "undo").await.unwrap());
    assert_eq!(ws.read_string("mixed.txt").unwrap(), base);
    // Lines that mix both endings are not guessed at.
    let across = "@@ -14,4 +14,4 @@\n k5\n k6\n-mid\n+MID\n k1\n";
    refused(&c.call(modify(across)).await.unwrap(), "conflict");
    assert_eq!(ws.read_string("mixed.txt").unwrap(), base);
}

#[tokio::test]
async fn a_file_with_a_250_byte_name_is_run_on_and_written() {
    // 250 bytes: a temporary name built by adding to it would pass the 255-byte limit.
    let name = format!("{}.txt", "n".repeat(246));
    let ws = Workspace::new(&[(name.as_str(), b"one\ntwo\n"), ("b.txt", b"b\n")]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^two$/TWO/' nnnn*.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "long name").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, &name, 0);
    ok(&c.decide(&sid, &hid, "accept").await.unwrap());
    assert_eq!(ws.read(&name).unwrap(), b"one\nTWO\n");
    ok(&c.decide(&sid, &hid, "undo").await.unwrap());
    assert_eq!(ws.read(&name).unwrap(), b"one\ntwo\n");
    let names: Vec<String> = std::fs::read_dir(ws.repo())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".git")
        .collect();
    assert_eq!(names.len(), 2, "no stray temporary file: {names:?}");
}

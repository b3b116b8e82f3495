//! Three-way landing of a stale hunk (protocol.md, "Three-way merge of a stale hunk"): a hunk
//! made stale by an edit next to its lines lands through a clean merge, only after the merge
//! was shown and only on the file it was computed against; one made stale by an overlapping edit
//! opens with conflict markers and lands only what the user saved. Each merge is compared with
//! `git merge-file` on the same three inputs; the user's edit is never lost.

use std::process::Command;

use hunkgate_tests::{hermetic_env, hunk_id, hunkgate_bin, numbered, run_agent, Workspace};
use serde_json::{json, Value};
use sha2::Digest;

fn sha256(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// `git merge-file -p -L yours -L base -L agent` of the three texts, and whether it conflicted.
fn git_merge_file(yours: &str, base: &str, agent: &str) -> (String, bool) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("yours", yours), ("base", base), ("agent", agent)] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let out = Command::new("git")
        .args([
            "merge-file",
            "-p",
            "-L",
            "yours",
            "-L",
            "base",
            "-L",
            "agent",
        ])
        .args(["yours", "base", "agent"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let conflicts = out.status.code().unwrap();
    assert!((0..127).contains(&conflicts), "{out:?}");
    (String::from_utf8(out.stdout).unwrap(), conflicts > 0)
}

/// The hunk `hid` of suggestion `sid` as `GET /suggestions/:id` shows it.
fn hunk_of(ws_hub: &hunkgate_tests::Hub, sid: &str, hid: &str) -> Value {
    let s = ws_hub
        .curl()
        .get(&format!("/suggestions/{sid}"))
        .unwrap()
        .body;
    s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == hid)
        .cloned()
        .unwrap()
}

fn feedback(hub: &hunkgate_tests::Hub, body: Value) -> hunkgate_tests::curl::Reply {
    hub.curl().post("/feedback", &body).unwrap()
}

/// A workspace whose agent turns `line 10` of a 20-line `a.txt` into `LINE 10`, its one hunk
/// run and published: (workspace, hub, suggestion id, hunk id).
async fn shouted_ten(text: &str) -> (Workspace, hunkgate_tests::Hub, String, String) {
    let ws = Workspace::new(&[("a.txt", text.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 10\\(\\r\\?\\)$/LINE 10\\1/' a.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout ten").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, "a.txt", 0);
    (ws, hub, sid, hid)
}

#[tokio::test]
async fn an_adjacent_edit_lands_through_a_clean_merge_shown_first() {
    let base = numbered(20);
    let agent = base.replace("line 10\n", "LINE 10\n");
    let (ws, hub, sid, hid) = shouted_ten(&base).await;

    // The user edits a line of the hunk's context, next to (not on) the agent's line.
    let yours = base.replace("line 8\n", "line 8, mine\n");
    ws.write("a.txt", yours.as_bytes()).unwrap();
    let r = feedback(
        &hub,
        json!({"suggestion_id": sid, "hunk_id": hid, "action": "accept"}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "conflict");
    assert!(
        r.body["error"].as_str().unwrap().contains("mergedAgainst"),
        "{}",
        r.body
    );
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        yours,
        "nothing written before it is seen"
    );
    let h = hunk_of(&hub, &sid, &hid);
    assert_eq!(h["state"], "conflict");
    assert_eq!(h["merge"]["outcome"], "clean", "{h}");
    assert_eq!(h["merge"]["merged_against"], sha256(&yours));
    let shown = h["merge"]["diff"].as_str().unwrap();
    assert!(
        shown.contains("+LINE 10\n") && shown.contains(" line 8, mine\n"),
        "{shown}"
    );

    // The user edits again, far away, before accepting what was shown: nothing is written,
    // the hub merges again and shows the new outcome.
    let yours2 = yours.replace("line 19\n", "line 19, mine too\n");
    ws.write("a.txt", yours2.as_bytes()).unwrap();
    let stale = h["merge"]["merged_against"].clone();
    let body =
        json!({"suggestion_id": sid, "hunk_id": hid, "action": "accept", "merged_against": stale});
    let r = feedback(&hub, body);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        yours2,
        "never a blind write"
    );
    let h = hunk_of(&hub, &sid, &hid);
    assert_eq!(
        h["merge"]["merged_against"],
        sha256(&yours2),
        "merged again: {h}"
    );
    assert_eq!(h["merge"]["outcome"], "clean");

    // The accept that names what was shown lands it: git's merge of the same three inputs.
    let body = json!({"suggestion_id": sid, "hunk_id": hid, "action": "accept",
        "mergedAgainst": h["merge"]["merged_against"]});
    let r = feedback(&hub, body);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["hunk"]["state"], "accepted");
    let (git, conflicted) = git_merge_file(&yours2, &base, &agent);
    assert!(!conflicted);
    assert_eq!(ws.read_string("a.txt").unwrap(), git);
    assert!(git.contains("line 8, mine\n") && git.contains("line 19, mine too\n"));

    let log = ws.feedback_log().unwrap();
    let outcomes: Vec<&str> = log.iter().map(|l| l["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["conflict", "conflict", "merged"]);
    assert_eq!(log[2]["merged_diff"], h["merge"]["diff"]);

    // Undo takes the merged change back out, and keeps the user's edits.
    let r = feedback(
        &hub,
        json!({"suggestion_id": sid, "hunk_id": hid, "action": "undo"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), yours2);
}

#[tokio::test]
async fn an_overlapping_edit_opens_with_markers_and_lands_only_what_was_saved() {
    let base = numbered(20).replace('\n', "\r\n");
    let agent = base.replace("line 10\r\n", "LINE 10\r\n");
    let (ws, hub, sid, hid) = shouted_ten(&base).await;

    let yours = base.replace("line 10\r\n", "line ten, mine\r\n");
    ws.write("a.txt", yours.as_bytes()).unwrap();
    let r = feedback(
        &hub,
        json!({"suggestion_id": sid, "hunk_id": hid, "action": "accept"}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    let h = hunk_of(&hub, &sid, &hid);
    assert_eq!(h["merge"]["outcome"], "conflicted", "{h}");
    let diff = h["merge"]["diff"].as_str().unwrap();
    // What the reviewer is shown is git's merge, markers and all, as a diff against their file.
    let (git, conflicted) = git_merge_file(&yours, &base, &agent);
    assert!(conflicted);
    let merged = hunkgate_patch::parse_hunks(diff).unwrap();
    assert_eq!(merged.len(), 1);
    let applied = hunkgate_patch::apply_hunk(&yours, &merged[0], 0)
        .unwrap()
        .text;
    assert_eq!(applied, git);
    assert!(
        git.contains("<<<<<<< yours\r\n") && git.contains(">>>>>>> agent\r\n"),
        "{git}"
    );

    // It cannot be accepted as it is, nor modified with its markers left in.
    let body = json!({"suggestion_id": sid, "hunk_id": hid, "action": "accept",
        "merged_against": h["merge"]["merged_against"]});
    let r = feedback(&hub, body);
    assert_eq!(
        (r.status, r.body["code"].as_str()),
        (409, Some("conflict")),
        "{}",
        r.body
    );
    assert!(
        r.body["error"].as_str().unwrap().contains("modify"),
        "{}",
        r.body
    );
    let r = feedback(
        &hub,
        json!({"suggestion_id": sid, "hunk_id": hid, "action": "modify", "modified_diff": diff}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("conflict markers"),
        "{}",
        r.body
    );
    assert_eq!(ws.read_string("a.txt").unwrap(), yours, "nothing written");

    // The user resolves it in `hunkgate modify` ($EDITOR: the merge's lines, markers and all)
    // and what they saved lands.
    let resolve = ws
        .agent_script(
            "resolve.sh",
            "sed -i '/^<<<<<<< yours/d; /^=======/d; /^>>>>>>> agent/d; /^LINE 10/d; s/^line ten, mine/line ten, both/' \"$1\"",
        )
        .unwrap();
    let mut cmd = Command::new(hunkgate_bin());
    hermetic_env(&mut cmd, &ws.home());
    let out = cmd
        .current_dir(ws.repo())
        .env("HUNKGATE_LOG", "warn")
        .env("EDITOR", resolve.display().to_string())
        .args(["modify", &sid, &hid])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let resolved = yours.replace("line ten, mine\r\n", "line ten, both\r\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), resolved);
    let h = hunk_of(&hub, &sid, &hid);
    assert_eq!(h["state"], "modified", "{h}");
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.last().unwrap()["outcome"], "modified");
}

/// The curl lines of protocol.md's merge section, run as written.
#[tokio::test]
async fn the_protocol_curl_lines_land_a_merge() {
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../server/src/protocol/protocol.md"
    ))
    .unwrap();
    let section = &spec[spec.find("### Three-way merge of a stale hunk").unwrap()..];
    let block = section.split("```sh\n").nth(1).unwrap();
    let block = block.split("```").next().unwrap();

    let base = numbered(20);
    let (ws, hub, sid, hid) = shouted_ten(&base).await;
    let yours = base.replace("line 12\n", "line 12, mine\n");
    ws.write("a.txt", yours.as_bytes()).unwrap();
    let bin_dir = hunkgate_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    hermetic_env(&mut cmd, &ws.home());
    let out = cmd
        .current_dir(ws.repo())
        .env("PATH", path)
        .env("ID", &sid)
        .env("HUNK", &hid)
        .arg("-c")
        .arg(format!("set -e\n{block}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    // curl prints each answer without a line break after it.
    let replies: Vec<Value> = serde_json::Deserializer::from_str(&stdout)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(replies.len(), 2, "{stdout}");
    assert_eq!(replies[0]["code"], "conflict", "{stdout}");
    assert_eq!(replies[1]["hunk"]["state"], "accepted", "{stdout}");
    let (git, _) = git_merge_file(&yours, &base, &base.replace("line 10\n", "LINE 10\n"));
    assert_eq!(ws.read_string("a.txt").unwrap(), git);
    drop(hub);
}

/// The CLI: `show` prints the merge and the SHA to name; `accept --merged-against` lands it.
#[tokio::test]
async fn the_cli_shows_a_merge_and_accepts_it_by_its_sha() {
    let base = numbered(20);
    let (ws, hub, sid, hid) = shouted_ten(&base).await;
    let yours = base.replace("line 12\n", "line 12, mine\n");
    ws.write("a.txt", yours.as_bytes()).unwrap();
    let out = ws.cli(&["accept", &sid, "1"]).unwrap();
    assert!(!out.status.success(), "stale: {out:?}");
    assert_eq!(ws.read_string("a.txt").unwrap(), yours);

    let out = ws.cli(&["show", &sid]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8(out.stdout).unwrap();
    let sha = sha256(&yours);
    assert!(
        shown.contains(&format!(
            "merged with your file (clean; accept it with --merged-against {sha}):"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("+LINE 10\n") && shown.contains(" line 12, mine\n"),
        "{shown}"
    );

    // One hunk only, and only the SHA shown.
    let out = ws.cli(&["accept", &sid, "--merged-against", &sha]).unwrap();
    assert!(!out.status.success(), "no hunk named: {out:?}");
    let out = ws
        .cli(&["accept", &sid, "1", "--merged-against", &sha256(&base)])
        .unwrap();
    assert!(!out.status.success(), "another file's SHA: {out:?}");
    assert_eq!(ws.read_string("a.txt").unwrap(), yours, "nothing written");
    let out = ws
        .cli(&["accept", &sid, "1", "--merged-against", &sha])
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (git, _) = git_merge_file(&yours, &base, &base.replace("line 10\n", "LINE 10\n"));
    assert_eq!(ws.read_string("a.txt").unwrap(), git);
    assert_eq!(hunk_of(&hub, &sid, &hid)["state"], "accepted");
}

//! Line-range decisions end to end, against the real hub: lines 3–7 of a 12-line hunk accepted
//! over the WebSocket, REST (the protocol spec's curl lines, run as written) and the CLI; the
//! rest pending and decided later; undo; a kill -9 and restart after a partial accept. Every
//! file is checked byte for byte.

use std::process::Command;
use std::time::Duration;

use hunkgate_tests::{hermetic_env, hunkgate_bin, numbered, run_agent, Hub, Workspace};
use serde_json::{json, Value};

const SECS5: Duration = Duration::from_secs(5);

/// An agent that turns lines 5–7 of `a.txt` (40 numbered lines) into `five`, `six`, `seven`:
/// one hunk of 12 lines (3 context, 3 `-`, 3 `+`, 3 context), and one more at line 30.
fn twelve_line_agent(ws: &Workspace) -> std::path::PathBuf {
    ws.agent_script(
        "agent.sh",
        "sed -i 's/^line 5$/five/; s/^line 6$/six/; s/^line 7$/seven/; s/^line 30$/thirty/' a.txt",
    )
    .unwrap()
}

/// `numbered(40)` with these lines (1-based) replaced by these texts; `""` removes the line.
fn edited(edits: &[(usize, &str)]) -> String {
    numbered(40)
        .lines()
        .enumerate()
        .filter_map(|(i, l)| match edits.iter().find(|(at, _)| *at == i + 1) {
            Some((_, "")) => None,
            Some((_, t)) => Some(format!("{t}\n")),
            None => Some(format!("{l}\n")),
        })
        .collect()
}

/// What accepting lines 3–7 (`line 4`, `-line 5`, `-line 6`, `-line 7`, `+five`) leaves.
fn after_3_to_7() -> String {
    edited(&[(5, "five"), (6, ""), (7, "")])
}

async fn twelve_line_suggestion(hub: &Hub, ws: &Workspace) -> (hunkgate_tests::Ws, Value) {
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(hub, &mut c, &twelve_line_agent(ws), "three lines")
        .await
        .unwrap();
    assert_eq!(s["hunk_count"], 2, "{s:#}");
    let diff = s["hunks"][0]["diff"].as_str().unwrap();
    assert_eq!(diff.lines().count(), 13, "{diff}");
    (c, s)
}

#[tokio::test]
async fn over_the_websocket_the_rest_is_announced_and_survives_kill_9() {
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let (mut c, s) = twelve_line_suggestion(&hub, &ws).await;
    let sid = s["id"].as_str().unwrap().to_string();
    let hunk = s["hunks"][0]["id"].as_str().unwrap().to_string();
    let feedback = |lines: Value, action: &str| {
        json!({"type": "feedback", "suggestionId": sid, "hunkId": hunk, "action": action,
            "lines": lines})
    };

    // Bad ranges change nothing; the positive control follows.
    for (lines, says) in [
        (json!([1, 3]), "no + or - line"),
        (json!([12, 13]), "12 lines"),
        (json!([0, 2]), "12 lines"),
        (json!([3]), "invalid \"feedback\" command"),
    ] {
        let r = c.call(feedback(lines.clone(), "accept")).await.unwrap();
        assert_eq!(
            (&r["success"], &r["code"]),
            (&json!(false), &json!("bad_request")),
            "{lines}: {r}"
        );
        assert!(r["error"].as_str().unwrap().contains(says), "{lines}: {r}");
    }
    let r = c.call(feedback(json!([3, 7]), "undo")).await.unwrap();
    assert_eq!(r["code"], "bad_request", "{r}");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(40));
    assert!(ws.feedback_log().unwrap().is_empty());

    let r = c.call(feedback(json!([3, 7]), "accept")).await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    let d = &r["data"];
    assert_eq!(ws.read_string("a.txt").unwrap(), after_3_to_7());
    assert_eq!(
        (&d["hunk"]["state"], &d["hunk"]["lines"]),
        (&json!("accepted"), &json!([3, 7]))
    );
    let rest = d["new_hunks"][0].clone();
    let rest_id = format!("{hunk}~a3-7");
    assert_eq!(rest["id"], rest_id, "{d}");
    assert_eq!(
        (&rest["state"], &rest["parent_hunk_id"]),
        (&json!("pending"), &json!(hunk))
    );
    assert_eq!(
        rest["diff"],
        "@@ -2,7 +2,9 @@\n line 2\n line 3\n line 4\n five\n+six\n+seven\n line 8\n line 9\n line 10\n"
    );
    let event = c
        .event(
            "suggestion.hunk_applied",
            |v| v["hunk_id"] == hunk.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(
        (&event["lines"], &event["hunk_count"]),
        (&json!([3, 7]), &json!(3)),
        "{event}"
    );
    assert_eq!(
        event["new_hunks"][0], rest,
        "the event carries the rest as the answer does"
    );
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (&log[0]["outcome"], &log[0]["lines"]),
        (&json!("partial"), &json!([3, 7]))
    );
    assert_eq!(log[0]["applied_diff"], d["hunk"]["applied_diff"]);

    // kill -9, restart: the same hunks in the same states, nothing applied twice.
    let before: Value = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    hub.kill9();
    hub = ws.serve(&[]).unwrap();
    let after: Value = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(after["hunks"], before["hunks"]);
    assert_eq!(after["hunk_count"], 3);
    assert_eq!(ws.read_string("a.txt").unwrap(), after_3_to_7());
    assert_eq!(ws.feedback_log().unwrap().len(), 1);

    // The rest, decided later, lands where it belongs; then the hunk below.
    let mut c = hub.ws().await.unwrap();
    let r = c.decide(&sid, &rest_id, "accept").await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    let r = c
        .decide(&sid, s["hunks"][1]["id"].as_str().unwrap(), "accept")
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        edited(&[(5, "five"), (6, "six"), (7, "seven"), (30, "thirty")])
    );
}

/// The protocol spec's curl lines for partial decisions, run as written (only the ids differ).
fn spec_curl_block() -> Vec<String> {
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../server/src/protocol/protocol.md"
    ))
    .unwrap();
    let start = spec
        .find("### Deciding part of a hunk")
        .expect("the spec has the section");
    let block = spec[start..].split("```sh\n").nth(1).expect("a sh block");
    block
        .split("```")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_spec_curl_lines_accept_undo_and_reject_lines() {
    let lines = spec_curl_block();
    assert_eq!(lines.len(), 5, "{lines:?}");
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let (_c, s) = twelve_line_suggestion(&hub, &ws).await;
    let sid = s["id"].as_str().unwrap().to_string();
    let hunk = s["hunks"][0]["id"].as_str().unwrap().to_string();
    let path = format!(
        "{}:{}",
        hunkgate_bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |line: &str, rest: &str| -> Value {
        let mut cmd = Command::new("bash");
        hermetic_env(&mut cmd, &ws.home());
        let out = cmd
            .current_dir(ws.repo())
            .env("PATH", &path)
            .env("ID", &sid)
            .env("HUNK", &hunk)
            .env("REST", rest)
            .arg("-c")
            .arg(format!("set -e; {}\n{line}", lines[0]))
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{line}: {e}: {out:?}"))
    };
    let accepted = run(&lines[1], "");
    assert_eq!(accepted["success"], true, "{accepted}");
    assert_eq!(ws.read_string("a.txt").unwrap(), after_3_to_7());
    let undone = run(&lines[2], "");
    assert_eq!(
        undone["removed_hunk_ids"],
        json!([format!("{hunk}~a3-7")]),
        "{undone}"
    );
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(40));
    let rejected = run(&lines[3], "");
    assert_eq!(rejected["hunk"]["state"], "rejected", "{rejected}");
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        numbered(40),
        "a reject writes nothing"
    );
    let rest = rejected["new_hunks"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(rest, format!("{hunk}~r6-8"));
    let accepted = run(&lines[4], &rest);
    assert_eq!(accepted["hunk"]["state"], "accepted", "{accepted}");
    // Lines 6-8 (`-line 7`, `+five`, `+six`) were rejected: `line 7` stays and the two never
    // come; the rest (`-line 5`, `-line 6`, `+seven`) lands.
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        edited(&[(5, ""), (6, ""), (7, "line 7\nseven")])
    );
    let outcomes: Vec<(String, String)> = ws
        .feedback_log()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["action"].as_str().unwrap().into(),
                l["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("accept", "partial"),
        ("undo", "undone"),
        ("reject", "partial"),
        ("accept", "applied"),
    ];
    assert_eq!(outcomes, want.map(|(a, o)| (a.to_string(), o.to_string())));
}

#[tokio::test]
async fn the_cli_accepts_and_rejects_lines() {
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let (_c, s) = twelve_line_suggestion(&hub, &ws).await;
    let sid = s["id"].as_str().unwrap().to_string();
    let hunk = s["hunks"][0]["id"].as_str().unwrap().to_string();
    let state = ws.state();
    let cli = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend(["--state-dir", state.to_str().unwrap()]);
        let out = ws.cli(&full).unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    // Two hunks named, or a range that is not one: refused before anything is sent.
    let (ok, _, err) = cli(&["accept", &sid, "1", "2", "--lines", "3-7"]);
    assert!(!ok && err.contains("name exactly one"), "{err}");
    let (ok, _, err) = cli(&["accept", &sid, "1", "--lines", "7-3"]);
    assert!(!ok && err.contains("FIRST-LAST"), "{err}");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(40));

    let (ok, out, err) = cli(&["accept", &sid, "1", "--lines", "3-7"]);
    assert!(ok, "{out}{err}");
    assert_eq!(
        out,
        format!("accepted  {hunk} (lines 3-7)\npending   {hunk}~a3-7 (the rest of the hunk)\n")
    );
    assert_eq!(ws.read_string("a.txt").unwrap(), after_3_to_7());
    // `show` numbers the rest right after its hunk.
    let (_, shown, _) = cli(&["show", &sid]);
    assert!(
        shown.contains(&format!("[2] pending   modify  {hunk}~a3-7")),
        "{shown}"
    );
    assert!(
        shown.contains("\n    decided lines 3-7 only; the rest is the next hunk\n"),
        "{shown}"
    );
    // Its lines 5-6 are `+six` `+seven`: rejected, nothing is left of it to decide.
    let (ok, out, err) = cli(&["reject", &sid, "2", "--lines", "5-6"]);
    assert!(ok, "{out}{err}");
    assert_eq!(out, format!("rejected  {hunk}~a3-7\n"));
    let (ok, out, err) = cli(&["undo", &sid, "2"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cli(&["undo", &sid, "1"]);
    assert!(ok, "{out}{err}");
    assert_eq!(
        out,
        format!("pending   {hunk}\nremoved   {hunk}~a3-7 (the rest, back in the hunk)\n")
    );
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(40));
    assert_eq!(
        hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body["hunk_count"],
        2
    );
}

/// The hub dies after writing the checkout and before logging a partial accept: the next start
/// finishes it from the journal, with the rest in place, logged once, announced with its rest.
#[tokio::test]
async fn a_partial_accept_cut_short_by_kill_9_is_finished_with_its_rest() {
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let (mut hub, pauses) = ws.serve_pausable().unwrap();
    let (c, s) = twelve_line_suggestion(&hub, &ws).await;
    let sid = s["id"].as_str().unwrap().to_string();
    let hunk = s["hunks"][0]["id"].as_str().unwrap().to_string();

    let pause = hunkgate_tests::Pause::arm(&pauses, "before-commit");
    let curl = hub.curl();
    let body = json!({"suggestion_id": sid, "hunk_id": hunk, "action": "accept", "lines": [3, 7]});
    let answer = std::thread::spawn(move || curl.post("/feedback", &body));
    pause.reached();
    assert_eq!(ws.read_string("a.txt").unwrap(), after_3_to_7(), "written");
    assert!(ws.feedback_log().unwrap().is_empty(), "not logged yet");
    hub.kill9();
    pause.release();
    let _ = answer.join();
    drop(c);

    let (hub, _) = ws.serve_pausable().unwrap();
    let view = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let states: Vec<(&str, &str)> = view["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["id"].as_str().unwrap(), h["state"].as_str().unwrap()))
        .collect();
    let rest = format!("{hunk}~a3-7");
    assert_eq!(
        states[..2],
        [(hunk.as_str(), "accepted"), (rest.as_str(), "pending")]
    );
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        after_3_to_7(),
        "applied once"
    );
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (&log[0]["outcome"], &log[0]["lines"]),
        (&json!("partial"), &json!([3, 7]))
    );
    let mut c = hub.ws().await.unwrap();
    let r = c.call(json!({"type": "replay", "since": 0})).await.unwrap();
    let ev = r["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "suggestion.hunk_applied" && e["hunk_id"] == hunk.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no event for the recovered decision: {r}"));
    assert_eq!(ev["new_hunks"][0]["id"], rest, "{ev}");
    assert_eq!(ev["seq"], log[0]["seq"]);
    // And the rest is decided as any hunk.
    assert_eq!(
        c.decide(&sid, &rest, "accept").await.unwrap()["success"],
        true
    );
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        edited(&[(5, "five"), (6, "six"), (7, "seven")])
    );
}

/// A real feedback log of line-range decisions replayed (`hunkgate-evals replay`): lines 3-7
/// accepted, `+six` of the rest rejected, what is left accepted. The replay task's solution is
/// the checkout those decisions left, and its expectations count each changed line as decided.
#[tokio::test]
async fn a_replay_of_line_range_decisions_keeps_what_the_user_kept() {
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let (_c, s) = twelve_line_suggestion(&hub, &ws).await;
    let sid = s["id"].as_str().unwrap().to_string();
    let state = ws.state();
    let cli = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend(["--state-dir", state.to_str().unwrap()]);
        let out = ws.cli(&full).unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    cli(&["accept", &sid, "1", "--lines", "3-7"]);
    // The rest's lines 5-7 are `+six` `+seven` and context: `+six` rejected, then the rest of
    // that accepted whole.
    cli(&["reject", &sid, "2", "--lines", "5-5"]);
    cli(&["accept", &sid, "3"]);
    let kept = numbered(40).replace("line 5\nline 6\nline 7\n", "five\nseven\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), kept);

    let out = tempfile::tempdir().unwrap();
    let ex = hunkgate_evals::replay::extract(
        &[state.join("feedback.jsonl")],
        &state.join("checkpoints.git"),
        out.path(),
    )
    .unwrap();
    assert_eq!((ex.tasks.len(), ex.skipped.len()), (1, 0), "{ex:?}");
    let task = &ex.tasks[0];
    assert_eq!(
        std::fs::read_to_string(task.join("solution/a.txt")).unwrap(),
        kept,
        "the solution is the checkout the decisions left"
    );
    assert_eq!(
        std::fs::read_to_string(task.join("expected/a.txt")).unwrap(),
        kept
    );
    let expect = hunkgate_evals::replay::load_expect(task).unwrap().unwrap();
    let units = |u: &[hunkgate_evals::replay::Unit]| -> Vec<String> {
        u.iter().map(|u| u.change.trim_end().to_string()).collect()
    };
    assert_eq!(expect.hunks_partial, 1);
    assert_eq!(
        units(&expect.kept),
        ["-line 5", "-line 6", "-line 7", "+five", "+seven"]
    );
    assert_eq!(units(&expect.rejected), ["+six"]);
}

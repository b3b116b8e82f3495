//! Hunks sized for a human (issue #58 item 3), against the real hub: an agent that rewrites a
//! 600-line file but for every tenth line gets parts within `[review] max_hunk_lines` (the
//! default, or the config's), each decided on its own — accepted, rejected, or by a line
//! range — and the checkout holds exactly what was accepted; accepting every part gives the
//! agent's file byte for byte. A 200-line block with nothing to cut at arrives whole, marked
//! `oversized`; the rewritten file's hunks are labelled `rewrite`; `hunkgate show` says both.

use std::collections::BTreeSet;

use hunkgate_tests::{numbered, run_agent, Hub, Workspace};
use serde_json::{json, Value};

/// Lines of `big.txt`.
const BIG: usize = 600;

/// `big.txt` (600 numbered lines), `block.txt` (5 lines); the agent prefixes `new ` to every
/// line of `big.txt` whose number does not end in 0, and appends 200 lines to `block.txt`.
fn workspace(config: Option<&str>) -> (Workspace, std::path::PathBuf) {
    let ws = Workspace::new(&[
        ("big.txt", numbered(BIG).as_bytes()),
        ("block.txt", numbered(5).as_bytes()),
    ])
    .unwrap();
    if let Some(text) = config {
        let dir = ws.home().join(".config/hunkgate");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), text).unwrap();
    }
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i '/0$/!s/^line /new line /' big.txt\n\
             seq 1 200 | sed 's/^/block /' >> block.txt",
        )
        .unwrap();
    (ws, agent)
}

/// The agent's `big.txt`.
fn rewritten() -> String {
    (1..=BIG)
        .map(|i| match i % 10 {
            0 => format!("line {i}\n"),
            _ => format!("new line {i}\n"),
        })
        .collect()
}

/// `big.txt` with the lines of these numbers rewritten as the agent rewrote them.
fn with_rewritten(lines: &BTreeSet<usize>) -> String {
    (1..=BIG)
        .map(|i| match lines.contains(&i) {
            true => format!("new line {i}\n"),
            false => format!("line {i}\n"),
        })
        .collect()
}

/// The numbers of the lines a diff removes (`-line N`), from its text.
fn removed(diff: &str) -> BTreeSet<usize> {
    diff.lines()
        .filter_map(|l| l.strip_prefix("-line "))
        .map(|n| n.parse().unwrap())
        .collect()
}

async fn published(ws: &Workspace, agent: &std::path::Path) -> (Hub, Value, String) {
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, agent, "rewrite").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    (hub, s, sid)
}

fn hunks_of<'a>(s: &'a Value, file: &str) -> Vec<&'a Value> {
    s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["file"] == file)
        .collect()
}

/// Every part of `big.txt` within `max_lines`, rewrite-labelled, none oversized; the block is
/// one hunk, oversized and no rewrite. Returns the parts.
fn check_published(s: &Value, max_lines: usize) -> Vec<Value> {
    let parts: Vec<Value> = hunks_of(s, "big.txt").into_iter().cloned().collect();
    assert!(parts.len() >= 2 * BIG / max_lines, "{} parts", parts.len());
    for (i, h) in parts.iter().enumerate() {
        let body = h["diff"].as_str().unwrap().lines().count() - 1;
        assert!(body <= max_lines, "part {i}: {body} lines: {h}");
        assert_eq!(h["index"], i);
        assert_eq!(
            (&h["oversized"], &h["rewrite"], &h["kind"]),
            (&json!(false), &json!(true), &json!("modify")),
            "{h}"
        );
    }
    // Each removed line is in exactly one part.
    let mut seen = BTreeSet::new();
    for h in &parts {
        for n in removed(h["diff"].as_str().unwrap()) {
            assert!(seen.insert(n), "line {n} in two parts");
        }
    }
    assert_eq!(seen.len(), BIG - BIG / 10);
    let block = hunks_of(s, "block.txt");
    assert_eq!(block.len(), 1, "{block:?}");
    assert_eq!(
        (&block[0]["oversized"], &block[0]["rewrite"]),
        (&json!(true), &json!(false)),
        "{}",
        block[0]
    );
    parts
}

/// Default limits: parts of at most 80 lines. Parts accepted one by one (backwards), others
/// rejected, one decided by a line range (its first change accepted, the rest rejected): the
/// checkout holds exactly the accepted lines, and the oversized block lands whole.
#[tokio::test]
async fn parts_are_decided_one_by_one_and_the_checkout_holds_exactly_the_accepted_ones() {
    let (ws, agent) = workspace(None);
    let (hub, s, sid) = published(&ws, &agent).await;
    let parts = check_published(&s, 80);
    let curl = hub.curl();
    let decide = |hunk: &Value, action: &str, lines: Option<[usize; 2]>| {
        let mut body = json!({"suggestion_id": sid, "hunk_id": hunk["id"], "action": action});
        if let Some(l) = lines {
            body["lines"] = json!(l);
        }
        let r = curl.post("/feedback", &body).unwrap();
        assert_eq!(r.status, 200, "{action} {}: {}", hunk["id"], r.body);
        r.body
    };

    // Every third part accepted, last first; the one after each rejected.
    let mut expected = BTreeSet::new();
    for (i, h) in parts.iter().enumerate().rev() {
        match i % 3 {
            0 => {
                decide(h, "accept", None);
                expected.extend(removed(h["diff"].as_str().unwrap()));
            }
            1 => {
                decide(h, "reject", None);
            }
            _ => {}
        }
    }
    assert_eq!(
        ws.read_string("big.txt").unwrap(),
        with_rewritten(&expected)
    );

    // Part 2 by a line range: its first change (the `-` lines, then the `+` lines) accepted.
    let part = &parts[2];
    let diff = part["diff"].as_str().unwrap();
    let body: Vec<&str> = diff.lines().skip(1).collect();
    let first = body.iter().position(|l| !l.starts_with(' ')).unwrap() + 1;
    let last = first
        + body[first - 1..]
            .iter()
            .take_while(|l| !l.starts_with(' '))
            .count()
        - 1;
    let first_change = removed(&body[first - 1..last].join("\n"));
    assert!(!first_change.is_empty() && first_change.len() < removed(diff).len());
    decide(part, "accept", Some([first, last]));
    expected.extend(&first_change);
    assert_eq!(
        ws.read_string("big.txt").unwrap(),
        with_rewritten(&expected)
    );

    // The oversized block lands whole; everything else left (the rest of part 2 among it)
    // is rejected.
    decide(hunks_of(&s, "block.txt")[0], "accept", None);
    let r = curl
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "reject"}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        ws.read_string("big.txt").unwrap(),
        with_rewritten(&expected)
    );
    let block: String = (1..=200).map(|i| format!("block {i}\n")).collect();
    assert_eq!(ws.read_string("block.txt").unwrap(), numbered(5) + &block);
    let s = curl.get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(s["status"], "complete", "{s:#}");
}

/// `[review] max_hunk_lines` is honoured: parts of at most 30 lines; `hunkgate show` marks
/// them; accepting every part gives the agent's file byte for byte.
#[tokio::test]
async fn a_configured_limit_is_honoured_and_accepting_every_part_gives_the_agents_file() {
    let (ws, agent) = workspace(Some("[review]\nmax_hunk_lines = 30\n"));
    let (hub, s, sid) = published(&ws, &agent).await;
    let parts = check_published(&s, 30);
    assert!(
        parts.len() > 2 * BIG / 80,
        "more parts than the default makes"
    );

    let out = ws.cli(&["show", &sid]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let marked = |mark: &str| text.lines().filter(|l| l.ends_with(mark)).count();
    assert_eq!(marked("  REWRITE"), parts.len(), "{text}");
    assert_eq!(marked("  OVERSIZED"), 1, "{text}");

    let r = hub
        .curl()
        .post(
            "/feedback/all",
            &json!({"suggestion_id": sid, "action": "accept", "confirm": true}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["failed"], json!([]), "{}", r.body);
    assert_eq!(ws.read_string("big.txt").unwrap(), rewritten());
}

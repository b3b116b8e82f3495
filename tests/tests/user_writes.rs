//! A user's writes to the files being accepted are never lost (issue #54, defect 6).
//!
//! Each round, an agent changes 10 lines in each of 22 files (220 hunks); three clients (two
//! WebSockets, one REST) accept the hunks one by one, and a per-file accept-all (REST) takes
//! two files whole, while two real processes write to the same files:
//! - a shell loop appends a line to each of twenty files with `>>` (open, write, close), over
//!   and over until told to stop;
//! - another shell holds two files open (`exec 3>>`) across all the accepts and appends through
//!   those descriptors.
//!
//! Then, independently of the hub: every line each writer wrote is still in its file, and
//! each file is exactly its base with the hunks the hub reports accepted applied, followed by
//! the lines written to it; a hunk answered accepted is accepted, one answered `conflict` is
//! not applied. A write landing between the hub's last look at a file and its rename used to
//! vanish with the replaced file (about one round in three); a descriptor held open across an
//! accept wrote into a file with no name from then on.
//!
//! `HUNKGATE_RACE_ROUNDS` sets the rounds (default 3).

use std::path::Path;
use std::process::{Command, Stdio};

use hunkgate_tests::{run_agent, Hub, Reaped, Workspace, Ws};
use serde_json::{json, Value};

const FILES: usize = 22;
/// Appended to by open/write/close.
const APPENDED: std::ops::Range<usize> = 0..20;
/// Held open by a descriptor across the accepts.
const HELD: std::ops::Range<usize> = 20..22;
/// Taken whole by a per-file accept-all.
const BULK: [usize; 2] = [18, 19];
const HUNKS_PER_FILE: usize = 10;
const SPACING: usize = 10;
const LINES: usize = HUNKS_PER_FILE * SPACING;
const AGENT: &str = r"sed -i 's/^\(w[0-9][0-9] line [0-9]*5\)$/\1 (agent)/' w*.txt";

fn file_name(f: usize) -> String {
    format!("w{f:02}.txt")
}

/// The committed content, every line unique in the repository.
fn base_content(f: usize) -> String {
    (1..=LINES).map(|i| format!("w{f:02} line {i}\n")).collect()
}

/// The base with the agent's change of each hunk index in `accepted` (hunk `k` changes line
/// `k * SPACING + 5`).
fn with_accepted(f: usize, accepted: &[usize]) -> String {
    (1..=LINES)
        .map(|i| {
            let k = i / SPACING;
            if i % SPACING == 5 && accepted.contains(&k) {
                format!("w{f:02} line {i} (agent)\n")
            } else {
                format!("w{f:02} line {i}\n")
            }
        })
        .collect()
}

/// Two writers: `appender` (open, append one line, close; each file in turn) and `holder`
/// (two descriptors kept open). Each runs until `stop` exists, then prints how many passes it
/// finished: pass `n` wrote `user wNN n` (or `held wNN n`) to each of its files.
fn writers(repo: &Path, stop: &Path) -> (Reaped, Reaped) {
    let appended: Vec<String> = APPENDED.map(file_name).collect();
    let appender = format!(
        "n=0; while [ ! -e '{stop}' ]; do n=$((n+1)); for f in {files}; do echo \"user ${{f%.txt}} $n\" >> $f; done; sleep 0.001; done; echo $n",
        stop = stop.display(),
        files = appended.join(" ")
    );
    let (a, b) = (file_name(HELD.start), file_name(HELD.start + 1));
    let holder = format!(
        "exec 3>>{a} 4>>{b}; n=0; while [ ! -e '{stop}' ]; do n=$((n+1)); echo \"held w{ha:02} $n\" >&3; echo \"held w{hb:02} $n\" >&4; sleep 0.001; done; echo $n",
        stop = stop.display(),
        ha = HELD.start,
        hb = HELD.start + 1,
    );
    let spawn = |script: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(repo)
            .stdout(Stdio::piped())
            .spawn()
            .map(Reaped::new)
            .expect("spawning a writer")
    };
    (spawn(&appender), spawn(&holder))
}

/// How many passes a writer finished, once it is told to stop.
fn passes(child: Reaped) -> usize {
    let out = child.wait_with_output().expect("waiting for a writer");
    assert!(out.status.success(), "writer: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a writer's count")
}

/// What the writers wrote to file `f`, in order.
fn written(f: usize, appender: usize, holder: usize) -> String {
    if APPENDED.contains(&f) {
        (1..=appender)
            .map(|n| format!("user w{f:02} {n}\n"))
            .collect()
    } else {
        (1..=holder)
            .map(|n| format!("held w{f:02} {n}\n"))
            .collect()
    }
}

/// A hunk a client decides on its own: (file, per-file index, id).
type Owned = Vec<(usize, usize, String)>;

/// Accept each hunk over the WebSocket; the answers by hunk id.
async fn accept_ws(c: &mut Ws, sid: &str, hunks: &Owned) -> Vec<(String, Value)> {
    let mut answers = Vec::new();
    for (_, _, id) in hunks {
        let r = c
            .decide(sid, id, "accept")
            .await
            .expect("a WebSocket answer");
        answers.push((id.clone(), r));
    }
    answers
}

/// Accept each hunk over REST; the answers by hunk id.
async fn accept_rest(hub: &Hub, sid: &str, hunks: &Owned) -> Vec<(String, Value)> {
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for (_, _, id) in hunks {
        let body = json!({"suggestion_id": sid, "hunk_id": id, "action": "accept"});
        answers.push((id.clone(), post(&http, hub, "/feedback", &body).await));
    }
    answers
}

async fn post(http: &reqwest::Client, hub: &Hub, path: &str, body: &Value) -> Value {
    http.post(format!("{}{path}", hub.url))
        .bearer_auth(&hub.token)
        .json(body)
        .send()
        .await
        .expect("a REST answer")
        .json()
        .await
        .expect("a JSON answer")
}

/// Accept every hunk of each bulk file at once.
async fn accept_files(hub: &Hub, sid: &str) -> Vec<Value> {
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for f in BULK {
        let body = json!({"suggestion_id": sid, "action": "accept", "file": file_name(f)});
        answers.push(post(&http, hub, "/feedback/all", &body).await);
    }
    answers
}

/// An answer to one accept: accepted, or a conflict (the user's file wins); anything else fails.
fn check_answer(round: usize, id: &str, r: &Value, states: &Value) {
    let state = states[id].as_str().unwrap_or("?");
    if r["success"] == true {
        // The WebSocket wraps the reply in `data`, REST does not.
        let reply = if r["data"].is_null() { r } else { &r["data"] };
        assert_eq!(reply["hunk"]["state"], "accepted", "round {round}: {r}");
        assert_eq!(state, "accepted", "round {round}: {id} answered accepted");
    } else {
        assert_eq!(r["code"], "conflict", "round {round}: {id}: {r}");
        assert_ne!(state, "accepted", "round {round}: {id} answered conflict");
    }
}

/// Each hunk's state, by id, as the hub reports it.
fn hunk_states(hub: &Hub, sid: &str) -> Value {
    let s = hub
        .curl()
        .get(&format!("/suggestions/{sid}"))
        .expect("the suggestion")
        .body;
    let mut states = serde_json::Map::new();
    for h in s["hunks"].as_array().expect("hunks") {
        states.insert(
            h["id"].as_str().expect("id").to_string(),
            h["state"].clone(),
        );
    }
    Value::Object(states)
}

/// One round: the files back at their base, a run, the accepts racing the writers, then the
/// checks.
async fn round(ws: &Workspace, hub: &Hub, clients: &mut [Ws; 2], agent: &Path, round: usize) {
    for f in 0..FILES {
        ws.write(&file_name(f), base_content(f).as_bytes()).unwrap();
    }
    let s = run_agent(hub, &mut clients[0], agent, &format!("round {round}"))
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    // Hunk `k` of every file goes to client `(f + k) % 3`: the three race on every file.
    let mut owned: [Owned; 3] = Default::default();
    for h in s["hunks"].as_array().unwrap() {
        let file = h["file"].as_str().unwrap();
        let f: usize = file[1..3].parse().unwrap();
        let k = h["index"].as_u64().unwrap() as usize;
        if !BULK.contains(&f) {
            owned[(f + k) % 3].push((f, k, h["id"].as_str().unwrap().to_string()));
        }
    }
    let stop = ws.path("stop");
    let _ = std::fs::remove_file(&stop);
    let (appender, holder) = writers(&ws.repo(), &stop);
    let [c0, c1] = clients;
    let (a0, a1, a2, bulk) = tokio::join!(
        accept_ws(c0, &sid, &owned[0]),
        accept_ws(c1, &sid, &owned[1]),
        accept_rest(hub, &sid, &owned[2]),
        accept_files(hub, &sid),
    );
    std::fs::write(&stop, b"").unwrap();
    let (appender, holder) = (passes(appender), passes(holder));
    assert!(appender > 0 && holder > 0, "the writers wrote nothing");

    let states = hunk_states(hub, &sid);
    for (id, r) in a0.iter().chain(&a1).chain(&a2) {
        check_answer(round, id, r, &states);
    }
    for r in &bulk {
        assert!(
            r["success"] == true || r["code"] == "conflict",
            "round {round}: {r}"
        );
    }
    for f in 0..FILES {
        let accepted: Vec<usize> = s["hunks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["file"] == file_name(f).as_str())
            .filter(|h| states[h["id"].as_str().unwrap()] == "accepted")
            .map(|h| h["index"].as_u64().unwrap() as usize)
            .collect();
        let lines = written(f, appender, holder);
        let got = ws.read_string(&file_name(f)).unwrap();
        let lost: Vec<&str> = lines.lines().filter(|l| !got.contains(l)).collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} lost {} of the {} lines written to it while accepts wrote it: {:?}",
            file_name(f),
            lost.len(),
            lines.lines().count(),
            &lost[..lost.len().min(5)]
        );
        assert_eq!(
            got,
            format!("{}{lines}", with_accepted(f, &accepted)),
            "round {round}: {} is not its base with hunks {accepted:?} and the lines written",
            file_name(f)
        );
    }
    let temps: Vec<_> = std::fs::read_dir(ws.repo())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".hg-"))
        .collect();
    assert!(
        temps.is_empty(),
        "round {round}: temporary files left: {temps:?}"
    );
}

#[tokio::test]
async fn a_users_writes_during_accepts_are_never_lost() {
    let bases: Vec<(String, String)> = (0..FILES)
        .map(|f| (file_name(f), base_content(f)))
        .collect();
    let files: Vec<(&str, &[u8])> = bases
        .iter()
        .map(|(n, c)| (n.as_str(), c.as_bytes()))
        .collect();
    let ws = Workspace::new(&files).unwrap();
    let agent = ws.agent_script("agent.sh", AGENT).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut clients = [hub.ws().await.unwrap(), hub.ws().await.unwrap()];
    let rounds = std::env::var("HUNKGATE_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for r in 1..=rounds {
        round(&ws, &hub, &mut clients, &agent, r).await;
    }
}

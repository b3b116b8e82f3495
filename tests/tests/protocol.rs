//! The WebSocket protocol: bad input of every kind gets a `success:false` response and the
//! connection stays usable; ids are echoed; `list`, `get` and `replay` (and `GET /events`);
//! several clients all receive every event; `/health` counts WebSocket clients.

use std::time::Duration;

use hunkgate_tests::{run_agent, wait_for, wait_run_finished, Workspace, Ws};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const SECS5: Duration = Duration::from_secs(5);

/// The connection still answers: a `ping` gets its pong.
async fn still_alive(c: &mut Ws) {
    let r = c.call(json!({"type": "ping"})).await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["pong"], true, "{r}");
}

/// Send a raw frame and return the next response.
async fn raw(c: &mut Ws, msg: Message) -> Value {
    c.send_raw(msg).await.unwrap();
    c.next_matching(|v| v["type"] == "response", Duration::from_secs(30))
        .await
        .unwrap()
}

fn refused(r: &Value, code: &str) {
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["code"], code, "{r}");
    assert!(
        r["error"].as_str().is_some_and(|e| !e.is_empty()),
        "a human-readable error: {r}"
    );
}

#[tokio::test]
async fn bad_messages_get_errors_and_the_connection_stays_usable() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    still_alive(&mut c).await;

    // Malformed JSON.
    let r = raw(&mut c, Message::Text("{not json".into())).await;
    refused(&r, "bad_request");
    assert!(r.get("id").is_none(), "{r}");
    still_alive(&mut c).await;

    // Missing type (the id is still echoed).
    let r = raw(
        &mut c,
        Message::Text(r#"{"id":"m1","suggestionId":"x"}"#.into()),
    )
    .await;
    refused(&r, "bad_request");
    assert_eq!(r["id"], "m1");
    assert!(r["error"].as_str().unwrap().contains("type"), "{r}");
    still_alive(&mut c).await;

    // Unknown type: the error names every valid one.
    let r = c.call(json!({"type": "frobnicate"})).await.unwrap();
    refused(&r, "bad_request");
    let err = r["error"].as_str().unwrap();
    for t in [
        "feedback",
        "feedback_all",
        "complete",
        "list",
        "get",
        "run",
        "cancel",
        "replay",
        "ping",
    ] {
        assert!(
            err.contains(&format!("{t},")) || err.ends_with(t),
            "{t} in {err}"
        );
    }
    still_alive(&mut c).await;

    // Unknown fields, on commands with and without a body.
    for cmd in [
        json!({"type": "feedback", "suggestionId": "x", "hunkId": "y", "action": "accept", "bogus": 1}),
        json!({"type": "complete", "suggestionId": "x", "action": "finalize", "bogus": 1}),
        json!({"type": "list", "bogus": true}),
        json!({"type": "get", "suggestionId": "x", "bogus": true}),
        json!({"type": "replay", "since": 0, "bogus": true}),
        json!({"type": "ping", "bogus": true}),
    ] {
        let r = c.call(cmd.clone()).await.unwrap();
        refused(&r, "bad_request");
        assert!(r["error"].as_str().unwrap().contains("bogus"), "{cmd}: {r}");
        still_alive(&mut c).await;
    }

    // Bad values.
    for cmd in [
        json!({"type": "feedback", "suggestionId": "x", "hunkId": "y", "action": "explode"}),
        json!({"type": "replay", "since": "yesterday"}),
        json!({"type": "get"}),
        json!({"type": "run", "prompt": ""}),
        json!({"type": "list", "all": "yes"}),
    ] {
        let r = c.call(cmd.clone()).await.unwrap();
        refused(&r, "bad_request");
        still_alive(&mut c).await;
    }

    // A binary frame.
    let r = raw(&mut c, Message::Binary(vec![1u8, 2, 3].into())).await;
    refused(&r, "bad_request");
    still_alive(&mut c).await;

    // A 9 MiB message: too large, and the connection stays usable.
    let pad = "x".repeat(9 * 1024 * 1024);
    let big = json!({"type": "ping", "id": "big", "pad": pad}).to_string();
    let r = raw(&mut c, Message::Text(big.into())).await;
    refused(&r, "too_large");
    still_alive(&mut c).await;
    // Just under the limit is fine (positive control for the size check).
    let r = raw(
        &mut c,
        Message::Text(
            json!({"type": "list", "id": "big-ok", "all": true})
                .to_string()
                .into(),
        ),
    )
    .await;
    assert_eq!(r["success"], true, "{r}");

    // Ids are echoed as given, whatever their JSON type.
    for id in [json!(42), json!("text-id"), json!({"n": 1})] {
        let r = raw(
            &mut c,
            Message::Text(json!({"type": "ping", "id": id}).to_string().into()),
        )
        .await;
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["success"], true);
    }

    // A number id comes back as the same number: parsed correctly rounded, so that what the
    // hub writes back (the shortest form of its double) reads as the client's own double.
    // Compared with Rust's own parser, which rounds correctly. (serde_json without its
    // `float_roundtrip` read 2.1222222222222223e48 one unit in the last place off, and echoed
    // 2.1222222222222226e48: found by the `protocol` fuzz target.)
    for id in [
        "2.1222222222222223e48",
        "2122222222222222222222222222222222222222222222222",
        "0.1",
        "-7.0e-310",
        "9007199254740993",
    ] {
        let r = raw(
            &mut c,
            Message::Text(format!(r#"{{"type":"ping","id":{id}}}"#).into()),
        )
        .await;
        let want: f64 = id.parse().unwrap();
        assert_eq!(r["id"].as_f64(), Some(want), "{id}: {r}");
    }

    // The REST side refuses a 9 MiB body with 413.
    let r = hub
        .curl()
        .post(
            "/feedback",
            &json!({"suggestion_id": "x", "hunk_id": "y", "action": "accept", "comment": "x".repeat(9 * 1024 * 1024)}),
        )
        .unwrap();
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.body["code"], "too_large");
    still_alive(&mut c).await;
}

/// The replay window keeps at most 1 MiB of events (`REPLAY_BYTES`): a suggestion larger than
/// that reaches every connected client whole but is not kept a second time for replay, so a
/// client that missed it is told to resync, and `get` serves it. Events after it are replayed as
/// before (the positive control).
#[tokio::test]
async fn a_suggestion_larger_than_the_replay_window_is_sent_but_not_kept_for_replay() {
    let ws = Workspace::new(&[("a.txt", b"one\ntwo\nthree\n")]).unwrap();
    // A new file of 40,000 lines: a suggestion of about 1.4 MB as JSON.
    let big = ws.table_agent(40_000).unwrap();
    let small = ws
        .agent_script("small.sh", "printf 'one\\nTWO\\nthree\\n' > a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let curl = hub.curl();
    let mut c = hub.ws().await.unwrap();

    let s = run_agent(&hub, &mut c, &big, "a table").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let ready = c
        .seen
        .iter()
        .find(|v| v["type"] == "suggestion.ready" && v["suggestion"]["id"] == sid.as_str())
        .cloned()
        .unwrap();
    assert!(
        ready.to_string().len() > 1 << 20,
        "the event is larger than the window"
    );
    assert_eq!(s["hunks"][0]["file"], "table.txt");
    let seq = ready["seq"].as_u64().unwrap();

    // Missed it: the replay is incomplete and does not carry it.
    let r = curl.get(&format!("/events?since={}", seq - 1)).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["complete"], false, "{}", r.body);
    assert!(r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["seq"] != seq));
    // The resync's `get` has it, whole.
    let got = c
        .call(json!({"type": "get", "suggestionId": sid}))
        .await
        .unwrap();
    assert_eq!(got["data"], s);

    // Events after it are replayed, complete.
    wait_run_finished(&hub, s["run_id"].as_str().unwrap(), SECS5)
        .await
        .unwrap();
    let s2 = run_agent(&hub, &mut c, &small, "shout two").await.unwrap();
    let r = c
        .call(json!({"type": "replay", "since": seq}))
        .await
        .unwrap();
    assert_eq!(r["data"]["complete"], true, "{r}");
    let replayed = r["data"]["events"].as_array().unwrap();
    assert!(
        replayed
            .iter()
            .any(|e| e["type"] == "suggestion.ready" && e["suggestion"] == s2),
        "{r}"
    );
    assert!(replayed.iter().all(|e| e["seq"].as_u64().unwrap() > seq));
}

#[tokio::test]
async fn list_get_replay_and_every_client_sees_every_event() {
    let ws = Workspace::new(&[("a.txt", b"one\ntwo\nthree\n")]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "printf 'one\\nTWO\\nthree\\n' > a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let curl = hub.curl();
    let health = |curl: &hunkgate_tests::curl::Curl| {
        let anon = hunkgate_tests::curl::Curl {
            base: curl.base.clone(),
            token: None,
        };
        let r = anon.get("/health").unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body["healthy"], true);
        assert_eq!(r.body["service"], "hunkgate");
        r.body["wsClients"].as_u64().unwrap()
    };
    assert_eq!(health(&curl), 0);
    let mut c1 = hub.ws().await.unwrap();
    let mut c2 = hub.ws().await.unwrap();
    assert_eq!(health(&curl), 2);
    assert_eq!(c1.hello()["epoch"], c2.hello()["epoch"]);
    assert_eq!(c1.hello()["protocol"], 1);

    let s = run_agent(&hub, &mut c1, &agent, "shout two").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    // The run is over (no more run events), so the events below are all about the decision.
    wait_run_finished(&hub, s["run_id"].as_str().unwrap(), SECS5)
        .await
        .unwrap();
    let ready = c2
        .event(
            "suggestion.ready",
            |v| v["suggestion"]["id"] == sid.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(
        ready["suggestion"], s,
        "both clients got the same suggestion"
    );
    let since = ready["seq"].as_u64().unwrap();

    // c1 decides; c2 hears about it with the same seq.
    let hid = s["hunks"][0]["id"].as_str().unwrap().to_string();
    let r = c1.decide(&sid, &hid, "accept").await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    let e1 = c1
        .event(
            "suggestion.hunk_applied",
            |v| v["hunk_id"] == hid.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    let e2 = c2
        .event(
            "suggestion.hunk_applied",
            |v| v["hunk_id"] == hid.as_str(),
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(e1, e2);
    assert_eq!(e2["state"], "accepted");
    assert_eq!(e2["reviewed_count"], 1);
    assert_eq!(e2["hunk_count"], 1);
    let status = c2
        .event(
            "suggestion.status",
            |v| v["suggestion_id"] == sid.as_str() && v["status"] == "applied",
            SECS5,
        )
        .await
        .unwrap();
    assert_eq!(status["message"], "1/1 hunks reviewed (1 applied)");

    // replay since the ready event: exactly the events after it, in order.
    let r = c2
        .call(json!({"type": "replay", "since": since}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    let d = &r["data"];
    assert_eq!(d["complete"], true);
    assert_eq!(d["epoch"], c2.hello()["epoch"]);
    let replayed = d["events"].as_array().unwrap().clone();
    let live: Vec<Value> = c2
        .seen
        .iter()
        .filter(|v| v["seq"].as_u64().is_some_and(|s| s > since) && v["type"] != "hello")
        .cloned()
        .collect();
    assert!(!replayed.is_empty());
    assert_eq!(replayed, live);
    let seqs: Vec<u64> = replayed
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]) && seqs[0] > since,
        "{seqs:?}"
    );
    assert_eq!(d["seq"], *seqs.last().unwrap());
    // The same over REST.
    let rest = curl.get(&format!("/events?since={since}")).unwrap();
    assert_eq!(rest.status, 200);
    assert_eq!(rest.body["events"], json!(replayed));
    // Nothing after the newest.
    let r = c1
        .call(json!({"type": "replay", "since": d["seq"]}))
        .await
        .unwrap();
    assert_eq!(r["data"]["events"], json!([]));
    assert_eq!(r["data"]["complete"], true);

    // list and get (by id, by unique prefix; unknown ids are not_found).
    let r = c2.call(json!({"type": "list"})).await.unwrap();
    let list = r["data"]["suggestions"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], sid.as_str());
    assert_eq!(list[0]["reviewed_count"], 1);
    assert_eq!(list[0]["status"], "complete");
    let full = c2
        .call(json!({"type": "get", "suggestionId": sid}))
        .await
        .unwrap();
    assert_eq!(full["data"]["hunks"][0]["state"], "accepted");
    let by_prefix = c2
        .call(json!({"type": "get", "suggestion_id": &sid[..8]}))
        .await
        .unwrap();
    assert_eq!(by_prefix["data"], full["data"]);
    assert_eq!(
        curl.get(&format!("/suggestions/{sid}")).unwrap().body,
        full["data"]
    );
    let r = c2
        .call(json!({"type": "get", "suggestionId": "does-not-exist"}))
        .await
        .unwrap();
    refused(&r, "not_found");
    let r = curl.get("/suggestions/does-not-exist").unwrap();
    assert_eq!(r.status, 404);

    // Clients leaving are counted down.
    drop(c1);
    wait_for("wsClients to drop to 1", SECS5, || health(&curl) == 1)
        .await
        .unwrap();
    c2.stream.close(None).await.unwrap();
    wait_for("wsClients to drop to 0", SECS5, || health(&curl) == 0)
        .await
        .unwrap();
}

/// A client keeps no copy of a large event in the hub once it has it. The hub sends a message
/// over 64 KiB in fragments; sent as one frame, tungstenite's write buffer grew to the frame
/// and stayed so for as long as the client was connected: 12 MiB of the hub's own memory per
/// client after a `suggestion.ready` of 200,000 lines.
#[tokio::test]
async fn a_connected_client_keeps_no_copy_of_a_large_event_in_the_hub() {
    use hunkgate::hub::quiet::QUIET;
    use hunkgate_tests::hub_bench::anon_at_rest;
    use hunkgate_tests::isolation::hub_pid;
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws.table_agent(200_000).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "a table").await.unwrap();
    wait_run_finished(&hub, s["run_id"].as_str().unwrap(), SECS5)
        .await
        .unwrap();
    // Positive control: the event is what a buffer the size of one frame would keep.
    let ready = c
        .seen
        .iter()
        .find(|v| v["type"] == "suggestion.ready")
        .map(|v| v.to_string().len())
        .unwrap();
    assert!(ready > 10 << 20, "the event has {ready} bytes");
    assert_eq!(
        s["hunks"][0]["file"], "table.txt",
        "the client has it whole"
    );
    // And a reply as large (a `get` of it) goes the same way.
    let got = c
        .call(json!({"type": "get", "suggestionId": s["id"]}))
        .await
        .unwrap();
    assert_eq!(got["data"], s);

    let pid = hub_pid(&hub).unwrap() as u32;
    let settle = QUIET + Duration::from_secs(2);
    let connected = anon_at_rest(pid, settle).unwrap();
    still_alive(&mut c).await;
    drop(c);
    let curl = hub.curl();
    wait_for("the client to be gone", SECS5, || {
        curl.get("/health").is_ok_and(|h| h.body["wsClients"] == 0)
    })
    .await
    .unwrap();
    let gone = anon_at_rest(pid, settle).unwrap();
    assert!(
        connected <= gone + 2 * 1024,
        "{connected} KiB of the hub's own memory with the client connected, {gone} KiB once it left"
    );
}

/// `GET /ws` that is no WebSocket handshake, over real HTTP (curl, with the token): refused with
/// the header it lacks named, another version with `426` and the version the hub speaks; the
/// handshake itself (positive control) connects.
#[tokio::test]
async fn a_request_that_is_no_websocket_handshake_is_refused_with_what_it_lacks() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let good = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let without = |name: &str| -> Vec<(&str, &str)> {
        good.iter().copied().filter(|(k, _)| *k != name).collect()
    };
    for (name, says) in [
        ("Connection", "Connection: Upgrade"),
        ("Upgrade", "Upgrade: websocket"),
        ("Sec-WebSocket-Key", "Sec-WebSocket-Key"),
    ] {
        let r = hub
            .curl()
            .request("GET", "/ws", None, &without(name))
            .unwrap();
        assert_eq!(r.status, 400, "without {name}: {}", r.body);
        assert_eq!(r.body["code"], "bad_request");
        assert!(
            r.body["error"].as_str().unwrap().contains(says),
            "without {name}: {}",
            r.body
        );
    }
    let mut old = without("Sec-WebSocket-Version");
    old.push(("Sec-WebSocket-Version", "8"));
    let r = hub.curl().request("GET", "/ws", None, &old).unwrap();
    assert_eq!(r.status, 426, "{}", r.body);
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "-i", "-H"])
        .arg(format!("Authorization: Bearer {}", hub.token));
    for (k, v) in &old {
        cmd.arg("-H").arg(format!("{k}: {v}"));
    }
    let out = cmd.arg(format!("{}/ws", hub.url)).output().unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("sec-websocket-version: 13\r\n"), "{head}");
    let mut c = hub.ws().await.unwrap();
    still_alive(&mut c).await;
}

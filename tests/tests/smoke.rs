//! The shortest path through the spine: run a scripted agent, accept its hunk over WebSocket,
//! see the file change.

use std::time::Duration;

use hunkgate_tests::Workspace;
use serde_json::json;

#[tokio::test]
async fn run_accept_lands_in_checkout() {
    let ws = Workspace::new(&[("hello.txt", b"hello\n")]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "echo 'hello, world' > hello.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut client = hub.ws().await.unwrap();
    let s = hunkgate_tests::run_agent(&hub, &mut client, &agent, "greet")
        .await
        .unwrap();
    assert_eq!(s["hunk_count"], 1);
    assert_eq!(
        ws.read_string("hello.txt").unwrap(),
        "hello\n",
        "nothing lands before a decision"
    );
    let hunk = s["hunks"][0]["id"].as_str().unwrap().to_string();
    let r = client
        .call(json!({"type": "feedback", "suggestionId": s["id"], "hunkId": hunk, "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(ws.read_string("hello.txt").unwrap(), "hello, world\n");
    let ev = client
        .event(
            "suggestion.hunk_applied",
            |v| v["hunk_id"] == hunk.as_str(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(ev["action"], "accepted");
}

//! The server end to end through rmcp, with the stdio transport over in-memory input and output.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::*;
use crate::cli::client::{TOKEN_VAR, URL_VAR};

/// Output shared with the test, behind a lock.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Serve `lines` (then end of input) without the agent's environment: every message written.
async fn session(lines: &[&str]) -> Vec<Value> {
    let server = Server::new(Err(ClientError::MissingEnv {
        missing: vec![URL_VAR, TOKEN_VAR],
    }));
    session_with(server, lines).await
}

async fn session_with(server: Server, lines: &[&str]) -> Vec<Value> {
    let sink = Sink::default();
    let input = lines.join("\n").into_bytes();
    serve(server, std::io::Cursor::new(input), sink.clone())
        .await
        .unwrap();
    let out = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn init(version: &str) -> String {
    json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    .to_string()
}

/// The answer to request `id` (rmcp answers concurrent requests in any order).
fn answer(msgs: &[Value], id: Value) -> &Value {
    let mut found = msgs.iter().filter(|m| m["id"] == id);
    let m = found
        .next()
        .unwrap_or_else(|| panic!("no answer to {id} in {msgs:#?}"));
    assert!(found.next().is_none(), "two answers to {id}: {msgs:#?}");
    m
}

#[tokio::test]
async fn initialize_negotiates_the_version() {
    for (asked, got) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let msgs = session(&[&init(asked)]).await;
        assert_eq!(msgs.len(), 1, "{msgs:#?}");
        let res = &answer(&msgs, json!("init"))["result"];
        assert_eq!(res["protocolVersion"], got, "{asked}");
        assert_eq!(res["capabilities"]["tools"], json!({}));
        assert_eq!(res["serverInfo"]["name"], "hunkgate");
        assert_eq!(res["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        let instr = res["instructions"].as_str().unwrap();
        assert!(
            instr.contains("publish_suggestion") && instr.contains("get_feedback"),
            "{instr}"
        );
    }
}

#[tokio::test]
async fn the_server_survives_garbage_and_answers_each_request() {
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\",\"pad\":\"{}\"}}",
        "x".repeat(MAX_MESSAGE)
    );
    let msgs = session(&[
        // Before initialize: a notification and a response are dropped, a ping answered.
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":50,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        &init("2025-06-18"),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "this is not json",
        &big,
        "",
        r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_suggestions"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"no/such/method"}"#,
    ])
    .await;
    assert_eq!(msgs.len(), 10, "{msgs:#?}");
    assert_eq!(
        answer(&msgs, json!(1)),
        &json!({"jsonrpc": "2.0", "id": 1, "result": {}})
    );
    assert_eq!(
        answer(&msgs, json!(6)),
        &json!({"jsonrpc": "2.0", "id": 6, "result": {}})
    );
    // The transport's own answers, in the order of the lines they answer.
    let codes: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["id"].is_null())
        .map(|m| &m["error"]["code"])
        .collect();
    assert_eq!(codes, [-32700, -32600, -32600], "{msgs:#?}");
    assert_eq!(answer(&msgs, json!(3))["error"]["code"], -32601);
    let e = &answer(&msgs, json!(7))["error"];
    assert_eq!(e["code"], -32601);
    assert_eq!(
        e["message"],
        "unknown method \"no/such/method\": this server answers initialize, ping, tools/list, tools/call"
    );
    let call = &answer(&msgs, json!(4))["result"];
    assert_eq!(call["isError"], true, "{call}");
    assert!(call["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("HUNKGATE_URL and HUNKGATE_AGENT_TOKEN are not set"));
    let tools = &answer(&msgs, json!(5))["result"]["tools"];
    assert_eq!(*tools, serde_json::to_value(tools::tools()).unwrap());
}

#[tokio::test]
async fn argument_errors_are_tool_results_from_2025_11_25_on() {
    let bogus = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"publish_suggestion","arguments":{"description":"x","bogus":1}}}"#;
    let unknown = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}"#;
    let says = "invalid arguments for publish_suggestion: unknown field `bogus`";
    for version in ["2024-11-05", "2025-06-18"] {
        let msgs = session(&[&init(version), bogus, unknown]).await;
        let e = &answer(&msgs, json!(7))["error"];
        assert_eq!(e["code"], -32602, "{version}: {e}");
        assert!(e["message"].as_str().unwrap().starts_with(says), "{e}");
        let e = &answer(&msgs, json!(8))["error"];
        assert_eq!(e["code"], -32602, "{version}: {e}");
        assert!(e["message"]
            .as_str()
            .unwrap()
            .starts_with("unknown tool \"delete_everything\""));
    }
    let msgs = session(&[&init("2025-11-25"), bogus, unknown]).await;
    let r = &answer(&msgs, json!(7))["result"];
    assert_eq!(r["isError"], true, "{r}");
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with(says));
    // An unknown tool stays a protocol error.
    assert_eq!(answer(&msgs, json!(8))["error"]["code"], -32602);
}

#[tokio::test]
async fn input_that_ends_before_initialize_is_a_clean_exit() {
    assert_eq!(session(&[]).await, Vec::<Value>::new());
    let msgs = session(&[
        "{",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ])
    .await;
    assert_eq!(msgs.len(), 1, "{msgs:#?}");
    assert_eq!(msgs[0]["error"]["code"], -32700);
}

#[tokio::test]
async fn a_cancelled_call_stops_and_gets_no_answer() {
    // A hub that takes the connection and never answers.
    let hub = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", hub.local_addr().unwrap());
    let call =
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_suggestions"}}"#;
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#;
    let ping = r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#;
    let msgs = session_with(
        Server::new(HubClient::new(&url, "t")),
        &[&init("2025-06-18"), call, cancel, ping],
    )
    .await;
    assert_eq!(msgs.len(), 2, "{msgs:#?}");
    answer(&msgs, json!("init"));
    answer(&msgs, json!(10));
    // rmcp drops the answer either way; the hub call itself must have stopped: the connection
    // is closed (a call still running would hold it open), with or without the request sent.
    // The call may have been cancelled before it connected: then there is nothing to accept,
    // which is as good (accept must not wait for a connection that never comes).
    hub.set_nonblocking(true).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let conn = loop {
        match hub.accept() {
            Ok((conn, _)) => break Some(conn),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(_) => break None,
        }
    };
    let Some(mut conn) = conn else {
        return;
    };
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut request = Vec::new();
    let read = std::io::Read::read_to_end(&mut conn, &mut request);
    assert!(
        read.is_ok(),
        "{read:?} after {:?}",
        String::from_utf8_lossy(&request)
    );
}

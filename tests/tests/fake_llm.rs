//! The fake model provider, driven with reqwest as the hub drives a real one: if the fake drifts
//! from the OpenAI wire format, every end-to-end agent test built on it proves less.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hunkgate_tests::fake_llm::{Call, FakeLlm, Recorded, Reply};
use serde_json::{json, Value};

fn request(stream: bool) -> Value {
    json!({
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}},
        ],
        "stream": stream,
    })
}

async fn post(fake: &FakeLlm, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.base_url()))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE response, parsed incrementally as a streaming client would,
/// so events split across reads are handled; asserts the stream ends with `[DONE]`.
async fn sse(resp: reqwest::Response) -> Vec<Value> {
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut bytes = resp.bytes_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    let mut done = false;
    while let Some(read) = bytes.next().await {
        buf.push_str(std::str::from_utf8(&read.unwrap()).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data = event.trim_end().strip_prefix("data: ").unwrap();
            assert!(!done, "event after [DONE]: {data}");
            if data == "[DONE]" {
                done = true;
            } else {
                events.push(serde_json::from_str(data).unwrap());
            }
        }
    }
    assert!(done, "stream ended without [DONE]");
    assert!(buf.is_empty(), "trailing bytes: {buf:?}");
    events
}

/// The choice deltas of a stream, checking each chunk's envelope on the way.
fn deltas(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| !e["choices"].as_array().unwrap().is_empty())
        .map(|e| {
            assert_eq!(e["object"], "chat.completion.chunk");
            assert_eq!(e["model"], "gpt-test");
            assert!(e["id"].as_str().unwrap().starts_with("chatcmpl-"));
            e["choices"][0]["delta"].clone()
        })
        .collect()
}

fn finish_reasons(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .map(|c| c["finish_reason"].clone())
        .collect()
}

#[tokio::test]
async fn non_streaming_text() {
    let fake = FakeLlm::scripted(vec![Reply::text("Hello there.")]).await;
    let resp = post(&fake, &request(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-test");
    assert!(v["created"].as_u64().unwrap() > 1_700_000_000);
    let choice = &v["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Hello there.");
    assert!(choice["message"].get("tool_calls").is_none(), "{v}");
    let usage = &v["usage"];
    let (p, c) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p >= 1 && c >= 1, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), p + c);

    let seen = fake.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].authorization().as_deref(), Some("Bearer sk-test"));
    assert_eq!(seen[0].model().as_deref(), Some("gpt-test"));
    assert!(!seen[0].stream());
    assert_eq!(seen[0].messages().len(), 1);
    assert_eq!(seen[0].tool_names(), ["read_file", "write_file"]);
    assert_eq!(seen[0].body, request(false));
}

#[tokio::test]
async fn non_streaming_parallel_tool_calls() {
    let a = json!({"path": "src/main.rs"});
    let b = json!({"path": "README.md", "content": "# hi\n"});
    let calls = vec![
        Call::new("read_file", a.clone()),
        Call::new("write_file", b.clone()),
    ];
    let fake = FakeLlm::scripted(vec![Reply::tools(calls)]).await;
    let v: Value = post(&fake, &request(false)).await.json().await.unwrap();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let tcs = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(tcs.len(), 2);
    assert_ne!(tcs[0]["id"], tcs[1]["id"]);
    for (tc, (name, args)) in tcs.iter().zip([("read_file", &a), ("write_file", &b)]) {
        assert!(tc["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(tc["type"], "function");
        assert_eq!(tc["function"]["name"], name);
        let raw = tc["function"]["arguments"]
            .as_str()
            .expect("arguments is a string");
        assert_eq!(&serde_json::from_str::<Value>(raw).unwrap(), args);
    }
}

#[tokio::test]
async fn streaming_text_reassembles() {
    let text = "Streaming replies arrive in pieces — even ünïcödé ones.";
    let fake = FakeLlm::scripted(vec![Reply::text(text)]).await;
    let events = sse(post(&fake, &request(true)).await).await;
    let deltas = deltas(&events);
    assert_eq!(deltas[0]["role"], "assistant");
    let pieces: Vec<&str> = deltas
        .iter()
        .filter_map(|d| d["content"].as_str())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(pieces.len() > 1, "text came in one piece: {pieces:?}");
    assert_eq!(pieces.concat(), text);
    let reasons = finish_reasons(&events);
    assert_eq!(reasons.last().unwrap(), "stop");
    assert!(reasons[..reasons.len() - 1].iter().all(Value::is_null));
    assert_eq!(deltas.last().unwrap(), &json!({}));
    assert!(
        events.iter().all(|e| e.get("usage").is_none()),
        "no usage unless asked"
    );
    assert!(fake.requests()[0].stream());
}

#[tokio::test]
async fn streaming_tool_calls_reassemble_from_pieces() {
    let a = json!({"path": "src/lib.rs", "start": 10, "end": 42});
    let b = json!({"path": "notes.txt", "content": "line one\nline two\n"});
    let calls = vec![
        Call::new("read_file", a.clone()),
        Call::new("write_file", b.clone()),
    ];
    let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
    let reply = Reply::Tools {
        content: Some("Let me look.".into()),
        calls,
    };
    let fake = FakeLlm::scripted(vec![reply]).await;
    let events = sse(post(&fake, &request(true)).await).await;
    let deltas = deltas(&events);
    assert_eq!(deltas[0]["role"], "assistant");

    // Reassemble as a client must: by index, id/name from the first delta, arguments appended.
    let mut assembled: Vec<(String, String, String)> = Vec::new();
    let mut pieces = [0usize; 2];
    let mut last_index = 0;
    let mut content = String::new();
    for d in &deltas {
        content += d["content"].as_str().unwrap_or_default();
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            assert!(i >= last_index, "calls are sent in index order");
            last_index = i;
            if i == assembled.len() {
                assert_eq!(tc["type"], "function");
                let id = tc["id"].as_str().unwrap().to_string();
                let name = tc["function"]["name"].as_str().unwrap().to_string();
                assembled.push((id, name, String::new()));
            } else {
                assert!(tc.get("id").is_none(), "id only in the first delta: {tc}");
                assert!(tc["function"].get("name").is_none(), "{tc}");
            }
            let piece = tc["function"]["arguments"].as_str().unwrap();
            if !piece.is_empty() {
                pieces[i] += 1;
            }
            assembled[i].2 += piece;
        }
    }
    assert_eq!(content, "Let me look.");
    assert!(
        pieces.iter().all(|&n| n > 1),
        "arguments in pieces: {pieces:?}"
    );
    assert_eq!(assembled.len(), 2);
    for ((id, name, args), (want_id, want_name, want_args)) in assembled.iter().zip(
        ids.iter()
            .zip([("read_file", &a), ("write_file", &b)])
            .map(|(i, (n, a))| (i, n, a)),
    ) {
        assert_eq!(id, want_id);
        assert_eq!(name, want_name);
        assert_eq!(&serde_json::from_str::<Value>(args).unwrap(), want_args);
    }
    assert_eq!(finish_reasons(&events).last().unwrap(), "tool_calls");
}

#[tokio::test]
async fn streaming_tool_call_without_text_carries_role_in_first_delta() {
    let fake = FakeLlm::scripted(vec![Reply::tool("read_file", json!({"path": "a"}))]).await;
    let events = sse(post(&fake, &request(true)).await).await;
    let first = &deltas(&events)[0];
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["tool_calls"][0]["function"]["name"], "read_file");
}

#[tokio::test]
async fn usage_chunk_only_with_include_usage() {
    let fake = FakeLlm::scripted(vec![
        Reply::text("no usage here"),
        Reply::WithUsage {
            prompt_tokens: 1234,
            completion_tokens: 56,
            inner: Box::new(Reply::text("counted")),
        },
    ])
    .await;
    let plain = sse(post(&fake, &request(true)).await).await;
    assert!(plain.iter().all(|e| e.get("usage").is_none()));
    assert!(plain
        .iter()
        .all(|e| !e["choices"].as_array().unwrap().is_empty()));

    let mut body = request(true);
    body["stream_options"] = json!({"include_usage": true});
    let events = sse(post(&fake, &body).await).await;
    let (last, rest) = events.split_last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290})
    );
    // As OpenAI does: every earlier chunk says `"usage": null`.
    assert!(rest
        .iter()
        .all(|e| e["usage"].is_null() && e.get("usage").is_some()));
    assert_eq!(finish_reasons(rest).last().unwrap(), "stop");
}

#[tokio::test]
async fn status_reply_with_body_and_retry_after() {
    let Reply::Status { body, .. } = Reply::error(500, "upstream on fire", Some("overloaded"))
    else {
        panic!("Reply::error builds a Status");
    };
    let fake = FakeLlm::scripted(vec![Reply::Status {
        status: 500,
        body,
        retry_after: Some(7),
    }])
    .await;
    let resp = post(&fake, &request(false)).await;
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["retry-after"], "7");
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], "upstream on fire");
    assert_eq!(v["error"]["type"], "server_error");
    assert_eq!(v["error"]["code"], "overloaded");
}

#[tokio::test]
async fn error_helper_has_no_retry_after() {
    let fake = FakeLlm::scripted(vec![Reply::error(429, "slow down", None)]).await;
    let resp = post(&fake, &request(false)).await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().get("retry-after").is_none());
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], "slow down");
    assert_eq!(v["error"]["code"], Value::Null);
}

#[tokio::test]
async fn delay_delays() {
    let wait = Duration::from_millis(200);
    let fake = FakeLlm::scripted(vec![Reply::Delay(wait, Box::new(Reply::text("late")))]).await;
    let start = Instant::now();
    let v: Value = post(&fake, &request(false)).await.json().await.unwrap();
    assert!(start.elapsed() >= wait, "{:?}", start.elapsed());
    assert_eq!(v["choices"][0]["message"]["content"], "late");
}

#[tokio::test]
async fn exhausted_script_is_a_recorded_500() {
    let fake = FakeLlm::scripted(vec![Reply::text("only one")]).await;
    assert_eq!(post(&fake, &request(false)).await.status(), 200);
    let resp = post(&fake, &request(true)).await;
    assert_eq!(resp.status(), 500);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], "fake LLM script exhausted");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn responder_sees_earlier_tool_results() {
    let fake = FakeLlm::with(|req: &Recorded| match req.tool_results().last() {
        None => Reply::tool("hash_of", json!({"path": "a.txt"})),
        Some((id, content)) => Reply::text(&format!("{id} said {content}")),
    })
    .await;
    let first: Value = post(&fake, &request(false)).await.json().await.unwrap();
    let call = first["choices"][0]["message"]["tool_calls"][0].clone();
    let id = call["id"].as_str().unwrap();

    let mut body = request(false);
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(first["choices"][0]["message"].clone());
    // Content as an array of text parts, which clients may send instead of a string.
    messages.push(json!({
        "role": "tool",
        "tool_call_id": id,
        "content": [{"type": "text", "text": "sha256:"}, {"type": "text", "text": "abc123"}],
    }));
    let second: Value = post(&fake, &body).await.json().await.unwrap();
    assert_eq!(
        second["choices"][0]["message"]["content"],
        format!("{id} said sha256:abc123")
    );
    let seen = fake.requests();
    assert_eq!(
        seen[1].tool_results(),
        [(id.to_string(), "sha256:abc123".to_string())]
    );
}

#[tokio::test]
async fn responder_panic_is_a_500() {
    let fake = FakeLlm::with(|_: &Recorded| panic!("scripted failure")).await;
    let resp = post(&fake, &request(false)).await;
    assert_eq!(resp.status(), 500);
    let v: Value = resp.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("scripted failure"),
        "{v}"
    );
}

#[tokio::test]
async fn unknown_path_and_bad_json_do_not_consume_the_script() {
    let fake = FakeLlm::scripted(vec![Reply::text("still here")]).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/completions", fake.base_url()))
        .json(&request(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let resp = client
        .post(format!("{}/chat/completions", fake.base_url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);

    // Without the /v1 prefix too, as some clients build the URL.
    let url = fake.base_url().trim_end_matches("/v1").to_string() + "/chat/completions";
    let v: Value = client
        .post(url)
        .json(&request(false))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "still here");

    let seen = fake.requests();
    let paths: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/completions",
            "/v1/chat/completions",
            "/chat/completions"
        ]
    );
    assert_eq!(seen[1].body, Value::Null);
    assert_eq!(seen[1].raw, "{not json");
}

#[tokio::test]
async fn raw_reply_is_sent_verbatim() {
    let fake = FakeLlm::scripted(vec![Reply::Raw("{\"choices\": [".into())]).await;
    let resp = post(&fake, &request(true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.text().await.unwrap(), "{\"choices\": [");
}

#[tokio::test]
async fn wait_requests_polls_until_count_or_timeout() {
    let fake = FakeLlm::scripted(vec![Reply::Delay(
        Duration::from_millis(50),
        Box::new(Reply::text("x")),
    )])
    .await;
    assert!(fake
        .wait_requests(1, Duration::from_millis(20))
        .await
        .is_empty());
    let body = request(false);
    let (_, seen) = tokio::join!(
        post(&fake, &body),
        fake.wait_requests(1, Duration::from_secs(5))
    );
    assert_eq!(seen.len(), 1);
}

#[tokio::test]
async fn serves_while_the_test_thread_blocks() {
    let fake = FakeLlm::scripted(vec![Reply::text("from another thread")]).await;
    let url = format!("{}/chat/completions", fake.base_url());
    // A synchronous client on a plain thread, while this runtime's only thread is blocked in
    // join: the fake must not depend on the test's runtime being polled.
    let reply = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let v: Value = reqwest::Client::new()
                .post(url)
                .json(&request(false))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["choices"][0]["message"]["content"].clone()
        })
    })
    .join()
    .unwrap();
    assert_eq!(reply, "from another thread");
}

#[tokio::test]
async fn dropping_stops_the_server() {
    let fake = FakeLlm::scripted(vec![]).await;
    let url = format!("{}/chat/completions", fake.base_url());
    drop(fake);
    let err = reqwest::Client::new()
        .post(url)
        .json(&request(false))
        .send()
        .await;
    assert!(err.is_err(), "server still answering after drop");
}

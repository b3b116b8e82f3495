//! The WebSocket handler driven through channels (no socket): hello, commands and their replies,
//! bad and oversized frames, events, replay and resync, shutdown. Plus the real endpoint once, for
//! the token check in front of the upgrade.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, PollSender};

use super::*;
use crate::api::server::{open_hub, Started};
use crate::config::ServeConfig;
use crate::protocol::Event;

const WAIT: Duration = Duration::from_secs(10);

/// A hub on a fresh git repository and state dir (kept as long as the fixture lives).
pub(crate) struct Fixture {
    _tmp: tempfile::TempDir,
    started: Started,
}

impl Fixture {
    pub(crate) fn new(port: u16) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        let git = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&repo)
            .status()
            .unwrap();
        assert!(git.success());
        let cfg = ServeConfig {
            repo,
            host: "127.0.0.1".into(),
            port,
            state_dir: tmp.path().join("state"),
            agent: None,
            acp: Default::default(),
            agent_timeout: Duration::from_secs(60),
            agent_env: Vec::new(),
            allowed_origins: Vec::new(),
            mirror_refs: false,
            vcs: hunkgate_sandbox::jj::Vcs::Git,
            isolation: crate::isolation::Isolation::None,
            provider: None,
            routing: Default::default(),
            limits: Default::default(),
            max_concurrent_runs: 1,
            read_limits: Default::default(),
            retention: Default::default(),
            review: Default::default(),
            sensitive: Default::default(),
            url_context: Default::default(),
            checks: crate::config::checkers::Checks::none(),
            accel: Default::default(),
        };
        let started = open_hub(cfg, port, CancellationToken::new()).unwrap();
        Self { _tmp: tmp, started }
    }

    pub(crate) fn hub(&self) -> &Arc<Hub> {
        &self.started.hub
    }
}

/// One client of [`connection`], through channels.
struct Client {
    to_hub: mpsc::Sender<Result<Message, std::io::Error>>,
    from_hub: mpsc::Receiver<Message>,
    task: JoinHandle<()>,
    /// How often the hub has polled this client's input.
    polls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Client {
    /// `capacity`: how many frames the hub may send before it waits for this client to read.
    fn connect(hub: &Arc<Hub>, capacity: usize) -> Self {
        let (to_hub, inbox) = mpsc::channel(16);
        let (outbox, from_hub) = mpsc::channel(capacity);
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let read = Counted {
            inner: Box::pin(futures_util::stream::unfold(inbox, |mut rx| async move {
                rx.recv().await.map(|m| (m, rx))
            })),
            polls: polls.clone(),
        };
        let task = tokio::spawn(connection(hub.clone(), PollSender::new(outbox), read));
        Self {
            to_hub,
            from_hub,
            task,
            polls,
        }
    }

    fn polls(&self) -> usize {
        self.polls.load(Ordering::Relaxed)
    }

    async fn send(&self, msg: Message) {
        self.to_hub.send(Ok(msg)).await.expect("hub reads");
    }

    async fn next(&mut self) -> Message {
        tokio::time::timeout(WAIT, self.from_hub.recv())
            .await
            .expect("a frame in time")
            .expect("connection open")
    }

    async fn next_json(&mut self) -> Value {
        match self.next().await {
            Message::Text(t) => serde_json::from_str(t.as_str()).expect("JSON frame"),
            other => panic!("not a text frame: {other:?}"),
        }
    }

    /// Send a command and return its response (events before it are skipped).
    async fn call(&mut self, cmd: Value) -> Value {
        self.send(Message::Text(cmd.to_string().into())).await;
        loop {
            let v = self.next_json().await;
            if v["type"] == "response" {
                return v;
            }
        }
    }

    /// Leave, and wait until the hub is done with this connection.
    async fn close(self) {
        let Client {
            to_hub,
            from_hub,
            task,
            ..
        } = self;
        drop((to_hub, from_hub));
        tokio::time::timeout(WAIT, task)
            .await
            .expect("connection ends")
            .unwrap();
    }
}

fn status(i: usize) -> Event {
    Event::Status {
        seq: 0,
        suggestion_id: None,
        run_id: Some("r1".into()),
        status: "working".into(),
        message: format!("step {i}"),
    }
}

#[tokio::test]
async fn hello_then_events_after_it_and_the_client_count() {
    let fx = Fixture::new(0);
    let hub = fx.hub();
    hub.bus().emit(status(0));
    let mut c = Client::connect(hub, 16);
    let hello = c.next_json().await;
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["service"], SERVICE);
    assert_eq!(hello["protocol"], PROTOCOL_VERSION);
    assert_eq!(hello["epoch"], hub.epoch());
    let seq = hello["seq"].as_u64().unwrap();
    assert_eq!(seq, hub.bus().current());
    assert_eq!(hub.ws_clients().load(Ordering::Relaxed), 1);
    // The event before the hello is not pushed; the one after it is.
    hub.bus().emit(status(1));
    let ev = c.next_json().await;
    assert_eq!(ev["type"], "suggestion.status");
    assert_eq!(ev["message"], "step 1");
    assert_eq!(ev["seq"], seq + 1);
    c.close().await;
    assert_eq!(hub.ws_clients().load(Ordering::Relaxed), 0);
}

/// A stream that counts how often it is polled.
struct Counted<S> {
    inner: S,
    polls: Arc<std::sync::atomic::AtomicUsize>,
}

impl<S: Stream + Unpin> Stream for Counted<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        std::pin::Pin::new(&mut self.inner).poll_next(cx)
    }
}

#[tokio::test]
async fn a_client_that_only_listens_is_not_read_for_each_event() {
    let fx = Fixture::new(0);
    let hub = fx.hub();
    let mut c = Client::connect(hub, 256);
    c.next().await; // hello
    let before = c.polls();
    const EVENTS: usize = 50;
    for i in 0..EVENTS {
        hub.bus().emit(status(i));
        // Each event on its own, as a client that reads as they come gets them.
        let Message::Text(t) = c.next().await else {
            panic!("not a text frame")
        };
        assert!(t.as_str().contains(&format!("step {i}")), "{t}");
    }
    let during = c.polls() - before;
    // The events went out without the client's input being looked at again for each one.
    assert!(
        during < 5,
        "the input was polled {during} times for {EVENTS} events"
    );
    // Positive control: what the client sends is still read and answered.
    let r = c.call(json!({"type": "ping", "id": 1})).await;
    assert_eq!(
        (r["type"].clone(), r["id"].clone()),
        (json!("response"), json!(1))
    );
    assert!(c.polls() > before + during);
    c.close().await;
}

#[tokio::test]
async fn commands_get_their_replies_with_the_id_echoed() {
    let fx = Fixture::new(0);
    let mut c = Client::connect(fx.hub(), 16);
    c.next_json().await; // hello
    let r = c.call(json!({"type": "ping", "id": {"n": 1}})).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["id"], json!({"n": 1}));
    assert_eq!(r["data"]["pong"], true);
    let r = c.call(json!({"type": "list", "id": 2, "all": true})).await;
    assert_eq!(r["data"], json!({"suggestions": []}), "{r}");
    // A command the hub refuses: the code of its error, the id still echoed.
    let r = c
        .call(json!({"type": "get", "id": 3, "suggestionId": "nope"}))
        .await;
    assert_eq!(
        (r["success"].clone(), r["code"].clone()),
        (json!(false), json!("not_found"))
    );
    assert_eq!(r["id"], 3);
    c.close().await;
}

#[tokio::test]
async fn bad_and_oversized_frames_get_errors_and_the_connection_stays() {
    let fx = Fixture::new(0);
    let mut c = Client::connect(fx.hub(), 16);
    c.next_json().await;
    c.send(Message::Binary(vec![1u8, 2].into())).await;
    let r = c.next_json().await;
    assert_eq!(r["code"], "bad_request", "{r}");
    assert!(r["error"].as_str().unwrap().contains("binary"), "{r}");
    c.send(Message::Text("{not json".into())).await;
    let r = c.next_json().await;
    assert_eq!(r["code"], "bad_request", "{r}");
    assert!(r.get("id").is_none(), "{r}");
    let r = c.call(json!({"type": "frobnicate", "id": "u"})).await;
    assert_eq!(
        (r["code"].as_str(), r["id"].as_str()),
        (Some("bad_request"), Some("u"))
    );
    assert!(r["error"].as_str().unwrap().contains("feedback_all"), "{r}");
    let r = c
        .call(json!({"type": "feedback", "suggestionId": "x"}))
        .await;
    assert_eq!(r["code"], "bad_request", "{r}");
    assert!(r["error"]
        .as_str()
        .unwrap()
        .starts_with("invalid \"feedback\" command"));
    // Over the limit by one byte: too large; at the limit: an ordinary (unknown-field) error.
    for (len, code) in [(MAX_BODY + 1, "too_large"), (MAX_BODY, "bad_request")] {
        let head = json!({"type": "ping", "pad": ""}).to_string();
        let pad = "x".repeat(len - head.len());
        let frame = json!({"type": "ping", "pad": pad}).to_string();
        assert_eq!(frame.len(), len);
        let r = c.call(serde_json::from_str(&frame).unwrap()).await;
        assert_eq!(r["code"], code, "{len} bytes");
    }
    let r = c.call(json!({"type": "ping"})).await;
    assert_eq!(r["success"], true, "still usable: {r}");
    c.close().await;
}

#[tokio::test]
async fn replay_returns_what_was_missed_and_a_slow_client_is_told_to_resync() {
    let fx = Fixture::new(0);
    let hub = fx.hub();
    for i in 0..3 {
        hub.bus().emit(status(i));
    }
    // Room for one frame only: the hub waits on this client while events pile up.
    let mut c = Client::connect(hub, 1);
    let hello = c.next_json().await;
    let r = c.call(json!({"type": "replay", "since": 1})).await;
    let events = r["data"]["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "{r}");
    assert_eq!(events[0]["seq"], 2);
    assert_eq!(r["data"]["complete"], true);
    assert_eq!(r["data"]["seq"], hello["seq"]);
    for i in 0..3000 {
        hub.bus().emit(status(i));
    }
    let mut seen = 0;
    let resync = loop {
        let v = c.next_json().await;
        if v["type"] == "resync" {
            break v;
        }
        seen += 1;
        assert!(seen < 3000, "no resync");
    };
    assert!(
        resync["reason"].as_str().unwrap().contains("dropped"),
        "{resync}"
    );
    // After the resync the stream goes on, and a ping still gets its answer.
    let r = c.call(json!({"type": "ping"})).await;
    assert_eq!(r["success"], true);
    c.close().await;
}

#[tokio::test]
async fn shutdown_closes_with_going_away() {
    let fx = Fixture::new(0);
    let mut c = Client::connect(fx.hub(), 16);
    c.next_json().await;
    fx.hub().shutdown().cancel();
    match c.next().await {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1001),
        other => panic!("expected a close frame, got {other:?}"),
    }
    c.close().await;
}

#[tokio::test]
async fn the_real_endpoint_wants_the_token_before_the_hello() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let fx = Fixture::new(port);
    let app = crate::api::http::router(fx.hub().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let url = format!("ws://127.0.0.1:{port}/ws");
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 401)
        }
        other => panic!("connected without a token: {:?}", other.map(|_| ())),
    }
    let mut req = url.as_str().into_client_request().unwrap();
    let token = std::fs::read_to_string(fx.hub().cfg().state_dir.join("token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    req.headers_mut()
        .insert("authorization", bearer.parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let hello = tokio::time::timeout(WAIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let hello: Value = serde_json::from_str(hello.to_text().unwrap()).unwrap();
    assert_eq!(hello["type"], "hello");
    server.abort();
}

/// A sink that records every frame and every flush that ended a write.
#[derive(Clone, Default)]
struct Recorder(Arc<std::sync::Mutex<Vec<String>>>);

impl Sink<Message> for Recorder {
    type Error = std::io::Error;
    fn poll_ready(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn start_send(self: std::pin::Pin<&mut Self>, m: Message) -> Result<(), Self::Error> {
        let v: Value = serde_json::from_str(m.to_text().unwrap_or("{}")).unwrap_or_default();
        let name = v["type"].as_str().unwrap_or("?").to_string();
        self.0.lock().unwrap().push(name);
        Ok(())
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        let mut log = self.0.lock().unwrap();
        if log.last().is_some_and(|l| l != "|") {
            log.push("|".into());
        }
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.poll_flush(cx)
    }
}

/// [`send_loop`] on `sink` after a hello at `hello_seq`, until `replies` ends.
fn spawn_send_loop<W: Sink<Message> + Unpin + Send + 'static>(
    sink: W,
    hello_seq: u64,
    events: broadcast::Receiver<Sent>,
    replies: mpsc::Receiver<String>,
) -> JoinHandle<()> {
    let hello = Hello {
        kind: "hello".into(),
        service: SERVICE.into(),
        version: "0".into(),
        protocol: PROTOCOL_VERSION,
        seq: hello_seq,
        epoch: "e".into(),
    };
    tokio::spawn(send_loop(
        sink,
        hello,
        events,
        replies,
        CancellationToken::new(),
    ))
}

/// A reply and the events already waiting behind it go out in one write, in order; an event
/// the hello covered is not sent; a later event is a write of its own.
#[tokio::test]
async fn frames_that_are_ready_together_go_out_in_one_write() {
    let (events_tx, events) = broadcast::channel(16);
    let (replies_tx, replies) = mpsc::channel(16);
    let event = |seq: u64| Sent {
        seq,
        json: format!(r#"{{"type":"event{seq}","seq":{seq}}}"#).into(),
    };
    replies_tx
        .send(r#"{"type":"response"}"#.to_string())
        .await
        .unwrap();
    for seq in 1..=4 {
        events_tx.send(event(seq)).unwrap();
    }
    let sink = Recorder::default();
    let log = sink.0.clone();
    let task = spawn_send_loop(sink, 1, events, replies);
    let wait_for = |n: usize| {
        let log = log.clone();
        async move {
            tokio::time::timeout(WAIT, async {
                while log.lock().unwrap().len() < n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("the frames were not sent");
        }
    };
    wait_for(7).await;
    events_tx.send(event(5)).unwrap();
    wait_for(9).await;
    drop(replies_tx);
    task.await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["hello", "|", "response", "event2", "event3", "event4", "|", "event5", "|"]
    );
}

/// A long text as fragments: a text frame, then continuation frames, the last one final; none
/// over the size, none starting inside a character (two- and four-byte ones placed across
/// every boundary), and together the text byte for byte. A text of at most one fragment is one
/// final frame.
#[test]
fn a_long_text_goes_out_in_fragments_cut_between_characters() {
    let size = 16;
    for shift in 0..size {
        let text = format!("{}{}", "a".repeat(shift), "é𝄞x".repeat(20));
        let frames: Vec<Frame> = fragments(Bytes::from(text.clone()), size).collect();
        assert!(frames.len() > 1);
        let mut joined = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            let want = if i == 0 { Data::Text } else { Data::Continue };
            assert_eq!(f.header().opcode, OpCode::Data(want));
            assert_eq!(f.header().is_final, i == frames.len() - 1);
            assert!(!f.payload().is_empty() && f.payload().len() <= size);
            assert!(
                std::str::from_utf8(f.payload()).is_ok(),
                "fragment {i} cuts a character: {:?}",
                f.payload()
            );
            joined.extend_from_slice(f.payload());
        }
        assert_eq!(joined, text.as_bytes());
    }
    let one: Vec<Frame> = fragments(Bytes::from_static(b"short"), size).collect();
    assert_eq!(one.len(), 1);
    assert!(one[0].header().is_final && one[0].payload() == b"short".as_slice());
}

/// Through the send loop and a real WebSocket (tungstenite on both ends of an in-memory
/// stream): an event over `FRAGMENT` arrives as several frames that the client reads as the
/// one message, the events around it as they were, in order. The client takes no frame over
/// `FRAGMENT` bytes, so the event sent as one frame would fail it.
#[tokio::test]
async fn a_large_event_reaches_a_real_client_whole_in_order() {
    use tokio_tungstenite::tungstenite::protocol::Role;
    use tokio_tungstenite::WebSocketStream;
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    let server = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
    let strict = WebSocketConfig::default().max_frame_size(Some(FRAGMENT));
    let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, Some(strict)).await;
    let (events_tx, events) = broadcast::channel(16);
    let (replies_tx, replies) = mpsc::channel::<String>(16);
    let (sink, _stream) = server.split();
    let task = spawn_send_loop(sink, 0, events, replies);
    let big = format!(
        r#"{{"type":"big","seq":2,"text":"{}"}}"#,
        "ünïcödé ".repeat(3 * FRAGMENT / 8)
    );
    assert!(big.len() > 3 * FRAGMENT);
    for (seq, json) in [
        (1, r#"{"type":"small","seq":1}"#.to_string()),
        (2, big.clone()),
        (3, r#"{"type":"small","seq":3}"#.to_string()),
    ] {
        events_tx
            .send(Sent {
                seq,
                json: json.into(),
            })
            .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 4 {
        let m = tokio::time::timeout(WAIT, client.next())
            .await
            .expect("a message in time")
            .expect("connection open")
            .expect("a valid message");
        got.push(m.into_text().unwrap().to_string());
    }
    assert!(got[0].contains(r#""type":"hello""#));
    assert_eq!(got[1], r#"{"type":"small","seq":1}"#);
    assert!(got[2] == big, "the large event arrived changed");
    assert_eq!(got[3], r#"{"type":"small","seq":3}"#);
    drop(replies_tx);
    task.await.unwrap();
}

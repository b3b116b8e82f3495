//! The WebSocket endpoint: a `hello`, then every event as it happens, and a `response` to every
//! command. Written against any `Sink`/`Stream` of messages (axum's socket halves in the hub,
//! channels in the tests below): one loop sends, the other receives.

use std::fmt::Display;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Message, Utf8Bytes};
use tokio_util::sync::CancellationToken;

use crate::api::dispatch::dispatch;
use crate::api::handshake;
use crate::hub::events::Sent;
use crate::hub::Hub;
use crate::protocol::{
    parse_client_msg, Hello, ParseError, Response as Resp, HARD_LIMIT, MAX_BODY, PROTOCOL_VERSION,
    SERVICE,
};

/// `GET /ws`: the handshake, then [`connection`] on the upgraded socket.
pub async fn upgrade(State(hub): State<Arc<Hub>>, req: Request) -> Response {
    let config = config()
        .max_message_size(Some(HARD_LIMIT))
        .max_frame_size(Some(HARD_LIMIT));
    handshake::accept(req, config, move |socket| async move {
        let (write, read) = socket.split();
        connection(hub, write, read).await
    })
}

/// How much of a connection's input tungstenite reads at a time. It zeroes that much of its
/// read buffer before every read, at its default of 128 KiB: while the receiving side of a
/// connection was polled with every event sent to it (see [`connection`]), that zeroing was 31%
/// of the hub's CPU as it sent 100 clients their events (the hub benchmark's fan-out, under
/// `perf`). A command is a few hundred bytes; a larger one (a modified hunk) takes a few more
/// reads.
pub const READ_BUFFER: usize = 16 * 1024;

/// The WebSocket settings of both ends: the hub's connections (which add their message limits)
/// and the CLI's client, which reads big messages — a `suggestion.ready` of 1,000 hunks is
/// about 600 KB — in [`READ_BUFFER`] steps.
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(READ_BUFFER)
}

struct ClientCount(Arc<Hub>);

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.0.ws_clients().fetch_sub(1, Ordering::Relaxed);
        // What the connection held (its buffers, its queue of events) is free now.
        self.0.quiet().note();
    }
}

/// Serve one client until it leaves or the hub shuts down.
pub async fn connection<W, R, E>(hub: Arc<Hub>, write: W, read: R)
where
    W: Sink<Message> + Unpin,
    R: Stream<Item = Result<Message, E>> + Unpin + Send + 'static,
    E: Display + Send + 'static,
{
    hub.ws_clients().fetch_add(1, Ordering::Relaxed);
    let _count = ClientCount(hub.clone());
    // Subscribe before reading `current` so no event falls between hello and the stream.
    let events = hub.bus().subscribe();
    let hello = Hello {
        kind: "hello".into(),
        service: SERVICE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: PROTOCOL_VERSION,
        seq: hub.bus().current(),
        epoch: hub.epoch().to_string(),
    };
    let (tx, rx) = mpsc::channel::<String>(64);
    // The receiving side in a task of its own, so that it is polled when the client sends
    // something: joined in this task, it was polled, and read the socket, each time an event
    // woke the sending side. It ends with the client or the hub, and the connection with it.
    let receiving = tokio::spawn({
        let hub = hub.clone();
        async move { receive_loop(&hub, read, tx).await }
    });
    send_loop(write, hello, events, rx, hub.shutdown().clone()).await;
    if let Err(e) = receiving.await {
        tracing::error!(error = %e, "a WebSocket connection's receiving task failed");
    }
}

fn text(s: String) -> Message {
    Message::Text(Utf8Bytes::from(s))
}

/// The hello, then replies and events in the order they come, until the replies end (the
/// receiving side is done), the client is gone or the hub shuts down. Whatever is already
/// waiting when one message goes out (a decision's reply and its events, a burst of events)
/// goes with it in one write: messages are fed, and flushed once nothing more is ready.
async fn send_loop<W: Sink<Message> + Unpin>(
    mut sink: W,
    hello: Hello,
    mut events: broadcast::Receiver<Sent>,
    mut replies: mpsc::Receiver<String>,
    shutdown: CancellationToken,
) {
    let hello_seq = hello.seq;
    if let Ok(h) = serde_json::to_string(&hello) {
        if sink.send(text(h)).await.is_err() {
            return;
        }
    }
    loop {
        // Shutdown first, so the close frame is sent even when the replies end at the same time.
        let out = tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let _ = sink.send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Away,
                    reason: Utf8Bytes::from_static("hub shutting down"),
                }))).await;
                break;
            }
            reply = replies.recv() => match reply {
                Some(t) => text(t),
                None => break,
            },
            ev = events.recv() => match event_frame(ev, hello_seq) {
                Next::Send(m) => m,
                Next::Skip => continue,
                Next::End => break,
            },
        };
        if feed(&mut sink, out).await.is_err() {
            break;
        }
        let mut ended = false;
        // Bounded, so a flood of events cannot hold back the flush.
        for _ in 0..MAX_BATCH {
            let Some(next) = ready_frame(&mut replies, &mut events, hello_seq) else {
                break;
            };
            match next {
                Next::Send(m) => {
                    if feed(&mut sink, m).await.is_err() {
                        return;
                    }
                }
                Next::Skip => {}
                Next::End => {
                    ended = true;
                    break;
                }
            }
        }
        if sink.flush().await.is_err() || ended {
            break;
        }
    }
}

/// At most this many messages go out in one write.
const MAX_BATCH: usize = 64;

/// A text message longer than this goes out in fragments (RFC 6455 §5.4) of at most this many
/// bytes, each a slice of the message's one buffer (an event's is shared by every client).
/// tungstenite formats each frame into a buffer of the connection's that never shrinks, so the
/// fragments bound what a connection keeps to about this and tungstenite's write buffer (128
/// KiB), where one frame kept the largest message it ever sent.
const FRAGMENT: usize = 64 * 1024;

/// Feed `m` to `sink`: whole, or in fragments when it is a text message over [`FRAGMENT`].
async fn feed<W: Sink<Message> + Unpin>(sink: &mut W, m: Message) -> Result<(), W::Error> {
    match m {
        Message::Text(t) if t.len() > FRAGMENT => {
            for frame in fragments(t.into(), FRAGMENT) {
                sink.feed(Message::Frame(frame)).await?;
            }
            Ok(())
        }
        m => sink.feed(m).await,
    }
}

/// `text` as the frames of one text message of at most `size` bytes each, cut where a
/// character starts: a text frame, continuation frames, the last one final.
fn fragments(text: Bytes, size: usize) -> impl Iterator<Item = Frame> {
    let mut next = Some(0);
    std::iter::from_fn(move || {
        let start = next?;
        let mut end = (start + size).min(text.len());
        // No fragment starts on a UTF-8 continuation byte (0b10xxxxxx): a character is at most
        // four bytes, so with `size` >= 4 each fragment keeps some.
        while end < text.len() && end > start + 1 && text[end] & 0xC0 == 0x80 {
            end -= 1;
        }
        next = (end < text.len()).then_some(end);
        let opcode = if start == 0 {
            Data::Text
        } else {
            Data::Continue
        };
        let last = end == text.len();
        Some(Frame::message(
            text.slice(start..end),
            OpCode::Data(opcode),
            last,
        ))
    })
}

/// What the send loop does with one item.
enum Next {
    Send(Message),
    Skip,
    End,
}

/// An event as a frame: a `resync` when this client fell behind, nothing for one the hello
/// already covered.
fn event_frame(ev: Result<Sent, broadcast::error::RecvError>, hello_seq: u64) -> Next {
    match ev {
        Ok(sent) if sent.seq <= hello_seq => Next::Skip,
        Ok(sent) => Next::Send(Message::Text(sent.json)),
        Err(broadcast::error::RecvError::Lagged(n)) => Next::Send(text(
            json!({
                "type": "resync",
                "reason": format!("{n} events were dropped because this client read too slowly"),
                "epoch": "",
            })
            .to_string(),
        )),
        Err(broadcast::error::RecvError::Closed) => Next::End,
    }
}

/// A reply or an event that is ready now (replies first, as in the loop's own order); None
/// when nothing is.
fn ready_frame(
    replies: &mut mpsc::Receiver<String>,
    events: &mut broadcast::Receiver<Sent>,
    hello_seq: u64,
) -> Option<Next> {
    use tokio::sync::broadcast::error::TryRecvError as B;
    use tokio::sync::mpsc::error::TryRecvError as M;
    match replies.try_recv() {
        Ok(t) => return Some(Next::Send(text(t))),
        Err(M::Disconnected) => return Some(Next::End),
        Err(M::Empty) => {}
    }
    match events.try_recv() {
        Ok(sent) => Some(event_frame(Ok(sent), hello_seq)),
        Err(B::Lagged(n)) => Some(event_frame(
            Err(broadcast::error::RecvError::Lagged(n)),
            hello_seq,
        )),
        Err(B::Closed) => Some(Next::End),
        Err(B::Empty) => None,
    }
}

/// Read frames and queue a response to each command; ends with the client or the hub.
async fn receive_loop<R, E>(hub: &Arc<Hub>, mut stream: R, replies: mpsc::Sender<String>)
where
    R: Stream<Item = Result<Message, E>> + Unpin,
    E: Display,
{
    loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = hub.shutdown().cancelled() => break,
        };
        let reply = match msg {
            Some(Ok(Message::Text(text))) => handle(hub, text.as_str()).await,
            Some(Ok(Message::Binary(_))) => Resp::err(
                None,
                "bad_request",
                "binary frames are not supported; send JSON text frames".into(),
            ),
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => continue, // ping/pong are answered by the library
            Some(Err(e)) => {
                tracing::debug!(error = %e, "websocket receive failed");
                break;
            }
        };
        let Ok(text) = serde_json::to_string(&reply) else {
            continue;
        };
        if replies.send(text).await.is_err() {
            break;
        }
    }
}

/// Parse and run one command; never fails the connection.
pub async fn handle(hub: &Arc<Hub>, text: &str) -> Resp {
    if text.len() > MAX_BODY {
        return Resp::err(
            None,
            "too_large",
            format!(
                "message of {} bytes is larger than the {MAX_BODY} byte limit",
                text.len()
            ),
        );
    }
    let parsed = parse_client_msg(text);
    let id = parsed.id;
    let msg = match parsed.msg {
        Ok(msg) => msg,
        Err(e @ ParseError::Json(_)) => return Resp::err(None, "bad_request", e.to_string()),
        Err(e) => return Resp::err(id, "bad_request", e.to_string()),
    };
    match dispatch(hub, msg).await.and_then(|r| r.into_data()) {
        Ok(data) => Resp::ok(id, data),
        Err(e) => {
            e.report();
            Resp::err(id, e.code(), e.to_string())
        }
    }
}

#[cfg(test)]
#[path = "ws_tests.rs"]
mod tests;

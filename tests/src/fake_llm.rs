//! A fake model provider speaking the OpenAI chat-completions wire format over real HTTP, so
//! end-to-end tests can point the hub's built-in agent at it and script every model turn.
//!
//! The output follows what OpenAI, Ollama and llama.cpp's server actually send, including the
//! awkward parts a client must cope with: streamed text and tool-call arguments arrive split
//! across several SSE events, a tool call's id and name arrive only in its first delta, and with
//! `stream_options.include_usage` every chunk carries `"usage": null` until a final chunk with no
//! choices carries the totals.
//!
//! The server runs on its own thread with its own runtime. Tests often block their runtime
//! thread in synchronous helpers (curl, `wait_until`) while the hub is talking to the model; a
//! server spawned on the test's runtime would then never answer.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Pause between streamed events, so a client really receives them as separate reads rather
/// than one buffer that a naive "parse the whole body" client would also handle.
const CHUNK_GAP: Duration = Duration::from_millis(2);

/// Longest piece a streamed string is cut into; real providers send a token or a few per event.
const MAX_PIECE_CHARS: usize = 8;

/// Poll interval of [`FakeLlm::wait_requests`].
const POLL: Duration = Duration::from_millis(5);

/// Ids of [`Call::new`] and [`Call::raw`]: process-wide, so ids never repeat within a test even
/// across several fakes, as a client may key results by id.
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// A running fake provider; dropping it stops the server and closes its port.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// One HTTP request as the fake received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The request path without query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names are lowercase; values that are not UTF-8 are converted lossily.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body, `Value::Null` when it did not parse (see `raw`).
    pub body: Value,
    pub raw: String,
}

/// What the fake answers to one chat-completions request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// An assistant message with text content, finish_reason "stop".
    Text(String),
    /// One assistant message with these tool calls (several = parallel tool calls),
    /// finish_reason "tool_calls". Optional text content alongside.
    Tools {
        content: Option<String>,
        calls: Vec<Call>,
    },
    /// An HTTP error with this raw body (sent as `application/json`); [`Reply::error`] builds
    /// the OpenAI error shape.
    Status {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    /// Wait this long before sending the inner reply (to exercise client timeouts).
    Delay(Duration, Box<Reply>),
    /// Report these usage numbers with the inner reply instead of the estimate. The outermost
    /// override wins when they are nested.
    WithUsage {
        prompt_tokens: u64,
        completion_tokens: u64,
        inner: Box<Reply>,
    },
    /// This exact string as a 200 `application/json` body, even for streaming requests (for
    /// malformed-response tests).
    Raw(String),
    /// A 200 `text/event-stream` that ends at once, with no event: what llama-cpp-python's
    /// server sends when it refuses to stream an answer that may call tools.
    ClosedStream,
}

/// One tool call in a [`Reply::Tools`].
#[derive(Clone, Debug)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// Sent verbatim, so it may be malformed JSON on purpose.
    pub arguments: String,
}

impl Call {
    /// A call with JSON arguments and a fresh id (`call_<n>`).
    pub fn new(name: &str, args: Value) -> Call {
        Call::raw(name, &args.to_string())
    }

    /// A call whose arguments string is sent exactly as given, with a fresh id (`call_<n>`).
    pub fn raw(name: &str, arguments: &str) -> Call {
        Call {
            id: format!("call_{}", NEXT_CALL.fetch_add(1, Ordering::Relaxed)),
            name: name.to_string(),
            arguments: arguments.to_string(),
        }
    }
}

impl Reply {
    pub fn text(s: &str) -> Reply {
        Reply::Text(s.to_string())
    }

    pub fn tools(calls: Vec<Call>) -> Reply {
        Reply::Tools {
            content: None,
            calls,
        }
    }

    pub fn tool(name: &str, args: Value) -> Reply {
        Reply::tools(vec![Call::new(name, args)])
    }

    /// An error in OpenAI's shape, `{"error":{"message","type","param","code"}}`, with the
    /// `type` OpenAI uses for that status, so clients that branch on it see realistic values.
    pub fn error(status: u16, message: &str, code: Option<&str>) -> Reply {
        Reply::Status {
            status,
            body: error_body(status, message, code).to_string(),
            retry_after: None,
        }
    }
}

impl Recorded {
    pub fn stream(&self) -> bool {
        self.body["stream"].as_bool() == Some(true)
    }

    pub fn model(&self) -> Option<String> {
        self.body["model"].as_str().map(str::to_string)
    }

    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The `role: "tool"` messages as (tool_call_id, content), in order. Content given as an
    /// array of text parts is joined, since clients may send either form.
    pub fn tool_results(&self) -> Vec<(String, String)> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                let id = m["tool_call_id"].as_str().unwrap_or_default().to_string();
                (id, content_text(&m["content"]))
            })
            .collect()
    }

    /// The `tools[].function.name` offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn authorization(&self) -> Option<String> {
        self.header("authorization")
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }
}

/// Text of a message `content`: a string, or OpenAI's array of `{"type":"text","text":..}` parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .concat(),
        _ => String::new(),
    }
}

type Responder = Box<dyn Fn(&Recorded) -> Reply + Send + Sync>;

enum Source {
    Script(Mutex<VecDeque<Reply>>),
    Responder(Responder),
}

struct Shared {
    log: Mutex<Vec<Recorded>>,
    source: Source,
    next_completion: AtomicU64,
}

/// A panicking responder must not hide every later request from the test, so poisoning is
/// ignored: the data under these locks stays consistent between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FakeLlm {
    /// Serve replies in order; every request pops the next one. When the script is empty, the
    /// fake answers 500 "fake LLM script exhausted" (and records the request), so an agent that
    /// calls the model more often than the test expected fails visibly instead of hanging.
    pub async fn scripted(replies: Vec<Reply>) -> FakeLlm {
        FakeLlm::start(Source::Script(Mutex::new(replies.into())))
    }

    /// Decide each reply from the request, for replies that depend on earlier tool results
    /// (e.g. copying a hash the hub returned). If the responder panics, the client gets a 500
    /// naming the panic rather than a dropped connection.
    pub async fn with(responder: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> FakeLlm {
        FakeLlm::start(Source::Responder(Box::new(responder)))
    }

    /// Base URL to configure the hub with, e.g. `http://127.0.0.1:43123/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// The requests once there are at least `n`, or whatever arrived when `timeout` passes; the
    /// caller asserts on the count, so a timeout shows what the agent did send.
    pub async fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.requests();
            if seen.len() >= n || Instant::now() >= deadline {
                return seen;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn start(source: Source) -> FakeLlm {
        // Bound here rather than on the server thread so the port is known (and accepting)
        // before the constructor returns.
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("fake LLM: bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("fake LLM: set listener non-blocking");
        let addr = listener.local_addr().expect("fake LLM: local address");
        let shared = Arc::new(Shared {
            log: Mutex::new(Vec::new()),
            source,
            next_completion: AtomicU64::new(1),
        });
        let cancel = CancellationToken::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("fake LLM: build runtime");
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let stop = cancel.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fake-llm-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("fake LLM: register listener");
                    tokio::select! {
                        served = axum::serve(listener, app).into_future() => {
                            if let Err(e) = served {
                                eprintln!("fake LLM server on {addr} stopped: {e}");
                            }
                        }
                        _ = stop.cancelled() => {}
                    }
                });
                // Drops open connections and in-flight replies at once, so the port is really
                // gone when the fake is dropped (a test can simulate the provider vanishing).
                runtime.shutdown_background();
            })
            .expect("fake LLM: spawn server thread");
        FakeLlm {
            addr,
            shared,
            cancel,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(thread) = self.thread.take() {
            // Only fails if the server thread panicked, which has already been reported.
            let _ = thread.join();
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let raw = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            return error_response(400, &format!("fake LLM could not read the body: {e}"), None)
        }
    };
    let recorded = Recorded {
        path: parts.uri.path().to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (n.as_str().to_ascii_lowercase(), value)
            })
            .collect(),
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    };
    lock(&shared.log).push(recorded.clone());

    let endpoint = matches!(
        recorded.path.as_str(),
        "/v1/chat/completions" | "/chat/completions"
    );
    if parts.method != Method::POST || !endpoint {
        let message = format!("Invalid URL ({} {})", parts.method, recorded.path);
        return error_response(404, &message, None);
    }
    if recorded.body.is_null() {
        // What OpenAI answers; the script is not consumed, so a broken request does not shift
        // every later reply.
        return error_response(
            400,
            "We could not parse the JSON body of your request.",
            None,
        );
    }

    let reply = match &shared.source {
        Source::Script(script) => lock(script).pop_front(),
        Source::Responder(responder) => {
            match std::panic::catch_unwind(AssertUnwindSafe(|| responder(&recorded))) {
                Ok(reply) => Some(reply),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    let message = format!("fake LLM responder panicked: {what}");
                    return error_response(500, &message, None);
                }
            }
        }
    };
    let Some(reply) = reply else {
        return error_response(500, "fake LLM script exhausted", None);
    };
    let id = format!(
        "chatcmpl-fake{}",
        shared.next_completion.fetch_add(1, Ordering::Relaxed)
    );
    respond(&recorded, reply, id).await
}

/// Unwraps `Delay` and `WithUsage`, then renders the terminal reply.
async fn respond(req: &Recorded, mut reply: Reply, id: String) -> Response {
    let mut usage_override = None;
    loop {
        match reply {
            Reply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                reply = *inner;
            }
            Reply::WithUsage {
                prompt_tokens,
                completion_tokens,
                inner,
            } => {
                usage_override.get_or_insert((prompt_tokens, completion_tokens));
                reply = *inner;
            }
            _ => break,
        }
    }
    let (content, calls) = match reply {
        Reply::Text(text) => (Some(text), Vec::new()),
        Reply::Tools { content, calls } => (content, calls),
        Reply::Status {
            status,
            body,
            retry_after,
        } => {
            let mut response = json_response(status, body);
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            return response;
        }
        Reply::Raw(body) => return json_response(200, body),
        Reply::ClosedStream => {
            return Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::empty())
                .expect("fake LLM: empty stream response")
        }
        Reply::Delay(..) | Reply::WithUsage { .. } => {
            unreachable!("unwrapped by the loop above")
        }
    };

    let completion_chars = content.as_deref().map_or(0, str::len)
        + calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>();
    let (prompt_tokens, completion_tokens) = usage_override.unwrap_or((
        estimate_tokens(req.raw.len()),
        estimate_tokens(completion_chars),
    ));
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    let finish_reason = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let answer = Answer {
        id,
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: req.model().unwrap_or_else(|| "fake-model".to_string()),
        content,
        calls,
        finish_reason,
        usage,
    };
    if req.stream() {
        let include_usage = req.body["stream_options"]["include_usage"].as_bool() == Some(true);
        sse_response(answer.chunks(include_usage))
    } else {
        json_response(200, answer.completion().to_string())
    }
}

/// Roughly four characters per token, never zero, as clients may divide by it.
fn estimate_tokens(chars: usize) -> u64 {
    (chars / 4).max(1) as u64
}

/// A rendered successful reply, before it is shaped as one completion or a chunk stream.
struct Answer {
    id: String,
    created: u64,
    model: String,
    content: Option<String>,
    calls: Vec<Call>,
    finish_reason: &'static str,
    usage: Value,
}

impl Answer {
    fn completion(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            message["tool_calls"] = self
                .calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish_reason,
            }],
            "usage": self.usage,
        })
    }

    /// The streamed form, as OpenAI sends it: role first (merged into the first tool-call
    /// delta when there is no text), text in pieces, then each call in index order with id,
    /// type and name in its first delta and the arguments in later pieces, then an empty delta
    /// with the finish reason, then (if asked) the usage chunk.
    fn chunks(&self, include_usage: bool) -> Vec<Value> {
        let mut deltas = Vec::new();
        if let Some(content) = &self.content {
            deltas.push(json!({"role": "assistant", "content": ""}));
            for piece in pieces(content) {
                deltas.push(json!({"content": piece}));
            }
        }
        for (index, call) in self.calls.iter().enumerate() {
            let head = json!({
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            });
            if deltas.is_empty() {
                deltas.push(json!({"role": "assistant", "content": null, "tool_calls": [head]}));
            } else {
                deltas.push(json!({"tool_calls": [head]}));
            }
            for piece in pieces(&call.arguments) {
                deltas.push(json!({
                    "tool_calls": [{"index": index, "function": {"arguments": piece}}],
                }));
            }
        }
        if deltas.is_empty() {
            deltas.push(json!({"role": "assistant", "content": ""}));
        }

        let chunk = |delta: Value, finish_reason: Value| {
            let mut c = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "delta": delta,
                    "logprobs": null,
                    "finish_reason": finish_reason,
                }],
            });
            if include_usage {
                c["usage"] = Value::Null;
            }
            c
        };
        let mut chunks: Vec<Value> = deltas.into_iter().map(|d| chunk(d, Value::Null)).collect();
        chunks.push(chunk(json!({}), json!(self.finish_reason)));
        if include_usage {
            chunks.push(json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.usage,
            }));
        }
        chunks
    }
}

/// Splits into pieces of at most [`MAX_PIECE_CHARS`] characters, and into at least two pieces
/// whenever there are two characters, so even a short string makes a client concatenate.
fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(3).clamp(1, MAX_PIECE_CHARS);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn sse_response(chunks: Vec<Value>) -> Response {
    let events: Vec<String> = chunks
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .chain(std::iter::once("data: [DONE]\n\n".to_string()))
        .collect();
    let stream = futures_util::stream::unfold(
        (events.into_iter(), true),
        |(mut events, first)| async move {
            let event = events.next()?;
            if !first {
                tokio::time::sleep(CHUNK_GAP).await;
            }
            Some((Ok::<_, Infallible>(event), (events, false)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

fn json_response(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn error_response(status: u16, message: &str, code: Option<&str>) -> Response {
    json_response(status, error_body(status, message, code).to_string())
}

fn error_body(status: u16, message: &str, code: Option<&str>) -> Value {
    let kind = match status {
        429 => "requests",
        500.. => "server_error",
        _ => "invalid_request_error",
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

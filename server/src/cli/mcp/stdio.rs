//! The stdio transport: one JSON-RPC message per line. rmcp's own stdio transport drops a line
//! that is not JSON or too long without a word; this one answers it (`-32700`, `-32600`), and
//! answers a request rmcp's types refuse with its id, so hostile input gets a JSON-RPC error and
//! the server goes on.
//!
//! Input and output are blocking streams, each on a thread of its own, so a read that never
//! returns cannot keep the process from exiting once nobody reads the answers.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, InitializeRequestParams, JsonRpcMessage,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{tools, McpError};

/// Longest message read from stdin: the hub takes no request body larger than this, so no tool
/// call that is longer could succeed anyway.
pub const MAX_MESSAGE: usize = crate::protocol::MAX_BODY;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// One line of input.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Line(Vec<u8>),
    /// A line longer than the cap: dropped as it was read, never held whole.
    TooLong,
}

/// The next line (without its `\n` and a `\r` before it), `None` at the end. A line over `cap`
/// bytes is skipped to its end and reported as [`Incoming::TooLong`].
pub fn read_message(
    input: &mut impl std::io::BufRead,
    cap: usize,
) -> std::io::Result<Option<Incoming>> {
    let mut buf = Vec::new();
    let mut too_long = false;
    let mut any = false;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            // End of input; a last line without a newline still counts.
            if !any {
                return Ok(None);
            }
            break;
        }
        any = true;
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        if !too_long {
            if buf.len() + chunk.len() > cap {
                too_long = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        let used = newline.map_or(available.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    if too_long {
        return Ok(Some(Incoming::TooLong));
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(Incoming::Line(buf)))
}

/// What a line is, for rmcp or for us.
#[derive(Debug)]
pub enum Decoded {
    /// Blank, a notification or a response we do not know: nothing to do.
    Nothing,
    Message(Box<ClientJsonRpcMessage>),
    /// A JSON-RPC error to send back without troubling rmcp.
    Reply(Value),
}

pub fn error_response(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn is_id(v: &Value) -> bool {
    v.is_string() || v.is_number()
}

/// One line of input: a message for rmcp, or the error that answers it.
pub fn decode(line: &[u8]) -> Decoded {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Nothing;
    }
    let msg: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Decoded::Reply(error_response(
                Value::Null,
                PARSE_ERROR,
                &format!("not JSON: {e}"),
            ))
        }
    };
    let invalid =
        |id: Value, message: &str| Decoded::Reply(error_response(id, INVALID_REQUEST, message));
    let m = match &msg {
        Value::Object(m) => m,
        Value::Array(_) => {
            return invalid(
                Value::Null,
                "JSON-RPC batches are not supported (MCP 2025-06-18 removed them): send one message per line",
            )
        }
        _ => return invalid(Value::Null, "a JSON-RPC message must be an object"),
    };
    let id = m
        .get("id")
        .filter(|id| is_id(id))
        .cloned()
        .unwrap_or(Value::Null);
    let method = match m.get("method") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return invalid(id, "\"method\" must be a string"),
        None => None,
    };
    // This server sends no requests, so a response from the client answers nothing.
    if method.is_none() && (m.contains_key("result") || m.contains_key("error")) {
        return Decoded::Nothing;
    }
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    let Some(method) = method else {
        return invalid(id, "missing \"method\"");
    };
    let Some(raw_id) = m.get("id") else {
        // A notification rmcp does not know is ignored, as the protocol asks.
        return match serde_json::from_value(msg) {
            Ok(n) => Decoded::Message(Box::new(n)),
            Err(e) => {
                tracing::debug!(error = %e, "ignoring a notification");
                Decoded::Nothing
            }
        };
    };
    if !is_id(raw_id) {
        return invalid(Value::Null, "\"id\" must be a string or a number");
    }
    let method = method.to_string();
    let params = m.get("params").cloned();
    let refused = |why: String| Decoded::Reply(error_response(id.clone(), INVALID_PARAMS, &why));
    match serde_json::from_value::<ClientJsonRpcMessage>(msg) {
        // rmcp takes a request whose params do not fit its method for a custom one; for the
        // methods this server answers, say what is wrong with them instead.
        Ok(JsonRpcMessage::Request(r)) if matches!(&r.request, ClientRequest::CustomRequest(c) if ANSWERED.contains(&c.method.as_str())) => {
            refused(params_error(&method, params))
        }
        Ok(request) => Decoded::Message(Box::new(request)),
        Err(e) => refused(format!("invalid params for {method}: {e}")),
    }
}

/// The requests this server answers (rmcp answers any other with -32601).
pub const ANSWERED: [&str; 4] = ["initialize", "ping", "tools/list", "tools/call"];

/// Why `params` do not fit `method`, as the tools say it for `tools/call`.
fn params_error(method: &str, params: Option<Value>) -> String {
    let serde_says = |e: serde_json::Error| format!("invalid params for {method}: {e}");
    match method {
        "tools/call" => match tools::parse_call(params) {
            Err(bad) => bad.message().to_string(),
            Ok(_) => format!("invalid params for {method}"),
        },
        "initialize" => {
            serde_json::from_value::<InitializeRequestParams>(params.unwrap_or_default())
                .err()
                .map_or_else(|| format!("invalid params for {method}"), serde_says)
        }
        _ => format!("invalid params for {method}: expected an object or nothing"),
    }
}

/// rmcp's end of the stdio threads.
pub struct LineTransport {
    incoming: mpsc::Receiver<std::io::Result<Incoming>>,
    out: mpsc::UnboundedSender<Value>,
    read_error: Arc<Mutex<Option<std::io::Error>>>,
    /// Until the client sends `initialize`, rmcp takes only requests (it would stop at anything
    /// else); notifications and responses before it are dropped.
    initialized: bool,
}

/// Our end of the stdio threads, to wait for once rmcp is done.
pub struct Ends {
    writer: std::thread::JoinHandle<std::io::Result<()>>,
    read_error: Arc<Mutex<Option<std::io::Error>>>,
}

impl LineTransport {
    pub fn start<I, O>(mut input: I, output: O) -> Result<(Self, Ends), McpError>
    where
        I: std::io::BufRead + Send + 'static,
        O: std::io::Write + Send + 'static,
    {
        // A small queue: a client flooding stdin waits for us rather than filling memory.
        let (in_tx, incoming) = mpsc::channel(4);
        std::thread::Builder::new()
            .name("mcp-stdin".into())
            .spawn(move || loop {
                let msg = read_message(&mut input, MAX_MESSAGE);
                let done = !matches!(msg, Ok(Some(_)));
                let send = match msg {
                    Ok(Some(m)) => in_tx.blocking_send(Ok(m)),
                    Ok(None) => Ok(()),
                    Err(e) => in_tx.blocking_send(Err(e)),
                };
                if done || send.is_err() {
                    return;
                }
            })
            .map_err(|e| McpError::Thread("stdin", e))?;
        let (out, out_rx) = mpsc::unbounded_channel();
        let writer = std::thread::Builder::new()
            .name("mcp-stdout".into())
            .spawn(move || write_messages(output, out_rx))
            .map_err(|e| McpError::Thread("stdout", e))?;
        let read_error = Arc::new(Mutex::new(None));
        let transport = Self {
            incoming,
            out,
            read_error: read_error.clone(),
            initialized: false,
        };
        Ok((transport, Ends { writer, read_error }))
    }

    fn reply(&self, msg: Value) {
        // A closed output ends `receive`; nothing to do here.
        let _ = self.out.send(msg);
    }

    /// Whether rmcp may see `msg` now.
    fn admit(&mut self, msg: &ClientJsonRpcMessage) -> bool {
        match msg {
            JsonRpcMessage::Request(r) => {
                if matches!(r.request, ClientRequest::InitializeRequest(_)) {
                    self.initialized = true;
                }
                true
            }
            _ if self.initialized => true,
            other => {
                tracing::debug!(message = ?other, "ignoring a message before initialize");
                false
            }
        }
    }
}

impl Ends {
    /// Wait for the output to be written (rmcp has dropped its end by now), and report the first
    /// I/O error on either side.
    pub async fn finish(self) -> Result<(), McpError> {
        let written = tokio::task::spawn_blocking(move || self.writer.join())
            .await
            .map_err(|_| McpError::Panicked("stdout thread"))?
            .map_err(|_| McpError::Panicked("stdout thread"))?;
        let read_error = self.read_error.lock().map_or(None, |mut slot| slot.take());
        if let Some(e) = read_error {
            return Err(McpError::Read(e));
        }
        written.map_err(McpError::Write)
    }
}

impl Transport<RoleServer> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sent = serde_json::to_value(item)
            .map_err(std::io::Error::other)
            .and_then(|v| {
                self.out.send(v).map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "standard output closed")
                })
            });
        std::future::ready(sent)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let incoming = tokio::select! {
                m = self.incoming.recv() => m?,
                // Nobody reads our answers any more: stop.
                () = self.out.closed() => return None,
            };
            match incoming {
                Err(e) => {
                    if let Ok(mut slot) = self.read_error.lock() {
                        *slot = Some(e);
                    }
                    return None;
                }
                Ok(Incoming::TooLong) => self.reply(error_response(
                    Value::Null,
                    INVALID_REQUEST,
                    &format!("message longer than {MAX_MESSAGE} bytes; ignored"),
                )),
                Ok(Incoming::Line(line)) => match decode(&line) {
                    Decoded::Nothing => {}
                    Decoded::Reply(r) => self.reply(r),
                    Decoded::Message(m) => {
                        if self.admit(&m) {
                            return Some(*m);
                        }
                    }
                },
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn write_messages(
    mut output: impl std::io::Write,
    mut rx: mpsc::UnboundedReceiver<Value>,
) -> std::io::Result<()> {
    while let Some(msg) = rx.blocking_recv() {
        // Compact JSON escapes every newline inside strings: one message, one line.
        let mut line = serde_json::to_vec(&msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        output.write_all(&line)?;
        output.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_with_a_cap() {
        let mut input = std::io::Cursor::new(
            [
                b"one\r\n".to_vec(),
                vec![b'x'; 100],
                b"\n\ntwo\nlast".to_vec(),
            ]
            .concat(),
        );
        let mut input = std::io::BufReader::with_capacity(7, &mut input);
        let mut got = Vec::new();
        while let Some(m) = read_message(&mut input, 10).unwrap() {
            got.push(m);
        }
        assert_eq!(
            got,
            vec![
                Incoming::Line(b"one".to_vec()),
                Incoming::TooLong,
                Incoming::Line(Vec::new()),
                Incoming::Line(b"two".to_vec()),
                Incoming::Line(b"last".to_vec()),
            ]
        );
    }

    fn reply(line: &str) -> Value {
        match decode(line.as_bytes()) {
            Decoded::Reply(r) => r,
            other => panic!("expected a reply to {line}, got {other:?}"),
        }
    }

    #[test]
    fn invalid_messages_are_answered_with_their_id() {
        for (line, code, id) in [
            ("{not json", PARSE_ERROR, Value::Null),
            ("[1]", INVALID_REQUEST, Value::Null),
            ("[]", INVALID_REQUEST, Value::Null),
            ("\"x\"", INVALID_REQUEST, Value::Null),
            (r#"{"id": 4, "method": "ping"}"#, INVALID_REQUEST, json!(4)),
            (
                r#"{"jsonrpc": "1.0", "id": 4, "method": "ping"}"#,
                INVALID_REQUEST,
                json!(4),
            ),
            (r#"{"jsonrpc": "2.0", "id": 4}"#, INVALID_REQUEST, json!(4)),
            (
                r#"{"jsonrpc": "2.0", "id": "a", "method": 12}"#,
                INVALID_REQUEST,
                json!("a"),
            ),
            (
                r#"{"jsonrpc": "2.0", "id": null, "method": "ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}"#,
                INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call"}"#,
                INVALID_PARAMS,
                json!(7),
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 3}}"#,
                INVALID_PARAMS,
                json!(7),
            ),
        ] {
            let r = reply(line);
            assert_eq!(r["error"]["code"], code, "{line}: {r}");
            assert_eq!(r["id"], id, "{line}: {r}");
        }
        for (line, says) in [
            (
                r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call"}"#,
                "tools/call needs params {\"name\", \"arguments\"}",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"arguments": {}}}"#,
                "tools/call needs a tool \"name\" (a string)",
            ),
            (
                r#"{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": 5}"#,
                "invalid params for ping",
            ),
        ] {
            let r = reply(line);
            assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
            assert!(
                r["error"]["message"].as_str().unwrap().starts_with(says),
                "{r}"
            );
        }
        let r = reply(
            r#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "get_feedback", "arguments": []}}"#,
        );
        assert_eq!(
            r["error"]["message"], "arguments of get_feedback must be an object",
            "{r}"
        );
    }

    #[test]
    fn good_messages_go_to_rmcp_and_the_rest_is_dropped() {
        for line in [
            r#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "resources/list"}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}"#,
            r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#,
            r#"{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}"#,
        ] {
            assert!(
                matches!(decode(line.as_bytes()), Decoded::Message(_)),
                "{line}"
            );
        }
        for line in [
            "",
            "  \t",
            r#"{"jsonrpc": "2.0", "method": "notifications/whatever", "params": 5}"#,
            r#"{"jsonrpc": "2.0", "id": 5, "result": {}}"#,
            r#"{"jsonrpc": "2.0", "id": 5, "error": {"code": 1, "message": "x"}}"#,
        ] {
            assert!(
                matches!(decode(line.as_bytes()), Decoded::Nothing),
                "{line}"
            );
        }
    }
}

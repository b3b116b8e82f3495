//! ACP's transport: JSON-RPC 2.0 messages, one per line, on the agent's stdio — read with a
//! bound on a message's size, written as whole lines.

use serde_json::{json, Value};

/// The largest message the hub takes from an agent. A longer line is read and dropped (never
/// held: a 100 MiB line costs one read buffer), and reported as [`Frame::TooLong`].
pub const MAX_MESSAGE: usize = 8 * 1024 * 1024;
const READ_CHUNK: usize = 64 * 1024;

/// One line of an agent's stdout.
#[derive(Debug, PartialEq)]
pub enum Frame {
    Message(Incoming),
    /// Not a JSON-RPC 2.0 message (what was wrong with it).
    Malformed(String),
    /// A line over [`MAX_MESSAGE`]: how many bytes it had.
    TooLong(u64),
}

/// A JSON-RPC message from the agent.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// The answer to a request of the hub's (ids are the hub's own numbers).
    Response {
        id: u64,
        result: Result<Value, RpcError>,
    },
    /// A request of the agent's: it waits for an answer with this `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
}

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (JSON-RPC error {})", self.message, self.code)
    }
}

/// JSON-RPC's "method not found": what the hub answers a request it does not serve.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC's "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's "internal error", used for "too many requests at once".
pub const INTERNAL_ERROR: i64 = -32603;

/// Reads an agent's stdout as [`Frame`]s.
pub struct Framer<R> {
    pipe: R,
    /// Bytes read and not yet a whole line.
    pending: Vec<u8>,
    /// Within a line over the limit: how many of its bytes were dropped so far.
    skipping: Option<u64>,
    chunk: Vec<u8>,
    eof: bool,
}

impl<R: tokio::io::AsyncRead + Unpin> Framer<R> {
    pub fn new(pipe: R) -> Self {
        Self {
            pipe,
            pending: Vec::new(),
            skipping: None,
            chunk: vec![0; READ_CHUNK],
            eof: false,
        }
    }

    /// The next line, or None at the end of the output. Empty lines are skipped. Holds at
    /// most [`MAX_MESSAGE`] plus one read of the agent's output.
    pub async fn next(&mut self) -> Option<Frame> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(frame) = self.take_line() {
                return Some(frame);
            }
            if self.eof {
                return self.take_rest();
            }
            match self.pipe.read(&mut self.chunk).await {
                Ok(0) | Err(_) => self.eof = true,
                Ok(n) => self.pending.extend_from_slice(&self.chunk[..n]),
            }
        }
    }

    /// A whole line from what is pending, if there is one (dropping what a line over the limit
    /// has so far).
    fn take_line(&mut self) -> Option<Frame> {
        loop {
            match self.pending.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    let line: Vec<u8> = self.pending.drain(..=i).collect();
                    if let Some(dropped) = self.skipping.take() {
                        return Some(Frame::TooLong(dropped + line.len() as u64));
                    }
                    if let Some(frame) = parse_line(&line) {
                        return Some(frame);
                    }
                }
                None => {
                    if self.skipping.is_some() || self.pending.len() > MAX_MESSAGE {
                        let dropped = self.skipping.unwrap_or(0) + self.pending.len() as u64;
                        self.skipping = Some(dropped);
                        self.pending.clear();
                    }
                    return None;
                }
            }
        }
    }

    /// At the end of the output: a last line without its newline.
    fn take_rest(&mut self) -> Option<Frame> {
        if let Some(dropped) = self.skipping.take() {
            return Some(Frame::TooLong(dropped + self.pending.len() as u64));
        }
        let rest = std::mem::take(&mut self.pending);
        parse_line(&rest)
    }
}

/// A line as a frame (None for a blank one).
fn parse_line(line: &[u8]) -> Option<Frame> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Value>(text) {
        Ok(v) => match classify(v) {
            Ok(m) => Frame::Message(m),
            Err(why) => Frame::Malformed(why),
        },
        Err(e) => Frame::Malformed(format!("not JSON: {e}")),
    })
}

/// What kind of JSON-RPC 2.0 message `v` is.
pub fn classify(v: Value) -> Result<Incoming, String> {
    let Value::Object(mut m) = v else {
        return Err("not a JSON object".into());
    };
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err("no \"jsonrpc\": \"2.0\"".into());
    }
    let params = m.remove("params").unwrap_or(Value::Null);
    match (m.remove("method"), m.remove("id")) {
        (Some(Value::String(method)), Some(id)) if !id.is_null() => {
            Ok(Incoming::Request { id, method, params })
        }
        (Some(Value::String(method)), _) => Ok(Incoming::Notification { method, params }),
        (Some(_), _) => Err("\"method\" is not a string".into()),
        (None, Some(id)) => {
            let id = id
                .as_u64()
                .ok_or_else(|| format!("a response to id {id}, which the hub never sent"))?;
            let result = match (m.remove("result"), m.remove("error")) {
                (_, Some(e)) => Err(RpcError {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("(no message)")
                        .chars()
                        .take(2000)
                        .collect(),
                }),
                (Some(r), None) => Ok(r),
                (None, None) => Err(RpcError {
                    code: 0,
                    message: "a response with neither result nor error".into(),
                }),
            };
            Ok(Incoming::Response { id, result })
        }
        (None, None) => Err("neither a request, a notification nor a response".into()),
    }
}

fn line(v: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&v).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// A request of the hub's, as a line.
pub fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A notification of the hub's, as a line.
pub fn notification(method: &str, params: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// The hub's answer to the agent's request `id`, as a line.
pub fn response(id: &Value, result: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// The hub's error answer to the agent's request `id`, as a line.
pub fn error_response(id: &Value, code: i64, message: &str) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: Vec<u8>) -> Vec<Frame> {
        let mut f = Framer::new(std::io::Cursor::new(input));
        let mut out = Vec::new();
        while let Some(frame) = f.next().await {
            out.push(frame);
        }
        out
    }

    #[tokio::test]
    async fn lines_become_messages_and_garbage_is_named() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"a\":1}}\n\n\
            not json\n\
            {\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{}}\n\
            {\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"fs/read_text_file\"}\n\
            {\"id\":1,\"result\":0}\n\
            {\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-1,\"message\":\"no\"}}"
            .to_vec();
        let got = frames(input).await;
        assert_eq!(got.len(), 6, "{got:?}");
        assert_eq!(
            got[0],
            Frame::Message(Incoming::Response {
                id: 3,
                result: Ok(json!({"a": 1}))
            })
        );
        assert!(matches!(&got[1], Frame::Malformed(m) if m.starts_with("not JSON")));
        assert!(
            matches!(&got[2], Frame::Message(Incoming::Notification { method, .. }) if method == "session/update")
        );
        assert!(
            matches!(&got[3], Frame::Message(Incoming::Request { id, method, .. })
            if id == &json!("x") && method == "fs/read_text_file")
        );
        assert_eq!(got[4], Frame::Malformed("no \"jsonrpc\": \"2.0\"".into()));
        // The last line needs no newline.
        assert!(
            matches!(&got[5], Frame::Message(Incoming::Response { id: 4, result: Err(e) }) if e.message == "no")
        );
    }

    /// A line over the limit is dropped as it is read, and the messages around it still come.
    #[tokio::test]
    async fn a_line_over_the_limit_is_dropped_not_held() {
        let ok = b"{\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n";
        let mut input = ok.to_vec();
        let huge = MAX_MESSAGE * 2 + 17;
        input.extend(std::iter::repeat_n(b'x', huge));
        input.push(b'\n');
        input.extend_from_slice(ok);
        // At the end without a newline, too.
        input.extend(std::iter::repeat_n(b'y', MAX_MESSAGE + 1));
        let mut f = Framer::new(std::io::Cursor::new(input));
        let mut got = Vec::new();
        while let Some(frame) = f.next().await {
            assert!(f.pending.len() <= MAX_MESSAGE + READ_CHUNK);
            got.push(frame);
        }
        let n = |m: &str| {
            Frame::Message(Incoming::Notification {
                method: m.into(),
                params: Value::Null,
            })
        };
        assert_eq!(
            got,
            vec![
                n("n"),
                Frame::TooLong(huge as u64 + 1),
                n("n"),
                Frame::TooLong(MAX_MESSAGE as u64 + 1)
            ]
        );
    }

    #[test]
    fn what_the_hub_writes_is_one_line_of_json_rpc() {
        let r = request(7, "session/prompt", json!({"x": "a\nb"}));
        assert_eq!(r.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(r.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&r).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["jsonrpc"], "2.0");
        let e: Value =
            serde_json::from_slice(&error_response(&json!("q"), METHOD_NOT_FOUND, "no")).unwrap();
        assert_eq!(
            e,
            json!({"jsonrpc": "2.0", "id": "q", "error": {"code": -32601, "message": "no"}})
        );
    }
}

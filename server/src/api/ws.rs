//! The WebSocket endpoint: a `hello`, then every event as it happens, and a `response` to every
//! command — one task sends, the connection loop receives.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

use crate::api::http::{replay_data, MAX_BODY};
use crate::error::AppError;
use crate::hub::Hub;
use crate::protocol::{
    CompleteCmd, FeedbackAllCmd, FeedbackCmd, Hello, Response as Resp, RunCmd, COMMAND_TYPES,
    PROTOCOL_VERSION, SERVICE,
};

/// Frames above this close the connection (the WebSocket "message too big" close); messages
/// between [`MAX_BODY`] and this get an error response and the connection stays usable.
pub const HARD_LIMIT: usize = 64 * 1024 * 1024;

pub async fn upgrade(State(hub): State<Arc<Hub>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(HARD_LIMIT)
        .max_frame_size(HARD_LIMIT)
        .on_upgrade(move |socket| connection(hub, socket))
}

struct ClientCount(Arc<Hub>);

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.0.ws_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn connection(hub: Arc<Hub>, socket: WebSocket) {
    hub.ws_clients.fetch_add(1, Ordering::Relaxed);
    let _count = ClientCount(hub.clone());
    let (mut sink, mut stream) = socket.split();
    // Subscribe before reading `current` so no event falls between hello and the stream.
    let mut events = hub.bus.subscribe();
    let hello = Hello {
        kind: "hello".into(),
        service: SERVICE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        protocol: PROTOCOL_VERSION,
        seq: hub.bus.current(),
        epoch: hub.epoch.clone(),
    };
    let hello_seq = hello.seq;
    let (tx, mut rx) = mpsc::channel::<String>(64);
    let shutdown = hub.shutdown.clone();
    let sender = tokio::spawn(async move {
        let send = |text: String| Message::Text(Utf8Bytes::from(text));
        if let Ok(h) = serde_json::to_string(&hello) {
            if sink.send(send(h)).await.is_err() {
                return;
            }
        }
        loop {
            tokio::select! {
                reply = rx.recv() => match reply {
                    Some(text) => if sink.send(send(text)).await.is_err() { break },
                    None => break,
                },
                ev = events.recv() => match ev {
                    Ok(sent) if sent.seq <= hello_seq => {}
                    Ok(sent) => if sink.send(send(sent.json.to_string())).await.is_err() { break },
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let msg = json!({"type": "resync", "reason": format!("{n} events were dropped because this client read too slowly"), "epoch": ""}).to_string();
                        if sink.send(send(msg)).await.is_err() { break }
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = shutdown.cancelled() => {
                    let _ = sink.send(Message::Close(Some(axum::extract::ws::CloseFrame {
                        code: 1001,
                        reason: Utf8Bytes::from_static("hub shutting down"),
                    }))).await;
                    break;
                }
            }
        }
    });

    loop {
        let msg = tokio::select! {
            m = stream.next() => m,
            _ = hub.shutdown.cancelled() => break,
        };
        let reply = match msg {
            Some(Ok(Message::Text(text))) => Some(handle(&hub, text.as_str()).await),
            Some(Ok(Message::Binary(_))) => Some(Resp::err(
                None,
                "bad_request",
                "binary frames are not supported; send JSON text frames".into(),
            )),
            Some(Ok(Message::Close(_))) | None => break,
            Some(Ok(_)) => None, // ping/pong are answered by the library
            Some(Err(e)) => {
                tracing::debug!(error = %e, "websocket receive failed");
                break;
            }
        };
        if let Some(reply) = reply {
            let Ok(text) = serde_json::to_string(&reply) else {
                continue;
            };
            if tx.send(text).await.is_err() {
                break;
            }
        }
    }
    drop(tx);
    let _ = sender.await;
}

fn from_value<T: serde::de::DeserializeOwned>(v: Value, ty: &str) -> Result<T, AppError> {
    serde_json::from_value(v)
        .map_err(|e| AppError::BadRequest(format!("invalid {ty:?} command: {e}")))
}

/// Commands without a typed body still refuse fields they do not have, like the typed ones
/// (`deny_unknown_fields`): a misspelled field must not be silently ignored.
fn only_fields(value: &Value, ty: &str, allowed: &[&str]) -> Result<(), AppError> {
    let Some(obj) = value.as_object() else {
        return Ok(());
    };
    match obj
        .keys()
        .find(|k| *k != "type" && *k != "id" && !allowed.contains(&k.as_str()))
    {
        None => Ok(()),
        Some(k) if allowed.is_empty() => Err(AppError::BadRequest(format!(
            "invalid {ty:?} command: unknown field `{k}`, it takes no fields"
        ))),
        Some(k) => Err(AppError::BadRequest(format!(
            "invalid {ty:?} command: unknown field `{k}`, expected one of {}",
            allowed.join(", ")
        ))),
    }
}

fn to_data<T: serde::Serialize>(v: T) -> Result<Value, AppError> {
    serde_json::to_value(v).map_err(|e| AppError::Internal(e.to_string()))
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
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Resp::err(None, "bad_request", format!("malformed JSON: {e}")),
    };
    let id = value.get("id").cloned();
    let Some(ty) = value
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Resp::err(
            id,
            "bad_request",
            "message has no string \"type\" field".into(),
        );
    };
    match run_command(hub, &ty, value).await {
        Ok(data) => Resp::ok(id, data),
        Err(e) => Resp::err(id, e.code(), e.to_string()),
    }
}

async fn run_command(hub: &Arc<Hub>, ty: &str, value: Value) -> Result<Value, AppError> {
    match ty {
        "feedback" => {
            let cmd: FeedbackCmd = from_value(value, ty)?;
            let res = hub
                .blocking(move |hub| {
                    hub.decide(
                        &cmd.suggestion_id,
                        &cmd.hunk_id,
                        cmd.action,
                        cmd.modified_diff.as_deref(),
                        cmd.comment.as_deref(),
                    )
                })
                .await?;
            to_data(res)
        }
        "feedback_all" => {
            let cmd: FeedbackAllCmd = from_value(value, ty)?;
            hub.blocking(move |hub| {
                hub.decide_all(
                    &cmd.suggestion_id,
                    cmd.action,
                    cmd.file.as_deref(),
                    cmd.comment.as_deref(),
                )
            })
            .await
        }
        "complete" => {
            let cmd: CompleteCmd = from_value(value, ty)?;
            hub.blocking(move |hub| hub.complete(&cmd.suggestion_id, cmd.action))
                .await
        }
        "list" => {
            only_fields(&value, ty, &["all"])?;
            let all = match value.get("all") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(AppError::BadRequest(format!(
                        "\"all\" must be true or false, not {other}"
                    )))
                }
            };
            Ok(json!({ "suggestions": hub.list(all)? }))
        }
        "get" => {
            only_fields(&value, ty, &["suggestionId", "suggestion_id"])?;
            let id = value
                .get("suggestionId")
                .or_else(|| value.get("suggestion_id"))
                .and_then(Value::as_str)
                .ok_or_else(|| AppError::BadRequest("\"get\" needs suggestionId".into()))?;
            to_data(hub.get(id)?)
        }
        "run" => {
            let cmd: RunCmd = from_value(value, ty)?;
            to_data(hub.start_run(&cmd)?)
        }
        "clarify" => {
            let cmd: crate::protocol::ClarifyCmd = from_value(value, ty)?;
            let run = cmd
                .run_id
                .as_deref()
                .ok_or_else(|| AppError::BadRequest("\"clarify\" needs runId".into()))?;
            hub.answer(
                run,
                cmd.question_id.as_deref(),
                cmd.answer.as_deref(),
                cmd.skip,
            )
        }
        "cancel" => {
            only_fields(&value, ty, &["runId", "run_id"])?;
            let id = value
                .get("runId")
                .or_else(|| value.get("run_id"))
                .and_then(Value::as_str)
                .ok_or_else(|| AppError::BadRequest("\"cancel\" needs runId".into()))?;
            to_data(hub.cancel_run(id)?)
        }
        "replay" => {
            only_fields(&value, ty, &["since"])?;
            let since = value
                .get("since")
                .and_then(Value::as_u64)
                .ok_or_else(|| AppError::BadRequest("\"replay\" needs a numeric since".into()))?;
            Ok(replay_data(hub, since))
        }
        "ping" => {
            only_fields(&value, ty, &[])?;
            Ok(json!({ "pong": true, "seq": hub.bus.current() }))
        }
        other => Err(AppError::BadRequest(format!(
            "unknown message type {other:?}; expected one of {}",
            COMMAND_TYPES.join(", ")
        ))),
    }
}

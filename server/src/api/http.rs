//! REST endpoints (the seed's fallback API, plus runs and the agent's endpoints) and the guard in
//! front of all of them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::api::dispatch::{dispatch, Reply};
use crate::error::AppError;
use crate::hub::auth::{bearer, check_host, check_origin};
use crate::hub::Hub;
use crate::protocol::{
    AgentStatusCmd, ClientMsg, CompleteCmd, FeedbackAllCmd, FeedbackCmd, GetCmd, ListCmd,
    PublishCmd, RollbackCmd, RunCmd, SuggestionSummary, MAX_BODY, SERVICE,
};

/// Which token a request carried.
#[derive(Clone, Debug)]
pub enum Caller {
    Reviewer,
    Agent { run_id: String },
}

pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/suggestions", get(list_suggestions))
        .route("/suggestions/{id}", get(get_suggestion))
        .route("/feedback", post(feedback))
        .route("/feedback/all", post(feedback_all))
        .route("/complete", post(complete))
        .route("/runs", post(start_run).get(list_runs))
        .route("/runs/{id}", get(get_run))
        .route("/runs/{id}/cancel", post(cancel_run))
        .route("/runs/{id}/clarify", post(clarify_run))
        .route("/sessions", post(create_session).get(list_sessions))
        .route("/sessions/{id}", get(get_session).delete(archive_session))
        .route("/sessions/{id}/history", get(session_history))
        .route("/sessions/{id}/context", post(pin_context))
        .route(
            "/sessions/{id}/context/{ctx}",
            axum::routing::delete(unpin_context),
        )
        .route("/sessions/{id}/runs", post(session_run))
        .route("/checkpoints/{id}", get(get_checkpoint))
        .route("/checkpoints/{id}/diff3", get(get_diff3))
        .route("/checkpoints/{id}/rollback", post(rollback))
        .route("/gc", post(collect_garbage))
        .route("/restore", post(restore))
        .route("/events", get(events))
        .route("/ws", get(crate::api::ws::upgrade))
        .route("/agent/publish", post(agent_publish))
        .route("/agent/status", post(agent_status))
        .route("/agent/suggestions", get(agent_suggestions))
        .route("/agent/suggestions/{id}", get(agent_suggestion))
        .route("/agent/feedback", get(agent_feedback))
        .fallback(|| async { AppError::not_found("no such endpoint; see protocol.md".into()) })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(hub.clone(), guard))
        .with_state(hub)
}

/// Host and Origin checks for everything; the reviewer token for everything but `/health`; the
/// agent token for `/agent/*` (and nothing else).
async fn guard(State(hub): State<Arc<Hub>>, mut req: Request, next: Next) -> Response {
    let headers = req.headers();
    if let Err(e) = check_host(headers, &hub.cfg().host, hub.cfg().port)
        .and_then(|_| check_origin(headers, &hub.cfg().allowed_origins))
    {
        return e.into_response();
    }
    let path = req.uri().path();
    if path == "/health" {
        return next.run(req).await;
    }
    let Some(token) = bearer(headers) else {
        return AppError::unauthorized(
            "missing Authorization: Bearer <token> (the token is in the hub's state dir)".into(),
        )
        .into_response();
    };
    let caller = if hub.is_reviewer_token(token) {
        Caller::Reviewer
    } else if let Some(run_id) = hub.runs().run_for_token(token) {
        Caller::Agent { run_id }
    } else {
        return AppError::unauthorized("invalid token".into()).into_response();
    };
    let agent_route = path.starts_with("/agent/");
    match (&caller, agent_route) {
        (Caller::Reviewer, false) | (Caller::Agent { .. }, true) => {}
        (Caller::Agent { .. }, false) => {
            return AppError::forbidden(
                "the agent token may only use /agent/* (its own run and session)".into(),
            )
            .into_response()
        }
        (Caller::Reviewer, true) => {
            return AppError::forbidden(
                "/agent/* is for the agent of a running run (its HUNKGATE_AGENT_TOKEN)".into(),
            )
            .into_response()
        }
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Parse a JSON body with errors that say what is wrong.
pub fn parse_json<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, AppError> {
    let body = body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            AppError::too_large(format!("request body is larger than {MAX_BODY} bytes"))
        } else {
            AppError::bad_request(e.body_text())
        }
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| AppError::bad_request(format!("invalid JSON body: {e}")))
}

async fn health(State(hub): State<Arc<Hub>>) -> Json<Value> {
    let dir = hub.cfg().state_dir.clone();
    let state_bytes = tokio::task::spawn_blocking(move || crate::gc::state_bytes(&dir))
        .await
        .unwrap_or(0);
    Json(json!({
        "healthy": true,
        "service": SERVICE,
        "wsClients": hub.ws_clients().load(Ordering::Relaxed),
        "version": env!("CARGO_PKG_VERSION"),
        // Which hub this is, for a client to check before it sends a token.
        "repo": hub.cfg().repo,
        "pid": std::process::id(),
        // Bytes under the state directory (measured at most every 30 s).
        "stateBytes": state_bytes,
    }))
}

/// `POST /gc`: collect finished work past its retention now, or (`dry_run`) say what would go.
async fn collect_garbage(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: crate::protocol::GcCmd = match &body {
        Ok(b) if b.iter().all(u8::is_ascii_whitespace) => Default::default(),
        _ => parse_json(body)?,
    };
    let report = hub
        .blocking(move |h| h.collect_garbage(crate::gc::Trigger::Asked, cmd.dry_run))
        .await?;
    Ok(ok(to_json(&report)?))
}

/// `POST /restore {"path"}`: bring back the last version of a file an accepted hunk deleted
/// ([`crate::decide::restore`]).
async fn restore(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: crate::protocol::RestoreCmd = parse_json(body)?;
    let done = hub.blocking(move |h| h.restore(&cmd.path)).await?;
    Ok(ok(done))
}

#[derive(serde::Deserialize)]
struct ListQuery {
    #[serde(default)]
    all: bool,
}

async fn list_suggestions(
    State(hub): State<Arc<Hub>>,
    q: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(q) = q.map_err(|e| AppError::bad_request(e.body_text()))?;
    let msg = ClientMsg::List(ListCmd {
        all: Some(q.all),
        id: None,
    });
    answer(&hub, msg).await
}

async fn get_suggestion(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let msg = ClientMsg::Get(GetCmd {
        suggestion_id: id,
        id: None,
    });
    answer(&hub, msg).await
}

fn ok(mut data: Value) -> Json<Value> {
    if let Value::Object(m) = &mut data {
        m.insert("success".into(), Value::Bool(true));
    }
    Json(data)
}

/// Carry out a command; its reply is the body as it is (reads).
async fn answer(hub: &Arc<Hub>, msg: ClientMsg) -> Result<Json<Value>, AppError> {
    Ok(Json(dispatch(hub, msg).await?.into_data()?))
}

/// Carry out a command; its reply with `"success": true` is the body (changes).
async fn done(hub: &Arc<Hub>, msg: ClientMsg) -> Result<Json<Value>, AppError> {
    Ok(ok(dispatch(hub, msg).await?.into_data()?))
}

async fn feedback(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: FeedbackCmd = parse_json(body)?;
    done(&hub, ClientMsg::Feedback(cmd)).await
}

async fn feedback_all(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: FeedbackAllCmd = parse_json(body)?;
    done(&hub, ClientMsg::FeedbackAll(cmd)).await
}

async fn complete(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: CompleteCmd = parse_json(body)?;
    done(&hub, ClientMsg::Complete(cmd)).await
}

async fn start_run(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: RunCmd = parse_json(body)?;
    done(&hub, ClientMsg::Run(cmd)).await
}

async fn list_runs(State(hub): State<Arc<Hub>>) -> Result<Json<Value>, AppError> {
    Ok(Json(json!({ "runs": hub.list_runs()? })))
}

async fn get_run(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    Ok(Json(
        serde_json::to_value(hub.run_view(&id)?)
            .map_err(|e| AppError::failed("encoding the reply", e))?,
    ))
}

async fn cancel_run(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let msg = ClientMsg::Cancel(crate::protocol::CancelCmd {
        run_id: id,
        id: None,
    });
    match dispatch(&hub, msg).await? {
        Reply::Run(view) => Ok(ok(json!({ "run_id": view.run_id, "cancelling": true }))),
        other => Ok(ok(other.into_data()?)),
    }
}

async fn get_checkpoint(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let view = hub.blocking(move |hub| hub.checkpoint(&id)).await?;
    Ok(Json(
        serde_json::to_value(view).map_err(|e| AppError::failed("encoding the reply", e))?,
    ))
}

#[derive(serde::Deserialize)]
struct Diff3Query {
    file_path: String,
}

async fn get_diff3(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    q: Result<Query<Diff3Query>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(q) = q.map_err(|e| {
        AppError::bad_request(format!("{} (diff3 needs ?file_path=...)", e.body_text()))
    })?;
    Ok(Json(
        hub.blocking(move |hub| hub.diff3(&id, &q.file_path))
            .await?,
    ))
}

async fn rollback(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let cmd: RollbackCmd = parse_json(body)?;
    let msg = ClientMsg::Rollback {
        checkpoint_id: id,
        cmd,
    };
    done(&hub, msg).await
}

#[derive(serde::Deserialize)]
struct EventsQuery {
    #[serde(default)]
    since: u64,
}

async fn events(
    State(hub): State<Arc<Hub>>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(q) = q.map_err(|e| AppError::bad_request(e.body_text()))?;
    let msg = ClientMsg::Replay(crate::protocol::ReplayCmd {
        since: q.since,
        id: None,
    });
    answer(&hub, msg).await
}

fn agent_run(caller: Option<axum::Extension<Caller>>) -> Result<String, AppError> {
    match caller.map(|c| c.0) {
        Some(Caller::Agent { run_id }) => Ok(run_id),
        _ => Err(AppError::forbidden("agent token required".into())),
    }
}

async fn agent_publish(
    State(hub): State<Arc<Hub>>,
    caller: Option<axum::Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let run_id = agent_run(caller)?;
    let cmd: PublishCmd = parse_json(body)?;
    done(&hub, ClientMsg::Publish { run_id, cmd }).await
}

async fn agent_status(
    State(hub): State<Arc<Hub>>,
    caller: Option<axum::Extension<Caller>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let run_id = agent_run(caller)?;
    let cmd: AgentStatusCmd = parse_json(body)?;
    done(&hub, ClientMsg::AgentStatus { run_id, cmd }).await
}

async fn agent_suggestions(
    State(hub): State<Arc<Hub>>,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Json<Value>, AppError> {
    let run_id = agent_run(caller)?;
    let list: Vec<SuggestionSummary> = hub
        .agent_suggestions(&run_id)?
        .iter()
        .map(SuggestionSummary::from)
        .collect();
    Ok(ok(json!({ "suggestions": list })))
}

/// One of the agent's suggestions, found by id or unique prefix among those it may see.
fn agent_pick(
    hub: &Hub,
    run_id: &str,
    id: &str,
) -> Result<crate::protocol::SuggestionView, AppError> {
    let views = hub.agent_suggestions(run_id)?;
    let id = crate::model::resolve_id(
        id,
        views.iter().map(|v| &v.id),
        "",
        "suggestion",
        "an agent sees only those of its run and session",
    )?;
    views
        .into_iter()
        .find(|v| v.id == id)
        .ok_or_else(|| AppError::internal("a resolved suggestion vanished"))
}

async fn agent_suggestion(
    State(hub): State<Arc<Hub>>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let run_id = agent_run(caller)?;
    let view = agent_pick(&hub, &run_id, &id)?;
    Ok(ok(json!({ "suggestion": view })))
}

#[derive(serde::Deserialize)]
struct FeedbackQuery {
    #[serde(default)]
    suggestion_id: Option<String>,
}

async fn agent_feedback(
    State(hub): State<Arc<Hub>>,
    caller: Option<axum::Extension<Caller>>,
    q: Result<Query<FeedbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let run_id = agent_run(caller)?;
    let Query(q) = q.map_err(|e| AppError::bad_request(e.body_text()))?;
    let views = match q.suggestion_id {
        Some(id) => vec![agent_pick(&hub, &run_id, &id)?],
        None => hub.agent_suggestions(&run_id)?,
    };
    let decisions: Vec<crate::model::run::Decisions> = views.iter().map(Into::into).collect();
    Ok(ok(json!({ "feedback": decisions })))
}

async fn clarify_run(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let mut cmd: crate::protocol::ClarifyCmd = parse_json(body)?;
    if cmd.run_id.as_deref().is_some_and(|r| r != id) {
        return Err(AppError::bad_request(
            "run_id in the body differs from the path".into(),
        ));
    }
    cmd.run_id = Some(id);
    done(&hub, ClientMsg::Clarify(cmd)).await
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value, AppError> {
    serde_json::to_value(v).map_err(|e| AppError::failed("encoding the reply", e))
}

async fn create_session(
    State(hub): State<Arc<Hub>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    // An empty body is an empty request: `curl -X POST .../sessions` works.
    let req: crate::sessions::NewSession = match &body {
        Ok(b) if b.iter().all(u8::is_ascii_whitespace) => Default::default(),
        _ => parse_json(body)?,
    };
    Ok(ok(to_json(&hub.create_session(req)?)?))
}

async fn list_sessions(State(hub): State<Arc<Hub>>) -> Result<Json<Value>, AppError> {
    Ok(Json(json!({ "sessions": hub.list_sessions()? })))
}

async fn get_session(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    Ok(Json(to_json(&hub.session_view(&id)?)?))
}

async fn archive_session(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let s = hub.update_session(&id, |s| {
        s.status = crate::model::session::SessionStatus::Archived;
        Ok(())
    })?;
    // Its ACP agent kept for its next run is stopped.
    hub.acp_session_ended(&s.id);
    Ok(ok(to_json(&s)?))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    #[serde(default)]
    kind: crate::sessions::HistoryFilter,
    #[serde(default)]
    cursor: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    50
}

async fn session_history(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    q: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, AppError> {
    let Query(q) = q.map_err(|e| AppError::bad_request(e.body_text()))?;
    Ok(Json(to_json(
        &hub.session_history(&id, q.kind, q.cursor, q.limit)?,
    )?))
}

async fn pin_context(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let row: crate::model::session::ContextRow = parse_json(body)?;
    let s = if row.kind == crate::model::session::ContextKind::Url {
        hub.pin_url(&id, row).await?
    } else {
        hub.pin_context(&id, row)?
    };
    Ok(ok(to_json(&s)?))
}

async fn unpin_context(
    State(hub): State<Arc<Hub>>,
    Path((id, ctx)): Path<(String, String)>,
) -> Result<Json<Value>, AppError> {
    Ok(ok(to_json(&hub.unpin_context(&id, &ctx)?)?))
}

async fn session_run(
    State(hub): State<Arc<Hub>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, AppError> {
    let mut cmd: RunCmd = parse_json(body)?;
    if cmd.session_id.as_deref().is_some_and(|s| s != id) {
        return Err(AppError::bad_request(
            "session_id in the body differs from the path".into(),
        ));
    }
    cmd.session_id = Some(id);
    done(&hub, ClientMsg::Run(cmd)).await
}

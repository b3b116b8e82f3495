//! The one command table: every [`ClientMsg`] is carried out here, whether it came as a
//! WebSocket frame (`api::ws`) or a REST request (`api::http`, whose handlers only build the
//! message from path and body and shape the reply).

use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::AppError;
use crate::hub::{DecisionResult, Hub};
use crate::protocol::{
    ClientMsg, FeedbackAction, FeedbackCmd, PublishReply, RunView, SuggestionSummary,
    SuggestionView,
};

/// What a command answers, typed; [`Reply::into_data`] is the WebSocket response's `data`.
#[derive(Debug)]
pub enum Reply {
    Decision(Box<DecisionResult>),
    /// Bulk decisions, completion, clarification answers and rollbacks answer plain JSON.
    Json(Value),
    Suggestions(Vec<SuggestionSummary>),
    Suggestion(Box<SuggestionView>),
    Run(Box<RunView>),
    Published(Box<SuggestionView>),
    Sent,
    Pong {
        seq: u64,
    },
}

impl Reply {
    pub fn into_data(self) -> Result<Value, AppError> {
        Ok(match self {
            Reply::Decision(d) => to_data(d)?,
            Reply::Json(v) => v,
            Reply::Suggestions(list) => json!({ "suggestions": list }),
            Reply::Suggestion(s) => to_data(s)?,
            Reply::Run(r) => to_data(r)?,
            Reply::Published(view) => to_data(PublishReply {
                suggestion_id: view.id,
                hunk_count: view.hunk_count,
                files: view.files,
            })?,
            Reply::Sent => json!({ "sent": true }),
            Reply::Pong { seq } => json!({ "pong": true, "seq": seq }),
        })
    }
}

fn to_data<T: serde::Serialize>(v: T) -> Result<Value, AppError> {
    serde_json::to_value(v).map_err(|e| AppError::failed("encoding the reply", e))
}

/// Carry out one command. Decisions run on the blocking pool (they write and fsync).
pub async fn dispatch(hub: &Arc<Hub>, msg: ClientMsg) -> Result<Reply, AppError> {
    match msg {
        ClientMsg::Feedback(cmd) => hub
            .blocking(move |hub| feedback(hub, cmd))
            .await
            .map(|d| Reply::Decision(Box::new(d))),
        ClientMsg::FeedbackAll(cmd) => hub
            .blocking(move |hub| {
                hub.decide_all(
                    &cmd.suggestion_id,
                    cmd.action,
                    cmd.file.as_deref(),
                    cmd.comment.as_deref(),
                    cmd.confirm,
                )
            })
            .await
            .map(Reply::Json),
        ClientMsg::Complete(cmd) => hub
            .blocking(move |hub| hub.complete(&cmd.suggestion_id, cmd.action))
            .await
            .map(Reply::Json),
        ClientMsg::List(cmd) => Ok(Reply::Suggestions(hub.list(cmd.all.unwrap_or(false))?)),
        ClientMsg::Get(cmd) => Ok(Reply::Suggestion(Box::new(hub.get(&cmd.suggestion_id)?))),
        ClientMsg::Run(cmd) => Ok(Reply::Run(Box::new(hub.start_run(&cmd)?))),
        ClientMsg::Cancel(cmd) => Ok(Reply::Run(Box::new(hub.cancel_run(&cmd.run_id)?))),
        ClientMsg::Clarify(cmd) => {
            let run = cmd
                .run_id
                .as_deref()
                .ok_or_else(|| AppError::bad_request("\"clarify\" needs runId".into()))?;
            hub.answer(
                run,
                cmd.question_id.as_deref(),
                cmd.answer.as_deref(),
                cmd.skip,
            )
            .map(Reply::Json)
        }
        ClientMsg::Replay(cmd) => Ok(Reply::Json(replay_data(hub, cmd.since))),
        ClientMsg::Ping(_) => Ok(Reply::Pong {
            seq: hub.bus().current(),
        }),
        ClientMsg::Rollback { checkpoint_id, cmd } => hub
            .blocking(move |hub| hub.rollback(&checkpoint_id, cmd.mode, &cmd.hunk_ids, cmd.confirm))
            .await
            .map(Reply::Json),
        ClientMsg::Publish { run_id, cmd } => hub
            .publish(
                &run_id,
                &cmd.description,
                &cmd.files,
                &cmd.hunk_descriptions,
            )
            .await
            .map(|v| Reply::Published(Box::new(v))),
        ClientMsg::AgentStatus { run_id, cmd } => {
            hub.agent_status(&run_id, &cmd.message, cmd.status.as_deref())?;
            Ok(Reply::Sent)
        }
    }
}

/// One hunk decided: whole, by a line range, as its three-way merge, or in the reviewer's
/// version — refusing the fields that do not go together.
fn feedback(hub: &Hub, cmd: FeedbackCmd) -> Result<DecisionResult, AppError> {
    match (cmd.merged_against.as_deref(), cmd.lines) {
        (Some(_), Some(_)) => Err(AppError::bad_request(
            "\"lines\" and mergedAgainst do not go together: a merge lands whole".into(),
        )),
        (Some(against), None) if cmd.action == FeedbackAction::Accept => hub.decide_merged(
            &cmd.suggestion_id,
            &cmd.hunk_id,
            against,
            cmd.comment.as_deref(),
        ),
        (Some(_), None) => Err(AppError::bad_request(format!(
            "mergedAgainst is only allowed with action \"accept\", not {:?}",
            cmd.action.word()
        ))),
        (None, Some(lines)) if cmd.modified_diff.is_none() => hub.decide_lines(
            &cmd.suggestion_id,
            &cmd.hunk_id,
            cmd.action,
            lines,
            cmd.comment.as_deref(),
        ),
        (None, Some(_)) => Err(AppError::bad_request(
            "\"lines\" and modifiedDiff do not go together: a modify lands the diff you give"
                .into(),
        )),
        (None, None) => hub.decide(
            &cmd.suggestion_id,
            &cmd.hunk_id,
            cmd.action,
            cmd.modified_diff.as_deref(),
            cmd.comment.as_deref(),
        ),
    }
}

/// `{"seq", "epoch", "complete", "events": [...]}` for a replay request.
pub fn replay_data(hub: &Hub, since: u64) -> Value {
    let (events, complete) = hub.bus().since(since);
    let events: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str(&e.json).ok())
        .collect();
    json!({
        "seq": hub.bus().current(),
        "epoch": hub.epoch(),
        "complete": complete,
        "events": events,
    })
}

//! Carrying out one validated tool call of the built-in agent: file tools and commands in the
//! sandbox (as the sandbox user), questions to the user and the suggestions' status in the hub.
//! The loop that decides which call to make is in [`crate::agent::tool_loop`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, scrubbed_env, Exit, Stream};
use hunkgate_sandbox::tools::{FileTool, ToolReply, ToolRequest};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::tool_loop::BuiltinRun;
use crate::agent::tools::{Action, OutputCap};
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::session::Entry;
use crate::model::text::one_line;
use crate::protocol::{Event, Question, RunState, NO_USER_ANSWER};

impl Hub {
    /// Run a validated tool call: file tools and commands in the sandbox, questions and
    /// decisions in the hub.
    pub(crate) async fn execute(
        self: &Arc<Self>,
        run: &BuiltinRun,
        action: &Action,
    ) -> Result<Value, ToolFailure> {
        match action {
            Action::File(tool) => run_file_tool(run, tool).await,
            Action::RunCommand {
                command,
                timeout_secs,
            } => self.run_command(run, command, *timeout_secs).await,
            Action::Clarify { question } => self.clarify(&run.run_id, question, &run.cancel).await,
            Action::SuggestionStatus { suggestion_id } => {
                self.suggestion_status(&run.run_id, suggestion_id.as_deref())
            }
            Action::Check => self.check_tool(run).await,
            Action::Finish { .. } => Ok(json!({})),
        }
    }

    /// Run a shell command in the sandbox, as the sandbox user with a scrubbed environment,
    /// keeping the head and tail of its output.
    async fn run_command(
        &self,
        run: &BuiltinRun,
        command: &str,
        timeout_secs: Option<u64>,
    ) -> Result<Value, ToolFailure> {
        let timeout = command_timeout(
            timeout_secs,
            run.limits.command_timeout,
            run.deadline.saturating_duration_since(Instant::now()),
        );
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), command.to_string()];
        let env = scrubbed_env(&self.cfg().agent_env);
        let mut out = OutputCap::new(run.limits.max_command_output);
        let outcome = agent::run(
            run.sandbox.as_ref(),
            &argv,
            &env,
            timeout,
            run.cancel.child_token(),
            |stream, line| {
                if stream == Stream::Stderr {
                    out.push(&format!("[stderr] {line}"));
                } else {
                    out.push(line);
                }
            },
        )
        .await;
        if run.cancel.is_cancelled() {
            return Err(ToolFailure::Cancelled);
        }
        command_result(outcome.exit, &out.finish(), timeout)
    }

    /// The user's decisions on this session's suggestions, or on those whose id starts with
    /// `suggestion_id`.
    fn suggestion_status(
        &self,
        run_id: &str,
        suggestion_id: Option<&str>,
    ) -> Result<Value, ToolFailure> {
        let views = self
            .agent_suggestions(run_id)
            .map_err(|e| ToolFailure::Message(e.to_string()))?;
        let decisions: Vec<crate::model::run::Decisions> = views
            .iter()
            .filter(|s| suggestion_id.is_none_or(|id| s.id.starts_with(id)))
            .map(Into::into)
            .collect();
        Ok(json!({ "suggestions": decisions }))
    }

    /// Ask the user and wait (no timeout, seed 000 §21) for the answer, a skip, or cancel.
    pub(crate) async fn clarify(
        self: &Arc<Self>,
        run_id: &str,
        question: &str,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolFailure> {
        let question_id = format!("q_{}", uuid::Uuid::new_v4().simple());
        let question: String = question.trim().chars().take(2000).collect();
        let rx = self
            .runs()
            .ask(run_id, &question_id)
            .map_err(|e| ToolFailure::Message(e.to_string()))?;
        let q = Question {
            question_id: question_id.clone(),
            question: question.clone(),
        };
        let _ = self.update_run(run_id, |r| {
            r.status = RunState::WaitingForUser;
            r.question = Some(q);
        });
        self.history(
            run_id,
            Entry::message("assistant", &format!("Question: {question}")),
        );
        self.bus().emit(Event::ClarificationRequested {
            seq: 0,
            run_id: run_id.to_string(),
            question_id: question_id.clone(),
            question: question.clone(),
        });
        self.bus().emit(Event::Status {
            seq: 0,
            suggestion_id: None,
            run_id: Some(run_id.to_string()),
            status: "waiting_for_user".into(),
            message: one_line(&format!("Question: {question}"), 300),
        });
        let answer = tokio::select! {
            a = rx => a.ok(),
            _ = cancel.cancelled() => None,
        };
        self.runs().forget_question(run_id);
        let _ = self.update_run(run_id, |r| {
            if r.status == RunState::WaitingForUser {
                r.status = RunState::Working;
            }
            r.question = None;
        });
        match answer {
            Some(answer) => Ok(json!({ "answer": answer })),
            None => Err(ToolFailure::Cancelled),
        }
    }

    /// The user's answer (or skip) to the question a run waits on.
    pub fn answer(
        &self,
        run_id: &str,
        question_id: Option<&str>,
        answer: Option<&str>,
        skip: bool,
    ) -> Result<Value, AppError> {
        let text = match (answer.map(str::trim), skip) {
            (_, true) => NO_USER_ANSWER.to_string(),
            (Some(a), false) if !a.is_empty() => a.chars().take(8000).collect(),
            _ => {
                return Err(AppError::bad_request(
                    "give \"answer\", or \"skip\": true to let the agent go on without one".into(),
                ))
            }
        };
        // An unknown run is a 404, not "not waiting".
        self.run_view(run_id)?;
        let qid = self.runs().reply(run_id, question_id, text.clone())?;
        // Working again from the moment the answer is accepted, not when the loop wakes up.
        let _ = self.update_run(run_id, |r| {
            if r.status == RunState::WaitingForUser {
                r.status = RunState::Working;
            }
            r.question = None;
        });
        self.bus().emit(Event::ClarificationReceived {
            seq: 0,
            run_id: run_id.to_string(),
            question_id: qid.clone(),
            answer: text.clone(),
            skipped: skip,
        });
        self.history(run_id, Entry::message("user", &text));
        Ok(json!({ "run_id": run_id, "question_id": qid, "answer": text }))
    }
}

pub(crate) enum ToolFailure {
    Message(String),
    Cancelled,
}

/// Run a file tool in the sandbox, as the sandbox user, off the async runtime.
pub(crate) async fn run_file_tool(run: &BuiltinRun, tool: &FileTool) -> Result<Value, ToolFailure> {
    if let Some(path) = tool_paths(tool)
        .into_iter()
        .find(|p| run.sensitive.is_sensitive(p))
    {
        return Err(ToolFailure::Message(sensitive_refusal(path)));
    }
    let sandbox = run.sandbox.clone();
    let request = ToolRequest {
        tool: tool.clone(),
        limits: run.limits.tools.clone(),
    };
    let reply = tokio::task::spawn_blocking(move || sandbox.tool(&request))
        .await
        .map_err(|e| ToolFailure::Message(format!("the tool worker failed: {e}")))?;
    match reply {
        Ok(ToolReply::Ok { result }) => Ok(result),
        Ok(ToolReply::Error { message }) => Err(ToolFailure::Message(message)),
        Err(e) => {
            tracing::warn!(run = %run.run_id, error = %e, "sandbox tool failed");
            Err(ToolFailure::Message(format!(
                "the sandbox could not run the tool: {e}"
            )))
        }
    }
}

/// The paths a file tool names (a listing or a search names none: the sandbox holds no
/// sensitive file for them to find).
fn tool_paths(tool: &FileTool) -> Vec<&str> {
    match tool {
        FileTool::ListFiles { .. } | FileTool::SearchProject { .. } => vec![],
        FileTool::ReadFile { file_path, .. }
        | FileTool::WriteFile { file_path, .. }
        | FileTool::DeleteFile { file_path } => vec![file_path],
        FileTool::EditFile(e) => vec![&e.file_path],
        FileTool::MoveFile { from_path, to_path } => vec![from_path, to_path],
    }
}

/// What the model is told when it names a sensitive file.
fn sensitive_refusal(path: &str) -> String {
    format!(
        "refused: {path:?} is a sensitive file (hunkgate's sensitive-file policy): it is not in \
         the sandbox, and it cannot be read, written, moved or deleted; leave it to the user"
    )
}

/// How long a command may run: what the model asked for, at most the configured limit and
/// what is left of the run, and at least a second.
pub(crate) fn command_timeout(
    requested_secs: Option<u64>,
    limit: Duration,
    remaining: Duration,
) -> Duration {
    requested_secs
        .map(Duration::from_secs)
        .unwrap_or(limit)
        .min(limit)
        .min(remaining)
        .max(Duration::from_secs(1))
}

/// The answer to a command from how it exited and its (capped) output.
pub(crate) fn command_result(
    exit: Exit,
    output: &str,
    timeout: Duration,
) -> Result<Value, ToolFailure> {
    match exit {
        Exit::Code(code) => Ok(json!({"exit_code": code, "output": output})),
        Exit::TimedOut => Err(ToolFailure::Message(format!(
            "the command timed out after {}s and was killed; output so far:\n{output}",
            timeout.as_secs()
        ))),
        other => Err(ToolFailure::Message(format!(
            "the command {other}; output:\n{output}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(r: Result<Value, ToolFailure>) -> String {
        match r {
            Err(ToolFailure::Message(m)) => m,
            Err(ToolFailure::Cancelled) => panic!("cancelled"),
            Ok(v) => panic!("ok: {v}"),
        }
    }

    #[test]
    fn command_timeouts_are_bounded_by_the_limit_and_the_deadline() {
        let s = Duration::from_secs;
        // (asked, limit, left of the run, expected)
        let cases = [
            (None, s(60), s(600), s(60)),
            (Some(5), s(60), s(600), s(5)),
            (Some(500), s(60), s(600), s(60)),
            (Some(30), s(60), s(10), s(10)),
            (None, s(60), Duration::ZERO, s(1)),
        ];
        for (asked, limit, left, want) in cases {
            assert_eq!(command_timeout(asked, limit, left), want, "{asked:?}");
        }
    }

    #[test]
    fn only_a_command_that_exits_is_a_result() {
        let t = Duration::from_secs(7);
        assert_eq!(
            command_result(Exit::Code(3), "out\n", t).ok().unwrap(),
            json!({"exit_code": 3, "output": "out\n"})
        );
        let timed_out = failure(command_result(Exit::TimedOut, "so far", t));
        assert!(
            timed_out.starts_with("the command timed out after 7s and was killed")
                && timed_out.ends_with("output so far:\nso far"),
            "{timed_out}"
        );
        let killed = failure(command_result(Exit::Signal(9), "x", t));
        assert!(killed.starts_with("the command ") && killed.ends_with("; output:\nx"));
    }
}

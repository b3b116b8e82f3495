//! The built-in agent: a tool loop that runs in the hub, so the API key stays here, while every
//! tool that touches files or runs a program executes in the sandbox as the sandbox user.
//!
//! The pure part — tool schemas, argument validation, summaries, note bookkeeping — is in
//! [`crate::agent::tools`]; this is the driver that talks to the provider and the sandbox.
//! Limits follow seed 000 §1 and §21: at most `max_tool_calls` tool calls per run, at most
//! `max_schema_retries` invalid calls (each fed back to the model with the reason). Running out
//! of either ends the loop, and whatever edits exist still become a suggestion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, scrubbed_env, Exit, Stream};
use hunkgate_sandbox::tools::{ToolReply, ToolRequest};
use hunkgate_sandbox::workspace::Sandbox;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::tools::{
    parse_call, summarize_request, summarize_result, system_prompt, tool_specs, Action, Notes,
    OutputCap, Stop,
};
use crate::config::provider::LoopLimits;
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::chat::{Message, Provider, StepRequest, StopReason, ToolCall};
use crate::model::session::Entry;
use crate::model::text::one_line;
use crate::protocol::{Event, HunkNote, Question, RunState, RunUsage, NO_USER_ANSWER};

/// What the driver needs to run the loop.
pub struct BuiltinRun {
    pub run_id: String,
    pub model: String,
    pub prompt: String,
    /// Session context: pinned rows, earlier chat, decisions on earlier suggestions.
    pub context: Vec<Message>,
    pub sandbox: Arc<dyn Sandbox>,
    pub provider: Arc<dyn Provider>,
    pub limits: LoopLimits,
    pub cancel: CancellationToken,
    pub deadline: Instant,
}

/// How the loop ended.
#[derive(Debug)]
pub struct LoopEnd {
    pub stop: Stop,
    pub description: Option<String>,
    pub notes: Vec<HunkNote>,
    pub error: Option<String>,
    pub edits: usize,
}

impl Hub {
    fn tool_event_status(&self, run_id: &str, message: String) {
        self.bus.emit(Event::Status {
            seq: 0,
            suggestion_id: None,
            run_id: Some(run_id.to_string()),
            status: "working".into(),
            message,
        });
    }

    fn add_usage(&self, run_id: &str, f: impl FnOnce(&mut RunUsage)) {
        let _ = self.update_run(run_id, |r| f(r.usage.get_or_insert_with(RunUsage::default)));
    }

    /// Drive the built-in agent until it finishes or a limit ends it.
    pub async fn run_builtin(self: &Arc<Self>, run: BuiltinRun) -> LoopEnd {
        let specs = tool_specs();
        let mut messages = vec![Message::System {
            content: system_prompt(&run.limits),
        }];
        messages.extend(run.context.iter().cloned());
        messages.push(Message::User {
            content: run.prompt.clone(),
        });
        let mut end = LoopEnd {
            stop: Stop::Answered,
            description: None,
            notes: Vec::new(),
            error: None,
            edits: 0,
        };
        let mut notes = Notes::default();
        let mut used = 0usize;
        let mut schema_failures = 0u32;
        'steps: loop {
            let remaining = run.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                end.stop = Stop::Timeout;
                break;
            }
            let step = tokio::select! {
                r = run.provider.run_step(
                    StepRequest { model: &run.model, messages: &messages, tools: &specs },
                    &run.cancel,
                ) => r,
                _ = tokio::time::sleep(remaining) => {
                    end.stop = Stop::Timeout;
                    break;
                }
            };
            let step = match step {
                Ok(s) => s,
                Err(crate::model::chat::ProviderError::Cancelled) => {
                    end.stop = Stop::Cancelled;
                    break;
                }
                Err(e) => {
                    tracing::warn!(run = %run.run_id, error = %e, "model call failed");
                    end.stop = Stop::ProviderError;
                    end.error = Some(e.to_string());
                    break;
                }
            };
            let usage = step.usage.clone().unwrap_or_default();
            self.add_usage(&run.run_id, |u| {
                u.model_calls += 1;
                u.prompt_tokens += usage.prompt_tokens;
                u.completion_tokens += usage.completion_tokens;
                u.model_ms += step.latency_ms;
                u.retries += u64::from(step.attempts.saturating_sub(1));
            });
            tracing::info!(
                run = %run.run_id, model = %step.model, latency_ms = step.latency_ms,
                prompt_tokens = usage.prompt_tokens, completion_tokens = usage.completion_tokens,
                tool_calls = step.tool_calls.len(), streamed = step.streamed, "model step"
            );
            if let Some(text) = &step.assistant_message {
                self.history(
                    &run.run_id,
                    Entry::message("assistant", text).with_model(&step.model, &usage),
                );
                self.tool_event_status(&run.run_id, one_line(text, 200));
            }
            messages.push(Message::Assistant {
                content: step.assistant_message.clone(),
                tool_calls: step.tool_calls.clone(),
            });
            if step.tool_calls.is_empty() {
                end.stop = Stop::Answered;
                end.description = step
                    .assistant_message
                    .as_deref()
                    .map(|t| one_line(t.lines().next().unwrap_or(""), 100))
                    .filter(|d| !d.is_empty());
                if step.stop_reason == StopReason::Length {
                    end.error = Some("the model's answer was cut at max_tokens".into());
                }
                break;
            }
            // Every call gets an answer (the API requires one per tool_call_id), even those
            // after the loop has decided to stop.
            let mut stop_after: Option<Stop> = None;
            for call in &step.tool_calls {
                if let Some(stop) = stop_after {
                    messages.push(tool_message(
                        call,
                        &json!({"ok": false, "error": format!("not run: the run is ending ({})", stop.as_str())}),
                    ));
                    continue;
                }
                if run.cancel.is_cancelled() {
                    end.stop = Stop::Cancelled;
                    break 'steps;
                }
                let parsed = parse_call(call);
                let summary = summarize_request(&call.name, parsed.as_ref().ok());
                let action = match parsed {
                    Ok(a) => a,
                    Err(why) => {
                        schema_failures += 1;
                        self.add_usage(&run.run_id, |u| u.schema_failures += 1);
                        let left = run
                            .limits
                            .max_schema_retries
                            .saturating_sub(schema_failures);
                        let msg =
                            format!("{why} (invalid call {schema_failures}; {left} more allowed)");
                        self.emit_tool(&run.run_id, call, &summary, false, &one_line(&msg, 200), 0);
                        self.history(&run.run_id, Entry::tool(&call.name, &summary, false, &msg));
                        messages.push(tool_message(call, &json!({"ok": false, "error": msg})));
                        if schema_failures > run.limits.max_schema_retries {
                            stop_after = Some(Stop::SchemaRetriesExhausted);
                        }
                        continue;
                    }
                };
                if let Action::Finish {
                    description,
                    hunk_descriptions,
                } = &action
                {
                    end.description = Some(one_line(description, 200));
                    notes.0.extend(hunk_descriptions.iter().cloned());
                    self.emit_tool(&run.run_id, call, &summary, true, "publishing", 0);
                    messages.push(tool_message(
                        call,
                        &json!({"ok": true, "result": {"published": true}}),
                    ));
                    stop_after = Some(Stop::Finished);
                    continue;
                }
                if used >= run.limits.max_tool_calls {
                    let msg = format!(
                        "tool budget exhausted ({} calls); the run ends and your edits so far are published",
                        run.limits.max_tool_calls
                    );
                    self.emit_tool(&run.run_id, call, &summary, false, &msg, 0);
                    messages.push(tool_message(call, &json!({"ok": false, "error": msg})));
                    stop_after = Some(Stop::BudgetExhausted);
                    continue;
                }
                used += 1;
                self.add_usage(&run.run_id, |u| u.tool_calls += 1);
                self.bus.emit(Event::ToolRequested {
                    seq: 0,
                    run_id: run.run_id.clone(),
                    tool_call_id: call.tool_call_id.clone(),
                    name: call.name.clone(),
                    summary: summary.clone(),
                });
                tracing::info!(run = %run.run_id, tool = %call.name, %summary, "tool call");
                let started = Instant::now();
                let outcome = self.execute(&run, &action).await;
                let ms = started.elapsed().as_millis() as u64;
                let (ok, payload, result_summary) = match outcome {
                    Ok(result) => {
                        if let Action::File(t) = &action {
                            notes.track(t, &result);
                            if t.writes() {
                                end.edits += 1;
                            }
                        }
                        let s = summarize_result(&result);
                        (
                            true,
                            json!({"ok": true, "result": result, "calls_left": run.limits.max_tool_calls - used}),
                            s,
                        )
                    }
                    Err(ToolFailure::Cancelled) => {
                        end.stop = Stop::Cancelled;
                        break 'steps;
                    }
                    Err(ToolFailure::Message(e)) => {
                        let s = one_line(&e, 200);
                        (
                            false,
                            json!({"ok": false, "error": e, "calls_left": run.limits.max_tool_calls - used}),
                            s,
                        )
                    }
                };
                tracing::info!(run = %run.run_id, tool = %call.name, ok, ms, result = %result_summary, "tool done");
                self.emit_tool(&run.run_id, call, &summary, ok, &result_summary, ms);
                self.history(
                    &run.run_id,
                    Entry::tool(&call.name, &summary, ok, &result_summary),
                );
                messages.push(tool_message(call, &payload));
            }
            if let Some(stop) = stop_after {
                end.stop = stop;
                break;
            }
        }
        end.notes = notes.0;
        end
    }

    fn emit_tool(
        &self,
        run_id: &str,
        call: &ToolCall,
        summary: &str,
        ok: bool,
        result: &str,
        ms: u64,
    ) {
        self.bus.emit(Event::ToolCompleted {
            seq: 0,
            run_id: run_id.to_string(),
            tool_call_id: call.tool_call_id.clone(),
            name: call.name.clone(),
            ok,
            summary: result.to_string(),
            duration_ms: ms,
        });
        let mark = if ok { "✓" } else { "✗" };
        self.tool_event_status(
            run_id,
            one_line(&format!("{mark} {summary}: {result}"), 200),
        );
    }

    async fn execute(
        self: &Arc<Self>,
        run: &BuiltinRun,
        action: &Action,
    ) -> Result<Value, ToolFailure> {
        match action {
            Action::File(tool) => {
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
            Action::RunCommand {
                command,
                timeout_secs,
            } => {
                let limit = run.limits.command_timeout;
                let timeout = timeout_secs
                    .map(Duration::from_secs)
                    .unwrap_or(limit)
                    .min(limit)
                    .min(run.deadline.saturating_duration_since(Instant::now()))
                    .max(Duration::from_secs(1));
                let argv = vec!["/bin/sh".to_string(), "-c".to_string(), command.clone()];
                let env = scrubbed_env(&self.cfg.agent_env);
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
                let output = out.finish();
                match outcome.exit {
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
            Action::Clarify { question } => self.clarify(&run.run_id, question, &run.cancel).await,
            Action::SuggestionStatus { suggestion_id } => {
                let views = self
                    .agent_suggestions(&run.run_id)
                    .map_err(|e| ToolFailure::Message(e.to_string()))?;
                let decisions: Vec<crate::model::run::Decisions> = views
                    .iter()
                    .filter(|s| {
                        suggestion_id
                            .as_deref()
                            .is_none_or(|id| s.id.starts_with(id))
                    })
                    .map(Into::into)
                    .collect();
                Ok(json!({ "suggestions": decisions }))
            }
            Action::Finish { .. } => Ok(json!({})),
        }
    }

    /// Ask the user and wait (no timeout, seed 000 §21) for the answer, a skip, or cancel.
    async fn clarify(
        self: &Arc<Self>,
        run_id: &str,
        question: &str,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolFailure> {
        let question_id = format!("q_{}", uuid::Uuid::new_v4().simple());
        let question: String = question.trim().chars().take(2000).collect();
        let rx = self
            .runs
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
        self.bus.emit(Event::ClarificationRequested {
            seq: 0,
            run_id: run_id.to_string(),
            question_id: question_id.clone(),
            question: question.clone(),
        });
        self.bus.emit(Event::Status {
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
        self.runs.forget_question(run_id);
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
        let qid = self.runs.reply(run_id, question_id, text.clone())?;
        // Working again from the moment the answer is accepted, not when the loop wakes up.
        let _ = self.update_run(run_id, |r| {
            if r.status == RunState::WaitingForUser {
                r.status = RunState::Working;
            }
            r.question = None;
        });
        self.bus.emit(Event::ClarificationReceived {
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

enum ToolFailure {
    Message(String),
    Cancelled,
}

fn tool_message(call: &ToolCall, payload: &Value) -> Message {
    Message::Tool {
        tool_call_id: call.tool_call_id.clone(),
        name: call.name.clone(),
        content: payload.to_string(),
    }
}

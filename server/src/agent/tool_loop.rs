//! The built-in agent: a tool loop that runs in the hub, so the API key stays here, while every
//! tool that touches files or runs a program executes in the sandbox as the sandbox user.
//!
//! The pure part — tool schemas, argument validation, summaries, note bookkeeping — is in
//! [`crate::agent::tools`]; this is the driver that talks to the provider and the sandbox.
//! Limits follow seed 000 §1 and §21: at most `max_tool_calls` tool calls per run, at most
//! `max_schema_retries` invalid calls (each fed back to the model with the reason). Running out
//! of either ends the loop, and whatever edits exist still become a suggestion.

use std::sync::Arc;
use std::time::Instant;

use hunkgate_sandbox::workspace::Sandbox;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::routing::{Handoff, Switch};
use crate::agent::run_tool::ToolFailure;
use crate::agent::tools::{
    parse_call, summarize_request, summarize_result, system_prompt, tool_specs_for, Action, Notes,
    Stop,
};
use crate::config::provider::LoopLimits;
use crate::hub::Hub;
use crate::model::chat::{
    Message, Provider, StepRequest, StepResult, StopReason, ToolCall, ToolSpec,
};
use crate::model::session::Entry;
use crate::model::text::one_line;
use crate::protocol::{Event, HunkNote, RunUsage};

/// What the driver needs to run the loop.
pub struct BuiltinRun {
    pub run_id: String,
    pub model: String,
    pub prompt: String,
    /// Session context: pinned rows, earlier chat, decisions on earlier suggestions.
    pub context: Vec<Message>,
    pub sandbox: Arc<dyn Sandbox>,
    /// The run's sensitive-file policy: its file tools refuse those paths.
    pub sensitive: Arc<crate::config::sensitive::Policy>,
    pub provider: Arc<dyn Provider>,
    pub limits: LoopLimits,
    pub cancel: CancellationToken,
    pub deadline: Instant,
    /// `hybrid_auto`'s local leg: what ends it early for the remote provider.
    pub handoff: Option<Handoff>,
}

/// How the loop ended.
#[derive(Debug)]
pub struct LoopEnd {
    pub stop: Stop,
    pub description: Option<String>,
    pub notes: Vec<HunkNote>,
    pub error: Option<String>,
    pub edits: usize,
    /// The leg ended for `hybrid_auto`'s remote provider, and why.
    pub switch: Option<Switch>,
}

impl Hub {
    fn tool_event_status(&self, run_id: &str, message: String) {
        self.bus().emit(Event::Status {
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
        let checks = !self.cfg().checks.checkers.is_empty();
        let specs = tool_specs_for(checks);
        let mut state = LoopState::new(opening_messages(&run, checks));
        loop {
            let overflow = run
                .handoff
                .as_ref()
                .and_then(|h| h.overflow(&state.messages, &specs));
            if let Some(switch) = overflow {
                state.end.stop = Stop::ProviderError;
                state.end.error = Some(switch.detail.clone());
                state.end.switch = Some(switch);
                break;
            }
            let step = match self.next_step(&run, &specs, &state.messages).await {
                Ok(step) => step,
                Err(ended) => {
                    state.end.stop = ended.stop;
                    state.end.error = ended.error;
                    state.end.switch = ended.switch;
                    break;
                }
            };
            self.record_step(&run.run_id, &step);
            let sent = crate::agent::routing::estimate_tokens(&state.messages, &specs);
            if let Some(switch) = run.handoff.as_ref().and_then(|h| h.truncated(&step, sent)) {
                state.end.stop = Stop::ProviderError;
                state.end.error = Some(switch.detail.clone());
                state.end.switch = Some(switch);
                break;
            }
            state.messages.push(Message::Assistant {
                content: step.assistant_message.clone(),
                tool_calls: step.tool_calls.clone(),
            });
            if step.tool_calls.is_empty() {
                state.answered(&step);
                break;
            }
            if let Some(stop) = self
                .run_tool_calls(&run, &step.tool_calls, &mut state)
                .await
            {
                state.end.stop = stop;
                break;
            }
        }
        state.finish()
    }

    /// The model's next step, unless the deadline passes, the run is cancelled or the provider
    /// fails first.
    async fn next_step(
        &self,
        run: &BuiltinRun,
        specs: &[ToolSpec],
        messages: &[Message],
    ) -> Result<StepResult, Ended> {
        let remaining = run.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Ended::by(Stop::Timeout));
        }
        // `hybrid_auto`: a local call over its own limit moves the run on (the run's deadline,
        // when nearer, still ends it).
        let local_cap = run
            .handoff
            .as_ref()
            .and_then(|h| h.triggers.local_timeout)
            .filter(|cap| *cap < remaining);
        let step = tokio::select! {
            r = run.provider.run_step(
                StepRequest { model: &run.model, messages, tools: specs },
                &run.cancel,
            ) => r,
            _ = tokio::time::sleep(remaining) => return Err(Ended::by(Stop::Timeout)),
            _ = tokio::time::sleep(local_cap.unwrap_or(remaining)), if local_cap.is_some() => {
                let detail = format!(
                    "a local model call took over {}ms ([routing] hybrid_remote_on_timeout_ms)",
                    local_cap.unwrap_or_default().as_millis()
                );
                return Err(Ended {
                    stop: Stop::Timeout,
                    error: Some(detail.clone()),
                    switch: Some(Switch { trigger: crate::agent::routing::Trigger::Timeout, detail }),
                });
            }
        };
        match step {
            Ok(s) => Ok(s),
            Err(crate::model::chat::ProviderError::Cancelled) => Err(Ended::by(Stop::Cancelled)),
            Err(e) => {
                tracing::warn!(run = %run.run_id, error = %e, "model call failed");
                Err(Ended {
                    stop: Stop::ProviderError,
                    error: Some(e.to_string()),
                    switch: run.handoff.as_ref().and_then(|h| h.provider_failed(&e)),
                })
            }
        }
    }

    /// Count a model step in the run's usage, log it, and show its text to the user.
    fn record_step(&self, run_id: &str, step: &StepResult) {
        let usage = step.usage.clone().unwrap_or_default();
        self.add_usage(run_id, |u| {
            u.model_calls += 1;
            u.prompt_tokens += usage.prompt_tokens;
            u.completion_tokens += usage.completion_tokens;
            u.model_ms += step.latency_ms;
            u.retries += u64::from(step.attempts.saturating_sub(1));
        });
        tracing::info!(
            run = %run_id, model = %step.model, latency_ms = step.latency_ms,
            prompt_tokens = usage.prompt_tokens, completion_tokens = usage.completion_tokens,
            tool_calls = step.tool_calls.len(), streamed = step.streamed, "model step"
        );
        if let Some(text) = &step.assistant_message {
            self.history(
                run_id,
                Entry::message("assistant", text).with_model(&step.model, &usage),
            );
            self.tool_event_status(run_id, one_line(text, 200));
        }
    }

    /// Answer every call of a step, in order; the stop that ends the loop after this step, if
    /// any. Every call gets an answer (the API requires one per tool_call_id), even those after
    /// the loop has decided to stop — except when the run is cancelled, which ends it at once.
    async fn run_tool_calls(
        self: &Arc<Self>,
        run: &BuiltinRun,
        calls: &[ToolCall],
        state: &mut LoopState,
    ) -> Option<Stop> {
        let mut stop_after: Option<Stop> = None;
        for call in calls {
            if let Some(stop) = stop_after {
                state.messages.push(not_run_message(call, stop));
                continue;
            }
            match self.run_tool_call(run, call, state).await {
                Next::Continue => {}
                Next::StopAfter(stop) => stop_after = Some(stop),
                Next::Cancelled => return Some(Stop::Cancelled),
            }
        }
        stop_after
    }

    /// Validate one call and answer it: an invalid call, `finish`, a call over the budget, or a
    /// tool that runs.
    async fn run_tool_call(
        self: &Arc<Self>,
        run: &BuiltinRun,
        call: &ToolCall,
        state: &mut LoopState,
    ) -> Next {
        if run.cancel.is_cancelled() {
            return Next::Cancelled;
        }
        let parsed = parse_call(call);
        let summary = summarize_request(&call.name, parsed.as_ref().ok());
        let action = match parsed {
            Ok(a) => a,
            Err(why) => {
                let call = SummarizedCall { call, summary };
                return self.refuse_invalid_call(run, &call, &why, state);
            }
        };
        if let Action::Finish {
            description,
            hunk_descriptions,
        } = &action
        {
            state.end.description = Some(one_line(description, 200));
            state.notes.0.extend(hunk_descriptions.iter().cloned());
            self.emit_tool(&run.run_id, call, &summary, true, "publishing", 0);
            state.messages.push(tool_message(
                call,
                &json!({"ok": true, "result": {"published": true}}),
            ));
            return Next::StopAfter(Stop::Finished);
        }
        if state.used >= run.limits.max_tool_calls {
            let msg = budget_exhausted_message(run.limits.max_tool_calls);
            self.emit_tool(&run.run_id, call, &summary, false, &msg, 0);
            state
                .messages
                .push(tool_message(call, &json!({"ok": false, "error": msg})));
            if let Some(h) = &run.handoff {
                state.end.switch = h.budget(state.end.edits, run.limits.max_tool_calls);
            }
            return Next::StopAfter(Stop::BudgetExhausted);
        }
        self.run_tool(run, &SummarizedCall { call, summary }, &action, state)
            .await
    }

    /// Answer a call that failed validation with the reason, counting it against
    /// `max_schema_retries`.
    fn refuse_invalid_call(
        &self,
        run: &BuiltinRun,
        call: &SummarizedCall<'_>,
        why: &str,
        state: &mut LoopState,
    ) -> Next {
        let SummarizedCall { call, summary } = call;
        state.schema_failures += 1;
        self.add_usage(&run.run_id, |u| u.schema_failures += 1);
        let msg = invalid_call_message(why, state.schema_failures, run.limits.max_schema_retries);
        self.emit_tool(&run.run_id, call, summary, false, &one_line(&msg, 200), 0);
        self.history(&run.run_id, Entry::tool(&call.name, summary, false, &msg));
        state
            .messages
            .push(tool_message(call, &json!({"ok": false, "error": msg})));
        state.failed_edits += 1;
        let exhausted = state.schema_failures > run.limits.max_schema_retries;
        if let Some(switch) = run
            .handoff
            .as_ref()
            .and_then(|h| h.schema_fail(state.failed_edits, exhausted))
        {
            state.end.switch = Some(switch);
            return Next::StopAfter(Stop::SchemaRetriesExhausted);
        }
        if exhausted {
            Next::StopAfter(Stop::SchemaRetriesExhausted)
        } else {
            Next::Continue
        }
    }

    /// Run a valid tool call within the budget, and answer it with its result or error.
    async fn run_tool(
        self: &Arc<Self>,
        run: &BuiltinRun,
        call: &SummarizedCall<'_>,
        action: &Action,
        state: &mut LoopState,
    ) -> Next {
        let SummarizedCall { call, summary } = call;
        state.used += 1;
        self.add_usage(&run.run_id, |u| u.tool_calls += 1);
        self.bus().emit(Event::ToolRequested {
            seq: 0,
            run_id: run.run_id.clone(),
            tool_call_id: call.tool_call_id.clone(),
            name: call.name.clone(),
            summary: summary.clone(),
        });
        tracing::info!(run = %run.run_id, tool = %call.name, %summary, "tool call");
        let started = Instant::now();
        let outcome = self.execute(run, action).await;
        let ms = started.elapsed().as_millis() as u64;
        if let Ok(result) = &outcome {
            state.track(action, result);
        }
        let calls_left = run.limits.max_tool_calls - state.used;
        let Some(ToolAnswer {
            ok,
            payload,
            summary: result_summary,
        }) = tool_answer(outcome, calls_left)
        else {
            return Next::Cancelled;
        };
        tracing::info!(run = %run.run_id, tool = %call.name, ok, ms, result = %result_summary, "tool done");
        self.emit_tool(&run.run_id, call, summary, ok, &result_summary, ms);
        self.history(
            &run.run_id,
            Entry::tool(&call.name, summary, ok, &result_summary),
        );
        state.messages.push(tool_message(call, &payload));
        if !ok && matches!(action, Action::File(t) if t.writes()) {
            state.failed_edits += 1;
            if let Some(switch) = run
                .handoff
                .as_ref()
                .and_then(|h| h.schema_fail(state.failed_edits, false))
            {
                state.end.switch = Some(switch);
                return Next::StopAfter(Stop::SchemaRetriesExhausted);
            }
        }
        Next::Continue
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
        self.bus().emit(Event::ToolCompleted {
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
}

/// What the loop carries from step to step: the conversation, how it is ending, the notes
/// gathered so far, and the counts the limits apply to.
struct LoopState {
    messages: Vec<Message>,
    end: LoopEnd,
    notes: Notes,
    /// Tool calls run (counted against `max_tool_calls`).
    used: usize,
    /// Invalid calls (counted against `max_schema_retries`).
    schema_failures: u32,
    /// Invalid calls and edits that failed (`hybrid_auto`'s `schema_fail` trigger).
    failed_edits: u32,
}

impl LoopState {
    fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            end: LoopEnd {
                stop: Stop::Answered,
                description: None,
                notes: Vec::new(),
                error: None,
                edits: 0,
                switch: None,
            },
            notes: Notes::default(),
            used: 0,
            schema_failures: 0,
            failed_edits: 0,
        }
    }

    /// The model answered without calling a tool: its first line describes the run.
    fn answered(&mut self, step: &StepResult) {
        self.end.stop = Stop::Answered;
        self.end.description = step
            .assistant_message
            .as_deref()
            .and_then(answer_description);
        if step.stop_reason == StopReason::Length {
            self.end.error = Some("the model's answer was cut at max_tokens".into());
        }
    }

    /// Follow a successful file tool's effect on the notes and the count of edits.
    fn track(&mut self, action: &Action, result: &Value) {
        if let Action::File(t) = action {
            self.notes.track(t, result);
            if t.writes() {
                self.end.edits += 1;
            }
        }
    }

    /// How the loop ended, with the notes it gathered.
    fn finish(mut self) -> LoopEnd {
        self.end.notes = self.notes.0;
        self.end
    }
}

/// A call being answered, with what it is about (for events, status lines and history).
struct SummarizedCall<'a> {
    call: &'a ToolCall,
    summary: String,
}

/// How a tool call is answered: whether it worked, what the model is sent, and the one-line
/// result for events and history.
#[derive(Debug, PartialEq)]
struct ToolAnswer {
    ok: bool,
    payload: Value,
    summary: String,
}

/// The answer to a tool that ran (or failed), with the calls left in the budget; none if the
/// run was cancelled while it ran.
fn tool_answer(outcome: Result<Value, ToolFailure>, calls_left: usize) -> Option<ToolAnswer> {
    match outcome {
        Ok(result) => {
            let summary = summarize_result(&result);
            Some(ToolAnswer {
                ok: true,
                payload: json!({"ok": true, "result": result, "calls_left": calls_left}),
                summary,
            })
        }
        Err(ToolFailure::Cancelled) => None,
        Err(ToolFailure::Message(e)) => Some(ToolAnswer {
            ok: false,
            summary: one_line(&e, 200),
            payload: json!({"ok": false, "error": e, "calls_left": calls_left}),
        }),
    }
}

/// How the loop ended when it could not get a step from the model.
struct Ended {
    stop: Stop,
    error: Option<String>,
    switch: Option<Switch>,
}

impl Ended {
    fn by(stop: Stop) -> Self {
        Self {
            stop,
            error: None,
            switch: None,
        }
    }
}

/// What one tool call means for the rest of its step.
enum Next {
    /// Answer the next call.
    Continue,
    /// Answer the remaining calls with "not run", then end the loop with this stop.
    StopAfter(Stop),
    /// The run was cancelled: end the loop at once.
    Cancelled,
}

/// The conversation a run opens with: the system prompt, the session's context, the prompt.
/// `checks`: the hub has checkers, and the `check` tool is offered.
fn opening_messages(run: &BuiltinRun, checks: bool) -> Vec<Message> {
    let mut messages = vec![Message::System {
        content: system_prompt(&run.limits, checks),
    }];
    messages.extend(run.context.iter().cloned());
    messages.push(Message::User {
        content: run.prompt.clone(),
    });
    messages
}

/// The run's description from the model's final answer: its first line, shortened; none if
/// that line is empty.
fn answer_description(text: &str) -> Option<String> {
    Some(one_line(text.lines().next().unwrap_or(""), 100)).filter(|d| !d.is_empty())
}

/// The answer to a call that comes after the loop decided to stop.
fn not_run_message(call: &ToolCall, stop: Stop) -> Message {
    tool_message(
        call,
        &json!({"ok": false, "error": format!("not run: the run is ending ({})", stop.as_str())}),
    )
}

/// What the model is told about its `failures`-th invalid call.
fn invalid_call_message(why: &str, failures: u32, max_retries: u32) -> String {
    let left = max_retries.saturating_sub(failures);
    format!("{why} (invalid call {failures}; {left} more allowed)")
}

/// What the model is told when it calls a tool after spending its budget.
fn budget_exhausted_message(max_tool_calls: usize) -> String {
    format!(
        "tool budget exhausted ({max_tool_calls} calls); the run ends and your edits so far are published"
    )
}

fn tool_message(call: &ToolCall, payload: &Value) -> Message {
    Message::Tool {
        tool_call_id: call.tool_call_id.clone(),
        name: call.name.clone(),
        content: payload.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_answers_carry_the_result_or_error_and_the_calls_left() {
        let ok = tool_answer(Ok(json!({"exit_code": 0, "output": ""})), 4).unwrap();
        assert_eq!(
            ok,
            ToolAnswer {
                ok: true,
                payload: json!({"ok": true, "result": {"exit_code": 0, "output": ""}, "calls_left": 4}),
                summary: "exit 0".into(),
            }
        );
        let err = tool_answer(Err(ToolFailure::Message("no such\nfile".into())), 0).unwrap();
        assert_eq!(
            err,
            ToolAnswer {
                ok: false,
                payload: json!({"ok": false, "error": "no such\nfile", "calls_left": 0}),
                summary: one_line("no such\nfile", 200),
            }
        );
        assert!(tool_answer(Err(ToolFailure::Cancelled), 3).is_none());
    }

    #[test]
    fn the_answer_names_the_run_and_refusals_say_what_is_left() {
        assert_eq!(
            answer_description("Fixed the bug.\nDetails…").as_deref(),
            Some("Fixed the bug.")
        );
        assert_eq!(answer_description(""), None);
        assert_eq!(answer_description("\nsecond line"), None);
        assert_eq!(
            invalid_call_message("bad", 2, 5),
            "bad (invalid call 2; 3 more allowed)"
        );
        assert_eq!(
            invalid_call_message("bad", 7, 5),
            "bad (invalid call 7; 0 more allowed)"
        );
        let call = ToolCall {
            tool_call_id: "c1".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        };
        let Message::Tool {
            tool_call_id,
            content,
            ..
        } = not_run_message(&call, Stop::Finished)
        else {
            panic!("not a tool message")
        };
        assert_eq!(tool_call_id, "c1");
        assert_eq!(
            serde_json::from_str::<Value>(&content).unwrap(),
            json!({"ok": false, "error": "not run: the run is ending (finished)"})
        );
    }
}

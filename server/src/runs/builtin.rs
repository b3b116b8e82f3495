//! The built-in agent's run: the tool loop in the hub, its tools in the sandbox, and whatever it
//! changed published as a suggestion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::workspace::Sandbox;

use crate::agent::routing::{estimate_tokens, Ask, Choice, Handoff, Needs, Switch};
use crate::agent::tool_loop::LoopEnd;
use crate::agent::tools::Stop;
use crate::config::provider::LoopLimits;
use crate::config::routing::AgentMode;
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::chat::Message;
use crate::model::session::Entry;
use crate::model::text::first_line;
use crate::protocol::{ErrorCode, RouteSwitch, RouteView, RunState};

use super::{RunJob, BUILTIN};

/// What every leg of a run shares.
struct Leg<'a> {
    job: &'a RunJob,
    context: Vec<Message>,
    sandbox: Arc<dyn Sandbox>,
    sensitive: Arc<crate::config::sensitive::Policy>,
    /// The run's one deadline, over every leg.
    deadline: Instant,
}

impl Hub {
    /// The built-in agent's run: the provider and model chosen (request > session > config,
    /// then the rules), the tool loop, under `hybrid_auto` perhaps a second leg on the remote
    /// provider, then whatever it changed becomes a suggestion (also when a limit, a timeout or
    /// a provider failure ended it early).
    pub(super) async fn drive_builtin(
        self: &Arc<Self>,
        job: &RunJob,
        ask: &Ask,
        sandbox: Arc<dyn Sandbox>,
        sensitive: Arc<crate::config::sensitive::Policy>,
    ) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        let rid = run_id.to_string();
        let context = self.blocking(move |hub| hub.session_context(&rid)).await?;
        let needs = self.needs(&job.prompt, &context);
        let start = self.route_start(ask, needs).await?;
        let mode = ask.mode.map(|(m, _)| m);
        self.record_route(run_id, mode, &start)?;
        self.run_status(
            run_id,
            "working",
            format!(
                "Built-in agent started ({}/{}, isolation: {}): {}",
                start.provider,
                start.model,
                sandbox.isolation(),
                start.reason
            ),
        );
        let routing = &self.cfg().routing;
        let hybrid = mode == Some(AgentMode::HybridAuto)
            && Some(start.provider.as_str()) == routing.local_name();
        let leg = Leg {
            job,
            context,
            sandbox,
            sensitive,
            deadline: Instant::now() + job.timeout,
        };
        let handoff = hybrid.then(|| Handoff {
            triggers: routing.triggers.clone(),
            context: start.context,
        });
        let mut end = self.run_leg(&leg, &start, Vec::new(), handoff).await?;
        if let Some(switch) = end.switch.take() {
            end = self
                .move_to_remote(&leg, &start, switch, end, needs)
                .await?;
        }
        self.record_stop(run_id, &end)?;
        if end.stop == Stop::Cancelled {
            self.update_run(run_id, |r| r.status = RunState::Cancelled)?;
            self.run_error(
                run_id,
                ErrorCode::ExperimentFailed,
                "the built-in agent was cancelled".into(),
            );
            return Ok(());
        }
        let why = early_stop_reason(&end, &self.cfg().limits, job.timeout);
        if let Some(why) = &why {
            self.run_status(
                run_id,
                "working",
                format!("{why}; publishing the edits made so far"),
            );
        }
        self.publish_builtin_edits(run_id, &job.prompt, end, why)
            .await
    }

    /// What the run's opening conversation needs of a model: its estimated tokens (system
    /// prompt, session context, prompt, tool schemas), and tools.
    fn needs(&self, prompt: &str, context: &[Message]) -> Needs {
        let checks = !self.cfg().checks.checkers.is_empty();
        let mut messages = vec![Message::System {
            content: crate::agent::tools::system_prompt(&self.cfg().limits, checks),
        }];
        messages.extend(context.iter().cloned());
        messages.push(Message::User {
            content: prompt.to_string(),
        });
        let specs = crate::agent::tools::tool_specs_for(checks);
        Needs {
            tokens: estimate_tokens(&messages, &specs),
            tools: true,
        }
    }

    /// One leg of the tool loop on `choice`'s provider and model; `extra` follows the session
    /// context (the note a second leg starts with).
    async fn run_leg(
        self: &Arc<Self>,
        leg: &Leg<'_>,
        choice: &Choice,
        extra: Vec<Message>,
        handoff: Option<Handoff>,
    ) -> Result<LoopEnd, AppError> {
        let provider = self.named_provider(&choice.provider)?;
        let mut context = leg.context.clone();
        context.extend(extra);
        Ok(self
            .run_builtin(crate::agent::tool_loop::BuiltinRun {
                run_id: leg.job.run_id.clone(),
                model: choice.model.clone(),
                prompt: leg.job.prompt.clone(),
                context,
                sandbox: leg.sandbox.clone(),
                sensitive: leg.sensitive.clone(),
                provider,
                limits: self.cfg().limits.clone(),
                cancel: leg.job.cancel.clone(),
                deadline: leg.deadline,
                handoff,
            })
            .await)
    }

    /// `hybrid_auto`: the local leg ended on a trigger; the run goes on on the remote
    /// provider, in the same sandbox, restarted from the prompt (the local model's
    /// conversation is what failed, and may be what overflowed), told of the edits already
    /// made. The move is recorded on the run, as a status line and in the session history.
    async fn move_to_remote(
        self: &Arc<Self>,
        leg: &Leg<'_>,
        from: &Choice,
        switch: Switch,
        local: LoopEnd,
        needs: Needs,
    ) -> Result<LoopEnd, AppError> {
        let run_id = leg.job.run_id.as_str();
        let to = match self.route_remote(needs).await {
            Ok(to) => to,
            Err(e) => {
                let msg = format!(
                    "Not moving to the remote provider ({}): {}",
                    switch.detail,
                    e.message()
                );
                self.run_status(run_id, "working", msg);
                return Ok(local);
            }
        };
        self.record_switch(run_id, from, &to, &switch)?;
        let mut extra = Vec::new();
        if local.edits > 0 {
            extra.push(Message::User {
                content: format!(
                    "Another model worked on this task before you and made {} edit(s) in these files already; read a file before you change it.",
                    local.edits
                ),
            });
        }
        let mut end = self.run_leg(leg, &to, extra, None).await?;
        let mut notes = local.notes;
        notes.append(&mut end.notes);
        end.notes = notes;
        end.edits += local.edits;
        if end.description.is_none() {
            end.description = local.description;
        }
        Ok(end)
    }

    /// The run's provider, model and route as chosen, before the loop starts.
    fn record_route(
        &self,
        run_id: &str,
        mode: Option<AgentMode>,
        start: &Choice,
    ) -> Result<(), AppError> {
        let route = RouteView {
            mode: mode.map(|m| m.as_str().to_string()),
            provider: start.provider.clone(),
            model: start.model.clone(),
            reason: start.reason.clone(),
            switches: Vec::new(),
        };
        self.update_run(run_id, |r| {
            r.agent = Some(format!("{BUILTIN}:{}", start.model));
            r.model = Some(start.model.clone());
            r.provider = Some(start.provider.clone());
            r.route = Some(route.clone());
        })?;
        Ok(())
    }

    /// A move to another provider: on the run, as a status line, in the session history.
    fn record_switch(
        &self,
        run_id: &str,
        from: &Choice,
        to: &Choice,
        switch: &Switch,
    ) -> Result<(), AppError> {
        let rec = RouteSwitch {
            trigger: switch.trigger.as_str().to_string(),
            detail: switch.detail.clone(),
            from: format!("{}/{}", from.provider, from.model),
            to: format!("{}/{}", to.provider, to.model),
            at: crate::model::now(),
        };
        let line = format!(
            "Moved to {} ({}): {}; {}",
            rec.to, rec.trigger, rec.detail, to.reason
        );
        self.update_run(run_id, |r| {
            r.agent = Some(format!("{BUILTIN}:{}", to.model));
            r.model = Some(to.model.clone());
            r.provider = Some(to.provider.clone());
            if let Some(route) = &mut r.route {
                route.switches.push(rec.clone());
            }
        })?;
        tracing::info!(run = %run_id, from = %rec.from, to = %rec.to, trigger = %rec.trigger, "hybrid_auto moved the run");
        self.history(run_id, Entry::message("system", &line));
        self.run_status(run_id, "working", line);
        Ok(())
    }

    /// Record why the tool loop stopped (and its error, if any) on the run.
    fn record_stop(&self, run_id: &str, end: &LoopEnd) -> Result<(), AppError> {
        let stop = end.stop;
        let err = end.error.clone();
        self.update_run(run_id, |r| {
            r.stop_reason = Some(stop.as_str().to_string());
            if err.is_some() {
                r.error = err.clone();
            }
        })?;
        Ok(())
    }

    /// Publish what the built-in agent changed; with no changes the run ends `failed` after a
    /// provider failure, else `no_changes` (saying `why` it stopped early, if it did).
    async fn publish_builtin_edits(
        self: &Arc<Self>,
        run_id: &str,
        prompt: &str,
        end: LoopEnd,
        why: Option<String>,
    ) -> Result<(), AppError> {
        let description = end
            .description
            .clone()
            .unwrap_or_else(|| first_line(prompt));
        match self.publish(run_id, &description, &[], &end.notes).await {
            Ok(_) => Ok(()),
            Err(e) if e.error_code() == ErrorCode::NoChanges => {
                let msg = e.message().to_string();
                if end.stop == Stop::ProviderError {
                    let message = end.error.unwrap_or_default();
                    self.update_run(run_id, |r| r.status = RunState::Failed)?;
                    self.run_error(run_id, ErrorCode::ExperimentFailed, message);
                } else {
                    self.update_run(run_id, |r| r.status = RunState::NoChanges)?;
                    let msg = match why {
                        Some(w) => format!("{w}; {msg}"),
                        None => msg,
                    };
                    self.run_status(run_id, "no_changes", msg);
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// Why the tool loop stopped before the agent said it was done (a limit, the timeout, the
/// provider), for the run's status lines; None when it finished or answered.
fn early_stop_reason(end: &LoopEnd, limits: &LoopLimits, timeout: Duration) -> Option<String> {
    match end.stop {
        Stop::BudgetExhausted => Some(format!(
            "Tool budget exhausted ({} calls)",
            limits.max_tool_calls
        )),
        Stop::SchemaRetriesExhausted => Some(format!(
            "Too many invalid tool calls ({} allowed)",
            limits.max_schema_retries
        )),
        Stop::Timeout => Some(format!("Timed out after {}s", timeout.as_secs())),
        Stop::ProviderError => Some(format!(
            "The model provider failed: {}",
            end.error.as_deref().unwrap_or("")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(stop: Stop, error: Option<&str>) -> LoopEnd {
        LoopEnd {
            stop,
            description: None,
            notes: Vec::new(),
            error: error.map(str::to_string),
            edits: 0,
            switch: None,
        }
    }

    #[test]
    fn early_stops_say_which_limit_and_finished_runs_say_nothing() {
        let limits = LoopLimits {
            max_tool_calls: 7,
            max_schema_retries: 3,
            ..LoopLimits::default()
        };
        let t = Duration::from_secs(42);
        let why = |stop, error| early_stop_reason(&end(stop, error), &limits, t);
        assert_eq!(
            why(Stop::BudgetExhausted, None).as_deref(),
            Some("Tool budget exhausted (7 calls)")
        );
        assert_eq!(
            why(Stop::SchemaRetriesExhausted, None).as_deref(),
            Some("Too many invalid tool calls (3 allowed)")
        );
        assert_eq!(
            why(Stop::Timeout, None).as_deref(),
            Some("Timed out after 42s")
        );
        assert_eq!(
            why(Stop::ProviderError, Some("503")).as_deref(),
            Some("The model provider failed: 503")
        );
        assert_eq!(why(Stop::Finished, None), None);
        assert_eq!(why(Stop::Answered, None), None);
        assert_eq!(why(Stop::Cancelled, None), None);
    }
}

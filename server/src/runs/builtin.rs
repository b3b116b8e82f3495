//! The built-in agent's run: the tool loop in the hub, its tools in the sandbox, and whatever it
//! changed published as a suggestion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::workspace::Sandbox;

use crate::agent::tool_loop::LoopEnd;
use crate::agent::tools::Stop;
use crate::config::provider::LoopLimits;
use crate::error::AppError;
use crate::hub::Hub;
use crate::model::chat::Provider;
use crate::model::text::first_line;
use crate::protocol::{ErrorCode, RunState};

use super::RunJob;

impl Hub {
    /// The built-in agent's run: the tool loop, then whatever it changed becomes a suggestion
    /// (also when a limit, a timeout or a provider failure ended it early).
    pub(super) async fn drive_builtin(
        self: &Arc<Self>,
        job: &RunJob,
        model: &str,
        sandbox: Arc<dyn Sandbox>,
        sensitive: Arc<crate::config::sensitive::Policy>,
    ) -> Result<(), AppError> {
        let run_id = job.run_id.as_str();
        let provider = self.builtin_provider()?;
        let rid = run_id.to_string();
        let context = self.blocking(move |hub| hub.session_context(&rid)).await?;
        self.run_status(
            run_id,
            "working",
            format!(
                "Built-in agent started ({model}, isolation: {})",
                sandbox.isolation()
            ),
        );
        let end = self
            .run_builtin(crate::agent::tool_loop::BuiltinRun {
                run_id: run_id.to_string(),
                model: model.to_string(),
                prompt: job.prompt.clone(),
                context,
                sandbox,
                sensitive,
                provider,
                limits: self.cfg().limits.clone(),
                cancel: job.cancel.clone(),
                deadline: Instant::now() + job.timeout,
            })
            .await;
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

    /// The model provider for the built-in agent (made once, then shared by its runs).
    fn builtin_provider(&self) -> Result<Arc<dyn Provider>, AppError> {
        let Some(pcfg) = &self.cfg().provider else {
            return Err(AppError::bad_request(
                "the built-in agent has no model server configured".into(),
            ));
        };
        self.runs()
            .provider(|| {
                Ok(
                    Arc::new(crate::agent::provider::OpenAiCompatible::new(pcfg.clone())?)
                        as Arc<dyn Provider>,
                )
            })
            .map_err(|e| AppError::failed("setting up the model provider", e))
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

//! The built-in agent's run: the tool loop in the hub, its tools in the sandbox, and whatever it
//! changed published as a suggestion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::workspace::Sandbox;
use tokio_util::sync::CancellationToken;

use crate::error::AppError;
use crate::hub::Hub;
use crate::model::text::first_line;
use crate::protocol::{ErrorCode, RunState};

impl Hub {
    /// The built-in agent's run: the tool loop, then whatever it changed becomes a suggestion
    /// (also when a limit, a timeout or a provider failure ended it early).
    pub(super) async fn drive_builtin(
        self: &Arc<Self>,
        run_id: &str,
        model: &str,
        prompt: &str,
        timeout: Duration,
        cancel: CancellationToken,
        sandbox: Arc<dyn Sandbox>,
    ) -> Result<(), AppError> {
        let Some(pcfg) = &self.cfg.provider else {
            return Err(AppError::bad_request(
                "the built-in agent has no model server configured".into(),
            ));
        };
        let provider = self
            .runs
            .provider(|| {
                Ok(
                    Arc::new(crate::agent::provider::OpenAiCompatible::new(pcfg.clone())?)
                        as Arc<dyn crate::model::chat::Provider>,
                )
            })
            .map_err(|e| AppError::failed("setting up the model provider", e))?;
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
                prompt: prompt.to_string(),
                context,
                sandbox,
                provider,
                limits: self.cfg.limits.clone(),
                cancel,
                deadline: Instant::now() + timeout,
            })
            .await;
        let stop = end.stop;
        let err = end.error.clone();
        self.update_run(run_id, |r| {
            r.stop_reason = Some(stop.as_str().to_string());
            if err.is_some() {
                r.error = err.clone();
            }
        })?;
        use crate::agent::tools::Stop;
        if stop == Stop::Cancelled {
            self.update_run(run_id, |r| r.status = RunState::Cancelled)?;
            self.run_error(
                run_id,
                ErrorCode::ExperimentFailed,
                "the built-in agent was cancelled".into(),
            );
            return Ok(());
        }
        let why = match stop {
            Stop::BudgetExhausted => Some(format!(
                "Tool budget exhausted ({} calls)",
                self.cfg.limits.max_tool_calls
            )),
            Stop::SchemaRetriesExhausted => Some(format!(
                "Too many invalid tool calls ({} allowed)",
                self.cfg.limits.max_schema_retries
            )),
            Stop::Timeout => Some(format!("Timed out after {}s", timeout.as_secs())),
            Stop::ProviderError => Some(format!(
                "The model provider failed: {}",
                end.error.as_deref().unwrap_or("")
            )),
            _ => None,
        };
        if let Some(why) = &why {
            self.run_status(
                run_id,
                "working",
                format!("{why}; publishing the edits made so far"),
            );
        }
        let description = end
            .description
            .clone()
            .unwrap_or_else(|| first_line(prompt));
        match self.publish(run_id, &description, &[], &end.notes).await {
            Ok(_) => Ok(()),
            Err(e) if e.error_code() == ErrorCode::NoChanges => {
                let msg = e.message().to_string();
                if stop == Stop::ProviderError {
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

//! Running one `[[check]]` checker in a sandbox, as the sandbox user, within a time and an
//! output budget, and reading what it printed: shared by the checks after a run
//! ([`crate::runs`]) and the built-in agent's `check` tool ([`crate::agent::run_tool`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hunkgate_sandbox::agent::{self, scrubbed_env, Exit, Stream};
use hunkgate_sandbox::snapshot::DEFAULT_FILE_CAP;
use hunkgate_sandbox::workspace::Sandbox;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::run_tool::ToolFailure;
use crate::agent::tool_loop::BuiltinRun;
use crate::config::checkers::Checker;
use crate::error::AppError;
use crate::hub::registry::poisoned;
use crate::hub::Hub;
use crate::model::checker_output::{parse, Found, Output};
use crate::model::diagnostics::on_added_lines;
use crate::model::suggestion::{build_hunks, Blobs, HunkRec};

/// What one checker gave on one tree.
#[derive(Debug)]
pub enum Ran {
    Found(Vec<Found>),
    /// It gave nothing to compare, and why.
    Failed(String),
}

impl Hub {
    /// Run one checker in the sandbox for at most `timeout`, its output capped, and read it.
    pub async fn run_checker(
        &self,
        sandbox: &dyn Sandbox,
        checker: &Checker,
        which: &str,
        timeout: Duration,
        stop: &CancellationToken,
    ) -> Ran {
        let argv = vec!["sh".to_string(), "-c".to_string(), checker.command.clone()];
        let env = scrubbed_env(&self.cfg().agent_env);
        let stop = stop.child_token();
        let mut output = Capped::new(self.cfg().checks.max_output, stop.clone());
        let outcome = agent::run(sandbox, &argv, &env, timeout, stop, |stream, line| {
            output.push(stream, line)
        })
        .await;
        let root = sandbox.workdir().to_string_lossy().into_owned();
        match ran_outcome(&outcome.exit, &output, which, timeout) {
            Some(why) => Ran::Failed(why),
            None => Ran::Found(parse(checker.format, &output.output, &root)),
        }
    }
}

/// The most diagnostics one `check` call returns to the model.
const MAX_TOOL_DIAGNOSTICS: usize = 50;

impl Hub {
    /// The built-in agent's `check`: every checker on the sandbox as it is now, within the
    /// checks' budget and the run's time; the diagnostics on the lines the agent added or
    /// changed ([`on_added_lines`]), at most [`MAX_TOOL_DIAGNOSTICS`], and a note per checker
    /// that gave nothing. The base is not checked (the sandbox holds the agent's work), so a
    /// diagnostic the change causes elsewhere shows only in the review's checks.
    pub(crate) async fn check_tool(
        self: &Arc<Self>,
        run: &BuiltinRun,
    ) -> Result<Value, ToolFailure> {
        let checks = &self.cfg().checks;
        if checks.checkers.is_empty() {
            return Err(ToolFailure::Message(
                "no checkers are configured ([[check]] in the hub's config)".into(),
            ));
        }
        let hunks = self
            .agent_hunks(run)
            .await
            .map_err(|e| ToolFailure::Message(e.to_string()))?;
        let left = run.deadline.saturating_duration_since(Instant::now());
        let deadline = Instant::now() + checks.budget.min(left);
        let (mut diagnostics, mut notes) = (Vec::new(), Vec::new());
        for checker in &checks.checkers {
            let left = deadline.saturating_duration_since(Instant::now());
            let ran = if left.is_zero() {
                Ran::Failed("not run: no time left".into())
            } else {
                let which = "your changes";
                self.run_checker(run.sandbox.as_ref(), checker, which, left, &run.cancel)
                    .await
            };
            match ran {
                Ran::Found(found) => diagnostics.extend(
                    on_added_lines(&found, &hunks)
                        .into_iter()
                        .map(|f| tool_diagnostic(&checker.name, f)),
                ),
                Ran::Failed(why) => notes.push(format!("{}: {why}", checker.name)),
            }
        }
        if run.cancel.is_cancelled() {
            return Err(ToolFailure::Cancelled);
        }
        let more = diagnostics.len().saturating_sub(MAX_TOOL_DIAGNOSTICS);
        diagnostics.truncate(MAX_TOOL_DIAGNOSTICS);
        Ok(json!({"diagnostics": diagnostics, "more": more, "notes": notes}))
    }

    /// The hunks of what the agent changed so far against its run's base.
    async fn agent_hunks(self: &Arc<Self>, run: &BuiltinRun) -> Result<Vec<HunkRec>, AppError> {
        let base = self
            .runs()
            .active
            .lock()
            .map_err(|_| poisoned())?
            .get(&run.run_id)
            .map(|a| a.base_tree.clone())
            .ok_or_else(|| AppError::internal(format!("run {} is not active", run.run_id)))?;
        let sandbox = run.sandbox.clone();
        self.blocking(move |hub| {
            let fail = |e: &dyn std::fmt::Display| {
                AppError::internal(format!("reading your changes: {e}"))
            };
            let back = sandbox
                .snapshot(hub.store(), &base, DEFAULT_FILE_CAP)
                .map_err(|e| fail(&e))?;
            // Cut as a publish cuts them: the lines are the same whichever way.
            build_hunks(
                Blobs::stored(hub.store()),
                "check",
                &base,
                &back.changes,
                &|_| true,
                hub.cfg().review.hunk_limits,
            )
            .map_err(|e| fail(&e))
        })
        .await
    }
}

/// One diagnostic as the model gets it.
fn tool_diagnostic(checker: &str, f: &Found) -> Value {
    json!({
        "checker": checker,
        "severity": f.severity.as_str(),
        "code": f.code,
        "file": f.file,
        "line": f.line,
        "column": f.column,
        "message": f.message,
    })
}

/// Why a checker's run gives nothing to compare (None: it ran to its end, whatever its exit
/// status — linters exit non-zero when they find something).
fn ran_outcome(exit: &Exit, output: &Capped, which: &str, timeout: Duration) -> Option<String> {
    if output.over {
        return Some(format!(
            "its output on {which} passed {} bytes: stopped, left out",
            output.max
        ));
    }
    match exit {
        Exit::Code(0..=125) => None,
        Exit::Code(126 | 127) => Some(format!(
            "could not be run on {which}: {}",
            output.last_stderr().unwrap_or("command not found")
        )),
        Exit::TimedOut => Some(format!(
            "timed out on {which} after {}s (the checks' budget): stopped, left out",
            timeout.as_secs().max(1)
        )),
        other => Some(format!("{other} on {which}")),
    }
}

/// A checker's output, kept up to `max` bytes: past that it is stopped (`stop`), and what it
/// printed is not read at all (a cut JSON array or a half list of diagnostics would only
/// mislead).
struct Capped {
    output: Output,
    bytes: usize,
    max: usize,
    over: bool,
    stop: CancellationToken,
}

impl Capped {
    fn new(max: usize, stop: CancellationToken) -> Self {
        Capped {
            output: Output::default(),
            bytes: 0,
            max,
            over: false,
            stop,
        }
    }

    fn push(&mut self, stream: Stream, line: &str) {
        if self.over {
            return;
        }
        self.bytes += line.len() + 1;
        if self.bytes > self.max {
            self.over = true;
            self.output = Output::default();
            self.stop.cancel();
            return;
        }
        match stream {
            Stream::Stdout => self.output.stdout.push(line.to_string()),
            Stream::Stderr => self.output.stderr.push(line.to_string()),
        }
    }

    fn last_stderr(&self) -> Option<&str> {
        self.output
            .stderr
            .iter()
            .rev()
            .map(|l| l.trim())
            .find(|l| !l.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_its_cap_stops_the_checker_and_keeps_nothing() {
        let stop = CancellationToken::new();
        let mut c = Capped::new(100, stop.clone());
        c.push(Stream::Stdout, "a.rs:1: w");
        assert!(!stop.is_cancelled());
        assert_eq!(c.output.stdout.len(), 1);
        for _ in 0..1000 {
            c.push(Stream::Stderr, &"y".repeat(50));
        }
        assert!(stop.is_cancelled() && c.over);
        assert!(c.output.stdout.is_empty() && c.output.stderr.is_empty());
        let why = ran_outcome(&Exit::Cancelled, &c, "the run", Duration::from_secs(5));
        assert_eq!(
            why.as_deref(),
            Some("its output on the run passed 100 bytes: stopped, left out")
        );
        let fine = Capped::new(100, CancellationToken::new());
        assert_eq!(
            ran_outcome(&Exit::Code(1), &fine, "the run", Duration::ZERO),
            None
        );
        assert!(
            ran_outcome(&Exit::TimedOut, &fine, "the base", Duration::from_secs(3))
                .unwrap()
                .starts_with("timed out on the base after 3s")
        );
    }
}

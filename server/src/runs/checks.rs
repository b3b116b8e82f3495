//! Checks after a run (`[[check]]`): each configured checker is run on the tree of every
//! suggestion the run published and on the run's base, and what is new or fixed is mapped to
//! the hunks ([`crate::model::diagnostics`]), journaled (a `checks` record: see
//! [`Record::Checks`]), and announced as `suggestion.checked`.
//!
//! Where: in the run's own sandbox slot, still held after its agent ended, brought first to
//! the suggestion's tree and then to the base (each [`Sandbox::prepare`], the sync a run starts
//! with). So the checkers run exactly as agents do — as the sandbox user under
//! `--isolation user`, with the scrubbed environment, the same limits and kill-on-exit — on
//! trees that hold only what the sandbox may have (sensitive files withheld), and the base
//! needs no second checkout: the slot goes back to the base before its next run anyway.
//!
//! When: after the suggestion is announced, never before, so nothing a checker does holds the
//! suggestion back; the slot waits for the checks, within `[limits] checks_budget_secs` for
//! all of them together. A checker past the budget, or past `max_check_output_bytes` of output,
//! is stopped and named in the result's `notes`; its diagnostics are left out on both sides
//! (comparing a finished side with an unfinished one would call everything new or fixed).

use std::sync::Arc;
use std::time::Instant;

use hunkgate_sandbox::store::FlatTree;
use hunkgate_sandbox::workspace::Sandbox;

use crate::agent::checker::Ran;
use crate::config::checkers::Checker;
use crate::error::AppError;
use crate::hub::registry::poisoned;
use crate::hub::Hub;
use crate::model::diagnostics::classify;
use crate::model::suggestion::oid;
use crate::protocol::{ChecksState, ChecksView, Diagnostic, DiagnosticChange, Event};
use crate::store::journal::Record;

/// The most diagnostics a suggestion keeps from its checks; the notes say how many more there
/// were.
pub const MAX_DIAGNOSTICS: usize = 500;

impl Hub {
    /// Check each open suggestion `run_id` published, against `base`, in its slot's `sandbox`
    /// (see the module's documentation). Does nothing without `[[check]]` tables; failures are
    /// reported in the suggestion's `checks`, or logged.
    pub(super) async fn check_run(
        self: &Arc<Self>,
        run_id: &str,
        sandbox: &Arc<dyn Sandbox>,
        base: Arc<FlatTree>,
    ) {
        let checks = &self.cfg().checks;
        if checks.checkers.is_empty() {
            return;
        }
        let suggestions = match self.open_suggestions_of(run_id) {
            Ok(s) if !s.is_empty() => s,
            _ => return,
        };
        let deadline = Instant::now() + checks.budget;
        self.run_status(
            run_id,
            "checking",
            format!(
                "Checking the suggestion and its base: {}",
                checks
                    .checkers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        let mut checked = Vec::new();
        for (sid, commit) in suggestions {
            let tree = self.run_tree(&commit).await;
            let ran = match tree {
                Ok(tree) => self.check_tree(sandbox, tree, "the run", deadline).await,
                Err(e) => self.all_failed(&format!("its tree could not be read: {e}")),
            };
            checked.push((sid, ran));
        }
        let on_base = self.check_tree(sandbox, base, "the base", deadline).await;
        for (sid, on_run) in checked {
            if let Err(e) = self.record_checks(run_id, &sid, &on_base, &on_run) {
                tracing::warn!(error = %e, suggestion = sid, "recording a suggestion's checks");
            }
        }
    }

    /// The run's suggestions not yet completed, with their run commits.
    fn open_suggestions_of(&self, run_id: &str) -> Result<Vec<(String, String)>, AppError> {
        let st = self.lock()?;
        let Some(run) = st.runs.get(run_id) else {
            return Ok(Vec::new());
        };
        Ok(run
            .suggestion_ids
            .iter()
            .filter_map(|id| st.suggestions.get(id))
            .filter(|s| s.closed.is_none())
            .map(|s| (s.id.clone(), s.run_commit.clone()))
            .collect())
    }

    /// The tree of run commit `commit`, from the checkpoint store.
    async fn run_tree(self: &Arc<Self>, commit: &str) -> Result<Arc<FlatTree>, AppError> {
        let commit =
            oid(commit).ok_or_else(|| AppError::internal(format!("run commit {commit:?}")))?;
        self.blocking(move |hub| {
            hub.store()
                .read_tree(commit)
                .map(Arc::new)
                .map_err(|e| AppError::failed("reading the run's tree", e))
        })
        .await
    }

    /// Every checker's result when none could run, and why.
    fn all_failed(&self, why: &str) -> Vec<Ran> {
        self.cfg()
            .checks
            .checkers
            .iter()
            .map(|_| Ran::Failed(why.to_string()))
            .collect()
    }

    /// Bring the slot to `tree` and run every checker on it, one after the other, until
    /// `deadline`. `which` names the tree in the notes.
    async fn check_tree(
        self: &Arc<Self>,
        sandbox: &Arc<dyn Sandbox>,
        tree: Arc<FlatTree>,
        which: &str,
        deadline: Instant,
    ) -> Vec<Ran> {
        let sb = sandbox.clone();
        let prepared = self
            .blocking(move |hub| {
                sb.prepare(hub.store(), &tree)
                    .map_err(|e| AppError::failed("preparing the sandbox", e))
            })
            .await;
        if let Err(e) = prepared {
            return self.all_failed(&format!("{which} could not be put in the sandbox: {e}"));
        }
        let mut out = Vec::new();
        for checker in &self.cfg().checks.checkers {
            let left = deadline.saturating_duration_since(Instant::now());
            out.push(if left.is_zero() {
                Ran::Failed(format!(
                    "not run on {which}: the checks' budget ({}s) was spent",
                    self.cfg().checks.budget.as_secs()
                ))
            } else {
                self.run_checker(sandbox.as_ref(), checker, which, left, self.shutdown())
                    .await
            });
        }
        out
    }

    /// Journal what the checks found on suggestion `sid` (new and fixed, mapped to its hunks),
    /// then announce it (`suggestion.checked`).
    fn record_checks(
        &self,
        run_id: &str,
        sid: &str,
        on_base: &[Ran],
        on_run: &[Ran],
    ) -> Result<(), AppError> {
        let checkers = &self.cfg().checks.checkers;
        let mut st = self.lock()?;
        let Some(s) = st.suggestions.get_mut(sid) else {
            return Ok(());
        };
        let (view, diagnostics) = compare(checkers, on_base, on_run, &s.hunks);
        self.journal_append(&Record::Checks {
            suggestion_id: sid.to_string(),
            checks: view.clone(),
            diagnostics: diagnostics.clone(),
        })?;
        s.checks = Some(view.clone());
        s.diagnostics = diagnostics.clone();
        drop(st);
        let count = |c: DiagnosticChange| diagnostics.iter().filter(|d| d.change == c).count();
        let (new, fixed) = (count(DiagnosticChange::New), count(DiagnosticChange::Fixed));
        self.bus().emit(Event::Checked {
            seq: 0,
            suggestion_id: sid.to_string(),
            run_id: run_id.to_string(),
            checks: view.clone(),
            diagnostics,
        });
        let mut message = format!("Checks: {new} new, {fixed} fixed diagnostic(s)");
        for note in &view.notes {
            message.push_str("; ");
            message.push_str(note);
        }
        self.run_status(run_id, "checked", message);
        Ok(())
    }
}

/// The checks' view and the diagnostics of one suggestion: each checker's new and fixed ones
/// when it ran to its end on both trees, a note for each that did not.
fn compare(
    checkers: &[Checker],
    on_base: &[Ran],
    on_run: &[Ran],
    hunks: &[crate::model::suggestion::HunkRec],
) -> (ChecksView, Vec<Diagnostic>) {
    let mut notes = Vec::new();
    let mut diagnostics = Vec::new();
    for ((checker, base), run) in checkers.iter().zip(on_base).zip(on_run) {
        match (base, run) {
            (Ran::Found(base), Ran::Found(run)) => {
                diagnostics.extend(classify(&checker.name, base, run, hunks));
            }
            // The run's tree is checked first: its failure is the one that cost the budget.
            (_, Ran::Failed(why)) | (Ran::Failed(why), _) => {
                notes.push(format!("{}: {why}", checker.name));
            }
        }
    }
    if diagnostics.len() > MAX_DIAGNOSTICS {
        notes.push(format!(
            "{} more diagnostics left out (a suggestion keeps {MAX_DIAGNOSTICS})",
            diagnostics.len() - MAX_DIAGNOSTICS
        ));
        diagnostics.truncate(MAX_DIAGNOSTICS);
    }
    let state = if notes.is_empty() {
        ChecksState::Done
    } else {
        ChecksState::Incomplete
    };
    let view = ChecksView {
        state,
        notes,
        checkers: checkers.iter().map(|c| c.name.clone()).collect(),
    };
    (view, diagnostics)
}

/// The base tree of a run that is active, for its checks.
pub(super) fn active_base(hub: &Hub, run_id: &str) -> Result<Option<Arc<FlatTree>>, AppError> {
    Ok(hub
        .runs()
        .active
        .lock()
        .map_err(|_| poisoned())?
        .get(run_id)
        .map(|a| a.base_tree.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::checker_output::{Format, Found};
    use crate::protocol::Severity;

    fn found(line: usize) -> Found {
        Found {
            file: "a.rs".into(),
            line,
            column: None,
            severity: Severity::Error,
            code: None,
            message: "m".into(),
        }
    }

    fn checker(name: &str) -> Checker {
        Checker {
            name: name.into(),
            command: "true".into(),
            format: Format::Gnu,
        }
    }

    #[test]
    fn a_checker_that_did_not_finish_on_either_side_is_a_note_not_diagnostics() {
        let checkers = [checker("a"), checker("b"), checker("c")];
        let on_base = [
            Ran::Found(vec![]),
            Ran::Failed("timed out on the base".into()),
            Ran::Found(vec![]),
        ];
        let on_run = [
            Ran::Found(vec![found(1)]),
            Ran::Found(vec![found(2)]),
            Ran::Failed("its output passed".into()),
        ];
        let (view, diagnostics) = compare(&checkers, &on_base, &on_run, &[]);
        assert_eq!(view.state, ChecksState::Incomplete);
        assert_eq!(
            view.notes,
            vec!["b: timed out on the base", "c: its output passed"]
        );
        assert_eq!(diagnostics.len(), 1);
        assert_eq!(
            (diagnostics[0].source.as_str(), diagnostics[0].line),
            ("a", 1)
        );
        let (done, _) = compare(&checkers[..1], &on_base[..1], &on_run[..1], &[]);
        assert_eq!(done.state, ChecksState::Done);
    }

    #[test]
    fn diagnostics_are_capped_and_the_cap_said() {
        let many: Vec<Found> = (1..=MAX_DIAGNOSTICS + 7).map(found).collect();
        let (view, diagnostics) = compare(
            &[checker("a")],
            &[Ran::Found(vec![])],
            &[Ran::Found(many)],
            &[],
        );
        assert_eq!(diagnostics.len(), MAX_DIAGNOSTICS);
        assert_eq!(
            view.notes,
            vec![format!(
                "7 more diagnostics left out (a suggestion keeps {MAX_DIAGNOSTICS})"
            )]
        );
    }
}

//! `hunkgate runs` (the hub's runs and their state) and `hunkgate cancel RUN` (stop one).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use serde_json::json;

use crate::cli::client::HubClient;
use crate::cli::term::{short, visible_line, wire};
use crate::cli::{reviewer_client, typed, ClientArgs};
use crate::protocol::{RunState, RunView};

/// How many finished runs `runs` (without `--all`) and `status` show, newest last.
pub const RECENT: usize = 5;

/// How long `cancel` waits for the run to stop before saying it is still stopping.
const STOP_WAIT: Duration = Duration::from_secs(30);

#[derive(serde::Deserialize)]
struct RunList {
    runs: Vec<RunView>,
}

/// A run that has not ended: queued, working, or waiting for the user's answer.
pub fn is_active(status: RunState) -> bool {
    matches!(
        status,
        RunState::Queued | RunState::Working | RunState::WaitingForUser
    )
}

/// The hub's runs, oldest first.
pub async fn fetch(c: &HubClient) -> anyhow::Result<Vec<RunView>> {
    let list: RunList = typed(c.get("/runs").await?)?;
    Ok(list.runs)
}

/// Every run that has not ended, and the [`RECENT`] newest that have (all with `all`), oldest
/// first.
pub fn shown(runs: Vec<RunView>, all: bool) -> Vec<RunView> {
    if all {
        return runs;
    }
    let finished = runs.iter().filter(|r| !is_active(r.status)).count();
    let mut skip = finished.saturating_sub(RECENT);
    runs.into_iter()
        .filter(|r| {
            if is_active(r.status) || skip == 0 {
                return true;
            }
            skip -= 1;
            false
        })
        .collect()
}

/// `<id8>  <state>  <created>  <prompt>  [-> <suggestions>]`, agent text made visible.
pub fn run_line(r: &RunView) -> String {
    let prompt: String = r.prompt.chars().take(60).collect();
    let ellipsis = if r.prompt.chars().count() > 60 {
        "…"
    } else {
        ""
    };
    let suggestions: Vec<String> = r.suggestion_ids.iter().map(|s| short(s)).collect();
    format!(
        "{}  {:<16} {}  {}{}{}",
        short(&r.run_id),
        wire(&r.status),
        visible_line(&r.created_at),
        visible_line(&prompt),
        ellipsis,
        if suggestions.is_empty() {
            String::new()
        } else {
            format!("  -> {}", suggestions.join(", "))
        }
    )
}

pub async fn runs(all: bool, client: ClientArgs) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let runs = shown(fetch(&c).await?, all);
    if client.json {
        println!("{}", json!({ "runs": runs }));
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        println!("no runs");
    }
    for r in &runs {
        println!("{}", run_line(r));
    }
    Ok(ExitCode::SUCCESS)
}

/// The one run whose id starts with `prefix`.
pub fn resolve<'a>(runs: &'a [RunView], prefix: &str) -> anyhow::Result<&'a RunView> {
    if let Some(r) = runs.iter().find(|r| r.run_id == prefix) {
        return Ok(r);
    }
    let hits: Vec<&RunView> = runs
        .iter()
        .filter(|r| !prefix.is_empty() && r.run_id.starts_with(prefix))
        .collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => bail!(
            "no run {:?} (`hunkgate runs --all` lists them)",
            visible_line(prefix)
        ),
        many => bail!(
            "{:?} is the start of {} runs' ids: give more of it",
            visible_line(prefix),
            many.len()
        ),
    }
}

pub async fn cancel(run: String, client: ClientArgs) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let runs = fetch(&c).await?;
    let id = resolve(&runs, &run)?.run_id.clone();
    let v = cancel_and_wait(&c, &id).await?;
    if client.json {
        println!("{}", serde_json::to_value(&v)?);
    } else if is_active(v.status) {
        println!("run {id} is still stopping (`hunkgate runs` shows when it has)");
    } else {
        println!("run {id} {}", wire(&v.status));
    }
    Ok(ExitCode::SUCCESS)
}

/// Ask the hub to cancel `run_id` and wait (up to [`STOP_WAIT`]) until it has stopped: the run
/// as it is then.
pub async fn cancel_and_wait(c: &HubClient, run_id: &str) -> anyhow::Result<RunView> {
    c.post(&format!("/runs/{run_id}/cancel"), json!({})).await?;
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    loop {
        let v: RunView = typed(c.get(&format!("/runs/{run_id}")).await?)?;
        if !is_active(v.status) || tokio::time::Instant::now() >= deadline {
            return Ok(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, status: RunState) -> RunView {
        RunView {
            run_id: id.into(),
            status,
            prompt: "fix\x1b[2J it".into(),
            agent: None,
            suggestion_ids: vec![],
            base_commit: None,
            error: None,
            created_at: "2026-12-07T03:00:00Z".into(),
            last_message: None,
            session_id: None,
            model: None,
            stop_reason: None,
            usage: None,
            question: None,
            agent_info: None,
            provider: None,
            route: None,
            acp_session_id: None,
        }
    }

    #[test]
    fn active_runs_are_always_shown_finished_ones_only_the_newest() {
        let mut runs: Vec<RunView> = (0..8)
            .map(|i| run(&format!("f{i}"), RunState::Ready))
            .collect();
        runs.insert(1, run("w", RunState::Working));
        let ids = |v: Vec<RunView>| v.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
        assert_eq!(
            ids(shown(runs.clone(), false)),
            ["w", "f3", "f4", "f5", "f6", "f7"]
        );
        assert_eq!(shown(runs, true).len(), 9);
    }

    #[test]
    fn a_run_line_shows_id_state_and_prompt_made_visible() {
        let mut r = run("0123456789abcdef", RunState::WaitingForUser);
        r.suggestion_ids = vec!["fedcba9876543210".into()];
        assert_eq!(
            run_line(&r),
            "01234567  waiting_for_user 2026-12-07T03:00:00Z  fix^[[2J it  -> fedcba98"
        );
    }

    #[test]
    fn a_run_is_named_by_its_id_or_a_unique_prefix() {
        let runs = vec![run("abc1", RunState::Working), run("abd2", RunState::Ready)];
        assert_eq!(resolve(&runs, "abc").unwrap().run_id, "abc1");
        assert_eq!(resolve(&runs, "abd2").unwrap().run_id, "abd2");
        let e = resolve(&runs, "ab").unwrap_err().to_string();
        assert!(e.contains("2 runs"), "{e}");
        let e = resolve(&runs, "x").unwrap_err().to_string();
        assert!(e.contains("no run"), "{e}");
        assert!(resolve(&runs, "").is_err());
    }
}

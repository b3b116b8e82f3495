//! `hunkgate status`: for the user, what is going on — the hub, its runs and the suggestions
//! waiting for review; for an agent inside a run (the hub's variables set, or a message given),
//! the agent's one-line status as before ([`super::agent::status`], also `agent-status`).

use std::process::ExitCode;

use anyhow::bail;
use serde_json::{json, Value};

use crate::cli::client::{HubClient, TOKEN_VAR, URL_VAR};
use crate::cli::runs::{fetch, is_active, run_line, shown};
use crate::cli::term::{short, visible_line, wire};
use crate::cli::{repo_root, reviewer_client, typed, ClientArgs};
use crate::config;
use crate::protocol::{SuggestionList, SuggestionSummary};

/// Which side `hunkgate status` is on.
#[derive(Debug, PartialEq, Eq)]
pub enum Side {
    /// The agent's status message (`status MESSAGE [--state]`).
    Agent { message: String, state: String },
    /// The user's view of the hub.
    User,
}

/// An agent gets today's behaviour whenever it could mean it: a message or `--state` given, or
/// one of the variables the hub sets for agents present (`agent_vars`, the names of those set).
/// A message without the variables is still the agent's call, and fails with the missing
/// variables named.
pub fn side(
    message: Option<String>,
    state: Option<String>,
    agent_vars: &[&str],
) -> anyhow::Result<Side> {
    match (message, state) {
        (Some(message), state) => Ok(Side::Agent {
            message,
            state: state.unwrap_or_else(|| "working".into()),
        }),
        (None, Some(_)) => {
            bail!("`hunkgate status --state` is the agent's status: give it a MESSAGE")
        }
        (None, None) if !agent_vars.is_empty() => {
            let (names, verb) = match agent_vars {
                [one] => (one.to_string(), "is"),
                many => (many.join(" and "), "are"),
            };
            bail!(
                "{names} {verb} set, as inside an agent run, where `hunkgate status` sends the \
                 agent's status: give it a MESSAGE (or, outside an agent run, unset {names} \
                 to see the hub's status)"
            )
        }
        (None, None) => Ok(Side::User),
    }
}

/// Which of the variables the hub sets for an agent are present.
pub fn agent_env() -> Vec<&'static str> {
    [URL_VAR, TOKEN_VAR]
        .into_iter()
        .filter(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()))
        .collect()
}

pub async fn status(
    message: Option<String>,
    state: Option<String>,
    client: ClientArgs,
) -> anyhow::Result<ExitCode> {
    match side(message, state, &agent_env())? {
        Side::Agent { message, state } => crate::cli::agent::status(message, state).await,
        Side::User => user_status(client).await,
    }
}

async fn user_status(client: ClientArgs) -> anyhow::Result<ExitCode> {
    let state_dir = match &client.state_dir {
        Some(d) => d.clone(),
        None => config::default_state_dir(&repo_root(client.repo.clone())?)?,
    };
    let c = reviewer_client(&client).await?;
    let hub_json: Value = std::fs::read_to_string(state_dir.join("hub.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let health = c.get("/health").await?;
    let runs = shown(fetch(&c).await?, false);
    let pending = pending_suggestions(&c).await?;
    if client.json {
        println!(
            "{}",
            json!({"url": c.url(), "repo": hub_json["repo"], "state_dir": state_dir,
                "version": health["version"], "state_bytes": health["stateBytes"],
                "runs": runs, "pending": pending})
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("hub        {}", visible_line(c.url()));
    if let Some(repo) = hub_json["repo"].as_str() {
        println!("repository {}", visible_line(repo));
    }
    println!(
        "state dir  {}",
        visible_line(&state_dir.display().to_string())
    );
    if let Some(bytes) = health["stateBytes"].as_u64() {
        println!("state size {}", crate::cli::gc::human(bytes));
    }
    println!(
        "version    {}",
        visible_line(health["version"].as_str().unwrap_or("?"))
    );
    let active = runs.iter().filter(|r| is_active(r.status)).count();
    println!(
        "\nruns: {active} queued or running{}",
        if runs.len() > active {
            ", recent ones:"
        } else {
            ""
        }
    );
    for r in &runs {
        println!("  {}", run_line(r));
    }
    println!("\nsuggestions with pending hunks: {}", pending.len());
    for s in &pending {
        println!("  {}", pending_line(s));
    }
    Ok(ExitCode::SUCCESS)
}

/// The open suggestions that still have hunks to review.
async fn pending_suggestions(c: &HubClient) -> anyhow::Result<Vec<SuggestionSummary>> {
    let list: SuggestionList = typed(c.get("/suggestions").await?)?;
    Ok(list
        .suggestions
        .into_iter()
        .filter(|s| s.closed.is_none() && s.reviewed_count < s.hunk_count)
        .collect())
}

/// `<id8>  <state>  <n> of <m> hunks pending  <description>`.
fn pending_line(s: &SuggestionSummary) -> String {
    format!(
        "{}  {:<8} {} of {} hunks pending  {}",
        short(&s.id),
        wire(&s.status),
        s.hunk_count - s.reviewed_count,
        s.hunk_count,
        visible_line(&s.description)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_or_the_agent_variables_keep_the_agent_side() {
        let agent = |m: &str, s: &str| Side::Agent {
            message: m.into(),
            state: s.into(),
        };
        let both = [URL_VAR, TOKEN_VAR];
        assert_eq!(
            side(Some("hi".into()), None, &[]).unwrap(),
            agent("hi", "working")
        );
        assert_eq!(
            side(Some("hi".into()), Some("testing".into()), &both).unwrap(),
            agent("hi", "testing")
        );
        assert_eq!(side(None, None, &[]).unwrap(), Side::User);
        let e = side(None, None, &both).unwrap_err().to_string();
        assert!(e.contains("MESSAGE") && e.contains(URL_VAR), "{e}");
        assert!(
            e.contains(&format!("{URL_VAR} and {TOKEN_VAR} are set")),
            "{e}"
        );
        // One of them set (a user who pointed HUNKGATE_URL at a hub): the message names only
        // that one, and says how to get the hub's status instead.
        let e = side(None, None, &[URL_VAR]).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{URL_VAR} is set")), "{e}");
        assert!(!e.contains(TOKEN_VAR), "{e}");
        assert!(
            e.contains(&format!("unset {URL_VAR} to see the hub's status")),
            "{e}"
        );
        assert!(side(None, Some("testing".into()), &[]).is_err());
    }
}

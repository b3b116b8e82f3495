//! The agent's side of the command line (inside a run, with the run's agent token from the
//! environment): `hunkgate publish` and `hunkgate agent-status` (also `hunkgate status MESSAGE`,
//! see [`super::status`]). `hunkgate mcp` is in [`super::mcp`].

use std::process::ExitCode;

use serde_json::json;

use crate::cli::client::HubClient;
use crate::cli::term::visible_line;
use crate::cli::typed;
use crate::protocol::PublishReply;

pub async fn publish(message: String, files: Vec<String>, json: bool) -> anyhow::Result<ExitCode> {
    let agent = HubClient::for_agent()?;
    let v = agent
        .post(
            "/agent/publish",
            json!({"description": message, "files": files}),
        )
        .await?;
    if json {
        println!("{v}");
    } else {
        let r: PublishReply = typed(v)?;
        println!(
            "published suggestion {} ({} hunks in {})",
            visible_line(&r.suggestion_id),
            r.hunk_count,
            r.files.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn status(message: String, state: String) -> anyhow::Result<ExitCode> {
    let agent = HubClient::for_agent()?;
    agent
        .post(
            "/agent/status",
            json!({"message": message, "status": state}),
        )
        .await?;
    Ok(ExitCode::SUCCESS)
}

//! jj in the sandbox: each run is its own jj change.
//!
//! jj runs only inside the sandbox, through [`Sandbox::command`] — as the sandbox's identity,
//! never as the hub reading the sandbox — and the hub still reads the result as plain files.
//! The checkpoint commits stay in the hub's own store either way; jj adds a change id the user
//! can find in the sandbox (`jj log`) and that the protocol reports as `jj_change_id`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::workspace::Sandbox;

#[derive(Debug, thiserror::Error)]
pub enum JjError {
    #[error("jj {args}: could not run jj ({source}); install jj (https://jj-vcs.github.io) or serve with --vcs git")]
    Spawn {
        args: String,
        #[source]
        source: std::io::Error,
    },
    #[error("jj {args} failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("jj {args} timed out")]
    TimedOut { args: String },
}

/// Which version control the sandbox uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vcs {
    Git,
    Jj,
}

impl Vcs {
    /// jj when the repository has a `.jj` directory, git otherwise.
    pub fn detect(repo_root: &Path) -> Vcs {
        if repo_root.join(".jj").is_dir() {
            Vcs::Jj
        } else {
            Vcs::Git
        }
    }
}

const JJ_TIMEOUT: Duration = Duration::from_secs(120);

async fn jj(
    sandbox: &dyn Sandbox,
    env: &[(String, String)],
    args: &[&str],
) -> Result<String, JjError> {
    let mut argv = vec![
        "jj".to_string(),
        "--no-pager".into(),
        "--color=never".into(),
        "--config".into(),
        "user.name=hunkgate".into(),
        "--config".into(),
        "user.email=hunkgate@localhost".into(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let shown = args.join(" ");
    let mut cmd = sandbox.command(&argv, env);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|source| JjError::Spawn {
        args: shown.clone(),
        source,
    })?;
    let out = tokio::time::timeout(JJ_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| JjError::TimedOut {
            args: shown.clone(),
        })?
        .map_err(|source| JjError::Spawn {
            args: shown.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(JjError::Failed {
            args: shown,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Turn the freshly prepared sandbox (a `.git` whose `main` is the base) into a colocated jj
/// repository and start the run's own change on the base: `jj new main -m "suggestion: …"`.
/// Returns the change id.
pub async fn start_change(
    sandbox: &dyn Sandbox,
    env: &[(String, String)],
    message: &str,
) -> Result<String, JjError> {
    jj(sandbox, env, &["git", "init", "--colocate"]).await?;
    let description = format!("suggestion: {message}");
    jj(sandbox, env, &["new", "main", "-m", &description]).await?;
    change_id(sandbox, env).await
}

/// The change id of the working-copy change.
pub async fn change_id(sandbox: &dyn Sandbox, env: &[(String, String)]) -> Result<String, JjError> {
    jj(
        sandbox,
        env,
        &["log", "-r", "@", "--no-graph", "-T", "change_id"],
    )
    .await
}

/// Name the run's change after what it turned out to be.
pub async fn describe(
    sandbox: &dyn Sandbox,
    env: &[(String, String)],
    change: &str,
    message: &str,
) -> Result<(), JjError> {
    let description = format!("suggestion: {message}");
    jj(sandbox, env, &["describe", change, "-m", &description]).await?;
    Ok(())
}

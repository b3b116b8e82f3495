//! Finding the hub a reviewer's command talks to, and its token. In this order:
//!
//! 1. `--url`/`HUNKGATE_HUB_URL` (with `--token-file`/`HUNKGATE_TOKEN_FILE`, else the token of
//!    the state dir or the record below);
//! 2. `--state-dir`/`HUNKGATE_STATE_DIR`: its `hub.json` and `token`;
//! 3. the discovery record of the repository around the current directory (or `--repo`), see
//!    [`crate::discovery`];
//! 4. the default state dir's `hub.json` and `token`, for a hub of an older version that writes
//!    no record.
//!
//! Never a port guessed: with none of these, "no hub is running for `<repo>`". Whatever was
//! found, the hub's `/health` must name the repository before the token is sent to it (a hub of
//! an older version names none: accepted only in step 4, where its own state dir vouches for it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;
use serde_json::Value;

use crate::cli::client::HubClient;
use crate::cli::ClientArgs;
use crate::config;
use crate::discovery::{self, Stale};

/// `/health` answers at once; a listener that does not is not a hub to wait for.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// A state dir's `hub.json` as any version writes it (older ones: `url`, `pid`, `version`,
/// `repo`; this one the whole [`discovery::Record`]).
#[derive(Deserialize)]
struct HubJson {
    url: String,
    pid: Option<u32>,
    started: Option<String>,
    repo: Option<PathBuf>,
}

impl HubJson {
    /// `Some` when it names a process that has exited or is not the one that wrote it.
    fn stale(&self) -> Option<Stale> {
        let pid = self.pid?;
        match (discovery::process_start(pid), &self.started) {
            (None, _) => Some(Stale::Gone { pid }),
            (Some(now), Some(then)) if &now != then => Some(Stale::Reused { pid }),
            _ => None,
        }
    }
}

/// Where a hub was found: its URL and the file holding its reviewer token.
struct Found {
    url: String,
    token_file: PathBuf,
}

/// The reviewer's client for the hub serving the repository (see the module docs).
pub(crate) async fn reviewer_client(args: &ClientArgs) -> anyhow::Result<HubClient> {
    // Outside any repository an explicit URL or state dir still works, unchecked against one.
    let repo = match super::repo_root(args.repo.clone()) {
        Ok(r) => Some(r),
        Err(e) if args.repo.is_some() || (args.url.is_none() && args.state_dir.is_none()) => {
            return Err(e)
        }
        Err(_) => None,
    };
    let found = find(args, repo.as_deref()).await?;
    let token_file = args.token_file.clone().unwrap_or(found.token_file);
    let token = std::fs::read_to_string(&token_file)
        .with_context(|| format!("reading the hub token {}", token_file.display()))?
        .trim()
        .to_string();
    Ok(HubClient::new(&found.url, token)?)
}

/// The URL of the hub of the repository around the current directory (steps 3 and 4: its
/// discovery record, else its default state dir), checked against its `/health`.
pub(crate) async fn hub_url_here() -> anyhow::Result<String> {
    let repo = super::repo_root(None)?;
    let args = ClientArgs {
        repo: None,
        state_dir: None,
        url: None,
        token_file: None,
        json: false,
    };
    Ok(find(&args, Some(&repo)).await?.url)
}

async fn find(args: &ClientArgs, repo: Option<&Path>) -> anyhow::Result<Found> {
    if let Some(url) = &args.url {
        check_serves(url, repo, false).await?;
        let token_file = match (&args.token_file, &args.state_dir, repo) {
            (Some(f), _, _) => f.clone(),
            (None, Some(d), _) => d.join("token"),
            (None, None, Some(repo)) => match live_record(repo) {
                Some(rec) => rec.token_file,
                None => config::default_state_dir(repo)?.join("token"),
            },
            (None, None, None) => {
                bail!("--url outside a repository needs --token-file (or HUNKGATE_TOKEN_FILE)")
            }
        };
        return Ok(Found {
            url: url.clone(),
            token_file,
        });
    }
    if let Some(dir) = &args.state_dir {
        return from_state_dir(dir, repo, false).await?.ok_or_else(|| {
            anyhow!(
                "no hub is running with the state dir {} (it has no hub.json of a running hub): start one with `hunkgate serve --state-dir {}`",
                dir.display(),
                dir.display()
            )
        });
    }
    let repo = repo.expect("without --url or --state-dir the repository is known");
    let mut why = String::new();
    let records = discovery::dir()?;
    match discovery::read(&records, repo) {
        Ok(Some(rec)) => match rec.stale() {
            None => match serves(&rec.url, repo, false).await {
                Ok(()) => {
                    return Ok(Found {
                        url: rec.url,
                        token_file: rec.token_file,
                    })
                }
                Err(e) => {
                    why = format!(" (its discovery record names a hub that is not there: {e:#})")
                }
            },
            Some(stale) => {
                why = format!(
                    " (its discovery record {} is stale: {stale})",
                    discovery::record_path(&records, repo).display()
                )
            }
        },
        Ok(None) => {}
        Err(e) => why = format!(" ({e:#})"),
    }
    // A hub of an older version, in the default state dir.
    let default = config::default_state_dir(repo)?;
    if let Some(found) = from_state_dir(&default, Some(repo), true).await? {
        return Ok(found);
    }
    bail!(
        "no hub is running for {}{why}: start one with `hunkgate serve`",
        repo.display()
    )
}

/// The hub of `dir`'s `hub.json`, if that names a running process; an error if that hub serves
/// another repository than `repo`.
async fn from_state_dir(
    dir: &Path,
    repo: Option<&Path>,
    unnamed_ok: bool,
) -> anyhow::Result<Option<Found>> {
    let path = dir.join("hub.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let hub: HubJson = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a hub's hub.json", path.display()))?;
    if hub.stale().is_some() {
        return Ok(None);
    }
    // Outside a repository, the one the hub.json names is the one expected.
    let expected = repo.or(hub.repo.as_deref());
    check_serves(&hub.url, expected, unnamed_ok).await?;
    Ok(Some(Found {
        url: hub.url,
        token_file: dir.join("token"),
    }))
}

/// The record of `repo` if its process still runs (its hub is checked when it is used).
fn live_record(repo: &Path) -> Option<discovery::Record> {
    let rec = discovery::read(&discovery::dir().ok()?, repo).ok()??;
    rec.stale().is_none().then_some(rec)
}

/// [`serves`] when a repository is expected; otherwise only that something answers `/health`.
async fn check_serves(url: &str, repo: Option<&Path>, unnamed_ok: bool) -> anyhow::Result<()> {
    match repo {
        Some(repo) => serves(url, repo, unnamed_ok).await,
        None => health(url).await.map(drop),
    }
}

/// Whether the hub at `url` serves `repo`, asked of its `/health` without a token. A hub that
/// names another repository is an error naming both; one that names none (older than the
/// field) passes only when `unnamed_ok`.
async fn serves(url: &str, repo: &Path, unnamed_ok: bool) -> anyhow::Result<()> {
    let health = health(url).await?;
    match health["repo"].as_str() {
        Some(r) if Path::new(r) == repo => Ok(()),
        Some(r) => bail!(
            "the hub at {url} serves {r}, not {}: the token was not sent (start a hub for this repository with `hunkgate serve`, or point --url/--state-dir at its own)",
            repo.display()
        ),
        None if unnamed_ok => Ok(()),
        None => bail!(
            "the hub at {url} does not say which repository it serves (a hub older than this hunkgate?): the token was not sent; restart it with this version"
        ),
    }
}

/// `GET {url}/health`, no token: what a hunkgate hub says about itself.
async fn health(url: &str) -> anyhow::Result<Value> {
    let base = url.trim_end_matches('/');
    // Checks the URL's form the way every client of the hub does.
    HubClient::new(base, String::new())?;
    let http = reqwest::Client::builder()
        .timeout(HEALTH_TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    let resp = http
        .get(format!("{base}/health"))
        .send()
        .await
        .with_context(|| format!("cannot reach the hub at {base}"))?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .await
        .ok()
        .filter(|v: &Value| status.is_success() && v["service"] == crate::protocol::SERVICE)
        .ok_or_else(|| anyhow!("{base} is not a hunkgate hub (its /health answered {status})"))?;
    Ok(v)
}

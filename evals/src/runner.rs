//! `hunkgate-evals run`: every task × agent against a real hub, through its public HTTP API.
//!
//! For each pair: the task's `repo/` becomes a fresh git repository in a temporary directory, a
//! `hunkgate serve` is started for it (`--port 0 --isolation none`), each run is posted with
//! `POST /runs`, polled with `GET /runs/:id`, its question answered with
//! `POST /runs/:id/clarify`, its hunks decided with `POST /feedback` by the task's reviewer policy
//! and closed with `POST /complete`; then the task's checks run on the checkout and one
//! [`ResultLine`] is appended to the results file.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::task::{files_under, Review, Task};

/// Environment variables the runner gives reference agents (passed through the hub's
/// environment scrub with `--agent-env`).
pub const ENV_TASK: &str = "HUNKGATE_EVAL_TASK";
pub const ENV_CHECKOUT: &str = "HUNKGATE_EVAL_CHECKOUT";
pub const ENV_RUN_FILE: &str = "HUNKGATE_EVAL_RUN_FILE";

/// The label of an [`Agent::Routed`]: this, then the mode.
pub const ROUTED_PREFIX: &str = "builtin@";

/// Who does the tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agent {
    /// A command template, run by the hub in the sandbox.
    Command(String),
    /// An agent the hub speaks the Agent Client Protocol with, by its command (`opencode acp`).
    Acp(String),
    /// The hub's built-in agent with this model (the hub gets `--provider-url`).
    Builtin { model: String },
    /// The hub's built-in agent in this `agent_mode` (`local`, `remote`, `hybrid_auto`), on
    /// the providers of the hub config (`[providers.*]`, `[routing]`): the rows the seed's
    /// §12 thresholds are set from.
    Routed { mode: String },
}

impl Agent {
    /// The name the hub records (`agent` in runs and the feedback log).
    pub fn label(&self) -> String {
        match self {
            Agent::Command(t) => t.clone(),
            // As the hub records it (`acp:` and the command).
            Agent::Acp(c) => format!("acp:{c}"),
            Agent::Builtin { model } => format!("builtin:{model}"),
            Agent::Routed { mode } => format!("{ROUTED_PREFIX}{mode}"),
        }
    }
    pub fn model(&self) -> Option<&str> {
        match self {
            Agent::Command(_) | Agent::Acp(_) | Agent::Routed { .. } => None,
            Agent::Builtin { model } => Some(model),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub hub: PathBuf,
    pub provider_url: Option<String>,
    pub jobs: usize,
    pub out: PathBuf,
    /// Print a progress line per finished pair on stderr.
    pub progress: bool,
    /// Each run's time limit in seconds, over the task's own (`timeout_secs`, default 60):
    /// for slow models.
    pub run_timeout: Option<u64>,
    /// A config file every hub is started with (`--config`; an absolute path). None: the hubs
    /// read no config file, not even the user's.
    pub hub_config: Option<PathBuf>,
    /// Keep each pair's checkout, hub state (feedback log, journal, checkpoints) and hub log in
    /// `<keep>/<task>--<agent>/` instead of a temporary directory.
    pub keep: Option<PathBuf>,
}

/// One (task, agent) outcome: a line of the results file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    pub task: String,
    pub tags: Vec<String>,
    pub agent: String,
    pub model: Option<String>,
    /// The last run's status (`ready`, `no_changes`, `failed`, …), the first that was not
    /// `ready` when one was not, or `runner_error` when the runner itself failed.
    pub status: String,
    /// Every check passed and the reviewer policy could be applied as written.
    pub success: bool,
    pub runs: usize,
    /// Hunks the reviewer decided (each once, by its final state; conflicts included).
    pub hunks_decided: usize,
    pub hunks_accepted: usize,
    pub hunks_modified: usize,
    pub hunks_rejected: usize,
    pub hunks_conflicts: usize,
    /// Every accept/modify applied without a conflict; `None` when none was attempted.
    pub apply_clean: Option<bool>,
    pub tool_calls: Option<u64>,
    /// Time from `POST /runs` until the run stopped (summed over the task's runs), without the
    /// review.
    pub wall_ms: u64,
    pub model_ms: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub clarification_asked: bool,
    pub stop_reason: Option<String>,
    /// Checks that failed and policy steps that could not be applied.
    #[serde(default)]
    pub failures: Vec<String>,
    pub error: Option<String>,
    /// Replay tasks only: how the proposal compares with what the user kept and rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::replay::ReplayScore>,
    /// With checkers in the hub's config (`[[check]]`): the suggestions whose checks came, and
    /// the `new` diagnostics on them (on hunks and off), a quality measure of the proposal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub checked_suggestions: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub new_diagnostics: usize,
    /// The built-in agent's `agent_mode` (its runs' `route.mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    /// `hybrid_auto`: the trigger of each move to the remote provider, over the task's runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ResultLine {
    pub fn key(&self) -> (String, String) {
        (self.task.clone(), self.agent.clone())
    }
}

/// Results already in `out` (a missing file is none). Unparsable lines are an error: the file
/// is not a results file, and appending to it would mix formats.
pub fn read_results(out: &Path) -> Result<Vec<ResultLine>> {
    let text = match std::fs::read_to_string(out) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", out.display())),
    };
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        lines.push(serde_json::from_str(l).with_context(|| {
            format!(
                "{}:{}: not a hunkgate-evals result line (use another --out)",
                out.display(),
                i + 1
            )
        })?);
    }
    Ok(lines)
}

/// The newest line of each (task, agent).
pub fn latest(lines: Vec<ResultLine>) -> Vec<ResultLine> {
    let mut map = std::collections::BTreeMap::new();
    for l in lines {
        map.insert(l.key(), l);
    }
    map.into_values().collect()
}

/// The pairs still to run: those without a line in `done`, or whose line is a runner error.
pub fn pending<'a>(
    tasks: &'a [Task],
    agents: &'a [Agent],
    done: &[ResultLine],
) -> Vec<(&'a Task, &'a Agent)> {
    let finished: BTreeSet<(String, String)> = latest(done.to_vec())
        .into_iter()
        .filter(|l| l.status != "runner_error")
        .map(|l| l.key())
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        for a in agents {
            if !finished.contains(&(t.name.clone(), a.label())) {
                out.push((t, a));
            }
        }
    }
    out
}

/// Run every pending pair, appending a line per pair to `cfg.out`. Returns the lines written.
pub async fn run_all(
    cfg: &RunnerConfig,
    tasks: &[Task],
    agents: &[Agent],
) -> Result<Vec<ResultLine>> {
    if agents.iter().any(|a| matches!(a, Agent::Builtin { .. })) && cfg.provider_url.is_none() {
        bail!("a --model needs --provider-url (the model server the hub's built-in agent asks)");
    }
    if agents.iter().any(|a| matches!(a, Agent::Routed { .. })) && cfg.hub_config.is_none() {
        bail!("an --agent-mode needs --hub-config with the providers ([providers.local], [providers.remote])");
    }
    if !cfg.hub.is_file() {
        bail!(
            "{} is not the hunkgate binary: build it with `cargo build -p hunkgate --bin hunkgate` or pass --hub",
            cfg.hub.display()
        );
    }
    let done = read_results(&cfg.out)?;
    let todo = pending(tasks, agents, &done);
    let total = todo.len();
    let skipped = tasks.len() * agents.len() - total;
    if cfg.progress && skipped > 0 {
        eprintln!(
            "hunkgate-evals: {skipped} pairs already in {}, {total} to run",
            cfg.out.display()
        );
    }
    let out = Arc::new(std::sync::Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&cfg.out)
            .with_context(|| format!("opening {}", cfg.out.display()))?,
    ));
    let sem = Arc::new(tokio::sync::Semaphore::new(cfg.jobs.max(1)));
    let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut handles = Vec::new();
    for (task, agent) in todo {
        let (task, agent, cfg) = (task.clone(), agent.clone(), cfg.clone());
        let (sem, out, finished) = (sem.clone(), out.clone(), finished.clone());
        handles.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await;
            let line = run_pair(&cfg, &task, &agent).await;
            let n = finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if cfg.progress {
                let what = if line.success {
                    "ok  ".to_string()
                } else {
                    format!("FAIL {}", line.status)
                };
                eprintln!(
                    "[{n}/{total}] {what} {} × {} ({} ms){}",
                    short_agent(&line.agent),
                    line.task,
                    line.wall_ms,
                    line.error
                        .as_deref()
                        .map(|e| format!(": {}", e.lines().next().unwrap_or("")))
                        .unwrap_or_default()
                );
            }
            let text = serde_json::to_string(&line)?;
            let mut f = out
                .lock()
                .map_err(|_| anyhow!("results file lock poisoned"))?;
            writeln!(f, "{text}")?;
            f.flush()?;
            Ok::<_, anyhow::Error>(line)
        }));
    }
    let mut lines = Vec::new();
    for h in handles {
        lines.push(h.await.context("a task job panicked")??);
    }
    Ok(lines)
}

/// The last path component of a command template's first word that names a script, for
/// progress lines (`sh /x/evals/agents/perfect.sh` → `perfect.sh`).
pub fn short_agent(label: &str) -> String {
    label
        .split_whitespace()
        .find(|w| w.contains('/'))
        .and_then(|w| w.rsplit('/').next())
        .unwrap_or(label)
        .to_string()
}

/// One pair; never fails: a runner failure becomes a `runner_error` line saying what broke.
pub async fn run_pair(cfg: &RunnerConfig, task: &Task, agent: &Agent) -> ResultLine {
    let mut line = ResultLine {
        task: task.name.clone(),
        tags: task.spec.tags.clone(),
        agent: agent.label(),
        model: agent.model().map(str::to_string),
        ..ResultLine::default()
    };
    if let Err(e) = drive(cfg, task, agent, &mut line).await {
        line.status = "runner_error".into();
        line.success = false;
        line.error = Some(format!("{e:#}"));
    }
    line
}

/// Environment for every git and hub process: no machine configuration leaks in.
fn hermetic(cmd: &mut tokio::process::Command, home: &Path) {
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Eval")
        .env("GIT_AUTHOR_EMAIL", "eval@example.com")
        .env("GIT_COMMITTER_NAME", "Eval")
        .env("GIT_COMMITTER_EMAIL", "eval@example.com")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env_remove("HUNKGATE_URL")
        .env_remove("HUNKGATE_AGENT_TOKEN")
        .env_remove("HUNKGATE_CONFIG")
        .env_remove("HUNKGATE_STATE_DIR")
        .env_remove("HUNKGATE_PROVIDER_URL")
        .env_remove("HUNKGATE_MODEL");
}

async fn git(repo: &Path, home: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = tokio::process::Command::new("git");
    hermetic(&mut cmd, home);
    let out = cmd
        .current_dir(repo)
        .args(args)
        .output()
        .await
        .context("running git")?;
    if !out.status.success() {
        bail!(
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for rel in files_under(from)? {
        let dst = to.join(&rel);
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::copy(from.join(&rel), &dst)
            .with_context(|| format!("copying {}", from.join(&rel).display()))?;
    }
    Ok(())
}

/// A running hub; killed when dropped.
struct Hub {
    _child: tokio::process::Child,
    url: String,
    token: String,
    http: reqwest::Client,
    log: PathBuf,
    /// With checkers in its config: how long to wait for a suggestion's checks.
    checks_wait: Option<Duration>,
}

impl Hub {
    async fn start(
        cfg: &RunnerConfig,
        task: &Task,
        dir: &Path,
        repo: &Path,
        home: &Path,
        run_file: &Path,
    ) -> Result<Hub> {
        let state = dir.join("state");
        let log = dir.join("hub.log");
        let logf = std::fs::File::create(&log)?;
        let mut cmd = tokio::process::Command::new(&cfg.hub);
        hermetic(&mut cmd, home);
        cmd.current_dir(repo)
            .arg("serve")
            .arg("--repo")
            .arg(repo)
            .arg("--state-dir")
            .arg(&state)
            .args(["--port", "0", "--isolation", "none"])
            .args(["--agent-env", ENV_TASK, "--agent-env", ENV_CHECKOUT])
            .args(["--agent-env", ENV_RUN_FILE])
            .env(ENV_TASK, task.dir.canonicalize()?)
            .env(ENV_CHECKOUT, repo)
            .env(ENV_RUN_FILE, run_file)
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .kill_on_drop(true);
        if let Some(u) = &cfg.provider_url {
            cmd.args(["--provider-url", u]);
        }
        if let Some(c) = &cfg.hub_config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", cfg.hub.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            if let Ok(s) = std::fs::read_to_string(state.join("hub.json")) {
                if let Some(u) = serde_json::from_str::<Value>(&s)
                    .ok()
                    .and_then(|v| v["url"].as_str().map(str::to_string))
                {
                    break u;
                }
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "hunkgate serve exited ({status}): {}",
                    tail(&std::fs::read_to_string(&log).unwrap_or_default(), 2000)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "hunkgate serve did not write {} within 30 s",
                    state.join("hub.json").display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let token = std::fs::read_to_string(state.join("token"))
            .context("reading the hub's reviewer token")?
            .trim()
            .to_string();
        Ok(Hub {
            _child: child,
            url: url.trim_end_matches('/').to_string(),
            token,
            http: reqwest::Client::new(),
            log,
            checks_wait: checks_wait(cfg.hub_config.as_deref())?,
        })
    }

    /// Suggestion `id` once its checks came (or the wait is over: counted as unchecked); at
    /// once when the hub checks nothing.
    async fn suggestion_checked(&self, id: &str) -> Result<Value> {
        let path = format!("/suggestions/{id}");
        let deadline = self.checks_wait.map(|w| Instant::now() + w);
        loop {
            let s = self.ok(reqwest::Method::GET, &path, None).await?;
            if s.get("checks").is_some() || deadline.is_none_or(|d| Instant::now() > d) {
                return Ok(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A request; `Ok(Err((status, body)))` for an HTTP error the caller may expect.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<std::result::Result<Value, (u16, Value)>> {
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(60));
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if (200..300).contains(&status) {
            Ok(Ok(v))
        } else {
            Ok(Err((status, v)))
        }
    }

    async fn ok(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
        match self.call(method.clone(), path, body).await? {
            Ok(v) => Ok(v),
            Err((s, v)) => bail!("{method} {path}: HTTP {s}: {v}"),
        }
    }
}

/// How long a suggestion's checks may take to come, when the hub `config` names checkers
/// (`[[check]]`): their budget (`[limits] checks_budget_secs`, default 120 s) and 30 s more.
pub fn checks_wait(config: Option<&Path>) -> Result<Option<Duration>> {
    let Some(path) = config else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the hub config {}", path.display()))?;
    let v: toml::Value =
        toml::from_str(&text).with_context(|| format!("the hub config {}", path.display()))?;
    let checks = v
        .get("check")
        .and_then(toml::Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let budget = v
        .get("limits")
        .and_then(|l| l.get("checks_budget_secs"))
        .and_then(toml::Value::as_integer)
        .unwrap_or(120)
        .max(1) as u64;
    Ok(checks.then(|| Duration::from_secs(budget + 30)))
}

/// The `new` diagnostics of a suggestion (its hunks' and its own), when its checks came.
pub fn new_diagnostics(s: &Value) -> Option<usize> {
    s.get("checks")?;
    let is_new = |d: &&Value| d["change"] == "new";
    let on_hunks: usize = s["hunks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            h["diagnostics"]
                .as_array()
                .map_or(0, |ds| ds.iter().filter(is_new).count())
        })
        .sum();
    let own = s["diagnostics"]
        .as_array()
        .map_or(0, |ds| ds.iter().filter(is_new).count());
    Some(on_hunks + own)
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

const TERMINAL: [&str; 4] = ["ready", "no_changes", "failed", "cancelled"];

async fn drive(
    cfg: &RunnerConfig,
    task: &Task,
    agent: &Agent,
    line: &mut ResultLine,
) -> Result<()> {
    let dir = match &cfg.keep {
        Some(keep) => KeptOrTemp::Kept(keep_dir(keep, task, agent)?),
        None => KeptOrTemp::Temp(
            tempfile::Builder::new()
                .prefix(&format!("hunkgate-eval-{}-", task.name))
                .tempdir()?,
        ),
    };
    let repo = dir.path().join("repo");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&repo)?;
    std::fs::create_dir_all(&home)?;
    git(&repo, &home, &["init", "-q", "-b", "main"]).await?;
    copy_tree(&task.dir.join("repo"), &repo)?;
    git(&repo, &home, &["add", "-A"]).await?;
    git(
        &repo,
        &home,
        &["commit", "-q", "--allow-empty", "-m", "initial"],
    )
    .await?;
    let repo = repo.canonicalize()?;
    let run_file = dir.path().join("run-index");
    std::fs::write(&run_file, "1\n")?;
    let hub = Hub::start(cfg, task, dir.path(), &repo, &home, &run_file).await?;
    let timeout = cfg.run_timeout.or(task.spec.timeout_secs).unwrap_or(60);
    let result = review_runs(&hub, task, agent, &repo, &run_file, timeout, line).await;
    if let Err(e) = result {
        return Err(e.context(format!(
            "hub log {}: {}",
            hub.log.display(),
            tail(&std::fs::read_to_string(&hub.log).unwrap_or_default(), 1500)
        )));
    }
    line.failures.extend(run_checks(task, &repo, &home).await?);
    line.success = line.failures.is_empty();
    Ok(())
}

enum KeptOrTemp {
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl KeptOrTemp {
    fn path(&self) -> &Path {
        match self {
            KeptOrTemp::Kept(p) => p,
            KeptOrTemp::Temp(t) => t.path(),
        }
    }
}

/// `<keep>/<task>--<agent>`, emptied first.
fn keep_dir(keep: &Path, task: &Task, agent: &Agent) -> Result<PathBuf> {
    let name: String = format!("{}--{}", task.name, short_agent(&agent.label()))
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let d = keep.join(name);
    if d.exists() {
        std::fs::remove_dir_all(&d).with_context(|| format!("emptying {}", d.display()))?;
    }
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d.canonicalize()?)
}

/// Per-hunk bookkeeping of one task.
#[derive(Default)]
struct Tally {
    accepted: usize,
    modified: usize,
    rejected: usize,
    conflicts: usize,
    attempts: usize,
    clean: bool,
    /// The changed lines of every hunk proposed (for replay scores).
    proposed: Vec<crate::replay::Unit>,
}

async fn review_runs(
    hub: &Hub,
    task: &Task,
    agent: &Agent,
    repo: &Path,
    run_file: &Path,
    timeout: u64,
    line: &mut ResultLine,
) -> Result<()> {
    let mut session: Option<String> = None;
    let mut tally = Tally {
        clean: true,
        ..Tally::default()
    };
    let mut status: Option<String> = None;
    for (i, (prompt, review)) in task.runs().into_iter().enumerate() {
        std::fs::write(run_file, format!("{}\n", i + 1))?;
        let started = Instant::now();
        let run_id = start_run(hub, agent, prompt, timeout, session.as_deref()).await?;
        let (run, asked) =
            wait_for_run(hub, &run_id, (started, timeout + 30), review, line).await?;
        line.wall_ms += started.elapsed().as_millis() as u64;
        let st = run["status"].as_str().unwrap_or("").to_string();
        if session.is_none() {
            session = run["session_id"].as_str().map(str::to_string);
        }
        note_run(line, &run, i + 1, asked, review);
        if status.as_deref().is_none_or(|s| s == "ready") {
            status = Some(st.clone());
        }
        if st == "ready" {
            review_suggestions(hub, &run, review, repo, &mut tally, line, i + 1).await?;
        } else if matches!(review, Review::Conflict { .. } | Review::Modify { .. }) {
            line.failures.push(format!(
                "run {}: no suggestion to apply the {} policy to (status {st})",
                i + 1,
                review.name()
            ));
        }
    }
    line.status = status.unwrap_or_default();
    line.hunks_accepted = tally.accepted;
    line.hunks_modified = tally.modified;
    line.hunks_rejected = tally.rejected;
    line.hunks_conflicts = tally.conflicts;
    line.hunks_decided = tally.accepted + tally.modified + tally.rejected + tally.conflicts;
    line.apply_clean = (tally.attempts > 0).then_some(tally.clean);
    if let Some(expect) = &task.replay {
        line.replay = Some(crate::replay::ReplayScore::of(expect, &tally.proposed));
    }
    Ok(())
}

/// `POST /runs` of one run of a task (in `session`, after the first): its id.
async fn start_run(
    hub: &Hub,
    agent: &Agent,
    prompt: &str,
    timeout: u64,
    session: Option<&str>,
) -> Result<String> {
    let mut body = json!({"prompt": prompt, "timeout_secs": timeout});
    match agent {
        Agent::Command(t) => body["agent"] = json!(t),
        Agent::Acp(c) => body["acp"] = json!(c),
        Agent::Builtin { model } => body["model"] = json!(model),
        Agent::Routed { mode } => body["agent_mode"] = json!(mode),
    }
    if let Some(s) = session {
        body["session_id"] = json!(s);
    }
    let posted = hub.ok(reqwest::Method::POST, "/runs", Some(body)).await?;
    Ok(posted["run_id"]
        .as_str()
        .ok_or_else(|| anyhow!("POST /runs answered without run_id: {posted}"))?
        .to_string())
}

/// A built-in run's route: its mode and the triggers of its moves.
fn note_route(line: &mut ResultLine, route: &Value) {
    if let Some(mode) = route["mode"].as_str() {
        line.agent_mode = Some(mode.to_string());
    }
    for s in route["switches"].as_array().into_iter().flatten() {
        if let Some(t) = s["trigger"].as_str() {
            line.switches.push(t.to_string());
        }
    }
}

/// The run once it ended (answering its questions by `review` meanwhile), and whether it asked
/// one; an error once `secs` passed since `started`.
async fn wait_for_run(
    hub: &Hub,
    run_id: &str,
    (started, secs): (Instant, u64),
    review: &Review,
    line: &mut ResultLine,
) -> Result<(Value, bool)> {
    let mut asked = false;
    loop {
        let run = hub
            .ok(reqwest::Method::GET, &format!("/runs/{run_id}"), None)
            .await?;
        let st = run["status"].as_str().unwrap_or("");
        if TERMINAL.contains(&st) {
            return Ok((run, asked));
        }
        if st == "waiting_for_user" {
            asked = true;
            answer(hub, run_id, &run, review, line).await?;
        }
        if started.elapsed() > Duration::from_secs(secs) {
            bail!("run {run_id} still {st} after {secs} s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What run number `n` (ended as `run`) adds to the line: its count, usage, stop reason,
/// error, and a failure when the policy expected a question it did not ask.
fn note_run(line: &mut ResultLine, run: &Value, n: usize, asked: bool, review: &Review) {
    line.runs += 1;
    line.clarification_asked |= asked;
    if let Some(u) = run.get("usage").filter(|u| u.is_object()) {
        let add = |acc: &mut Option<u64>, k: &str| {
            *acc = Some(acc.unwrap_or(0) + u[k].as_u64().unwrap_or(0));
        };
        add(&mut line.tool_calls, "tool_calls");
        add(&mut line.model_ms, "model_ms");
        add(&mut line.prompt_tokens, "prompt_tokens");
        add(&mut line.completion_tokens, "completion_tokens");
    }
    if let Some(r) = run["stop_reason"].as_str() {
        line.stop_reason = Some(r.to_string());
    }
    note_route(line, &run["route"]);
    // An ACP agent's name and version, from its `initialize`, stand in its row's model column.
    if let Some(info) = run["agent_info"].as_str() {
        line.model = Some(info.to_string());
    }
    if run["status"] != "ready" {
        if let Some(e) = run["error"].as_str() {
            // Every failed run's reason, in run order.
            let msg = format!("run {n}: {e}");
            line.error = Some(match line.error.take() {
                Some(prev) => format!("{prev}; {msg}"),
                None => msg,
            });
        }
    }
    if let Review::Clarify {
        require_question: true,
        ..
    } = review
    {
        if !asked {
            line.failures.push(format!(
                "run {n}: the policy expects a clarification question; none was asked"
            ));
        }
    }
}

/// The suggestions of a ready run, decided by `review` (after editing the file behind the hub's
/// back first, for the conflict policy, which then expects a conflict).
async fn review_suggestions(
    hub: &Hub,
    run: &Value,
    review: &Review,
    repo: &Path,
    tally: &mut Tally,
    line: &mut ResultLine,
    n: usize,
) -> Result<()> {
    let ids: Vec<String> = run["suggestion_ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let conflicts_before = tally.conflicts;
    if let Review::Conflict { file, content } = review {
        let p = repo.join(file);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&p, content)
            .with_context(|| format!("editing {} behind the hub's back", p.display()))?;
    }
    for id in ids {
        decide(hub, &id, review, tally, line, n).await?;
    }
    if matches!(review, Review::Conflict { .. }) && tally.conflicts == conflicts_before {
        line.failures.push(format!(
            "run {n}: the policy expects a conflict after editing the file; every accept applied"
        ));
    }
    Ok(())
}

async fn answer(
    hub: &Hub,
    run_id: &str,
    run: &Value,
    review: &Review,
    line: &mut ResultLine,
) -> Result<()> {
    let qid = run["question"]["question_id"].clone();
    let body = match review {
        Review::Clarify {
            answer: Some(a), ..
        } => json!({"question_id": qid, "answer": a}),
        _ => json!({"question_id": qid, "skip": true}),
    };
    match hub
        .call(
            reqwest::Method::POST,
            &format!("/runs/{run_id}/clarify"),
            Some(body),
        )
        .await?
    {
        Ok(_) => Ok(()),
        // Answered already (a poll raced the answer) or the run moved on.
        Err((409, _)) => Ok(()),
        Err((s, v)) => {
            line.failures.push(format!("clarify: HTTP {s}: {v}"));
            Ok(())
        }
    }
}

/// The hunk's diff with `from` replaced by `to` in its added lines, or `None` when no added line
/// holds `from`.
pub fn modified_diff(diff: &str, from: &str, to: &str) -> Option<String> {
    let mut changed = false;
    let out: Vec<String> = diff
        .split_inclusive('\n')
        .map(|l| {
            if l.starts_with('+') && l.contains(from) {
                changed = true;
                l.replace(from, to)
            } else {
                l.to_string()
            }
        })
        .collect();
    changed.then(|| out.concat())
}

async fn decide(
    hub: &Hub,
    suggestion: &str,
    review: &Review,
    tally: &mut Tally,
    line: &mut ResultLine,
    run: usize,
) -> Result<()> {
    let s = hub.suggestion_checked(suggestion).await?;
    if let Some(n) = new_diagnostics(&s) {
        line.checked_suggestions += 1;
        line.new_diagnostics += n;
    }
    let hunks = s["hunks"].as_array().cloned().unwrap_or_default();
    let mut modify_done = false;
    for h in &hunks {
        let file = h["file"].as_str().unwrap_or_default();
        let diff = h["diff"].as_str().unwrap_or_default();
        tally.proposed.extend(crate::replay::units_of_hunk(
            file,
            h["kind"].as_str().unwrap_or("modify"),
            diff,
        ));
        let body = feedback_for(review, suggestion, h, line, run, &mut modify_done);
        send_feedback(hub, body, tally, line, run).await?;
    }
    if let Review::Modify { file, index, .. } = review {
        if !modify_done {
            line.failures.push(format!(
                "run {run}: modify: the suggestion has no hunk {index} of {file}"
            ));
        }
    }
    hub.ok(
        reqwest::Method::POST,
        "/complete",
        Some(json!({"suggestion_id": suggestion, "action": "finalize"})),
    )
    .await?;
    Ok(())
}

/// The `POST /feedback` body that `review` decides hunk `h` of `suggestion` with (a modify
/// that cannot be made is an accept, and a failure on the line).
fn feedback_for(
    review: &Review,
    suggestion: &str,
    h: &Value,
    line: &mut ResultLine,
    run: usize,
    modify_done: &mut bool,
) -> Value {
    let id = h["id"].as_str().unwrap_or_default();
    let file = h["file"].as_str().unwrap_or_default();
    let diff = h["diff"].as_str().unwrap_or_default();
    let index = h["index"].as_u64().unwrap_or(0) as usize;
    let mut body = json!({"suggestion_id": suggestion, "hunk_id": id});
    match review {
        Review::AcceptAll {} | Review::Conflict { .. } | Review::Clarify { .. } => {
            body["action"] = json!("accept")
        }
        Review::AcceptMatching { files, contains } => {
            let ok = Review::matcher(files).is_match(file)
                && contains.as_deref().is_none_or(|c| diff.contains(c));
            body["action"] = json!(if ok { "accept" } else { "reject" });
        }
        Review::Reject { files, comment } => {
            if Review::matcher(files).is_match(file) {
                body["action"] = json!("reject");
                body["comment"] = json!(comment);
            } else {
                body["action"] = json!("accept");
            }
        }
        Review::Modify {
            file: f,
            index: i,
            from,
            to,
        } => {
            body["action"] = json!("accept");
            if f == file && *i == index {
                match modified_diff(diff, from, to) {
                    Some(m) => {
                        body["action"] = json!("modify");
                        body["modified_diff"] = json!(m);
                        *modify_done = true;
                    }
                    None => line.failures.push(format!(
                        "run {run}: modify: {from:?} is not in an added line of hunk {id}; accepted it as is"
                    )),
                }
            }
        }
    }
    body
}

/// Send one decision and count its answer.
async fn send_feedback(
    hub: &Hub,
    body: Value,
    tally: &mut Tally,
    line: &mut ResultLine,
    run: usize,
) -> Result<()> {
    let id = body["hunk_id"].as_str().unwrap_or_default().to_string();
    let action = body["action"].as_str().unwrap_or_default().to_string();
    if action != "reject" {
        tally.attempts += 1;
    }
    match hub
        .call(reqwest::Method::POST, "/feedback", Some(body))
        .await?
    {
        Ok(v) => match v["hunk"]["state"].as_str().unwrap_or(action.as_str()) {
            "accepted" => tally.accepted += 1,
            "modified" => tally.modified += 1,
            "rejected" => tally.rejected += 1,
            other => {
                bail!("POST /feedback {action} {id}: unexpected hunk state {other:?}: {v}")
            }
        },
        Err((409, v)) if v["code"] == "conflict" => {
            tally.conflicts += 1;
            tally.clean = false;
        }
        Err((s, v)) => {
            tally.clean = false;
            line.failures
                .push(format!("run {run}: {action} {id}: HTTP {s}: {v}"));
        }
    }
    Ok(())
}

/// The task's checks on the checkout; the messages of those that failed.
pub async fn run_checks(task: &Task, repo: &Path, home: &Path) -> Result<Vec<String>> {
    let c = &task.spec.check;
    let mut fails = Vec::new();
    for (path, want) in &c.files {
        match std::fs::read(repo.join(path)) {
            Ok(got) if got == want.as_bytes() => {}
            Ok(got) => fails.push(format!(
                "{path}: content differs from check.files (got {:?})",
                tail(&String::from_utf8_lossy(&got), 200)
            )),
            Err(e) => fails.push(format!("{path}: {e}")),
        }
    }
    if c.expected_dir {
        let exp = task.dir.join("expected");
        for rel in files_under(&exp)? {
            let want = std::fs::read(exp.join(&rel))?;
            match std::fs::read(repo.join(&rel)) {
                Ok(got) if got == want => {}
                Ok(_) => fails.push(format!("{rel}: differs from expected/{rel}")),
                Err(e) => fails.push(format!("{rel}: {e}")),
            }
        }
    }
    for path in &c.absent {
        if repo.join(path).symlink_metadata().is_ok() {
            fails.push(format!("{path}: exists but must not"));
        }
    }
    if let Some(cmd) = &c.command {
        let mut p = tokio::process::Command::new("sh");
        hermetic(&mut p, home);
        let out = p
            .arg("-c")
            .arg(cmd)
            .current_dir(repo)
            .stdin(Stdio::null())
            .output()
            .await
            .context("running the check command")?;
        if !out.status.success() {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            fails.push(format!(
                "check command {cmd:?} failed ({}): {}",
                out.status,
                tail(text.trim(), 300)
            ));
        }
    }
    Ok(fails)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(task: &str, agent: &str, status: &str) -> ResultLine {
        ResultLine {
            task: task.into(),
            agent: agent.into(),
            status: status.into(),
            ..ResultLine::default()
        }
    }

    #[test]
    fn resume_skips_finished_pairs_and_retries_runner_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |name: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(d.join("repo")).unwrap();
            std::fs::write(
                d.join("task.toml"),
                "prompt = \"p\"\n[check]\ncommand = \"true\"\n",
            )
            .unwrap();
            Task::load(&d).unwrap()
        };
        let tasks = vec![mk("a"), mk("b")];
        let agents = vec![
            Agent::Command("x".into()),
            Agent::Builtin { model: "m".into() },
        ];
        let out = dir.path().join("results.jsonl");
        let done = vec![
            line("a", "x", "ready"),
            line("b", "x", "runner_error"),
            line("b", "builtin:m", "runner_error"),
            // A later line for the same pair wins.
            line("b", "builtin:m", "failed"),
        ];
        let text: String = done
            .iter()
            .map(|l| serde_json::to_string(l).unwrap() + "\n")
            .collect();
        std::fs::write(&out, text).unwrap();
        let read = read_results(&out).unwrap();
        assert_eq!(read, done);
        let todo: Vec<(String, String)> = pending(&tasks, &agents, &read)
            .into_iter()
            .map(|(t, a)| (t.name.clone(), a.label()))
            .collect();
        assert_eq!(
            todo,
            vec![
                ("a".to_string(), "builtin:m".to_string()),
                ("b".to_string(), "x".to_string())
            ]
        );
        // Nothing done: everything pending; a foreign file is refused.
        assert_eq!(pending(&tasks, &agents, &[]).len(), 4);
        std::fs::write(&out, "hello\n").unwrap();
        let e = format!("{:#}", read_results(&out).unwrap_err());
        assert!(e.contains("results.jsonl:1"), "{e}");
        assert!(read_results(&dir.path().join("none")).unwrap().is_empty());
    }

    #[test]
    fn new_diagnostics_count_hunks_and_the_suggestions_own_once_checked() {
        let d = |change: &str| json!({"change": change, "line": 1});
        let s = json!({
            "checks": {"state": "done", "checkers": ["ruff"]},
            "hunks": [{"diagnostics": [d("new"), d("fixed")]}, {}],
            "diagnostics": [d("new")],
        });
        assert_eq!(new_diagnostics(&s), Some(2));
        let unchecked = json!({"hunks": [{"diagnostics": [d("new")]}]});
        assert_eq!(new_diagnostics(&unchecked), None);
    }

    #[test]
    fn the_checks_are_waited_for_only_when_the_config_names_checkers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        assert_eq!(checks_wait(None).unwrap(), None);
        std::fs::write(&p, "[limits]\nchecks_budget_secs = 10\n").unwrap();
        assert_eq!(checks_wait(Some(&p)).unwrap(), None);
        std::fs::write(
            &p,
            "[limits]\nchecks_budget_secs = 10\n[[check]]\npreset = \"ruff\"\n",
        )
        .unwrap();
        assert_eq!(
            checks_wait(Some(&p)).unwrap(),
            Some(Duration::from_secs(40))
        );
        std::fs::write(&p, "[[check]]\npreset = \"ruff\"\n").unwrap();
        assert_eq!(
            checks_wait(Some(&p)).unwrap(),
            Some(Duration::from_secs(150))
        );
    }

    #[test]
    fn modified_diff_replaces_only_in_added_lines() {
        let d = "@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n";
        assert_eq!(
            modified_diff(d, "b = 3", "b = 4").as_deref(),
            Some("@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 4\n")
        );
        assert_eq!(
            modified_diff(d, "a = 1", "a = 9"),
            None,
            "context lines stay"
        );
        assert_eq!(short_agent("sh /x/evals/agents/perfect.sh"), "perfect.sh");
        assert_eq!(short_agent("builtin:m"), "builtin:m");
    }
}

//! `hunkgate-evals run …` runs the task suite against agents; `hunkgate-evals score FILE…` (or
//! just `hunkgate-evals FILE…`) scores agents from hunkgate feedback logs and journals;
//! `hunkgate-evals scripted-model` serves the `asks` reference agent's model.

use std::io::BufReader;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use hunkgate_evals::runner::{self, Agent, RunnerConfig};
use hunkgate_evals::{metrics, replay, report, scripted, task};

#[derive(Parser)]
#[command(
    name = "hunkgate-evals",
    version,
    about = "Score hunkgate agents: run the eval task suite, or read feedback logs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every task with every agent against a real hub and print the metrics.
    Run(RunArgs),
    /// Score each agent by what happened to its hunks, from <state-dir>/feedback.jsonl files
    /// (plus run metrics when the hub's journal, <state-dir>/state.jsonl, is given too).
    Score {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the metrics of results files without running anything; write the markdown and the
    /// self-contained HTML report.
    Report {
        /// Results files written by `run` or `replay` (default results.jsonl).
        results: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Write the markdown report here.
        #[arg(long)]
        md: Option<PathBuf>,
        /// Write the HTML report (one page, inline SVG charts) here.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Real feedback logs (<state-dir>/feedback.jsonl) to chart over time (repeatable).
        #[arg(long = "feedback")]
        feedback: Vec<PathBuf>,
        /// The reports' title.
        #[arg(long, default_value = "hunkgate evals")]
        title: String,
    },
    /// Turn real feedback logs into tasks (one per run: its base commit, its prompt, what the
    /// user kept and rejected) and, given agents or models, score them on those tasks.
    Replay(ReplayArgs),
    /// Serve the scripted model (the `asks` reference agent) for the tasks' `[scripted]` tables:
    /// point a hub at it with --provider-url http://ADDR/v1.
    ScriptedModel {
        #[arg(long, default_value = "evals/tasks")]
        tasks: PathBuf,
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: SocketAddr,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// The task directory.
    #[arg(long, default_value = "evals/tasks")]
    tasks: PathBuf,
    /// An agent command template, e.g. 'sh evals/agents/perfect.sh' or 'claude -p {prompt}'
    /// (repeatable).
    #[arg(long = "agent")]
    agents: Vec<String>,
    /// An agent spoken to over the Agent Client Protocol, by its command, e.g. 'opencode acp'
    /// (repeatable).
    #[arg(long = "acp")]
    acp: Vec<String>,
    /// The model server of the hub's built-in agent (OpenAI-compatible base URL).
    #[arg(long)]
    provider_url: Option<String>,
    /// A model of the built-in agent to evaluate (repeatable; needs --provider-url).
    #[arg(long = "model")]
    models: Vec<String>,
    /// An `agent_mode` of the built-in agent to evaluate: `local`, `remote` or `hybrid_auto`
    /// (repeatable; needs --hub-config with `[providers.local]` and `[providers.remote]`).
    /// Each mode is a row of its own, with its moves to the remote provider and their triggers.
    #[arg(long = "agent-mode")]
    agent_modes: Vec<String>,
    /// The hunkgate binary (default: `hunkgate` beside this program, else on PATH).
    #[arg(long)]
    hub: Option<PathBuf>,
    /// Task × agent pairs run at once.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Results file: one JSON line per (task, agent); pairs already in it are skipped.
    #[arg(long, default_value = "results.jsonl")]
    out: PathBuf,
    /// Each run's time limit in seconds, instead of the task's own (default 60): raise it for
    /// a slow model.
    #[arg(long = "run-timeout")]
    run_timeout: Option<u64>,
    /// A hub config file given to every hub the runner starts (`hunkgate serve --config`):
    /// the built-in agent's `[provider]` settings (`max_tokens`, `request_timeout_secs`,
    /// `temperature`, …) and `[limits]`. Without it the hubs read no config file at all.
    #[arg(long = "hub-config")]
    hub_config: Option<PathBuf>,
    /// Only tasks with this tag (repeatable: any of them).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// Only these tasks, by directory name (repeatable).
    #[arg(long = "task")]
    only: Vec<String>,
    /// Print the metrics as JSON.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
    /// Keep each pair's checkout and hub state dir (feedback log, journal, checkpoints) in
    /// DIR/<task>--<agent>/ instead of deleting them.
    #[arg(long)]
    keep: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Feedback logs (<state-dir>/feedback.jsonl).
    #[arg(required = true)]
    logs: Vec<PathBuf>,
    /// The git repository holding the runs' base commits: the hub's <state-dir>/checkpoints.git
    /// (the default: the one beside the first log), or your repository if the hub ran with
    /// --mirror-refs.
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Where the replay tasks are written (a task directory per run, replaced if present).
    #[arg(long = "tasks-out", default_value = "replay-tasks")]
    tasks_out: PathBuf,
    /// An agent command template to score on the replayed runs (repeatable).
    #[arg(long = "agent")]
    agents: Vec<String>,
    /// An ACP agent's command to score on the replayed runs (repeatable).
    #[arg(long = "acp")]
    acp: Vec<String>,
    #[arg(long)]
    provider_url: Option<String>,
    /// A built-in agent model to score (repeatable; needs --provider-url).
    #[arg(long = "model")]
    models: Vec<String>,
    #[arg(long)]
    hub: Option<PathBuf>,
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Results file (resumable, as with `run`).
    #[arg(long, default_value = "replay-results.jsonl")]
    out: PathBuf,
    #[arg(long = "run-timeout")]
    run_timeout: Option<u64>,
    /// A hub config file for every hub, as with `run`.
    #[arg(long = "hub-config")]
    hub_config: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    #[arg(long, short)]
    quiet: bool,
}

/// `--hub-config`: an absolute path (the hubs run in each task's checkout) to a file that is
/// TOML, checked here so that a typo fails once rather than in every pair's hub. The hub checks
/// the keys when it starts.
fn hub_config(p: &Path) -> Result<PathBuf> {
    let abs = p
        .canonicalize()
        .with_context(|| format!("--hub-config {}", p.display()))?;
    let text =
        std::fs::read_to_string(&abs).with_context(|| format!("--hub-config {}", abs.display()))?;
    toml::from_str::<toml::Table>(&text)
        .with_context(|| format!("--hub-config {}: not TOML", abs.display()))?;
    Ok(abs)
}

fn default_hub() -> PathBuf {
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        let p = dir.join("hunkgate");
        if p.is_file() {
            return p;
        }
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("hunkgate"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from("hunkgate"))
}

fn main() -> ExitCode {
    // `hunkgate-evals FILE…` (the old interface) means `score FILE…`.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        let known = ["run", "score", "report", "replay", "scripted-model", "help"];
        if !known.contains(&first) && (!first.starts_with('-') || first == "--json") {
            args.insert(1, "score".into());
        }
    }
    let cli = Cli::parse_from(args);
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hunkgate-evals: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_metrics(lines: &[runner::ResultLine], json: bool) -> Result<()> {
    let rows = metrics::compute(lines);
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", metrics::render(&rows));
    }
    Ok(())
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Score { json, files } => score(&files, json),
        Cmd::Report {
            results,
            json,
            md,
            html,
            feedback,
            title,
        } => report(ReportArgs {
            results,
            json,
            md,
            html,
            feedback,
            title,
        }),
        Cmd::Replay(a) => replay(a),
        Cmd::ScriptedModel { tasks, addr } => scripted_model(&tasks, addr),
        Cmd::Run(a) => run(a),
    }
}

/// `score`: each agent's hunks, from feedback logs.
fn score(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    let mut readers = Vec::new();
    for f in files {
        let file = std::fs::File::open(f).with_context(|| f.display().to_string())?;
        readers.push(BufReader::new(file));
    }
    let report = hunkgate_evals::score(readers)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", hunkgate_evals::render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// What `report` was asked for (the fields of [`Cmd::Report`]).
struct ReportArgs {
    results: Vec<PathBuf>,
    json: bool,
    md: Option<PathBuf>,
    html: Option<PathBuf>,
    feedback: Vec<PathBuf>,
    title: String,
}

/// `report`: the metrics of results files, and their Markdown/HTML pages.
fn report(a: ReportArgs) -> Result<ExitCode> {
    let results = if a.results.is_empty() {
        vec![PathBuf::from("results.jsonl")]
    } else {
        a.results
    };
    let mut lines = Vec::new();
    for r in &results {
        let these = runner::latest(runner::read_results(r)?);
        if these.is_empty() {
            bail!("{} holds no results", r.display());
        }
        lines.extend(these);
    }
    print_metrics(&lines, a.json)?;
    let mut time = report::feedback_over_time(&a.feedback)?;
    time.extend(report::replay_over_time(&lines));
    if let Some(p) = a.md {
        std::fs::write(&p, report::markdown(&a.title, &lines, &time))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = a.html {
        std::fs::write(&p, report::html(&a.title, &lines, &time))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `replay`: tasks made from the runs of feedback logs, then scored on the agents named.
fn replay(a: ReplayArgs) -> Result<ExitCode> {
    let repo = match a.repo {
        Some(r) => r,
        None => a.logs[0]
            .parent()
            .unwrap_or(Path::new("."))
            .join("checkpoints.git"),
    };
    if !repo.exists() {
        bail!(
            "{} does not exist: pass --repo with the hub's <state-dir>/checkpoints.git, \
             or your repository if the hub ran with --mirror-refs",
            repo.display()
        );
    }
    let ex = replay::extract(&a.logs, &repo, &a.tasks_out)?;
    say_what_replay_found(&ex, &a.tasks_out)?;
    if a.agents.is_empty() && a.acp.is_empty() && a.models.is_empty() {
        eprintln!(
            "score an agent on them with: hunkgate-evals replay … --agent CMD, or \
             hunkgate-evals run --tasks {} --agent CMD",
            a.tasks_out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let names: Vec<String> = ex
        .tasks
        .iter()
        .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    run(RunArgs {
        tasks: a.tasks_out,
        agents: a.agents,
        acp: a.acp,
        provider_url: a.provider_url,
        models: a.models,
        agent_modes: Vec::new(),
        hub: a.hub,
        jobs: a.jobs,
        out: a.out,
        run_timeout: a.run_timeout,
        hub_config: a.hub_config,
        tags: Vec::new(),
        only: names,
        json: a.json,
        quiet: a.quiet,
        keep: None,
    })
}

/// The replay's account on stderr; an error when it made no task at all.
fn say_what_replay_found(ex: &replay::Extracted, tasks_out: &Path) -> Result<()> {
    for s in &ex.skipped {
        eprintln!("hunkgate-evals: replay: skipped {s}");
    }
    if ex.bad_lines > 0 {
        eprintln!(
            "hunkgate-evals: replay: {} lines were not feedback records",
            ex.bad_lines
        );
    }
    eprintln!(
        "hunkgate-evals: replay: {} tasks in {}",
        ex.tasks.len(),
        tasks_out.display()
    );
    if ex.tasks.is_empty() {
        bail!("no run of the logs could be replayed");
    }
    Ok(())
}

/// `scripted-model`: serve the tasks' scripted answers as an OpenAI-style endpoint until killed.
fn scripted_model(tasks: &Path, addr: SocketAddr) -> Result<ExitCode> {
    let tasks = task::load_tasks(tasks)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let (local, server) = scripted::bind(tasks, addr).await?;
        println!("http://{local}/v1");
        server.await?;
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The tasks of `a.tasks` that `--tag`/`--task` keep; an error names a `--task` that is not there.
fn selected_tasks(a: &RunArgs) -> Result<Vec<task::Task>> {
    let mut tasks = task::load_tasks(&a.tasks)?;
    if !a.tags.is_empty() {
        tasks.retain(|t| t.spec.tags.iter().any(|g| a.tags.contains(g)));
    }
    if !a.only.is_empty() {
        for name in &a.only {
            if !tasks.iter().any(|t| &t.name == name) {
                bail!("--task {name}: no such task in {}", a.tasks.display());
            }
        }
        tasks.retain(|t| a.only.contains(&t.name));
    }
    if tasks.is_empty() {
        bail!("no task left after --tag/--task filters");
    }
    Ok(tasks)
}

/// `run`: every agent on every selected task, then the metrics of those pairs.
fn run(a: RunArgs) -> Result<ExitCode> {
    let hub_config = a.hub_config.as_deref().map(hub_config).transpose()?;
    let tasks = selected_tasks(&a)?;
    let mut agents: Vec<Agent> = a.agents.into_iter().map(Agent::Command).collect();
    agents.extend(a.acp.into_iter().map(Agent::Acp));
    agents.extend(a.models.into_iter().map(|model| Agent::Builtin { model }));
    for mode in a.agent_modes {
        if !["local", "remote", "hybrid_auto"].contains(&mode.as_str()) {
            bail!("--agent-mode {mode:?}: one of local, remote, hybrid_auto");
        }
        agents.push(Agent::Routed { mode });
    }
    if agents.is_empty() {
        bail!(
            "name at least one --agent 'CMD {{prompt}}', --acp 'CMD' or --provider-url U --model M"
        );
    }
    let cfg = RunnerConfig {
        hub: a.hub.unwrap_or_else(default_hub),
        provider_url: a.provider_url,
        jobs: a.jobs,
        out: a.out.clone(),
        progress: !a.quiet,
        run_timeout: a.run_timeout,
        hub_config,
        keep: a.keep,
    };
    let rt = tokio::runtime::Runtime::new()?;
    let ran = rt.block_on(runner::run_all(&cfg, &tasks, &agents))?;
    // The metrics of these tasks and agents, including pairs resumed from the file.
    let labels: Vec<String> = agents.iter().map(Agent::label).collect();
    let lines: Vec<_> = runner::latest(runner::read_results(&a.out)?)
        .into_iter()
        .filter(|l| labels.contains(&l.agent) && tasks.iter().any(|t| t.name == l.task))
        .collect();
    print_metrics(&lines, a.json)?;
    let errors = ran.iter().filter(|l| l.status == "runner_error").count();
    if errors > 0 {
        eprintln!(
            "hunkgate-evals: {errors} pairs failed in the runner (status runner_error; see `error` in {}); run again to retry them",
            a.out.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

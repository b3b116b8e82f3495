//! The `hunkgate` command line: `serve`, the reviewer's client commands, and the agent's
//! `publish` / `status` / `mcp`.

pub mod client;
pub mod mcp;
pub mod setup;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand, ValueEnum};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::cli::client::HubClient;
use crate::config::{self, ServeConfig};
use hunkgate_sandbox::jj::Vcs;

#[derive(Parser)]
#[command(
    name = "hunkgate",
    version,
    about = "Review an AI agent's changes hunk by hunk before they touch your checkout"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the hub for a repository (defaults: the repository around the current directory,
    /// 127.0.0.1:4097).
    Serve(ServeArgs),
    /// Create or check the sandbox user agents run as (and the sudoers rule a non-root hub
    /// needs): `hunkgate setup --check` says what is missing.
    Setup(crate::cli::setup::SetupArgs),
    /// (Internal) the sandbox helper, run as the sandbox user by the hub.
    #[command(hide = true)]
    SandboxHelper { op: String },
    /// Start an agent run and follow it until its suggestion is ready.
    Run {
        prompt: String,
        /// Agent command template for this run (`{prompt}` is replaced by the prompt).
        #[arg(long)]
        agent: Option<String>,
        /// Seconds before the agent is killed.
        #[arg(long)]
        timeout: Option<u64>,
        /// The built-in agent's model for this run (needs a hub started with --provider-url).
        #[arg(long)]
        model: Option<String>,
        /// Run in this session (id or prefix), so the agent sees its history and decisions.
        #[arg(long)]
        session: Option<String>,
        /// Print the run id and return without waiting.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Answer the built-in agent's question (or --skip it).
    Answer {
        run: String,
        #[arg(required_unless_present = "skip")]
        answer: Option<String>,
        #[arg(long)]
        skip: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List suggestions (open ones; --all for every one).
    List {
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show a suggestion with its hunks (an id prefix is enough).
    Show {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Accept hunks (all pending ones when none are named) and apply them to the checkout.
    Accept {
        id: String,
        /// Hunk ids, `<file>:<index>`, or 0-based positions.
        hunks: Vec<String>,
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Reject hunks (all pending ones when none are named); rejecting an applied hunk undoes it.
    Reject {
        id: String,
        hunks: Vec<String>,
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Reverse-apply accepted hunks and make them pending again.
    Undo {
        id: String,
        #[arg(required = true)]
        hunks: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Close a suggestion: pending hunks count as rejected.
    Complete {
        id: String,
        action: Completion,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the reviewer token of this repository's hub (for curl: `-H "Authorization: Bearer $(hunkgate token)"`).
    Token {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// (Agent side) publish the sandbox's changes as a suggestion for review.
    Publish {
        #[arg(short = 'm', long = "message")]
        message: String,
        /// Only files matching these globs.
        #[arg(long = "files", num_args = 1..)]
        files: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// (Agent side) send a one-line status to the reviewer.
    Status {
        message: String,
        /// A short word: working, testing, ...
        #[arg(long, default_value = "working")]
        state: String,
    },
    /// (Agent side) MCP server over stdio: publish_suggestion, suggestion_status,
    /// list_suggestions, get_feedback
    Mcp,
}

#[derive(Clone, Copy, ValueEnum)]
enum VcsArg {
    Git,
    Jj,
}

#[derive(Clone, Copy, ValueEnum)]
enum Completion {
    Finalize,
    Discard,
}

#[derive(Args)]
struct ServeArgs {
    /// The repository to serve (default: the git repository containing the current directory).
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Address to bind (env HUNKGATE_HOST or SUGGESTION_MANAGER_HOST; default 127.0.0.1).
    #[arg(long)]
    host: Option<String>,
    /// Port (env HUNKGATE_PORT or SUGGESTION_MANAGER_PORT; default 4097; 0 picks a free one).
    #[arg(long)]
    port: Option<u16>,
    /// Where the token, journal, feedback log and checkpoints live.
    #[arg(long, env = "HUNKGATE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Default agent command template, e.g. 'claude -p {prompt}'.
    #[arg(long)]
    agent: Option<String>,
    /// Seconds before an agent run is killed (default 1800).
    #[arg(long)]
    agent_timeout: Option<u64>,
    /// Pass this environment variable through to agents (repeatable).
    #[arg(long = "agent-env")]
    agent_env: Vec<String>,
    /// Allow requests carrying this Origin header (repeatable).
    #[arg(long = "allow-origin")]
    allow_origin: Vec<String>,
    /// Version control in the sandbox: each run as a jj change, or plain git (default: jj when
    /// the repository has a .jj directory).
    #[arg(long, value_enum)]
    vcs: Option<VcsArg>,
    /// Also write each run's commits into your repository as refs/hunkgate/runs/<id>/{base,head}.
    #[arg(long)]
    mirror_refs: bool,
    /// Config file (default $XDG_CONFIG_HOME/hunkgate/config.toml, or $HUNKGATE_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Who agents run as: `user` (the sandbox user; the default once `hunkgate setup` ran) or
    /// `none` (as you, development only).
    #[arg(long, value_enum)]
    isolation: Option<crate::isolation::IsolationMode>,
    /// The sandbox user (default hunkgate-agent).
    #[arg(long)]
    sandbox_user: Option<String>,
    /// `none`: agents get a network namespace of their own, with no network (Linux, needs
    /// --isolation user).
    #[arg(long, value_enum)]
    agent_network: Option<crate::isolation::AgentNetwork>,
    /// The built-in agent's model server: any OpenAI-compatible base URL, e.g.
    /// http://127.0.0.1:11434/v1 (Ollama) or http://127.0.0.1:8080/v1 (llama.cpp).
    #[arg(long, env = "HUNKGATE_PROVIDER_URL")]
    provider_url: Option<String>,
    /// The built-in agent's default model (a run may name another).
    #[arg(long, env = "HUNKGATE_MODEL")]
    model: Option<String>,
    /// Environment variable holding the provider's API key (default HUNKGATE_API_KEY).
    #[arg(long)]
    api_key_env: Option<String>,
    /// File (mode 600) holding the provider's API key.
    #[arg(long)]
    api_key_file: Option<PathBuf>,
    /// Most tool calls one built-in agent run may make (default 12).
    #[arg(long)]
    max_tool_calls: Option<usize>,
    /// Agent runs at a time (default: the number of CPU cores); later runs wait, `queued`, and
    /// start in the order they were posted.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_runs: Option<u64>,
}

#[derive(Args, Clone)]
struct ClientArgs {
    /// The repository whose hub to talk to (default: around the current directory).
    #[arg(long)]
    repo: Option<PathBuf>,
    /// The hub's state dir (default: derived from the repository).
    #[arg(long, env = "HUNKGATE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Hub URL (default: from the hub's state dir, else http://127.0.0.1:4097).
    #[arg(long, env = "HUNKGATE_HUB_URL")]
    url: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::SandboxHelper { op } = &cli.cmd {
        // Before any thread exists: the helper forks without exec (a PID namespace's init).
        return hunkgate_sandbox::helper::main(op);
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("HUNKGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hunkgate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(cli.cmd)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hunkgate: {}", visible(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

fn repo_root(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let start = match explicit {
        Some(p) => p,
        None => std::env::current_dir()?,
    };
    let root = hunkgate_sandbox::snapshot::discover_repo_root(&start)?;
    Ok(root.canonicalize().unwrap_or(root))
}

async fn dispatch(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Serve(args) => serve(args).await,
        Cmd::Setup(args) => crate::cli::setup::setup(args),
        Cmd::SandboxHelper { op } => Ok(hunkgate_sandbox::helper::main(&op)),
        Cmd::Publish {
            message,
            files,
            json,
        } => {
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
                println!(
                    "published suggestion {} ({} hunks in {})",
                    v["suggestion_id"].as_str().unwrap_or("?"),
                    v["hunk_count"],
                    v["files"].as_array().map(|f| f.len()).unwrap_or(0)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Status { message, state } => {
            let agent = HubClient::for_agent()?;
            agent
                .post(
                    "/agent/status",
                    json!({"message": message, "status": state}),
                )
                .await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Mcp => {
            crate::cli::mcp::run_stdio().await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Token { client } => {
            println!("{}", reviewer_client(&client)?.token());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            prompt,
            agent,
            timeout,
            model,
            session,
            no_wait,
            client,
        } => {
            let body = json!({"prompt": prompt, "agent": agent, "timeout_secs": timeout,
                "model": model, "session_id": session});
            run(client, body, no_wait).await
        }
        Cmd::Answer {
            run,
            answer,
            skip,
            client,
        } => {
            let c = reviewer_client(&client)?;
            let v = c
                .post(
                    &format!("/runs/{run}/clarify"),
                    json!({"answer": answer, "skip": skip}),
                )
                .await?;
            if client.json {
                println!("{v}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::List { all, client } => {
            let c = reviewer_client(&client)?;
            let v = c
                .get(&format!(
                    "/suggestions{}",
                    if all { "?all=true" } else { "" }
                ))
                .await?;
            if client.json {
                println!("{v}");
                return Ok(ExitCode::SUCCESS);
            }
            let list = v["suggestions"].as_array().cloned().unwrap_or_default();
            if list.is_empty() {
                println!("no suggestions");
            }
            for s in list {
                println!(
                    "{}  {:<8} {}/{}  {}  ({})",
                    short(&s["id"]),
                    visible_line(s["closed"].as_str().or(s["status"].as_str()).unwrap_or("")),
                    s["reviewed_count"],
                    s["hunk_count"],
                    field(&s["description"]),
                    s["files"]
                        .as_array()
                        .map(|f| f
                            .iter()
                            .filter_map(Value::as_str)
                            .map(visible_line)
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Show { id, client } => {
            let c = reviewer_client(&client)?;
            let v = c.get(&format!("/suggestions/{id}")).await?;
            if client.json {
                println!("{v}");
            } else {
                print_suggestion(&v);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Accept {
            id,
            hunks,
            comment,
            client,
        } => decide(client, id, hunks, "accept", comment).await,
        Cmd::Reject {
            id,
            hunks,
            comment,
            client,
        } => decide(client, id, hunks, "reject", comment).await,
        Cmd::Undo { id, hunks, client } => decide(client, id, hunks, "undo", None).await,
        Cmd::Complete { id, action, client } => {
            let c = reviewer_client(&client)?;
            let (action, done) = match action {
                Completion::Finalize => ("finalize", "finalized"),
                Completion::Discard => ("discard", "discarded"),
            };
            let v = c
                .post("/complete", json!({"suggestion_id": id, "action": action}))
                .await?;
            if client.json {
                println!("{v}");
            } else {
                println!(
                    "{done} {}: {}/{} hunks applied{}",
                    short(&v["suggestion_id"]),
                    v["applied_hunks"],
                    v["hunk_count"],
                    v["reviewed_commit"]
                        .as_str()
                        .map(|c| format!(", checkpoint {}", &c[..12.min(c.len())]))
                        .unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let file = config::load_file(args.config.as_deref())?;
    let repo = repo_root(args.repo)?;
    let detected_vcs = Vcs::detect(&repo);
    let host = config::resolve_host(args.host, &file);
    let port = config::resolve_port(args.port, &file)?;
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => config::default_state_dir(&repo)?,
    };
    let mut agent_env = file.agent_env.clone();
    agent_env.extend(args.agent_env);
    let provider = config::resolve_provider(
        config::ProviderFlags {
            base_url: args.provider_url,
            model: args.model,
            api_key_env: args.api_key_env,
            api_key_file: args.api_key_file,
        },
        &file.provider,
    )?;
    if let Some(crate::config::provider::KeySource::Env(var)) =
        provider.as_ref().map(|p| &p.key_source)
    {
        if agent_env.iter().any(|e| e == var) {
            bail!("--agent-env {var}: that variable holds the model provider's API key, which never reaches an agent");
        }
    }
    let limits = file.limits.resolve(args.max_tool_calls);
    let max_concurrent_runs =
        config::resolve_max_runs(args.max_runs.map(|n| n as usize), &file.limits);
    let mut allowed_origins = file.allowed_origins.clone();
    allowed_origins.extend(args.allow_origin);
    let isolation = crate::isolation::resolve(
        args.isolation.or(file.isolation),
        args.sandbox_user
            .as_deref()
            .or(file.sandbox_user.as_deref())
            .unwrap_or(hunkgate_sandbox::user::DEFAULT_USER),
        args.agent_network
            .or(file.agent_network)
            .unwrap_or(crate::isolation::AgentNetwork::Host),
        &agent_env,
    )?;
    let cfg = ServeConfig {
        repo,
        host: host.clone(),
        port,
        state_dir,
        agent: args.agent.or(file.agent.clone()),
        agent_timeout: Duration::from_secs(
            args.agent_timeout
                .or(file.agent_timeout_secs)
                .unwrap_or(config::DEFAULT_AGENT_TIMEOUT_SECS),
        ),
        agent_env,
        allowed_origins,
        mirror_refs: args.mirror_refs || file.mirror_refs,
        vcs: match args.vcs {
            Some(VcsArg::Git) => Vcs::Git,
            Some(VcsArg::Jj) => Vcs::Jj,
            None => file.vcs.unwrap_or(detected_vcs),
        },
        isolation,
        provider,
        limits,
        max_concurrent_runs,
    };
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr} (is another hub running? try --port)"))?;
    let actual = listener.local_addr()?;
    if !actual.ip().is_loopback() {
        tracing::warn!(%actual, "listening beyond loopback: anyone who can reach this address and has the token can change your checkout");
    }
    eprintln!(
        "hunkgate: serving {} on http://{actual} (state: {})",
        cfg.repo.display(),
        cfg.state_dir.display()
    );
    if let Some(p) = &cfg.provider {
        eprintln!(
            "hunkgate: built-in agent: {} at {} ({})",
            if p.model.is_empty() {
                "(model per run)"
            } else {
                &p.model
            },
            p.base_url,
            p.key_source
        );
    } else if cfg.agent.is_none() {
        eprintln!("hunkgate: no default agent; runs need \"agent\", or start with --agent 'claude -p {{prompt}}' or --provider-url for the built-in agent");
    }
    let shutdown = CancellationToken::new();
    let s = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        s.cancel();
    });
    crate::api::server::run(listener, cfg, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

fn short(v: &Value) -> String {
    v.as_str()
        .map(|s| visible_line(&s.chars().take(8).collect::<String>()))
        .unwrap_or_default()
}

/// Text that came from the hub (an agent's diff, description, output lines, file names) made
/// safe to print on a terminal: every control character is shown, not obeyed — `ESC` as `^[`,
/// other C0 controls as `^@`…`^_`, `DEL` as `^?`, C1 controls and Unicode bidi overrides as
/// `<U+009B>` — so an agent cannot move the cursor, erase lines, set the title or write the
/// clipboard. Newlines and tabs stay.
pub fn visible(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\x00'..='\x1f' => {
                out.push('^');
                out.push((c as u8 + 0x40) as char);
            }
            '\x7f' => out.push_str("^?"),
            '\u{80}'..='\u{9f}'
            | '\u{200e}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{061c}' => out.push_str(&format!("<U+{:04X}>", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

/// [`visible`] for text that must stay on one line: newlines show as `^J` too.
pub fn visible_line(s: &str) -> String {
    visible(s).replace('\n', "^J")
}

/// A string field of a hub reply, for one line of terminal output.
fn field(v: &Value) -> String {
    visible_line(v.as_str().unwrap_or(""))
}

fn print_suggestion(v: &Value) {
    println!(
        "suggestion {}  {}  {}/{} reviewed{}",
        field(&v["id"]),
        field(&v["status"]),
        v["reviewed_count"],
        v["hunk_count"],
        v["closed"]
            .as_str()
            .map(|c| format!(" ({})", visible_line(c)))
            .unwrap_or_default()
    );
    // Every line of the description indented, so none can pass for a hunk header.
    for line in v["description"].as_str().unwrap_or("").split('\n') {
        println!("  {}", visible(line));
    }
    let skipped = v["skipped"].as_array().cloned().unwrap_or_default();
    if !skipped.is_empty() {
        println!("  skipped (not reviewed, never changed by this suggestion):");
        for f in skipped {
            println!("    {}: {}", field(&f["path"]), field(&f["reason"]));
        }
    }
    for (i, h) in v["hunks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        println!(
            "\n[{i}] {:<9} {:<7} {}",
            field(&h["state"]),
            field(&h["kind"]),
            field(&h["id"])
        );
        if let Some(d) = h["description"].as_str() {
            for line in d.split('\n') {
                println!("    # {}", visible(line));
            }
        }
        if let Some(c) = h["conflict"].as_str() {
            println!("    conflict: {}", visible_line(c));
        }
        print!("{}", visible(h["diff"].as_str().unwrap_or("")));
    }
}

async fn decide(
    client: ClientArgs,
    id: String,
    hunks: Vec<String>,
    action: &str,
    comment: Option<String>,
) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client)?;
    let mut failed = false;
    if hunks.is_empty() {
        let v = c
            .post(
                "/feedback/all",
                json!({"suggestion_id": id, "action": action, "comment": comment}),
            )
            .await?;
        if client.json {
            println!("{v}");
        } else {
            for d in v["decided"].as_array().cloned().unwrap_or_default() {
                println!("{:<9} {}", field(&d["state"]), field(&d["hunk_id"]));
            }
            for f in v["failed"].as_array().cloned().unwrap_or_default() {
                println!("FAILED    {}: {}", field(&f["hunk_id"]), field(&f["error"]));
            }
            println!("{} hunks remaining", v["remaining_hunks"]);
        }
        failed = v["failed"].as_array().is_some_and(|f| !f.is_empty());
    } else {
        for h in hunks {
            let body =
                json!({"suggestion_id": id, "hunk_id": h, "action": action, "comment": comment});
            match c.post("/feedback", body).await {
                Ok(v) if client.json => println!("{v}"),
                Ok(v) => println!(
                    "{:<9} {}",
                    field(&v["hunk"]["state"]),
                    field(&v["hunk"]["id"])
                ),
                Err(e) => {
                    failed = true;
                    eprintln!("{}: {}", visible_line(&h), visible(&e.to_string()));
                }
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn run(client: ClientArgs, body: Value, no_wait: bool) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client)?;
    // Subscribe first, so no event of the run can slip by between starting it and listening.
    let mut ws = if no_wait {
        None
    } else {
        Some(c.websocket().await?)
    };
    let v = c.post("/runs", body).await?;
    let run_id = v["run_id"].as_str().unwrap_or("").to_string();
    if no_wait {
        println!("{}", if client.json { v.to_string() } else { run_id });
        return Ok(ExitCode::SUCCESS);
    }
    if !client.json {
        eprintln!("run {run_id} queued");
    }
    let Some(ws) = ws.as_mut() else {
        return Ok(ExitCode::SUCCESS);
    };
    while let Some(msg) = ws.next().await {
        let msg = msg.context("reading hub events")?;
        let Ok(text) = msg.to_text() else { continue };
        let Ok(ev) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        if ev["run_id"].as_str() != Some(&run_id) {
            continue;
        }
        if client.json {
            println!("{ev}");
        }
        match (ev["type"].as_str(), ev["status"].as_str()) {
            (Some("clarification.requested"), _) if !client.json => {
                // Asked on the terminal; the answer may also come from another client.
                let question = visible(ev["question"].as_str().unwrap_or(""));
                eprintln!("\nThe agent asks: {question}\nYour answer (empty line: skip; or `hunkgate answer {run_id} …` later):");
                let line = tokio::task::spawn_blocking(|| {
                    let mut s = String::new();
                    std::io::stdin().read_line(&mut s).map(|n| (n, s))
                })
                .await?;
                if let Ok((n, text)) = line {
                    if n > 0 {
                        let text = text.trim();
                        let body = if text.is_empty() {
                            json!({"question_id": ev["question_id"], "skip": true})
                        } else {
                            json!({"question_id": ev["question_id"], "answer": text})
                        };
                        if let Err(e) = c.post(&format!("/runs/{run_id}/clarify"), body).await {
                            eprintln!("(not sent: {})", visible(&e.to_string()));
                        }
                    }
                }
            }
            (Some("suggestion.error"), _) => {
                if !client.json {
                    eprintln!("error: {}", visible(ev["message"].as_str().unwrap_or("")));
                }
                return Ok(ExitCode::FAILURE);
            }
            (Some("suggestion.status"), Some(status)) => {
                if !client.json {
                    eprintln!(
                        "[{}] {}",
                        visible_line(status),
                        visible_line(ev["message"].as_str().unwrap_or(""))
                    );
                }
                match status {
                    "no_changes" => return Ok(ExitCode::SUCCESS),
                    "ready" => {
                        let run = c.get(&format!("/runs/{run_id}")).await?;
                        let finished =
                            !matches!(run["status"].as_str(), Some("working" | "waiting_for_user"));
                        if let Some(sid) = ev["suggestion_id"].as_str() {
                            let s = c.get(&format!("/suggestions/{sid}")).await?;
                            if !client.json {
                                print_suggestion(&s);
                            }
                        }
                        if finished {
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    bail!("the hub closed the connection before run {run_id} finished")
}

/// The reviewer's client: token from the hub's state dir, URL from the hub's `hub.json`.
fn reviewer_client(args: &ClientArgs) -> anyhow::Result<HubClient> {
    let state_dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => config::default_state_dir(&repo_root(args.repo.clone())?)?,
    };
    let token_path = state_dir.join("token");
    let token = std::fs::read_to_string(&token_path)
        .with_context(|| {
            format!(
                "reading the hub token {} (is `hunkgate serve` running for this repository?)",
                token_path.display()
            )
        })?
        .trim()
        .to_string();
    let url = match &args.url {
        Some(u) => u.clone(),
        None => std::fs::read_to_string(state_dir.join("hub.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| v["url"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", config::DEFAULT_PORT)),
    };
    Ok(HubClient::new(&url, token)?)
}

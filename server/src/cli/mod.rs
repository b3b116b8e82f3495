//! The `hunkgate` command line, a file per command group:
//!
//! - [`serve`]: `serve` (the hub itself); [`setup`]: `setup` (the sandbox user);
//! - [`review`]: `list`, `show`, `accept`, `reject`, `undo`, `complete`; [`modify`]: `modify`;
//! - [`run`]: `run` (follow a run to its suggestion), `answer`; [`runs`]: `runs`, `cancel`;
//! - [`context`]: `context add|list` (what is pinned to a session);
//! - [`status`]: `status` (the user's view of the hub, or the agent's status inside a run);
//! - [`agent`]: the agent's `publish` and `agent-status`; [`mcp`]: the agent's MCP server;
//! - `token` here; [`client`]: the HTTP/WebSocket client they share; [`locate`]: which hub a
//!   reviewer's command talks to; [`term`]: printing agent text safely.
//!
//! Replies are read into the protocol's types ([`typed`]) before they are printed.

pub mod agent;
pub mod client;
pub mod context;
pub mod gc;
pub mod locate;
pub mod mcp;
pub mod modify;
pub mod process;
pub mod review;
pub mod run;
pub mod runs;
pub mod serve;
pub mod setup;
pub mod status;
pub mod term;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use serde_json::Value;

pub(crate) use crate::cli::locate::reviewer_client;

pub use crate::cli::term::{visible, visible_line};

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

// Its doc comments are `--help` text (clap), written for people: `[retention]`, `[1]` and
// `<id>` there are words, not rustdoc links or HTML.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
#[derive(Subcommand)]
enum Cmd {
    /// Start the hub for a repository (defaults: the repository around the current directory,
    /// 127.0.0.1:4097, or a free port when that is taken).
    Serve(Box<crate::cli::serve::ServeArgs>),
    /// Create or check the sandbox user agents run as (and the sudoers rule a non-root hub
    /// needs): `hunkgate setup --check` says what is missing.
    Setup(crate::cli::setup::SetupArgs),
    /// (Internal) the sandbox helper, run as the sandbox user by the hub.
    #[command(hide = true)]
    SandboxHelper { op: String },
    /// Start an agent run and follow it until its suggestion is ready. Ctrl-C asks whether to
    /// cancel the run or leave it running (off a terminal it cancels it).
    Run {
        prompt: String,
        /// Agent command template for this run (`{prompt}` is replaced by the prompt).
        #[arg(long)]
        agent: Option<String>,
        /// An agent spoken to over the Agent Client Protocol for this run: its command, e.g.
        /// 'opencode acp'.
        #[arg(long, value_name = "COMMAND", conflicts_with_all = ["agent", "model", "provider", "agent_mode"])]
        acp: Option<String>,
        /// Seconds before the agent is killed.
        #[arg(long)]
        timeout: Option<u64>,
        /// The built-in agent's model for this run (needs a hub started with --provider-url).
        #[arg(long)]
        model: Option<String>,
        /// The built-in agent's provider for this run, by its config name
        /// (`[providers.<name>]`).
        #[arg(long)]
        provider: Option<String>,
        /// `local`, `remote` or `hybrid_auto` for this run (the built-in agent).
        #[arg(long, value_name = "MODE")]
        agent_mode: Option<String>,
        /// Run in this session (id, prefix, or `last`: the newest run's), so the agent sees its
        /// history and the reviewer's decisions (a kept ACP agent is reached again).
        #[arg(long)]
        session: Option<String>,
        /// Print the run id and return without waiting.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Pin context to a session for the agent of its next runs (a web page, a note, a file), or
    /// list what is pinned.
    Context {
        #[command(subcommand)]
        cmd: crate::cli::context::ContextCmd,
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
    /// List runs and their state: queued and running ones and the recent finished ones (--all:
    /// every one).
    Runs {
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Collect finished work past its retention now (the hub also does at start, after each
    /// new run and every [retention] gc_interval_minutes): finished sessions, runs and
    /// suggestions older than [retention] completed_ttl_hours (72), or past max_sessions (25)
    /// or max_runs_per_session (40), with their journal records, run logs and checkpoint
    /// objects. Nothing queued, running, waiting for an answer or with a hunk to review is
    /// ever collected.
    Gc {
        /// Say what would be removed and how many bytes; remove nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Bring back a file an accepted hunk deleted (a deletion, or the old path of a rename):
    /// its last version, byte for byte and with its mode, for as long as its suggestion is
    /// kept. Refuses, changing nothing, when something is at the path again.
    Restore {
        /// Relative to the repository root, as `show` names it.
        path: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cancel a run (its id or a unique prefix) and wait until its agent has stopped.
    Cancel {
        run: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// What is going on: the hub, its runs and the suggestions with pending hunks. Inside an
    /// agent run (HUNKGATE_URL and HUNKGATE_AGENT_TOKEN set) or with a MESSAGE: the agent's
    /// status, as `agent-status`.
    Status {
        /// (Agent side) the one-line status to send.
        message: Option<String>,
        /// (Agent side) a short word: working, testing, ... (default: working)
        #[arg(long)]
        state: Option<String>,
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
    /// Show a suggestion with its hunks, numbered [1], [2], ... (an id prefix is enough).
    ///
    /// A hunk's line says DESTRUCTIVE (an accept-all leaves it pending), OVERSIZED (over
    /// `[review] max_hunk_lines` / `max_hunk_bytes` and not cut into parts: take it whole, or
    /// by `--lines`) or REWRITE (one of the hunks of a file the change rewrote).
    Show {
        id: String,
        /// Only this hunk (its number, id or `<file>:<index>`), with the lines of its diff
        /// numbered as `accept --lines` and `reject --lines` count them.
        hunk: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Accept hunks (all pending ones when none are named) and apply them to the checkout.
    Accept {
        id: String,
        /// Hunk numbers as `show` prints them (from 1), hunk ids, or `<file>:<index>` (the end
        /// of a hunk id: index counts from 0 within the file).
        hunks: Vec<String>,
        /// Land the clean three-way merge of the one hunk named, as `show` printed it: the
        /// SHA-256 of the file it was computed against. If the file changed since, the hub
        /// merges again and nothing is written.
        #[arg(long, value_name = "SHA256", conflicts_with = "lines")]
        merged_against: Option<String>,
        /// Accept only these lines of the one hunk named: `FIRST-LAST` (or `N`), counting the
        /// lines of its diff after the `@@` line from 1, as `show ID HUNK` numbers them. The selected `+`
        /// lines are added and `-` lines removed; the rest of the hunk stays pending as a new
        /// hunk.
        #[arg(long, value_parser = review::parse_lines)]
        lines: Option<[usize; 2]>,
        /// With no hunks named: accept the destructive ones too (file deletions, renames,
        /// mode changes, large deletions), which an accept-all otherwise leaves pending.
        #[arg(long)]
        include_destructive: bool,
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Reject hunks (all pending ones when none are named); rejecting an applied hunk undoes it.
    /// The comment is kept in the feedback log and given to the built-in agent in the session's
    /// next run.
    Reject {
        id: String,
        /// Hunk numbers (from 1), hunk ids, or `<file>:<index>`, as for `accept`.
        hunks: Vec<String>,
        /// Reject only these lines of the one hunk named (`FIRST-LAST` or `N`, as for
        /// `accept`): they are dropped from it, and the rest stays pending as a new hunk.
        #[arg(long, value_parser = review::parse_lines)]
        lines: Option<[usize; 2]>,
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Reverse-apply accepted hunks and make them pending again.
    Undo {
        id: String,
        /// Hunk numbers (from 1), hunk ids, or `<file>:<index>`, as for `accept`.
        #[arg(required = true)]
        hunks: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Apply your own version of a hunk: its new side opens in $VISUAL / $EDITOR (else vi);
    /// saving a change (and exiting 0) applies it, anything else changes nothing.
    Modify {
        id: String,
        /// The hunk's number (from 1), id, or `<file>:<index>`.
        hunk: String,
        /// Send this file's one-hunk unified diff (over the hunk's old lines) instead of editing.
        #[arg(long)]
        diff: Option<PathBuf>,
        #[arg(long)]
        comment: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Close a suggestion: pending hunks count as rejected.
    Complete {
        id: String,
        action: crate::cli::review::Completion,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the reviewer token of this repository's hub (for curl: `-H "Authorization: Bearer $(hunkgate token)"`).
    Token {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the URL of this repository's hub, wherever it listens (for curl: `H=$(hunkgate url)`).
    Url {
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
    /// (Agent side) send a one-line status to the reviewer (`status MESSAGE` inside a run too).
    AgentStatus {
        message: String,
        /// A short word: working, testing, ...
        #[arg(long, default_value = "working")]
        state: String,
    },
    /// (Agent side) MCP server over stdio: publish_suggestion, suggestion_status,
    /// list_suggestions, get_feedback
    Mcp,
}

#[derive(Args, Clone)]
pub struct ClientArgs {
    /// The repository whose hub to talk to (default: around the current directory).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// The hub's state dir: talk to the hub of its hub.json, with its token (default: the hub
    /// the repository's discovery record in $XDG_STATE_HOME/hunkgate/hubs/ names, else the
    /// default state dir's).
    #[arg(long, env = "HUNKGATE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Hub URL (default: found as --state-dir says). Its /health must name the repository, or
    /// the token is not sent.
    #[arg(long, env = "HUNKGATE_HUB_URL")]
    pub url: Option<String>,
    /// The file holding the hub's reviewer token (default: the token of the hub found).
    #[arg(long, env = "HUNKGATE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn main() -> ExitCode {
    // An agent's PID namespace init or group leader, exec'd by the hub: nothing else runs.
    #[cfg(target_os = "linux")]
    hunkgate_sandbox::agent::pidns::take_role(&std::env::args_os().collect::<Vec<_>>());
    let cli = Cli::parse();
    if let Cmd::SandboxHelper { op } = &cli.cmd {
        // Before any thread exists: the helper forks without exec (a PID namespace's init).
        return hunkgate_sandbox::helper::main(op);
    }
    // The hub's agents' namespace inits and group leaders become this program, exec'd.
    #[cfg(target_os = "linux")]
    hunkgate_sandbox::agent::pidns::exec_roles_with(c"/proc/self/exe");
    process::tune_malloc();
    if !matches!(cli.cmd, Cmd::Serve(_) | Cmd::Mcp) {
        hunkgate_sandbox::die_on_broken_pipe();
    }
    init_logging();
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

/// Logs on stderr, filtered by `HUNKGATE_LOG` (default `info`); colour codes only on a terminal,
/// so a log file or a journal gets plain text.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HUNKGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

pub(crate) fn repo_root(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let start = match explicit {
        Some(p) => p,
        None => std::env::current_dir()?,
    };
    let root = hunkgate_sandbox::snapshot::discover_repo_root(&start)?;
    Ok(root.canonicalize().unwrap_or(root))
}

async fn dispatch(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Serve(args) => serve::serve(*args).await,
        Cmd::Setup(args) => setup::setup(args),
        Cmd::SandboxHelper { .. } => unreachable!("the sandbox helper runs before the runtime"),
        Cmd::Publish {
            message,
            files,
            json,
        } => agent::publish(message, files, json).await,
        Cmd::AgentStatus { message, state } => agent::status(message, state).await,
        Cmd::Mcp => {
            mcp::run_stdio().await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Token { client } => {
            println!("{}", reviewer_client(&client).await?.token());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Url { client } => {
            println!("{}", reviewer_client(&client).await?.url());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Status {
            message,
            state,
            client,
        } => status::status(message, state, client).await,
        Cmd::Runs { all, client } => runs::runs(all, client).await,
        Cmd::Cancel { run, client } => runs::cancel(run, client).await,
        Cmd::Gc { dry_run, client } => gc::gc(dry_run, client).await,
        Cmd::Context { cmd } => context::context(cmd).await,
        Cmd::Run {
            prompt,
            agent,
            acp,
            timeout,
            model,
            provider,
            agent_mode,
            session,
            no_wait,
            client,
        } => {
            let req = run::RunRequest {
                prompt,
                agent,
                acp,
                timeout,
                model,
                provider,
                agent_mode,
                session,
                no_wait,
            };
            run::run(client, req).await
        }
        Cmd::Answer {
            run,
            answer,
            skip,
            client,
        } => run::answer(run, answer, skip, client).await,
        review => dispatch_review(review).await,
    }
}

/// The reviewer's commands on suggestions and their hunks ([`dispatch`] passes them on).
async fn dispatch_review(cmd: Cmd) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::List { all, client } => review::list(all, client).await,
        Cmd::Show { id, hunk, client } => review::show(id, hunk, client).await,
        Cmd::Accept {
            id,
            hunks,
            merged_against: Some(sha),
            lines: _,
            comment,
            client,
            ..
        } => review::accept_merged(client, id, hunks, sha, comment).await,
        Cmd::Accept {
            id,
            hunks,
            merged_against: None,
            lines,
            include_destructive,
            comment,
            client,
        } => {
            let action = ("accept", lines);
            review::decide(client, id, hunks, action, comment, include_destructive).await
        }
        Cmd::Reject {
            id,
            hunks,
            lines,
            comment,
            client,
        } => review::decide(client, id, hunks, ("reject", lines), comment, false).await,
        Cmd::Undo { id, hunks, client } => {
            review::decide(client, id, hunks, ("undo", None), None, false).await
        }
        Cmd::Modify {
            id,
            hunk,
            diff,
            comment,
            client,
        } => modify::modify(client, id, hunk, diff, comment).await,
        Cmd::Restore { path, client } => review::restore(path, client).await,
        Cmd::Complete { id, action, client } => review::complete(id, action, client).await,
        _ => unreachable!("dispatch runs every other command itself"),
    }
}

/// A hub reply read into the protocol type it is documented to be.
pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> anyhow::Result<T> {
    serde_json::from_value(v).with_context(|| {
        format!(
            "the hub's answer is not the {} this hunkgate expects (a hub of another version?)",
            std::any::type_name::<T>()
                .rsplit("::")
                .next()
                .unwrap_or("reply")
        )
    })
}

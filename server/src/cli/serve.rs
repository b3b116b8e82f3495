//! `hunkgate serve`: resolve the configuration (flags > environment > file > defaults), bind,
//! and serve until Ctrl-C or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use hunkgate_sandbox::jj::Vcs;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ServeConfig};

#[derive(Clone, Copy, ValueEnum)]
enum VcsArg {
    Git,
    Jj,
}

// Its doc comments are `--help` text (clap), written for people: `[retention]`, `[1]` and
// `<id>` there are words, not rustdoc links or HTML.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
#[derive(Args)]
pub struct ServeArgs {
    /// The repository to serve (default: the git repository containing the current directory).
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Address to bind (env HUNKGATE_HOST or SUGGESTION_MANAGER_HOST; default 127.0.0.1).
    #[arg(long)]
    host: Option<String>,
    /// Port (env HUNKGATE_PORT or SUGGESTION_MANAGER_PORT; 0 picks a free one). Default: 4097
    /// if it is free, else a free one; clients find the hub through its discovery record
    /// ($XDG_STATE_HOME/hunkgate/hubs/), whatever its port and state dir.
    #[arg(long)]
    port: Option<u16>,
    /// Where the token, journal, feedback log and checkpoints live.
    #[arg(long, env = "HUNKGATE_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Default agent command template, e.g. 'claude -p {prompt}'.
    #[arg(long)]
    agent: Option<String>,
    /// Default agent spoken to over the Agent Client Protocol: its command, e.g.
    /// 'opencode acp' (used when no --agent is given; also `[acp] command`).
    #[arg(long, value_name = "COMMAND")]
    acp: Option<String>,
    /// Put an ACP agent's permission questions for this tool kind to the reviewer (repeatable:
    /// execute, edit, delete, move, fetch, read, search, think, switch_mode, other; also
    /// `[acp] ask`). Others are allowed: the sandbox is the boundary.
    #[arg(long = "acp-ask", value_name = "KIND")]
    acp_ask: Vec<String>,
    /// Seconds an ACP permission question waits for the reviewer before the agent is told
    /// "reject once" (default 600).
    #[arg(long, value_name = "SECS")]
    acp_ask_timeout: Option<u64>,
    /// Seconds an idle ACP agent is kept for its session's next run, which then reaches the
    /// same process and ACP session (default 300; 0: a new process for every run; also `[acp]
    /// keep_alive_secs`).
    #[arg(long, value_name = "SECS")]
    acp_keep_alive: Option<u64>,
    /// Seconds before an agent run is killed (default 1800).
    #[arg(long)]
    agent_timeout: Option<u64>,
    /// Pass this environment variable through to agents (repeatable).
    #[arg(long = "agent-env")]
    agent_env: Vec<String>,
    /// Under --isolation user: put this directory first on the agent's PATH (repeatable; also
    /// `agent_path = [...]` in the config). The agent's PATH is these, the system's directories
    /// and those of your PATH the sandbox user can search.
    #[arg(long = "agent-path", value_name = "DIR")]
    agent_path: Vec<String>,
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

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let (cfg, port_given) = serve_config(args)?;
    let listener = bind(&cfg.host, cfg.port, port_given).await?;
    let actual = listener.local_addr()?;
    if !actual.ip().is_loopback() {
        tracing::warn!(%actual, "listening beyond loopback: anyone who can reach this address and has the token can change your checkout");
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    crate::api::server::run_then(listener, cfg, shutdown, |cfg| announce(cfg, actual)).await?;
    Ok(ExitCode::SUCCESS)
}

/// Bind `host:port`. A port nobody asked for (`port_given` false: the default) that is taken —
/// by the hub of another repository, most often — gives way to any free one: clients find the
/// hub through its discovery record, not by its port. A port asked for is that port or an error.
async fn bind(host: &str, port: u16, port_given: bool) -> anyhow::Result<tokio::net::TcpListener> {
    let addr = |port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    match tokio::net::TcpListener::bind(addr(port)).await {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && !port_given => {
            tracing::info!(port, "the default port is taken: serving on a free one");
            tokio::net::TcpListener::bind(addr(0))
                .await
                .with_context(|| format!("binding {}", addr(0)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(e).with_context(|| {
            format!(
                "binding {}: the port is taken (by the hub of this or another repository?); omit --port (and HUNKGATE_PORT, the config file's port) to get a free one",
                addr(port)
            )
        }),
        Err(e) => Err(e).with_context(|| format!("binding {}", addr(port))),
    }
}

/// Flags > environment > config file > defaults; and whether any of them named the port.
fn serve_config(args: ServeArgs) -> anyhow::Result<(ServeConfig, bool)> {
    let file = config::load_file(args.config.as_deref())?;
    file.sensitive.check()?;
    let repo = super::repo_root(args.repo)?;
    let detected_vcs = Vcs::detect(&repo);
    let host = config::resolve_host(args.host, &file);
    let port_given = config::resolve_port(args.port, &file)?;
    let port = port_given.unwrap_or(config::DEFAULT_PORT);
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => config::default_state_dir(&repo)?,
    };
    let mut agent_env = file.agent_env.clone();
    agent_env.extend(args.agent_env);
    let flags = config::ProviderFlags {
        base_url: args.provider_url,
        model: args.model,
        api_key_env: args.api_key_env,
        api_key_file: args.api_key_file,
    };
    let (provider, routing) = models_of(flags, &file, &agent_env)?;
    let limits = file.limits.resolve(args.max_tool_calls);
    let max_concurrent_runs =
        config::resolve_max_runs(args.max_runs.map(|n| n as usize), &file.limits);
    let mut agent_path = file.agent_path.clone();
    agent_path.extend(args.agent_path);
    let mut allowed_origins = file.allowed_origins.clone();
    allowed_origins.extend(args.allow_origin);
    let (isolation, accel) = isolation_of(
        &file,
        args.isolation,
        args.sandbox_user.as_deref(),
        args.agent_network,
        &agent_env,
        agent_path,
    )?;
    let cfg = ServeConfig {
        repo,
        host,
        port,
        state_dir,
        agent: args.agent.or(file.agent.clone()),
        acp: file.acp.resolve(
            args.acp,
            args.acp_ask,
            args.acp_ask_timeout,
            args.acp_keep_alive,
        )?,
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
        routing,
        limits,
        max_concurrent_runs,
        read_limits: file.limits.read_limits(),
        retention: file.retention.resolve(),
        review: file.review.resolve(),
        sensitive: file.sensitive.clone(),
        url_context: file
            .context
            .resolve()
            .map_err(config::ConfigError::Context)?,
        checks: config::resolve_checks(&file)?,
        accel,
    };
    Ok((cfg, port_given.is_some()))
}

/// The model provider of the flags or the config, and the named providers and routing rules;
/// refused when an agent would be given a provider's API key through `--agent-env`.
fn models_of(
    flags: config::ProviderFlags,
    file: &config::FileConfig,
    agent_env: &[String],
) -> anyhow::Result<(
    Option<crate::config::provider::ProviderConfig>,
    config::routing::Routing,
)> {
    let provider = config::resolve_provider(flags, &file.provider)?;
    let routing = config::resolve_routing(provider.as_ref(), file)?;
    for p in &routing.providers {
        if let crate::config::provider::KeySource::Env(var) = &p.cfg.key_source {
            if agent_env.iter().any(|e| e == var) {
                bail!("--agent-env {var}: that variable holds the model provider's API key, which never reaches an agent");
            }
        }
    }
    Ok((provider, routing))
}

/// How agents are isolated (flags > config > defaults), with the accelerators' switches
/// (`[accel]`, `HUNKGATE_ACCEL_OFF`) given to user isolation.
fn isolation_of(
    file: &config::FileConfig,
    isolation: Option<crate::isolation::IsolationMode>,
    sandbox_user: Option<&str>,
    agent_network: Option<crate::isolation::AgentNetwork>,
    agent_env: &[String],
    agent_path: Vec<String>,
) -> anyhow::Result<(crate::isolation::Isolation, hunkgate_sandbox::accel::Accel)> {
    let accel = config::resolve_accel(file, std::env::var("HUNKGATE_ACCEL_OFF").ok().as_deref())
        .map_err(anyhow::Error::msg)?;
    let mut isolation = crate::isolation::resolve(
        isolation.or(file.isolation),
        sandbox_user
            .or(file.sandbox_user.as_deref())
            .unwrap_or(hunkgate_sandbox::user::DEFAULT_USER),
        agent_network
            .or(file.agent_network)
            .unwrap_or(crate::isolation::AgentNetwork::Host),
        agent_env,
        agent_path,
    )?;
    if let crate::isolation::Isolation::User(iso) = &mut isolation {
        iso.accel = accel;
    }
    if !accel.off().is_empty() {
        tracing::info!(off = ?accel.off(), "accelerators off ([accel], HUNKGATE_ACCEL_OFF)");
    }
    Ok((isolation, accel))
}

/// What is served where, and which agent runs, on stderr.
fn announce(cfg: &ServeConfig, actual: std::net::SocketAddr) {
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
    }
    for p in cfg.routing.providers.iter().filter(|p| p.name != "default") {
        eprintln!(
            "hunkgate: built-in agent provider {}: {} at {} ({})",
            p.name,
            if p.cfg.model.is_empty() {
                "(model by the rules)"
            } else {
                &p.cfg.model
            },
            p.cfg.base_url,
            match &p.cfg.key_source {
                // A named provider never takes HUNKGATE_API_KEY: say where its key would go.
                crate::config::provider::KeySource::None => format!(
                    "no API key: [providers.{}] api_key_env or api_key_file sets one",
                    p.name
                ),
                other => other.to_string(),
            }
        );
    }
    if !cfg.routing.providers.is_empty() {
        return;
    }
    if let (None, Some(acp)) = (&cfg.agent, &cfg.acp.command) {
        eprintln!("hunkgate: ACP agent: {acp}");
    } else if cfg.agent.is_none() {
        eprintln!("hunkgate: no default agent; runs need \"agent\", or start with --agent 'claude -p {{prompt}}' or --provider-url for the built-in agent");
    }
}

/// Ctrl-C or SIGTERM: stop serving (runs are stopped, the hub exits cleanly).
async fn cancel_on_signal(shutdown: CancellationToken) {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    shutdown.cancel();
}

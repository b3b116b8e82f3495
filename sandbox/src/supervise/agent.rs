//! Agent processes: a command template turned into argv, run in the sandbox with a timeout and
//! cancellation that kill the agent's whole process tree — by signalling its process group
//! (same user), or through the sandbox helper's lifeline (separate user, see [`crate::helper`]).

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::workspace::{AgentCommand, Sandbox, Stop};

mod output;
mod template;
pub use output::*;
pub use template::*;

/// How long a supervisor gets, after being told to stop, to kill the agent's tree and exit
/// before the hub kills the supervisor itself (its lifeline is closed by then, so it still
/// cleans up).
const SUPERVISOR_GRACE: Duration = Duration::from_secs(10);

/// How an agent process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    Cancelled,
    /// It could not be started at all (missing program, permission).
    SpawnFailed(String),
}

impl Exit {
    pub fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with status {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
            Exit::TimedOut => write!(f, "timed out"),
            Exit::Cancelled => write!(f, "cancelled"),
            Exit::SpawnFailed(e) => write!(f, "could not be started: {e}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug)]
pub struct Outcome {
    pub exit: Exit,
    /// The last lines the agent wrote to stderr (for `experiment_failed` messages).
    pub stderr_tail: String,
    pub stdout_tail: String,
}

const TAIL_LINES: usize = 40;

/// The last [`TAIL_LINES`] lines of each output stream.
#[derive(Default)]
struct Tails {
    stdout: VecDeque<String>,
    stderr: VecDeque<String>,
}

impl Tails {
    /// The sandbox helper's word that the agent's program could not be run (the last line of
    /// stderr, after [`crate::supervise::agent_path::NOT_STARTED`]), taken out of the tail.
    fn not_started(&mut self) -> Option<String> {
        let why = self
            .stderr
            .back()?
            .strip_prefix(crate::supervise::agent_path::NOT_STARTED)?
            .to_string();
        self.stderr.pop_back();
        Some(why)
    }

    fn record(&mut self, stream: Stream, line: &str) {
        let tail = match stream {
            Stream::Stderr => &mut self.stderr,
            Stream::Stdout => &mut self.stdout,
        };
        tail.push_back(line.to_string());
        if tail.len() > TAIL_LINES {
            tail.pop_front();
        }
    }
}

/// Run `argv` in `sandbox` with `env`; `on_line` sees every output line as it arrives.
pub async fn run(
    sandbox: &dyn Sandbox,
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
    cancel: CancellationToken,
    on_line: impl FnMut(Stream, &str) + Send,
) -> Outcome {
    let cmd = sandbox.agent_command(argv, env, timeout);
    match start(cmd, argv, env, false) {
        Ok((process, _)) => process.wait(timeout, cancel, on_line).await,
        Err(outcome) => outcome,
    }
}

/// An agent spoken to over its stdio (see [`spawn_interactive`]).
pub struct Interactive {
    /// What is sent here is written to the agent's stdin, in order (bounded: a sender waits
    /// while the agent does not read). Dropping every sender closes the agent's stdin where
    /// the hub holds it (`--isolation none`); under a supervisor its lifeline stays open.
    pub stdin: tokio::sync::mpsc::Sender<Vec<u8>>,
    /// The agent's stdout, raw: the caller frames it (and bounds what it holds). It ends when
    /// the agent's tree is gone.
    pub stdout: Pipe,
    /// The process: wait for it, stop it.
    pub process: Process,
}

/// Start `argv` in `sandbox` as [`run`] does — the same environment, namespaces, limits and
/// supervision — but with its stdin and stdout given to the caller ([`Interactive`]); only
/// its stderr lines go to [`Process::wait`]'s `on_line`. Err: it could not be started.
pub fn spawn_interactive(
    sandbox: &dyn Sandbox,
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<Interactive, Outcome> {
    let cmd = sandbox.interactive_command(argv, env, timeout);
    let (process, io) = start(cmd, argv, env, true)?;
    let (stdin, stdout) = io.ok_or_else(|| Outcome {
        exit: Exit::SpawnFailed(format!("{}: no stdio to speak over", argv[0])),
        stderr_tail: String::new(),
        stdout_tail: String::new(),
    })?;
    Ok(Interactive {
        stdin,
        stdout,
        process,
    })
}

/// A started agent process (or its supervisor), to wait for.
pub struct Process {
    agent: Agent,
    output: tokio::sync::mpsc::Receiver<(Stream, String)>,
    settled: CancellationToken,
    supervised: bool,
    argv0: String,
    env: Vec<(String, String)>,
}

/// The agent's stdin sender and its raw stdout, for [`spawn_interactive`].
type Stdio2 = (tokio::sync::mpsc::Sender<Vec<u8>>, Pipe);

/// Spawn `cmd`: with `interactive`, its stdin fed from a channel and its stdout handed back
/// raw; otherwise both its output streams read as lines for [`Process::wait`].
fn start(
    cmd: AgentCommand,
    argv: &[String],
    env: &[(String, String)],
    interactive: bool,
) -> Result<(Process, Option<Stdio2>), Outcome> {
    let AgentCommand {
        command: mut cmd,
        stop,
    } = cmd;
    // A supervisor is never signalled as a group of the hub's, even without its lifeline.
    let supervised = matches!(stop, Stop::Lifeline { .. });
    let Prepared { lifeline, verdict } = prepare_command(&mut cmd, stop, interactive);
    let spawned = cmd.spawn();
    // Only the agent's side may hold its ends of the verdict's pipe and of the lifeline from
    // here on (the command keeps the lifeline's until it is dropped).
    drop(cmd);
    let verdict = verdict.map(|v| Heard::Pipe(v.rx));
    let mut child = spawned.map_err(|e| Outcome {
        exit: Exit::SpawnFailed(format!("{}: {e}", argv[0])),
        stderr_tail: String::new(),
        stdout_tail: String::new(),
    })?;
    let (stdin_tx, stdin_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(STDIN_QUEUE);
    let mut stdin_rx = interactive.then_some(stdin_rx);
    let (close_lifeline, verdict) =
        match lifeline.map(|l| hold_lifeline(l.request, l.ours, stdin_rx.take())) {
            Some(Ok((close, word))) => (Some(close), Some(Heard::Lifeline(word))),
            Some(Err(e)) => {
                // Without its lifeline the supervisor stops the agent at once: say why.
                tracing::warn!(error = %e, "the sandbox supervisor's lifeline cannot be held");
                (None, None)
            }
            None => (None, verdict),
        };
    if let (Some(rx), Some(pipe)) = (stdin_rx, child.stdin.take()) {
        tokio::spawn(feed_stdin(rx, pipe));
    }
    let pid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let settled = CancellationToken::new();
    let stdout = child
        .stdout
        .take()
        .map(|p| Box::new(Settling::new(p, settled.clone())) as Pipe);
    let (lines_of_stdout, io) = match (interactive, stdout) {
        (true, Some(out)) => (None, Some((stdin_tx, out))),
        (_, out) => (out, None),
    };
    let output = spawn_line_readers(lines_of_stdout, child.stderr.take(), &settled);
    let agent = Agent {
        child,
        pid,
        pgid: if supervised { None } else { pid },
        supervised,
        close_lifeline,
        verdict,
        heard: false,
    };
    let process = Process {
        agent,
        output,
        settled,
        supervised,
        argv0: argv[0].clone(),
        env: env.to_vec(),
    };
    Ok((process, io))
}

/// How many writes to an interactive agent's stdin may wait before a sender does.
const STDIN_QUEUE: usize = 64;

/// Write what comes on `rx` to the agent's stdin pipe until the senders are gone (then close
/// it: EOF) or the agent stops reading.
async fn feed_stdin(
    mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    mut pipe: tokio::process::ChildStdin,
) {
    use tokio::io::AsyncWriteExt;
    while let Some(bytes) = rx.recv().await {
        if pipe.write_all(&bytes).await.is_err() || pipe.flush().await.is_err() {
            return;
        }
    }
}

impl Process {
    /// Wait for the agent to exit (or stop it on `timeout` or `cancel`), handing its output
    /// lines — stderr only, for an interactive one — to `on_line`.
    pub async fn wait(
        self,
        timeout: Duration,
        cancel: CancellationToken,
        on_line: impl FnMut(Stream, &str) + Send,
    ) -> Outcome {
        let Process {
            mut agent,
            output,
            settled,
            supervised,
            argv0,
            env,
        } = self;
        let mut output = Output {
            rx: output,
            tails: Tails::default(),
            on_line,
        };
        let (status, forced) = agent.wait(&mut output, timeout, &cancel).await;
        if agent.heard {
            // Nothing the agent started is left to write: its output ends at what the pipes
            // hold now, whoever else still holds them (the supervisor, sudo) for a moment
            // longer.
            settled.cancel();
        }
        agent.clean_up();
        output.drain().await;
        agent.reap();
        // A reader of an interactive agent's stdout sees its end now, whoever holds the pipe.
        settled.cancel();
        let mut exit = forced.unwrap_or_else(|| exit_of(status));
        if supervised
            && exit == Exit::Code(i32::from(crate::supervise::agent_path::NOT_STARTED_STATUS))
        {
            if let Some(why) = output.tails.not_started() {
                exit = Exit::SpawnFailed(why + &hub_has_it(&argv0, &env));
            }
        }
        output.into_outcome(exit)
    }
}

/// Where the hub's own `PATH` (in `env`) has `program`, said for a program the sandbox user
/// could not run: most often one installed in the hub's user's home.
fn hub_has_it(program: &str, env: &[(String, String)]) -> String {
    let hub_path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    match hub_path
        .map(|p| crate::supervise::agent_path::find_program(program, p, std::path::Path::new("/")))
    {
        Some(Ok(at)) if !program.contains('/') => {
            format!(" (the hub's own PATH has it at {})", at.display())
        }
        _ => String::new(),
    }
}

/// How an agent command was set up ([`prepare_command`]).
struct Prepared {
    /// Its supervisor's lifeline, if it has one.
    lifeline: Option<Lifeline>,
    /// Its namespace init's word that it ended, if it runs in a PID namespace of the hub's.
    verdict: Option<Verdict>,
}

/// A supervisor's lifeline: one end of a socket pair, the other its stdin. The hub writes the
/// request and then holds it open; the supervisor's side may answer with the agent's wait
/// status once nothing the agent started is left (see [`crate::helper`]'s `exec`).
struct Lifeline {
    request: Vec<u8>,
    ours: std::os::unix::net::UnixStream,
}

/// Where the hub hears how the agent ended before its supervisor or group leader has exited.
enum Heard {
    /// The pipe of the agent's PID namespace init (`--isolation none`).
    Pipe(tokio::net::unix::pipe::Receiver),
    /// The supervisor's lifeline, as the task holding it passes the word on.
    Lifeline(tokio::sync::oneshot::Receiver<Option<std::process::ExitStatus>>),
}

impl Heard {
    /// The agent's wait status, or None once no word can come any more.
    async fn word(&mut self) -> Option<std::process::ExitStatus> {
        match self {
            Heard::Pipe(rx) => read_verdict(rx).await,
            Heard::Lifeline(rx) => rx.await.ok().flatten(),
        }
    }
}

/// A pipe on which an agent's PID namespace init says how the agent ended, once nothing it
/// started is left (see [`pidns::enter_for_process_group`]): the hub hears of the end then,
/// without waiting for the init and the group leader to exit.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct Verdict {
    rx: tokio::net::unix::pipe::Receiver,
    /// The write end, for the init to inherit; closed in the hub once the agent is spawned.
    tx: std::os::fd::OwnedFd,
}

/// Set up the agent's pipes and how it is stopped; with `interactive`, a stdin pipe where the
/// hub spawns the agent itself (a supervisor relays its lifeline instead).
fn prepare_command(cmd: &mut tokio::process::Command, stop: Stop, interactive: bool) -> Prepared {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match stop {
        Stop::ProcessGroup => {
            cmd.stdin(if interactive {
                Stdio::piped()
            } else {
                Stdio::null()
            })
                // Its own process group, so a timeout or cancel reaches every grandchild too.
                .process_group(0);
            #[cfg(target_os = "linux")]
            let verdict = die_with_the_hub(cmd);
            #[cfg(not(target_os = "linux"))]
            let verdict = None;
            Prepared {
                lifeline: None,
                verdict,
            }
        }
        Stop::Lifeline { request } => {
            let lifeline = match std::os::unix::net::UnixStream::pair() {
                Ok((ours, theirs)) => {
                    cmd.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
                    Some(Lifeline { request, ours })
                }
                Err(e) => {
                    // The supervisor then reads an empty request and refuses to start.
                    tracing::warn!(error = %e, "no socket pair for the sandbox supervisor's lifeline");
                    cmd.stdin(Stdio::null());
                    None
                }
            };
            Prepared {
                lifeline,
                verdict: None,
            }
        }
    }
}

/// Make the agent's group leader die with the hub, and enter a PID namespace when one can
/// be made here; returns the pipe for the namespace init's verdict (None without a namespace,
/// or when no pipe can be made: then the hub waits for the group leader's exit alone).
#[cfg(target_os = "linux")]
fn die_with_the_hub(cmd: &mut tokio::process::Command) -> Option<Verdict> {
    use std::os::fd::AsRawFd;
    let (plan, verdict) = if pidns::disabled() {
        (None, None)
    } else {
        let verdict = tokio::net::unix::pipe::pipe()
            .and_then(|(tx, rx)| {
                Ok(Verdict {
                    rx,
                    tx: tx.into_blocking_fd()?,
                })
            })
            .map_err(|e| tracing::debug!(error = %e, "no pipe for the agent's verdict"))
            .ok();
        let plan = pidns::Plan::new();
        let plan = match &verdict {
            Some(v) => plan.with_verdict(v.tx.as_raw_fd()),
            None => plan,
        };
        (Some(plan), verdict)
    };
    // SAFETY: pre_exec runs in the forked child before exec; prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // If the hub dies (even kill -9), the agent's group leader is told to go
            // too, and with it the PID namespace the agent runs in, when one can be
            // made here: then nothing the agent started outlives the hub.
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            if let Some(plan) = &plan {
                pidns::enter_for_process_group(plan)?;
            }
            Ok(())
        });
    }
    verdict
}

/// Send `request` down the supervisor's lifeline, then hold it open until the returned
/// sender is dropped (or this process dies, which closes it too), passing on the agent's wait
/// status if the supervisor's side sends it first. With `stdin`, what comes there follows the
/// request on the lifeline: the supervisor relays it to the agent's stdin.
#[allow(clippy::type_complexity)]
fn hold_lifeline(
    request: Vec<u8>,
    ours: std::os::unix::net::UnixStream,
    stdin: Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
) -> std::io::Result<(
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<Option<std::process::ExitStatus>>,
)> {
    ours.set_nonblocking(true)?;
    let mut stream = tokio::net::UnixStream::from_std(ours)?;
    let (close, mut closed) = tokio::sync::oneshot::channel::<()>();
    let (tell, word) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        // A supervisor that died before reading its request shows up as its exit status.
        if stream.write_all(&request).await.is_err() {
            return;
        }
        let (mut rd, wr) = stream.into_split();
        let relay = relay_to_lifeline(stdin, wr);
        tokio::pin!(relay);
        tokio::select! {
            status = read_verdict(&mut rd) => {
                let _ = tell.send(status);
                tokio::select! {
                    _ = &mut closed => {}
                    () = &mut relay => {}
                }
            }
            _ = &mut closed => {}
            () = &mut relay => {}
        }
        // Dropping the write half (in `relay`) shuts the lifeline down: the supervisor's EOF.
    });
    Ok((close, word))
}

/// Write what comes on `stdin` to the lifeline `wr`, until the senders are gone or a write
/// fails; then hold `wr` without end: the lifeline stays open until the task holding it is
/// told to close it.
async fn relay_to_lifeline(
    stdin: Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
    mut wr: tokio::net::unix::OwnedWriteHalf,
) {
    use tokio::io::AsyncWriteExt;
    if let Some(mut rx) = stdin {
        while let Some(bytes) = rx.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
        }
    }
    std::future::pending::<()>().await;
    drop(wr);
}

/// A started agent (or the supervisor running it) and what it takes to stop it.
struct Agent {
    child: tokio::process::Child,
    pid: Option<nix::unistd::Pid>,
    /// Its process group, when the hub signals the group itself (no supervisor).
    pgid: Option<nix::unistd::Pid>,
    /// Whether a supervisor runs it (fixed at start; `close_lifeline` is taken on stop).
    supervised: bool,
    /// Keeps the supervisor's lifeline open; dropping it closes the lifeline.
    close_lifeline: Option<tokio::sync::oneshot::Sender<()>>,
    /// Where its PID namespace init says how it ended (see [`Heard`]).
    verdict: Option<Heard>,
    /// Whether the wait status came from there: then nothing the agent started is left.
    heard: bool,
}

impl Agent {
    /// Wait for the agent to exit while passing its output on; on timeout or cancel, stop it
    /// (and kill a supervisor that has not exited [`SUPERVISOR_GRACE`] later). Returns its
    /// wait status and why it was stopped, if it was.
    async fn wait<F: FnMut(Stream, &str)>(
        &mut self,
        output: &mut Output<F>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> (std::io::Result<std::process::ExitStatus>, Option<Exit>) {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut forced: Option<Exit> = None;
        let mut lines_open = true;
        // When a stopped supervisor has not exited by then, it is killed outright.
        let hard_kill = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
        tokio::pin!(hard_kill);
        let mut hard_kill_armed = false;
        let mut verdict_open = self.verdict.is_some();
        let status = loop {
            // Each branch says whether the run must be stopped now, and why.
            let stop = tokio::select! {
                line = output.rx.recv(), if lines_open => {
                    match line {
                        Some((stream, line)) => output.deliver(stream, &line),
                        None => lines_open = false,
                    }
                    None
                }
                status = self.child.wait() => {
                    // The word, if one was sent, is the agent's own status; what its leader or
                    // supervisor exits with only mirrors it (a supervisor's less faithfully).
                    // All who could send it are gone now, so it is there or never comes.
                    if let (true, Some(heard)) = (verdict_open, self.verdict.as_mut()) {
                        if let Ok(Some(word)) = tokio::time::timeout(LATE_WORD, heard.word()).await {
                            self.heard = true;
                            break Ok(word);
                        }
                    }
                    break status;
                }
                verdict = heard_word(self.verdict.as_mut()), if verdict_open => {
                    match verdict {
                        Some(status) => {
                            self.heard = true;
                            break Ok(status);
                        }
                        // The init is gone without a word (killed): the leader's exit tells.
                        None => verdict_open = false,
                    }
                    None
                }
                _ = &mut deadline, if forced.is_none() => Some(Exit::TimedOut),
                _ = cancel.cancelled(), if forced.is_none() => Some(Exit::Cancelled),
                _ = &mut hard_kill, if hard_kill_armed => {
                    hard_kill_armed = false;
                    tracing::warn!("the sandbox supervisor did not stop in time; killing it");
                    let _ = self.child.start_kill();
                    None
                }
            };
            if let Some(why) = stop {
                forced = Some(why);
                if self.supervised {
                    stop_supervisor(self.pid, &mut self.close_lifeline);
                    hard_kill
                        .as_mut()
                        .reset(tokio::time::Instant::now() + SUPERVISOR_GRACE);
                    hard_kill_armed = true;
                } else {
                    kill_group(self.pgid).await;
                }
            }
        };
        (status, forced)
    }

    /// After the agent (or its supervisor) has exited: close the lifeline, and kill whatever
    /// the group leader left behind.
    fn clean_up(&mut self) {
        // The supervisor has exited, having killed the agent's tree; close the lifeline.
        drop(self.close_lifeline.take());
        // The leader is gone; make sure nothing it spawned outlives the run.
        if let Some(pgid) = self.pgid {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Reap the group leader, from a task of its own when the verdict came before its exit.
    fn reap(self) {
        let mut child = self.child;
        if matches!(child.try_wait(), Ok(None)) {
            tokio::spawn(async move {
                let _ = child.wait().await;
            });
        }
    }
}

/// How long the hub waits for a word that is not there yet when the agent's group leader or
/// supervisor has exited (everyone who could still send it has, so it is a formality).
const LATE_WORD: Duration = Duration::from_millis(100);

async fn heard_word(heard: Option<&mut Heard>) -> Option<std::process::ExitStatus> {
    heard?.word().await
}

/// The agent's wait status, as its PID namespace init reports it: two bytes, `[0, code]` for
/// an exit, `[1, signal]` for a death by signal (None at EOF: the init died without a word).
async fn read_verdict(
    rx: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    use tokio::io::AsyncReadExt;
    let mut report = [0u8; 2];
    rx.read_exact(&mut report).await.ok()?;
    Some(match report {
        [1, signal] => std::process::ExitStatus::from_raw(i32::from(signal)),
        [_, code] => std::process::ExitStatus::from_raw(i32::from(code) << 8),
    })
}

/// The agent's output lines as the readers pass them on, and the tails kept for the outcome.
struct Output<F> {
    rx: tokio::sync::mpsc::Receiver<(Stream, String)>,
    tails: Tails,
    on_line: F,
}

impl<F: FnMut(Stream, &str)> Output<F> {
    /// Keep `line` in its stream's tail and hand it to `on_line`.
    fn deliver(&mut self, stream: Stream, line: &str) {
        self.tails.record(stream, line);
        (self.on_line)(stream, line);
    }

    /// Pass on what the readers still hold, for at most two seconds (bounded anyway: the
    /// pipes close once the agent's group is dead).
    async fn drain(&mut self) {
        let drain = async {
            while let Some((stream, line)) = self.rx.recv().await {
                self.deliver(stream, &line);
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    }

    /// The run's outcome: how it ended, and the tails of its output.
    fn into_outcome(self, exit: Exit) -> Outcome {
        Outcome {
            exit,
            stderr_tail: Vec::from(self.tails.stderr).join("\n"),
            stdout_tail: Vec::from(self.tails.stdout).join("\n"),
        }
    }
}

/// What an agent's wait status says about how it ended.
fn exit_of(status: std::io::Result<std::process::ExitStatus>) -> Exit {
    match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            match (st.code(), st.signal()) {
                (Some(c), _) => Exit::Code(c),
                (None, Some(s)) => Exit::Signal(s),
                _ => Exit::Code(-1),
            }
        }
        Err(e) => Exit::SpawnFailed(e.to_string()),
    }
}

/// Ask a supervisor to stop the agent: close its lifeline and SIGTERM it (sudo relays the
/// signal). It SIGTERMs the agent's tree, then SIGKILLs what is left, and exits.
fn stop_supervisor(
    pid: Option<nix::unistd::Pid>,
    close_lifeline: &mut Option<tokio::sync::oneshot::Sender<()>>,
) {
    close_lifeline.take();
    if let Some(pid) = pid {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
}

/// SIGTERM the group, give it a moment to clean up, then SIGKILL whatever is left.
async fn kill_group(pgid: Option<nix::unistd::Pid>) {
    let Some(pgid) = pgid else { return };
    use nix::sys::signal::{killpg, Signal};
    if killpg(pgid, Signal::SIGTERM).is_err() {
        return;
    }
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if killpg(pgid, None).is_err() {
            return;
        }
    }
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// Environment variables an agent may see from the hub's own environment. Everything else —
/// API keys, `SSH_AUTH_SOCK`, `GIT_*` — is dropped; `extra` names are passed on only when the
/// user configured them.
pub fn scrubbed_env(extra: &[String]) -> Vec<(String, String)> {
    const ALLOW: &[&str] = &[
        "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "TMPDIR",
    ];
    std::env::vars()
        .filter(|(k, _)| {
            ALLOW.contains(&k.as_str()) || k.starts_with("LC_") || extra.iter().any(|e| e == k)
        })
        .collect()
}

/// Whether agents can get a PID namespace with a private `/proc` here (see [`pidns`]).
pub fn private_proc_possible() -> bool {
    #[cfg(target_os = "linux")]
    {
        pidns::can_make_private_proc()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// In a namespace's init: mount a `/proc` that shows only this PID namespace (see [`pidns`]).
pub fn mount_private_proc() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        pidns::mount_private_proc()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "PID namespaces exist only on Linux",
        ))
    }
}

/// In a namespace's init, after [`mount_private_proc`]: show the agent only its own slot (see
/// [`pidns::show_only_own_slot`]).
pub fn show_only_own_slot(
    root: &std::path::Path,
    slot: &std::path::Path,
    objects: Option<&std::path::Path>,
) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        pidns::show_only_own_slot(root, slot, objects)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (root, slot, objects);
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "mount namespaces exist only on Linux",
        ))
    }
}

/// PID (and mount) namespaces for agents, on Linux: see the module.
#[cfg(target_os = "linux")]
pub mod pidns;

#[cfg(test)]
mod tests;

//! Agent processes: a command template turned into argv, run in the sandbox with a timeout and
//! cancellation that kill the agent's whole process tree — by signalling its process group
//! (same user), or through the sandbox helper's lifeline (separate user, see [`crate::helper`]).

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::workspace::{AgentCommand, Sandbox, Stop};

/// How long a supervisor gets, after being told to stop, to kill the agent's tree and exit
/// before the hub kills the supervisor itself (its lifeline is closed by then, so it still
/// cleans up).
const SUPERVISOR_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    #[error("agent template {0:?} is empty")]
    Empty(String),
    #[error("agent template {template:?} cannot be split into words: {message}")]
    Syntax { template: String, message: String },
    #[error("agent template {template:?} puts {{prompt}} inside {what}, where hunkgate cannot keep it from being run as code: pass {{prompt}} as an argument of its own (e.g. `sh -c '... \"$1\" ...' sh {{prompt}}`) or read the prompt from the HUNKGATE_PROMPT environment variable (`sh -c '... \"$HUNKGATE_PROMPT\" ...'`)")]
    PromptInCode { template: String, what: String },
}

/// Shells whose `-c` script hunkgate rewrites so the prompt is never part of the script.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "busybox"];
/// Shells with other quoting rules: a `{prompt}` in their script is refused.
const OTHER_SHELLS: &[&str] = &["fish", "csh", "tcsh", "nu", "pwsh", "elvish"];
/// Interpreters whose `-c`/`-e` argument is code: a `{prompt}` inside it is refused.
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua",
];

/// The environment variable every agent gets with the prompt in it (see [`build_argv`]).
pub const PROMPT_VAR: &str = "HUNKGATE_PROMPT";

/// Turn a template such as `aider --yes-always --message {prompt}` into argv.
///
/// The template is split like a POSIX shell would split it (quotes respected), but it is never
/// run through a shell unless it names one itself. `{prompt}` is replaced inside each word, so the
/// prompt is always exactly one argument, whatever it contains.
///
/// When the template runs a shell script (`sh -c '…'`, also `sh -c -- '…'`, `bash -lc '…'`,
/// `env sh -c '…'`, `timeout 60 sh -c '…'`), the prompt never becomes part of the script:
/// `{prompt}` there is replaced by a reference to the `HUNKGATE_PROMPT` environment variable,
/// quoted for where it stands (`"${HUNKGATE_PROMPT}"` unquoted, `${HUNKGATE_PROMPT}` inside
/// double quotes, `'"${HUNKGATE_PROMPT}"'` inside single quotes). The shell expands it as one
/// piece of text, so backticks, `$(…)`, quotes and newlines in a prompt stay text. The caller
/// must put the prompt in that variable (the hub always does). A `{prompt}` inside the code
/// argument of another interpreter (`python -c`, `perl -e`, `fish -c`, …) is refused.
pub fn build_argv(template: &str, prompt: &str) -> Result<Vec<String>, TemplateError> {
    let words = shell_words::split(template).map_err(|e| TemplateError::Syntax {
        template: template.to_string(),
        message: e.to_string(),
    })?;
    if words.is_empty() {
        return Err(TemplateError::Empty(template.to_string()));
    }
    let code = code_words(&words);
    let mut out = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let replaced = match code.iter().find(|(j, _)| *j == i) {
            Some((_, CodeKind::PosixScript)) => posix_script_with_prompt_var(word),
            Some((_, CodeKind::Refused(what))) if word.contains("{prompt}") => {
                return Err(TemplateError::PromptInCode {
                    template: template.to_string(),
                    what: what.clone(),
                });
            }
            _ => word.replace("{prompt}", prompt),
        };
        out.push(replaced);
    }
    Ok(out)
}

enum CodeKind {
    /// A POSIX shell's `-c` script.
    PosixScript,
    /// Code for something whose quoting hunkgate does not rewrite.
    Refused(String),
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or("")
}

/// Which words of `words` are code run by a shell or an interpreter (`sh -c <code>`).
fn code_words(words: &[String]) -> Vec<(usize, CodeKind)> {
    let mut out = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let name = basename(word);
        // `python3.12` is python.
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
        let (posix, other, interp) = (
            SHELLS.contains(&name),
            OTHER_SHELLS.contains(&name),
            INTERPRETERS.contains(&name) || INTERPRETERS.contains(&stem),
        );
        if !(posix || other || interp) {
            continue;
        }
        // `busybox sh -c`: the next word is the shell.
        if name == "busybox" {
            continue;
        }
        match code_argument(words, i + 1, interp) {
            CodeArg::Inline(j) => {
                out.push((j, CodeKind::Refused(format!("the code argument of {name}"))));
            }
            CodeArg::Word(j) => {
                let kind = if posix {
                    CodeKind::PosixScript
                } else {
                    CodeKind::Refused(format!("the script of {name}"))
                };
                out.push((j, kind));
            }
            CodeArg::None => {}
        }
    }
    out
}

/// Where the code is in a shell's or interpreter's arguments.
#[derive(Debug, PartialEq, Eq)]
enum CodeArg {
    /// No code flag, or nothing after it.
    None,
    /// In the code flag's own word, at this index (`python -cCODE`, `perl -eCODE`).
    Inline(usize),
    /// The word at this index.
    Word(usize),
}

/// Scan the options of a shell (or, with `interp`, an interpreter) that start at `words[from]`
/// for its code flag (`-c`, `--command`; also `-e`/`-E` for interpreters) and say where the
/// code is.
fn code_argument(words: &[String], from: usize, interp: bool) -> CodeArg {
    let mut j = from;
    let mut code_flag = false;
    while let Some(w) = words.get(j) {
        if w == "--" {
            j += 1;
            break;
        }
        let short = (w.starts_with('-') || w.starts_with('+')) && !w.starts_with("--");
        if w.starts_with("--") {
            // Long options; these take a value.
            if matches!(w.as_str(), "--rcfile" | "--init-file" | "--command") {
                if w == "--command" {
                    code_flag = true;
                    j += 1;
                    break;
                }
                j += 1;
            }
            j += 1;
            continue;
        }
        if !short || w.len() < 2 {
            break;
        }
        let flags = &w[1..];
        let is_code = if interp {
            flags.contains('c') || flags.contains('e') || flags.contains('E')
        } else {
            flags.contains('c')
        };
        if is_code {
            code_flag = true;
            // `perl -e CODE`, `python -cCODE`: the code may follow in the same word.
            if interp {
                let pos = flags.find(['c', 'e', 'E']).unwrap_or(0);
                if pos + 1 < flags.len() {
                    return CodeArg::Inline(j);
                }
            }
            j += 1;
            if interp {
                break;
            }
            continue;
        }
        // `-o pipefail`, `-O extglob`: the option's value is the next word.
        if !interp && (flags.ends_with('o') || flags.ends_with('O')) {
            j += 1;
        }
        j += 1;
    }
    if code_flag && j < words.len() {
        CodeArg::Word(j)
    } else {
        CodeArg::None
    }
}

/// Where a character of a POSIX shell script stands.
#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    /// Top level, `$( … )` or `` ` … ` ``: plain shell words.
    Plain,
    Subshell,
    Backtick,
    Single,
    /// `$'…'`: single-quoted with backslash escapes.
    AnsiC,
    Double,
}

/// Replace each `{prompt}` in a POSIX shell script by a reference to [`PROMPT_VAR`], quoted for
/// the context it stands in. The prompt's text itself never enters the script.
fn posix_script_with_prompt_var(script: &str) -> String {
    let unquoted = format!("\"${{{PROMPT_VAR}}}\"");
    let in_double = format!("${{{PROMPT_VAR}}}");
    let in_single = format!("'\"${{{PROMPT_VAR}}}\"'");
    let mut stack = vec![Ctx::Plain];
    let mut out = String::with_capacity(script.len() + 32);
    let mut rest = script;
    while let Some(c) = rest.chars().next() {
        let top = *stack.last().unwrap_or(&Ctx::Plain);
        if let Some(after) = rest.strip_prefix("{prompt}") {
            out.push_str(match top {
                Ctx::Plain | Ctx::Subshell | Ctx::Backtick => &unquoted,
                Ctx::Double => &in_double,
                Ctx::Single | Ctx::AnsiC => &in_single,
            });
            rest = after;
            continue;
        }
        let take = step_quoting(&mut stack, top, c, rest);
        out.push_str(&rest[..take]);
        rest = &rest[take..];
        if stack.is_empty() {
            stack.push(Ctx::Plain);
        }
    }
    out
}

/// Follow the quoting context over `c`, the first character of `rest` (`top` is the current
/// context): pop the context it closes or push the one it opens. Returns how many bytes of
/// `rest` go as they are (the character, with what it escapes or the rest of its opener).
fn step_quoting(stack: &mut Vec<Ctx>, top: Ctx, c: char, rest: &str) -> usize {
    let mut take = c.len_utf8();
    match (top, c) {
        (Ctx::Single, '\'') | (Ctx::AnsiC, '\'') | (Ctx::Double, '"') => {
            stack.pop();
        }
        (Ctx::Backtick, '`') => {
            stack.pop();
        }
        (Ctx::Subshell, ')') => {
            stack.pop();
        }
        (Ctx::Single, _) => {}
        (_, '\\') => {
            // The escaped character is taken as it is.
            take += rest[1..].chars().next().map_or(0, char::len_utf8);
        }
        (Ctx::Double, '$') if rest[1..].starts_with('(') => {
            stack.push(Ctx::Subshell);
            take += 1;
        }
        (Ctx::Double, '`') => stack.push(Ctx::Backtick),
        (Ctx::Double, _) | (Ctx::AnsiC, _) => {}
        (_, '$') if rest[1..].starts_with('(') => {
            stack.push(Ctx::Subshell);
            take += 1;
        }
        (_, '$') if rest[1..].starts_with('\'') => {
            stack.push(Ctx::AnsiC);
            take += 1;
        }
        (_, '\'') => stack.push(Ctx::Single),
        (_, '"') => stack.push(Ctx::Double),
        (_, '`') => stack.push(Ctx::Backtick),
        (Ctx::Subshell, '(') => stack.push(Ctx::Subshell),
        _ => {}
    }
    take
}

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
/// A single line longer than this many bytes is cut: agents print minified JSON and progress
/// bars. The rest of the line is read and dropped, never held: a 300 MB line without a newline
/// costs the hub one read buffer, not 300 MB.
pub const MAX_LINE: usize = 4096;
const READ_CHUNK: usize = 8192;

/// Read `pipe` in chunks and hand each line (without its newline, trailing whitespace trimmed,
/// invalid UTF-8 replaced) to `emit`, keeping at most [`MAX_LINE`] bytes of a line: the rest is
/// dropped and the line ends with a marker saying how much. Stops at end of input, on a read
/// error, or when `emit` returns false.
pub async fn read_lines<R, F, Fut>(mut pipe: R, mut emit: F)
where
    R: tokio::io::AsyncRead + Unpin,
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    use tokio::io::AsyncReadExt;
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut line: Vec<u8> = Vec::new();
    let mut dropped: u64 = 0;
    let finish = |line: &mut Vec<u8>, dropped: &mut u64| -> String {
        let mut text = String::from_utf8_lossy(line).trim_end().to_string();
        if *dropped > 0 {
            text.push_str(&format!(
                " … [hunkgate: {dropped} more bytes of this line dropped]"
            ));
        }
        line.clear();
        *dropped = 0;
        text
    };
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, newline) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..i], Some(i)),
                None => (rest, None),
            };
            let room = MAX_LINE.saturating_sub(line.len()).min(part.len());
            line.extend_from_slice(&part[..room]);
            dropped += (part.len() - room) as u64;
            match newline {
                Some(i) => {
                    rest = &rest[i + 1..];
                    if !emit(finish(&mut line, &mut dropped)).await {
                        return;
                    }
                }
                None => rest = &[],
            }
        }
    }
    if !line.is_empty() || dropped > 0 {
        emit(finish(&mut line, &mut dropped)).await;
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

/// A pipe of the agent's, as it is read.
pub type Pipe = Box<dyn tokio::io::AsyncRead + Send + Unpin>;

/// Read the agent's stdout and stderr line by line on their own tasks; the lines arrive on
/// the returned channel, which closes when both pipes have — or, once `settled` is cancelled,
/// when each has given what it holds (see [`Settling`]).
fn spawn_line_readers(
    stdout: Option<Pipe>,
    stderr: Option<tokio::process::ChildStderr>,
    settled: &CancellationToken,
) -> tokio::sync::mpsc::Receiver<(Stream, String)> {
    let (tx, rx) = tokio::sync::mpsc::channel::<(Stream, String)>(256);
    for (stream, pipe) in [
        (Stream::Stdout, stdout),
        (
            Stream::Stderr,
            stderr.map(|p| Box::new(Settling::new(p, settled.clone())) as Pipe),
        ),
    ] {
        if let Some(pipe) = pipe {
            let tx = tx.clone();
            tokio::spawn(async move {
                read_lines(pipe, |line| {
                    let tx = tx.clone();
                    async move { tx.send((stream, line)).await.is_ok() }
                })
                .await;
            });
        }
    }
    rx
}

/// One of the agent's output pipes, read as it comes until `settled` is cancelled — the hub
/// heard that nothing the agent started is left — and from then on only for what it already
/// holds: the first read that would wait is its end. Other holders of the pipe (a supervisor,
/// sudo) write nothing to it, and need not exit before the output is whole.
struct Settling<R> {
    pipe: R,
    settled: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    done: bool,
}

impl<R> Settling<R> {
    fn new(pipe: R, settled: CancellationToken) -> Self {
        Self {
            pipe,
            settled: Box::pin(settled.cancelled_owned()),
            done: false,
        }
    }
}

impl<R: tokio::io::AsyncRead + std::os::fd::AsFd + Unpin> tokio::io::AsyncRead for Settling<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = self.get_mut();
        if !this.done && std::future::Future::poll(this.settled.as_mut(), cx).is_ready() {
            this.done = true;
        }
        if !this.done {
            return std::pin::Pin::new(&mut this.pipe).poll_read(cx, buf);
        }
        // The pipe itself, not the runtime's idea of whether it is readable (which may lag
        // behind what was written): tokio keeps it non-blocking, so an empty pipe says EAGAIN.
        loop {
            match nix::unistd::read(this.pipe.as_fd(), buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(nix::errno::Errno::EINTR) => continue,
                // Empty: as far as the agent goes, this is the end.
                Err(nix::errno::Errno::EAGAIN) => return Poll::Ready(Ok(())),
                Err(e) => return Poll::Ready(Err(e.into())),
            }
        }
    }
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

/// PID (and mount) namespaces for agents, on Linux.
///
/// Two uses:
/// - `--isolation none`: the hub puts the agent in a PID namespace of its own (through an
///   unprivileged user namespace, or directly when the hub is root) whose init dies with the
///   hub, so even `kill -9` of the hub takes every process the agent started with it
///   ([`pidns::enter_for_process_group`]).
/// - `--isolation user`: the helper's namespace init mounts a fresh `/proc` in a mount
///   namespace of its own ([`pidns::mount_private_proc`]), so an agent sees only its own namespace's
///   processes — never another run's agent, whose environment holds that run's token — and
///   covers every other slot ([`pidns::show_only_own_slot`]), so it reaches only its own.
#[cfg(target_os = "linux")]
pub mod pidns {
    use nix::libc;

    /// `HUNKGATE_SANDBOX_PIDNS=off`: no PID namespaces for agents, as machines without
    /// (unprivileged) user namespaces must run — so that fallback can be exercised anywhere.
    pub fn disabled() -> bool {
        std::env::var_os("HUNKGATE_SANDBOX_PIDNS").is_some_and(|v| v == "off")
    }

    /// What [`enter_for_process_group`] needs, prepared before the fork (nothing may be
    /// allocated after it).
    #[derive(Clone)]
    pub struct Plan {
        user: bool,
        uid_map: Vec<u8>,
        gid_map: Vec<u8>,
        /// The write end of the hub's verdict pipe, or -1 (see [`enter_for_process_group`]).
        verdict: libc::c_int,
        /// The program the init and the leader become once set up ([`exec_roles_with`]).
        roles: Option<&'static std::ffi::CStr>,
    }

    impl Plan {
        pub fn new() -> Self {
            let uid = nix::unistd::geteuid().as_raw();
            let gid = nix::unistd::getegid().as_raw();
            Self {
                // Root makes a PID namespace directly; anyone else through a user namespace
                // that maps only themselves (so files keep their owners).
                user: uid != 0,
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
                verdict: -1,
                roles: ROLE_PROGRAM.get().map(|p| p.as_c_str()),
            }
        }

        /// The namespace's init writes the agent's wait status to `fd` (two bytes: `[0, code]`
        /// or `[1, signal]`) once the agent has exited and everything else in the namespace
        /// has been killed and reaped. `fd` must stay open until the fork.
        pub fn with_verdict(self, fd: std::os::fd::RawFd) -> Self {
            Self {
                verdict: fd,
                ..self
            }
        }
    }

    impl Default for Plan {
        fn default() -> Self {
            Self::new()
        }
    }

    /// The program an agent's namespace init and group leader exec once they are set up; unset,
    /// they stay what they are forked as: copies of the hub (see [`exec_roles_with`]).
    static ROLE_PROGRAM: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();

    /// The first argument that makes the hub's program an agent's namespace init
    /// ([`take_role`]): then `<agent pid> <status fd> <verdict fd or -1>`.
    pub const INIT_ROLE: &std::ffi::CStr = c"__agent-pidns-init";
    /// The first argument that makes it an agent's group leader: then `<init pid> <status fd>`.
    pub const LEADER_ROLE: &std::ffi::CStr = c"__agent-pidns-leader";

    /// Have the init and the group leader of each agent's PID namespace exec `program` (the
    /// hub's own, `/proc/self/exe`, whose `main` calls [`take_role`] first) once they are set
    /// up, rather than live on as forks of the hub. A fork shares the hub's memory
    /// copy-on-write: while one lives, each page the hub writes is copied first, and its exit
    /// tears down a copy of the hub's page tables, right when the hub reads the agent's work
    /// back. Exec'd, each is a small program of its own. The first call wins; without one (a
    /// test binary, which cannot take the roles) or when the exec fails, they stay forks.
    pub fn exec_roles_with(program: &std::ffi::CStr) {
        let _ = ROLE_PROGRAM.set(program.to_owned());
    }

    /// If `args` (this process's, program name first) make it an agent's namespace init or
    /// group leader (see [`exec_roles_with`]), be that and never return; else return at once.
    pub fn take_role(args: &[std::ffi::OsString]) {
        use std::os::unix::ffi::OsStrExt;
        let role = args.get(1).map(|a| a.as_bytes());
        let init = role == Some(INIT_ROLE.to_bytes());
        if !init && role != Some(LEADER_ROLE.to_bytes()) {
            return;
        }
        let num = |i: usize| -> libc::c_int {
            match args.get(i).and_then(|a| a.to_str()).map(str::parse) {
                Some(Ok(n)) => n,
                // Not exec'd by the hub: there is nothing to do.
                _ => std::process::exit(127),
            }
        };
        // SAFETY: this process was exec'd for the role, with the descriptors and the child
        // its arguments name; each role only waits, reads, writes and exits.
        unsafe {
            if init {
                be_init(num(2), num(3), num(4))
            } else {
                be_leader(num(2), num(3))
            }
        }
    }

    /// Exec the role `program` with `nums` after it (see [`take_role`]); returns only when the
    /// exec fails. The descriptors among `nums` are kept open across it; nothing else is, and
    /// the environment is empty.
    ///
    /// # Safety
    /// Only in a forked child: it makes only async-signal-safe calls and allocates nothing.
    unsafe fn exec_role(
        program: &std::ffi::CStr,
        role: &std::ffi::CStr,
        nums: &[libc::c_int],
        fds: &[libc::c_int],
    ) {
        for &fd in fds {
            if fd >= 0 && libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return;
            }
        }
        let mut digits = [[0u8; 16]; 3];
        let mut argv: [*const libc::c_char; 6] = [std::ptr::null(); 6];
        argv[0] = c"hunkgate".as_ptr();
        argv[1] = role.as_ptr();
        for (i, (&n, buf)) in nums.iter().zip(digits.iter_mut()).enumerate() {
            write_decimal(n, buf);
            argv[2 + i] = buf.as_ptr().cast();
        }
        let envp: [*const libc::c_char; 1] = [std::ptr::null()];
        libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
    }

    /// `n` in decimal into `buf`, NUL-terminated (no allocation: after a fork).
    fn write_decimal(n: libc::c_int, buf: &mut [u8; 16]) {
        let mut digits = itoa::Buffer::new();
        let text = digits.format(n).as_bytes();
        buf[..text.len()].copy_from_slice(text);
        buf[text.len()] = 0;
    }

    fn last() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    /// Write `bytes` to a file under `/proc/self` (`path` NUL-terminated).
    unsafe fn write_proc(path: &[u8], bytes: &[u8]) -> std::io::Result<()> {
        let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(last());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let err = last();
        libc::close(fd);
        if n != bytes.len() as isize {
            return Err(err);
        }
        Ok(())
    }

    /// Close every descriptor except those in `keep` (which must be sorted).
    unsafe fn close_all_but(keep: &[libc::c_int]) {
        let mut from: libc::c_uint = 0;
        for &k in keep {
            if k as libc::c_uint > from {
                libc::syscall(libc::SYS_close_range, from, k as libc::c_uint - 1, 0);
            }
            from = k as libc::c_uint + 1;
        }
        libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0);
    }

    unsafe fn waitpid_retry(pid: libc::pid_t, status: &mut libc::c_int) -> libc::pid_t {
        waitpid_flags(pid, status, 0)
    }

    /// `waitpid` with `flags`, again when a signal interrupts it.
    unsafe fn waitpid_flags(
        pid: libc::pid_t,
        status: &mut libc::c_int,
        flags: libc::c_int,
    ) -> libc::pid_t {
        loop {
            let r = libc::waitpid(pid, status, flags);
            if r >= 0 || *last().raw_os_error().as_ref().unwrap_or(&0) != libc::EINTR {
                return r;
            }
        }
    }

    /// Die the way `status` says a child died: by the same signal, or with the same code.
    unsafe fn exit_like(kind: u8, value: u8) -> ! {
        if kind == 1 {
            let sig = value as libc::c_int;
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(value as libc::c_int)
    }

    /// In the forked child of the hub, before exec (`--isolation none`): enter a fresh PID
    /// namespace and arrange the processes so that the agent's whole tree lives in it.
    ///
    /// Three processes result: this one (the hub's child and the process group's leader) waits
    /// and then exits exactly like the agent; its child is the namespace's init (PID 1), which
    /// reaps orphans and, when the agent exits, kills and reaps everything left in the
    /// namespace, writes the agent's wait status to the plan's verdict pipe (if it has one:
    /// the hub learns of the end from there, before this process could exit) and exits; and
    /// its grandchild returns from here and becomes the agent. Each dies with its parent
    /// (`PR_SET_PDEATHSIG`), and this one with the hub, so `kill -9` of the hub ends the whole
    /// tree. All three stay in the hub's process group, so the hub's SIGTERM and SIGKILL to the
    /// group still reach the agent directly. Once set up, the leader and the init exec the
    /// hub's program for their roles when the hub has said so ([`exec_roles_with`]); the
    /// exec keeps all of the above (pids, children, the death signal, an ignored SIGTERM).
    ///
    /// Returns `Ok(false)` (and changes nothing) when no namespace can be made here; the caller
    /// then runs the agent as a plain process group.
    ///
    /// # Safety
    /// Only in a forked child before exec: it forks, and makes only async-signal-safe calls.
    pub unsafe fn enter_for_process_group(plan: &Plan) -> std::io::Result<bool> {
        let flags = if plan.user {
            libc::CLONE_NEWUSER | libc::CLONE_NEWPID
        } else {
            libc::CLONE_NEWPID
        };
        if libc::unshare(flags) != 0 {
            return Ok(false);
        }
        if plan.user {
            write_proc(b"/proc/self/setgroups\0", b"deny")?;
            write_proc(b"/proc/self/uid_map\0", &plan.uid_map)?;
            write_proc(b"/proc/self/gid_map\0", &plan.gid_map)?;
        }
        // status: init -> this process (how the agent ended); guard: EOF tells init we died.
        let mut status = [0 as libc::c_int; 2];
        let mut guard = [0 as libc::c_int; 2];
        if libc::pipe2(status.as_mut_ptr(), libc::O_CLOEXEC) != 0
            || libc::pipe2(guard.as_mut_ptr(), libc::O_CLOEXEC) != 0
        {
            return Err(last());
        }
        let init = libc::fork();
        if init < 0 {
            return Err(last());
        }
        if init == 0 {
            // PID 1 of the new namespace.
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            libc::close(guard[1]);
            libc::close(status[0]);
            // Our parent may have died before the line above: then the guard reads EOF.
            let mut pfd = libc::pollfd {
                fd: guard[0],
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut pfd, 1, 0) > 0 {
                libc::_exit(1);
            }
            let agent = libc::fork();
            if agent < 0 {
                return Err(last());
            }
            if agent == 0 {
                libc::close(guard[0]);
                libc::close(status[1]);
                if plan.verdict >= 0 {
                    libc::close(plan.verdict);
                }
                return Ok(true);
            }
            // The init: nothing of the hub's (its pipes, std's exec-error pipe) stays open here.
            let mut keep = [guard[0], status[1], plan.verdict];
            keep.sort_unstable();
            close_all_but(&keep[usize::from(plan.verdict < 0)..]);
            if let Some(program) = plan.roles {
                exec_role(
                    program,
                    INIT_ROLE,
                    &[agent, status[1], plan.verdict],
                    &[status[1], plan.verdict],
                );
            }
            be_init(agent, status[1], plan.verdict)
        }
        // The hub's child: wait for the init and end like the agent did. The hub's SIGTERM
        // to the group is for the agent; this process waits for its verdict.
        // The guard's write end stays open for as long as this process lives (the exec'd
        // leader's too: the exec keeps it, its close-on-exec flag cleared).
        let mut keep = [status[0], guard[1]];
        keep.sort_unstable();
        close_all_but(&keep);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        if let Some(program) = plan.roles {
            exec_role(
                program,
                LEADER_ROLE,
                &[init, status[0]],
                &[status[0], guard[1]],
            );
        }
        be_leader(init, status[0])
    }

    /// An agent's namespace init, once the agent (`agent`, its child) is started: reap orphans
    /// and, when the agent exits, kill and reap everything left in the namespace, write the
    /// agent's wait status to `verdict` (unless it is -1) and to `status` (for the leader, with
    /// whether the hub heard it: then both exit at idle priority, [`crate::supervise::os::idle_priority`]), and
    /// exit (see [`enter_for_process_group`]).
    ///
    /// # Safety
    /// Only in the init of an agent's namespace (forked or exec'd): it kills every process it
    /// can see when it is PID 1.
    unsafe fn be_init(agent: libc::pid_t, status: libc::c_int, verdict: libc::c_int) -> ! {
        loop {
            let mut st: libc::c_int = 0;
            let r = waitpid_retry(-1, &mut st);
            if r < 0 {
                libc::_exit(127);
            }
            if r == agent {
                let report: [u8; 2] = if libc::WIFSIGNALED(st) {
                    [1, libc::WTERMSIG(st) as u8]
                } else {
                    [0, libc::WEXITSTATUS(st) as u8]
                };
                // What the agent left goes now, as it would when this init exits, but
                // reaped before the word goes out: then the hub knows that nothing the
                // agent started is left, without waiting for this process and the
                // leader to exit.
                // (Only as PID 1: kill(-1) reaches no further than this namespace.)
                if libc::getpid() == 1 {
                    libc::kill(-1, libc::SIGKILL);
                    // Any child, clones included (`__WALL`), until there is none.
                    while waitpid_flags(-1, &mut st, libc::__WALL) > 0 {}
                }
                let heard = verdict >= 0 && libc::write(verdict, report.as_ptr().cast(), 2) == 2;
                // The leader learns how the agent ended, and whether the hub has heard it.
                let told = [report[0], report[1], u8::from(heard)];
                libc::write(status, told.as_ptr().cast(), told.len());
                // Nobody waits for this exit, or the leader's, once the hub has heard.
                if heard {
                    let _ = crate::supervise::os::idle_priority();
                }
                libc::_exit(report[1] as libc::c_int);
            }
        }
    }

    /// An agent's group leader (the hub's child): wait for the namespace's init (`init`) and
    /// end the way the agent did, as `status` says (see [`enter_for_process_group`]).
    ///
    /// # Safety
    /// Only in the leader, forked or exec'd: it exits.
    unsafe fn be_leader(init: libc::pid_t, status: libc::c_int) -> ! {
        let mut st: libc::c_int = 0;
        waitpid_retry(init, &mut st);
        let mut report = [0u8; 3];
        let n = libc::read(status, report.as_mut_ptr().cast(), 3);
        if n >= 2 {
            if n == 3 && report[2] == 1 {
                let _ = crate::supervise::os::idle_priority();
            }
            exit_like(report[0], report[1]);
        }
        if libc::WIFSIGNALED(st) {
            exit_like(1, libc::WTERMSIG(st) as u8);
        }
        libc::_exit(libc::WEXITSTATUS(st))
    }

    /// In a namespace's init, right after the helper unshared user, PID and mount namespaces:
    /// keep mounts from propagating back, and mount a `/proc` that shows this PID namespace
    /// only.
    pub fn mount_private_proc() -> std::io::Result<()> {
        let fail = |what: &str| {
            let e = last();
            std::io::Error::new(e.kind(), format!("{what}: {e}"))
        };
        // SAFETY: mount(2) with constant NUL-terminated strings.
        unsafe {
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(fail("making the agent's mounts private"));
            }
            if libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) != 0
            {
                return Err(fail("mounting a private /proc for the agent"));
            }
        }
        Ok(())
    }

    /// In a namespace's init, after [`mount_private_proc`]: make every slot but the run's own
    /// unreachable. `root`, the directory that holds every slot of the sandbox user (of every
    /// repository), is covered with an empty tmpfs, and only `slot` (read-write) and
    /// `objects` (the slot's base objects, which its `.git` borrows: read-only) are bound back
    /// at their own paths; then the tmpfs is made read-only. So whatever way an agent finds
    /// another slot's path — the hub's layout, `..`, another agent's `/proc/<pid>/cwd` (out of
    /// sight anyway) — there is nothing there, and nothing it writes reaches another run.
    ///
    /// The agent cannot undo it: it runs as a user that is not root in this namespace, so it
    /// has no capability here once exec'd, and in a user namespace of its own these mounts
    /// are locked (the kernel refuses to unmount one of them, or to make the read-only one
    /// writable, from a less privileged namespace).
    pub fn show_only_own_slot(
        root: &std::path::Path,
        slot: &std::path::Path,
        objects: Option<&std::path::Path>,
    ) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fail = |what: String| {
            move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
        };
        let open = |p: &std::path::Path| -> std::io::Result<std::fs::File> {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(p)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        // Held open across the tmpfs, which hides their paths; closed on exec.
        let mut binds = vec![(open(slot)?, slot, false)];
        if let Some(objects) = objects {
            binds.push((open(objects)?, objects, true));
        }
        mount(
            Some("tmpfs"),
            root,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=0700,size=64k"),
        )
        .map_err(fail(format!("covering {}", root.display())))?;
        for (fd, path, read_only) in &binds {
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
            mount(Some(&source), path, None, libc::MS_BIND, None)
                .map_err(fail(format!("binding {} back", path.display())))?;
            if *read_only {
                remount_read_only(path)?;
            }
        }
        remount_read_only(root)
    }

    /// Make the mount at `path` read-only, keeping the flags it has (the kernel refuses to
    /// clear a flag that was locked by a more privileged namespace).
    fn remount_read_only(path: &std::path::Path) -> std::io::Result<()> {
        let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
        use nix::sys::statvfs::FsFlags;
        let mut flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
        for (has, flag) in [
            (FsFlags::ST_NOSUID, libc::MS_NOSUID),
            (FsFlags::ST_NODEV, libc::MS_NODEV),
            (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
            (FsFlags::ST_NOATIME, libc::MS_NOATIME),
            (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
            (FsFlags::ST_RELATIME, libc::MS_RELATIME),
        ] {
            if st.flags().contains(has) {
                flags |= flag;
            }
        }
        mount(None, path, None, flags, None).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("making {} read-only: {e}", path.display()),
            )
        })
    }

    /// mount(2) with Rust strings.
    fn mount(
        source: Option<&str>,
        target: &std::path::Path,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let c = |s: &[u8]| {
            std::ffi::CString::new(s).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
        };
        let source = source.map(|s| c(s.as_bytes())).transpose()?;
        let target = c(target.as_os_str().as_bytes())?;
        let fstype = fstype.map(|s| c(s.as_bytes())).transpose()?;
        let data = data.map(|s| c(s.as_bytes())).transpose()?;
        let ptr =
            |s: &Option<std::ffi::CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call (or null).
        let done = unsafe {
            libc::mount(
                ptr(&source),
                target.as_ptr(),
                ptr(&fstype),
                flags,
                ptr(&data).cast(),
            )
        };
        if done == 0 {
            Ok(())
        } else {
            Err(last())
        }
    }

    /// Whether this process could give an agent a PID namespace with a private `/proc`: user,
    /// PID and mount namespaces made unprivileged, and `/proc` mounted inside (tried in a
    /// throwaway child; the kernel refuses that mount where `/proc` is partly masked, as in
    /// many containers).
    pub fn can_make_private_proc() -> bool {
        if disabled() {
            return false;
        }
        let plan = Plan::new();
        // SAFETY: the child makes only system calls and exits; nothing is allocated after fork.
        unsafe {
            let pid = libc::fork();
            if pid < 0 {
                return false;
            }
            if pid == 0 {
                if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS) != 0
                    || write_proc(b"/proc/self/setgroups\0", b"deny").is_err()
                    || write_proc(b"/proc/self/uid_map\0", &plan.uid_map).is_err()
                    || write_proc(b"/proc/self/gid_map\0", &plan.gid_map).is_err()
                {
                    libc::_exit(1);
                }
                let init = libc::fork();
                if init < 0 {
                    libc::_exit(1);
                }
                if init == 0 {
                    let ok = libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) == 0
                        && libc::mount(
                            c"proc".as_ptr(),
                            c"/proc".as_ptr(),
                            c"proc".as_ptr(),
                            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            std::ptr::null(),
                        ) == 0;
                    libc::_exit(if ok { 0 } else { 1 });
                }
                let mut st = 0;
                waitpid_retry(init, &mut st);
                libc::_exit(if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 {
                    0
                } else {
                    1
                });
            }
            let mut st = 0;
            waitpid_retry(pid, &mut st);
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn numbers_for_a_role_are_written_without_allocating() {
            for n in [0, 7, -1, 26, 4_194_304, libc::c_int::MAX, libc::c_int::MIN] {
                let mut buf = [0xffu8; 16];
                write_decimal(n, &mut buf);
                let text = std::ffi::CStr::from_bytes_until_nul(&buf).unwrap();
                assert_eq!(text.to_str().unwrap(), n.to_string());
            }
        }

        /// The scheduling policy of `pid` (field 41 of its `/proc/<pid>/stat`) once it has
        /// exited and is a zombie, not yet reaped (None if it is not one within 10 s).
        fn policy_as_it_exited(pid: u32) -> Option<u32> {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
                if fields.first() == Some(&"Z") {
                    return fields.get(38)?.parse().ok();
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            None
        }

        /// Once the hub has the agent's word, the leader (the hub's child) exits at idle
        /// priority, as the init does; without a verdict pipe the hub waits for the leader's
        /// exit, and it exits at the priority it ran at.
        #[test]
        fn the_leader_exits_at_idle_priority_only_once_the_hub_has_heard() {
            use std::io::Read;
            use std::os::fd::{AsRawFd, OwnedFd};
            use std::os::unix::process::CommandExt;
            for heard in [false, true] {
                let (rx, tx): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
                let plan = if heard {
                    Plan::new().with_verdict(tx.as_raw_fd())
                } else {
                    Plan::new()
                };
                let mut cmd = std::process::Command::new("sh");
                cmd.args(["-c", "exit 3"]).process_group(0);
                // SAFETY: enter_for_process_group is made for a forked child before exec.
                unsafe {
                    cmd.pre_exec(move || enter_for_process_group(&plan).map(|_| ()));
                }
                let mut leader = cmd.spawn().unwrap();
                drop(tx);
                let mut word = Vec::new();
                std::fs::File::from(rx).read_to_end(&mut word).unwrap();
                if heard && word.is_empty() {
                    // No namespace could be made here: no init, no word (and nothing to check).
                    eprintln!("no PID namespace here; the leader's exit priority is not checked");
                    let _ = leader.wait();
                    return;
                }
                let policy = policy_as_it_exited(leader.id());
                assert_eq!(
                    leader.wait().unwrap().code(),
                    Some(3),
                    "it ended like the agent"
                );
                if heard {
                    assert_eq!(word, [0, 3], "the init's word: exited with 3");
                    assert_eq!(policy, Some(libc::SCHED_IDLE as u32));
                } else {
                    assert!(word.is_empty());
                    // Positive control: the policy read is the one it ran at.
                    assert_eq!(policy, Some(libc::SCHED_OTHER as u32));
                }
            }
        }

        #[test]
        fn a_process_not_exec_d_for_a_role_goes_on() {
            // Returns (else this test would never end): only the two role words take a role.
            for args in [
                vec!["hunkgate", "serve"],
                vec!["hunkgate"],
                vec!["hunkgate", "__agent-pidns-initx", "2", "3", "4"],
            ] {
                let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
                take_role(&args);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_is_one_argument() {
        let argv = build_argv(
            "aider --yes-always --message {prompt}",
            "fix it; rm -rf / \"x\"",
        )
        .unwrap();
        assert_eq!(
            argv,
            vec![
                "aider",
                "--yes-always",
                "--message",
                "fix it; rm -rf / \"x\""
            ]
        );
        let argv = build_argv("tool --msg={prompt}", "a b").unwrap();
        assert_eq!(argv, vec!["tool", "--msg=a b"]);
    }

    /// Hostile prompts through every shape of shell template, run by the real `sh`: nothing in
    /// the prompt runs, and the prompt arrives intact.
    #[test]
    fn shell_templates_never_run_the_prompt() {
        let tmp = tempfile::tempdir().unwrap();
        let mark = tmp.path().join("pwned");
        let m = mark.display();
        let prompts = [
            format!("it's a \"quoted\" prompt; $(touch {m}) `touch {m}` $HOME ${{PATH}} *"),
            format!("\"; touch {m}; echo \""),
            format!("'; touch {m}; echo '"),
            format!("'\"$(touch {m})\"'\nsecond line\n\ttab \\ back"),
            format!("`touch {m}`"),
            "plain words".to_string(),
        ];
        let templates = [
            ("sh -c 'printf %s {prompt} > out'", ""),
            ("sh -c 'printf %s \"{prompt}\" > out'", ""),
            ("sh -c 'printf %s \"<{prompt}>\" > out'", "<>"),
            ("sh -c \"printf %s '{prompt}' > out\"", ""),
            ("sh -c -- 'printf %s \"{prompt}\" > out'", ""),
            ("env sh -c 'printf %s \"{prompt}\" > out'", ""),
            ("env LC_ALL=C sh -e -c 'printf %s {prompt} > out'", ""),
            (
                "timeout 20 sh -c 'printf %s \"$(printf %s \"{prompt}\")\" > out'",
                "",
            ),
            ("sh -c 'printf %s \"`printf %s {prompt}`\" > out'", ""),
            ("/bin/sh -ec 'x=\"{prompt}\"; printf %s \"$x\" > out'", ""),
            ("sh -c 'printf %s \"$1\" > out' sh {prompt}", ""),
            ("sh -c 'printf %s \"$HUNKGATE_PROMPT\" > out'", ""),
        ];
        for prompt in &prompts {
            for (template, wrap) in templates {
                let argv = build_argv(template, prompt).unwrap();
                let _ = std::fs::remove_file(tmp.path().join("out"));
                let st = std::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .current_dir(tmp.path())
                    .env(PROMPT_VAR, prompt)
                    .status()
                    .unwrap();
                assert!(st.success(), "{template}: {argv:?}");
                assert!(
                    !mark.exists(),
                    "{template} ran the prompt {prompt:?}: {argv:?}"
                );
                let got = std::fs::read_to_string(tmp.path().join("out")).unwrap();
                // `$(…)` and backticks drop trailing newlines; none of the prompts has one.
                let want = match wrap {
                    "<>" => format!("<{prompt}>"),
                    _ => prompt.clone(),
                };
                assert_eq!(got, want, "{template}: {argv:?}");
            }
        }
        // The prompt never enters a script's text.
        let argv = build_argv("sh -c 'echo {prompt}'", "SECRET-TEXT").unwrap();
        assert_eq!(argv[2], "echo \"${HUNKGATE_PROMPT}\"");
    }

    #[test]
    fn code_in_other_languages_with_the_prompt_is_refused() {
        for t in [
            "python3 -c 'print(\"{prompt}\")'",
            "perl -e 'print \"{prompt}\"'",
            "node -e 'console.log(`{prompt}`)'",
            "fish -c 'echo {prompt}'",
            "python3 -u -c 'print(\"{prompt}\")'",
        ] {
            let err = build_argv(t, "x").unwrap_err();
            assert!(matches!(err, TemplateError::PromptInCode { .. }), "{t}");
            assert!(err.to_string().contains("HUNKGATE_PROMPT"), "{err}");
        }
        // Positive controls: the prompt as an argument of its own is fine.
        assert_eq!(
            build_argv("python3 agent.py --task {prompt}", "$(x)").unwrap(),
            vec!["python3", "agent.py", "--task", "$(x)"]
        );
        assert_eq!(
            build_argv(
                "python3 -c 'import sys; print(sys.argv[1])' {prompt}",
                "$(x)"
            )
            .unwrap()[3],
            "$(x)"
        );
        // A shell that is just an argument of another program is not a script.
        assert_eq!(
            build_argv("aider --shell sh --message {prompt}", "a \"b\"").unwrap()[4],
            "a \"b\""
        );
    }

    /// Peak resident memory of this process, in KiB.
    fn vm_hwm_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// A 128 MiB line without a newline is cut to MAX_LINE bytes with a marker, the lines after
    /// it arrive intact, and reading it does not hold the line in memory.
    #[tokio::test]
    async fn a_huge_line_is_cut_without_being_held() {
        use tokio::io::AsyncReadExt;
        const HUGE: u64 = 128 * 1024 * 1024;
        let input = tokio::io::repeat(b'a')
            .take(HUGE)
            .chain(&b"\nnext line\nlast without newline"[..]);
        let before = vm_hwm_kib();
        let mut lines = Vec::new();
        read_lines(input, |l| {
            lines.push(l);
            async { true }
        })
        .await;
        let grown_mib = (vm_hwm_kib().saturating_sub(before)) / 1024;
        assert_eq!(
            lines.len(),
            3,
            "{:?}",
            lines.iter().map(|l| l.len()).collect::<Vec<_>>()
        );
        assert!(
            lines[0].starts_with(&"a".repeat(MAX_LINE)),
            "{}",
            &lines[0][..50]
        );
        assert!(
            lines[0].ends_with(&format!(
                " … [hunkgate: {} more bytes of this line dropped]",
                HUGE - MAX_LINE as u64
            )),
            "{}",
            &lines[0][MAX_LINE..]
        );
        assert_eq!(lines[1], "next line");
        assert_eq!(lines[2], "last without newline");
        assert!(
            grown_mib < 32,
            "reading one line grew the peak memory by {grown_mib} MiB"
        );
    }

    #[test]
    fn bad_templates_are_clear_errors() {
        assert!(matches!(
            build_argv("  ", "p"),
            Err(TemplateError::Empty(_))
        ));
        assert!(matches!(
            build_argv("sh -c 'unterminated", "p"),
            Err(TemplateError::Syntax { .. })
        ));
    }

    #[test]
    fn env_is_an_allowlist() {
        std::env::set_var("HUNKGATE_PROBE_API_KEY", "sk-secret");
        std::env::set_var("GIT_HUNKGATE_PROBE", "1");
        let env = scrubbed_env(&[]);
        assert!(env.iter().any(|(k, _)| k == "PATH"), "positive control");
        assert!(!env
            .iter()
            .any(|(k, _)| k == "HUNKGATE_PROBE_API_KEY" || k.starts_with("GIT_")));
        let env = scrubbed_env(&["HUNKGATE_PROBE_API_KEY".to_string()]);
        assert!(env.iter().any(|(k, _)| k == "HUNKGATE_PROBE_API_KEY"));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
        let pidfile = tmp.path().join("bg.pid");
        let script = format!(
            // The agent may be in a PID namespace of its own, where `$!` is not our pid: the
            // child reads its pid from /proc, which is still the machine's, before `exec`.
            "sh -c 'echo $(cut -d\" \" -f4 /proc/self/stat) > {}; exec sleep 30' & echo started; wait",
            pidfile.display()
        );
        let argv = vec!["sh".to_string(), "-c".to_string(), script];
        let mut lines = Vec::new();
        let out = run(
            &sb,
            &argv,
            &scrubbed_env(&[]),
            Duration::from_millis(500),
            CancellationToken::new(),
            |_, l| lines.push(l.to_string()),
        )
        .await;
        assert_eq!(out.exit, Exit::TimedOut);
        assert_eq!(lines, vec!["started"]);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background sleep was in the group, so it is gone (reaped by init or a zombie).
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true);
        assert!(!alive, "background process {pid} survived the timeout");
    }

    /// When the hub hears that the agent ended, nothing the agent started is left: in a PID
    /// namespace the init kills and reaps the rest before its word (not even a zombie is left,
    /// even of a child that left the process group), and without one the group is killed when
    /// its leader has exited.
    #[tokio::test]
    async fn what_the_agent_left_running_is_gone_when_the_end_is_heard() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
        let file = |name: &str| tmp.path().join(name);
        // As above, each background child's pid as the machine's /proc has it; one of them in
        // a session (and process group) of its own. Neither holds the agent's output open, so
        // the hub does not wait for their end to read it.
        let child = |pidfile: &str| {
            format!(
                "sh -c 'echo $(cut -d\" \" -f4 /proc/self/stat) > {}; exec sleep 30' >/dev/null 2>&1",
                file(pidfile).display()
            )
        };
        let script = format!(
            "readlink /proc/self/ns/pid > {ns}; {grouped} & setsid {alone} & while [ ! -s {g} ] || [ ! -s {a} ]; do sleep 0.01; done; echo started; while [ ! -e {seen} ]; do sleep 0.01; done; exit 4",
            ns = file("ns").display(),
            grouped = child("grouped.pid"),
            alone = child("alone.pid"),
            g = file("grouped.pid").display(),
            a = file("alone.pid").display(),
            seen = file("seen").display(),
        );
        let argv = vec!["sh".to_string(), "-c".to_string(), script];
        let stat = |name: &str| {
            let pid = std::fs::read_to_string(file(name)).unwrap();
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        };
        let mut alive_while_running = false;
        let out = run(
            &sb,
            &argv,
            &scrubbed_env(&[]),
            Duration::from_secs(20),
            CancellationToken::new(),
            |_, l| {
                // The agent waits for this look before it exits: the line is read concurrently
                // with the agent's end, so without the handshake the init may already have
                // killed the children when the hub gets to the line.
                if l == "started" {
                    alive_while_running = stat("grouped.pid").is_ok() && stat("alone.pid").is_ok();
                    std::fs::write(file("seen"), "").unwrap();
                }
            },
        )
        .await;
        let (grouped, alone) = (stat("grouped.pid"), stat("alone.pid"));
        assert_eq!(out.exit, Exit::Code(4));
        assert!(alive_while_running, "positive control: the children ran");
        let own_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let agent_ns = std::fs::read_to_string(file("ns")).unwrap();
        if agent_ns.trim() != own_ns.to_string_lossy() {
            assert!(grouped.is_err(), "left in the namespace: {grouped:?}");
            assert!(alone.is_err(), "left in the namespace: {alone:?}");
        } else {
            // No namespace here: the group was sent SIGKILL (its members die a moment later);
            // the child that left the group is beyond reach (a known gap).
            let dead = |s: &std::io::Result<String>| {
                s.as_ref()
                    .map_or(true, |s| s.contains(") Z ") || s.contains(") X "))
            };
            let killed = std::time::Instant::now();
            while !dead(&stat("grouped.pid")) && killed.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(dead(&stat("grouped.pid")), "survived: {grouped:?}");
            if let Ok(pid) = std::fs::read_to_string(file("alone.pid")) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid.trim().parse().unwrap()),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }

    /// However the agent runs (in a PID namespace or not), the hub sees it end as it did.
    #[tokio::test]
    async fn a_signal_that_kills_the_agent_is_reported_as_such() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
        let argv = vec!["sh".into(), "-c".into(), "echo hi; kill -9 $$".into()];
        let mut lines = Vec::new();
        let out = run(
            &sb,
            &argv,
            &[],
            Duration::from_secs(10),
            CancellationToken::new(),
            |_, l| lines.push(l.to_string()),
        )
        .await;
        assert_eq!(out.exit, Exit::Signal(9));
        assert_eq!(lines, vec!["hi"]);
    }

    /// A sandbox whose agents run under a scripted supervisor: `sh -c <script>`, given the
    /// request on its lifeline (stdin) like the sandbox helper.
    #[derive(Debug)]
    struct Supervised {
        local: crate::workspace::LocalSandbox,
        script: String,
    }

    impl Sandbox for Supervised {
        fn workdir(&self) -> &std::path::Path {
            self.local.workdir()
        }
        fn prepare(
            &self,
            store: &crate::odb::store::Store,
            base: &std::sync::Arc<crate::odb::store::FlatTree>,
        ) -> Result<(), crate::workspace::SandboxError> {
            self.local.prepare(store, base)
        }
        fn read_back(
            &self,
            objects: &mut crate::odb::store::ObjectBatch<'_>,
            base: &crate::odb::store::FlatTree,
            limits: crate::status::snapshot::ReadLimits,
        ) -> Result<crate::status::snapshot::ReadBack, crate::workspace::SandboxError> {
            self.local.read_back(objects, base, limits)
        }
        fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command {
            self.local.command(argv, env)
        }
        fn agent_command(
            &self,
            _argv: &[String],
            _env: &[(String, String)],
            _timeout: Duration,
        ) -> AgentCommand {
            let mut command = tokio::process::Command::new("sh");
            command.args(["-c", &self.script]);
            AgentCommand {
                command,
                stop: Stop::Lifeline {
                    request: b"the request\n".to_vec(),
                },
            }
        }
        fn tool(
            &self,
            request: &crate::slot::tools::ToolRequest,
        ) -> Result<crate::slot::tools::ToolReply, crate::workspace::SandboxError> {
            self.local.tool(request)
        }
        fn isolation(&self) -> String {
            "a scripted supervisor".into()
        }
    }

    /// Run a scripted supervisor to its end (its `argv` is not used); returns how the run
    /// ended and the lines the hub passed on.
    async fn supervised(script: &str) -> (Outcome, Vec<String>) {
        let tmp = tempfile::tempdir().unwrap();
        let sb = Supervised {
            local: crate::workspace::LocalSandbox::new(tmp.path().to_path_buf()),
            script: script.to_string(),
        };
        let mut lines = Vec::new();
        let out = run(
            &sb,
            &["unused".to_string()],
            &[],
            Duration::from_secs(60),
            CancellationToken::new(),
            |_, l| lines.push(l.to_string()),
        )
        .await;
        (out, lines)
    }

    /// The lines `i = 0..n` a scripted supervisor prints: 20,000 of them are over 200 KB, more
    /// than a pipe holds, so the hub reads them while the supervisor writes.
    fn numbered(n: usize) -> (String, Vec<String>) {
        let script = format!("i=0; while [ $i -lt {n} ]; do echo \"line $i\"; i=$((i+1)); done");
        (script, (0..n).map(|i| format!("line {i}")).collect())
    }

    /// A supervisor's word on its lifeline ends the run with the status it names, though the
    /// supervisor goes on (holding the agent's output pipes) and exits otherwise: everything
    /// written before the word is passed on, and nothing written after it is waited for.
    #[tokio::test]
    async fn a_supervisors_word_on_the_lifeline_ends_the_run() {
        let (lines, expected) = numbered(20_000);
        // The request arrives first, on stdin; the word goes back on the same socket.
        let script = format!(
            "read request; [ \"$request\" = 'the request' ] || exit 9; {lines}; printf '\\000\\007' >&0; sleep 1; echo after the word; exec sleep 30"
        );
        let (out, got) = supervised(&script).await;
        assert_eq!(out.exit, Exit::Code(7));
        assert_eq!(got.len(), expected.len(), "last: {:?}", got.last());
        assert!(
            got == expected,
            "the lines before the word, whole and in order"
        );

        // A death by signal, as the word says it.
        let (out, got) =
            supervised("read request; echo hi; printf '\\001\\011' >&0; exec sleep 30").await;
        assert_eq!((out.exit, got), (Exit::Signal(9), vec!["hi".to_string()]));

        // Positive control: without a word the supervisor's own exit ends the run, with every
        // line it wrote, however late.
        let (out, got) = supervised(&format!(
            "read request; {lines}; sleep 1; echo after the word; exit 5"
        ))
        .await;
        assert_eq!(out.exit, Exit::Code(5));
        assert_eq!(got.last().map(String::as_str), Some("after the word"));
        assert_eq!(got.len(), expected.len() + 1);
    }

    /// Talk to an interactive agent: send `input` on its stdin, read its stdout to the end,
    /// and wait for it; returns its stdout and outcome.
    async fn converse(sb: &dyn Sandbox, argv: &[String], input: &str) -> (String, Outcome) {
        use tokio::io::AsyncReadExt;
        let Interactive {
            stdin,
            mut stdout,
            process,
        } = spawn_interactive(sb, argv, &scrubbed_env(&[]), Duration::from_secs(60))
            .unwrap_or_else(|o| panic!("not started: {o:?}"));
        stdin.send(input.as_bytes().to_vec()).await.unwrap();
        // The last sender gone: the agent's EOF where the hub holds its stdin.
        drop(stdin);
        let mut stderr = Vec::new();
        let wait = process.wait(Duration::from_secs(60), CancellationToken::new(), |s, l| {
            stderr.push((s, l.to_string()))
        });
        let read = async {
            let mut out = String::new();
            stdout.read_to_string(&mut out).await.unwrap();
            out
        };
        let (outcome, out) = tokio::join!(wait, read);
        assert!(
            stderr.iter().all(|(s, _)| *s == Stream::Stderr),
            "only stderr goes to on_line: {stderr:?}"
        );
        (out, outcome)
    }

    /// An interactive agent run by the hub itself reads what the hub writes and its stdout
    /// reaches the hub raw, not as lines for `on_line`; closing its stdin is its EOF.
    #[tokio::test]
    async fn an_interactive_agent_hears_its_stdin_and_speaks_on_stdout() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
        let argv: Vec<String> = ["sh", "-c", "read a; echo \"got $a\"; echo to-stderr >&2"]
            .map(String::from)
            .to_vec();
        let (out, outcome) = converse(&sb, &argv, "hello\n").await;
        assert_eq!(out, "got hello\n");
        assert_eq!(outcome.exit, Exit::Code(0));
        assert_eq!(outcome.stderr_tail, "to-stderr");
        // `cat` ends only at the EOF of its stdin: the hub closes it once done writing.
        let cat = vec!["cat".to_string()];
        let (out, outcome) = converse(&sb, &cat, "a\nb").await;
        assert_eq!((out.as_str(), outcome.exit), ("a\nb", Exit::Code(0)));
    }

    /// Under a supervisor, what the hub writes to an interactive agent follows the request on
    /// the lifeline (the supervisor relays it), in order.
    #[tokio::test]
    async fn an_interactive_agents_stdin_follows_the_request_on_the_lifeline() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = Supervised {
            local: crate::workspace::LocalSandbox::new(tmp.path().to_path_buf()),
            script: "read request; read line; echo \"$request|$line\"".into(),
        };
        let (out, outcome) = converse(&sb, &["unused".to_string()], "after it\n").await;
        assert_eq!(out, "the request|after it\n");
        assert_eq!(outcome.exit, Exit::Code(0));
    }

    #[tokio::test]
    async fn exit_codes_and_stderr_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
        let argv = vec!["sh".into(), "-c".into(), "echo oops >&2; exit 3".into()];
        let out = run(
            &sb,
            &argv,
            &[],
            Duration::from_secs(10),
            CancellationToken::new(),
            |_, _| {},
        )
        .await;
        assert_eq!(out.exit, Exit::Code(3));
        assert_eq!(out.stderr_tail, "oops");
        let argv = vec!["/nonexistent/agent".into()];
        let out = run(
            &sb,
            &argv,
            &[],
            Duration::from_secs(10),
            CancellationToken::new(),
            |_, _| {},
        )
        .await;
        assert!(matches!(out.exit, Exit::SpawnFailed(_)));
    }

    #[test]
    fn wait_statuses_become_exits() {
        use std::os::unix::process::ExitStatusExt;
        let status = |raw| Ok(std::process::ExitStatus::from_raw(raw));
        assert_eq!(exit_of(status(0)), Exit::Code(0));
        assert_eq!(exit_of(status(3 << 8)), Exit::Code(3));
        assert_eq!(exit_of(status(9)), Exit::Signal(9));
        let failed = exit_of(Err(std::io::Error::other("no child")));
        assert_eq!(failed, Exit::SpawnFailed("no child".into()));
    }

    #[test]
    fn code_arguments_are_found_after_the_options() {
        let words = |t: &str| shell_words::split(t).unwrap();
        // (template, scan from, interpreter?) -> where the code is
        let cases = [
            ("sh -c x", 1, false, CodeArg::Word(2)),
            ("bash -lc x", 1, false, CodeArg::Word(2)),
            ("sh -c -- x", 1, false, CodeArg::Word(3)),
            ("bash -o pipefail -c x", 1, false, CodeArg::Word(4)),
            ("bash --rcfile r -c x", 1, false, CodeArg::Word(4)),
            ("bash --command x", 1, false, CodeArg::Word(2)),
            ("sh x.sh", 1, false, CodeArg::None),
            ("sh -c", 1, false, CodeArg::None),
            ("python -c x", 1, true, CodeArg::Word(2)),
            ("perl -e x", 1, true, CodeArg::Word(2)),
            ("python -cx", 1, true, CodeArg::Inline(1)),
            ("python -u -c x", 1, true, CodeArg::Word(3)),
            ("python script.py", 1, true, CodeArg::None),
        ];
        for (template, from, interp, want) in cases {
            assert_eq!(
                code_argument(&words(template), from, interp),
                want,
                "{template}"
            );
        }
    }
}

//! Agent processes: a command template turned into argv, run in the sandbox with a timeout and
//! cancellation that kill the agent's whole process tree — by signalling its process group
//! (same user), or through the sandbox helper's lifeline (separate user, see [`crate::helper`]).

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
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
}

const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "fish"];

/// Turn a template such as `aider --yes-always --message {prompt}` into argv.
///
/// The template is split like a POSIX shell would split it (quotes respected), but it is never
/// run through a shell unless it names one itself. `{prompt}` is replaced inside each word, so the
/// prompt is always exactly one argument, whatever it contains. When the template does ask for a
/// shell (`sh -c '... {prompt} ...'`), the prompt is substituted shell-quoted inside the script,
/// so quotes and `$(...)` in a prompt stay text. The prompt is also in `HUNKGATE_PROMPT`.
pub fn build_argv(template: &str, prompt: &str) -> Result<Vec<String>, TemplateError> {
    let words = shell_words::split(template).map_err(|e| TemplateError::Syntax {
        template: template.to_string(),
        message: e.to_string(),
    })?;
    if words.is_empty() {
        return Err(TemplateError::Empty(template.to_string()));
    }
    let program = words[0].rsplit('/').next().unwrap_or("");
    let is_shell = SHELLS.contains(&program);
    let mut script_next = false;
    let mut out = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let in_script = is_shell && script_next;
        script_next = is_shell && i > 0 && word.starts_with('-') && word.contains('c');
        let replacement = if in_script {
            shell_words::quote(prompt).into_owned()
        } else {
            prompt.to_string()
        };
        out.push(word.replace("{prompt}", &replacement));
    }
    Ok(out)
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
/// A single line longer than this is cut: agents print minified JSON and progress bars.
const MAX_LINE: usize = 4096;

/// Run `argv` in `sandbox` with `env`; `on_line` sees every output line as it arrives.
pub async fn run(
    sandbox: &dyn Sandbox,
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
    cancel: CancellationToken,
    mut on_line: impl FnMut(Stream, &str) + Send,
) -> Outcome {
    let AgentCommand {
        command: mut cmd,
        stop,
    } = sandbox.agent_command(argv, env, timeout);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let lifeline_request = match stop {
        Stop::ProcessGroup => {
            cmd.stdin(Stdio::null())
                // Its own process group, so a timeout or cancel reaches every grandchild too.
                .process_group(0);
            #[cfg(target_os = "linux")]
            // SAFETY: pre_exec runs in the forked child before exec; prctl is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    // If the hub dies (even kill -9), the agent's group leader is told to go too.
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
            None
        }
        Stop::Lifeline { request } => {
            cmd.stdin(Stdio::piped());
            Some(request)
        }
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Outcome {
                exit: Exit::SpawnFailed(format!("{}: {e}", argv[0])),
                stderr_tail: String::new(),
                stdout_tail: String::new(),
            }
        }
    };
    // The lifeline: the request goes down the supervisor's stdin, which then stays open until
    // `close_lifeline` is dropped (or this process dies, which closes it too).
    let mut close_lifeline: Option<tokio::sync::oneshot::Sender<()>> = None;
    if let (Some(request), Some(mut stdin)) = (lifeline_request, child.stdin.take()) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        close_lifeline = Some(tx);
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // A supervisor that died before reading its request shows up as its exit status.
            if stdin.write_all(&request).await.is_ok() {
                let _ = stdin.flush().await;
                let _ = rx.await;
            }
            drop(stdin);
        });
    }
    let supervised = close_lifeline.is_some();
    let pid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let pgid = if supervised { None } else { pid };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Stream, String)>(256);
    for (stream, pipe) in [
        (
            Stream::Stdout,
            stdout.map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ),
        (
            Stream::Stderr,
            stderr.map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ),
    ] {
        if let Some(pipe) = pipe {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(pipe);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let mut line = String::from_utf8_lossy(&buf).trim_end().to_string();
                            if line.len() > MAX_LINE {
                                let mut cut = MAX_LINE;
                                while !line.is_char_boundary(cut) {
                                    cut -= 1;
                                }
                                line.truncate(cut);
                            }
                            if tx.send((stream, line)).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
    }
    drop(tx);

    let mut tails = Tails::default();
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut forced: Option<Exit> = None;
    let mut lines_open = true;
    // When a stopped supervisor has not exited by then, it is killed outright.
    let hard_kill = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
    tokio::pin!(hard_kill);
    let mut hard_kill_armed = false;
    let status = loop {
        // Each branch says whether the run must be stopped now, and why.
        let stop = tokio::select! {
            line = rx.recv(), if lines_open => {
                match line {
                    Some((stream, line)) => {
                        tails.record(stream, &line);
                        on_line(stream, &line);
                    }
                    None => lines_open = false,
                }
                None
            }
            status = child.wait() => break status,
            _ = &mut deadline, if forced.is_none() => Some(Exit::TimedOut),
            _ = cancel.cancelled(), if forced.is_none() => Some(Exit::Cancelled),
            _ = &mut hard_kill, if hard_kill_armed => {
                hard_kill_armed = false;
                tracing::warn!("the sandbox supervisor did not stop in time; killing it");
                let _ = child.start_kill();
                None
            }
        };
        if let Some(why) = stop {
            forced = Some(why);
            if supervised {
                stop_supervisor(pid, &mut close_lifeline);
                hard_kill
                    .as_mut()
                    .reset(tokio::time::Instant::now() + SUPERVISOR_GRACE);
                hard_kill_armed = true;
            } else {
                kill_group(pgid).await;
            }
        }
    };
    // The supervisor has exited, having killed the agent's tree; close the lifeline.
    drop(close_lifeline);
    // The leader is gone; make sure nothing it spawned outlives the run.
    if let Some(pgid) = pgid {
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    }
    // Drain what the readers still hold (bounded: the pipes close once the group is dead).
    let drain = async {
        while let Some((stream, line)) = rx.recv().await {
            tails.record(stream, &line);
            on_line(stream, &line);
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    let exit = forced.unwrap_or_else(|| match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            match (st.code(), st.signal()) {
                (Some(c), _) => Exit::Code(c),
                (None, Some(s)) => Exit::Signal(s),
                _ => Exit::Code(-1),
            }
        }
        Err(e) => Exit::SpawnFailed(e.to_string()),
    });
    Outcome {
        exit,
        stderr_tail: Vec::from(tails.stderr).join("\n"),
        stdout_tail: Vec::from(tails.stdout).join("\n"),
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

    #[test]
    fn shell_templates_get_a_quoted_prompt() {
        let argv = build_argv("sh -c 'echo {prompt} > out.txt'", "it's $(whoami)").unwrap();
        assert_eq!(argv[0], "sh");
        assert_eq!(argv[1], "-c");
        assert_eq!(argv[2], "echo 'it'\\''s $(whoami)' > out.txt");
        let out = std::process::Command::new(&argv[0])
            .args(["-c", &argv[2].replace("> out.txt", "")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "it's $(whoami)\n");
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
            "sleep 30 & echo $! > {}; echo started; wait",
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
}

//! Test harness: the real `hunkgate` binary against temporary git repositories, driven with
//! real WebSocket clients and curl.
//!
//! Git runs hermetically (`GIT_CONFIG_GLOBAL=/dev/null`, no system config, fixed dates) so the
//! machine's own configuration cannot change a result.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

/// `rel` in the target directory this test binary was built in (`target/<profile>/deps/<test>`
/// → `target/<rel>`): where `scripts/install-test-deps` makes its venvs (`py-mcp`, `py-acp`,
/// `py-ruff`).
pub fn in_target_dir(rel: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors().nth(3).expect("target dir").join(rel)
}

/// The `hunkgate` binary next to this test executable (`target/<profile>/hunkgate`).
pub fn hunkgate_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HUNKGATE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>/hunkgate
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("hunkgate");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p hunkgate` (scripts/test does)",
        bin.display()
    );
    bin
}

/// Environment for every git and hunkgate process in tests.
pub fn hermetic_env(cmd: &mut Command, home: &Path) {
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env_remove("HUNKGATE_URL")
        .env_remove("HUNKGATE_AGENT_TOKEN")
        .env_remove("HUNKGATE_CONFIG")
        .env_remove("HUNKGATE_STATE_DIR")
        .env_remove("HUNKGATE_HUB_URL")
        .env_remove("HUNKGATE_TOKEN_FILE")
        .env_remove("HUNKGATE_DISCOVERY_DIR");
}

/// Run `cmd` with `input` on its stdin, its stdout (and whatever else the caller piped)
/// collected. The input is written whole before the output is read: for commands that read
/// all their input before they say much.
pub fn output_fed(cmd: &mut Command, input: &[u8]) -> Result<std::process::Output> {
    use std::io::Write as _;
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("no stdin for {cmd:?}"))?
        .write_all(input)?;
    Ok(child.wait_with_output()?)
}

/// A temporary directory holding a git repository (`repo/`), a home, and a state dir.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    /// A repository with the given files committed.
    pub fn new(files: &[(&str, &[u8])]) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let ws = Self { dir };
        std::fs::create_dir_all(ws.repo())?;
        std::fs::create_dir_all(ws.home())?;
        ws.git(&["init", "-q", "-b", "main"])?;
        for (path, bytes) in files {
            ws.write(path, bytes)?;
        }
        ws.git(&["add", "-A"])?;
        ws.git(&["commit", "-q", "--allow-empty", "-m", "initial"])?;
        Ok(ws)
    }

    pub fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let p = self.repo().join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, bytes).with_context(|| p.display().to_string())
    }

    pub fn read(&self, path: &str) -> Result<Vec<u8>> {
        let p = self.repo().join(path);
        std::fs::read(&p).with_context(|| p.display().to_string())
    }

    pub fn read_string(&self, path: &str) -> Result<String> {
        Ok(String::from_utf8(self.read(path)?)?)
    }

    pub fn exists(&self, path: &str) -> bool {
        self.repo().join(path).symlink_metadata().is_ok()
    }

    pub fn git(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("git");
        hermetic_env(&mut cmd, &self.home());
        let out = cmd.current_dir(self.repo()).args(args).output()?;
        if !out.status.success() {
            bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Write an executable agent script and return its path.
    pub fn agent_script(&self, name: &str, body: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let p = self.path(name);
        std::fs::write(&p, format!("#!/bin/sh\nset -e\n{body}\n"))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        Ok(p)
    }

    /// An agent (`table.sh`) that writes a new file `table.txt` of `lines` lines of 60 bytes:
    /// a suggestion of one hunk, and a `suggestion.ready` about as large as the file.
    pub fn table_agent(&self, lines: usize) -> Result<PathBuf> {
        self.agent_script(
            "table.sh",
            &format!(
                "seq -f 'line %06g of a generated table, as long as a line of code' {lines} > table.txt"
            ),
        )
    }

    /// Start a hub on a free port for this workspace.
    pub fn serve(&self, extra: &[&str]) -> Result<Hub> {
        Hub::start(self, extra)
    }
}

/// What a test or benchmark client reads at a time, as the hub's own clients do
/// (`hunkgate::api::ws::READ_BUFFER`). tungstenite zeroes that much of its buffer before each
/// read: at its default of 128 KiB, the hub benchmark's 100 listening clients (one process, on
/// the hub's two cores) took so long over each event that the fan-out's delays were half
/// theirs (p50 1.19–1.32 ms against 0.49–0.76 ms at 16 KiB, the same hub).
const WS_READ_BUFFER: usize = 16 * 1024;

/// Pass this among a hub's extra flags to let `serve` pick its isolation as it would on this
/// machine (`user` when the sandbox user exists); it is not passed on to the hub.
pub const MACHINE_DEFAULT_ISOLATION: &str = "<machine-default-isolation>";

/// The isolation flags a test hub gets: what the test asked for, else `--isolation none`, so the
/// suite behaves the same whether or not `hunkgate setup` created the sandbox user here.
pub fn isolation_args(extra: &[&str]) -> Vec<&'static str> {
    let chosen = extra.iter().any(|a| {
        *a == "--isolation" || a.starts_with("--isolation=") || *a == MACHINE_DEFAULT_ISOLATION
    });
    if chosen {
        Vec::new()
    } else {
        vec!["--isolation", "none"]
    }
}

/// A running `hunkgate serve` process.
pub struct Hub {
    pub child: Child,
    pub url: String,
    pub port: u16,
    pub token: String,
    pub state: PathBuf,
    pub log: PathBuf,
    /// The `serve` process when it is not `child` but a descendant of it (a wrapper's, such
    /// as `script`'s): its pid and start time, taken once it said it serves.
    wrapped: Option<(i32, u64)>,
}

impl Hub {
    pub fn start(ws: &Workspace, extra: &[&str]) -> Result<Self> {
        // One log per hub start, so a check of a restarted hub never reads the previous one's.
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = ws.path(&format!("hub-{}-{n}.log", std::process::id()));
        Self::start_in(&ws.repo(), &ws.home(), &ws.state(), &log, extra, &[])
    }

    /// Start a hub serving `repo` with `home` as HOME, extra flags and environment.
    pub fn start_in(
        repo: &Path,
        home: &Path,
        state: &Path,
        log: &Path,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<Self> {
        let state = state.to_path_buf();
        let log = log.to_path_buf();
        // A restarted hub must not read the previous one's address.
        let _ = std::fs::remove_file(state.join("hub.json"));
        let mut cmd = Command::new(hunkgate_bin());
        hermetic_env(&mut cmd, home);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        cmd.current_dir(repo)
            .args(["serve", "--port", "0", "--state-dir"])
            .arg(&state)
            .args(isolation_args(extra))
            .args(extra.iter().filter(|a| **a != MACHINE_DEFAULT_ISOLATION))
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        let child = cmd.spawn().context("starting hunkgate serve")?;
        Self::wait_ready(child, state, log)
    }

    /// Wait for a just-spawned hub to publish its address in `<state>/hub.json`. When that
    /// fails, the child is killed and reaped: no hub outlives a start that did not return it.
    pub fn wait_ready(mut child: Child, state: PathBuf, log: PathBuf) -> Result<Self> {
        match Self::ready_parts(&mut child, &state, &log) {
            Ok((url, port, token)) => Ok(Self {
                wrapped: wrapped_serve(&child, &state),
                child,
                url,
                port,
                token,
                state,
                log,
            }),
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// The url, port and token of a hub starting as `child`, once its hub.json says it serves.
    fn ready_parts(child: &mut Child, state: &Path, log: &Path) -> Result<(String, u16, String)> {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(30);
        let url = loop {
            if let Ok(s) = std::fs::read_to_string(state.join("hub.json")) {
                if let Ok(v) = serde_json::from_str::<Value>(&s) {
                    if let Some(u) = v["url"].as_str() {
                        break u.to_string();
                    }
                }
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "hunkgate serve exited ({status}): {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "hunkgate serve did not start: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            // Finely at first, so that the hub benchmark's restart is timed to the millisecond.
            std::thread::sleep(if started.elapsed() < Duration::from_secs(1) {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(20)
            });
        };
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow!("bad url {url}"))?;
        let token = std::fs::read_to_string(state.join("token"))
            .with_context(|| format!("the hub's token in {}", state.display()))?
            .trim()
            .to_string();
        Ok((url, port, token))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once `holds` says yes of it, or as it is after 10 seconds. A hub says it serves
    /// right after it writes `hub.json`, which is what [`Hub::wait_ready`] waits for: a check of
    /// its startup lines must wait for them.
    pub fn log_when(&self, holds: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log_text();
            if holds(&text) || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9: no cleanup, no flush.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> Result<()> {
        let pid = self.child.id() as i32;
        Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
        bail!("hub did not stop on SIGTERM")
    }

    pub fn curl(&self) -> curl::Curl {
        curl::Curl {
            base: self.url.clone(),
            token: Some(self.token.clone()),
        }
    }

    pub async fn ws(&self) -> Result<Ws> {
        Ws::connect(&self.url, Some(&self.token), &[]).await
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // A hub started through a wrapper (`script`, which gives it a controlling terminal) is
        // in a session of its own: killing the wrapper only hangs its terminal up, which a hub
        // that ignores SIGHUP (inherited, as under `nohup`) outlives. So that hub is killed
        // itself — the very process it was when it said it served, never one that took its pid
        // or a later hub on the same state dir.
        if let Some((pid, started)) = self.wrapped {
            if process_start(pid) == Some(started) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pid and start time of the `serve` process that `state`'s hub.json names, when that
/// process is a descendant of `child` but not `child` itself; None otherwise (the hub is the
/// child, or hub.json is a stale one naming another process).
fn wrapped_serve(child: &Child, state: &Path) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(state.join("hub.json")).ok()?;
    let pid = serde_json::from_str::<Value>(&text).ok()?["pid"].as_i64()?;
    let pid = i32::try_from(pid).ok().filter(|p| *p > 1)?;
    let child = i32::try_from(child.id()).ok()?;
    if pid == child {
        return None;
    }
    let started = process_start(pid)?;
    // Up the parents, a few wrappers at most, to the child.
    let mut at = pid;
    for _ in 0..4 {
        at = parent_of(at)?;
        if at == child {
            return Some((pid, started));
        }
    }
    None
}

/// The parent of process `pid` (`/proc/<pid>/stat`'s ppid).
pub fn parent_of(pid: i32) -> Option<i32> {
    stat_field(pid, 1)?.parse().ok()
}

/// When process `pid` started (`/proc/<pid>/stat`'s starttime, in clock ticks since boot).
fn process_start(pid: i32) -> Option<u64> {
    stat_field(pid, 19)?.parse().ok()
}

/// Field `n` (0: the state) of `/proc/<pid>/stat` after the parenthesised command name.
fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(n).map(str::to_string)
}

/// Minimal HTTP through curl: the same tool the README tells users to use.
pub mod curl {
    use super::*;

    pub struct Curl {
        pub base: String,
        pub token: Option<String>,
    }

    /// Status code and parsed JSON body.
    pub struct Reply {
        pub status: u16,
        pub body: Value,
    }

    impl Curl {
        pub fn request(
            &self,
            method: &str,
            path: &str,
            body: Option<&Value>,
            headers: &[(&str, &str)],
        ) -> Result<Reply> {
            let mut cmd = Command::new("curl");
            cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", method]);
            if let Some(t) = &self.token {
                cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
            }
            for (k, v) in headers {
                cmd.arg("-H").arg(format!("{k}: {v}"));
            }
            if let Some(b) = body {
                cmd.args([
                    "-H",
                    "Content-Type: application/json",
                    "--data-binary",
                    "@-",
                ]);
                cmd.arg(format!("{}{path}", self.base));
                let out = crate::output_fed(&mut cmd, b.to_string().as_bytes())?;
                return parse(&out.stdout);
            }
            let out = cmd.arg(format!("{}{path}", self.base)).output()?;
            parse(&out.stdout)
        }

        pub fn get(&self, path: &str) -> Result<Reply> {
            self.request("GET", path, None, &[])
        }

        pub fn post(&self, path: &str, body: &Value) -> Result<Reply> {
            self.request("POST", path, Some(body), &[])
        }

        pub fn delete(&self, path: &str) -> Result<Reply> {
            self.request("DELETE", path, None, &[])
        }
    }

    fn parse(out: &[u8]) -> Result<Reply> {
        let text = String::from_utf8_lossy(out);
        let (body, code) = text
            .rsplit_once('\n')
            .ok_or_else(|| anyhow!("no status in curl output: {text}"))?;
        let status: u16 = code
            .trim()
            .parse()
            .with_context(|| format!("curl output: {text}"))?;
        let body = if body.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(body).unwrap_or(Value::String(body.to_string()))
        };
        Ok(Reply { status, body })
    }
}

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A real WebSocket client (tokio-tungstenite) that keeps every event it has seen.
pub struct Ws {
    pub stream: WsStream,
    /// Every JSON message received so far, in order.
    pub seen: Vec<Value>,
    /// The frame of the message [`Ws::next_matching`] returned last.
    pub last_match: Option<Arrival>,
    next_id: u64,
}

/// A WebSocket frame as it reached the client.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// When it had arrived whole, before it was parsed.
    pub at: std::time::SystemTime,
    /// Its size.
    pub bytes: usize,
    /// How long parsing it as JSON took.
    pub parse: Duration,
}

impl Ws {
    pub async fn connect(
        base: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Self> {
        let url = format!("{}/ws", base.replacen("http", "ws", 1));
        let mut req = url.as_str().into_client_request()?;
        if let Some(t) = token {
            req.headers_mut()
                .insert("Authorization", format!("Bearer {t}").parse()?);
        }
        for (k, v) in headers {
            req.headers_mut().insert(
                tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes())?,
                v.parse()?,
            );
        }
        let (stream, _) = tokio_tungstenite::connect_async_with_config(
            req,
            Some(WebSocketConfig::default().read_buffer_size(WS_READ_BUFFER)),
            true,
        )
        .await?;
        let mut ws = Self {
            stream,
            seen: Vec::new(),
            last_match: None,
            next_id: 0,
        };
        let hello = ws
            .next_matching(|v| v["type"] == "hello", Duration::from_secs(10))
            .await?;
        anyhow::ensure!(hello["service"] == "hunkgate", "unexpected hello {hello}");
        Ok(ws)
    }

    pub async fn send_raw(&mut self, msg: Message) -> Result<()> {
        self.stream.send(msg).await?;
        Ok(())
    }

    /// Receive until a message satisfies `pred` (earlier ones are kept in `seen`).
    pub async fn next_matching(
        &mut self,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .map_err(|_| {
                    anyhow!(
                        "timed out waiting; seen: {:#?}",
                        self.seen.iter().rev().take(10).collect::<Vec<_>>()
                    )
                })?
                .ok_or_else(|| anyhow!("connection closed"))??;
            let at = std::time::SystemTime::now();
            let text = match msg {
                Message::Text(t) => t,
                Message::Close(f) => bail!("connection closed: {f:?}"),
                _ => continue,
            };
            let parsing = Instant::now();
            let v: Value = serde_json::from_str(&text)?;
            let parse = parsing.elapsed();
            self.seen.push(v.clone());
            if pred(&v) {
                self.last_match = Some(Arrival {
                    at,
                    bytes: text.len(),
                    parse,
                });
                return Ok(v);
            }
        }
    }

    /// Send a command (an `id` is added) and wait for its response.
    pub async fn call(&mut self, mut cmd: Value) -> Result<Value> {
        self.next_id += 1;
        let id = format!("t{}", self.next_id);
        cmd["id"] = Value::String(id.clone());
        self.stream
            .send(Message::Text(cmd.to_string().into()))
            .await?;
        self.next_matching(
            |v| v["type"] == "response" && v["id"] == Value::String(id.clone()),
            Duration::from_secs(60),
        )
        .await
    }

    /// Wait for an event of `ty` matching `pred`, looking at already-seen messages first.
    pub async fn event(
        &mut self,
        ty: &str,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Result<Value> {
        if let Some(v) = self.seen.iter().find(|v| v["type"] == ty && pred(v)) {
            return Ok(v.clone());
        }
        self.next_matching(|v| v["type"] == ty && pred(v), timeout)
            .await
    }
}

/// Run an agent through the hub and return the suggestion it produced.
pub async fn run_agent(hub: &Hub, ws: &mut Ws, agent: &Path, prompt: &str) -> Result<Value> {
    let resp = ws
        .call(serde_json::json!({"type": "run", "prompt": prompt, "agent": format!("{} {{prompt}}", agent.display())}))
        .await?;
    anyhow::ensure!(resp["success"] == true, "run failed: {resp}");
    let run_id = resp["data"]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ready = ws
        .event(
            "suggestion.ready",
            |v| v["suggestion"]["run_id"] == Value::String(run_id.clone()),
            Duration::from_secs(60),
        )
        .await
        .with_context(|| hub.log_text())?;
    Ok(ready["suggestion"].clone())
}

/// Poll `f` until it returns true (tests never sleep fixed times).
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("timed out waiting for {what}")
}

// ---------------------------------------------------------------------------------------------
// Helpers for the end-to-end suites (review, file kinds, conflicts, durability, protocol,
// security, runs, CLI).

impl Workspace {
    /// Start a hub with extra flags and extra environment variables (on top of the hermetic
    /// environment).
    pub fn serve_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Result<Hub> {
        let log = self.path(&format!("hub-{}.log", std::process::id()));
        let env: Vec<(&str, &std::ffi::OsStr)> = env
            .iter()
            .map(|(k, v)| (*k, std::ffi::OsStr::new(*v)))
            .collect();
        Hub::start_in(&self.repo(), &self.home(), &self.state(), &log, extra, &env)
    }

    /// `git --git-dir <state>/checkpoints.git <args>`: stdout as bytes.
    pub fn checkpoint_git(&self, args: &[&str]) -> Result<Vec<u8>> {
        let mut cmd = Command::new("git");
        hermetic_env(&mut cmd, &self.home());
        let out = cmd
            .arg("--git-dir")
            .arg(self.state().join("checkpoints.git"))
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "git --git-dir checkpoints.git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(out.stdout)
    }

    /// Every line of `<state>/feedback.jsonl`, parsed (an absent log is empty).
    pub fn feedback_log(&self) -> Result<Vec<Value>> {
        let p = self.state().join("feedback.jsonl");
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        text.lines()
            .map(|l| serde_json::from_str(l).with_context(|| format!("feedback line {l:?}")))
            .collect()
    }

    /// Run the `hunkgate` CLI as a user would: in the repository, with the hermetic environment.
    pub fn cli(&self, args: &[&str]) -> Result<std::process::Output> {
        let mut cmd = Command::new(hunkgate_bin());
        hermetic_env(&mut cmd, &self.home());
        Ok(cmd
            .current_dir(self.repo())
            .env("HUNKGATE_LOG", "warn")
            .args(args)
            .stdin(Stdio::null())
            .output()?)
    }
}

impl curl::Curl {
    /// Status and response headers (names lower-cased) of a request; the body is discarded.
    pub fn headers(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Vec<(String, String)>)> {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-o", "/dev/null", "-D", "-", "-X", method]);
        if let Some(t) = &self.token {
            cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
        }
        for (k, v) in headers {
            cmd.arg("-H").arg(format!("{k}: {v}"));
        }
        let out = cmd.arg(format!("{}{path}", self.base)).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let status_line = lines
            .next()
            .ok_or_else(|| anyhow!("no response from curl: {text}"))?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Ok((status, headers))
    }
}

impl Ws {
    /// The `hello` this connection started with.
    pub fn hello(&self) -> Value {
        self.seen
            .iter()
            .find(|v| v["type"] == "hello")
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// The highest `seq` of any message seen on this connection (hello included).
    pub fn max_seq(&self) -> u64 {
        self.seen
            .iter()
            .filter_map(|v| v["seq"].as_u64())
            .max()
            .unwrap_or(0)
    }

    /// `feedback` for one hunk; returns the whole response.
    pub async fn decide(&mut self, suggestion: &str, hunk: &str, action: &str) -> Result<Value> {
        self.call(serde_json::json!({
            "type": "feedback", "suggestionId": suggestion, "hunkId": hunk, "action": action,
        }))
        .await
    }

    /// Start a run with an explicit agent template; returns the run id.
    pub async fn start_run(
        &mut self,
        prompt: &str,
        template: &str,
        timeout_secs: Option<u64>,
    ) -> Result<String> {
        let mut cmd = serde_json::json!({"type": "run", "prompt": prompt, "agent": template});
        if let Some(t) = timeout_secs {
            cmd["timeoutSecs"] = t.into();
        }
        let resp = self.call(cmd).await?;
        anyhow::ensure!(resp["success"] == true, "run failed: {resp}");
        Ok(resp["data"]["run_id"]
            .as_str()
            .ok_or_else(|| anyhow!("no run_id in {resp}"))?
            .to_string())
    }
}

/// Poll `f` without blocking the async runtime (WebSocket reads keep going meanwhile).
pub async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("timed out waiting for {what}")
}

/// Wait until a run is no longer queued, working or waiting for an answer (polling
/// `GET /runs/:id`): ready, no_changes, failed, cancelled or interrupted. Returns the run.
pub async fn wait_run_finished(hub: &Hub, run_id: &str, timeout: Duration) -> Result<Value> {
    let curl = hub.curl();
    let mut last = Value::Null;
    let finished = wait_for("the run to finish", timeout, || {
        match curl.get(&format!("/runs/{run_id}")) {
            Ok(r) if r.status == 200 => {
                last = r.body;
                !matches!(
                    last["status"].as_str(),
                    Some("queued" | "working" | "waiting_for_user")
                )
            }
            _ => false,
        }
    })
    .await;
    finished.with_context(|| format!("last seen: {last}\n{}", hub.log_text()))?;
    Ok(last)
}

/// Whether a process is running (a zombie or a missing /proc entry counts as gone).
pub fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(|pid| stat_field(pid, 0))
        .is_some_and(|state| state != "Z")
}

/// `line 1\n` … `line n\n`.
pub fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// Mode bits of a path in the repository (not following symlinks).
pub fn mode_of(path: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::symlink_metadata(path)
        .with_context(|| path.display().to_string())?
        .permissions()
        .mode()
        & 0o7777)
}

/// The hunk of suggestion `s` in `file` with per-file `index` (panics with the hunk list if
/// there is none).
pub fn find_hunk<'a>(s: &'a Value, file: &str, index: usize) -> &'a Value {
    s["hunks"]
        .as_array()
        .and_then(|hs| {
            hs.iter()
                .find(|h| h["file"] == file && h["index"].as_u64() == Some(index as u64))
        })
        .unwrap_or_else(|| panic!("no hunk {file}:{index} in {:#}", s["hunks"]))
}

/// The id of that hunk.
pub fn hunk_id(s: &Value, file: &str, index: usize) -> String {
    find_hunk(s, file, index)["id"]
        .as_str()
        .expect("hunk id")
        .to_string()
}

/// What is at one path of a directory tree, for byte-for-byte comparisons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    /// Contents and permission bits.
    File(Vec<u8>, u32),
    Symlink(PathBuf),
}

/// Every entry under `root` except `.git`, by relative path (symlinks are not followed).
pub fn tree_of(root: &Path) -> Result<std::collections::BTreeMap<String, Node>> {
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut std::collections::BTreeMap<String, Node>,
    ) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let rel = path.strip_prefix(root)?.to_string_lossy().into_owned();
            if rel == ".git" {
                continue;
            }
            let ft = entry.file_type()?;
            if ft.is_symlink() {
                out.insert(rel, Node::Symlink(std::fs::read_link(&path)?));
            } else if ft.is_dir() {
                out.insert(rel, Node::Dir);
                walk(root, &path, out)?;
            } else {
                out.insert(rel, Node::File(std::fs::read(&path)?, mode_of(&path)?));
            }
        }
        Ok(())
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// Helpers for the OS-user isolation tests (`tests/tests/isolation.rs`): real users created
/// with useradd, a hub started as one of them, and a look at every process a user has.
/// True when a test that needs root (`why`: what for) can run. Otherwise it says so loudly and
/// fails in CI (`CI=true`, which runs as root), where a pass that tested nothing would be a
/// lie, or skips elsewhere.
pub fn require_root_for(test: &str, why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let msg = format!("{test}: needs root ({why}); it did NOT run");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg} — CI runs as root, so this is a broken CI environment");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

/// A pause point of the hub's debug-build test seam (`HUNKGATE_TEST_PAUSE_DIR`): armed on
/// creation; `reached` waits for a decision to stop there; `release` (or drop) lets it go on,
/// `release_and_wait` also waits until it has.
pub struct Pause {
    gate: PathBuf,
    reached: PathBuf,
    left: PathBuf,
}

impl Pause {
    pub fn arm(dir: &Path, point: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let gate = dir.join(format!("{point}.pause"));
        let reached = dir.join(format!("{point}.reached"));
        let left = dir.join(format!("{point}.left"));
        let _ = std::fs::remove_file(&reached);
        let _ = std::fs::remove_file(&left);
        std::fs::write(&gate, b"").unwrap();
        Self {
            gate,
            reached,
            left,
        }
    }

    pub fn reached(&self) {
        wait_until(
            "the decision to reach the pause point",
            Duration::from_secs(10),
            || self.reached.exists(),
        )
        .unwrap();
    }

    pub fn release(&self) {
        let _ = std::fs::remove_file(&self.gate);
    }

    /// Release, and wait for the paused work to go on past the point.
    pub fn release_and_wait(&self) {
        self.release();
        wait_until(
            "the paused work to leave the pause point",
            Duration::from_secs(10),
            || self.left.exists(),
        )
        .unwrap();
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        self.release();
    }
}

impl Workspace {
    /// The pause seam's directory, and the environment that points a hub at it.
    pub fn pause_env(&self) -> (PathBuf, [(&'static str, String); 1]) {
        let dir = self.path("pauses");
        let env = [("HUNKGATE_TEST_PAUSE_DIR", dir.display().to_string())];
        (dir, env)
    }

    /// A hub whose decisions can be paused (see [`Pause`]), and the pause directory.
    pub fn serve_pausable(&self) -> Result<(Hub, PathBuf)> {
        let (dir, env) = self.pause_env();
        let hub = self.serve_env(&[], &[(env[0].0, env[0].1.as_str())])?;
        Ok((hub, dir))
    }
}

pub mod fake_llm;
pub mod hub_bench;
pub mod model_server;
pub mod isolation {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// useradd and userdel lock /etc/passwd; tests running in parallel take turns.
    static USERS: Mutex<()> = Mutex::new(());
    static COUNTER: AtomicUsize = AtomicUsize::new(0);

    /// True when the isolation tests can run (root). Otherwise they say so loudly and fail in
    /// CI (`CI=true`), where a pass that tested nothing would be a lie, or skip elsewhere.
    pub fn require_root(test: &str) -> bool {
        super::require_root_for(test, "to create users and run sudo")
    }

    fn run(cmd: &mut Command) -> Result<String> {
        let out = cmd.output().with_context(|| format!("{cmd:?}"))?;
        if !out.status.success() {
            bail!(
                "{cmd:?} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A local user made for one test, removed (with its home and its processes) on drop.
    pub struct TestUser {
        pub name: String,
        pub uid: u32,
        pub gid: u32,
    }

    impl TestUser {
        /// `useradd` with the given extra arguments; `tag` keeps names unique per test.
        pub fn create(prefix: &str, args: &[&str]) -> Result<Self> {
            let name = format!(
                "{prefix}{}x{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::SeqCst)
            );
            {
                let _g = USERS.lock().unwrap_or_else(|e| e.into_inner());
                run(Command::new("useradd").args(args).arg(&name))?;
            }
            Self::lookup(&name)
        }

        /// The sandbox user `name` made as a user makes it, by `hunkgate setup --install` for a
        /// hub run by `hub_user`, and adopted for clean-up (taking turns with the other tests'
        /// `useradd`: `setup` runs one too).
        pub fn set_up_sandbox_user(name: &str, hub_user: &str) -> Result<Self> {
            let out = {
                let _g = USERS.lock().unwrap_or_else(|e| e.into_inner());
                Command::new(hunkgate_bin())
                    .args(["setup", "--user", name, "--hub-user", hub_user])
                    .args(["--install", "--yes"])
                    .output()?
            };
            let user = Self::lookup(name)
                .with_context(|| String::from_utf8_lossy(&out.stderr).into_owned())?;
            anyhow::ensure!(
                out.status.success(),
                "hunkgate setup failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(user)
        }

        /// A user that already exists (made by `hunkgate setup`), adopted for clean-up.
        pub fn lookup(name: &str) -> Result<Self> {
            let u = nix::unistd::User::from_name(name)?
                .ok_or_else(|| anyhow!("user {name} does not exist"))?;
            Ok(Self {
                name: name.to_string(),
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
            })
        }

        pub fn home(&self) -> PathBuf {
            nix::unistd::User::from_name(&self.name)
                .ok()
                .flatten()
                .map(|u| u.dir)
                .unwrap_or_default()
        }

        /// Run a shell command as this user (for positive controls) and return its status and
        /// output.
        pub fn sh(&self, script: &str) -> Result<std::process::Output> {
            Ok(Command::new("setpriv")
                .args(["--reuid", &self.uid.to_string(), "--regid"])
                .arg(self.gid.to_string())
                .args(["--init-groups", "--", "sh", "-c", script])
                .env("HOME", self.home())
                .current_dir("/")
                .stdin(Stdio::null())
                .output()?)
        }
    }

    impl Drop for TestUser {
        fn drop(&mut self) {
            for (pid, _) in processes_of(self.uid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _g = USERS.lock().unwrap_or_else(|e| e.into_inner());
            for _ in 0..20 {
                let ok = Command::new("userdel")
                    .args(["-r", &self.name])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map(|s| s.success() || s.code() == Some(12))
                    .unwrap_or(false);
                if ok {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = std::fs::remove_file(format!("/etc/sudoers.d/hunkgate-{}", self.name));
        }
    }

    /// Every process whose real uid is `uid`: (pid, command line).
    pub fn processes_of(uid: u32) -> Vec<(i32, String)> {
        let mut out = Vec::new();
        for (pid, path) in hunkgate_sandbox::supervise::procs::all() {
            let Ok(status) = std::fs::read_to_string(path.join("status")) else {
                continue;
            };
            let real = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|u| u.parse::<u32>().ok());
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            if real == Some(uid) && !zombie {
                let cmd = std::fs::read(path.join("cmdline"))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default();
                out.push((pid, cmd.trim().to_string()));
            }
        }
        out
    }

    /// Give `path` and everything below it to `user` (chown -R).
    pub fn chown_tree(path: &Path, user: &TestUser) -> Result<()> {
        run(Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", user.uid, user.gid))
            .arg(path))?;
        Ok(())
    }

    /// How to start the hub for [`start_hub`].
    pub struct HubAs<'a> {
        /// Run the hub as this user (None: as root, which drops privileges itself).
        pub user: Option<&'a TestUser>,
        /// Give the hub a controlling terminal (a pty, through `script`), so an agent that kept
        /// it could inject keystrokes into it.
        pub tty: bool,
        pub extra: &'a [&'a str],
        /// Extra environment (secrets that must not reach the agent).
        pub env: &'a [(&'a str, &'a str)],
    }

    /// Start `hunkgate serve` for `ws` as described; `log` collects its output.
    pub fn start_hub(ws: &Workspace, how: &HubAs<'_>) -> Result<Hub> {
        let state = ws.state();
        let log = ws.path("hub-isolation.log");
        let _ = std::fs::remove_file(state.join("hub.json"));
        let mut argv: Vec<String> = Vec::new();
        if let Some(u) = how.user {
            argv.extend(
                [
                    "setpriv",
                    "--reuid",
                    &u.uid.to_string(),
                    "--regid",
                    &u.gid.to_string(),
                    "--init-groups",
                    "--",
                ]
                .map(String::from),
            );
        }
        argv.push(hunkgate_bin().display().to_string());
        argv.extend(["serve", "--port", "0", "--state-dir"].map(String::from));
        argv.push(state.display().to_string());
        argv.extend(isolation_args(how.extra).into_iter().map(String::from));
        argv.extend(
            how.extra
                .iter()
                .filter(|a| **a != MACHINE_DEFAULT_ISOLATION)
                .map(|s| s.to_string()),
        );
        let mut cmd = if how.tty {
            let line = argv
                .iter()
                .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
                .collect::<Vec<_>>()
                .join(" ");
            let mut c = Command::new("script");
            c.args(["-qefc", &format!("exec {line}"), "/dev/null"]);
            c
        } else {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        };
        hermetic_env(&mut cmd, &ws.home());
        for (k, v) in how.env {
            cmd.env(k, v);
        }
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        cmd.current_dir(ws.repo())
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf);
        let child = cmd.spawn().context("starting hunkgate serve")?;
        Hub::wait_ready(child, state, log)
    }

    /// The pid of the `hunkgate serve` process itself (not a wrapper), from its hub.json.
    pub fn hub_pid(hub: &Hub) -> Result<i32> {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(hub.state.join("hub.json"))?)?;
        v["pid"]
            .as_i64()
            .map(|p| p as i32)
            .ok_or_else(|| anyhow!("no pid in hub.json: {v}"))
    }
}

/// A helper process a test started (a concurrent writer, say), killed and reaped if the test
/// ends before waiting for it: a failed assertion must not leave it running.
pub struct Reaped(Option<Child>);

impl Reaped {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// Wait for it to end on its own, with its output.
    pub fn wait_with_output(mut self) -> Result<std::process::Output> {
        let child = self.0.take().ok_or_else(|| anyhow!("already waited for"))?;
        Ok(child.wait_with_output()?)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A start that fails once the hub has written its hub.json (here: no token to read)
    /// kills and reaps the child instead of leaving it running with no one to stop it.
    #[test]
    fn a_failed_start_leaves_no_hub_running() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("hub.json"), r#"{"url":"http://127.0.0.1:4097"}"#).unwrap();
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id();
        assert!(pid_alive(pid), "control: the child runs");
        let Err(err) = Hub::wait_ready(child, state.clone(), tmp.path().join("log")) else {
            panic!("started without a token");
        };
        assert!(format!("{err:#}").contains("token"), "{err:#}");
        assert!(!pid_alive(pid), "the child was left running");

        // Positive control: with its token there, the same start is a hub.
        std::fs::write(state.join("token"), "t0k\n").unwrap();
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id();
        let hub = Hub::wait_ready(child, state, tmp.path().join("log")).unwrap();
        assert_eq!((hub.port, hub.token.as_str()), (4097, "t0k"));
        drop(hub);
        assert!(!pid_alive(pid), "dropped, the hub is stopped");
    }

    /// A hub behind a wrapper — a descendant of the child, SIGHUP ignored, as a tty test's
    /// hub under `script` started under `nohup` — is stopped with it; a process that a stale
    /// hub.json names and that is not the child's is left alone.
    #[test]
    fn a_dropped_hub_behind_a_wrapper_is_stopped_too() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("token"), "t\n").unwrap();
        let served_file = tmp.path().join("served");
        // The wrapper: starts the "hub" (SIGHUP ignored) in the background and waits.
        let wrapper = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "(trap '' HUP; exec sleep 60) & echo $! > {}; wait",
                served_file.display()
            ))
            .spawn()
            .unwrap();
        let wrapper_pid = wrapper.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let served: u32 = loop {
            if let Some(pid) = std::fs::read_to_string(&served_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the wrapper started nothing");
            std::thread::sleep(Duration::from_millis(10));
        };
        let hub_json = |pid: u32| {
            let json = format!(r#"{{"url":"http://127.0.0.1:1","pid":{pid}}}"#);
            std::fs::write(state.join("hub.json"), json).unwrap();
        };
        hub_json(served);
        let hub = Hub::wait_ready(wrapper, state.clone(), tmp.path().join("log")).unwrap();
        assert!(pid_alive(served));
        drop(hub);
        assert!(!pid_alive(wrapper_pid), "the wrapper stopped");
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid_alive(served) {
            assert!(
                Instant::now() < deadline,
                "the hub behind the wrapper still runs"
            );
            std::thread::sleep(Duration::from_millis(10));
        }

        // Control: hub.json left by another hub, naming a process that is not the child's.
        let mut other = Command::new("sleep").arg("60").spawn().unwrap();
        hub_json(other.id());
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let child_pid = child.id();
        let hub = Hub::wait_ready(child, state, tmp.path().join("log")).unwrap();
        drop(hub);
        assert!(!pid_alive(child_pid));
        assert!(pid_alive(other.id()), "another process was killed");
        let _ = other.kill();
        let _ = other.wait();
    }
}

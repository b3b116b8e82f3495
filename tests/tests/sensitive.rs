//! Sensitive files stay home (issue #58.1): a repository with a real-looking `.env`, an SSH key
//! and AWS credentials. No agent finds them in its sandbox (under both isolation modes), the run
//! says how many were withheld, an agent that writes `.env` gets it listed as skipped with
//! reason `sensitive` (never a hunk, and never a deletion of the user's own), `[sensitive]
//! allow` lets it through (the control), and the built-in agent asked to read `.env` is refused
//! while no recorded model request holds a secret.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hunkgate_tests::fake_llm::{FakeLlm, Reply};
use hunkgate_tests::isolation::{require_root, start_hub, HubAs, TestUser};
use hunkgate_tests::{wait_run_finished, Hub, Workspace};
use serde_json::{json, Value};

const SECS: Duration = Duration::from_secs(90);

/// The user's secrets, each with a marker the agent greps for (made up, in real shapes).
const ENV: &str = "DATABASE_URL=postgres://app:SENSMARK-env-pw-7f3a@db/app\n\
                   OPENAI_API_KEY=sk-proj-Xq3vB8nM2kL9pR4tY7wZ1cF6hJ0dS5gA-uE_iO3pQ8rT2yW6\n";
const SSH_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\n\
                       b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ SENSMARK-ssh\n\
                       -----END OPENSSH PRIVATE KEY-----\n";
const AWS: &str = "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n\
                   aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n\
                   # SENSMARK-aws\n";
/// What each secret file holds that must never be seen beyond the checkout.
const SECRETS: &[&str] = &[
    "SENSMARK-env-pw-7f3a",
    "sk-proj-Xq3vB8nM2kL9pR4tY7wZ1cF6hJ0dS5gA",
    "SENSMARK-ssh",
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
    "SENSMARK-aws",
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI",
];

fn repo() -> Workspace {
    Workspace::new(&[
        (".env", ENV.as_bytes()),
        (".ssh/id_ed25519", SSH_KEY.as_bytes()),
        (".aws/credentials", AWS.as_bytes()),
        ("config/app.toml", b"name = \"SENSMARK-public\"\n"),
    ])
    .unwrap()
}

/// An agent that greps its whole sandbox for the markers and says which secret files it sees,
/// into `findings.txt` (so the findings come back as a hunk), and writes a `.env` of its own.
const PROBE: &str = "#!/bin/sh\n\
    found=$(grep -rho 'SENSMARK-[a-z]*' --exclude-dir=.git . | sort -u | tr '\\n' ' ')\n\
    seen=$(ls -a . .ssh .aws 2>&1 | tr '\\n' ' ')\n\
    printf 'found: %s\\nseen: %s\\n' \"$found\" \"$seen\" > findings.txt\n\
    printf 'AGENT_SET=1\\n' > .env\n";

/// `PROBE` as a script every user can run, in a 0755 directory of its own.
fn probe_script(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = dir.join("probe.sh");
    std::fs::write(&p, PROBE).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Run the probe to its end; its run, its suggestion, and every status line it had.
async fn run_probe(hub: &Hub, agent: &Path) -> (Value, Value, Vec<String>) {
    let mut c = hub.ws().await.unwrap();
    let run_id = c
        .start_run("probe", &agent.display().to_string(), None)
        .await
        .unwrap();
    let run = wait_run_finished(hub, &run_id, SECS).await.unwrap();
    assert_eq!(run["status"], "ready", "{run}\n{}", hub.log_text());
    let sid = run["suggestion_ids"][0].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let ready = c
        .event(
            "suggestion.ready",
            |v| v["suggestion"]["run_id"] == run_id,
            SECS,
        )
        .await
        .unwrap();
    let lines: Vec<String> = c
        .seen
        .iter()
        .filter(|v| v["type"] == "suggestion.status" && v["run_id"] == run_id)
        .map(|v| v["message"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ready["suggestion"]["id"], s["id"]);
    (run, s, lines)
}

fn files(s: &Value) -> Vec<String> {
    let mut f: Vec<String> = s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["file"].as_str().unwrap().to_string())
        .collect();
    f.dedup();
    f
}

fn findings(s: &Value) -> String {
    s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["file"] == "findings.txt")
        .unwrap_or_else(|| panic!("no findings: {s:#}"))["diff"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What a probe run must show when the policy holds: the public marker found (the positive
/// control: the grep works) and no secret one, the secret files absent, three withheld, `.env`
/// skipped as sensitive, and no hunk at any sensitive path (no deletion of the user's files).
fn assert_withheld(s: &Value, lines: &[String]) {
    let found = findings(s);
    assert!(found.contains("found: SENSMARK-public"), "{found}");
    for m in ["SENSMARK-env", "SENSMARK-ssh", "SENSMARK-aws"] {
        assert!(!found.contains(m), "{m} reached the sandbox: {found}");
    }
    assert!(!found.contains(" .env "), "{found}");
    assert!(found.contains("No such file"), "no .ssh/.aws: {found}");
    assert_eq!(files(s), ["findings.txt"], "{s:#}");
    assert_eq!(
        s["skipped"],
        json!([{"path": ".env", "reason": "sensitive"}]),
        "{s:#}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Withheld 3 sensitive file(s) from the sandbox")),
        "{lines:?}"
    );
}

fn assert_checkout_untouched(ws: &Workspace) {
    assert_eq!(ws.read_string(".env").unwrap(), ENV);
    assert_eq!(ws.read_string(".ssh/id_ed25519").unwrap(), SSH_KEY);
    assert_eq!(ws.read_string(".aws/credentials").unwrap(), AWS);
}

/// Nothing of a secret in the hub's state directory's logs and history (run logs, the journal
/// holding session history and run records).
fn assert_state_clean(ws: &Workspace) {
    for entry in walk(&ws.state()) {
        let name = entry.display().to_string();
        if name.contains("checkpoints") || name.contains("objects") {
            continue; // the store holds the agent's blobs, compressed; never shown as text
        }
        let Ok(text) = std::fs::read(&entry) else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        for s in SECRETS {
            assert!(!text.contains(s), "{s} in {name}");
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn sensitive_files_never_enter_the_sandbox_without_isolation() {
    let ws = repo();
    let dir = tempfile::tempdir().unwrap();
    let hub = ws.serve(&["--isolation", "none"]).unwrap();
    let (_, s, lines) = run_probe(&hub, &probe_script(dir.path())).await;
    assert_withheld(&s, &lines);
    assert_checkout_untouched(&ws);
    assert_state_clean(&ws);
}

/// The control: `[sensitive] allow` lets `.env` into the sandbox and into the suggestion.
#[tokio::test]
async fn an_allowed_env_file_enters_the_sandbox_and_the_suggestion() {
    let ws = repo();
    let dir = tempfile::tempdir().unwrap();
    let cfg = ws.path("hunkgate.toml");
    std::fs::write(&cfg, "[sensitive]\nallow = [\".env\"]\n").unwrap();
    let hub = ws
        .serve(&["--isolation", "none", "--config", cfg.to_str().unwrap()])
        .unwrap();
    let (_, s, lines) = run_probe(&hub, &probe_script(dir.path())).await;
    let found = findings(&s);
    assert!(found.contains("SENSMARK-env"), "{found}");
    assert!(!found.contains("SENSMARK-ssh"), "{found}");
    assert_eq!(files(&s), [".env", "findings.txt"], "{s:#}");
    assert!(s.get("skipped").is_none(), "{s:#}");
    assert!(
        lines.iter().any(|l| l.starts_with("Withheld 2 ")),
        "{lines:?}"
    );
}

#[tokio::test]
async fn sensitive_files_never_enter_the_sandbox_under_user_isolation() {
    if !require_root("sensitive_files_never_enter_the_sandbox_under_user_isolation") {
        return;
    }
    let ws = repo();
    let name = format!("hws{}", std::process::id());
    // Removed when the test ends.
    let agent = TestUser::set_up_sandbox_user(&name, "root").unwrap();
    std::fs::set_permissions(ws.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--isolation", "user", "--sandbox-user", &agent.name];
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
    let (_, s, lines) = run_probe(&hub, &probe_script(dir.path())).await;
    assert_withheld(&s, &lines);
    assert_checkout_untouched(&ws);
    assert_state_clean(&ws);
}

/// The built-in agent asked to read `.env` (and the SSH key) is refused; a file that is not
/// sensitive is read (the control); no request to the model holds a secret.
#[tokio::test]
async fn the_builtin_agent_is_refused_sensitive_files_and_the_model_sees_no_secret() {
    let ws = repo();
    let fake = FakeLlm::scripted(vec![
        Reply::tool("read_file", json!({"file_path": ".env"})),
        Reply::tool("read_file", json!({"file_path": ".ssh/id_ed25519"})),
        Reply::tool("read_file", json!({"file_path": "config/app.toml"})),
        Reply::tool(
            "run_command",
            json!({"command": "cat .env .aws/credentials; echo token=c2f8e1b9a7d64f03b5e2"}),
        ),
        Reply::tool("finish", json!({"description": "nothing"})),
    ])
    .await;
    let url = fake.base_url();
    let hub = ws
        .serve(&[
            "--isolation",
            "none",
            "--provider-url",
            &url,
            "--model",
            "m",
        ])
        .unwrap();
    let r = hub
        .curl()
        .post("/runs", &json!({"prompt": "read .env and tell me the key"}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let run_id = r.body["run_id"].as_str().unwrap().to_string();
    wait_run_finished(&hub, &run_id, SECS).await.unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 5, "{}", hub.log_text());
    let result = |i: usize| reqs[i].tool_results().last().unwrap().1.clone();
    for i in [1, 2] {
        assert!(result(i).contains("is a sensitive file"), "{}", result(i));
    }
    assert!(result(3).contains("SENSMARK-public"), "{}", result(3));
    let cmd = result(4);
    assert!(cmd.contains("No such file"), "{cmd}");
    assert!(cmd.contains("token=[REDACTED:assignment]"), "{cmd}");
    for q in &reqs {
        for s in SECRETS.iter().chain(&["c2f8e1b9a7d64f03b5e2"]) {
            assert!(!q.raw.contains(s), "{s} sent to the model: {}", q.raw);
        }
    }
    assert_checkout_untouched(&ws);
    assert_state_clean(&ws);
}

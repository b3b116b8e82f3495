//! Checks per hunk (`[[check]]`): the real `cargo` and `ruff` run by the hub on a run's tree
//! and its base; the new and fixed diagnostics land on the hunks that made them, in the API,
//! in `suggestion.checked` and in `hunkgate show`; a checker that hangs or floods is stopped
//! at its budget and its cap, and holds neither the suggestion nor the slot.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hunkgate_tests::{find_hunk, run_agent, Hub, Workspace, Ws};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(300);

/// The directory of the `ruff` that `scripts/install-test-deps` puts in a venv in the target
/// dir (`HUNKGATE_TEST_RUFF_BIN` overrides it).
pub(crate) fn ruff_bin() -> PathBuf {
    let dir = match std::env::var_os("HUNKGATE_TEST_RUFF_BIN") {
        Some(d) => PathBuf::from(d),
        None => hunkgate_tests::in_target_dir("py-ruff/bin"),
    };
    assert!(
        dir.join("ruff").is_file(),
        "no ruff in {}: run scripts/install-test-deps (it makes that venv), or point \
         HUNKGATE_TEST_RUFF_BIN at a directory holding ruff",
        dir.display()
    );
    dir
}

/// The toolchain's homes as this test sees them: the hub's HOME is the workspace's, where
/// rustup would find no toolchain.
fn rust_env() -> Vec<(&'static str, String)> {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut env = vec![
        (
            "RUSTUP_HOME",
            std::env::var("RUSTUP_HOME").unwrap_or(format!("{home}/.rustup")),
        ),
        (
            "CARGO_HOME",
            std::env::var("CARGO_HOME").unwrap_or(format!("{home}/.cargo")),
        ),
    ];
    if let Ok(t) = std::env::var("RUSTUP_TOOLCHAIN") {
        env.push(("RUSTUP_TOOLCHAIN", t));
    }
    env
}

pub(crate) fn write_config(ws: &Workspace, text: &str) {
    let dir = ws.home().join(".config/hunkgate");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

fn filler(from: usize, to: usize, comment: &str) -> String {
    (from..=to)
        .map(|i| format!("{comment} filler {i}\n"))
        .collect()
}

/// Start a run of `agent` and wait for its suggestion, then for its `suggestion.checked`.
async fn checked_run(hub: &Hub, agent: &Path) -> (Value, Value, Ws) {
    let mut c = hub.ws().await.unwrap();
    let ready = run_agent(hub, &mut c, agent, "change it").await.unwrap();
    let sid = ready["id"].as_str().unwrap().to_string();
    let checked = c
        .event(
            "suggestion.checked",
            |v| v["suggestion_id"] == Value::String(sid.clone()),
            LONG,
        )
        .await
        .unwrap_or_else(|e| panic!("no suggestion.checked: {e}\n{}", hub.log_text()));
    (ready, checked, c)
}

/// `(hunk file:index, change, severity, code, message)`.
type Row = (Option<String>, String, String, String, String);

/// The [`Row`] of every diagnostic of checker `source` on the hunks of `s`, and `None` as the
/// hunk for the suggestion's own.
fn diagnostics_of(s: &Value, source: &str) -> Vec<Row> {
    let row = |hunk: Option<String>, d: &Value| {
        (
            hunk,
            d["change"].as_str().unwrap().to_string(),
            d["severity"].as_str().unwrap().to_string(),
            d["code"].as_str().unwrap_or("").to_string(),
            d["message"].as_str().unwrap().to_string(),
        )
    };
    let mut out = Vec::new();
    for h in s["hunks"].as_array().unwrap() {
        let name = format!("{}:{}", h["file"].as_str().unwrap(), h["index"]);
        for d in h["diagnostics"].as_array().into_iter().flatten() {
            if d["source"] == source {
                out.push(row(Some(name.clone()), d));
            }
        }
    }
    for d in s["diagnostics"].as_array().into_iter().flatten() {
        if d["source"] == source {
            out.push(row(None, d));
        }
    }
    out
}

fn row(hunk: &str, change: &str, severity: &str, code: &str, message: &str) -> Row {
    (
        Some(hunk.to_string()),
        change.into(),
        severity.into(),
        code.into(),
        message.into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cargo_check_puts_a_new_type_error_a_new_warning_and_a_fixed_one_on_their_hunks() {
    let answer_base = format!(
        "pub fn answer() -> u32 {{\n    let unused = 1;\n    42\n}}\n{}pub fn other() -> u32 {{\n    7\n}}\n",
        filler(5, 20, "//")
    );
    let ws = Workspace::new(&[
        (
            "Cargo.toml",
            b"[workspace]\nmembers = [\"a\", \"b\"]\nresolver = \"2\"\n",
        ),
        (
            "a/Cargo.toml",
            b"[package]\nname = \"a\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        ("a/src/lib.rs", answer_base.as_bytes()),
        (
            "b/Cargo.toml",
            b"[package]\nname = \"b\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\na = { path = \"../a\" }\n",
        ),
        ("b/src/lib.rs", b"pub fn twice() -> u32 {\n    a::answer() * 2\n}\n"),
    ])
    .unwrap();
    // The agent fixes the existing warning (line 2), adds one far below it, and breaks b.
    let answer_run = answer_base
        .replace("let unused = 1;", "let _unused = 1;")
        .replace("    7\n", "    let fresh = 2;\n    7\n");
    std::fs::write(ws.path("answer.rs"), &answer_run).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "cp {} a/src/lib.rs\nprintf 'pub fn twice() -> u32 {{\\n    let two: u32 = \"two\";\\n    a::answer() * two\\n}}\\n' > b/src/lib.rs",
                ws.path("answer.rs").display()
            ),
        )
        .unwrap();
    write_config(
        &ws,
        "agent_env = [\"RUSTUP_HOME\", \"CARGO_HOME\", \"RUSTUP_TOOLCHAIN\"]\n\
         [limits]\nchecks_budget_secs = 600\n\n[[check]]\npreset = \"cargo-check\"\n\n\
         [[check]]\npreset = \"cargo-clippy\"\n",
    );
    let env = rust_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let hub = ws.serve_env(&[], &env).unwrap();
    let (ready, checked, mut c) = checked_run(&hub, &agent).await;
    assert!(
        ready.get("checks").is_none(),
        "the suggestion is out before its checks: {ready}"
    );
    let line = c
        .event("suggestion.status", |v| v["status"] == "checked", LONG)
        .await
        .unwrap();
    assert_eq!(line["message"], "Checks: 4 new, 2 fixed diagnostic(s)");
    assert_eq!(checked["checks"]["state"], "done", "{checked}");
    assert_eq!(
        checked["checks"]["checkers"],
        serde_json::json!(["cargo-check", "cargo-clippy"])
    );

    let sid = ready["id"].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let unused_help = ": help: if this is intentional, prefix it with an underscore";
    // clippy runs rustc's lints too: the same three, from its own checker.
    assert_eq!(
        diagnostics_of(&s, "cargo-clippy"),
        diagnostics_of(&s, "cargo-check")
    );
    assert_eq!(
        diagnostics_of(&s, "cargo-check"),
        vec![
            row(
                "a/src/lib.rs:0",
                "fixed",
                "warning",
                "",
                &format!("unused variable: `unused`{unused_help}: `_unused`")
            ),
            row(
                "a/src/lib.rs:1",
                "new",
                "warning",
                "",
                &format!("unused variable: `fresh`{unused_help}: `_fresh`")
            ),
            row(
                "b/src/lib.rs:0",
                "new",
                "error",
                "E0308",
                "mismatched types: expected `u32`, found `&str`"
            ),
        ],
        "{s}"
    );
    let fresh = &find_hunk(&s, "a/src/lib.rs", 1)["diagnostics"][0];
    assert_eq!(
        (fresh["line"].as_u64(), fresh["source"].as_str()),
        (Some(22), Some("cargo-check"))
    );
    // The event carries the same, each with its hunk.
    assert_eq!(checked["diagnostics"].as_array().unwrap().len(), 6);

    let out = ws.cli(&["show", sid]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("  checks: done (cargo-check, cargo-clippy)"),
        "{text}"
    );
    let b_hunk = text.find("b/src/lib.rs:0").expect("b's hunk");
    let fresh_line = text.find("check: new warning a/src/lib.rs:22:9 unused variable: `fresh`");
    let fixed_line = text.find("check: fixed warning a/src/lib.rs:2:9 unused variable: `unused`");
    let error_line = text.find("check: new error b/src/lib.rs:2:20 mismatched types");
    assert!(
        fixed_line < fresh_line
            && fresh_line.is_some_and(|l| l < b_hunk)
            && error_line > Some(b_hunk),
        "each diagnostic under its hunk:\n{text}"
    );
}

/// A Python repository whose `app.py` has an unused `import os` (F401, line 1), an agent
/// (`agent.sh`) that removes it and compares with `== None` (E711, line 22 of its run), the
/// `ruff` preset configured, and the `PATH` that finds ruff, for the hub.
pub(crate) fn python_repo() -> (Workspace, PathBuf, String) {
    let base = format!(
        "import os\n\n\ndef f(x):\n    return x\n\n\n{}\n\ndef g(y):\n    return y\n",
        filler(8, 20, "#").trim_end()
    );
    let ws = Workspace::new(&[("app.py", base.as_bytes())]).unwrap();
    let run = base
        .replacen("import os\n", "", 1)
        .replace("    return y\n", "    return y == None\n");
    std::fs::write(ws.path("app-run.py"), &run).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!("cp {} app.py", ws.path("app-run.py").display()),
        )
        .unwrap();
    write_config(&ws, "[[check]]\npreset = \"ruff\"\n");
    let path = format!(
        "{}:{}",
        ruff_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (ws, agent, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ruff_marks_a_new_lint_warning_and_a_fixed_one_on_their_hunks() {
    let (ws, agent, path) = python_repo();
    let hub = ws.serve_env(&[], &[("PATH", &path)]).unwrap();
    let (ready, checked, _c) = checked_run(&hub, &agent).await;
    assert_eq!(checked["checks"]["state"], "done", "{checked}");
    let sid = ready["id"].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(
        diagnostics_of(&s, "ruff"),
        vec![
            row(
                "app.py:0",
                "fixed",
                "warning",
                "F401",
                "`os` imported but unused"
            ),
            row(
                "app.py:1",
                "new",
                "warning",
                "E711",
                "Comparison to `None` should be `cond is None`"
            ),
        ],
        "{s}"
    );
    let out = ws.cli(&["show", sid]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Journaled with the suggestion: a hub killed -9 has them back.
    let mut hub = hub;
    hub.kill9();
    let hub = ws.serve_env(&[], &[("PATH", &path)]).unwrap();
    let again = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(diagnostics_of(&again, "ruff"), diagnostics_of(&s, "ruff"));
    assert_eq!(again["checks"], s["checks"]);
    assert!(
        text.contains("check: new warning app.py:22:17 Comparison to `None` should be `cond is None` [ruff E711]"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checker_that_hangs_or_floods_is_stopped_and_holds_back_nothing() {
    let ws = Workspace::new(&[("a.txt", b"one\n")]).unwrap();
    let agent = ws.agent_script("agent.sh", "echo two > a.txt").unwrap();
    write_config(
        &ws,
        "[limits]\nchecks_budget_secs = 3\nmax_check_output_bytes = 65536\n\n\
         [[check]]\nname = \"flood\"\ncommand = \"yes 'a.txt:1: warning: flood'\"\nformat = \"gnu\"\n\n\
         [[check]]\nname = \"hang\"\ncommand = \"sleep 600\"\nformat = \"gnu\"\n",
    );
    let hub = ws.serve(&["--max-runs", "1"]).unwrap();
    let (ready, checked, mut c) = checked_run(&hub, &agent).await;
    assert!(ready.get("checks").is_none(), "{ready}");
    assert_eq!(checked["checks"]["state"], "incomplete", "{checked}");
    let notes: Vec<&str> = checked["checks"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(
        notes[0],
        "flood: its output on the run passed 65536 bytes: stopped, left out"
    );
    assert!(
        notes[1].starts_with("hang: timed out on the run after"),
        "{notes:?}"
    );
    assert_eq!(checked["diagnostics"], serde_json::json!([]));
    // The slot was given back: the next run (one at a time) gets it and ends.
    let again = ws.agent_script("again.sh", "echo three > a.txt").unwrap();
    let next = run_agent(&hub, &mut c, &again, "again").await.unwrap();
    assert_eq!(next["hunk_count"], 1, "{next}");
}

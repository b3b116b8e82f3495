//! Real coding agents as command agents: aider (PyPI `aider-chat`) and opencode (npm
//! `opencode-ai`), each run by the real hub through the README's recipe — the scripts in
//! `evals/agents/` — against a real model server on loopback serving a small GGUF model
//! (`scripts/install-test-deps` installs the agents, the servers and the model, cached).
//!
//! The model is tiny and foolish: these tests check the plumbing, not its wisdom. The hub ran
//! the agent in its sandbox, the agent's requests reached the model server (through a counting
//! proxy), the run ended by itself within a bound with a suggestion, no changes or a clear
//! error, the checkout was untouched until a decision, and every hunk of a suggestion can be
//! accepted into the checkout, which then holds exactly what the agent wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hunkgate_tests::model_server::{
    require, server_installed, test_cache, CountingProxy, Kind, ModelServer,
};
use hunkgate_tests::{hunkgate_bin, wait_run_finished, Hub, Workspace};
use serde_json::{json, Value};

/// The hub's own limit on one agent run; the run must end by itself before it (the agents'
/// answers are capped at 1024 tokens, a few model calls each on two shared cores).
const AGENT_TIMEOUT_SECS: u64 = 1200;

struct Agent {
    /// The script in `evals/agents/` and the word the README's recipe names it by.
    name: &'static str,
    /// Where install-test-deps puts the agent's executable.
    bin_dir: PathBuf,
    /// The server this agent talks to (opencode needs tool calls streamed).
    server: fn() -> Kind,
    /// A line the agent prints on every run, so its log shows it was the one that ran.
    banner: &'static str,
}

fn aider() -> Agent {
    Agent {
        name: "aider",
        bin_dir: test_cache().join("aider-venv/bin"),
        server: || Kind::LlamaCppPython(None),
        banner: "Aider v",
    }
}

fn opencode() -> Agent {
    Agent {
        name: "opencode",
        bin_dir: test_cache().join("opencode/node_modules/.bin"),
        server: || Kind::LlamaServer,
        banner: "> build",
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// True when the agent's executable runs.
fn agent_installed(agent: &Agent) -> bool {
    Command::new(agent.bin_dir.join(agent.name))
        .arg("--version")
        .env("HOME", std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn installed(test: &str, agent: &Agent) -> bool {
    require(
        test,
        "the model server",
        server_installed(&(agent.server)()),
    ) && require(test, agent.name, agent_installed(agent))
}

/// The `--agent` template of the `hunkgate serve --agent '…'` line of `text` that runs
/// `evals/agents/<agent>.sh`, if there is one.
fn recipe_template(text: &str, agent: &str) -> Option<String> {
    let script = format!("/evals/agents/{agent}.sh ");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("hunkgate serve --agent '") && l.contains(&script))?;
    let start = line.find("--agent '")? + "--agent '".len();
    let end = start + line[start..].find('\'')?;
    Some(line[start..end].to_string())
}

/// The recipe for `agent` in `page` (relative to the repository), which must have one.
fn page_template(page: &str, agent: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(page)).unwrap();
    recipe_template(&text, agent)
        .unwrap_or_else(|| panic!("{page} has no `hunkgate serve --agent` recipe for {agent}"))
}

/// The README's recipe for `agent`: the `--agent` template of its `hunkgate serve` line.
fn readme_template(agent: &str) -> String {
    page_template("README.md", agent)
}

/// The README's template made runnable here: the checkout's path for `/path/to/hunkgate`, and
/// the proxy's URL for the server's.
fn runnable_template(agent: &str, url: &str) -> String {
    let template = readme_template(agent);
    let words: Vec<&str> = template.split(' ').collect();
    assert_eq!(
        words.len(),
        5,
        "the recipe is `sh SCRIPT URL MODEL {{prompt}}`: {template}"
    );
    assert_eq!(
        (words[0], words[3], words[4]),
        ("sh", "local", "{prompt}"),
        "{template}"
    );
    assert!(words[2].starts_with("http://127.0.0.1:"), "{template}");
    let script = words[1].replace("/path/to/hunkgate", repo_root().to_str().unwrap());
    assert!(Path::new(&script).is_file(), "{script} is missing");
    format!("sh {script} {url} local {{prompt}}")
}

/// How the hub runs the agent: its recipe's command template (`--agent`), or over the Agent
/// Client Protocol (`--acp`, the recipe in docs/agents.md).
#[derive(Clone, Copy, PartialEq)]
enum Via {
    Command,
    Acp,
}

/// The `--acp` command of docs/agents.md's `opencode acp` recipe, made runnable here: the
/// checkout's path for `/path/to/hunkgate`, the proxy's URL for the server's.
fn runnable_acp_command(url: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("docs/agents.md")).unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.trim_start().starts_with("hunkgate serve --acp 'sh ")
                && l.contains("/opencode-acp.sh ")
        })
        .expect("docs/agents.md has a `hunkgate serve --acp` recipe for opencode-acp.sh");
    let start = line.find("--acp '").unwrap() + "--acp '".len();
    let command = &line[start..start + line[start..].find('\'').unwrap()];
    let words: Vec<&str> = command.split(' ').collect();
    assert_eq!(
        words.len(),
        4,
        "the recipe is `sh SCRIPT URL MODEL`: {command}"
    );
    assert_eq!((words[0], words[3]), ("sh", "local"), "{command}");
    let script = words[1].replace("/path/to/hunkgate", repo_root().to_str().unwrap());
    assert!(Path::new(&script).is_file(), "{script} is missing");
    format!("sh {script} {url} local")
}

/// One whole run of `agent` through a hub against a real model server, reviewed.
async fn whole_run(test: &str, agent: Agent) {
    whole_run_via(test, agent, Via::Command).await
}

async fn whole_run_via(test: &str, agent: Agent, via: Via) {
    if !installed(test, &agent) {
        return;
    }
    let server = ModelServer::start((agent.server)());
    let proxy = CountingProxy::start(server.port);
    // A task this model (greedy, through aider's prompts) answers with an edit, however wrong.
    let original = "#!/bin/sh\n# math helpers\n\nadd() {\n    echo $(($1 + $2))\n}\n";
    let ws = Workspace::new(&[
        ("lib.sh", original.as_bytes()),
        ("README.md", b"# math\n".as_slice()),
    ])
    .unwrap();
    let (flag, template, banner) = match via {
        Via::Command => (
            "--agent",
            runnable_template(agent.name, &proxy.base_url()),
            agent.banner,
        ),
        // The hub's own note of the agent's `initialize` answer.
        Via::Acp => (
            "--acp",
            runnable_acp_command(&proxy.base_url()),
            "acp initialized: OpenCode",
        ),
    };
    // The agent finds its executable, and opencode `hunkgate mcp`, on PATH.
    let hub_dir = hunkgate_bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        [agent.bin_dir.clone(), hub_dir]
            .into_iter()
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let timeout = AGENT_TIMEOUT_SECS.to_string();
    let hub = Hub::start_in(
        &ws.repo(),
        &ws.home(),
        &ws.state(),
        &ws.path("hub.log"),
        &[
            "--isolation",
            "none",
            flag,
            &template,
            "--agent-timeout",
            &timeout,
        ],
        &[("PATH", path.as_os_str())],
    )
    .unwrap();
    let r = hub
        .curl()
        .post(
            "/runs",
            &json!({"prompt": "Add a mul function to lib.sh, next to add, that prints the product of its two arguments."}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let run_id = r.body["run_id"].as_str().unwrap().to_string();
    let run = wait_run_finished(&hub, &run_id, Duration::from_secs(AGENT_TIMEOUT_SECS + 60))
        .await
        .unwrap_or_else(|e| panic!("{e}\nmodel server:\n{}", server.log_text()));
    let agent_log =
        std::fs::read_to_string(ws.state().join(format!("runs/{run_id}.log"))).unwrap_or_default();
    let ctx = format!(
        "{test}: {run:#}\nrequests: {:?}\nagent log:\n{agent_log}\nhub log:\n{}",
        proxy.request_lines(),
        hub.log_text()
    );
    eprintln!("{test}: the run ended {}", run["status"]);

    // The hub ran this agent, and it ran to its end: not killed by the hub's timeout.
    assert!(agent_log.contains(banner), "{ctx}");
    let error = run["error"].as_str().unwrap_or("").to_lowercase();
    assert!(
        !error.contains("timed out"),
        "the run must end by itself: {ctx}"
    );
    // Its requests reached the model server.
    assert!(proxy.chat_requests() >= 1, "{ctx}");
    // The user's checkout is untouched until a review decision.
    assert_eq!(ws.read_string("lib.sh").unwrap(), original);

    match run["status"].as_str() {
        Some("ready") => accept_everything(&hub, &ws, &run, &ctx),
        // The model changed nothing: a clear outcome, and nothing to review.
        Some("no_changes") => assert!(
            run["suggestion_ids"]
                .as_array()
                .is_none_or(|a| a.is_empty()),
            "{ctx}"
        ),
        // A failed agent is reported with its reason (exit status and stderr tail).
        Some("failed") => assert!(!error.is_empty(), "a failure must say why: {ctx}"),
        _ => panic!("unexpected end of the run: {ctx}"),
    }
    // A turn that ended of itself leaves the agent for the session's next run.
    if via == Via::Acp && matches!(run["status"].as_str(), Some("ready" | "no_changes")) {
        second_acp_turn(&hub, &ws, &run, &ctx).await;
    }
}

/// The session's second run reaches the same `opencode acp` process and ACP session: no new
/// `initialize`, only the next `session/prompt` (with the reviewer's decisions on the first
/// suggestion), in the session the journal recorded for the first run.
async fn second_acp_turn(hub: &Hub, ws: &Workspace, run: &Value, ctx: &str) {
    let first = run["acp_session_id"].as_str().unwrap_or("");
    assert!(!first.is_empty(), "{ctx}");
    let r = hub
        .curl()
        .post(
            "/runs",
            &json!({"prompt": "Now add a sub function to lib.sh as well, next to add.", "session_id": run["session_id"]}),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["run_id"].as_str().unwrap().to_string();
    let run2 = wait_run_finished(hub, &id, Duration::from_secs(AGENT_TIMEOUT_SECS + 60))
        .await
        .unwrap();
    let log =
        std::fs::read_to_string(ws.state().join(format!("runs/{id}.log"))).unwrap_or_default();
    let ctx = format!("{ctx}\nsecond run: {run2:#}\nits log:\n{log}");
    eprintln!("the second run ended {}", run2["status"]);
    assert!(
        log.contains(&format!("acp continuing ACP session {first}")),
        "{ctx}"
    );
    assert!(!log.contains("acp initialized"), "{ctx}");
    assert_eq!(run2["acp_session_id"], first, "{ctx}");
    let error = run2["error"].as_str().unwrap_or("").to_lowercase();
    assert!(!error.contains("timed out"), "{ctx}");
}

/// Accept every hunk of the run's suggestion; the checkout then holds exactly what the agent
/// left in its sandbox, file by file: what the run commit in the checkpoint store holds (the
/// slot itself is put back to its base once the run is over).
fn accept_everything(hub: &Hub, ws: &Workspace, run: &Value, ctx: &str) {
    let id = run["suggestion_ids"][0].as_str().unwrap();
    let s = hub.curl().get(&format!("/suggestions/{id}")).unwrap();
    assert_eq!(s.status, 200, "{}", s.body);
    let hunks = s.body["hunks"].as_array().unwrap().clone();
    assert!(!hunks.is_empty(), "a ready suggestion has hunks: {ctx}");
    for h in &hunks {
        let r = hub
            .curl()
            .post(
                "/feedback",
                &json!({"suggestion_id": id, "hunk_id": h["id"], "action": "accept"}),
            )
            .unwrap();
        assert_eq!(r.status, 200, "accepting {}: {}\n{ctx}", h["id"], r.body);
        assert_eq!(r.body["hunk"]["state"], "accepted", "{}", r.body);
    }
    let commit = s.body["run_commit"].as_str().expect("run_commit");
    let mut files: Vec<&str> = hunks.iter().filter_map(|h| h["file"].as_str()).collect();
    files.dedup();
    for file in files {
        let agent_wrote = ws
            .checkpoint_git(&["show", &format!("{commit}:{file}")])
            .ok();
        let checkout = std::fs::read(ws.repo().join(file)).ok();
        assert_eq!(checkout, agent_wrote, "{file} after accepting: {ctx}");
    }
}

#[tokio::test]
async fn aider_runs_through_the_hub_against_a_local_model() {
    whole_run("aider_runs_through_the_hub_against_a_local_model", aider()).await;
}

#[tokio::test]
async fn opencode_runs_through_the_hub_against_a_local_model() {
    whole_run(
        "opencode_runs_through_the_hub_against_a_local_model",
        opencode(),
    )
    .await;
}

/// The recipe reader finds a recipe's template, only for the agent it names.
#[test]
fn a_recipe_is_read_from_its_serve_line() {
    let text = "# aider\nhunkgate serve --agent 'sh /x/evals/agents/aider.sh http://h/v1 local {prompt}'\n";
    assert_eq!(
        recipe_template(text, "aider").as_deref(),
        Some("sh /x/evals/agents/aider.sh http://h/v1 local {prompt}")
    );
    assert_eq!(recipe_template(text, "opencode"), None);
    assert_eq!(recipe_template("hunkgate serve --repo x", "aider"), None);
}

/// The README's recipes name the tested scripts, and each script still runs the agent with the
/// flags that keep it off the network (a positive control for `whole_run`'s template parsing);
/// docs/agents.md shows the same recipes.
#[test]
fn the_readme_recipes_are_the_tested_scripts() {
    for (agent, must) in [
        (
            "aider",
            &[
                "--no-check-update",
                "--no-analytics",
                "--no-auto-commits",
                "LITELLM_LOCAL_MODEL_COST_MAP=True",
            ][..],
        ),
        (
            "opencode",
            &[
                "OPENCODE_DISABLE_AUTOUPDATE=1",
                "OPENCODE_DISABLE_MODELS_FETCH=1",
                "\"autoupdate\": false",
                "[\"hunkgate\", \"mcp\"]",
            ][..],
        ),
    ] {
        assert_eq!(
            page_template("docs/agents.md", agent),
            readme_template(agent),
            "docs/agents.md and the README show different {agent} recipes"
        );
        let t = runnable_template(agent, "http://127.0.0.1:9/v1");
        assert!(t.ends_with(" http://127.0.0.1:9/v1 local {prompt}"), "{t}");
        let script =
            std::fs::read_to_string(repo_root().join(format!("evals/agents/{agent}.sh"))).unwrap();
        for m in must {
            assert!(script.contains(m), "{agent}.sh lost {m}");
        }
    }
}

/// `opencode acp` over the Agent Client Protocol, through docs/agents.md's recipe: the hub
/// speaks ACP with it in the sandbox, and the turn's end is a suggestion reviewed as any other.
#[tokio::test]
async fn opencode_acp_runs_through_the_hub_against_a_local_model() {
    whole_run_via(
        "opencode_acp_runs_through_the_hub_against_a_local_model",
        opencode(),
        Via::Acp,
    )
    .await;
}

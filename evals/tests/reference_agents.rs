//! The whole task suite against the real hub with each reference agent (`evals/agents/`), whose
//! scores are known in advance. Needs the hub binary: `cargo build -p hunkgate --bin hunkgate`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

mod common;

use common::{agent_cmd, hunkgate_bin, manifest_dir};
use hunkgate_evals::runner::{self, Agent, ResultLine, RunnerConfig};
use hunkgate_evals::{metrics, scripted, task};

fn tasks() -> Vec<task::Task> {
    task::load_tasks(&manifest_dir().join("tasks")).expect("the task suite loads")
}

fn by_agent(lines: &[ResultLine]) -> BTreeMap<String, Vec<&ResultLine>> {
    let mut m: BTreeMap<String, Vec<&ResultLine>> = BTreeMap::new();
    for l in lines {
        m.entry(runner::short_agent(&l.agent)).or_default().push(l);
    }
    m
}

fn successes(lines: &[&ResultLine]) -> BTreeSet<String> {
    lines
        .iter()
        .filter(|l| l.success)
        .map(|l| l.task.clone())
        .collect()
}

const CLARIFICATION_TASKS: [&str; 3] = [
    "clarify-answer-greeting",
    "clarify-answer-port",
    "clarify-skip-default",
];

/// `partial` writes only the first solution file (sorted) and deletes nothing: it succeeds
/// exactly where that is the whole solution, or where the rest of the solution is what the
/// reviewer rejects anyway (accept-matching-*, reject-generated).
const PARTIAL_SUCCEEDS: [&str; 23] = [
    "accept-matching-contains",
    "accept-matching-src",
    "add-function",
    "binary-create",
    "binary-replace",
    "command-check",
    "create-doc",
    "create-nested",
    "crlf-create",
    "crlf-edit",
    "fix-typo",
    "large-file-create",
    "large-file-edit",
    "large-file-multi-hunk",
    "modify-constant",
    "modify-second-hunk",
    "no-final-newline-append",
    "no-final-newline-edit",
    "non-utf8-edit",
    "reject-generated",
    "session-feedback",
    "utf8-multibyte",
    "whitespace-trailing",
];

#[test]
fn the_suite_covers_every_required_tag_and_policy() {
    let tasks = tasks();
    assert!(tasks.len() >= 30, "{} tasks", tasks.len());
    let tags: BTreeSet<&str> = tasks
        .iter()
        .flat_map(|t| t.spec.tags.iter().map(String::as_str))
        .collect();
    for want in [
        "multi-file",
        "create",
        "delete",
        "rename",
        "CRLF",
        "no-final-newline",
        "binary",
        "large-file",
        "non-UTF-8",
        "conflict",
        "clarification",
        "session-feedback",
    ] {
        assert!(tags.contains(want), "no task tagged {want}");
    }
    let policies: BTreeSet<&str> = tasks
        .iter()
        .flat_map(|t| t.runs().into_iter().map(|(_, r)| r.name()))
        .collect();
    assert_eq!(
        policies,
        BTreeSet::from([
            "accept_all",
            "accept_matching",
            "modify",
            "reject",
            "conflict",
            "clarify"
        ])
    );
    // Both clarify variants: an answer and a skip.
    let skips = tasks
        .iter()
        .filter(|t| matches!(t.spec.review, task::Review::Clarify { skip: true, .. }))
        .count();
    assert!(skips >= 1 && skips < CLARIFICATION_TASKS.len());
}

/// Every command reference agent over every task, through the CLI (`hunkgate-evals run`), then
/// once more to check that a second invocation resumes (runs nothing).
#[test]
fn reference_agents_score_exactly_as_designed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.jsonl");
    let names = [
        "perfect",
        "partial",
        "wrong",
        "conflicting",
        "slow",
        "crashing",
    ];
    let run = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hunkgate-evals"));
        cmd.arg("run")
            .arg("--tasks")
            .arg(manifest_dir().join("tasks"))
            .arg("--hub")
            .arg(hunkgate_bin())
            .args(["--jobs", "4", "--quiet", "--out"])
            .arg(&out);
        for n in names {
            cmd.arg("--agent").arg(agent_cmd(n));
        }
        let o = cmd.output().unwrap();
        assert!(
            o.status.success(),
            "hunkgate-evals run failed: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    let first = run();
    let lines = runner::read_results(&out).unwrap();
    let n_tasks = tasks().len();
    assert_eq!(lines.len(), n_tasks * names.len());
    let all: BTreeSet<String> = tasks().into_iter().map(|t| t.name).collect();
    let clar: BTreeSet<String> = CLARIFICATION_TASKS.iter().map(|s| s.to_string()).collect();
    let groups = by_agent(&lines);
    for l in &lines {
        assert_ne!(l.status, "runner_error", "{l:?}");
    }

    // perfect: everything but the clarification tasks (a command agent cannot ask).
    let perfect = &groups["perfect.sh"];
    let want: BTreeSet<String> = all.difference(&clar).cloned().collect();
    assert_eq!(successes(perfect), want);
    assert_eq!(want.len(), 32);
    for l in perfect {
        assert_eq!(l.status, "ready", "{l:?}");
        if clar.contains(&l.task) {
            assert!(
                l.failures
                    .iter()
                    .any(|f| f.contains("expects a clarification question")),
                "{l:?}"
            );
        } else {
            assert!(l.failures.is_empty(), "{l:?}");
        }
    }
    let pm = metrics::compute(&perfect.iter().map(|l| (*l).clone()).collect::<Vec<_>>());
    let pm = &pm[0];
    // Two conflict tasks (one forced conflict each), two modify tasks (one modified hunk each),
    // and the three rejects of reject-changelog, reject-generated, session-feedback run 1 plus
    // the version-less hunk of accept-matching-contains and tests/ of accept-matching-src.
    assert_eq!(
        (
            perfect.iter().map(|l| l.hunks_conflicts).sum::<usize>(),
            perfect.iter().map(|l| l.hunks_modified).sum::<usize>(),
            perfect.iter().map(|l| l.hunks_rejected).sum::<usize>(),
        ),
        (2, 2, 5)
    );
    assert_eq!(pm.tasks, n_tasks);
    assert_eq!(pm.apply_clean_rate, Some(33.0 / 35.0));
    assert_eq!(
        pm.tool_calls_per_success, None,
        "command agents report no tool calls"
    );

    // slow: perfect's score, a second slower.
    let slow = &groups["slow.sh"];
    assert_eq!(successes(slow), want);
    for l in slow {
        assert!(l.wall_ms >= 1000, "{l:?}");
    }

    // partial: exactly these 23 of 35.
    let partial = &groups["partial.sh"];
    let want_partial: BTreeSet<String> = PARTIAL_SUCCEEDS.iter().map(|s| s.to_string()).collect();
    assert_eq!(successes(partial), want_partial);

    // wrong: nothing, though it touches the right files and its hunks apply.
    let wrong = &groups["wrong.sh"];
    assert_eq!(successes(wrong), BTreeSet::new());
    assert!(wrong.iter().all(|l| l.status == "ready"));

    // conflicting: every run is ready, and nothing it proposed could be applied.
    let conflicting = &groups["conflicting.sh"];
    assert_eq!(successes(conflicting), BTreeSet::new());
    for l in conflicting {
        assert_eq!(l.status, "ready", "{l:?}");
        assert_eq!(l.hunks_accepted + l.hunks_modified, 0, "{l:?}");
        assert!(l.hunks_conflicts >= 1, "{l:?}");
        assert_eq!(l.apply_clean, Some(false), "{l:?}");
    }

    // crashing: every run fails with the agent's stderr, nothing is decided.
    let crashing = &groups["crashing.sh"];
    assert_eq!(successes(crashing), BTreeSet::new());
    for l in crashing {
        assert_eq!(l.status, "failed", "{l:?}");
        assert_eq!(l.hunks_decided, 0, "{l:?}");
        assert!(
            l.error
                .as_deref()
                .is_some_and(|e| e.contains("crashing on purpose")),
            "{l:?}"
        );
    }

    // The printed table has a row per agent with its success rate.
    let table = String::from_utf8_lossy(&first.stdout);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row in:\n{table}"))
            .split_whitespace()
            .nth(3)
            .unwrap()
            .to_string()
    };
    assert_eq!(row("perfect.sh "), "91.4", "{table}");
    assert_eq!(row("partial.sh "), "65.7", "{table}");
    assert_eq!(row("wrong.sh "), "0.0", "{table}");

    // Resume: a second run finds every pair done and appends nothing.
    let before = std::fs::read_to_string(&out).unwrap();
    let second = run();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        table,
        "the same metrics from the resumed file"
    );
}

/// The clarification tasks with the built-in agent driven by the scripted model (`asks`), each
/// hub started with `hub_config`.
fn run_asks(hub_config: Option<std::path::PathBuf>) -> Vec<ResultLine> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let all = tasks();
    let clar: Vec<task::Task> = all
        .iter()
        .filter(|t| t.spec.tags.iter().any(|g| g == "clarification"))
        .cloned()
        .collect();
    assert_eq!(clar.len(), CLARIFICATION_TASKS.len());
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let (addr, server) = scripted::bind(all.clone(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let server = tokio::spawn(server);
        let cfg = RunnerConfig {
            hub: hunkgate_bin(),
            provider_url: Some(format!("http://{addr}/v1")),
            jobs: 3,
            out: dir.path().join("asks.jsonl"),
            progress: false,
            run_timeout: None,
            hub_config,
            keep: None,
        };
        let lines = runner::run_all(
            &cfg,
            &clar,
            &[Agent::Builtin {
                model: "asks".into(),
            }],
        )
        .await
        .unwrap();
        server.abort();
        lines
    })
}

/// `asks`: the built-in agent driven by the scripted model asks, gets the policy's answer (or a
/// skip), and writes it; the command agent `perfect` cannot ask and fails these tasks.
#[test]
fn asks_answers_every_clarification_task() {
    let lines = run_asks(None);
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert!(l.success, "{l:?}");
        assert_eq!(
            (l.agent.as_str(), l.model.as_deref()),
            ("builtin:asks", Some("asks"))
        );
        assert!(l.clarification_asked, "{l:?}");
        assert_eq!(l.stop_reason.as_deref(), Some("finished"));
        // clarify_user + one write_file (finish is free); three model turns.
        assert_eq!(l.tool_calls, Some(2), "{l:?}");
        assert_eq!(l.prompt_tokens, Some(3 * scripted::PROMPT_TOKENS));
        assert_eq!(l.completion_tokens, Some(3 * scripted::COMPLETION_TOKENS));
        assert_eq!((l.hunks_decided, l.hunks_accepted), (1, 1));
    }
    let m = &metrics::compute(&lines)[0];
    assert_eq!(m.success_rate, 1.0);
    assert_eq!(m.clarification_rate, 1.0);
    assert_eq!(m.tool_calls_per_success, Some(2.0));
    assert_eq!(m.stop_reasons.get("finished"), Some(&3));
    assert!(m.model_ms_p50.is_some());
}

/// `--hub-config`: every hub the runner starts reads that file. With one tool call allowed,
/// the `asks` script (a question, then a write; `asks_answers_every_clarification_task` is
/// the same run without the file) ends at the budget, its write refused.
#[test]
fn the_hub_config_reaches_every_hub() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("hub.toml");
    std::fs::write(&cfg, "[limits]\nmax_tool_calls = 1\n").unwrap();
    let lines = run_asks(Some(cfg));
    assert_eq!(lines.len(), CLARIFICATION_TASKS.len());
    for l in &lines {
        assert_eq!(l.stop_reason.as_deref(), Some("budget_exhausted"), "{l:?}");
        assert_eq!(l.tool_calls, Some(1), "{l:?}");
        assert!(!l.success, "{l:?}");
    }
}

/// A `--hub-config` that is missing or not TOML stops the command before any hub starts.
#[test]
fn a_bad_hub_config_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[limits\nmax_tool_calls = 1\n").unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[limits]\nmax_tool_calls = 1\n").unwrap();
    let run = |cfg: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_hunkgate-evals"))
            .arg("run")
            .arg("--tasks")
            .arg(manifest_dir().join("tasks"))
            .args(["--task", "no-such-task", "--agent", "true", "--quiet"])
            .arg("--hub-config")
            .arg(cfg)
            .arg("--out")
            .arg(dir.path().join("out.jsonl"))
            .output()
            .unwrap()
    };
    for (cfg, why) in [
        (bad.clone(), "not TOML"),
        (dir.path().join("missing.toml"), "--hub-config"),
    ] {
        let out = run(&cfg);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(
            err.contains(&*cfg.to_string_lossy()) || err.contains("missing.toml"),
            "{err}"
        );
    }
    // Positive control: a good file gets past the check, to the next error (the unknown task).
    let out = run(&good);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no-such-task"), "{err}");
    assert!(!err.contains("--hub-config"), "{err}");
}

/// With a checker in `--hub-config`, the runner waits for each suggestion's checks and counts
/// its new diagnostics: here a "checker" that flags every non-empty line, so each line the
/// agent wrote is new. Without one (`asks_answers_every_clarification_task`'s run) nothing is
/// counted.
#[test]
fn new_diagnostics_are_counted_when_the_hub_checks() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("hub.toml");
    std::fs::write(
        &cfg,
        "[[check]]\nname = \"lines\"\nformat = \"gnu\"\n\
         command = \"grep -rnI -v '^$' --exclude-dir=.git . || true\"\n",
    )
    .unwrap();
    let lines = run_asks(Some(cfg));
    assert_eq!(lines.len(), CLARIFICATION_TASKS.len());
    for l in &lines {
        assert!(l.success, "{l:?}");
        assert_eq!(l.checked_suggestions, 1, "{l:?}");
        assert!(l.new_diagnostics >= 1, "{l:?}");
    }
    let m = &metrics::compute(&lines)[0];
    assert_eq!(m.checked_suggestions, 3);
    let total: usize = lines.iter().map(|l| l.new_diagnostics).sum();
    assert_eq!(m.new_diagnostics_per_suggestion, Some(total as f64 / 3.0));
    assert!(metrics::render(std::slice::from_ref(m)).contains("checks:"));
    let unchecked = run_asks(None);
    assert!(unchecked
        .iter()
        .all(|l| l.checked_suggestions == 0 && l.new_diagnostics == 0));
}

/// `run --acp` scores an agent spoken to over the Agent Client Protocol like any other: here
/// the suite's scripted ACP agent (tests/acp_agent.py, on the official Python SDK in the venv
/// `scripts/install-test-deps` makes), whose turn writes files of its own, so the task fails
/// its checks but the run is reviewed, and the row names the agent as the hub records it.
#[test]
fn an_acp_agent_is_scored_like_the_others() {
    let exe = std::env::current_exe().unwrap();
    let py = exe.ancestors().nth(3).unwrap().join("py-acp/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/install-test-deps",
        py.display()
    );
    let script = manifest_dir().join("../tests/acp_agent.py");
    let acp = format!("{} {} edit", py.display(), script.display());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.jsonl");
    let o = Command::new(env!("CARGO_BIN_EXE_hunkgate-evals"))
        .arg("run")
        .arg("--tasks")
        .arg(manifest_dir().join("tasks"))
        .arg("--hub")
        .arg(hunkgate_bin())
        .args(["--task", "add-function", "--quiet", "--acp", &acp, "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let lines = runner::read_results(&out).unwrap();
    assert_eq!(lines.len(), 1, "{o:?}");
    let l = &lines[0];
    assert_eq!(l.agent, format!("acp:{acp}"));
    // The agent's name and version from its `initialize`.
    assert_eq!(l.model.as_deref(), Some("scripted-acp-agent 0.1"), "{l:?}");
    assert_eq!(l.status, "ready", "{l:?}");
    assert_eq!(l.stop_reason.as_deref(), Some("end_turn"), "{l:?}");
    assert!(l.hunks_decided > 0, "{l:?}");
    assert!(!l.success, "the scripted agent does not do the task: {l:?}");
}

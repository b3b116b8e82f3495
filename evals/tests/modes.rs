//! `hunkgate-evals run --agent-mode`: the built-in agent in `local`, `remote` and `hybrid_auto`
//! on the same tasks, side by side (seed 000 §16's comparison matrix, issue #60.3).
//!
//! Both providers are the scripted model (real HTTP, real hubs): `local` is told to have a
//! 64-token context, so under `hybrid_auto` every run moves to `remote` at once on
//! `context_overflow` — deterministic — while `local` alone still runs there (no mode but
//! `hybrid_auto` moves a run).

mod common;

use common::{hunkgate_bin, manifest_dir};
use hunkgate_evals::runner::{self, Agent, RunnerConfig};
use hunkgate_evals::{metrics, report, scripted, task};

const TASKS: [&str; 2] = ["clarify-answer-greeting", "clarify-answer-port"];

#[test]
fn the_report_shows_local_remote_and_hybrid_side_by_side() {
    let all = task::load_tasks(&manifest_dir().join("tasks")).expect("the task suite loads");
    let tasks: Vec<task::Task> = all
        .iter()
        .filter(|t| TASKS.contains(&t.name.as_str()))
        .cloned()
        .collect();
    assert_eq!(tasks.len(), TASKS.len());
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lines = rt.block_on(async {
        let (addr, server) = scripted::bind(all.clone(), "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let server = tokio::spawn(server);
        let url = format!("http://{addr}/v1");
        let hub_config = dir.path().join("hub.toml");
        std::fs::write(
            &hub_config,
            format!(
                "[providers.local]\nbase_url = \"{url}\"\nmodel = \"asks\"\ndiscover_models = false\n\
                 [[providers.local.models]]\nname = \"asks\"\ncontext = 64\ncost = \"free\"\n\
                 [providers.remote]\nbase_url = \"{url}\"\nmodel = \"asks\"\ndiscover_models = false\n"
            ),
        )
        .unwrap();
        let cfg = RunnerConfig {
            hub: hunkgate_bin(),
            provider_url: None,
            jobs: 2,
            out: dir.path().join("modes.jsonl"),
            progress: false,
            run_timeout: None,
            hub_config: Some(hub_config),
            keep: None,
        };
        let agents: Vec<Agent> = ["local", "remote", "hybrid_auto"]
            .into_iter()
            .map(|m| Agent::Routed { mode: m.into() })
            .collect();
        let lines = runner::run_all(&cfg, &tasks, &agents).await.unwrap();
        server.abort();
        lines
    });
    assert_eq!(lines.len(), 6, "{lines:#?}");
    for l in &lines {
        assert!(l.success, "{l:?}");
        let mode = l.agent.strip_prefix(runner::ROUTED_PREFIX).unwrap();
        assert_eq!(l.agent_mode.as_deref(), Some(mode), "{l:?}");
        let want: &[&str] = if mode == "hybrid_auto" {
            &["context_overflow"]
        } else {
            &[]
        };
        assert_eq!(l.switches, want, "{l:?}");
    }

    let rows = metrics::compute(&lines);
    let modes: Vec<(Option<&str>, usize, usize, f64)> = rows
        .iter()
        .map(|m| (m.agent_mode.as_deref(), m.tasks, m.switched, m.success_rate))
        .collect();
    assert_eq!(
        modes,
        [
            (Some("hybrid_auto"), 2, 2, 1.0),
            (Some("local"), 2, 0, 1.0),
            (Some("remote"), 2, 0, 1.0),
        ]
    );
    let text = metrics::render(&rows);
    assert!(text.contains("modes:  agent_mode"), "{text}");
    let hybrid = text
        .lines()
        .find(|l| l.trim_start().starts_with("hybrid_auto"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(hybrid.contains("context_overflow 2"), "{hybrid}");
    let md = report::markdown("modes", &lines, &[]);
    assert!(md.contains("## Local, remote and hybrid"), "{md}");
    assert!(
        md.contains("| hybrid_auto | 2 | 100.0 % | 100.0 % |")
            && md.contains("| 2 | context_overflow 2 |"),
        "{md}"
    );
    assert!(md.contains("| local | 2 | 100.0 % |"), "{md}");
}

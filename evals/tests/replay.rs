//! Decision replay end to end: a real hub makes a real feedback log (accepts, a modify, a
//! reject), `hunkgate-evals replay` turns it into tasks, and reference agents whose replay scores
//! are known in advance are scored on them. Needs the hub binary:
//! `cargo build -p hunkgate --bin hunkgate`.

mod common;

use std::path::Path;
use std::process::Command;

use common::{agent_cmd, hunkgate_bin};
use hunkgate_evals::runner::{self, Agent, RunnerConfig};
use hunkgate_evals::{metrics, replay, task};

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A two-run session task. Run 1 edits a.txt (two hunks, the second is modified by the
/// reviewer) and b.txt; run 2 edits c.txt and creates d.txt, which the reviewer rejects.
fn session_task(root: &Path) -> task::Task {
    let t = root.join("session");
    let a: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    write(&t.join("repo/a.txt"), &a);
    write(&t.join("repo/b.txt"), "b one\nb two\n");
    write(&t.join("repo/c.txt"), "c one\nc two\nc three\n");
    write(
        &t.join("solution-run1/a.txt"),
        &a.replace("line 2\n", "TWO\n")
            .replace("line 18\n", "EIGHTEEN\n"),
    );
    write(&t.join("solution-run1/b.txt"), "b one\nB TWO\n");
    write(&t.join("solution-run2/c.txt"), "c one\nC TWO\nc three\n");
    write(&t.join("solution-run2/d.txt"), "d one\nd two\n");
    write(
        &t.join("task.toml"),
        r#"prompt = "Shout lines 2 and 18 of a.txt and the second line of b.txt."
tags = ["session-feedback"]
[review]
policy = "modify"
file = "a.txt"
index = 1
from = "EIGHTEEN"
to = "eighteen-user"
[[followup]]
prompt = "Shout the second line of c.txt, and write d.txt."
[followup.review]
policy = "reject"
files = ["d.txt"]
comment = "no new files"
[check]
files = { "c.txt" = "c one\nC TWO\nc three\n" }
absent = ["d.txt"]
"#,
    );
    task::Task::load(&t).unwrap()
}

#[test]
fn replaying_a_real_feedback_log_scores_agents_by_what_the_user_kept() {
    let dir = tempfile::tempdir().unwrap();
    let task = session_task(dir.path());
    let keep = dir.path().join("keep");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cfg = RunnerConfig {
        hub: hunkgate_bin(),
        provider_url: None,
        jobs: 1,
        out: dir.path().join("original.jsonl"),
        progress: false,
        run_timeout: None,
        hub_config: None,
        keep: Some(keep.clone()),
    };
    let lines = rt
        .block_on(runner::run_all(
            &cfg,
            std::slice::from_ref(&task),
            &[Agent::Command(agent_cmd("perfect"))],
        ))
        .unwrap();
    let l = &lines[0];
    assert!(l.success, "{l:?}");
    assert_eq!(
        (l.hunks_accepted, l.hunks_modified, l.hunks_rejected, l.runs),
        (3, 1, 1, 2),
        "{l:?}"
    );
    let state = keep.join("session--perfect.sh/state");
    let log = state.join("feedback.jsonl");
    assert!(log.is_file(), "the kept state has the hub's feedback log");

    // Replay the log with three reference agents through the CLI.
    let tasks_out = dir.path().join("replay-tasks");
    let out = dir.path().join("replay.jsonl");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hunkgate-evals"));
    cmd.arg("replay")
        .arg(&log)
        .arg("--tasks-out")
        .arg(&tasks_out)
        .arg("--hub")
        .arg(hunkgate_bin())
        .arg("--out")
        .arg(&out)
        .args(["--jobs", "3", "--quiet"]);
    for a in ["perfect", "partial", "replay-rejected"] {
        cmd.arg("--agent").arg(agent_cmd(a));
    }
    // (--repo defaults to the checkpoints.git beside the log.)
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // One task per run, with what the user kept (the modified hunk in the user's version) and
    // what they rejected.
    let tasks = task::load_tasks(&tasks_out).unwrap();
    assert_eq!(tasks.len(), 2);
    let ex: Vec<&replay::ReplayExpect> = tasks.iter().map(|t| t.replay.as_ref().unwrap()).collect();
    let mut by_prompt: Vec<(&str, &replay::ReplayExpect)> = tasks
        .iter()
        .map(|t| (t.spec.prompt.as_str(), t.replay.as_ref().unwrap()))
        .collect();
    by_prompt.sort_by_key(|(_, e)| e.ts.clone());
    let (p1, e1) = by_prompt[0];
    let (p2, e2) = by_prompt[1];
    assert!(p1.starts_with("Shout lines 2 and 18"), "{p1}");
    assert!(p2.starts_with("Shout the second line of c.txt"), "{p2}");
    assert_eq!(
        (e1.hunks_accepted, e1.hunks_modified, e1.hunks_rejected),
        (2, 1, 0)
    );
    assert_eq!(
        (e2.hunks_accepted, e2.hunks_modified, e2.hunks_rejected),
        (1, 0, 1)
    );
    let changes = |e: &replay::ReplayExpect| -> Vec<String> {
        e.kept
            .iter()
            .map(|u| format!("{} {}", u.file, u.change.trim_end()))
            .collect()
    };
    assert_eq!(
        changes(e1),
        [
            "a.txt -line 2",
            "a.txt +TWO",
            "a.txt -line 18",
            "a.txt +eighteen-user",
            "b.txt -b two",
            "b.txt +B TWO"
        ]
    );
    assert_eq!(e2.rejected.len(), 2, "d.txt's two lines");
    assert_eq!(ex.iter().map(|e| e.kept.len()).sum::<usize>(), 8);
    // The task's repo/ is run 2's base: run 1's kept changes are in it, in the user's version.
    let t2 = tasks.iter().find(|t| t.spec.prompt == p2).unwrap();
    let a2 = std::fs::read_to_string(t2.dir.join("repo/a.txt")).unwrap();
    assert!(a2.contains("TWO\n") && a2.contains("eighteen-user\n") && !a2.contains("EIGHTEEN"));
    assert!(!t2.dir.join("repo/d.txt").exists());

    // The scores, exactly.
    let results = runner::latest(runner::read_results(&out).unwrap());
    assert_eq!(results.len(), 6);
    let rows = metrics::compute(&results);
    let row = |name: &str| {
        rows.iter()
            .find(|m| m.agent.ends_with(name))
            .unwrap_or_else(|| panic!("no {name} in {rows:?}"))
    };
    let score = |m: &metrics::Metrics| {
        (
            m.replay_tasks,
            m.kept_recall,
            m.rejected_avoided,
            m.succeeded,
        )
    };
    // Reproduces what was kept: all of it, none of the rejected lines; both checks pass.
    assert_eq!(score(row("perfect.sh")), (2, Some(1.0), Some(1.0), 2));
    assert_eq!(row("perfect.sh").replay_precision, Some(1.0));
    // Only the first kept file of each run: a.txt's 4 of run 1's 6 lines, and c.txt's 2.
    assert_eq!(score(row("partial.sh")), (2, Some(0.75), Some(1.0), 1));
    // Reproduces what was rejected: nothing kept, every rejected line proposed.
    assert_eq!(
        score(row("replay-rejected.sh")),
        (2, Some(0.0), Some(0.0), 0)
    );
    assert_eq!(row("replay-rejected.sh").replay_precision, Some(0.0));
    assert!(stdout.contains("replay:"), "{stdout}");

    // The base commits must come from somewhere: a repository without them is a clear error.
    let empty = dir.path().join("empty.git");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&empty)
        .status()
        .unwrap()
        .success());
    let o = Command::new(env!("CARGO_BIN_EXE_hunkgate-evals"))
        .arg("replay")
        .arg(&log)
        .arg("--repo")
        .arg(&empty)
        .arg("--tasks-out")
        .arg(dir.path().join("none"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("is not in") && err.contains("checkpoints.git"),
        "{err}"
    );
}

//! The hub benchmark (`tests/benches/hub.rs`) at a tiny scale against the debug binary: every
//! figure is produced and sane — counts, every accept landed, no event lost — so the benchmark
//! cannot rot. Timings are never compared with anything here.

use std::time::Duration;

use hunkgate_tests::hub_bench::{self, Config, ModeFigures};

fn tiny() -> Config {
    Config {
        files: 50,
        lines: 200,
        dirty: 5,
        agent_files: 5,
        hunks_per_file: 10,
        small_hunks: 10,
        small_rounds: 2,
        rss_suggestions: 3,
        rss_hunks: 20,
        fanout_clients: 5,
        fanout_decisions: 6,
        git_samples: 2,
        warm_samples: 2,
        warm_big_samples: 3,
        // One look at the disk, however it is doing.
        settle_limit: Duration::ZERO,
        isolation_none: true,
        // The isolation suite covers `--isolation user`; here the figures' plumbing is checked.
        isolation_user: None,
        hub_log: None,
        accel_off: None,
        keep_logs: None,
        bin: hunkgate_tests::hunkgate_bin(),
    }
}

fn check_mode(cfg: &Config, m: &ModeFigures) {
    let positive = |what: &str, d: Duration| assert!(!d.is_zero(), "{what} is zero: {m:#?}");
    assert_eq!(m.mode, "none");
    positive("the wait for the disk to settle", m.settled.0);
    positive("first run start", m.first_run.start);
    assert_eq!(m.first_run.hunk_count, cfg.agent_files * cfg.hunks_per_file);
    positive(
        "first run ready",
        m.first_run.ready.expect("the first run's suggestion.ready"),
    );
    // The event's frame as it arrived: the suggestion with all its hunks, before the parse.
    let frame = m
        .first_run
        .ready_frame
        .expect("the first run's event frame");
    assert!(
        frame.bytes > 100 * m.first_run.hunk_count,
        "{frame:?}: too small for {} hunks",
        m.first_run.hunk_count
    );
    assert!(frame.at <= std::time::SystemTime::now(), "{frame:?}");
    assert!(m.warm_runs[1].ready_frame.is_none(), "{m:#?}");
    assert_eq!(m.warm_runs.len(), 2, "{m:#?}");
    assert_eq!(m.sample_runs.len(), cfg.warm_samples, "{m:#?}");
    for r in &m.sample_runs {
        assert_eq!(r.hunk_count, cfg.small_hunks, "{m:#?}");
        assert!(r.ready.is_some_and(|d| !d.is_zero()), "{m:#?}");
        positive("a warm sample's start", r.start);
    }
    assert_eq!(m.warm_big.hunk_count, m.first_run.hunk_count);
    assert_eq!(m.warm_big_more.len(), cfg.warm_big_samples - 1, "{m:#?}");
    // One `git diff` for each warm big run, timed right after it.
    assert_eq!(m.diff_big_warm.len(), cfg.warm_big_samples, "{m:#?}");
    for d in &m.diff_big_warm {
        positive("git diff (big, warm)", *d);
    }
    for r in &m.warm_big_more {
        assert_eq!(r.hunk_count, m.first_run.hunk_count, "{m:#?}");
        assert!(r.ready.is_some_and(|d| !d.is_zero()), "{m:#?}");
    }
    assert!(m.at_rest.rss_kib > 0 && m.at_rest.anon_kib > 0, "{m:#?}");
    // The last warm big run accepted whole, every hunk decided (the benchmark checks each
    // file), next to git applying the same diff.
    assert_eq!(m.bulk.hunks, m.first_run.hunk_count, "{m:#?}");
    assert_eq!(m.bulk.files, cfg.agent_files, "{m:#?}");
    assert!(m.bulk.journal > 0, "{m:#?}");
    for (what, d) in [
        ("feedback_all", m.bulk.accept),
        ("git apply of the whole diff", m.bulk.git_apply),
        ("git apply and sync", m.bulk.git_apply_sync),
    ] {
        positive(what, d);
    }
    positive(
        "the warm big publish",
        m.warm_big
            .ready
            .expect("the warm big run's suggestion.ready"),
    );
    assert_eq!(m.warm_runs[0].hunk_count, cfg.small_hunks);
    assert!(m.warm_runs[0].ready.is_some(), "{m:#?}");
    assert_eq!(
        m.warm_runs[1].hunk_count, 0,
        "the third agent changes nothing"
    );
    assert!(m.warm_runs[1].ready.is_none(), "{m:#?}");
    for r in &m.warm_runs {
        positive("warm run start", r.start);
    }
    for (what, d) in [
        ("git stash create (first)", m.stash_first),
        ("git worktree add (first)", m.checkout_first),
        ("git stash create (warm)", m.stash_warm),
        ("git status (warm)", m.status_warm),
        ("git diff (big)", m.diff_big),
        ("git diff (small)", m.diff_small),
        // Zero if the stamp were read wrong (a stamp after the exit saturates to zero).
        ("the agent's own exit after its end stamp", m.agent_exit),
    ] {
        positive(what, d);
    }
    assert_eq!(m.accept_small.len(), cfg.small_hunks * cfg.small_rounds);
    assert_eq!(m.accept_big.len(), cfg.agent_files * cfg.hunks_per_file);
    assert_eq!(m.apply_check_small.len(), cfg.small_hunks);
    assert_eq!(m.apply_check_big.len(), m.accept_big.len());
    assert!(m.decisions_per_sec > 0.0 && m.decisions_per_sec.is_finite());
    // Every accept landed: the agents' versions, the user's edits kept (checked by the bench
    // itself, which fails otherwise; here, that it checked them all).
    assert_eq!(m.files_verified, cfg.agent_files + cfg.dirty + 1);
    // A decision is journaled before it is answered.
    assert!(m.diff_bytes_small > 0.0 && m.diff_bytes_big > 0.0, "{m:#?}");
    assert!(m.journal_per_decision_small > 0.0, "{m:#?}");
    assert!(m.journal_per_decision_big > 0.0, "{m:#?}");
    assert!(m.journal_after_review > m.journal_before_review, "{m:#?}");
    // Memory, from /proc.
    assert!(
        m.idle.rss_kib > 0 && m.idle.hwm_kib >= m.idle.rss_kib,
        "{m:#?}"
    );
    assert!(
        m.loaded.rss_kib > 0 && m.loaded.hwm_kib >= m.loaded.rss_kib,
        "{m:#?}"
    );
    for mem in [&m.idle, &m.loaded] {
        assert!(mem.anon_kib > 0 && mem.anon_kib < mem.rss_kib, "{m:#?}");
    }
    // The restart gave back every suggestion (the bench checks each one whole against the
    // killed hub's, and fails otherwise): runs 1, 2, 4 and after, and the warm samples.
    let r = &m.restart;
    assert_eq!(
        r.suggestions,
        2 + cfg.warm_samples + cfg.warm_big_samples,
        "{r:#?}"
    );
    assert_eq!(
        r.hunks,
        (1 + cfg.warm_big_samples) * cfg.agent_files * cfg.hunks_per_file
            + (1 + cfg.warm_samples) * cfg.small_hunks,
        "{r:#?}"
    );
    positive("the restart", r.serving);
    assert!(r.journal > 0, "{r:#?}");
    assert!(
        r.memory.anon_kib > 0
            && r.memory.anon_kib < r.memory.rss_kib
            && r.memory.hwm_kib >= r.memory.rss_kib,
        "{r:#?}"
    );
    assert_eq!(m.loaded_suggestions, cfg.rss_suggestions);
    assert_eq!(m.loaded_hunks, cfg.rss_suggestions * cfg.rss_hunks);
    // The fan-out: every client got every event; each decision announces at least one.
    let f = &m.fanout;
    assert_eq!(f.clients, cfg.fanout_clients);
    assert!(f.events >= cfg.fanout_decisions, "{f:#?}");
    assert_eq!(f.lost, 0, "events lost: {f:#?}");
    assert_eq!(f.resyncs, 0, "{f:#?}");
    // One delay per event and client after the first, but for exact ties.
    assert!(
        f.delays.len() <= f.events * (f.clients - 1) && f.delays.len() >= f.events,
        "{} delays for {} events × {} clients",
        f.delays.len(),
        f.events,
        f.clients
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_benchmark_produces_every_figure() {
    let kept = tempfile::tempdir().unwrap();
    let cfg = Config {
        // What a slow run's diagnosis needs: the hubs' debug lines of runs, and their logs kept.
        hub_log: Some("info,hunkgate::runs=debug".into()),
        keep_logs: Some(kept.path().to_path_buf()),
        ..tiny()
    };
    let report = hub_bench::run(&cfg).await.expect("the benchmark runs");
    assert_eq!(report.modes.len(), 1, "{:#?}", report.skipped);
    check_mode(&cfg, &report.modes[0]);
    let md = report.markdown();
    println!("{md}");
    for step in [
        "`POST /runs` → agent started, first run",
        "agent exit → `suggestion.ready`",
        "WebSocket `accept` of one hunk",
        "decisions/s",
        "`feedback_all` accept of a whole",
        "bytes per accept",
        "after the whole",
        "hub RSS, idle",
        "hub RSS at rest after its work",
        "hunks, warm (median of 3 runs)",
        "each right after its run",
        "(paired: each run's own ",
        "of it, the agent's own exit after its end stamp",
        "hub RSS with 3 suggestions × 20 hunks",
        "fan-out to 5 WebSocket clients",
        "events lost without a `resync`",
        "The disk right before each step",
    ] {
        assert!(md.contains(step), "no row {step:?} in\n{md}");
    }
    // No figure is a float gone wrong (as words: `HUNKGATE_LOG=info` is fine).
    let words = || md.split(|c: char| !c.is_alphanumeric());
    assert!(!words().any(|w| w == "NaN" || w == "inf"), "{md}");
    // The logs kept: both hubs', the first at the level asked for, and every run's stamps.
    assert!(
        md.contains("`HUNKGATE_LOG=info,hunkgate::runs=debug`"),
        "{md}"
    );
    assert!(md.contains(&kept.path().display().to_string()), "{md}");
    let log = std::fs::read_to_string(kept.path().join("none-a.log")).unwrap();
    assert!(log.contains("agent process ended"), "{log}");
    assert!(kept.path().join("none-b.log").is_file());
    let runs: Vec<String> = std::fs::read_dir(kept.path().join("none-a-runs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    // Runs 1-3, the warm samples and the warm big runs.
    let want = 3 + cfg.warm_samples + cfg.warm_big_samples;
    assert_eq!(runs.len(), want, "{runs:?}");
    assert!(runs.iter().all(|r| r.contains("hgbench-end")), "{runs:?}");
}

/// A scale the benchmark cannot build is refused with what to change, before anything runs.
#[tokio::test]
async fn an_impossible_scale_is_refused_with_the_fix() {
    let mut cfg = tiny();
    cfg.files = 10;
    let err = hub_bench::run(&cfg)
        .await
        .expect_err("too few files")
        .to_string();
    assert!(err.contains("distinct files are needed"), "{err}");
    let mut cfg = tiny();
    cfg.hunks_per_file = 40;
    let err = hub_bench::run(&cfg)
        .await
        .expect_err("hunks too dense")
        .to_string();
    assert!(err.contains("HUNKGATE_BENCH_LINES"), "{err}");
}

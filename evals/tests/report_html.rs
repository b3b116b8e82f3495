//! The HTML report rendered by a real headless Chromium (Debian's `chromium`, installed by
//! scripts/install-test-deps): the screenshot is not blank, and each chart has exactly one SVG
//! element per datum in the DOM Chromium built.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hunkgate_evals::replay::ReplayScore;
use hunkgate_evals::runner::ResultLine;

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    for c in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(c).is_file() {
            return PathBuf::from(c);
        }
    }
    panic!("chromium is missing: run scripts/install-test-deps (Debian package `chromium`), or set CHROMIUM");
}

/// Run headless Chromium with a fresh profile on `page`; `extra` is the action
/// (`--screenshot=…` or `--dump-dom`). Returns stdout. Killed after 120 s.
fn run_chromium(page: &Path, extra: &[String]) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// (width, height, pixels that are not the white background, pixels of exactly `rgb`).
fn screenshot(page: &Path, png_out: &Path, rgb: [u8; 3]) -> (u32, u32, usize, usize) {
    run_chromium(
        page,
        &[
            format!("--screenshot={}", png_out.display()),
            "--window-size=900,2400".into(),
        ],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_out).expect("chromium wrote the screenshot"),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(
        info.bit_depth == png::BitDepth::Eight && channels >= 3,
        "{info:?}"
    );
    let (mut ink, mut colored) = (0, 0);
    for px in buf[..info.buffer_size()].chunks(channels) {
        if px[..3] != [255, 255, 255] {
            ink += 1;
        }
        if px[..3] == rgb {
            colored += 1;
        }
    }
    (info.width, info.height, ink, colored)
}

fn line(
    task: &str,
    agent: &str,
    model: Option<&str>,
    tags: &[&str],
    ok: bool,
    ms: u64,
) -> ResultLine {
    ResultLine {
        task: task.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        agent: agent.into(),
        model: model.map(str::to_string),
        status: "ready".into(),
        success: ok,
        runs: 1,
        hunks_decided: 4,
        hunks_accepted: if ok { 3 } else { 1 },
        hunks_modified: usize::from(ok),
        hunks_rejected: if ok { 0 } else { 3 },
        apply_clean: Some(ok),
        wall_ms: ms,
        model_ms: model.map(|_| ms / 2),
        prompt_tokens: model.map(|_| 1000),
        completion_tokens: model.map(|_| 100),
        tool_calls: model.map(|_| 5),
        stop_reason: model.map(|_| "finished".to_string()),
        ..ResultLine::default()
    }
}

#[test]
fn the_html_report_renders_in_chromium_with_every_datum() {
    let dir = tempfile::tempdir().unwrap();
    // Three agent × model rows over tagged tasks, a row with nothing decided, replay lines.
    let tags: [&[&str]; 4] = [
        &["multi-file", "create"],
        &["CRLF"],
        &["conflict"],
        &["binary", "create"],
    ];
    let mut lines = Vec::new();
    for (i, t) in tags.iter().enumerate() {
        let task = format!("task-{i}");
        lines.push(line(
            &task,
            "sh /x/agents/perfect.sh",
            None,
            t,
            true,
            300 + 100 * i as u64,
        ));
        lines.push(line(
            &task,
            "builtin:qwen",
            Some("qwen"),
            t,
            i % 2 == 0,
            20_000 + 9_000 * i as u64,
        ));
        lines.push(line(
            &task,
            "builtin:gemma",
            Some("gemma"),
            t,
            false,
            90_000 * (i as u64 + 1),
        ));
    }
    let mut idle = line(
        "task-0",
        "sh /x/agents/crashing.sh",
        None,
        &["multi-file", "create"],
        false,
        150,
    );
    idle.hunks_decided = 0;
    idle.hunks_accepted = 0;
    idle.hunks_rejected = 0;
    idle.apply_clean = None;
    idle.status = "failed".into();
    lines.push(idle);
    for (i, day) in ["2026-02-01", "2026-02-03"].iter().enumerate() {
        let mut r = line(
            &format!("run-{i}"),
            "builtin:qwen",
            Some("qwen"),
            &["replay"],
            i == 1,
            40_000,
        );
        r.replay = Some(ReplayScore {
            ts: format!("{day}T09:00:00Z"),
            kept: 10,
            kept_proposed: 4 + 5 * i,
            rejected: 4,
            rejected_proposed: 1,
            proposed: 12,
            ..ReplayScore::default()
        });
        lines.push(r);
    }
    let results = dir.path().join("results.jsonl");
    let text: String = lines
        .iter()
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect();
    std::fs::write(&results, text).unwrap();
    // A real-use feedback log over three days, two agents.
    let fb = dir.path().join("feedback.jsonl");
    let mut log = String::new();
    for (day, agent, outcomes) in [
        ("2026-01-10", "builtin:qwen", &["applied", "rejected"][..]),
        (
            "2026-01-11",
            "builtin:qwen",
            &["applied", "modified", "applied"][..],
        ),
        ("2026-01-12", "builtin:qwen", &["rejected"][..]),
        ("2026-01-11", "claude -p {prompt}", &["applied"][..]),
    ] {
        for (i, o) in outcomes.iter().enumerate() {
            log.push_str(
                &serde_json::json!({"ts": format!("{day}T10:00:0{i}Z"), "hunk_id": format!("{day}{agent}{i}"),
                    "outcome": o, "agent": agent})
                .to_string(),
            );
            log.push('\n');
        }
    }
    std::fs::write(&fb, log).unwrap();

    let html = dir.path().join("report.html");
    let md = dir.path().join("report.md");
    let o = Command::new(env!("CARGO_BIN_EXE_hunkgate-evals"))
        .arg("report")
        .arg(&results)
        .arg("--html")
        .arg(&html)
        .arg("--md")
        .arg(&md)
        .arg("--feedback")
        .arg(&fb)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    for banned in ["<script", "<link", "src=", "@import", "url("] {
        assert!(!page.contains(banned), "not self-contained: {banned}");
    }

    // What the charts must hold, from the input.
    let rows: BTreeSet<(String, Option<String>)> = lines
        .iter()
        .map(|l| (l.agent.clone(), l.model.clone()))
        .collect();
    let tag_bars: usize = rows
        .iter()
        .map(|(a, m)| {
            lines
                .iter()
                .filter(|l| &l.agent == a && &l.model == m)
                .flat_map(|l| l.tags.iter())
                .collect::<BTreeSet<_>>()
                .len()
        })
        .sum();
    let accepted_bars = rows.len() - 1; // crashing decided nothing
    let latency_points = lines.len();
    let time_points = 3 + 1 + 2; // qwen's 3 days, claude's 1, two replay days
    assert_eq!((tag_bars, accepted_bars), (5 + 6 + 5 + 2, 3));

    // The DOM Chromium built from the page.
    let dom = String::from_utf8(run_chromium(&html, &["--dump-dom".into()])).unwrap();
    let count = |chart: &str| dom.matches(&format!("data-chart=\"{chart}\"")).count();
    assert_eq!(count("tag"), tag_bars, "success per tag");
    assert_eq!(
        count("accepted"),
        accepted_bars,
        "accepted ratio per agent × model"
    );
    assert_eq!(count("latency"), latency_points, "latency distribution");
    assert_eq!(count("time"), time_points, "over time");
    assert_eq!(dom.matches("<svg").count(), 4);

    // The screenshot has ink, and the first series' colour (its bars) shows.
    let shot = dir.path().join("report.png");
    let (w, h, ink, blue) = screenshot(&html, &shot, [0x4e, 0x79, 0xa7]);
    assert_eq!((w, h), (900, 2400));
    let share = ink as f64 / (w * h) as f64;
    assert!(
        share > 0.03,
        "the page looks blank: {ink} non-white pixels ({share:.4})"
    );
    assert!(
        blue > 500,
        "the charts' bars are missing: {blue} pixels of #4e79a7"
    );
    // Control: an empty page gives (almost) no ink, so the count above can fail.
    let empty = dir.path().join("empty.html");
    std::fs::write(&empty, "<!doctype html><html><body></body></html>").unwrap();
    let (_, _, ink0, blue0) = screenshot(&empty, &dir.path().join("empty.png"), [0x4e, 0x79, 0xa7]);
    assert!(ink0 < 100 && blue0 == 0, "{ink0} {blue0}");
    if let Some(keep) = std::env::var_os("HUNKGATE_REPORT_SHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

//! The hub benchmark of issue #12: a synthetic repository, the real `hunkgate` binary driven
//! through its public HTTP and WebSocket API only, and each step next to the git CLI doing the
//! same step, in one run.
//!
//! `tests/benches/hub.rs` runs it at full scale against the release binary and prints the
//! table; `tests/tests/bench_smoke.rs` runs the very same code at a tiny scale against the debug
//! binary and checks that every figure was produced and is sane, so it cannot rot. Figures only:
//! nothing here compares a time with a threshold.
//!
//! What it does, per isolation mode (`--isolation none`, and `--isolation user` when the sandbox
//! user is set up):
//!
//! 1. a hub on a fresh state dir; its RSS idle;
//! 2. three runs through `POST /runs`: the first (cold store) with an agent that changes
//!    `agent_files` files in `hunks_per_file` places each, a warm one with an agent that changes
//!    one file in `small_hunks` places, a warm one with an agent that changes nothing. Each agent
//!    prints its own start and exit time (`date +%s%N`), read back from `<state>/runs/<id>.log`;
//!    `suggestion.ready` is timed when its frame has arrived whole at a WebSocket client, before
//!    the client parses it (the parse of a big one is given beside it). Then `warm_samples`
//!    more warm runs, each changing one more file in `small_hunks` places, so that the warm
//!    start and the small publish are also given as medians (one run swings with the disk).
//!    Beside them:
//!    `git stash create` on the same dirty checkout (first and warm) and `git diff base head` on
//!    the hub's own checkpoint store;
//! 3. `git apply --check` of every hunk of both suggestions, then WebSocket `accept` of each of
//!    them, one at a time from one client (the small suggestion `small_rounds` times, undoing
//!    between rounds), with the journal's size before and after; every file is then compared
//!    with what the agent wrote;
//! 4. `fanout_clients` WebSocket clients listen while one more client makes `fanout_decisions`
//!    decisions; each event's arrival at each client is compared with its first arrival, and
//!    every client's seqs are checked against the hub's own `replay` for gaps;
//!    Then the hub's RSS at rest, its runs over and the review done;
//! 5. a fourth run, warm, whose agent undoes the first agent's change in the same places: a
//!    publish of as many hunks from a hub that has run before (the first run's publish comes
//!    right after its sandbox's first 10,000 files were written); and `warm_big_samples` - 1
//!    more such runs, each rewriting the same lines its own way, so the warm big publish is a
//!    median too. Each is set beside `git diff base head` of its own suggestion, timed right
//!    after it, and the ratio given is the median of each run's own;
//! 6. the hub killed (`kill -9`) and started again on its state dir: how long until it serves,
//!    every suggestion it gives back checked against what the killed hub gave (each one whole,
//!    every hunk's state), and its RSS at rest;
//! 7. a second hub on a fresh state dir, one run whose agent publishes `rss_suggestions`
//!    suggestions of `rss_hunks` hunks each (through `POST /agent/publish`), and the hub's RSS.
//!
//! Before each timed step — the hub's and git's alike — the benchmark runs `sync`, and each
//! agent runs `sync` before its end stamp: a user's steps are seconds to minutes apart, so no
//! step should pay for the write-back of the step before it (without this, the figures of one
//! machine swing by several times from run to run). Before each mode's first step it also
//! waits for the disk to answer a flush at its usual speed (see [`settle_disk`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, ensure, Context, Result};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use crate::{hermetic_env, Hub, Workspace, Ws};

/// The scale and the modes of one benchmark run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Committed files in the synthetic repository.
    pub files: usize,
    /// Lines per file.
    pub lines: usize,
    /// Files with an uncommitted edit of the user's.
    pub dirty: usize,
    /// Files the big agent changes.
    pub agent_files: usize,
    /// Hunks per changed file.
    pub hunks_per_file: usize,
    /// Hunks of the small suggestion (all in one file).
    pub small_hunks: usize,
    /// How many times the small suggestion's hunks are accepted (undone in between).
    pub small_rounds: usize,
    /// Suggestions on the hub whose memory is measured.
    pub rss_suggestions: usize,
    /// Hunks per such suggestion (a multiple of `hunks_per_file`).
    pub rss_hunks: usize,
    /// WebSocket clients of the fan-out measurement.
    pub fanout_clients: usize,
    /// Decisions made while they listen (each announces two events).
    pub fanout_decisions: usize,
    /// Repetitions of each warm git command (the median is reported).
    pub git_samples: usize,
    /// Warm runs after runs 2 and 3, each changing one more file in `small_hunks` places: the
    /// warm start and the small publish are reported as medians over these and run 2 (3).
    pub warm_samples: usize,
    /// Warm runs of the big agent's size after the review (run 4 and on), each rewriting the
    /// same lines of the same files once more: the warm 1,000-hunk publish is reported as
    /// their median (at most 15).
    pub warm_big_samples: usize,
    /// The longest the benchmark waits for the disk to settle before each mode's first step
    /// (see [`settle_disk`]).
    pub settle_limit: Duration,
    /// Run under `--isolation none`.
    pub isolation_none: bool,
    /// Run under `--isolation user` with this sandbox user (None: do not).
    pub isolation_user: Option<String>,
    /// The hubs' `HUNKGATE_LOG` (None: their default, `info`). A diagnostic: a hub that logs
    /// more pays for it in the figures, and the report says so.
    pub hub_log: Option<String>,
    /// The hubs' `HUNKGATE_ACCEL_OFF`: the accelerators turned off (`[accel]` in
    /// docs/configuration.md), to measure what each one saves (None: all on).
    pub accel_off: Option<String>,
    /// Where to copy each hub's log and its agents' run logs (with their start and end
    /// stamps) once the hub is done (None: they go with its state dir).
    pub keep_logs: Option<PathBuf>,
    /// The `hunkgate` binary.
    pub bin: PathBuf,
}

impl Config {
    /// The figures of issue #12: 10,000 files × 200 lines, 100 dirty, 100 × 10 hunks, a 10-hunk
    /// suggestion, 100 suggestions × 100 hunks, 100 clients.
    pub fn issue_scale(bin: PathBuf) -> Self {
        Self {
            files: 10_000,
            lines: 200,
            dirty: 100,
            agent_files: 100,
            hunks_per_file: 10,
            small_hunks: 10,
            small_rounds: 5,
            rss_suggestions: 100,
            rss_hunks: 100,
            fanout_clients: 100,
            fanout_decisions: 50,
            git_samples: 5,
            warm_samples: 5,
            warm_big_samples: 9,
            settle_limit: Duration::from_secs(60),
            isolation_none: true,
            isolation_user: Some("hunkgate-agent".into()),
            hub_log: None,
            accel_off: None,
            keep_logs: None,
            bin,
        }
    }

    /// The issue's scale with every `HUNKGATE_BENCH_*` variable applied (see `docs/performance.md`).
    pub fn from_env(bin: PathBuf) -> Result<Self> {
        let mut c = Self::issue_scale(bin);
        let num = |name: &str, default: usize| -> Result<usize> {
            match std::env::var(name) {
                Ok(v) => v
                    .trim()
                    .replace(['_', ','], "")
                    .parse()
                    .with_context(|| format!("{name}={v:?} is not a whole number")),
                Err(_) => Ok(default),
            }
        };
        c.files = num("HUNKGATE_BENCH_FILES", c.files)?;
        c.lines = num("HUNKGATE_BENCH_LINES", c.lines)?;
        c.dirty = num("HUNKGATE_BENCH_DIRTY", c.dirty)?;
        c.agent_files = num("HUNKGATE_BENCH_AGENT_FILES", c.agent_files)?;
        c.hunks_per_file = num("HUNKGATE_BENCH_HUNKS_PER_FILE", c.hunks_per_file)?;
        c.small_hunks = num("HUNKGATE_BENCH_SMALL_HUNKS", c.small_hunks)?;
        c.small_rounds = num("HUNKGATE_BENCH_SMALL_ROUNDS", c.small_rounds)?;
        c.rss_suggestions = num("HUNKGATE_BENCH_RSS_SUGGESTIONS", c.rss_suggestions)?;
        c.rss_hunks = num("HUNKGATE_BENCH_RSS_HUNKS", c.rss_hunks)?;
        c.fanout_clients = num("HUNKGATE_BENCH_CLIENTS", c.fanout_clients)?;
        c.fanout_decisions = num("HUNKGATE_BENCH_FANOUT_DECISIONS", c.fanout_decisions)?;
        c.git_samples = num("HUNKGATE_BENCH_GIT_SAMPLES", c.git_samples)?;
        c.warm_samples = num("HUNKGATE_BENCH_WARM_SAMPLES", c.warm_samples)?;
        c.warm_big_samples = num("HUNKGATE_BENCH_WARM_BIG_SAMPLES", c.warm_big_samples)?;
        c.settle_limit = Duration::from_secs(num(
            "HUNKGATE_BENCH_SETTLE_SECS",
            c.settle_limit.as_secs() as usize,
        )? as u64);
        if let Ok(u) = std::env::var("HUNKGATE_BENCH_SANDBOX_USER") {
            c.isolation_user = Some(u);
        }
        c.hub_log = std::env::var("HUNKGATE_BENCH_HUB_LOG").ok();
        c.accel_off = std::env::var("HUNKGATE_BENCH_ACCEL_OFF").ok();
        c.keep_logs = std::env::var_os("HUNKGATE_BENCH_KEEP_LOGS").map(PathBuf::from);
        match std::env::var("HUNKGATE_BENCH_ISOLATION").as_deref() {
            Err(_) | Ok("both") => {}
            Ok("none") => c.isolation_user = None,
            Ok("user") => c.isolation_none = false,
            Ok(other) => bail!("HUNKGATE_BENCH_ISOLATION={other:?}: use none, user or both"),
        }
        Ok(c)
    }

    /// Lines between two changes of a file with `hunks` changes.
    fn spacing(&self, hunks: usize) -> usize {
        self.lines / hunks.max(1)
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            self.files > 0 && self.files < 100_000,
            "files must be 1..99,999 (HUNKGATE_BENCH_FILES)"
        );
        for (what, hunks) in [
            ("HUNKGATE_BENCH_HUNKS_PER_FILE", self.hunks_per_file),
            ("HUNKGATE_BENCH_SMALL_HUNKS", self.small_hunks),
        ] {
            // Git merges two changes into one hunk when 6 or fewer lines separate them.
            ensure!(
                hunks > 0 && self.spacing(hunks) >= 8,
                "{what}={hunks}: {} lines per file leave fewer than 8 lines between changes; \
                 raise HUNKGATE_BENCH_LINES or lower the hunks",
                self.lines
            );
        }
        ensure!(
            self.rss_hunks > 0 && self.rss_hunks.is_multiple_of(self.hunks_per_file),
            "HUNKGATE_BENCH_RSS_HUNKS={} must be a multiple of the hunks per file ({})",
            self.rss_hunks,
            self.hunks_per_file
        );
        ensure!(
            self.small_rounds > 0,
            "HUNKGATE_BENCH_SMALL_ROUNDS must be at least 1"
        );
        ensure!(
            self.fanout_clients >= 2 && self.fanout_decisions > 0,
            "the fan-out needs at least 2 clients and 1 decision"
        );
        ensure!(
            self.git_samples > 0,
            "HUNKGATE_BENCH_GIT_SAMPLES must be at least 1"
        );
        ensure!(
            (1..=15).contains(&self.warm_big_samples),
            "HUNKGATE_BENCH_WARM_BIG_SAMPLES must be 1..15"
        );
        let needed = self.slots_needed();
        ensure!(
            needed <= self.files,
            "{needed} distinct files are needed (dirty {} + agent {} + small 1 + {} more + {} × {} \
             for memory), more than the {} files of the repository",
            self.dirty,
            self.agent_files,
            self.warm_samples,
            self.rss_suggestions,
            self.rss_hunks / self.hunks_per_file,
            self.files
        );
        Ok(())
    }

    fn rss_files_per_suggestion(&self) -> usize {
        self.rss_hunks / self.hunks_per_file
    }

    fn slots_needed(&self) -> usize {
        self.dirty
            + self.agent_files
            + 1
            + self.warm_samples
            + self.rss_suggestions * self.rss_files_per_suggestion()
    }
}

// ---------------------------------------------------------------------------------------------
// The synthetic repository.

/// Files are numbered 0..files; "slots" (dirty files, the agent's, …) are spread over them with
/// a stride coprime to the file count, so the changes land in many directories.
struct Layout {
    files: usize,
    lines: usize,
    stride: usize,
}

impl Layout {
    fn new(files: usize, lines: usize) -> Self {
        fn gcd(a: usize, b: usize) -> usize {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        let mut stride = 7919;
        while gcd(stride, files) != 1 {
            stride += 1;
        }
        Self {
            files,
            lines,
            stride,
        }
    }

    fn file_of_slot(&self, slot: usize) -> usize {
        (slot * self.stride) % self.files
    }

    fn path(n: usize) -> String {
        format!("d{:03}/f{n:05}.txt", n / 100)
    }

    /// Line `i` (1-based) of file `n`; each holds the word `line` exactly once.
    fn line(n: usize, i: usize) -> String {
        format!("f{n:05} line {i} lorem ipsum dolor sit amet\n")
    }

    fn base(&self, n: usize) -> String {
        (1..=self.lines).map(|i| Self::line(n, i)).collect()
    }

    /// The lines (1-based) an agent changes in a file with `hunks` changes.
    fn changed_lines(&self, hunks: usize) -> Vec<usize> {
        let spacing = self.lines / hunks;
        (0..hunks).map(|k| k * spacing + spacing / 2 + 1).collect()
    }

    /// The file as an agent leaves it: `line` → `LINE` on the changed lines.
    fn agent(&self, n: usize, hunks: usize) -> String {
        let changed: BTreeSet<usize> = self.changed_lines(hunks).into_iter().collect();
        (1..=self.lines)
            .map(|i| {
                let l = Self::line(n, i);
                if changed.contains(&i) {
                    l.replacen("line", "LINE", 1)
                } else {
                    l
                }
            })
            .collect()
    }

    /// The user's uncommitted edit: one line in the middle.
    fn user_edit(&self, n: usize) -> String {
        let mid = self.lines / 2;
        (1..=self.lines)
            .map(|i| {
                let l = Self::line(n, i);
                if i == mid {
                    l.replace('\n', " (user edit)\n")
                } else {
                    l
                }
            })
            .collect()
    }

    /// `sed -i` arguments (without the files) that make the agent's change.
    fn sed_args(&self, hunks: usize) -> String {
        self.changed_lines(hunks)
            .iter()
            .map(|l| format!(" -e {l}s/line/LINE/"))
            .collect()
    }

    /// The sed that rewrites what [`Layout::sed_args`] made once more: the same lines, the
    /// same size of change, `LINE` becoming variant `k` (0..15) of its case — 0 (`line`)
    /// undoes it.
    fn again_sed_args(&self, hunks: usize, k: usize) -> String {
        let variant: String = "line"
            .chars()
            .enumerate()
            .map(|(i, c)| match k >> i & 1 {
                1 => c.to_ascii_uppercase(),
                _ => c,
            })
            .collect();
        self.changed_lines(hunks)
            .iter()
            .map(|l| format!(" -e {l}s/LINE/{variant}/"))
            .collect()
    }
}

/// Which files play which part.
struct Parts {
    dirty: Vec<usize>,
    agent: Vec<usize>,
    small: usize,
    /// The files of the warm samples' agents, one each.
    samples: Vec<usize>,
    /// First slot of the memory suggestions' files.
    rss_first_slot: usize,
}

fn parts(cfg: &Config, layout: &Layout) -> Parts {
    let mut slot = 0..;
    let mut take = |n: usize| -> Vec<usize> {
        (0..n)
            .map(|_| layout.file_of_slot(slot.next().unwrap_or_default()))
            .collect()
    };
    let dirty = take(cfg.dirty);
    let agent = take(cfg.agent_files);
    let small = take(1)[0];
    let samples = take(cfg.warm_samples);
    Parts {
        dirty,
        agent,
        small,
        samples,
        rss_first_slot: cfg.dirty + cfg.agent_files + 1 + cfg.warm_samples,
    }
}

fn build_repository(cfg: &Config, layout: &Layout, parts: &Parts) -> Result<Workspace> {
    let dir = tempfile::Builder::new()
        .prefix("hunkgate-bench-")
        .tempdir()?;
    let ws = Workspace { dir };
    std::fs::create_dir_all(ws.repo())?;
    std::fs::create_dir_all(ws.home())?;
    ws.git(&["init", "-q", "-b", "main"])?;
    // Nothing of git's runs in the background while the steps are timed: committing 10,000
    // loose objects starts `git gc --auto` detached, which packed them for seconds beside run 1
    // (a core of the two), then deleted the 10,000 files (on ext4 without a journal, files
    // made in the next minute are slow) — and once made `git stash create` fail, its object
    // directory removed under it.
    ws.git(&["config", "gc.auto", "0"])?;
    ws.git(&["config", "maintenance.auto", "false"])?;
    // The commit goes in as one pack, as a clone's objects do: fast-import, then the index
    // read from it and refreshed against the files.
    let mut stream = Vec::with_capacity(cfg.files * (cfg.lines * 48 + 64));
    let mut tree = String::with_capacity(cfg.files * 40);
    for n in 0..cfg.files {
        let (path, base) = (Layout::path(n), layout.base(n));
        let p = ws.repo().join(&path);
        if n % 100 == 0 {
            std::fs::create_dir_all(p.parent().expect("a directory"))?;
        }
        std::fs::write(&p, &base).with_context(|| p.display().to_string())?;
        stream
            .extend_from_slice(format!("blob\nmark :{}\ndata {}\n", n + 1, base.len()).as_bytes());
        stream.extend_from_slice(base.as_bytes());
        stream.push(b'\n');
        tree.push_str(&format!("M 100644 :{} {path}\n", n + 1));
    }
    let message = "synthetic repository";
    stream.extend_from_slice(
        format!(
            "commit refs/heads/main\n\
             author Test <test@example.com> 1767225600 +0000\n\
             committer Test <test@example.com> 1767225600 +0000\n\
             data {}\n{message}\n{tree}\n",
            message.len()
        )
        .as_bytes(),
    );
    let mut import = git_cmd(
        &ws.home(),
        &ws.repo(),
        &["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"],
    );
    let out = crate::output_fed(import.stderr(Stdio::piped()), &stream)?;
    ensure!(
        out.status.success(),
        "git fast-import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ws.git(&["reset", "-q"])?;
    ensure!(
        ws.git(&["status", "--porcelain"])?.is_empty(),
        "the synthetic repository's files are not its commit"
    );
    ensure!(
        ws.git(&["count-objects"])?.starts_with("0 objects"),
        "the synthetic repository has loose objects"
    );
    for &n in &parts.dirty {
        ws.write(&Layout::path(n), layout.user_edit(n).as_bytes())?;
    }
    Ok(ws)
}

// ---------------------------------------------------------------------------------------------
// The figures.

/// Resident memory of a process, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
    /// The part of the RSS that is the process's own memory (`RssAnon`): the rest is mostly
    /// pages of its executable mapped from the page cache, shared and given back under
    /// pressure, which vary with how the binary happens to be laid out.
    pub anon_kib: u64,
}

/// A run started through `POST /runs`.
#[derive(Debug, Clone)]
pub struct RunFigures {
    /// `POST /runs` sent → the agent's own first line (`date +%s%N`).
    pub start: Duration,
    /// The agent's last line → `suggestion.ready` arrived whole at a WebSocket client, before
    /// the client parsed it (None: no suggestion).
    pub ready: Option<Duration>,
    /// That event's frame: its size and how long the client took to parse it.
    pub ready_frame: Option<crate::Arrival>,
    pub hunk_count: usize,
    /// The disk right before the run (see [`fsync_probe`]).
    pub disk: Duration,
}

/// Everything measured under one isolation mode.
#[derive(Debug, Clone)]
pub struct ModeFigures {
    /// `none` or `user`.
    pub mode: String,
    /// How long the disk took to settle before this mode's first step (see [`settle_disk`]),
    /// and whether it did within [`Config::settle_limit`].
    pub settled: (Duration, bool),
    pub idle: Memory,
    /// Cold store, the big agent.
    pub first_run: RunFigures,
    /// The big agent's change undone, after the reviews: a publish of as many hunks from a
    /// warm hub (run 4).
    pub warm_big: RunFigures,
    /// The runs after it that rewrite the same lines again (`warm_big_samples` - 1).
    pub warm_big_more: Vec<RunFigures>,
    /// The hub at rest after its runs 1–3, the warm samples, the reviews and the fan-out.
    pub at_rest: Memory,
    /// The small agent and the agent that changes nothing.
    pub warm_runs: Vec<RunFigures>,
    /// The warm samples: each an agent that changes one more file in `small_hunks` places.
    pub sample_runs: Vec<RunFigures>,
    pub stash_first: Duration,
    /// `git worktree add` of HEAD into a new directory beside the hub's state: git writing the
    /// same thousands of files a first run's sandbox needs, on the same filesystem.
    pub checkout_first: Duration,
    pub stash_warm: Duration,
    /// `git status` of the checkout (warm, median): every tracked file `lstat`ed and the tree
    /// walked for untracked ones, the work a read-back without change notification does (the
    /// sandbox helper's under `--isolation user`).
    pub status_warm: Duration,
    pub diff_big: Duration,
    /// `git diff base head` of each warm 1,000-hunk run (`warm_big`, then `warm_big_more`),
    /// timed right after it (median of `git_samples`): git's own figure moves with the
    /// machine and with the packs the store has by then (9.5–15 ms within one benchmark
    /// run), so each publish is set against the git of its own moment.
    pub diff_big_warm: Vec<Duration>,
    pub diff_small: Duration,
    /// How long after its end stamp an agent of [`sh_template`] has exited, as a plain parent
    /// (the benchmark) sees it: `sh -c` of the same last command (median, [`agent_exit`]). The
    /// publish is timed from that stamp, so this much of it is the agent's own exit.
    pub agent_exit: Duration,
    pub accept_small: Vec<Duration>,
    pub accept_big: Vec<Duration>,
    pub apply_check_small: Vec<Duration>,
    pub apply_check_big: Vec<Duration>,
    /// Single-hunk accepts per second over the whole big review, one client, one at a time.
    pub decisions_per_sec: f64,
    /// The last warm big run's suggestion accepted whole (`feedback_all`), one decision.
    pub bulk: Bulk,
    /// Mean bytes of a hunk's `diff` in each suggestion.
    pub diff_bytes_small: f64,
    pub diff_bytes_big: f64,
    /// Growth of `state.jsonl` per accept.
    pub journal_per_decision_small: f64,
    pub journal_per_decision_big: f64,
    /// `state.jsonl` before and after the whole big review.
    pub journal_before_review: u64,
    pub journal_after_review: u64,
    /// Files whose content was checked after the reviews (the agent's version landed, the
    /// user's edits kept).
    pub files_verified: usize,
    pub fanout: Fanout,
    /// The hub killed after all of the above and started again on its state dir.
    pub restart: Restart,
    pub loaded: Memory,
    pub loaded_suggestions: usize,
    pub loaded_hunks: usize,
    /// The disk right before the first round of small accepts and the big review (see
    /// [`fsync_probe`]).
    pub disk_small: Duration,
    pub disk_big: Duration,
    /// What the hubs warned of or logged as errors while they were timed (see
    /// [`hub_warnings`]): a figure far off its usual value is explained there, if anywhere.
    pub warnings: Vec<String>,
}

/// A whole suggestion accepted at once (`feedback_all`), next to git applying its diff.
#[derive(Debug, Clone, Default)]
pub struct Bulk {
    pub hunks: usize,
    pub files: usize,
    /// The `feedback_all` round trip over the WebSocket.
    pub accept: Duration,
    /// `git apply` of the suggestion's whole diff (`git diff base head` of its commits) in the
    /// checkout, and the same followed by `sync` of the files it wrote (coreutils: an fsync
    /// of each), which the hub's writes are; both taken back before the hub's accept.
    pub git_apply: Duration,
    pub git_apply_sync: Duration,
    /// Growth of `state.jsonl`.
    pub journal: u64,
    /// The disk right before (see [`fsync_probe`]).
    pub disk: Duration,
}

/// A hub killed (`kill -9`) after its work and started again on the same state dir.
#[derive(Debug, Clone, Default)]
pub struct Restart {
    /// The new process spawned → serving (its address in `hub.json`, written once the state
    /// is read back).
    pub serving: Duration,
    /// `state.jsonl` as the new hub found it.
    pub journal: u64,
    /// The suggestions and hunks it gives back, each checked whole against the killed hub's.
    pub suggestions: usize,
    pub hunks: usize,
    /// The new hub at rest, and its peak: reading the journal back is the most it held.
    pub memory: Memory,
}

#[derive(Debug, Clone, Default)]
pub struct Fanout {
    pub clients: usize,
    /// Events every client should have seen (per the hub's `replay`).
    pub events: usize,
    /// For each event and each client but the first to get it: how much later it got it.
    pub delays: Vec<Duration>,
    /// Seqs a client never got without a `resync` telling it so.
    pub lost: usize,
    pub resyncs: usize,
}

/// The result of a benchmark run.
#[derive(Debug, Clone)]
pub struct Report {
    pub cfg: Config,
    pub modes: Vec<ModeFigures>,
    /// Modes not run, and why.
    pub skipped: Vec<(String, String)>,
    /// Repository build time (files written, `git add -A`, `git commit`).
    pub setup: Duration,
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

fn ns_between(a: u128, b: u128) -> Duration {
    Duration::from_nanos(b.saturating_sub(a).min(u64::MAX as u128) as u64)
}

/// Nearest-rank percentile of unsorted samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let mut v = samples.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

pub fn memory_of(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("no {name} in /proc/{pid}/status"))
    };
    Ok(Memory {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
        anon_kib: field("RssAnon:")?,
    })
}

/// The anonymous memory (KiB) of process `pid` once it is at rest: it stayed within 1 MiB for
/// longer than `settle` (say the hub's quiet period, after which it gives back what it freed,
/// and some more: on a loaded machine that can come seconds after the cause). After 60 s, what
/// it read last, so a process that never settles fails its test on figures rather than hangs.
pub fn anon_at_rest(pid: u32, settle: Duration) -> Result<u64> {
    let mut rest = memory_of(pid)?.anon_kib;
    let mut since = Instant::now();
    let deadline = since + Duration::from_secs(60);
    while since.elapsed() < settle && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = memory_of(pid)?.anon_kib;
        if now.abs_diff(rest) > 1024 {
            (rest, since) = (now, Instant::now());
        }
    }
    Ok(rest)
}

fn git_cmd(home: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    hermetic_env(&mut cmd, home);
    cmd.current_dir(dir).args(args);
    cmd
}

/// Run git, time it (output read through a pipe, as a user's terminal would), check success.
fn time_git(mut cmd: Command) -> Result<Duration> {
    let t = Instant::now();
    let out = cmd.stdin(Stdio::null()).output()?;
    let d = t.elapsed();
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(d)
}

/// Time `git worktree add --detach` of HEAD into a fresh directory (and wait for the disk). The
/// worktree stays until the workspace is removed, after every mode, like the hubs' state dirs
/// (see [`Leftovers`]): removed at once, its 10,000 files made every file the next run made
/// slow to create — run 2's start took 1.1–1.7× `git stash create` where the warm runs after
/// it took 0.6–0.8×.
fn git_checkout(ws: &Workspace, mode: &str) -> Result<Duration> {
    let dir = ws.path(&format!("git-checkout-{mode}"));
    let dir_s = dir.to_string_lossy().into_owned();
    let d = time_git(git_cmd(
        &ws.home(),
        &ws.repo(),
        &["worktree", "add", "-q", "--detach", &dir_s, "HEAD"],
    ))?;
    // Its tens of megabytes must not still be on their way to the disk while the steps after
    // it time their fsyncs.
    settle()?;
    Ok(d)
}

fn median_of(n: usize, mut f: impl FnMut() -> Result<Duration>) -> Result<Duration> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(f()?);
    }
    Ok(percentile(&v, 50.0))
}

/// How many times [`agent_exit`] is measured.
const AGENT_EXIT_SAMPLES: usize = 21;

/// The median time from the end stamp of an agent of [`sh_template`] to its exit, as the
/// benchmark sees it when it starts the same last command itself (`sh -c`, its output read
/// to the end, then waited for): the subshell that ran `date` exits, the shell writes the
/// line and exits, the parent is woken. A publish timed from the stamp pays for this before
/// the hub can know the agent ended; `git diff`, timed from its start, pays for its own exit
/// but not for another process's.
fn agent_exit(n: usize) -> Result<Duration> {
    settle()?;
    median_of(n, || {
        let mut child = Command::new("sh")
            .args(["-c", "set -e; echo hgbench-end $(date +%s%N)"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = String::new();
        std::io::Read::read_to_string(
            child.stdout.as_mut().ok_or_else(|| anyhow!("no stdout"))?,
            &mut out,
        )?;
        let status = child.wait()?;
        let seen = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        ensure!(
            status.success(),
            "sh -c of the agent's end failed: {status}"
        );
        let stamp: u64 = out
            .trim()
            .strip_prefix("hgbench-end ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("no end stamp in {out:?}"))?;
        Ok(seen.saturating_sub(Duration::from_nanos(stamp)))
    })
}

fn journal_len(state: &Path) -> u64 {
    std::fs::metadata(state.join("state.jsonl"))
        .map(|m| m.len())
        .unwrap_or(0)
}

fn progress(msg: impl AsRef<str>) {
    eprintln!("[hub bench] {}", msg.as_ref());
}

/// The hub's public HTTP API, in process (so a request's time is the hub's, not curl's start).
struct Http {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Http {
    fn new(hub: &Hub) -> Result<Self> {
        Ok(Self {
            client: reqwest::Client::builder().no_proxy().build()?,
            base: hub.url.clone(),
            token: hub.token.clone(),
        })
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        ensure!(status.is_success(), "GET {path}: {status} {body}");
        Ok(body)
    }

    async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        ensure!(status.is_success(), "POST {path}: {status} {body}");
        Ok(body)
    }

    async fn wait_run(&self, run_id: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let run = self.get(&format!("/runs/{run_id}")).await?;
            if !matches!(
                run["status"].as_str(),
                Some("queued" | "working" | "waiting_for_user")
            ) {
                return Ok(run);
            }
            ensure!(
                Instant::now() < deadline,
                "run {run_id} still running after {timeout:?}: {run}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The pause before each timed step (see [`settle`]).
const BETWEEN_STEPS: Duration = Duration::from_secs(1);

/// How long after its last decision the hub's RSS at rest is read: past the hub's 2 s of quiet
/// after which it returns freed memory (`hub::quiet`), with the `settle` after it.
const AT_REST_AFTER: Duration = Duration::from_secs(2);

/// `sh -c '<script>'` as an agent template: the script holds no single quote and no `{prompt}`.
/// The agent's work ends with `sync`, before its end stamp: a real agent works for minutes,
/// long enough for the kernel to write back what the sandbox sync and the agent wrote, and the
/// publish timed from the end stamp must not pay for that write-back instead.
fn sh_template(script: &str) -> String {
    debug_assert!(!script.contains('\'') && !script.contains("{prompt}"));
    format!("sh -c 'set -e; echo hgbench-start $(date +%s%N); {script}; sync; echo hgbench-end $(date +%s%N)'")
}

/// Wait until everything written so far is on the disk (`sync`), so that the step timed next
/// — the hub's or git's — does not pay for the write-back of the step before it. A user's
/// steps are seconds to minutes apart; the benchmark's follow each other at once. First a
/// pause of [`BETWEEN_STEPS`], so that what the hub does between runs — a kept sandbox
/// helper puts its slot back to the base once a run is over, under `--isolation user` — is
/// done, and neither the hub's next step nor git's is timed beside it.
fn settle() -> Result<()> {
    std::thread::sleep(BETWEEN_STEPS);
    let synced = Command::new("sync").status()?;
    ensure!(synced.success(), "sync failed: {synced}");
    Ok(())
}

/// What [`settle_disk`] waits for: an `fdatasync` of 4 KiB as fast as this (median of five).
const SETTLED_FSYNC: Duration = Duration::from_millis(1);

/// Before a mode's first step, wait until the disk answers a 4 KiB `fdatasync` in under
/// [`SETTLED_FSYNC`] (at most `limit`, [`Config::settle_limit`]); how long that took, and
/// whether it did.
///
/// [`settle`]'s `sync` returns once the kernel has handed what was written to the disk, but
/// a virtual disk may go on writing a burst — the hundred megabytes of the repository just
/// built — behind its own cache for seconds, and every flush meanwhile waits for it: two
/// runs found a 4 KiB `fdatasync` at 2.9 and 4 ms right before their first run, against
/// 0.1 ms at rest, and that first publish (four flushes) took twice as long as the others.
/// A user's first run does not come seconds after their repository was written. The git
/// steps flush nothing, so they would not show it either way. `probe` is a path beside which
/// the probe's file is made (see [`fsync_probe`]).
fn settle_disk(probe: &Path, limit: Duration) -> Result<(Duration, bool)> {
    let start = Instant::now();
    loop {
        settle()?;
        if fsync_probe(probe)? < SETTLED_FSYNC {
            return Ok((start.elapsed(), true));
        }
        if start.elapsed() >= limit {
            return Ok((start.elapsed(), false));
        }
    }
}

/// How the disk is doing right now: the median of five `fdatasync`s of a 4 KiB write to a
/// file beside the hub's state dir (same filesystem). Taken right after the `sync` before a
/// timed step, it tells a slow step of the hub from a slow disk: on the project's machine an
/// idle disk answers in about 0.1 ms, and one run found it at 4 ms right before its first run
/// (which then took three times as long as in the runs before it).
fn fsync_probe(state: &Path) -> Result<Duration> {
    use std::io::{Seek, Write};
    let path = state.with_file_name("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let block = [0x5au8; 4096];
    let mut samples = Vec::with_capacity(5);
    for _ in 0..5 {
        f.rewind()?;
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        samples.push(t.elapsed());
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(percentile(&samples, 50.0))
}

/// The agent's own start and end stamps, from its output log.
fn agent_stamps(state: &Path, run_id: &str) -> Result<(u128, u128)> {
    let log = state.join("runs").join(format!("{run_id}.log"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let stamp = |tag: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("out {tag} ")))
                .and_then(|n| n.trim().parse::<u128>().ok())
        };
        if let (Some(a), Some(b)) = (stamp("hgbench-start"), stamp("hgbench-end")) {
            return Ok((a, b));
        }
        ensure!(
            Instant::now() < deadline,
            "no hgbench-start/-end lines in {}: {text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start a run with `POST /runs`; when `expect_suggestion`, wait for its `suggestion.ready` on
/// `ws` and time it, else wait for the run to end.
async fn timed_run(
    hub: &Hub,
    http: &Http,
    ws: &mut Ws,
    template: &str,
    expect_suggestion: bool,
) -> Result<(RunFigures, Option<Value>)> {
    settle()?;
    let disk = fsync_probe(&hub.state)?;
    let posted = now_ns();
    let r = http
        .post("/runs", &json!({"prompt": "hgbench", "agent": template}))
        .await?;
    let run_id = r["run_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no run_id in {r}"))?
        .to_string();
    let mut suggestion = None;
    let mut ready_at = None;
    if expect_suggestion {
        let rid = run_id.clone();
        let ev = ws
            .next_matching(
                |v| {
                    (v["type"] == "suggestion.ready" && v["suggestion"]["run_id"] == rid.as_str())
                        || (v["type"] == "suggestion.error" && v["run_id"] == rid.as_str())
                },
                Duration::from_secs(3600),
            )
            .await
            .with_context(|| hub.log_text())?;
        ready_at = ws.last_match.map(|a| {
            a.at.duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        });
        ensure!(
            ev["type"] == "suggestion.ready",
            "run {run_id} failed: {ev}\n{}",
            hub.log_text()
        );
        suggestion = Some(ev["suggestion"].clone());
    }
    let run = http.wait_run(&run_id, Duration::from_secs(3600)).await?;
    let want = if expect_suggestion {
        "ready"
    } else {
        "no_changes"
    };
    ensure!(
        run["status"] == want,
        "run {run_id} ended {} (expected {want}): {run}",
        run["status"]
    );
    let (start, end) = agent_stamps(&hub.state, &run_id)?;
    let hunk_count = suggestion
        .as_ref()
        .and_then(|s| s["hunk_count"].as_u64())
        .unwrap_or(0) as usize;
    Ok((
        RunFigures {
            start: ns_between(posted, start),
            ready: ready_at.map(|r| ns_between(end, r)),
            ready_frame: ready_at.and(ws.last_match),
            hunk_count,
            disk,
        },
        suggestion,
    ))
}

/// `git diff base head` in the hub's checkpoint store (median of `n`), once the hub's work
/// after the run is done ([`settle`]), as before each of the hub's own timed steps. Timed
/// right after the publish, git shared the two cores with whatever the hub and a kept helper
/// do once a run is over (its housekeeping; the slot put back to its base), and the 10-hunk
/// figure ranged from 2.0 to 3.6 ms between runs of the same benchmark.
fn git_diff(ws: &Workspace, state: &Path, s: &Value, n: usize) -> Result<Duration> {
    let git_dir = state.join("checkpoints.git");
    let base = s["base_commit"].as_str().unwrap_or_default().to_string();
    let head = s["run_commit"].as_str().unwrap_or_default().to_string();
    ensure!(
        !base.is_empty() && !head.is_empty(),
        "no base_commit/run_commit in the suggestion"
    );
    settle()?;
    median_of(n, || {
        let mut cmd = git_cmd(&ws.home(), &ws.repo(), &["--git-dir"]);
        cmd.arg(&git_dir).args(["diff", "--no-color", &base, &head]);
        time_git(cmd)
    })
}

/// The hunks of a suggestion: (id, file, diff).
fn hunks_of(s: &Value) -> Result<Vec<(String, String, String)>> {
    s["hunks"]
        .as_array()
        .ok_or_else(|| anyhow!("no hunks in the suggestion"))?
        .iter()
        .map(|h| {
            Ok((
                h["id"].as_str().ok_or_else(|| anyhow!("hunk id"))?.into(),
                h["file"]
                    .as_str()
                    .ok_or_else(|| anyhow!("hunk file"))?
                    .into(),
                h["diff"]
                    .as_str()
                    .ok_or_else(|| anyhow!("hunk diff"))?
                    .into(),
            ))
        })
        .collect()
}

/// `git apply --check` of each hunk alone, in the user's checkout (before it is accepted).
fn apply_checks(ws: &Workspace, hunks: &[(String, String, String)]) -> Result<Vec<Duration>> {
    let dir = ws.path("patches");
    std::fs::create_dir_all(&dir)?;
    let mut out = Vec::with_capacity(hunks.len());
    for (i, (_, file, diff)) in hunks.iter().enumerate() {
        let p = dir.join(format!("{i}.diff"));
        let nl = if diff.ends_with('\n') { "" } else { "\n" };
        std::fs::write(&p, format!("--- a/{file}\n+++ b/{file}\n{diff}{nl}"))?;
        let mut cmd = git_cmd(&ws.home(), &ws.repo(), &["apply", "--check"]);
        cmd.arg(&p);
        out.push(time_git(cmd)?);
    }
    Ok(out)
}

/// Accept suggestion `s` whole with one `feedback_all` over `client`, timed, next to `git apply`
/// of its diff (and of the same with its files fsynced), which is then taken back; every file
/// it changes must then hold the run's version, or this fails.
async fn accept_whole(ws: &Workspace, hub: &Hub, client: &mut Ws, s: &Value) -> Result<Bulk> {
    let git_dir = hub.state.join("checkpoints.git");
    let base = s["base_commit"].as_str().unwrap_or_default().to_string();
    let head = s["run_commit"].as_str().unwrap_or_default().to_string();
    let id = s["id"].as_str().unwrap_or_default().to_string();
    let in_store = |args: &[&str]| -> Result<Vec<u8>> {
        let mut cmd = git_cmd(&ws.home(), &ws.repo(), &["--git-dir"]);
        cmd.arg(&git_dir).args(args);
        let out = cmd.stdin(Stdio::null()).output()?;
        ensure!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out.stdout)
    };
    let files: Vec<String> = String::from_utf8(in_store(&["diff", "--name-only", &base, &head])?)?
        .lines()
        .map(str::to_string)
        .collect();
    let patch = ws.path("whole.diff");
    std::fs::write(
        &patch,
        in_store(&["diff", "--no-color", "--binary", &base, &head])?,
    )?;
    let patch_s = patch.to_string_lossy().into_owned();
    let git_apply = |sync: bool| -> Result<Duration> {
        settle()?;
        let t = Instant::now();
        time_git(git_cmd(&ws.home(), &ws.repo(), &["apply", &patch_s]))?;
        if sync {
            let out = Command::new("sync")
                .current_dir(ws.repo())
                .args(&files)
                .output()?;
            ensure!(
                out.status.success(),
                "sync: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let d = t.elapsed();
        time_git(git_cmd(&ws.home(), &ws.repo(), &["apply", "-R", &patch_s]))?;
        Ok(d)
    };
    let git_apply_plain = git_apply(false)?;
    let git_apply_sync = git_apply(true)?;
    settle()?;
    let disk = fsync_probe(&hub.state)?;
    let journal_before = journal_len(&hub.state);
    let t = Instant::now();
    let r = client
        .call(json!({"type": "feedback_all", "suggestionId": id, "action": "accept"}))
        .await?;
    let accept = t.elapsed();
    let journal = journal_len(&hub.state).saturating_sub(journal_before);
    ensure!(r["success"] == true, "feedback_all: {r}");
    let decided = r["data"]["decided"].as_array().map_or(0, Vec::len);
    let failed = r["data"]["failed"].as_array().map_or(0, Vec::len);
    let hunks = s["hunks"].as_array().map_or(0, Vec::len);
    ensure!(
        decided == hunks && failed == 0,
        "feedback_all decided {decided} of {hunks} hunks, {failed} failed: {r}"
    );
    for f in &files {
        let want = in_store(&["show", &format!("{head}:{f}")])?;
        ensure!(
            std::fs::read(ws.repo().join(f))? == want,
            "{f}: the checkout does not hold the run's version after feedback_all"
        );
    }
    Ok(Bulk {
        hunks,
        files: files.len(),
        accept,
        git_apply: git_apply_plain,
        git_apply_sync,
        journal,
        disk,
    })
}

/// Decide each hunk over `ws`, one at a time; returns each round trip.
async fn decide_each(
    ws: &mut Ws,
    suggestion: &str,
    hunks: &[(String, String, String)],
    action: &str,
    state_after: &str,
) -> Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(hunks.len());
    for (id, _, _) in hunks {
        let t = Instant::now();
        let r = ws.decide(suggestion, id, action).await?;
        out.push(t.elapsed());
        ensure!(r["success"] == true, "{action} {id}: {r}");
        ensure!(
            r["data"]["hunk"]["state"] == state_after,
            "{action} {id} left the hunk {} (expected {state_after}): {r}",
            r["data"]["hunk"]["state"]
        );
    }
    Ok(out)
}

fn check_file(ws: &Workspace, n: usize, want: &str, what: &str) -> Result<()> {
    let path = Layout::path(n);
    let got = ws.read_string(&path)?;
    ensure!(
        got == want,
        "{path}: {what} is not what the checkout holds:\n{got}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The fan-out.

struct Listener {
    hello_seq: u64,
    /// (seq, arrival) of every event.
    arrivals: Vec<(u64, Instant)>,
    resyncs: usize,
}

async fn listen(mut ws: Ws, mut target: tokio::sync::watch::Receiver<u64>) -> Result<Listener> {
    let hello_seq = ws.hello()["seq"].as_u64().unwrap_or(0);
    let mut l = Listener {
        hello_seq,
        arrivals: Vec::new(),
        resyncs: 0,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut max_seen = hello_seq;
    loop {
        let want = *target.borrow();
        if want > 0 && max_seen >= want {
            break;
        }
        tokio::select! {
            msg = ws.stream.next() => {
                let at = Instant::now();
                let msg = msg.ok_or_else(|| anyhow!("a fan-out client's connection closed"))??;
                let Message::Text(text) = msg else { continue };
                let v: Value = serde_json::from_str(&text)?;
                if v["type"] == "resync" {
                    l.resyncs += 1;
                }
                if let Some(seq) = v["seq"].as_u64() {
                    if v["type"] != "response" {
                        l.arrivals.push((seq, at));
                        max_seen = max_seen.max(seq);
                    }
                }
            }
            changed = target.changed() => { changed?; }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    Ok(l)
}

async fn fanout(
    hub: &Hub,
    driver: &mut Ws,
    cfg: &Config,
    suggestion: &str,
    hunks: &[(String, String, String)],
) -> Result<Fanout> {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let mut tasks = Vec::new();
    for _ in 0..cfg.fanout_clients {
        let ws = hub.ws().await?;
        tasks.push(tokio::spawn(listen(ws, rx.clone())));
    }
    let start_seq = driver.call(json!({"type": "ping"})).await?["data"]["seq"]
        .as_u64()
        .unwrap_or(0);
    for d in 0..cfg.fanout_decisions {
        let (id, _, _) = &hunks[(d / 2) % hunks.len()];
        let (action, after) = if d % 2 == 0 {
            ("undo", "pending")
        } else {
            ("accept", "accepted")
        };
        decide_each(
            driver,
            suggestion,
            &[(id.clone(), String::new(), String::new())],
            action,
            after,
        )
        .await?;
    }
    let pong = driver.call(json!({"type": "ping"})).await?;
    let last = pong["data"]["seq"]
        .as_u64()
        .ok_or_else(|| anyhow!("no seq in {pong}"))?;
    tx.send(last)?;
    let mut listeners = Vec::new();
    for t in tasks {
        listeners.push(t.await??);
    }
    // What every client should have got: the hub's own record of the events.
    let replay = driver
        .call(json!({"type": "replay", "since": start_seq}))
        .await?;
    let mut expected: BTreeSet<u64> = replay["data"]["events"]
        .as_array()
        .map(|evs| evs.iter().filter_map(|e| e["seq"].as_u64()).collect())
        .unwrap_or_default();
    if replay["data"]["complete"] != true {
        // The replay buffer no longer reaches back: fall back to what any client saw.
        for l in &listeners {
            expected.extend(l.arrivals.iter().map(|(s, _)| *s));
        }
    }
    expected.retain(|s| *s > start_seq && *s <= last);
    let mut first: HashMap<u64, Instant> = HashMap::new();
    for l in &listeners {
        for (seq, at) in &l.arrivals {
            first
                .entry(*seq)
                .and_modify(|f| *f = (*f).min(*at))
                .or_insert(*at);
        }
    }
    let mut out = Fanout {
        clients: listeners.len(),
        events: expected.len(),
        ..Fanout::default()
    };
    for l in &listeners {
        out.resyncs += l.resyncs;
        let got: BTreeSet<u64> = l.arrivals.iter().map(|(s, _)| *s).collect();
        if l.resyncs == 0 {
            out.lost += expected
                .iter()
                .filter(|s| **s > l.hello_seq && !got.contains(s))
                .count();
        }
        for (seq, at) in &l.arrivals {
            if !expected.contains(seq) {
                continue;
            }
            let d = at.duration_since(first[seq]);
            // The first client to get an event is the reference, not a sample.
            if !d.is_zero() {
                out.delays.push(d);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// One isolation mode.

/// What the benchmark's hubs leave on the disk — their state dirs, and under `--isolation
/// user` their sandboxes in the sandbox user's home — removed once every mode is done (or one
/// failed), not as each hub stops. Those are tens of thousands of files, and on some
/// filesystems making files is slow for minutes after many were removed (ext4 without a
/// journal skips recently freed inodes). In one benchmark run that came right after such
/// removals, the two first runs took 5.1 and 2.4 s, and `git worktree add` of the same files
/// 3.8 and 8.3 s; 0.5–1 s was usual for the first run.
#[derive(Default)]
struct Leftovers(Vec<(PathBuf, Option<String>)>);

impl Leftovers {
    /// The state dir `state` of a hub of `mode`, and its sandboxes if it ran under `user`.
    fn add(&mut self, state: &Path, cfg: &Config, mode: &str) {
        let user = cfg.isolation_user.clone().filter(|_| mode == "user");
        self.0.push((state.to_path_buf(), user));
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for (state, user) in self.0.drain(..) {
            if let (Some(user), Some(name)) = (user, state.file_name()) {
                remove_user_sandboxes(&user, &name.to_string_lossy());
            }
            let _ = std::fs::remove_dir_all(&state);
        }
    }
}

/// With [`Config::keep_logs`], copy a finished hub's log and its state dir's run logs there,
/// as `<name>.log` and `<name>-runs/`.
fn keep_logs(cfg: &Config, log: &Path, state: &Path, name: &str) -> Result<()> {
    let Some(keep) = &cfg.keep_logs else {
        return Ok(());
    };
    let runs = keep.join(format!("{name}-runs"));
    std::fs::create_dir_all(&runs).with_context(|| format!("creating {}", runs.display()))?;
    let copy = |from: &Path, to: &Path| {
        std::fs::copy(from, to)
            .map(drop)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))
    };
    copy(log, &keep.join(format!("{name}.log")))?;
    if let Ok(entries) = std::fs::read_dir(state.join("runs")) {
        for e in entries.flatten() {
            copy(&e.path(), &runs.join(e.file_name()))?;
        }
    }
    Ok(())
}

fn remove_user_sandboxes(user: &str, state_name: &str) {
    // Under --isolation user the sandboxes live in the sandbox user's home, named after the
    // state dir; a root benchmark removes what it left there.
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let Ok(Some(u)) = nix::unistd::User::from_name(user) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(u.dir.join("sandboxes")) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{state_name}-"))
        {
            // The hub's kept sandbox helper may still be putting the slot back as its hub goes
            // away, making files while they are removed: try again until it has stopped.
            let path = e.path();
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::fs::remove_dir_all(&path).is_err()
                && path.exists()
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            if path.exists() {
                progress(format!("could not remove {}", path.display()));
            }
        }
    }
}

/// What the modes of one benchmark run share.
struct Bench<'a> {
    cfg: &'a Config,
    layout: &'a Layout,
    parts: &'a Parts,
    ws: &'a Workspace,
    leftovers: Leftovers,
}

async fn run_mode(bench: &mut Bench<'_>, mode: &str, extra: &[&str]) -> Result<ModeFigures> {
    let (cfg, layout, parts, ws) = (bench.cfg, bench.layout, bench.parts, bench.ws);
    let tag = format!("hgbench-{}-{mode}", std::process::id());
    let state_a = ws.path(&format!("{tag}-a"));
    let settled = settle_disk(&state_a, cfg.settle_limit)?;
    let log = cfg.hub_log.iter().map(|f| ("HUNKGATE_LOG", f.as_ref()));
    let accel = cfg.accel_off.iter();
    let env: Vec<(&str, &std::ffi::OsStr)> = log
        .chain(accel.map(|a| ("HUNKGATE_ACCEL_OFF", a.as_ref())))
        .collect();
    let hub = Hub::start_in(
        &ws.repo(),
        &ws.home(),
        &state_a,
        &ws.path(&format!("{tag}-a.log")),
        extra,
        &env,
    )?;
    let log_a = ws.path(&format!("{tag}-a.log"));
    let result = match review_hub(cfg, layout, parts, ws, &hub, mode).await {
        Ok(mut figures) => {
            progress(format!(
                "[{mode}] restart: the hub killed and started again on its state"
            ));
            restart(ws, hub, &log_a, extra, &env).await.map(|r| {
                figures.restart = r;
                figures
            })
        }
        Err(e) => {
            drop(hub);
            Err(e)
        }
    };
    bench.leftovers.add(&state_a, cfg, mode);
    keep_logs(cfg, &log_a, &state_a, &format!("{mode}-a"))?;
    let mut warnings = hub_warnings(&log_a);
    let mut figures = result?;
    figures.settled = settled;

    progress(format!(
        "[{mode}] memory: a fresh hub, one run publishing {} suggestions × {} hunks",
        cfg.rss_suggestions, cfg.rss_hunks
    ));
    let state_b = ws.path(&format!("{tag}-b"));
    let hub = Hub::start_in(
        &ws.repo(),
        &ws.home(),
        &state_b,
        &ws.path(&format!("{tag}-b.log")),
        extra,
        &env,
    )?;
    let loaded = loaded_memory(cfg, layout, parts, &hub).await;
    drop(hub);
    bench.leftovers.add(&state_b, cfg, mode);
    keep_logs(
        cfg,
        &ws.path(&format!("{tag}-b.log")),
        &state_b,
        &format!("{mode}-b"),
    )?;
    warnings.extend(hub_warnings(&ws.path(&format!("{tag}-b.log"))));
    let (mem, suggestions, hunks) = loaded?;
    figures.loaded = mem;
    figures.loaded_suggestions = suggestions;
    figures.loaded_hunks = hunks;
    figures.warnings = warnings;
    Ok(figures)
}

async fn review_hub(
    cfg: &Config,
    layout: &Layout,
    parts: &Parts,
    ws: &Workspace,
    hub: &Hub,
    mode: &str,
) -> Result<ModeFigures> {
    let pid = hub.child.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = memory_of(pid)?;
    let http = Http::new(hub)?;
    let mut client = hub.ws().await?;

    // Runs.
    progress(format!(
        "[{mode}] run 1 (first, cold store): {} files × {} hunks",
        cfg.agent_files, cfg.hunks_per_file
    ));
    let big_files: Vec<String> = parts.agent.iter().map(|n| Layout::path(*n)).collect();
    let big_template = sh_template(&format!(
        "sed -i{} {}",
        layout.sed_args(cfg.hunks_per_file),
        big_files.join(" ")
    ));
    let (first_run, big) = timed_run(hub, &http, &mut client, &big_template, true).await?;
    let big = big.ok_or_else(|| anyhow!("no suggestion"))?;
    ensure!(
        first_run.hunk_count == cfg.agent_files * cfg.hunks_per_file,
        "the big suggestion has {} hunks, expected {}",
        first_run.hunk_count,
        cfg.agent_files * cfg.hunks_per_file
    );
    let stash = || {
        settle()?;
        time_git(git_cmd(&ws.home(), &ws.repo(), &["stash", "create"]))
    };
    let stash_first = stash()?;
    let checkout_first = git_checkout(ws, mode)?;
    let stash_warm = median_of(cfg.git_samples, stash)?;
    let status_warm = median_of(cfg.git_samples, || {
        settle()?;
        time_git(git_cmd(&ws.home(), &ws.repo(), &["status", "--porcelain"]))
    })?;
    let diff_big = git_diff(ws, &hub.state, &big, cfg.git_samples)?;

    progress(format!(
        "[{mode}] run 2 (warm): 1 file × {} hunks",
        cfg.small_hunks
    ));
    let small_template = sh_template(&format!(
        "sed -i{} {}",
        layout.sed_args(cfg.small_hunks),
        Layout::path(parts.small)
    ));
    let (run2, small) = timed_run(hub, &http, &mut client, &small_template, true).await?;
    let small = small.ok_or_else(|| anyhow!("no suggestion"))?;
    ensure!(
        run2.hunk_count == cfg.small_hunks,
        "the small suggestion has {} hunks, expected {}",
        run2.hunk_count,
        cfg.small_hunks
    );
    let diff_small = git_diff(ws, &hub.state, &small, cfg.git_samples)?;
    let agent_exit = agent_exit(AGENT_EXIT_SAMPLES)?;
    progress(format!(
        "[{mode}] run 3 (warm): an agent that changes nothing"
    ));
    let (run3, _) = timed_run(hub, &http, &mut client, &sh_template("true"), false).await?;
    let mut sample_runs = Vec::new();
    for (i, &file) in parts.samples.iter().enumerate() {
        progress(format!(
            "[{mode}] warm sample {} of {}: 1 more file × {} hunks",
            i + 1,
            parts.samples.len(),
            cfg.small_hunks
        ));
        let template = sh_template(&format!(
            "sed -i{} {}",
            layout.sed_args(cfg.small_hunks),
            Layout::path(file)
        ));
        let (run, _) = timed_run(hub, &http, &mut client, &template, true).await?;
        ensure!(
            run.hunk_count == cfg.small_hunks,
            "warm sample {} has {} hunks, expected {}",
            i + 1,
            run.hunk_count,
            cfg.small_hunks
        );
        sample_runs.push(run);
    }

    // The small suggestion, accepted `small_rounds` times.
    let small_id = small["id"].as_str().unwrap_or_default().to_string();
    let small_hunks = hunks_of(&small)?;
    let apply_check_small = apply_checks(ws, &small_hunks)?;
    progress(format!(
        "[{mode}] accepting the {}-hunk suggestion {} times",
        cfg.small_hunks, cfg.small_rounds
    ));
    let mut accept_small = Vec::new();
    let mut journal_per_decision_small = 0.0;
    let mut disk_small = Duration::ZERO;
    for round in 0..cfg.small_rounds {
        settle()?;
        if round == 0 {
            disk_small = fsync_probe(&hub.state)?;
        }
        let before = journal_len(&hub.state);
        accept_small
            .extend(decide_each(&mut client, &small_id, &small_hunks, "accept", "accepted").await?);
        if round == 0 {
            journal_per_decision_small =
                journal_len(&hub.state).saturating_sub(before) as f64 / small_hunks.len() as f64;
        }
        check_file(
            ws,
            parts.small,
            &layout.agent(parts.small, cfg.small_hunks),
            "the small agent's version",
        )?;
        if round + 1 < cfg.small_rounds {
            decide_each(&mut client, &small_id, &small_hunks, "undo", "pending").await?;
            check_file(ws, parts.small, &layout.base(parts.small), "the base")?;
        }
    }

    // The big review.
    let big_id = big["id"].as_str().unwrap_or_default().to_string();
    let big_hunks = hunks_of(&big)?;
    progress(format!(
        "[{mode}] git apply --check of each of the {} hunks",
        big_hunks.len()
    ));
    let apply_check_big = apply_checks(ws, &big_hunks)?;
    progress(format!(
        "[{mode}] accepting the {} hunks one at a time",
        big_hunks.len()
    ));
    settle()?;
    let disk_big = fsync_probe(&hub.state)?;
    let journal_before_review = journal_len(&hub.state);
    let t = Instant::now();
    let accept_big = decide_each(&mut client, &big_id, &big_hunks, "accept", "accepted").await?;
    let review_time = t.elapsed();
    let journal_after_review = journal_len(&hub.state);
    let mut files_verified = 0;
    for &n in &parts.agent {
        check_file(
            ws,
            n,
            &layout.agent(n, cfg.hunks_per_file),
            "the agent's version",
        )?;
        files_verified += 1;
    }
    for &n in &parts.dirty {
        check_file(ws, n, &layout.user_edit(n), "the user's edit")?;
        files_verified += 1;
    }
    check_file(
        ws,
        parts.small,
        &layout.agent(parts.small, cfg.small_hunks),
        "the small agent's version",
    )?;
    files_verified += 1;

    progress(format!(
        "[{mode}] fan-out: {} clients, {} decisions",
        cfg.fanout_clients, cfg.fanout_decisions
    ));
    settle()?;
    let fanout = fanout(hub, &mut client, cfg, &small_id, &small_hunks).await?;

    // What an idle hub that has worked holds: the background work after each run (memory
    // returned) is done by the pause in `settle`, and the hub gives back what its
    // last decisions and connections freed once it has been quiet for 2 s.
    tokio::time::sleep(AT_REST_AFTER).await;
    settle()?;
    let at_rest = memory_of(pid)?;

    let mut warm_bigs = Vec::new();
    let mut diff_big_warm = Vec::new();
    let mut last_big = Value::Null;
    for k in 0..cfg.warm_big_samples {
        progress(format!(
            "[{mode}] run {} (warm): {} files × {} hunks again, {}",
            4 + k,
            cfg.agent_files,
            cfg.hunks_per_file,
            match k {
                0 => "the big agent's change undone",
                _ => "the same lines rewritten once more",
            }
        ));
        let template = sh_template(&format!(
            "sed -i{} {}",
            layout.again_sed_args(cfg.hunks_per_file, k),
            big_files.join(" ")
        ));
        let (run, again) = timed_run(hub, &http, &mut client, &template, true).await?;
        let again = again.ok_or_else(|| anyhow!("no suggestion"))?;
        ensure!(
            run.hunk_count == first_run.hunk_count,
            "warm big run {} has {} hunks, expected {}",
            4 + k,
            run.hunk_count,
            first_run.hunk_count
        );
        diff_big_warm.push(git_diff(ws, &hub.state, &again, cfg.git_samples)?);
        warm_bigs.push(run);
        last_big = again;
    }
    let warm_big = warm_bigs.remove(0);

    progress(format!(
        "[{mode}] accepting the last run's {} hunks at once (feedback_all)",
        first_run.hunk_count
    ));
    let bulk = accept_whole(ws, hub, &mut client, &last_big).await?;

    let mean_len = |h: &[(String, String, String)]| {
        h.iter().map(|(_, _, d)| d.len()).sum::<usize>() as f64 / h.len().max(1) as f64
    };
    Ok(ModeFigures {
        mode: mode.to_string(),
        settled: (Duration::ZERO, true),
        idle,
        first_run,
        warm_big,
        warm_big_more: warm_bigs,
        at_rest,
        warm_runs: vec![run2, run3],
        sample_runs,
        stash_first,
        checkout_first,
        stash_warm,
        status_warm,
        diff_big,
        diff_big_warm,
        diff_small,
        agent_exit,
        decisions_per_sec: accept_big.len() as f64 / review_time.as_secs_f64(),
        bulk,
        accept_small,
        accept_big,
        apply_check_small,
        apply_check_big,
        diff_bytes_small: mean_len(&small_hunks),
        diff_bytes_big: mean_len(&big_hunks),
        journal_per_decision_small,
        journal_per_decision_big: journal_after_review.saturating_sub(journal_before_review) as f64
            / big_hunks.len().max(1) as f64,
        journal_before_review,
        journal_after_review,
        files_verified,
        fanout,
        restart: Restart::default(),
        loaded: Memory::default(),
        loaded_suggestions: 0,
        loaded_hunks: 0,
        disk_small,
        disk_big,
        warnings: Vec::new(),
    })
}

/// The `WARN` and `ERROR` lines of a hub's log, but the start's checks of its environment
/// (`hunkgate::config::checks`: said once, of the machine, not of a step): a kept sandbox
/// helper dismissed, a watch that lost track, a fallback. At most 20, each cut at 300 bytes.
fn hub_warnings(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| {
            (l.contains(" WARN ") || l.contains(" ERROR ")) && !l.contains("config::checks")
        })
        .take(20)
        .map(|l| {
            let mut end = l.len().min(300);
            while !l.is_char_boundary(end) {
                end -= 1;
            }
            l[..end].to_string()
        })
        .collect()
}

/// Every suggestion `hub` gives (`GET /suggestions/{id}`, whole: its hunks, their diffs and
/// states), by id.
async fn suggestions_of(hub: &Hub) -> Result<BTreeMap<String, Value>> {
    let http = Http::new(hub)?;
    let list = http.get("/suggestions").await?;
    let mut out = BTreeMap::new();
    for s in list["suggestions"].as_array().into_iter().flatten() {
        let id = s["id"].as_str().unwrap_or_default();
        out.insert(
            id.to_string(),
            http.get(&format!("/suggestions/{id}")).await?,
        );
    }
    Ok(out)
}

/// Where a suggestion's view `now` differs from `was`: its top-level fields, and for its hunks
/// the first few that differ, by id, with their state before and after.
fn differences(was: &Value, now: &Value) -> String {
    let (Some(a), Some(b)) = (was.as_object(), now.as_object()) else {
        return format!("{now} (was {was})");
    };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (x, y) = (&a.get(k), &b.get(k));
        if x == y {
            continue;
        }
        if k == "hunks" {
            let none = Vec::new();
            let (hx, hy) = (
                x.and_then(Value::as_array).unwrap_or(&none),
                y.and_then(Value::as_array).unwrap_or(&none),
            );
            let differ: Vec<String> = hx
                .iter()
                .zip(hy)
                .filter(|(p, q)| p != q)
                .take(5)
                .map(|(p, q)| format!("{} {} → {}", p["id"], p["state"], q["state"]))
                .collect();
            out.push(format!(
                "hunks: {} then {}; differing: {}",
                hx.len(),
                hy.len(),
                differ.join(", ")
            ));
        } else {
            out.push(format!("{k}: {x:?} → {y:?}"));
        }
    }
    out.join("; ")
}

/// Kill `hub` (`kill -9`, as a crash would) at rest after its work, start a hub
/// on its state dir again, and time it until it serves; then check that it gives back every
/// suggestion the killed hub gave, each one whole, and read its RSS at rest.
async fn restart(
    ws: &Workspace,
    mut hub: Hub,
    log: &Path,
    extra: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Result<Restart> {
    let before = suggestions_of(&hub).await?;
    hub.kill9();
    let state = hub.state.clone();
    drop(hub);
    settle()?;
    let journal = journal_len(&state);
    let t = Instant::now();
    let hub = Hub::start_in(&ws.repo(), &ws.home(), &state, log, extra, env)?;
    let serving = t.elapsed();
    let after = suggestions_of(&hub).await?;
    let ids = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    ensure!(
        ids(&before) == ids(&after),
        "the restarted hub gives back the suggestions {:?}, the killed one gave {:?}",
        ids(&after),
        ids(&before)
    );
    for (id, was) in &before {
        let now = &after[id];
        ensure!(
            now == was,
            "the restarted hub gives suggestion {id} back otherwise: {}",
            differences(was, now)
        );
    }
    let hunks = after
        .values()
        .map(|s| s["hunks"].as_array().map_or(0, Vec::len))
        .sum();
    tokio::time::sleep(AT_REST_AFTER).await;
    settle()?;
    Ok(Restart {
        serving,
        journal,
        suggestions: after.len(),
        hunks,
        memory: memory_of(hub.child.id())?,
    })
}

/// One run whose agent publishes `rss_suggestions` suggestions through `/agent/publish`; the
/// hub's memory once they are all there.
async fn loaded_memory(
    cfg: &Config,
    layout: &Layout,
    parts: &Parts,
    hub: &Hub,
) -> Result<(Memory, usize, usize)> {
    let http = Http::new(hub)?;
    let per = cfg.rss_files_per_suggestion();
    let script = format!(
        "i=0; while [ $i -lt {s} ]; do \
           paths=; json=; k=0; \
           while [ $k -lt {per} ]; do \
             n=$(( (({first} + i*{per} + k) * {stride}) % {files} )); \
             p=$(printf d%03d/f%05d.txt $((n/100)) $n); \
             paths=\"$paths $p\"; json=\"$json,\\\"$p\\\"\"; k=$((k+1)); \
           done; \
           sed -i{sed} $paths; \
           curl -sS -f -o /dev/null -X POST -H \"Authorization: Bearer $HUNKGATE_AGENT_TOKEN\" \
             -H \"Content-Type: application/json\" \
             --data-binary \"{{\\\"description\\\":\\\"hgbench $i\\\",\\\"files\\\":[${{json#,}}]}}\" \
             \"$HUNKGATE_URL/agent/publish\"; \
           i=$((i+1)); \
         done",
        s = cfg.rss_suggestions,
        first = parts.rss_first_slot,
        stride = layout.stride,
        files = layout.files,
        sed = layout.sed_args(cfg.hunks_per_file),
    );
    let r = http
        .post(
            "/runs",
            &json!({"prompt": "hgbench memory", "agent": sh_template(&script)}),
        )
        .await?;
    let run_id = r["run_id"].as_str().unwrap_or_default().to_string();
    let run = http.wait_run(&run_id, Duration::from_secs(3600)).await?;
    ensure!(
        run["status"] == "ready",
        "the publishing run ended {}: {run}\n{}",
        run["status"],
        hub.log_text()
    );
    let list = http.get("/suggestions").await?;
    let sugs = list["suggestions"].as_array().cloned().unwrap_or_default();
    let hunks: usize = sugs
        .iter()
        .map(|s| s["hunk_count"].as_u64().unwrap_or(0) as usize)
        .sum();
    ensure!(
        sugs.len() == cfg.rss_suggestions && hunks == cfg.rss_suggestions * cfg.rss_hunks,
        "expected {} suggestions × {} hunks, the hub has {} suggestions, {hunks} hunks",
        cfg.rss_suggestions,
        cfg.rss_hunks,
        sugs.len()
    );
    // Read at rest, as the other hub's after its work: past the 2 s of quiet after which the
    // hub gives back what the run freed and lets go of the pack maps its reads left.
    tokio::time::sleep(AT_REST_AFTER).await;
    Ok((memory_of(hub.child.id())?, sugs.len(), hunks))
}

/// Whether `--isolation user` can run with `user`, from `hunkgate setup --check`.
fn user_mode_ready(cfg: &Config, user: &str) -> Result<(), String> {
    if nix::unistd::User::from_name(user).ok().flatten().is_none() {
        return Err(format!(
            "the sandbox user {user} does not exist (create it with `hunkgate setup --install`, \
             or name another with HUNKGATE_BENCH_SANDBOX_USER)"
        ));
    }
    let out = Command::new(&cfg.bin)
        .args(["setup", "--check", "--user", user])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {} setup --check: {e}", cfg.bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`hunkgate setup --check --user {user}` reports: {}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Run the whole benchmark.
pub async fn run(cfg: &Config) -> Result<Report> {
    cfg.validate()?;
    ensure!(
        cfg.bin.exists(),
        "{} is missing: build it (`cargo build --release -p hunkgate --bins`)",
        cfg.bin.display()
    );
    let layout = Layout::new(cfg.files, cfg.lines);
    let parts = parts(cfg, &layout);
    progress(format!(
        "building the repository: {} files × {} lines, {} with uncommitted edits",
        cfg.files, cfg.lines, cfg.dirty
    ));
    let t = Instant::now();
    let ws = build_repository(cfg, &layout, &parts)?;
    let setup = t.elapsed();
    let mut bench = Bench {
        cfg,
        layout: &layout,
        parts: &parts,
        ws: &ws,
        leftovers: Leftovers::default(),
    };
    let mut modes = Vec::new();
    let mut skipped = Vec::new();
    if cfg.isolation_none {
        modes.push(run_mode(&mut bench, "none", &["--isolation", "none"]).await?);
    }
    if let Some(user) = &cfg.isolation_user {
        match user_mode_ready(cfg, user) {
            Ok(()) => {
                // The checkout is back where it was: the earlier mode's accepts are undone by
                // restoring the files (the same content, new mtimes).
                restore(&ws, &layout, &parts)?;
                let extra = ["--isolation", "user", "--sandbox-user", user];
                modes.push(run_mode(&mut bench, "user", &extra).await?);
            }
            Err(why) => {
                progress(format!("--isolation user skipped: {why}"));
                skipped.push(("user".to_string(), why));
            }
        }
    }
    drop(bench);
    Ok(Report {
        cfg: cfg.clone(),
        modes,
        skipped,
        setup,
    })
}

/// Put the checkout back to the committed files plus the user's edits.
fn restore(ws: &Workspace, layout: &Layout, parts: &Parts) -> Result<()> {
    for &n in parts.agent.iter().chain(std::iter::once(&parts.small)) {
        ws.write(&Layout::path(n), layout.base(n).as_bytes())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The table.

/// The median of `samples` and their range: "4.1 ms (3.2–6.0 ms)".
fn spread(samples: &[Duration]) -> String {
    let lo = samples.iter().min().copied().unwrap_or_default();
    let hi = samples.iter().max().copied().unwrap_or_default();
    format!("{} ({}–{})", ms(percentile(samples, 50.0)), ms(lo), ms(hi))
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1e3)
    } else if ms >= 1_000.0 {
        format!("{:.2} s", ms / 1e3)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        return "–".into();
    }
    let r = a.as_secs_f64() / b.as_secs_f64();
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.2}×")
    }
}

/// The median of `hub[i] / git[i]`, with the lowest and highest: each hub figure against the
/// git figure of its own moment.
fn paired_ratio(hub: &[Duration], git: &[Duration]) -> String {
    let mut ratios: Vec<f64> = hub
        .iter()
        .zip(git)
        .filter(|(_, g)| !g.is_zero())
        .map(|(h, g)| h.as_secs_f64() / g.as_secs_f64())
        .collect();
    if ratios.is_empty() {
        return "–".into();
    }
    ratios.sort_by(f64::total_cmp);
    // The same rank as [`percentile`]'s median.
    let median = ratios[ratios.len().div_ceil(2) - 1];
    format!(
        "{median:.2}× (paired: each run's own {:.2}×–{:.2}×)",
        ratios[0],
        ratios[ratios.len() - 1]
    )
}

fn bytes(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.3} GB", n / 1e9)
    } else if n >= 1024.0 * 1024.0 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 10_000.0 {
        format!("{:.0} KB", n / 1e3)
    } else {
        format!("{} B", thousands(n.round() as usize))
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    /// The git cell of a publish row: `git diff` of the two commits (the issue's yardstick)
    /// and `git status` of the checkout (what a read-back that looks at every file compares
    /// with).
    fn diff_and_status(&self, m: &ModeFigures, diff: Duration) -> String {
        format!(
            "`git diff base head` {} (`git status` {})",
            ms(diff),
            ms(m.status_warm)
        )
    }

    /// The markdown table of one mode: step | hunkgate | git | ratio | target.
    pub fn table(&self, m: &ModeFigures) -> String {
        let c = &self.cfg;
        let big = thousands(c.agent_files * c.hunks_per_file);
        let small = thousands(c.small_hunks);
        let mut rows: Vec<[String; 5]> = Vec::new();
        let mut row = |a: String, b: String, g: String, r: String, t: &str| {
            rows.push([a, b, g, r, t.to_string()])
        };
        row(
            "`POST /runs` → agent started, first run (cold store)".into(),
            ms(m.first_run.start),
            format!(
                "`git stash create` {} + `git worktree add` {} (first)",
                ms(m.stash_first),
                ms(m.checkout_first)
            ),
            ratio(m.first_run.start, m.stash_first + m.checkout_first),
            "≤ 3 s",
        );
        let warm: Vec<String> = m.warm_runs.iter().map(|r| ms(r.start)).collect();
        let mut warm_ratio: Vec<String> = m
            .warm_runs
            .iter()
            .map(|r| ratio(r.start, m.stash_warm))
            .collect();
        let starts: Vec<Duration> = m
            .warm_runs
            .iter()
            .chain(&m.sample_runs)
            .map(|r| r.start)
            .collect();
        let mut warm = warm.join(", ");
        let mut label = "`POST /runs` → agent started, warm (runs 2 and 3)".to_string();
        if !m.sample_runs.is_empty() {
            let median = percentile(&starts, 50.0);
            warm.push_str(&format!("; median {}", spread(&starts)));
            warm_ratio.push(format!("median {}", ratio(median, m.stash_warm)));
            label = format!(
                "`POST /runs` → agent started, warm (runs 2 and 3; median of all {} warm runs)",
                starts.len()
            );
        }
        row(
            label,
            warm,
            format!("`git stash create` {} (warm, median)", ms(m.stash_warm)),
            warm_ratio.join("; "),
            "≤ 1× git",
        );
        let small_readies: Vec<Duration> = m
            .warm_runs
            .iter()
            .take(1)
            .chain(&m.sample_runs)
            .filter_map(|r| r.ready)
            .collect();
        // What the client then spends parsing a big event is its own: git's figure, too, ends
        // where its output is written.
        let parsed = |r: &RunFigures| match r.ready_frame {
            Some(f) => format!(
                "; the event {}, parsed by the client in {}",
                bytes(f.bytes as f64),
                ms(f.parse)
            ),
            None => String::new(),
        };
        // Each warm big publish beside the `git diff` timed right after it.
        let (big_readies, big_diffs): (Vec<Duration>, Vec<Duration>) = std::iter::once(&m.warm_big)
            .chain(&m.warm_big_more)
            .zip(&m.diff_big_warm)
            .filter_map(|(r, d)| r.ready.map(|ready| (ready, *d)))
            .unzip();
        let publishes = [
            (
                format!(
                    "agent exit → `suggestion.ready` at a WebSocket client, {big} hunks{}",
                    parsed(&m.first_run)
                ),
                m.first_run.ready,
                None,
                std::slice::from_ref(&m.diff_big),
            ),
            (
                match big_readies.len() {
                    1 => format!(
                        "agent exit → `suggestion.ready`, {big} hunks, warm (run 4){}",
                        parsed(&m.warm_big)
                    ),
                    n => format!(
                        "agent exit → `suggestion.ready`, {big} hunks, warm (median of {n} runs){}",
                        parsed(&m.warm_big)
                    ),
                },
                (!big_readies.is_empty()).then(|| percentile(&big_readies, 50.0)),
                (big_readies.len() > 1).then_some(&big_readies),
                &big_diffs[..],
            ),
            (
                format!(
                    "{}; of it, the agent's own exit after its end stamp {} (median of {AGENT_EXIT_SAMPLES}, `sh -c` of its last command)",
                    match small_readies.len() {
                        1 => format!("agent exit → `suggestion.ready`, {small} hunks"),
                        n => format!(
                            "agent exit → `suggestion.ready`, {small} hunks (median of {n} warm runs)"
                        ),
                    },
                    ms(m.agent_exit)
                ),
                (!small_readies.is_empty()).then(|| percentile(&small_readies, 50.0)),
                (small_readies.len() > 1).then_some(&small_readies),
                std::slice::from_ref(&m.diff_small),
            ),
        ];
        for (label, ready, samples, diffs) in publishes {
            let Some(r) = ready else { continue };
            let shown = match samples {
                Some(samples) => spread(samples),
                None => ms(r),
            };
            let (git, by) = match samples {
                // One `git diff` per publish, timed right after it: the ratio is the median of
                // each publish's own, its range beside it.
                Some(samples) if diffs.len() == samples.len() => (
                    format!(
                        "`git diff base head` {}, each right after its run (`git status` {})",
                        spread(diffs),
                        ms(m.status_warm)
                    ),
                    paired_ratio(samples, diffs),
                ),
                _ => {
                    let diff = percentile(diffs, 50.0);
                    (self.diff_and_status(m, diff), ratio(r, diff))
                }
            };
            row(
                label,
                shown,
                git,
                format!("{by} ({} `git status`)", ratio(r, m.status_warm)),
                "≤ 1× git (stretch 0.5×)",
            );
        }
        for (label, acc, chk) in [
            (&small, &m.accept_small, &m.apply_check_small),
            (&big, &m.accept_big, &m.apply_check_big),
        ] {
            let p50 = percentile(acc, 50.0);
            let p99 = percentile(acc, 99.0);
            let g50 = percentile(chk, 50.0);
            row(
                format!(
                    "WebSocket `accept` of one hunk → response, {label}-hunk suggestion ({} accepts)",
                    thousands(acc.len())
                ),
                format!("p50 {}, p99 {}", ms(p50), ms(p99)),
                format!("`git apply --check` of that hunk, p50 {}", ms(g50)),
                format!("{} (p50), {} (p99)", ratio(p50, g50), ratio(p99, g50)),
                "p50 ≤ 2 ms, p99 ≤ 10 ms",
            );
        }
        row(
            format!("single-hunk decisions/s, one client ({big} accepts in a row)"),
            format!("{:.0}/s", m.decisions_per_sec),
            String::new(),
            String::new(),
            "≥ 300/s",
        );
        let b = &m.bulk;
        row(
            format!(
                "WebSocket `feedback_all` accept of a whole {}-hunk suggestion ({} files) → response; `state.jsonl` grew {}",
                thousands(b.hunks),
                thousands(b.files),
                bytes(b.journal as f64)
            ),
            ms(b.accept),
            format!(
                "`git apply` of its diff {}; with `sync` of its {} files {}",
                ms(b.git_apply),
                b.files,
                ms(b.git_apply_sync)
            ),
            format!(
                "{}; {} with `sync`",
                ratio(b.accept, b.git_apply),
                ratio(b.accept, b.git_apply_sync)
            ),
            "",
        );
        for (label, per, diff) in [
            (&small, m.journal_per_decision_small, m.diff_bytes_small),
            (&big, m.journal_per_decision_big, m.diff_bytes_big),
        ] {
            row(
                format!("`state.jsonl` bytes per accept, {label}-hunk suggestion"),
                bytes(per),
                format!("(the hunk's diff: {})", bytes(diff)),
                String::new(),
                &format!("≤ 1 KiB + 2× diff = {}", bytes(1024.0 + 2.0 * diff)),
            );
        }
        row(
            format!("`state.jsonl` after the whole {big}-hunk review (and the {} runs and {small}-hunk rounds before it)", 3 + m.sample_runs.len()),
            format!(
                "{} (the review added {})",
                bytes(m.journal_after_review as f64),
                bytes(
                    m.journal_after_review
                        .saturating_sub(m.journal_before_review) as f64
                )
            ),
            String::new(),
            String::new(),
            "< 5 MB",
        );
        row(
            "hub RSS, idle (fresh start)".into(),
            format!(
                "{} (peak {}; {} of it anonymous)",
                mib(m.idle.rss_kib),
                mib(m.idle.hwm_kib),
                mib(m.idle.anon_kib)
            ),
            String::new(),
            String::new(),
            "≤ 15 MiB",
        );
        row(
            format!(
                "hub RSS at rest after its work: runs 1–3, {} warm samples, both reviews and the fan-out",
                m.sample_runs.len()
            ),
            format!(
                "{} ({} of it anonymous)",
                mib(m.at_rest.rss_kib),
                mib(m.at_rest.anon_kib)
            ),
            String::new(),
            String::new(),
            "≤ 15 MiB (idle)",
        );
        let r = &m.restart;
        row(
            format!(
                "hub killed (`kill -9`) after all its work and started again: serving its {} \
                 suggestions ({} hunks, each checked against the killed hub's) from a {} journal",
                thousands(r.suggestions),
                thousands(r.hunks),
                bytes(r.journal as f64)
            ),
            format!(
                "{}; then at rest {} (peak {}; {} of it anonymous)",
                ms(r.serving),
                mib(r.memory.rss_kib),
                mib(r.memory.hwm_kib),
                mib(r.memory.anon_kib)
            ),
            String::new(),
            String::new(),
            "",
        );
        row(
            format!(
                "hub RSS with {} suggestions × {} hunks",
                thousands(m.loaded_suggestions),
                thousands(
                    m.loaded_hunks
                        .checked_div(m.loaded_suggestions)
                        .unwrap_or_default()
                )
            ),
            format!(
                "{} (peak {}; {} of it anonymous)",
                mib(m.loaded.rss_kib),
                mib(m.loaded.hwm_kib),
                mib(m.loaded.anon_kib)
            ),
            String::new(),
            String::new(),
            "≤ 64 MiB",
        );
        let f = &m.fanout;
        row(
            format!(
                "fan-out to {} WebSocket clients: delay after the first client ({} events)",
                f.clients, f.events
            ),
            format!(
                "p50 {}, p99 {}",
                ms(percentile(&f.delays, 50.0)),
                ms(percentile(&f.delays, 99.0))
            ),
            String::new(),
            String::new(),
            "p99 ≤ 5 ms",
        );
        row(
            "fan-out: events lost without a `resync`".into(),
            format!(
                "{} of {} ({} resyncs)",
                thousands(f.lost),
                thousands(f.events * f.clients),
                f.resyncs
            ),
            String::new(),
            String::new(),
            "0",
        );
        let mut out = String::from(
            "| step | hunkgate | git | ratio | target (#12) |\n|---|---|---|---|---|\n",
        );
        for r in rows {
            out.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        let runs: Vec<String> = std::iter::once(&m.first_run)
            .chain(&m.warm_runs)
            .chain([&m.warm_big])
            .chain(&m.warm_big_more)
            .enumerate()
            .map(|(i, r)| format!("run {} {}", i + 1, ms(r.disk)))
            .collect();
        out.push_str(&format!(
            "\nThe disk right before each step (`fdatasync` of a 4 KiB write, median of 5): {}, \
             {small}-hunk accepts {}, {big}-hunk accepts {}, `feedback_all` {}. {}\n",
            runs.join(", "),
            ms(m.disk_small),
            ms(m.disk_big),
            ms(m.bulk.disk),
            match m.settled {
                (t, true) => format!(
                    "Before the first step the benchmark waited {} for the disk to settle \
                     (such an `fdatasync` under {}).",
                    ms(t),
                    ms(SETTLED_FSYNC)
                ),
                (t, false) => format!(
                    "The disk did not settle before the first step: such an `fdatasync` \
                     still took {} or more after {}.",
                    ms(SETTLED_FSYNC),
                    ms(t)
                ),
            }
        ));
        if m.warnings.is_empty() {
            out.push_str("\nThe hubs logged no warning while they were timed.\n");
        } else {
            out.push_str("\nWhat the hubs warned of while they were timed:\n\n```\n");
            for w in &m.warnings {
                out.push_str(w);
                out.push('\n');
            }
            out.push_str("```\n");
        }
        out
    }

    /// The whole report: the scale, then one table per isolation mode.
    pub fn markdown(&self) -> String {
        let c = &self.cfg;
        let mut out = format!(
            "Synthetic repository: {} files × {} lines ({} with uncommitted edits), built and \
             committed in {}; an agent changing {} files × {} hunks, one changing 1 file × {} \
             hunks; {} CPU cores; {}.\n",
            thousands(c.files),
            c.lines,
            thousands(c.dirty),
            ms(self.setup),
            thousands(c.agent_files),
            c.hunks_per_file,
            c.small_hunks,
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            git_version(),
        );
        for m in &self.modes {
            out.push_str(&format!("\n`--isolation {}`:\n\n{}", m.mode, self.table(m)));
        }
        for (mode, why) in &self.skipped {
            out.push_str(&format!("\n`--isolation {mode}`: skipped — {why}\n"));
        }
        if let Some(off) = &c.accel_off {
            out.push_str(&format!(
                "\nThe hubs ran with `HUNKGATE_ACCEL_OFF={off}` (`HUNKGATE_BENCH_ACCEL_OFF`): \
                 those accelerators off.\n"
            ));
        }
        if let Some(filter) = &c.hub_log {
            out.push_str(&format!(
                "\nThe hubs logged with `HUNKGATE_LOG={filter}` (`HUNKGATE_BENCH_HUB_LOG`): \
                 their figures pay for every line that adds.\n"
            ));
        }
        if let Some(dir) = &c.keep_logs {
            out.push_str(&format!(
                "\nThe hubs' logs and their agents' run logs are kept in `{}`.\n",
                dir.display()
            ));
        }
        out
    }
}

fn git_version() -> String {
    Command::new("git")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "git (version unknown)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub's warnings and errors are kept (cut on a character boundary), its start's checks
    /// of the machine and everything below `WARN` are not.
    #[test]
    fn the_report_keeps_what_the_hub_warned_of_while_timed() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("hub.log");
        let long = format!(
            "2026-01-01T00:00:03Z  WARN hunkgate::x: {}",
            "é".repeat(400)
        );
        std::fs::write(
            &log,
            [
                "2026-01-01T00:00:00Z  WARN hunkgate::config::checks: your checkout is readable",
                "2026-01-01T00:00:01Z  INFO hunkgate::cli::serve: listening",
                "2026-01-01T00:00:02Z  WARN hunkgate_sandbox::user: the standby helper was dismissed",
                "2026-01-01T00:00:02Z ERROR hunkgate::runs: a run failed",
                &long,
            ]
            .join("\n"),
        )
        .unwrap();
        let w = hub_warnings(&log);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].ends_with("the standby helper was dismissed"));
        assert!(w[1].ends_with("a run failed"));
        assert!(w[2].len() <= 300 && w[2].len() >= 298, "{}", w[2].len());
        assert!(hub_warnings(&dir.path().join("missing.log")).is_empty());
    }

    /// Each hub figure is set against its own git figure: the median of the ratios, not the
    /// ratio of the medians, which pairs a publish with the git of another moment.
    #[test]
    fn a_paired_ratio_is_the_median_of_each_pairs_own() {
        let ms = Duration::from_millis;
        // Ratios 1.5, 1.0, 1.2: the median is 1.2. The medians' ratio would be 12/10 too,
        // so the second case tells the two apart.
        assert_eq!(
            paired_ratio(&[ms(15), ms(10), ms(12)], &[ms(10), ms(10), ms(10)]),
            "1.20× (paired: each run's own 1.00×–1.50×)"
        );
        // The git of each moment moved with the hub: every pair is 1.0×, while the ratio of
        // the medians (20 / 10) would say 2×.
        assert_eq!(
            paired_ratio(&[ms(10), ms(20), ms(30)], &[ms(10), ms(20), ms(30)]),
            "1.00× (paired: each run's own 1.00×–1.00×)"
        );
        assert_eq!(ratio(ms(20), ms(10)), "2.00×");
        // An even count takes the lower middle, as `percentile` does.
        assert_eq!(
            paired_ratio(&[ms(10), ms(30)], &[ms(10), ms(10)]),
            "1.00× (paired: each run's own 1.00×–3.00×)"
        );
        assert_eq!(paired_ratio(&[ms(10)], &[Duration::ZERO]), "–");
    }
}

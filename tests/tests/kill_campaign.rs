//! A kill -9 campaign (issue #13): a client keeps deciding hunks of a ~1,000-hunk suggestion
//! over the real WebSocket and REST while the hub is `kill -9`ed at random moments — right
//! after an answer, or with several decisions in flight — and restarted on the same state dir,
//! over and over.
//!
//! The client only believes what the hub acknowledged. A decision whose answer arrived must
//! hold after every restart; one that was in flight may have landed or not, and the restarted
//! hub says which (a rollback of several hunks lands whole or not at all). After each restart
//! the test checks, independently of the hub:
//!
//! - every acknowledged decision is reflected in the hunk states, and nothing else changed;
//! - every file of the checkout equals its base with exactly the accepted hunks (the agent's
//!   diff) and modified hunks (the client's own `modified_diff`) applied, computed with
//!   `hunkgate_patch` from the base content this test wrote;
//! - every line of `feedback.jsonl` and `state.jsonl` parses as JSON, `feedback.jsonl` has
//!   strictly increasing seqs, no decision is logged twice for a hunk, no hunk is logged as
//!   applied while it already was (no double application), and replaying the log gives the
//!   same hunk states.
//!
//! The decisions are accepts, rejects (of pending and of applied hunks), modifies (one
//! replacement line, two lines, or none, so later hunks shift), partial accepts (the hunk's `-`
//! line only, `"lines"`: its rest stays pending at the hub, checked beside the model, and goes
//! again when the hunk is undone, rejected or rolled back), undos of accepted, modified,
//! partly accepted and rejected hunks, bulk accepts of every pending hunk of one file (`/feedback/all`: one
//! decision that writes the file once), scoped rollbacks of one to three applied hunks, and one
//! hard rollback halfway through.
//!
//! Meanwhile a real process appends a line to each of four files (`f48`–`f51`) every 20 ms, across
//! the kills and restarts, with open/write/close; two of those files are multi-megabyte (a
//! 24 KiB line between each two numbered lines: about 5 MiB each). A decision on them may be
//! answered `conflict` (the file changed since it was checked): the hunk's state is then the
//! hub's, as long as it is the one before or `conflict`. Their checks: every line the writer
//! wrote is still there, in order, after the base with the applied hunks (issue #54).
//!
//! Environment (CI runs the defaults: a fixed seed and 200 kills):
//!
//! - `HUNKGATE_KILL_SEED`: the seed of the PRNG that picks the decisions, the transport, the
//!   burst sizes and the kill delays (decimal or `0x` hex; default [`DEFAULT_SEED`]). A failure
//!   prints the seed and the round; the decisions repeat exactly with the same seed, where the
//!   kill lands depends on the machine's timing.
//! - `HUNKGATE_KILLS`: how many kills (default 200).
//! - `HUNKGATE_KILL_CHECK_EVERY`: compare the whole checkout every N kills (default 4); it is
//!   always compared at the end.
//!
//! A longer campaign:
//! `HUNKGATE_KILL_SEED=0xdecafbad HUNKGATE_KILLS=5000 cargo test -p hunkgate-tests --test suite kill_campaign:: -- --nocapture`

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hunkgate_patch::{apply_all, parse_hunks, split_hunk, Hunk, HunkLine, Pick};
use hunkgate_tests::{run_agent, Hub, Reaped, Workspace, Ws};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const FILES: usize = 52;
/// Files a concurrent writer appends to.
const WRITTEN: std::ops::Range<usize> = 48..52;
/// Multi-megabyte files: a line of `PAD` bytes between each two numbered lines.
const BIG: std::ops::Range<usize> = 50..52;
const PAD: usize = 24 * 1024;
const HUNKS_PER_FILE: usize = 20;
/// One changed line every `SPACING` lines: 9 unchanged lines between two changes keep hunks
/// with 3 lines of context apart (git merges them only when 6 or fewer lines separate them).
const SPACING: usize = 10;
const LINES: usize = HUNKS_PER_FILE * SPACING;
const DEFAULT_SEED: u64 = 0x6b69_6c6c_2d39;
const DEFAULT_KILLS: usize = 200;
/// Kills land 0–30 ms after the last decision of a round was sent.
const MAX_KILL_DELAY_US: u64 = 30_000;
const SECS: Duration = Duration::from_secs(30);

/// xorshift64: tiny, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // Scramble small seeds; xorshift must never hold 0.
        let s = seed ^ 0x9e37_79b9_7f4a_7c15;
        Self(if s == 0 { 1 } else { s })
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}"))
        }
        Err(_) => default,
    }
}

fn file_name(f: usize) -> String {
    format!("f{f:02}.txt")
}

/// The committed content: `fNN line i`, unique in the whole repository (in a big file each
/// followed by a padding line the agent leaves alone).
fn base_content(f: usize) -> String {
    (1..=LINES)
        .map(|i| format!("f{f:02} line {i}\n{}", pad_line(f, i)))
        .collect()
}

/// The line after line `i` of a big file; nothing in the others.
fn pad_line(f: usize, i: usize) -> String {
    if BIG.contains(&f) {
        format!("f{f:02} pad {i} {}\n", "x".repeat(PAD))
    } else {
        String::new()
    }
}

/// The changed lines: 5, 15, 25, … — index `k` of a file is line `k * SPACING + 5`.
fn changed_line(k: usize) -> usize {
    k * SPACING + 5
}

/// What the agent leaves, computed here rather than read from the sandbox.
fn agent_content(f: usize) -> String {
    (1..=LINES)
        .map(|i| {
            let pad = pad_line(f, i);
            if i % SPACING == 5 {
                format!("f{f:02} line {i} (agent)\n{pad}")
            } else {
                format!("f{f:02} line {i}\n{pad}")
            }
        })
        .collect()
}

const AGENT: &str = r"sed -i 's/^\(f[0-9][0-9] line [0-9]*5\)$/\1 (agent)/' f*.txt";

/// A hunk state as this client knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum St {
    Pending,
    Accepted,
    /// Modified with this diff (the one the client sent).
    Modified(Hunk),
    /// Accepted in part: this landed, and the rest is a pending hunk of its own at the hub.
    Partial(Hunk),
    Rejected,
    /// Answered `conflict` (a file the writer appends to changed meanwhile): not applied.
    Conflict,
}

impl St {
    fn applied(&self) -> bool {
        matches!(self, St::Accepted | St::Modified(_) | St::Partial(_))
    }
    fn word(&self) -> &'static str {
        match self {
            St::Pending => "pending",
            St::Accepted | St::Partial(_) => "accepted",
            St::Modified(_) => "modified",
            St::Rejected => "rejected",
            St::Conflict => "conflict",
        }
    }
}

/// One hunk of the suggestion, as first published.
struct Info {
    id: String,
    file: usize,
    /// The agent's hunk, parsed from its `diff`.
    hunk: Hunk,
}

#[derive(Clone, Debug)]
enum Op {
    Decide {
        hunk: usize,
        action: &'static str,
        modified: Option<Hunk>,
        rest: bool,
    },
    /// `/feedback/all` accepting every pending hunk of one file.
    AcceptFile(usize),
    Scoped(Vec<usize>),
    HardAll,
}

/// Hunks (by position in the suggestion) and a state of each.
type Moves = Vec<(usize, St)>;

/// A decision sent, with the states it moves its hunks from and to.
struct Flight {
    op: Op,
    before: Moves,
    after: Moves,
    acked: bool,
}

struct Campaign {
    seed: u64,
    round: usize,
    rng: Rng,
    infos: Vec<Info>,
    by_id: HashMap<String, usize>,
    model: Vec<St>,
    /// Hunks of a decision answered `conflict`: their state is the hub's at the next restart.
    unsure: HashSet<usize>,
    sid: String,
    /// Counter that makes every modified line unique.
    tag: usize,
    stats: Stats,
    /// What happened to every decision, in order: printed when a check fails.
    history: Vec<String>,
    http: reqwest::Client,
}

#[derive(Default, Debug)]
struct Stats {
    sent: usize,
    acked: usize,
    unacked_landed: usize,
    unacked_dropped: usize,
    scoped_rollbacks: usize,
    hard_rollbacks: usize,
    bulk_accepts: usize,
    conflicts: usize,
    by_action: HashMap<&'static str, usize>,
}

impl Campaign {
    fn ctx(&self) -> String {
        format!("seed {:#x}, round {}", self.seed, self.round)
    }

    /// The effect of `op` on the current model: (hunk, before, after) pairs.
    fn effect(&self, op: &Op) -> (Moves, Moves) {
        let targets: Moves = match op {
            Op::Decide {
                hunk,
                action,
                modified,
                ..
            } => {
                let to = match *action {
                    "accept" => St::Accepted,
                    "accept_lines" => St::Partial(modified.clone().expect("the landed part")),
                    "modify" => St::Modified(modified.clone().expect("modified diff")),
                    "reject" => St::Rejected,
                    "undo" => St::Pending,
                    other => unreachable!("{other}"),
                };
                vec![(*hunk, to)]
            }
            Op::AcceptFile(f) => (0..self.model.len())
                .filter(|&h| self.infos[h].file == *f && self.model[h] == St::Pending)
                .map(|h| (h, St::Accepted))
                .collect(),
            Op::Scoped(hs) => hs.iter().map(|&h| (h, St::Rejected)).collect(),
            Op::HardAll => (0..self.model.len())
                .filter(|&h| self.model[h].applied())
                .map(|h| (h, St::Rejected))
                .collect(),
        };
        let before = targets
            .iter()
            .map(|(h, _)| (*h, self.model[*h].clone()))
            .collect();
        (before, targets)
    }

    fn count(&mut self, op: &Op) {
        self.stats.sent += 1;
        match op {
            Op::Decide { action, .. } => *self.stats.by_action.entry(action).or_default() += 1,
            Op::AcceptFile(_) => self.stats.bulk_accepts += 1,
            Op::Scoped(_) => self.stats.scoped_rollbacks += 1,
            Op::HardAll => self.stats.hard_rollbacks += 1,
        }
    }

    /// A bulk accept of a file with two or more pending hunks and nothing in flight: no other
    /// decision of the burst may touch any hunk of that file (an undo landing first would
    /// give the bulk one more pending hunk to take).
    fn choose_bulk(&mut self, busy: &HashSet<usize>) -> Option<Op> {
        // Not of a file the writer appends to: a conflict there would leave which hunks a
        // bulk accept takes to the hub.
        let files: Vec<usize> = (0..FILES)
            .filter(|&f| !WRITTEN.contains(&f))
            .filter(|&f| {
                let hunks: Vec<usize> = (0..self.model.len())
                    .filter(|&h| self.infos[h].file == f)
                    .collect();
                // A partly accepted hunk's rest is pending at the hub: the bulk would take it.
                hunks
                    .iter()
                    .all(|h| !busy.contains(h) && !matches!(self.model[*h], St::Partial(_)))
                    && hunks
                        .iter()
                        .filter(|&&h| self.model[h] == St::Pending)
                        .count()
                        >= 2
            })
            .collect();
        let f = *files.get(self.rng.below(files.len().max(1)))?;
        Some(Op::AcceptFile(f))
    }

    fn pick(&mut self, from: &[usize], busy: &HashSet<usize>) -> Option<usize> {
        for _ in 0..10 {
            if from.is_empty() {
                return None;
            }
            let h = from[self.rng.below(from.len())];
            if !busy.contains(&h) && !self.unsure.contains(&h) {
                return Some(h);
            }
        }
        None
    }

    /// A valid decision on a hunk no other decision in flight touches.
    fn choose(&mut self, busy: &HashSet<usize>) -> Op {
        let applied: Vec<usize> = (0..self.model.len())
            .filter(|&h| self.model[h].applied())
            .collect();
        let rejected: Vec<usize> = (0..self.model.len())
            .filter(|&h| self.model[h] == St::Rejected)
            .collect();
        let all: Vec<usize> = (0..self.model.len()).collect();
        // A fifth of the decisions are on the files the writer appends to (8% of the hunks).
        let written: Vec<usize> = (0..self.model.len())
            .filter(|&h| WRITTEN.contains(&self.infos[h].file))
            .collect();
        let hunk = loop {
            let from = match self.rng.below(100) {
                0..=24 => &applied,
                25..=32 => &rejected,
                33..=52 => &written,
                _ => &all,
            };
            if let Some(h) = self.pick(from, busy) {
                break h;
            }
        };
        let roll = self.rng.below(10);
        let action = match self.model[hunk] {
            St::Pending | St::Conflict => match roll {
                0..=4 => "accept",
                5..=6 => "reject",
                7 => "accept_lines",
                _ => "modify",
            },
            St::Accepted | St::Modified(_) | St::Partial(_) => {
                if roll < 6 {
                    "undo"
                } else {
                    "reject"
                }
            }
            St::Rejected => "undo",
        };
        let modified = match action {
            "modify" => {
                self.tag += 1;
                let variant = self.rng.below(3);
                Some(modify(&self.infos[hunk], variant, self.tag))
            }
            "accept_lines" => Some(landed_part(&self.infos[hunk])),
            _ => None,
        };
        Op::Decide {
            hunk,
            action,
            modified,
            rest: self.rng.chance(30),
        }
    }

    /// A scoped rollback of one to three applied hunks (often of one file), if any is applied.
    fn choose_scoped(&mut self, busy: &HashSet<usize>) -> Option<Op> {
        let applied: Vec<usize> = (0..self.model.len())
            .filter(|&h| self.model[h].applied() && !busy.contains(&h) && !self.unsure.contains(&h))
            .collect();
        let first = *applied.get(self.rng.below(applied.len().max(1)))?;
        let mut hs = vec![first];
        let want = 1 + self.rng.below(3);
        let same_file: Vec<usize> = applied
            .iter()
            .copied()
            .filter(|&h| self.infos[h].file == self.infos[first].file && h != first)
            .collect();
        for h in same_file.into_iter().chain(applied.iter().copied()) {
            if hs.len() >= want {
                break;
            }
            if !hs.contains(&h) && self.rng.chance(50) {
                hs.push(h);
            }
        }
        Some(Op::Scoped(hs))
    }
}

/// The client's own version of a hunk: the agent's line replaced by one line, two lines, or
/// nothing.
fn modify(info: &Info, variant: usize, tag: usize) -> Hunk {
    let orig = &info.hunk;
    let removed = orig
        .lines
        .iter()
        .find_map(|l| match l {
            HunkLine::Remove(t) => Some(t.trim_end().to_string()),
            _ => None,
        })
        .expect("a removed line");
    let adds: Vec<String> = match variant {
        0 => vec![format!("{removed} (user {tag})\n")],
        1 => vec![
            format!("{removed} (user {tag}, 1 of 2)\n"),
            format!("{removed} (user {tag}, 2 of 2)\n"),
        ],
        _ => Vec::new(),
    };
    let mut lines = Vec::new();
    for l in &orig.lines {
        match l {
            HunkLine::Add(_) => {}
            HunkLine::Remove(_) => {
                lines.push(l.clone());
                lines.extend(adds.iter().cloned().map(HunkLine::Add));
            }
            HunkLine::Context(_) => lines.push(l.clone()),
        }
    }
    let new_len = lines
        .iter()
        .filter(|l| !matches!(l, HunkLine::Remove(_)))
        .count();
    Hunk {
        old_start: orig.old_start,
        old_len: orig.old_len,
        new_start: orig.new_start,
        new_len,
        lines,
    }
}

/// The position of a hunk's `-` line among its diff lines (from 1): what a partial accept
/// selects.
fn minus_line(info: &Info) -> usize {
    1 + info
        .hunk
        .lines
        .iter()
        .position(|l| matches!(l, HunkLine::Remove(_)))
        .expect("every hunk of the campaign removes a line")
}

/// What accepting only the `-` line of a hunk lands.
fn landed_part(info: &Info) -> Hunk {
    let at = minus_line(info);
    split_hunk(&info.hunk, at, at, Pick::Accept)
        .expect("a range of one `-` line")
        .landed
        .expect("an accept lands")
}

/// The rests of partly accepted hunks at the hub: pending, each right after its hunk, and
/// exactly one for every hunk the model has partly accepted.
fn check_rests(c: &Campaign, s: &Value) {
    let ctx = c.ctx();
    let hunks = s["hunks"].as_array().expect("hunks");
    let mut parents = HashSet::new();
    for (i, h) in hunks.iter().enumerate() {
        let Some(parent) = h["parent_hunk_id"].as_str() else {
            continue;
        };
        assert_eq!(
            h["state"], "pending",
            "{ctx}: a rest the client never decided: {h}"
        );
        assert_eq!(
            hunks[i - 1]["id"].as_str(),
            Some(parent),
            "{ctx}: a rest not right after its hunk: {h}"
        );
        parents.insert(c.by_id[parent]);
    }
    let partial: HashSet<usize> = (0..c.model.len())
        .filter(|&h| matches!(c.model[h], St::Partial(_)))
        .collect();
    assert_eq!(parents, partial, "{ctx}: the hunks with a rest at the hub");
}

/// The hub's view of one hunk: its state word and, when modified, what it applied. The rests
/// of partly accepted hunks are left out ([`check_rests`]), so positions are the model's.
fn hub_states(s: &Value) -> Vec<(String, Option<Vec<HunkLine>>)> {
    s["hunks"]
        .as_array()
        .expect("hunks")
        .iter()
        .filter(|h| h["parent_hunk_id"].is_null())
        .map(|h| {
            let state = h["state"].as_str().unwrap_or("?").to_string();
            let applied = h["applied_diff"].as_str().map(|d| {
                let mut hs = parse_hunks(d).unwrap_or_else(|e| panic!("applied_diff {d:?}: {e}"));
                assert_eq!(hs.len(), 1, "applied_diff {d:?}");
                hs.remove(0).lines
            });
            (state, applied)
        })
        .collect()
}

fn matches(model: &St, hub: &(String, Option<Vec<HunkLine>>)) -> bool {
    if model.word() != hub.0 {
        return false;
    }
    match model {
        St::Modified(mine) | St::Partial(mine) => hub.1.as_ref() == Some(&mine.lines),
        _ => true,
    }
}

fn show(hub: &(String, Option<Vec<HunkLine>>)) -> String {
    match &hub.1 {
        Some(lines) => format!("{} {lines:?}", hub.0),
        None => hub.0.clone(),
    }
}

/// Every line of a JSON-lines file, parsed; the file ends with a newline.
fn jsonl(path: &std::path::Path, ctx: &str) -> Vec<Value> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    };
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{ctx}: {} ends with a torn line: {:?}",
        path.display(),
        &text[text.len().saturating_sub(200)..]
    );
    text.lines()
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{ctx}: {} line {}: {e}: {l:?}", path.display(), n + 1))
        })
        .collect()
}

/// The feedback log: parses, increasing seqs, one line per decision and hunk, never applied
/// twice, and replaying it gives `model`.
fn check_feedback(c: &Campaign, ws: &Workspace) -> usize {
    let ctx = c.ctx();
    let log = jsonl(&ws.state().join("feedback.jsonl"), &ctx);
    let mut last_seq = 0;
    let mut seen = HashSet::new();
    let mut replay: Vec<St> = vec![St::Pending; c.infos.len()];
    for (n, l) in log.iter().enumerate() {
        let seq = l["seq"].as_u64().unwrap_or(0);
        assert!(
            seq > last_seq,
            "{ctx}: feedback line {} has seq {seq} after {last_seq}: {l}",
            n + 1
        );
        last_seq = seq;
        let hid = l["hunk_id"].as_str().unwrap_or_default();
        let did = l["decision_id"].as_str().unwrap_or_default();
        assert!(
            seen.insert((did.to_string(), hid.to_string())),
            "{ctx}: decision {did} logged twice for hunk {hid} (line {})",
            n + 1
        );
        let h = *c
            .by_id
            .get(hid)
            .unwrap_or_else(|| panic!("{ctx}: feedback line for an unknown hunk: {l}"));
        let was_applied = replay[h].applied();
        replay[h] = match l["outcome"].as_str().unwrap_or_default() {
            "applied" | "modified" => {
                assert!(
                    !was_applied,
                    "{ctx}: DOUBLE APPLICATION: hunk {hid} logged as applied (line {}) while already applied: {l}",
                    n + 1
                );
                if l["outcome"] == "modified" {
                    let d = l["modified_diff"].as_str().unwrap_or_default();
                    St::Modified(parse_hunks(d).expect("modified_diff").remove(0))
                } else {
                    St::Accepted
                }
            }
            "partial" => {
                assert!(!was_applied, "{ctx}: DOUBLE APPLICATION of hunk {hid}: {l}");
                let d = l["applied_diff"].as_str().unwrap_or_default();
                St::Partial(parse_hunks(d).expect("applied_diff").remove(0))
            }
            "rejected" => St::Rejected,
            "undone" => St::Pending,
            // A decision that found the file changed: an applied hunk stays applied.
            "conflict" if was_applied => replay[h].clone(),
            "conflict" => St::Conflict,
            other => panic!("{ctx}: unexpected outcome {other:?} in feedback line {l}"),
        };
    }
    for (h, (got, want)) in replay.iter().zip(&c.model).enumerate() {
        let same = match (got, want) {
            (St::Modified(a), St::Modified(b)) | (St::Partial(a), St::Partial(b)) => {
                a.lines == b.lines
            }
            (a, b) => a == b,
        };
        assert!(
            same,
            "{ctx}: replaying feedback.jsonl gives {} for hunk {}, the hub and the client have {}",
            got.word(),
            c.infos[h].id,
            want.word()
        );
    }
    log.len()
}

/// The writer's lines at the end of file `f` (`writer fNN 1`, `writer fNN 2`, …), split off
/// what comes before them; panics when one is missing or out of order, or when `written` (the
/// writer's count, once it stopped) are not all there.
fn writer_tail(c: &Campaign, f: usize, got: String, written: Option<usize>) -> String {
    let first = format!("writer f{f:02} 1\n");
    let at = if got.starts_with(&first) {
        Some(0)
    } else {
        got.find(&format!("\n{first}")).map(|i| i + 1)
    };
    let (body, tail) = got.split_at(at.unwrap_or(got.len()));
    let n = tail.lines().count();
    let want: String = (1..=n).map(|i| format!("writer f{f:02} {i}\n")).collect();
    assert!(
        tail == want,
        "{}: WRITER'S LINE LOST in {}: its {n} lines at the end are not 1..{n} in order: {:?}",
        c.ctx(),
        file_name(f),
        tail.lines().zip(want.lines()).find(|(a, b)| a != b)
    );
    if let Some(written) = written {
        assert_eq!(
            n,
            written,
            "{}: WRITER'S LINE LOST in {}: it wrote {written} lines, {n} are there",
            c.ctx(),
            file_name(f)
        );
    }
    body.to_string()
}

/// Each file equals its base with exactly the applied hunks of the model applied (followed,
/// in a file the writer appends to, by every line it wrote).
fn check_checkout(c: &Campaign, ws: &Workspace, written: Option<usize>) {
    for f in 0..FILES {
        let hunks: Vec<Hunk> = (0..c.infos.len())
            .filter(|&h| c.infos[h].file == f)
            .filter_map(|h| match &c.model[h] {
                St::Accepted => Some(c.infos[h].hunk.clone()),
                St::Modified(m) | St::Partial(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        let expected = apply_all(&base_content(f), &hunks)
            .unwrap_or_else(|e| panic!("{}: the model does not apply: {e}", c.ctx()));
        let mut got = ws.read_string(&file_name(f)).unwrap();
        if WRITTEN.contains(&f) {
            got = writer_tail(c, f, got, written);
        }
        if got != expected {
            let first = got
                .lines()
                .zip(expected.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(got.lines().count().min(expected.lines().count()));
            let tail = c.history.len().saturating_sub(80);
            eprintln!("the last decisions:\n{}", c.history[tail..].join("\n"));
            panic!(
                "{}: {} differs from what the hunk states say from line {}: got {:?}, expected {:?}",
                c.ctx(),
                file_name(f),
                first + 1,
                short(got.lines().skip(first).take(3)),
                short(expected.lines().skip(first).take(3))
            );
        }
    }
}

/// Lines cut to 80 bytes (a big file's padding lines are 24 KiB).
fn short<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    lines.map(|l| &l[..l.len().min(80)]).collect()
}

fn decide_body(c: &Campaign, op: &Op, camel: bool) -> Value {
    let Op::Decide {
        hunk,
        action,
        modified,
        ..
    } = op
    else {
        unreachable!()
    };
    let (sk, hk, mk) = if camel {
        ("suggestionId", "hunkId", "modifiedDiff")
    } else {
        ("suggestion_id", "hunk_id", "modified_diff")
    };
    if *action == "accept_lines" {
        let at = minus_line(&c.infos[*hunk]);
        return json!({sk: c.sid, hk: c.infos[*hunk].id, "action": "accept", "lines": [at, at]});
    }
    let mut body = json!({sk: c.sid, hk: c.infos[*hunk].id, "action": action});
    if let Some(m) = modified {
        body[mk] = m.to_unified().into();
    }
    body
}

type RestAnswer = tokio::task::JoinHandle<Option<(u16, Value)>>;

/// Send `op` without waiting: over the WebSocket (returns None) or REST (returns the task).
async fn send(c: &Campaign, hub: &Hub, client: &mut Ws, op: &Op, id: &str) -> Option<RestAnswer> {
    let (path, body) = match op {
        Op::Decide { rest: false, .. } => {
            let mut cmd = decide_body(c, op, true);
            cmd["type"] = "feedback".into();
            cmd["id"] = id.into();
            client
                .stream
                .send(Message::Text(cmd.to_string().into()))
                .await
                .unwrap_or_else(|e| panic!("{}: sending over the WebSocket: {e}", c.ctx()));
            return None;
        }
        Op::Decide { .. } => ("/feedback".to_string(), decide_body(c, op, false)),
        Op::AcceptFile(f) => (
            "/feedback/all".to_string(),
            json!({"suggestion_id": c.sid, "action": "accept", "file": file_name(*f)}),
        ),
        Op::Scoped(hs) => (
            format!("/checkpoints/{}/rollback", c.sid),
            json!({"mode": "scoped_selected",
                   "hunk_ids": hs.iter().map(|&h| c.infos[h].id.clone()).collect::<Vec<_>>()}),
        ),
        Op::HardAll => (
            format!("/checkpoints/{}/rollback", c.sid),
            json!({"mode": "hard_all", "confirm": true}),
        ),
    };
    let req = c
        .http
        .post(format!("{}{path}", hub.url))
        .bearer_auth(&hub.token)
        .json(&body)
        .send();
    Some(tokio::spawn(async move {
        let resp = req.await.ok()?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.ok()?;
        Some((status, body))
    }))
}

/// An answer arrived: the decision is acknowledged and must succeed as the model says.
fn acknowledge(c: &mut Campaign, flight: &mut Flight, answer: &Value, status: Option<u16>) {
    let ctx = c.ctx();
    if answer["success"] != true && answer["code"] == "conflict" && touches_written(c, &flight.op) {
        // The writer changed the file since the hub checked it: nothing was applied, and the
        // hub says at the next restart what the hunks are now (`reconcile`).
        c.unsure.extend(flight.before.iter().map(|(h, _)| *h));
        c.stats.conflicts += 1;
        c.history.push(format!(
            "round {}: {:?} answered conflict",
            c.round, flight.op
        ));
        flight.acked = true;
        c.stats.acked += 1;
        return;
    }
    assert!(
        answer["success"] == true && status.is_none_or(|s| s == 200),
        "{ctx}: {:?} was answered with a failure ({status:?}): {answer}",
        flight.op
    );
    if let Op::Decide { hunk, .. } = &flight.op {
        let state = answer["data"]["hunk"]["state"]
            .as_str()
            .or(answer["hunk"]["state"].as_str());
        assert_eq!(
            state,
            Some(flight.after[0].1.word()),
            "{ctx}: the answer to {:?} on {} names another state: {answer}",
            flight.op,
            c.infos[*hunk].id
        );
    }
    if let Op::AcceptFile(f) = &flight.op {
        let reply = if answer["data"].is_object() {
            &answer["data"]
        } else {
            answer
        };
        let decided: HashSet<&str> = reply["decided"]
            .as_array()
            .unwrap_or_else(|| panic!("{ctx}: a bulk reply without `decided`: {answer}"))
            .iter()
            .filter_map(|d| d["hunk_id"].as_str())
            .collect();
        let expected: HashSet<&str> = flight
            .after
            .iter()
            .map(|(h, _)| c.infos[*h].id.as_str())
            .collect();
        assert!(
            reply["failed"].as_array().is_some_and(|f| f.is_empty()) && decided == expected,
            "{ctx}: the bulk accept of {} decided {decided:?}, the client expects {expected:?}: {answer}",
            file_name(*f)
        );
    }
    for (h, st) in &flight.after {
        c.model[*h] = st.clone();
    }
    c.history.push(format!(
        "round {}: {:?} answered: {}",
        c.round,
        flight.op,
        moves(c, &flight.after)
    ));
    flight.acked = true;
    c.stats.acked += 1;
}

/// `hunk=state, …` of a decision's moves, for the history.
fn moves(c: &Campaign, m: &[(usize, St)]) -> String {
    m.iter()
        .map(|(h, st)| format!("{}={}", c.infos[*h].id, st.word()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `op` writes a file the writer appends to.
fn touches_written(c: &Campaign, op: &Op) -> bool {
    let written = |h: &usize| WRITTEN.contains(&c.infos[*h].file);
    match op {
        Op::Decide { hunk, .. } => written(hunk),
        Op::AcceptFile(f) => WRITTEN.contains(f),
        Op::Scoped(hs) => hs.iter().any(written),
        Op::HardAll => true,
    }
}

fn handle_ws(c: &mut Campaign, flights: &mut [Flight], ids: &HashMap<String, usize>, text: &str) {
    let v: Value = serde_json::from_str(text).expect("a JSON message");
    if v["type"] != "response" {
        return;
    }
    let Some(&i) = v["id"].as_str().and_then(|id| ids.get(id)) else {
        return;
    };
    acknowledge(c, &mut flights[i], &v, None);
}

/// After a restart: acknowledged states hold, unacknowledged decisions landed whole or not at
/// all; the model takes what the hub says about those.
fn reconcile(c: &mut Campaign, s: &Value, flights: &[Flight]) {
    let ctx = c.ctx();
    let hub = hub_states(s);
    assert_eq!(hub.len(), c.model.len(), "{ctx}: the hunk count changed");
    for h in std::mem::take(&mut c.unsure) {
        assert!(
            matches(&c.model[h], &hub[h]) || hub[h].0 == "conflict",
            "{ctx}: hunk {} of a decision answered `conflict` is {} at the hub, it was {}",
            c.infos[h].id,
            show(&hub[h]),
            c.model[h].word()
        );
        if hub[h].0 == "conflict" {
            c.model[h] = St::Conflict;
        }
    }
    let mut uncertain = HashSet::new();
    for fl in flights.iter().filter(|f| !f.acked) {
        let landed = fl.after.iter().all(|(h, st)| matches(st, &hub[*h]));
        let dropped = fl.before.iter().all(|(h, st)| matches(st, &hub[*h]));
        // Answered `conflict` (the writer's file changed), the answer lost with the kill.
        let conflicted = !dropped
            && touches_written(c, &fl.op)
            && fl
                .before
                .iter()
                .all(|(h, st)| matches(st, &hub[*h]) || hub[*h].0 == "conflict");
        if conflicted {
            for (h, _) in &fl.before {
                if hub[*h].0 == "conflict" {
                    c.model[*h] = St::Conflict;
                }
            }
        }
        assert!(
            landed || dropped || conflicted,
            "{ctx}: the unacknowledged {:?} half landed: hub has {:?}, before {:?}",
            fl.op,
            fl.after
                .iter()
                .map(|(h, _)| format!("{}={}", c.infos[*h].id, show(&hub[*h])))
                .collect::<Vec<_>>(),
            fl.before
                .iter()
                .map(|(h, st)| format!("{}={}", c.infos[*h].id, st.word()))
                .collect::<Vec<_>>()
        );
        // `landed && dropped` cannot happen: every decision changes the state of its hunks.
        let fate = if landed {
            "landed"
        } else if conflicted {
            "conflicted"
        } else {
            "dropped"
        };
        c.history.push(format!(
            "round {}: {:?} unanswered, {fate} at the restart: {}",
            c.round,
            fl.op,
            moves(c, &fl.after)
        ));
        if landed {
            c.stats.unacked_landed += 1;
            for (h, st) in &fl.after {
                c.model[*h] = st.clone();
            }
        } else {
            c.stats.unacked_dropped += 1;
        }
        uncertain.extend(fl.after.iter().map(|(h, _)| *h));
    }
    for (h, st) in c.model.iter().enumerate() {
        // Marked check: an acknowledged decision (or an untouched hunk) must be exactly as the
        // client last knew it.
        assert!(
            matches(st, &hub[h]),
            "{ctx}: ACKNOWLEDGED STATE LOST: hunk {} is {} at the hub, the client expects {} ({})",
            c.infos[h].id,
            show(&hub[h]),
            st.word(),
            if uncertain.contains(&h) {
                "in flight at the kill"
            } else {
                "acknowledged or untouched"
            }
        );
    } // Now that the model knows which uncertain decisions landed.
    check_rests(c, s);
}

/// The concurrent writer: a shell appending `writer fNN n` to each file of [`WRITTEN`] with
/// `>>` (open, write, close) every 20 ms until `stop` exists, then printing its last `n`.
fn start_writer(ws: &Workspace, stop: &std::path::Path) -> Reaped {
    let files: Vec<String> = WRITTEN.map(|f| format!("f{f:02}")).collect();
    let child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "n=0; while [ ! -e '{}' ]; do n=$((n+1)); for f in {}; do echo \"writer $f $n\" >> $f.txt; done; sleep 0.02; done; echo $n",
            stop.display(),
            files.join(" ")
        ))
        .current_dir(ws.repo())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the writer");
    Reaped::new(child)
}

async fn get_suggestion(client: &mut Ws, sid: &str, ctx: &str) -> Value {
    let r = client
        .call(json!({"type": "get", "suggestionId": sid}))
        .await
        .unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
    assert_eq!(r["success"], true, "{ctx}: get: {r}");
    r["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_campaign_keeps_every_acknowledged_decision() {
    let seed = env_num("HUNKGATE_KILL_SEED", DEFAULT_SEED);
    let kills = env_num("HUNKGATE_KILLS", DEFAULT_KILLS as u64) as usize;
    let check_every = env_num("HUNKGATE_KILL_CHECK_EVERY", 4).max(1) as usize;
    eprintln!("kill campaign: HUNKGATE_KILL_SEED={seed:#x} HUNKGATE_KILLS={kills}");
    let started = Instant::now();

    let contents: Vec<(String, String)> = (0..FILES)
        .map(|f| (file_name(f), base_content(f)))
        .collect();
    let files: Vec<(&str, &[u8])> = contents
        .iter()
        .map(|(n, c)| (n.as_str(), c.as_bytes()))
        .collect();
    let ws = Workspace::new(&files).unwrap();
    let agent = ws.agent_script("agent.sh", AGENT).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let mut client = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut client, &agent, "change every fifth line")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();

    // The suggestion: 20 separate hunks per file, each the agent's change of one line.
    let mut infos = Vec::new();
    for h in s["hunks"].as_array().unwrap() {
        let file = h["file"].as_str().unwrap();
        let f: usize = file
            .strip_prefix('f')
            .and_then(|r| r.strip_suffix(".txt"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected file {file}"));
        let mut parsed = parse_hunks(h["diff"].as_str().unwrap()).unwrap();
        assert_eq!(parsed.len(), 1, "{h}");
        let hunk = parsed.remove(0);
        let k = h["index"].as_u64().unwrap() as usize;
        assert!(
            hunk.lines.contains(&HunkLine::Remove(format!(
                "f{f:02} line {}\n",
                changed_line(k)
            ))),
            "hunk {k} of {file} is not the change of line {}: {h}",
            changed_line(k)
        );
        assert_eq!(h["state"], "pending");
        infos.push(Info {
            id: h["id"].as_str().unwrap().to_string(),
            file: f,
            hunk,
        });
    }
    assert_eq!(
        infos.len(),
        FILES * HUNKS_PER_FILE,
        "one hunk per changed line"
    );
    // The hunks rebuild exactly what the agent did (the expected-content computation is sound).
    for f in 0..FILES {
        let hs: Vec<Hunk> = infos
            .iter()
            .filter(|i| i.file == f)
            .map(|i| i.hunk.clone())
            .collect();
        assert_eq!(apply_all(&base_content(f), &hs).unwrap(), agent_content(f));
    }
    let by_id = infos
        .iter()
        .enumerate()
        .map(|(i, info)| (info.id.clone(), i))
        .collect();
    let mut c = Campaign {
        seed,
        round: 0,
        rng: Rng::new(seed),
        model: vec![St::Pending; infos.len()],
        unsure: HashSet::new(),
        infos,
        by_id,
        sid,
        tag: 0,
        stats: Stats::default(),
        history: Vec::new(),
        http: reqwest::Client::new(),
    };
    check_checkout(&c, &ws, None);
    let stop = ws.path("stop-writer");
    let writer = start_writer(&ws, &stop);

    let mut next_id = 0usize;
    let mut latency = Duration::from_micros(MAX_KILL_DELAY_US);
    let (mut restarts, mut checks) = (Duration::ZERO, Duration::ZERO);
    let mut feedback_lines = 0;
    for round in 0..kills {
        c.round = round;
        let ctx = c.ctx();

        // A few decisions answered one at a time: acknowledged before the kill for sure.
        for _ in 0..usize::from(c.rng.chance(35)) {
            let op = c.choose(&HashSet::new());
            let (before, after) = c.effect(&op);
            let mut fl = [Flight {
                op,
                before,
                after,
                acked: false,
            }];
            next_id += 1;
            let id = format!("k{next_id}");
            c.count(&fl[0].op);
            let t0 = Instant::now();
            if let Some(task) = send(&c, &hub, &mut client, &fl[0].op, &id).await {
                let (status, body) = task
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("{ctx}: no REST answer from a live hub"));
                acknowledge(&mut c, &mut fl[0], &body, Some(status));
            } else {
                let v = client
                    .next_matching(|v| v["type"] == "response" && v["id"] == id.as_str(), SECS)
                    .await
                    .unwrap_or_else(|e| panic!("{ctx}: no answer from a live hub: {e}"));
                acknowledge(&mut c, &mut fl[0], &v, None);
            }
            // What one decision takes here and now (debug build, this machine's disk).
            latency = (latency * 3 + t0.elapsed()) / 4;
        }

        // Then a burst in flight: none (the kill follows answers), one, or several decisions;
        // scoped rollbacks now and then, one hard rollback halfway through.
        let mut ops = Vec::new();
        let mut busy = HashSet::new();
        if round == kills / 2 {
            ops.push(Op::HardAll);
        } else {
            if round == 3 || c.rng.chance(6) {
                if let Some(op) = c.choose_scoped(&busy) {
                    if let Op::Scoped(hs) = &op {
                        busy.extend(hs.iter().copied());
                    }
                    ops.push(op);
                }
            }
            if round == 5 || c.rng.chance(10) {
                if let Some(op) = c.choose_bulk(&busy) {
                    if let Op::AcceptFile(f) = &op {
                        busy.extend((0..c.model.len()).filter(|&h| c.infos[h].file == *f));
                    }
                    ops.push(op);
                }
            }
            for _ in 0..c.rng.below(4) {
                let op = c.choose(&busy);
                if let Op::Decide { hunk, .. } = &op {
                    busy.insert(*hunk);
                }
                ops.push(op);
            }
        }
        let mut flights = Vec::new();
        let mut ids = HashMap::new();
        let mut rest = Vec::new();
        for op in ops {
            let (before, after) = c.effect(&op);
            c.count(&op);
            next_id += 1;
            let id = format!("k{next_id}");
            if let Some(task) = send(&c, &hub, &mut client, &op, &id).await {
                rest.push((flights.len(), task));
            } else {
                ids.insert(id, flights.len());
            }
            flights.push(Flight {
                op,
                before,
                after,
                acked: false,
            });
        }

        // The kill lands 0–30 ms after the last decision was sent — or, where decisions take
        // longer than that, anywhere in the time the burst takes, so that kills hit before,
        // during and after decisions. Answers are read meanwhile.
        let window = (latency * flights.len().max(1) as u32)
            .max(Duration::from_micros(MAX_KILL_DELAY_US))
            .as_micros() as usize;
        let delay = Duration::from_micros(c.rng.below(window + 1) as u64);
        let deadline = tokio::time::Instant::now() + delay;
        while let Ok(msg) = tokio::time::timeout_at(deadline, client.stream.next()).await {
            match msg {
                Some(Ok(Message::Text(t))) => handle_ws(&mut c, &mut flights, &ids, &t),
                Some(Ok(_)) => {}
                other => panic!(
                    "{ctx}: the WebSocket ended before the kill: {other:?}\n{}",
                    hub.log_text()
                ),
            }
        }
        hub.kill9();
        // Answers that reached this client before the kill still count as acknowledged.
        loop {
            match tokio::time::timeout(SECS, client.stream.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => handle_ws(&mut c, &mut flights, &ids, &t),
                Ok(Some(Ok(_))) => {}
                Ok(None | Some(Err(_))) => break,
                Err(_) => panic!("{ctx}: the WebSocket of a killed hub stayed open"),
            }
        }
        for (i, task) in rest {
            if let Some((status, body)) = task.await.unwrap() {
                acknowledge(&mut c, &mut flights[i], &body, Some(status));
            }
        }

        // Restart on the same state dir and check.
        let t1 = Instant::now();
        hub = ws
            .serve(&[])
            .unwrap_or_else(|e| panic!("{ctx}: the hub did not come back: {e:#}"));
        client = hub.ws().await.unwrap();
        let t2 = Instant::now();
        let s = get_suggestion(&mut client, &c.sid, &ctx).await;
        let t3 = Instant::now();
        reconcile(&mut c, &s, &flights);
        jsonl(&ws.state().join("state.jsonl"), &ctx);
        feedback_lines = check_feedback(&c, &ws);
        if round % check_every == 0 || round + 1 == kills {
            check_checkout(&c, &ws, None);
        }
        restarts += t2 - t1;
        checks += t3.elapsed();
    }

    // The end: the writer stops; a clean stop and one more start change nothing.
    c.round = kills;
    std::fs::write(&stop, b"").unwrap();
    let out = writer.wait_with_output().unwrap();
    let written: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("the writer's count: {e}: {out:?}"));
    hub.stop().unwrap();
    drop(client);
    let hub = ws.serve(&[]).unwrap();
    let mut client = hub.ws().await.unwrap();
    let s = get_suggestion(&mut client, &c.sid, &c.ctx()).await;
    reconcile(&mut c, &s, &[]);
    jsonl(&ws.state().join("state.jsonl"), &c.ctx());
    check_feedback(&c, &ws);
    check_checkout(&c, &ws, Some(written));
    assert!(written > 0, "the writer wrote nothing");

    let broken: Vec<String> = std::fs::read_dir(ws.state())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".broken-"))
        .collect();
    let states: HashMap<&str, usize> = c.model.iter().fold(HashMap::new(), |mut m, st| {
        *m.entry(st.word()).or_default() += 1;
        m
    });
    eprintln!(
        "kill campaign: {kills} kills in {:.1?}; one decision took ~{latency:.1?}; restarts took {restarts:.1?}, checks {checks:.1?}; {:?}; {feedback_lines} feedback lines; final states {states:?}; torn tails kept aside: {broken:?}; the writer wrote {written} lines to each of its files",
        started.elapsed(),
        c.stats
    );
    assert!(c.stats.scoped_rollbacks > 0 && c.stats.hard_rollbacks > 0 || kills < 4);
    assert!(c.stats.bulk_accepts > 0 || kills < 6);
    assert!(c.stats.by_action.get("undo").copied().unwrap_or(0) > 0 || kills < 20);
    assert!(c.stats.by_action.get("accept_lines").copied().unwrap_or(0) > 0 || kills < 20);
}

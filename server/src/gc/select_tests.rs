use std::time::Duration;

use serde_json::json;

use super::*;
use crate::model::run::RunRec;

const HOUR: u64 = 3600;
/// "Now" in these tests: well after the sessions' `updated_at` (2026-01-01).
const NOW: u64 = 1_800_000_000;

fn policy(ttl_hours: u64, max_sessions: usize, max_runs: usize) -> Retention {
    Retention {
        completed_ttl: Duration::from_secs(ttl_hours * HOUR),
        max_sessions,
        max_runs_per_session: max_runs,
        ..Retention::default()
    }
}

fn run(id: &str, status: &str, session: &str, created: &str) -> RunRec {
    serde_json::from_value(json!({
        "run_id": id, "status": status, "prompt": "p", "suggestion_ids": [],
        "created_at": created, "session_id": session,
    }))
    .unwrap()
}

/// A suggestion of `run` with one hunk in `state` (`pending`, `accepted`, ...).
fn suggestion(id: &str, run: &str, state: &str, closed: Option<&str>) -> Suggestion {
    let mut v = json!({
        "id": id, "run_id": run, "description": "d", "base_commit": "b", "run_commit": "c",
        "created_at": "t", "hunks": [{"id": format!("{id}:a:0"), "file": "a", "index": 0,
        "kind": "modify", "state": state, "patch": "@@ -1 +1 @@\n-a\n+b\n"}],
    });
    if let Some(c) = closed {
        v["closed"] = json!(c);
    }
    serde_json::from_value(v).unwrap()
}

fn session(id: &str, runs: &[&str], created: &str) -> SessionRec {
    serde_json::from_value(json!({
        "id": id, "status": "active", "title": "t", "run_ids": runs,
        "created_at": created, "updated_at": "2026-01-01T00:00:00Z",
    }))
    .unwrap()
}

#[derive(Default)]
struct World {
    st: Option<State>,
}

impl World {
    fn state(&mut self) -> &mut State {
        self.st.get_or_insert_with(|| State {
            suggestions: Default::default(),
            order: Vec::new(),
            runs: Default::default(),
            sessions: Default::default(),
        })
    }

    /// A session `sess` with one run `run` in `status` and, if `hunk` is given, a suggestion
    /// `sug-<run>` whose one hunk is in that state.
    fn add(&mut self, sess: &str, run_id: &str, status: &str, hunk: Option<&str>) -> &mut Self {
        let created = format!("2026-01-01T00:00:{:02}Z", self.state().runs.len());
        let st = self.state();
        let mut r = run(run_id, status, sess, &created);
        if let Some(h) = hunk {
            let s = suggestion(&format!("sug-{run_id}"), run_id, h, None);
            r.suggestion_ids.push(s.id.clone());
            st.order.push(s.id.clone());
            st.suggestions.insert(s.id.clone(), s);
        }
        st.runs.insert(run_id.into(), r);
        let ss = &mut st.sessions.sessions;
        let s = ss
            .entry(sess.into())
            .or_insert_with(|| session(sess, &[], &created));
        s.run_ids.push(run_id.into());
        self
    }

    fn select(&mut self, ledger: &Ledger, now: u64, p: &Retention) -> Plan {
        select(self.state(), ledger, now, p)
    }
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn finished_work_goes_once_its_time_is_up_and_not_before() {
    let mut w = World::default();
    w.add("s1", "r1", "ready", Some("accepted"))
        .add("s2", "r2", "failed", None)
        .add("s3", "r3", "no_changes", None);
    let p = policy(72, 25, 40);
    // First seen finished now: stamped, nothing removed.
    let first = w.select(&Ledger::new(), NOW, &p);
    assert!(first.is_empty(), "{first:?}");
    assert_eq!(first.ledger.get("session:s1"), Some(&NOW));
    assert_eq!(first.ledger.get("run:r2"), Some(&NOW));
    // An hour short of the TTL: still nothing.
    let later = w.select(&first.ledger, NOW + 71 * HOUR, &p);
    assert!(later.is_empty(), "{later:?}");
    assert_eq!(later.ledger, first.ledger, "stamps are kept, not renewed");
    // At the TTL: every session with its runs and suggestions.
    let due = w.select(&first.ledger, NOW + 72 * HOUR, &p);
    assert_eq!(due.sessions, set(&["s1", "s2", "s3"]));
    assert_eq!(due.runs, set(&["r1", "r2", "r3"]));
    assert_eq!(due.suggestions, set(&["sug-r1"]));
    assert!(due.ledger.is_empty(), "{:?}", due.ledger);
}

#[test]
fn live_work_is_never_collected_whatever_its_age_or_the_limits() {
    let mut w = World::default();
    w.add("pending", "r1", "ready", Some("pending"))
        .add("conflict", "r2", "ready", Some("conflict"))
        .add("queued", "r3", "queued", None)
        .add("working", "r4", "working", None)
        .add("asking", "r5", "waiting_for_user", None)
        .add("done", "r6", "ready", Some("rejected"));
    // A TTL of 0, one session allowed, one run per session, a year later.
    let p = policy(0, 1, 1);
    let ledger: Ledger = [
        ("run:r1".to_string(), 0),
        ("session:pending".to_string(), 0),
    ]
    .into();
    let plan = w.select(&ledger, NOW + 365 * 24 * HOUR, &p);
    assert_eq!(plan.sessions, set(&["done"]), "only the finished one");
    assert_eq!(plan.runs, set(&["r6"]));
    assert_eq!(plan.suggestions, set(&["sug-r6"]));
    assert!(
        !plan.ledger.contains_key("run:r1"),
        "live work has no stamp: {:?}",
        plan.ledger
    );
    // Positive control: the same suggestion decided is collected.
    let st = w.state();
    st.suggestions.get_mut("sug-r1").unwrap().hunks[0].state = crate::protocol::HunkState::Accepted;
    let plan = w.select(&ledger, NOW, &p);
    assert!(plan.suggestions.contains("sug-r1"), "{plan:?}");
}

#[test]
fn a_discarded_suggestion_is_finished_and_its_session_with_a_live_run_stays() {
    let mut w = World::default();
    w.add("s", "old", "ready", Some("pending"))
        .add("s", "new", "working", None);
    w.state().suggestions.get_mut("sug-old").unwrap().closed = Some("discard".into());
    let plan = w.select(&Ledger::new(), NOW, &policy(0, 25, 40));
    assert!(plan.sessions.is_empty(), "the session has a working run");
    assert_eq!(plan.runs, set(&["old"]), "its finished run goes on its own");
    assert_eq!(plan.suggestions, set(&["sug-old"]));
}

#[test]
fn past_max_sessions_the_oldest_finished_sessions_go_first() {
    let mut w = World::default();
    for i in 0..5 {
        w.add(
            &format!("s{i}"),
            &format!("r{i}"),
            "ready",
            Some("accepted"),
        );
    }
    w.add("live", "rl", "ready", Some("pending"));
    // Stamped in order: s0 first.
    let ledger: Ledger = (0..5)
        .map(|i| (format!("session:s{i}"), NOW + i as u64))
        .collect();
    let plan = w.select(&ledger, NOW + 10, &policy(72, 3, 40));
    assert_eq!(
        plan.sessions,
        set(&["s0", "s1", "s2"]),
        "6 sessions, 3 kept"
    );
    assert_eq!(plan.runs, set(&["r0", "r1", "r2"]));
    // Fewer finished sessions than the excess: the live one still stays.
    let plan = w.select(&ledger, NOW + 10, &policy(72, 1, 40));
    assert_eq!(plan.sessions, set(&["s0", "s1", "s2", "s3", "s4"]));
}

#[test]
fn past_max_runs_per_session_the_oldest_finished_runs_go_first() {
    let mut w = World::default();
    w.add("s", "a", "ready", Some("accepted"))
        .add("s", "b", "ready", Some("pending"))
        .add("s", "c", "failed", None)
        .add("s", "d", "cancelled", None)
        .add("s", "e", "working", None);
    let plan = w.select(&Ledger::new(), NOW, &policy(72, 25, 2));
    // Five runs, two allowed: the three oldest finished (a, c, d); b is pending, e working.
    assert_eq!(plan.runs, set(&["a", "c", "d"]));
    assert_eq!(plan.suggestions, set(&["sug-a"]));
    assert!(plan.sessions.is_empty());
}

#[test]
fn work_that_comes_alive_again_starts_its_retention_anew() {
    let mut w = World::default();
    w.add("s", "r", "ready", Some("accepted"));
    let old: Ledger = [
        ("session:s".to_string(), NOW - 100 * HOUR),
        ("run:r".to_string(), NOW - 100 * HOUR),
    ]
    .into();
    // An undo made the hunk pending again: live, no stamp.
    w.state().suggestions.get_mut("sug-r").unwrap().hunks[0].state =
        crate::protocol::HunkState::Pending;
    let plan = w.select(&old, NOW, &policy(72, 25, 40));
    assert!(plan.is_empty() && plan.ledger.is_empty(), "{plan:?}");
    // Decided again: stamped now, not 100 hours ago.
    w.state().suggestions.get_mut("sug-r").unwrap().hunks[0].state =
        crate::protocol::HunkState::Rejected;
    let plan = w.select(&plan.ledger, NOW, &policy(72, 25, 40));
    assert!(plan.is_empty());
    assert_eq!(plan.ledger.get("session:s"), Some(&NOW));
}

#[test]
fn a_session_updated_after_its_stamp_counts_from_the_update() {
    let mut w = World::default();
    w.add("s", "r", "ready", Some("accepted"));
    let updated = 1_767_225_600; // 2026-01-01T00:00:00Z
    let ledger: Ledger = [("session:s".to_string(), updated - 100 * HOUR)].into();
    let plan = w.select(&ledger, updated + 71 * HOUR, &policy(72, 25, 40));
    assert!(plan.sessions.is_empty(), "{plan:?}");
    assert_eq!(plan.ledger.get("session:s"), Some(&updated));
}

#[test]
fn a_suggestion_without_its_run_is_collected_on_its_own() {
    let mut w = World::default();
    let st = w.state();
    for (id, state) in [("lone", "accepted"), ("lone-pending", "pending")] {
        let s = suggestion(id, "gone-run", state, None);
        st.order.push(id.into());
        st.suggestions.insert(id.into(), s);
    }
    let plan = w.select(&Ledger::new(), NOW, &policy(0, 25, 40));
    assert_eq!(plan.suggestions, set(&["lone"]));
}

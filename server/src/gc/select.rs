//! What a collection removes: a pure function of the hub's state, the ledger of when each
//! piece of work was first seen finished, the time and the policy.
//!
//! Work is live — never collected, whatever its age or the limits — while a run is queued,
//! working or waiting for the user's answer, or a suggestion has a hunk waiting for a decision
//! and is not discarded. A session is live while any of its runs is. Everything else is
//! finished, and its retention counts from when a collection first saw it finished (the
//! ledger's stamp; a session's from its last update too, when that is later).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::retention::Retention;
use crate::hub::State;
use crate::model::session::SessionRec;
use crate::model::suggestion::Suggestion;

/// When each piece of finished work was first seen finished (seconds since the epoch), by
/// [`key`]. Live work has no entry: work that comes alive again (an undo reopens a hunk)
/// starts its retention anew once it is finished again.
pub type Ledger = BTreeMap<String, u64>;

/// The ledger key of a run, session or suggestion (`run:<id>`, ...).
pub fn key(kind: &str, id: &str) -> String {
    format!("{kind}:{id}")
}

/// What to remove, and the ledger that holds for what stays.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub sessions: BTreeSet<String>,
    pub runs: BTreeSet<String>,
    pub suggestions: BTreeSet<String>,
    pub ledger: Ledger,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty() && self.runs.is_empty() && self.suggestions.is_empty()
    }
}

/// Whether `s` still waits for the reviewer: not discarded, and a hunk undecided.
pub fn suggestion_live(s: &Suggestion) -> bool {
    s.closed.is_none() && s.hunks.iter().any(|h| !h.state.reviewed())
}

/// The state indexed for selecting.
struct Index<'a> {
    st: &'a State,
    /// Each run's suggestions (by the suggestion's `run_id` and the run's list).
    suggestions_of: BTreeMap<&'a str, BTreeSet<&'a str>>,
    /// Each session's runs that the state has (by the run's `session_id` and the session's list).
    runs_of: BTreeMap<&'a str, BTreeSet<&'a str>>,
}

impl<'a> Index<'a> {
    fn new(st: &'a State) -> Self {
        let mut suggestions_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for s in st.suggestions.values() {
            suggestions_of.entry(&s.run_id).or_default().insert(&s.id);
        }
        let mut runs_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for r in st.runs.values() {
            let ids = r.suggestion_ids.iter().map(String::as_str);
            let known = ids.filter(|id| st.suggestions.contains_key(*id));
            suggestions_of.entry(&r.run_id).or_default().extend(known);
            if let Some(sid) = r.session_id.as_deref() {
                runs_of.entry(sid).or_default().insert(&r.run_id);
            }
        }
        for s in st.sessions.sessions.values() {
            let known = s.run_ids.iter().map(String::as_str);
            let known = known.filter(|id| st.runs.contains_key(*id));
            runs_of.entry(&s.id).or_default().extend(known);
        }
        Index {
            st,
            suggestions_of,
            runs_of,
        }
    }

    fn suggestions(&self, run: &str) -> impl Iterator<Item = &'a str> + '_ {
        self.suggestions_of.get(run).into_iter().flatten().copied()
    }

    fn runs(&self, session: &str) -> impl Iterator<Item = &'a str> + '_ {
        self.runs_of.get(session).into_iter().flatten().copied()
    }

    fn run_live(&self, run: &str) -> bool {
        self.st.runs.get(run).is_some_and(|r| !r.finished())
            || self
                .suggestions(run)
                .any(|s| self.st.suggestions.get(s).is_some_and(suggestion_live))
    }

    fn session_live(&self, session: &str) -> bool {
        self.runs(session).any(|r| self.run_live(r))
    }
}

/// Choose what to remove from `st` at `now` (seconds since the epoch) under `policy`, given
/// `ledger`, the stamps of the last collection.
pub fn select(st: &State, ledger: &Ledger, now: u64, policy: &Retention) -> Plan {
    let ix = Index::new(st);
    let seen = Seen::stamp(&ix, ledger, now, policy.completed_ttl.as_secs());
    let mut plan = Plan {
        suggestions: seen.lone_suggestions.clone(),
        ..Plan::default()
    };
    choose_sessions(&mut plan, &ix, &seen, policy.max_sessions);
    choose_runs(&mut plan, &ix, &seen, policy.max_runs_per_session);
    for r in &plan.runs {
        plan.suggestions
            .extend(ix.suggestions(r).map(str::to_string));
    }
    let gone = |k: &String| match k.split_once(':') {
        Some(("run", id)) => plan.runs.contains(id),
        Some(("session", id)) => plan.sessions.contains(id),
        Some(("suggestion", id)) => plan.suggestions.contains(id),
        _ => true,
    };
    let ledger = seen.stamps.into_iter().filter(|(k, _)| !gone(k)).collect();
    plan.ledger = ledger;
    plan
}

/// The finished work of a state with its stamps, and which of it is past its time.
struct Seen<'a> {
    stamps: Ledger,
    /// Ledger keys of the finished runs and sessions whose time is up.
    expired: BTreeSet<String>,
    /// Finished sessions, oldest stamp first: (stamp, created_at, id).
    sessions: Vec<(u64, &'a str, &'a str)>,
    /// Finished suggestions whose run the state does not have, past their time.
    lone_suggestions: BTreeSet<String>,
}

impl<'a> Seen<'a> {
    fn stamp(ix: &Index<'a>, ledger: &Ledger, now: u64, ttl: u64) -> Self {
        let st = ix.st;
        let mut seen = Seen {
            stamps: Ledger::new(),
            expired: BTreeSet::new(),
            sessions: Vec::new(),
            lone_suggestions: BTreeSet::new(),
        };
        let mut stamp = |k: String, at_least: u64| -> (u64, bool) {
            let t = ledger.get(&k).copied().unwrap_or(now).max(at_least);
            seen.stamps.insert(k, t);
            (t, t.saturating_add(ttl) <= now)
        };
        for r in st.runs.keys().filter(|r| !ix.run_live(r)) {
            if stamp(key("run", r), 0).1 {
                seen.expired.insert(key("run", r));
            }
        }
        for s in st.sessions.sessions.values() {
            if ix.session_live(&s.id) {
                continue;
            }
            let (t, up) = stamp(key("session", &s.id), updated_at(s));
            if up {
                seen.expired.insert(key("session", &s.id));
            }
            seen.sessions.push((t, &s.created_at, &s.id));
        }
        let lone = st
            .suggestions
            .values()
            .filter(|s| !st.runs.contains_key(&s.run_id) && !suggestion_live(s));
        for s in lone {
            if stamp(key("suggestion", &s.id), 0).1 {
                seen.lone_suggestions.insert(s.id.clone());
            }
        }
        seen.sessions.sort();
        seen
    }
}

/// Sessions past their time, then the oldest finished ones past `max_sessions`; with them,
/// their runs.
fn choose_sessions(plan: &mut Plan, ix: &Index<'_>, seen: &Seen<'_>, max_sessions: usize) {
    let mut left = ix.st.sessions.sessions.len();
    for (_, _, id) in &seen.sessions {
        if seen.expired.contains(&key("session", id)) {
            plan.sessions.insert(id.to_string());
            left -= 1;
        }
    }
    for (_, _, id) in &seen.sessions {
        if left <= max_sessions {
            break;
        }
        if plan.sessions.insert(id.to_string()) {
            left -= 1;
        }
    }
    for id in &plan.sessions {
        plan.runs.extend(ix.runs(id).map(str::to_string));
    }
}

/// Runs past their time, in a session that stays or in none; then a session's oldest
/// finished runs past `max_runs`.
fn choose_runs(plan: &mut Plan, ix: &Index<'_>, seen: &Seen<'_>, max_runs: usize) {
    let st = ix.st;
    for r in st.runs.keys() {
        if seen.expired.contains(&key("run", r)) {
            plan.runs.insert(r.clone());
        }
    }
    for s in st.sessions.sessions.values() {
        if plan.sessions.contains(&s.id) {
            continue;
        }
        let mut runs: Vec<(&str, &str)> = ix
            .runs(&s.id)
            .filter(|r| !plan.runs.contains(*r))
            .map(|r| (st.runs[r].created_at.as_str(), r))
            .collect();
        runs.sort();
        let over = runs.len().saturating_sub(max_runs);
        let oldest_finished = runs.iter().filter(|(_, r)| !ix.run_live(r)).take(over);
        let oldest_finished: Vec<String> = oldest_finished.map(|(_, r)| r.to_string()).collect();
        plan.runs.extend(oldest_finished);
    }
}

/// When the session was last changed (seconds since the epoch; 0 when unreadable).
fn updated_at(s: &SessionRec) -> u64 {
    humantime::parse_rfc3339_weak(&s.updated_at)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;

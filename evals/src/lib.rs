//! Which agent should you trust? Read hunkgate feedback logs and score every agent by what
//! happened to its hunks.
//!
//! A hunk's *final* outcome counts (an accept that was later undone and rejected is a
//! rejection), so a user changing their mind does not inflate an agent's score. Conflicts are
//! counted separately: they say more about how stale the run was than about the agent. So are
//! hunks decided in part (a line range accepted or rejected, feedback outcome `partial`): such a
//! decision is neither an accept nor a reject of the hunk, and what it left to decide is a hunk
//! of its own, whose final outcome counts like any other.
//!
//! Given the hub's journal too (`state.jsonl`), each agent also gets the run metrics of seed 000
//! §16: task success rate (runs with at least one hunk kept), tool calls per successful run,
//! p50/p95 time waiting for the model, tokens, clarification rate and how runs ended. The
//! built-in agent records itself as `builtin:<model>`, so models are compared directly.
//!
//! The task suite (`evals/tasks/`, format in `evals/README.md`) is run by [`runner`] against
//! real hubs and summarised by [`metrics`]; [`scripted`] is the model behind the `asks`
//! reference agent.

pub mod metrics;
pub mod replay;
pub mod report;
pub mod runner;
pub mod scripted;
pub mod task;

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::{Deserialize, Serialize};

/// The fields of a feedback line this report needs (the log has more; see protocol.md).
#[derive(Debug, Deserialize)]
struct Line {
    hunk_id: String,
    suggestion_id: String,
    outcome: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    agent: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct AgentScore {
    pub agent: String,
    pub suggestions: usize,
    /// Hunks with a final decision.
    pub hunks: usize,
    pub accepted: usize,
    pub modified: usize,
    /// Accepted through a clean three-way merge with the user's edit that had made the hunk
    /// stale (feedback outcome `merged`).
    pub merged: usize,
    pub rejected: usize,
    /// Accept attempts that hit a conflict (a hunk can conflict and later be accepted).
    pub conflicts: usize,
    pub undos: usize,
    /// Hunks whose final decision was on a range of their lines: some lines accepted (landed)
    /// or rejected, the rest left as a hunk of its own. Not in `hunks`.
    pub partly_accepted: usize,
    pub partly_rejected: usize,
    /// (accepted + modified + merged) / hunks.
    pub kept_ratio: f64,
    /// accepted / hunks: kept exactly as proposed.
    pub exact_ratio: f64,
    /// From the hub's journal, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<RunStats>,
}

/// How an agent's runs went (seed 000 §16).
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct RunStats {
    pub runs: usize,
    /// Runs with at least one hunk accepted or modified.
    pub succeeded: usize,
    pub success_rate: f64,
    pub failed: usize,
    pub no_changes: usize,
    /// Mean tool calls of the successful runs (built-in agent).
    pub tool_calls_per_success: Option<f64>,
    /// Time waiting for the model per run, in ms (built-in agent).
    pub model_ms_p50: Option<u64>,
    pub model_ms_p95: Option<u64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Share of runs that asked the user a question.
    pub clarification_rate: f64,
    /// How the built-in agent's runs ended (`finished`, `budget_exhausted`, …).
    pub stop_reasons: BTreeMap<String, usize>,
}

/// The fields of a journaled run this report needs.
#[derive(Debug, Deserialize)]
struct RunLine {
    run_id: String,
    #[serde(default)]
    agent: Option<String>,
    status: String,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<UsageLine>,
}

#[derive(Debug, Default, Deserialize)]
struct UsageLine {
    #[serde(default)]
    tool_calls: u64,
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    model_ms: u64,
}

/// The nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub agents: Vec<AgentScore>,
    /// Lines that were not valid feedback records.
    pub skipped_lines: usize,
}

/// What the lines of feedback logs and journals say, per hunk, agent and run.
#[derive(Default)]
struct Read {
    /// hunk id -> (agent, suggestion, final outcome)
    last: BTreeMap<String, (String, String, String)>,
    conflicts: BTreeMap<String, usize>,
    undos: BTreeMap<String, usize>,
    skipped: usize,
    /// From journals: the newest record of each run, and the runs that asked a question.
    runs: BTreeMap<String, RunLine>,
    asked: std::collections::BTreeSet<String>,
    /// Hunks kept per run, from the feedback lines.
    run_of_suggestion: BTreeMap<String, String>,
}

impl Read {
    fn line(&mut self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            self.skipped += 1;
            return;
        };
        if let Some(kind) = value.get("t").and_then(|t| t.as_str()).map(str::to_string) {
            self.journal_record(&kind, value);
            return;
        }
        if let (Some(s), Some(r)) = (value["suggestion_id"].as_str(), value["run_id"].as_str()) {
            self.run_of_suggestion.insert(s.to_string(), r.to_string());
        }
        let Ok(rec) = serde_json::from_value::<Line>(value) else {
            self.skipped += 1;
            return;
        };
        let agent = rec.agent.unwrap_or_else(|| "(unknown)".into());
        match rec.outcome.as_str() {
            "conflict" => *self.conflicts.entry(agent).or_default() += 1,
            "undone" => {
                *self.undos.entry(agent).or_default() += 1;
                self.last.remove(&rec.hunk_id);
            }
            "applied" | "modified" | "merged" | "rejected" => {
                self.last
                    .insert(rec.hunk_id, (agent, rec.suggestion_id, rec.outcome));
            }
            "partial" => {
                let how = if rec.action == "accept" {
                    "partly_accepted"
                } else {
                    "partly_rejected"
                };
                self.last
                    .insert(rec.hunk_id, (agent, rec.suggestion_id, how.into()));
            }
            _ => self.skipped += 1,
        }
    }

    /// A journal record: a run, or a question a run asked.
    fn journal_record(&mut self, kind: &str, value: serde_json::Value) {
        match kind {
            "run" => match serde_json::from_value::<RunLine>(value) {
                Ok(r) => {
                    self.runs.insert(r.run_id.clone(), r);
                }
                Err(_) => self.skipped += 1,
            },
            "history" if value["tool"] == "clarify_user" => {
                if let Some(r) = value["run_id"].as_str() {
                    self.asked.insert(r.to_string());
                }
            }
            _ => {}
        }
    }

    /// The runs some of whose change is in the user's checkout.
    fn kept_runs(&self) -> std::collections::BTreeSet<String> {
        self.last
            .values()
            .filter(|(_, _, outcome)| !matches!(outcome.as_str(), "rejected" | "partly_rejected"))
            .filter_map(|(_, suggestion, _)| self.run_of_suggestion.get(suggestion).cloned())
            .collect()
    }
}

/// Each agent's score so far, and the suggestions its scored hunks came from.
type ByAgent = BTreeMap<String, (AgentScore, std::collections::BTreeSet<String>)>;

fn entry<'a>(
    by_agent: &'a mut ByAgent,
    agent: &str,
) -> &'a mut (AgentScore, std::collections::BTreeSet<String>) {
    let e = by_agent.entry(agent.to_string()).or_default();
    e.0.agent = agent.to_string();
    e
}

/// Score every agent in one or more feedback logs.
pub fn score(readers: impl IntoIterator<Item = impl BufRead>) -> std::io::Result<Report> {
    let mut read = Read::default();
    for reader in readers {
        for line in reader.lines() {
            read.line(&line?);
        }
    }
    let kept_runs = read.kept_runs();
    let mut by_agent = ByAgent::new();
    for (agent, suggestion, outcome) in std::mem::take(&mut read.last).into_values() {
        let (s, sugg) = entry(&mut by_agent, &agent);
        sugg.insert(suggestion);
        match outcome.as_str() {
            "partly_accepted" => s.partly_accepted += 1,
            "partly_rejected" => s.partly_rejected += 1,
            "applied" => s.accepted += 1,
            "modified" => s.modified += 1,
            "merged" => s.merged += 1,
            _ => s.rejected += 1,
        }
        // A partial decision is neither an accept nor a reject: not in `hunks`.
        s.hunks = s.accepted + s.modified + s.merged + s.rejected;
    }
    for (agent, n) in &read.conflicts {
        entry(&mut by_agent, agent).0.conflicts = *n;
    }
    for (agent, n) in &read.undos {
        entry(&mut by_agent, agent).0.undos = *n;
    }
    let mut per_agent_runs: BTreeMap<String, Vec<&RunLine>> = BTreeMap::new();
    for r in read.runs.values() {
        let agent = r.agent.clone().unwrap_or_else(|| "(unknown)".into());
        per_agent_runs.entry(agent).or_default().push(r);
    }
    for (agent, list) in per_agent_runs {
        entry(&mut by_agent, &agent).0.runs = Some(run_stats(&list, &kept_runs, &read.asked));
    }
    let mut agents: Vec<AgentScore> = by_agent
        .into_values()
        .map(|(mut s, sugg)| {
            s.suggestions = sugg.len();
            if s.hunks > 0 {
                s.kept_ratio = (s.accepted + s.modified + s.merged) as f64 / s.hunks as f64;
                s.exact_ratio = s.accepted as f64 / s.hunks as f64;
            }
            s
        })
        .collect();
    agents.sort_by(|a, b| {
        b.kept_ratio
            .total_cmp(&a.kept_ratio)
            .then(a.agent.cmp(&b.agent))
    });
    Ok(Report {
        agents,
        skipped_lines: read.skipped,
    })
}

fn run_stats(
    list: &[&RunLine],
    kept: &std::collections::BTreeSet<String>,
    asked: &std::collections::BTreeSet<String>,
) -> RunStats {
    let mut st = RunStats {
        runs: list.len(),
        ..RunStats::default()
    };
    let mut success_calls = Vec::new();
    let mut model_ms = Vec::new();
    for r in list {
        let ok = kept.contains(&r.run_id);
        if ok {
            st.succeeded += 1;
        }
        match r.status.as_str() {
            "failed" | "cancelled" => st.failed += 1,
            "no_changes" => st.no_changes += 1,
            _ => {}
        }
        if let Some(reason) = &r.stop_reason {
            *st.stop_reasons.entry(reason.clone()).or_default() += 1;
        }
        if let Some(u) = &r.usage {
            st.prompt_tokens += u.prompt_tokens;
            st.completion_tokens += u.completion_tokens;
            model_ms.push(u.model_ms);
            if ok {
                success_calls.push(u.tool_calls);
            }
        }
    }
    if st.runs > 0 {
        st.success_rate = st.succeeded as f64 / st.runs as f64;
        st.clarification_rate =
            list.iter().filter(|r| asked.contains(&r.run_id)).count() as f64 / st.runs as f64;
    }
    if !success_calls.is_empty() {
        st.tool_calls_per_success =
            Some(success_calls.iter().sum::<u64>() as f64 / success_calls.len() as f64);
    }
    model_ms.sort_unstable();
    st.model_ms_p50 = percentile(&model_ms, 50.0);
    st.model_ms_p95 = percentile(&model_ms, 95.0);
    st
}

/// A plain-text table, best agent first.
pub fn render(report: &Report) -> String {
    let mut out = format!(
        "{:<40} {:>5} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7}\n",
        "agent", "sugg", "hunks", "kept%", "exact%", "mod", "rej", "confl", "part+/-"
    );
    for a in &report.agents {
        let name: String = a.agent.chars().take(40).collect();
        out.push_str(&format!(
            "{:<40} {:>5} {:>5} {:>6.1} {:>6.1} {:>6} {:>6} {:>6} {:>7}\n",
            name,
            a.suggestions,
            a.hunks,
            a.kept_ratio * 100.0,
            a.exact_ratio * 100.0,
            a.modified,
            a.rejected,
            a.conflicts,
            format!("{}/{}", a.partly_accepted, a.partly_rejected)
        ));
    }
    let with_runs: Vec<(&AgentScore, &RunStats)> = report
        .agents
        .iter()
        .filter_map(|a| a.runs.as_ref().map(|r| (a, r)))
        .collect();
    if !with_runs.is_empty() {
        out.push_str(&format!(
            "\n{:<40} {:>5} {:>6} {:>6} {:>7} {:>8} {:>8} {:>9} {:>6}\n",
            "agent", "runs", "ok%", "failed", "calls/ok", "p50 ms", "p95 ms", "tokens", "ask%"
        ));
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        for (a, r) in with_runs {
            let name: String = a.agent.chars().take(40).collect();
            out.push_str(&format!(
                "{:<40} {:>5} {:>6.1} {:>6} {:>7} {:>8} {:>8} {:>9} {:>6.1}\n",
                name,
                r.runs,
                r.success_rate * 100.0,
                r.failed,
                r.tool_calls_per_success
                    .map(|c| format!("{c:.1}"))
                    .unwrap_or_else(|| "-".into()),
                opt(r.model_ms_p50),
                opt(r.model_ms_p95),
                r.prompt_tokens + r.completion_tokens,
                r.clarification_rate * 100.0
            ));
        }
    }
    if report.skipped_lines > 0 {
        out.push_str(&format!(
            "({} lines skipped: not feedback records)\n",
            report.skipped_lines
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(agent: &str, sugg: &str, hunk: &str, outcome: &str) -> String {
        serde_json::json!({"agent": agent, "suggestion_id": sugg, "hunk_id": hunk, "outcome": outcome, "action": "x"})
            .to_string()
    }

    #[test]
    fn merged_hunks_count_apart_and_as_kept() {
        let log = [
            line("a", "s1", "s1:f:0", "conflict"),
            line("a", "s1", "s1:f:0", "merged"),
            line("a", "s1", "s1:f:1", "applied"),
            line("a", "s1", "s1:f:2", "rejected"),
        ]
        .join("\n");
        let r = score([log.as_bytes()]).unwrap();
        let a = &r.agents[0];
        assert_eq!(
            (a.hunks, a.accepted, a.merged, a.rejected, a.conflicts),
            (3, 1, 1, 1, 1)
        );
        assert!((a.kept_ratio - 2.0 / 3.0).abs() < 1e-9, "{}", a.kept_ratio);
        assert!(
            (a.exact_ratio - 1.0 / 3.0).abs() < 1e-9,
            "{}",
            a.exact_ratio
        );
    }

    #[test]
    fn final_outcomes_count_and_agents_rank() {
        let log = [
            line("a", "s1", "s1:f:0", "applied"),
            line("a", "s1", "s1:f:1", "modified"),
            line("a", "s1", "s1:f:2", "conflict"),
            line("a", "s1", "s1:f:2", "applied"),
            line("b", "s2", "s2:f:0", "applied"),
            line("b", "s2", "s2:f:0", "undone"),
            line("b", "s2", "s2:f:0", "rejected"),
            line("b", "s3", "s3:f:0", "rejected"),
            "not json".to_string(),
        ]
        .join("\n");
        let r = score([log.as_bytes()]).unwrap();
        assert_eq!(r.skipped_lines, 1);
        assert_eq!(r.agents.len(), 2);
        let a = &r.agents[0];
        assert_eq!(
            (
                a.agent.as_str(),
                a.suggestions,
                a.hunks,
                a.accepted,
                a.modified,
                a.conflicts
            ),
            ("a", 1, 3, 2, 1, 1)
        );
        assert_eq!(a.kept_ratio, 1.0);
        let b = &r.agents[1];
        assert_eq!(
            (
                b.agent.as_str(),
                b.suggestions,
                b.hunks,
                b.rejected,
                b.undos
            ),
            ("b", 2, 2, 2, 1)
        );
        assert_eq!(b.kept_ratio, 0.0);
        let table = render(&r);
        assert!(table.lines().nth(1).unwrap().starts_with("a "), "{table}");
    }

    /// A hunk decided in part is neither accepted nor rejected: it is counted on its own, and
    /// its rest is a hunk like any other; undoing the partial decision takes it back.
    #[test]
    fn partial_decisions_are_neither_accepts_nor_rejects() {
        let partial = |hunk: &str, action: &str| {
            serde_json::json!({"agent": "a", "suggestion_id": "s1", "hunk_id": hunk,
                "outcome": "partial", "action": action, "lines": [3, 7]})
            .to_string()
        };
        let log = [
            partial("s1:f:0", "accept"),
            line("a", "s1", "s1:f:0~a3-7", "applied"),
            partial("s1:f:1", "reject"),
            line("a", "s1", "s1:f:1~r3-7", "rejected"),
            partial("s1:f:2", "accept"),
            line("a", "s1", "s1:f:2", "undone"),
            line("a", "s1", "s1:f:2", "applied"),
        ]
        .join("\n");
        let r = score([log.as_bytes()]).unwrap();
        assert_eq!(r.skipped_lines, 0);
        let a = &r.agents[0];
        assert_eq!((a.partly_accepted, a.partly_rejected), (1, 1));
        assert_eq!((a.hunks, a.accepted, a.rejected, a.undos), (3, 2, 1, 1));
        assert!(
            render(&r).lines().nth(1).unwrap().ends_with("1/1"),
            "{}",
            render(&r)
        );
    }

    #[test]
    fn journal_runs_give_success_latency_and_clarification_rates() {
        let run = |id: &str, status: &str, stop: &str, calls: u64, ms: u64| {
            serde_json::json!({"t": "run", "run_id": id, "agent": "builtin:m", "status": status,
                "prompt": "p", "created_at": "x", "stop_reason": stop,
                "usage": {"model_calls": 2, "tool_calls": calls, "prompt_tokens": 100,
                          "completion_tokens": 10, "model_ms": ms, "retries": 0, "schema_failures": 0}})
            .to_string()
        };
        let fb = |run: &str, sugg: &str, outcome: &str| {
            serde_json::json!({"agent": "builtin:m", "run_id": run, "suggestion_id": sugg,
                "hunk_id": format!("{sugg}:f:0"), "outcome": outcome})
            .to_string()
        };
        let journal = [
            run("r1", "working", "", 0, 0),
            run("r1", "ready", "finished", 4, 100),
            run("r2", "ready", "budget_exhausted", 12, 300),
            run("r3", "failed", "provider_error", 0, 50),
            serde_json::json!({"t": "history", "run_id": "r2", "kind": "tool", "tool": "clarify_user", "content": "", "ts": ""}).to_string(),
            serde_json::json!({"t": "seq", "upto": 9}).to_string(),
        ]
        .join("\n");
        let feedback = [fb("r1", "s1", "applied"), fb("r2", "s2", "rejected")].join("\n");
        let r = score([journal.as_bytes(), feedback.as_bytes()]).unwrap();
        assert_eq!(r.skipped_lines, 0);
        let a = &r.agents[0];
        let st = a.runs.as_ref().unwrap();
        assert_eq!((st.runs, st.succeeded, st.failed), (3, 1, 1));
        assert!((st.success_rate - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            st.tool_calls_per_success,
            Some(4.0),
            "only the run whose hunk was kept"
        );
        assert_eq!((st.model_ms_p50, st.model_ms_p95), (Some(100), Some(300)));
        assert_eq!(st.prompt_tokens, 300);
        assert!((st.clarification_rate - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(st.stop_reasons.get("budget_exhausted"), Some(&1));
        assert!(render(&r).contains("calls/ok"), "{}", render(&r));
        // Positive control: without the journal there are no run metrics.
        let r = score([feedback.as_bytes()]).unwrap();
        assert!(r.agents[0].runs.is_none());
    }
}

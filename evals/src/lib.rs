//! Which agent should you trust? Read hunkwise feedback logs and score every agent by what
//! happened to its hunks.
//!
//! A hunk's *final* outcome counts (an accept that was later undone and rejected is a
//! rejection), so a user changing their mind does not inflate an agent's score. Conflicts are
//! counted separately: they say more about how stale the run was than about the agent.

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
    pub rejected: usize,
    /// Accept attempts that hit a conflict (a hunk can conflict and later be accepted).
    pub conflicts: usize,
    pub undos: usize,
    /// (accepted + modified) / hunks.
    pub kept_ratio: f64,
    /// accepted / hunks: kept exactly as proposed.
    pub exact_ratio: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub agents: Vec<AgentScore>,
    /// Lines that were not valid feedback records.
    pub skipped_lines: usize,
}

/// Score every agent in one or more feedback logs.
pub fn score(readers: impl IntoIterator<Item = impl BufRead>) -> std::io::Result<Report> {
    // hunk id -> (agent, suggestion, final outcome)
    let mut last: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    let mut conflicts: BTreeMap<String, usize> = BTreeMap::new();
    let mut undos: BTreeMap<String, usize> = BTreeMap::new();
    let mut skipped = 0;
    for reader in readers {
        for line in reader.lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let Ok(rec) = serde_json::from_str::<Line>(&line) else {
                skipped += 1;
                continue;
            };
            let agent = rec.agent.unwrap_or_else(|| "(unknown)".into());
            match rec.outcome.as_str() {
                "conflict" => *conflicts.entry(agent).or_default() += 1,
                "undone" => {
                    *undos.entry(agent).or_default() += 1;
                    last.remove(&rec.hunk_id);
                }
                "applied" | "modified" | "rejected" => {
                    last.insert(rec.hunk_id, (agent, rec.suggestion_id, rec.outcome));
                }
                _ => skipped += 1,
            }
        }
    }
    let mut by_agent: BTreeMap<String, (AgentScore, std::collections::BTreeSet<String>)> =
        BTreeMap::new();
    for (agent, suggestion, outcome) in last.into_values() {
        let (s, sugg) = by_agent.entry(agent.clone()).or_default();
        s.agent = agent;
        sugg.insert(suggestion);
        s.hunks += 1;
        match outcome.as_str() {
            "applied" => s.accepted += 1,
            "modified" => s.modified += 1,
            _ => s.rejected += 1,
        }
    }
    for (agent, n) in &conflicts {
        let (s, _) = by_agent.entry(agent.clone()).or_default();
        s.agent = agent.clone();
        s.conflicts = *n;
    }
    for (agent, n) in &undos {
        let (s, _) = by_agent.entry(agent.clone()).or_default();
        s.agent = agent.clone();
        s.undos = *n;
    }
    let mut agents: Vec<AgentScore> = by_agent
        .into_values()
        .map(|(mut s, sugg)| {
            s.suggestions = sugg.len();
            if s.hunks > 0 {
                s.kept_ratio = (s.accepted + s.modified) as f64 / s.hunks as f64;
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
        skipped_lines: skipped,
    })
}

/// A plain-text table, best agent first.
pub fn render(report: &Report) -> String {
    let mut out = format!(
        "{:<40} {:>5} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
        "agent", "sugg", "hunks", "kept%", "exact%", "mod", "rej", "confl"
    );
    for a in &report.agents {
        let name: String = a.agent.chars().take(40).collect();
        out.push_str(&format!(
            "{:<40} {:>5} {:>5} {:>6.1} {:>6.1} {:>6} {:>6} {:>6}\n",
            name,
            a.suggestions,
            a.hunks,
            a.kept_ratio * 100.0,
            a.exact_ratio * 100.0,
            a.modified,
            a.rejected,
            a.conflicts
        ));
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
}

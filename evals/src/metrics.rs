//! Metrics of a results file, per agent × model (seed 000 §16).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::runner::ResultLine;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub agent: String,
    pub model: Option<String>,
    pub tasks: usize,
    pub succeeded: usize,
    pub success_rate: f64,
    pub hunks_decided: usize,
    /// (accepted + modified) / decided; `None` with no decided hunk.
    pub accepted_ratio: Option<f64>,
    /// modified / decided.
    pub modify_rate: Option<f64>,
    /// conflicts / decided.
    pub conflict_rate: Option<f64>,
    /// Share of the tasks with an accept attempt whose accepts all applied cleanly.
    pub apply_clean_rate: Option<f64>,
    /// Tool calls of the successful tasks / successes (built-in agent only).
    pub tool_calls_per_success: Option<f64>,
    pub wall_ms_p50: Option<u64>,
    pub wall_ms_p95: Option<u64>,
    pub model_ms_p50: Option<u64>,
    pub model_ms_p95: Option<u64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// prompt + completion tokens.
    pub tokens: u64,
    /// Share of tasks where the agent asked a question.
    pub clarification_rate: f64,
    pub stop_reasons: BTreeMap<String, usize>,
    pub statuses: BTreeMap<String, usize>,
    /// Success per tag (a task counts under each of its tags).
    pub per_tag: BTreeMap<String, TagRate>,
    /// Replay tasks (`hunkgate-evals replay`) among `tasks`.
    pub replay_tasks: usize,
    /// Of the changed lines users kept, the share the agent proposed (summed over replay tasks).
    pub kept_recall: Option<f64>,
    /// Of the changed lines users rejected, the share the agent did *not* propose.
    pub rejected_avoided: Option<f64>,
    /// Of the changed lines the agent proposed on replay tasks, the share users kept.
    pub replay_precision: Option<f64>,
    /// Suggestions whose checks came (checkers in the hub's config), and the `new`
    /// diagnostics on them.
    pub checked_suggestions: usize,
    pub new_diagnostics: usize,
    /// new diagnostics / checked suggestions: what a reviewer finds broken per suggestion.
    pub new_diagnostics_per_suggestion: Option<f64>,
    /// The built-in agent's `agent_mode`, when its runs had one.
    pub agent_mode: Option<String>,
    /// Tasks with a move to the remote provider (`hybrid_auto`).
    pub switched: usize,
    /// How many moves each trigger caused.
    pub switch_triggers: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TagRate {
    pub tasks: usize,
    pub succeeded: usize,
}

/// The analogues of Aider's polyglot benchmark numbers: its *pass rate* is our task success
/// rate, its *percent of well-formed edits* (edits the harness could apply) our apply-clean
/// rate. For scale, Aider's leaderboard's best entry reported 88.0 % / 91.6 %; different tasks,
/// so the numbers are side by side, not comparable.
pub const AIDER_BEST: (&str, f64, f64) = ("aider polyglot, best entry", 0.880, 0.916);

impl Metrics {
    /// Aider's "pass rate".
    pub fn pass_rate(&self) -> f64 {
        self.success_rate
    }
    /// Aider's "percent well-formed edits".
    pub fn well_formed_rate(&self) -> Option<f64> {
        self.apply_clean_rate
    }
    /// `agent` for command agents, `agent` (which is `builtin:<model>`) for the built-in one.
    pub fn label(&self) -> String {
        crate::runner::short_agent(&self.agent)
    }
}

/// The nearest-rank percentile of the values (in any order).
pub fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

fn ratio(n: usize, d: usize) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// One row per (agent, model), sorted by agent then model.
pub fn compute(lines: &[ResultLine]) -> Vec<Metrics> {
    let mut groups: BTreeMap<(String, Option<String>), Vec<&ResultLine>> = BTreeMap::new();
    for l in lines {
        groups
            .entry((l.agent.clone(), l.model.clone()))
            .or_default()
            .push(l);
    }
    groups
        .into_iter()
        .map(|((agent, model), ls)| {
            let mut m = Metrics {
                agent,
                model,
                tasks: ls.len(),
                ..Metrics::default()
            };
            let (mut kept, mut modified, mut conflicts) = (0, 0, 0);
            let (mut clean, mut attempted) = (0, 0);
            let (mut calls, mut calls_known) = (0u64, false);
            let mut asked = 0;
            let mut wall = Vec::new();
            let mut model_ms = Vec::new();
            let (mut kept_lines, mut kept_hit, mut rej_lines, mut rej_hit, mut proposed) =
                (0, 0, 0, 0, 0);
            for l in &ls {
                for t in &l.tags {
                    let r = m.per_tag.entry(t.clone()).or_default();
                    r.tasks += 1;
                    r.succeeded += usize::from(l.success);
                }
                if let Some(r) = &l.replay {
                    m.replay_tasks += 1;
                    kept_lines += r.kept;
                    kept_hit += r.kept_proposed;
                    rej_lines += r.rejected;
                    rej_hit += r.rejected_proposed;
                    proposed += r.proposed;
                }
                if l.success {
                    m.succeeded += 1;
                    if let Some(c) = l.tool_calls {
                        calls += c;
                        calls_known = true;
                    }
                }
                m.hunks_decided += l.hunks_decided;
                kept += l.hunks_accepted + l.hunks_modified;
                modified += l.hunks_modified;
                conflicts += l.hunks_conflicts;
                if let Some(c) = l.apply_clean {
                    attempted += 1;
                    clean += usize::from(c);
                }
                asked += usize::from(l.clarification_asked);
                wall.push(l.wall_ms);
                if let Some(ms) = l.model_ms {
                    model_ms.push(ms);
                }
                m.prompt_tokens += l.prompt_tokens.unwrap_or(0);
                m.completion_tokens += l.completion_tokens.unwrap_or(0);
                if let Some(r) = &l.stop_reason {
                    *m.stop_reasons.entry(r.clone()).or_default() += 1;
                }
                *m.statuses.entry(l.status.clone()).or_default() += 1;
                m.checked_suggestions += l.checked_suggestions;
                m.new_diagnostics += l.new_diagnostics;
            }
            m.new_diagnostics_per_suggestion = (m.checked_suggestions > 0)
                .then(|| m.new_diagnostics as f64 / m.checked_suggestions as f64);
            m.kept_recall = ratio(kept_hit, kept_lines);
            m.rejected_avoided = ratio(rej_hit, rej_lines).map(|r| 1.0 - r);
            m.replay_precision = ratio(kept_hit, proposed);
            m.tokens = m.prompt_tokens + m.completion_tokens;
            m.success_rate = ratio(m.succeeded, m.tasks).unwrap_or(0.0);
            m.accepted_ratio = ratio(kept, m.hunks_decided);
            m.modify_rate = ratio(modified, m.hunks_decided);
            m.conflict_rate = ratio(conflicts, m.hunks_decided);
            m.apply_clean_rate = ratio(clean, attempted);
            m.tool_calls_per_success = if calls_known {
                ratio(calls as usize, m.succeeded)
            } else {
                None
            };
            m.clarification_rate = ratio(asked, m.tasks).unwrap_or(0.0);
            m.wall_ms_p50 = percentile(&wall, 50.0);
            m.wall_ms_p95 = percentile(&wall, 95.0);
            m.model_ms_p50 = percentile(&model_ms, 50.0);
            m.model_ms_p95 = percentile(&model_ms, 95.0);
            add_routes(&mut m, &ls);
            m
        })
        .collect()
}

/// The rows' mode, and their moves to the remote provider by trigger.
fn add_routes(m: &mut Metrics, lines: &[&ResultLine]) {
    m.agent_mode = lines.iter().find_map(|l| l.agent_mode.clone());
    for l in lines {
        m.switched += usize::from(!l.switches.is_empty());
        for t in &l.switches {
            *m.switch_triggers.entry(t.clone()).or_default() += 1;
        }
    }
}

/// A plain-text table, one row per agent × model, then the stop reasons and statuses.
pub fn render(rows: &[Metrics]) -> String {
    let mut out = main_table(rows);
    out.push_str(&aider_table(rows));
    out.push_str(&replay_table(rows));
    out.push_str(&checks_table(rows));
    out.push_str(&modes_table(rows));
    out.push('\n');
    out.push_str(&statuses(rows));
    out
}

/// A percentage with one decimal, or `-`.
fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.1}", v * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// At most `n` characters of `s` (a column's width).
fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The model column: the model's name, or `-`.
fn model_col(m: &Metrics) -> String {
    cut(m.model.as_deref().unwrap_or("-"), 12)
}

/// Tasks, success, review outcomes, tool calls, times, tokens and clarifications.
fn main_table(rows: &[Metrics]) -> String {
    let num = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    let mut out = format!(
        "{:<28} {:<12} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>5}\n",
        "agent", "model", "tasks", "ok%", "kept%", "mod%", "confl%", "clean%", "calls",
        "wall p50", "wall p95", "mdl p50", "mdl p95", "tokens", "ask%"
    );
    for m in rows {
        out.push_str(&format!(
            "{:<28} {:<12} {:>5} {:>6.1} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>5.1}\n",
            cut(&crate::runner::short_agent(&m.agent), 28),
            model_col(m),
            m.tasks,
            m.success_rate * 100.0,
            pct(m.accepted_ratio),
            pct(m.modify_rate),
            pct(m.conflict_rate),
            pct(m.apply_clean_rate),
            m.tool_calls_per_success
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "-".into()),
            num(m.wall_ms_p50),
            num(m.wall_ms_p95),
            num(m.model_ms_p50),
            num(m.model_ms_p95),
            m.prompt_tokens + m.completion_tokens,
            m.clarification_rate * 100.0,
        ));
    }
    out
}

/// Aider's polyglot benchmark's two figures, with its best published result beside them.
fn aider_table(rows: &[Metrics]) -> String {
    let mut out = format!(
        "\nAider polyglot analogues: {:<28} {:<12} {:>9} {:>11}\n",
        "agent", "model", "pass%", "well-formed%"
    );
    for m in rows {
        out.push_str(&format!(
            "                          {:<28} {:<12} {:>9.1} {:>11}\n",
            cut(&m.label(), 28),
            model_col(m),
            m.pass_rate() * 100.0,
            pct(m.well_formed_rate()),
        ));
    }
    out.push_str(&format!(
        "                          {:<41} {:>9.1} {:>11.1}\n",
        AIDER_BEST.0,
        AIDER_BEST.1 * 100.0,
        AIDER_BEST.2 * 100.0
    ));
    out
}

/// Replays of a feedback log: what the user kept that each reproduced, what they rejected
/// that it avoided. Empty without replay tasks.
fn replay_table(rows: &[Metrics]) -> String {
    let mut out = String::new();
    if rows.iter().any(|m| m.replay_tasks > 0) {
        out.push_str(&format!(
            "\nreplay: {:<28} {:<12} {:>5} {:>7} {:>9} {:>6}\n",
            "agent", "model", "runs", "kept%", "avoided%", "prec%"
        ));
        for m in rows.iter().filter(|m| m.replay_tasks > 0) {
            out.push_str(&format!(
                "        {:<28} {:<12} {:>5} {:>7} {:>9} {:>6}\n",
                cut(&m.label(), 28),
                model_col(m),
                m.replay_tasks,
                pct(m.kept_recall),
                pct(m.rejected_avoided),
                pct(m.replay_precision),
            ));
        }
    }
    out
}

/// The checkers' new diagnostics per suggestion. Empty when the hub checked nothing.
fn checks_table(rows: &[Metrics]) -> String {
    let mut out = String::new();
    if rows.iter().any(|m| m.checked_suggestions > 0) {
        out.push_str(&format!(
            "\nchecks: {:<28} {:<12} {:>11} {:>5} {:>10}\n",
            "agent", "model", "suggestions", "new", "new/sugg."
        ));
        for m in rows.iter().filter(|m| m.checked_suggestions > 0) {
            out.push_str(&format!(
                "        {:<28} {:<12} {:>11} {:>5} {:>10.2}\n",
                cut(&m.label(), 28),
                model_col(m),
                m.checked_suggestions,
                m.new_diagnostics,
                m.new_diagnostics_per_suggestion.unwrap_or(0.0),
            ));
        }
    }
    out
}

/// The built-in agent per `agent_mode`, side by side (seed 000 §16's comparison matrix):
/// success, accepted hunks, and the moves to the remote provider with their triggers.
fn modes_table(rows: &[Metrics]) -> String {
    let mut out = String::new();
    let moded: Vec<&Metrics> = rows.iter().filter(|m| m.agent_mode.is_some()).collect();
    if moded.is_empty() {
        return out;
    }
    out.push_str(&format!(
        "\nmodes:  {:<12} {:>5} {:>8} {:>9} {:>8}  {}\n",
        "agent_mode", "tasks", "success", "accepted", "switched", "triggers"
    ));
    for m in moded {
        out.push_str(&format!(
            "        {:<12} {:>5} {:>8} {:>9} {:>8}  {}\n",
            cut(m.agent_mode.as_deref().unwrap_or("-"), 12),
            m.tasks,
            pct(Some(m.success_rate)),
            pct(m.accepted_ratio),
            m.switched,
            trigger_list(&m.switch_triggers),
        ));
    }
    out
}

/// `schema_fail 2, timeout 1`, or `-`.
pub fn trigger_list(t: &BTreeMap<String, usize>) -> String {
    if t.is_empty() {
        return "-".into();
    }
    t.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How each agent's runs ended: statuses and stop reasons, one line each.
fn statuses(rows: &[Metrics]) -> String {
    let list = |map: &BTreeMap<String, usize>| {
        map.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::new();
    for m in rows {
        out.push_str(&format!(
            "{}: statuses: {}{}\n",
            crate::runner::short_agent(&m.agent),
            list(&m.statuses),
            if m.stop_reasons.is_empty() {
                String::new()
            } else {
                format!("; stop reasons: {}", list(&m.stop_reasons))
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7], 95.0), Some(7));
        let v: Vec<u64> = (1..=20).rev().collect();
        assert_eq!(percentile(&v, 50.0), Some(10));
        assert_eq!(percentile(&v, 95.0), Some(19));
        assert_eq!(percentile(&[3, 1, 2], 50.0), Some(2));
        assert_eq!(percentile(&[3, 1, 2], 100.0), Some(3));
    }

    #[test]
    fn ratios_count_hunks_tasks_and_successes() {
        let l = |task: &str, ok: bool, acc, m, rej, c, clean: Option<bool>| ResultLine {
            task: task.into(),
            agent: "a".into(),
            status: "ready".into(),
            success: ok,
            hunks_decided: acc + m + rej + c,
            hunks_accepted: acc,
            hunks_modified: m,
            hunks_rejected: rej,
            hunks_conflicts: c,
            apply_clean: clean,
            tool_calls: Some(4),
            wall_ms: 100,
            model_ms: Some(10),
            prompt_tokens: Some(5),
            completion_tokens: Some(1),
            stop_reason: Some("finished".into()),
            ..ResultLine::default()
        };
        let mut other = l("t1", true, 1, 0, 0, 0, Some(true));
        other.agent = "b".into();
        other.model = Some("m".into());
        let lines = vec![
            l("t1", true, 2, 1, 1, 0, Some(true)),
            l("t2", false, 0, 0, 0, 2, Some(false)),
            l("t3", false, 0, 0, 0, 0, None),
            other,
        ];
        let rows = compute(&lines);
        assert_eq!(rows.len(), 2);
        let a = &rows[0];
        assert_eq!((a.agent.as_str(), a.tasks, a.succeeded), ("a", 3, 1));
        assert!((a.success_rate - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(a.hunks_decided, 6);
        assert_eq!(a.accepted_ratio, Some(0.5));
        assert!((a.modify_rate.unwrap() - 1.0 / 6.0).abs() < 1e-9);
        assert!((a.conflict_rate.unwrap() - 2.0 / 6.0).abs() < 1e-9);
        assert_eq!(a.apply_clean_rate, Some(0.5), "t3 attempted nothing");
        assert_eq!(a.tool_calls_per_success, Some(4.0), "only successes count");
        assert_eq!((a.prompt_tokens, a.completion_tokens), (15, 3));
        assert_eq!(a.stop_reasons.get("finished"), Some(&3));
        assert_eq!(rows[1].model.as_deref(), Some("m"));
        let t = render(&rows);
        assert!(t.contains("33.3"), "{t}");
        // No hunks at all: the ratios are absent, not 0.
        let rows = compute(&[l("t", false, 0, 0, 0, 0, None)]);
        assert_eq!(rows[0].accepted_ratio, None);
        assert_eq!(rows[0].apply_clean_rate, None);
    }

    #[test]
    fn tags_replay_scores_tokens_and_aider_analogues() {
        let l = |task: &str,
                 tags: &[&str],
                 ok: bool,
                 replay: Option<(usize, usize, usize, usize, usize)>| {
            ResultLine {
                task: task.into(),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                agent: "builtin:m".into(),
                model: Some("m".into()),
                success: ok,
                apply_clean: Some(ok),
                prompt_tokens: Some(10),
                completion_tokens: Some(2),
                replay: replay.map(|(k, kp, r, rp, p)| crate::replay::ReplayScore {
                    kept: k,
                    kept_proposed: kp,
                    rejected: r,
                    rejected_proposed: rp,
                    proposed: p,
                    ..Default::default()
                }),
                ..ResultLine::default()
            }
        };
        let rows = compute(&[
            l("a", &["crlf", "create"], true, None),
            l("b", &["crlf"], false, None),
            l("r1", &["replay"], false, Some((4, 3, 2, 0, 5))),
            l("r2", &["replay"], true, Some((6, 6, 2, 1, 6))),
        ]);
        let m = &rows[0];
        assert_eq!(
            m.per_tag["crlf"],
            TagRate {
                tasks: 2,
                succeeded: 1
            }
        );
        assert_eq!(
            m.per_tag["create"],
            TagRate {
                tasks: 1,
                succeeded: 1
            }
        );
        assert_eq!(
            m.per_tag["replay"],
            TagRate {
                tasks: 2,
                succeeded: 1
            }
        );
        assert_eq!(m.replay_tasks, 2);
        assert_eq!(m.kept_recall, Some(0.9), "9 of 10 kept lines");
        assert_eq!(
            m.rejected_avoided,
            Some(0.75),
            "1 of 4 rejected lines proposed"
        );
        assert_eq!(m.replay_precision, Some(9.0 / 11.0));
        assert_eq!(m.tokens, 48);
        assert_eq!((m.pass_rate(), m.well_formed_rate()), (0.5, Some(0.5)));
        let t = render(&rows);
        assert!(t.contains("Aider polyglot analogues"), "{t}");
        assert!(t.contains("88.0") && t.contains("91.6"), "{t}");
        assert!(t.contains("replay:"), "{t}");
        // Without replay tasks the replay ratios are absent, not 0.
        let rows = compute(&[l("a", &["x"], true, None)]);
        assert_eq!(
            (rows[0].kept_recall, rows[0].rejected_avoided),
            (None, None)
        );
        assert!(!render(&rows).contains("replay:"));
    }

    #[test]
    fn new_diagnostics_are_counted_per_checked_suggestion() {
        let l = |agent: &str, checked, new| ResultLine {
            task: "t".into(),
            agent: agent.into(),
            checked_suggestions: checked,
            new_diagnostics: new,
            ..ResultLine::default()
        };
        let rows = compute(&[l("a", 2, 3), l("a", 1, 0), l("b", 0, 0)]);
        let a = rows.iter().find(|m| m.agent == "a").unwrap();
        assert_eq!((a.checked_suggestions, a.new_diagnostics), (3, 3));
        assert_eq!(a.new_diagnostics_per_suggestion, Some(1.0));
        let b = rows.iter().find(|m| m.agent == "b").unwrap();
        assert_eq!(
            b.new_diagnostics_per_suggestion, None,
            "nothing checked: no rate"
        );
        let t = render(&rows);
        assert!(t.contains("checks:"), "{t}");
        assert!(t.contains("1.00"), "{t}");
        assert!(
            !render(&rows[1..]).contains("checks:"),
            "only agents whose suggestions were checked"
        );
    }

    /// Rows per `agent_mode`: the tasks moved to the remote provider, and by which trigger,
    /// in the text table; no modes table without a moded row.
    #[test]
    fn modes_are_rows_with_their_moves() {
        let l = |agent: &str, mode: &str, ok: bool, switches: &[&str]| ResultLine {
            task: format!("t{}", switches.len()),
            agent: agent.into(),
            status: "ready".into(),
            success: ok,
            agent_mode: Some(mode.into()),
            switches: switches.iter().map(|s| s.to_string()).collect(),
            ..ResultLine::default()
        };
        let lines = [
            l("builtin@hybrid_auto", "hybrid_auto", true, &["schema_fail"]),
            l(
                "builtin@hybrid_auto",
                "hybrid_auto",
                true,
                &["timeout", "schema_fail"],
            ),
            l("builtin@hybrid_auto", "hybrid_auto", false, &[]),
            l("builtin@local", "local", false, &[]),
        ];
        let rows = compute(&lines);
        let h = &rows[0];
        assert_eq!(h.agent_mode.as_deref(), Some("hybrid_auto"));
        assert_eq!((h.tasks, h.switched), (3, 2));
        assert_eq!(trigger_list(&h.switch_triggers), "schema_fail 2, timeout 1");
        assert_eq!(
            (
                rows[1].switched,
                trigger_list(&rows[1].switch_triggers).as_str()
            ),
            (0, "-")
        );
        let text = render(&rows);
        assert!(text.contains("schema_fail 2, timeout 1"), "{text}");
        let plain = ResultLine {
            agent: "a".into(),
            ..ResultLine::default()
        };
        assert!(!render(&compute(&[plain])).contains("modes:"));
    }
}

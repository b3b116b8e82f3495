//! The report of a results file: markdown, and one self-contained HTML page whose charts are
//! inline SVG (no scripts, no external assets): success per tag, accepted-hunk ratio per agent ×
//! model, the wall-time distribution, and, for real logs, how things went over time (the daily
//! kept ratio of feedback logs, the daily kept-line recall of replay tasks).
//!
//! Every plotted datum is one SVG element with `class="datum"` and `data-chart="<chart id>"`
//! (`tag`, `accepted`, `latency`, `time`), so a test can count them in the rendered page.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::metrics::{self, Metrics, AIDER_BEST};
use crate::runner::ResultLine;

/// One point of a chart over time: a series (an agent, or an agent × model), a day, a ratio.
#[derive(Debug, Clone, PartialEq)]
pub struct TimePoint {
    pub series: String,
    /// `YYYY-MM-DD`.
    pub day: String,
    pub value: f64,
    /// How many hunks or lines the ratio is over.
    pub n: usize,
}

/// The daily share of hunks kept (accepted or modified, by their final decision, dated by it)
/// per agent, from feedback logs.
pub fn feedback_over_time(logs: &[PathBuf]) -> Result<Vec<TimePoint>> {
    // hunk -> (agent, day, kept)
    let mut last: BTreeMap<String, (String, String, bool)> = BTreeMap::new();
    for log in logs {
        let f = std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
        for line in std::io::BufReader::new(f).lines() {
            let line = line?;
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let (Some(hunk), Some(outcome), Some(ts)) = (
                v["hunk_id"].as_str(),
                v["outcome"].as_str(),
                v["ts"].as_str(),
            ) else {
                continue;
            };
            let agent = v["agent"].as_str().unwrap_or("(unknown)");
            let day: String = ts.chars().take(10).collect();
            match outcome {
                "applied" | "modified" | "rejected" => {
                    last.insert(
                        hunk.to_string(),
                        (
                            crate::runner::short_agent(agent),
                            day,
                            outcome != "rejected",
                        ),
                    );
                }
                "undone" => {
                    last.remove(hunk);
                }
                _ => {}
            }
        }
    }
    let mut by: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for (agent, day, kept) in last.into_values() {
        let e = by.entry((agent, day)).or_default();
        e.0 += usize::from(kept);
        e.1 += 1;
    }
    Ok(by
        .into_iter()
        .map(|((series, day), (k, n))| TimePoint {
            series: format!("kept hunks: {series}"),
            day,
            value: k as f64 / n as f64,
            n,
        })
        .collect())
}

/// The daily kept-line recall of replay results (dated by the original run), per agent × model.
pub fn replay_over_time(lines: &[ResultLine]) -> Vec<TimePoint> {
    let mut by: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    for l in lines {
        if let Some(r) = &l.replay {
            if r.kept == 0 {
                continue;
            }
            let day: String = r.ts.chars().take(10).collect();
            let e = by.entry((series(l), day)).or_default();
            e.0 += r.kept_proposed;
            e.1 += r.kept;
        }
    }
    by.into_iter()
        .map(|((s, day), (hit, n))| TimePoint {
            series: format!("replay kept lines: {s}"),
            day,
            value: hit as f64 / n as f64,
            n,
        })
        .collect()
}

fn series(l: &ResultLine) -> String {
    row_name(&l.agent, l.model.as_deref())
}

fn row_name(agent: &str, model: Option<&str>) -> String {
    let a = crate::runner::short_agent(agent);
    match model {
        Some(m) if !a.ends_with(m) => format!("{a} × {m}"),
        _ => a,
    }
}

fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.1} %", v * 100.0))
        .unwrap_or_else(|| "–".into())
}

fn num(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "–".into())
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The markdown report.
pub fn markdown(title: &str, lines: &[ResultLine], time: &[TimePoint]) -> String {
    let rows = metrics::compute(lines);
    let mut o = format!("# {}\n\n", md_cell(title));
    let _ = writeln!(
        o,
        "{} results, {} agent × model rows. Ratios per decided hunk; times in ms (nearest-rank \
         percentiles); `–` = nothing to measure.\n",
        lines.len(),
        rows.len()
    );
    o.push_str("| agent × model | tasks | success | accepted hunks | modify | conflict | apply clean | tool calls / success | wall p50 | wall p95 | model p50 | model p95 | tokens | clarification |\n");
    o.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for m in &rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            md_cell(&row_name(&m.agent, m.model.as_deref())),
            m.tasks,
            pct(Some(m.success_rate)),
            pct(m.accepted_ratio),
            pct(m.modify_rate),
            pct(m.conflict_rate),
            pct(m.apply_clean_rate),
            m.tool_calls_per_success
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "–".into()),
            num(m.wall_ms_p50),
            num(m.wall_ms_p95),
            num(m.model_ms_p50),
            num(m.model_ms_p95),
            m.tokens,
            pct(Some(m.clarification_rate)),
        );
    }
    o.push_str("\n## Aider polyglot analogues\n\nAider's *pass rate* ≈ our task success rate; its *well-formed edits* ≈ our apply-clean rate (the share of tasks whose accepted hunks all applied). Different tasks: side by side, not comparable.\n\n| | pass rate | well-formed edits |\n|---|--:|--:|\n");
    for m in &rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            md_cell(&row_name(&m.agent, m.model.as_deref())),
            pct(Some(m.pass_rate())),
            pct(m.well_formed_rate())
        );
    }
    let _ = writeln!(
        o,
        "| *{}* | *{}* | *{}* |",
        AIDER_BEST.0,
        pct(Some(AIDER_BEST.1)),
        pct(Some(AIDER_BEST.2))
    );
    md_replay(&mut o, &rows);
    md_modes(&mut o, &rows);
    md_tags(&mut o, &rows);
    md_statuses(&mut o, &rows);
    md_over_time(&mut o, time);
    o
}

/// The built-in agent per `agent_mode` side by side, when some rows ran in one: success,
/// accepted hunks, and the moves to the remote provider by trigger (seed 000 §12, §16).
fn md_modes(o: &mut String, rows: &[Metrics]) {
    let moded: Vec<&Metrics> = rows.iter().filter(|m| m.agent_mode.is_some()).collect();
    if moded.is_empty() {
        return;
    }
    o.push_str("\n## Local, remote and hybrid\n\nThe built-in agent per `agent_mode` on the same tasks; *switched* counts the tasks `hybrid_auto` moved to the remote provider, *triggers* why.\n\n| agent_mode | tasks | success | accepted hunks | tool calls / success | model p50 | tokens | switched | triggers |\n|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for m in moded {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            md_cell(m.agent_mode.as_deref().unwrap_or("–")),
            m.tasks,
            pct(Some(m.success_rate)),
            pct(m.accepted_ratio),
            m.tool_calls_per_success
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "–".into()),
            num(m.model_ms_p50),
            m.tokens,
            m.switched,
            md_cell(&metrics::trigger_list(&m.switch_triggers)),
        );
    }
}

/// The decision replay's table, when some rows have replayed runs.
fn md_replay(o: &mut String, rows: &[Metrics]) {
    if rows.iter().any(|m| m.replay_tasks > 0) {
        o.push_str("\n## Decision replay\n\nOn runs replayed from real feedback logs: of the changed lines the user kept, the share proposed; of those the user rejected, the share avoided; of those proposed, the share the user kept.\n\n| agent × model | runs | kept lines proposed | rejected lines avoided | precision |\n|---|--:|--:|--:|--:|\n");
        for m in rows.iter().filter(|m| m.replay_tasks > 0) {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                md_cell(&row_name(&m.agent, m.model.as_deref())),
                m.replay_tasks,
                pct(m.kept_recall),
                pct(m.rejected_avoided),
                pct(m.replay_precision)
            );
        }
    }
}

/// Success per tag, a column per row.
fn md_tags(o: &mut String, rows: &[Metrics]) {
    let tags: Vec<String> = tag_list(rows);
    if !tags.is_empty() {
        o.push_str("\n## Success per tag\n\n| tag |");
        for m in rows {
            let _ = write!(o, " {} |", md_cell(&row_name(&m.agent, m.model.as_deref())));
        }
        o.push_str("\n|---|");
        o.push_str(&"--:|".repeat(rows.len()));
        o.push('\n');
        for t in &tags {
            let _ = write!(o, "| {} |", md_cell(t));
            for m in rows {
                match m.per_tag.get(t) {
                    Some(r) => {
                        let _ = write!(o, " {}/{} |", r.succeeded, r.tasks);
                    }
                    None => o.push_str(" – |"),
                }
            }
            o.push('\n');
        }
    }
}

/// Each row's run statuses and stop reasons.
fn md_statuses(o: &mut String, rows: &[Metrics]) {
    o.push_str("\n## Statuses and stop reasons\n\n");
    for m in rows {
        let list = |map: &BTreeMap<String, usize>| {
            map.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            o,
            "- **{}**: {}{}",
            md_cell(&row_name(&m.agent, m.model.as_deref())),
            list(&m.statuses),
            if m.stop_reasons.is_empty() {
                String::new()
            } else {
                format!("; stop reasons: {}", list(&m.stop_reasons))
            }
        );
    }
}

/// The ratios over time, by day and series.
fn md_over_time(o: &mut String, time: &[TimePoint]) {
    if !time.is_empty() {
        o.push_str("\n## Over time\n\n| day | series | ratio | over |\n|---|---|--:|--:|\n");
        let mut t = time.to_vec();
        t.sort_by(|a, b| a.day.cmp(&b.day).then(a.series.cmp(&b.series)));
        for p in t {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                p.day,
                md_cell(&p.series),
                pct(Some(p.value)),
                p.n
            );
        }
    }
}

fn tag_list(rows: &[Metrics]) -> Vec<String> {
    let mut tags: Vec<String> = rows
        .iter()
        .flat_map(|m| m.per_tag.keys().cloned())
        .collect();
    tags.sort();
    tags.dedup();
    tags
}

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

const W: f64 = 820.0;
const LEFT: f64 = 220.0;
const RIGHT: f64 = 60.0;

fn legend(names: &[String]) -> String {
    let mut o = String::from("<ul class=\"legend\">");
    for (i, n) in names.iter().enumerate() {
        let _ = write!(
            o,
            "<li><span style=\"background:{}\"></span>{}</li>",
            color(i),
            esc(n)
        );
    }
    o.push_str("</ul>");
    o
}

/// A horizontal bar from 0 to `value` (0..=1) of the plot width at `y`.
fn bar(chart: &str, y: f64, h: f64, value: f64, fill: &str, title: &str) -> String {
    let w = (W - LEFT - RIGHT) * value.clamp(0.0, 1.0);
    format!(
        "<rect class=\"datum\" data-chart=\"{chart}\" data-value=\"{value:.4}\" x=\"{LEFT}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{fill}\"><title>{}</title></rect>\
         <text x=\"{:.1}\" y=\"{:.1}\" class=\"val\">{:.0} %</text>",
        w.max(1.0),
        esc(title),
        LEFT + w.max(1.0) + 4.0,
        y + h - 2.0,
        value * 100.0
    )
}

fn axis_pct(top: f64, bottom: f64) -> String {
    let mut o = String::new();
    for i in 0..=4 {
        let x = LEFT + (W - LEFT - RIGHT) * i as f64 / 4.0;
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" class=\"grid\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{}%</text>",
            bottom + 14.0,
            i * 25
        );
    }
    o
}

fn svg(id: &str, h: f64, body: &str) -> String {
    format!(
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h:.0}\" viewBox=\"0 0 {W} {h:.0}\" role=\"img\">{body}</svg>"
    )
}

fn tag_chart(rows: &[Metrics], names: &[String]) -> String {
    let tags = tag_list(rows);
    if tags.is_empty() {
        return "<p class=\"none\">No tagged results.</p>".into();
    }
    let bh = 9.0;
    let mut body = String::new();
    let mut y = 10.0;
    for t in &tags {
        let members: Vec<(usize, &Metrics)> = rows
            .iter()
            .enumerate()
            .filter(|(_, m)| m.per_tag.contains_key(t))
            .collect();
        let gh = members.len() as f64 * (bh + 2.0);
        let _ = write!(
            body,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + gh / 2.0 + 4.0,
            esc(t)
        );
        for (i, m) in members {
            let r = &m.per_tag[t];
            let v = r.succeeded as f64 / r.tasks as f64;
            body.push_str(&bar(
                "tag",
                y,
                bh,
                v,
                color(i),
                &format!("{t} · {}: {}/{}", names[i], r.succeeded, r.tasks),
            ));
            y += bh + 2.0;
        }
        y += 8.0;
    }
    let grid = axis_pct(4.0, y);
    svg("chart-tag", y + 24.0, &(grid + &body))
}

fn accepted_chart(rows: &[Metrics], names: &[String]) -> String {
    let bh = 18.0;
    let mut body = String::new();
    let mut y = 10.0;
    for (i, m) in rows.iter().enumerate() {
        let _ = write!(
            body,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + bh - 5.0,
            esc(&names[i])
        );
        match m.accepted_ratio {
            Some(v) => body.push_str(&bar(
                "accepted",
                y,
                bh,
                v,
                color(i),
                &format!(
                    "{}: {:.1} % of {} decided hunks kept",
                    names[i],
                    v * 100.0,
                    m.hunks_decided
                ),
            )),
            None => {
                let _ = write!(
                    body,
                    "<text x=\"{:.1}\" y=\"{:.1}\" class=\"val\">no hunk decided</text>",
                    LEFT + 4.0,
                    y + bh - 5.0
                );
            }
        }
        y += bh + 6.0;
    }
    let grid = axis_pct(4.0, y);
    svg("chart-accepted", y + 24.0, &(grid + &body))
}

fn latency_chart(rows: &[Metrics], names: &[String], lines: &[ResultLine]) -> String {
    let ms: Vec<u64> = lines.iter().map(|l| l.wall_ms.max(1)).collect();
    let (lo, hi) = (
        ms.iter().copied().min().unwrap_or(1) as f64,
        ms.iter().copied().max().unwrap_or(10) as f64,
    );
    let (lo, hi) = (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    );
    let x = |v: f64| LEFT + (W - LEFT - RIGHT) * (v.max(1.0).log10() - lo) / (hi - lo);
    let row_h = 26.0;
    let bottom = 10.0 + rows.len() as f64 * row_h;
    let mut body = String::new();
    let mut d = lo as i32;
    while d as f64 <= hi {
        let v = 10f64.powi(d);
        let label = if v >= 1000.0 {
            format!("{} s", v / 1000.0)
        } else {
            format!("{v} ms")
        };
        let _ = write!(
            body,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"4\" y2=\"{bottom:.1}\" class=\"grid\"/>\
             <text x=\"{0:.1}\" y=\"{1:.1}\" class=\"tick\" text-anchor=\"middle\">{label}</text>",
            x(v),
            bottom + 14.0
        );
        d += 1;
    }
    for (i, m) in rows.iter().enumerate() {
        let cy = 10.0 + i as f64 * row_h + row_h / 2.0;
        let _ = write!(
            body,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            cy + 4.0,
            esc(&names[i])
        );
        for l in lines
            .iter()
            .filter(|l| l.agent == m.agent && l.model == m.model)
        {
            let _ = write!(
                body,
                "<circle class=\"datum\" data-chart=\"latency\" data-value=\"{}\" cx=\"{:.1}\" cy=\"{cy:.1}\" r=\"4\" fill=\"{}\" fill-opacity=\"0.55\"><title>{} · {}: {} ms</title></circle>",
                l.wall_ms,
                x(l.wall_ms as f64),
                color(i),
                esc(&names[i]),
                esc(&l.task),
                l.wall_ms
            );
        }
        for (p, v) in [("p50", m.wall_ms_p50), ("p95", m.wall_ms_p95)] {
            if let Some(v) = v {
                let _ = write!(
                    body,
                    "<line class=\"marker\" x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\" stroke=\"#222\" stroke-width=\"2\"><title>{p}: {v} ms</title></line>",
                    x(v as f64),
                    cy - 9.0,
                    cy + 9.0
                );
            }
        }
    }
    svg("chart-latency", bottom + 24.0, &body)
}

fn time_chart(time: &[TimePoint]) -> (String, Vec<String>) {
    let mut days: Vec<&str> = time.iter().map(|p| p.day.as_str()).collect();
    days.sort();
    days.dedup();
    let mut names: Vec<String> = time.iter().map(|p| p.series.clone()).collect();
    names.sort();
    names.dedup();
    let (top, bottom, left) = (10.0, 210.0, 60.0);
    let x = |day: &str| {
        let i = days.iter().position(|d| *d == day).unwrap_or(0) as f64;
        if days.len() < 2 {
            (left + W - RIGHT) / 2.0
        } else {
            left + (W - RIGHT - left) * i / (days.len() - 1) as f64
        }
    };
    let y = |v: f64| bottom - (bottom - top) * v.clamp(0.0, 1.0);
    let mut body = String::new();
    for i in 0..=4 {
        let v = i as f64 / 4.0;
        let (x2, yv, tx, ty, label) = (W - RIGHT, y(v), left - 6.0, y(v) + 4.0, i * 25);
        let _ = write!(
            body,
            "<line x1=\"{left}\" x2=\"{x2:.1}\" y1=\"{yv:.1}\" y2=\"{yv:.1}\" class=\"grid\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\" class=\"tick\" text-anchor=\"end\">{label}%</text>"
        );
    }
    let step = (days.len() / 8).max(1);
    for (i, d) in days.iter().enumerate() {
        if i % step == 0 || i + 1 == days.len() {
            let _ = write!(
                body,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{}</text>",
                x(d),
                bottom + 16.0,
                esc(d)
            );
        }
    }
    for (si, s) in names.iter().enumerate() {
        let mut pts: Vec<&TimePoint> = time.iter().filter(|p| &p.series == s).collect();
        pts.sort_by(|a, b| a.day.cmp(&b.day));
        if pts.len() > 1 {
            let path: Vec<String> = pts
                .iter()
                .map(|p| format!("{:.1},{:.1}", x(&p.day), y(p.value)))
                .collect();
            let _ = write!(
                body,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                path.join(" "),
                color(si)
            );
        }
        for p in pts {
            let _ = write!(
                body,
                "<circle class=\"datum\" data-chart=\"time\" data-value=\"{:.4}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" fill=\"{}\"><title>{} · {}: {:.1} % of {}</title></circle>",
                p.value,
                x(&p.day),
                y(p.value),
                color(si),
                esc(s),
                esc(&p.day),
                p.value * 100.0,
                p.n
            );
        }
    }
    (svg("chart-time", bottom + 28.0, &body), names)
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff;max-width:900px}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}\
.wide{overflow-x:auto}table{border-collapse:collapse;font-size:11px}td,th{border:1px solid #ddd;padding:3px 5px;text-align:right}\
td:first-child,th:first-child{text-align:left;white-space:nowrap}th{background:#f3f3f3}\
.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:12px;font-size:12px}\
.legend span{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}\
svg text{font:11px system-ui,sans-serif;fill:#333}svg .grid{stroke:#e4e4e4}svg .val{fill:#555;font-size:10px}\
.none{color:#777;font-style:italic}";

/// The self-contained HTML page.
pub fn html(title: &str, lines: &[ResultLine], time: &[TimePoint]) -> String {
    let rows = metrics::compute(lines);
    let names: Vec<String> = rows
        .iter()
        .map(|m| row_name(&m.agent, m.model.as_deref()))
        .collect();
    let mut o = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body>\n<h1>{}</h1>\n<p>{} results, {} agent × model rows.</p>\n",
        esc(title),
        esc(title),
        lines.len(),
        rows.len()
    );
    o.push_str("<div class=\"wide\"><table><tr><th>agent × model</th><th>tasks</th><th>success</th><th>accepted hunks</th><th>modify</th><th>conflict</th><th>apply clean</th><th>tool calls / success</th><th>wall p50 ms</th><th>wall p95 ms</th><th>model p50 ms</th><th>model p95 ms</th><th>tokens</th><th>clarification</th></tr>\n");
    for (i, m) in rows.iter().enumerate() {
        let _ = writeln!(
            o,
            "<tr><td><span style=\"color:{}\">■</span> {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            color(i),
            esc(&names[i]),
            m.tasks,
            pct(Some(m.success_rate)),
            pct(m.accepted_ratio),
            pct(m.modify_rate),
            pct(m.conflict_rate),
            pct(m.apply_clean_rate),
            m.tool_calls_per_success
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "–".into()),
            num(m.wall_ms_p50),
            num(m.wall_ms_p95),
            num(m.model_ms_p50),
            num(m.model_ms_p95),
            m.tokens,
            pct(Some(m.clarification_rate)),
        );
    }
    o.push_str("</table></div>\n<h2>Aider polyglot analogues</h2>\n<p>Aider's pass rate ≈ our task success rate; its well-formed edits ≈ our apply-clean rate. Different tasks: side by side, not comparable.</p>\n<table><tr><th></th><th>pass rate</th><th>well-formed edits</th></tr>\n");
    for (i, m) in rows.iter().enumerate() {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&names[i]),
            pct(Some(m.pass_rate())),
            pct(m.well_formed_rate())
        );
    }
    let _ = writeln!(
        o,
        "<tr><td><i>{}</i></td><td><i>{}</i></td><td><i>{}</i></td></tr></table>",
        AIDER_BEST.0,
        pct(Some(AIDER_BEST.1)),
        pct(Some(AIDER_BEST.2))
    );
    if rows.iter().any(|m| m.replay_tasks > 0) {
        o.push_str("<h2>Decision replay</h2>\n<table><tr><th>agent × model</th><th>runs</th><th>kept lines proposed</th><th>rejected lines avoided</th><th>precision</th></tr>\n");
        for (i, m) in rows.iter().enumerate().filter(|(_, m)| m.replay_tasks > 0) {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&names[i]),
                m.replay_tasks,
                pct(m.kept_recall),
                pct(m.rejected_avoided),
                pct(m.replay_precision)
            );
        }
        o.push_str("</table>\n");
    }
    o.push_str("<h2>Success per tag</h2>\n");
    o.push_str(&legend(&names));
    o.push_str(&tag_chart(&rows, &names));
    o.push_str("\n<h2>Accepted-hunk ratio per agent × model</h2>\n<p>(accepted + modified) / decided hunks.</p>\n");
    o.push_str(&accepted_chart(&rows, &names));
    o.push_str("\n<h2>Wall time per task</h2>\n<p>One dot per task (log scale); bars mark p50 and p95.</p>\n");
    o.push_str(&latency_chart(&rows, &names, lines));
    o.push_str("\n<h2>Over time</h2>\n");
    if time.is_empty() {
        o.push_str("<p class=\"none\">No real logs given (<code>--feedback</code> or replay results).</p>\n");
    } else {
        let (chart, series) = time_chart(time);
        o.push_str(&legend(&series));
        o.push_str(&chart);
    }
    o.push_str("\n</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ReplayScore;

    fn l(task: &str, agent: &str, tags: &[&str], ok: bool, ms: u64) -> ResultLine {
        ResultLine {
            task: task.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            agent: agent.into(),
            status: "ready".into(),
            success: ok,
            hunks_decided: 2,
            hunks_accepted: usize::from(ok) * 2,
            hunks_rejected: usize::from(!ok) * 2,
            apply_clean: Some(true),
            wall_ms: ms,
            ..ResultLine::default()
        }
    }

    fn count(page: &str, chart: &str) -> usize {
        page.matches(&format!("data-chart=\"{chart}\"")).count()
    }

    #[test]
    fn every_datum_is_one_element_and_text_is_escaped() {
        let mut lines = vec![
            l("t1", "sh a.sh <x>", &["crlf", "multi-file"], true, 120),
            l("t2", "sh a.sh <x>", &["crlf"], false, 4000),
            l("t1", "b", &["crlf", "multi-file"], true, 90),
        ];
        let mut r = l("r1", "b", &["replay"], false, 50);
        r.replay = Some(ReplayScore {
            ts: "2026-03-02T10:00:00Z".into(),
            kept: 4,
            kept_proposed: 3,
            ..ReplayScore::default()
        });
        lines.push(r);
        let time = replay_over_time(&lines);
        assert_eq!(time.len(), 1);
        assert_eq!(time[0].value, 0.75);
        let page = html("t <&>", &lines, &time);
        // Tags: crlf (2 rows), multi-file (2 rows), replay (1 row).
        assert_eq!(count(&page, "tag"), 5);
        assert_eq!(count(&page, "accepted"), 2);
        assert_eq!(count(&page, "latency"), 4);
        assert_eq!(count(&page, "time"), 1);
        assert!(page.contains("t &lt;&amp;&gt;"));
        assert!(!page.contains("<x>"), "agent names are escaped");
        assert!(!page.contains("<script"), "no scripts");
        assert!(
            !page.contains("http://") || !page.contains("src=\"http"),
            "no external assets"
        );
        let md = markdown("t", &lines, &time);
        assert!(md.contains("| crlf | 1/1 | 1/2 |"), "{md}");
        assert!(md.contains("## Decision replay"), "{md}");
        assert!(
            md.contains("| 2026-03-02 | replay kept lines: b | 75.0 % | 4 |"),
            "{md}"
        );
    }

    #[test]
    fn feedback_logs_give_daily_kept_ratios_by_final_decision() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("feedback.jsonl");
        let rec = |ts: &str, hunk: &str, outcome: &str| {
            serde_json::json!({"ts": ts, "hunk_id": hunk, "outcome": outcome, "agent": "builtin:m"})
                .to_string()
        };
        let log = [
            rec("2026-01-01T10:00:00Z", "h1", "applied"),
            rec("2026-01-01T10:00:01Z", "h2", "rejected"),
            rec("2026-01-02T10:00:00Z", "h3", "modified"),
            rec("2026-01-02T11:00:00Z", "h3", "undone"),
            rec("2026-01-02T12:00:00Z", "h3", "rejected"),
            rec("2026-01-02T12:00:00Z", "h4", "conflict"),
            "garbage".into(),
        ]
        .join("\n");
        std::fs::write(&p, log).unwrap();
        let t = feedback_over_time(&[p]).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].day.as_str(), t[0].value, t[0].n),
            ("2026-01-01", 0.5, 2)
        );
        assert_eq!(
            (t[1].day.as_str(), t[1].value, t[1].n),
            ("2026-01-02", 0.0, 1)
        );
        assert_eq!(t[0].series, "kept hunks: builtin:m");
    }
}

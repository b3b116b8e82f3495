//! The reviewer's commands on suggestions: `list`, `show`, `accept`, `reject`, `undo`,
//! `complete`. Each prints the hub's reply read into the protocol's types (or, with `--json`,
//! the reply as it came); everything the agent wrote goes through [`visible`] first.

use std::process::ExitCode;

use anyhow::bail;
use clap::ValueEnum;
use serde_json::json;

use crate::cli::term::{short, visible, visible_line, wire};
use crate::cli::{reviewer_client, typed, ClientArgs};
use crate::protocol::{
    BulkReply, ChecksView, CompleteReply, DecisionReply, Diagnostic, HunkMerge, HunkView,
    MergeOutcome, SuggestionList, SuggestionSummary, SuggestionView,
};

#[derive(Clone, Copy, ValueEnum)]
pub enum Completion {
    Finalize,
    Discard,
}

pub async fn list(all: bool, client: ClientArgs) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let v = c
        .get(&format!(
            "/suggestions{}",
            if all { "?all=true" } else { "" }
        ))
        .await?;
    if client.json {
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    let list: SuggestionList = typed(v)?;
    if list.suggestions.is_empty() {
        println!("no suggestions");
    }
    for s in &list.suggestions {
        println!("{}", summary_line(s));
    }
    Ok(ExitCode::SUCCESS)
}

/// `<id8>  <state>  <reviewed>/<hunks>  <description>  (<files>)`.
fn summary_line(s: &SuggestionSummary) -> String {
    let state = match &s.closed {
        Some(closed) => visible_line(closed),
        None => wire(&s.status),
    };
    let files: Vec<String> = s.files.iter().map(|f| visible_line(f)).collect();
    format!(
        "{}  {:<8} {}/{}  {}  ({})",
        short(&s.id),
        state,
        s.reviewed_count,
        s.hunk_count,
        visible_line(&s.description),
        files.join(", ")
    )
}

/// `restore PATH`: the hub puts back the last version of PATH an accepted hunk deleted.
pub async fn restore(path: String, client: ClientArgs) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let v = c.post("/restore", json!({ "path": path })).await?;
    if client.json {
        println!("{v}");
    } else {
        let from = v["suggestion_id"].as_str().unwrap_or_default();
        println!(
            "restored  {} (deleted by suggestion {})",
            visible_line(v["path"].as_str().unwrap_or(&path)),
            visible_line(from)
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn show(
    id: String,
    hunk: Option<String>,
    client: ClientArgs,
) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let v = c.get(&format!("/suggestions/{id}")).await?;
    match hunk {
        None if client.json => println!("{v}"),
        None => print_suggestion(&typed(v)?),
        Some(name) => {
            let s: SuggestionView = typed(v)?;
            let id = hunk_name(&s, &name)?;
            let Some((i, h)) = s.hunks.iter().enumerate().find(|(_, h)| h.id == id) else {
                bail!("no hunk {name} in suggestion {}", short(&s.id));
            };
            if client.json {
                println!("{}", serde_json::to_string(h)?);
            } else {
                print_numbered(i + 1, h);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a reviewer is told about a hunk beside its id: `DESTRUCTIVE` (an accept-all leaves it
/// pending), `OVERSIZED` (over the hunk size limits, and no cut into parts applied on its own:
/// take it whole or by `--lines`), `REWRITE` (one of the hunks of a file the change rewrote).
fn marks(h: &HunkView) -> String {
    [
        (h.destructive, "  DESTRUCTIVE"),
        (h.oversized, "  OVERSIZED"),
        (h.rewrite, "  REWRITE"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, mark)| *mark)
    .collect()
}

/// One hunk with the lines of its diff after the `@@` line numbered from 1, the positions
/// `--lines FIRST-LAST` names.
fn print_numbered(n: usize, h: &HunkView) {
    println!(
        "[{n}] {:<9} {:<7} {}{}",
        wire(&h.state),
        wire(&h.kind),
        visible_line(&h.id),
        marks(h)
    );
    let mut lines = h.diff.lines();
    if let Some(header) = lines.next() {
        println!("     {}", visible_line(header));
    }
    for (k, line) in lines.enumerate() {
        println!("{:>4} {}", k + 1, visible_line(line));
    }
    print_diagnostics(&h.diagnostics);
    println!(
        "decide part of it: hunkgate accept|reject {} {n} --lines FIRST-LAST",
        short(&h.id)
    );
}

/// A suggestion and its hunks, every line of agent text made visible.
pub fn print_suggestion(s: &SuggestionView) {
    println!(
        "suggestion {}  {}  {}/{} reviewed{}",
        visible_line(&s.id),
        wire(&s.status),
        s.reviewed_count,
        s.hunk_count,
        s.closed
            .as_deref()
            .map(|c| format!(" ({})", visible_line(c)))
            .unwrap_or_default()
    );
    // Every line of the description indented, so none can pass for a hunk header.
    for line in s.description.split('\n') {
        println!("  {}", visible(line));
    }
    if !s.skipped.is_empty() {
        println!("  skipped (not reviewed, never changed by this suggestion):");
        for f in &s.skipped {
            println!("    {}: {}", visible_line(&f.path), visible_line(&f.reason));
        }
    }
    if let Some(checks) = &s.checks {
        print_checks(checks);
    }
    print_diagnostics(&s.diagnostics);
    for (i, h) in s.hunks.iter().enumerate() {
        println!(
            "\n[{}] {:<9} {:<7} {}{}",
            i + 1,
            wire(&h.state),
            wire(&h.kind),
            visible_line(&h.id),
            marks(h)
        );
        if let Some(d) = &h.description {
            for line in d.split('\n') {
                println!("    # {}", visible(line));
            }
        }
        if let Some(c) = &h.conflict {
            println!("    conflict: {}", visible_line(c));
        }
        if let Some([first, last]) = h.lines {
            println!("    decided lines {first}-{last} only; the rest is the next hunk");
        }
        print!("{}", visible(&h.diff));
        print_diagnostics(&h.diagnostics);
        if let Some(m) = &h.merge {
            print_merge(m);
        }
    }
}

/// How the checks went: `  checks: done (cargo-check, ruff)`, and a line per note.
fn print_checks(c: &ChecksView) {
    println!(
        "  checks: {} ({})",
        wire(&c.state),
        visible_line(&c.checkers.join(", "))
    );
    for note in &c.notes {
        println!("    {}", visible_line(note));
    }
}

/// Checker diagnostics, one line each, under what they belong to:
/// `    check: new error src/lib.rs:3:18 mismatched types [cargo-check E0308]`. Checker output
/// is the sandbox's text: made visible like the agent's.
fn print_diagnostics(ds: &[Diagnostic]) {
    for d in ds {
        println!("    {}", visible_line(&diagnostic_line(d)));
    }
}

fn diagnostic_line(d: &Diagnostic) -> String {
    let column = d.column.map(|c| format!(":{c}")).unwrap_or_default();
    let code = d
        .code
        .as_deref()
        .map(|c| format!(" {c}"))
        .unwrap_or_default();
    format!(
        "check: {} {} {}:{}{column} {} [{}{code}]",
        wire(&d.change),
        d.severity.as_str(),
        d.file,
        d.line,
        d.message,
        d.source
    )
}

/// A hunk's three-way merge with the user's file, under the agent's hunk.
fn print_merge(m: &HunkMerge) {
    let how = match m.outcome {
        MergeOutcome::Clean => format!(
            "clean; accept it with --merged-against {}",
            visible_line(&m.merged_against)
        ),
        MergeOutcome::Conflicted => "conflicted; resolve it with `hunkgate modify`".into(),
    };
    println!("    merged with your file ({how}):");
    print!("{}", visible(&m.diff));
}

/// `accept --merged-against SHA`: land the clean three-way merge of one hunk that `show`
/// printed, computed against the file of that SHA-256. If the file changed since, the hub
/// merges again and answers a conflict: `show` prints the new merge.
pub async fn accept_merged(
    client: ClientArgs,
    id: String,
    hunks: Vec<String>,
    merged_against: String,
    comment: Option<String>,
) -> anyhow::Result<ExitCode> {
    let [hunk] = hunks.as_slice() else {
        bail!("--merged-against accepts the merge of one hunk: name exactly one");
    };
    let c = reviewer_client(&client).await?;
    let s: SuggestionView = typed(c.get(&format!("/suggestions/{id}")).await?)?;
    let name = hunk_name(&s, hunk)?;
    let body = json!({"suggestion_id": s.id, "hunk_id": name, "action": "accept",
        "merged_against": merged_against, "comment": comment});
    let v = c.post("/feedback", body).await?;
    if client.json {
        println!("{v}");
    } else {
        let r: DecisionReply = typed(v)?;
        println!("{:<9} {}", wire(&r.hunk.state), visible_line(&r.hunk.id));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--lines FIRST-LAST` (or `--lines N`): a range of a hunk's diff lines, 1-based, inclusive.
pub fn parse_lines(text: &str) -> Result<[usize; 2], String> {
    let (first, last) = text.split_once('-').unwrap_or((text, text));
    let number = |n: &str| n.trim().parse::<usize>().ok().filter(|&n| n > 0);
    match (number(first), number(last)) {
        (Some(a), Some(b)) if a <= b => Ok([a, b]),
        _ => Err(format!(
            "{text:?} is not a line range: write FIRST-LAST (or one line N), counting the lines after the hunk's @@ line from 1"
        )),
    }
}

/// `accept` / `reject` / `undo`: the named hunks one by one, or every pending one at once; with
/// a line range, those lines of the one named hunk.
pub async fn decide(
    client: ClientArgs,
    id: String,
    hunks: Vec<String>,
    (action, lines): (&str, Option<[usize; 2]>),
    comment: Option<String>,
    include_destructive: bool,
) -> anyhow::Result<ExitCode> {
    if lines.is_some() && hunks.len() != 1 {
        bail!("--lines decides lines of one hunk: name exactly one (its number as `hunkgate show` prints it, or its id)");
    }
    // Every name is resolved before anything is decided: a bad one changes nothing.
    let hunks = if hunks.iter().any(|h| is_number(h)) {
        let c = reviewer_client(&client).await?;
        let s: SuggestionView = typed(c.get(&format!("/suggestions/{id}")).await?)?;
        hunks
            .iter()
            .map(|h| hunk_name(&s, h))
            .collect::<anyhow::Result<Vec<_>>>()?
    } else {
        hunks
    };
    let failed = if hunks.is_empty() {
        decide_all(&client, id, action, comment, include_destructive).await?
    } else {
        decide_each(&client, id, hunks, (action, lines), comment).await?
    };
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Returns whether any hunk failed.
async fn decide_all(
    client: &ClientArgs,
    id: String,
    action: &str,
    comment: Option<String>,
    confirm: bool,
) -> anyhow::Result<bool> {
    let c = reviewer_client(client).await?;
    let v = c
        .post(
            "/feedback/all",
            json!({"suggestion_id": id, "action": action, "comment": comment,
                "confirm": confirm}),
        )
        .await?;
    if client.json {
        println!("{v}");
    }
    let r: BulkReply = typed(v)?;
    if !client.json {
        for d in &r.decided {
            println!("{:<9} {}", wire(&d.state), visible_line(&d.hunk_id));
        }
        for f in &r.failed {
            println!(
                "FAILED    {}: {}",
                visible_line(&f.hunk_id),
                visible_line(&f.error)
            );
        }
        for k in &r.skipped_destructive {
            let why = k.why.as_deref().unwrap_or("destructive");
            println!(
                "SKIPPED   {}: {}",
                visible_line(&k.hunk_id),
                visible_line(why)
            );
        }
        println!("{} hunks remaining", r.remaining_hunks);
        if let Some(m) = &r.message {
            println!("{}", visible_line(m));
        }
    }
    Ok(!r.failed.is_empty())
}

/// Returns whether any hunk failed; each failure is reported and the rest still decided.
async fn decide_each(
    client: &ClientArgs,
    id: String,
    hunks: Vec<String>,
    (action, lines): (&str, Option<[usize; 2]>),
    comment: Option<String>,
) -> anyhow::Result<bool> {
    let c = reviewer_client(client).await?;
    let mut failed = false;
    for h in hunks {
        let mut body =
            json!({"suggestion_id": id, "hunk_id": h, "action": action, "comment": comment});
        if let Some(lines) = lines {
            body["lines"] = json!(lines);
        }
        let reply = match c.post("/feedback", body).await {
            Ok(v) if client.json => {
                println!("{v}");
                continue;
            }
            Ok(v) => typed::<DecisionReply>(v),
            Err(e) => Err(e.into()),
        };
        match reply {
            Ok(r) => print_decision(&r),
            Err(e) => {
                failed = true;
                eprintln!("{}: {}", visible_line(&h), visible(&e.to_string()));
            }
        }
    }
    Ok(failed)
}

/// A decided hunk, and the hunks the decision added (the rest of a line-range decision) or
/// took back (undoing one).
fn print_decision(r: &DecisionReply) {
    let h = &r.hunk;
    match h.lines {
        Some([a, b]) => println!(
            "{:<9} {} (lines {a}-{b})",
            wire(&h.state),
            visible_line(&h.id)
        ),
        None => println!("{:<9} {}", wire(&h.state), visible_line(&h.id)),
    }
    for n in &r.new_hunks {
        println!(
            "{:<9} {} (the rest of the hunk)",
            wire(&n.state),
            visible_line(&n.id)
        );
    }
    for gone in &r.removed_hunk_ids {
        println!(
            "removed   {} (the rest, back in the hunk)",
            visible_line(gone)
        );
    }
}

/// A hunk as the CLI takes it: its id, `<file>:<index>` (the end of its id: `index` counts from
/// 0 within the file), or its number as `show` prints it (from 1, in the suggestion's order).
/// What the hub is sent: the id for a number, anything else as it was typed.
pub fn hunk_name(s: &SuggestionView, name: &str) -> anyhow::Result<String> {
    if !is_number(name) {
        return Ok(name.to_string());
    }
    let n: usize = name.parse().map_err(|_| {
        anyhow::anyhow!(
            "no hunk {name}: suggestion {} has {} hunks",
            short(&s.id),
            s.hunks.len()
        )
    })?;
    if n == 0 {
        bail!("no hunk 0: hunks are numbered from 1, as `hunkgate show` prints them");
    }
    match s.hunks.get(n - 1) {
        Some(h) => Ok(h.id.clone()),
        None => bail!(
            "no hunk {n}: suggestion {} has {} hunks (numbered from 1)",
            short(&s.id),
            s.hunks.len()
        ),
    }
}

/// A hunk named by its number (all digits), not by its id or `<file>:<index>`.
fn is_number(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit())
}

pub async fn complete(
    id: String,
    action: Completion,
    client: ClientArgs,
) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let (action, done) = match action {
        Completion::Finalize => ("finalize", "finalized"),
        Completion::Discard => ("discard", "discarded"),
    };
    let v = c
        .post("/complete", json!({"suggestion_id": id, "action": action}))
        .await?;
    if client.json {
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    let r: CompleteReply = typed(v)?;
    println!(
        "{done} {}: {}/{} hunks applied{}",
        short(&r.suggestion_id),
        r.applied_hunks,
        r.hunk_count,
        r.reviewed_commit
            .as_deref()
            .map(|c| format!(
                ", checkpoint {}",
                visible_line(&c.chars().take(12).collect::<String>())
            ))
            .unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SuggestionStatus;

    fn summary(closed: Option<&str>) -> SuggestionSummary {
        SuggestionSummary {
            id: "0123456789abcdef".into(),
            jj_change_id: String::new(),
            description: "Shout\x1b[2K\nlines".into(),
            files: vec!["a.txt".into(), "b\x07.txt".into()],
            hunk_count: 2,
            reviewed_count: 1,
            status: SuggestionStatus::Partial,
            closed: closed.map(str::to_string),
            run_id: "r".into(),
            created_at: String::new(),
        }
    }

    #[test]
    fn a_summary_line_shows_state_counts_and_agent_text_made_visible() {
        assert_eq!(
            summary_line(&summary(None)),
            "01234567  partial  1/2  Shout^[[2K^Jlines  (a.txt, b^G.txt)"
        );
        assert!(summary_line(&summary(Some("finalize"))).starts_with("01234567  finalize 1/2"));
    }

    #[test]
    fn a_hunk_is_marked_destructive_oversized_and_rewrite_as_it_is() {
        let mut h: HunkView = serde_json::from_value(json!({"id": "s1:a:0", "file": "a",
            "diff": "", "kind": "modify", "index": 0, "state": "pending"}))
        .unwrap();
        assert_eq!(marks(&h), "");
        h.oversized = true;
        assert_eq!(marks(&h), "  OVERSIZED");
        h.destructive = true;
        h.rewrite = true;
        assert_eq!(marks(&h), "  DESTRUCTIVE  OVERSIZED  REWRITE");
    }

    #[test]
    fn a_diagnostic_is_one_line_naming_its_change_place_and_checker() {
        let mut d = Diagnostic {
            severity: crate::protocol::Severity::Error,
            source: "cargo-check".into(),
            code: Some("E0308".into()),
            message: "mismatched types".into(),
            file: "src/lib.rs".into(),
            line: 3,
            column: Some(18),
            change: crate::protocol::DiagnosticChange::New,
            hunk_id: None,
        };
        assert_eq!(
            diagnostic_line(&d),
            "check: new error src/lib.rs:3:18 mismatched types [cargo-check E0308]"
        );
        (d.code, d.column, d.change) = (None, None, crate::protocol::DiagnosticChange::Fixed);
        assert_eq!(
            diagnostic_line(&d),
            "check: fixed error src/lib.rs:3 mismatched types [cargo-check]"
        );
    }

    #[test]
    fn a_line_range_is_first_last_or_one_line() {
        assert_eq!(parse_lines("3-7"), Ok([3, 7]));
        assert_eq!(parse_lines("4"), Ok([4, 4]));
        for bad in ["0-2", "7-3", "x", "3-", "-3", ""] {
            let e = parse_lines(bad).unwrap_err();
            assert!(e.contains("FIRST-LAST"), "{bad}: {e}");
        }
    }

    #[test]
    fn hunk_numbers_count_from_1_and_other_names_pass_through() {
        let hunk = |id: &str, file: &str, index: usize| {
            json!({"id": id, "file": file, "diff": "", "kind": "modify", "index": index,
                "state": "pending"})
        };
        let s: SuggestionView = serde_json::from_value(json!({
            "id": "s1", "jj_change_id": "", "description": "", "files": ["a", "b"],
            "hunks": [hunk("s1:a:0", "a", 0), hunk("s1:a:1", "a", 1), hunk("s1:b:0", "b", 0)],
            "hunk_count": 3, "reviewed_count": 0, "status": "pending", "run_id": "r",
            "base_commit": "", "run_commit": "", "created_at": ""
        }))
        .unwrap();
        assert_eq!(hunk_name(&s, "1").unwrap(), "s1:a:0");
        assert_eq!(hunk_name(&s, "3").unwrap(), "s1:b:0");
        for (bad, says) in [("0", "numbered from 1"), ("4", "has 3 hunks")] {
            let e = hunk_name(&s, bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // Ids and `<file>:<index>` are the hub's to resolve.
        assert_eq!(hunk_name(&s, "s1:a:1").unwrap(), "s1:a:1");
        assert_eq!(hunk_name(&s, "b:0").unwrap(), "b:0");
    }
}

//! `hunkgate gc [--dry-run]`: collect finished work past its retention now (`POST /gc`), or
//! say what would go.

use std::process::ExitCode;

use serde_json::json;

use crate::cli::{reviewer_client, typed, ClientArgs};
use crate::protocol::GcReport;

pub async fn gc(dry_run: bool, client: ClientArgs) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let report: GcReport = typed(c.post("/gc", json!({ "dry_run": dry_run })).await?)?;
    if client.json {
        println!("{}", serde_json::to_value(&report)?);
    } else {
        println!("{}", describe(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The report in words.
pub fn describe(r: &GcReport) -> String {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    let bytes = if r.dry_run {
        format!("at least {} (journal records and run logs; the checkpoint objects they free are counted when they go)", human(r.bytes))
    } else {
        human(r.bytes)
    };
    format!(
        "{verb}: {} sessions, {} runs, {} suggestions, {} run logs, {} checkpoint refs\n\
         bytes: {bytes}\n\
         checkpoint store: {}\n\
         state dir now: {}\n\
         kept: {} suggestions waiting for review{}",
        r.sessions,
        r.runs,
        r.suggestions,
        r.logs,
        r.refs,
        r.objects,
        human(r.state_bytes),
        r.pending_suggestions,
        if r.feedback_rotated {
            "\nfeedback.jsonl rotated to feedback.jsonl.1"
        } else {
            ""
        },
    )
}

/// Bytes for people: `1.5 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {} ({bytes} bytes)", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_as_what_went_or_would_go() {
        let mut r = GcReport {
            dry_run: true,
            sessions: 2,
            runs: 3,
            suggestions: 4,
            logs: 3,
            refs: 9,
            bytes: 1536,
            state_bytes: 10,
            objects: "not touched (dry run)".into(),
            feedback_rotated: false,
            pending_suggestions: 1,
        };
        let text = describe(&r);
        assert!(
            text.starts_with(
                "would remove: 2 sessions, 3 runs, 4 suggestions, 3 run logs, 9 checkpoint refs"
            ),
            "{text}"
        );
        assert!(text.contains("at least 1.5 KiB (1536 bytes)"), "{text}");
        assert!(text.contains("kept: 1 suggestions waiting"), "{text}");
        r.dry_run = false;
        let text = describe(&r);
        assert!(text.starts_with("removed: "), "{text}");
        assert!(text.contains("bytes: 1.5 KiB"), "{text}");
        assert_eq!(human(10), "10 B");
    }
}

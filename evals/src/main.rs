//! `hunkgate-evals [--json] FILE...`: score agents from hunkgate feedback logs (and journals).

use std::io::BufReader;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut json = false;
    let mut files = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("usage: hunkgate-evals [--json] FILE...\n\nScores each agent by what happened to its hunks (final outcome per hunk), from\n<state-dir>/feedback.jsonl of a hunkgate hub. Given the hub's journal\n(<state-dir>/state.jsonl) too, it adds run metrics: success rate, tool calls per\nsuccessful run, p50/p95 model time, tokens, clarification rate, how runs ended.");
                return ExitCode::SUCCESS;
            }
            _ => files.push(arg),
        }
    }
    if files.is_empty() {
        eprintln!(
            "hunkgate-evals: name at least one feedback.jsonl (it is in the hub's state dir)"
        );
        return ExitCode::FAILURE;
    }
    let mut readers = Vec::new();
    for f in &files {
        match std::fs::File::open(f) {
            Ok(file) => readers.push(BufReader::new(file)),
            Err(e) => {
                eprintln!("hunkgate-evals: {f}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match hunkgate_evals::score(readers) {
        Ok(report) if json => match serde_json::to_string_pretty(&report) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hunkgate-evals: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(report) => {
            print!("{}", hunkgate_evals::render(&report));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hunkgate-evals: {e}");
            ExitCode::FAILURE
        }
    }
}

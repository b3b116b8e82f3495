//! The parsers on output captured from the real tools (`checker_fixtures/`: ruff 0.14.5 on a
//! Python file with two unused imports, an unused variable and a `== None`; cargo/clippy on a
//! crate with a type error, an unused variable and a needless `vec!`), and on garbage.

use super::*;

fn out(stdout: &str, stderr: &str) -> Output {
    Output {
        stdout: stdout.lines().map(String::from).collect(),
        stderr: stderr.lines().map(String::from).collect(),
    }
}

/// (file, line, column, severity, code)
type Row = (String, usize, Option<usize>, Severity, Option<String>);

fn summary(found: &[Found]) -> Vec<Row> {
    found
        .iter()
        .map(|f| (f.file.clone(), f.line, f.column, f.severity, f.code.clone()))
        .collect()
}

fn ruff_expected() -> Vec<Row> {
    [
        (1, 8, "F401"),
        (2, 8, "F401"),
        (6, 5, "F841"),
        (7, 17, "E711"),
    ]
    .into_iter()
    .map(|(l, c, code)| {
        (
            "a.py".to_string(),
            l,
            Some(c),
            Severity::Warning,
            Some(code.to_string()),
        )
    })
    .collect()
}

#[test]
fn ruff_json_array_json_lines_and_concise_read_the_same() {
    let root = "/tmp/ck/py";
    let array = parse(
        Format::RuffJson,
        &out(include_str!("checker_fixtures/ruff.json"), ""),
        root,
    );
    let lines = parse(
        Format::RuffJson,
        &out(include_str!("checker_fixtures/ruff.jsonl"), ""),
        root,
    );
    let concise = parse(
        Format::Gnu,
        &out(include_str!("checker_fixtures/ruff-concise.txt"), ""),
        root,
    );
    assert_eq!(summary(&array), ruff_expected());
    assert_eq!(array, lines);
    assert_eq!(summary(&concise), ruff_expected());
    assert_eq!(array[0].message, "`os` imported but unused");
    assert_eq!(concise[0].message, "`os` imported but unused");
}

#[test]
fn cargo_short_output_reads_as_gnu() {
    let check = parse(
        Format::Gnu,
        &out("", include_str!("checker_fixtures/cargo-check-short.txt")),
        "/tmp/ck/rs",
    );
    assert_eq!(
        summary(&check),
        vec![(
            "src/lib.rs".into(),
            3,
            Some(18),
            Severity::Error,
            Some("E0308".into())
        )]
    );
    assert_eq!(
        check[0].message,
        "mismatched types: expected `u32`, found `&str`"
    );
    let clippy = parse(
        Format::Gnu,
        &out("", include_str!("checker_fixtures/clippy-short.txt")),
        "/tmp/ck/rs",
    );
    assert_eq!(
        summary(&clippy),
        vec![
            ("src/lib.rs".into(), 2, Some(9), Severity::Warning, None),
            ("src/lib.rs".into(), 3, Some(13), Severity::Warning, None),
        ]
    );
    assert!(clippy[1].message.starts_with("useless use of `vec!`"));
}

#[test]
fn cargo_json_keeps_errors_and_warnings_once_each() {
    let errors = parse(
        Format::CargoJson,
        &out(include_str!("checker_fixtures/cargo-check.jsonl"), ""),
        "/tmp/ck/rs",
    );
    // The lib and its test target report the same error: kept once.
    assert_eq!(
        summary(&errors),
        vec![(
            "src/lib.rs".into(),
            3,
            Some(18),
            Severity::Error,
            Some("E0308".into())
        )]
    );
    assert_eq!(
        errors[0].message,
        "mismatched types: expected `u32`, found `&str`"
    );
    let warnings = parse(
        Format::CargoJson,
        &out(include_str!("checker_fixtures/cargo-warn.jsonl"), ""),
        "/tmp/ck/rs",
    );
    assert_eq!(
        summary(&warnings),
        vec![(
            "src/lib.rs".into(),
            2,
            Some(9),
            Severity::Warning,
            Some("unused_variables".into())
        )]
    );
    assert!(warnings[0].message.starts_with("unused variable: `unused`"));
}

#[test]
fn tsc_and_eslint_outputs_are_read() {
    let tsc = parse(
        Format::Tsc,
        &out(
            "src/a.ts(3,5): error TS2322: Type 'string' is not assignable to type 'number'.\n",
            "",
        ),
        "/r",
    );
    assert_eq!(
        summary(&tsc),
        vec![(
            "src/a.ts".into(),
            3,
            Some(5),
            Severity::Error,
            Some("TS2322".into())
        )]
    );
    let eslint = parse(
        Format::EslintJson,
        &out(
            r#"[{"filePath":"/r/src/b.js","messages":[{"ruleId":"no-unused-vars","severity":2,"message":"'x' is defined but never used.","line":1,"column":7},{"ruleId":null,"severity":1,"message":"m","line":4}]}]"#,
            "",
        ),
        "/r",
    );
    assert_eq!(
        summary(&eslint),
        vec![
            (
                "src/b.js".into(),
                1,
                Some(7),
                Severity::Error,
                Some("no-unused-vars".into())
            ),
            ("src/b.js".into(), 4, None, Severity::Warning, None),
        ]
    );
}

#[test]
fn paths_outside_the_tree_are_dropped() {
    assert_eq!(repo_path("/w/s/src/a.rs", "/w/s"), Some("src/a.rs".into()));
    assert_eq!(repo_path("./src//a.rs", "/w/s"), Some("src/a.rs".into()));
    assert_eq!(repo_path("/etc/passwd", "/w/s"), None);
    assert_eq!(repo_path("/w/sx/a.rs", "/w/s"), None);
    assert_eq!(repo_path("../other/a.rs", "/w/s"), None);
    assert_eq!(repo_path("src/../../a.rs", "/w/s"), None);
    assert_eq!(repo_path("", "/w/s"), None);
    let found = parse(
        Format::Gnu,
        &out(
            "/etc/shadow:1:1: error: x\n../up.rs:2: warning: y\nok.rs:3: z\n",
            "",
        ),
        "/w/s",
    );
    assert_eq!(
        summary(&found),
        vec![("ok.rs".into(), 3, None, Severity::Warning, None)]
    );
}

#[test]
fn garbage_is_skipped_and_never_an_error() {
    let garbage = "\u{0}\u{1b}[31mnot: a: diagnostic\nerror: could not compile `x`\n:1:2: empty file\n\
                   a.rs:0:1: line zero\na.rs:99999999999:1: too big\na.rs:-3:1: negative\n\
                   a.rs:x:1: no number\n{\"reason\":\"compiler-message\",\"message\":{\"level\":\"error\"\n\
                   [{\"filename\": 3}]\n{\"filename\":\"a.py\",\"location\":{\"row\":\"1\"}}\n\
                   a.rs:5:\n";
    for format in [
        Format::Gnu,
        Format::Tsc,
        Format::CargoJson,
        Format::RuffJson,
        Format::EslintJson,
    ] {
        assert_eq!(
            parse(format, &out(garbage, garbage), "/w"),
            vec![],
            "{format:?}"
        );
    }
    // Deeply nested JSON is refused by the parser's depth limit, not by the stack.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(parse(Format::RuffJson, &out(&deep, ""), "/w"), vec![]);
    assert_eq!(parse(Format::EslintJson, &out(&deep, ""), "/w"), vec![]);
}

#[test]
fn fields_are_bounded() {
    let long = "x".repeat(10 * Diagnostic::MAX_MESSAGE);
    let found = parse(
        Format::Gnu,
        &out(
            &format!("a.rs:1:1: error[{}]: {long}\n", "C".repeat(500)),
            "",
        ),
        "/w",
    );
    assert_eq!(found.len(), 1);
    assert!(found[0].message.len() <= Diagnostic::MAX_MESSAGE + '…'.len_utf8());
    assert_eq!(found[0].code, None, "a 500-byte code is not a code");
    let many: String = (1..=MAX_FOUND + 500)
        .map(|i| format!("a.rs:{i}: w\n"))
        .collect();
    assert_eq!(parse(Format::Gnu, &out(&many, ""), "/w").len(), MAX_FOUND);
    // A cut inside a multi-byte character stays valid UTF-8.
    assert_eq!(cut("ééé", 3), "é…");
}

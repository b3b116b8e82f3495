//! Unit tests of `agent/tools.rs` (a child module of it, so private items are in reach).
use super::*;

fn call(name: &str, args: &str) -> ToolCall {
    ToolCall {
        tool_call_id: "c".into(),
        name: name.into(),
        arguments: args.into(),
    }
}

/// The schemas are sent to the model on every step: any change to them, even key order
/// or a word of a description, is a wire change and must be deliberate. (Keys are in the
/// order the schemas write them: serde_json's `preserve_order` is on, asked for by the ACP
/// schema crate.)
#[test]
fn tool_specs_on_the_wire_are_pinned() {
    use sha2::{Digest, Sha256};
    let wire = serde_json::to_string(&tool_specs()).unwrap();
    let names: Vec<&str> = tool_specs().iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "list_files",
            "read_file",
            "search_project",
            "edit_file",
            "write_file",
            "move_file",
            "delete_file",
            "run_command",
            "clarify_user",
            "suggestion_status",
            "finish"
        ]
    );
    assert_eq!(
        (wire.len(), hex::encode(Sha256::digest(wire.as_bytes()))),
        (
            4581,
            String::from("db5d2bc25e08d58f7c685fc31a75e065f15511f12eebb3fdb0e06e055bae589b")
        ),
        "{wire}"
    );
}

#[test]
fn calls_are_validated_against_their_schemas() {
    let hash = format!("sha256:{}", "a".repeat(64));
    let good = format!(
        r#"{{"file_path":"a.rs","operation":"replace","start_line":1,"end_line":2,"new_text":"x","expected_hash":"{hash}"}}"#
    );
    assert!(matches!(
        parse_call(&call("edit_file", &good)),
        Ok(Action::File(FileTool::EditFile(_)))
    ));
    let cases = [
        ("edit_file", "{\"file_path\": \"a.rs\"", "not valid JSON"),
        ("edit_file", "[1]", "JSON object"),
        (
            "edit_file",
            r#"{"file_path":"a.rs","operation":"rewrite","start_line":1,"expected_hash":"x"}"#,
            "unknown variant",
        ),
        (
            "edit_file",
            &good.replace("\"end_line\":2,", ""),
            "needs end_line",
        ),
        ("edit_file", &good.replace(&hash, "abc"), "sha256"),
        (
            "edit_file",
            &good.replace("}", ",\"extra\":1}"),
            "unknown field",
        ),
        ("read_file", r#"{"file_path": 7}"#, "invalid type"),
        (
            "list_files",
            r#"{"prefix": "a", "bogus": 1}"#,
            "unknown field",
        ),
        ("read_file", r#"{"file_path": " "}"#, "empty"),
        ("rm_rf", "{}", "no tool \"rm_rf\""),
        ("finish", "{}", "missing field `description`"),
    ];
    for (name, a, want) in cases {
        let err = parse_call(&call(name, a)).unwrap_err();
        assert!(err.contains(want), "{name} {a}: {err}");
    }
    // Empty arguments are an empty object (servers send "" for no-argument calls).
    assert!(matches!(
        parse_call(&call("list_files", "")),
        Ok(Action::File(FileTool::ListFiles { .. }))
    ));
    // Every offered tool parses.
    for spec in tool_specs() {
        let err = parse_call(&call(spec.name, "{}"));
        assert!(
            err.as_ref().err().is_none_or(|e| !e.contains("no tool")),
            "{}",
            spec.name
        );
    }
}

#[test]
fn notes_follow_later_edits() {
    use hunkgate_sandbox::tools::Operation;
    let edit = |start, end: Option<usize>, op, text: &str, why: Option<&str>| {
        FileTool::EditFile(hunkgate_sandbox::tools::ProposedEdit {
            file_path: "a.rs".into(),
            operation: op,
            start_line: start,
            end_line: end,
            new_text: text.into(),
            expected_hash: String::new(),
            rationale: why.map(str::to_string),
            edit_id: None,
        })
    };
    let mut n = Notes::default();
    n.track(
        &edit(20, Some(20), Operation::Replace, "x", Some("late")),
        &json!({"changed_line_count": 1}),
    );
    // Three lines inserted above it push it down by three.
    n.track(
        &edit(5, None, Operation::Insert, "a\nb\nc", Some("early")),
        &json!({"changed_line_count": 3}),
    );
    // Two lines deleted above it pull it up by two.
    n.track(
        &edit(1, Some(2), Operation::Delete, "", None),
        &json!({"changed_line_count": 0}),
    );
    let lines: Vec<(Option<usize>, &str)> =
        n.0.iter()
            .map(|x| (x.line, x.description.as_str()))
            .collect();
    assert_eq!(lines, vec![(Some(21), "late"), (Some(3), "early")]);
    n.track(
        &FileTool::MoveFile {
            from_path: "a.rs".into(),
            to_path: "b.rs".into(),
        },
        &json!({}),
    );
    assert!(n.0.iter().all(|x| x.file == "b.rs"));
    n.track(
        &FileTool::DeleteFile {
            file_path: "b.rs".into(),
        },
        &json!({}),
    );
    assert!(n.0.is_empty());
}

#[test]
fn long_output_keeps_head_and_tail() {
    let mut cap = OutputCap::new(100);
    for i in 0..1000 {
        cap.push(&i.to_string());
    }
    let c = cap.finish();
    assert!(
        c.starts_with("0\n1\n") && c.ends_with("998\n999\n") && c.contains("bytes cut"),
        "{c}"
    );
    assert!(c.len() < 150, "{}", c.len());
    let mut small = OutputCap::new(100);
    small.push("only");
    assert_eq!(small.finish(), "only\n");
    assert_eq!(one_line("a\n\tb  c\x1b", 100), "a b c");
}

#[test]
fn check_is_offered_before_finish_only_with_checkers_and_takes_no_arguments() {
    let names = |checks| -> Vec<&str> { tool_specs_for(checks).iter().map(|t| t.name).collect() };
    assert_eq!(
        names(false),
        tool_specs().iter().map(|t| t.name).collect::<Vec<_>>()
    );
    let with = names(true);
    assert_eq!(&with[with.len() - 2..], ["check", "finish"]);
    assert_eq!(parse_call(&call("check", "{}")), Ok(Action::Check));
    assert_eq!(parse_call(&call("check", "")), Ok(Action::Check));
    assert!(parse_call(&call("check", r#"{"files": ["a"]}"#))
        .unwrap_err()
        .contains("invalid arguments for check"));
    let limits = LoopLimits::default();
    assert!(system_prompt(&limits, true).contains("call check"));
    assert!(!system_prompt(&limits, false).contains("check"));
}

//! The tool definitions and argument parsing, the hub's refusals and the summaries the agent reads.

use super::*;

/// The JSON a client sees.
fn wire(r: &CallToolResult) -> Value {
    serde_json::to_value(r).unwrap()
}

#[test]
fn the_four_tools_have_closed_schemas() {
    let tools = tools_json();
    let tools = tools.as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOL_NAMES);
    for t in tools {
        let schema = &t["inputSchema"];
        assert_eq!(schema["type"], "object", "{t}");
        assert_eq!(schema["additionalProperties"], false, "{t}");
        assert!(t["description"].as_str().unwrap().len() > 40, "{t}");
    }
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["description"]));
    // rmcp's Tool carries every field of ours, unchanged.
    let typed: Vec<Value> = super::tools()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    assert_eq!(Value::Array(typed), tools_json());
}

fn params(name: &str, args: Value) -> Option<Value> {
    Some(json!({"name": name, "arguments": args}))
}

#[test]
fn publish_arguments_are_parsed_into_their_fields() {
    assert_eq!(
        parse_call(params(
            "publish_suggestion",
            json!({"description": "d", "files": ["src/*"], "hunk_descriptions": [{"file": "a", "line": 3, "description": "why"}]}),
        )),
        Ok(ToolCall::Publish(PublishArgs {
            description: "d".into(),
            files: Some(vec!["src/*".into()]),
            hunk_descriptions: Some(vec![HunkNote {
                file: "a".into(),
                line: Some(3),
                description: "why".into()
            }]),
        }))
    );
}

#[test]
fn optional_arguments_may_be_left_out_or_null() {
    for (name, args) in [
        ("suggestion_status", json!({})),
        ("suggestion_status", json!({"suggestion_id": null})),
        ("list_suggestions", json!({})),
        ("list_suggestions", Value::Null),
        ("get_feedback", json!({"suggestion_id": "5f0c"})),
    ] {
        assert!(
            parse_call(params(name, args.clone())).is_ok(),
            "{name} {args}"
        );
    }
}

#[test]
fn wrong_arguments_are_refused_saying_what_is_wrong() {
    for (name, args, says) in [
        (
            "publish_suggestion",
            json!({}),
            "missing field `description`",
        ),
        (
            "publish_suggestion",
            json!({"description": 5}),
            "invalid type",
        ),
        (
            "publish_suggestion",
            json!({"description": "d", "bogus": 1}),
            "unknown field `bogus`",
        ),
        (
            "publish_suggestion",
            json!({"description": "d", "hunk_descriptions": [{"file": "a"}]}),
            "missing field `description`",
        ),
        (
            "publish_suggestion",
            json!({"description": "d", "hunk_descriptions": [{"file": "a", "description": "x", "line": -1}]}),
            "invalid value",
        ),
        (
            "list_suggestions",
            json!({"all": true}),
            "unknown field `all`",
        ),
        ("get_feedback", json!({"suggestion_id": 3}), "invalid type"),
        ("get_feedback", json!([]), "must be an object"),
    ] {
        match parse_call(params(name, args.clone())) {
            Err(BadCall::Arguments(msg)) => assert!(msg.contains(says), "{name} {args}: {msg}"),
            other => panic!("{name} {args}: {other:?}"),
        }
    }
}

#[test]
fn an_unknown_tool_is_refused_listing_the_tools() {
    match parse_call(params("delete_everything", json!({}))) {
        Err(BadCall::UnknownTool(msg)) => assert_eq!(
            msg,
            "unknown tool \"delete_everything\"; the tools are publish_suggestion, suggestion_status, list_suggestions, get_feedback"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_call_without_a_tool_name_is_an_unknown_tool() {
    for p in [None, Some(json!({})), Some(json!({"name": 3}))] {
        assert!(
            matches!(parse_call(p.clone()), Err(BadCall::UnknownTool(_))),
            "{p:?}"
        );
    }
}

#[tokio::test]
async fn without_the_environment_a_call_says_what_is_missing() {
    let hub = Err(ClientError::MissingEnv {
        missing: vec![TOKEN_VAR],
    });
    let r = wire(&call(&hub, ToolCall::List(NoArgs {})).await);
    assert_eq!(r["isError"], true);
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(
            "HUNKGATE_AGENT_TOKEN is not set: `hunkgate mcp` must run inside a hunkgate agent run"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_hub_is_a_tool_error() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hub = HubClient::new(&format!("http://127.0.0.1:{port}"), "t");
    let r = wire(
        &call(
            &hub,
            ToolCall::Feedback(FeedbackArgs {
                suggestion_id: None,
            }),
        )
        .await,
    );
    assert_eq!(r["isError"], true);
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("cannot reach the hub at http://127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("HUNKGATE_URL"), "{text}");
}

#[test]
fn hub_refusals_name_the_token() {
    let e = ClientError::Hub {
        status: 401,
        code: "unauthorized".into(),
        message: "invalid token".into(),
    };
    let t = explain(&e);
    assert!(
        t.contains("HUNKGATE_AGENT_TOKEN") && t.contains("invalid token"),
        "{t}"
    );
    let e = ClientError::Hub {
        status: 403,
        code: "forbidden".into(),
        message: "/agent/* is for the agent".into(),
    };
    let t = explain(&e);
    assert!(
        t.contains("not the reviewer token") && t.contains("403 forbidden"),
        "{t}"
    );
    let e = ClientError::Hub {
        status: 404,
        code: "not_found".into(),
        message: "no suggestion \"x\"".into(),
    };
    assert_eq!(
        explain(&e),
        "the hub answered 404 not_found: no suggestion \"x\""
    );
}

#[test]
fn summaries() {
    let s = json!({
        "id": "s1", "description": "Tidy\nmore", "status": "partial", "hunk_count": 2,
        "reviewed_count": 1, "files": ["a"], "run_commit": "c", "hunks": [
            {"id": "s1:a:0", "file": "a", "index": 0, "state": "rejected", "comment": "no", "diff": "@@"},
            {"id": "s1:a:1", "file": "a", "index": 1, "state": "pending", "diff": "@@"},
        ]
    });
    let c = compact_suggestion(&s);
    assert!(
        c.get("run_commit").is_none() && c["hunks"][0].get("diff").is_none(),
        "{c}"
    );
    assert_eq!(c["hunks"][0]["comment"], "no");
    assert_eq!(
        summarize_suggestion(&c),
        "Suggestion s1 \"Tidy\": partial, 1/2 hunks reviewed.\n  rejected  a:0 (comment: \"no\")\n  pending   a:1"
    );
    let fb = json!({"feedback": [{"suggestion_id": "s1", "description": "Tidy", "status": "partial",
        "hunks": [{"hunk_id": "s1:a:0", "file": "a", "state": "rejected", "comment": "no", "diff": "@@"}]}]});
    assert_eq!(
        summarize_feedback(&fb),
        "Suggestion s1 \"Tidy\": partial\n  rejected  a:0 (comment: \"no\")"
    );
    let list = json!([
        {"id": "old", "created_at": "2026-01-01T00:00:00.000Z"},
        {"id": "new", "created_at": "2026-01-02T00:00:00.000Z"},
        {"id": "same-time-later", "created_at": "2026-01-02T00:00:00.000Z"},
    ]);
    assert_eq!(newest(&list).as_deref(), Some("same-time-later"));
    assert_eq!(newest(&json!([])), None);
}

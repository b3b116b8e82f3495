use serde_json::json;

use super::*;

#[test]
fn the_client_speaks_v1_and_offers_no_file_system_or_terminal() {
    let p = initialize_params();
    assert_eq!(p["protocolVersion"], 1);
    assert_eq!(p["clientInfo"]["name"], "hunkgate");
    let caps = &p["clientCapabilities"];
    assert_ne!(caps["fs"]["readTextFile"], true, "{caps}");
    assert_ne!(caps["fs"]["writeTextFile"], true, "{caps}");
    assert_ne!(caps["terminal"], true, "{caps}");
}

#[test]
fn only_protocol_version_1_is_accepted() {
    let ok = json!({"protocolVersion": 1, "agentInfo": {"name": "opencode", "version": "1.2"}});
    assert_eq!(check_initialized(&ok), Ok(Some("opencode 1.2".into())));
    assert_eq!(check_initialized(&json!({"protocolVersion": 1})), Ok(None));
    let err = check_initialized(&json!({"protocolVersion": 2})).unwrap_err();
    assert!(err.contains("version 2"), "{err}");
    assert!(check_initialized(&json!({})).is_err());
}

#[test]
fn a_new_session_offers_hunkgate_mcp_in_the_sandbox() {
    let env = vec![("HUNKGATE_AGENT_TOKEN".to_string(), "t".to_string())];
    let p = new_session_params(
        std::path::Path::new("/sb/0"),
        std::path::Path::new("/bin/hunkgate"),
        &env,
    );
    assert_eq!(p["cwd"], "/sb/0");
    let mcp = &p["mcpServers"][0];
    assert_eq!(mcp["name"], "hunkgate");
    assert_eq!(mcp["command"], "/bin/hunkgate");
    assert_eq!(mcp["args"], json!(["mcp"]));
    assert_eq!(
        mcp["env"],
        json!([{"name": "HUNKGATE_AGENT_TOKEN", "value": "t"}])
    );
    assert_eq!(session_id(&json!({"sessionId": "s1"})), Ok("s1".into()));
    assert!(session_id(&json!({})).is_err());
}

/// `session/load` only where the agent said it can; the earlier session in the sandbox, with
/// `hunkgate mcp` offered as for a new one.
#[test]
fn a_session_is_loaded_only_where_the_agent_offers_it() {
    assert!(can_load_session(
        &json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}})
    ));
    for no in [
        json!({"protocolVersion": 1}),
        json!({"protocolVersion": 1, "agentCapabilities": {}}),
        json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": false}}),
        json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": "yes"}}),
    ] {
        assert!(!can_load_session(&no), "{no}");
    }
    let env = vec![("HUNKGATE_URL".to_string(), "http://h".to_string())];
    let p = load_session_params(
        "s-7",
        std::path::Path::new("/sb/0"),
        std::path::Path::new("/bin/hunkgate"),
        &env,
    );
    assert_eq!(p["sessionId"], "s-7");
    assert_eq!(p["cwd"], "/sb/0");
    assert_eq!(p["mcpServers"][0]["name"], "hunkgate");
    assert_eq!(p["mcpServers"][0]["args"], json!(["mcp"]));
    assert_eq!(
        p["mcpServers"][0]["env"],
        json!([{"name": "HUNKGATE_URL", "value": "http://h"}])
    );
}

#[test]
fn the_prompt_is_one_text_block_and_the_stop_reason_is_read() {
    let p = prompt_params("s1", "fix it");
    assert_eq!(p["sessionId"], "s1");
    assert_eq!(p["prompt"], json!([{"type": "text", "text": "fix it"}]));
    assert_eq!(
        stop_reason(&json!({"stopReason": "end_turn"})),
        Ok("end_turn".into())
    );
    assert_eq!(
        stop_reason(&json!({"stopReason": "cancelled"})),
        Ok("cancelled".into())
    );
    assert!(stop_reason(&json!({"stopReason": "bored"})).is_err());
    assert!(stop_reason(&json!({})).is_err());
}

fn update(u: serde_json::Value) -> Option<Progress> {
    progress(&json!({"sessionId": "s", "update": u}))
}

#[test]
fn updates_become_progress() {
    assert_eq!(
        update(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}})
        ),
        Some(Progress::Text {
            thought: false,
            text: "hi".into()
        })
    );
    assert_eq!(
        update(
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}})
        ),
        Some(Progress::Text {
            thought: true,
            text: "hm".into()
        })
    );
    assert_eq!(
        update(
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit", "kind": "edit",
            "status": "pending", "locations": [{"path": "/sb/a.txt"}]})
        ),
        Some(Progress::ToolStarted {
            id: "t1".into(),
            name: "edit".into(),
            summary: "Edit (/sb/a.txt)".into()
        })
    );
    assert_eq!(
        update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed"})
        ),
        Some(Progress::ToolEnded {
            id: "t1".into(),
            name: String::new(),
            ok: false,
            summary: String::new()
        })
    );
    assert_eq!(
        update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"})
        ),
        Some(Progress::Nothing)
    );
    assert_eq!(
        update(json!({"sessionUpdate": "plan", "entries": [
            {"content": "read", "priority": "high", "status": "completed"},
            {"content": "write", "priority": "high", "status": "pending"}]})),
        Some(Progress::Plan("Plan (1/2 done): read; write".into()))
    );
    assert_eq!(update(json!({"sessionUpdate": "no_such_thing"})), None);
    assert_eq!(progress(&json!({})), None);
}

fn permission(kind: &str) -> Permission {
    Permission::parse(&json!({
        "sessionId": "s",
        "toolCall": {"toolCallId": "t9", "title": "rm -rf build", "kind": kind, "rawInput": {"command": "rm -rf build"}},
        "options": [
            {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "once", "name": "Allow", "kind": "allow_once"},
            {"optionId": "never", "name": "Reject", "kind": "reject_once"}
        ]
    }))
    .unwrap()
}

fn selected(v: &Value) -> &str {
    assert_eq!(v["outcome"]["outcome"], "selected", "{v}");
    v["outcome"]["optionId"].as_str().unwrap()
}

#[test]
fn the_policy_allows_once_unless_the_kind_is_listed() {
    let p = permission("execute");
    let policy = vec!["execute".to_string()];
    assert!(p.must_ask(&policy));
    assert!(!p.must_ask(&[]));
    assert!(!permission("edit").must_ask(&policy));
    assert_eq!(selected(&p.allow()), "once");
    assert_eq!(selected(&p.reject()), "never");
}

#[test]
fn the_reviewer_answers_by_id_name_kind_or_yes_and_no() {
    let p = permission("execute");
    let q = p.question();
    assert!(
        q.contains("rm -rf build") && q.contains("once (Allow)"),
        "{q}"
    );
    for (answer, want) in [
        ("once", "once"),
        ("Always allow", "always"),
        ("reject_once", "never"),
        ("yes", "once"),
        (" No ", "never"),
    ] {
        assert_eq!(selected(&p.answer(answer).unwrap()), want, "{answer}");
    }
    assert_eq!(p.answer("maybe"), None);
    assert_eq!(cancelled_permission()["outcome"]["outcome"], "cancelled");
}

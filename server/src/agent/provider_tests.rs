//! Unit tests of `agent/provider.rs` (a child module of it, so private items are in reach).
use super::*;
use crate::agent::wire::StreamAssembler;
use crate::config::provider::{read_key_file, KeySource, Secret};
use crate::model::chat::{Message, StopReason, ToolCall};

fn test_config() -> ProviderConfig {
    ProviderConfig {
        base_url: "http://x".into(),
        model: "m".into(),
        api_key: None,
        key_source: KeySource::None,
        stream: true,
        max_retries: 0,
        retry_base: Duration::from_millis(1),
        request_timeout: Duration::from_secs(1),
        temperature: None,
        max_tokens: None,
    }
}

#[test]
fn secrets_never_print() {
    let s = Secret::new("sk-very-secret".into());
    assert_eq!(format!("{s:?}"), "Secret(***)");
    let cfg = ProviderConfig {
        api_key: Some(s),
        key_source: KeySource::Env("HUNKGATE_API_KEY".into()),
        ..test_config()
    };
    let dbg = format!("{cfg:?}");
    assert!(
        !dbg.contains("sk-very-secret") && dbg.contains("***"),
        "{dbg}"
    );
}

#[test]
fn parallel_tool_calls_reassemble_from_stream_pieces() {
    let mut a = StreamAssembler::default();
    for chunk in [
        r#"{"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"Look"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c0","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"file_path\":"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c1","type":"function","function":{"name":"list_files","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
        "[DONE]",
    ] {
        a.feed(chunk).unwrap();
    }
    let r = a.finish().unwrap();
    assert_eq!(r.stop_reason, StopReason::NeedsTools);
    assert_eq!(r.assistant_message.as_deref(), Some("Look"));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].arguments, r#"{"file_path":"a.rs"}"#);
    assert_eq!(r.tool_calls[1].name, "list_files");
    assert_eq!(r.usage.unwrap().total_tokens, 15);
    assert_eq!(r.model, "m1");
    // A stream cut before it finished is an error, not an empty answer.
    let mut cut = StreamAssembler::default();
    cut.feed(r#"{"choices":[{"index":0,"delta":{"content":"par"}}]}"#)
        .unwrap();
    assert!(cut.finish().is_err());
}

#[test]
fn errors_are_classified_across_server_wordings() {
    let cfg = test_config();
    let openai_ctx = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
    let llama_ctx = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
    let ollama_model = r#"{"error":{"message":"model \"qwen9\" not found, try pulling it first","type":"api_error"}}"#;
    let c = |status, raw: &str| classify(status, &error_message(raw), raw, "qwen9", &cfg);
    assert!(matches!(
        c(400, openai_ctx),
        Some(ProviderError::ContextOverflow { .. })
    ));
    assert!(matches!(
        c(400, llama_ctx),
        Some(ProviderError::ContextOverflow { .. })
    ));
    assert!(matches!(
        c(404, ollama_model),
        Some(ProviderError::ModelNotFound { .. })
    ));
    assert!(matches!(c(401, "{}"), Some(ProviderError::Auth { .. })));
    // Positive control: a plain 500 is not classified (it is retried).
    assert!(c(500, r#"{"error":{"message":"boom"}}"#).is_none());
    assert_eq!(error_message(r#"{"error":"plain"}"#), "plain");
}

#[test]
fn legacy_function_call_is_read_once_and_its_name_cleaned() {
    // llama-cpp-python (chatml-function-calling) sends the same call twice.
    let both = r#"{"model":"local","choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
        "function_call":{"name":"read_file:","arguments":"{\"file_path\":\"a\"}"},
        "tool_calls":[{"id":"call__0_read_file_cmpl-9","type":"function","function":{"name":"read_file","arguments":"{\"file_path\":\"a\"}"}}]}}]}"#;
    let r = parse_completion(both).unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].tool_call_id, "call__0_read_file_cmpl-9");
    assert_eq!(r.tool_calls[0].name, "read_file");
    assert_eq!(r.assistant_message, None);
    // Only the legacy field: it becomes the call.
    let legacy = r#"{"choices":[{"finish_reason":"function_call","message":{"role":"assistant",
        "function_call":{"name":"list_files:","arguments":{}}}}]}"#;
    let r = parse_completion(legacy).unwrap();
    assert_eq!(r.stop_reason, StopReason::NeedsTools);
    assert_eq!(r.tool_calls[0].name, "list_files");
    assert_eq!(r.tool_calls[0].arguments, "{}");
    // Streamed legacy deltas too.
    let mut a = StreamAssembler::default();
    a.feed(r#"{"choices":[{"delta":{"function_call":{"name":"finish:","arguments":"{\"summary\""}}}]}"#).unwrap();
    a.feed(r#"{"choices":[{"delta":{"function_call":{"arguments":":\"ok\"}"}},"finish_reason":"function_call"}]}"#).unwrap();
    let r = a.finish().unwrap();
    assert_eq!(r.tool_calls[0].name, "finish");
    assert_eq!(r.tool_calls[0].arguments, r#"{"summary":"ok"}"#);
}

#[test]
fn assistant_content_is_never_null_on_the_wire() {
    let m = Message::Assistant {
        content: None,
        tool_calls: vec![ToolCall {
            tool_call_id: "c".into(),
            name: "list_files".into(),
            arguments: "{}".into(),
        }],
    };
    assert_eq!(wire_message(&m)["content"], "");
}

#[test]
fn refusals_to_stream_and_invalid_requests_are_told_apart() {
    assert!(says_no_streaming(
        "Automatic streaming tool choice is not supported"
    ));
    assert!(!says_no_streaming("model is overloaded"));
    let mut unstarted = StreamAssembler::default();
    assert!(unstarted.is_unstarted());
    unstarted
        .feed(r#"{"choices":[{"delta":{"content":"a"}}]}"#)
        .unwrap();
    assert!(!unstarted.is_unstarted(), "a cut answer is not a refusal");
    let cfg = test_config();
    let pydantic = r#"{"error":{"message":"1 validation error for ChatCompletionRequestAssistantMessage
content
  Input should be a valid string","type":"internal_server_error"}}"#;
    let c = |status, raw: &str| classify(status, &error_message(raw), raw, "m", &cfg);
    assert!(matches!(
        c(500, pydantic),
        Some(ProviderError::Rejected { status: 500, .. })
    ));
    assert!(matches!(c(422, "{}"), Some(ProviderError::Rejected { .. })));
    assert!(c(503, r#"{"error":{"message":"loading model"}}"#).is_none());
}

#[test]
fn only_transient_failures_are_retried() {
    let p = OpenAiCompatible::new(test_config()).unwrap();
    let status = |status, body: &str| Attempt::Status {
        status,
        message: error_message(body),
        raw: body.to_string(),
        retry_after: Some(Duration::from_secs(3)),
    };
    let v = p.judge(status(503, r#"{"error":"busy"}"#), 2, "m");
    assert!(
        matches!(&v, Verdict::Retry { wait: Some(w), error: ProviderError::GaveUp { attempts: 2, status: 503, .. } } if w.as_secs() == 3),
        "{v:?}"
    );
    let v = p.judge(status(404, r#"{"error":"no route"}"#), 1, "m");
    assert!(
        matches!(&v, Verdict::GiveUp(ProviderError::Http { status: 404, message }) if message == "no route"),
        "{v:?}"
    );
    let v = p.judge(status(401, "{}"), 1, "m");
    assert!(
        matches!(v, Verdict::GiveUp(ProviderError::Auth { .. })),
        "{v:?}"
    );
    let v = p.judge(Attempt::Timeout, 1, "m");
    assert!(
        matches!(
            &v,
            Verdict::Retry {
                wait: None,
                error: ProviderError::Timeout {
                    secs: 1,
                    attempts: 1,
                    ..
                }
            }
        ),
        "{v:?}"
    );
    let v = p.judge(Attempt::Connect("refused".into()), 1, "m");
    assert!(
        matches!(
            &v,
            Verdict::Retry {
                error: ProviderError::Unreachable { .. },
                ..
            }
        ),
        "{v:?}"
    );
    let v = p.judge(Attempt::StreamRefused("closed".into()), 1, "m");
    assert!(
        matches!(v, Verdict::GiveUp(ProviderError::Malformed(_))),
        "{v:?}"
    );
}

#[test]
fn backoff_doubles_from_the_base_up_to_a_minute_unless_the_server_says() {
    let p = OpenAiCompatible::new(ProviderConfig {
        retry_base: Duration::from_millis(500),
        ..test_config()
    })
    .unwrap();
    let ms = |wait, attempts| p.backoff(wait, attempts).as_millis();
    assert_eq!(ms(None, 1), 500);
    assert_eq!(ms(None, 2), 1000);
    assert_eq!(ms(None, 4), 4000);
    assert_eq!(ms(None, 30), 60_000);
    assert_eq!(ms(Some(Duration::from_secs(2)), 4), 2000);
}

#[test]
fn key_files_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("key");
    std::fs::write(&p, "sk-1\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = read_key_file(&p).unwrap_err().to_string();
    assert!(e.contains("chmod 600") && !e.contains("sk-1"), "{e}");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(read_key_file(&p).unwrap().expose(), "sk-1");
}

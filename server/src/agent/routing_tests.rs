use super::*;
use crate::config::routing::{Routing, RoutingFile, Triggers};

fn cand(
    provider: &str,
    name: &str,
    context: Option<u64>,
    tools: Option<bool>,
    cost: Option<CostClass>,
) -> Candidate {
    Candidate {
        provider: provider.into(),
        meta: ModelMeta {
            name: name.into(),
            context,
            tools,
            cost,
        },
    }
}

fn three() -> Vec<Candidate> {
    vec![
        cand(
            "local",
            "tiny",
            Some(4096),
            Some(true),
            Some(CostClass::Free),
        ),
        cand(
            "remote",
            "mini",
            Some(32_000),
            Some(true),
            Some(CostClass::Cheap),
        ),
        cand(
            "remote",
            "big",
            Some(200_000),
            None,
            Some(CostClass::Expensive),
        ),
    ]
}

const SMALL: Needs = Needs {
    tokens: 1000,
    tools: true,
};

#[test]
fn the_cheapest_fitting_model_is_chosen_and_the_reason_says_why() {
    let c = select(&three(), SMALL, Prefer::Cheap, 2048).unwrap();
    assert_eq!((c.provider.as_str(), c.model.as_str()), ("local", "tiny"));
    assert_eq!(c.context, Some(4096));
    assert_eq!(
        c.reason,
        "rules (needs ~1000 tokens + 2048 reserve, tools): prefer cheap: local/tiny (free, 4096 ctx) of 3 fitting"
    );
}

#[test]
fn a_prompt_over_a_models_context_skips_it() {
    let needs = Needs {
        tokens: 10_000,
        tools: true,
    };
    let c = select(&three(), needs, Prefer::Cheap, 2048).unwrap();
    assert_eq!(c.model, "mini");
    let needs = Needs {
        tokens: 100_000,
        tools: true,
    };
    assert_eq!(
        select(&three(), needs, Prefer::Cheap, 2048).unwrap().model,
        "big"
    );
    // The reserve counts: 4096 - 2048 leaves room for 2048 tokens, not 2049.
    let at = |tokens| Needs {
        tokens,
        tools: true,
    };
    assert_eq!(
        select(&three(), at(2048), Prefer::Cheap, 2048)
            .unwrap()
            .model,
        "tiny"
    );
    assert_eq!(
        select(&three(), at(2049), Prefer::Cheap, 2048)
            .unwrap()
            .model,
        "mini"
    );
}

#[test]
fn capable_prefers_the_expensive_then_the_largest() {
    let c = select(&three(), SMALL, Prefer::Capable, 2048).unwrap();
    assert_eq!(c.model, "big");
    let mut same_cost = three();
    same_cost[2].meta.cost = Some(CostClass::Cheap);
    assert_eq!(
        select(&same_cost, SMALL, Prefer::Capable, 0).unwrap().model,
        "big"
    );
    assert_eq!(
        select(&same_cost, SMALL, Prefer::Cheap, 0).unwrap().model,
        "tiny"
    );
}

#[test]
fn a_model_without_tools_is_skipped_and_unknown_facts_fit() {
    let mut c = three();
    c[0].meta.tools = Some(false);
    assert_eq!(select(&c, SMALL, Prefer::Cheap, 0).unwrap().model, "mini");
    let no_tools = Needs {
        tokens: 10,
        tools: false,
    };
    assert_eq!(
        select(&c, no_tools, Prefer::Cheap, 0).unwrap().model,
        "tiny"
    );
    // Nothing known: it fits, ranked between cheap and expensive.
    let unknown = vec![
        cand("a", "x", None, None, Some(CostClass::Expensive)),
        cand("b", "y", None, None, None),
    ];
    assert_eq!(
        select(&unknown, SMALL, Prefer::Cheap, 0).unwrap().model,
        "y"
    );
    // Ties keep the config's order.
    let tie = vec![
        cand("a", "first", None, None, None),
        cand("b", "second", None, None, None),
    ];
    assert_eq!(
        select(&tie, SMALL, Prefer::Cheap, 0).unwrap().model,
        "first"
    );
    assert_eq!(
        select(&tie, SMALL, Prefer::Capable, 0).unwrap().model,
        "first"
    );
}

#[test]
fn when_nothing_fits_the_largest_context_is_taken_and_said() {
    let needs = Needs {
        tokens: 1_000_000,
        tools: true,
    };
    let c = select(&three(), needs, Prefer::Cheap, 0).unwrap();
    assert_eq!(c.model, "big");
    assert!(
        c.reason
            .contains("no model fits; the largest context: remote/big"),
        "{}",
        c.reason
    );
    let e = select(&[], SMALL, Prefer::Cheap, 0).unwrap_err();
    assert!(e.contains("no model to choose from"), "{e}");
}

fn routing(mode: Option<AgentMode>) -> Routing {
    let p = |name: &str| NamedProvider {
        name: name.into(),
        cfg: crate::config::provider::ProviderConfig {
            base_url: "http://127.0.0.1:1/v1".into(),
            model: format!("{name}-model"),
            api_key: None,
            key_source: crate::config::provider::KeySource::None,
            stream: true,
            max_retries: 0,
            retry_base: std::time::Duration::from_millis(1),
            request_timeout: std::time::Duration::from_secs(1),
            temperature: None,
            max_tokens: None,
        },
        models: Vec::new(),
        discover: false,
    };
    let file = RoutingFile {
        agent_mode: mode.map(|m| m.as_str().to_string()),
        ..RoutingFile::default()
    };
    let named = [
        ("local".to_string(), p("local")),
        ("remote".to_string(), p("remote")),
    ];
    Routing::resolve(None, named.into_iter().collect(), &file).unwrap()
}

/// Seed 003: request > session > config, setting by setting.
#[test]
fn the_request_beats_the_session_beats_the_config() {
    let r = routing(Some(AgentMode::Local));
    let ask = Ask::resolve(&r, [None; 3], [None; 3]).unwrap();
    assert_eq!(ask.mode, Some((AgentMode::Local, Level::Config)));
    assert_eq!((ask.model.clone(), ask.provider.clone()), (None, None));
    assert_eq!(ask.provisional_model(&r).as_deref(), Some("local-model"));

    let session = [Some("s-model"), Some("remote"), Some("remote")];
    let ask = Ask::resolve(&r, [None; 3], session).unwrap();
    assert_eq!(ask.model, Some(("s-model".into(), Level::Session)));
    assert_eq!(ask.provider, Some(("remote".into(), Level::Session)));
    assert_eq!(ask.mode, Some((AgentMode::Remote, Level::Session)));

    let request = [Some("r-model"), Some("local"), Some("hybrid_auto")];
    let ask = Ask::resolve(&r, request, session).unwrap();
    assert_eq!(ask.model, Some(("r-model".into(), Level::Request)));
    assert_eq!(ask.provider, Some(("local".into(), Level::Request)));
    assert_eq!(ask.mode, Some((AgentMode::HybridAuto, Level::Request)));
    assert_eq!(ask.provisional_model(&r).as_deref(), Some("r-model"));

    // An empty request setting does not hide the session's.
    let ask = Ask::resolve(&r, [Some(" "), None, None], session).unwrap();
    assert_eq!(ask.model, Some(("s-model".into(), Level::Session)));
    // The session's provider without a model: that provider's default model waits in the record.
    let ask = Ask::resolve(&r, [None; 3], [None, Some("remote"), None]).unwrap();
    assert_eq!(ask.provisional_model(&r).as_deref(), Some("remote-model"));
}

#[test]
fn unknown_providers_and_modes_are_refused_by_name() {
    let r = routing(None);
    let e = Ask::resolve(&r, [None, Some("cloud"), None], [None; 3]).unwrap_err();
    assert!(
        e.contains("\"cloud\"") && e.contains("the request") && e.contains("local, remote"),
        "{e}"
    );
    let e = Ask::resolve(&r, [None; 3], [None, None, Some("turbo")]).unwrap_err();
    assert!(e.contains("local, remote, hybrid_auto"), "{e}");
    assert!(Ask::resolve(&r, [None, None, Some("hybrid_auto")], [None; 3]).is_ok());
}

/// `/models` from llama.cpp, vLLM, OpenRouter, Ollama and OpenAI, each as they answer.
#[test]
fn models_lists_of_every_server_are_read() {
    let llama = br#"{"object":"list","data":[{"id":"local","object":"model","owned_by":"llamacpp","meta":{"vocab_type":1,"n_ctx_train":32768,"n_params":268098176}}],"models":[{"name":"local","model":"local"}]}"#;
    let m = parse_models(llama);
    assert_eq!(m.len(), 1);
    assert_eq!(
        (m[0].name.as_str(), m[0].context, m[0].tools),
        ("local", Some(32768), None)
    );
    let with_n_ctx = br#"{"data":[{"id":"g","meta":{"n_ctx":2048,"n_ctx_train":32768}}]}"#;
    assert_eq!(parse_models(with_n_ctx)[0].context, Some(2048));
    let vllm = br#"{"data":[{"id":"qwen","max_model_len":16384}]}"#;
    assert_eq!(parse_models(vllm)[0].context, Some(16384));
    let openrouter = br#"{"data":[{"id":"a/b","context_length":200000,"supported_parameters":["tools","temperature"]},{"id":"c/d","context_length":8000,"supported_parameters":["temperature"]}]}"#;
    let m = parse_models(openrouter);
    assert_eq!((m[0].context, m[0].tools), (Some(200000), Some(true)));
    assert_eq!((m[1].context, m[1].tools), (Some(8000), None));
    let ollama = br#"{"models":[{"name":"qwen3:0.6b","capabilities":["completion","tools"]}]}"#;
    assert_eq!(parse_models(ollama)[0].tools, Some(true));
    let openai = br#"{"object":"list","data":[{"id":"gpt-4.1","object":"model","created":1,"owned_by":"system"}]}"#;
    assert_eq!(
        parse_models(openai),
        [ModelMeta {
            name: "gpt-4.1".into(),
            context: None,
            tools: None,
            cost: None
        }]
    );
}

/// Hostile or broken answers give nothing, or only their plain, sane parts; never an error or
/// a panic, never more than [`MAX_MODELS`].
#[test]
fn hostile_models_answers_are_read_defensively() {
    for junk in [
        &b""[..],
        b"not json",
        b"[]",
        b"null",
        b"{\"data\": \"x\"}",
        b"{\"data\": [1, null, [], {\"id\": 7}, {\"id\": \"\"}]}",
        b"\xff\xfe{",
        b"{\"data\": [{\"id\": \"a\"",
    ] {
        assert_eq!(
            parse_models(junk),
            [],
            "{:?}",
            String::from_utf8_lossy(junk)
        );
    }
    let odd = br#"{"data":[
        {"id":"ok","meta":{"n_ctx":-5},"context_length":"9000"},
        {"id":"huge","context_length":1e30},
        {"id":"zero","max_model_len":0},
        {"id":"absurd","max_model_len":1000000000000},
        {"id":"bad\u001b[2Jid"},
        {"id":"ok","context_length":1234},
        {"id":"tools-as-string","capabilities":"tools"}
    ]}"#;
    let m = parse_models(odd);
    let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["ok", "huge", "zero", "absurd", "tools-as-string"]);
    assert!(
        m.iter().all(|m| m.context.is_none() && m.tools.is_none()),
        "{m:?}"
    );
    let long = format!(r#"{{"data":[{{"id":"{}"}}]}}"#, "x".repeat(MAX_ID + 1));
    assert_eq!(parse_models(long.as_bytes()), []);
    let many: Vec<String> = (0..MAX_MODELS + 50)
        .map(|i| format!(r#"{{"id":"m{i}"}}"#))
        .collect();
    let many = format!(r#"{{"data":[{}]}}"#, many.join(","));
    assert_eq!(parse_models(many.as_bytes()).len(), MAX_MODELS);
}

/// The triggers, each on its threshold and off when turned off; the estimate against a known
/// context.
#[test]
fn the_hybrid_triggers_fire_on_their_thresholds() {
    let h = Handoff {
        triggers: Triggers::default(),
        context: Some(100),
    };
    assert_eq!(h.schema_fail(2, false), None);
    assert_eq!(
        h.schema_fail(3, false).unwrap().trigger,
        Trigger::SchemaFail
    );
    assert_eq!(h.schema_fail(1, true).unwrap().trigger, Trigger::SchemaFail);
    assert_eq!(h.budget(1, 12), None);
    let b = h.budget(0, 12).unwrap();
    assert_eq!(
        (b.trigger, b.detail.as_str()),
        (
            Trigger::BudgetExhausted,
            "the tool budget (12 calls) was spent without an edit"
        )
    );
    let small = [Message::User {
        content: "x".repeat(100),
    }];
    assert_eq!(h.overflow(&small, &[]), None);
    let big = [Message::User {
        content: "x".repeat(1000),
    }];
    let o = h.overflow(&big, &[]).unwrap();
    assert_eq!(o.trigger, Trigger::ContextOverflow);
    assert!(
        o.detail.contains("~254 tokens") && o.detail.contains("100-token"),
        "{}",
        o.detail
    );
    use crate::model::chat::ProviderError as E;
    let overflow = E::ContextOverflow {
        message: "exceeds the available context".into(),
    };
    assert_eq!(
        h.provider_failed(&overflow).unwrap().trigger,
        Trigger::ContextOverflow
    );
    let timeout = E::Timeout {
        url: "u".into(),
        secs: 1,
        attempts: 1,
    };
    assert_eq!(
        h.provider_failed(&timeout).unwrap().trigger,
        Trigger::Timeout
    );
    assert_eq!(h.provider_failed(&E::Cancelled), None);

    // A server that cut the prompt: stopped at the length limit, counting under half of it.
    let step = |stop, prompt_tokens| crate::model::chat::StepResult {
        assistant_message: None,
        tool_calls: Vec::new(),
        stop_reason: stop,
        usage: Some(crate::model::chat::Usage {
            prompt_tokens,
            completion_tokens: 5,
            total_tokens: prompt_tokens + 5,
        }),
        latency_ms: 1,
        model: "m".into(),
        attempts: 1,
        streamed: false,
    };
    use crate::model::chat::StopReason;
    let cut = h.truncated(&step(StopReason::Length, 251), 1251).unwrap();
    assert_eq!(cut.trigger, Trigger::ContextOverflow);
    assert!(cut.detail.contains("251 tokens of ~1251"), "{}", cut.detail);
    assert_eq!(h.truncated(&step(StopReason::Length, 700), 1251), None);
    assert_eq!(h.truncated(&step(StopReason::Done, 251), 1251), None);
    assert_eq!(h.truncated(&step(StopReason::Length, 0), 1251), None);

    let off = Handoff {
        triggers: Triggers {
            budget_exhausted: false,
            schema_fail: 0,
            context_overflow: false,
            local_timeout: None,
        },
        context: Some(100),
    };
    assert_eq!(off.schema_fail(99, true), None);
    assert_eq!(off.budget(0, 12), None);
    assert_eq!(off.overflow(&big, &[]), None);
    assert_eq!(off.provider_failed(&overflow), None);
    assert_eq!(off.truncated(&step(StopReason::Length, 251), 1251), None);
    let unknown = Handoff { context: None, ..h };
    assert_eq!(unknown.overflow(&big, &[]), None);
}

/// A one-shot HTTP server on 127.0.0.1 that answers any request with `head` and then `body`
/// (or holds the connection open, sending nothing more, when `hang`).
async fn serve_once(head: String, body: Vec<u8>, hang: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let _ = s.write_all(head.as_bytes()).await;
        if hang {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
        let _ = s.write_all(&body).await;
    });
    format!("http://{addr}/v1")
}

fn named(base_url: String) -> NamedProvider {
    let mut p = routing(None).providers.remove(0);
    p.cfg.base_url = base_url;
    p
}

/// `GET /models` is bounded: a body over [`MODELS_MAX_BYTES`] and a server that never
/// finishes give nothing (and no error); a small valid answer is read (the control).
#[tokio::test]
async fn models_fetches_are_bounded_in_size_and_time() {
    let ok = br#"{"data":[{"id":"m","meta":{"n_ctx":4096}}]}"#.to_vec();
    let head = |len: usize| {
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n")
    };
    let url = serve_once(head(ok.len()), ok.clone(), false).await;
    let m = fetch_models(&named(url)).await;
    assert_eq!((m.len(), m[0].context), (1, Some(4096)));

    let mut big = br#"{"data":[{"id":"m","pad":""#.to_vec();
    big.resize(MODELS_MAX_BYTES + 10, b'x');
    big.extend_from_slice(br#""}]}"#);
    let url = serve_once(head(big.len()), big, false).await;
    assert_eq!(fetch_models(&named(url)).await, []);

    // Headers promise a body that never comes: the fetch gives up at its timeout.
    let url = serve_once(head(ok.len()), ok.clone(), true).await;
    assert_eq!(fetch_models(&named(url)).await, []);

    let url = serve_once(
        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".into(),
        Vec::new(),
        false,
    )
    .await;
    assert_eq!(fetch_models(&named(url)).await, []);
}

//! WebSocket and REST message decoding: arbitrary bytes through the hub's own size check and
//! serde types for client messages (`hunkgate::protocol`), as `ws::handle` and
//! `http::parse_json` run them, plus the messages clients decode (`hello`, `response`, events,
//! suggestion views).
//!
//! Properties: no panic; a message the hub accepts decodes the same through the WebSocket
//! envelope and as a REST body; every type that clients decode (Serialize + Deserialize)
//! re-encodes and decodes to an equal value.
#![no_main]

use hunkgate::protocol::{
    AgentStatusCmd, ClarifyCmd, CompleteCmd, Event, FeedbackAllCmd, FeedbackCmd, Hello, HunkNote,
    PublishCmd, Response, RollbackCmd, RunCmd, RunView, SuggestionSummary, SuggestionView,
    COMMAND_TYPES, MAX_BODY,
};
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_BODY {
        return;
    }
    rest(data);
    if let Ok(text) = std::str::from_utf8(data) {
        websocket(text);
        hub_parser(text);
    }
    round_trip::<Hello>(data);
    round_trip::<Response>(data);
    round_trip::<Event>(data);
    round_trip::<SuggestionView>(data);
    round_trip::<SuggestionSummary>(data);
    round_trip::<RunView>(data);
    round_trip::<HunkNote>(data);
});

/// REST bodies: `http::parse_json` is `serde_json::from_slice` into the command type.
fn rest(data: &[u8]) {
    let _ = serde_json::from_slice::<FeedbackCmd>(data);
    let _ = serde_json::from_slice::<FeedbackAllCmd>(data);
    let _ = serde_json::from_slice::<CompleteCmd>(data);
    let _ = serde_json::from_slice::<RunCmd>(data);
    let _ = serde_json::from_slice::<PublishCmd>(data);
    let _ = serde_json::from_slice::<AgentStatusCmd>(data);
    let _ = serde_json::from_slice::<RollbackCmd>(data);
    let _ = serde_json::from_slice::<ClarifyCmd>(data);
}

/// The hub's own WebSocket parser (`protocol::parse_client_msg`, what `api::ws` runs): no
/// panic, and like REST it refuses an object that names a key twice.
fn hub_parser(text: &str) {
    let parsed = hunkgate::protocol::parse_client_msg(text);
    if parsed.msg.is_ok() && has_duplicate_top_level_key(text) {
        panic!("the WebSocket parser took a message with a duplicated key: {text:?}");
    }
}

/// `ws::handle`: a JSON value, its `id` and string `type`, then the typed command for that type.
fn websocket(text: &str) {
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let _id = value.get("id").cloned();
    let Some(ty) = value
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    match ty.as_str() {
        "feedback" => same_as_rest::<FeedbackCmd, _>(&value, text, |c| {
            (
                c.suggestion_id,
                c.hunk_id,
                c.action,
                c.modified_diff,
                c.comment,
            )
        }),
        "feedback_all" => same_as_rest::<FeedbackAllCmd, _>(&value, text, |c| {
            (c.suggestion_id, c.action, c.file, c.comment)
        }),
        "complete" => same_as_rest::<CompleteCmd, _>(&value, text, |c| (c.suggestion_id, c.action)),
        "run" => same_as_rest::<RunCmd, _>(&value, text, |c| {
            (c.prompt, c.agent, c.model, c.session_id, c.timeout_secs)
        }),
        "clarify" => same_as_rest::<ClarifyCmd, _>(&value, text, |c| {
            (c.run_id, c.question_id, c.answer, c.skip)
        }),
        "list" => {
            let _ = value.get("all").and_then(Value::as_bool);
        }
        "get" => {
            let _ = value
                .get("suggestionId")
                .or_else(|| value.get("suggestion_id"))
                .and_then(Value::as_str);
        }
        "cancel" => {
            let _ = value
                .get("runId")
                .or_else(|| value.get("run_id"))
                .and_then(Value::as_str);
        }
        "replay" => {
            let _ = value.get("since").and_then(Value::as_u64);
        }
        other => {
            let _ = COMMAND_TYPES.contains(&other);
        }
    }
}

/// The WebSocket path goes through a `Value` first (`from_value`); the REST path parses the
/// bytes directly. Both must accept the same messages and read the same fields.
fn same_as_rest<T: DeserializeOwned, K: PartialEq + std::fmt::Debug>(
    value: &Value,
    text: &str,
    key: impl Fn(T) -> K,
) {
    let via_value = serde_json::from_value::<T>(value.clone()).map(&key);
    let direct = serde_json::from_str::<T>(text).map(&key);
    if has_duplicate_top_level_key(text) {
        // A `Value` keeps the last of duplicated keys; the hub's parser refuses such a message
        // before it gets there (checked in `hub_parser`), as REST does.
        return;
    }
    match (via_value, direct) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text:?}"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "WebSocket and REST decoding disagree on {text:?}: via Value {:?}, direct {:?}",
            a.map(|_| ()),
            b.map(|_| ())
        ),
    }
}

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<T>(data) else {
        return;
    };
    let json = serde_json::to_string(&v).expect("a decoded message re-encodes");
    let back: T = serde_json::from_str(&json).unwrap_or_else(|e| {
        panic!(
            "re-encoded {} does not decode: {e}: {json}",
            std::any::type_name::<T>()
        )
    });
    assert_eq!(back, v, "{json}");
}

/// Whether the text is a JSON object naming some key twice (at its top level).
fn has_duplicate_top_level_key(text: &str) -> bool {
    struct Keys(bool);
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut dup = self.0;
            while let Some(k) = map.next_key::<String>()? {
                dup |= !seen.insert(k);
                map.next_value::<serde::de::IgnoredAny>()?;
            }
            Ok(dup)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut de, Keys(false)).unwrap_or(false)
}

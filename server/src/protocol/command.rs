//! The command table: every message a client sends, as one enum, and the parser of WebSocket
//! text frames into it (with the error texts the protocol promises).

use serde::Deserialize;

use super::{
    AgentStatusCmd, ClarifyCmd, CompleteCmd, FeedbackAllCmd, FeedbackCmd, PublishCmd, RollbackCmd,
    RunCmd, COMMAND_TYPES,
};

/// `list`: the open suggestions, or every one with `all: true` (`null` counts as absent).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCmd {
    #[serde(default)]
    pub all: Option<bool>,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

/// `get`: one suggestion with its hunks (id or unique prefix).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetCmd {
    #[serde(alias = "suggestionId")]
    pub suggestion_id: String,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

/// `cancel`: stop a run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelCmd {
    #[serde(alias = "runId")]
    pub run_id: String,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

/// `replay`: the events after `since` (what `GET /events?since=` answers).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayCmd {
    pub since: u64,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

/// `ping`: takes no fields but the optional `id`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PingCmd {
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

/// Every command a client sends, by its `type`: the one command table. The WebSocket parses a
/// text frame into it; the REST handlers build it from their path and body; both hand it to the
/// same dispatcher (`api::dispatch`). The variants marked REST only are never read from a
/// WebSocket frame (their `type` is unknown there): they need the path's checkpoint or the
/// caller's agent token.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMsg {
    Feedback(FeedbackCmd),
    FeedbackAll(FeedbackAllCmd),
    Complete(CompleteCmd),
    List(ListCmd),
    Get(GetCmd),
    Run(RunCmd),
    Cancel(CancelCmd),
    Clarify(ClarifyCmd),
    Replay(ReplayCmd),
    Ping(PingCmd),
    /// REST only: `POST /checkpoints/{checkpoint_id}/rollback`.
    #[serde(skip_deserializing)]
    Rollback {
        checkpoint_id: String,
        cmd: RollbackCmd,
    },
    /// REST only: `POST /agent/publish` with the run's agent token.
    #[serde(skip_deserializing)]
    Publish {
        run_id: String,
        cmd: PublishCmd,
    },
    /// REST only: `POST /agent/status` with the run's agent token.
    #[serde(skip_deserializing)]
    AgentStatus {
        run_id: String,
        cmd: AgentStatusCmd,
    },
}

impl ClientMsg {
    /// The wire `type` of this command (REST-only ones get their route's name).
    pub fn kind(&self) -> &'static str {
        match self {
            ClientMsg::Feedback(_) => "feedback",
            ClientMsg::FeedbackAll(_) => "feedback_all",
            ClientMsg::Complete(_) => "complete",
            ClientMsg::List(_) => "list",
            ClientMsg::Get(_) => "get",
            ClientMsg::Run(_) => "run",
            ClientMsg::Cancel(_) => "cancel",
            ClientMsg::Clarify(_) => "clarify",
            ClientMsg::Replay(_) => "replay",
            ClientMsg::Ping(_) => "ping",
            ClientMsg::Rollback { .. } => "rollback",
            ClientMsg::Publish { .. } => "publish",
            ClientMsg::AgentStatus { .. } => "agent_status",
        }
    }
}

/// Why a WebSocket text frame is not a command; each maps to `bad_request`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("malformed JSON: {0}")]
    Json(String),
    #[error("message has no string \"type\" field")]
    NoType,
    #[error("unknown message type {0:?}; expected one of {list}", list = COMMAND_TYPES.join(", "))]
    UnknownType(String),
    #[error("invalid {kind:?} command: {reason}")]
    Invalid { kind: String, reason: String },
}

/// A parsed frame: its `id` (echoed in the response even when the rest is wrong) and the command.
pub struct Parsed {
    pub id: Option<serde_json::Value>,
    pub msg: Result<ClientMsg, ParseError>,
}

/// Read one WebSocket text frame as a command.
pub fn parse_client_msg(text: &str) -> Parsed {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Parsed {
                id: None,
                msg: Err(ParseError::Json(e.to_string())),
            }
        }
    };
    let id = value.get("id").cloned();
    let msg = match value.get("type").and_then(serde_json::Value::as_str) {
        None => Err(ParseError::NoType),
        Some(t) if !COMMAND_TYPES.contains(&t) => Err(ParseError::UnknownType(t.to_string())),
        Some(t) => {
            let kind = t.to_string();
            // A key named twice: REST's typed bodies refuse it, so the WebSocket does too
            // (a `Value` would quietly keep the last one).
            match serde_json::from_str::<UniqueKeys>(text) {
                Err(e) => Err(ParseError::Invalid {
                    kind,
                    reason: e.to_string(),
                }),
                Ok(UniqueKeys) => serde_json::from_value(value).map_err(|e| ParseError::Invalid {
                    kind,
                    reason: e.to_string(),
                }),
            }
        }
    };
    Parsed { id, msg }
}

/// Any JSON value in which no object names a key twice, at any depth.
struct UniqueKeys;

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<UniqueKeys, A::Error> {
        while a.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = a.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
            }
            a.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Parsed {
        parse_client_msg(&v.to_string())
    }

    #[test]
    fn a_key_named_twice_is_refused_as_rest_refuses_it() {
        let twice = r#"{"type":"feedback","suggestionId":"s","hunkId":"h","action":"reject","action":"accept"}"#;
        match parse_client_msg(twice).msg {
            Err(ParseError::Invalid { kind, reason }) => {
                assert_eq!(kind, "feedback");
                assert!(reason.contains("duplicate field `action`"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Positive control: the same command with the key once is a command.
        let once = r#"{"type":"feedback","suggestionId":"s","hunkId":"h","action":"accept"}"#;
        assert!(parse_client_msg(once).msg.is_ok());
        // Nested objects and arrays are checked too.
        assert!(serde_json::from_str::<UniqueKeys>(r#"{"a":[{"b":1,"b":2}]}"#).is_err());
        assert!(serde_json::from_str::<UniqueKeys>(r#"{"a":[{"b":1,"c":2}],"d":null}"#).is_ok());
    }

    #[test]
    fn every_listed_type_reaches_its_variant_and_back() {
        for t in COMMAND_TYPES {
            // No fields: either a command (list, ping) or a complaint about its payload, never
            // an unknown type.
            match parse(json!({"type": t})).msg {
                Ok(msg) => assert_eq!(msg.kind(), *t),
                Err(ParseError::Invalid { kind, .. }) => assert_eq!(kind, *t),
                Err(e) => panic!("{t}: {e}"),
            }
        }
    }

    #[test]
    fn commands_parse_in_both_spellings_and_keep_their_id() {
        let p = parse(
            json!({"type": "feedback", "id": 7, "suggestionId": "s", "hunkId": "h", "action": "accept"}),
        );
        assert_eq!(p.id, Some(json!(7)));
        let Ok(ClientMsg::Feedback(cmd)) = p.msg else {
            panic!("not feedback")
        };
        assert_eq!(
            (cmd.suggestion_id.as_str(), cmd.hunk_id.as_str()),
            ("s", "h")
        );
        let Ok(ClientMsg::Get(g)) = parse(json!({"type": "get", "suggestion_id": "abc"})).msg
        else {
            panic!("not get")
        };
        assert_eq!(g.suggestion_id, "abc");
        let Ok(ClientMsg::List(l)) = parse(json!({"type": "list", "all": null})).msg else {
            panic!("not list")
        };
        assert_eq!(l.all, None);
        assert!(matches!(
            parse(json!({"type": "replay", "since": 3})).msg,
            Ok(ClientMsg::Replay(ReplayCmd { since: 3, .. }))
        ));
    }

    #[test]
    fn bad_frames_say_what_is_wrong() {
        let p = parse_client_msg("{not json");
        assert!(matches!(p.msg, Err(ParseError::Json(_))));
        assert_eq!(p.id, None);
        let p = parse(json!({"id": "m1", "suggestionId": "x"}));
        assert_eq!(p.msg.err(), Some(ParseError::NoType));
        assert_eq!(p.id, Some(json!("m1")));
        // REST-only commands are unknown on the WebSocket.
        for t in ["frobnicate", "rollback", "publish", "agent_status"] {
            let err = parse(json!({"type": t})).msg.err().unwrap();
            assert_eq!(err, ParseError::UnknownType(t.into()));
            assert!(err.to_string().contains("feedback_all, complete"), "{err}");
        }
        for (cmd, needle) in [
            (json!({"type": "ping", "bogus": 1}), "bogus"),
            (json!({"type": "list", "all": "yes"}), "boolean"),
            (json!({"type": "replay", "since": "yesterday"}), "u64"),
            (json!({"type": "get"}), "suggestion_id"),
            (json!({"type": "cancel"}), "run_id"),
        ] {
            let err = parse(cmd.clone()).msg.err().unwrap().to_string();
            assert!(err.starts_with("invalid \""), "{cmd}: {err}");
            assert!(err.contains(needle), "{cmd}: {err}");
        }
    }
}

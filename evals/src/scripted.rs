//! The scripted model: a tiny OpenAI-compatible chat-completions server that plays the `asks`
//! reference agent through the hub's built-in agent, because only the built-in agent can ask the
//! user a question (`clarify_user`); a command agent cannot.
//!
//! It is stateless: each request is answered from the conversation so far. It finds the task
//! whose prompt appears in the messages, then: no tool result yet → `clarify_user` with the
//! task's `[scripted] question`; the k-th tool result → `write_file` of the k-th file of the
//! task's `solution/` (with `@ANSWER@` replaced by the answer, or by `[scripted] default` when
//! the question was skipped); after the last file → `finish`. A task without `[scripted]` gets a
//! plain text answer and no edit. Every answer reports 100 prompt and 20 completion tokens.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use sha2::Digest;

use crate::task::{files_under, Task};

pub const PROMPT_TOKENS: u64 = 100;
pub const COMPLETION_TOKENS: u64 = 20;

/// What the model says next, given the task and the conversation.
#[derive(Debug, PartialEq)]
pub enum Step {
    Text(String),
    Call { name: String, arguments: Value },
}

fn text_of(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The next step for `messages` (an OpenAI `messages` array).
pub fn next_step(tasks: &[Task], messages: &[Value]) -> Step {
    let all: String = messages
        .iter()
        .filter(|m| m["role"] != "tool")
        .map(text_of)
        .collect::<Vec<_>>()
        .join("\n");
    // The longest matching prompt, so a prompt that contains another wins.
    let task = tasks
        .iter()
        .filter(|t| t.prompts().iter().any(|p| all.contains(p)))
        .max_by_key(|t| t.spec.prompt.len());
    let Some((task, script)) = task.and_then(|t| t.spec.scripted.as_ref().map(|s| (t, s))) else {
        return Step::Text("I have no script for this task; I change nothing.".into());
    };
    let results: Vec<Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(&text_of(m)).unwrap_or(Value::Null))
        .collect();
    if results.is_empty() {
        return Step::Call {
            name: "clarify_user".into(),
            arguments: json!({"question": script.question}),
        };
    }
    let answer = match results[0]["result"]["answer"].as_str() {
        None | Some("no_user_answer") => script.default.clone(),
        Some(a) => a.to_string(),
    };
    let sol = task.dir.join("solution");
    let files = files_under(&sol).unwrap_or_default();
    let k = results.len() - 1;
    if let Some(rel) = files.get(k) {
        let content = std::fs::read_to_string(sol.join(rel))
            .unwrap_or_default()
            .replace("@ANSWER@", &answer);
        let mut args = json!({"file_path": rel, "content": content});
        // Replacing an existing file needs its hash (the hub's write_file contract).
        if let Ok(old) = std::fs::read(task.dir.join("repo").join(rel)) {
            let hex: String = sha2::Sha256::digest(&old)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            args["expected_hash"] = json!(format!("sha256:{hex}"));
        }
        return Step::Call {
            name: "write_file".into(),
            arguments: args,
        };
    }
    Step::Call {
        name: "finish".into(),
        arguments: json!({"description": format!("Did what was asked ({answer})")}),
    }
}

async fn completions(State(tasks): State<Arc<Vec<Task>>>, Json(body): Json<Value>) -> Json<Value> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let turn = messages.iter().filter(|m| m["role"] == "tool").count();
    let message = match next_step(&tasks, &messages) {
        Step::Text(t) => json!({"role": "assistant", "content": t}),
        Step::Call { name, arguments } => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": format!("call_{turn}"), "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}}],
        }),
    };
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    Json(json!({
        "id": format!("chatcmpl-{turn}"),
        "object": "chat.completion",
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                  "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
    }))
}

/// Serve the scripted model for `tasks` on `addr` (port 0 picks one); returns the bound address
/// and the server future.
pub async fn bind(
    tasks: Vec<Task>,
    addr: SocketAddr,
) -> Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>>,
)> {
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/chat/completions", post(completions))
        .with_state(Arc::new(tasks));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    Ok((local, async move { axum::serve(listener, app).await }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_then_writes_each_file_with_the_answer_then_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        std::fs::create_dir_all(t.join("repo")).unwrap();
        std::fs::create_dir_all(t.join("solution")).unwrap();
        std::fs::write(t.join("repo/a.txt"), "old\n").unwrap();
        std::fs::write(t.join("solution/a.txt"), "hi @ANSWER@\n").unwrap();
        std::fs::write(
            t.join("task.toml"),
            "prompt = \"Greet\"\ntags = [\"clarification\"]\n[review]\npolicy = \"clarify\"\nskip = true\n[scripted]\nquestion = \"Who?\"\ndefault = \"world\"\n[check]\ncommand = \"true\"\n",
        )
        .unwrap();
        let tasks = vec![Task::load(&t).unwrap()];
        let user = json!({"role": "user", "content": "Task: Greet"});
        let s = next_step(&tasks, std::slice::from_ref(&user));
        assert_eq!(
            s,
            Step::Call {
                name: "clarify_user".into(),
                arguments: json!({"question": "Who?"})
            }
        );
        let ans = |a: &str| json!({"role": "tool", "content": json!({"ok": true, "result": {"answer": a}}).to_string()});
        let Step::Call { name, arguments } = next_step(&tasks, &[user.clone(), ans("Ann")]) else {
            panic!("expected a call")
        };
        assert_eq!(name, "write_file");
        assert_eq!(arguments["content"], "hi Ann\n");
        assert!(arguments["expected_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
        let Step::Call { arguments, .. } =
            next_step(&tasks, &[user.clone(), ans("no_user_answer")])
        else {
            panic!("expected a call")
        };
        assert_eq!(arguments["content"], "hi world\n", "skipped: the default");
        let done = json!({"role": "tool", "content": "{\"ok\":true}"});
        let Step::Call { name, .. } = next_step(&tasks, &[user, ans("Ann"), done]) else {
            panic!("expected a call")
        };
        assert_eq!(name, "finish");
        let other = json!({"role": "user", "content": "something else"});
        assert!(matches!(next_step(&tasks, &[other]), Step::Text(_)));
    }
}

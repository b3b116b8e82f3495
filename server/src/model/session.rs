//! Session records (seed 003, seed 000 §3): a session, its pinned context rows, and the entries
//! of its history, as they are journaled and shown. Stored text is bounded ([`MAX_ENTRY`]).
//!
//! May import: `crate::protocol`, `crate::model`.

use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::model::chat::Usage;
use crate::model::now;

/// Longest text kept in one history entry.
pub const MAX_ENTRY: usize = 8 * 1024;
/// Longest pinned context row.
pub const MAX_CONTEXT_ROW: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    Archived,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextKind {
    /// A file of the checkout, read when each run starts (lines `start_line..=end_line`).
    File,
    /// Text the client sends along (an editor selection).
    Selection,
    /// Free text: conventions, constraints.
    Note,
    /// A web page: the hub fetches `url` when it is pinned (only from a host of `[context]
    /// url_hosts`) and keeps its readable text as `content`.
    Url,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRow {
    #[serde(default)]
    pub id: String,
    pub kind: ContextKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// `url` rows: the page as the user named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `url` rows: when the hub fetched it (set by the hub, never by a client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<String>,
}

impl ContextRow {
    pub fn validate(&self) -> Result<(), AppError> {
        let bad = |m: &str| Err(AppError::bad_request(format!("context row: {m}")));
        if let Some(p) = &self.file_path {
            if let Err(e) = hunkgate_sandbox::beneath::components(p) {
                return bad(&e.to_string());
            }
        }
        if let (Some(s), Some(e)) = (self.start_line, self.end_line) {
            if s == 0 || e < s {
                return bad("lines are 1-based and end_line must not be before start_line");
            }
        }
        if self.url.is_some() != (self.kind == ContextKind::Url) {
            return bad("url goes with kind \"url\", and only with it");
        }
        match self.kind {
            ContextKind::File if self.file_path.is_none() => bad("kind \"file\" needs file_path"),
            ContextKind::Url if self.file_path.is_some() => bad("kind \"url\" takes no file_path"),
            ContextKind::Selection | ContextKind::Note
                if self.content.as_deref().is_none_or(|c| c.trim().is_empty()) =>
            {
                bad("kind \"selection\" and \"note\" need content")
            }
            _ if self
                .content
                .as_ref()
                .is_some_and(|c| c.len() > MAX_CONTEXT_ROW) =>
            {
                bad(&format!("content is over {MAX_CONTEXT_ROW} bytes"))
            }
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRec {
    pub id: String,
    pub status: SessionStatus,
    pub title: String,
    /// The built-in agent's model for this session's runs (a run may still name another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The built-in agent's provider for this session's runs (a run may still name another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `local`, `remote` or `hybrid_auto` for this session's runs (a run may still name another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<String>,
    #[serde(default)]
    pub context: Vec<ContextRow>,
    #[serde(default)]
    pub run_ids: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Message,
    Tool,
}

/// One line of a session's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the session's history (the pagination cursor).
    #[serde(default)]
    pub index: usize,
    #[serde(default)]
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub kind: EntryKind,
    /// Messages: `user`, `assistant`, or `system` (what the hub reports: published, failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Tool entries: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Tool entries: the call ("read_file src/a.rs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The message, or what the tool call came to.
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    pub ts: String,
}

fn bounded(s: &str) -> String {
    if s.len() <= MAX_ENTRY {
        return s.to_string();
    }
    let mut end = MAX_ENTRY;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes more]", &s[..end], s.len() - end)
}

impl Entry {
    pub fn message(role: &str, content: &str) -> Entry {
        Entry {
            index: 0,
            session_id: String::new(),
            run_id: None,
            kind: EntryKind::Message,
            role: Some(role.to_string()),
            tool: None,
            call: None,
            ok: None,
            content: bounded(content),
            model: None,
            usage: None,
            ts: now(),
        }
    }

    pub fn tool(name: &str, call: &str, ok: bool, outcome: &str) -> Entry {
        Entry {
            kind: EntryKind::Tool,
            role: None,
            tool: Some(name.to_string()),
            call: Some(bounded(call)),
            ok: Some(ok),
            ..Entry::message("", outcome)
        }
    }

    pub fn with_model(mut self, model: &str, usage: &Usage) -> Entry {
        self.model = Some(model.to_string());
        self.usage = Some(usage.clone());
        self
    }
}

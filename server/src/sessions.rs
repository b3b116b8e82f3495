//! Sessions (seed 003, seed 000 §3): every run belongs to one. A session keeps the chat history
//! of its runs (prompts, the model's messages, tool calls), pinned context rows, and ties its
//! runs together so the next one learns what the user kept of the last.
//!
//! Sessions and their history are journaled like runs and suggestions, so they survive a
//! restart. Stored text is bounded ([`MAX_ENTRY`](crate::model::session::MAX_ENTRY)) — history is for people and models to read,
//! not an archive of whole files.

pub mod web;

use serde::{Deserialize, Serialize};

use crate::error::AppError;
use crate::hub::Hub;
use crate::model::chat::Message;
use crate::model::now;
use crate::model::session::{
    ContextKind, ContextRow, Entry, EntryKind, SessionRec, SessionStatus, MAX_CONTEXT_ROW,
};
use crate::protocol::ErrorCode;
use crate::protocol::{HunkState, RunView};
use crate::store::journal::Record;

/// Budget of each part of the context a run starts with.
const CONTEXT_BUDGET: usize = 24 * 1024;
/// How the session's pinned context begins in [`Hub::session_context`].
pub const PINNED_HEADING: &str = "Context the user pinned to this session:";

/// A session as clients see it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionRec,
    pub session_id: String,
    pub history_count: usize,
    pub runs: Vec<RunView>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// The built-in agent's provider for this session's runs, by its config name.
    #[serde(default)]
    pub provider: Option<String>,
    /// `local`, `remote` or `hybrid_auto` for this session's runs.
    #[serde(default, alias = "agentMode")]
    pub agent_mode: Option<String>,
    #[serde(default)]
    pub context: Vec<ContextRow>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryFilter {
    #[default]
    All,
    Messages,
    Tools,
}

/// One page of history: entries with `index >= cursor`, and the cursor of the next page.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryPage {
    pub session_id: String,
    pub entries: Vec<Entry>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<usize>,
    pub total: usize,
}

/// Pure pagination over a session's entries.
pub fn page(
    entries: &[Entry],
    filter: HistoryFilter,
    cursor: usize,
    limit: usize,
) -> (Vec<Entry>, Option<usize>) {
    let limit = limit.clamp(1, 500);
    let wanted = |e: &&Entry| match filter {
        HistoryFilter::All => true,
        HistoryFilter::Messages => e.kind == EntryKind::Message,
        HistoryFilter::Tools => e.kind == EntryKind::Tool,
    };
    let mut it = entries.iter().skip(cursor).filter(wanted);
    let out: Vec<Entry> = it.by_ref().take(limit).cloned().collect();
    let next = it.next().map(|e| e.index);
    (out, next)
}

fn title_of(prompt: &str) -> String {
    crate::model::text::one_line(
        prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or(""),
        80,
    )
}

impl Hub {
    fn save_session(&self, st: &mut crate::hub::State, s: SessionRec) -> Result<(), AppError> {
        self.journal_append(&Record::Session(Box::new(s.clone())))?;
        st.sessions.sessions.insert(s.id.clone(), s);
        Ok(())
    }

    /// A session's `provider` must be configured and its `agent_mode` one the providers can
    /// run.
    fn check_route_settings(
        &self,
        provider: Option<&str>,
        mode: Option<&str>,
    ) -> Result<(), AppError> {
        let routing = &self.cfg().routing;
        if let Some(p) = provider.filter(|p| !p.trim().is_empty()) {
            if routing.provider(p).is_none() {
                return Err(AppError::bad_request(format!(
                    "provider {p:?} is not configured ([providers.<name>])"
                )));
            }
        }
        if let Some(m) = mode.filter(|m| !m.trim().is_empty()) {
            crate::config::routing::AgentMode::parse(m)
                .and_then(|m| routing.check_mode(m))
                .map_err(AppError::bad_request)?;
        }
        Ok(())
    }

    pub fn create_session(&self, req: NewSession) -> Result<SessionView, AppError> {
        for row in &req.context {
            if row.kind == ContextKind::Url {
                // Its fetch may be refused or fail, and that is recorded in the session's
                // history: the session comes first.
                return Err(AppError::bad_request(
                    "context row: pin a web page once the session exists (POST /sessions/:id/context)"
                        .into(),
                ));
            }
            row.validate()?;
        }
        self.check_route_settings(req.provider.as_deref(), req.agent_mode.as_deref())?;
        let t = now();
        let mut context = req.context;
        for (i, row) in context.iter_mut().enumerate() {
            if row.id.is_empty() {
                row.id = format!("ctx_{}", i + 1);
            }
        }
        let s = SessionRec {
            id: format!("sess_{}", uuid::Uuid::new_v4().simple()),
            status: SessionStatus::Active,
            title: req
                .title
                .map(|t| crate::model::text::one_line(&t, 200))
                .unwrap_or_default(),
            model: req.model.filter(|m| !m.trim().is_empty()),
            provider: req.provider.filter(|m| !m.trim().is_empty()),
            agent_mode: req.agent_mode.filter(|m| !m.trim().is_empty()),
            context,
            run_ids: Vec::new(),
            created_at: t.clone(),
            updated_at: t,
        };
        let id = s.id.clone();
        {
            let mut st = self.lock()?;
            self.save_session(&mut st, s)?;
        }
        self.session_view(&id)
    }

    fn session_id(st: &crate::hub::State, id: &str) -> Result<String, AppError> {
        crate::model::resolve_id(
            id,
            st.sessions.sessions.keys(),
            "sess_",
            "session",
            "GET /sessions lists them",
        )
    }

    pub fn session_view(&self, id: &str) -> Result<SessionView, AppError> {
        let st = self.lock()?;
        let id = Self::session_id(&st, id)?;
        let s = st.sessions.sessions[&id].clone();
        let runs = s
            .run_ids
            .iter()
            .filter_map(|r| st.runs.get(r))
            .cloned()
            .collect();
        Ok(SessionView {
            session_id: s.id.clone(),
            history_count: st.sessions.history.get(&id).map_or(0, Vec::len),
            session: s,
            runs,
        })
    }

    pub fn list_sessions(&self) -> Result<Vec<SessionRec>, AppError> {
        let st = self.lock()?;
        let mut v: Vec<SessionRec> = st.sessions.sessions.values().cloned().collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(v)
    }

    pub fn session_history(
        &self,
        id: &str,
        filter: HistoryFilter,
        cursor: usize,
        limit: usize,
    ) -> Result<HistoryPage, AppError> {
        let st = self.lock()?;
        let id = Self::session_id(&st, id)?;
        let entries = st
            .sessions
            .history
            .get(&id)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let (entries_page, next_cursor) = page(entries, filter, cursor, limit);
        Ok(HistoryPage {
            session_id: id,
            total: entries.len(),
            entries: entries_page,
            next_cursor,
        })
    }

    pub fn update_session(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionRec) -> Result<(), AppError>,
    ) -> Result<SessionRec, AppError> {
        let mut st = self.lock()?;
        let id = Self::session_id(&st, id)?;
        let mut s = st.sessions.sessions[&id].clone();
        f(&mut s)?;
        s.updated_at = now();
        self.save_session(&mut st, s.clone())?;
        Ok(s)
    }

    pub fn pin_context(&self, id: &str, mut row: ContextRow) -> Result<SessionRec, AppError> {
        row.validate()?;
        self.update_session(id, |s| {
            if row.id.is_empty() || s.context.iter().any(|r| r.id == row.id) {
                let n = s.context.len() + 1;
                row.id = (n..)
                    .map(|i| format!("ctx_{i}"))
                    .find(|c| s.context.iter().all(|r| &r.id != c))
                    .unwrap_or_default();
            }
            s.context.push(row);
            Ok(())
        })
    }

    pub fn unpin_context(&self, id: &str, ctx_id: &str) -> Result<SessionRec, AppError> {
        self.update_session(id, |s| {
            let before = s.context.len();
            s.context.retain(|r| r.id != ctx_id);
            if s.context.len() == before {
                return Err(AppError::not_found(format!(
                    "no context row {ctx_id:?} in this session"
                )));
            }
            Ok(())
        })
    }

    /// The session a new run joins: the named one (which must be active), or a new one named
    /// after the prompt.
    pub fn session_for_run(
        &self,
        session_id: Option<&str>,
        prompt: &str,
        run_id: &str,
    ) -> Result<SessionRec, AppError> {
        let id = match session_id {
            Some(id) => id.to_string(),
            None => {
                let v = self.create_session(NewSession {
                    title: Some(title_of(prompt)),
                    ..NewSession::default()
                })?;
                v.session_id
            }
        };
        let rid = run_id.to_string();
        self.update_session(&id, |s| {
            if s.status == SessionStatus::Archived {
                return Err(AppError::conflict(
                    ErrorCode::Archived,
                    format!("session {} is archived; start a new one", s.id),
                ));
            }
            if s.title.is_empty() {
                s.title = title_of(prompt);
            }
            s.run_ids.push(rid);
            Ok(())
        })
    }

    /// Append to the history of the session `run_id` belongs to. History is best effort: a
    /// failure is logged and never fails the run.
    pub fn history(&self, run_id: &str, entry: Entry) {
        let sid = match self.lock() {
            Ok(st) => st.runs.get(run_id).and_then(|r| r.session_id.clone()),
            Err(e) => {
                tracing::warn!(run = run_id, error = %e, "recording session history");
                return;
            }
        };
        if let Some(sid) = sid {
            self.append_history(&sid, Some(run_id), entry);
        }
    }

    /// Append to session `sid`'s history what happened outside any run (a page pinned or
    /// refused). Best effort, like [`Hub::history`].
    pub fn session_entry(&self, sid: &str, entry: Entry) {
        self.append_history(sid, None, entry);
    }

    fn append_history(&self, sid: &str, run_id: Option<&str>, mut entry: Entry) {
        // What a tool read or a model said is kept, and sent back to the model as context, only
        // with secret-looking strings taken out (see [`crate::model::redact`]).
        entry.content = crate::model::redact::redacted(&entry.content);
        entry.call = entry.call.as_deref().map(crate::model::redact::redacted);
        let result = (|| -> Result<(), AppError> {
            let mut st = self.lock()?;
            let list = st.sessions.history.entry(sid.to_string()).or_default();
            entry.index = list.len();
            entry.session_id = sid.to_string();
            entry.run_id = run_id.map(str::to_string);
            self.journal_append(&Record::History(Box::new(entry.clone())))?;
            list.push(entry);
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(session = sid, run = run_id, error = %e, "recording session history");
        }
    }

    /// What a run of the built-in agent starts with besides the prompt: the session's pinned
    /// context, its earlier conversation, and the user's decisions on its earlier suggestions.
    pub fn session_context(&self, run_id: &str) -> Result<Vec<Message>, AppError> {
        let (session, earlier_chat, earlier_runs) = {
            let st = self.lock()?;
            let Some(sid) = st.runs.get(run_id).and_then(|r| r.session_id.clone()) else {
                return Ok(Vec::new());
            };
            let Some(s) = st.sessions.sessions.get(&sid).cloned() else {
                return Ok(Vec::new());
            };
            let chat: Vec<Entry> = st
                .sessions
                .history
                .get(&sid)
                .map(|h| {
                    h.iter()
                        .filter(|e| {
                            e.kind == EntryKind::Message && e.run_id.as_deref() != Some(run_id)
                        })
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            let runs: Vec<String> = s.run_ids.iter().filter(|r| *r != run_id).cloned().collect();
            (s, chat, runs)
        };
        let mut out = Vec::new();
        if !session.context.is_empty() {
            let checkout = self.checkout().ok();
            let mut text = format!("{PINNED_HEADING}\n");
            for row in &session.context {
                text.push_str(&render_row(row, checkout.as_ref()));
                if text.len() > CONTEXT_BUDGET {
                    text.push_str("\n[… more pinned context left out …]\n");
                    break;
                }
            }
            out.push(Message::User { content: text });
        }
        if !earlier_chat.is_empty() {
            // The newest messages that fit.
            let mut lines: Vec<String> = Vec::new();
            let mut used = 0;
            for e in earlier_chat.iter().rev() {
                let line = format!("{}: {}", e.role.as_deref().unwrap_or("?"), e.content);
                used += line.len();
                if used > CONTEXT_BUDGET {
                    break;
                }
                lines.push(line);
            }
            lines.reverse();
            out.push(Message::User {
                content: format!("Earlier in this session:\n{}", lines.join("\n")),
            });
        }
        let mut decisions = Vec::new();
        for r in earlier_runs.iter().rev() {
            if let Ok(views) = self.agent_suggestions(r) {
                for v in views.into_iter().filter(|v| v.run_id == *r) {
                    decisions.push(render_decisions(&crate::model::run::Decisions::from(&v)));
                }
            }
            if decisions.iter().map(String::len).sum::<usize>() > CONTEXT_BUDGET
                || decisions.len() >= 3
            {
                break;
            }
        }
        if !decisions.is_empty() {
            decisions.reverse();
            out.push(Message::User {
                content: format!(
                    "How the user reviewed your earlier suggestions in this session (learn from what was kept, changed and turned down):\n{}",
                    decisions.join("\n")
                ),
            });
        }
        Ok(out)
    }
}

fn render_row(row: &ContextRow, checkout: Option<&hunkgate_sandbox::beneath::Beneath>) -> String {
    let range = match (row.start_line, row.end_line) {
        (Some(s), Some(e)) => format!(" (lines {s}-{e})"),
        (Some(s), None) => format!(" (from line {s})"),
        _ => String::new(),
    };
    let body = match (row.kind, &row.content, &row.file_path, checkout) {
        (ContextKind::File, _, Some(p), Some(fs)) => match fs.read(p, MAX_CONTEXT_ROW as u64) {
            Ok(Some((bytes, _))) => {
                let text = String::from_utf8_lossy(&bytes);
                let s = row.start_line.unwrap_or(1).max(1);
                let e = row.end_line.unwrap_or(usize::MAX);
                text.lines()
                    .enumerate()
                    .filter(|(i, _)| *i + 1 >= s && *i < e)
                    .map(|(_, l)| l)
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Ok(None) => "(the file does not exist now)".into(),
            Err(e) => format!("(unreadable: {e})"),
        },
        (_, Some(c), _, _) => c.clone(),
        _ => String::new(),
    };
    let what = match (row.kind, &row.file_path) {
        (ContextKind::Note, _) => "Note".to_string(),
        (ContextKind::Url, _) => format!(
            "Web page {} (as fetched {})",
            row.url.as_deref().unwrap_or(""),
            row.fetched_at.as_deref().unwrap_or("when pinned")
        ),
        (_, Some(p)) => p.clone(),
        (_, None) => "Selection".to_string(),
    };
    format!("### {what}{range}\n```\n{body}\n```\n")
}

/// The user's decisions on one suggestion, as text for the model.
pub fn render_decisions(d: &crate::model::run::Decisions) -> String {
    let mut s = format!("Suggestion \"{}\":\n", d.description);
    for h in &d.hunks {
        let verdict = match h.state {
            HunkState::Accepted => "accepted",
            HunkState::Rejected => "rejected",
            HunkState::Modified => "modified by the user",
            HunkState::Pending => "not reviewed yet",
            HunkState::Conflict => "could not be applied (the file had changed)",
        };
        s.push_str(&format!(
            "- {} hunk {}: {verdict}",
            h.file,
            h.hunk_id.rsplit(':').next().unwrap_or("")
        ));
        if let Some(c) = &h.comment {
            s.push_str(&format!(" — comment: {c}"));
        }
        s.push('\n');
        if h.state != HunkState::Accepted {
            s.push_str(&format!("  your hunk:\n{}", indent(&h.diff)));
        }
        if let Some(a) = &h.applied_diff {
            s.push_str(&format!("  what the user applied instead:\n{}", indent(a)));
        }
    }
    s
}

fn indent(text: &str) -> String {
    let cut: String = text.chars().take(2000).collect();
    cut.lines().map(|l| format!("    {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::session::MAX_ENTRY;

    fn entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| {
                let mut e = if i % 3 == 2 {
                    Entry::tool("read_file", "read_file a", true, "ok")
                } else {
                    Entry::message("user", &format!("m{i}"))
                };
                e.index = i;
                e
            })
            .collect()
    }

    #[test]
    fn pages_cover_every_entry_once() {
        let all = entries(10);
        let mut seen = Vec::new();
        let mut cursor = 0;
        loop {
            let (p, next) = page(&all, HistoryFilter::All, cursor, 3);
            assert!(p.len() <= 3);
            seen.extend(p.iter().map(|e| e.index));
            match next {
                Some(n) => cursor = n,
                None => break,
            }
        }
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        let (tools, next) = page(&all, HistoryFilter::Tools, 0, 100);
        assert_eq!(
            tools.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![2, 5, 8]
        );
        assert_eq!(next, None);
        let (msgs, next) = page(&all, HistoryFilter::Messages, 0, 2);
        assert_eq!(msgs.iter().map(|e| e.index).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(next, Some(3));
    }

    #[test]
    fn long_entries_are_bounded_and_context_rows_checked() {
        let e = Entry::message("assistant", &"x".repeat(MAX_ENTRY * 2));
        assert!(e.content.len() < MAX_ENTRY + 64 && e.content.contains("bytes more"));
        let row = |kind, path: Option<&str>, content: Option<&str>| ContextRow {
            id: String::new(),
            kind,
            file_path: path.map(str::to_string),
            start_line: None,
            end_line: None,
            content: content.map(str::to_string),
            url: None,
            fetched_at: None,
        };
        assert!(row(ContextKind::File, Some("src/a.rs"), None)
            .validate()
            .is_ok());
        assert!(row(ContextKind::File, Some("../etc/passwd"), None)
            .validate()
            .is_err());
        assert!(row(ContextKind::File, None, None).validate().is_err());
        assert!(row(ContextKind::Note, None, Some("use tabs"))
            .validate()
            .is_ok());
        assert!(row(ContextKind::Note, None, Some(" ")).validate().is_err());
    }
}

//! Events (server → client). Every event carries `seq`; see protocol.md, "Events".

use serde::{Deserialize, Serialize};

use crate::protocol::{
    ChecksView, CompleteAction, Diagnostic, HunkMerge, HunkState, HunkView, RollbackMode,
    SuggestionView,
};

/// Every error code the hub sends: in `error` events and in error responses (`code`).
/// Clients switch on these; the message beside them is for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// a run failed (event).
    ExperimentFailed,
    /// the sandbox could not be brought to the checkout (event).
    SyncFailed,
    /// jj failed (event).
    JjError,
    /// a hunk did not apply (event).
    ApplyFailed,
    /// anything else (event).
    Unknown,
    /// the request is malformed or not allowed as sent.
    BadRequest,
    /// no such suggestion, hunk, run, session or checkpoint.
    NotFound,
    /// the checkout no longer matches what the hunk expects.
    Conflict,
    /// the hunk is already decided: undo it first.
    AlreadyDecided,
    /// the suggestion was already completed.
    Closed,
    /// the session is archived.
    Archived,
    /// the run is already over.
    Finished,
    /// the run is not in progress.
    NotRunning,
    /// the run is waiting for an answer already.
    QuestionPending,
    /// the run is not waiting for an answer.
    NoQuestion,
    /// the answer names a question that is not the pending one.
    StaleQuestion,
    /// the run changed nothing.
    NoChanges,
    /// no or wrong token.
    Unauthorized,
    /// the token may not do this (an agent token on the reviewer API).
    Forbidden,
    /// a body or frame over the size limit.
    TooLarge,
    /// the hub failed; its log has the cause.
    Internal,
    /// a web page to pin is not allowed: its host (or a redirect's) is not in `[context]
    /// url_hosts`, or it is not http(s).
    UrlRefused,
    /// a web page to pin could not be fetched or read: a network error, an error status, too
    /// large, not text, no readable text.
    FetchFailed,
}

impl ErrorCode {
    /// The code as it is on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ExperimentFailed => "experiment_failed",
            ErrorCode::SyncFailed => "sync_failed",
            ErrorCode::JjError => "jj_error",
            ErrorCode::ApplyFailed => "apply_failed",
            ErrorCode::Unknown => "unknown",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::AlreadyDecided => "already_decided",
            ErrorCode::Closed => "closed",
            ErrorCode::Archived => "archived",
            ErrorCode::Finished => "finished",
            ErrorCode::NotRunning => "not_running",
            ErrorCode::QuestionPending => "question_pending",
            ErrorCode::NoQuestion => "no_question",
            ErrorCode::StaleQuestion => "stale_question",
            ErrorCode::NoChanges => "no_changes",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Internal => "internal",
            ErrorCode::UrlRefused => "url_refused",
            ErrorCode::FetchFailed => "fetch_failed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppliedAction {
    Accepted,
    Modified,
    Rejected,
    /// An applied hunk was reverse-applied and is pending again.
    Undone,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "suggestion.ready")]
    /// `seq` after the suggestion, so that a suggestion encoded in advance ([`ReadyJson`])
    /// becomes the event by appending to it, not by copying it into a new frame.
    Ready {
        suggestion: Box<SuggestionView>,
        seq: u64,
    },
    #[serde(rename = "suggestion.status")]
    Status {
        seq: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        suggestion_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        status: String,
        message: String,
    },
    #[serde(rename = "suggestion.error")]
    Error {
        seq: u64,
        code: ErrorCode,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        suggestion_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hunk_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        /// With `apply_failed` of an accept that found the hunk stale: the hunk's three-way
        /// merge with the user's file, as the hunk now carries it (protocol.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        merge: Option<HunkMerge>,
    },
    #[serde(rename = "suggestion.hunk_applied")]
    HunkApplied {
        seq: u64,
        suggestion_id: String,
        hunk_id: String,
        action: AppliedAction,
        file: String,
        state: HunkState,
        reviewed_count: usize,
        hunk_count: usize,
        /// A line-range decision: the range of the hunk's diff that was decided.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lines: Option<[usize; 2]>,
        /// Hunks the decision added: what a line-range decision left to decide.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        new_hunks: Vec<HunkView>,
        /// Hunks the decision took away: undoing a line-range decision takes its rest back.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removed_hunk_ids: Vec<String>,
    },
    #[serde(rename = "checkpoint.created")]
    CheckpointCreated {
        seq: u64,
        checkpoint_id: String,
        suggestion_id: String,
        run_id: String,
        affected_files: Vec<String>,
    },
    #[serde(rename = "checkpoint.rollback.started")]
    RollbackStarted {
        seq: u64,
        checkpoint_id: String,
        mode: RollbackMode,
        hunk_ids: Vec<String>,
    },
    #[serde(rename = "checkpoint.rollback.completed")]
    RollbackCompleted {
        seq: u64,
        checkpoint_id: String,
        mode: RollbackMode,
        files: Vec<String>,
        hunk_ids: Vec<String>,
    },
    #[serde(rename = "checkpoint.rollback.failed")]
    RollbackFailed {
        seq: u64,
        checkpoint_id: String,
        mode: RollbackMode,
        message: String,
    },
    /// The built-in agent asked for a tool (seed 000 §9).
    #[serde(rename = "tool.call.requested")]
    ToolRequested {
        seq: u64,
        run_id: String,
        tool_call_id: String,
        name: String,
        /// One line: the tool and its main argument.
        summary: String,
    },
    #[serde(rename = "tool.call.completed")]
    ToolCompleted {
        seq: u64,
        run_id: String,
        tool_call_id: String,
        name: String,
        ok: bool,
        /// One line: what came of it (counts, the error).
        summary: String,
        duration_ms: u64,
    },
    /// The built-in agent asks the user; answer with `clarify`.
    #[serde(rename = "clarification.requested")]
    ClarificationRequested {
        seq: u64,
        run_id: String,
        question_id: String,
        question: String,
    },
    #[serde(rename = "clarification.received")]
    ClarificationReceived {
        seq: u64,
        run_id: String,
        question_id: String,
        /// `no_user_answer` when the user skipped.
        answer: String,
        skipped: bool,
    },
    /// `restore`: a file an accepted hunk deleted is back in the checkout.
    #[serde(rename = "file.restored")]
    FileRestored {
        seq: u64,
        path: String,
        /// The suggestion and hunk whose accept deleted it.
        suggestion_id: String,
        hunk_id: String,
    },
    /// The configured checkers ran on a suggestion's run and base (protocol.md, "Checks"):
    /// every new and fixed diagnostic, each with the hunk it falls on.
    #[serde(rename = "suggestion.checked")]
    Checked {
        seq: u64,
        suggestion_id: String,
        run_id: String,
        checks: ChecksView,
        diagnostics: Vec<Diagnostic>,
    },
    #[serde(rename = "suggestion.completed")]
    Completed {
        seq: u64,
        suggestion_id: String,
        action: CompleteAction,
        #[serde(skip_serializing_if = "Option::is_none")]
        reviewed_commit: Option<String>,
    },
}

impl Event {
    pub fn set_seq(&mut self, value: u64) {
        match self {
            Event::Ready { seq, .. }
            | Event::Status { seq, .. }
            | Event::Error { seq, .. }
            | Event::HunkApplied { seq, .. }
            | Event::Completed { seq, .. }
            | Event::Checked { seq, .. }
            | Event::CheckpointCreated { seq, .. }
            | Event::RollbackStarted { seq, .. }
            | Event::RollbackCompleted { seq, .. }
            | Event::RollbackFailed { seq, .. }
            | Event::ToolRequested { seq, .. }
            | Event::ToolCompleted { seq, .. }
            | Event::ClarificationRequested { seq, .. }
            | Event::ClarificationReceived { seq, .. }
            | Event::FileRestored { seq, .. } => *seq = value,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    #[serde(rename = "type")]
    pub kind: String,
    pub service: String,
    pub version: String,
    pub protocol: u32,
    /// The seq of the newest event so far; events after it are pushed on this connection.
    pub seq: u64,
    /// Changes on every hub start: a client that sees a new epoch resyncs with `list`/`get`.
    pub epoch: String,
}

/// A `suggestion.ready` event encoded in advance, all but its `seq` (known only when it is
/// sent): byte for byte what encoding [`Event::Ready`] makes once [`ReadyJson::finish`] adds it.
/// A big suggestion's view is encoded while the suggestion is journaled, not after, and the
/// frame sent is this very buffer: hundreds of kilobytes are not copied.
#[derive(Debug)]
pub struct ReadyJson(String);

impl ReadyJson {
    const HEAD: &'static str = r#"{"type":"suggestion.ready","suggestion":"#;
    /// Room for `,"seq":<u64>}`.
    const TAIL_ROOM: usize = 32;

    /// Encode `view`; `size` is about how long its JSON will be.
    pub fn encode(view: &SuggestionView, size: usize) -> serde_json::Result<Self> {
        let mut json = Vec::with_capacity(Self::HEAD.len() + size + Self::TAIL_ROOM);
        json.extend_from_slice(Self::HEAD.as_bytes());
        serde_json::to_writer(&mut json, view)?;
        // serde_json writes only UTF-8.
        String::from_utf8(json)
            .map(Self)
            .map_err(serde::ser::Error::custom)
    }

    /// The event with `seq`.
    pub fn finish(self, seq: u64) -> String {
        use std::fmt::Write as _;
        let mut json = self.0;
        let _ = write!(json, r#","seq":{seq}}}"#);
        json
    }
}

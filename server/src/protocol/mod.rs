//! The wire protocol: every event, command and response hunkgate speaks.
//!
//! The specification is [`protocol.md`](https://docs.rs/hunkgate) — the same text is this
//! module's documentation, kept beside the types it describes so the two change together.
#![doc = include_str!("protocol.md")]

use serde::{Deserialize, Serialize};

mod command;
mod event;
mod gc;
mod reply;
mod route;
pub use command::*;
pub use event::*;
pub use gc::*;
pub use reply::*;
pub use route::*;

pub const PROTOCOL_VERSION: u32 = 1;
pub const SERVICE: &str = "hunkgate";

/// Largest request body and WebSocket message accepted: room for a modified diff of a big file.
/// Larger ones get `too_large` and change nothing.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

/// WebSocket frames above this close the connection (the "message too big" close); messages
/// between [`MAX_BODY`] and this get a `too_large` response and the connection stays usable.
pub const HARD_LIMIT: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Views: what clients see of suggestions and hunks.

/// What a hunk changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HunkKind {
    /// Lines of an existing text file.
    Modify,
    /// A new file (one hunk holding all of it).
    Create,
    /// A deleted file (one hunk holding all of it).
    Delete,
    /// A file moved with identical content.
    Rename,
    /// A binary or non-UTF-8 file: whole-file accept or reject, no text diff.
    Binary,
    /// The executable bit changed.
    Mode,
    /// A symlink created, changed or removed (its target is the content).
    Symlink,
}

/// Review state of one hunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HunkState {
    Pending,
    Accepted,
    Modified,
    Rejected,
    /// The last accept/modify could not apply (the file moved on); it can be retried.
    Conflict,
}

impl HunkState {
    pub fn reviewed(self) -> bool {
        matches!(
            self,
            HunkState::Accepted | HunkState::Modified | HunkState::Rejected
        )
    }
    pub fn applied(self) -> bool {
        matches!(self, HunkState::Accepted | HunkState::Modified)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HunkHeader {
    pub old_start: usize,
    pub old_lines: usize,
    pub new_start: usize,
    pub new_lines: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HunkView {
    /// `<suggestion-id>:<path>:<index>`, index 0-based per file.
    pub id: String,
    pub file: String,
    /// Unified diff of this hunk ("@@ -a,b +c,d @@" and body); for binary, mode and rename
    /// hunks a one-line git-style description instead.
    pub diff: String,
    pub kind: HunkKind,
    pub index: usize,
    pub state: HunkState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<HunkHeader>,
    /// The diff that was applied when the user modified the hunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_diff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Why the last accept failed, while `state` is `conflict`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// The agent's word on why it made this change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Decided in part: the range of `diff`'s lines (1-based, after the `@@` line) that was
    /// accepted (`applied_diff` is what landed) or rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<[usize; 2]>,
    /// This hunk is what a line-range decision on that hunk left to decide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_hunk_id: Option<String>,
    /// The three-way merge of a hunk made stale by an edit of the user's, while `state` is
    /// `conflict` (and, once a clean one landed, what landed): see [`HunkMerge`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<HunkMerge>,
    /// Deletes a file, renames it, changes its mode or deletes more lines than
    /// `[review] destructive_deleted_lines`: an accept-all leaves it pending unless it is
    /// confirmed (`confirm: true`); accepting it by name is enough.
    #[serde(default)]
    pub destructive: bool,
    /// Shows more than `[review] max_hunk_lines` or `max_hunk_bytes` and could not be cut into
    /// parts that apply on their own: take it whole, or decide it by line ranges.
    #[serde(default)]
    pub oversized: bool,
    /// A hunk of a file the change rewrote: most of its old lines removed and replaced.
    #[serde(default)]
    pub rewrite: bool,
    /// What the configured checkers (`[[check]]`) report new on this hunk's lines in the run,
    /// or fixed on the lines it replaces (protocol.md, "Checks").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
}

/// One diagnostic of a checker (`[[check]]`) that a run made appear (`new`) or go away
/// (`fixed`): protocol.md, "Checks". Checker output is data: every field is bounded
/// ([`Diagnostic::MAX_MESSAGE`]) and nothing of it is ever run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The `[[check]]`'s name (`cargo-check`, `ruff`, …).
    pub source: String,
    /// The checker's code for it (`E0308`, `F401`), when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub message: String,
    /// The file, relative to the repository root: in the run's tree when `new`, in the base's
    /// when `fixed`.
    pub file: String,
    /// 1-based, in that same tree.
    pub line: usize,
    /// 1-based, when the checker gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub change: DiagnosticChange,
    /// The hunk it falls on (its new lines for `new`, its old lines for `fixed`); none: it
    /// falls outside every hunk, and belongs to the suggestion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hunk_id: Option<String>,
}

impl Diagnostic {
    /// A message is cut to this many bytes (at a character boundary).
    pub const MAX_MESSAGE: usize = 1000;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// Whether the run brought a diagnostic in or took it away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiagnosticChange {
    New,
    Fixed,
}

/// How a suggestion's checks went: `done`, or `incomplete` with `notes` saying which checker
/// did not finish and why (timed out, output over its cap, could not be started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecksView {
    pub state: ChecksState,
    /// One line per checker that gave nothing to compare, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The checkers that were run (their `[[check]]` names).
    pub checkers: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksState {
    /// Every checker ran to its end on both trees.
    Done,
    /// At least one did not (see `notes`); the others' diagnostics are there.
    Incomplete,
}

/// A stale hunk merged three ways — the run's base version of the file, the user's file as it
/// is now, and the base with only this hunk applied — as the reviewer sees it before anything
/// is written (protocol.md, "Three-way merge of a stale hunk").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HunkMerge {
    pub outcome: MergeOutcome,
    /// The merged change as one hunk of a unified diff against the user's file now; with
    /// `conflicted`, its added lines hold git-style conflict markers (`<<<<<<< yours`,
    /// `=======`, `>>>>>>> agent`).
    pub diff: String,
    /// The SHA-256 (hex) of the user's file the merge was computed against: an accept of the
    /// merge names it (`merged_against`), and lands only while the file still has it.
    pub merged_against: String,
}

/// Whether a three-way merge resolved on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MergeOutcome {
    /// No overlap: the merged diff can be accepted as it is.
    Clean,
    /// The user's edit and the agent's overlap: the diff holds conflict markers, and lands
    /// only through a modify.
    Conflicted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SuggestionStatus {
    Pending,
    Partial,
    Complete,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuggestionView {
    pub id: String,
    /// The jj change id of the run in a jj repository; the run commit id otherwise.
    pub jj_change_id: String,
    pub description: String,
    pub files: Vec<String>,
    pub hunks: Vec<HunkView>,
    pub hunk_count: usize,
    pub reviewed_count: usize,
    pub status: SuggestionStatus,
    /// Set once the suggestion was completed with `finalize` or `discard`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
    pub run_id: String,
    pub base_commit: String,
    pub run_commit: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviewed_commit: Option<String>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Files of the run that the snapshot left out (too large, not a regular file or symlink,
    /// a name that is not UTF-8): never offered as hunks, never deleted, only reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedFile>,
    /// How the configured checkers went on this suggestion, once they ran (absent before, and
    /// when none is configured); `suggestion.checked` says when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<ChecksView>,
    /// The checkers' new and fixed diagnostics that fall outside every hunk (those on a hunk
    /// are in its `diagnostics`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
}

/// A file left out of a suggestion, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuggestionSummary {
    pub id: String,
    pub jj_change_id: String,
    pub description: String,
    pub files: Vec<String>,
    pub hunk_count: usize,
    pub reviewed_count: usize,
    pub status: SuggestionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
    pub run_id: String,
    pub created_at: String,
}

impl From<&SuggestionView> for SuggestionSummary {
    fn from(s: &SuggestionView) -> Self {
        Self {
            id: s.id.clone(),
            jj_change_id: s.jj_change_id.clone(),
            description: s.description.clone(),
            files: s.files.clone(),
            hunk_count: s.hunk_count,
            reviewed_count: s.reviewed_count,
            status: s.status,
            closed: s.closed.clone(),
            run_id: s.run_id.clone(),
            created_at: s.created_at.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Working,
    /// The built-in agent asked the user a question (`clarify_user`) and waits for the answer.
    WaitingForUser,
    /// The agent finished and its suggestion is ready for review.
    Ready,
    /// The agent finished without changing anything.
    NoChanges,
    Failed,
    Cancelled,
    /// The hub stopped (restarted, crashed) while the run was working or waiting for an answer.
    /// The run is over; its suggestions, session and history stay, and the session's next run
    /// can be started as usual.
    Interrupted,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    pub run_id: String,
    pub status: RunState,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default)]
    pub suggestion_ids: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Built-in agent: the model asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Built-in agent: why the loop ended — `finished`, `answered` (the model stopped without
    /// calling finish), `budget_exhausted`, `schema_retries_exhausted`, `provider_error`,
    /// `timeout`, `cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Built-in agent: what the run cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RunUsage>,
    /// Built-in agent: the question it waits on (status `waiting_for_user`); an ACP agent's
    /// permission question too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
    /// ACP agent: the name and version it gave in `initialize` (`OpenCode 1.18.33`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_info: Option<String>,
    /// Built-in agent: the provider the run is on (the last one, after a `hybrid_auto` move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Built-in agent: how its provider and model were chosen, and its moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteView>,
    /// ACP agent: the ACP session its turn ran in (the session's next run continues it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
}

/// Token and call counts of a built-in agent run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunUsage {
    pub model_calls: u64,
    pub tool_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Time spent waiting for the model.
    pub model_ms: u64,
    pub retries: u64,
    pub schema_failures: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    pub question_id: String,
    pub question: String,
}

// ---------------------------------------------------------------------------------------------
// Commands (client -> server), shared by WebSocket (camelCase) and REST (snake_case): every field
// accepts both spellings.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeedbackAction {
    Accept,
    Reject,
    Modify,
    /// Reverse-apply an accepted or modified hunk and make it pending again.
    Undo,
}

impl FeedbackAction {
    /// The action as the feedback log names it.
    pub fn word(self) -> &'static str {
        match self {
            FeedbackAction::Accept => "accept",
            FeedbackAction::Reject => "reject",
            FeedbackAction::Modify => "modify",
            FeedbackAction::Undo => "undo",
        }
    }

    /// Whether it applies the hunk (accept, modify) rather than taking it back.
    pub fn forward(self) -> bool {
        matches!(self, FeedbackAction::Accept | FeedbackAction::Modify)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompleteAction {
    Finalize,
    Discard,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackCmd {
    #[serde(alias = "suggestionId")]
    pub suggestion_id: String,
    #[serde(alias = "hunkId")]
    pub hunk_id: String,
    pub action: FeedbackAction,
    #[serde(default, alias = "modifiedDiff")]
    pub modified_diff: Option<String>,
    /// With `accept` of a hunk in `conflict`: land the hunk's clean three-way merge, which was
    /// computed against the file of this SHA-256 ([`HunkMerge::merged_against`]).
    #[serde(default, alias = "mergedAgainst")]
    pub merged_against: Option<String>,
    /// Decide only these lines of the hunk's diff: `[first, last]`, 1-based, inclusive,
    /// counting the lines after its `@@` header (`accept` and `reject` only).
    #[serde(default)]
    pub lines: Option<[usize; 2]>,
    #[serde(default)]
    pub comment: Option<String>,
    #[serde(default, rename = "type")]
    pub _type: Option<String>,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    Accept,
    Reject,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackAllCmd {
    #[serde(alias = "suggestionId")]
    pub suggestion_id: String,
    pub action: BulkAction,
    /// Only the pending hunks of this file.
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub comment: Option<String>,
    /// Accept the destructive hunks too (an accept-all leaves them pending without it).
    #[serde(default)]
    pub confirm: bool,
    #[serde(default, rename = "type")]
    pub _type: Option<String>,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteCmd {
    #[serde(alias = "suggestionId")]
    pub suggestion_id: String,
    pub action: CompleteAction,
    #[serde(default, rename = "type")]
    pub _type: Option<String>,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCmd {
    pub prompt: String,
    /// A command template, or `builtin` for the built-in agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// An agent spoken to over the Agent Client Protocol: its command (`opencode acp`).
    #[serde(default)]
    pub acp: Option<String>,
    /// The built-in agent's model for this run (implies `agent: "builtin"`).
    #[serde(default)]
    pub model: Option<String>,
    /// The built-in agent's provider for this run, by its config name (implies `agent:
    /// "builtin"`).
    #[serde(default)]
    pub provider: Option<String>,
    /// `local`, `remote` or `hybrid_auto` for this run (implies `agent: "builtin"`).
    #[serde(default, alias = "agentMode")]
    pub agent_mode: Option<String>,
    #[serde(default, alias = "sessionId")]
    pub session_id: Option<String>,
    #[serde(default, alias = "timeoutSecs")]
    pub timeout_secs: Option<u64>,
    #[serde(default, rename = "type")]
    pub _type: Option<String>,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishCmd {
    pub description: String,
    /// Only files matching one of these globs ("src/**/*.rs").
    #[serde(default)]
    pub files: Vec<String>,
    /// Why each change was made, shown beside its hunks.
    #[serde(default, alias = "hunkDescriptions")]
    pub hunk_descriptions: Vec<HunkNote>,
}

/// A description for the hunks of `file`: the one whose new side contains `line` (1-based), or
/// every hunk of the file when `line` is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HunkNote {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub description: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStatusCmd {
    pub message: String,
    /// "working" (default), "testing", or any short word.
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollbackMode {
    /// Every affected file back to the checkpoint base; later edits to them are lost.
    HardAll,
    /// Reverse-apply only the listed hunks; refuse, touching nothing, where newer edits overlap.
    ScopedSelected,
}

/// `POST /restore`: bring back a file an accepted hunk deleted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreCmd {
    /// Relative to the repository root, as the hunk named it.
    pub path: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackCmd {
    pub mode: RollbackMode,
    #[serde(default, alias = "hunkIds")]
    pub hunk_ids: Vec<String>,
    #[serde(default)]
    pub confirm: bool,
}

/// `{"type": "response", ...}`: the answer to one command, echoing its `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<serde_json::Value>,
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Machine-readable error code (see the spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl Response {
    pub fn ok(id: Option<serde_json::Value>, data: serde_json::Value) -> Self {
        Self {
            kind: "response".into(),
            id,
            success: true,
            data: Some(data),
            error: None,
            code: None,
        }
    }
    pub fn err(id: Option<serde_json::Value>, code: &str, error: String) -> Self {
        Self {
            kind: "response".into(),
            id,
            success: false,
            data: None,
            error: Some(error),
            code: Some(code.into()),
        }
    }
}

/// The answer to a built-in agent's question.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClarifyCmd {
    /// WebSocket only (REST has it in the path).
    #[serde(default, alias = "runId")]
    pub run_id: Option<String>,
    /// Optional: when given it must be the pending question's.
    #[serde(default, alias = "questionId")]
    pub question_id: Option<String>,
    #[serde(default)]
    pub answer: Option<String>,
    /// Skip the question: the agent is told `no_user_answer`.
    #[serde(default)]
    pub skip: bool,
    #[serde(default, rename = "type")]
    pub _type: Option<String>,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

/// The answer the agent gets when the user skips a question (seed 000 §21).
pub const NO_USER_ANSWER: &str = "no_user_answer";

/// The WebSocket command types (the deserializable variants of [`ClientMsg`]), for error messages.
pub const COMMAND_TYPES: &[&str] = &[
    "feedback",
    "feedback_all",
    "complete",
    "list",
    "get",
    "run",
    "cancel",
    "clarify",
    "replay",
    "ping",
];

//! Publishing: what an agent left in its sandbox becomes a suggestion (hunks, notes, skipped
//! files), and what an agent may see and say of its run.

use std::sync::Arc;

use hunkgate_sandbox::agent::scrubbed_env;
use hunkgate_sandbox::jj::{self};
use hunkgate_sandbox::snapshot::ReadBack;
use hunkgate_sandbox::store::{Changes, FlatTree, ObjectBatch, StoreError};
use hunkgate_sandbox::workspace::Sandbox;
use hunkgate_sandbox::ObjectId;

use crate::error::AppError;
use crate::hub::registry::{poisoned, Active};
use crate::hub::{Hub, NewSuggestion};
use crate::model::now;
use crate::model::run::RunRec;
use crate::model::suggestion::{
    attach_notes, build_hunks, mark_destructive, Blobs, HunkRec, Suggestion,
};
use crate::protocol::{ErrorCode, Event, HunkNote, RunState, SuggestionView};

impl Hub {
    pub fn url(&self) -> String {
        let host = if self.cfg().host.contains(':') {
            format!("[{}]", self.cfg().host)
        } else {
            self.cfg().host.clone()
        };
        format!("http://{host}:{}", self.cfg().port)
    }

    /// Turn the sandbox's current state into a suggestion (the agent's `publish`, or the hub's
    /// when the agent exits).
    pub async fn publish(
        self: &Arc<Self>,
        run_id: &str,
        description: &str,
        globs: &[String],
        notes: &[HunkNote],
    ) -> Result<SuggestionView, AppError> {
        if description.trim().is_empty() {
            return Err(AppError::bad_request("description is empty".into()));
        }
        let active = self.active_run(run_id)?;
        let filter = file_filter(globs)?;
        let (prompt, agent) = {
            let st = self.lock()?;
            let r = st.runs.get(run_id);
            (r.map(|r| r.prompt.clone()), r.and_then(|r| r.agent.clone()))
        };
        let jj_change = active.change_id.clone();
        let jj_sandbox = active.sandbox.clone();
        let draft = Draft {
            run_id: run_id.to_string(),
            description: description.to_string(),
            notes: notes.to_vec(),
            filter,
            active,
            prompt,
            agent,
        };
        let (suggestion, commit) = self
            .blocking_here(move |hub| hub.build_suggestion(draft))
            .await?;
        if let Some(change) = &jj_change {
            self.describe_jj_change(jj_sandbox.as_ref(), change, description)
                .await;
        }
        let (view, journaled) = self.announce_suggestion(run_id, suggestion)?;
        let (rid, sid) = (run_id.to_string(), view.id.clone());
        // Housekeeping, once the clients have the announcement (a big one is hundreds of
        // kilobytes to send): returning memory takes a millisecond of CPU, and the refs two
        // lock files, which on two cores would be taken from sending it. The publish still
        // ends with them, so an agent publishing again and again frees as it goes.
        self.bus().taken(HOUSEKEEPING_WAITS).await;
        let _ = self
            .blocking(move |hub| {
                drop(journaled);
                hub.set_run_refs(&rid, &sid, commit);
                // A publish allocates in proportion to the change and frees most of it again.
                hunkgate_sandbox::return_freed_memory();
                Ok(())
            })
            .await;
        Ok(view)
    }

    /// The live state of `run_id`, which only a running agent has.
    fn active_run(&self, run_id: &str) -> Result<Arc<Active>, AppError> {
        self.runs()
            .active
            .lock()
            .map_err(|_| poisoned())?
            .get(run_id)
            .cloned()
            .ok_or_else(|| {
                AppError::conflict(
                    ErrorCode::NotRunning,
                    format!("run {run_id} is not running; only a running agent can publish"),
                )
            })
    }

    /// The suggestion for what the sandbox holds now against the run's base, its run commit
    /// written to the checkpoint store (a `no_changes` error when there is nothing to review).
    fn build_suggestion(&self, draft: Draft) -> Result<(NewSuggestion, ObjectId), AppError> {
        let Draft {
            run_id: rid,
            description: desc,
            notes,
            filter,
            active,
            prompt,
            agent,
        } = draft;
        let started = std::time::Instant::now();
        // The new files' blobs, the run commit's trees and the commit itself go into one
        // batch, written (a pack, or a few loose objects) with the commit, beside the diffs;
        // the diffs read the new files from the batch's memory, not back from the store.
        let mut objects = self.store().batch().keeping(FRESH_BYTES);
        let only = |p: &str| filter.as_ref().is_none_or(|f| f.is_match(p));
        let (back, skipped) = self.changes_to_review(&active, &mut objects, &only, &rid)?;
        let fresh = objects.take_fresh();
        let blobs = Blobs {
            store: self.store(),
            fresh: &fresh,
        };
        let us = |t: std::time::Instant| t.elapsed().as_micros() as u64;
        let base = &active.base_tree;
        let sid = uuid::Uuid::new_v4().to_string();
        let changes = &back.changes;
        let limits = self.cfg().review.hunk_limits;
        // What the suggestion is, once its hunks and its run commit's id are known.
        let suggest = |hunks: Result<Vec<HunkRec>, StoreError>, commit: ObjectId| {
            let mut hunks = hunks.map_err(|e| publish_error(&e))?;
            let unmatched = attach_notes(&mut hunks, capped_notes(&notes));
            cap_descriptions(&mut hunks);
            mark_destructive(&mut hunks, self.cfg().review.destructive_deleted_lines);
            if !unmatched.is_empty() {
                tracing::info!(?unmatched, "hunk descriptions that match no hunk");
            }
            if hunks.is_empty() {
                return Err(AppError::no_changes(
                    "No changes match the given files".into(),
                ));
            }
            tracing::debug!(
                run = rid,
                us = us(started),
                hunks = hunks.len(),
                "hunks built"
            );
            NewSuggestion::prepare(Suggestion {
                id: sid.clone(),
                run_id: rid.clone(),
                description: desc.clone(),
                base_commit: active.base_commit.to_string(),
                run_commit: commit.to_string(),
                change_id: active.change_id.clone(),
                created_at: now(),
                agent: agent.clone(),
                prompt: prompt.clone(),
                hunks,
                closed: None,
                reviewed_commit: None,
                skipped: skipped.clone(),
                checks: None,
                diagnostics: Vec::new(),
            })
        };
        // The run commit's objects are written (compressed, a pack fsynced) before the suggestion
        // is journaled, so a journaled suggestion's run commit is always in the store; then the
        // hunks are diffed, reading what the batch kept from memory and the rest (past
        // FRESH_BYTES) from the store, where it now is. One path for every size (see
        // docs/performance.md for what writing the objects beside the diffs saved).
        let (commit, objects) = self.stage_run_head(objects, &rid, &desc, &active, changes)?;
        tracing::debug!(run = rid, us = us(started), "run commit staged");
        self.write_run_head(objects, &rid, commit)?;
        tracing::debug!(run = rid, us = us(started), "run commit written");
        let hunks = build_hunks(blobs, &sid, base, changes, &only, limits);
        Ok((suggest(hunks, commit)?, commit))
    }

    /// What the agent left in the sandbox that review may see: its read-back (new blobs added
    /// to `objects`) less what was skipped or is sensitive, which is returned to be shown; a
    /// `no_changes` error when nothing is left that `only` lets through.
    fn changes_to_review(
        &self,
        active: &Active,
        objects: &mut ObjectBatch<'_>,
        only: &dyn Fn(&str) -> bool,
        rid: &str,
    ) -> Result<(ReadBack, Vec<crate::protocol::SkippedFile>), AppError> {
        let started = std::time::Instant::now();
        let mut back = active
            .sandbox
            .read_back(objects, &active.base_tree, self.cfg().read_limits)
            .map_err(|e| match e.over_limit() {
                Some(over) => AppError::too_large(over.to_string()),
                None => publish_error(&e),
            })?;
        tracing::debug!(
            run = rid,
            us = started.elapsed().as_micros() as u64,
            changed = back.changes.len(),
            "sandbox read back"
        );
        let mut skipped = keep_skipped_as_base(&mut back, &active.base_tree, only);
        skipped.extend(refuse_sensitive(&mut back, &active.sensitive, only));
        if back.changes.is_empty() {
            return Err(AppError::no_changes(no_changes_message(&skipped)));
        }
        let base = &active.base_tree;
        if !back
            .changes
            .iter()
            .any(|(path, new)| only(path) && base.get(path) != new.as_ref())
        {
            return Err(AppError::no_changes(
                "No changes match the given files".into(),
            ));
        }
        Ok((back, skipped))
    }

    /// The base with `changes` as the run's head commit (on the base): its trees and the
    /// commit added to `objects` (which holds the new blobs), to be written by
    /// [`Hub::write_run_head`]; returns the commit's id and the batch.
    fn stage_run_head<'s>(
        &'s self,
        mut objects: ObjectBatch<'s>,
        rid: &str,
        desc: &str,
        active: &Active,
        changes: &Changes,
    ) -> Result<(ObjectId, ObjectBatch<'s>), AppError> {
        let tree = self
            .store()
            .edit_tree_in(&mut objects, active.base_tree_id, changes)
            .map_err(|e| publish_error(&e))?;
        let commit = self
            .store()
            .commit_in(
                &mut objects,
                tree,
                &[active.base_commit],
                &format!("suggestion: {desc}\n\nrun {rid}\n"),
            )
            .map_err(|e| publish_error(&e))?;
        Ok((commit, objects))
    }

    /// Write the run's head commit staged in `objects`; with `--mirror-refs`, also point the
    /// run's head ref in the user's repository at it. The store's own refs follow the
    /// announcement ([`Hub::set_run_refs`]).
    fn write_run_head(
        &self,
        objects: ObjectBatch<'_>,
        rid: &str,
        commit: ObjectId,
    ) -> Result<(), AppError> {
        objects.finish().map_err(|e| publish_error(&e))?;
        self.mirror_ref(&run_head_ref(rid), commit);
        Ok(())
    }

    /// Point the run's head ref and the suggestion's run ref in the checkpoint store at the
    /// run commit of a suggestion just announced. The refs are a view of the journal for git
    /// tools, not what the hub goes by: they are set after the announcement, off the publish's
    /// path (two new directories and two lock files, each a wait on the filesystem), and a
    /// hub that stopped in between sets them at its next start ([`restore_run_refs`]). A
    /// failure is logged, for the same reason. A suggestion collected meanwhile (reviewed and
    /// past its retention within those milliseconds) gets no refs: they would outlive it.
    fn set_run_refs(&self, rid: &str, sid: &str, commit: ObjectId) {
        crate::hub::test_hooks::pause("before-run-refs");
        let _refs = self.refs_lock();
        let still_here = self.lock().is_ok_and(|st| st.suggestions.contains_key(sid));
        if !still_here {
            tracing::debug!(
                run = rid,
                suggestion = sid,
                "collected before its refs were set"
            );
            return;
        }
        let names = [run_head_ref(rid), suggestion_run_ref(sid)];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        if let Err(e) = self.store().set_refs(&names, commit) {
            tracing::warn!(error = %e, run = rid, suggestion = sid, "setting a suggestion's refs in the checkpoint store");
        }
    }

    /// Give the run's jj change the suggestion's description; best effort: the change keeps
    /// its provisional description if this fails.
    async fn describe_jj_change(&self, sandbox: &dyn Sandbox, change: &str, description: &str) {
        if let Err(e) = jj::describe(
            sandbox,
            &scrubbed_env(&self.cfg().agent_env),
            change,
            description,
        )
        .await
        {
            tracing::warn!(error = %e, "describing the run's jj change");
        }
    }

    /// Add the suggestion to the hub and its run, mark the run `ready` if its agent is no
    /// longer running, and only then say the suggestion is ready: a client that reacts to
    /// `suggestion.ready` or the `ready` status by reading the run (as `hunkgate run` does)
    /// finds it already up to date. Returns the view, and the journal line written for the
    /// caller to drop off the announcement's path ([`Hub::record_suggestion`]).
    fn announce_suggestion(
        &self,
        run_id: &str,
        suggestion: NewSuggestion,
    ) -> Result<(SuggestionView, Vec<u8>), AppError> {
        let sid = suggestion.suggestion().id.clone();
        let started = std::time::Instant::now();
        let agent_done = !self.is_agent_running(run_id);
        let (view, ready, journaled) = self.record_suggestion(
            suggestion,
            Some(|r: &mut RunRec| {
                r.suggestion_ids.push(sid.clone());
                if r.status == RunState::Working && agent_done {
                    r.status = RunState::Ready;
                }
            }),
        )?;
        tracing::debug!(
            run = run_id,
            ms = started.elapsed().as_millis() as u64,
            "suggestion journaled with its run"
        );
        self.emit_suggestion_ready(&view, ready);
        self.bus().emit(Event::Status {
            seq: 0,
            suggestion_id: Some(sid),
            run_id: Some(run_id.to_string()),
            status: "ready".into(),
            message: ready_message(
                &view.description,
                &view.skipped,
                view.hunk_count,
                view.files.len(),
            ),
        });
        tracing::debug!(
            run = run_id,
            ms = started.elapsed().as_millis() as u64,
            "suggestion announced"
        );
        Ok((view, journaled))
    }

    fn is_agent_running(&self, run_id: &str) -> bool {
        self.runs()
            .agent_tokens
            .lock()
            .map(|t| t.values().any(|r| r == run_id))
            .unwrap_or(false)
    }

    /// A status line from the agent (`hunkgate status`).
    pub fn agent_status(
        &self,
        run_id: &str,
        message: &str,
        status: Option<&str>,
    ) -> Result<(), AppError> {
        let message: String = message.trim().chars().take(500).collect();
        if message.is_empty() {
            return Err(AppError::bad_request("status message is empty".into()));
        }
        let status = status.unwrap_or("working");
        if status.is_empty()
            || status.len() > 32
            || !status
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(AppError::bad_request(format!(
                "status {status:?} must be one short word"
            )));
        }
        let m = message.clone();
        self.update_run(run_id, |r| r.last_message = Some(m))?;
        self.run_status(run_id, status, message);
        Ok(())
    }
}

/// What `publish` takes from the request and the run into the blocking worker that builds the
/// suggestion.
struct Draft {
    run_id: String,
    description: String,
    notes: Vec<HunkNote>,
    filter: Option<globset::GlobSet>,
    active: Arc<Active>,
    prompt: Option<String>,
    agent: Option<String>,
}

/// A failure while publishing the run's changes (an internal error).
fn publish_error(e: &dyn std::fmt::Display) -> AppError {
    AppError::internal(format!("publishing the run's changes: {e}"))
}

/// The run's head ref: its latest suggestion's run commit.
/// How long a publish's housekeeping waits at most for the clients to take its announcement.
const HOUSEKEEPING_WAITS: std::time::Duration = std::time::Duration::from_millis(50);

fn run_head_ref(run_id: &str) -> String {
    format!("refs/hunkgate/runs/{run_id}/head")
}

/// A suggestion's run ref: the commit of what the agent left when it was published.
fn suggestion_run_ref(suggestion_id: &str) -> String {
    format!("refs/hunkgate/suggestions/{suggestion_id}/run")
}

/// Set the checkpoint store's refs that a hub stopped between announcing a suggestion and
/// setting them ([`Hub::set_run_refs`]) left missing or behind: each journaled suggestion's
/// run ref, and each run's head ref at its latest suggestion. Returns how many were set. A
/// run commit the store does not have (lost with the machine's power before the filesystem
/// wrote it) gets no ref, which would be a broken one, and is logged.
pub fn restore_run_refs(
    store: &hunkgate_sandbox::store::Store,
    state: &crate::hub::State,
) -> Result<usize, hunkgate_sandbox::store::StoreError> {
    let have = store.refs_under("refs/hunkgate/")?;
    // Creation order: a run's later suggestion moves its head ref past an earlier one's.
    let mut want = std::collections::BTreeMap::new();
    for s in state
        .order
        .iter()
        .filter_map(|id| state.suggestions.get(id))
    {
        let Ok(commit) = ObjectId::from_hex(s.run_commit.as_bytes()) else {
            continue;
        };
        want.insert(suggestion_run_ref(&s.id), commit);
        want.insert(run_head_ref(&s.run_id), commit);
    }
    let mut by_commit: std::collections::BTreeMap<ObjectId, Vec<String>> = Default::default();
    for (name, commit) in want {
        if have.get(&name) != Some(&commit) {
            by_commit.entry(commit).or_default().push(name);
        }
    }
    let mut set = 0;
    for (commit, names) in by_commit {
        if !store.has_object(commit) {
            tracing::warn!(%commit, refs = ?names, "a journaled run commit is missing from the checkpoint store; its refs are left unset");
            continue;
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        store.set_refs(&names, commit)?;
        set += names.len();
    }
    Ok(set)
}

/// The `--files` globs as one matcher (None: every file).
fn file_filter(globs: &[String]) -> Result<Option<globset::GlobSet>, AppError> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut b = globset::GlobSetBuilder::new();
    for g in globs {
        b.add(
            globset::Glob::new(g)
                .map_err(|e| AppError::bad_request(format!("--files {g:?}: {e}")))?,
        );
    }
    Ok(Some(
        b.build()
            .map_err(|e| AppError::bad_request(e.to_string()))?,
    ))
}

/// The first [`MAX_NOTES`] hunk descriptions (logging how many more were ignored).
fn capped_notes(notes: &[HunkNote]) -> &[HunkNote] {
    if notes.len() > MAX_NOTES {
        tracing::info!(
            dropped = notes.len() - MAX_NOTES,
            "hunk descriptions beyond the first {MAX_NOTES} are ignored"
        );
        &notes[..MAX_NOTES]
    } else {
        notes
    }
}

/// The `no_changes` message when the sandbox equals the base, naming what was left out.
fn no_changes_message(skipped: &[crate::protocol::SkippedFile]) -> String {
    let mut msg = "The agent made no changes".to_string();
    if !skipped.is_empty() {
        msg.push_str(&format!(
            " that hunkgate can review; left out: {}",
            skipped_list(skipped)
        ));
    }
    msg
}

/// The `ready` status line of a new suggestion: its description, size, and what was left out.
fn ready_message(
    description: &str,
    skipped: &[crate::protocol::SkippedFile],
    hunks: usize,
    files: usize,
) -> String {
    format!(
        "Suggestion ready: {description} ({hunks} hunk{} in {files} file{}){}",
        if hunks == 1 { "" } else { "s" },
        if files == 1 { "" } else { "s" },
        if skipped.is_empty() {
            String::new()
        } else {
            format!("; left out: {}", skipped_list(skipped))
        }
    )
}

/// Files the sandbox snapshot left out (over the size cap, FIFOs and other special files,
/// names that are not UTF-8) are not part of what the agent left as far as review goes: a base
/// file among them keeps its base version in the run tree — so it is never offered as a
/// deletion, and accepting everything cannot remove it — and every one of them (those `only`
/// lets through) is returned to be shown on the suggestion.
fn keep_skipped_as_base(
    back: &mut ReadBack,
    base: &FlatTree,
    only: &dyn Fn(&str) -> bool,
) -> Vec<crate::protocol::SkippedFile> {
    let mut out = Vec::new();
    for s in std::mem::take(&mut back.skipped) {
        if base.contains_key(&s.path) {
            back.changes.remove(&s.path);
        }
        if only(&s.path) {
            out.push(crate::protocol::SkippedFile {
                path: s.path,
                reason: s.reason,
            });
        }
    }
    out
}

/// What the agent created, changed or deleted at a sensitive path is refused: taken out of the
/// changes — the run tree keeps the base's entry, which for a path the base withheld is none,
/// so no hunk of it is ever offered — and returned (those `only` lets through) as skipped with
/// reason `sensitive`, never silently dropped.
fn refuse_sensitive(
    back: &mut ReadBack,
    policy: &crate::config::sensitive::Policy,
    only: &dyn Fn(&str) -> bool,
) -> Vec<crate::protocol::SkippedFile> {
    let refused: Vec<String> = back
        .changes
        .keys()
        .filter(|p| policy.is_sensitive(p))
        .cloned()
        .collect();
    refused
        .into_iter()
        .filter_map(|path| {
            back.changes.remove(&path);
            only(&path).then(|| crate::protocol::SkippedFile {
                path,
                reason: crate::config::sensitive::SENSITIVE.into(),
            })
        })
        .collect()
}

/// A publish keeps up to this many bytes of the files it read back in memory for its diffs;
/// past it, the rest are compressed as they are read, and the diffs read them back from the
/// store.
const FRESH_BYTES: usize = 16 << 20;

/// At most this many hunk descriptions are read from one publish.
const MAX_NOTES: usize = 256;
/// A hunk's description (every note that landed on it) is cut at this many characters.
pub const MAX_HUNK_DESCRIPTION: usize = 4000;
/// All hunk descriptions of one suggestion together: past this many bytes, the descriptions of
/// the remaining hunks are dropped (one description can land on every hunk of a file, so a
/// small publish must not turn into a huge suggestion).
pub const MAX_DESCRIPTIONS_TOTAL: usize = 64 * 1024;

/// Apply [`MAX_HUNK_DESCRIPTION`] and [`MAX_DESCRIPTIONS_TOTAL`], saying so in the text.
fn cap_descriptions(hunks: &mut [crate::model::suggestion::HunkRec]) {
    let mut total = 0usize;
    let mut dropped = 0usize;
    for h in hunks.iter_mut() {
        let Some(d) = h.description.as_mut() else {
            continue;
        };
        if d.chars().count() > MAX_HUNK_DESCRIPTION {
            let cut: String = d.chars().take(MAX_HUNK_DESCRIPTION).collect();
            *d = format!("{cut}… [hunkgate: description cut at {MAX_HUNK_DESCRIPTION} characters]");
        }
        if total + d.len() > MAX_DESCRIPTIONS_TOTAL {
            dropped += 1;
            *d = format!(
                "[hunkgate: description dropped: this suggestion's hunk descriptions exceed {} KiB]",
                MAX_DESCRIPTIONS_TOTAL / 1024
            );
        }
        total += d.len();
    }
    if dropped > 0 {
        tracing::info!(dropped, "hunk descriptions over the per-suggestion budget");
    }
}

/// Up to five skipped files, for a message.
fn skipped_list(skipped: &[crate::protocol::SkippedFile]) -> String {
    let mut names: Vec<String> = skipped
        .iter()
        .take(5)
        .map(|s| format!("{} ({})", s.path, s.reason))
        .collect();
    if skipped.len() > 5 {
        names.push(format!("and {} more", skipped.len() - 5));
    }
    names.join(", ")
}

impl Hub {
    /// The suggestions the agent of `run_id` may see: its run's own, and those of the other runs
    /// of its session.
    pub fn agent_suggestions(&self, run_id: &str) -> Result<Vec<SuggestionView>, AppError> {
        let st = self.lock()?;
        let run = st
            .runs
            .get(run_id)
            .ok_or_else(|| AppError::not_found(format!("no run {run_id:?}")))?;
        let runs: Vec<&RunRec> = match &run.session_id {
            Some(sess) => st
                .runs
                .values()
                .filter(|r| r.session_id.as_deref() == Some(sess))
                .collect(),
            None => vec![run],
        };
        let ids: std::collections::HashSet<&String> =
            runs.iter().flat_map(|r| r.suggestion_ids.iter()).collect();
        Ok(st
            .order
            .iter()
            .filter(|id| ids.contains(id))
            .filter_map(|id| st.suggestions.get(id))
            .map(|s| s.view())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::SkippedFile;

    fn skipped(n: usize) -> Vec<SkippedFile> {
        (0..n)
            .map(|i| SkippedFile {
                path: format!("f{i}"),
                reason: "too large".into(),
            })
            .collect()
    }

    #[test]
    fn file_filter_matches_only_the_globs_and_names_a_bad_one() {
        assert!(file_filter(&[]).unwrap().is_none());
        let f = file_filter(&["src/*.rs".into()]).unwrap().unwrap();
        assert!(f.is_match("src/a.rs"));
        assert!(!f.is_match("README.md"));
        let e = file_filter(&["a[".into()]).unwrap_err();
        assert_eq!(e.error_code(), ErrorCode::BadRequest);
        assert!(
            e.message().starts_with("--files \"a[\": "),
            "{}",
            e.message()
        );
    }

    #[test]
    fn notes_beyond_the_cap_are_ignored() {
        let note = HunkNote {
            file: "a".into(),
            line: None,
            description: "d".into(),
        };
        assert_eq!(capped_notes(&vec![note.clone(); 3]).len(), 3);
        assert_eq!(capped_notes(&vec![note; MAX_NOTES + 2]).len(), MAX_NOTES);
    }

    #[test]
    fn no_changes_names_what_was_left_out() {
        assert_eq!(no_changes_message(&[]), "The agent made no changes");
        assert_eq!(
            no_changes_message(&skipped(1)),
            "The agent made no changes that hunkgate can review; left out: f0 (too large)"
        );
    }

    #[test]
    fn ready_message_counts_hunks_and_files_and_lists_at_most_five_skipped() {
        assert_eq!(
            ready_message("fix", &[], 1, 1),
            "Suggestion ready: fix (1 hunk in 1 file)"
        );
        assert_eq!(
            ready_message("fix", &skipped(7), 3, 2),
            "Suggestion ready: fix (3 hunks in 2 files); left out: f0 (too large), \
             f1 (too large), f2 (too large), f3 (too large), f4 (too large), and 2 more"
        );
    }
}

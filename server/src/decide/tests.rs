//! Decisions, rollback and recovery against a real checkout and state directory in a temp dir,
//! without the network: a hub opened by `open_hub`, a suggestion built from two trees, and the
//! decision methods called directly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hunkgate_sandbox::store::{Entry, FlatTree, Mode};
use tokio_util::sync::CancellationToken;

use crate::api::server::{open_hub, Started};
use crate::config::ServeConfig;
use crate::decide::commit::Decision;
use crate::hub::Hub;
use crate::model::suggestion::{build_hunks, Blobs, Suggestion};
use crate::protocol::ErrorCode;
use crate::protocol::{FeedbackAction, HunkKind, HunkState, RollbackMode};
use crate::store::journal::{Journal, Record};

pub(super) struct Fixture {
    tmp: tempfile::TempDir,
    started: Option<Started>,
}

pub(super) fn numbered(n: usize, edit: &[(usize, &str)]) -> String {
    (1..=n)
        .map(|i| match edit.iter().find(|(at, _)| *at == i) {
            Some((_, text)) => format!("{text}\n"),
            None => format!("line {i}\n"),
        })
        .collect()
}

fn config(tmp: &Path) -> ServeConfig {
    ServeConfig {
        repo: tmp.join("repo"),
        host: "127.0.0.1".into(),
        port: 0,
        state_dir: tmp.join("state"),
        agent: None,
        acp: Default::default(),
        agent_timeout: Duration::from_secs(5),
        agent_env: Vec::new(),
        allowed_origins: Vec::new(),
        mirror_refs: false,
        vcs: hunkgate_sandbox::jj::Vcs::Git,
        isolation: crate::isolation::Isolation::None,
        provider: None,
        routing: Default::default(),
        limits: Default::default(),
        max_concurrent_runs: 1,
        read_limits: Default::default(),
        retention: Default::default(),
        review: Default::default(),
        sensitive: Default::default(),
        url_context: Default::default(),
        checks: crate::config::checkers::Checks::none(),
        accel: Default::default(),
    }
}

impl Fixture {
    /// A checkout holding `base` (path, text) and a hub over it.
    pub(super) fn new(base: &[(&str, String)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("repo")).unwrap();
        for (path, text) in base {
            std::fs::write(tmp.path().join("repo").join(path), text).unwrap();
        }
        let mut f = Fixture { tmp, started: None };
        f.reopen();
        f
    }

    /// Close the hub (as a crash would: nothing is flushed that was not already) and open it
    /// again over the same state directory.
    pub(super) fn reopen(&mut self) {
        self.started = None;
        let cfg = config(self.tmp.path());
        self.started = Some(open_hub(cfg, 0, CancellationToken::new()).unwrap());
    }

    pub(super) fn hub(&self) -> &Arc<Hub> {
        &self.started.as_ref().unwrap().hub
    }

    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join("repo").join(rel)
    }

    pub(super) fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    fn tree(&self, files: &[(&str, String)]) -> FlatTree {
        files
            .iter()
            .map(|(p, t)| {
                let oid = self.hub().store().write_blob(t.as_bytes()).unwrap();
                (
                    p.to_string(),
                    Entry {
                        mode: Mode::File,
                        oid,
                    },
                )
            })
            .collect()
    }

    /// Publish the change from `base` to `run` as suggestion `id`.
    pub(super) fn suggest(
        &self,
        id: &str,
        base: &[(&str, String)],
        run: &[(&str, String)],
    ) -> Suggestion {
        self.suggest_trees(id, self.tree(base), self.tree(run))
    }

    /// [`Fixture::suggest`] of two trees made by the caller (with modes of its choosing).
    fn suggest_trees(&self, id: &str, b: FlatTree, r: FlatTree) -> Suggestion {
        self.suggest_marking(id, b, r, None)
    }

    /// [`Fixture::suggest_trees`], its destructive hunks marked as a publish marks them when
    /// `max_deleted_lines` is given.
    fn suggest_marking(
        &self,
        id: &str,
        b: FlatTree,
        r: FlatTree,
        max_deleted_lines: Option<usize>,
    ) -> Suggestion {
        let store = self.hub().store();
        let bc = store
            .commit(store.write_tree(&b).unwrap(), &[], "base")
            .unwrap();
        let rc = store
            .commit(store.write_tree(&r).unwrap(), &[bc], "run")
            .unwrap();
        let changes = hunkgate_sandbox::store::changes_between(&b, &r);
        let mut hunks = build_hunks(
            Blobs::stored(store),
            id,
            &b,
            &changes,
            &|_| true,
            crate::config::Review::default().hunk_limits,
        )
        .unwrap();
        if let Some(max) = max_deleted_lines {
            crate::model::suggestion::mark_destructive(&mut hunks, max);
        }
        let s = Suggestion {
            id: id.into(),
            run_id: format!("run-{id}"),
            description: "test".into(),
            base_commit: bc.to_string(),
            run_commit: rc.to_string(),
            change_id: None,
            created_at: crate::model::now(),
            agent: Some("test".into()),
            prompt: Some("do it".into()),
            hunks,
            closed: None,
            reviewed_commit: None,
            skipped: Vec::new(),
            checks: None,
            diagnostics: Vec::new(),
        };
        self.hub().add_suggestion(s.clone()).unwrap();
        s
    }

    pub(super) fn state(&self, sid: &str, i: usize) -> HunkState {
        self.hub().lock().unwrap().suggestions[sid].hunks[i].state
    }

    pub(super) fn journal_len(&self) -> u64 {
        std::fs::metadata(self.tmp.path().join("state/state.jsonl"))
            .unwrap()
            .len()
    }

    /// The decision records in the journal, in order.
    fn decisions(&self) -> Vec<crate::model::decision::DecisionRec> {
        Journal::read(&self.tmp.path().join("state/state.jsonl"))
            .unwrap()
            .into_iter()
            .filter_map(|r| match r {
                Record::Decision(d) => Some(*d),
                _ => None,
            })
            .collect()
    }

    pub(super) fn feedback(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.tmp.path().join("state/feedback.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

pub(super) type Files = Vec<(&'static str, String)>;

fn two_hunks() -> (Files, Files) {
    (
        vec![("a.txt", numbered(40, &[]))],
        vec![("a.txt", numbered(40, &[(5, "five"), (30, "thirty")]))],
    )
}

#[test]
fn accept_writes_the_hunk_and_journals_only_the_decision() {
    let (base, run) = two_hunks();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    assert_eq!(s.hunks.len(), 2);
    let before = f.journal_len();
    let r = f
        .hub()
        .decide(
            "s1",
            &s.hunks[0].id,
            FeedbackAction::Accept,
            None,
            Some("ok"),
        )
        .unwrap();
    assert!(r.applied);
    assert_eq!(r.remaining_hunks, 1);
    assert_eq!(f.read("a.txt"), numbered(40, &[(5, "five")]));
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    let grown = f.journal_len() - before;
    let bound = 1024 + 2 * s.hunks[0].diff_text().len() as u64;
    assert!(grown <= bound, "journal grew {grown} bytes, bound {bound}");
    let fb = f.feedback();
    assert_eq!(fb.len(), 1);
    assert_eq!(fb[0]["outcome"], "applied");
    assert_eq!(fb[0]["comment"], "ok");
    assert_eq!(fb[0]["prompt"], "do it");
    assert!(fb[0]["seq"].as_u64().unwrap() > 0);
}

#[test]
fn modify_applies_the_users_version_and_undo_takes_it_back() {
    let (base, run) = two_hunks();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let mine = s.hunks[0].diff_text().replace("+five", "+FIVE");
    f.hub()
        .decide(
            "s1",
            &s.hunks[0].id,
            FeedbackAction::Modify,
            Some(&mine),
            None,
        )
        .unwrap();
    assert_eq!(f.read("a.txt"), numbered(40, &[(5, "FIVE")]));
    assert_eq!(f.state("s1", 0), HunkState::Modified);
    let view = f.hub().get("s1").unwrap();
    assert!(view.hunks[0]
        .applied_diff
        .as_deref()
        .unwrap()
        .contains("+FIVE"));
    f.hub()
        .decide("s1", &s.hunks[0].id, FeedbackAction::Undo, None, None)
        .unwrap();
    assert_eq!(f.read("a.txt"), numbered(40, &[]));
    assert_eq!(f.state("s1", 0), HunkState::Pending);
    let outcomes: Vec<String> = f
        .feedback()
        .iter()
        .map(|l| l["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["modified", "undone"]);
}

#[test]
fn a_stale_base_is_a_conflict_that_changes_nothing() {
    let (base, run) = two_hunks();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let mine = numbered(40, &[(4, "the user's own line four")]);
    std::fs::write(f.path("a.txt"), &mine).unwrap();
    let err = f
        .hub()
        .decide("s1", &s.hunks[0].id, FeedbackAction::Accept, None, None)
        .unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::Conflict, "{err:?}");
    assert_eq!(f.read("a.txt"), mine, "the checkout is untouched");
    assert_eq!(f.state("s1", 0), HunkState::Conflict);
    // Positive control: the other hunk's context is intact and it applies.
    f.hub()
        .decide("s1", &s.hunks[1].id, FeedbackAction::Accept, None, None)
        .unwrap();
    assert!(f.read("a.txt").contains("thirty\n"));
    assert!(f.read("a.txt").contains("the user's own line four\n"));
}

#[test]
fn scoped_rollback_takes_back_only_the_chosen_hunk() {
    let (base, run) = two_hunks();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    for h in &s.hunks {
        f.hub()
            .decide("s1", &h.id, FeedbackAction::Accept, None, None)
            .unwrap();
    }
    f.hub()
        .rollback(
            "s1",
            RollbackMode::ScopedSelected,
            std::slice::from_ref(&s.hunks[0].id),
            false,
        )
        .unwrap();
    assert_eq!(f.read("a.txt"), numbered(40, &[(30, "thirty")]));
    assert_eq!(f.state("s1", 0), HunkState::Rejected);
    assert_eq!(f.state("s1", 1), HunkState::Accepted);
    let last = f.feedback().pop().unwrap();
    assert_eq!(last["action"], "rollback");
    assert!(
        last["seq"].as_u64().unwrap() > 0,
        "rollback lines carry seq"
    );
}

#[test]
fn hard_rollback_restores_the_base_and_rejects_later_hunks_on_the_file() {
    let (base, run) = two_hunks();
    let f = Fixture::new(&base);
    let s1 = f.suggest("s1", &base, &run);
    f.hub()
        .decide("s1", &s1.hunks[0].id, FeedbackAction::Accept, None, None)
        .unwrap();
    let now = vec![("a.txt", numbered(40, &[(5, "five")]))];
    let later = vec![("a.txt", numbered(40, &[(5, "five"), (20, "twenty")]))];
    let s2 = f.suggest("s2", &now, &later);
    f.hub()
        .decide("s2", &s2.hunks[0].id, FeedbackAction::Accept, None, None)
        .unwrap();
    assert_eq!(
        f.read("a.txt"),
        numbered(40, &[(5, "five"), (20, "twenty")])
    );
    let err = f
        .hub()
        .rollback("s1", RollbackMode::HardAll, &[], false)
        .unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::BadRequest, "needs confirm");
    f.hub()
        .rollback("s1", RollbackMode::HardAll, &[], true)
        .unwrap();
    assert_eq!(f.read("a.txt"), numbered(40, &[]));
    assert_eq!(f.state("s1", 0), HunkState::Rejected);
    assert_eq!(f.state("s2", 0), HunkState::Rejected);
    let rolled: Vec<u64> = f
        .feedback()
        .iter()
        .filter(|l| l["action"] == "rollback")
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(rolled.len(), 2);
    assert!(rolled[0] > 0 && rolled[1] == rolled[0] + 1, "{rolled:?}");
}

/// Prepare a decision as `commit` would, and stop where a crash would: after the journal
/// record, optionally after the file writes, never reaching the feedback log or `commit`.
fn prepare_only(f: &Fixture, sid: &str, i: usize, write_files: bool) {
    let hub = f.hub();
    let st = hub.lock().unwrap();
    let s = &st.suggestions[sid];
    let root = hub.checkout().unwrap();
    let plan = crate::decide::apply::plan_forward(
        &root,
        hub.store(),
        &s.hunks[i],
        s.hunks[i].patch.as_ref(),
        0,
        false,
    )
    .unwrap();
    let mut d = Decision::new();
    let mut change =
        crate::model::decision::HunkChange::keep(sid, i, &s.hunks[i], HunkState::Accepted);
    change.applied = plan.applied.clone().map(Box::new);
    let line = crate::model::decision::LineRec::new(s, &s.hunks[i], "accept", "applied");
    d.ops(plan.ops).change(change).line(
        line,
        crate::protocol::Event::Status {
            seq: 0,
            suggestion_id: None,
            run_id: None,
            status: "x".into(),
            message: "x".into(),
        },
    );
    hub.journal_append(&Record::Decision(Box::new(d.record().clone())))
        .unwrap();
    if write_files {
        crate::decide::execute::execute(&root, hub.store(), d.file_ops()).unwrap();
    }
}

#[test]
fn a_prepare_whose_files_were_written_is_finished_on_restart_and_logged_once() {
    let (base, run) = two_hunks();
    let mut f = Fixture::new(&base);
    f.suggest("s1", &base, &run);
    prepare_only(&f, "s1", 0, true);
    assert!(f.feedback().is_empty());
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    assert_eq!(f.read("a.txt"), numbered(40, &[(5, "five")]));
    let fb = f.feedback();
    assert_eq!(fb.len(), 1, "{fb:?}");
    assert_eq!(fb[0]["outcome"], "applied");
    f.reopen();
    assert_eq!(f.feedback().len(), 1, "never logged twice");
    assert_eq!(
        f.read("a.txt"),
        numbered(40, &[(5, "five")]),
        "applied once"
    );
}

#[test]
fn a_prepare_that_wrote_nothing_is_dropped_on_restart() {
    let (base, run) = two_hunks();
    let mut f = Fixture::new(&base);
    f.suggest("s1", &base, &run);
    prepare_only(&f, "s1", 0, false);
    // What a kill -9 between creating the temporary file and renaming it leaves (its writer,
    // a finished process, is gone), beside a file of the user's with a look-alike name.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let left = f.path(&format!(".hg-{dead}-0-1.tmp"));
    std::fs::write(&left, "half").unwrap();
    std::fs::write(f.path(".hg-mine.tmp"), "mine").unwrap();
    f.reopen();
    assert!(
        !left.exists(),
        "the interrupted write's temporary file is gone"
    );
    assert_eq!(
        std::fs::read_to_string(f.path(".hg-mine.tmp")).unwrap(),
        "mine"
    );
    assert_eq!(f.state("s1", 0), HunkState::Pending);
    assert_eq!(f.read("a.txt"), numbered(40, &[]));
    assert!(f.feedback().is_empty());
}

#[test]
fn the_journal_is_compacted_online_and_replays_to_the_same_state() {
    let base: Vec<(&str, String)> = vec![("a.txt", numbered(400, &[]))];
    let edits: Vec<(usize, String)> = (0..40).map(|k| (5 + k * 10, format!("edit {k}"))).collect();
    let edit_refs: Vec<(usize, &str)> = edits.iter().map(|(i, t)| (*i, t.as_str())).collect();
    let run = vec![("a.txt", numbered(400, &edit_refs))];
    let mut f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    assert_eq!(s.hunks.len(), 40);
    let published = f.journal_len();
    // Compact as soon as the journal passes its published size: every few decisions.
    f.hub().set_journal_compact_min(published + 2048);
    for h in &s.hunks {
        f.hub()
            .decide("s1", &h.id, FeedbackAction::Accept, None, None)
            .unwrap();
    }
    let records = Journal::read(&f.tmp.path().join("state/state.jsonl")).unwrap();
    let decisions = records
        .iter()
        .filter(|r| matches!(r, Record::Decision(_)))
        .count();
    assert!(
        decisions < 40,
        "compacted: {decisions} decision records left"
    );
    f.reopen();
    for i in 0..40 {
        assert_eq!(f.state("s1", i), HunkState::Accepted, "hunk {i}");
    }
    assert_eq!(f.read("a.txt"), numbered(400, &edit_refs));
    assert_eq!(f.feedback().len(), 40);
}

#[test]
fn accept_all_writes_each_file_once_and_lands_every_hunk() {
    let base = vec![("a.txt", numbered(60, &[])), ("b.txt", numbered(60, &[]))];
    let run = vec![
        (
            "a.txt",
            numbered(60, &[(3, "A3"), (20, "A20"), (50, "A50")]),
        ),
        ("b.txt", numbered(60, &[(10, "B10"), (40, "B40")])),
    ];
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    assert_eq!(s.hunks.len(), 5);
    let out = f
        .hub()
        .decide_all("s1", crate::protocol::BulkAction::Accept, None, None, false)
        .unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 5, "{out}");
    assert_eq!(out["remaining_hunks"], 0);
    assert_eq!(f.read("a.txt"), run[0].1);
    assert_eq!(f.read("b.txt"), run[1].1);
    let ops: Vec<usize> = f.decisions().iter().map(|d| d.ops.len()).collect();
    assert_eq!(ops, vec![2], "one decision, one write per file");
    let fb = f.feedback();
    assert_eq!(fb.len(), 5);
    let seqs: Vec<u64> = fb.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(fb.iter().all(|l| l["decision_id"] == fb[0]["decision_id"]));
}

/// Twenty hunks of one file make twenty versions of it as a bulk accept plans them hunk by
/// hunk; the store gets the two its one write names (the file before, for undoing, and after),
/// never the eighteen in between. Undoing one hunk afterwards still works from what was kept.
#[test]
fn accept_all_keeps_only_the_versions_its_write_names() {
    use crate::model::fileop::{sha, FileOp, Fp, Op};
    use hunkgate_sandbox::store::blob_id;
    let edits: Vec<(usize, String)> = (0..20).map(|i| (5 + 10 * i, format!("edit {i}"))).collect();
    let refs = |n: usize| -> Vec<(usize, &str)> {
        edits[..n].iter().map(|(l, t)| (*l, t.as_str())).collect()
    };
    let base: Files = vec![("a.txt", numbered(200, &[]))];
    let run: Files = vec![("a.txt", numbered(200, &refs(20)))];
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    assert_eq!(s.hunks.len(), 20);
    let store = f.hub().store();
    // The control: each version is a distinct content, and none is in the store yet but the
    // base and the agent's (the suggestion's own sides).
    let versions: Vec<String> = (0..=20).map(|n| numbered(200, &refs(n))).collect();
    let ids: Vec<_> = versions.iter().map(|v| blob_id(v.as_bytes())).collect();
    assert_eq!(
        ids.iter().collect::<std::collections::HashSet<_>>().len(),
        21
    );
    for (n, id) in ids.iter().enumerate().skip(1).take(19) {
        assert!(!store.has_object(*id), "version {n} before the decision");
    }
    let out = f
        .hub()
        .decide_all("s1", crate::protocol::BulkAction::Accept, None, None, false)
        .unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 20, "{out}");
    assert_eq!(f.read("a.txt"), versions[20]);
    assert!(store.has_object(ids[0]) && store.has_object(ids[20]));
    for (n, id) in ids.iter().enumerate().skip(1).take(19) {
        assert!(
            !store.has_object(*id),
            "version {n} was written to the store"
        );
    }
    // The decision's one write names both kept versions, with their fingerprints.
    let decisions = f.decisions();
    let ops: Vec<&FileOp> = decisions.iter().flat_map(|d| &d.ops).collect();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].pre_oid.as_deref(), Some(ids[0].to_string().as_str()));
    assert!(
        matches!(&ops[0].op, Op::Write { oid, .. } if oid.as_str() == ids[20].to_string().as_str())
    );
    assert_eq!(
        ops[0].pre,
        Fp::File {
            sha256: sha(versions[0].as_bytes()),
            exec: false
        }
    );
    assert_eq!(
        ops[0].post,
        Fp::File {
            sha256: sha(versions[20].as_bytes()),
            exec: false
        }
    );
    f.hub()
        .decide("s1", &s.hunks[7].id, FeedbackAction::Undo, None, None)
        .unwrap();
    let mut rest = refs(20);
    rest.remove(7);
    assert_eq!(f.read("a.txt"), numbered(200, &rest));
}

/// A file whose lines and executable bit both change: accepting all of it is one write that
/// leaves the run's lines with the bit set, and each hunk can still be undone on its own.
#[test]
fn accept_all_of_a_file_whose_lines_and_mode_change_writes_it_once() {
    use std::os::unix::fs::PermissionsExt;
    let base: Files = vec![("a.sh", numbered(60, &[]))];
    let run: Files = vec![("a.sh", numbered(60, &[(10, "ten"), (40, "forty")]))];
    let f = Fixture::new(&base);
    let mut r = f.tree(&run);
    r.get_mut("a.sh").unwrap().mode = Mode::Executable;
    let s = f.suggest_trees("s1", f.tree(&base), r);
    let kinds: Vec<HunkKind> = s.hunks.iter().map(|h| h.kind).collect();
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    assert!(kinds.contains(&HunkKind::Mode), "{kinds:?}");
    let out = f
        .hub()
        .decide_all("s1", crate::protocol::BulkAction::Accept, None, None, false)
        .unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 3, "{out}");
    assert_eq!(f.read("a.sh"), run[0].1);
    let mode = || {
        std::fs::metadata(f.path("a.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(), 0o755);
    let ops: Vec<usize> = f.decisions().iter().map(|d| d.ops.len()).collect();
    assert_eq!(ops, vec![1], "one write of the file, its bit included");
    let at = |k: HunkKind| s.hunks.iter().position(|h| h.kind == k).unwrap();
    f.hub()
        .decide(
            "s1",
            &s.hunks[at(HunkKind::Mode)].id,
            FeedbackAction::Undo,
            None,
            None,
        )
        .unwrap();
    assert_eq!(mode(), 0o644);
    assert_eq!(f.read("a.sh"), run[0].1);
    f.hub()
        .decide(
            "s1",
            &s.hunks[at(HunkKind::Modify)].id,
            FeedbackAction::Undo,
            None,
            None,
        )
        .unwrap();
    assert_eq!(f.read("a.sh"), numbered(60, &[(40, "forty")]));
}

#[test]
fn accept_all_records_a_conflicting_hunk_and_applies_the_rest() {
    let base = vec![("a.txt", numbered(60, &[]))];
    let run = vec![(
        "a.txt",
        numbered(60, &[(3, "A3"), (30, "A30"), (50, "A50")]),
    )];
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let mine = numbered(60, &[(29, "the user's 29")]);
    std::fs::write(f.path("a.txt"), &mine).unwrap();
    let out = f
        .hub()
        .decide_all("s1", crate::protocol::BulkAction::Accept, None, None, false)
        .unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["failed"][0]["hunk_id"], s.hunks[1].id.as_str());
    assert_eq!(
        f.read("a.txt"),
        numbered(60, &[(3, "A3"), (29, "the user's 29"), (50, "A50")])
    );
    assert_eq!(f.state("s1", 1), HunkState::Conflict);
    let outcomes: Vec<String> = f
        .feedback()
        .iter()
        .map(|l| l["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["applied", "conflict", "applied"]);
}

#[test]
fn a_decision_whose_commit_a_crash_lost_stands_when_its_lines_are_logged() {
    let (base, run) = two_hunks();
    let mut f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    f.hub()
        .decide("s1", &s.hunks[0].id, FeedbackAction::Accept, None, None)
        .unwrap();
    // The `commit` is the journal's last record, written after the fsynced feedback line and
    // not fsynced itself: cut it off, as a crash before the next append could.
    let journal = f.tmp.path().join("state/state.jsonl");
    let bytes = std::fs::read(&journal).unwrap();
    let last = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let tail: serde_json::Value = serde_json::from_slice(&bytes[last..]).unwrap();
    assert_eq!(tail["t"], "commit", "{tail}");
    std::fs::write(&journal, &bytes[..last]).unwrap();
    // And the user edits the file before the hub starts again: the decision still stands.
    let edited = numbered(40, &[(5, "five"), (20, "mine")]);
    std::fs::write(f.path("a.txt"), &edited).unwrap();
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    assert_eq!(f.state("s1", 1), HunkState::Pending);
    assert_eq!(f.read("a.txt"), edited, "nothing written again");
    assert_eq!(f.feedback().len(), 1, "logged once");

    // Control: a prepare whose line is not logged is judged by the files (here: nothing was
    // written, so it is dropped), and the remaining hunk still applies once.
    prepare_only(&f, "s1", 1, false);
    f.reopen();
    assert_eq!(f.state("s1", 1), HunkState::Pending);
    let r = f
        .hub()
        .decide("s1", &s.hunks[1].id, FeedbackAction::Accept, None, None)
        .unwrap();
    assert!(r.applied);
    assert_eq!(
        f.read("a.txt"),
        numbered(40, &[(5, "five"), (20, "mine"), (30, "thirty")])
    );
    assert_eq!(f.feedback().len(), 2);
}

/// `suggestion.ready` is encoded with the suggestion, before it is journaled; what a client
/// gets is byte for byte what encoding the event itself makes — for a small suggestion, and
/// for one big enough that its view is encoded on a thread of its own while it is journaled.
#[test]
fn a_ready_event_encoded_in_advance_is_what_encoding_the_event_makes() {
    for hunks in [2, 300] {
        let edits: Vec<(usize, String)> = (0..hunks)
            .map(|i| (i * 10 + 5, format!("edit {i}")))
            .collect();
        let edits: Vec<(usize, &str)> = edits.iter().map(|(at, t)| (*at, t.as_str())).collect();
        let lines = hunks * 10 + 10;
        let base = vec![("a.txt", numbered(lines, &[]))];
        let run = vec![("a.txt", numbered(lines, &edits))];
        let f = Fixture::new(&base);
        let mut events = f.hub().bus().subscribe();
        let s = f.suggest("s1", &base, &run);
        assert_eq!(s.hunks.len(), hunks);
        let sent = loop {
            let e = events
                .try_recv()
                .expect("the suggestion's events were sent");
            if e.json.starts_with(r#"{"type":"suggestion.ready""#) {
                break e;
            }
        };
        let view = f.hub().lock().unwrap().suggestions["s1"].view();
        assert_eq!(view.hunks.len(), hunks);
        let want = serde_json::to_string(&crate::protocol::Event::Ready {
            seq: sent.seq,
            suggestion: Box::new(view),
        })
        .unwrap();
        assert_eq!(*sent.json, *want, "{hunks} hunks");
        // What recording returns (an agent's publish replies with it) is the view too.
        let mut again = f.hub().lock().unwrap().suggestions["s1"].clone();
        again.id = "s2".into();
        let returned = f.hub().add_suggestion(again).unwrap();
        assert_eq!(returned, f.hub().get("s2").unwrap(), "{hunks} hunks");
        assert_eq!(returned.hunks.len(), hunks);
    }
}

/// A hunk is found by its id with a binary search when the hunks are in a publish's order, and
/// one by one when they are not; never a hunk with another id.
#[test]
fn hunks_are_found_by_id_in_a_publish_order_and_in_any_other() {
    use crate::decide::review::{find_hunk, seek_hunk};
    let base: Files = vec![
        ("a.txt", numbered(40, &[])),
        ("b:c.txt", numbered(40, &[])),
        ("d.txt", numbered(40, &[])),
    ];
    let run: Files = base
        .iter()
        .map(|(p, _)| (*p, numbered(40, &[(3, "three"), (20, "twenty"), (38, "x")])))
        .collect();
    let f = Fixture::new(&base);
    let mut s = f.suggest("s1", &base, &run);
    assert_eq!(s.hunks.len(), 9);
    for (i, h) in s.hunks.iter().enumerate() {
        assert_eq!(seek_hunk(&s, &h.id), Some(i), "{}", h.id);
        assert_eq!(find_hunk(&s, &h.id).unwrap(), i);
    }
    // Ids that are not there: another suggestion's, an index past the file's last, a path
    // that sorts between two files.
    for missing in ["s2:a.txt:0", "s1:a.txt:3", "s1:b.txt:0", "s1:a.txt", "s1:"] {
        assert_eq!(seek_hunk(&s, missing), None, "{missing}");
        assert!(find_hunk(&s, missing).is_err(), "{missing}");
    }
    // Out of order: the search may miss, the lookup does not, and neither answers another hunk.
    s.hunks.reverse();
    for (i, h) in s.hunks.iter().enumerate() {
        assert!(seek_hunk(&s, &h.id).is_none_or(|at| at == i), "{}", h.id);
        assert_eq!(find_hunk(&s, &h.id).unwrap(), i);
    }
    // The other ways to name a hunk still work: `file:index` and the position.
    assert_eq!(find_hunk(&s, "d.txt:2").unwrap(), 0);
    assert_eq!(find_hunk(&s, "4").unwrap(), 4);
}

/// In a file of identical lines a hunk's lines fit anywhere: only the shift of the hunks
/// applied above it puts a hunk where the reviewer saw it, whichever order they are taken in.
#[test]
fn a_hunk_lands_where_it_was_shown_after_the_hunks_above_it_moved_its_lines() {
    let same = |edit: &[(usize, &str)]| -> String {
        (1..=40)
            .map(|i| match edit.iter().find(|(at, _)| *at == i) {
                Some((_, text)) => format!("{text}\n"),
                None => "same\n".to_string(),
            })
            .collect()
    };
    let base: Files = vec![("a.txt", same(&[]))];
    let run: Files = vec![("a.txt", same(&[(5, "one\ntwo\nthree"), (30, "thirty")]))];
    for order in [[0, 1], [1, 0]] {
        let f = Fixture::new(&base);
        let s = f.suggest("s1", &base, &run);
        assert_eq!(s.hunks.len(), 2);
        for i in order {
            let r = f
                .hub()
                .decide("s1", &s.hunks[i].id, FeedbackAction::Accept, None, None);
            assert!(r.unwrap().applied, "hunk {i}");
        }
        assert_eq!(f.read("a.txt"), run[0].1, "order {order:?}");
        // And back: each undone where it is now.
        for i in order {
            f.hub()
                .decide("s1", &s.hunks[i].id, FeedbackAction::Undo, None, None)
                .unwrap();
        }
        assert_eq!(f.read("a.txt"), base[0].1, "undone in order {order:?}");
    }
}

/// The run replaced the symlink `ulink` with a directory holding `ulink/victim.txt`. Accepting
/// the new file alone is refused (it would be written through the symlink); accepting all of
/// the suggestion removes the symlink first, then writes the file into a real directory, and
/// the target of the old link is never touched.
#[test]
fn accept_all_of_a_symlink_that_became_a_directory_removes_the_link_first() {
    let base: Files = vec![("target.txt", "the link's target\n".into())];
    let f = Fixture::new(&base);
    std::os::unix::fs::symlink("target.txt", f.path("ulink")).unwrap();
    let store = f.hub().store();
    let mut b = f.tree(&base);
    b.insert(
        "ulink".into(),
        Entry {
            mode: Mode::Symlink,
            oid: store.write_blob(b"target.txt").unwrap(),
        },
    );
    let r = f.tree(&[
        ("target.txt", "the link's target\n".into()),
        ("ulink/victim.txt", "planted\n".into()),
    ]);
    let s = f.suggest_trees("s1", b, r);
    let file_hunk = s
        .hunks
        .iter()
        .find(|h| h.file == "ulink/victim.txt")
        .unwrap();
    let alone = f
        .hub()
        .decide("s1", &file_hunk.id, FeedbackAction::Accept, None, None);
    assert!(alone.is_err(), "the file alone goes through the symlink");
    assert!(f.path("ulink").is_symlink(), "the refusal changed nothing");
    // The refused hunk is left in conflict; a new suggestion of the same change is accepted whole.
    let s = f.suggest_trees(
        "s2",
        {
            let mut b = f.tree(&base);
            b.insert(
                "ulink".into(),
                Entry {
                    mode: Mode::Symlink,
                    oid: store.write_blob(b"target.txt").unwrap(),
                },
            );
            b
        },
        f.tree(&[
            ("target.txt", "the link's target\n".into()),
            ("ulink/victim.txt", "planted\n".into()),
        ]),
    );
    let out = f
        .hub()
        .decide_all("s2", crate::protocol::BulkAction::Accept, None, None, false)
        .unwrap();
    assert_eq!(out["failed"], serde_json::json!([]), "{out}");
    assert_eq!(
        out["decided"].as_array().unwrap().len(),
        s.hunks.len(),
        "{out}"
    );
    assert!(!f.path("ulink").is_symlink());
    assert!(f.path("ulink").is_dir());
    assert_eq!(f.read("ulink/victim.txt"), "planted\n");
    assert_eq!(f.read("target.txt"), "the link's target\n");
}

/// A stale hunk's merge, as an accept that found it stale left it on the hunk.
fn stale_merge_of(f: &Fixture, sid: &str, i: usize) -> crate::protocol::HunkMerge {
    let hunk_id = f.hub().lock().unwrap().suggestions[sid].hunks[i].id.clone();
    let e = f
        .hub()
        .decide(sid, &hunk_id, FeedbackAction::Accept, None, None)
        .unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::Conflict, "{e}");
    f.hub().lock().unwrap().suggestions[sid].hunks[i]
        .merge
        .clone()
        .expect("the stale hunk carries its merge")
}

#[test]
fn a_merge_shown_and_landed_survives_restarts_and_lands_once() {
    let (base, run) = two_hunks();
    let mut f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    // The user edits a line of hunk 0's context (line 3; the agent changed line 5).
    let yours = numbered(40, &[(3, "line 3, mine")]);
    std::fs::write(f.path("a.txt"), &yours).unwrap();
    let merge = stale_merge_of(&f, "s1", 0);
    assert_eq!(merge.outcome, crate::protocol::MergeOutcome::Clean);
    assert_eq!(f.read("a.txt"), yours, "nothing written before it is seen");
    f.reopen();
    let kept = f.hub().lock().unwrap().suggestions["s1"].hunks[0]
        .merge
        .clone();
    assert_eq!(
        kept,
        Some(merge.clone()),
        "the merge shown is back after a restart"
    );

    let hid = s.hunks[0].id.as_str();
    f.hub()
        .decide_merged("s1", hid, &merge.merged_against, None)
        .unwrap();
    let merged = numbered(40, &[(3, "line 3, mine"), (5, "five")]);
    assert_eq!(f.read("a.txt"), merged);
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    assert_eq!(f.read("a.txt"), merged, "applied once");
    let outcomes: Vec<_> = f.feedback().iter().map(|l| l["outcome"].clone()).collect();
    assert_eq!(outcomes, ["conflict", "merged"]);
    // Undo takes out the merged change and leaves the user's edit.
    f.hub()
        .decide("s1", hid, FeedbackAction::Undo, None, None)
        .unwrap();
    assert_eq!(f.read("a.txt"), yours);
}

#[test]
fn a_merged_decision_cut_off_after_its_write_is_finished_on_restart_once() {
    let (base, run) = two_hunks();
    let mut f = Fixture::new(&base);
    f.suggest("s1", &base, &run);
    let yours = numbered(40, &[(3, "line 3, mine")]);
    std::fs::write(f.path("a.txt"), &yours).unwrap();
    let merge = stale_merge_of(&f, "s1", 0);
    {
        // What a kill -9 after the checkout write leaves: the prepare and the file, no line.
        let hub = f.hub();
        let st = hub.lock().unwrap();
        let s = &st.suggestions["s1"];
        let planned = match hub.plan_merged(s, 0, &merge.merged_against).unwrap() {
            crate::decide::review::Step::Planned(state, plan, act) => (state, plan, act),
            crate::decide::review::Step::Conflict(m) => panic!("{m}"),
        };
        let ask = crate::decide::review::Ask {
            action: FeedbackAction::Accept,
            modified_diff: None,
            merged_against: Some(&merge.merged_against),
            comment: None,
            lines: None,
        };
        let d = crate::decide::steps::decision_for(s, 0, Decision::new(), &ask, &None, planned);
        hub.journal_append(&Record::Decision(Box::new(d.record().clone())))
            .unwrap();
        let root = hub.checkout().unwrap();
        crate::decide::execute::execute(&root, hub.store(), d.file_ops()).unwrap();
    }
    let merged = numbered(40, &[(3, "line 3, mine"), (5, "five")]);
    assert_eq!(f.read("a.txt"), merged);
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    let fb = f.feedback();
    assert_eq!(fb.last().unwrap()["outcome"], "merged", "{fb:?}");
    f.reopen();
    assert_eq!(f.feedback().len(), fb.len(), "never logged twice");
    assert_eq!(f.read("a.txt"), merged, "applied once");
}

/// An accept-all leaves the destructive hunks (here a deletion, and an edit deleting more
/// lines than the threshold) pending and says so; confirmed, they land. A deleted file comes
/// back with `restore`, after a restart too, and `restore` never overwrites a file that is
/// there again.
#[test]
fn accept_all_skips_destructive_hunks_and_restore_brings_back_a_deletion() {
    let base = vec![
        ("a.txt", numbered(10, &[])),
        ("big.txt", numbered(10, &[])),
        ("gone.txt", "bye\n".to_string()),
    ];
    let run = vec![
        ("a.txt", numbered(10, &[(3, "A3")])),
        ("big.txt", "line 1\n".to_string()),
    ];
    let mut f = Fixture::new(&base);
    let s = f.suggest_marking("s1", f.tree(&base), f.tree(&run), Some(5));
    let marked: Vec<(&str, bool)> = s
        .hunks
        .iter()
        .map(|h| (h.file.as_str(), h.destructive))
        .collect();
    assert_eq!(
        marked,
        vec![("a.txt", false), ("big.txt", true), ("gone.txt", true)]
    );
    let accept = crate::protocol::BulkAction::Accept;
    let out = f.hub().decide_all("s1", accept, None, None, false).unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 1, "{out}");
    let skipped: Vec<&str> = out["skipped_destructive"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["hunk_id"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, vec!["s1:big.txt:0", "s1:gone.txt:0"]);
    assert_eq!(
        out["message"],
        "2 destructive hunks left pending (deletes 9 lines of big.txt; deletes gone.txt): accept them by name, or accept all again with confirm (hunkgate accept --include-destructive)"
    );
    assert_eq!(f.read("a.txt"), run[0].1);
    assert_eq!(f.read("gone.txt"), "bye\n");
    assert_eq!(f.read("big.txt"), base[1].1);
    // Nothing to restore while nothing was deleted.
    let err = f.hub().restore("gone.txt").unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::NotFound, "{err}");

    let out = f.hub().decide_all("s1", accept, None, None, true).unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 2, "{out}");
    assert!(out.get("skipped_destructive").is_none(), "{out}");
    assert!(!f.path("gone.txt").exists());
    assert_eq!(f.read("big.txt"), "line 1\n");

    f.reopen();
    let done = f.hub().restore("gone.txt").unwrap();
    assert_eq!(done["hunk_id"], "s1:gone.txt:0");
    assert_eq!(f.read("gone.txt"), "bye\n");
    let restores: Vec<serde_json::Value> = f
        .feedback()
        .into_iter()
        .filter(|l| l["action"] == "restore")
        .collect();
    assert_eq!(restores.len(), 1);
    assert_eq!(restores[0]["outcome"], "restored");
    // There again, edited: restore refuses and changes nothing.
    std::fs::write(f.path("gone.txt"), "mine\n").unwrap();
    let err = f.hub().restore("gone.txt").unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::Conflict, "{err}");
    assert_eq!(f.read("gone.txt"), "mine\n");
}

/// Journal a scoped rollback of hunks `hs` as `commit` would, and stop where a kill -9 would:
/// after the first `written` of its file operations, before the feedback log and `commit`.
fn prepare_rollback_cut(f: &Fixture, sid: &str, hs: &[usize], written: usize) {
    let hub = f.hub();
    let st = hub.lock().unwrap();
    let s = &st.suggestions[sid];
    let root = hub.checkout().unwrap();
    let mut d = Decision::new();
    let mut ops = Vec::new();
    for &i in hs {
        let rec = &s.hunks[i];
        ops.extend(
            crate::decide::apply::plan_reverse(&root, hub.store(), rec, 0)
                .unwrap()
                .ops,
        );
        let line = crate::model::decision::LineRec::new(s, rec, "rollback", "rejected");
        d.change(crate::model::decision::HunkChange::keep(
            sid,
            i,
            rec,
            HunkState::Rejected,
        ))
        .line(
            line,
            crate::protocol::Event::Status {
                seq: 0,
                suggestion_id: None,
                run_id: None,
                status: "x".into(),
                message: "x".into(),
            },
        );
    }
    d.ops(ops);
    hub.journal_append(&Record::Decision(Box::new(d.record().clone())))
        .unwrap();
    let done = &d.file_ops()[..written];
    crate::decide::execute::execute(&root, hub.store(), done).unwrap();
}

/// Two files, each with one hunk of suggestion `s1`, both accepted.
fn two_files_accepted() -> Fixture {
    let base: Files = vec![("a.txt", numbered(20, &[])), ("b.txt", numbered(20, &[]))];
    let run: Files = vec![
        ("a.txt", numbered(20, &[(5, "five")])),
        ("b.txt", numbered(20, &[(5, "five")])),
    ];
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    for h in &s.hunks {
        f.hub()
            .decide("s1", &h.id, FeedbackAction::Accept, None, None)
            .unwrap();
    }
    f
}

/// A rollback of hunks in two files, cut by a crash after its first file was written, while
/// something appended to the second (the kill -9 campaign's writer): it cannot be finished, so
/// it is taken back whole — the first file gets its hunk again — and its hunks stay accepted.
#[test]
fn a_decision_cut_by_a_crash_that_cannot_be_finished_is_taken_back_whole() {
    let mut f = two_files_accepted();
    let logged = f.feedback().len();
    prepare_rollback_cut(&f, "s1", &[0, 1], 1);
    assert_eq!(f.read("a.txt"), numbered(20, &[]), "the cut wrote a.txt");
    let appended = numbered(20, &[(5, "five")]) + "appended\n";
    std::fs::write(f.path("b.txt"), &appended).unwrap();
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    assert_eq!(f.state("s1", 1), HunkState::Accepted);
    assert_eq!(
        f.read("a.txt"),
        numbered(20, &[(5, "five")]),
        "the half of the rollback that was written is taken back"
    );
    assert_eq!(
        f.read("b.txt"),
        appended,
        "the other file is left as it was"
    );
    assert_eq!(f.feedback().len(), logged, "nothing logged for it");
}

/// [`a_decision_cut_by_a_crash_that_cannot_be_finished_is_taken_back_whole`]'s positive
/// control: the same cut without the append is finished on restart.
#[test]
fn a_decision_cut_by_a_crash_with_nothing_changed_since_is_finished() {
    let mut f = two_files_accepted();
    prepare_rollback_cut(&f, "s1", &[0, 1], 1);
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Rejected);
    assert_eq!(f.state("s1", 1), HunkState::Rejected);
    assert_eq!(f.read("a.txt"), numbered(20, &[]));
    assert_eq!(f.read("b.txt"), numbered(20, &[]));
}

/// The same cut, and the user saved the half-rolled-back file before the restart: the
/// rollback's change is taken back out of their version, their edit stays.
#[test]
fn a_cut_decision_taken_back_keeps_the_users_edits_since() {
    let mut f = two_files_accepted();
    prepare_rollback_cut(&f, "s1", &[0, 1], 1);
    std::fs::write(f.path("a.txt"), numbered(20, &[(18, "mine")])).unwrap();
    std::fs::write(f.path("b.txt"), numbered(20, &[(5, "five")]) + "appended\n").unwrap();
    f.reopen();
    assert_eq!(f.state("s1", 0), HunkState::Accepted);
    assert_eq!(f.read("a.txt"), numbered(20, &[(5, "five"), (18, "mine")]));
}

//! Line-range decisions against a real checkout and state directory: what lands, what stays,
//! undo, a restart, and the hunks around.

use crate::decide::tests::{numbered, Files, Fixture};
use crate::protocol::{ErrorCode, FeedbackAction, HunkState};

/// A 12-line hunk (lines 5–7 replaced: 3 context, 3 `-`, 3 `+`, 3 context) and one further
/// down the same file.
fn twelve() -> (Files, Files) {
    (
        vec![("a.txt", numbered(40, &[]))],
        vec![(
            "a.txt",
            numbered(40, &[(5, "five"), (6, "six"), (7, "seven"), (30, "thirty")]),
        )],
    )
}

/// The file once lines 3–7 of the 12-line hunk (`line 4`, `-5 -6 -7`, `+five`) are in.
fn after_3_to_7() -> String {
    let mut lines: Vec<String> = numbered(40, &[]).lines().map(str::to_string).collect();
    lines.splice(4..7, ["five".to_string()]);
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn accepting_lines_lands_them_and_the_rest_stays_pending_across_a_restart() {
    let (base, run) = twelve();
    let mut f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = &s.hunks[0];
    assert_eq!(h.diff_text().lines().count(), 13, "{}", h.diff_text());
    let r = f
        .hub()
        .decide_lines("s1", &h.id, FeedbackAction::Accept, [3, 7], Some("part"))
        .unwrap();
    assert!(r.applied);
    assert_eq!(f.read("a.txt"), after_3_to_7());
    assert_eq!(r.hunk.state, HunkState::Accepted);
    assert_eq!(r.hunk.lines, Some([3, 7]));
    let landed = "@@ -2,9 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n-line 6\n-line 7\n+five\n line 8\n line 9\n line 10\n";
    assert_eq!(r.hunk.applied_diff.as_deref(), Some(landed));
    let rest_id = format!("{}~a3-7", h.id);
    assert_eq!(r.new_hunks.len(), 1);
    let rest = &r.new_hunks[0];
    assert_eq!(
        (rest.id.as_str(), rest.state),
        (rest_id.as_str(), HunkState::Pending)
    );
    assert_eq!(rest.parent_hunk_id.as_deref(), Some(h.id.as_str()));
    assert_eq!(
        rest.diff,
        "@@ -2,7 +2,9 @@\n line 2\n line 3\n line 4\n five\n+six\n+seven\n line 8\n line 9\n line 10\n"
    );
    assert_eq!(r.remaining_hunks, 2, "the rest and the hunk further down");
    let fb = f.feedback();
    assert_eq!(fb.len(), 1);
    assert_eq!(
        (&fb[0]["action"], &fb[0]["outcome"], &fb[0]["lines"]),
        (
            &"accept".into(),
            &"partial".into(),
            &serde_json::json!([3, 7])
        )
    );
    assert_eq!(fb[0]["applied_diff"], landed);
    assert_eq!(fb[0]["diff"], h.diff_text(), "the hunk as it was reviewed");

    // A restart puts back the same hunk set and states, and applies nothing again.
    let ids = |f: &Fixture| -> Vec<(String, HunkState)> {
        let v = f.hub().get("s1").unwrap();
        v.hunks.iter().map(|h| (h.id.clone(), h.state)).collect()
    };
    let before = ids(&f);
    f.reopen();
    assert_eq!(ids(&f), before);
    assert_eq!(f.read("a.txt"), after_3_to_7());

    // The rest, then the hunk below, land where they belong: the file is the run's.
    f.hub()
        .decide("s1", &rest_id, FeedbackAction::Accept, None, None)
        .unwrap();
    f.hub()
        .decide("s1", &s.hunks[1].id, FeedbackAction::Accept, None, None)
        .unwrap();
    assert_eq!(f.read("a.txt"), run[0].1);
    assert_eq!(f.hub().get("s1").unwrap().reviewed_count, 3);
}

#[test]
fn undoing_a_partial_accept_takes_back_what_landed_and_the_rest() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = s.hunks[0].id.clone();
    // The hunk below first, so the undo works among other applied hunks.
    f.hub()
        .decide("s1", &s.hunks[1].id, FeedbackAction::Accept, None, None)
        .unwrap();
    f.hub()
        .decide_lines("s1", &h, FeedbackAction::Accept, [5, 9], None)
        .unwrap();
    let rest = format!("{h}~a5-9");
    // The rest is decided: the hunk cannot be undone under it.
    f.hub()
        .decide("s1", &rest, FeedbackAction::Reject, None, None)
        .unwrap();
    let err = f
        .hub()
        .decide("s1", &h, FeedbackAction::Undo, None, None)
        .unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::AlreadyDecided, "{err}");
    assert!(err.to_string().contains("undo it first"), "{err}");
    f.hub()
        .decide("s1", &rest, FeedbackAction::Undo, None, None)
        .unwrap();
    let r = f
        .hub()
        .decide("s1", &h, FeedbackAction::Undo, None, None)
        .unwrap();
    assert_eq!(r.removed_hunk_ids, vec![rest.clone()]);
    assert_eq!((r.hunk.state, r.hunk.lines), (HunkState::Pending, None));
    assert_eq!(f.read("a.txt"), numbered(40, &[(30, "thirty")]));
    let v = f.hub().get("s1").unwrap();
    assert_eq!(v.hunks.len(), 2);
    assert_eq!(v.hunks[0].diff, s.hunks[0].diff_text(), "whole again");
    // And it can be decided whole now.
    f.hub()
        .decide("s1", &h, FeedbackAction::Accept, None, None)
        .unwrap();
    assert_eq!(f.read("a.txt"), run[0].1);
}

#[test]
fn rejecting_lines_drops_them_and_lands_nothing() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = s.hunks[0].id.clone();
    let r = f
        .hub()
        .decide_lines("s1", &h, FeedbackAction::Reject, [6, 8], None)
        .unwrap();
    assert!(!r.applied);
    assert_eq!(
        (r.hunk.state, r.hunk.lines),
        (HunkState::Rejected, Some([6, 8]))
    );
    assert_eq!(f.read("a.txt"), base[0].1, "nothing landed");
    let rest = &r.new_hunks[0];
    assert_eq!(rest.id, format!("{h}~r6-8"));
    assert_eq!(
        rest.diff,
        "@@ -2,9 +2,8 @@\n line 2\n line 3\n line 4\n-line 5\n-line 6\n line 7\n+seven\n line 8\n line 9\n line 10\n"
    );
    f.hub()
        .decide("s1", &rest.id, FeedbackAction::Accept, None, None)
        .unwrap();
    let want = numbered(40, &[(7, "line 7\nseven")]).replace("line 5\nline 6\n", "");
    assert_eq!(f.read("a.txt"), want);
    assert_eq!(f.feedback()[0]["outcome"], "partial");
    assert_eq!(f.feedback()[0]["action"], "reject");
}

#[test]
fn a_bad_range_is_a_bad_request_that_changes_nothing() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = s.hunks[0].id.clone();
    let before = f.journal_len();
    let cases = [
        (FeedbackAction::Accept, [1, 3], "no + or - line"),
        (
            FeedbackAction::Accept,
            [12, 13],
            "within the hunk's 12 lines",
        ),
        (FeedbackAction::Reject, [0, 4], "within the hunk's 12 lines"),
        (FeedbackAction::Accept, [7, 5], "within the hunk's 12 lines"),
        (FeedbackAction::Undo, [4, 5], "goes with action"),
        (FeedbackAction::Modify, [4, 5], "goes with action"),
    ];
    for (action, lines, says) in cases {
        let err = f
            .hub()
            .decide_lines("s1", &h, action, lines, None)
            .unwrap_err();
        assert_eq!(err.error_code(), ErrorCode::BadRequest, "{lines:?}: {err}");
        assert!(err.to_string().contains(says), "{lines:?}: {err}");
    }
    assert_eq!(f.journal_len(), before, "nothing journaled");
    assert_eq!(f.read("a.txt"), base[0].1);
    assert!(f.feedback().is_empty());
    // The positive control: the same hunk takes a good range.
    f.hub()
        .decide_lines("s1", &h, FeedbackAction::Accept, [4, 4], None)
        .unwrap();
    assert_ne!(f.read("a.txt"), base[0].1);
}

#[test]
fn a_range_with_every_change_decides_the_whole_hunk() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let r = f
        .hub()
        .decide_lines("s1", &s.hunks[0].id, FeedbackAction::Accept, [1, 12], None)
        .unwrap();
    assert!(r.new_hunks.is_empty());
    assert_eq!((r.hunk.state, r.hunk.lines), (HunkState::Accepted, None));
    assert_eq!(f.feedback()[0]["outcome"], "applied");
    assert_eq!(
        f.read("a.txt"),
        numbered(40, &[(5, "five"), (6, "six"), (7, "seven")])
    );
    assert_eq!(run.len(), 1);
}

#[test]
fn a_stale_file_is_a_conflict_for_a_range_too() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let mine = numbered(40, &[(4, "the user's line four")]);
    std::fs::write(f.path("a.txt"), &mine).unwrap();
    let err = f
        .hub()
        .decide_lines("s1", &s.hunks[0].id, FeedbackAction::Accept, [3, 7], None)
        .unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::Conflict, "{err}");
    assert_eq!(f.read("a.txt"), mine);
    assert_eq!(f.state("s1", 0), HunkState::Conflict);
    assert_eq!(f.hub().get("s1").unwrap().hunks.len(), 2, "no rest");
    assert_eq!(f.feedback()[0]["lines"], serde_json::json!([3, 7]));
    assert_eq!(run.len(), 1);
}

#[test]
fn rolling_back_a_partly_accepted_hunk_and_its_rest_restores_the_base() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = s.hunks[0].id.clone();
    f.hub()
        .decide_lines("s1", &h, FeedbackAction::Accept, [8, 8], None)
        .unwrap();
    let rest = format!("{h}~a8-8");
    f.hub()
        .decide("s1", &rest, FeedbackAction::Accept, None, None)
        .unwrap();
    assert_eq!(
        f.read("a.txt"),
        numbered(40, &[(5, "five"), (6, "six"), (7, "seven")])
    );
    f.hub()
        .rollback(
            "s1",
            crate::protocol::RollbackMode::ScopedSelected,
            &[h.clone(), rest.clone()],
            true,
        )
        .unwrap();
    assert_eq!(f.read("a.txt"), base[0].1);
    assert_eq!(run.len(), 1);
}

#[test]
fn rejecting_a_partly_accepted_hunk_takes_it_all_back_and_rejects_it_whole() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = s.hunks[0].id.clone();
    f.hub()
        .decide_lines("s1", &h, FeedbackAction::Accept, [3, 7], None)
        .unwrap();
    let r = f
        .hub()
        .decide("s1", &h, FeedbackAction::Reject, None, Some("no"))
        .unwrap();
    assert_eq!((r.hunk.state, r.hunk.lines), (HunkState::Rejected, None));
    assert_eq!(r.removed_hunk_ids, vec![format!("{h}~a3-7")]);
    assert_eq!(f.read("a.txt"), base[0].1);
    assert_eq!(f.hub().get("s1").unwrap().hunks.len(), 2);
    let last = f.feedback().pop().unwrap();
    assert_eq!(
        (&last["action"], &last["outcome"]),
        (&"reject".into(), &"rejected".into())
    );
    assert_eq!(run.len(), 1);
}

#[test]
fn rolling_back_a_partly_accepted_hunk_takes_its_pending_rest_back() {
    let (base, run) = twelve();
    let mut f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    let h = s.hunks[0].id.clone();
    f.hub()
        .decide_lines("s1", &h, FeedbackAction::Accept, [3, 7], None)
        .unwrap();
    f.hub()
        .rollback(
            "s1",
            crate::protocol::RollbackMode::ScopedSelected,
            std::slice::from_ref(&h),
            true,
        )
        .unwrap();
    assert_eq!(f.read("a.txt"), base[0].1);
    let ids = |f: &Fixture| -> Vec<(String, HunkState, Option<[usize; 2]>)> {
        let v = f.hub().get("s1").unwrap();
        v.hunks
            .iter()
            .map(|h| (h.id.clone(), h.state, h.lines))
            .collect()
    };
    let want = vec![
        (h.clone(), HunkState::Rejected, None),
        (s.hunks[1].id.clone(), HunkState::Pending, None),
    ];
    assert_eq!(ids(&f), want);
    f.reopen();
    assert_eq!(ids(&f), want, "after a restart");
    assert_eq!(run.len(), 1);
}

#[test]
fn accepting_everything_after_a_partial_accept_gives_the_run() {
    let (base, run) = twelve();
    let f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    f.hub()
        .decide_lines("s1", &s.hunks[0].id, FeedbackAction::Accept, [5, 9], None)
        .unwrap();
    let out = f
        .hub()
        .decide_all("s1", crate::protocol::BulkAction::Accept, None, None, false)
        .unwrap();
    assert_eq!(out["decided"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["remaining_hunks"], 0, "{out}");
    assert_eq!(f.read("a.txt"), run[0].1);
}

/// An oversized hunk (100 lines inserted with no blank line: nothing to cut it at) is decided by
/// line ranges like any other; its rest stays oversized while it is over the limits, and is not
/// once a reject has taken enough out of it.
#[test]
fn the_rest_of_an_oversized_hunk_is_oversized_while_it_is_over_the_limits() {
    let block: String = (1..=100).map(|i| format!("block {i}\n")).collect();
    let base = vec![("a.txt", numbered(10, &[]))];
    let grown = format!("line 5\n{}", block.trim_end());
    let run = vec![("a.txt", numbered(10, &[(5, &grown)]))];
    let mut f = Fixture::new(&base);
    let s = f.suggest("s1", &base, &run);
    assert_eq!(s.hunks.len(), 1);
    let h = &s.hunks[0];
    assert!(h.oversized && h.view().oversized, "{}", h.diff_text());
    // Accepting 57 of the added lines leaves them as context in the rest: still over.
    let r = f
        .hub()
        .decide_lines("s1", &h.id, FeedbackAction::Accept, [4, 60], None)
        .unwrap();
    let rest = &r.new_hunks[0];
    assert!(rest.oversized, "{}", rest.diff);
    // Rejecting 40 of the 43 left drops them: the rest is within the limits.
    let r = f
        .hub()
        .decide_lines("s1", &rest.id, FeedbackAction::Reject, [61, 100], None)
        .unwrap();
    let rest = &r.new_hunks[0];
    assert!(!rest.oversized, "{}", rest.diff);
    assert!(rest.diff.lines().count() - 1 <= 80, "{}", rest.diff);
    f.reopen();
    let v = f.hub().get("s1").unwrap();
    let after: Vec<bool> = v.hunks.iter().map(|h| h.oversized).collect();
    assert_eq!(after, [true, true, false], "kept across a restart");
}

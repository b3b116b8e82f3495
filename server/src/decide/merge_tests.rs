//! The merge compared with `git merge-file` on the same three inputs.

use std::process::Command;

use hunkgate_patch::{apply_hunk, diff_hunks, Hunk};

use super::*;

/// What `git merge-file -p -L yours -L base -L agent` makes of the three texts: the merged
/// text, and whether it holds conflicts (git's exit status counts them).
fn git_merge_file(current: &str, base: &str, agent: &str) -> (String, MergeOutcome) {
    let dir = tempfile::tempdir().unwrap();
    let files = [("yours", current), ("base", base), ("agent", agent)];
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let [l1, l2, l3] = LABELS;
    let out = Command::new("git")
        .args(["merge-file", "-p", "-L", l1, "-L", l2, "-L", l3])
        .args(["yours", "base", "agent"])
        .current_dir(dir.path())
        .output()
        .expect("git runs");
    let conflicts = out.status.code().expect("git exits");
    assert!(
        (0..127).contains(&conflicts),
        "git merge-file failed: {out:?}"
    );
    let outcome = if conflicts == 0 {
        MergeOutcome::Clean
    } else {
        MergeOutcome::Conflicted
    };
    (String::from_utf8(out.stdout).unwrap(), outcome)
}

/// The agent's one hunk from `base` to `agent`.
fn agent_hunk(base: &str, agent: &str) -> Hunk {
    let mut hunks = diff_hunks(base, agent, CONTEXT);
    assert_eq!(hunks.len(), 1, "the agent made one hunk");
    hunks.remove(0)
}

/// Merge the agent's hunk into `current`, check it against git, and that the merged hunk is
/// the merged file as a diff against `current`.
fn merged_like_git(base: &str, agent: &str, current: &str) -> Merged {
    let hunk = agent_hunk(base, agent);
    assert!(
        apply_hunk(current, &hunk, 0).is_err(),
        "the user's edit makes the hunk stale"
    );
    let merged = merge_hunk(base, &hunk, current).expect("a merge that changes the file");
    let (git_text, git_outcome) = git_merge_file(current, base, agent);
    assert_eq!(merged.text, git_text, "the merged text is git's");
    assert_eq!(merged.outcome, git_outcome, "so is the outcome");
    let shown = apply_hunk(current, &merged.hunk, 0).expect("the merged hunk applies");
    assert_eq!(shown.text, merged.text, "the hunk shown is what lands");
    merged
}

fn lines(n: usize, ending: &str) -> Vec<String> {
    (1..=n).map(|i| format!("line {i}{ending}")).collect()
}

fn with(mut lines: Vec<String>, at: usize, text: &str) -> String {
    lines[at - 1] = text.to_string();
    lines.concat()
}

#[test]
fn an_edit_next_to_the_hunk_merges_clean_and_keeps_the_users_lines() {
    let base = lines(20, "\n");
    let agent = with(base.clone(), 10, "agent's line 10\n");
    let current = with(base.clone(), 8, "your line 8\n");
    let m = merged_like_git(&base.concat(), &agent, &current);
    assert_eq!(m.outcome, MergeOutcome::Clean);
    assert!(m.text.contains("your line 8\n") && m.text.contains("agent's line 10\n"));
    assert!(
        !m.hunk.to_unified().contains("-your line 8"),
        "{}",
        m.hunk.to_unified()
    );
}

#[test]
fn an_edit_elsewhere_in_the_file_stays_out_of_the_merged_hunk() {
    let base = lines(40, "\n");
    let agent = with(base.clone(), 10, "agent's line 10\n");
    // Stale by an edit in the hunk's context; the far edit is kept as it is, outside the hunk.
    let mut current = base.clone();
    current[7] = "your line 8\n".into();
    current[34] = "your line 35\n".into();
    let m = merged_like_git(&base.concat(), &agent, &current.concat());
    assert_eq!(m.outcome, MergeOutcome::Clean);
    assert!(m.text.contains("your line 35\n"));
    let shown = m.hunk.to_unified();
    assert!(
        !shown.contains("line 35"),
        "only the hunk's region: {shown}"
    );
}

#[test]
fn an_edit_on_the_line_right_next_to_the_agents_conflicts_as_in_git() {
    // git's merge takes changes that touch (no unchanged line between them) as one conflict.
    let base = lines(20, "\n");
    let agent = with(base.clone(), 10, "agent's line 10\n");
    let current = with(base.clone(), 9, "your line 9\n");
    let m = merged_like_git(&base.concat(), &agent, &current);
    assert_eq!(m.outcome, MergeOutcome::Conflicted);
}

#[test]
fn an_overlapping_edit_gives_labelled_conflict_markers() {
    let base = lines(20, "\n");
    let agent = with(base.clone(), 10, "agent's line 10\n");
    let current = with(base.clone(), 10, "your line 10\n");
    let m = merged_like_git(&base.concat(), &agent, &current);
    assert_eq!(m.outcome, MergeOutcome::Conflicted);
    let shown = m.hunk.to_unified();
    for marker in ["+<<<<<<< yours\n", "+=======\n", "+>>>>>>> agent\n"] {
        assert!(shown.contains(marker), "{marker:?} in {shown}");
    }
    assert!(holds_markers(&m.hunk));
}

#[test]
fn crlf_files_merge_as_git_merges_them() {
    let base = lines(20, "\r\n");
    let agent = with(base.clone(), 10, "agent's line 10\r\n");
    let clean = merged_like_git(
        &base.concat(),
        &agent,
        &with(base.clone(), 8, "your line 8\r\n"),
    );
    assert_eq!(clean.outcome, MergeOutcome::Clean);
    let conflicted = merged_like_git(
        &base.concat(),
        &agent,
        &with(base.clone(), 10, "your line 10\r\n"),
    );
    assert_eq!(conflicted.outcome, MergeOutcome::Conflicted);
    assert!(
        conflicted.text.contains("<<<<<<< yours\r\n"),
        "markers end as the file's lines do: {:?}",
        conflicted.text
    );
}

#[test]
fn files_without_a_final_newline_merge_as_git_merges_them() {
    let mut base = lines(12, "\n");
    base[11] = "last line".into();
    let agent = with(base.clone(), 12, "agent's last line");
    let clean = merged_like_git(
        &base.concat(),
        &agent,
        &with(base.clone(), 10, "your line 10\n"),
    );
    assert_eq!(clean.outcome, MergeOutcome::Clean);
    assert!(
        clean.text.ends_with("agent's last line"),
        "{:?}",
        clean.text
    );
    let conflicted = merged_like_git(
        &base.concat(),
        &agent,
        &with(base.clone(), 12, "your last line"),
    );
    assert_eq!(conflicted.outcome, MergeOutcome::Conflicted);
}

#[test]
fn a_merge_that_changes_nothing_is_none() {
    let base = lines(10, "\n").concat();
    let agent = with(lines(10, "\n"), 5, "agent's line 5\n");
    let hunk = agent_hunk(&base, &agent);
    // The user made the very same change (and one more next to it).
    let current = with(
        agent.split_inclusive('\n').map(String::from).collect(),
        3,
        "your line 3\n",
    );
    assert_eq!(merge_hunk(&base, &hunk, &current), None);
    // Positive control: a file without the agent's line gets it.
    let current = with(lines(10, "\n"), 3, "your line 3\n");
    assert!(merge_hunk(&base, &hunk, &current).is_some());
}

#[test]
fn one_hunk_joins_the_hunks_of_a_diff_with_the_lines_between() {
    let old = lines(30, "\n").concat();
    let new = with(
        with(lines(30, "\n"), 25, "b\n")
            .split_inclusive('\n')
            .map(String::from)
            .collect(),
        3,
        "a\n",
    );
    assert_eq!(diff_hunks(&old, &new, CONTEXT).len(), 2);
    let h = one_hunk(&old, &new).unwrap();
    assert_eq!(apply_hunk(&old, &h, 0).unwrap().text, new);
    assert_eq!(one_hunk(&old, &old), None);
}

#[test]
fn markers_are_told_apart_from_lines_like_them() {
    let with_markers = agent_hunk("a\n", "<<<<<<< yours\r\na\n");
    assert!(holds_markers(&with_markers));
    let closing = agent_hunk("a\n", "a\n>>>>>>> agent\n");
    assert!(holds_markers(&closing));
    let without = agent_hunk("a\n", "<<<<<<< mine\na\n=======\n");
    assert!(
        !holds_markers(&without),
        "a heading's underline is no marker"
    );
}

#[test]
fn files_over_the_cap_are_not_merged() {
    let base = lines(20, "\n").concat();
    let hunk = agent_hunk(&base, &with(lines(20, "\n"), 10, "agent's line 10\n"));
    let edited = with(lines(20, "\n"), 8, "your line 8\n");
    assert!(
        merge_hunk(&base, &hunk, &edited).is_some(),
        "positive control"
    );
    let padding = "x".repeat(MERGE_CAP);
    assert_eq!(
        merge_hunk(&base, &hunk, &format!("{edited}{padding}")),
        None
    );
}

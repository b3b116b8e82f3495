//! `hunkgate modify ID HUNK`: the user's own version of a hunk, applied to the checkout. As
//! Neovim's modify: the hunk's new side is edited (here in `$VISUAL` / `$EDITOR`, else `vi`)
//! and sent back as a diff over the same old lines; or the diff is given whole (`--diff FILE`).
//! A hunk in `conflict` with a three-way merge is edited as its merge (conflict markers and all),
//! over the lines of the user's file now.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use hunkgate_patch::{parse_one_hunk, Hunk, HunkLine};
use serde_json::json;

use crate::cli::review::hunk_name;
use crate::cli::term::{visible_line, wire};
use crate::cli::{reviewer_client, typed, ClientArgs};
use crate::protocol::{DecisionReply, HunkKind, HunkState, HunkView, SuggestionView};

pub async fn modify(
    client: ClientArgs,
    id: String,
    hunk: String,
    diff: Option<PathBuf>,
    comment: Option<String>,
) -> anyhow::Result<ExitCode> {
    let c = reviewer_client(&client).await?;
    let s: SuggestionView = typed(c.get(&format!("/suggestions/{id}")).await?)?;
    let name = hunk_name(&s, &hunk)?;
    let h = s
        .hunks
        .iter()
        .find(|h| h.id == name || name == format!("{}:{}", h.file, h.index))
        .with_context(|| format!("suggestion {} has no hunk {:?}", s.id, visible_line(&hunk)))?;
    let modified = match diff {
        Some(path) => std::fs::read_to_string(&path)
            .with_context(|| format!("reading the diff {}", path.display()))?,
        None => match edit_in_editor(h)? {
            Some(d) => d,
            None => return Ok(ExitCode::FAILURE),
        },
    };
    let v = c
        .post(
            "/feedback",
            json!({"suggestion_id": s.id, "hunk_id": h.id, "action": "modify",
                "modified_diff": modified, "comment": comment}),
        )
        .await?;
    if client.json {
        println!("{v}");
    } else {
        let r: DecisionReply = typed(v)?;
        println!("{:<9} {}", wire(&r.hunk.state), visible_line(&r.hunk.id));
    }
    Ok(ExitCode::SUCCESS)
}

/// The hunk's new side edited in the user's editor, as the diff to send; `None` (with the reason
/// printed) when the editor failed or nothing was changed.
fn edit_in_editor(h: &HunkView) -> anyhow::Result<Option<String>> {
    if !matches!(
        h.kind,
        HunkKind::Modify | HunkKind::Create | HunkKind::Delete
    ) {
        bail!(
            "hunk {} is a {} change: it can be accepted or rejected, not modified",
            visible_line(&h.id),
            wire(&h.kind)
        );
    }
    let hunk = parse_one_hunk(diff_to_edit(h), &h.file)
        .map_err(|e| anyhow::anyhow!("cannot read hunk {}: {e}", visible_line(&h.id)))?;
    let new_side: String = hunk.new_lines().concat();
    let file_name = std::path::Path::new(&h.file)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "hunk".into());
    // The file's own name last, so the editor picks its syntax.
    let dir = TempDir::new()?;
    let path = dir.0.join(&file_name);
    std::fs::write(&path, &new_side)?;
    let editor = editor_command();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("hunkgate-editor")
        .arg(&path)
        .status()
        .with_context(|| format!("starting the editor {editor:?}"))?;
    if !status.success() {
        eprintln!("the editor ({editor}) exited with {status}: nothing was changed");
        return Ok(None);
    }
    let edited = std::fs::read_to_string(&path)
        .with_context(|| format!("reading back {}", path.display()))?;
    if edited == new_side {
        let accept = match &h.merge {
            Some(m) if h.state == HunkState::Conflict => format!(
                "`hunkgate accept --merged-against {}` takes a clean merge as it is",
                visible_line(&m.merged_against)
            ),
            _ => "`hunkgate accept` takes it as it is".into(),
        };
        eprintln!("the hunk was saved unchanged: nothing was changed ({accept})");
        return Ok(None);
    }
    let modified = with_new_side(&hunk, &edited);
    if !modified
        .lines
        .iter()
        .any(|l| !matches!(l, HunkLine::Context(_)))
    {
        eprintln!("this version changes nothing in the file: nothing was changed (`hunkgate reject` drops the hunk)");
        return Ok(None);
    }
    Ok(Some(modified.to_unified()))
}

/// What the user edits: the hunk's three-way merge with their file while the hunk is in
/// `conflict` and has one (its conflict markers to resolve), else the agent's hunk.
fn diff_to_edit(h: &HunkView) -> &str {
    match &h.merge {
        Some(m) if h.state == HunkState::Conflict => &m.diff,
        _ => &h.diff,
    }
}

/// A directory of our own (mode 0700, a fresh name) for the file being edited, removed with
/// what is in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("hunkgate-modify-{}", uuid::Uuid::new_v4()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `$VISUAL`, else `$EDITOR`, else `vi`: a shell command line, as git runs it.
fn editor_command() -> String {
    ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".into())
}

/// `hunk` with `edited` as its new side, over the same old lines (the hub applies a hunk only
/// where its old lines match exactly). Lines the edit kept at either end are context, the rest one
/// removal followed by one addition: not a minimal diff, but an exact one. Whether the file ends
/// without a newline after the hunk stays the agent's choice (an editor adds one on save).
pub fn with_new_side(hunk: &Hunk, edited: &str) -> Hunk {
    let old: Vec<&str> = hunk.old_lines();
    let agent_new = hunk.new_lines();
    let ends_open = agent_new.last().is_some_and(|l| !l.ends_with('\n'));
    let mut new: Vec<String> = edited.split_inclusive('\n').map(str::to_string).collect();
    if ends_open {
        if let Some(last) = new.last_mut() {
            if last.ends_with('\n') {
                last.pop();
                if last.ends_with('\r') {
                    last.pop();
                }
            }
            if last.is_empty() {
                new.pop();
            }
        }
    }
    let prefix = old
        .iter()
        .zip(&new)
        .take_while(|(o, n)| **o == n.as_str())
        .count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(o, n)| **o == n.as_str())
        .count();
    let mut lines = Vec::new();
    lines.extend(
        old[..prefix]
            .iter()
            .map(|l| HunkLine::Context(l.to_string())),
    );
    lines.extend(
        old[prefix..old.len() - suffix]
            .iter()
            .map(|l| HunkLine::Remove(l.to_string())),
    );
    lines.extend(
        new[prefix..new.len() - suffix]
            .iter()
            .map(|l| HunkLine::Add(l.clone())),
    );
    lines.extend(
        old[old.len() - suffix..]
            .iter()
            .map(|l| HunkLine::Context(l.to_string())),
    );
    let new_len = new.len();
    // git's convention: a side with no lines starts at the line it follows.
    let new_start = match (new_len, hunk.old_len) {
        (0, 0) => hunk.old_start,
        (0, _) => hunk.old_start.saturating_sub(1),
        (_, 0) => hunk.old_start + 1,
        _ => hunk.old_start,
    };
    Hunk {
        old_start: hunk.old_start,
        old_len: hunk.old_len,
        new_start,
        new_len,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hunk(text: &str) -> Hunk {
        parse_one_hunk(text, "a.txt").unwrap()
    }

    #[test]
    fn the_edited_new_side_replaces_the_agents_over_the_same_old_lines() {
        let h = hunk("@@ -2,3 +2,3 @@\n two\n-three\n+THREE\n four\n");
        let m = with_new_side(&h, "two\nTres\nfour\n");
        assert_eq!(
            m.to_unified(),
            "@@ -2,3 +2,3 @@\n two\n-three\n+Tres\n four\n"
        );
        // More lines, fewer lines.
        let m = with_new_side(&h, "two\n3\n3b\nfour\n");
        assert_eq!(
            m.to_unified(),
            "@@ -2,3 +2,4 @@\n two\n-three\n+3\n+3b\n four\n"
        );
        let m = with_new_side(&h, "two\nfour\n");
        assert_eq!(m.to_unified(), "@@ -2,3 +2,2 @@\n two\n-three\n four\n");
        // The edit may change the agent's context lines too.
        let m = with_new_side(&h, "TWO\nthree\nfour\n");
        assert_eq!(
            m.to_unified(),
            "@@ -2,3 +2,3 @@\n-two\n+TWO\n three\n four\n"
        );
    }

    #[test]
    fn a_file_left_without_a_final_newline_stays_so() {
        let h = hunk(
            "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n",
        );
        let m = with_new_side(&h, "c\n");
        assert_eq!(
            m.to_unified(),
            "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn emptying_a_created_file_and_filling_a_deleted_one() {
        let created = hunk("@@ -0,0 +1,2 @@\n+x\n+y\n");
        let m = with_new_side(&created, "z\n");
        assert_eq!(m.to_unified(), "@@ -0,0 +1 @@\n+z\n");
        let deleted = hunk("@@ -1,2 +0,0 @@\n-x\n-y\n");
        let m = with_new_side(&deleted, "x\n");
        assert_eq!(m.to_unified(), "@@ -1,2 +1 @@\n x\n-y\n");
    }
}

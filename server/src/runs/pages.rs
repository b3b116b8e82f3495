//! Web pages pinned to a run's session (see [`crate::sessions::web`]), handed to an agent
//! command: each page's text as a file in the sandbox, outside the repository tree, and a line
//! in the prompt naming the files. (The built-in agent gets them in its first message instead:
//! [`Hub::session_context`].)
//!
//! The files go in the slot's `.git/hunkgate-context/`: the sandbox user can read them there,
//! and they are never part of a suggestion (a read-back never enters `.git`). Every sync of a
//! slot makes its `.git` anew, so one run's pages never reach the next run of the slot; and
//! the slot is the agent's own under `--isolation user` (other slots are out of its sight), so
//! no other run's agent can read or change them. They are written *as the sandbox user*, by a
//! fixed shell script that takes each page's text from its environment: the hub writes nothing
//! into the sandbox user's home itself, and no text of a page is ever in a command line.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use hunkgate_sandbox::workspace::Sandbox;

use crate::error::AppError;
use crate::hub::Hub;
use crate::model::session::ContextKind;

use super::RunJob;

/// The directory of the pages, relative to the sandbox's root.
pub const PAGES_DIR: &str = ".git/hunkgate-context";
/// Bytes of page text handed to one agent command at most (the environment that carries them
/// to the sandbox user has to fit in the kernel's limit, 2 MiB at least).
const MAX_PAGES_BYTES: usize = 512 * 1024;
/// How long writing the pages may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// A pinned page: its URL and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedPage {
    pub url: String,
    pub text: String,
}

impl Hub {
    /// The pages pinned to the session of run `run_id`, in pinning order.
    fn pinned_pages(&self, run_id: &str) -> Result<Vec<PinnedPage>, AppError> {
        let st = self.lock()?;
        let Some(s) = st
            .runs
            .get(run_id)
            .and_then(|r| r.session_id.as_ref())
            .and_then(|sid| st.sessions.sessions.get(sid))
        else {
            return Ok(Vec::new());
        };
        Ok(s.context
            .iter()
            .filter(|r| r.kind == ContextKind::Url)
            .map(|r| PinnedPage {
                url: r.url.clone().unwrap_or_default(),
                text: r.content.clone().unwrap_or_default(),
            })
            .collect())
    }

    /// The prompt an agent command is given: the run's, and when pages are pinned to its
    /// session, a line naming the files they were written to in `sandbox`.
    pub(super) async fn prompt_with_pages(
        &self,
        job: &RunJob,
        sandbox: &dyn Sandbox,
    ) -> Result<String, AppError> {
        let pages = self.pinned_pages(&job.run_id)?;
        if pages.is_empty() {
            return Ok(job.prompt.clone());
        }
        let (kept, left_out) = within_budget(&pages);
        write_pages(sandbox, kept).await?;
        let dir = sandbox.workdir().join(PAGES_DIR);
        Ok(format!(
            "{}{}",
            job.prompt,
            pages_note(&dir, kept, left_out)
        ))
    }
}

/// The first pages whose text fits in [`MAX_PAGES_BYTES`] together, and how many are left out.
fn within_budget(pages: &[PinnedPage]) -> (&[PinnedPage], usize) {
    let mut used = 0;
    let n = pages
        .iter()
        .take_while(|p| {
            used += p.text.len();
            used <= MAX_PAGES_BYTES
        })
        .count();
    (&pages[..n], pages.len() - n)
}

/// The file of the `i`th page (from 1) in [`PAGES_DIR`].
pub fn page_file(i: usize) -> String {
    format!("page-{i}.md")
}

/// Write `pages` into the sandbox's [`PAGES_DIR`] as the sandbox user.
async fn write_pages(sandbox: &dyn Sandbox, pages: &[PinnedPage]) -> Result<(), AppError> {
    // The script is the hub's own; only numbers vary in it. The texts come in the environment.
    let mut script = format!("set -e\numask 077\nmkdir -p {PAGES_DIR}\n");
    let mut env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
    for (i, p) in pages.iter().enumerate() {
        let n = i + 1;
        script.push_str(&format!(
            "printf '%s\\n' \"$HUNKGATE_PAGE_{n}\" > {PAGES_DIR}/{}\n",
            page_file(n)
        ));
        env.push((format!("HUNKGATE_PAGE_{n}"), p.text.clone()));
    }
    let argv = ["/bin/sh".to_string(), "-c".to_string(), script];
    let mut cmd = sandbox.command(&argv, &env);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let failed = |why: String| {
        AppError::internal(format!(
            "writing the session's pinned pages into the sandbox: {why}"
        ))
    };
    let child = cmd.spawn().map_err(|e| failed(e.to_string()))?;
    let out = tokio::time::timeout(WRITE_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| failed(format!("not done in {}s", WRITE_TIMEOUT.as_secs())))?
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(failed(format!("{} {}", out.status, err.trim())));
    }
    Ok(())
}

/// The line appended to the prompt: where each page's text is, and what it is.
fn pages_note(dir: &std::path::Path, pages: &[PinnedPage], left_out: usize) -> String {
    let mut s = String::from(
        "\n\nThe user pinned web pages to this session as context. Their readable text is in \
         these files, outside the repository (read them; they are not part of your change):\n",
    );
    for (i, p) in pages.iter().enumerate() {
        let path: PathBuf = dir.join(page_file(i + 1));
        s.push_str(&format!("- {}: {}\n", path.display(), p.url));
    }
    if left_out > 0 {
        s.push_str(&format!(
            "({left_out} more pinned pages left out: together they are over {} KiB)\n",
            MAX_PAGES_BYTES / 1024
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(url: &str, bytes: usize) -> PinnedPage {
        PinnedPage {
            url: url.into(),
            text: "t".repeat(bytes),
        }
    }

    #[test]
    fn pages_past_the_budget_are_left_out_and_said_so() {
        let pages = vec![
            page("https://a/", MAX_PAGES_BYTES / 2),
            page("https://b/", MAX_PAGES_BYTES / 2),
            page("https://c/", 1),
        ];
        let (kept, left) = within_budget(&pages);
        assert_eq!((kept.len(), left), (2, 1));
        let note = pages_note(std::path::Path::new("/s/.git/hunkgate-context"), kept, left);
        assert!(
            note.contains("/s/.git/hunkgate-context/page-1.md: https://a/"),
            "{note}"
        );
        assert!(note.contains("page-2.md: https://b/"), "{note}");
        assert!(!note.contains("https://c/"), "{note}");
        assert!(note.contains("1 more pinned pages left out"), "{note}");
        let (kept, left) = within_budget(&pages[2..]);
        assert_eq!((kept.len(), left), (1, 0));
        assert!(!pages_note(std::path::Path::new("/s"), kept, left).contains("left out"));
    }

    #[tokio::test]
    async fn pages_are_written_where_the_note_says_and_nowhere_else() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join(".git")).unwrap();
        let sb = hunkgate_sandbox::workspace::LocalSandbox::new(tmp.path().to_path_buf());
        let pages = [
            PinnedPage {
                url: "https://a/".into(),
                text: "first $HOME `id` page\n\"quoted\"".into(),
            },
            page("https://b/", 10),
        ];
        write_pages(&sb, &pages).await.unwrap();
        let dir = tmp.path().join(PAGES_DIR);
        assert_eq!(
            std::fs::read_to_string(dir.join("page-1.md")).unwrap(),
            "first $HOME `id` page\n\"quoted\"\n",
            "the text is written as it is, never run"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("page-2.md")).unwrap(),
            format!("{}\n", "t".repeat(10))
        );
        let top: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            top,
            vec![std::ffi::OsString::from(".git")],
            "nothing in the tree"
        );
    }
}

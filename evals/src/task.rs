//! Eval tasks: `evals/tasks/<name>/{task.toml, repo/, solution/, …}`. The format is specified in
//! `evals/README.md`; these types are that spec in code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Why a task could not be loaded; each says which file to fix.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: invalid task.toml: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{0}: no task directories (each needs a task.toml)")]
    Empty(PathBuf),
}

/// `task.toml`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The prompt of the first run.
    pub prompt: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Seconds before the hub kills the agent (default 60).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// What the reviewer does with the first run (default: accept every hunk).
    #[serde(default)]
    pub review: Review,
    /// Later runs in the same session, each reviewed in turn.
    #[serde(default)]
    pub followup: Vec<Followup>,
    /// What the user's checkout must look like after the last review.
    #[serde(default)]
    pub check: Check,
    /// For the scripted model (`asks`): the question it asks and what it writes.
    #[serde(default)]
    pub scripted: Option<Scripted>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Followup {
    pub prompt: String,
    #[serde(default)]
    pub review: Review,
}

/// A reviewer policy: how the runner decides each hunk of a run's suggestions through the API.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum Review {
    /// Accept every hunk.
    AcceptAll {},
    /// Accept the hunks whose file matches one of `files` (globs) and, when given, whose diff
    /// contains `contains`; reject the others.
    AcceptMatching {
        files: Vec<String>,
        #[serde(default)]
        contains: Option<String>,
    },
    /// Modify hunk `index` of `file` (its `+` lines with `from` replaced by `to`); accept the rest.
    Modify {
        file: String,
        #[serde(default)]
        index: usize,
        from: String,
        to: String,
    },
    /// Reject the hunks of files matching `files` with `comment`; accept the rest.
    Reject { files: Vec<String>, comment: String },
    /// Before accepting anything, write `content` to `file` in the checkout behind the hub's back;
    /// then accept every hunk. At least one accept must come back as a conflict.
    Conflict { file: String, content: String },
    /// The run must ask a question (unless `require_question = false`): answer it with `answer`,
    /// or skip it; then accept every hunk.
    Clarify {
        #[serde(default)]
        answer: Option<String>,
        #[serde(default)]
        skip: bool,
        #[serde(default = "yes")]
        require_question: bool,
    },
}

impl Default for Review {
    fn default() -> Self {
        Review::AcceptAll {}
    }
}

fn yes() -> bool {
    true
}

impl Review {
    pub fn name(&self) -> &'static str {
        match self {
            Review::AcceptAll {} => "accept_all",
            Review::AcceptMatching { .. } => "accept_matching",
            Review::Modify { .. } => "modify",
            Review::Reject { .. } => "reject",
            Review::Conflict { .. } => "conflict",
            Review::Clarify { .. } => "clarify",
        }
    }

    fn validate(&self) -> Result<(), String> {
        let globs = |files: &[String]| -> Result<(), String> {
            if files.is_empty() {
                return Err(format!("policy {}: `files` is empty", self.name()));
            }
            for f in files {
                globset::Glob::new(f)
                    .map_err(|e| format!("policy {}: bad glob {f:?}: {e}", self.name()))?;
            }
            Ok(())
        };
        match self {
            Review::AcceptMatching { files, .. } | Review::Reject { files, .. } => globs(files),
            Review::Modify { from, .. } if from.is_empty() => {
                Err("policy modify: `from` must not be empty".into())
            }
            Review::Clarify {
                answer: Some(_),
                skip: true,
                ..
            } => Err("policy clarify: give `answer` or `skip = true`, not both".into()),
            Review::Clarify {
                answer: None,
                skip: false,
                ..
            } => Err("policy clarify: give `answer = \"…\"` or `skip = true`".into()),
            _ => Ok(()),
        }
    }

    /// A glob set for the `files` of `accept_matching` / `reject`.
    pub fn matcher(files: &[String]) -> globset::GlobSet {
        let mut b = globset::GlobSetBuilder::new();
        for f in files {
            // Validated at load time.
            if let Ok(g) = globset::Glob::new(f) {
                b.add(g);
            }
        }
        b.build().unwrap_or_else(|_| globset::GlobSet::empty())
    }
}

/// Checks run on the user's checkout after the last review. All given ones must pass.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// A `sh -c` command run in the checkout; it must exit 0.
    #[serde(default)]
    pub command: Option<String>,
    /// Files whose content must be exactly this text.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files whose content must equal the task's file `<task>/expected/<path>` byte for byte
    /// (for binary, CRLF and non-UTF-8 files).
    #[serde(default)]
    pub expected_dir: bool,
    /// Paths that must not exist.
    #[serde(default)]
    pub absent: Vec<String>,
}

impl Check {
    pub fn is_empty(&self) -> bool {
        self.command.is_none()
            && self.files.is_empty()
            && !self.expected_dir
            && self.absent.is_empty()
    }
}

/// What the scripted model does on this task: ask `question`, then write each file of
/// `solution/` with `@ANSWER@` replaced by the answer (`default` when skipped), then finish.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scripted {
    pub question: String,
    #[serde(default)]
    pub default: String,
}

/// A loaded task.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    pub dir: PathBuf,
    pub spec: TaskSpec,
    /// A replay task's `replay.json` (what the user kept and rejected), see [`crate::replay`].
    pub replay: Option<crate::replay::ReplayExpect>,
}

impl Task {
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let path = dir.join("task.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| TaskError::Io {
            path: path.clone(),
            source,
        })?;
        let spec = parse_spec(&text).map_err(|source| TaskError::Parse {
            path: path.clone(),
            source: Box::new(source),
        })?;
        let invalid = |message: String| TaskError::Invalid {
            path: path.clone(),
            message,
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| invalid("the task directory has no name".into()))?;
        if !dir.join("repo").is_dir() {
            return Err(invalid(format!(
                "{} is missing: put the repository's files there",
                dir.join("repo").display()
            )));
        }
        spec.review.validate().map_err(&invalid)?;
        for f in &spec.followup {
            f.review.validate().map_err(&invalid)?;
        }
        if spec.check.is_empty() {
            return Err(invalid(
                "[check] is empty: give a command, files, expected_dir or absent".into(),
            ));
        }
        if spec.check.expected_dir && !dir.join("expected").is_dir() {
            return Err(invalid(
                "check.expected_dir = true but there is no expected/ directory".into(),
            ));
        }
        let clarify = |r: &Review| matches!(r, Review::Clarify { .. });
        if (clarify(&spec.review) || spec.followup.iter().any(|f| clarify(&f.review)))
            && !spec.tags.iter().any(|t| t == "clarification")
        {
            return Err(invalid(
                "a clarify policy needs the tag \"clarification\"".into(),
            ));
        }
        let replay = crate::replay::load_expect(dir).map_err(|e| invalid(format!("{e:#}")))?;
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            spec,
            replay,
        })
    }

    /// Every prompt of the task, in run order.
    pub fn prompts(&self) -> Vec<&str> {
        std::iter::once(self.spec.prompt.as_str())
            .chain(self.spec.followup.iter().map(|f| f.prompt.as_str()))
            .collect()
    }

    /// (prompt, review) for each run, in order.
    pub fn runs(&self) -> Vec<(&str, &Review)> {
        std::iter::once((self.spec.prompt.as_str(), &self.spec.review))
            .chain(
                self.spec
                    .followup
                    .iter()
                    .map(|f| (f.prompt.as_str(), &f.review)),
            )
            .collect()
    }
}

pub fn parse_spec(text: &str) -> Result<TaskSpec, toml::de::Error> {
    toml::from_str(text)
}

/// Every task under `root` (directories holding a `task.toml`), sorted by name.
pub fn load_tasks(root: &Path) -> Result<Vec<Task>, TaskError> {
    let entries = std::fs::read_dir(root).map_err(|source| TaskError::Io {
        path: root.to_path_buf(),
        source,
    })?;
    let mut dirs = Vec::new();
    for e in entries {
        let e = e.map_err(|source| TaskError::Io {
            path: root.to_path_buf(),
            source,
        })?;
        if e.path().join("task.toml").is_file() {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    if dirs.is_empty() {
        return Err(TaskError::Empty(root.to_path_buf()));
    }
    dirs.iter().map(|d| Task::load(d)).collect()
}

/// Every file under `dir` as a path relative to it (with `/`), sorted.
pub fn files_under(dir: &Path) -> std::io::Result<Vec<String>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            if e.file_type()?.is_dir() {
                walk(base, &p, out)?;
            } else if let Ok(rel) = p.strip_prefix(base) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        walk(dir, dir, &mut out)?;
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_with_their_fields() {
        let t = parse_spec(
            r#"
prompt = "p"
tags = ["conflict"]
[review]
policy = "conflict"
file = "a.txt"
content = "mine\n"
[check]
files = { "a.txt" = "mine\n" }
"#,
        )
        .unwrap();
        assert_eq!(
            t.review,
            Review::Conflict {
                file: "a.txt".into(),
                content: "mine\n".into()
            }
        );
        let t = parse_spec("prompt = \"p\"\n[check]\nabsent = [\"x\"]\n").unwrap();
        assert_eq!(t.review, Review::AcceptAll {}, "accept_all is the default");
        let t = parse_spec(
            "prompt = \"p\"\n[review]\npolicy = \"clarify\"\nskip = true\n[check]\ncommand = \"true\"\n",
        )
        .unwrap();
        assert_eq!(
            t.review,
            Review::Clarify {
                answer: None,
                skip: true,
                require_question: true
            }
        );
        let t = parse_spec(
            "prompt = \"p\"\n[review]\npolicy = \"modify\"\nfile = \"a\"\nfrom = \"x\"\nto = \"y\"\n[check]\ncommand = \"true\"\n",
        )
        .unwrap();
        assert_eq!(
            t.review,
            Review::Modify {
                file: "a".into(),
                index: 0,
                from: "x".into(),
                to: "y".into()
            }
        );
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        // Unknown policy, unknown field, missing field.
        assert!(parse_spec("prompt = \"p\"\n[review]\npolicy = \"maybe\"\n").is_err());
        assert!(
            parse_spec("prompt = \"p\"\n[review]\npolicy = \"accept_all\"\nfile = \"a\"\n")
                .is_err()
        );
        let e = parse_spec("prompt = \"p\"\n[review]\npolicy = \"reject\"\nfiles = [\"a\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("comment"), "{e}");
        // Semantic checks.
        let r = Review::Clarify {
            answer: Some("a".into()),
            skip: true,
            require_question: true,
        };
        assert!(r.validate().unwrap_err().contains("not both"));
        let r = Review::AcceptMatching {
            files: vec!["[".into()],
            contains: None,
        };
        assert!(r.validate().unwrap_err().contains("bad glob"));
        let r = Review::Reject {
            files: vec![],
            comment: "c".into(),
        };
        assert!(r.validate().unwrap_err().contains("empty"));
    }

    #[test]
    fn a_task_without_checks_or_repo_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        std::fs::create_dir_all(t.join("repo")).unwrap();
        std::fs::write(t.join("task.toml"), "prompt = \"p\"\n").unwrap();
        let e = Task::load(&t).unwrap_err().to_string();
        assert!(e.contains("[check] is empty"), "{e}");
        std::fs::write(
            t.join("task.toml"),
            "prompt = \"p\"\n[review]\npolicy = \"clarify\"\nanswer = \"a\"\n[check]\ncommand = \"true\"\n",
        )
        .unwrap();
        let e = Task::load(&t).unwrap_err().to_string();
        assert!(e.contains("clarification"), "{e}");
        std::fs::remove_dir(t.join("repo")).unwrap();
        let e = Task::load(&t).unwrap_err().to_string();
        assert!(e.contains("repo is missing"), "{e}");
    }
}

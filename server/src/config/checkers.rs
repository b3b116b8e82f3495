//! `[[check]]`: the checkers the hub runs on a run's tree and on its base, in the sandbox as
//! the sandbox user, to tell the reviewer which diagnostics each hunk brings in or fixes.
//!
//! Only the user's config file names them, never a file of the repository: the agent can
//! write the repository, and a command it could name would run — as the sandbox user, but
//! outside any review — every time the hub checks (invariant 2: sandbox files are data).

use std::time::Duration;

use serde::Deserialize;

use crate::model::checker_output::Format;

/// One `[[check]]` table as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckFile {
    /// What its diagnostics say they come from (`source`); default: the preset's name.
    pub name: Option<String>,
    /// A checker hunkgate knows how to run and read (its `command` and `format`).
    pub preset: Option<Preset>,
    /// Run with `sh -c` in the sandbox's tree; wins over the preset's.
    pub command: Option<String>,
    /// How its output is read; wins over the preset's.
    pub format: Option<Format>,
}

/// The common checkers, ready to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    CargoCheck,
    CargoClippy,
    Ruff,
    Tsc,
    Eslint,
    GoVet,
}

impl Preset {
    pub fn name(self) -> &'static str {
        match self {
            Preset::CargoCheck => "cargo-check",
            Preset::CargoClippy => "cargo-clippy",
            Preset::Ruff => "ruff",
            Preset::Tsc => "tsc",
            Preset::Eslint => "eslint",
            Preset::GoVet => "go-vet",
        }
    }

    /// Its command and format. cargo's short messages rather than its JSON: one line per
    /// diagnostic, where a JSON message carries the error's whole explanation and can pass
    /// the line cap ([`hunkgate_sandbox::agent::MAX_LINE`]).
    pub fn command(self) -> (&'static str, Format) {
        match self {
            Preset::CargoCheck => (
                "cargo check --all-targets --message-format=short --quiet",
                Format::Gnu,
            ),
            Preset::CargoClippy => (
                "cargo clippy --all-targets --message-format=short --quiet",
                Format::Gnu,
            ),
            Preset::Ruff => (
                "ruff check --output-format=json-lines --no-cache --exit-zero .",
                Format::RuffJson,
            ),
            Preset::Tsc => ("tsc --noEmit --pretty false", Format::Tsc),
            Preset::Eslint => ("eslint --format json .", Format::EslintJson),
            Preset::GoVet => ("go vet ./...", Format::Gnu),
        }
    }
}

/// A checker, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checker {
    pub name: String,
    pub command: String,
    pub format: Format,
}

/// The checks, resolved: the checkers and what bounds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checks {
    pub checkers: Vec<Checker>,
    /// How long all of a run's checks (every checker, on the run's tree and on the base) may
    /// take together; a checker still running then is stopped, and says so.
    pub budget: Duration,
    /// The most bytes of output read from one checker run; past it the checker is stopped.
    pub max_output: usize,
}

pub const DEFAULT_CHECKS_BUDGET: Duration = Duration::from_secs(120);
pub const DEFAULT_MAX_CHECK_OUTPUT: usize = 1024 * 1024;
/// The most checkers one config may name.
const MAX_CHECKERS: usize = 16;

impl Checks {
    pub fn none() -> Self {
        Checks {
            checkers: Vec::new(),
            budget: DEFAULT_CHECKS_BUDGET,
            max_output: DEFAULT_MAX_CHECK_OUTPUT,
        }
    }
}

/// Resolve the `[[check]]` tables and their `[limits]`; an error says which table is wrong and
/// how to fix it.
pub fn resolve(
    tables: &[CheckFile],
    budget_secs: Option<u64>,
    max_output: Option<usize>,
) -> Result<Checks, String> {
    if tables.len() > MAX_CHECKERS {
        return Err(format!(
            "{} [[check]] tables: at most {MAX_CHECKERS} are run",
            tables.len()
        ));
    }
    let mut checkers: Vec<Checker> = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let preset = t.preset.map(Preset::command);
        let which = format!("[[check]] number {}", i + 1);
        let name = t
            .name
            .clone()
            .or_else(|| t.preset.map(|p| p.name().to_string()))
            .ok_or_else(|| format!("{which}: give it a `name` (or a `preset`)"))?;
        if name.trim().is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
            return Err(format!(
                "{which}: name {name:?} must be 1 to 64 printable characters"
            ));
        }
        let command = t
            .command
            .clone()
            .or_else(|| preset.map(|(c, _)| c.to_string()))
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| format!("[[check]] {name:?}: give it a `command` or a `preset`"))?;
        let format = t.format.or(preset.map(|(_, f)| f)).ok_or_else(|| {
            format!("[[check]] {name:?}: give its output `format` (gnu, tsc, cargo-json, ruff-json, eslint-json)")
        })?;
        if checkers.iter().any(|c| c.name == name) {
            return Err(format!(
                "[[check]] {name:?} is named twice: give one of them another `name`"
            ));
        }
        checkers.push(Checker {
            name,
            command,
            format,
        });
    }
    Ok(Checks {
        checkers,
        budget: budget_secs
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_CHECKS_BUDGET)
            .max(Duration::from_secs(1)),
        max_output: max_output.unwrap_or(DEFAULT_MAX_CHECK_OUTPUT).max(1024),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        check: Vec<CheckFile>,
    }

    fn tables(toml_text: &str) -> Vec<CheckFile> {
        toml::from_str::<File>(toml_text).unwrap().check
    }

    #[test]
    fn presets_and_commands_resolve() {
        let t = tables(
            "[[check]]\npreset = \"cargo-check\"\n\n[[check]]\npreset = \"ruff\"\nname = \"lint\"\n\n\
             [[check]]\nname = \"mypy\"\ncommand = \"mypy --no-error-summary .\"\nformat = \"gnu\"\n",
        );
        let c = resolve(&t, Some(30), None).unwrap();
        assert_eq!(
            c.checkers,
            vec![
                Checker {
                    name: "cargo-check".into(),
                    command: "cargo check --all-targets --message-format=short --quiet".into(),
                    format: Format::Gnu
                },
                Checker {
                    name: "lint".into(),
                    command: "ruff check --output-format=json-lines --no-cache --exit-zero ."
                        .into(),
                    format: Format::RuffJson
                },
                Checker {
                    name: "mypy".into(),
                    command: "mypy --no-error-summary .".into(),
                    format: Format::Gnu
                },
            ]
        );
        assert_eq!(c.budget, Duration::from_secs(30));
        assert_eq!(c.max_output, DEFAULT_MAX_CHECK_OUTPUT);
    }

    #[test]
    fn a_wrong_table_is_refused_with_its_fix() {
        let err = |text: &str| resolve(&tables(text), None, None).unwrap_err();
        assert!(err("[[check]]\ncommand = \"x\"\nformat = \"gnu\"\n").contains("give it a `name`"));
        assert!(err("[[check]]\nname = \"x\"\nformat = \"gnu\"\n").contains("`command`"));
        assert!(err("[[check]]\nname = \"x\"\ncommand = \"x\"\n").contains("`format`"));
        assert!(
            err("[[check]]\npreset = \"ruff\"\n[[check]]\npreset = \"ruff\"\n")
                .contains("named twice")
        );
        // Unknown presets, formats and keys are refused by the file's parser.
        for bad in [
            "[[check]]\npreset = \"pylint\"\n",
            "[[check]]\nname = \"x\"\ncommand = \"x\"\nformat = \"xml\"\n",
            "[[check]]\npreset = \"ruff\"\nrun_as = \"root\"\n",
        ] {
            assert!(toml::from_str::<File>(bad).is_err(), "{bad}");
        }
    }
}

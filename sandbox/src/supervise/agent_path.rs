//! The agent's `PATH` under user isolation: where the sandbox user looks for the agent's
//! program, and what the user is told when it is not there.
//!
//! The hub's own `PATH` is no good to the sandbox user as it is: its user's directories
//! (`~/.cargo/bin`, `~/.pyenv/shims`) usually sit in a home the sandbox user cannot search, and
//! a lookup that meets one fails with "Permission denied" even for a program that is nowhere.
//! So the hub ([`crate::user`]) gives the agent the configured directories (`agent_path`) and
//! the system's ([`compose`]), and hands the rest of its own `PATH` to the helper, which keeps
//! only the directories it can search: the check is the kernel's, made as the sandbox user
//! ([`searchable`]), so every directory on the way, groups and ACLs all count. Before it starts
//! anything the helper looks the program up as exec would ([`find_program`]); a program it
//! cannot run is reported with the fix ([`Unrunnable::message`]) on a line that starts with
//! [`NOT_STARTED`], which the hub turns into the run's error.
//!
//! **Layer:** a leaf; the hub's side and the helper both use it.

use std::path::{Path, PathBuf};

/// The system's directories, always on the agent's `PATH` (after the configured ones).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// How the helper's line saying the agent's program cannot be run begins (on its stderr, which
/// is the agent's): the rest of the line is the message.
pub const NOT_STARTED: &str = "hunkgate: cannot start the agent: ";
/// The helper's exit status then (a shell's for a command it cannot run).
pub const NOT_STARTED_STATUS: u8 = 127;

/// The agent's `PATH` as the hub composes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPath {
    /// The configured directories, then the system's: the agent's `PATH` as it stands.
    pub fixed: Vec<String>,
    /// The other directories of the hub's `PATH`, in order: added after `fixed` by the helper
    /// when the sandbox user can search them.
    pub if_searchable: Vec<String>,
}

/// The system's directories here: [`SYSTEM_DIRS`], and Homebrew's on a Mac that has it.
pub fn system_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = SYSTEM_DIRS.iter().map(|d| d.to_string()).collect();
    if cfg!(target_os = "macos") && Path::new("/opt/homebrew/bin").is_dir() {
        dirs.insert(0, "/opt/homebrew/bin".into());
    }
    dirs
}

/// The agent's `PATH` from the configured directories (first, so they can stand in for a
/// system program), `system` and the hub's own `PATH`, without repeats. Relative entries of the
/// hub's `PATH` (`.`, empty) are dropped: in the sandbox they would name its own files.
pub fn compose(configured: &[String], system: &[String], hub_path: Option<&str>) -> AgentPath {
    let mut fixed: Vec<String> = Vec::new();
    for d in configured.iter().chain(system) {
        if !fixed.contains(d) {
            fixed.push(d.clone());
        }
    }
    let mut if_searchable: Vec<String> = Vec::new();
    for d in hub_path.unwrap_or("").split(':') {
        let trimmed = d.trim_end_matches('/');
        let d = if trimmed.is_empty() && d.starts_with('/') {
            "/"
        } else {
            trimmed
        };
        if d.starts_with('/')
            && !fixed.iter().any(|f| f == d)
            && !if_searchable.iter().any(|f| f == d)
        {
            if_searchable.push(d.to_string());
        }
    }
    AgentPath {
        fixed,
        if_searchable,
    }
}

/// Whether this process (the helper, as the sandbox user) can search `dir`: an absolute path to
/// a directory that it, and every directory above it, lets this user through.
pub fn searchable(dir: &Path) -> bool {
    dir.is_absolute()
        && nix::unistd::access(dir, nix::unistd::AccessFlags::X_OK).is_ok()
        && dir.is_dir()
}

/// Why the agent's program cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrunnable {
    /// No such program where this user can look. `unsearchable`: directories it cannot search
    /// on the way to where it looked (the first such of each), so the program may be there.
    NotFound { unsearchable: Vec<PathBuf> },
    /// The program is the file at `path`, which this user may not execute (or no regular file).
    NotExecutable { path: PathBuf },
}

/// Look `program` up as exec would, as this process's user: a name with a `/` is a path (from
/// `cwd` when relative), any other is looked for in each directory of `path` in turn. A file
/// that cannot be run is passed over as exec does, and reported only when nothing further on
/// can be.
pub fn find_program(program: &str, path: &str, cwd: &Path) -> Result<PathBuf, Unrunnable> {
    let candidates: Vec<PathBuf> = if program.contains('/') {
        vec![cwd.join(program)]
    } else {
        path.split(':')
            .filter(|d| !d.is_empty())
            .map(|d| cwd.join(d).join(program))
            .collect()
    };
    let mut unsearchable: Vec<PathBuf> = Vec::new();
    let mut not_executable = None;
    for p in candidates {
        use nix::errno::Errno;
        match nix::unistd::access(&p, nix::unistd::AccessFlags::X_OK) {
            Ok(()) if p.metadata().is_ok_and(|m| m.is_file()) => return Ok(p),
            Ok(()) => {
                not_executable.get_or_insert(p);
            }
            Err(Errno::EACCES | Errno::EPERM) => match first_unsearchable(&p) {
                Some(dir) if !unsearchable.contains(&dir) => unsearchable.push(dir),
                Some(_) => {}
                None => {
                    not_executable.get_or_insert(p);
                }
            },
            Err(_) => {}
        }
    }
    Err(match not_executable {
        Some(path) => Unrunnable::NotExecutable { path },
        None => Unrunnable::NotFound { unsearchable },
    })
}

/// The first directory from the top on the way to `p` that this user cannot search.
fn first_unsearchable(p: &Path) -> Option<PathBuf> {
    let parent = p.parent()?;
    let mut ancestors: Vec<&Path> = parent.ancestors().collect();
    ancestors.reverse();
    ancestors
        .into_iter()
        .find(|d| nix::unistd::access(*d, nix::unistd::AccessFlags::X_OK).is_err())
        .map(Path::to_path_buf)
}

impl Unrunnable {
    /// What the user reads: the program, why it cannot run, and the fix. `user` is the sandbox
    /// user's name, `path` its `PATH`, `left_out` the directories of the hub's `PATH` it could
    /// not search.
    pub fn message(&self, program: &str, user: &str, path: &str, left_out: &[String]) -> String {
        let install = format!("install it where {user} can run it (e.g. /usr/local/bin)");
        let named = program.contains('/');
        match self {
            Unrunnable::NotFound { unsearchable } if !unsearchable.is_empty() => {
                let dirs = unsearchable
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                let where_ = if named {
                    String::new()
                } else {
                    format!(" on the sandbox user's PATH ({path})")
                };
                format!(
                    "agent program `{program}` not found{where_}: permission denied, {user} cannot search {dirs}, where it may be: {install}, or make that directory searchable for it"
                )
            }
            Unrunnable::NotFound { .. } if named => {
                format!("agent program `{program}` does not exist for the sandbox user {user}: {install}")
            }
            Unrunnable::NotFound { .. } => {
                let mut m = format!(
                    "agent program `{program}` not found on the sandbox user's PATH ({path}): {install}, or add its directory to `agent_path` in the hub's config"
                );
                if !left_out.is_empty() {
                    m.push_str(&format!(
                        " (left out of the hub's PATH as {user} cannot search them: {})",
                        left_out.join(", ")
                    ));
                }
                m
            }
            Unrunnable::NotExecutable { path: at } => format!(
                "agent program `{program}` cannot be run by the sandbox user {user}: permission denied, {} is not executable for it: {install}",
                at.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests;

//! Hub discovery records: one file per repository, in one fixed per-user directory, naming the
//! hub that serves it — wherever its state dir is and whatever port it got — so that a client
//! (the CLI, the Neovim plugin) finds the hub of the repository it is in.
//!
//! The directory is `$XDG_STATE_HOME/hunkgate/hubs/` (0700), or `$HUNKGATE_DISCOVERY_DIR`; a
//! record is `<name>-<hash12>.json` (0600, written atomically), named as the repository's
//! default state dir is. A record outlives a hub killed with SIGKILL, so whoever reads one
//! checks that its process still runs and is the very process that wrote it
//! ([`Record::stale`]); the client then asks the hub's `/health` which repository it serves
//! before it sends a token. The format is shared with the Neovim plugin (protocol.md, "Finding
//! the hub").

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::config::{self, ConfigError};

/// Overrides the directory of the records (tests, unusual setups).
pub const DIR_VAR: &str = "HUNKGATE_DISCOVERY_DIR";

/// What a hub says about itself, in its discovery record and in its state dir's `hub.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The canonical repository root it serves.
    pub repo: PathBuf,
    /// Where it listens, e.g. `http://127.0.0.1:4097`.
    pub url: String,
    pub pid: u32,
    /// The start identity of `pid` ([`process_start`]): a pid reused by another process has
    /// another.
    pub started: String,
    pub state_dir: PathBuf,
    /// The reviewer token (the record names it; it never holds it).
    pub token_file: PathBuf,
    pub version: String,
}

/// Why a record names no running hub.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stale {
    #[error("process {pid} has exited")]
    Gone { pid: u32 },
    #[error("process {pid} is not the hub that wrote the record (the pid was reused)")]
    Reused { pid: u32 },
}

impl Record {
    /// The record of this process, serving `repo` at `url` from `state_dir`.
    pub fn for_this_process(repo: &Path, url: &str, state_dir: &Path) -> anyhow::Result<Self> {
        let pid = std::process::id();
        let started = process_start(pid)
            .with_context(|| format!("reading the start time of this process ({pid})"))?;
        Ok(Self {
            repo: repo.to_path_buf(),
            url: url.to_string(),
            pid,
            started,
            state_dir: state_dir.to_path_buf(),
            token_file: state_dir.join("token"),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
    }

    /// `Some` when the process that wrote the record is no longer running: its pid is free, or
    /// taken by a process that started at another time.
    pub fn stale(&self) -> Option<Stale> {
        match process_start(self.pid) {
            None => Some(Stale::Gone { pid: self.pid }),
            Some(s) if s != self.started => Some(Stale::Reused { pid: self.pid }),
            Some(_) => None,
        }
    }
}

/// The identity of process `pid`'s start, compared as an opaque string; `None` when there is
/// no such process. Linux: `starttime` (field 22 of `/proc/<pid>/stat`, clock ticks since
/// boot), read after the last `)` since the command name may hold anything. Elsewhere: what
/// `ps -o lstart=` says.
pub fn process_start(pid: u32) -> Option<String> {
    if cfg!(target_os = "linux") {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        // Field 3 (the state) is the first after the name; starttime is field 22.
        return rest.split_whitespace().nth(22 - 3).map(str::to_string);
    }
    let out = std::process::Command::new("ps")
        .args(["-o", "lstart=", "-p", &pid.to_string()])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

/// The directory of the records: `$HUNKGATE_DISCOVERY_DIR`, else `$XDG_STATE_HOME/hunkgate/hubs`.
pub fn dir() -> Result<PathBuf, ConfigError> {
    match std::env::var_os(DIR_VAR).filter(|v| !v.is_empty()) {
        Some(d) => Ok(PathBuf::from(d)),
        None => Ok(config::hunkgate_state_home()?.join("hubs")),
    }
}

/// Where the record of `repo` is in `dir`: `<name>-<hash12>.json`.
pub fn record_path(dir: &Path, repo: &Path) -> PathBuf {
    dir.join(format!("{}.json", config::repo_key(repo)))
}

/// Write `rec` as the record of its repository in `dir` (created 0700), atomically and 0600,
/// replacing any record there (a hub that was killed leaves one). Returns its path.
pub fn write(dir: &Path, rec: &Record) -> anyhow::Result<PathBuf> {
    prepare_dir(dir)?;
    let path = record_path(dir, &rec.repo);
    let bytes = serde_json::to_vec(rec).expect("a record serialises");
    crate::store::journal::write_file_atomic(&path, &bytes, 0o600)
        .with_context(|| format!("writing the hub's discovery record {}", path.display()))?;
    Ok(path)
}

/// Create `dir` 0700, or check an existing one is a directory of this user's.
fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| {
                format!(
                    "creating the discovery directory {} (set {DIR_VAR} to use another)",
                    dir.display()
                )
            })?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("the discovery directory {}", dir.display()))?;
    if !meta.is_dir() {
        bail!(
            "the discovery directory {} is not a directory",
            dir.display()
        );
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        bail!(
            "the discovery directory {} belongs to uid {}, not to you (uid {me}); set {DIR_VAR} to a directory of yours",
            dir.display(),
            meta.uid()
        );
    }
    Ok(())
}

/// The record of `repo` in `dir`; `Ok(None)` when there is none.
pub fn read(dir: &Path, repo: &Path) -> anyhow::Result<Option<Record>> {
    read_file(&record_path(dir, repo))
}

/// A record (or a `hub.json`) at `path`; `Ok(None)` when there is no such file.
pub fn read_file(path: &Path) -> anyhow::Result<Option<Record>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .with_context(|| format!("{} is not a hub record", path.display()))
}

/// Remove the record of `rec`'s repository from `dir` if it is still `rec`'s (same pid and
/// start): another hub of the same repository may have replaced it since, and keeps it.
/// Returns whether it was removed. (A record written between the read and the removal would be
/// lost; that takes two hubs of one repository starting and stopping in the same instant.)
pub fn remove_own(dir: &Path, rec: &Record) -> std::io::Result<bool> {
    let path = record_path(dir, &rec.repo);
    match read_file(&path) {
        Ok(Some(on_disk)) if on_disk.pid == rec.pid && on_disk.started == rec.started => {
            std::fs::remove_file(&path)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(repo: &Path, pid: u32, started: &str) -> Record {
        Record {
            repo: repo.to_path_buf(),
            url: "http://127.0.0.1:4097".into(),
            pid,
            started: started.into(),
            state_dir: repo.join("state"),
            token_file: repo.join("state/token"),
            version: "0.1.0".into(),
        }
    }

    /// A child that has exited and been reaped: a pid with no process (until reused).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn records_are_named_as_the_default_state_dir_is() {
        use sha2::Digest as _;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("my-project");
        std::fs::create_dir(&repo).unwrap();
        let path = record_path(Path::new("/d"), &repo.join("."));
        let state = config::default_state_dir(&repo).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            name,
            format!("{}.json", state.file_name().unwrap().to_string_lossy())
        );
        // The naming itself, as the Neovim plugin computes it: sha256 of the canonical path.
        let canonical = repo.canonicalize().unwrap();
        let hash = hex::encode(sha2::Sha256::digest(
            canonical.as_os_str().as_encoded_bytes(),
        ));
        assert_eq!(name, format!("my-project-{}.json", &hash[..12]));
    }

    #[test]
    fn a_record_is_written_private_whole_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state/hunkgate/hubs");
        let rec =
            Record::for_this_process(tmp.path(), "http://127.0.0.1:5000", tmp.path()).unwrap();
        let path = write(&dir, &rec).unwrap();
        assert_eq!(path, record_path(&dir, tmp.path()));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(read(&dir, tmp.path()).unwrap(), Some(rec.clone()));
        // The wire format the plugin reads: camelCase.
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for key in [
            "repo",
            "url",
            "pid",
            "started",
            "stateDir",
            "tokenFile",
            "version",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        // Replaced whole, and no temporary file is left beside it.
        let other = Record {
            url: "http://127.0.0.1:5001".into(),
            ..rec
        };
        write(&dir, &other).unwrap();
        assert_eq!(read(&dir, tmp.path()).unwrap(), Some(other));
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn this_process_is_live_and_a_dead_pid_is_stale() {
        let tmp = tempfile::tempdir().unwrap();
        let live = Record::for_this_process(tmp.path(), "http://127.0.0.1:1", tmp.path()).unwrap();
        assert_eq!(live.stale(), None);
        let pid = dead_pid();
        let dead = record(tmp.path(), pid, &live.started);
        assert_eq!(dead.stale(), Some(Stale::Gone { pid }));
    }

    #[test]
    fn a_reused_pid_is_stale() {
        let tmp = tempfile::tempdir().unwrap();
        let live = Record::for_this_process(tmp.path(), "http://127.0.0.1:1", tmp.path()).unwrap();
        // The same pid, started at another time: another process that took it.
        let reused = Record {
            started: format!("{}1", live.started),
            ..live.clone()
        };
        assert_eq!(
            reused.stale(),
            Some(Stale::Reused {
                pid: std::process::id()
            })
        );
    }

    #[test]
    fn process_start_is_the_stat_starttime_field() {
        let me = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        // Fields counted from 1 with the name as field 2: starttime is field 22.
        let (_, rest) = stat.rsplit_once(')').unwrap();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert_eq!(process_start(me).as_deref(), Some(fields[19]));
        assert_eq!(process_start(dead_pid()), None);
    }

    #[test]
    fn only_ones_own_record_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("hubs");
        let mine = record(tmp.path(), 100, "7");
        write(&dir, &mine).unwrap();
        // Another hub of the same repository replaced it: not mine to remove.
        let theirs = record(tmp.path(), 200, "8");
        write(&dir, &theirs).unwrap();
        assert!(!remove_own(&dir, &mine).unwrap());
        assert_eq!(read(&dir, tmp.path()).unwrap(), Some(theirs.clone()));
        // Same pid, another start: not mine either.
        let reused = record(tmp.path(), 200, "9");
        assert!(!remove_own(&dir, &reused).unwrap());
        assert!(read(&dir, tmp.path()).unwrap().is_some());
        // Its writer removes it.
        assert!(remove_own(&dir, &theirs).unwrap());
        assert_eq!(read(&dir, tmp.path()).unwrap(), None);
        assert!(!remove_own(&dir, &theirs).unwrap());
    }
}

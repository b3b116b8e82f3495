//! Startup checks under `--isolation user`: the hub refuses to serve with state or a checkout
//! the sandbox user could reach.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::bail;
use hunkgate_sandbox::user::SandboxUser;

use crate::config::ServeConfig;
use crate::isolation::Isolation;

/// Startup checks under `--isolation user`: refuse a state dir, token, journal or feedback log
/// the sandbox user could read or write; refuse a checkout it could write; warn when the user's
/// home or checkout is readable by others.
pub fn startup_checks(cfg: &ServeConfig) -> anyhow::Result<()> {
    let Isolation::User(iso) = &cfg.isolation else {
        return Ok(());
    };
    let user = &iso.user;
    let state = &cfg.state_dir;
    for path in [
        state.clone(),
        state.join("token"),
        state.join("state.jsonl"),
        state.join("feedback.jsonl"),
        state.join("checkpoints.git"),
    ] {
        if !path.exists() {
            continue;
        }
        let access = user.access(&path)?;
        if access.read || access.write {
            let what = match (access.read, access.write) {
                (true, true) => "read and write",
                (true, false) => "read",
                _ => "write",
            };
            let fix = match &access.via {
                Some(dir) => format!(
                    "it can write {}, so it could replace what is inside: keep the state dir under a directory only you can write (--state-dir)",
                    dir.display()
                ),
                None => format!(
                    "make the state dir yours alone: `chown -R $(id -un) {0} && chmod -R go-rwx {0}`",
                    state.display()
                ),
            };
            bail!(
                "the sandbox user {} could {what} {}; it holds the hub's secrets: {fix}",
                user.name,
                path.display()
            );
        }
    }
    let repo_access = user.access(&cfg.repo)?;
    if repo_access.write {
        bail!(
            "the sandbox user {} could write your checkout {}{}: the agent must change it only through reviewed hunks (`chmod o-w`, or move it out of that directory)",
            user.name,
            cfg.repo.display(),
            repo_access
                .via
                .map(|d| format!(" (through {})", d.display()))
                .unwrap_or_default()
        );
    }
    if repo_access.read {
        tracing::warn!(
            checkout = %cfg.repo.display(),
            "your checkout is readable by other users, the sandbox user {} included (it only needs the copy hunkgate gives it): `chmod -R o-rwx {}`",
            user.name,
            cfg.repo.display()
        );
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| SandboxUser::current().ok().map(|u| u.home));
    if let Some(home) = home {
        if let Ok(meta) = std::fs::metadata(&home) {
            if meta.mode() & 0o005 != 0 || user.access(&home).is_ok_and(|a| a.read) {
                tracing::warn!(
                    home = %home.display(),
                    "your home is readable by other users, the sandbox user {} included (mode {:o}): `chmod 700 {}`",
                    user.name,
                    meta.mode() & 0o7777,
                    home.display()
                );
            }
        }
    }
    Ok(())
}

//! Shared by the evals' integration tests: where the hub binary and the reference agents are.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `hunkgate` binary: `$HUNKGATE_BIN`, else `<target>/debug/hunkgate` beside this test
/// (`target/debug/deps/<test>`), under `$CARGO_TARGET_DIR`, or the workspace's `target/`.
pub fn hunkgate_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HUNKGATE_BIN") {
        return PathBuf::from(p);
    }
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().and_then(Path::parent).map(Path::to_path_buf))
    {
        candidates.push(dir.join("hunkgate"));
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(t).join("debug/hunkgate"));
    }
    candidates.push(manifest_dir().join("../target/debug/hunkgate"));
    for c in &candidates {
        if c.is_file() {
            return c.clone();
        }
    }
    panic!(
        "the hunkgate binary is missing (looked at {candidates:?}): build it first with \
         `cargo build -p hunkgate --bin hunkgate`, or set HUNKGATE_BIN"
    );
}

pub fn agent_cmd(name: &str) -> String {
    let p = manifest_dir().join("agents").join(format!("{name}.sh"));
    assert!(p.is_file(), "{} is missing", p.display());
    format!("sh {}", p.display())
}

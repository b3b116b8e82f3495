//! The binary's command line, run as a process. (Its presence also makes `cargo test` build the
//! `hunkgate` binary that the end-to-end tests in `tests/` drive.)

use std::process::Command;

#[test]
fn help_lists_every_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_hunkgate"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for cmd in [
        "serve", "run", "list", "show", "accept", "reject", "undo", "complete", "publish", "status",
    ] {
        assert!(text.contains(cmd), "--help lacks {cmd}:\n{text}");
    }
}

#[test]
fn agent_commands_explain_themselves_outside_a_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_hunkgate"))
        .args(["publish", "-m", "x"])
        .env_remove("HUNKGATE_URL")
        .env_remove("HUNKGATE_AGENT_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("HUNKGATE_AGENT_TOKEN"), "{err}");
}

#[test]
fn serve_outside_a_repository_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hunkgate"))
        .current_dir(tmp.path())
        .env("GIT_CEILING_DIRECTORIES", tmp.path().parent().unwrap())
        .args(["serve", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("not inside a git repository"), "{err}");
}

//! The pre-exec steps, seen from the child they shape.

use super::*;

/// The child reads exactly the bytes put on its stdin, then EOF; over the cap the spawn fails
/// with E2BIG and nothing runs.
#[test]
fn a_request_on_stdin_reaches_the_child_and_an_oversized_one_fails_the_spawn() {
    let mut cmd = Command::new("cat");
    cmd.stdout(std::process::Stdio::piped());
    stdin_from_bytes(&mut cmd, b"request\n".to_vec(), 64);
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, b"request\n");

    let mut cmd = Command::new("cat");
    stdin_from_bytes(&mut cmd, vec![b'x'; 65], 64);
    let e = cmd.output().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::E2BIG));
}

/// The session id and pid of a shell started by `cmd`.
fn session_and_pid(mut cmd: Command) -> (String, String) {
    cmd.args(["-c", "ps -o sid= -p $$; echo $$"])
        .stdout(std::process::Stdio::piped());
    let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
    let mut nums = out.split_whitespace().map(str::to_string);
    (nums.next().unwrap(), nums.next().unwrap())
}

/// In a new session the child leads it: its session id is its own pid (and without it, the
/// control, the child is in the test's session).
#[test]
fn a_new_session_is_led_by_the_child() {
    let mut cmd = Command::new("sh");
    new_session(&mut cmd);
    let (sid, pid) = session_and_pid(cmd);
    assert_eq!(sid, pid);
    let (sid, pid) = session_and_pid(Command::new("sh"));
    assert_ne!(sid, pid);
}

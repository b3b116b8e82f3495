use super::*;

fn sleeper() -> std::process::Child {
    std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap()
}

/// `child` still runs (the watchdog left it alone); then it is stopped.
fn assert_left_alone(mut child: std::process::Child) {
    assert!(child.try_wait().unwrap().is_none(), "left alone");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn an_exchange_that_ends_in_time_leaves_its_helper_alone() {
    let child = sleeper();
    let watched = watch(child.id() as i32, Duration::from_millis(200));
    assert!(!watched.end());
    // Past the deadline the watchdog has looked again, and the helper still runs.
    std::thread::sleep(Duration::from_millis(400));
    assert_left_alone(child);
}

#[test]
fn a_watch_dropped_without_its_end_is_never_acted_on() {
    let child = sleeper();
    drop(watch(child.id() as i32, Duration::from_millis(100)));
    std::thread::sleep(Duration::from_millis(400));
    assert_left_alone(child);
}

#[test]
fn a_stuck_helper_is_killed_and_the_exchange_told_so() {
    use std::os::unix::process::ExitStatusExt;
    let started = Instant::now();
    // A helper that ignores SIGTERM: only the SIGKILL after the grace ends it.
    let mut child = std::process::Command::new("sh")
        .args(["-c", "trap '' TERM; while :; do sleep 1; done"])
        .spawn()
        .unwrap();
    // A long deadline watched first does not hide the short one after it.
    let other = sleeper();
    let long = watch(other.id() as i32, Duration::from_secs(3600));
    let watched = watch(child.id() as i32, Duration::from_millis(100));
    // The exchange is stuck past its deadline.
    std::thread::sleep(Duration::from_millis(300));
    assert!(watched.end(), "killed for missing its deadline");
    assert!(started.elapsed() >= KILL_GRACE, "after the grace");
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "ended by SIGKILL: {status:?}");
    assert!(!long.end());
    assert_left_alone(other);
}

//! `closer::close_later` closes what it is given, soon, and never lets descriptors pile up.
//! Its own test binary: it counts the process's open descriptors, which tests running beside
//! it in one process would change.

#![cfg(target_os = "linux")]

use std::fs::File;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use hunkgate_sandbox::closer::{close_later, QUEUE};

/// Open descriptors of this process (the directory listing's own is counted every time).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn dev_null() -> OwnedFd {
    File::open("/dev/null").unwrap().into()
}

#[test]
fn descriptors_given_to_the_closer_are_closed_and_never_pile_up() {
    let before = open_fds();
    // Control: descriptors held are counted.
    let held: Vec<OwnedFd> = (0..10).map(|_| dev_null()).collect();
    assert_eq!(open_fds(), before + 10);
    drop(held);
    assert_eq!(open_fds(), before);

    let mut most = before;
    for _ in 0..5_000 {
        close_later(dev_null());
        most = most.max(open_fds());
    }
    // The queue's and the one the closer is dropping.
    assert!(
        most <= before + QUEUE + 1,
        "{most} descriptors open at most, {before} before: the closer let them pile up"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    while open_fds() > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        open_fds(),
        before,
        "descriptors given to the closer were never closed"
    );
}

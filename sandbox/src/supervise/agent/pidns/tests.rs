use super::*;

#[test]
fn numbers_for_a_role_are_written_without_allocating() {
    for n in [0, 7, -1, 26, 4_194_304, libc::c_int::MAX, libc::c_int::MIN] {
        let mut buf = [0xffu8; 16];
        write_decimal(n, &mut buf);
        let text = std::ffi::CStr::from_bytes_until_nul(&buf).unwrap();
        assert_eq!(text.to_str().unwrap(), n.to_string());
    }
}

/// The scheduling policy of `pid` (field 41 of its `/proc/<pid>/stat`) once it has
/// exited and is a zombie, not yet reaped (None if it is not one within 10 s).
fn policy_as_it_exited(pid: u32) -> Option<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return fields.get(38)?.parse().ok();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    None
}

/// Once the hub has the agent's word, the leader (the hub's child) exits at idle
/// priority, as the init does; without a verdict pipe the hub waits for the leader's
/// exit, and it exits at the priority it ran at.
#[test]
fn the_leader_exits_at_idle_priority_only_once_the_hub_has_heard() {
    use std::io::Read;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    for heard in [false, true] {
        let (rx, tx): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
        let plan = if heard {
            Plan::new().with_verdict(tx.as_raw_fd())
        } else {
            Plan::new()
        };
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "exit 3"]).process_group(0);
        // SAFETY: enter_for_process_group is made for a forked child before exec.
        unsafe {
            cmd.pre_exec(move || enter_for_process_group(&plan).map(|_| ()));
        }
        let mut leader = cmd.spawn().unwrap();
        drop(tx);
        let mut word = Vec::new();
        std::fs::File::from(rx).read_to_end(&mut word).unwrap();
        if heard && word.is_empty() {
            // No namespace could be made here: no init, no word (and nothing to check).
            eprintln!("no PID namespace here; the leader's exit priority is not checked");
            let _ = leader.wait();
            return;
        }
        let policy = policy_as_it_exited(leader.id());
        assert_eq!(
            leader.wait().unwrap().code(),
            Some(3),
            "it ended like the agent"
        );
        if heard {
            assert_eq!(word, [0, 3], "the init's word: exited with 3");
            assert_eq!(policy, Some(libc::SCHED_IDLE as u32));
        } else {
            assert!(word.is_empty());
            // Positive control: the policy read is the one it ran at.
            assert_eq!(policy, Some(libc::SCHED_OTHER as u32));
        }
    }
}

#[test]
fn a_process_not_exec_d_for_a_role_goes_on() {
    // Returns (else this test would never end): only the two role words take a role.
    for args in [
        vec!["hunkgate", "serve"],
        vec!["hunkgate"],
        vec!["hunkgate", "__agent-pidns-initx", "2", "3", "4"],
    ] {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        take_role(&args);
    }
}

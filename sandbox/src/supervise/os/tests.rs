//! The safe wrappers do what they say, seen from outside the call.

use super::*;

/// The scheduling policy of the calling thread, from `/proc/thread-self/stat` (field 41).
#[cfg(target_os = "linux")]
fn policy() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The command name (field 2) may hold spaces: count from the `)` that ends it.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(41 - 3).unwrap().parse().unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn idle_priority_puts_the_calling_thread_only_at_sched_idle() {
    std::thread::spawn(|| {
        assert_eq!(
            policy(),
            nix::libc::SCHED_OTHER as u32,
            "control: a new thread"
        );
        idle_priority().unwrap();
        assert_eq!(policy(), nix::libc::SCHED_IDLE as u32);
    })
    .join()
    .unwrap();
    assert_eq!(
        policy(),
        nix::libc::SCHED_OTHER as u32,
        "the test's own thread"
    );
}

/// Whether glibc mapped the block at `ptr` on its own: the `IS_MMAPPED` bit of its chunk's
/// size field, the word before the block (a layout of glibc's malloc since its first release).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mapped_alone(ptr: *const u8) -> bool {
    // SAFETY: `ptr` is a live block from glibc's malloc; the word before it is its chunk's size.
    unsafe { ptr.cast::<usize>().sub(1).read() & 2 != 0 }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn set_malloc_moves_the_bar_for_blocks_mapped_on_their_own() {
    let mapped = |size: usize| {
        let block: Vec<u8> = Vec::with_capacity(size);
        mapped_alone(block.as_ptr())
    };
    // 40 MiB: above glibc's own highest bar (32 MiB), and more than any free block an arena
    // holds (so the block over the bar is not served from one; it is asked for first, before
    // the control frees one that size).
    let size = 40 << 20;
    assert!(set_malloc(Malloc::MmapThreshold, 1 << 20));
    assert!(mapped(size), "a block over the bar is mapped on its own");
    assert!(set_malloc(Malloc::MmapThreshold, 64 << 20));
    assert!(
        !mapped(size),
        "control: with the bar above it, the same block comes from an arena"
    );
    assert!(set_malloc(Malloc::MmapThreshold, 1 << 20));
    assert!(set_malloc(Malloc::ArenaMax, 8));
    assert_eq!(Malloc::MmapThreshold.env_var(), "MALLOC_MMAP_THRESHOLD_");
    return_freed_memory();
}

/// poll reports a pipe readable once it holds a byte, and not before (the timeout).
#[test]
fn poll_sees_a_pipe_become_readable() {
    use std::os::fd::AsRawFd;
    let (rd, wr) = nix::unistd::pipe().unwrap();
    let mut fds = [nix::libc::pollfd {
        fd: rd.as_raw_fd(),
        events: nix::libc::POLLIN,
        revents: 0,
    }];
    assert_eq!(
        poll(&mut fds, 0).unwrap(),
        0,
        "an empty pipe is not readable"
    );
    assert_eq!(fds[0].revents, 0);
    nix::unistd::write(&wr, b"x").unwrap();
    assert_eq!(poll(&mut fds, 0).unwrap(), 1);
    assert_ne!(fds[0].revents & nix::libc::POLLIN, 0);
}

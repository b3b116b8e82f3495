//! The process policy of the `hunkgate` binary: how its allocator is tuned. The system calls
//! are the sandbox crate's, behind safe functions (`hunkgate_sandbox::supervise::os`), since this
//! crate forbids `unsafe`; when to give freed memory back is decided where a run or publish ends
//! (`hunkgate_sandbox::return_freed_memory`), and which commands die on a broken pipe in
//! [`super::main`].

use hunkgate_sandbox::supervise::os::{set_malloc, Malloc};

/// Tune glibc's allocator for a process that sits in the background most of the day.
///
/// - At most two malloc arenas (unless `MALLOC_ARENA_MAX` says otherwise). glibc gives
///   threads up to eight arenas per core and keeps what each freed: the hub's short-lived
///   blocking workers (snapshots, the sandbox helper's pipes) left its RSS with 100
///   suggestions × 100 hunks at 72–75 MiB under `--isolation user`, 59 MiB with two arenas
///   (the hub benchmark). Most small allocations do not touch an arena's lock anyway: each
///   thread's own cache serves them.
/// - Blocks of [`LARGE_BLOCK`] or more are mapped on their own, and unmapped when freed
///   (unless `MALLOC_MMAP_THRESHOLD_` says otherwise). glibc's default starts there at 128 KiB
///   but raises the bar to the size of each mapped block freed, up to 32 MiB, and its trim
///   bar to twice that: after one 12 MB block was freed (a journal line read, a reply sent),
///   the next blocks of that size came from a thread's arena, whose free top
///   [`hunkgate_sandbox::return_freed_memory`] never gives back (`malloc_trim` trims only the main arena's
///   top). A hub restarted on a suggestion of 200,000 lines and asked for it kept 35–47 MiB
///   of its own memory at rest, by chance, where it now keeps 23.7 MiB every time.
pub fn tune_malloc() {
    for (tunable, value) in [(Malloc::ArenaMax, 2), (Malloc::MmapThreshold, LARGE_BLOCK)] {
        if std::env::var_os(tunable.env_var()).is_none() {
            set_malloc(tunable, value);
        }
    }
}

/// See [`tune_malloc`]: a block this large is worth its own mapping (and the page faults of
/// filling it), for it is given back the moment it is freed.
pub const LARGE_BLOCK: i32 = 1 << 20;

//! The agent side of hunkgate.
//!
//! - [`beneath`]: file access confined beneath a directory, never through a symlink — used to
//!   read the sandbox as data and to write the user's checkout.
//! - [`store`]: the checkpoint store, a bare git repository only the hub writes (gix, in-process);
//!   [`pack`] writes a batch of its blobs as one pack.
//! - [`statcache`]: stat data, git's racy rule, and the stat cache that lets a checkout
//!   snapshot read only new or changed files.
//! - [`snapshot`]: a checkout or a sandbox captured into the store as a tree; [`limits`] bounds
//!   what one read-back of a sandbox may bring in.
//! - [`sync`]: bringing a sandbox slot to a base writing only what differs, and the stat record
//!   that lets the read-back after a run read only what the agent changed; [`foreign`]: between
//!   runs a slot holds exactly its base, and whatever else an agent left there goes.
//! - [`checkout`]: the user's checkout snapshotted at the cost of what changed, under change
//!   notification (the hub keeps one [`checkout::CheckoutWatch`]).
//! - [`watch`]: change notification (inotify) for a local slot, so that the read-back and the
//!   next sync look only where something happened.
//! - [`workspace`]: the [`Sandbox`](workspace::Sandbox) interface and its same-user implementation.
//! - [`agent`]: command templates and agent processes (process groups, timeouts, cancellation);
//!   [`agent_path`] is the agent's `PATH` under user isolation, and the lookup of its program.
//! - [`tools`]: the built-in agent's file tools, run inside the sandbox as the sandbox user.
//! - [`jj`]: each run as its own jj change when the repository uses jj.
//! - [`user`]: isolation by a separate OS user — the hub's side ([`user::UserSandbox`]).
//! - [`helper`]: `hunkgate sandbox-helper`, which runs as that user and does everything that
//!   touches its sandbox; [`wire`] is the byte stream between the two.
//!
//! Modules import only downward, in the order of `LAYERS` (the `layering` test below fails on
//! any other import): `accel`, `wire`, `pack`, `watch`, `limits`, `agent_path` → `beneath` → `store` → `statcache`
//! → `snapshot`, `foreign` → `tools`, `sync`, `checkout` → `workspace` → `agent`, `jj` → `user`,
//! `helper`. So the wire contract is a leaf, the sandbox trait knows nothing of user
//! isolation, and the hub's side (`user`) and the helper never import each other.

pub mod accel;
pub mod agent;
pub mod agent_path;
pub mod beneath;
pub mod checkout;
pub mod foreign;
pub mod helper;
pub mod jj;
pub mod limits;
pub mod pack;
pub mod snapshot;
pub mod statcache;
pub mod store;
pub mod sync;
pub mod tools;
mod tree_edit;
pub mod user;
pub mod watch;
pub mod watchdog;
pub mod wire;
pub mod workspace;

pub use gix::hash::ObjectId;

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
///   [`return_freed_memory`] never gives back (`malloc_trim` trims only the main arena's
///   top). A hub restarted on a suggestion of 200,000 lines and asked for it kept 35–47 MiB
///   of its own memory at rest, by chance, where it now keeps 23.7 MiB every time.
pub fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (var, param, value) in [
        ("MALLOC_ARENA_MAX", nix::libc::M_ARENA_MAX, 2),
        (
            "MALLOC_MMAP_THRESHOLD_",
            nix::libc::M_MMAP_THRESHOLD,
            LARGE_BLOCK as i32,
        ),
    ] {
        if std::env::var_os(var).is_none() {
            // SAFETY: mallopt only sets a tunable of the allocator; the hub calls this before
            // its runtime's threads exist.
            unsafe {
                nix::libc::mallopt(param, value);
            }
        }
    }
}

/// Let a write to a closed pipe end this process quietly, as it ends `cat` or `git log`:
/// `hunkgate show … | head` must stop when `head` has read enough, not print a panic. Rust
/// ignores `SIGPIPE` so that a write fails with `EPIPE` instead, which `println!` turns into a
/// panic. Only for the commands that print and exit: the hub and the MCP server keep ignoring
/// it, since a client that hangs up must not end them.
pub fn die_on_broken_pipe() {
    // SAFETY: restoring a signal's default disposition installs no handler; it is called before
    // the runtime's threads exist.
    unsafe {
        nix::libc::signal(nix::libc::SIGPIPE, nix::libc::SIG_DFL);
    }
}

/// See [`tune_malloc`]: a block this large is worth its own mapping (and the page faults of
/// filling it), for it is given back the moment it is freed.
pub const LARGE_BLOCK: usize = 1 << 20;

/// How many threads may share one batch of work (a sandbox's `lstat`s, a walk, a publish's
/// diffs): the machine's cores, at most four (measured only on two: an `lstat` of 10,000 files
/// took half the time there). Asked once: the standard library reads the process's cgroup
/// files to answer, tens of microseconds each time, and a publish asks several times.
pub fn io_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// Run `work` on each of `items`, each on a thread of its own (scoped, so both may borrow),
/// and return the results in the items' order; a panic in one is raised again here.
pub fn on_threads<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<R> {
    let work = &work;
    std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .into_iter()
            .map(|item| scope.spawn(move || work(item)))
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// `f` on each of `items`, in as many chunks as `threads` (at most one thread per item, none
/// for fewer than two); the first error in the items' order, if any. For waits on the disk
/// that it takes better together: fsyncs on several threads, whose flushes a journaling
/// filesystem commits at once (a hundred fsyncs of 8 KB files, one after another and on eight
/// threads, took 67 and 23 ms on ext4 with a journal, 27 and 12 ms without).
pub fn try_on_threads<T: Sync, E: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Result<(), E> + Sync,
) -> Result<(), E> {
    if items.len() < 2 || threads < 2 {
        return items.iter().try_for_each(f);
    }
    let each = items.len().div_ceil(items.len().min(threads));
    on_threads(items.chunks(each).collect(), |chunk: &[T]| {
        chunk.iter().try_for_each(&f)
    })
    .into_iter()
    .collect()
}

/// At most this many threads fsync at once ([`try_on_threads`]'s callers).
pub const SYNC_THREADS: usize = 8;

/// How much work [`streamed_on_threads`] may have taken ahead of its consumer, by the items'
/// weights: a read-back's or snapshot's reads, by file size. Without a bound, threads that read
/// faster than the consumer gets through them (a pack written to a slow disk, a read-back
/// sent to a slow hub) hold every file they read, up to a read-back's byte limit.
pub const STREAM_AHEAD: usize = 16 << 20;

/// Run `work` on each of `items` on `threads` threads, and hand each result to `consume` on
/// the calling thread in the items' order, as soon as it and every one before it are done: the
/// consumer works while later items are still being worked on (a read-back's hashing or
/// sending while its files are still being read), where [`on_threads`] hands over nothing
/// until all are done. The threads take items one at a time, in order, and only while the
/// items taken and not yet consumed weigh at most `ahead` by `weight` (one at least, however
/// heavy): a slow consumer holds the threads back rather than piling results up. A `consume`
/// error stops them taking more and is returned once they are done; a panic in `work` is
/// raised again here.
pub fn streamed_on_threads<T: Send, R: Send, E>(
    items: Vec<T>,
    threads: usize,
    ahead: (usize, impl Fn(&T) -> usize + Sync),
    work: impl Fn(T) -> R + Sync,
    mut consume: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E> {
    use std::sync::{Condvar, Mutex, PoisonError};
    let (budget, weight) = ahead;
    /// What the threads and the consumer share.
    struct Flow<T, R> {
        /// The items not yet taken, in order, each with its index.
        queue: std::iter::Peekable<std::iter::Enumerate<std::vec::IntoIter<T>>>,
        /// The results not yet consumed, by index, each with its item's weight.
        results: Vec<Option<(R, usize)>>,
        /// The weight of the items taken and not yet consumed.
        in_flight: usize,
        /// How many threads are still at work.
        working: usize,
        /// Set when the consumer stops: the threads take no more.
        stop: bool,
        /// Threads waiting for room: only then does a consumed item wake anyone.
        waiting: usize,
    }
    /// Counts its thread out however it ends, so that the consumer never waits for a result
    /// that cannot come; a panic also stops the others (its item's weight stays in flight, and
    /// they could wait for room for ever), so that the consumer sees every thread gone.
    struct Leaving<'a, T, R>(&'a Mutex<Flow<T, R>>, &'a Condvar, &'a Condvar);
    impl<T, R> Drop for Leaving<'_, T, R> {
        fn drop(&mut self) {
            {
                let mut f = self.0.lock().unwrap_or_else(PoisonError::into_inner);
                f.working -= 1;
                if std::thread::panicking() {
                    f.stop = true;
                }
            }
            self.1.notify_all();
            self.2.notify_all();
        }
    }
    let count = items.len();
    let threads = threads.clamp(1, count.max(1));
    let flow = Mutex::new(Flow {
        queue: items.into_iter().enumerate().peekable(),
        results: (0..count).map(|_| None).collect(),
        in_flight: 0,
        working: threads,
        stop: false,
        waiting: 0,
    });
    // `ready`: a result came (or a thread left); `room`: the consumer took one (or stopped).
    let (ready, room) = (Condvar::new(), Condvar::new());
    let lock = || flow.lock().unwrap_or_else(PoisonError::into_inner);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let _leaving = Leaving(&flow, &ready, &room);
                    loop {
                        let (i, item, w) = {
                            let mut f = lock();
                            loop {
                                if f.stop {
                                    return;
                                }
                                let Some(w) = f.queue.peek().map(|(_, item)| weight(item)) else {
                                    return;
                                };
                                // Nothing in flight: the consumer waits for exactly this one.
                                if f.in_flight == 0 || f.in_flight.saturating_add(w) <= budget {
                                    f.in_flight += w;
                                    let (i, item) = f.queue.next().expect("peeked");
                                    break (i, item, w);
                                }
                                f.waiting += 1;
                                f = room.wait(f).unwrap_or_else(PoisonError::into_inner);
                                f.waiting -= 1;
                            }
                        };
                        let result = work(item);
                        lock().results[i] = Some((result, w));
                        ready.notify_all();
                    }
                })
            })
            .collect();
        /// Stops the threads once the consumer is done, however it ends — a panic in
        /// `consume` included: a thread waiting for room that will not come would keep the
        /// scope from ever ending.
        struct Done<'a, T, R>(&'a Mutex<Flow<T, R>>, &'a Condvar);
        impl<T, R> Drop for Done<'_, T, R> {
            fn drop(&mut self) {
                self.0.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
                self.1.notify_all();
            }
        }
        let _done = Done(&flow, &room);
        let mut outcome = Ok(());
        for i in 0..count {
            let result = {
                let mut f = lock();
                loop {
                    if let Some(taken) = f.results[i].take() {
                        break Some(taken);
                    }
                    // Every thread is gone and this result never came: one panicked.
                    if f.working == 0 {
                        break None;
                    }
                    f = ready.wait(f).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let Some((result, w)) = result else { break };
            let consumed = consume(result);
            // Only now is its weight gone: the consumer held it until here. (A wake-up is a
            // system call; most items find no thread waiting.)
            let wake = {
                let mut f = lock();
                f.in_flight -= w;
                f.waiting > 0
            };
            if wake {
                room.notify_all();
            }
            if let Err(e) = consumed {
                outcome = Err(e);
                break;
            }
        }
        drop(_done);
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
        outcome
    })
}

/// Run the calling thread (or single-threaded process) only when nothing else wants its CPU
/// (Linux's `SCHED_IDLE`); where refused or unsupported it runs as it was, and the error says
/// why. For work nobody waits for: the exits of an agent's namespace
/// init, group leader and supervisor once the hub has heard how the agent ended (tearing
/// down an address space takes a few hundred microseconds of CPU on a small machine, which
/// would otherwise be taken from the hub's publish of what the agent left, at the same
/// moment). Async-signal-safe: one system call and no allocation, so a forked child may call
/// it.
pub fn idle_priority() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let param = nix::libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for SCHED_IDLE.
        match unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &param) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// Give the allocator's free memory back to the system (glibc's `malloc_trim`). After a burst
/// that allocates in proportion to a change and frees most of it again — a publish, a run —
/// the freed blocks otherwise stay resident wherever they sit in the heap, so the hub's RSS
/// depended on which worker thread freed what: 53–73 MiB with the same 100 suggestions × 100
/// hunks in the hub benchmark. It takes 0.05–0.6 ms with that heap, on a blocking thread.
/// A no-op elsewhere than on glibc Linux.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's own arenas to the kernel, under
    // the arenas' locks; it touches no memory that is in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod streamed {
    use super::streamed_on_threads;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// No bound on the work ahead that these tests could reach.
    const ANY: (usize, fn(&usize) -> usize) = (usize::MAX, |_| 1);

    #[test]
    fn results_come_in_order_while_later_items_are_still_being_worked_on() {
        let consumed = AtomicUsize::new(0);
        let mut got = Vec::new();
        let result: Result<(), ()> = streamed_on_threads(
            (0..64).collect(),
            2,
            ANY,
            |i: usize| {
                if i == 40 {
                    // Done only once the first results were consumed: with everything handed
                    // over at the end, this waits in vain and says so.
                    let start = Instant::now();
                    while consumed.load(Ordering::SeqCst) < 8 {
                        if start.elapsed() > Duration::from_secs(10) {
                            return usize::MAX;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                i * 2
            },
            |r| {
                got.push(r);
                consumed.fetch_add(1, Ordering::SeqCst);
                Ok(())
            },
        );
        assert_eq!(result, Ok(()));
        assert_eq!(got, (0..64).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn a_slow_consumer_holds_the_threads_back_to_the_budget() {
        // Items weigh their value; the consumer is slow. What is taken and not yet consumed
        // never weighs more than the budget (one item at least); the control, without a
        // budget, runs far ahead.
        let most_ahead = |budget: usize| {
            let in_flight = AtomicUsize::new(0);
            let most = AtomicUsize::new(0);
            let mut got = Vec::new();
            streamed_on_threads(
                (0..200).map(|i| 1 + i % 7).collect(),
                4,
                (budget, |w: &usize| *w),
                |w: usize| {
                    let now = in_flight.fetch_add(w, Ordering::SeqCst) + w;
                    most.fetch_max(now, Ordering::SeqCst);
                    w
                },
                |w| {
                    std::thread::sleep(Duration::from_micros(200));
                    in_flight.fetch_sub(w, Ordering::SeqCst);
                    got.push(w);
                    Ok::<(), ()>(())
                },
            )
            .unwrap();
            assert_eq!(got, (0..200).map(|i| 1 + i % 7).collect::<Vec<_>>());
            most.load(Ordering::SeqCst)
        };
        let bounded = most_ahead(20);
        assert!(
            (7..=20).contains(&bounded),
            "{bounded} ahead with a budget of 20"
        );
        let unbounded = most_ahead(usize::MAX);
        assert!(
            unbounded > 100,
            "control: {unbounded} ahead without a budget"
        );
        // An item heavier than the whole budget still goes, alone.
        assert!(most_ahead(3) <= 7);
    }

    /// Run `f` on a thread of its own and return its panic's message: were the threads left
    /// waiting for room, it would never end, and the test fails saying `hang` after 20 s
    /// instead of hanging.
    fn panic_of(hang: &str, f: impl FnOnce() + Send + 'static) -> Result<(), Option<String>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(panic.map_err(|p| p.downcast_ref::<String>().cloned()));
        });
        rx.recv_timeout(Duration::from_secs(20)).expect(hang)
    }

    #[test]
    fn a_panic_in_the_work_with_others_waiting_for_room_is_raised_too() {
        let got = panic_of("the other threads were left waiting for room", || {
            let _ = streamed_on_threads(
                (0..50).collect(),
                3,
                (2, |_: &usize| 1),
                |i: usize| {
                    if i == 1 {
                        std::thread::sleep(Duration::from_millis(20));
                        panic!("item {i} is bad");
                    }
                    i
                },
                |_| Ok::<(), ()>(()),
            );
        });
        assert_eq!(got, Err(Some("item 1 is bad".to_string())));
    }

    #[test]
    fn a_panic_in_the_consumer_with_threads_waiting_for_room_is_raised_too() {
        let got = panic_of("the threads were left waiting for room", || {
            let _ = streamed_on_threads(
                (0..50).collect(),
                3,
                (2, |_: &usize| 1),
                |i: usize| i,
                |i| {
                    if i == 1 {
                        // The threads fill the budget and wait for room meanwhile.
                        std::thread::sleep(Duration::from_millis(20));
                        panic!("result {i} is bad");
                    }
                    Ok::<(), ()>(())
                },
            );
        });
        assert_eq!(got, Err(Some("result 1 is bad".to_string())));
    }

    #[test]
    fn a_consumer_error_stops_the_threads_taking_more() {
        let worked = AtomicUsize::new(0);
        let mut consumed = 0;
        let result = streamed_on_threads(
            (0..1000).collect(),
            2,
            ANY,
            |i: usize| {
                worked.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
                i
            },
            |i| {
                consumed += 1;
                if i == 3 {
                    Err(format!("no more after {i}"))
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(result, Err("no more after 3".to_string()));
        assert_eq!(consumed, 4);
        let worked = worked.load(Ordering::SeqCst);
        assert!((4..100).contains(&worked), "{worked} items worked on");
    }

    #[test]
    fn a_panic_in_the_work_is_raised_again_with_its_message() {
        let panic = std::panic::catch_unwind(|| {
            let _ = streamed_on_threads(
                (0..50).collect(),
                2,
                ANY,
                |i: usize| {
                    if i == 5 {
                        panic!("item {i} is bad");
                    }
                    i
                },
                |_| Ok::<(), ()>(()),
            );
        })
        .unwrap_err();
        assert_eq!(panic.downcast_ref::<String>().unwrap(), "item 5 is bad");
    }

    #[test]
    fn no_items_and_one_thread_work_too() {
        let run = |items: Vec<usize>, threads| {
            let mut got = Vec::new();
            streamed_on_threads(
                items,
                threads,
                ANY,
                |i| i + 1,
                |r| {
                    got.push(r);
                    Ok::<(), ()>(())
                },
            )
            .unwrap();
            got
        };
        assert!(run(Vec::new(), 4).is_empty());
        assert_eq!(run(vec![3, 1, 2], 1), vec![4, 2, 3]);
        assert_eq!(run(vec![3, 1, 2], 8), vec![4, 2, 3]);
    }
}

#[cfg(test)]
mod layering {
    //! Each module may import (`crate::x`) only modules of a lower layer. The layers, bottom
    //! up — a new module must be given one here:
    //!
    //! 1. `wire`: the hub↔helper contract, a leaf; `accel`, `pack`, `watch`, `watchdog`,
    //!    `limits` and `tree_edit`, leaves too;
    //! 2. `beneath`, then `store`: confined file access, the checkpoint store;
    //! 3. `statcache`, then `snapshot` and `foreign`: stat data, reading trees as data, what a
    //!    slot holds beyond its base;
    //! 4. `tools`, `sync`, `checkout`: the agent's file tools; bringing a slot to a base; the
    //!    checkout snapshotted under change notification;
    //! 5. `workspace`: the `Sandbox` trait and the same-user sandbox;
    //! 6. `agent`, `jj`: processes and jj changes in any sandbox;
    //! 7. `user`, `helper`: the two ends of user isolation, which never import each other.
    const LAYERS: &[&[&str]] = &[
        &[
            "accel",
            "wire",
            "pack",
            "watch",
            "watchdog",
            "limits",
            "tree_edit",
            "agent_path",
        ],
        &["beneath"],
        &["store"],
        &["statcache"],
        &["snapshot", "foreign"],
        &["tools", "sync", "checkout"],
        &["workspace"],
        &["agent", "jj"],
        &["user", "helper"],
    ];

    fn layer_of(module: &str) -> Option<usize> {
        LAYERS.iter().position(|l| l.contains(&module))
    }

    /// The modules named after `crate::` in `code` (comments stripped): `crate::a::b` gives
    /// `a`, `crate::{a::x, b}` gives `a` and `b`.
    pub(super) fn imports(code: &str) -> Vec<String> {
        let mut out = Vec::new();
        for line in code.lines() {
            let line = line.split("//").next().unwrap_or("");
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    let end = group.find('}').unwrap_or(group.len());
                    for item in group[..end].split(',') {
                        let name: String = item
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            out.push(name);
                        }
                    }
                } else {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.push(name);
                    }
                }
            }
        }
        out
    }

    /// Every upward or sideways import in the crate's sources, as `file -> module` lines.
    fn violations() -> Vec<String> {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut bad = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(&src)
            .expect("reading src/")
            .map(|e| e.expect("src/ entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        files.sort();
        for file in files {
            let module = file.file_stem().unwrap().to_string_lossy().into_owned();
            if module == "lib" {
                continue;
            }
            let Some(mine) = layer_of(&module) else {
                bad.push(format!(
                    "{module}: not in any layer (add it to LAYERS in lib.rs)"
                ));
                continue;
            };
            let code = std::fs::read_to_string(&file).expect("reading a module");
            for used in imports(&code) {
                if used == module {
                    continue;
                }
                match layer_of(&used) {
                    Some(theirs) if theirs < mine => {}
                    Some(_) => bad.push(format!(
                        "{module} imports {used}, which is not below it (LAYERS in lib.rs: only lower layers may be imported)"
                    )),
                    None => {}
                }
            }
        }
        bad
    }

    #[test]
    fn modules_import_only_lower_layers() {
        let bad = violations();
        assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
    }

    #[test]
    fn the_import_parser_sees_every_form() {
        // Positive control: the parser finds plain, grouped and inline paths, and skips comments.
        let code = "use crate::user::X;\nuse crate::{helper::Y, wire};\nlet a = crate::sync::f();\n// crate::agent is only mentioned\n/// [`crate::jj`]\n";
        assert_eq!(imports(code), vec!["user", "helper", "wire", "sync"]);
    }
}

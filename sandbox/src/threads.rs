//! Work shared among threads: how many may share a batch of disk work, running items each on
//! a thread of its own, in chunks, or streamed to a consumer in order under a bound on the work
//! taken ahead.

#![forbid(unsafe_code)]

use std::sync::{Condvar, Mutex, PoisonError};

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
    consume: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E> {
    let (budget, weight) = ahead;
    let count = items.len();
    let threads = threads.clamp(1, count.max(1));
    let shared = Shared {
        flow: Mutex::new(Flow {
            queue: items.into_iter().enumerate().peekable(),
            results: (0..count).map(|_| None).collect(),
            in_flight: 0,
            working: threads,
            stop: false,
            waiting: 0,
        }),
        ready: Condvar::new(),
        room: Condvar::new(),
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| shared.work_on(budget, &weight, &work)))
            .collect();
        let done = Done(&shared);
        let outcome = shared.consume_in_order(count, consume);
        drop(done);
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
        outcome
    })
}

/// What the threads of [`streamed_on_threads`] and its consumer share.
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

/// The [`Flow`] under its lock, and its two signals: `ready`, a result came (or a thread
/// left); `room`, the consumer took one (or stopped).
struct Shared<T, R> {
    flow: Mutex<Flow<T, R>>,
    ready: Condvar,
    room: Condvar,
}

impl<T, R> Shared<T, R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Flow<T, R>> {
        self.flow.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One thread's loop: take the next item while there is room for its weight, work on it,
    /// leave its result; until the queue is empty or the consumer stopped.
    fn work_on(&self, budget: usize, weight: impl Fn(&T) -> usize, work: impl Fn(T) -> R) {
        let _leaving = Leaving(self);
        while let Some((i, item, w)) = self.take(budget, &weight) {
            let result = work(item);
            self.lock().results[i] = Some((result, w));
            self.ready.notify_all();
        }
    }

    /// The next item, its index and weight, once there is room for it; none when the queue is
    /// empty or the consumer stopped.
    fn take(&self, budget: usize, weight: impl Fn(&T) -> usize) -> Option<(usize, T, usize)> {
        let mut f = self.lock();
        loop {
            if f.stop {
                return None;
            }
            let w = f.queue.peek().map(|(_, item)| weight(item))?;
            // Nothing in flight: the consumer waits for exactly this one.
            if f.in_flight == 0 || f.in_flight.saturating_add(w) <= budget {
                f.in_flight += w;
                let (i, item) = f.queue.next().expect("peeked");
                return Some((i, item, w));
            }
            f.waiting += 1;
            f = self.room.wait(f).unwrap_or_else(PoisonError::into_inner);
            f.waiting -= 1;
        }
    }

    /// The consumer's loop: each of the `count` results in order, as it comes; the first
    /// error stops it. It stops early, too, when a result never comes (a thread panicked).
    fn consume_in_order<E>(
        &self,
        count: usize,
        mut consume: impl FnMut(R) -> Result<(), E>,
    ) -> Result<(), E> {
        for i in 0..count {
            let Some((result, w)) = self.wait_for(i) else {
                break;
            };
            let consumed = consume(result);
            // Only now is its weight gone: the consumer held it until here. (A wake-up is a
            // system call; most items find no thread waiting.)
            let wake = {
                let mut f = self.lock();
                f.in_flight -= w;
                f.waiting > 0
            };
            if wake {
                self.room.notify_all();
            }
            consumed?;
        }
        Ok(())
    }

    /// Result `i` and its weight once it is there; none if every thread is gone and it never
    /// came (one panicked).
    fn wait_for(&self, i: usize) -> Option<(R, usize)> {
        let mut f = self.lock();
        loop {
            if let Some(taken) = f.results[i].take() {
                return Some(taken);
            }
            if f.working == 0 {
                return None;
            }
            f = self.ready.wait(f).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Counts its thread out however it ends, so that the consumer never waits for a result that
/// cannot come; a panic also stops the others (its item's weight stays in flight, and they
/// could wait for room for ever), so that the consumer sees every thread gone.
struct Leaving<'a, T, R>(&'a Shared<T, R>);

impl<T, R> Drop for Leaving<'_, T, R> {
    fn drop(&mut self) {
        {
            let mut f = self.0.lock();
            f.working -= 1;
            if std::thread::panicking() {
                f.stop = true;
            }
        }
        self.0.ready.notify_all();
        self.0.room.notify_all();
    }
}

/// Stops the threads once the consumer is done, however it ends — a panic in `consume`
/// included: a thread waiting for room that will not come would keep the scope from ever
/// ending.
struct Done<'a, T, R>(&'a Shared<T, R>);

impl<T, R> Drop for Done<'_, T, R> {
    fn drop(&mut self) {
        self.0.lock().stop = true;
        self.0.room.notify_all();
    }
}

#[cfg(test)]
#[path = "threads_tests.rs"]
mod tests;

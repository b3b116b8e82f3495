//! Deadlines for exchanges with helper processes, kept by one thread for all of them.
//!
//! Each exchange with a sandbox helper must end within a deadline, or the helper is killed
//! (`SIGTERM` and `SIGCONT`, then `SIGKILL` [`KILL_GRACE`] later). Watching each exchange from
//! a thread of its own cost a thread's start and join on the path of every read-back: up to
//! 0.4 ms each on a two-core virtual machine, where the whole read-back of a small change
//! takes about as long. Here a watch is an entry in a list that one thread, started at the
//! first watch, sleeps over until the earliest deadline.
//!
//! An exchange that ends asks [`Watched::end`] whether its helper was killed. Whoever comes
//! first — the exchange ending, or the deadline — decides, through one atomic phase: an
//! exchange that ended in time is never signalled afterwards, and one whose helper is being
//! killed waits until the signals are sent, so that its caller reaps the helper only then
//! (its pid cannot be another process's while it is signalled).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a stuck helper has between `SIGTERM` and `SIGKILL`.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

const RUNNING: u8 = 0;
const ENDED: u8 = 1;
const KILLING: u8 = 2;
const KILLED: u8 = 3;

/// An exchange being watched ([`watch`]).
#[must_use = "an exchange's watch says, when it ends, whether the helper was killed"]
pub struct Watched {
    phase: Arc<AtomicU8>,
}

impl Watched {
    /// The exchange is over: whether its helper was killed for missing the deadline (then
    /// only once every signal is sent).
    pub fn end(self) -> bool {
        match self
            .phase
            .compare_exchange(RUNNING, ENDED, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => false,
            Err(_) => {
                while self.phase.load(Ordering::SeqCst) != KILLED {
                    std::thread::sleep(Duration::from_millis(10));
                }
                true
            }
        }
    }
}

impl Drop for Watched {
    /// An exchange that unwinds without [`Watched::end`] is over all the same: its helper,
    /// which may be reaped by then and its pid another process's, is never signalled.
    fn drop(&mut self) {
        let _ = self
            .phase
            .compare_exchange(RUNNING, ENDED, Ordering::SeqCst, Ordering::SeqCst);
    }
}

struct Watch {
    pid: i32,
    deadline: Instant,
    phase: Arc<AtomicU8>,
}

struct Dog {
    watches: Mutex<Vec<Watch>>,
    wake: Condvar,
}

/// Watch an exchange with the helper `pid`: it is killed unless [`Watched::end`] comes
/// within `deadline`. If no thread can be started to watch (the process is out of threads),
/// the exchange goes unwatched, and that is logged.
pub fn watch(pid: i32, deadline: Duration) -> Watched {
    let phase = Arc::new(AtomicU8::new(RUNNING));
    match dog() {
        Some(dog) => {
            if let Ok(mut watches) = dog.watches.lock() {
                // The thread sleeps until the earliest deadline it knows, or for good when it
                // knows none: only then does a new one need waking it.
                let sleeping_for_good = watches.is_empty();
                watches.push(Watch {
                    pid,
                    deadline: Instant::now() + deadline,
                    phase: phase.clone(),
                });
                if sleeping_for_good {
                    dog.wake.notify_one();
                }
            }
        }
        None => tracing::warn!(
            pid,
            "no watchdog thread: this helper exchange has no deadline"
        ),
    }
    Watched { phase }
}

fn dog() -> Option<&'static Dog> {
    static DOG: OnceLock<Option<&'static Dog>> = OnceLock::new();
    *DOG.get_or_init(|| {
        let dog: &'static Dog = Box::leak(Box::new(Dog {
            watches: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("hunkgate-watchdog".into())
            .spawn(move || keep_watch(dog))
            .ok()
            .map(|_| dog)
    })
}

/// The watchdog thread: sleep until the earliest deadline (or a first watch), kill the
/// helpers of exchanges past theirs, and `SIGKILL` them [`KILL_GRACE`] later (a watch being
/// killed is kept with that time as its deadline).
fn keep_watch(dog: &Dog) {
    let mut killing: Vec<Watch> = Vec::new();
    let Ok(mut watches) = dog.watches.lock() else {
        return;
    };
    loop {
        watches.retain(|w| w.phase.load(Ordering::SeqCst) == RUNNING);
        let next = watches.iter().chain(&killing).map(|w| w.deadline).min();
        watches = match next {
            None => match dog.wake.wait(watches) {
                Ok(w) => w,
                Err(_) => return,
            },
            Some(at) => match dog
                .wake
                .wait_timeout(watches, at.saturating_duration_since(Instant::now()))
            {
                Ok((w, _)) => w,
                Err(_) => return,
            },
        };
        let now = Instant::now();
        let (due, running) = std::mem::take(&mut *watches)
            .into_iter()
            .partition(|w| w.deadline <= now);
        *watches = running;
        for mut w in due {
            let won = w
                .phase
                .compare_exchange(RUNNING, KILLING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
            if won {
                // Not reaped yet (its exchange waits for KILLED), so the pid is still the
                // helper's. SIGCONT wakes one an agent stopped; sudo relays both; SIGKILL
                // ends sudo itself.
                signal(w.pid, nix::sys::signal::Signal::SIGTERM);
                signal(w.pid, nix::sys::signal::Signal::SIGCONT);
                w.deadline = now + KILL_GRACE;
                killing.push(w);
            }
        }
        killing.retain(|w| {
            if w.deadline > now {
                return true;
            }
            signal(w.pid, nix::sys::signal::Signal::SIGKILL);
            w.phase.store(KILLED, Ordering::SeqCst);
            false
        });
    }
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
}

#[cfg(test)]
mod tests;

//! Memory given back to the system once the hub has been quiet for a moment.
//!
//! A run and a publish end by returning freed memory ([`hunkgate_sandbox::return_freed_memory`]),
//! but a review does not: a thousand decisions, or a hundred WebSocket clients that came and
//! went, leave megabytes free inside the allocator's arenas, resident until the next run —
//! which may be hours away, for a hub that sits in the background all day. And whatever read
//! objects from the checkpoint store left its packs mapped: reading a run's hundred files
//! maps in the 64 KiB around each, most of an 8 MiB pack. So each decision, each run's end,
//! each closed connection and the hub's opening (its journal read) note [`Quiet::note`], and a
//! task ([`give_back_when_quiet`]) lets go of the maps and returns freed memory once nothing
//! was noted for [`QUIET`]: never in
//! the middle of a burst of decisions, where the trim would take a millisecond of CPU (and the
//! arenas' locks) from them, and the next one maps again what it reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long nothing must happen before freed memory is given back.
pub const QUIET: Duration = Duration::from_secs(2);

/// When the hub last did something worth returning memory after.
pub struct Quiet {
    start: Instant,
    /// Milliseconds after `start` of the last [`Quiet::note`].
    last: AtomicU64,
    noted: Notify,
}

impl Default for Quiet {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
            noted: Notify::new(),
        }
    }
}

impl Quiet {
    /// Something happened (a decision, a connection closed): give memory back once it is quiet.
    pub fn note(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.noted.notify_one();
    }

    /// Wait for the next [`Quiet::note`], then until nothing more was noted for `period`;
    /// false if `stop` fired first.
    pub async fn until_quiet(&self, period: Duration, stop: &CancellationToken) -> bool {
        tokio::select! {
            _ = self.noted.notified() => {}
            _ = stop.cancelled() => return false,
        }
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let until = last + period;
            if Instant::now() >= until {
                return true;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                _ = stop.cancelled() => return false,
            }
        }
    }
}

/// Until `stop` fires: each time the hub has been quiet for [`QUIET`] after something was
/// noted, run `also` (the hub lets go of its store's pack maps there) and return freed memory
/// to the system, on a blocking thread.
pub async fn give_back_when_quiet(
    quiet: Arc<Quiet>,
    stop: CancellationToken,
    also: impl Fn() + Clone + Send + 'static,
) {
    while quiet.until_quiet(QUIET, &stop).await {
        let also = also.clone();
        let _ = tokio::task::spawn_blocking(move || {
            also();
            hunkgate_sandbox::return_freed_memory();
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quiet only once a whole period passed after the last note, however many came before;
    /// nothing noted, it waits; stopped, it says so.
    #[tokio::test(start_paused = true)]
    async fn quiet_comes_a_whole_period_after_the_last_note() {
        let quiet = Arc::new(Quiet::default());
        let stop = CancellationToken::new();
        let period = Duration::from_secs(2);
        let waiting = {
            let (quiet, stop) = (quiet.clone(), stop.clone());
            tokio::spawn(async move {
                let began = Instant::now();
                (quiet.until_quiet(period, &stop).await, began.elapsed())
            })
        };
        // Nothing noted: no end of quiet to wait for, however long it stays so.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!waiting.is_finished());
        quiet.note();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        quiet.note();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!waiting.is_finished(), "a note 1.5 s ago: not quiet yet");
        let (quieted, waited) = waiting.await.unwrap();
        assert!(quieted);
        // 10 s unnoted, then the two notes 1.5 s apart, then the period after the last.
        assert_eq!(waited.as_millis(), 10_000 + 1500 + 2000);

        let stopped = {
            let (quiet, stop) = (quiet.clone(), stop.clone());
            tokio::spawn(async move { quiet.until_quiet(period, &stop).await })
        };
        quiet.note();
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.cancel();
        assert!(!stopped.await.unwrap(), "stopped before it was quiet");
    }
}

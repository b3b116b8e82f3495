//! Closing a file's last descriptor off the calling thread.
//!
//! A rename over a file, or an unlink, frees the replaced file's inode and blocks right then
//! unless something still holds the file open; freeing them is then left to the last `close`.
//! That freeing can cost a disk request of its own: ext4 mounted with `discard` trims the
//! blocks synchronously, about 0.3 ms a file on a virtual disk, where the rename itself takes
//! 0.02 ms. [`crate::beneath::PendingWrite::put_in_place`] therefore holds the file it replaces
//! open across the rename (an `O_PATH` descriptor: it reads nothing and has no side effects)
//! and gives that descriptor to [`close_later`], so the freeing happens on the closer's thread,
//! after the caller has answered, not on a decision's acknowledgement path;
//! [`crate::beneath::Beneath::remove_file`] does the same with the file it unlinks.
//!
//! Nothing depends on when a descriptor given here is closed: only that it is, soon. The queue
//! is bounded ([`QUEUE`]): when the closer lags behind (a bulk decision replacing thousands of
//! files), the caller closes the descriptor itself, so the process never holds more than
//! [`QUEUE`] extra descriptors and cannot run out of them.

use std::os::fd::OwnedFd;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

/// At most this many descriptors wait for the closer; more are closed by their caller.
pub const QUEUE: usize = 64;

static CLOSER: OnceLock<Option<SyncSender<OwnedFd>>> = OnceLock::new();

/// Close `fd` on the closer's thread (started on first use), or right here when its queue is
/// full or the thread could not be started.
pub fn close_later(fd: OwnedFd) {
    #[cfg(test)]
    HANDED.with(|n| n.set(n.get() + 1));
    let sender = CLOSER.get_or_init(|| {
        let (tx, rx) = sync_channel::<OwnedFd>(QUEUE);
        std::thread::Builder::new()
            .name("hunkgate-close".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| tx)
    });
    match sender {
        Some(tx) => match tx.try_send(fd) {
            Ok(()) => {}
            Err(TrySendError::Full(fd) | TrySendError::Disconnected(fd)) => drop(fd),
        },
        None => drop(fd),
    }
}

#[cfg(test)]
thread_local! {
    /// How many descriptors this thread handed to [`close_later`]: how the crate's tests see
    /// that a write held the file it replaced (other tests' threads do not count).
    pub(crate) static HANDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

//! The event bus: assigns every event its `seq`, keeps recent events for replay, and fans them out
//! to every WebSocket client.
//!
//! Sequence numbers survive restarts: blocks of them are reserved in the journal before use, so a
//! restarted hub continues above anything a client may have seen.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::protocol::Event;
use crate::store::journal::{Journal, Record};

/// How many recent events a reconnecting client can replay.
pub const REPLAY_WINDOW: usize = 4096;
/// And how many bytes of them, at most: a `suggestion.ready` carries its whole suggestion (593
/// KB for 1,000 hunks), so a window bounded by count alone kept the last runs' suggestions
/// once more, for as long as the hub ran — up to 4,096 of them, however large. A client that
/// missed events no longer in the window is told its replay is incomplete and resyncs with
/// `list`/`get`, which answer from the suggestions themselves.
pub const REPLAY_BYTES: usize = 1 << 20;
const SEQ_BLOCK: u64 = 1000;

#[derive(Clone, Debug)]
pub struct Sent {
    pub seq: u64,
    /// The event as JSON, shared: every client's frame and the replay window hold this one
    /// buffer, not a copy each.
    pub json: Utf8Bytes,
}

struct Inner {
    seq: u64,
    reserved_upto: u64,
    ring: VecDeque<Sent>,
    /// The bytes of the events in `ring`.
    ring_bytes: usize,
}

impl Inner {
    /// Keep `sent` for replay, dropping the oldest events past [`REPLAY_WINDOW`] or
    /// [`REPLAY_BYTES`] (`sent` too, when it alone is larger).
    fn keep(&mut self, sent: Sent) {
        self.ring_bytes += sent.json.len();
        self.ring.push_back(sent);
        while self.ring.len() > REPLAY_WINDOW || self.ring_bytes > REPLAY_BYTES {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            self.ring_bytes -= old.json.len();
        }
    }
}

pub struct Bus {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Sent>,
    journal: Arc<Mutex<Journal>>,
}

impl Bus {
    pub fn new(journal: Arc<Mutex<Journal>>, last_reserved: u64) -> Self {
        let (tx, _) = broadcast::channel(1024);
        Self {
            inner: Mutex::new(Inner {
                seq: last_reserved,
                reserved_upto: last_reserved,
                ring: VecDeque::new(),
                ring_bytes: 0,
            }),
            tx,
            journal,
        }
    }

    /// Wait until every client connected when the events so far were sent has taken them
    /// (its connection's task has them to write), or `limit` has passed: work that can wait
    /// — a publish's housekeeping — then does not compete with sending them.
    pub async fn taken(&self, limit: std::time::Duration) {
        let until = tokio::time::Instant::now() + limit;
        while !self.tx.is_empty() && tokio::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// The seq of the newest event.
    pub fn current(&self) -> u64 {
        self.inner.lock().map(|i| i.seq).unwrap_or(0)
    }

    /// Run `f` with the highest reserved seq while no event can be numbered (journal
    /// compaction writes that mark into the new journal, so no reservation is lost).
    pub fn with_reserved<T>(&self, f: impl FnOnce(u64) -> T) -> T {
        let inner = match self.inner.lock() {
            Ok(i) => i,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(inner.reserved_upto)
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Sent> {
        self.tx.subscribe()
    }

    /// Assign the next seq and broadcast. Returns the seq.
    pub fn emit(&self, event: Event) -> u64 {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        self.emit_locked(&mut inner, event)
    }

    /// Announce `events` only once `commit` made them durable: `commit` gets the seqs the events
    /// will carry (to write them into the feedback log) and runs while no other event can be
    /// numbered, so the seqs stay in order. When `commit` fails nothing is announced, no seq
    /// is used, and the events are handed back.
    pub fn emit_durably<E>(
        &self,
        events: Vec<Event>,
        commit: impl FnOnce(&[u64]) -> Result<(), E>,
    ) -> Result<Vec<u64>, (E, Vec<Event>)> {
        let mut inner = match self.inner.lock() {
            Ok(i) => i,
            Err(poisoned) => poisoned.into_inner(),
        };
        let first = inner.seq + 1;
        let seqs: Vec<u64> = (first..first + events.len() as u64).collect();
        if let Some(last) = seqs.last() {
            // Reserved before they are written anywhere, so a restart never hands them out again.
            self.reserve(&mut inner, *last);
        }
        if let Err(e) = commit(&seqs) {
            return Err((e, events));
        }
        for ev in events {
            self.emit_locked(&mut inner, ev);
        }
        Ok(seqs)
    }

    /// Make sure seqs up to `seq` are reserved in the journal.
    fn reserve(&self, inner: &mut Inner, seq: u64) {
        if seq <= inner.reserved_upto {
            return;
        }
        let upto = seq + SEQ_BLOCK;
        // A failed reservation is logged, not fatal: events still flow, and at worst a
        // client replays from a seq that was reused after a crash and resyncs fully.
        match self.journal.lock() {
            Ok(mut j) => {
                if let Err(e) = j.append(&Record::Seq { upto }) {
                    tracing::error!(error = %e, "reserving event sequence numbers");
                }
            }
            Err(_) => tracing::error!("journal lock poisoned"),
        }
        inner.reserved_upto = upto;
    }

    /// Assign the next seq and broadcast the event `render` makes of it, already encoded
    /// (see [`crate::protocol::ReadyJson::finish`]). Returns the seq.
    pub fn emit_json(&self, render: impl FnOnce(u64) -> String) -> u64 {
        let Ok(mut inner) = self.inner.lock() else {
            return 0;
        };
        self.send_locked(&mut inner, |seq| Ok(render(seq)))
    }

    fn emit_locked(&self, inner: &mut Inner, mut event: Event) -> u64 {
        // Status and error lines carry agent output and its stderr: secret-looking strings
        // never reach a client or the replay buffer (see [`crate::model::redact`]).
        if let Event::Status { message, .. } | Event::Error { message, .. } = &mut event {
            if let std::borrow::Cow::Owned(clean) = crate::model::redact::redact(message) {
                *message = clean;
            }
        }
        self.send_locked(inner, |seq| {
            event.set_seq(seq);
            serde_json::to_string(&event)
        })
    }

    fn send_locked(
        &self,
        inner: &mut Inner,
        render: impl FnOnce(u64) -> serde_json::Result<String>,
    ) -> u64 {
        let seq = inner.seq + 1;
        self.reserve(inner, seq);
        inner.seq = seq;
        // The rendered buffer itself, not a copy; cut to its length first, as the replay
        // window keeps it (shrinking a buffer in place copies nothing).
        let json = match render(seq) {
            Ok(mut s) => {
                s.shrink_to_fit();
                Utf8Bytes::from(s)
            }
            Err(e) => {
                tracing::error!(error = %e, "serializing event");
                return seq;
            }
        };
        let sent = Sent { seq, json };
        inner.keep(sent.clone());
        // No receivers is fine: nobody is connected.
        let _ = self.tx.send(sent);
        seq
    }

    /// Events after `since`, and whether that is all of them (false: some fell out of the window
    /// or predate this hub's start, so the client should resync with `list`/`get`).
    pub fn since(&self, since: u64) -> (Vec<Sent>, bool) {
        let Ok(inner) = self.inner.lock() else {
            return (Vec::new(), false);
        };
        let oldest = inner.ring.front().map(|s| s.seq).unwrap_or(inner.seq + 1);
        let complete = since + 1 >= oldest || since >= inner.seq;
        let events = inner
            .ring
            .iter()
            .filter(|s| s.seq > since)
            .cloned()
            .collect();
        (events, complete)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bus() -> (tempfile::TempDir, Bus) {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::rewrite::<Record>(&dir.path().join("state.jsonl"), &[]).unwrap();
        (dir, Bus::new(Arc::new(Mutex::new(journal)), 0))
    }

    fn event() -> Event {
        Event::CheckpointCreated {
            seq: 0,
            checkpoint_id: "c".into(),
            suggestion_id: "s".into(),
            run_id: "r".into(),
            affected_files: vec!["a.txt".into()],
        }
    }

    /// An event of `n` bytes of JSON as the next event of `bus` (a `checkpoint.created` with
    /// one long file name).
    fn event_of(bus: &Bus, n: usize) -> Event {
        let Event::CheckpointCreated {
            seq,
            checkpoint_id,
            suggestion_id,
            run_id,
            ..
        } = event()
        else {
            unreachable!()
        };
        let bare = serde_json::to_string(&Event::CheckpointCreated {
            seq: bus.current() + 1,
            checkpoint_id: checkpoint_id.clone(),
            suggestion_id: suggestion_id.clone(),
            run_id: run_id.clone(),
            affected_files: vec![String::new()],
        })
        .unwrap()
        .len();
        Event::CheckpointCreated {
            seq,
            checkpoint_id,
            suggestion_id,
            run_id,
            affected_files: vec!["a".repeat(n - bare)],
        }
    }

    fn seqs(events: &[Sent]) -> Vec<u64> {
        events.iter().map(|s| s.seq).collect()
    }

    /// The replay window holds the newest events up to its count and its bytes; a replay from
    /// before what it holds is incomplete (the client resyncs), one from within it complete.
    #[test]
    fn replay_keeps_the_newest_events_within_its_count_and_bytes() {
        let (_dir, bus) = bus();
        // Small events: the count bounds the window (positive control for the bytes).
        for _ in 0..REPLAY_WINDOW + 10 {
            bus.emit(event());
        }
        let (all, complete) = bus.since(0);
        assert!(!complete);
        assert_eq!(all.len(), REPLAY_WINDOW);
        assert_eq!(all[0].seq, 11);
        assert!(bus.since(10).1 && !bus.since(9).1);

        // Events of a quarter of the bytes each: the last four fit, a fifth pushes out one.
        let quarter = REPLAY_BYTES / 4;
        let big: Vec<u64> = (0..5).map(|_| bus.emit(event_of(&bus, quarter))).collect();
        assert!(bus.since(0).0.iter().all(|s| s.json.len() == quarter));
        let (held, complete) = bus.since(big[0] - 1);
        assert!(!complete, "the first large event was dropped");
        assert_eq!(seqs(&held), big[1..]);
        let (held, complete) = bus.since(big[0]);
        assert!(complete);
        assert_eq!(seqs(&held), big[1..]);
        let bytes: usize = bus.since(0).0.iter().map(|s| s.json.len()).sum();
        assert_eq!(bytes, bus.inner.lock().unwrap().ring_bytes);
        assert!(bytes <= REPLAY_BYTES);

        // An event larger than the window is sent, not kept: a client that missed it resyncs,
        // one that did not misses nothing.
        let mut client = bus.subscribe();
        let huge = bus.emit(event_of(&bus, REPLAY_BYTES + 1));
        assert_eq!(client.try_recv().unwrap().seq, huge);
        let (held, complete) = bus.since(huge - 1);
        assert!(held.is_empty() && !complete);
        let (held, complete) = bus.since(huge);
        assert!(held.is_empty() && complete);
        assert_eq!(bus.inner.lock().unwrap().ring_bytes, 0);
        // And the window fills again after it.
        let next = bus.emit(event());
        assert_eq!(seqs(&bus.since(huge).0), [next]);
        assert!(bus.since(huge).1);
    }

    /// `taken` returns once every subscriber has received what was sent (and at once with
    /// none), and gives up at its limit on one that never reads.
    #[tokio::test]
    async fn taken_waits_for_every_subscriber_up_to_its_limit() {
        let (_dir, bus) = bus();
        bus.emit(event());
        bus.taken(Duration::from_secs(60)).await;

        let mut reader = bus.subscribe();
        let mut idle = bus.subscribe();
        bus.emit(event());
        assert!(!bus.tx.is_empty(), "sent, not yet received");
        let reading = tokio::spawn(async move { reader.recv().await.unwrap().seq });
        let _ = idle.recv().await.unwrap();
        bus.taken(Duration::from_secs(60)).await;
        assert!(bus.tx.is_empty(), "both received it");
        assert_eq!(reading.await.unwrap(), bus.current());

        // One that never reads holds it back only until the limit.
        bus.emit(event());
        bus.taken(Duration::from_millis(20)).await;
        assert!(
            !bus.tx.is_empty(),
            "the idle subscriber has not received it"
        );
        drop(idle);
    }
}

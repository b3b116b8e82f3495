//! Tests only, in the layer above both ends of user isolation. The kept helper's whole life,
//! both ends in this process as the same user: the hub's
//! typestate ([`Standby`]) drives the helper's side (`crate::helper::snapshot_op`, on a
//! thread) over in-memory pipes, through every transition of [`wire::standby::TABLE`]; and
//! the helper refuses every word out of turn.

use std::io::{PipeReader, PipeWriter};
use std::path::PathBuf;
use std::process::ExitCode;

use std::io::{BufReader, Write};
use std::sync::Arc;
use std::time::Duration;

use crate::helper::HelperFailure;
use crate::snapshot::ReadLimits;
use crate::store::test_support::tree;
use crate::store::Mode;
use crate::store::{FlatTree, Store};
use crate::sync::{base_refs, Synced};
use crate::user::standby::*;
use crate::wire::standby::{after, Word, TABLE};
use crate::wire::{self, Frame, PrepareReply, Request, Standing, WireError};

/// A store, a sandbox user's home (this user's), and its slot `k/0`, private to its agent.
struct Bench {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    store: Store,
}

impl Bench {
    fn new() -> Bench {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
        Bench {
            _tmp: tmp,
            home,
            store,
        }
    }

    fn slot(&self) -> PathBuf {
        self.home.join("sandboxes").join("k").join("0")
    }

    fn base(&self, files: &[(&str, &str)]) -> Arc<FlatTree> {
        let files: Vec<(&str, Mode, &str)> =
            files.iter().map(|(p, t)| (*p, Mode::File, *t)).collect();
        Arc::new(tree(&self.store, &files))
    }

    /// The slot's first sync, by the helper's `prepare` (every blob sent), as the hub
    /// remembers it.
    fn prepare(&self, base: &Arc<FlatTree>) -> Arc<Synced> {
        let mut input = Vec::new();
        wire::write_request_with(&mut input, &request(), base_refs(base), None).unwrap();
        for e in base.values() {
            let bytes = self.store.read_blob(e.oid).unwrap();
            let frame = Frame::Blob {
                oid: e.oid.to_string(),
                bytes,
            };
            wire::write_frame(&mut input, &frame).unwrap();
        }
        wire::write_frame(&mut input, &Frame::End).unwrap();
        let mut r = &input[..];
        let mut req = wire::read_request(&mut r).unwrap();
        let mut out = Vec::new();
        crate::helper::prepare(&mut req, &self.home, &mut r, &mut out).unwrap();
        let reply = wire::read_prepare_reply(&mut &out[..]).unwrap();
        remembered(base, reply)
    }

    /// A standby helper's side, serving on a thread of its own: the hub's ends of its stdin
    /// and stdout, and how it ended.
    fn helper(&self) -> (PipeWriter, PipeReader, Helper) {
        let (in_r, in_w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let home = self.home.clone();
        let ended = std::thread::spawn(move || {
            let mut input = BufReader::with_capacity(wire::STREAM_BUFFER, in_r);
            crate::helper::snapshot_op(&home, &mut input, out_w, || Ok(()))
        });
        (in_w, out_r, ended)
    }

    /// What the slot holds, read as data.
    fn look(&self, base: &FlatTree) -> FlatTree {
        crate::snapshot::snapshot_sandbox(
            &self.slot(),
            base,
            &self.store,
            u64::MAX,
            Default::default(),
        )
        .unwrap()
        .tree(base)
    }

    fn read_back(
        &self,
        standby: Standby<Watching, PipeWriter, PipeReader>,
        base: &FlatTree,
    ) -> (Vec<String>, Standby<Kept, PipeWriter, PipeReader>) {
        let mut objects = self.store.batch();
        let (back, kept) = standby
            .read_back(&mut objects, base, ReadLimits::only_file_cap(u64::MAX))
            .unwrap();
        objects.finish().unwrap();
        (back.changes.into_keys().collect(), kept)
    }
}

type Helper = std::thread::JoinHandle<Result<ExitCode, HelperFailure>>;

fn request() -> Request {
    Request {
        key: "k".into(),
        slot: 0,
        private_slot: true,
        ..Request::default()
    }
}

/// A sync's reply, checked as the hub checks a helper's, and remembered.
fn remembered(base: &Arc<FlatTree>, reply: PrepareReply) -> Arc<Synced> {
    Arc::new(Synced {
        base: base.clone(),
        record: crate::user::sandbox::checked_record(reply.record, base).unwrap(),
        tree: None,
    })
}

/// The slot's next sync, asked of `standby` (kept or idle), and the sync as the hub
/// remembers it.
fn again<S: Between>(
    bench: &Bench,
    standby: Standby<S, PipeWriter, PipeReader>,
    base: &Arc<FlatTree>,
    previous: &Synced,
) -> (Standby<Watching, PipeWriter, PipeReader>, Arc<Synced>) {
    let mut made = None;
    let watching = standby
        .again(request(), &bench.store, base, previous, |reply, _| {
            let synced = remembered(base, reply);
            made = Some(synced.clone());
            Ok(synced)
        })
        .unwrap();
    (watching, made.unwrap())
}

#[test]
fn a_kept_helper_lives_through_every_transition_of_its_table() {
    let bench = Bench::new();
    let base1 = bench.base(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
    let synced1 = bench.prepare(&base1);
    let (stdin, stdout, ended) = bench.helper();
    let mut taken: Vec<(Standing, Standing)> = Vec::new();

    // Started → Watching: told the sync is done, it watches (where there is inotify).
    let started = Standby::start(stdin, stdout, None, request());
    let (watching, watches) = started
        .synced(Duration::from_secs(60), request(), synced1.clone())
        .unwrap();
    assert_eq!(watches, cfg!(target_os = "linux"));
    assert!(Arc::ptr_eq(watching.made_for().unwrap(), &synced1));
    taken.push((Standing::Started, Standing::Watching));

    // The agent works; Watching → Kept: the go, answered with exactly what it did.
    let slot = bench.slot();
    std::fs::write(slot.join("a.txt"), "a, edited\n").unwrap();
    std::fs::create_dir(slot.join("new")).unwrap();
    std::fs::write(slot.join("new/n.txt"), "n\n").unwrap();
    let (changed, kept) = bench.read_back(watching, &base1);
    assert_eq!(changed, ["a.txt", "new/n.txt"]);
    assert!(Arc::ptr_eq(kept.made_for().unwrap(), &synced1));
    taken.push((Standing::Watching, Standing::Kept));

    // Kept → Idle: the run is over, and the helper puts the slot back to its base.
    let idle = kept.idle().unwrap();
    taken.push((Standing::Kept, Standing::Idle));

    // Idle → Watching: the next sync, to a base with a changed and a new file. The reset came
    // first (the helper hears in order): nothing of the agent's is left.
    let base2 = bench.base(&[("a.txt", "a2\n"), ("c.txt", "c\n"), ("d/b.txt", "b\n")]);
    let (watching, synced2) = again(&bench, idle, &base2, &synced1);
    assert_eq!(bench.look(&base2), *base2, "the slot holds the new base");
    assert!(!slot.join("new").exists(), "the agent's directory is gone");
    taken.push((Standing::Idle, Standing::Watching));

    // The next run: Watching → Kept again, then Kept → Watching without a word in between (a
    // sync for the checks, asked before the run is over).
    std::fs::remove_file(slot.join("c.txt")).unwrap();
    let (changed, kept) = bench.read_back(watching, &base2);
    assert_eq!(changed, ["c.txt"]);
    let base3 = bench.base(&[("a.txt", "a3\n"), ("d/b.txt", "b\n")]);
    let (watching, synced3) = again(&bench, kept, &base3, &synced2);
    assert_eq!(bench.look(&base3), *base3);
    assert!(Arc::ptr_eq(watching.made_for().unwrap(), &synced3));
    taken.push((Standing::Kept, Standing::Watching));

    // Every transition of the table was taken.
    let mut table: Vec<(Standing, Standing)> = TABLE.iter().map(|(f, _, t)| (*f, *t)).collect();
    table.sort_by_key(|(f, t)| (*f as u8, *t as u8));
    taken.sort_by_key(|(f, t)| (*f as u8, *t as u8));
    assert_eq!(taken, table);

    // Dropped, it is dismissed: its input ends and it exits quietly.
    drop(watching);
    let end = ended.join().unwrap();
    assert!(end.is_ok(), "{end:?}");
}

/// Bring a helper's side, by the wire alone, to `state`; the hub's end of its stdin, and of
/// its stdout (read up to where it waits).
fn helper_in(bench: &Bench, synced: &Synced, state: Standing) -> (PipeWriter, Helper) {
    let (mut stdin, mut stdout, ended) = bench.helper();
    let mut req = request();
    req.standby = true;
    wire::write_request(&mut stdin, &req).unwrap();
    let mut at = Standing::Started;
    while at != state {
        match at {
            Standing::Started => {
                let dirs: Vec<&str> = synced.record.dirs.iter().map(|(d, _)| d.as_str()).collect();
                wire::write_synced(&mut stdin, &dirs).unwrap();
                wire::read_watching(&mut stdout).unwrap();
                let refs = base_refs(&synced.base);
                wire::write_request_with(&mut stdin, &request(), refs, Some(&synced.record))
                    .unwrap();
                at = Standing::Watching;
            }
            Standing::Watching => {
                wire::write_go(&mut stdin, u64::MAX).unwrap();
                while wire::read_frame(&mut stdout, u64::MAX).unwrap() != Frame::End {}
                at = Standing::Kept;
            }
            Standing::Kept | Standing::Idle => {
                wire::write_idle(&mut stdin).unwrap();
                at = Standing::Idle;
            }
        }
    }
    // Its answers from here on are not read: they fit in the pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    (stdin, ended)
}

/// Every word the table does not allow in a state is refused there — the helper ends with
/// an error that names the word and the state — before it reads anything more; the control,
/// the end of input in the same state, ends it quietly.
#[test]
fn a_helper_refuses_every_word_out_of_turn() {
    let bench = Bench::new();
    let base = bench.base(&[("a.txt", "a\n"), ("d/b.txt", "b\n")]);
    let synced = bench.prepare(&base);
    let states = [
        Standing::Started,
        Standing::Watching,
        Standing::Kept,
        Standing::Idle,
    ];
    let mut refused = 0;
    for state in states {
        let (stdin, ended) = helper_in(&bench, &synced, state);
        drop(stdin);
        let end = ended.join().unwrap();
        assert!(end.is_ok(), "{state:?}: {end:?}");
        for word in Word::ALL.into_iter().filter(|w| after(state, *w).is_none()) {
            let (mut stdin, ended) = helper_in(&bench, &synced, state);
            // The word alone: were it taken, the helper would wait for its payload.
            stdin.write_all(&[word as u8]).unwrap();
            let got = ended.join().unwrap();
            let refused_here = matches!(
                &got,
                Err(HelperFailure::Wire(WireError::Malformed(m))) if m.contains(&format!("{state:?}"))
            );
            assert!(refused_here, "{word:?} in {state:?}: {got:?}");
            refused += 1;
            drop(stdin);
        }
    }
    assert_eq!(refused, states.len() * Word::ALL.len() - TABLE.len());
}

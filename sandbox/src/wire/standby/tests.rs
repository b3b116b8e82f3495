use super::super::{read_frame, read_request, write_frame, write_request, BaseEntry, EntryMode};
use super::*;
use crate::wire::tests::{same, sample_request};
use crate::wire::Frame;

/// Bytes of `word` with a well-formed payload.
fn spoken(word: Word) -> Vec<u8> {
    let mut buf = Vec::new();
    match word {
        Word::Synced => write_synced(&mut buf, &["", "src"]).unwrap(),
        Word::Go => write_go(&mut buf, 7).unwrap(),
        Word::Idle => write_idle(&mut buf).unwrap(),
        Word::Again => write_again(&mut buf, &sample_request(), std::iter::empty()).unwrap(),
    }
    buf
}

const STATES: [Standing; 4] = [
    Standing::Started,
    Standing::Watching,
    Standing::Kept,
    Standing::Idle,
];

/// Every state hears exactly the words of the table, and refuses every other before reading
/// its payload; the end of input is a dismissal in any state.
#[test]
fn a_standby_hears_only_the_words_its_state_allows() {
    let mut allowed = 0;
    for state in STATES {
        for word in Word::ALL {
            let bytes = spoken(word);
            let heard = read_word(&mut &bytes[..], state);
            match after(state, word) {
                Some(_) => {
                    allowed += 1;
                    assert_eq!(heard.unwrap().unwrap().word(), word, "{state:?}");
                }
                None => assert!(
                    matches!(heard, Err(WireError::Malformed(_))),
                    "{word:?} in {state:?}: {heard:?}"
                ),
            }
        }
        assert!(read_word(&mut &b""[..], state).unwrap().is_none());
        let unknown = read_word(&mut &b"Z"[..], state);
        assert!(
            matches!(unknown, Err(WireError::Malformed(_))),
            "{unknown:?}"
        );
    }
    assert_eq!(allowed, TABLE.len());
    // Every state but the first is entered by some word, and every state can be left.
    for state in STATES {
        assert!(
            TABLE.iter().any(|(from, _, _)| *from == state),
            "{state:?} is a dead end"
        );
        if state != Standing::Started {
            assert!(
                TABLE.iter().any(|(_, _, to)| *to == state),
                "{state:?} unreachable"
            );
        }
    }
}

/// The go signal carries the cap; cut short it is an error.
#[test]
fn a_standby_request_waits_for_the_go_signal() {
    let mut req = sample_request();
    req.standby = true;
    let mut buf = Vec::new();
    write_request(&mut buf, &req).unwrap();
    let request_len = buf.len();
    write_go(&mut buf, 12_345).unwrap();
    let mut r = &buf[..];
    let back = read_request(&mut r).unwrap();
    assert!(back.standby && same(&req, &back), "{back:?}");
    assert!(matches!(
        read_word(&mut r, Standing::Watching).unwrap(),
        Some(Heard::Go(12_345))
    ));
    assert!(read_word(&mut r, Standing::Kept).unwrap().is_none());
    assert!(matches!(
        read_word(&mut &buf[request_len..request_len + 4], Standing::Watching),
        Err(WireError::Truncated)
    ));
}

/// The synced word and the watch answer; anything else is an error, and so is no answer.
#[test]
fn a_standby_hears_the_sync_is_done_and_answers_whether_it_watches() {
    for watching in [true, false] {
        let mut buf = Vec::new();
        write_watching(&mut buf, watching).unwrap();
        assert_eq!(buf.len(), 1);
        assert_eq!(read_watching(&mut &buf[..]).unwrap(), watching);
    }
    assert!(matches!(
        read_watching(&mut &b""[..]),
        Err(WireError::Truncated)
    ));
    assert!(matches!(
        read_watching(&mut &b"G"[..]),
        Err(WireError::Malformed(_))
    ));
    let mut buf = Vec::new();
    write_synced(&mut buf, &["", "src/a b"]).unwrap();
    let Some(Heard::Synced(dirs)) = read_word(&mut &buf[..], Standing::Started).unwrap() else {
        panic!("not the synced word")
    };
    assert_eq!(dirs, ["", "src/a b"]);
    assert!(matches!(
        read_word(&mut &buf[..3], Standing::Started),
        Err(WireError::Truncated)
    ));
}

/// A kept standby is told its slot's run is over, and asked for the next sync with only the
/// base's changes, the blobs after them.
#[test]
fn a_kept_standby_hears_the_next_sync_with_only_the_changes() {
    let mut req = sample_request();
    req.removed = vec!["gone.txt".into(), "old dir/x".into()];
    let changed = [BaseRef {
        path: "src/new file.rs",
        mode: EntryMode::Executable,
        oid: &[0xab; 20],
    }];
    let mut buf = Vec::new();
    write_idle(&mut buf).unwrap();
    write_again(&mut buf, &req, changed.iter().copied()).unwrap();
    write_frame(&mut buf, &Frame::End).unwrap();
    let mut r = &buf[..];
    assert!(matches!(
        read_word(&mut r, Standing::Kept).unwrap(),
        Some(Heard::Idle)
    ));
    let Some(Heard::Again(back)) = read_word(&mut r, Standing::Idle).unwrap() else {
        panic!("not an again")
    };
    assert_eq!(back.removed, req.removed);
    assert_eq!(
        back.base,
        [BaseEntry {
            path: "src/new file.rs".into(),
            mode: EntryMode::Executable,
            oid: "ab".repeat(20),
        }]
    );
    assert_eq!(back.record, None);
    assert!(matches!(read_frame(&mut r, 0).unwrap(), Frame::End));
    assert!(read_word(&mut r, Standing::Watching).unwrap().is_none());
    assert!(matches!(
        read_word(&mut &buf[1..buf.len() / 2], Standing::Kept),
        Err(WireError::Truncated | WireError::Io(_))
    ));
}

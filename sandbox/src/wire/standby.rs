//! A standby helper's protocol: its states, the hub's one-byte words that move it from one to
//! the next ([`TABLE`]), and the helper's answers. The hub's side is a typestate
//! (`crate::user::standby`), whose transitions are the only way to send a word; the helper's
//! side reads every word through [`read_word`], which refuses one the table does not allow in
//! the state it is in (one check, in one place).
//!
//! | state | entered on | what the helper does there | leaves on |
//! |---|---|---|---|
//! | [`Standing::Started`] | a run's sync begins: a `snapshot` request with `standby` set | waits for the sync to end | `S` (synced) |
//! | [`Standing::Watching`] | `S`, with the directories the sync left; or the end of an `A` sync | watches them, answers `W`/`N` ([`write_watching`]); reads the run's request (base and sync record) while the agent works | `G` (go) |
//! | [`Standing::Kept`] | `G` and the file cap: it sends the snapshot, then an end frame | keeps watching, out of the agents' reach | `I` (idle), `A` (again) |
//! | [`Standing::Idle`] | `I`: the slot's run is over | puts the slot back to its base, every file `lstat`ed | `A` (again) |
//!
//! `A` (again) is the slot's next sync: a request whose base table holds only the paths added
//! or changed since the last sync (and [`Request::removed`] those gone), then their blobs and an
//! end frame; answered like a `prepare`, then with `W`/`N`. The end of the hub's input, in any
//! state, dismisses the helper.

use std::io::{Read, Write};

use super::{read_exact, read_header, read_request, write_header, write_request_with};
use super::{BaseRef, Request, WireError};

/// Where a standby helper is in its life (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Started as a run's sync begins; waits for it to end.
    Started,
    /// Watching the slot while the run's agent works; waits for the go.
    Watching,
    /// Its read-back sent; kept for the slot's next sync, watching on.
    Kept,
    /// Told the slot's run is over; the slot put back to its base.
    Idle,
}

/// The hub's words to a standby helper, one byte each (the payload follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Word {
    /// [`write_synced`]: the run's sync is done; the directories to watch follow.
    Synced = b'S',
    /// [`write_go`]: read the slot back; the file cap follows.
    Go = b'G',
    /// [`write_idle`]: the slot's run is over.
    Idle = b'I',
    /// [`write_again`]: sync the slot for its next run; the request and blobs follow.
    Again = b'A',
}

impl Word {
    /// Every word, for the tests that try each one in each state.
    pub const ALL: [Word; 4] = [Word::Synced, Word::Go, Word::Idle, Word::Again];

    fn from_tag(tag: u8) -> Option<Word> {
        Word::ALL.into_iter().find(|w| *w as u8 == tag)
    }
}

/// The standby's protocol: in a state, the word it may hear, and the state that word leads
/// to. Nothing else may be heard; the end of input may come in any state.
pub const TABLE: &[(Standing, Word, Standing)] = &[
    (Standing::Started, Word::Synced, Standing::Watching),
    (Standing::Watching, Word::Go, Standing::Kept),
    (Standing::Kept, Word::Idle, Standing::Idle),
    (Standing::Kept, Word::Again, Standing::Watching),
    (Standing::Idle, Word::Again, Standing::Watching),
];

/// The state `word` leads to from `state`, if [`TABLE`] allows it there.
pub fn after(state: Standing, word: Word) -> Option<Standing> {
    TABLE
        .iter()
        .find(|(from, w, _)| *from == state && *w == word)
        .map(|(_, _, to)| *to)
}

/// A word a standby heard, with its payload.
#[derive(Debug)]
pub enum Heard {
    /// The directories the run's sync left, to watch (relative, `""` the slot itself).
    Synced(Vec<String>),
    /// The file cap of the read-back.
    Go(u64),
    Idle,
    /// The next sync's request (its base: only the changes); the blobs follow it.
    Again(Box<Request>),
}

impl Heard {
    pub fn word(&self) -> Word {
        match self {
            Heard::Synced(_) => Word::Synced,
            Heard::Go(_) => Word::Go,
            Heard::Idle => Word::Idle,
            Heard::Again(_) => Word::Again,
        }
    }
}

/// The helper's side: wait for the hub's next word in `state`, and read its payload. None when
/// the input ended first (the hub dismissed it); a word [`TABLE`] does not allow in `state` is
/// refused before its payload is read.
pub fn read_word(r: &mut impl Read, state: Standing) -> Result<Option<Heard>, WireError> {
    let mut tag = [0u8; 1];
    loop {
        match r.read(&mut tag) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let allowed = Word::from_tag(tag[0]).filter(|w| after(state, *w).is_some());
    let Some(word) = allowed else {
        return Err(WireError::Malformed(format!(
            "word {:?} to a standby helper that is {state:?}",
            char::from(tag[0])
        )));
    };
    Ok(Some(match word {
        Word::Synced => Heard::Synced(read_header(r)?),
        Word::Go => {
            let mut cap = [0u8; 8];
            read_exact(r, &mut cap)?;
            Heard::Go(u64::from_be_bytes(cap))
        }
        Word::Idle => Heard::Idle,
        Word::Again => Heard::Again(Box::new(read_request(r)?)),
    }))
}

/// The run's sync is done: `S`, then a JSON header naming the directories the sync left
/// (relative, `""` the slot itself), to be watched from now on.
pub fn write_synced(w: &mut impl Write, dirs: &[&str]) -> std::io::Result<()> {
    w.write_all(&[Word::Synced as u8])?;
    write_header(w, &dirs)?;
    w.flush()
}

/// The go signal: `G`, then the file cap as a big-endian `u64`.
pub fn write_go(w: &mut impl Write, cap: u64) -> std::io::Result<()> {
    w.write_all(&[Word::Go as u8])?;
    w.write_all(&cap.to_be_bytes())?;
    w.flush()
}

/// The slot's run is over: `I`. Nothing runs in the slot until its next sync, and the helper
/// may put it back to its base meanwhile. (Until then the agent may still be at work: a
/// read-back also answers a publish made while the agent runs.)
pub fn write_idle(w: &mut impl Write) -> std::io::Result<()> {
    w.write_all(&[Word::Idle as u8])?;
    w.flush()
}

/// Sync the slot again, for the next run: `A`, then a request whose base table holds only the
/// paths added or changed since the slot's last sync (and [`Request::removed`] those gone);
/// the caller then writes the blobs the helper may lack as
/// [`Frame::Blob`](super::Frame::Blob)s and an end frame. The helper answers as a `prepare`
/// does ([`super::write_prepare_reply`]), then with [`write_watching`].
pub fn write_again<'a>(
    w: &mut impl Write,
    req: &Request,
    changed: impl ExactSizeIterator<Item = BaseRef<'a>>,
) -> std::io::Result<()> {
    w.write_all(&[Word::Again as u8])?;
    write_request_with(w, req, changed, None)
}

const TAG_WATCHING: u8 = b'W';
const TAG_NOT_WATCHING: u8 = b'N';

/// A standby helper's answer on entering [`Standing::Watching`]: whether it watches the slot
/// (`W`) or not (`N`: no change notification, or nothing to watch).
pub fn write_watching(w: &mut impl Write, watching: bool) -> std::io::Result<()> {
    w.write_all(&[if watching {
        TAG_WATCHING
    } else {
        TAG_NOT_WATCHING
    }])?;
    w.flush()
}

/// Read [`write_watching`]'s answer.
pub fn read_watching(r: &mut impl Read) -> Result<bool, WireError> {
    let mut tag = [0u8; 1];
    read_exact(r, &mut tag)?;
    match tag[0] {
        TAG_WATCHING => Ok(true),
        TAG_NOT_WATCHING => Ok(false),
        other => Err(WireError::Malformed(format!("watch answer {other}"))),
    }
}

#[cfg(test)]
mod tests;

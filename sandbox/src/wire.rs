//! The byte stream between the hub and the sandbox helper: the whole contract between
//! [`crate::user`] (the hub's side) and [`crate::helper`] (the sandbox user's side).
//!
//! **Layer: the leaf.** This module imports nothing of the crate (the layering test in
//! `lib.rs` checks it): both sides build on it, neither on the other.
//!
//! A request is one length-prefixed JSON header, then a table block (`u32` length, then the
//! bytes) holding two tables: the base (`u32` count, then
//! per path `mode: u8` (`f`, `x` or `l`), the blob id as `u8` length + hex, the path as `u32`
//! length + bytes) and the sync record (`u8` 0 = none, or 1, the stamp as `i64` seconds + `u32`
//! nanoseconds, then two stat tables — the files', then the directories' ([`SyncRecord::dirs`]) —
//! each a `u32` count, then per path the path as above and the seven [`FileStat`]
//! fields: `i64, u32, i64, u32, u64, u64, u32`), all big-endian; a `prepare` answer is a JSON
//! header and a table block with a record table. A block must end exactly where its tables
//! do. The tables carry 10,000 paths in a tenth of the time JSON takes
//! to write and read. Files follow as frames of
//! `tag, path (u32 length + bytes), payload (u64 length + bytes)`, closed by an end frame. The
//! end frame matters: a stream cut short (the helper crashed or was killed) must read as an
//! error, never as a snapshot in which every file after the cut was deleted.
//!
//! A `snapshot` request with `standby` set starts a *standby* helper, kept for the slot
//! from run to run: its states and the one-byte words that move it on are a table,
//! [`standby::TABLE`], beside these frames ([`standby`]).
//!
//! The hub reads what the helper writes as hostile data: the helper runs as the sandbox user,
//! which the agent controls. Every length is checked against a limit before anything is
//! allocated, and paths are validated by the caller with [`crate::beneath::components`].

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

pub mod standby;
pub use standby::{
    read_watching, read_word, write_again, write_go, write_idle, write_synced, write_watching,
    Heard, Standing, Word,
};

/// Processes the sandbox user may have at once (RLIMIT_NPROC): enough for compilers and test
/// runners, not for a fork bomb to take the machine down.
pub const AGENT_NPROC: u64 = 4096;

/// What the hub asks of the helper (the header on its stdin).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Which repository's sandboxes (a plain name chosen by the hub).
    pub key: String,
    pub slot: u64,
    /// `snapshot`: files larger than this are reported as skipped.
    #[serde(default)]
    pub cap: u64,
    /// `prepare` and `snapshot`: the run's base, path by path (read back even when ignored,
    /// since they are tracked). `prepare` receives the blobs the helper may lack as
    /// [`Frame::Blob`]s after the request. Not in the JSON header: a table after it (see
    /// [`write_request`]).
    #[serde(skip)]
    pub base: Vec<BaseEntry>,
    /// `prepare` and `snapshot`: what the last `prepare` of this slot reported (see
    /// [`SyncRecord`]); None makes the helper compare every file by content. A table after
    /// the header, like `base`.
    #[serde(skip)]
    pub record: Option<SyncRecord>,
    /// `snapshot`: a read-back made ready ahead of time. After the request the helper waits
    /// for [`write_go`]'s go signal (which carries the file cap), and reads the sandbox only
    /// then; end of input instead ends it quietly, having read nothing.
    #[serde(default)]
    pub standby: bool,
    /// `again` (see [`write_again`]): the base paths gone since the slot's last sync; `base`
    /// then holds only the paths added or changed since.
    #[serde(default)]
    pub removed: Vec<String>,
    /// `exec`: the agent's argv and its whole environment.
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// `exec`: directories of the hub's `PATH` that the helper appends to the agent's `PATH`
    /// (in `env`) when the sandbox user can search them (see [`crate::agent_path`]).
    #[serde(default)]
    pub path_if_searchable: Vec<String>,
    /// `exec`: the run's timeout; the helper enforces it (plus a grace) even if the hub hangs.
    #[serde(default)]
    pub timeout_ms: u64,
    /// `exec`: the agent gets a network namespace of its own (only loopback, down).
    #[serde(default)]
    pub network_none: bool,
    /// `exec`: a root hub already entered fresh PID (and network) namespaces for us.
    #[serde(default)]
    pub namespaces_ready: bool,
    /// `exec`: RLIMIT_NPROC for the agent.
    #[serde(default)]
    pub nproc: u64,
    /// `exec`: do not put the agent in a PID namespace (the fallback machines without user
    /// namespaces get; `HUNKGATE_SANDBOX_PIDNS=off` in the hub's environment forces it).
    #[serde(default)]
    pub no_pid_namespace: bool,
    /// `exec`: make the PID namespace here (user + PID + mount) and mount a private `/proc`
    /// in it, or fail: other runs' agents, and their tokens, must stay out of sight.
    #[serde(default)]
    pub private_proc: bool,
    /// Every request: the slot is private to its run's agent. The agent runs in a mount
    /// namespace that shows it no other slot (`exec`, with `private_proc`), and the slot's base
    /// objects are kept beside it, where the agent can only read them, and borrowed by its
    /// `.git`; its own objects are dropped at every sync. Without it, nothing of a slot's
    /// `.git` outlives a sync, so `prepare` must be sent every blob of the base, and a helper
    /// is not kept for the slot's next sync (see [`crate::helper`]).
    #[serde(default)]
    pub private_slot: bool,
    /// `exec`: stdin stays open as the hub's lifeline, and its EOF stops the agent. Without it
    /// (short commands), stdin is ignored after the request.
    #[serde(default)]
    pub lifeline: bool,
    /// `exec`, with `lifeline`: stdin is a socket of the hub's. Once the agent has exited and
    /// nothing it started is left, its PID namespace's init answers there with the agent's wait
    /// status (two bytes: `[0, code]` or `[1, signal]`), and the hub need not wait for the
    /// init, the helper and sudo to exit before it knows the run is over.
    #[serde(default)]
    pub verdict: bool,
    /// `exec`, with `lifeline`: the bytes that follow the request on the lifeline are the
    /// agent's stdin (an agent spoken to over its stdio, such as an ACP agent). The helper
    /// relays them to a pipe that is the agent's fd 0; the lifeline's EOF still stops the tree.
    /// Without it the agent's stdin is `/dev/null`.
    #[serde(default)]
    pub stdio: bool,
}

/// How a base path is stored (the wire's copy of the store's mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryMode {
    File,
    Executable,
    Symlink,
}

/// One path of a run's base: its mode and blob id (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseEntry {
    pub path: String,
    pub mode: EntryMode,
    pub oid: String,
}

/// What `lstat` said about a path, as far as change detection goes (git's index fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    pub mtime_s: i64,
    pub mtime_ns: u32,
    pub ctime_s: i64,
    pub ctime_ns: u32,
    pub size: u64,
    pub ino: u64,
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
}

/// What a sync left in a sandbox slot: the stat of every base path right after it was
/// written, and the sync's own timestamp (the mtime of the sandbox's fresh `.git/index`,
/// written after every file). A path whose stat still matches, and whose mtime and ctime are
/// strictly older than `stamp`, still holds what the sync wrote; any other is compared by
/// content (git's racy-timestamp rule: a write in the same clock tick as the sync could keep
/// every stat field).
///
/// `dirs` is the stat of every directory a read-back would enter (`""` is the slot itself),
/// taken after the sync (git's untracked cache): a directory whose stat still matches, and is
/// not racy, has the same entries as then — only base files and ignored ones, since the sync
/// removed everything else — so a read-back looking for new files need not read it. Empty
/// when the sync could not vouch for every directory (then every directory is read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    pub stamp_s: i64,
    pub stamp_ns: u32,
    pub files: Vec<(String, FileStat)>,
    #[serde(default)]
    pub dirs: Vec<(String, FileStat)>,
}

impl SyncRecord {
    /// The most directories a record of a `base_paths`-path base holds: a sync records none
    /// beyond it, and the hub refuses a record with more.
    pub fn max_dirs(base_paths: usize) -> usize {
        base_paths.saturating_mul(2) + 4096
    }
}

/// The helper's answer to `prepare`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrepareReply {
    /// A table after the header (see [`write_prepare_reply`]).
    #[serde(skip)]
    pub record: SyncRecord,
    /// Files written (the rest already held the base).
    pub written: u64,
    /// `again`: the slot had been put back to its base while idle since the read-back, so
    /// this sync looked only where the helper's watch saw something since (and at the paths
    /// whose base entry changed).
    #[serde(default)]
    pub after_reset: bool,
}

/// Largest request header accepted (argv, environment and the base's path list).
pub const MAX_HEADER: u64 = 64 * 1024 * 1024;
/// Longest path accepted in a frame (Linux's PATH_MAX).
pub const MAX_PATH: u64 = 4096;
/// Longest skip reason accepted in a frame.
pub const MAX_REASON: u64 = 4096;
/// The buffer on each side of a bulk stream — a sync's blobs to the helper, a read-back's
/// frames from it (each side's pipe widened to match: `user::widen_pipe`). A read-back of a
/// hundred changed files is about a megabyte, which 8 KiB buffers cut into hundreds of
/// `read`s and `write`s, each a switch between the two processes; and the hub starts on the
/// first frames while the helper still reads the files after them.
pub const STREAM_BUFFER: usize = 64 << 10;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the sandbox helper's stream ended early (did the helper crash? its stderr says why)")]
    Truncated,
    #[error("the sandbox helper's stream is malformed: {0}")]
    Malformed(String),
    #[error("the sandbox helper sent {what} of {len} bytes, over the {max} byte limit")]
    TooLong {
        what: &'static str,
        len: u64,
        max: u64,
    },
    #[error("the sandbox helper's stream: {0}")]
    Io(#[from] std::io::Error),
}

/// What a frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    File {
        path: String,
        bytes: Vec<u8>,
        executable: bool,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    /// Left out of a snapshot, with the reason (FIFO, too large, ...).
    Skipped {
        path: String,
        reason: String,
    },
    /// A snapshot path that still holds exactly its base entry (the helper checked its stat
    /// against the sync record, or its content against the base blob). The helper no longer
    /// sends these — a base path it says nothing about is unchanged — but the hub still takes
    /// them, from the helper of an older binary.
    Unchanged {
        path: String,
    },
    /// A snapshot's base path that the sandbox no longer has as a file or symlink (deleted,
    /// or a directory now).
    Gone {
        path: String,
    },
    /// `prepare`: a blob of the base, by id (hex, in the path field), for the helper to store.
    Blob {
        oid: String,
        bytes: Vec<u8>,
    },
    End,
}

const TAG_FILE: u8 = b'F';
const TAG_EXEC: u8 = b'X';
const TAG_LINK: u8 = b'L';
const TAG_SKIP: u8 = b'S';
const TAG_SAME: u8 = b'U';
const TAG_GONE: u8 = b'D';
const TAG_BLOB: u8 = b'B';
const TAG_END: u8 = b'E';

pub fn write_header<T: serde::Serialize>(w: &mut impl Write, header: &T) -> std::io::Result<()> {
    let json = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    write_block(w, &json)
}

pub fn read_header<T: serde::de::DeserializeOwned>(r: &mut impl Read) -> Result<T, WireError> {
    let bytes = read_block(r, "a header")?;
    serde_json::from_slice(&bytes).map_err(|e| WireError::Malformed(format!("header: {e}")))
}

/// A block of bytes after its `u32` length, refused over [`MAX_HEADER`] before it is read.
fn read_block(r: &mut impl Read, what: &'static str) -> Result<Vec<u8>, WireError> {
    let mut len = [0u8; 4];
    read_exact(r, &mut len)?;
    let len = u32::from_be_bytes(len) as u64;
    if len > MAX_HEADER {
        return Err(WireError::TooLong {
            what,
            len,
            max: MAX_HEADER,
        });
    }
    read_bytes(r, len)
}

/// `bytes` after their `u32` length.
fn write_block(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(bytes)
}

/// Write a request: its JSON header, then its base and record tables (see the module docs),
/// as one block that is read whole and parsed in memory.
pub fn write_request(w: &mut impl Write, req: &Request) -> std::io::Result<()> {
    write_header(w, req)?;
    let mut table = Vec::new();
    write_base(&mut table, &req.base)?;
    write_record(&mut table, req.record.as_ref())?;
    write_block(w, &table)
}

/// One base path, borrowed, as [`write_request_with`] takes it: the blob id as raw bytes
/// (written as hex, as [`BaseEntry::oid`] is).
#[derive(Debug, Clone, Copy)]
pub struct BaseRef<'a> {
    pub path: &'a str,
    pub mode: EntryMode,
    pub oid: &'a [u8],
}

/// [`write_request`] with the base and the record borrowed from the caller (those in `req` are
/// not written): the same bytes, without a copy of a 10,000-path base and its record.
pub fn write_request_with<'a>(
    w: &mut impl Write,
    req: &Request,
    base: impl ExactSizeIterator<Item = BaseRef<'a>>,
    record: Option<&SyncRecord>,
) -> std::io::Result<()> {
    write_header(w, req)?;
    let mut table = Vec::new();
    let count = u32::try_from(base.len()).map_err(std::io::Error::other)?;
    table.extend_from_slice(&count.to_be_bytes());
    for e in base {
        let oid_len = u8::try_from(e.oid.len() * 2).map_err(std::io::Error::other)?;
        table.extend_from_slice(&[mode_byte(e.mode), oid_len]);
        for b in e.oid {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            table.extend_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
        write_path(&mut table, e.path)?;
    }
    write_record(&mut table, record)?;
    write_block(w, &table)
}

fn mode_byte(mode: EntryMode) -> u8 {
    match mode {
        EntryMode::File => b'f',
        EntryMode::Executable => b'x',
        EntryMode::Symlink => b'l',
    }
}

/// Read a request written by [`write_request`].
pub fn read_request(r: &mut impl Read) -> Result<Request, WireError> {
    let mut req: Request = read_header(r)?;
    let table = read_block(r, "a table")?;
    let mut t = table.as_slice();
    req.base = read_base(&mut t)?;
    req.record = read_record(&mut t)?;
    table_end(t)?;
    Ok(req)
}

/// Write the helper's answer to `prepare`: its JSON header, then the record table.
pub fn write_prepare_reply(w: &mut impl Write, reply: &PrepareReply) -> std::io::Result<()> {
    write_header(w, reply)?;
    let mut table = Vec::new();
    write_record(&mut table, Some(&reply.record))?;
    write_block(w, &table)
}

/// Read the helper's answer to `prepare` (hostile data: the table's length is checked against
/// [`MAX_HEADER`] before it is read, and every count and length inside against what is left).
pub fn read_prepare_reply(r: &mut impl Read) -> Result<PrepareReply, WireError> {
    let mut reply: PrepareReply = read_header(r)?;
    let table = read_block(r, "a table")?;
    let mut t = table.as_slice();
    reply.record = read_record(&mut t)?
        .ok_or_else(|| WireError::Malformed("the prepare answer has no sync record".into()))?;
    table_end(t)?;
    Ok(reply)
}

fn table_end(rest: &[u8]) -> Result<(), WireError> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(WireError::Malformed(format!(
            "{} bytes after the tables",
            rest.len()
        )))
    }
}

fn write_base(w: &mut Vec<u8>, base: &[BaseEntry]) -> std::io::Result<()> {
    let count = u32::try_from(base.len()).map_err(std::io::Error::other)?;
    w.extend_from_slice(&count.to_be_bytes());
    for e in base {
        let oid_len = u8::try_from(e.oid.len()).map_err(std::io::Error::other)?;
        w.extend_from_slice(&[mode_byte(e.mode), oid_len]);
        w.extend_from_slice(e.oid.as_bytes());
        write_path(w, &e.path)?;
    }
    Ok(())
}

fn write_record(w: &mut Vec<u8>, record: Option<&SyncRecord>) -> std::io::Result<()> {
    let Some(rec) = record else {
        w.push(0);
        return Ok(());
    };
    w.push(1);
    w.extend_from_slice(&rec.stamp_s.to_be_bytes());
    w.extend_from_slice(&rec.stamp_ns.to_be_bytes());
    write_stats(w, &rec.files)?;
    write_stats(w, &rec.dirs)
}

/// A count, then each path with its stat.
fn write_stats(w: &mut Vec<u8>, stats: &[(String, FileStat)]) -> std::io::Result<()> {
    let count = u32::try_from(stats.len()).map_err(std::io::Error::other)?;
    w.extend_from_slice(&count.to_be_bytes());
    for (path, st) in stats {
        write_path(w, path)?;
        w.extend_from_slice(&st.mtime_s.to_be_bytes());
        w.extend_from_slice(&st.mtime_ns.to_be_bytes());
        w.extend_from_slice(&st.ctime_s.to_be_bytes());
        w.extend_from_slice(&st.ctime_ns.to_be_bytes());
        w.extend_from_slice(&st.size.to_be_bytes());
        w.extend_from_slice(&st.ino.to_be_bytes());
        w.extend_from_slice(&st.mode.to_be_bytes());
    }
    Ok(())
}

fn write_path(w: &mut Vec<u8>, path: &str) -> std::io::Result<()> {
    let len = u32::try_from(path.len()).map_err(std::io::Error::other)?;
    w.extend_from_slice(&len.to_be_bytes());
    w.extend_from_slice(path.as_bytes());
    Ok(())
}

/// The next `n` bytes of a table.
fn take<'a>(t: &mut &'a [u8], n: usize) -> Result<&'a [u8], WireError> {
    if t.len() < n {
        return Err(WireError::Truncated);
    }
    let (head, rest) = t.split_at(n);
    *t = rest;
    Ok(head)
}

fn take_array<const N: usize>(t: &mut &[u8]) -> Result<[u8; N], WireError> {
    let mut out = [0u8; N];
    out.copy_from_slice(take(t, N)?);
    Ok(out)
}

fn take_path(t: &mut &[u8]) -> Result<String, WireError> {
    let len = u32::from_be_bytes(take_array(t)?) as u64;
    if len > MAX_PATH {
        return Err(WireError::TooLong {
            what: "a path",
            len,
            max: MAX_PATH,
        });
    }
    std::str::from_utf8(take(t, len as usize)?)
        .map(str::to_string)
        .map_err(|_| WireError::Malformed("a path is not UTF-8".into()))
}

/// Room for the entries a table announces, no more than what is left of it could hold (a
/// count is never trusted for an allocation).
fn capacity(count: u32, left: usize, smallest: usize) -> usize {
    (count as usize).min(left / smallest)
}

fn read_base(t: &mut &[u8]) -> Result<Vec<BaseEntry>, WireError> {
    let count = u32::from_be_bytes(take_array(t)?);
    let mut out = Vec::with_capacity(capacity(count, t.len(), 6));
    for _ in 0..count {
        let [mode, oid_len] = take_array(t)?;
        let mode = match mode {
            b'f' => EntryMode::File,
            b'x' => EntryMode::Executable,
            b'l' => EntryMode::Symlink,
            other => return Err(WireError::Malformed(format!("unknown entry mode {other}"))),
        };
        let oid = take(t, oid_len as usize)?;
        if !oid.iter().all(u8::is_ascii_hexdigit) {
            return Err(WireError::Malformed("a blob id is not hex".into()));
        }
        // Hex digits are ASCII: no lossy decoding (which walked the bytes in chunks, 10,000
        // times a request).
        let oid = String::from_utf8(oid.to_vec())
            .map_err(|_| WireError::Malformed("a blob id is not hex".into()))?;
        let path = take_path(t)?;
        out.push(BaseEntry { path, mode, oid });
    }
    Ok(out)
}

fn read_record(t: &mut &[u8]) -> Result<Option<SyncRecord>, WireError> {
    match take_array::<1>(t)? {
        [0] => return Ok(None),
        [1] => {}
        [other] => return Err(WireError::Malformed(format!("record marker {other}"))),
    }
    let stamp_s = i64::from_be_bytes(take_array(t)?);
    let stamp_ns = u32::from_be_bytes(take_array(t)?);
    let files = read_stats(t)?;
    let dirs = read_stats(t)?;
    Ok(Some(SyncRecord {
        stamp_s,
        stamp_ns,
        files,
        dirs,
    }))
}

/// What [`write_stats`] wrote.
fn read_stats(t: &mut &[u8]) -> Result<Vec<(String, FileStat)>, WireError> {
    let count = u32::from_be_bytes(take_array(t)?);
    let mut out = Vec::with_capacity(capacity(count, t.len(), 48));
    for _ in 0..count {
        let path = take_path(t)?;
        let st = FileStat {
            mtime_s: i64::from_be_bytes(take_array(t)?),
            mtime_ns: u32::from_be_bytes(take_array(t)?),
            ctime_s: i64::from_be_bytes(take_array(t)?),
            ctime_ns: u32::from_be_bytes(take_array(t)?),
            size: u64::from_be_bytes(take_array(t)?),
            ino: u64::from_be_bytes(take_array(t)?),
            mode: u32::from_be_bytes(take_array(t)?),
        };
        out.push((path, st));
    }
    Ok(out)
}

pub fn write_frame(w: &mut impl Write, frame: &Frame) -> std::io::Result<()> {
    let (tag, path, payload): (u8, &str, &[u8]) = match frame {
        Frame::File {
            path,
            bytes,
            executable,
        } => (if *executable { TAG_EXEC } else { TAG_FILE }, path, bytes),
        Frame::Symlink { path, target } => (TAG_LINK, path, target),
        Frame::Skipped { path, reason } => (TAG_SKIP, path, reason.as_bytes()),
        Frame::Unchanged { path } => (TAG_SAME, path, &[]),
        Frame::Gone { path } => (TAG_GONE, path, &[]),
        Frame::Blob { oid, bytes } => (TAG_BLOB, oid, bytes),
        Frame::End => (TAG_END, "", &[]),
    };
    write_raw(w, tag, path, payload)
}

fn write_raw(w: &mut impl Write, tag: u8, path: &str, payload: &[u8]) -> std::io::Result<()> {
    w.write_all(&[tag])?;
    w.write_all(&(path.len() as u32).to_be_bytes())?;
    w.write_all(path.as_bytes())?;
    w.write_all(&(payload.len() as u64).to_be_bytes())?;
    w.write_all(payload)
}

/// Read one frame; file and symlink payloads larger than `max_payload` are an error (the
/// honest helper never sends one: it reports such files as skipped).
pub fn read_frame(r: &mut impl Read, max_payload: u64) -> Result<Frame, WireError> {
    let mut tag = [0u8; 1];
    read_exact(r, &mut tag)?;
    let mut len = [0u8; 4];
    read_exact(r, &mut len)?;
    let path_len = u32::from_be_bytes(len) as u64;
    if path_len > MAX_PATH {
        return Err(WireError::TooLong {
            what: "a path",
            len: path_len,
            max: MAX_PATH,
        });
    }
    let path = String::from_utf8(read_bytes(r, path_len)?)
        .map_err(|_| WireError::Malformed("a path is not UTF-8".into()))?;
    let mut len = [0u8; 8];
    read_exact(r, &mut len)?;
    let payload_len = u64::from_be_bytes(len);
    let max = match tag[0] {
        TAG_SKIP => MAX_REASON,
        TAG_SAME | TAG_GONE | TAG_END => 0,
        _ => max_payload,
    };
    if payload_len > max {
        return Err(WireError::TooLong {
            what: "a file",
            len: payload_len,
            max,
        });
    }
    let payload = read_bytes(r, payload_len)?;
    Ok(match tag[0] {
        TAG_FILE | TAG_EXEC => Frame::File {
            path,
            bytes: payload,
            executable: tag[0] == TAG_EXEC,
        },
        TAG_LINK => Frame::Symlink {
            path,
            target: payload,
        },
        TAG_SKIP => Frame::Skipped {
            path,
            reason: String::from_utf8_lossy(&payload).into_owned(),
        },
        TAG_SAME => Frame::Unchanged { path },
        TAG_GONE => Frame::Gone { path },
        TAG_BLOB => Frame::Blob {
            oid: path,
            bytes: payload,
        },
        TAG_END if path.is_empty() => Frame::End,
        other => return Err(WireError::Malformed(format!("unknown frame tag {other}"))),
    })
}

fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<(), WireError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            WireError::Truncated
        } else {
            WireError::Io(e)
        }
    })
}

/// Read exactly `len` bytes without trusting `len` for the allocation up front.
fn read_bytes(r: &mut impl Read, len: u64) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(len.min(1 << 20) as usize);
    let got = r.take(len).read_to_end(&mut out)?;
    if got as u64 != len {
        return Err(WireError::Truncated);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_roundtrip_and_limits_hold() {
        let frames = vec![
            Frame::File {
                path: "a/b.txt".into(),
                bytes: b"hello\n".to_vec(),
                executable: false,
            },
            Frame::File {
                path: "run.sh".into(),
                bytes: b"#!/bin/sh\n".to_vec(),
                executable: true,
            },
            Frame::Symlink {
                path: "link".into(),
                target: b"a/b.txt".to_vec(),
            },
            Frame::Skipped {
                path: "fifo".into(),
                reason: "fifo skipped".into(),
            },
            Frame::Unchanged {
                path: "same.txt".into(),
            },
            Frame::Gone {
                path: "deleted.txt".into(),
            },
            Frame::Blob {
                oid: "ab".repeat(20),
                bytes: b"blob\n".to_vec(),
            },
            Frame::End,
        ];
        let mut buf = Vec::new();
        write_header(&mut buf, &serde_json::json!({"k": 1})).unwrap();
        for f in &frames {
            write_frame(&mut buf, f).unwrap();
        }
        let mut r = &buf[..];
        let h: serde_json::Value = read_header(&mut r).unwrap();
        assert_eq!(h["k"], 1);
        for f in &frames {
            assert_eq!(&read_frame(&mut r, 100).unwrap(), f);
        }
        // A file over the payload limit is refused before it is read.
        let mut r = &buf[..];
        let _: serde_json::Value = read_header(&mut r).unwrap();
        assert!(matches!(
            read_frame(&mut r, 3),
            Err(WireError::TooLong { .. })
        ));
        // A cut stream is an error, not a shorter snapshot.
        let cut = &buf[..buf.len() - 3];
        let mut r = cut;
        let _: serde_json::Value = read_header(&mut r).unwrap();
        let mut last = Ok(Frame::End);
        for _ in 0..frames.len() {
            last = read_frame(&mut r, 100);
            if last.is_err() {
                break;
            }
        }
        assert!(matches!(last, Err(WireError::Truncated)), "{last:?}");
        // A lying length prefix does not allocate what it claims.
        let mut evil = vec![TAG_FILE];
        evil.extend(1u32.to_be_bytes());
        evil.push(b'a');
        evil.extend(u64::MAX.to_be_bytes());
        assert!(matches!(
            read_frame(&mut &evil[..], u64::MAX),
            Err(WireError::Truncated)
        ));
    }

    fn stat(n: u64) -> FileStat {
        FileStat {
            mtime_s: -(n as i64),
            mtime_ns: 999_999_999,
            ctime_s: i64::MAX - n as i64,
            ctime_ns: n as u32,
            size: u64::MAX - n,
            ino: n,
            mode: 0o120777,
        }
    }

    pub(crate) fn sample_request() -> Request {
        let paths = ["a.txt", "dir/b c.sh", "ünï/cödé\n\ttab", "l"];
        let modes = [
            EntryMode::File,
            EntryMode::Executable,
            EntryMode::File,
            EntryMode::Symlink,
        ];
        Request {
            key: "k".into(),
            slot: 3,
            cap: 7,
            argv: vec!["sh".into()],
            base: paths
                .iter()
                .zip(modes)
                .enumerate()
                .map(|(i, (p, mode))| BaseEntry {
                    path: p.to_string(),
                    mode,
                    oid: format!("{i:040x}"),
                })
                .collect(),
            record: Some(SyncRecord {
                stamp_s: 1_795_685_482,
                stamp_ns: 5,
                files: paths
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (p.to_string(), stat(i as u64)))
                    .collect(),
                dirs: vec![("".into(), stat(99)), ("dir".into(), stat(98))],
            }),
            ..Request::default()
        }
    }

    pub(crate) fn same(a: &Request, b: &Request) -> bool {
        a.key == b.key
            && a.slot == b.slot
            && a.cap == b.cap
            && a.argv == b.argv
            && a.base == b.base
            && a.record == b.record
    }

    /// The hub writes its base borrowed: the very bytes of the owned form.
    #[test]
    fn a_borrowed_base_is_written_as_the_owned_one() {
        let req = sample_request();
        let raw: Vec<Vec<u8>> = req
            .base
            .iter()
            .map(|e| {
                (0..e.oid.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&e.oid[i..i + 2], 16).unwrap())
                    .collect()
            })
            .collect();
        let refs = req.base.iter().zip(&raw).map(|(e, oid)| BaseRef {
            path: &e.path,
            mode: e.mode,
            oid,
        });
        let header = Request {
            base: Vec::new(),
            record: None,
            ..req.clone()
        };
        let (mut owned, mut borrowed) = (Vec::new(), Vec::new());
        write_request(&mut owned, &req).unwrap();
        write_request_with(&mut borrowed, &header, refs, req.record.as_ref()).unwrap();
        assert_eq!(owned, borrowed);
        assert!(same(&read_request(&mut &borrowed[..]).unwrap(), &req));
    }

    #[test]
    fn requests_and_prepare_answers_carry_their_tables() {
        let req = sample_request();
        let mut buf = Vec::new();
        write_request(&mut buf, &req).unwrap();
        // Whatever follows the request (blob frames) is left in the stream.
        write_frame(&mut buf, &Frame::End).unwrap();
        let mut r = &buf[..];
        let back = read_request(&mut r).unwrap();
        assert!(same(&req, &back), "{back:?}");
        assert_eq!(read_frame(&mut r, 0).unwrap(), Frame::End);

        // No base and no record (the `tool` and `exec` requests).
        let empty = Request::default();
        let mut buf = Vec::new();
        write_request(&mut buf, &empty).unwrap();
        let back = read_request(&mut &buf[..]).unwrap();
        assert!(back.base.is_empty() && back.record.is_none());

        let reply = PrepareReply {
            record: req.record.clone().unwrap(),
            written: 2,
            after_reset: true,
        };
        let mut buf = Vec::new();
        write_prepare_reply(&mut buf, &reply).unwrap();
        assert_eq!(read_prepare_reply(&mut &buf[..]).unwrap(), reply);
    }

    /// A `prepare` answer built from its JSON header and a hand-made table block.
    fn answer_with(table: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        write_header(&mut buf, &PrepareReply::default()).unwrap();
        buf.extend((table.len() as u32).to_be_bytes());
        buf.extend(table);
        buf
    }

    #[test]
    fn a_hostile_table_is_refused_and_never_sized_by_its_counts() {
        let reply = PrepareReply {
            record: sample_request().record.unwrap(),
            written: 0,
            after_reset: false,
        };
        let mut good = Vec::new();
        write_prepare_reply(&mut good, &reply).unwrap();
        // Positive control.
        assert_eq!(read_prepare_reply(&mut &good[..]).unwrap(), reply);
        // Cut anywhere: an error, never a shorter record.
        for cut in 0..good.len() {
            assert!(
                read_prepare_reply(&mut &good[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A record claiming four billion files in a few bytes: truncated, and the claim was
        // not allocated for (the capacity is bounded by what is left of the block).
        let mut t = vec![1];
        t.extend(0i64.to_be_bytes());
        t.extend(0u32.to_be_bytes());
        t.extend(u32::MAX.to_be_bytes());
        assert!(matches!(
            read_prepare_reply(&mut &answer_with(&t)[..]),
            Err(WireError::Truncated)
        ));
        assert_eq!(capacity(u32::MAX, 10, 48), 0);
        // A block over the limit is refused before it is read.
        let mut huge = Vec::new();
        write_header(&mut huge, &PrepareReply::default()).unwrap();
        huge.extend(u32::MAX.to_be_bytes());
        assert!(matches!(
            read_prepare_reply(&mut &huge[..]),
            Err(WireError::TooLong {
                what: "a table",
                ..
            })
        ));
        // No record, bytes after the tables, an unknown marker.
        for (table, want) in [(vec![0u8], "no sync record"), (vec![2u8], "record marker")] {
            let err = read_prepare_reply(&mut &answer_with(&table)[..]).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
        let mut table = Vec::new();
        write_record(&mut table, Some(&reply.record)).unwrap();
        assert_eq!(
            answer_with(&table),
            good,
            "control: the hand-made block is the real one"
        );
        table.push(0);
        let err = read_prepare_reply(&mut &answer_with(&table)[..]).unwrap_err();
        assert!(err.to_string().contains("after the tables"), "{err}");
        // A path that is too long or not UTF-8.
        let record_with_path = |path: &[u8], len: u32| {
            let mut t = vec![1];
            t.extend(0i64.to_be_bytes());
            t.extend(0u32.to_be_bytes());
            t.extend(1u32.to_be_bytes());
            t.extend(len.to_be_bytes());
            t.extend(path);
            t.extend([0u8; 44]);
            // No directories.
            t.extend(0u32.to_be_bytes());
            answer_with(&t)
        };
        assert!(read_prepare_reply(&mut &record_with_path(b"ok", 2)[..]).is_ok());
        assert!(matches!(
            read_prepare_reply(&mut &record_with_path(b"", 5000)[..]),
            Err(WireError::TooLong { what: "a path", .. })
        ));
        let err = read_prepare_reply(&mut &record_with_path(b"\xff\xfe", 2)[..]).unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn a_base_table_with_a_bad_mode_or_blob_id_is_refused() {
        let base_table = |mode: u8, oid: &[u8]| {
            let mut t = 1u32.to_be_bytes().to_vec();
            t.extend([mode, oid.len() as u8]);
            t.extend(oid);
            t.extend(1u32.to_be_bytes());
            t.push(b'a');
            t.push(0); // no record
            let mut buf = Vec::new();
            write_header(&mut buf, &Request::default()).unwrap();
            buf.extend((t.len() as u32).to_be_bytes());
            buf.extend(t);
            buf
        };
        let ok = read_request(&mut &base_table(b'x', b"00ff")[..]).unwrap();
        assert_eq!(ok.base[0].mode, EntryMode::Executable);
        assert_eq!(ok.base[0].oid, "00ff");
        let err = read_request(&mut &base_table(b'q', b"00ff")[..]).unwrap_err();
        assert!(err.to_string().contains("entry mode"), "{err}");
        let err = read_request(&mut &base_table(b'f', b"00fg")[..]).unwrap_err();
        assert!(err.to_string().contains("not hex"), "{err}");
    }
}

//! The byte stream between the hub and the sandbox helper: the whole contract between
//! [`crate::user`] (the hub's side) and [`crate::helper`] (the sandbox user's side).
//!
//! **Layer: the leaf.** This module imports nothing of the crate (the layering test in
//! `lib.rs` checks it): both sides build on it, neither on the other.
//!
//! A request is one length-prefixed JSON header; files follow as frames of
//! `tag, path (u32 length + bytes), payload (u64 length + bytes)`, closed by an end frame. The
//! end frame matters: a stream cut short (the helper crashed or was killed) must read as an
//! error, never as a snapshot in which every file after the cut was deleted.
//!
//! The hub reads what the helper writes as hostile data: the helper runs as the sandbox user,
//! which the agent controls. Every length is checked against a limit before anything is
//! allocated, and paths are validated by the caller with [`crate::beneath::components`].

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

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
    /// [`Frame::Blob`]s after the header.
    #[serde(default)]
    pub base: Vec<BaseEntry>,
    /// `prepare` and `snapshot`: what the last `prepare` of this slot reported (see
    /// [`SyncRecord`]); None makes the helper compare every file by content.
    #[serde(default)]
    pub record: Option<SyncRecord>,
    /// `exec`: the agent's argv and its whole environment.
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: Vec<(String, String)>,
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
    /// `exec`: stdin stays open as the hub's lifeline, and its EOF stops the agent. Without it
    /// (short commands), stdin is ignored after the request.
    #[serde(default)]
    pub lifeline: bool,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    pub stamp_s: i64,
    pub stamp_ns: u32,
    pub files: Vec<(String, FileStat)>,
}

/// The helper's answer to `prepare`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrepareReply {
    pub record: SyncRecord,
    /// Files written (the rest already held the base).
    pub written: u64,
}

/// Largest request header accepted (argv, environment and the base's path list).
pub const MAX_HEADER: u64 = 64 * 1024 * 1024;
/// Longest path accepted in a frame (Linux's PATH_MAX).
pub const MAX_PATH: u64 = 4096;
/// Longest skip reason accepted in a frame.
pub const MAX_REASON: u64 = 4096;

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
    w.write_all(&(json.len() as u32).to_be_bytes())?;
    w.write_all(&json)
}

pub fn read_header<T: serde::de::DeserializeOwned>(r: &mut impl Read) -> Result<T, WireError> {
    let mut len = [0u8; 4];
    read_exact(r, &mut len)?;
    let len = u32::from_be_bytes(len) as u64;
    if len > MAX_HEADER {
        return Err(WireError::TooLong {
            what: "a header",
            len,
            max: MAX_HEADER,
        });
    }
    let bytes = read_bytes(r, len)?;
    serde_json::from_slice(&bytes).map_err(|e| WireError::Malformed(format!("header: {e}")))
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
}

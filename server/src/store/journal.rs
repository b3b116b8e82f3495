//! Durable hub state: an append-only JSONL journal, fsynced record by record.
//!
//! A decision that touches the checkout is written as `prepare` (the file operations with
//! before/after fingerprints and the state to adopt) before any file changes, and `commit` after.
//! After a crash, a `prepare` without `commit` is finished or dropped by comparing the files
//! against those fingerprints — so an acknowledged decision is never lost and no hunk is applied
//! twice. On every start the journal is compacted to one record per run and suggestion.
//!
//! An append that fails (a full disk, an fsync error) is cut off again before the error is
//! answered, so a half-written record never sits in front of the next good one. A torn last
//! record found on start (a crash mid-append) is cut and kept aside as
//! `state.jsonl.broken-<timestamp>`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::decision::{Closing, DecisionRec, LineRec};
use crate::model::feedback::FeedbackRecord;
use crate::model::fileop::FileOp;
use crate::model::run::RunRec;
use crate::model::suggestion::Suggestion;

/// A record of what the hub holds, borrowed, written exactly as the [`Record`] it stands for:
/// a compaction writes the state's runs, suggestions and sessions without copying them first
/// (the copies, and the buffer they were encoded into, were two thirds of a start's peak heap).
#[derive(Debug, Serialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum RecordRef<'a> {
    Run(&'a RunRec),
    Suggestion(&'a Suggestion),
    Session(&'a crate::model::session::SessionRec),
    History(&'a crate::model::session::Entry),
    Seq { upto: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    Run(Box<RunRec>),
    Suggestion(Box<Suggestion>),
    /// A decision's deltas, written before the checkout changes (`prepare`).
    Decision(Box<DecisionRec>),
    /// The whole-suggestion `prepare` of journals written before decision records (read only).
    Prepare(Box<Prepared>),
    /// Written after the decision's feedback lines are fsynced, and fsynced itself only by
    /// the next append when there are lines (a lost one is made up for by the lines: see
    /// `decide::recover`).
    Commit {
        decision: String,
    },
    Abort {
        decision: String,
    },
    /// A session as it is now (the newest record of a session wins).
    Session(Box<crate::model::session::SessionRec>),
    /// One more line of a session's history.
    History(Box<crate::model::session::Entry>),
    /// Event sequence numbers up to this one may have been handed out.
    Seq {
        upto: u64,
    },
    /// A suggestion's checks came ([`crate::model::diagnostics`]): its `checks` and
    /// `diagnostics`, and nothing else of it. Not the whole suggestion, which a decision whose
    /// `commit` is not written yet may have changed: replaying that decision's commit after a
    /// whole suggestion that already holds it would apply it twice.
    Checks {
        suggestion_id: String,
        checks: crate::protocol::ChecksView,
        #[serde(default)]
        diagnostics: Vec<crate::protocol::Diagnostic>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepared {
    pub decision: String,
    pub ops: Vec<FileOp>,
    /// The suggestion as it is once the decision is committed.
    pub after: Suggestion,
    /// Other suggestions the decision changes too (a hard rollback reaches later ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Suggestion>,
    pub feedback: Vec<FeedbackRecord>,
}

impl Prepared {
    /// This older whole-suggestion `prepare` as deltas against `suggestions` (the state before
    /// it), so recovery and replay have one form to handle.
    pub fn into_decision(
        self,
        suggestions: &std::collections::BTreeMap<String, Suggestion>,
    ) -> DecisionRec {
        let mut changes = Vec::new();
        let mut closings = Vec::new();
        for after in self.also.iter().chain(std::iter::once(&self.after)) {
            let Some(before) = suggestions.get(&after.id) else {
                continue;
            };
            changes.extend(DecisionRec::between(before, after));
            if after.closed.is_some() && after.closed != before.closed {
                closings.push(Closing {
                    suggestion_id: after.id.clone(),
                    how: after.closed.clone().unwrap_or_default(),
                    reviewed_commit: after.reviewed_commit.clone(),
                });
            }
        }
        DecisionRec {
            decision: self.decision,
            ops: self.ops,
            changes,
            closings,
            lines: self.feedback.iter().map(LineRec::from_record).collect(),
            drops: Vec::new(),
            adds: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "journal {path} line {line} is corrupt ({message}); the hub will not guess which decisions it held: move the file aside to start empty (every review in it is then forgotten)"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// An append-only file whose appends are all or nothing: each append is written and fsynced, and
/// one that fails is truncated away again, so the file always ends after a whole record.
pub struct AppendFile {
    file: File,
    path: PathBuf,
    /// Length of the file up to the end of the last good append.
    len: u64,
    /// Whether something was written since the last fsync ([`AppendFile::write_unsynced`]).
    dirty: bool,
}

impl AppendFile {
    /// Open (creating, mode 0600) for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        let len = file.metadata()?.len();
        Ok(Self {
            file,
            path: path.to_path_buf(),
            len,
            dirty: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The length after the last good append: a mark for [`AppendFile::truncate_to`].
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `buf` and fsync. On any error (a short write on a full disk, a failed fsync) the
    /// file is cut back to where it was, and the error is returned: the bytes never count.
    pub fn append(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let mark = self.len;
        self.write_unsynced(buf)?;
        if let Err(e) = self.sync() {
            self.cut_back(mark);
            return Err(e);
        }
        Ok(())
    }

    /// Append `buf` without an fsync: it is on disk after the next [`AppendFile::append`] (or
    /// [`AppendFile::sync`]), and a later append that fails is cut off behind it, never before
    /// it. A failed write is cut off again and returned.
    pub fn write_unsynced(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Err(e) = self.file.write_all(buf) {
            self.cut_back(self.len);
            return Err(e);
        }
        self.len += buf.len() as u64;
        self.dirty = !buf.is_empty() || self.dirty;
        Ok(())
    }

    /// Fsync what was written since the last fsync.
    pub fn sync(&mut self) -> std::io::Result<()> {
        if self.dirty {
            self.file.sync_data()?;
            self.dirty = false;
        }
        Ok(())
    }

    fn cut_back(&mut self, mark: u64) {
        if let Err(t) = self.truncate_to(mark) {
            tracing::error!(path = %self.path.display(), error = %t, "cutting off a failed append");
        }
    }

    /// Cut the file back to `len` (a mark from [`AppendFile::len`]) and fsync.
    pub fn truncate_to(&mut self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)?;
        self.file.sync_all()?;
        self.len = len;
        self.dirty = false;
        Ok(())
    }
}

pub struct Journal {
    file: AppendFile,
    /// Size right after the last compaction.
    compacted: u64,
    /// Never compact below this size.
    compact_min: u64,
}

/// Default for [`Journal::due`]: the journal is compacted online once it passes this size
/// (and four times its size after the last compaction). `HUNKGATE_JOURNAL_COMPACT_MIN`
/// overrides it (bytes), e.g. to exercise compaction in tests.
pub const COMPACT_MIN: u64 = 16 * 1024 * 1024;

/// A compact UTC timestamp for file names: `20260101T120000.123Z`.
pub fn file_stamp() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
}

/// Keep `bytes` (a torn or unreadable piece of `path`) aside as `<path>.broken-<timestamp>`.
pub fn keep_aside(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".broken-{}", file_stamp()));
    let aside = path.with_file_name(name);
    write_file_atomic(&aside, bytes, 0o600)?;
    Ok(aside)
}

impl Journal {
    fn io(path: &Path, source: std::io::Error) -> JournalError {
        JournalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Read every record.
    ///
    /// A torn final record (a crash mid-append) is cut off the file and kept aside as
    /// `state.jsonl.broken-<timestamp>`. A line that starts with the torn remains of a failed
    /// append and goes on with a whole record (what older versions left after a full disk) keeps
    /// that record; the torn bytes are kept aside too. Corruption anywhere else is an error,
    /// because guessing would lose decisions.
    pub fn read(path: &Path) -> Result<Vec<Record>, JournalError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::io(path, e)),
        };
        let mut out = Vec::new();
        let mut aside: Vec<u8> = Vec::new();
        let mut pos = 0usize;
        let mut line_no = 0usize;
        let mut cut_at: Option<usize> = None;
        while pos < bytes.len() {
            line_no += 1;
            let end = bytes[pos..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|i| pos + i);
            let line = &bytes[pos..end.unwrap_or(bytes.len())];
            let next = end.map(|e| e + 1).unwrap_or(bytes.len());
            if line.iter().all(u8::is_ascii_whitespace) {
                pos = next;
                continue;
            }
            if end.is_none() {
                // No newline: the last append never finished.
                tracing::warn!(path = %path.display(), "cutting a torn final journal record");
                aside.extend_from_slice(line);
                cut_at = Some(pos);
                break;
            }
            match serde_json::from_slice::<Record>(line) {
                Ok(r) => out.push(r),
                Err(e) => match salvage(line) {
                    Some((torn, r)) => {
                        tracing::warn!(path = %path.display(), line = line_no, "keeping the record after a torn journal append");
                        aside.extend_from_slice(torn);
                        aside.push(b'\n');
                        out.push(r);
                    }
                    None if next == bytes.len() => {
                        tracing::warn!(path = %path.display(), "cutting an unreadable final journal record");
                        aside.extend_from_slice(line);
                        cut_at = Some(pos);
                        break;
                    }
                    None => {
                        return Err(JournalError::Corrupt {
                            path: path.to_path_buf(),
                            line: line_no,
                            message: e.to_string(),
                        })
                    }
                },
            }
            pos = next;
        }
        if !aside.is_empty() {
            let kept = keep_aside(path, &aside).map_err(|e| Self::io(path, e))?;
            tracing::warn!(path = %kept.display(), "kept the torn journal bytes aside");
        }
        if let Some(at) = cut_at {
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Self::io(path, e))?;
            f.set_len(at as u64)
                .and_then(|_| f.sync_all())
                .map_err(|e| Self::io(path, e))?;
        }
        Ok(out)
    }

    /// Atomically replace the journal with `records` and open it for appending.
    /// The records are encoded straight into the new file, not into a buffer first.
    pub fn rewrite<R: Serialize>(path: &Path, records: &[R]) -> Result<Self, JournalError> {
        write_file_atomic_with(path, 0o600, |f| {
            let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
            for r in records {
                serde_json::to_writer(&mut w, r)?;
                w.write_all(b"\n")?;
            }
            w.flush()
        })
        .map_err(|e| Self::io(path, e))?;
        let file = AppendFile::open(path).map_err(|e| Self::io(path, e))?;
        let compact_min = std::env::var("HUNKGATE_JOURNAL_COMPACT_MIN")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(COMPACT_MIN);
        Ok(Self {
            compacted: file.len(),
            file,
            compact_min,
        })
    }

    /// Whether the journal has grown enough since its last compaction to be compacted again.
    pub fn due(&self) -> bool {
        self.file.len() > self.compact_min.max(self.compacted.saturating_mul(4))
    }

    /// Compact once the journal passes `bytes` (and four times its last compacted size).
    pub fn set_compact_min(&mut self, bytes: u64) {
        self.compact_min = bytes;
    }

    /// Bytes in the journal.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    pub fn is_empty(&self) -> bool {
        self.file.is_empty()
    }

    /// Compact online: atomically replace the journal with `records` (a snapshot of the state)
    /// and go on appending to the new file. On failure the old journal stays as it was.
    pub fn replace<R: Serialize>(&mut self, records: &[R]) -> Result<(), JournalError> {
        let path = self.file.path().to_path_buf();
        // The old journal has no name left: its blocks are freed as it is dropped.
        drop(std::mem::replace(self, Self::rewrite(&path, records)?));
        Ok(())
    }

    /// Append one record and fsync before returning. A failed append leaves nothing behind.
    pub fn append(&mut self, record: &Record) -> Result<(), JournalError> {
        let line = self.line(record)?;
        self.append_line(&line)
    }

    /// [`Journal::append`] of a record encoded beforehand with [`Journal::line_of`] (a big
    /// record, encoded where no lock is held).
    pub fn append_line(&mut self, line: &[u8]) -> Result<(), JournalError> {
        let path = self.file.path().to_path_buf();
        self.file.append(line).map_err(|e| Self::io(&path, e))
    }

    /// A record as its journal line (newline included).
    pub fn line_of(record: &Record) -> serde_json::Result<Vec<u8>> {
        Self::line_sized(record, 128)
    }

    /// [`Journal::line_of`] into a buffer of `capacity` bytes to start with: a big record
    /// encoded into a buffer that grows as it goes is copied a dozen times on the way.
    pub fn line_sized(record: &Record, capacity: usize) -> serde_json::Result<Vec<u8>> {
        let mut line = Vec::with_capacity(capacity);
        serde_json::to_writer(&mut line, record)?;
        line.push(b'\n');
        Ok(line)
    }

    /// Write one record without an fsync: the next [`Journal::append`] makes it durable (see
    /// [`AppendFile::write_unsynced`]).
    pub fn write_unsynced(&mut self, record: &Record) -> Result<(), JournalError> {
        let line = self.line(record)?;
        let path = self.file.path().to_path_buf();
        self.file
            .write_unsynced(&line)
            .map_err(|e| Self::io(&path, e))
    }

    fn line(&self, record: &Record) -> Result<Vec<u8>, JournalError> {
        Self::line_of(record).map_err(|e| Self::io(self.file.path(), e.into()))
    }
}

/// The record at the end of a line that starts with the torn remains of a failed append.
fn salvage(line: &[u8]) -> Option<(&[u8], Record)> {
    const START: &[u8] = b"{\"t\":";
    (1..line.len().saturating_sub(START.len() - 1))
        .filter(|&i| line[i..].starts_with(START))
        .find_map(|i| {
            serde_json::from_slice::<Record>(&line[i..])
                .ok()
                .map(|r| (&line[..i], r))
        })
}

/// Replace `path` atomically: a short temporary name in the same directory (`.hg-<random>.tmp`,
/// so any file name that fits the file system fits), write, fsync, rename over, fsync the
/// directory. The temporary file is removed on failure. For the hub's own files (journal, token,
/// hub.json); the user's checkout is written through `Beneath::write_atomic`.
pub fn write_file_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_file_atomic_with(path, mode, |f| f.write_all(bytes))
}

/// [`write_file_atomic`] of what `write` writes to the temporary file.
pub fn write_file_atomic_with(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = dir.join(hunkgate_sandbox::beneath::temp_name());
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        write(&mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_dir(path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(d: &str) -> Record {
        Record::Commit { decision: d.into() }
    }

    fn line(r: &Record) -> Vec<u8> {
        let mut v = serde_json::to_vec(r).unwrap();
        v.push(b'\n');
        v
    }

    fn decisions(rs: &[Record]) -> Vec<String> {
        rs.iter()
            .map(|r| match r {
                Record::Commit { decision } => decision.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn broken_files(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("state.jsonl.broken-"))
            .collect()
    }

    #[test]
    fn a_torn_tail_is_cut_and_kept_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("state.jsonl");
        let mut bytes = line(&commit("a"));
        bytes.extend_from_slice(&line(&commit("b")));
        let torn = &line(&commit("c"))[..10];
        bytes.extend_from_slice(torn);
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(decisions(&Journal::read(&p).unwrap()), ["a", "b"]);
        let aside = broken_files(tmp.path());
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read(&aside[0]).unwrap(), torn);
        // The journal itself now ends after the last whole record.
        assert!(std::fs::read(&p).unwrap().ends_with(b"\"b\"}\n"));
        assert_eq!(decisions(&Journal::read(&p).unwrap()), ["a", "b"]);
        assert_eq!(
            broken_files(tmp.path()).len(),
            1,
            "nothing new to keep aside"
        );
    }

    #[test]
    fn an_unsynced_record_counts_before_the_next_append() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("state.jsonl");
        let mut j = Journal::rewrite(&p, &[commit("a")]).unwrap();
        j.write_unsynced(&commit("b")).unwrap();
        let after_b = j.len();
        assert_eq!(after_b, std::fs::metadata(&p).unwrap().len());
        j.append(&commit("c")).unwrap();
        assert_eq!(decisions(&Journal::read(&p).unwrap()), ["a", "b", "c"]);
        // A mark taken after the unsynced record keeps it: a later append that fails is cut
        // back behind it, never before it.
        j.file.truncate_to(after_b).unwrap();
        assert_eq!(decisions(&Journal::read(&p).unwrap()), ["a", "b"]);
    }

    #[test]
    fn a_record_glued_to_a_torn_append_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("state.jsonl");
        // What an append that failed half way, followed by a good one, used to leave.
        let mut bytes = line(&commit("a"));
        bytes.extend_from_slice(&line(&commit("torn"))[..15]);
        bytes.extend_from_slice(&line(&commit("b")));
        bytes.extend_from_slice(&line(&commit("c")));
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(decisions(&Journal::read(&p).unwrap()), ["a", "b", "c"]);
        assert_eq!(broken_files(tmp.path()).len(), 1);
        // Positive control: real corruption in the middle is still refused.
        let mut bad = line(&commit("a"));
        bad.extend_from_slice(b"not json at all\n");
        bad.extend_from_slice(&line(&commit("b")));
        std::fs::write(&p, &bad).unwrap();
        assert!(matches!(
            Journal::read(&p),
            Err(JournalError::Corrupt { line: 2, .. })
        ));
    }

    #[test]
    fn atomic_writes_use_a_short_temporary_name() {
        let tmp = tempfile::tempdir().unwrap();
        // 250 bytes: a temporary name that embeds it would exceed the 255-byte limit.
        let p = tmp.path().join("n".repeat(250));
        write_file_atomic(&p, b"x", 0o600).unwrap();
        write_file_atomic(&p, b"y", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"y");
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "no stray temp file"
        );
    }

    /// What a compaction writes from the borrowed state is byte for byte what the same
    /// records would be, and reads back as them.
    #[test]
    fn borrowed_records_are_written_as_the_records_they_stand_for() {
        use crate::model::session::{Entry, SessionRec};
        let run: RunRec = serde_json::from_str(
            r#"{"run_id":"r1","status":"ready","prompt":"p","suggestion_ids":["s1"],"created_at":"t"}"#,
        )
        .unwrap();
        let suggestion: Suggestion = serde_json::from_str(
            r#"{"id":"s1","run_id":"r1","description":"d","base_commit":"b","run_commit":"c","created_at":"t","hunks":[{"id":"s1:a:0","file":"a","index":0,"kind":"modify","state":"accepted","patch":"@@ -1 +1 @@\n-a\n+b\n","old":{"mode":"file","oid":"bab081fdb7372d4e471fcbb12b886e1a7cddcae2"},"new":{"mode":"file","oid":"1ca9f03dcc29c445823ed25c510f44b3bfed2516"},"applied":{"old_start":1,"old_len":1,"new_start":1,"new_len":1,"lines":[{"op":"remove","text":"a\n"},{"op":"add","text":"B\n"}]},"comment":"mine"}]}"#,
        )
        .unwrap();
        let session: SessionRec = serde_json::from_str(
            r#"{"id":"sess_1","status":"active","title":"t","created_at":"a","updated_at":"b"}"#,
        )
        .unwrap();
        let entry: Entry = serde_json::from_str(
            r#"{"index":3,"kind":"message","role":"user","content":"hi","ts":"t"}"#,
        )
        .unwrap();
        let pairs = [
            (RecordRef::Run(&run), Record::Run(Box::new(run.clone()))),
            (
                RecordRef::Suggestion(&suggestion),
                Record::Suggestion(Box::new(suggestion.clone())),
            ),
            (
                RecordRef::Session(&session),
                Record::Session(Box::new(session.clone())),
            ),
            (
                RecordRef::History(&entry),
                Record::History(Box::new(entry.clone())),
            ),
            (RecordRef::Seq { upto: 9 }, Record::Seq { upto: 9 }),
        ];
        let mut expected = Vec::new();
        for (borrowed, owned) in &pairs {
            let (b, o) = (
                serde_json::to_string(borrowed).unwrap(),
                serde_json::to_string(owned).unwrap(),
            );
            assert_eq!(b, o);
            expected.extend_from_slice(o.as_bytes());
            expected.push(b'\n');
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.jsonl");
        let borrowed: Vec<&RecordRef> = pairs.iter().map(|(b, _)| b).collect();
        let j = Journal::rewrite(&path, &borrowed).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(j.len(), expected.len() as u64);
        let read = Journal::read(&path).unwrap();
        assert_eq!(read.len(), pairs.len());
        for (r, (_, owned)) in read.iter().zip(&pairs) {
            assert_eq!(
                serde_json::to_string(r).unwrap(),
                serde_json::to_string(owned).unwrap()
            );
        }
    }
}

//! Durable hub state: an append-only JSONL journal, fsynced record by record.
//!
//! A decision that touches the checkout is written as `prepare` (the file operations with
//! before/after fingerprints and the state to adopt) before any file changes, and `commit` after.
//! After a crash, a `prepare` without `commit` is finished or dropped by comparing the files
//! against those fingerprints — so an acknowledged decision is never lost and no hunk is applied
//! twice. On every start the journal is compacted to one record per run and suggestion.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::apply::FileOp;
use crate::feedback::FeedbackRecord;
use crate::review::Suggestion;
use crate::runs::RunRec;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    Run(Box<RunRec>),
    Suggestion(Box<Suggestion>),
    Prepare(Box<Prepared>),
    Commit {
        decision: String,
    },
    Abort {
        decision: String,
    },
    /// A session as it is now (the newest record of a session wins).
    Session(Box<crate::sessions::SessionRec>),
    /// One more line of a session's history.
    History(Box<crate::sessions::Entry>),
    /// Event sequence numbers up to this one may have been handed out.
    Seq {
        upto: u64,
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

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "journal {path} line {line} is corrupt ({message}); move the file aside to start empty"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    fn io(path: &Path, source: std::io::Error) -> JournalError {
        JournalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Read every record. A torn final line (a crash mid-append) is dropped; corruption anywhere
    /// else is an error, because guessing would lose decisions.
    pub fn read(path: &Path) -> Result<Vec<Record>, JournalError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::io(path, e)),
        };
        let lines: Vec<String> = BufReader::new(file)
            .split(b'\n')
            .map(|l| l.map(|b| String::from_utf8_lossy(&b).into_owned()))
            .collect::<Result<_, _>>()
            .map_err(|e| Self::io(path, e))?;
        let mut out = Vec::with_capacity(lines.len());
        let last = lines.len().saturating_sub(1);
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(line) {
                Ok(r) => out.push(r),
                Err(_) if i == last => {
                    tracing::warn!(path = %path.display(), "dropping a torn final journal record");
                }
                Err(e) => {
                    return Err(JournalError::Corrupt {
                        path: path.to_path_buf(),
                        line: i + 1,
                        message: e.to_string(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Atomically replace the journal with `records` and open it for appending.
    pub fn rewrite(path: &Path, records: &[Record]) -> Result<Self, JournalError> {
        let tmp = path.with_extension("jsonl.tmp");
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| Self::io(&tmp, e))?;
            let mut buf = Vec::new();
            for r in records {
                serde_json::to_writer(&mut buf, r).map_err(|e| Self::io(&tmp, e.into()))?;
                buf.push(b'\n');
            }
            f.write_all(&buf).map_err(|e| Self::io(&tmp, e))?;
            f.sync_all().map_err(|e| Self::io(&tmp, e))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| Self::io(path, e))?;
        sync_dir(path).map_err(|e| Self::io(path, e))?;
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| Self::io(path, e))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Append one record and fsync before returning.
    pub fn append(&mut self, record: &Record) -> Result<(), JournalError> {
        let mut line = serde_json::to_vec(record).map_err(|e| Self::io(&self.path, e.into()))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| Self::io(&self.path, e))
    }
}

pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

//! The feedback log: one JSON line per decision, fsynced before the client hears back.
//!
//! This is the record the evals read to tell which agent or model to trust, so it is
//! self-contained (each line carries the hunk's diff, the prompt and the agent) and append-only.
//! The format is documented in `protocol.md` ("Feedback log").

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::model::feedback::FeedbackRecord;

pub struct FeedbackLog {
    file: crate::store::journal::AppendFile,
}

impl FeedbackLog {
    /// Open (creating) the log. A torn last line (a crash mid-append) is cut and kept aside as
    /// `feedback.jsonl.broken-<timestamp>`, so the next line starts on a line of its own.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Ok(bytes) = std::fs::read(path) {
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                crate::store::journal::keep_aside(path, &bytes[keep..])?;
                let f = OpenOptions::new().write(true).open(path)?;
                f.set_len(keep as u64)?;
                f.sync_all()?;
                tracing::warn!(path = %path.display(), "cut a torn last line off the feedback log");
            }
        }
        Ok(Self {
            file: crate::store::journal::AppendFile::open(path)?,
        })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Append records and fsync; a record is on disk when this returns. Returns the mark to
    /// [`FeedbackLog::truncate_to`] to take them back. A failed append leaves nothing behind.
    pub fn append(&mut self, records: &[FeedbackRecord]) -> std::io::Result<u64> {
        let mark = self.file.len();
        let mut buf = Vec::new();
        for r in records {
            serde_json::to_writer(&mut buf, r)?;
            buf.push(b'\n');
        }
        self.file.append(&buf)?;
        Ok(mark)
    }

    /// Take back what was appended after `mark` (a decision that could not be committed).
    pub fn truncate_to(&mut self, mark: u64) -> std::io::Result<()> {
        self.file.truncate_to(mark)
    }

    /// (decision id, hunk id) of every line already logged (used once, after a crash, to avoid
    /// logging a line twice).
    pub fn logged_lines(path: &Path) -> std::io::Result<HashSet<(String, String)>> {
        let mut out = HashSet::new();
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for line in BufReader::new(file).lines() {
            let line = line?;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                let field = |k: &str| v.get(k).and_then(|v| v.as_str()).map(str::to_string);
                if let (Some(d), Some(h)) = (field("decision_id"), field("hunk_id")) {
                    out.insert((d, h));
                }
            }
        }
        Ok(out)
    }
}

//! The state directory's files a collection reads and writes besides the journal: the ledger
//! of when work was first seen finished, the archive of what was collected, the run logs, the
//! feedback log's rotation, and the directory's size.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::gc::select::Ledger;
use crate::store::journal::{sync_dir, write_file_atomic, AppendFile};

/// `gc-ledger.json`: [`Ledger`] as JSON, replaced atomically. One that is missing or
/// unreadable is an empty ledger: every finished piece of work is stamped anew, so its
/// retention only gets longer.
pub fn read_ledger(path: &Path) -> Ledger {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), error = %e, "an unreadable retention ledger; finished work is stamped anew");
            Ledger::new()
        }),
        Err(_) => Ledger::new(),
    }
}

pub fn write_ledger(path: &Path, ledger: &Ledger) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(ledger).map_err(std::io::Error::other)?;
    write_file_atomic(path, &bytes, 0o600)
}

/// Append `lines` to `path` (`archive.jsonl`), fsynced; first, when the file is past `max`
/// bytes, move it to `<path>.1` (the older one dropped), so the two together stay near
/// twice `max`.
pub fn append_rotated(path: &Path, lines: &[u8], max: u64) -> std::io::Result<()> {
    rotate_if_over(path, max)?;
    let mut f = AppendFile::open(path)?;
    f.append(lines)
}

/// Move `path` to `<path>.1` (replacing it) when `path` is past `max` bytes; whether it did.
pub fn rotate_if_over(path: &Path, max: u64) -> std::io::Result<bool> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > max => {
            std::fs::rename(path, rotated(path))?;
            sync_dir(path)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `<path>.1`.
pub fn rotated(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    path.with_file_name(name)
}

/// The run logs (`runs/<run>.log`) of runs not in `keep`: removed, or only counted when
/// `remove` is false. Returns how many and their bytes.
pub fn run_logs(dir: &Path, keep: &BTreeSet<String>, remove: bool) -> (usize, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let mut out = (0, 0);
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(run) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        if keep.contains(run) {
            continue;
        }
        let len = e.metadata().map_or(0, |m| m.len());
        if remove {
            if let Err(err) = std::fs::remove_file(e.path()) {
                tracing::warn!(path = %e.path().display(), error = %err, "removing a collected run's log");
                continue;
            }
        }
        out.0 += 1;
        out.1 += len;
    }
    out
}

/// Bytes of the regular files under `dir` (what `du --apparent-size` says), not following
/// symbolic links; what cannot be read counts as nothing.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Encode `records` as journal lines.
pub fn lines<R: serde::Serialize>(records: &[R]) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    for r in records {
        serde_json::to_writer(&mut out, r)?;
        out.write_all(b"\n").map_err(serde_json::Error::io)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_is_rotated_past_its_size_and_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("archive.jsonl");
        for i in 0..100 {
            append_rotated(&p, format!("{{\"n\":{i}}}\n").as_bytes(), 50).unwrap();
        }
        let now = std::fs::metadata(&p).unwrap().len();
        let old = std::fs::metadata(rotated(&p)).unwrap().len();
        assert!(now <= 60 && old <= 60, "{now} {old}");
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .ends_with("{\"n\":99}\n"));
        // Positive control: under the size nothing moves.
        let q = dir.path().join("small.jsonl");
        append_rotated(&q, b"x\n", 50).unwrap();
        append_rotated(&q, b"y\n", 50).unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), b"x\ny\n");
        assert!(!rotated(&q).exists());
    }

    #[test]
    fn run_logs_of_other_runs_go_and_kept_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        for r in ["keep", "gone1", "gone2"] {
            std::fs::write(dir.path().join(format!("{r}.log")), b"12345").unwrap();
        }
        std::fs::write(dir.path().join("notes.txt"), b"x").unwrap();
        let keep: BTreeSet<String> = ["keep".to_string()].into();
        assert_eq!(run_logs(dir.path(), &keep, false), (2, 10));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            4,
            "a dry count"
        );
        assert_eq!(run_logs(dir.path(), &keep, true), (2, 10));
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["keep.log", "notes.txt"]);
    }

    #[test]
    fn a_lost_or_broken_ledger_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gc-ledger.json");
        assert!(read_ledger(&p).is_empty());
        let l: Ledger = [("run:a".to_string(), 5)].into();
        write_ledger(&p, &l).unwrap();
        assert_eq!(read_ledger(&p), l);
        std::fs::write(&p, b"{not json").unwrap();
        assert!(read_ledger(&p).is_empty());
    }
}

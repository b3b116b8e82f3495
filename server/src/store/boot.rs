//! Whether the machine restarted since the hub last started on this state directory: the
//! kernel's boot id, kept in `boot-id` beside the journal.
//!
//! A hub killed (`kill -9`) leaves everything it wrote in the page cache, which the kernel
//! still writes out; only the machine going down (power loss, a kernel crash) loses what was
//! written without an fsync. That is when the start looks the checkpoint store over
//! ([`hunkgate_sandbox::store::Store::drop_empty_loose_objects`]).

use std::path::{Path, PathBuf};

/// Where a boot id is read: Linux's, new at every boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id against the one recorded in a state directory.
#[derive(Debug)]
pub struct BootMark {
    path: PathBuf,
    recorded: Option<String>,
    current: Option<String>,
}

impl BootMark {
    /// The mark of the state directory `state_dir` and this boot's id.
    pub fn read(state_dir: &Path) -> Self {
        Self::with_current(state_dir, read_id(Path::new(BOOT_ID)))
    }

    /// [`BootMark::read`] with a given current boot id (None: the system has none).
    pub fn with_current(state_dir: &Path, current: Option<String>) -> Self {
        let path = state_dir.join("boot-id");
        BootMark {
            recorded: read_id(&path),
            path,
            current,
        }
    }

    /// Whether the machine may have gone down since the hub last recorded its boot here: the
    /// ids differ, or one is missing (a new state directory, one an older hub kept, a system
    /// without boot ids — where every start counts).
    pub fn restarted(&self) -> bool {
        match (&self.recorded, &self.current) {
            (Some(recorded), Some(current)) => recorded != current,
            _ => true,
        }
    }

    /// Record this boot's id (a temporary file renamed over the old one), once the store has
    /// been looked over; nothing to do when it is recorded already or there is none.
    pub fn record(&self) -> std::io::Result<()> {
        let Some(current) = &self.current else {
            return Ok(());
        };
        if self.recorded.as_ref() == Some(current) {
            return Ok(());
        }
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, format!("{current}\n"))?;
        std::fs::rename(&tmp, &self.path)
    }
}

fn read_id(path: &Path) -> Option<String> {
    let id = std::fs::read_to_string(path).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_counts_as_a_restart_until_recorded_and_a_new_one_again() {
        let dir = tempfile::tempdir().unwrap();
        let first = BootMark::with_current(dir.path(), Some("boot-1".into()));
        assert!(first.restarted(), "nothing recorded yet");
        first.record().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("boot-id")).unwrap(),
            "boot-1\n"
        );
        let same = BootMark::with_current(dir.path(), Some("boot-1".into()));
        assert!(!same.restarted(), "the same boot");
        let next = BootMark::with_current(dir.path(), Some("boot-2".into()));
        assert!(next.restarted(), "a new boot");
        // Without boot ids every start counts, and nothing is recorded.
        let none = BootMark::with_current(dir.path(), None);
        assert!(none.restarted());
        none.record().unwrap();
        assert!(BootMark::with_current(dir.path(), Some("boot-1".into()))
            .recorded
            .is_some());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_has_a_boot_id() {
        let dir = tempfile::tempdir().unwrap();
        let mark = BootMark::read(dir.path());
        let id = mark.current.clone().expect("Linux has a boot id");
        assert_eq!(id.len(), 36, "a UUID: {id}");
        mark.record().unwrap();
        assert!(!BootMark::read(dir.path()).restarted());
    }
}

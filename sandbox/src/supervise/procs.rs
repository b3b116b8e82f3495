//! The processes `/proc` shows (Linux; elsewhere there are none to see): what the agent's
//! process tree is made of (`crate::supervise::tree`), whether a process still works in a
//! sandbox slot (the hub's run registry), and the tests' look at what a run left behind.

use std::path::{Path, PathBuf};

/// Every process this one can see: its pid and its `/proc/<pid>` directory. A process that
/// ends meanwhile may still be listed; reading its files then fails, which callers skip.
pub fn all() -> impl Iterator<Item = (i32, PathBuf)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            Some((pid, entry.path()))
        })
}

/// The processes whose working directory is `dir` or beneath it.
pub fn working_in(dir: &Path) -> impl Iterator<Item = i32> {
    let dir = dir.canonicalize().ok();
    all().filter_map(move |(pid, path)| {
        let cwd = std::fs::read_link(path.join("cwd")).ok()?;
        cwd.starts_with(dir.as_ref()?).then_some(pid)
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_seen_and_found_where_it_works() {
        let me = std::process::id() as i32;
        assert!(
            all().any(|(pid, path)| pid == me && path == Path::new("/proc").join(me.to_string()))
        );
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(tmp.path())
            .spawn()
            .unwrap();
        let found: Vec<i32> = working_in(tmp.path()).collect();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, vec![child.id() as i32]);
        // Control: nothing works in a directory nobody is in.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(working_in(empty.path()).count(), 0);
    }
}

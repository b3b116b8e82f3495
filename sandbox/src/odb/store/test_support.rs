use super::*;

/// A chain of directories below `top` whose path is longer than `bytes`, with a file at
/// its end (made by descriptor: no path that long can be opened).
pub(crate) fn deep(top: &Path, bytes: usize) {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    std::fs::create_dir_all(top).unwrap();
    let flags = OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let mut fd = nix::fcntl::open(top, flags, Mode::empty()).unwrap();
    let name = "d".repeat(200);
    for _ in 0..bytes / 201 + 1 {
        nix::sys::stat::mkdirat(&fd, name.as_str(), Mode::from_bits_truncate(0o755)).unwrap();
        fd = openat(&fd, name.as_str(), flags, Mode::empty()).unwrap();
    }
    let file = openat(
        &fd,
        "leaf",
        OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    drop(file);
}

/// Run git in `dir` with no user or system config and return its stdout; fails the test
/// if git does.
pub(crate) fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Set the mtime of the file at `path` (what `touch -d` does).
pub(crate) fn set_mtime(path: &Path, t: std::time::SystemTime) {
    std::fs::File::options()
        .append(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Commit what is staged in the repository at `dir`, as a test identity.
pub(crate) fn commit(dir: &Path, message: &str) {
    let id = ["-c", "user.name=t", "-c", "user.email=t@t"];
    git_in(dir, &[&id[..], &["commit", "-qm", message]].concat());
}

/// The flat tree of `files` (path, mode, content), their blobs written to `store`.
pub(crate) fn tree(store: &Store, files: &[(&str, Mode, &str)]) -> FlatTree {
    files
        .iter()
        .map(|(p, mode, body)| {
            let oid = store.write_blob(body.as_bytes()).unwrap();
            (p.to_string(), Entry { mode: *mode, oid })
        })
        .collect()
}

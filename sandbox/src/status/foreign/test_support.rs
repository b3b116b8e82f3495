use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

/// Leave in the slot `dir` (synced to a base with a `.gitignore`, `a.txt` and `a/b.txt`)
/// what an agent may leave beside its base: a self-ignoring directory (`sub/.gitignore`
/// of `*`), a line appended to the base's own `.gitignore` and the file it hides, a
/// `chmod 000` directory and a `chmod 555` one, a path longer than `PATH_MAX`, names that
/// are not UTF-8 (a file, a directory), an empty directory, a `.git` of its own below the
/// slot, a FIFO, and symlinks to `outside` (which must outlive them).
pub(crate) fn plant(dir: &Path, outside: &Path) {
    let p = |n: &str| dir.join(n);
    std::fs::create_dir_all(p("sub")).unwrap();
    std::fs::write(p("sub/.gitignore"), "*\n").unwrap();
    std::fs::write(p("sub/plant.py"), "print('planted')\n").unwrap();
    symlink(outside, p("sub/out")).unwrap();
    let mut rules = std::fs::read(p(".gitignore")).unwrap();
    rules.extend_from_slice(b"plant2.py\n");
    std::fs::write(p(".gitignore"), rules).unwrap();
    std::fs::write(p("plant2.py"), "print('planted')\n").unwrap();
    std::fs::create_dir_all(p("locked/in")).unwrap();
    std::fs::write(p("locked/in/secret.txt"), "s\n").unwrap();
    std::fs::create_dir_all(p("ro/inner")).unwrap();
    std::fs::write(p("ro/inner/f"), "f\n").unwrap();
    for (d, mode) in [
        ("locked/in", 0o000),
        ("locked", 0o000),
        ("ro/inner", 0o555),
        ("ro", 0o555),
    ] {
        std::fs::set_permissions(p(d), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    crate::odb::store::test_support::deep(&p("deep"), 5000);
    std::fs::write(dir.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), "x\n").unwrap();
    let odd_dir = dir.join(std::ffi::OsStr::from_bytes(b"a/odd\xfe"));
    std::fs::create_dir_all(&odd_dir).unwrap();
    std::fs::write(odd_dir.join("x"), "x\n").unwrap();
    std::fs::create_dir_all(p("empty")).unwrap();
    std::fs::create_dir_all(p("a/.git/hooks")).unwrap();
    std::fs::write(p("a/.git/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
    std::fs::create_dir_all(p("build")).unwrap();
    std::fs::write(p("build/out.o"), "o\n").unwrap();
    nix::unistd::mkfifo(
        &p("a/pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    symlink(outside, p("escape")).unwrap();
}

/// Every entry of the slot `dir` (its `.git` aside), relative, as bytes: directories with
/// a trailing `/`. Listed by path: an entry that cannot be listed (too long a path, a
/// directory that cannot be read) fails the test.
pub(crate) fn listing(dir: &Path) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let entry = entry.unwrap();
            let path = entry.path();
            if path == dir.join(".git") {
                continue;
            }
            let mut rel = path
                .strip_prefix(dir)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            if entry.file_type().unwrap().is_dir() {
                rel.push(b'/');
                todo.push(path);
            }
            out.insert(rel);
        }
    }
    out
}

/// What [`listing`] gives of a slot that holds exactly `base`.
pub(crate) fn exactly(base: &crate::odb::store::FlatTree) -> BTreeSet<Vec<u8>> {
    let dirs = super::base_dirs(base);
    let dirs = dirs
        .iter()
        .filter(|d| !d.is_empty())
        .map(|d| format!("{d}/"));
    base.keys()
        .cloned()
        .chain(dirs)
        .map(String::into_bytes)
        .collect()
}

use super::test_support::listing;
use super::*;
use crate::odb::store::test_support::deep;
use std::os::unix::fs::{symlink, PermissionsExt};

/// `remove_at` takes apart any tree an agent can make — directories without their
/// owner's permissions, a path past `PATH_MAX`, a FIFO — and follows no symlink in it.
/// Controls: what the symlinks point to, and the entry beside the one removed, stay.
#[test]
fn remove_at_takes_any_tree_apart_and_follows_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(outside.join("inner")).unwrap();
    std::fs::write(outside.join("inner/keep"), "keep\n").unwrap();
    let top = tmp.path().join("slot");
    let t = top.join("t");
    std::fs::create_dir_all(t.join("a/b/c")).unwrap();
    std::fs::write(t.join("a/b/c/f"), "f\n").unwrap();
    symlink(&outside, t.join("a/link")).unwrap();
    symlink(outside.join("inner"), t.join("a/b/link")).unwrap();
    nix::unistd::mkfifo(&t.join("a/pipe"), Perm::from_bits_truncate(0o644)).unwrap();
    deep(&t.join("deep"), 5000);
    for (d, mode) in [("a/b/c", 0o000), ("a/b", 0o500), ("a", 0o000)] {
        std::fs::set_permissions(t.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::write(top.join("beside"), "b\n").unwrap();
    let fd = nix::fcntl::open(&top, DIR_FLAGS, Perm::empty()).unwrap();
    remove_at(fd.as_fd(), c"t").unwrap();
    assert!(!t.exists());
    assert!(top.join("beside").exists(), "the control beside it stays");
    assert_eq!(
        std::fs::read(outside.join("inner/keep")).unwrap(),
        b"keep\n"
    );
    // Absent is fine; a file or a symlink is removed as itself.
    remove_at(fd.as_fd(), c"t").unwrap();
    symlink(&outside, top.join("l")).unwrap();
    remove_at(fd.as_fd(), c"l").unwrap();
    remove_at(fd.as_fd(), c"beside").unwrap();
    assert!(listing(&top).is_empty());
    assert!(outside.join("inner/keep").exists());
}

/// Which base directories a sync reads, given the watch's word: the nearest base
/// directory of each named path or dirty tree, and every base directory in a dirty tree.
#[test]
fn the_watch_names_the_directories_to_read() {
    let e = crate::odb::store::Entry {
        mode: crate::odb::store::Mode::File,
        oid: crate::odb::store::blob_id(b""),
    };
    let base: FlatTree = ["a/b/c/f", "a/g", "x/y", "top"]
        .into_iter()
        .map(|p| (p.to_string(), e))
        .collect();
    let dirs = base_dirs(&base);
    assert_eq!(
        Vec::from_iter(dirs.iter().copied()),
        ["", "a", "a/b", "a/b/c", "x"]
    );
    let dirty = Dirty {
        paths: ["a/b/new", "sub/deeper/plant", "top2"]
            .map(String::from)
            .into(),
        trees: ["x", "a/b/c/made"].map(String::from).into(),
        gone: Default::default(),
    };
    assert_eq!(dirs_seen(&dirs, &dirty), ["", "a/b", "a/b/c", "x"]);
    let everything = Dirty {
        trees: [String::new()].into(),
        ..Dirty::default()
    };
    assert_eq!(dirs_seen(&dirs, &everything).len(), dirs.len());
}

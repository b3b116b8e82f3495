use super::*;
use std::os::unix::fs::symlink;

#[test]
fn only_a_dead_writers_temporary_files_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let me = std::process::id();
    let names = [
        format!(".hg-{dead}-3-123.tmp"),
        format!(".hg-{me}-1-5.tmp"),
        ".hg-1-1-5.tmp".to_string(),
        ".hg-notes.tmp".to_string(),
        format!(".hg-{dead}-3.tmp"),
        "a.txt".to_string(),
    ];
    for n in &names {
        std::fs::write(d.join(n), b"x").unwrap();
    }
    symlink("a.txt", d.join(format!(".hg-{dead}-4-1.tmp"))).unwrap();
    let root = Beneath::open(tmp.path()).unwrap();
    assert_eq!(root.remove_stale_temps("d/a.txt").unwrap(), 1);
    assert!(
        !d.join(&names[0]).exists(),
        "the dead writer's file is gone"
    );
    for n in &names[1..] {
        assert!(d.join(n).exists(), "{n} was kept");
    }
    assert!(d.join(format!(".hg-{dead}-4-1.tmp")).is_symlink());
    assert_eq!(root.remove_stale_temps("missing/a.txt").unwrap(), 0);
}

#[test]
fn components_refuse_hostile_paths() {
    assert!(components("src/a.rs").is_ok());
    assert_eq!(components(""), Err(PathError::Empty));
    assert!(matches!(
        components("/etc/passwd"),
        Err(PathError::Absolute(_))
    ));
    assert!(matches!(
        components("a/../../x"),
        Err(PathError::Traversal(_))
    ));
    assert!(matches!(components("a//b"), Err(PathError::Traversal(_))));
    assert!(matches!(components("./a"), Err(PathError::Traversal(_))));
    assert!(matches!(
        components(".git/config"),
        Err(PathError::GitDir(_))
    ));
    assert!(matches!(
        components("sub/.GIT/hooks/x"),
        Err(PathError::GitDir(_))
    ));
    assert!(matches!(components(".git./x"), Err(PathError::GitDir(_))));
    assert!(matches!(components("a\0b"), Err(PathError::Nul(_))));
    // Positive control: names that merely contain ".git" are fine.
    assert!(components(".gitignore").is_ok());
    assert!(components("x.git/y").is_ok());
}

/// A file read as data keeps its access time, even one written since it was last read
/// (which a plain read updates under `relatime`).
#[cfg(target_os = "linux")]
#[test]
fn reading_leaves_the_access_time_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let long_ago =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    let written = |name: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, "x\n").unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_times(std::fs::FileTimes::new().set_accessed(long_ago))
            .unwrap();
        path
    };
    let accessed = |p: &Path| std::fs::metadata(p).unwrap().accessed().unwrap();
    // Control: a plain read of such a file updates its access time here.
    let plain = written("plain.txt");
    std::fs::read(&plain).unwrap();
    if accessed(&plain) == long_ago {
        eprintln!("skipped: this filesystem does not update access times (noatime)");
        return;
    }
    let ours = written("ours.txt");
    let b = Beneath::open(tmp.path()).unwrap();
    assert_eq!(b.read("ours.txt", 100).unwrap().unwrap().0, b"x\n");
    assert_eq!(accessed(&ours), long_ago);
}

#[test]
fn write_read_remove_roundtrip() {
    let tmp = tempfile::tempdir().unwrap();
    let b = Beneath::open(tmp.path()).unwrap();
    b.write_atomic("a/b/c.txt", b"hello\n", false).unwrap();
    assert_eq!(
        b.read("a/b/c.txt", 100).unwrap(),
        Some((b"hello\n".to_vec(), false))
    );
    b.write_atomic("a/b/c.txt", b"bye\n", true).unwrap();
    assert_eq!(
        b.read("a/b/c.txt", 100).unwrap(),
        Some((b"bye\n".to_vec(), true))
    );
    assert!(matches!(
        b.read("a/b/c.txt", 2),
        Err(FsError::TooLarge { .. })
    ));
    b.remove_file("a/b/c.txt").unwrap();
    assert!(!tmp.path().join("a").exists(), "empty parents are pruned");
    assert_eq!(b.read("a/b/c.txt", 100).unwrap(), None);
}

/// A scratch tree's file is written in place (not renamed over) — overwritten when it is the
/// file's only name, else replaced — keeping its permission bits but the executable ones,
/// and never through a symlink, into a directory or into another name of its inode.
#[test]
fn scratch_writes_replace_in_place_and_follow_nothing() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let b = Beneath::open_scratch(tmp.path()).unwrap();
    let p = |n: &str| tmp.path().join(n);
    b.write_scratch("a/new.txt", b"new\n", false).unwrap();
    assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"new\n");
    assert_eq!(
        std::fs::metadata(p("a/new.txt")).unwrap().mode() & 0o777,
        0o644
    );
    std::fs::set_permissions(p("a/new.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    b.write_scratch("a/new.txt", b"run me\n", true).unwrap();
    assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"run me\n");
    assert_eq!(
        std::fs::metadata(p("a/new.txt")).unwrap().mode() & 0o777,
        0o700
    );
    // No temporary file is left beside it.
    assert_eq!(std::fs::read_dir(p("a")).unwrap().count(), 1);
    // Its only name: overwritten, the same inode, cut to the new length.
    let ino = |n: &str| std::fs::symlink_metadata(p(n)).unwrap().ino();
    let before = ino("a/new.txt");
    b.write_scratch("a/new.txt", b"short\n", true).unwrap();
    assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"short\n");
    assert_eq!(
        ino("a/new.txt"),
        before,
        "a sole link is overwritten in place"
    );

    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    symlink(outside.path().join("secret"), p("link")).unwrap();
    symlink(outside.path(), p("dirlink")).unwrap();
    std::fs::create_dir(p("dir")).unwrap();
    assert!(b.write_scratch("link", b"x", false).is_err());
    assert!(b.write_scratch("dirlink/secret", b"x", false).is_err());
    assert!(b.write_scratch("dir", b"x", false).is_err());
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"secret"
    );
    assert!(p("link").is_symlink() && p("dir").is_dir());
    // A hard link to a file elsewhere is cut, not written through.
    std::fs::hard_link(outside.path().join("secret"), p("hard")).unwrap();
    let linked = ino("hard");
    b.write_scratch("hard", b"base\n", false).unwrap();
    assert_eq!(std::fs::read(p("hard")).unwrap(), b"base\n");
    assert_ne!(
        ino("hard"),
        linked,
        "a file with another name gets a new inode"
    );
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"secret"
    );
    // Someone else's file (root can make one) is replaced by one of ours, not written into.
    if nix::unistd::geteuid().is_root() {
        std::fs::write(p("theirs"), b"theirs\n").unwrap();
        std::os::unix::fs::chown(p("theirs"), Some(65534), Some(65534)).unwrap();
        b.write_scratch("theirs", b"ours\n", false).unwrap();
        assert_eq!(std::fs::read(p("theirs")).unwrap(), b"ours\n");
        // (Its inode number may be reused: the owner tells the files apart.)
        assert_eq!(std::fs::symlink_metadata(p("theirs")).unwrap().uid(), 0);
    }

    // A durable tree writes atomically instead.
    let durable = Beneath::open(tmp.path()).unwrap();
    durable
        .write_scratch("a/new.txt", b"durable\n", false)
        .unwrap();
    assert_eq!(std::fs::read(p("a/new.txt")).unwrap(), b"durable\n");
}

/// Many paths are looked at by several threads: each answer is the one a single `lstat`
/// gives, in the order asked, whatever is there (a file, a symlink, a directory, nothing,
/// a path through a symlink, a path hunkgate refuses).
#[test]
fn lstat_many_answers_each_path_in_order() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "x").unwrap();
    let b = Beneath::open_scratch(tmp.path()).unwrap();
    let mut paths = Vec::new();
    for d in 0..30 {
        for f in 0..30 {
            let path = format!("d{d}/f{f}");
            b.write_scratch(&path, path.as_bytes(), false).unwrap();
            paths.push(path);
        }
    }
    symlink("d0/f0", tmp.path().join("link")).unwrap();
    symlink(outside.path(), tmp.path().join("out")).unwrap();
    let odd = [
        "link",
        "d3",
        "d3/missing",
        "nope/f",
        "out/secret",
        "../x",
        "d9/f9",
    ];
    for (i, p) in odd.iter().enumerate() {
        paths.insert(i * 100, p.to_string());
    }
    assert!(paths.len() >= Beneath::LSTAT_PARALLEL_FROM);
    let many = b.lstat_many(&paths);
    assert_eq!(many.len(), paths.len());
    for (path, got) in paths.iter().zip(&many) {
        let one = b.lstat(path);
        match (got, &one) {
            (Ok(Some(a)), Ok(Some(b))) => {
                assert_eq!(
                    (a.st_ino, a.st_mode, a.st_size),
                    (b.st_ino, b.st_mode, b.st_size)
                )
            }
            (Ok(None), Ok(None)) => {}
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("{path}: lstat_many said {got:?}, lstat {one:?}"),
        }
    }
    // The odd ones are what they are, and the files are themselves.
    let is_link = |st: &nix::sys::stat::FileStat| {
        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
    };
    assert!(matches!(&many[0], Ok(Some(st)) if is_link(st)));
    assert!(matches!(&many[200], Ok(None)));
    assert!(matches!(&many[300], Ok(None)));
    assert!(many[400].is_err(), "a path through a symlink is refused");
    assert!(many[500].is_err(), "`..` is refused");
    let meta = std::fs::metadata(tmp.path().join("d9/f9")).unwrap();
    assert!(matches!(&many[600], Ok(Some(st)) if st.st_ino == meta.ino()));
}

#[test]
fn never_writes_or_reads_through_symlinks() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    symlink(outside.path(), tmp.path().join("link")).unwrap();
    symlink(outside.path().join("secret"), tmp.path().join("file-link")).unwrap();
    let b = Beneath::open(tmp.path()).unwrap();
    // Positive control: the same names work as plain files and directories.
    b.write_atomic("dir/secret", b"x", false).unwrap();
    assert!(b.read("dir/secret", 10).unwrap().is_some());

    assert!(matches!(
        b.read("link/secret", 10),
        Err(FsError::Symlink { .. })
    ));
    assert!(matches!(
        b.read("file-link", 10),
        Err(FsError::Symlink { .. })
    ));
    assert!(matches!(
        b.write_atomic("link/secret", b"pwned", false),
        Err(FsError::Symlink { .. })
    ));
    assert!(matches!(
        b.write_atomic("file-link", b"pwned", false),
        Err(FsError::Symlink { .. })
    ));
    assert!(matches!(
        b.remove_file("file-link"),
        Err(FsError::Symlink { .. })
    ));
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"secret"
    );
    assert_eq!(b.kind("file-link").unwrap(), Some(Kind::Symlink));
    assert_eq!(
        b.read_link("file-link").unwrap().unwrap(),
        outside.path().join("secret").as_os_str().as_encoded_bytes()
    );
}

/// A change of type the reviewer accepted replaces the link itself (refused by default), a
/// symlink is swapped in over a file or another link, and a last look that finds the entry
/// changed leaves it, with no temporary name behind.
#[test]
fn a_change_of_type_replaces_the_entry_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    symlink(outside.path().join("secret"), tmp.path().join("file-link")).unwrap();
    std::fs::write(tmp.path().join("plain"), b"plain\n").unwrap();
    let b = Beneath::open(tmp.path()).unwrap();
    let write =
        |at: AtLink| b.write_atomic_with("file-link", b"a file\n", (false, None), at, |_| Ok(true));
    assert!(matches!(
        write(AtLink::Refuse),
        Err(FsError::Symlink { .. })
    ));
    write(AtLink::Replace).unwrap();
    assert_eq!(
        b.kind("file-link").unwrap(),
        Some(Kind::File {
            executable: false,
            size: 7
        })
    );
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"secret"
    );

    b.symlink_checked("plain", b"target-a", |_| Ok(true))
        .unwrap();
    assert_eq!(b.read_link("plain").unwrap().unwrap(), b"target-a");
    b.symlink_checked("plain", b"target-b", |_| Ok(true))
        .unwrap();
    assert_eq!(b.read_link("plain").unwrap().unwrap(), b"target-b");
    let r = b.symlink_checked("plain", b"target-c", |_| Ok(false));
    assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
    assert_eq!(b.read_link("plain").unwrap().unwrap(), b"target-b");
    b.symlink_checked("new/link", b"../plain", |_| Ok(true))
        .unwrap();
    assert_eq!(b.read_link("new/link").unwrap().unwrap(), b"../plain");
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[test]
fn long_names_fit_and_a_changed_file_is_not_renamed_over() {
    let tmp = tempfile::tempdir().unwrap();
    let b = Beneath::open(tmp.path()).unwrap();
    // 250 bytes: a temporary name built from it would pass the 255-byte limit.
    let long = format!("dir/{}", "l".repeat(250));
    b.write_atomic(&long, b"one\n", false).unwrap();
    b.write_atomic(&long, b"two\n", false).unwrap();
    assert_eq!(b.read(&long, 100).unwrap().unwrap().0, b"two\n");
    let real = tmp.path().join(&long);
    let r = b.write_atomic_checked(&long, b"three\n", false, |_| {
        std::fs::write(&real, b"user\n").unwrap();
        Ok(false)
    });
    assert!(matches!(r, Err(FsError::Changed { .. })), "{r:?}");
    assert_eq!(std::fs::read(&real).unwrap(), b"user\n");
    let names: Vec<_> = std::fs::read_dir(tmp.path().join("dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no stray temporary file: {names:?}");
    // Positive control: a check that passes writes.
    b.write_atomic_checked(&long, b"four\n", false, |_| Ok(true))
        .unwrap();
    assert_eq!(std::fs::read(&real).unwrap(), b"four\n");
}

#[test]
fn fifos_are_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    nix::unistd::mkfifo(&tmp.path().join("pipe"), Mode::from_bits_truncate(0o644)).unwrap();
    let b = Beneath::open(tmp.path()).unwrap();
    assert!(matches!(
        b.read("pipe", 10),
        Err(FsError::NotRegular { .. })
    ));
    assert_eq!(b.kind("pipe").unwrap(), Some(Kind::Other("fifo")));
}

/// A mode change lands only on the content it was checked against: the check is given what
/// the open file holds; a "no" changes nothing; a save by rename between the check and the
/// change keeps its own mode, and a write in place there gets the file's old mode back, both
/// answered `Changed`. The control: with nothing between, the bits are set and cleared.
#[test]
fn a_mode_change_lands_only_on_the_content_it_was_checked_against() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("d/run.sh");
    std::fs::create_dir(tmp.path().join("d")).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let reset = |body: &[u8]| {
        std::fs::write(&file, body).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    let root = Beneath::open(tmp.path()).unwrap();
    let changed = |r: &Result<(), FsError>| matches!(r, Err(FsError::Changed { .. }));

    // The control: the check sees the file's bytes and its bit; yes sets it, and clears it.
    reset(b"echo hi\n");
    let mut seen = None;
    root.set_executable_checked("d/run.sh", true, 1 << 20, |bytes, exec| {
        seen = Some((bytes.to_vec(), exec));
        Ok(true)
    })
    .unwrap();
    assert_eq!(seen, Some((b"echo hi\n".to_vec(), false)));
    assert_eq!(mode(&file), 0o755);
    root.set_executable_checked("d/run.sh", false, 1 << 20, |_, exec| Ok(exec))
        .unwrap();
    assert_eq!(mode(&file), 0o644);

    // The check says no: nothing changes.
    assert!(changed(&root.set_executable_checked(
        "d/run.sh",
        true,
        1 << 20,
        |_, _| Ok(false)
    )));
    assert_eq!(mode(&file), 0o644);

    // A save by rename lands right after the check: it keeps its mode.
    let saved = tmp.path().join("d/.run.sh.swp");
    let r = root.set_executable_checked("d/run.sh", true, 1 << 20, |_, _| {
        std::fs::write(&saved, b"echo saved\n").unwrap();
        std::fs::set_permissions(&saved, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&saved, &file).unwrap();
        Ok(true)
    });
    assert!(changed(&r), "{r:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"echo saved\n");
    assert_eq!(mode(&file), 0o600, "the user's file keeps its mode");

    // A write in place lands right after the check: the file gets its old mode back.
    reset(b"echo hi\n");
    let r = root.set_executable_checked("d/run.sh", true, 1 << 20, |_, _| {
        std::fs::write(&file, b"echo edited\n").unwrap();
        Ok(true)
    });
    assert!(changed(&r), "{r:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"echo edited\n");
    assert_eq!(mode(&file), 0o644, "its mode put back");

    // Nothing there, or not a file: not what was checked. A symlink is never followed.
    assert!(changed(&root.set_executable_checked(
        "d/gone.sh",
        true,
        1 << 20,
        |_, _| Ok(true)
    )));
    assert!(changed(&root.set_executable_checked(
        "d",
        true,
        1 << 20,
        |_, _| Ok(true)
    )));
    symlink("run.sh", tmp.path().join("d/link.sh")).unwrap();
    assert!(matches!(
        root.set_executable_checked("d/link.sh", true, 1 << 20, |_, _| Ok(true)),
        Err(FsError::Symlink { .. })
    ));
    assert_eq!(mode(&file), 0o644);
}

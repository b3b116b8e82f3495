use super::*;
use crate::odb::store::test_support::{commit, git_in as git, set_mtime};
use crate::status::snapshot::{snapshot_checkout_cached, DEFAULT_FILE_CAP};
use std::os::unix::fs::{symlink, PermissionsExt};

/// Snapshot with `state` and check it against the oracle, a whole snapshot that trusts no
/// cache; how it was made.
fn check(repo: &Path, store: &Store, state: &mut Option<CheckoutWatch>) -> How {
    let (snap, how) = snapshot(repo, store, DEFAULT_FILE_CAP, state).unwrap();
    let full = snapshot_checkout_cached(repo, store, DEFAULT_FILE_CAP, None).unwrap();
    assert_eq!(snap.tree, full.tree, "{how:?}");
    let sorted = |s: &Snapshot| {
        let mut v: Vec<String> = s.skipped.iter().map(|s| s.path.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    assert_eq!(sorted(&snap), sorted(&full), "skipped, {how:?}");
    how
}

/// With the watch off, every snapshot is a whole one, and the oracle's.
#[test]
fn an_unwatched_snapshot_is_the_whole_one() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join(".gitignore"), "*.o\n").unwrap();
    std::fs::write(repo.join("src/a.rs"), "a\n").unwrap();
    git(&repo, &["add", "-A"]);
    commit(&repo, "init");
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let same = |store: &Store| {
        let (snap, how) = snapshot_unwatched(&repo, store, DEFAULT_FILE_CAP).unwrap();
        let full = snapshot_checkout_cached(&repo, store, DEFAULT_FILE_CAP, None).unwrap();
        assert_eq!(how, How::Whole);
        assert_eq!(snap.tree, full.tree);
        snap
    };
    let first = same(&store);
    std::fs::write(repo.join("src/a.rs"), "a edited\n").unwrap();
    std::fs::write(repo.join("src/new.rs"), "new\n").unwrap();
    std::fs::write(repo.join("src/new.o"), "ignored\n").unwrap();
    let second = same(&store);
    assert_ne!(first.tree, second.tree, "the edits are seen");
    assert!(second.tree.contains_key("src/new.rs") && !second.tree.contains_key("src/new.o"));
}

fn changed(how: How) -> usize {
    match how {
        How::Changed { looked_at } => looked_at,
        How::Whole => panic!("expected an incremental snapshot"),
    }
}

/// A directory an ignore rule change un-ignores (#54.5) — the rule gone from the root
/// `.gitignore`, from a nested one, or from `.git/info/exclude` — is watched from then
/// on: an edit of a file there and a new file there are in every later snapshot, as the
/// oracle (a whole snapshot that trusts nothing) has them, round after round.
#[test]
fn a_directory_a_rule_change_unignores_is_watched_from_then_on() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("ign")).unwrap();
    std::fs::create_dir_all(repo.join("sub/deep")).unwrap();
    std::fs::create_dir_all(repo.join("ex")).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join(".gitignore"), "ign/\n").unwrap();
    std::fs::write(repo.join("sub/.gitignore"), "deep/\n").unwrap();
    std::fs::write(repo.join(".git/info/exclude"), "ex/\n").unwrap();
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    git(&repo, &["add", "-A"]);
    commit(&repo, "init");
    for d in ["ign", "sub/deep", "ex"] {
        std::fs::write(repo.join(d).join("inner.txt"), "ignored\n").unwrap();
    }
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let mut state = None;
    check(&repo, &store, &mut state);
    let unignore: [(&str, &str, &str); 3] = [
        ("ign", ".gitignore", ""),
        ("sub/deep", "sub/.gitignore", ""),
        ("ex", ".git/info/exclude", ""),
    ];
    for (d, rules, now) in unignore {
        std::fs::write(repo.join(rules), now).unwrap();
        check(&repo, &store, &mut state);
        for round in 0..3 {
            std::fs::write(repo.join(d).join("inner.txt"), format!("edit {round}\n")).unwrap();
            check(&repo, &store, &mut state);
            std::fs::write(repo.join(d).join(format!("new{round}.txt")), "new\n").unwrap();
            let (snap, _) = snapshot(&repo, &store, DEFAULT_FILE_CAP, &mut state).unwrap();
            let got = |p: &str| snap.tree.get(&format!("{d}/{p}")).map(|e| e.oid);
            let blob = |b: &str| Some(crate::odb::store::blob_id(b.as_bytes()));
            assert_eq!(
                got("inner.txt"),
                blob(&format!("edit {round}\n")),
                "{d} {round}"
            );
            assert_eq!(
                got(&format!("new{round}.txt")),
                blob("new\n"),
                "{d} {round}"
            );
            check(&repo, &store, &mut state);
        }
    }
}

#[test]
fn an_incremental_snapshot_is_always_the_whole_one() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    std::fs::create_dir_all(repo.join("docs")).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join(".gitignore"), "*.o\nbuild/\n").unwrap();
    std::fs::create_dir(repo.join("many")).unwrap();
    for i in 0..50 {
        std::fs::write(repo.join(format!("many/f{i}.txt")), format!("{i}\n")).unwrap();
        std::fs::write(repo.join(format!("src/g{i}.txt")), format!("{i}\n")).unwrap();
    }
    for (p, body) in [
        ("src/a.rs", "a\n"),
        ("src/b.rs", "b\n"),
        ("src/deep/c.rs", "c\n"),
        ("docs/x.md", "x\n"),
        ("run.sh", "#!/bin/sh\n"),
    ] {
        std::fs::write(repo.join(p), body).unwrap();
    }
    git(&repo, &["add", "-A"]);
    commit(&repo, "init");
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let p = |n: &str| repo.join(n);
    let mut state = None;
    assert_eq!(
        check(&repo, &store, &mut state),
        How::Whole,
        "the first one"
    );
    assert_eq!(
        changed(check(&repo, &store, &mut state)),
        0,
        "nothing changed"
    );

    // Edits, a deletion, new files (one ignored), a mode, a symlink: only those are looked
    // at.
    std::fs::write(p("src/a.rs"), "a edited\n").unwrap();
    std::fs::remove_file(p("src/b.rs")).unwrap();
    std::fs::write(p("src/new.rs"), "new\n").unwrap();
    std::fs::write(p("src/new.o"), "ignored\n").unwrap();
    std::fs::set_permissions(p("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink("src/a.rs", p("link")).unwrap();
    // The five named paths: new.o is ignored, b.rs is tracked but gone.
    assert_eq!(changed(check(&repo, &store, &mut state)), 5);

    // A .gitignore rule dropped: the ignored file appears; one added: a file disappears.
    // Either may change which directories are watched: a whole snapshot, a new watch.
    std::fs::write(p(".gitignore"), "build/\nsrc/new.rs\n").unwrap();
    assert_eq!(check(&repo, &store, &mut state), How::Whole, "a .gitignore");
    // `git add -f` of an ignored file (only the index changes), and `git rm --cached`.
    git(&repo, &["add", "-f", "src/new.rs"]);
    changed(check(&repo, &store, &mut state));
    git(&repo, &["rm", "-q", "--cached", "docs/x.md"]);
    changed(check(&repo, &store, &mut state));
    // A file replaced by a symlink, a FIFO (left out as skipped), a name that is not UTF-8.
    std::fs::remove_file(p("src/deep/c.rs")).unwrap();
    symlink("../a.rs", p("src/deep/c.rs")).unwrap();
    nix::unistd::mkfifo(
        &p("src/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    use std::os::unix::ffi::OsStrExt;
    std::fs::write(
        repo.join(std::ffi::OsStr::from_bytes(b"src/bad\xff.txt")),
        "x",
    )
    .unwrap();
    changed(check(&repo, &store, &mut state));
    // The same content written again (mtime and size kept): still read, since it is named.
    let mtime = std::fs::metadata(p("src/a.rs"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(p("src/a.rs"), "A EDITED\n").unwrap();
    set_mtime(&p("src/a.rs"), mtime);
    changed(check(&repo, &store, &mut state));

    // What the watch cannot follow sends the next snapshot back to a whole one, which
    // starts watching again.
    std::fs::create_dir(p("pkg")).unwrap();
    std::fs::write(p("pkg/m.rs"), "m\n").unwrap();
    let how = check(&repo, &store, &mut state);
    assert_eq!(how, How::Whole, "a new directory");
    std::fs::write(p("pkg/m.rs"), "m edited\n").unwrap();
    assert_eq!(changed(check(&repo, &store, &mut state)), 1, "watched now");
    std::fs::rename(p("src/deep"), p("src/deeper")).unwrap();
    assert_eq!(
        check(&repo, &store, &mut state),
        How::Whole,
        "a renamed directory"
    );
    std::fs::create_dir_all(p(".git/info")).unwrap();
    std::fs::write(p(".git/info/exclude"), "*.md\n").unwrap();
    assert_eq!(check(&repo, &store, &mut state), How::Whole, "info/exclude");
    assert_eq!(changed(check(&repo, &store, &mut state)), 0);

    // The documented limit, and the positive control that untouched files are really
    // taken from the last snapshot: a write through a hard link from outside is not seen
    // until a whole snapshot.
    std::fs::hard_link(p("src/a.rs"), tmp.path().join("outside")).unwrap();
    std::fs::write(tmp.path().join("outside"), "from outside\n").unwrap();
    let (snap, how) = snapshot(&repo, &store, DEFAULT_FILE_CAP, &mut state).unwrap();
    assert_eq!(changed(how), 0);
    let full = snapshot_checkout_cached(&repo, &store, DEFAULT_FILE_CAP, None).unwrap();
    assert_ne!(snap.tree["src/a.rs"], full.tree["src/a.rs"]);
}

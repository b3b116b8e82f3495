use super::*;
use crate::odb::store::test_support::{commit, git_in as git, set_mtime};
use std::os::unix::fs::symlink;

#[test]
fn checkout_snapshot_sees_what_the_user_sees() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join(".gitignore"), "ignored.txt\nbuild/\n").unwrap();
    std::fs::write(repo.join("tracked.txt"), "committed\n").unwrap();
    std::fs::write(repo.join("deleted.txt"), "gone soon\n").unwrap();
    std::fs::write(repo.join("forced.txt"), "tracked though ignored\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["add", "-f", "forced.txt"]);
    std::fs::write(repo.join(".gitignore"), "ignored.txt\nbuild/\nforced.txt\n").unwrap();
    commit(&repo, "init");
    std::fs::write(repo.join("tracked.txt"), "edited, uncommitted\n").unwrap();
    std::fs::remove_file(repo.join("deleted.txt")).unwrap();
    std::fs::write(repo.join("untracked.txt"), "new\n").unwrap();
    std::fs::write(repo.join("ignored.txt"), "secret\n").unwrap();
    std::fs::create_dir(repo.join("build")).unwrap();
    std::fs::write(repo.join("build/out"), "artifact\n").unwrap();
    symlink("tracked.txt", repo.join("link")).unwrap();
    nix::unistd::mkfifo(
        &repo.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();

    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let snap = snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).unwrap();
    let paths: Vec<&str> = snap.tree.keys().map(|s| s.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            ".gitignore",
            "forced.txt",
            "link",
            "tracked.txt",
            "untracked.txt"
        ]
    );
    let tracked = &snap.tree["tracked.txt"];
    assert_eq!(
        store.read_blob(tracked.oid).unwrap(),
        b"edited, uncommitted\n"
    );
    assert_eq!(snap.tree["link"].mode, Mode::Symlink);
    assert_eq!(
        store.read_blob(snap.tree["link"].oid).unwrap(),
        b"tracked.txt"
    );
    assert_eq!(snap.skipped.len(), 1, "{:?}", snap.skipped);
    assert_eq!(snap.skipped[0].path, "fifo");
}

/// What a walk cannot carry is reported, never silently left out (#54.3): a path longer
/// than 4096 bytes once, by the first directory past it, its path cut short for the
/// report, and a read-back of a sandbox names it as skipped. Control: the file beside it
/// is found.
#[test]
fn a_walk_reports_a_path_too_long_to_carry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sb");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ok.txt"), "ok\n").unwrap();
    crate::odb::store::test_support::deep(&dir.join("deep"), 5000);
    let w = walk(&dir, false, None, None);
    assert_eq!(
        Vec::from_iter(w.files.iter().map(String::as_str)),
        ["ok.txt"]
    );
    assert_eq!(w.skipped.len(), 1, "{:?}", w.skipped);
    let s = &w.skipped[0];
    assert!(
        s.path.starts_with("deep/ddd") && s.path.ends_with(" bytes)"),
        "{s:?}"
    );
    assert!(
        s.path.len() < 300 && s.reason.contains("longer than 4096"),
        "{s:?}"
    );
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let snap = sandbox_from_nothing(&dir, &store);
    assert_eq!(snap.skipped, w.skipped);
    assert_eq!(
        Vec::from_iter(snap.changes.keys().map(String::as_str)),
        ["ok.txt"]
    );
}

/// A whole walk is shared among threads: it must find exactly what one thread going through
/// the tree in order finds — every file not ignored (nested `.gitignore`s apply to their own
/// directory), every directory entered, the names it cannot carry — in sorted order.
#[test]
fn a_parallel_walk_finds_what_a_sequential_one_does() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut want_files = BTreeSet::new();
    let mut want_dirs = vec![String::new()];
    for d in 0..40 {
        let dir = format!("d{d:02}");
        std::fs::create_dir_all(root.join(&dir).join("sub")).unwrap();
        want_dirs.push(dir.clone());
        want_dirs.push(format!("{dir}/sub"));
        for f in 0..30 {
            std::fs::write(root.join(&dir).join(format!("f{f}.txt")), "x").unwrap();
            want_files.insert(format!("{dir}/f{f}.txt"));
        }
        std::fs::write(root.join(&dir).join("sub/deep.log"), "x").unwrap();
        if d % 2 == 0 {
            // Ignores its own directory's logs, not its siblings'.
            std::fs::write(root.join(&dir).join(".gitignore"), "*.log\n").unwrap();
            want_files.insert(format!("{dir}/.gitignore"));
        } else {
            want_files.insert(format!("{dir}/sub/deep.log"));
        }
    }
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "not content").unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"d07/bad-\xff");
    std::fs::write(root.join(odd), "x").unwrap();
    want_dirs.sort();

    let w = walk(root, false, None, None);
    assert_eq!(w.files, want_files);
    assert_eq!(w.dirs, want_dirs);
    let skipped: Vec<&str> = w.skipped.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(skipped, ["d07/bad-\\xff"]);
    // A restricted walk (one worker) agrees on what it enters.
    let dirty = crate::status::watch::Dirty {
        paths: ["d03/f1.txt".to_string()].into(),
        ..Default::default()
    };
    let part = walk(root, false, Some(dirty.within()), None);
    let d03: BTreeSet<String> = want_files
        .iter()
        .filter(|p| p.starts_with("d03/") && !p.starts_with("d03/sub/"))
        .cloned()
        .collect();
    assert_eq!(part.files, d03);
}

/// A walk with a limit stops past it holding no more than it (a name it cannot carry
/// counts as a file), whether its threads share the whole tree or one reads only the dirty
/// directories; at the limit exactly it finds everything. A read-back's candidates stop
/// past the base's files plus the new files allowed.
#[test]
fn a_walk_stops_at_its_limit_holding_no_more() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = &tmp.path().join("sb");
    for d in 0..5 {
        std::fs::create_dir_all(root.join(format!("d{d}"))).unwrap();
        for f in 0..10 {
            std::fs::write(root.join(format!("d{d}/f{f}")), "x").unwrap();
        }
    }
    std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"d0/bad-\xff")), "x").unwrap();
    let dirty = crate::status::watch::Dirty {
        trees: ["d1".to_string(), "d2".to_string()].into(),
        ..Default::default()
    };
    let held = |w: &Walked| w.files.len() + w.skipped.len();
    for max in [0, 1, 7, 50] {
        let w = walk(root, false, None, Some(max));
        assert!(w.stopped, "{max}");
        assert!(held(&w) <= max, "{max}: {}", held(&w));
        let part = walk(root, false, Some(dirty.within()), Some(max.min(19)));
        assert!(part.stopped && held(&part) <= max.min(19), "{max}");
    }
    // Positive controls: at the limit, and without one, nothing stops.
    for max in [Some(51), None] {
        let w = walk(root, false, None, max);
        assert!(!w.stopped);
        assert_eq!((w.files.len(), w.skipped.len()), (50, 1));
    }
    let part = walk(root, false, Some(dirty.within()), Some(20));
    assert!(!part.stopped);
    assert_eq!(part.files.len(), 20);

    // Candidates of a read-back with 3 of those 50 in its base: 47 new files and a name
    // it cannot carry.
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let base: FlatTree = ["d3/f0", "d3/f1", "d4/f9"]
        .into_iter()
        .map(|p| {
            let oid = store.write_blob(b"x").unwrap();
            (
                p.to_string(),
                Entry {
                    mode: Mode::File,
                    oid,
                },
            )
        })
        .collect();
    let beneath = Beneath::open(root).unwrap();
    for max_new in [10, 47] {
        let found = sandbox_candidates_since(root, &beneath, &base, None, Some(max_new));
        assert!(found.stopped, "{max_new}");
        assert!(found.new.len() + found.skipped.len() <= max_new + base.len());
    }
    let found = sandbox_candidates_since(root, &beneath, &base, None, Some(48));
    assert!(!found.stopped);
    assert_eq!((found.new.len(), found.skipped.len()), (47, 1));
}

/// The split of a watched read-back walks a directory only where a new file may be: a
/// named temporary file that is gone again (an editor's, renamed over the file it wrote)
/// reads no directory; one that is there has its directory walked. What the walk reports
/// (a name hunkgate cannot carry) shows whether it ran. A record out of base order finds no
/// stat by its binary search, and the change is read and found all the same.
#[test]
fn a_dirty_split_walks_only_where_a_new_file_is() {
    use std::os::unix::ffi::OsStringExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sb");
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let mut base = FlatTree::new();
    for d in ["a", "b"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        let path = format!("{d}/x.txt");
        std::fs::write(dir.join(&path), "base\n").unwrap();
        let oid = store.write_blob(b"base\n").unwrap();
        base.insert(
            path,
            Entry {
                mode: Mode::File,
                oid,
            },
        );
        let odd = std::ffi::OsString::from_vec(format!("{d}/bad-").bytes().chain([0xff]).collect());
        std::fs::write(dir.join(odd), "x").unwrap();
    }
    let stat_of = |p: &str| file_stat(&nix::sys::stat::lstat(&dir.join(p)).unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let record = SyncRecord {
        stamp_s: now.as_secs() as i64 + 5,
        stamp_ns: 0,
        files: base.keys().map(|p| (p.clone(), stat_of(p))).collect(),
        dirs: Vec::new(),
    };
    let root = Beneath::open(&dir).unwrap();
    let dirty_of = |paths: &[&str]| Dirty {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };

    // The agent's edit of a/x.txt through a temporary file that is gone.
    std::fs::write(dir.join("a/x.txt"), "edited\n").unwrap();
    let dirty = dirty_of(&["a/x.txt", "a/.tmp-edit"]);
    let split = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
    assert_eq!(split.candidates, BTreeSet::from(["a/x.txt".to_string()]));
    assert!(
        split.skipped.is_empty(),
        "a was walked: {:?}",
        split.skipped
    );
    assert_eq!(
        split.looked.files,
        vec![("a/x.txt".to_string(), stat_of_was(&record, "a/x.txt"))]
    );

    // A new path the watch saw go again is not looked at, even if something is there
    // now (made after the events were read: the next read-back sees it); the same path
    // not marked gone is found — what keeps this from passing for the wrong reason.
    std::fs::write(dir.join("a/late.txt"), "late\n").unwrap();
    let mut dirty = dirty_of(&["a/x.txt", "a/late.txt"]);
    let found = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
    assert!(found.candidates.contains("a/late.txt"));
    dirty.gone.insert("a/late.txt".to_string());
    let split = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
    assert_eq!(split.candidates, BTreeSet::from(["a/x.txt".to_string()]));
    std::fs::remove_file(dir.join("a/late.txt")).unwrap();

    // Positive control: a new file that is there has its directory walked (and found).
    std::fs::write(dir.join("b/new.txt"), "new\n").unwrap();
    let dirty = dirty_of(&["a/x.txt", "a/.tmp-edit", "b/new.txt"]);
    let split = split_by_dirty(&dir, &root, &base, &record, &dirty, None);
    assert_eq!(
        split.candidates,
        BTreeSet::from(["a/x.txt".to_string(), "b/new.txt".to_string()])
    );
    let skipped: Vec<&str> = split.skipped.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(skipped, ["b/bad-\\xff"]);

    // The whole read-back, with the record in order and out of it.
    let mut reversed = record.clone();
    reversed.files.reverse();
    for record in [&record, &reversed] {
        let back = snapshot_sandbox(
            &dir,
            &base,
            &store,
            DEFAULT_FILE_CAP,
            Hints {
                record: Some(record),
                dirty: Some(&dirty),
            },
        )
        .unwrap();
        let changed: Vec<&str> = back.changes.keys().map(String::as_str).collect();
        assert_eq!(changed, ["a/x.txt", "b/new.txt"]);
    }
}

/// Reads made on a few threads, a round at a time, reach the sink exactly as one thread
/// makes them: in the candidates' order, each with its own content, the ones `check`
/// vouches for unread, a vanished one left out, a FIFO reported — across more than one
/// round.
#[test]
fn capture_each_hands_over_in_order_whatever_thread_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sb");
    let n = ROUND_PATHS + 100;
    let mut candidates = Vec::new();
    for i in 0..n {
        let path = format!("d{}/f{i:05}", i % 7);
        std::fs::create_dir_all(dir.join(format!("d{}", i % 7))).unwrap();
        std::fs::write(dir.join(&path), format!("content {i}\n")).unwrap();
        candidates.push(path);
    }
    candidates.sort();
    candidates.insert(3, "gone/missing".to_string());
    nix::unistd::mkfifo(&dir.join("d0/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    candidates.insert(5, "d0/fifo".to_string());
    let root = Beneath::open(&dir).unwrap();
    let trusted = Entry {
        mode: Mode::File,
        oid: blob_id(b"not read\n"),
    };
    let mut seen = Vec::new();
    capture_each(
        &root,
        &candidates,
        DEFAULT_FILE_CAP,
        true,
        |path, _| {
            if path.ends_with('3') {
                Check::Trust(trusted)
            } else {
                Check::Read
            }
        },
        |c| {
            seen.push(c);
            Ok::<(), ()>(())
        },
    )
    .unwrap();
    let want: Vec<&String> = candidates.iter().filter(|p| *p != "gone/missing").collect();
    assert_eq!(seen.len(), want.len());
    for (c, path) in seen.iter().zip(want) {
        match c {
            Captured::File { path: p, bytes, .. } => {
                assert_eq!(p, path);
                let i: usize = path.rsplit_once("/f").unwrap().1.parse().unwrap();
                assert_eq!(bytes, format!("content {i}\n").as_bytes());
                assert!(!path.ends_with('3'));
            }
            Captured::Unchanged { path: p, entry, .. } => {
                assert_eq!(p, path);
                assert_eq!(*entry, trusted);
                assert!(path.ends_with('3'));
            }
            Captured::Skipped(s) => {
                assert_eq!(s.path, *path);
                assert_eq!(path, "d0/fifo");
            }
            other => panic!("{path}: {other:?}"),
        }
    }
}

/// What a sandbox holds against an empty base, with the default cap and no hints.
fn sandbox_from_nothing(dir: &Path, store: &Store) -> ReadBack {
    snapshot_sandbox(
        dir,
        &FlatTree::new(),
        store,
        DEFAULT_FILE_CAP,
        Hints::default(),
    )
    .unwrap()
}

fn stat_of_was(record: &SyncRecord, path: &str) -> FileStat {
    record.files.iter().find(|(p, _)| p == path).unwrap().1
}

#[test]
fn sandbox_snapshot_ignores_sandbox_git_config() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sb");
    std::fs::create_dir_all(dir.join(".git/info")).unwrap();
    // The agent's own exclude file must not hide files from review.
    std::fs::write(dir.join(".git/info/exclude"), "hidden.txt\n").unwrap();
    std::fs::write(dir.join("hidden.txt"), "x\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    std::fs::create_dir(dir.join("target")).unwrap();
    std::fs::write(dir.join("target/junk"), "x\n").unwrap();
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let snap = sandbox_from_nothing(&dir, &store);
    let paths: Vec<&str> = snap.changes.keys().map(|s| s.as_str()).collect();
    assert_eq!(paths, vec![".gitignore", "hidden.txt"]);
}

/// Make every entry of the stat cache non-racy, as if the cache had been written a few
/// seconds after the files (what the passage of time does between two runs).
fn age_cache(store: &Store) {
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    set_mtime(&stat_cache_path(store), later);
}

fn cached_snapshot(repo: &Path, store: &Store) -> (Snapshot, usize, Option<String>) {
    let mut cache = StatCache::load(&stat_cache_path(store), repo, store);
    let snap = snapshot_checkout_cached(repo, store, DEFAULT_FILE_CAP, Some(&mut cache)).unwrap();
    (snap, cache.hits(), cache.ignored.clone())
}

fn committed_repo(tmp: &Path, files: &[(&str, &str)]) -> std::path::PathBuf {
    let repo = tmp.join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    for (name, body) in files {
        std::fs::write(repo.join(name), body).unwrap();
    }
    git(&repo, &["add", "."]);
    repo
}

#[test]
fn stat_cache_rehashes_a_file_when_any_stat_field_changes() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let names = [
        "mtime", "ctime", "size", "inode", "mode", "link", "dir", "same",
    ];
    let files: Vec<(&str, &str)> = names.iter().map(|n| (*n, "0123456789\n")).collect();
    let repo = committed_repo(tmp.path(), &files);
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let n = names.len() + 1; // .git is not a file; the index adds nothing else
    let (first, hits, _) = cached_snapshot(&repo, &store);
    assert_eq!(
        (first.tree.len(), hits),
        (names.len(), 0),
        "a first run reads everything"
    );
    age_cache(&store);
    let (second, hits, _) = cached_snapshot(&repo, &store);
    assert_eq!(second.tree, first.tree);
    assert_eq!(hits, names.len(), "a warm run reads nothing (of {n})");

    let p = |name: &str| repo.join(name);
    let orig_mtime = std::fs::metadata(p("ctime")).unwrap().modified().unwrap();
    // mtime only (same content): re-hashed, same blob.
    set_mtime(
        &p("mtime"),
        orig_mtime - std::time::Duration::from_secs(100),
    );
    // ctime only: same size, mtime put back (`touch -d`), new content.
    std::fs::write(p("ctime"), "abcdefghij\n").unwrap();
    set_mtime(&p("ctime"), orig_mtime);
    // size.
    std::fs::write(p("size"), "0123456789 and more\n").unwrap();
    // inode: replaced by a new file with the same bytes, mtime put back.
    std::fs::write(p("inode.tmp"), "0123456789\n").unwrap();
    std::fs::rename(p("inode.tmp"), p("inode")).unwrap();
    set_mtime(&p("inode"), orig_mtime);
    // mode: made executable.
    std::fs::set_permissions(p("mode"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A file replaced by a symlink, another by a directory.
    std::fs::remove_file(p("link")).unwrap();
    symlink("same", p("link")).unwrap();
    std::fs::remove_file(p("dir")).unwrap();
    std::fs::create_dir(p("dir")).unwrap();
    std::fs::write(p("dir/inner"), "inside\n").unwrap();
    git(&repo, &["add", "dir/inner"]);

    let (third, hits, _) = cached_snapshot(&repo, &store);
    assert_eq!(hits, 1, "only the untouched file comes from the cache");
    let blob = |name: &str| store.read_blob(third.tree[name].oid).unwrap();
    assert_eq!(third.tree["mtime"], first.tree["mtime"]);
    assert_eq!(blob("ctime"), b"abcdefghij\n");
    assert_eq!(blob("size"), b"0123456789 and more\n");
    assert_eq!(third.tree["inode"], first.tree["inode"]);
    assert_eq!(third.tree["mode"].mode, Mode::Executable);
    assert_eq!(third.tree["link"].mode, Mode::Symlink);
    assert_eq!(blob("link"), b"same");
    assert!(!third.tree.contains_key("dir"));
    assert_eq!(blob("dir/inner"), b"inside\n");
    // And the rebuilt cache serves all of it next time.
    age_cache(&store);
    let (fourth, hits, _) = cached_snapshot(&repo, &store);
    assert_eq!(fourth.tree, third.tree);
    assert_eq!(hits, third.tree.len());
}

#[test]
fn racy_entries_are_rehashed_and_the_rule_is_what_protects_them() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = committed_repo(tmp.path(), &[("a.txt", "new content\n")]);
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let path = stat_cache_path(&store);
    // A cache whose entry has the file's exact current stat but an older content's blob:
    // what a write in the same clock tick as the hashing leaves behind.
    let stale = store.write_blob(b"old content\n").unwrap();
    let st = nix::sys::stat::lstat(&repo.join("a.txt")).unwrap();
    let stat = file_stat(&st);
    let write_cache = |stamp: (i64, u32)| {
        let mut cache = StatCache::load(&path, &repo, &store);
        let entry = Entry {
            mode: Mode::File,
            oid: stale,
        };
        cache.record("a.txt", stat, entry);
        cache.save().unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(stamp.0 as u64, stamp.1);
        set_mtime(&path, t);
    };
    let newest = (stat.mtime_s, stat.mtime_ns).max((stat.ctime_s, stat.ctime_ns));
    // Stamp equal to the file's timestamps: racy, so re-hashed.
    write_cache(newest);
    let (snap, hits, _) = cached_snapshot(&repo, &store);
    assert_eq!(hits, 0);
    assert_eq!(
        store.read_blob(snap.tree["a.txt"].oid).unwrap(),
        b"new content\n"
    );
    // Positive control: the same entry one second older than the stamp is trusted (and so
    // would be wrong) — only the racy rule told the two apart.
    write_cache((newest.0 + 1, newest.1));
    let (snap, hits, _) = cached_snapshot(&repo, &store);
    assert_eq!(hits, 1);
    assert_eq!(snap.tree["a.txt"].oid, stale);
    assert!(is_racy(&stat, newest));
    assert!(!is_racy(&stat, (newest.0 + 1, newest.1)));
}

#[test]
fn corrupt_or_foreign_caches_are_ignored_and_rebuilt() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = committed_repo(tmp.path(), &[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let path = stat_cache_path(&store);
    let (good, _, _) = cached_snapshot(&repo, &store);
    age_cache(&store);
    let valid = std::fs::read(&path).unwrap();
    // Positive control: the valid cache is used.
    assert_eq!(cached_snapshot(&repo, &store).1, 2);

    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    let mut flipped = valid.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let torn = valid[..valid.len() - 7].to_vec();
    for (what, bytes) in [
        ("garbage", b"not a cache at all".to_vec()),
        ("a flipped byte", flipped),
        ("a torn file", torn),
        ("an empty file", Vec::new()),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        set_mtime(&path, later);
        let (snap, hits, ignored) = cached_snapshot(&repo, &store);
        assert_eq!(hits, 0, "{what}");
        assert!(ignored.is_some(), "{what}");
        assert_eq!(snap.tree, good.tree, "{what}");
        // Rebuilt: the next run trusts it again.
        age_cache(&store);
        assert_eq!(cached_snapshot(&repo, &store).1, 2, "{what} rebuilt");
    }

    // Another repository's cache with the same store (same paths, other content): foreign.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    git(&other, &["init", "-q"]);
    std::fs::write(other.join("a.txt"), "A\n").unwrap();
    std::fs::write(other.join("b.txt"), "B\n").unwrap();
    git(&other, &["add", "."]);
    std::fs::write(&path, &valid).unwrap();
    set_mtime(&path, later);
    let (snap, hits, ignored) = cached_snapshot(&other, &store);
    assert_eq!(hits, 0);
    assert!(ignored.unwrap().contains("another repository"));
    assert_eq!(store.read_blob(snap.tree["a.txt"].oid).unwrap(), b"A\n");

    // A cache naming a blob the store does not have is not trusted for that entry.
    let empty_store = Store::open_or_init(&tmp.path().join("store2")).unwrap();
    let path2 = stat_cache_path(&empty_store);
    let mut cache = StatCache::load(&path2, &repo, &empty_store);
    let st = file_stat(&nix::sys::stat::lstat(&repo.join("a.txt")).unwrap());
    cache.record("a.txt", st, good.tree["a.txt"]);
    cache.save().unwrap();
    set_mtime(&path2, later);
    let (snap, hits, _) = cached_snapshot(&repo, &empty_store);
    assert_eq!(hits, 0);
    assert_eq!(
        empty_store.read_blob(snap.tree["a.txt"].oid).unwrap(),
        b"a\n"
    );
}

#[test]
fn a_cache_entry_matches_only_when_every_stat_field_does() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = committed_repo(tmp.path(), &[("a.txt", "a\n")]);
    let store = Store::open_or_init(&tmp.path().join("store")).unwrap();
    let path = stat_cache_path(&store);
    let entry = Entry {
        mode: Mode::File,
        oid: store.write_blob(b"a\n").unwrap(),
    };
    let stat = FileStat {
        mtime_s: 1000,
        mtime_ns: 5,
        ctime_s: 1000,
        ctime_ns: 6,
        size: 2,
        ino: 77,
        mode: 0o100644,
    };
    let mut cache = StatCache::load(&path, &repo, &store);
    cache.record("a.txt", stat, entry);
    cache.save().unwrap();
    let cache = StatCache::load(&path, &repo, &store);
    assert_eq!(cache.lookup("a.txt", &stat, &store), Some(entry));
    let variants = [
        (
            "mtime",
            FileStat {
                mtime_ns: 4,
                ..stat
            },
        ),
        (
            "ctime",
            FileStat {
                ctime_s: 1001,
                ..stat
            },
        ),
        ("size", FileStat { size: 3, ..stat }),
        ("inode", FileStat { ino: 78, ..stat }),
        (
            "mode",
            FileStat {
                mode: 0o100755,
                ..stat
            },
        ),
        (
            "kind",
            FileStat {
                mode: 0o120777,
                ..stat
            },
        ),
    ];
    for (field, other) in variants {
        assert_eq!(cache.lookup("a.txt", &other, &store), None, "{field}");
    }
    assert_eq!(cache.lookup("b.txt", &stat, &store), None);
}

#[test]
fn read_entries_compare_by_mode_and_content() {
    let read = |bytes: &[u8], mode| ReadEntry {
        bytes: bytes.to_vec(),
        mode,
        stat: FileStat::default(),
    };
    let entry = Entry {
        mode: Mode::File,
        oid: blob_id(b"x\n"),
    };
    let same = captured_from(
        "a".into(),
        Check::Compare(entry),
        read(b"x\n", Mode::File),
        false,
    );
    assert!(matches!(same, Captured::Unchanged { entry: e, .. } if e == entry));
    // Positive controls: other content, another mode, or no entry to compare with.
    let edited = captured_from(
        "a".into(),
        Check::Compare(entry),
        read(b"y\n", Mode::File),
        false,
    );
    // The comparison's hash is handed on, asked for or not.
    let y = Some(blob_id(b"y\n"));
    assert!(matches!(
        edited,
        Captured::File {
            executable: false,
            oid,
            ..
        } if oid == y
    ));
    let exec = captured_from(
        "a".into(),
        Check::Compare(entry),
        read(b"x\n", Mode::Executable),
        false,
    );
    assert!(matches!(
        exec,
        Captured::File {
            executable: true,
            ..
        }
    ));
    let link = captured_from("a".into(), Check::Read, read(b"x\n", Mode::Symlink), false);
    assert!(matches!(link, Captured::Symlink { target, oid: None, .. } if target == b"x\n"));
    // Hashed where it was read when asked: the id a store would give it.
    let hashed = captured_from("a".into(), Check::Read, read(b"z\n", Mode::File), true);
    let z = Some(blob_id(b"z\n"));
    assert!(matches!(hashed, Captured::File { oid, .. } if oid == z));
    let link = captured_from("a".into(), Check::Read, read(b"x\n", Mode::Symlink), true);
    let x = Some(blob_id(b"x\n"));
    assert!(matches!(link, Captured::Symlink { oid, .. } if oid == x));
}

proptest::proptest! {
    /// The read-back's check walking the base and the record beside sorted questions says
    /// what looking each path up says; out of order, or with a record out of order, it
    /// still names the base entry and never trusts a stat the lookup would not. With
    /// `sparse`, the base has far more paths than the record (as after a small change), so
    /// the check looks the base up instead of walking it.
    #[test]
    fn readback_check_is_the_lookup(
        base in proptest::collection::btree_map("[abc]{1,2}(/[abc]{1,2})?", 0u8..3, 0..16),
        recorded in proptest::collection::vec((0usize..16, 0u8..3, proptest::bool::ANY), 0..16),
        asked in proptest::collection::vec(("[abc]{1,2}(/[abc]{1,2})?", 0u8..3), 0..24),
        sort_asked in proptest::bool::ANY,
        shuffle_record in proptest::bool::ANY,
        sparse in proptest::bool::ANY,
    ) {
        let mut base: FlatTree = base
            .into_iter()
            .map(|(p, n)| (p, Entry { mode: Mode::File, oid: gix::hash::ObjectId::from_bytes_or_panic(&[n; 20]) }))
            .collect();
        if sparse {
            // Sorted among the others ('b/…' between 'a…' and 'c…'), so the walk and the
            // lookup differ in where they are.
            for i in 0..16 * SPARSE_RECORD {
                let oid = gix::hash::ObjectId::from_bytes_or_panic(&[(i % 3) as u8; 20]);
                base.insert(format!("b/z{i:04}"), Entry { mode: Mode::File, oid });
            }
        }
        let paths: Vec<&String> = base.keys().collect();
        let stat = |n: u8, racy: bool| FileStat {
            mtime_s: if racy { 100 } else { 10 },
            size: n as u64,
            ..FileStat::default()
        };
        let mut files: Vec<(String, FileStat)> = recorded
            .iter()
            .filter_map(|&(i, n, racy)| paths.get(i).map(|p| ((*p).clone(), stat(n, racy))))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect();
        if shuffle_record {
            files.reverse();
        }
        let record = SyncRecord { stamp_s: 50, stamp_ns: 0, files, dirs: Vec::new() };
        let mut asked: Vec<(String, FileStat)> = asked
            .into_iter()
            .map(|(p, n)| (p, stat(n, false)))
            .chain(paths.iter().map(|p| ((*p).clone(), stat(1, false))))
            .collect();
        if sort_asked {
            asked.sort_by(|a, b| a.0.cmp(&b.0));
            asked.dedup_by(|a, b| a.0 == b.0);
        }
        let lookup = |path: &str, st: &FileStat| match base.get(path) {
            None => Check::Read,
            Some(entry) => match record.files.iter().find(|(p, _)| p == path) {
                Some((_, was)) if was == st && !is_racy(was, (50, 0)) => Check::Trust(*entry),
                _ => Check::Compare(*entry),
            },
        };
        let mut check = readback_check(&base, Some(&record));
        for (path, st) in &asked {
            let (got, want) = (check(path, st), lookup(path, st));
            if sort_asked {
                proptest::prop_assert_eq!(got, want, "{}", path);
            } else {
                let entry = |c: Check| match c {
                    Check::Read => None,
                    Check::Trust(e) | Check::Compare(e) => Some(e),
                };
                proptest::prop_assert_eq!(entry(got), entry(want), "{}", path);
                proptest::prop_assert!(
                    !matches!(got, Check::Trust(_)) || got == want,
                    "{} trusted against the lookup's {:?}", path, want
                );
            }
        }
    }
}

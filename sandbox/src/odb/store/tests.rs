use super::*;

/// Run git on the bare repository at `git_dir`.
fn git(git_dir: &Path, args: &[&str]) -> String {
    test_support::git_in(git_dir, &[&["--git-dir", "."], args].concat())
}

/// A tree with every mode and a deep path, its blobs written to `store`; returns the tree
/// and the id of the blob `a\n`.
fn sample_tree(store: &Store) -> (FlatTree, ObjectId) {
    let a = store.write_blob(b"a\n").unwrap();
    let b = store.write_blob(b"#!/bin/sh\n").unwrap();
    let mut tree = FlatTree::new();
    for (path, mode, oid) in [
        ("a.txt", Mode::File, a),
        ("bin/run", Mode::Executable, b),
        ("bin/link", Mode::Symlink, a),
        ("a/b/c/d.txt", Mode::File, b),
    ] {
        tree.insert(path.into(), Entry { mode, oid });
    }
    (tree, a)
}

#[test]
fn flat_tree_roundtrip_and_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let (tree, a) = sample_tree(&store);
    let tree_id = store.write_tree(&tree).unwrap();
    let commit = store.commit(tree_id, &[], "base").unwrap();
    store.set_ref("refs/hunkgate/runs/x/base", commit).unwrap();
    assert_eq!(store.read_tree(commit).unwrap(), tree);
    assert_eq!(store.read_tree(tree_id).unwrap(), tree);
    assert_eq!(store.read_blob(a).unwrap(), b"a\n");
    assert_eq!(store.commit_tree(commit).unwrap(), tree_id);

    // Compare with git itself: the store is a valid repository with the same tree.
    let listed = git(
        store.path(),
        &[
            "ls-tree",
            "-r",
            "--format=%(objectmode) %(path)",
            "refs/hunkgate/runs/x/base",
        ],
    );
    assert_eq!(
        listed,
        "100644 a.txt\n100644 a/b/c/d.txt\n100644 bin/link\n100755 bin/run\n"
            .replace("100644 bin/link", "120000 bin/link")
    );
    // Reopening finds the same objects.
    drop(store);
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    assert!(store.has_object(commit));

    // Two refs in one transaction, both seen by git; a bad name moves neither.
    store
        .set_refs(
            &["refs/hunkgate/runs/x/head", "refs/hunkgate/s/y/run"],
            commit,
        )
        .unwrap();
    let shown = git(
        store.path(),
        &["for-each-ref", "--format=%(objectname) %(refname)"],
    );
    let c = commit.to_string();
    assert_eq!(
        shown,
        format!("{c} refs/hunkgate/runs/x/base\n{c} refs/hunkgate/runs/x/head\n{c} refs/hunkgate/s/y/run\n")
    );
    assert!(store
        .set_refs(&["refs/hunkgate/ok", "refs/hunkgate/bad..name"], commit)
        .is_err());
    assert!(!git(store.path(), &["for-each-ref"]).contains("refs/hunkgate/ok"));

    // The refs under a prefix, loose or packed by git, as git lists them.
    git(store.path(), &["pack-refs", "--all"]);
    store.set_ref("refs/hunkgate/s/z/run", tree_id).unwrap();
    store.set_ref("refs/other/x", commit).unwrap();
    let listed: Vec<String> = store
        .refs_under("refs/hunkgate/")
        .unwrap()
        .iter()
        .map(|(name, id)| format!("{id} {name}\n"))
        .collect();
    assert_eq!(
        listed.concat(),
        git(
            store.path(),
            &[
                "for-each-ref",
                "--format=%(objectname) %(refname)",
                "refs/hunkgate/"
            ]
        )
    );
    assert_eq!(listed.len(), 4, "{listed:?}");

    // Every loose-object directory is there from the start, so writing an object never
    // has to make one.
    let fanout = std::fs::read_dir(store.path().join("objects"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().len() == 2)
        .count();
    assert_eq!(fanout, 256);
}

/// A blob written lately is read back from memory, the same bytes git reads from the
/// store; the oldest go once more are written, and a big blob is never kept.
#[test]
fn blobs_written_lately_are_read_back_from_memory_within_bounds() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let loose = |oid: ObjectId| {
        let hex = oid.to_string();
        store.path().join("objects").join(&hex[..2]).join(&hex[2..])
    };
    let first = store.write_blob(b"first\n").unwrap();
    assert_eq!(
        git(store.path(), &["cat-file", "-p", &first.to_string()]),
        "first\n"
    );
    // Taken from memory: the object itself is gone from the disk.
    std::fs::remove_file(loose(first)).unwrap();
    assert_eq!(store.read_blob(first).unwrap(), b"first\n");
    // Positive control: an object only on disk is read from there.
    let by_git = tmp.path().join("by-git.txt");
    std::fs::write(&by_git, b"by git\n").unwrap();
    let id = git(
        store.path(),
        &["hash-object", "-w", by_git.to_str().unwrap()],
    );
    assert_eq!(
        store
            .read_blob(ObjectId::from_hex(id.trim().as_bytes()).unwrap())
            .unwrap(),
        b"by git\n"
    );
    // Sixteen more blobs push the first out.
    for i in 0..RecentBlobs::MAX {
        let oid = store.write_blob(format!("blob {i}\n").as_bytes()).unwrap();
        assert_eq!(
            store.read_blob(oid).unwrap(),
            format!("blob {i}\n").as_bytes()
        );
    }
    assert!(
        store.read_blob(first).is_err(),
        "the oldest blob is no longer kept"
    );
    // A blob over the byte bound is read from the disk.
    let big = vec![b'x'; RecentBlobs::MAX_BYTES + 1];
    let oid = store.write_blob(&big).unwrap();
    assert_eq!(store.read_blob(oid).unwrap(), big);
    std::fs::remove_file(loose(oid)).unwrap();
    assert!(
        store.read_blob(oid).is_err(),
        "a big blob is not kept in memory"
    );
    // Giving memory back when the hub is quiet drops them, maps released or not.
    let last = store.write_blob(b"last\n").unwrap();
    std::fs::remove_file(loose(last)).unwrap();
    assert_eq!(store.read_blob(last).unwrap(), b"last\n");
    assert!(!store.release_maps_after(u64::MAX).unwrap());
    assert!(store.read_blob(last).is_err(), "kept after the release");
}

/// More blobs than a batch writes loose, so it writes them as one pack: `packed 0\n`, ….
fn write_a_pack(store: &Store) {
    let mut batch = store.batch();
    for i in 0..=ObjectBatch::PACK_AT {
        batch
            .write_blob(format!("packed {i}\n").as_bytes())
            .unwrap();
    }
    batch.finish().unwrap();
}

#[test]
fn sync_loose_fsyncs_loose_objects_skips_packed_ones_and_names_a_missing_one() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("store.git");
    let store = Store::open_or_init(&path).unwrap();
    write_a_pack(&store);
    let packed = blob_id(b"packed 0\n");
    let loose_path = |id: ObjectId| loose_object_path(&path.join("objects"), id);
    assert!(
        !loose_path(packed).exists() && store.has_object(packed),
        "in the pack"
    );

    let store = Store::open_or_init(&path).unwrap();
    let a = store.write_blob(b"a\n").unwrap();
    let b = store.write_blob(b"b\n").unwrap();
    assert!(loose_path(a).is_file() && loose_path(b).is_file());
    assert_eq!(store.sync_loose([a, packed, b]).unwrap(), 2);
    assert_eq!(store.sync_loose([packed]).unwrap(), 0);
    assert_eq!(store.sync_loose([]).unwrap(), 0);

    let absent = blob_id(b"never written\n");
    let err = store.sync_loose([a, absent]).unwrap_err().to_string();
    assert!(
        err.contains(&absent.to_string()) && err.contains("not in the store"),
        "{err}"
    );
}

#[test]
fn an_empty_loose_object_is_written_again_not_taken_as_present() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("store.git");
    let id = Store::open_or_init(&path)
        .unwrap()
        .write_blob(b"kept\n")
        .unwrap();
    let hex = id.to_string();
    let loose = loose_object_path(&path.join("objects"), id);
    // What a power loss can leave of a loose object written without an fsync.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&loose)
        .unwrap()
        .set_len(0)
        .unwrap();
    let store = Store::open_or_init(&path).unwrap();
    assert!(
        store.read_blob(id).is_err(),
        "an empty object is unreadable"
    );
    assert_eq!(store.write_blob(b"kept\n").unwrap(), id);
    assert_eq!(store.read_blob(id).unwrap(), b"kept\n");
    assert_eq!(git(&path, &["cat-file", "blob", &hex]), "kept\n");
    // Positive control: a whole object is taken as present and left alone.
    let before = std::fs::metadata(&loose).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let store = Store::open_or_init(&path).unwrap();
    assert_eq!(store.write_blob(b"kept\n").unwrap(), id);
    assert_eq!(
        std::fs::metadata(&loose).unwrap().modified().unwrap(),
        before
    );
}

#[test]
fn empty_loose_objects_are_dropped_whole_ones_and_packs_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("store.git");
    let store = Store::open_or_init(&path).unwrap();
    write_a_pack(&store);
    let ids: Vec<ObjectId> = ["a\n", "b\n", "c\n"]
        .iter()
        .map(|b| store.write_blob(b.as_bytes()).unwrap())
        .collect();
    assert_eq!(
        store.drop_empty_loose_objects().unwrap(),
        0,
        "nothing empty"
    );
    for id in &ids[..2] {
        std::fs::File::create(loose_object_path(&path.join("objects"), *id)).unwrap();
    }
    let store = Store::open_or_init(&path).unwrap();
    assert_eq!(store.drop_empty_loose_objects().unwrap(), 2);
    assert!(!store.has_object(ids[0]) && !store.has_object(ids[1]));
    assert_eq!(store.read_blob(ids[2]).unwrap(), b"c\n");
    assert_eq!(
        store.read_blob(blob_id(b"packed 3\n")).unwrap(),
        b"packed 3\n"
    );
    git(&path, &["fsck", "--strict", "--no-dangling"]);
}

/// Many new trees go into one pack that git reads as its own (`fsck`, `ls-tree`); a few
/// stay loose. A whole tree of 100 directories, then an edit reaching 70 of them.
#[test]
fn many_new_trees_are_one_pack_that_git_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let packs = || {
        std::fs::read_dir(store.path().join("objects/pack"))
            .map(|d| {
                d.filter(|e| e.as_ref().unwrap().path().extension() == Some("pack".as_ref()))
                    .count()
            })
            .unwrap_or(0)
    };
    let x = store.write_blob(b"x\n").unwrap();
    let y = store.write_blob(b"y\n").unwrap();
    let mut tree = FlatTree::new();
    for d in 0..100 {
        tree.insert(
            format!("d{d:03}/f{d}"),
            Entry {
                mode: Mode::File,
                oid: x,
            },
        );
    }
    let base = store.write_tree(&tree).unwrap();
    assert_eq!(packs(), 1);
    let mut changes = Changes::new();
    for d in 0..70 {
        changes.insert(
            format!("d{d:03}/f{d}"),
            Some(Entry {
                mode: Mode::File,
                oid: y,
            }),
        );
    }
    let edited = store.edit_tree(base, &changes).unwrap();
    assert_eq!(packs(), 2);
    // Two directories: loose.
    let few: Changes = [(
        "d098/g".to_string(),
        Some(Entry {
            mode: Mode::File,
            oid: y,
        }),
    )]
    .into();
    let small = store.edit_tree(edited, &few).unwrap();
    assert_eq!(packs(), 2);
    let commit = store.commit(small, &[], "edited").unwrap();
    git(store.path(), &["fsck", "--strict", "--no-dangling"]);
    let listed = git(
        store.path(),
        &[
            "ls-tree",
            "-r",
            "--format=%(objectname) %(path)",
            &commit.to_string(),
        ],
    );
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 101);
    assert_eq!(lines[0], format!("{y} d000/f0"));
    assert_eq!(lines[70], format!("{x} d070/f70"));
    assert!(lines.contains(&format!("{y} d098/g").as_str()));
    // Reopened, the store reads its packed trees back.
    drop(store);
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    assert_eq!(store.read_tree(edited).unwrap().len(), 100);
}

/// Git's tree order puts `a/` after `a.c` and `a-b` but before `a0`; deep directories
/// that hold only directories need trees too. The tree ids must be git's own.
#[test]
fn trees_are_the_ones_git_writes_for_the_same_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let x = store.write_blob(b"x\n").unwrap();
    let paths = [
        "a",
        "a-b",
        "a.c",
        "a0",
        "b/a/x",
        "b/a-b",
        "b/a.c/y",
        "b/a0",
        "c/d/e/f/g",
        "c/d.e",
        "z/1",
        "z/10",
        "z/1/",
        "\u{e9}t\u{e9}/\u{fc}",
    ];
    let mut tree = FlatTree::new();
    for (i, path) in paths.iter().enumerate() {
        if path.ends_with('/') {
            continue;
        }
        let mode = [Mode::File, Mode::Executable, Mode::Symlink][i % 3];
        tree.insert(path.to_string(), Entry { mode, oid: x });
    }
    // "a" cannot be a file beside "a/..." paths; it has none here.
    let ours = store.write_tree(&tree).unwrap();
    let index_info: String = tree
        .iter()
        .map(|(p, e)| format!("{} {}\t{p}\n", e.mode.octal(), e.oid))
        .collect();
    let index = tmp.path().join("index");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("git update-index --index-info && git write-tree")
        .env("GIT_DIR", store.path())
        .env("GIT_INDEX_FILE", &index)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(index_info.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        ours.to_string()
    );
    assert_eq!(store.read_tree(ours).unwrap(), tree);
    git(store.path(), &["fsck", "--no-dangling"]);
    // The empty tree is git's empty tree.
    assert_eq!(
        store.write_tree(&FlatTree::new()).unwrap(),
        ObjectId::empty_tree(gix::hash::Kind::Sha1)
    );
}

/// A flat tree from generated paths, with a path that is also a directory of another
/// dropped (a file system cannot hold both).
fn valid_tree(store: &Store, paths: BTreeMap<String, u8>) -> FlatTree {
    let blobs: Vec<ObjectId> = (0..3)
        .map(|i| store.write_blob(format!("{i}\n").as_bytes()).unwrap())
        .collect();
    let dirs: std::collections::HashSet<String> = paths
        .keys()
        .flat_map(|p| {
            p.match_indices('/')
                .map(|(i, _)| p[..i].to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    paths
        .into_iter()
        .filter(|(p, _)| !dirs.contains(p))
        .map(|(p, k)| {
            let mode = [Mode::File, Mode::Executable, Mode::Symlink][k as usize % 3];
            let oid = blobs[k as usize / 3 % 3];
            (p, Entry { mode, oid })
        })
        .collect()
}

/// The same edit made by gix's tree editor (which [`Store::edit_tree_in`] used before it
/// edited trees' bytes itself): removals first, then upserts in path order.
fn edited_by_gix(store: &Store, base: ObjectId, changes: &Changes) -> ObjectId {
    let repo = store.local();
    let mut editor = repo.edit_tree(base).unwrap();
    for (path, _) in changes.iter().filter(|(_, e)| e.is_none()) {
        editor.remove(path.as_str()).unwrap();
    }
    for (path, entry) in changes {
        if let Some(entry) = entry {
            editor
                .upsert(path.as_str(), entry.mode.kind(), entry.oid)
                .unwrap();
        }
    }
    editor.write().unwrap().detach()
}

/// Up to `len` paths of one to three short components over two letters (so that files
/// and directories of the same name meet), each with a value from `values`.
fn paths_to(
    values: std::ops::Range<u8>,
    len: std::ops::Range<usize>,
) -> impl proptest::strategy::Strategy<Value = BTreeMap<String, u8>> {
    proptest::collection::btree_map("[ab]{1,2}(/[ab]{1,2}){0,2}", values, len)
}

/// A fresh store holding the tree of `paths` ([`valid_tree`]): the store's directory (kept
/// for as long as the store is used), the store, the tree and its id.
fn store_with(paths: BTreeMap<String, u8>) -> (tempfile::TempDir, Store, FlatTree, ObjectId) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let tree = valid_tree(&store, paths);
    let id = store.write_tree(&tree).unwrap();
    (tmp, store, tree, id)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Editing the base's tree by the changes gives exactly the tree written whole: files
    /// that become directories and back, directories emptied, new nested directories.
    #[test]
    fn an_edited_tree_is_the_tree_written_whole(
        a in paths_to(0u8..9, 0..14),
        b in paths_to(0u8..9, 0..14),
    ) {
        let (_tmp, store, base, base_id) = store_with(a);
        let target = valid_tree(&store, b);
        let changes = changes_between(&base, &target);
        let edited = store.edit_tree(base_id, &changes).unwrap();
        proptest::prop_assert_eq!(edited, store.write_tree(&target).unwrap());
        proptest::prop_assert_eq!(store.read_tree(edited).unwrap(), target);
    }

    /// Any changes — not only those between two trees: removals of paths that are not
    /// there, a file removed and a directory made in its place, removals beneath a path
    /// set — give the tree gix's editor gives. (Not a path set and a path beneath it set
    /// too, which no read-back gives: gix then keeps what the directory held before.)
    #[test]
    fn an_edit_is_the_one_gix_makes_of_any_changes(
        a in paths_to(0u8..9, 0..14),
        edits in paths_to(0u8..12, 0..10),
    ) {
        let (_tmp, store, _, base_id) = store_with(a);
        let blobs: Vec<ObjectId> = (0..3)
            .map(|i| store.write_blob(format!("{i}\n").as_bytes()).unwrap())
            .collect();
        let changes: Changes = edits
            .into_iter()
            .map(|(p, k)| {
                let entry = (k < 9).then(|| Entry {
                    mode: [Mode::File, Mode::Executable, Mode::Symlink][k as usize % 3],
                    oid: blobs[k as usize / 3 % 3],
                });
                (p, entry)
            })
            .collect();
        let set = |p: &str| changes.get(p).is_some_and(Option::is_some);
        let changes: Changes = changes
            .iter()
            .filter(|(p, e)| {
                e.is_none() || !p.match_indices('/').any(|(i, _)| set(&p[..i]))
            })
            .map(|(p, e)| (p.clone(), *e))
            .collect();
        let ours = store.edit_tree(base_id, &changes).unwrap();
        proptest::prop_assert_eq!(ours, edited_by_gix(&store, base_id, &changes));
    }
}

/// An agent may nest directories thousands deep: their trees are edited and read on a
/// stack of the store's own, not on the thread's (which this 256 KiB one would overflow).
#[test]
fn a_change_thousands_of_directories_deep_is_edited_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let file = Entry {
        mode: Mode::File,
        oid: store.write_blob(b"x\n").unwrap(),
    };
    let deep = format!("{}/f", vec!["d"; 3000].join("/"));
    let base = store
        .write_tree(&[("top".to_string(), file)].into())
        .unwrap();
    let changes: Changes = [(deep.clone(), Some(file))].into();
    fn on_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn_scoped(scope, f)
                .unwrap()
                .join()
                .unwrap()
        })
    }
    let edited = on_small_stack(|| store.edit_tree(base, &changes)).unwrap();
    let target: FlatTree = [("top".to_string(), file), (deep, file)].into();
    assert_eq!(edited, store.write_tree(&target).unwrap());
    // Read back whole on the same small stack: the walk keeps its own list of trees.
    let read = on_small_stack(|| store.read_tree(edited)).unwrap();
    assert_eq!(read, target);
}

#[test]
fn an_edit_git_would_refuse_is_not_written() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let x = store.write_blob(b"x\n").unwrap();
    let file = Entry {
        mode: Mode::File,
        oid: x,
    };
    let base = store
        .write_tree(&[("src/a".to_string(), file)].into())
        .unwrap();
    let edit = |path: &str| {
        let changes: Changes = [(path.to_string(), Some(file))].into();
        store.edit_tree(base, &changes)
    };
    // Positive control: an ordinary new path is written, in its place.
    let ok = edit("src/b").unwrap();
    assert_eq!(
        store.read_tree(ok).unwrap().keys().collect::<Vec<_>>(),
        ["src/a", "src/b"]
    );
    for bad in [
        "src/.git/config",
        ".git/hooks/pre-commit",
        "src/../x",
        "src/./x",
        "a//b",
    ] {
        let err = edit(bad).expect_err(bad).to_string();
        assert!(err.contains(bad), "the error names the path {bad}: {err}");
    }
}

#[test]
fn a_tree_git_would_refuse_is_not_written() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let x = store.write_blob(b"x\n").unwrap();
    let tree_of = |paths: &[&str]| -> FlatTree {
        paths
            .iter()
            .map(|p| {
                (
                    p.to_string(),
                    Entry {
                        mode: Mode::File,
                        oid: x,
                    },
                )
            })
            .collect()
    };
    // Positive control: the same shapes with harmless names are written.
    store.write_tree(&tree_of(&["a/b", "c/d/e"])).unwrap();
    for (paths, says) in [
        (
            &["a", "a/b"][..],
            "a: a path is both a file and a directory",
        ),
        (
            &["x/y", "x/y/z"][..],
            "x/y: a path is both a file and a directory",
        ),
        (&[".git/config"][..], ".git"),
        (&["a/.GIT/hooks"][..], ".git"),
        (&["a/../b"][..], "Relative"),
        (&["a//b"][..], "empty"),
        (&["/abs"][..], "empty"),
    ] {
        let err = store.write_tree(&tree_of(paths)).unwrap_err().to_string();
        assert!(err.contains(says), "{paths:?}: {err}");
    }
}

fn packs_in(store: &Store) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(store.path().join("objects/pack"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A batch keeping contents (a publish's) holds the new blobs readable in memory and
/// writes nothing until it is finished; then the blobs, the trees and the commit made
/// into it are one pack, made in memory, that git verifies
/// and reads. Past its budget it keeps no more and writes as it goes; dropped, it leaves
/// nothing.
#[test]
fn a_keeping_batch_writes_blobs_trees_and_commit_as_one_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let file = |body: &str| Entry {
        mode: Mode::File,
        oid: blob_id(body.as_bytes()),
    };
    // A base of 100 directories; a change to one file in each rewrites 101 trees.
    let base: FlatTree = (0..100)
        .flat_map(|d| (0..3).map(move |f| format!("d{d:03}/f{f}.txt")))
        .map(|p| (p.clone(), file(&p)))
        .collect();
    for p in base.keys() {
        store.write_blob(p.as_bytes()).unwrap();
    }
    let base_id = store.write_tree(&base).unwrap();
    let before = packs_in(&store);

    let bodies: Vec<(String, String)> = (0..100)
        .map(|d| {
            (
                format!("d{d:03}/f1.txt"),
                format!("new {d}\n").repeat(d + 1),
            )
        })
        .collect();
    let mut batch = store.batch().keeping(1 << 20);
    let mut changes = Changes::new();
    for (path, body) in &bodies {
        let oid = batch.write_blob(body.as_bytes()).unwrap();
        changes.insert(
            path.clone(),
            Some(Entry {
                mode: Mode::File,
                oid,
            }),
        );
    }
    // A blob the store has is neither kept nor written again (a diff reads it from the
    // store); a repeat of a new one is kept once.
    let old = batch.write_blob(b"d000/f0.txt").unwrap();
    batch.write_blob(bodies[3].1.as_bytes()).unwrap();
    let fresh = batch.take_fresh();
    assert_eq!(fresh.len(), 100);
    assert!(!batch.spilled(), "every new blob was kept");
    assert_eq!(fresh.get(&old), None);
    for (path, body) in &bodies {
        assert_eq!(
            fresh.get(&changes[path].unwrap().oid),
            Some(body.as_bytes())
        );
    }
    let tree = store.edit_tree_in(&mut batch, base_id, &changes).unwrap();
    let commit = store.commit_in(&mut batch, tree, &[], "run").unwrap();
    assert_eq!(
        packs_in(&store),
        before,
        "nothing written before the batch is finished"
    );
    assert!(!store.has_object(commit));
    batch.finish().unwrap();

    let packs = packs_in(&store);
    let new: Vec<&String> = packs.iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 2, "one .pack and its .idx: {packs:?}");
    let pack = store.path().join("objects/pack").join(new[1]);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&pack).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o444);
    let verified = git(store.path(), &["verify-pack", "-v", pack.to_str().unwrap()]);
    let count = |kind: &str| verified.lines().filter(|l| l.contains(kind)).count();
    assert_eq!(
        (count(" blob "), count(" tree "), count(" commit ")),
        (100, 101, 1)
    );
    let mut want = base.clone();
    for (path, entry) in &changes {
        want.insert(path.clone(), entry.unwrap());
    }
    assert_eq!(store.read_tree(commit).unwrap(), want);
    assert_eq!(
        store.commit_tree(commit).unwrap(),
        store.write_tree(&want).unwrap()
    );
    let (path, body) = &bodies[7];
    let shown = git(store.path(), &["show", &format!("{commit}:{path}")]);
    assert_eq!(&shown, body);
    git(store.path(), &["fsck", "--no-dangling"]);

    // Over the budget: only what fits is kept, the rest goes into a pack as it comes; of
    // those, which are not text is known without reading them back.
    let mut over = store.batch().keeping(100);
    let big: Vec<String> = (0..80).map(|i| format!("big {i}\n").repeat(20)).collect();
    let ids: Vec<ObjectId> = big
        .iter()
        .map(|b| over.write_blob(b.as_bytes()).unwrap())
        .collect();
    let binary = over.write_blob(&[0u8; 200]).unwrap();
    let small_binary = over.write_blob(b"\0").unwrap();
    let fresh = over.take_fresh();
    assert_eq!(fresh.len(), 1, "only the one-byte blob fits: {fresh:?}");
    assert!(fresh.not_text(&binary));
    assert!(!fresh.not_text(&small_binary), "kept: read from memory");
    assert!(ids.iter().all(|id| !fresh.not_text(id)), "text");
    assert!(
        over.spilled(),
        "a blob not kept is readable only once finished"
    );
    over.finish().unwrap();
    for (id, body) in ids.iter().zip(&big) {
        assert_eq!(store.read_blob(*id).unwrap(), body.as_bytes());
    }

    // Dropped unfinished: nothing is written.
    let packs = packs_in(&store);
    let mut dropped = store.batch().keeping(1 << 20);
    for i in 0..200 {
        dropped
            .write_blob(format!("dropped {i}\n").as_bytes())
            .unwrap();
    }
    let dropped_id = dropped.write_blob(b"dropped 0\n").unwrap();
    drop(dropped);
    assert_eq!(packs_in(&store), packs);
    assert!(!store.has_object(dropped_id));
}

/// Without packs (`[accel] pack = false`) a batch of many objects — held to the end, or
/// past what a batch holds — is written loose, each object what the pack would hold:
/// git reads every one, and no pack is made. Control: the same batch with packs makes one.
#[test]
fn without_packs_a_batch_writes_the_same_objects_loose() {
    let tmp = tempfile::tempdir().unwrap();
    let bodies: Vec<String> = (0..200).map(|i| format!("new file {i}\n")).collect();
    let big = vec![b'x'; ObjectBatch::HOLD_BYTES + 1];
    let write = |name: &str, packs: bool, keeping: bool| {
        let mut store = Store::open_or_init(&tmp.path().join(name)).unwrap();
        store.use_packs(packs);
        let mut batch = match keeping {
            true => store.batch().keeping(16 << 20),
            false => store.batch(),
        };
        let mut ids: Vec<ObjectId> = bodies
            .iter()
            .map(|b| batch.write_blob(b.as_bytes()).unwrap())
            .collect();
        if !keeping {
            ids.push(batch.write_blob(&big).unwrap());
        }
        batch.finish().unwrap();
        let loose = ids
            .iter()
            .filter(|id| loose_object_path(&store.path().join("objects"), **id).is_file())
            .count();
        git(store.path(), &["fsck", "--strict", "--no-dangling"]);
        for (id, body) in ids.iter().zip(&bodies) {
            assert_eq!(store.read_blob(*id).unwrap(), body.as_bytes());
        }
        (ids, loose, packs_in(&store).len())
    };
    for keeping in [true, false] {
        let (with, loose, packs) = write(&format!("packs-{keeping}.git"), true, keeping);
        assert_eq!((loose, packs), (0, 2), "control: one pack and its index");
        let (without, loose, packs) = write(&format!("loose-{keeping}.git"), false, keeping);
        assert_eq!(without, with);
        assert_eq!((loose, packs), (without.len(), 0), "keeping {keeping}");
    }
}

/// Released, the store's maps go; everything reads as before — through a handle taken
/// before the release too — and new objects are written and read as ever.
#[test]
fn a_store_reads_and_writes_the_same_after_releasing_its_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let mut batch = store.batch();
    let ids: Vec<ObjectId> = (0..200)
        .map(|i| batch.write_blob(format!("blob {i}\n").as_bytes()).unwrap())
        .collect();
    batch.finish().unwrap();
    assert_eq!(store.read_blob(ids[7]).unwrap(), b"blob 7\n");
    // Which of this store's pack files this process has mapped (Linux).
    let mapped = || -> Vec<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let dir = store.path().join("objects/pack");
        let mut files: Vec<String> = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|p| p.starts_with(dir.to_str().unwrap()))
            .map(str::to_string)
            .collect();
        files.dedup();
        files
    };
    let on_linux = cfg!(target_os = "linux");
    assert_eq!(!mapped().is_empty(), on_linux, "read, the pack is mapped");
    let reader = store.reader();
    store.release_maps().unwrap();
    assert_eq!(reader.read_blob(ids[8]).unwrap(), b"blob 8\n");
    assert_eq!(
        !mapped().is_empty(),
        on_linux,
        "a handle in use keeps its maps"
    );
    drop(reader);
    assert_eq!(mapped(), Vec::<String>::new(), "released");
    assert_eq!(store.read_blob(ids[9]).unwrap(), b"blob 9\n");
    let later = store.write_blob(b"after the release\n").unwrap();
    store.release_maps().unwrap();
    assert_eq!(store.read_blob(later).unwrap(), b"after the release\n");
    // Released only after reading enough: 20 bytes so far, the maps stay.
    assert_eq!(store.read_blob(ids[10]).unwrap(), b"blob 10\n");
    assert!(!store.release_maps_after(100).unwrap());
    assert_eq!(!mapped().is_empty(), on_linux, "too little read to release");
    for id in &ids {
        store.read_blob(*id).unwrap();
    }
    assert!(store.release_maps_after(100).unwrap());
    assert_eq!(
        mapped(),
        Vec::<String>::new(),
        "released after reading 1.7 KB"
    );
    assert!(!store.release_maps_after(100).unwrap(), "counted anew");
    assert!(store.has_object(ids[199]));
    git(store.path(), &["fsck", "--no-dangling"]);
}

/// Past `PACK_AT` new blobs a batch writes one pack that git verifies and both git and this
/// same open store read back; a small batch stays loose; an unfinished one leaves nothing.
/// A few large new blobs — fewer than [`ObjectBatch::PACK_AT`], more bytes than a batch
/// holds — go into a pack as they come, in a batch keeping contents past its budget as in
/// one that keeps none: the batch never holds much more than
/// [`ObjectBatch::HOLD_BYTES`] in memory (before, a 200 MiB publish held all of it until
/// it finished).
#[test]
fn a_batch_of_a_few_large_blobs_streams_them_into_a_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    const SIZE: usize = 2 << 20;
    let bodies: Vec<Vec<u8>> = (0..20u8)
        .map(|i| {
            let mut b = format!("blob {i}\0").into_bytes();
            b.resize(SIZE, i);
            b
        })
        .collect();
    for keeping in [Some(ObjectBatch::HOLD_BYTES), None] {
        let mut batch = match keeping {
            Some(budget) => store.batch().keeping(budget),
            None => store.batch(),
        };
        let mut most = 0;
        let mut ids = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            let mut body = body.clone();
            body.push(keeping.is_some() as u8);
            ids.push((batch.write_blob(&body).unwrap(), body));
            most = most.max(batch.held_bytes);
            assert!(
                batch.held_bytes <= ObjectBatch::HOLD_BYTES + SIZE + 1,
                "{keeping:?}: {} bytes held after {} blobs",
                batch.held_bytes,
                i + 1
            );
        }
        assert!(batch.pack.is_some(), "{keeping:?}: the pack was started");
        // Positive control: the bound was reached, so the check above could fail.
        assert!(most > ObjectBatch::HOLD_BYTES / 2, "{keeping:?}: {most}");
        assert_eq!(batch.spilled(), keeping.is_some());
        batch.finish().unwrap();
        for (id, body) in &ids {
            assert_eq!(&store.read_blob(*id).unwrap(), body);
        }
    }
    git(store.path(), &["fsck", "--no-dangling"]);
}

#[test]
fn a_big_batch_of_blobs_is_one_pack_git_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    // Read something first, so the store has loaded its (empty) set of packs.
    let early = store.write_blob(b"early\n").unwrap();
    assert_eq!(store.read_blob(early).unwrap(), b"early\n");

    let n = ObjectBatch::PACK_AT * 3;
    let bodies: Vec<Vec<u8>> = (0..n)
        .map(|i| format!("blob {i}\n").repeat(i % 50 + 1).into_bytes())
        .collect();
    let mut batch = store.batch();
    let mut ids = Vec::new();
    for body in &bodies {
        ids.push(batch.write_blob(body).unwrap());
    }
    // A repeat and a blob the store has cost nothing.
    assert_eq!(batch.write_blob(&bodies[0]).unwrap(), ids[0]);
    assert_eq!(batch.write_blob(b"early\n").unwrap(), early);
    batch.finish().unwrap();

    let packs = packs_in(&store);
    assert_eq!(packs.len(), 2, "one .pack and its .idx: {packs:?}");
    assert!(packs[0].ends_with(".idx") && packs[1].ends_with(".pack"));
    let pack = store.path().join("objects/pack").join(&packs[1]);
    let verified = git(store.path(), &["verify-pack", "-v", pack.to_str().unwrap()]);
    assert_eq!(verified.lines().filter(|l| l.contains(" blob ")).count(), n);
    for (id, body) in ids.iter().zip(&bodies).step_by(37) {
        assert_eq!(blob_id(body), *id);
        assert_eq!(&store.read_blob(*id).unwrap(), body);
        assert_eq!(
            git(store.path(), &["cat-file", "blob", &id.to_string()]).as_bytes(),
            &body[..]
        );
    }
    // Not loose: only the early blob is.
    let loose = |id: &ObjectId| {
        let hex = id.to_string();
        store
            .path()
            .join("objects")
            .join(&hex[..2])
            .join(&hex[2..])
            .exists()
    };
    assert!(loose(&early) && !ids.iter().any(loose));

    // A small batch is written loose; an unfinished big one writes nothing.
    let mut small = store.batch();
    let few = small.write_blob(b"few\n").unwrap();
    small.finish().unwrap();
    assert!(loose(&few));
    let mut dropped = store.batch();
    for i in 0..n {
        dropped
            .write_blob(format!("dropped {i}\n").as_bytes())
            .unwrap();
    }
    drop(dropped);
    assert_eq!(
        packs_in(&store),
        packs,
        "no pack and no temporary file left"
    );
    git(store.path(), &["fsck", "--no-dangling"]);
}

#[test]
fn copied_commits_bring_everything_they_need() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_init(&tmp.path().join("store.git")).unwrap();
    let (tree, _) = sample_tree(&store);
    let tree_id = store.write_tree(&tree).unwrap();
    let commit = store.commit(tree_id, &[], "base").unwrap();
    // Mirroring into another repository copies the commit with everything it needs.
    let other = Store::open_or_init(&tmp.path().join("other.git")).unwrap();
    let child = store.commit(tree_id, &[commit], "child").unwrap();
    store.copy_commit_into(&other, child).unwrap();
    other.set_ref("refs/hunkgate/runs/x/head", child).unwrap();
    git(other.path(), &["fsck", "--strict", "--no-dangling"]);
    assert_eq!(other.read_tree(child).unwrap(), tree);
}

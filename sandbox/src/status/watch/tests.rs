use super::*;

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn ancestors_run_from_the_nearest_to_the_root() {
    assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), vec!["a/b", "a", ""]);
    assert_eq!(ancestors("a").collect::<Vec<_>>(), vec![""]);
    assert_eq!(ancestors("").count(), 0);
}

#[test]
fn a_dirty_set_covers_named_paths_and_whatever_lies_in_its_trees() {
    let d = Dirty {
        paths: set(&["a/x.txt"]),
        trees: set(&["b/c"]),
        gone: BTreeSet::new(),
    };
    assert!(d.covers("a/x.txt"));
    assert!(d.covers("b/c/deep/file"));
    assert!(!d.covers("a/y.txt"), "a sibling of a named path");
    assert!(!d.covers("b/cc/file"), "a prefix that is not a directory");
    assert!(!d.covers("b/file"), "beside a tree, not in it");
    let w = d.within();
    for dir in ["", "a", "b", "b/c", "b/c/deep"] {
        assert!(w.enters(dir), "{dir}");
    }
    for dir in ["a/sub", "b/other", "z"] {
        assert!(!w.enters(dir), "{dir}");
    }
    let map: BTreeMap<String, ()> = [
        "a/x.txt",
        "a/y.txt",
        "b/c",
        "b/c/deep/file",
        "b/cc/f",
        "b/file",
    ]
    .iter()
    .map(|p| (p.to_string(), ()))
    .collect();
    let covered: Vec<&str> = d.covered_keys(&map).into_iter().collect();
    let asked: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|p| d.covers(p))
        .collect();
    assert_eq!(covered, asked);
    assert_eq!(covered, vec!["a/x.txt", "b/c/deep/file"]);
    let all = Dirty {
        trees: set(&[""]),
        ..Dirty::default()
    };
    assert!(all.covers("any/thing") && all.within().enters("any/where"));
    assert_eq!(all.covered_keys(&map).len(), map.len());
}

#[cfg(target_os = "linux")]
fn settle(w: &mut Watch) -> Dirty {
    w.changes().cloned().expect("the watch still knows")
}

#[cfg(target_os = "linux")]
#[test]
fn every_kind_of_change_is_named_and_clear_forgets_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    for f in ["top.txt", "a/x.txt", "a/y.txt", "a/b/z.txt", "a/b/mode.sh"] {
        std::fs::write(root.join(f), "base\n").unwrap();
    }
    let mut w = Watch::start(root, ["", "a", "a/b"]).unwrap();
    assert!(settle(&mut w).is_empty(), "nothing happened yet");

    std::fs::write(root.join("a/x.txt"), "changed\n").unwrap();
    std::fs::remove_file(root.join("a/y.txt")).unwrap();
    std::fs::write(root.join("new.txt"), "new\n").unwrap();
    std::fs::rename(root.join("top.txt"), root.join("a/b/moved.txt")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        root.join("a/b/mode.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("x.txt", root.join("a/link")).unwrap();
    let d = settle(&mut w);
    assert_eq!(
        d.paths,
        set(&[
            "a/b/mode.sh",
            "a/b/moved.txt",
            "a/link",
            "a/x.txt",
            "a/y.txt",
            "new.txt",
            "top.txt"
        ])
    );
    assert!(d.trees.is_empty());
    assert_eq!(
        d.gone,
        set(&["a/y.txt", "top.txt"]),
        "removed or renamed away"
    );
    assert!(!w.needs_restart(), "no directory came or went");
    w.clear();
    assert!(settle(&mut w).is_empty(), "cleared");

    // An edit through a temporary file (`sed -i`, editors): the temporary name is gone
    // again, the file it replaced is not; a name made again after it went is not gone.
    std::fs::write(root.join("a/.x.tmp"), "edited\n").unwrap();
    std::fs::rename(root.join("a/.x.tmp"), root.join("a/x.txt")).unwrap();
    std::fs::remove_file(root.join("new.txt")).unwrap();
    std::fs::write(root.join("new.txt"), "again\n").unwrap();
    let d = settle(&mut w);
    assert_eq!(d.paths, set(&["a/.x.tmp", "a/x.txt", "new.txt"]));
    assert_eq!(d.gone, set(&["a/.x.tmp"]));
    w.clear();
    assert!(settle(&mut w).gone.is_empty(), "cleared");
    // The slot's .git (recreated by every sync) is not content.
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::remove_dir_all(root.join(".git")).unwrap();
    assert!(settle(&mut w).is_empty() && !w.needs_restart());

    // Untouched paths stay out; a new directory is a tree; a .gitignore dirties its dir.
    std::fs::create_dir(root.join("a/new")).unwrap();
    std::fs::write(root.join("a/new/inside.txt"), "x").unwrap();
    std::fs::write(root.join("a/b/.gitignore"), "*.o\n").unwrap();
    let d = settle(&mut w);
    assert_eq!(d.trees, set(&["a/b", "a/new"]));
    assert!(d.covers("a/new/inside.txt") && d.covers("a/b/z.txt"));
    assert!(!d.covers("a/x.txt"));
    assert!(w.needs_restart(), "a directory was created");
}

#[cfg(target_os = "linux")]
#[test]
fn the_watch_gives_up_when_it_cannot_tell() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    // Positive control: a file change is named, the watch still knows.
    let mut w = Watch::start(root, ["", "a", "a/b"]).unwrap();
    std::fs::write(root.join("a/b/f"), "x").unwrap();
    assert!(w.changes().is_some_and(|d| d.covers("a/b/f")));
    // A renamed directory: the paths of its watched subdirectories went stale.
    std::fs::rename(root.join("a"), root.join("renamed")).unwrap();
    assert!(w.changes().is_none());
    assert!(w.lost().is_some() && w.needs_restart());
    // A symlinked directory is never watched through.
    std::fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink("real", root.join("link")).unwrap();
    assert!(Watch::start(root, ["link"]).is_err());
}

//! How fast are the steps of a run, next to git doing the same step?
//!
//! - snapshot: hash and store every file of a checkout (hunkgate `snapshot_checkout` + tree) vs
//!   `git add -A` into a scratch index + `git write-tree`;
//! - diff: hunks of a large edited file (`diff_hunks`) vs `git diff --no-index`;
//! - apply: apply every hunk (`apply_all`) vs `git apply`.
//!
//! Prints wall time per step, the ratio to git, and this process's peak RSS. Figures only: no
//! thresholds, so a slow machine never fails the build.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hunkgate_patch::{apply_all, diff_hunks};
use hunkgate_sandbox::snapshot::{snapshot_checkout, DEFAULT_FILE_CAP};
use hunkgate_sandbox::store::Store;

fn git(dir: &Path, args: &[&str], env: &[(&str, &Path)]) {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn best_of<T>(n: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..n {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        last = Some(v);
    }
    (best, last.expect("n > 0"))
}

fn peak_rss_mib() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    // ru_maxrss is KiB on Linux, bytes on macOS.
    let raw = usage.max_rss() as f64;
    if cfg!(target_os = "macos") {
        raw / (1024.0 * 1024.0)
    } else {
        raw / 1024.0
    }
}

fn report(step: &str, ours: Duration, theirs: Duration) {
    println!(
        "{step:<44} hunkgate {:>9.2} ms   git {:>9.2} ms   ratio {:>5.2}x",
        ours.as_secs_f64() * 1e3,
        theirs.as_secs_f64() * 1e3,
        ours.as_secs_f64() / theirs.as_secs_f64()
    );
}

fn main() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).expect("mkdir");
    git(&repo, &["init", "-q"], &[]);
    let files = 3000;
    for i in 0..files {
        let dir = repo.join(format!("src/m{}", i % 50));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let body: String = (0..60)
            .map(|l| format!("fn f_{i}_{l}() -> u32 {{ {l} }}\n"))
            .collect();
        std::fs::write(dir.join(format!("f{i}.rs")), body).expect("write");
    }
    println!(
        "checkout: {files} files, {:.1} MiB",
        (files * 60 * 28) as f64 / (1024.0 * 1024.0)
    );

    // Snapshot, cold: a fresh store each time, so every blob is written.
    let (ours, tree_len) = best_of(3, || {
        let store_dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_or_init(&store_dir.path().join("s.git")).expect("store");
        let snap = snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).expect("snapshot");
        store.write_tree(&snap.tree).expect("tree");
        snap.tree.len()
    });
    assert_eq!(tree_len, files);
    let (theirs, _) = best_of(3, || {
        let scratch = tempfile::tempdir().expect("tempdir");
        let objects = scratch.path().join("objects");
        std::fs::create_dir(&objects).expect("mkdir");
        let index = scratch.path().join("index");
        let env = [
            ("GIT_INDEX_FILE", index.as_path()),
            ("GIT_OBJECT_DIRECTORY", objects.as_path()),
        ];
        git(&repo, &["add", "-A"], &env);
        git(&repo, &["write-tree"], &env);
    });
    report("snapshot checkout, cold store", ours, theirs);

    // Snapshot, warm: the store already has every blob and the stat cache (in the store) knows
    // every file (the second run on the same checkout): nothing is read.
    let store_dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open_or_init(&store_dir.path().join("s.git")).expect("store");
    snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).expect("snapshot");
    let (ours, _) = best_of(3, || {
        let snap = snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).expect("snapshot");
        store.write_tree(&snap.tree).expect("tree")
    });
    let scratch = tempfile::tempdir().expect("tempdir");
    let index = scratch.path().join("index");
    let env = [("GIT_INDEX_FILE", index.as_path())];
    git(&repo, &["add", "-A"], &env);
    let (theirs, _) = best_of(3, || {
        // git's index stat cache makes this its best case: nothing is re-hashed.
        git(&repo, &["add", "-A"], &env);
        git(&repo, &["write-tree"], &env);
    });
    report("snapshot checkout, warm store + stat cache", ours, theirs);

    // Diff and apply on one large file with scattered edits.
    let old: String = (0..20_000)
        .map(|i| format!("line {i} of a long generated file\n"))
        .collect();
    let new: String = old
        .lines()
        .enumerate()
        .filter(|(i, _)| i % 397 != 5)
        .map(|(i, l)| {
            if i % 211 == 0 {
                format!("{l} (edited)\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let a = tmp.path().join("a.txt");
    let b = tmp.path().join("b.txt");
    std::fs::write(&a, &old).expect("write");
    std::fs::write(&b, &new).expect("write");
    let (ours, hunks) = best_of(5, || diff_hunks(&old, &new, 3));
    let (theirs, _) = best_of(5, || {
        let out = Command::new("git")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["diff", "--no-index", "--no-color"])
            .arg(&a)
            .arg(&b)
            .output()
            .expect("git diff");
        out.stdout.len()
    });
    report(
        &format!("diff 20k lines -> {} hunks", hunks.len()),
        ours,
        theirs,
    );

    let (ours, applied) = best_of(5, || apply_all(&old, &hunks).expect("apply"));
    assert_eq!(applied, new);
    let patch: String = std::iter::once("--- a/a.txt\n+++ b/a.txt\n".to_string())
        .chain(hunks.iter().map(|h| h.to_unified()))
        .collect();
    let work = tmp.path().join("apply");
    std::fs::create_dir(&work).expect("mkdir");
    std::fs::write(work.join("p.diff"), patch).expect("write");
    let (theirs, _) = best_of(5, || {
        std::fs::write(work.join("a.txt"), &old).expect("write");
        git(&work, &["apply", "p.diff"], &[]);
    });
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).expect("read"),
        new
    );
    report(&format!("apply {} hunks", hunks.len()), ours, theirs);
    println!("peak RSS of this process: {:.1} MiB", peak_rss_mib());
}

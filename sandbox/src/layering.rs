//! Each module may import (`crate::x`) only modules of a lower layer; the test fails on any
//! other import. The layers, bottom up — a new module must be given one here:
//!
//! 0. leaves: `threads` (work shared among threads); `wire`, the hub↔helper contract; `accel`;
//!    `odb::pack`, `odb::tree_edit`; `status::watch`; `supervise::os` (the system calls no
//!    dependency wraps safely), `supervise::watchdog`, `supervise::limits`,
//!    `supervise::agent_path`, `supervise::launch` (what a child does between fork and exec),
//!    `supervise::init` (what both kinds of PID-namespace init are made of), `supervise::procs`
//!    (the processes `/proc` shows);
//! 1. `fs::beneath`, then 2. `odb::store`: confined file access, the checkpoint store;
//! 3. `status::statcache`, then 4. `status::snapshot` and `status::foreign`: stat data, reading
//!    trees as data, what a slot holds beyond its base;
//! 5. `slot::tools`, `sync`, `status::checkout`: the agent's file tools; bringing a slot to a
//!    base; the checkout snapshotted under change notification;
//! 6. `workspace`: the `Sandbox` trait and the same-user sandbox;
//! 7. `supervise::agent`, `slot::jj`: processes and jj changes in any sandbox; then
//!    `supervise::tree`: the agent's process tree under the helper (its PID-namespace init);
//! 8. `user`, `helper`: the two ends of user isolation, which never import each other;
//! 9. `both_ends` (tests only): the kept helper's two ends driven against each other.
//!
//! A module is a file's path under `src/` (`odb/store.rs` is `odb::store`); a file in a
//! module's own folder (`fs/beneath/swap.rs`, `odb/store/batch.rs`) belongs to that module.
//! An import is resolved the same way, and a path through one of the crate root's
//! re-exports of the old flat names (`crate::store::Store`) to the module it names.
//! The folders' `mod.rs` only declare their modules, and tests are held to the same layers.

#[path = "layering/imports.rs"]
mod imports;

const LAYERS: &[&[&str]] = &[
    &[
        "threads",
        "accel",
        "wire",
        "odb::pack",
        "odb::tree_edit",
        "status::watch",
        "supervise::os",
        "supervise::watchdog",
        "supervise::limits",
        "supervise::agent_path",
        "supervise::launch",
        "supervise::init",
        "supervise::procs",
    ],
    &["fs::beneath"],
    &["odb::store"],
    &["status::statcache"],
    &["status::snapshot", "status::foreign"],
    &["slot::tools", "sync", "status::checkout"],
    &["workspace"],
    &["supervise::agent", "slot::jj"],
    &["supervise::tree"],
    &["user", "helper"],
    // Tests only: the kept helper's two ends driven against each other.
    &["both_ends"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The module of the table that `path` (segments under the crate root) is in: its longest
/// prefix that is a module of the table, or, for a path through a root re-export
/// (`store::Store`), the one module whose last segment is its first.
fn module_of(path: &[String]) -> Option<&'static str> {
    let all = || LAYERS.iter().flat_map(|l| l.iter().copied());
    (1..=path.len())
        .rev()
        .find_map(|n| all().find(|m| *m == path[..n].join("::")))
        .or_else(|| {
            let first = path.first()?;
            let mut named = all().filter(|m| m.rsplit("::").next() == Some(first.as_str()));
            match (named.next(), named.next()) {
                (Some(m), None) => Some(m),
                _ => None,
            }
        })
}

/// Every upward or sideways import among `files` (path under `src/` → text), as readable
/// lines.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (file, code) in files {
        let segments: Vec<String> = file
            .trim_end_matches(".rs")
            .split('/')
            // A module's tests beside it (`threads_tests.rs`) are that module's.
            .map(|s| s.trim_end_matches("_tests").to_string())
            .collect();
        if matches!(segments.last().map(String::as_str), Some("lib" | "mod"))
            || segments[0] == "layering"
        {
            continue;
        }
        let Some(module) = module_of(&segments).filter(|m| layer_of(m).is_some()) else {
            bad.push(format!(
                "{file}: not in any layer (add it to LAYERS in layering.rs)"
            ));
            continue;
        };
        let mine = layer_of(module).expect("in the table");
        for used in imports::imports(code) {
            let Some(theirs) = module_of(&used) else {
                continue;
            };
            if theirs != module && layer_of(theirs).expect("in the table") >= mine {
                bad.push(format!(
                    "{file}: {module} imports {theirs}, which is not below it (LAYERS in layering.rs)"
                ));
            }
        }
    }
    bad
}

/// Every `.rs` file under `dir`, as its path under `root` and its text, sorted.
fn sources(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("reading src/")
        .map(|e| e.expect("src/ entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path.strip_prefix(root).expect("under src/");
            let text = std::fs::read_to_string(&path).expect("reading a module");
            out.push((rel.to_string_lossy().into_owned(), text));
        }
    }
}

#[test]
fn modules_import_only_lower_layers() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(files.len() > 30, "found only {} source files", files.len());
    let bad = violations(&files);
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

#[test]
fn an_upward_import_is_caught_through_a_folder_or_an_old_name_and_a_downward_one_is_not() {
    let file = |path: &str, code: &str| (path.to_string(), code.to_string());
    let fine = [
        file(
            "odb/store.rs",
            "use crate::fs::beneath::Beneath;\nuse crate::odb::pack;\n",
        ),
        file("odb/store/batch.rs", "use crate::odb::store::Store;\n"),
        file(
            "fs/beneath/swap.rs",
            "use crate::supervise::os::open_for_writing;\n",
        ),
        file(
            "status/snapshot_tests.rs",
            "use crate::status::statcache::Stat;\n",
        ),
        file(
            "user.rs",
            "use crate::{store::Store, status::{snapshot, watch}};\n",
        ),
    ];
    assert_eq!(violations(&fine), Vec::<String>::new());
    let bad = violations(&[
        file(
            "status/statcache.rs",
            "use crate::{odb::store, status::snapshot::Plan};\n",
        ),
        file("fs/beneath/swap.rs", "let _ = crate::store::Store::open;\n"),
        file("odb/stray.rs", "use crate::wire;\n"),
    ]);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(
        bad[0].contains("status::statcache imports status::snapshot"),
        "{bad:?}"
    );
    assert!(bad[1].contains("fs::beneath imports odb::store"), "{bad:?}");
    assert!(bad[2].contains("odb/stray.rs: not in any layer"), "{bad:?}");
}

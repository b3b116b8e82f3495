//! The checkpoint store's side of a collection: the refs of collected work dropped, and the
//! objects nothing refers to any more repacked away.
//!
//! gix writes and reads the store in-process; it neither deletes refs in bulk nor repacks, so
//! these two steps run `git` — on the hub's own `checkpoints.git` only, with every config but
//! the store's own shut out (no system or global file, `HOME` pointed at the store, hooks off,
//! no automatic maintenance), so nothing the user or a sandbox configured applies.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The refs of the hub's checkpoint store that belong to one run or suggestion:
/// `refs/hunkgate/runs/<run>/...` and `refs/hunkgate/suggestions/<id>/...`. Returns the kind
/// (`run`, `suggestion`) and the id; None for any other ref, which a collection never touches.
pub fn owner(refname: &str) -> Option<(&'static str, &str)> {
    let rest = refname.strip_prefix("refs/hunkgate/")?;
    let (kind, rest) = if let Some(r) = rest.strip_prefix("runs/") {
        ("run", r)
    } else {
        ("suggestion", rest.strip_prefix("suggestions/")?)
    };
    let (id, _) = rest.split_once('/')?;
    (!id.is_empty()).then_some((kind, id))
}

/// `git` on `store` (a bare repository) with no configuration but the store's own.
fn git(store: &Path) -> Command {
    let mut c = Command::new("git");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_DIR", store)
        .env("HOME", store)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("LC_ALL", "C")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "gc.auto=0",
            "-c",
            "maintenance.auto=false",
            "-c",
            "core.fsync=all",
            "-c",
            "core.fsyncMethod=fsync",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn run(mut c: Command, what: &str, input: Option<&[u8]>) -> Result<(), String> {
    if input.is_some() {
        c.stdin(Stdio::piped());
    }
    let mut child = c
        .spawn()
        .map_err(|e| format!("{what}: running git: {e} (is git installed?)"))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(bytes)
            .map_err(|e| format!("{what}: writing to git: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{what}: waiting for git: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what}: git failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// Delete `refs` from `store`, all in one transaction (`git update-ref --stdin`).
pub fn delete_refs(store: &Path, refs: &BTreeSet<String>) -> Result<(), String> {
    if refs.is_empty() {
        return Ok(());
    }
    let mut input = b"start\n".to_vec();
    for r in refs {
        input.extend_from_slice(format!("delete {r}\n").as_bytes());
    }
    input.extend_from_slice(b"prepare\ncommit\n");
    let mut c = git(store);
    c.args(["update-ref", "--stdin"]);
    run(
        c,
        "dropping the checkpoint refs of collected work",
        Some(&input),
    )
}

/// Repack `store`'s objects reachable from its refs into one pack and remove those nothing
/// reaches that are older than `grace` (git's cruft packs keep the younger ones, with their
/// times), then prune what is left loose. A write still in flight — objects written, ref not
/// yet set — is younger than any sensible grace.
pub fn repack_and_prune(store: &Path, grace: Duration) -> Result<(), String> {
    let expire = match grace.as_secs() {
        0 => "now".to_string(),
        s => format!("{s}.seconds.ago"),
    };
    let mut c = git(store);
    c.args([
        "repack",
        "-d",
        "-q",
        "--cruft",
        &format!("--cruft-expiration={expire}"),
    ]);
    run(c, "repacking the checkpoint store", None)?;
    let mut c = git(store);
    c.args(["prune", &format!("--expire={expire}")]);
    run(c, "pruning the checkpoint store", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refs_of_a_run_or_suggestion_have_an_owner() {
        assert_eq!(owner("refs/hunkgate/runs/r1/base"), Some(("run", "r1")));
        assert_eq!(owner("refs/hunkgate/runs/r1/head"), Some(("run", "r1")));
        assert_eq!(
            owner("refs/hunkgate/suggestions/s-1/reviewed"),
            Some(("suggestion", "s-1"))
        );
        for other in [
            "refs/hunkgate/runs/r1",
            "refs/hunkgate/runs//base",
            "refs/hunkgate/other/x/y",
            "refs/heads/main",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
    }

    /// A real store: the refs of collected work go, the objects only they reached are pruned,
    /// and what a kept ref reaches stays readable.
    #[test]
    fn dropped_refs_objects_are_pruned_and_kept_ones_stay() {
        use hunkgate_sandbox::store::{Entry, FlatTree, Mode, Store};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoints.git");
        let store = Store::open_or_init(&path).unwrap();
        let commit_of = |text: &str| {
            let blob = store.write_blob(text.as_bytes()).unwrap();
            let tree: FlatTree = [(
                "f".to_string(),
                Entry {
                    mode: Mode::File,
                    oid: blob,
                },
            )]
            .into();
            let tree = store.write_tree(&tree).unwrap();
            (blob, store.commit(tree, &[], "m").unwrap())
        };
        let (kept_blob, kept) = commit_of("kept\n");
        let (gone_blob, gone) = commit_of("collected\n");
        store.set_ref("refs/hunkgate/runs/keep/head", kept).unwrap();
        store.set_ref("refs/hunkgate/runs/gone/head", gone).unwrap();
        delete_refs(&path, &["refs/hunkgate/runs/gone/head".to_string()].into()).unwrap();
        // A grace of an hour: the just-unreferenced objects stay (a write in flight would).
        repack_and_prune(&path, Duration::from_secs(3600)).unwrap();
        store.forget_known_objects().unwrap();
        assert!(store.has_object(gone_blob), "younger than the grace");
        repack_and_prune(&path, Duration::ZERO).unwrap();
        let fanout = || {
            std::fs::read_dir(path.join("objects"))
                .unwrap()
                .filter(|e| e.as_ref().unwrap().file_name().len() == 2)
                .count()
        };
        assert!(
            fanout() < 256,
            "git prune removes the empty object directories"
        );
        store.forget_known_objects().unwrap();
        assert_eq!(fanout(), 256, "made again: writes go into them");
        assert!(!store.has_object(gone_blob) && !store.has_object(gone));
        assert!(store.has_object(kept));
        assert_eq!(store.read_blob(kept_blob).unwrap(), b"kept\n");
        let refs = store.refs_under("refs/hunkgate/").unwrap();
        assert_eq!(
            refs.keys().collect::<Vec<_>>(),
            ["refs/hunkgate/runs/keep/head"]
        );
        // The same content written again after the prune is written, not taken for present.
        let again = store.write_blob(b"collected\n").unwrap();
        assert_eq!(again, gone_blob);
        let fresh = Store::open_existing(&path).unwrap();
        assert_eq!(fresh.read_blob(again).unwrap(), b"collected\n");
    }
}

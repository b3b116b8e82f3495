//! Every kind of file change, accepted into the checkout and rejected back out of it, checked
//! byte for byte (contents, permission bits, symlinks, and which directories exist): CRLF
//! files, a missing final newline, binary and non-UTF-8 files, the executable bit, an exact
//! rename, a file in a new subdirectory, the deletion of a directory's only file, a symlink.

use std::path::PathBuf;

use hunkgate_tests::{find_hunk, hunk_id, mode_of, run_agent, tree_of, Node, Workspace};
use serde_json::{json, Value};

const PNG_OLD: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x01\x02";
const PNG_NEW: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x03\x04\xff";

fn ok(r: &Value) -> &Value {
    assert_eq!(r["success"], true, "expected success: {r}");
    &r["data"]
}

/// Make every file of the checkout 0644, whatever the umask, so modes compare exactly.
fn normalize_modes(ws: &Workspace) {
    use std::os::unix::fs::PermissionsExt;
    for (path, node) in tree_of(&ws.repo()).unwrap() {
        if let Node::File(..) = node {
            let p = ws.repo().join(path);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
}

/// `git diff` of one file between two checkpoint commits, with git's function-name suffix
/// removed from hunk headers and the file headers dropped: what a hunk's `diff` must equal.
fn git_hunks(ws: &Workspace, from: &str, to: &str, path: &str) -> String {
    let out = ws.checkpoint_git(&["diff", from, to, "--", path]).unwrap();
    let text = String::from_utf8(out).unwrap();
    let mut body = String::new();
    let mut in_hunks = false;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("@@ ") {
            in_hunks = true;
            let end = rest.find(" @@").unwrap();
            body.push_str(&format!("@@ {} @@\n", &rest[..end]));
        } else if in_hunks {
            body.push_str(line);
        }
    }
    body
}

#[tokio::test]
async fn every_file_kind_accepted_then_rejected_back_to_the_original() {
    let ws = Workspace::new(&[
        ("crlf.txt", b"one\r\ntwo\r\nthree\r\n"),
        ("nonl.txt", b"a\nb\nc"),
        ("img.bin", PNG_OLD),
        ("latin1.txt", b"caf\xe9\n"),
        ("run.sh", b"#!/bin/sh\necho hi\n"),
        ("old/name.txt", b"same content\n"),
        ("lonely/only.txt", b"alone\n"),
        ("keep.txt", b"untouched\n"),
    ])
    .unwrap();
    normalize_modes(&ws);
    assert_eq!(mode_of(&ws.repo().join("run.sh")).unwrap(), 0o644);
    std::fs::write(ws.path("img.new"), PNG_NEW).unwrap();
    std::fs::write(ws.path("latin1.new"), b"caf\xe9s\n").unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            &format!(
                "printf 'one\\r\\nTWO\\r\\nthree\\r\\n' > crlf.txt\n\
                 printf 'a\\nb\\nC' > nonl.txt\n\
                 cp {img} img.bin\n\
                 cp {latin} latin1.txt\n\
                 chmod +x run.sh\n\
                 mkdir -p moved && mv old/name.txt moved/name.txt\n\
                 rm lonely/only.txt\n\
                 mkdir -p deep/er && printf 'deep\\n' > deep/er/new.txt\n\
                 ln -s keep.txt link",
                img = ws.path("img.new").display(),
                latin = ws.path("latin1.new").display(),
            ),
        )
        .unwrap();
    let original = tree_of(&ws.repo()).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "all kinds").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let kinds: Vec<(String, String)> = s["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["file"].as_str().unwrap().to_string(),
                h["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect_kinds: Vec<(String, String)> = [
        ("crlf.txt", "modify"),
        ("deep/er/new.txt", "create"),
        ("img.bin", "binary"),
        ("latin1.txt", "binary"),
        ("link", "symlink"),
        ("lonely/only.txt", "delete"),
        ("moved/name.txt", "rename"),
        ("nonl.txt", "modify"),
        ("run.sh", "mode"),
    ]
    .iter()
    .map(|(f, k)| (f.to_string(), k.to_string()))
    .collect();
    assert_eq!(kinds, expect_kinds, "{:#}", s["hunks"]);

    // The diffs say what git says.
    let crlf = find_hunk(&s, "crlf.txt", 0);
    assert_eq!(
        crlf["diff"],
        "@@ -1,3 +1,3 @@\n one\r\n-two\r\n+TWO\r\n three\r\n"
    );
    let nonl = find_hunk(&s, "nonl.txt", 0);
    assert_eq!(
        nonl["diff"],
        "@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+C\n\\ No newline at end of file\n"
    );
    let (base, run) = (
        s["base_commit"].as_str().unwrap(),
        s["run_commit"].as_str().unwrap(),
    );
    for f in ["crlf.txt", "nonl.txt"] {
        assert_eq!(
            find_hunk(&s, f, 0)["diff"].as_str().unwrap(),
            git_hunks(&ws, base, run, f),
            "{f}"
        );
    }
    assert_eq!(
        find_hunk(&s, "img.bin", 0)["diff"],
        "Binary files a/img.bin and b/img.bin differ\n"
    );
    assert_eq!(
        find_hunk(&s, "run.sh", 0)["diff"],
        "old mode 100644\nnew mode 100755\n"
    );
    let rename = find_hunk(&s, "moved/name.txt", 0);
    assert_eq!(rename["old_path"], "old/name.txt");
    assert_eq!(
        rename["diff"],
        "rename from old/name.txt\nrename to moved/name.txt\n"
    );
    assert_eq!(
        find_hunk(&s, "lonely/only.txt", 0)["diff"],
        "@@ -1 +0,0 @@\n-alone\n"
    );
    assert_eq!(
        find_hunk(&s, "deep/er/new.txt", 0)["diff"],
        "@@ -0,0 +1 @@\n+deep\n"
    );
    assert_eq!(tree_of(&ws.repo()).unwrap(), original, "no decision yet");

    // Whole-file kinds cannot be modified; the refusal changes nothing.
    for f in ["img.bin", "run.sh", "moved/name.txt"] {
        let r = c
            .call(
                json!({"type": "feedback", "suggestionId": sid, "hunkId": hunk_id(&s, f, 0),
                         "action": "modify", "modifiedDiff": "@@ -1 +1 @@\n-x\n+y\n"}),
            )
            .await
            .unwrap();
        assert_eq!(r["success"], false, "{f}: {r}");
        assert_eq!(r["code"], "bad_request", "{r}");
    }
    assert_eq!(tree_of(&ws.repo()).unwrap(), original);

    // Accept every hunk, one at a time.
    for (f, _) in &expect_kinds {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "accept").await.unwrap();
        assert_eq!(ok(&r)["applied"], true, "{f}: {r}");
    }
    let mut expected = original.clone();
    let file = |bytes: &[u8], mode: u32| Node::File(bytes.to_vec(), mode);
    expected.insert("crlf.txt".into(), file(b"one\r\nTWO\r\nthree\r\n", 0o644));
    expected.insert("nonl.txt".into(), file(b"a\nb\nC", 0o644));
    expected.insert("img.bin".into(), file(PNG_NEW, 0o644));
    expected.insert("latin1.txt".into(), file(b"caf\xe9s\n", 0o644));
    expected.insert("run.sh".into(), file(b"#!/bin/sh\necho hi\n", 0o755));
    expected.remove("old/name.txt");
    expected.remove("old");
    expected.insert("moved".into(), Node::Dir);
    expected.insert("moved/name.txt".into(), file(b"same content\n", 0o644));
    expected.remove("lonely/only.txt");
    expected.remove("lonely");
    expected.insert("deep".into(), Node::Dir);
    expected.insert("deep/er".into(), Node::Dir);
    expected.insert("deep/er/new.txt".into(), file(b"deep\n", 0o644));
    expected.insert("link".into(), Node::Symlink(PathBuf::from("keep.txt")));
    assert_eq!(tree_of(&ws.repo()).unwrap(), expected);

    // Reject every one again (reject after accept): the checkout is back to the original,
    // byte for byte, with modes, and the directories the suggestion created are gone again.
    for (f, _) in expect_kinds.iter().rev() {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "reject").await.unwrap();
        let d = ok(&r);
        assert_eq!(d["applied"], true, "{f}: {r}");
        assert_eq!(d["hunk"]["state"], "rejected");
    }
    assert_eq!(tree_of(&ws.repo()).unwrap(), original);
}

#[tokio::test]
async fn crlf_modify_with_an_lf_diff_and_mode_plus_content_on_one_file() {
    let ws = Workspace::new(&[
        ("crlf.txt", b"one\r\ntwo\r\nthree\r\n"),
        ("tool.sh", b"#!/bin/sh\necho one\necho two\n"),
    ])
    .unwrap();
    normalize_modes(&ws);
    let agent = ws
        .agent_script(
            "agent.sh",
            "printf 'one\\r\\nTWO\\r\\nthree\\r\\n' > crlf.txt\n\
             printf '#!/bin/sh\\necho one\\necho TWO\\n' > tool.sh\n\
             chmod +x tool.sh",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "crlf and mode")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(find_hunk(&s, "tool.sh", 0)["kind"], "mode");
    assert_eq!(find_hunk(&s, "tool.sh", 1)["kind"], "modify");

    // The user's edit of a CRLF hunk, typed with LF endings, keeps the file CRLF.
    let mine = "@@ -1,3 +1,3 @@\n one\n-two\n+Two (mine)\n three\n";
    let r = c
        .call(
            json!({"type": "feedback", "suggestionId": sid, "hunkId": hunk_id(&s, "crlf.txt", 0),
                     "action": "modify", "modifiedDiff": mine}),
        )
        .await
        .unwrap();
    assert_eq!(ok(&r)["hunk"]["state"], "modified");
    assert_eq!(
        ws.read("crlf.txt").unwrap(),
        b"one\r\nTwo (mine)\r\nthree\r\n"
    );

    // Content and executable bit of one file are separate decisions.
    let tool = ws.repo().join("tool.sh");
    ok(&c
        .decide(&sid, &hunk_id(&s, "tool.sh", 1), "accept")
        .await
        .unwrap());
    assert_eq!(
        ws.read("tool.sh").unwrap(),
        b"#!/bin/sh\necho one\necho TWO\n"
    );
    assert_eq!(
        mode_of(&tool).unwrap(),
        0o644,
        "content accepted, mode not yet"
    );
    ok(&c
        .decide(&sid, &hunk_id(&s, "tool.sh", 0), "accept")
        .await
        .unwrap());
    assert_eq!(mode_of(&tool).unwrap(), 0o755);
    assert_eq!(
        ws.read("tool.sh").unwrap(),
        b"#!/bin/sh\necho one\necho TWO\n"
    );
    ok(&c
        .decide(&sid, &hunk_id(&s, "tool.sh", 0), "reject")
        .await
        .unwrap());
    assert_eq!(mode_of(&tool).unwrap(), 0o644);
    assert_eq!(
        ws.read("tool.sh").unwrap(),
        b"#!/bin/sh\necho one\necho TWO\n",
        "rejecting the mode keeps the content"
    );
    // Undoing the content change while the file is not executable keeps it 0644.
    ok(&c
        .decide(&sid, &hunk_id(&s, "tool.sh", 1), "undo")
        .await
        .unwrap());
    assert_eq!(
        ws.read("tool.sh").unwrap(),
        b"#!/bin/sh\necho one\necho two\n"
    );
    assert_eq!(mode_of(&tool).unwrap(), 0o644);
}

/// What the sandbox snapshot leaves out — a file grown past the 64 MiB cap, a file replaced by a
/// FIFO, a new oversize file, a name that is not UTF-8 — is listed as `skipped`, never offered as
/// a deletion: accepting everything leaves those files of the checkout as they were.
#[tokio::test]
async fn files_left_out_of_the_snapshot_are_skipped_never_deleted() {
    let ws = Workspace::new(&[
        ("big.bin", b"small\n"),
        ("pipe.txt", b"data\n"),
        ("keep.txt", b"k\n"),
    ])
    .unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "truncate -s 70M big.bin\n\
             rm pipe.txt && mkfifo pipe.txt\n\
             truncate -s 70M huge.new\n\
             echo odd > \"$(printf 'bad\\377name')\"\n\
             echo changed > keep.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "grow").await.unwrap();
    // Positive control: the real change is there.
    assert_eq!(s["files"], json!(["keep.txt"]), "{s:#}");
    for h in s["hunks"].as_array().unwrap() {
        assert_ne!(h["kind"], "delete", "{h}");
    }
    let mut skipped: Vec<(String, String)> = s["skipped"]
        .as_array()
        .unwrap_or_else(|| panic!("no skipped list: {s:#}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    skipped.sort();
    let paths: Vec<&str> = skipped.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        vec!["bad\\xffname", "big.bin", "huge.new", "pipe.txt"],
        "{skipped:?}"
    );
    assert!(skipped[1].1.contains("larger than"), "{skipped:?}");
    assert!(skipped[0].1.contains("not UTF-8"), "{skipped:?}");
    // GET shows the same list; the CLI shows it too.
    let got = hub
        .curl()
        .get(&format!("/suggestions/{}", s["id"].as_str().unwrap()))
        .unwrap()
        .body;
    assert_eq!(got["skipped"], s["skipped"]);
    let out = ws
        .cli(&[
            "show",
            s["id"].as_str().unwrap(),
            "--state-dir",
            ws.state().to_str().unwrap(),
        ])
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("skipped") && text.contains("pipe.txt") && text.contains("big.bin"),
        "{text}"
    );

    let r = c
        .call(json!({"type": "feedback_all", "suggestionId": s["id"], "action": "accept"}))
        .await
        .unwrap();
    ok(&r);
    assert_eq!(ws.read_string("keep.txt").unwrap(), "changed\n");
    assert_eq!(ws.read_string("big.bin").unwrap(), "small\n");
    assert_eq!(ws.read_string("pipe.txt").unwrap(), "data\n");
    assert!(!ws.exists("huge.new"));
}

/// Files a hunk brings back into being keep their mode: scripts deleted, the delete accepted
/// and then undone, come back with their bits (0755, and a private 0700 one not widened to git's
/// 0755); executables renamed and accepted keep theirs under the new name (0755, and 0750), and
/// again under the old one when the rename is undone. Positive control: a plain file renamed
/// beside them stays 0644.
#[tokio::test]
async fn recreated_files_keep_their_mode() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new(&[
        ("run.sh", b"#!/bin/sh\necho run\n"),
        ("private.sh", b"#!/bin/sh\necho private\n"),
        ("tool.sh", b"#!/bin/sh\necho tool\n"),
        ("group.sh", b"#!/bin/sh\necho group\n"),
        ("plain.txt", b"plain\n"),
    ])
    .unwrap();
    normalize_modes(&ws);
    let modes = [
        ("run.sh", 0o755),
        ("private.sh", 0o700),
        ("tool.sh", 0o755),
        ("group.sh", 0o750),
    ];
    for (f, m) in modes {
        std::fs::set_permissions(ws.repo().join(f), std::fs::Permissions::from_mode(m)).unwrap();
    }
    let agent = ws
        .agent_script(
            "agent.sh",
            "rm run.sh private.sh\nmkdir -p bin && mv tool.sh bin/tool.sh && mv group.sh bin/group.sh\n\
             mv plain.txt plain2.txt",
        )
        .unwrap();
    let original = tree_of(&ws.repo()).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "move things")
        .await
        .unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    for (f, kind) in [
        ("run.sh", "delete"),
        ("private.sh", "delete"),
        ("bin/tool.sh", "rename"),
        ("bin/group.sh", "rename"),
        ("plain2.txt", "rename"),
    ] {
        assert_eq!(find_hunk(&s, f, 0)["kind"], kind, "{f}: {s:#}");
    }

    // The deletes, accepted then undone: the scripts are back as they were, modes included.
    for (f, mode) in [("run.sh", 0o755), ("private.sh", 0o700)] {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "accept").await.unwrap();
        assert_eq!(ok(&r)["applied"], true, "{r}");
        assert!(!ws.repo().join(f).exists());
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "reject").await.unwrap();
        assert_eq!(ok(&r)["applied"], true, "{r}");
        assert_eq!(mode_of(&ws.repo().join(f)).unwrap(), mode, "{f}");
        assert_eq!(tree_of(&ws.repo()).unwrap().get(f), original.get(f), "{f}");
    }

    // The renames, accepted: the executables keep their bits, the plain file stays plain.
    for f in ["bin/tool.sh", "bin/group.sh", "plain2.txt"] {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "accept").await.unwrap();
        assert_eq!(ok(&r)["applied"], true, "{f}: {r}");
    }
    assert_eq!(mode_of(&ws.repo().join("bin/tool.sh")).unwrap(), 0o755);
    assert_eq!(mode_of(&ws.repo().join("bin/group.sh")).unwrap(), 0o750);
    assert_eq!(mode_of(&ws.repo().join("plain2.txt")).unwrap(), 0o644);
    assert!(!ws.repo().join("tool.sh").exists());

    // And undone: the old names come back with the same bits; the checkout is the original.
    for f in ["bin/tool.sh", "bin/group.sh", "plain2.txt"] {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "reject").await.unwrap();
        assert_eq!(ok(&r)["applied"], true, "{f}: {r}");
    }
    assert_eq!(tree_of(&ws.repo()).unwrap(), original);
}

//! The conflict path: a hunk whose context is no longer in the user's file is refused with
//! `conflict`, leaves the file untouched, is announced as `apply_failed` and can be retried; edits
//! elsewhere in the file do not get in the way (unique offset search) but an ambiguous match
//! does; a symlink in place of the target (or of its directory) is never written through.

use std::time::Duration;

use hunkgate_tests::{find_hunk, hunk_id, numbered, run_agent, Workspace};
use serde_json::Value;

const SECS5: Duration = Duration::from_secs(5);

fn ok(r: &Value) -> &Value {
    assert_eq!(r["success"], true, "expected success: {r}");
    &r["data"]
}

#[tokio::test]
async fn conflict_leaves_the_file_untouched_and_a_retry_applies() {
    let text = numbered(20);
    let ws = Workspace::new(&[("a.txt", text.as_bytes())]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^line 10$/LINE 10/' a.txt")
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout ten").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, "a.txt", 0);

    // Behind the hub's back, the user edits a line inside the hunk's context.
    let users = text.replace("line 9\n", "line 9 (edited by me)\n");
    ws.write("a.txt", users.as_bytes()).unwrap();

    let r = c.decide(&sid, &hid, "accept").await.unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["code"], "conflict", "{r}");
    assert!(r["error"].as_str().unwrap().contains("a.txt"), "{r}");
    assert_eq!(ws.read_string("a.txt").unwrap(), users, "untouched");
    let ev = c
        .event("suggestion.error", |v| v["hunk_id"] == hid.as_str(), SECS5)
        .await
        .unwrap();
    assert_eq!(ev["code"], "apply_failed");
    assert_eq!(ev["suggestion_id"], sid.as_str());
    assert!(ev["seq"].as_u64().unwrap() > 0);
    let got = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let h = find_hunk(&got, "a.txt", 0);
    assert_eq!(h["state"], "conflict");
    assert!(h["conflict"].as_str().is_some_and(|m| !m.is_empty()), "{h}");
    assert_eq!(got["reviewed_count"], 0, "a conflict is not a decision");
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["outcome"], "conflict");
    assert_eq!(log[0]["action"], "accept");
    assert!(log[0]["error"].as_str().is_some_and(|e| !e.is_empty()));

    // Back to what the agent saw: the same hunk applies now.
    ws.write("a.txt", text.as_bytes()).unwrap();
    let r = c.decide(&sid, &hid, "accept").await.unwrap();
    let d = ok(&r);
    assert_eq!(d["hunk"]["state"], "accepted");
    assert!(d["hunk"].get("conflict").is_none(), "{d}");
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        text.replace("line 10\n", "LINE 10\n")
    );
    // Events are in order: once the accept is announced, anything about the conflict was too,
    // and the conflict itself announced no decision.
    c.event(
        "suggestion.hunk_applied",
        |v| v["hunk_id"] == hid.as_str(),
        SECS5,
    )
    .await
    .unwrap();
    let applied: Vec<&Value> = c
        .seen
        .iter()
        .filter(|v| v["type"] == "suggestion.hunk_applied" && v["hunk_id"] == hid.as_str())
        .collect();
    assert_eq!(applied.len(), 1, "{applied:?}");
    assert_eq!(applied[0]["action"], "accepted");
}

#[tokio::test]
async fn edits_elsewhere_do_not_block_but_an_ambiguous_match_does() {
    let text = numbered(40);
    let ws = Workspace::new(&[
        ("a.txt", text.as_bytes()),
        ("b.txt", numbered(20).as_bytes()),
    ])
    .unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 10$/LINE 10/; s/^line 30$/LINE 30/' a.txt\n\
             sed -i 's/^line 10$/LINE 10/' b.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();

    // Lines added above both hunks: each is found at its single new place.
    let prefix = "my header 1\nmy header 2\nmy header 3\n";
    ws.write("a.txt", format!("{prefix}{text}").as_bytes())
        .unwrap();
    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 1), "accept")
        .await
        .unwrap());
    ok(&c
        .decide(&sid, &hunk_id(&s, "a.txt", 0), "accept")
        .await
        .unwrap());
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        format!(
            "{prefix}{}",
            text.replace("line 10\n", "LINE 10\n")
                .replace("line 30\n", "LINE 30\n")
        )
    );

    // A copy of the hunk's context pasted above: two places match, which is never a guess.
    let b = numbered(20);
    let copy: String = (7..=13).map(|i| format!("line {i}\n")).collect();
    let with_copy = format!("{copy}{b}");
    ws.write("b.txt", with_copy.as_bytes()).unwrap();
    let bh = hunk_id(&s, "b.txt", 0);
    let r = c.decide(&sid, &bh, "accept").await.unwrap();
    assert_eq!(r["code"], "conflict", "{r}");
    assert_eq!(ws.read_string("b.txt").unwrap(), with_copy);
    // Without the copy it applies.
    ws.write("b.txt", b.as_bytes()).unwrap();
    ok(&c.decide(&sid, &bh, "accept").await.unwrap());
    assert_eq!(
        ws.read_string("b.txt").unwrap(),
        b.replace("line 10\n", "LINE 10\n")
    );
}

#[tokio::test]
async fn a_symlink_in_place_of_the_target_is_never_written_through() {
    let a = numbered(6);
    let ws = Workspace::new(&[("a.txt", a.as_bytes()), ("sub/b.txt", a.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/' a.txt sub/b.txt\necho made > new.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let changed = a.replace("line 3\n", "LINE 3\n");

    // a.txt becomes a symlink to a file outside the repository, with the very same content.
    let outside = ws.path("outside.txt");
    std::fs::write(&outside, &a).unwrap();
    std::fs::remove_file(ws.repo().join("a.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.repo().join("a.txt")).unwrap();
    // sub/ becomes a symlink to a directory outside, holding the same b.txt.
    let outdir = ws.path("outdir");
    std::fs::create_dir(&outdir).unwrap();
    std::fs::write(outdir.join("b.txt"), &a).unwrap();
    std::fs::remove_dir_all(ws.repo().join("sub")).unwrap();
    std::os::unix::fs::symlink(&outdir, ws.repo().join("sub")).unwrap();
    // new.txt appears as a symlink to an outside file.
    let outnew = ws.path("outnew.txt");
    std::fs::write(&outnew, b"outside\n").unwrap();
    std::os::unix::fs::symlink(&outnew, ws.repo().join("new.txt")).unwrap();

    for f in ["a.txt", "sub/b.txt", "new.txt"] {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "accept").await.unwrap();
        assert_eq!(r["success"], false, "{f}: {r}");
        assert_eq!(r["code"], "conflict", "{f}: {r}");
        let got = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
        assert_eq!(find_hunk(&got, f, 0)["state"], "conflict", "{f}");
    }
    let sub = hunk_id(&s, "sub/b.txt", 0);
    let ev = c
        .event("suggestion.error", |v| v["hunk_id"] == sub.as_str(), SECS5)
        .await
        .unwrap();
    assert_eq!(ev["code"], "apply_failed");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), a);
    assert_eq!(std::fs::read_to_string(outdir.join("b.txt")).unwrap(), a);
    assert_eq!(std::fs::read(&outnew).unwrap(), b"outside\n");
    assert_eq!(
        std::fs::read_link(ws.repo().join("a.txt")).unwrap(),
        outside
    );
    assert_eq!(std::fs::read_link(ws.repo().join("sub")).unwrap(), outdir);
    assert_eq!(
        std::fs::read_link(ws.repo().join("new.txt")).unwrap(),
        outnew
    );
    assert_eq!(
        std::fs::read_dir(&outdir).unwrap().count(),
        1,
        "no temp files"
    );

    // Positive control: the same flow with regular files succeeds.
    std::fs::remove_file(ws.repo().join("a.txt")).unwrap();
    ws.write("a.txt", a.as_bytes()).unwrap();
    std::fs::remove_file(ws.repo().join("sub")).unwrap();
    ws.write("sub/b.txt", a.as_bytes()).unwrap();
    std::fs::remove_file(ws.repo().join("new.txt")).unwrap();
    for f in ["a.txt", "sub/b.txt", "new.txt"] {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "accept").await.unwrap();
        ok(&r);
    }
    assert_eq!(ws.read_string("a.txt").unwrap(), changed);
    assert_eq!(ws.read_string("sub/b.txt").unwrap(), changed);
    assert_eq!(ws.read("new.txt").unwrap(), b"made\n");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), a);
    assert_eq!(std::fs::read_to_string(outdir.join("b.txt")).unwrap(), a);
}

/// Changes of type accepted (a symlink that became a file, a file that became a symlink, a
/// symlink given another target): each replaces the entry itself, never what a link points to,
/// and one whose entry the user changed since is a conflict that leaves the user's entry.
#[tokio::test]
async fn changes_of_type_replace_the_entry_itself_and_never_follow_a_link() {
    let ws = Workspace::new(&[("a.txt", b"a\n".as_slice()), ("f.txt", b"plain\n")]).unwrap();
    for (link, target) in [("link", "a.txt"), ("link2", "a.txt"), ("link3", "a.txt")] {
        std::os::unix::fs::symlink(target, ws.repo().join(link)).unwrap();
    }
    ws.git(&["add", "-A"]).unwrap();
    ws.git(&["commit", "-q", "-m", "links"]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "rm link && echo 'now a file' > link\nln -sfn b.txt link2\nln -sfn b.txt link3\n\
             rm f.txt && ln -s b.txt f.txt",
        )
        .unwrap();
    let hub = ws.serve(&[]).unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "types").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    // The user points link3 elsewhere before the review: its hunk must not land.
    std::fs::remove_file(ws.repo().join("link3")).unwrap();
    std::os::unix::fs::symlink("mine.txt", ws.repo().join("link3")).unwrap();
    for f in ["link", "link2", "f.txt", "link3"] {
        let r = c.decide(&sid, &hunk_id(&s, f, 0), "accept").await.unwrap();
        assert_eq!(r["success"], f != "link3", "{f}: {r}");
    }
    let repo = ws.repo();
    let meta = std::fs::symlink_metadata(repo.join("link")).unwrap();
    assert!(meta.file_type().is_file(), "link is a file now");
    assert_eq!(ws.read_string("link").unwrap(), "now a file\n");
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        "a\n",
        "never written through"
    );
    let target = |p: &str| std::fs::read_link(repo.join(p)).unwrap();
    assert_eq!(target("link2"), std::path::PathBuf::from("b.txt"));
    assert_eq!(target("f.txt"), std::path::PathBuf::from("b.txt"));
    assert_eq!(
        target("link3"),
        std::path::PathBuf::from("mine.txt"),
        "the user's link stays"
    );
    let leftovers: Vec<_> = std::fs::read_dir(repo)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

//! Real faults in the middle of decisions: a state directory that fills up, a log file that
//! cannot be written (`chattr +i`), a directory whose file cannot be removed, a user saving the
//! file while the hub writes it. After each, the hub's answer, its state, the checkout and the
//! feedback log must agree, and a retry must apply a hunk exactly once.
//!
//! These need root (mount, chattr): elsewhere they skip loudly, and under `CI=true` they fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hunkgate_tests::{hunk_id, numbered, run_agent, tree_of, Hub, Pause, Workspace};
use serde_json::{json, Value};

const SECS10: Duration = Duration::from_secs(10);

fn require_root(test: &str) -> bool {
    hunkgate_tests::require_root_for(test, "tmpfs mounts, chattr")
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `chattr +i` on a path, undone on drop (even when the test fails), so the temporary
/// directory can be removed.
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: &Path) -> Self {
        run(Command::new("chattr").arg("+i").arg(path));
        Self(path.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// A small tmpfs mounted on a directory, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(dir));
        Self(dir.to_path_buf())
    }

    /// Fill the file system to the last byte with `<dir>/filler`.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let p = self.0.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(nix::libc::ENOSPC), "{e}");
                    break;
                }
            }
        }
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn get(hub: &Hub, sid: &str) -> Value {
    let r = hub.curl().get(&format!("/suggestions/{sid}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn state_of(hub: &Hub, sid: &str, hid: &str) -> String {
    get(hub, sid)["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == hid)
        .unwrap()["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// POST /feedback from another thread (the decision may pause in the hub meanwhile).
fn decide_in_background(
    hub: &Hub,
    sid: &str,
    hid: &str,
    action: &str,
) -> std::thread::JoinHandle<hunkgate_tests::curl::Reply> {
    let curl = hub.curl();
    let body = json!({"suggestion_id": sid, "hunk_id": hid, "action": action});
    std::thread::spawn(move || curl.post("/feedback", &body).unwrap())
}

fn accept(hub: &Hub, sid: &str, hid: &str) -> hunkgate_tests::curl::Reply {
    hub.curl()
        .post(
            "/feedback",
            &json!({"suggestion_id": sid, "hunk_id": hid, "action": "accept"}),
        )
        .unwrap()
}

/// Every line of the journal is a whole JSON record, and the file ends after one.
fn assert_journal_whole(state: &Path) {
    let bytes = std::fs::read(state.join("state.jsonl")).unwrap();
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "torn journal tail: {:?}",
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(200)..])
    );
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if !line.is_empty() {
            serde_json::from_slice::<Value>(line).unwrap_or_else(|e| {
                panic!(
                    "journal line {} is not a record ({e}): {:?}",
                    i + 1,
                    String::from_utf8_lossy(&line[..line.len().min(200)])
                )
            });
        }
    }
}

/// A repository with `a.txt` (10 lines) and an agent that appends an 11th: its hunk still
/// applies after it was applied once (the context is the end of the file), so applying it twice
/// would show.
async fn appending_suggestion(ws: &Workspace, hub: &Hub) -> (String, String) {
    let agent = ws
        .agent_script("agent.sh", "echo 'line 11' >> a.txt")
        .unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(hub, &mut c, &agent, "append").await.unwrap();
    (
        s["id"].as_str().unwrap().to_string(),
        hunk_id(&s, "a.txt", 0),
    )
}

#[tokio::test]
async fn a_feedback_log_that_cannot_be_written_takes_the_decision_back() {
    if !require_root("a_feedback_log_that_cannot_be_written_takes_the_decision_back") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    let log = ws.state().join("feedback.jsonl");
    let guard = Immutable::set(&log);
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.body["code"], "internal", "{}", r.body);
    // Nothing of the decision stays: the file is back, the hunk is pending, no line is logged.
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    assert!(ws.feedback_log().unwrap().is_empty());
    drop(guard);

    // The retry applies the hunk exactly once.
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(state_of(&hub, &sid, &hid), "accepted");
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1, "{log:#?}");
    assert!(log[0]["seq"].as_u64().unwrap() > 0, "{log:#?}");

    // And after a restart nothing is applied again.
    hub.kill9();
    let hub = ws.serve(&[]).unwrap();
    assert_eq!(state_of(&hub, &sid, &hid), "accepted");
    assert_eq!(accept(&hub, &sid, &hid).body["code"], "already_decided");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(ws.feedback_log().unwrap().len(), 1);
}

#[tokio::test]
async fn a_journal_commit_that_cannot_be_written_takes_the_decision_back() {
    if !require_root("a_journal_commit_that_cannot_be_written_takes_the_decision_back") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let (mut hub, pauses) = ws.serve_pausable().unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    // The checkout is written; then the journal stops taking writes, before the commit.
    let pause = Pause::arm(&pauses, "before-commit");
    let answer = decide_in_background(&hub, &sid, &hid, "accept");
    pause.reached();
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        numbered(11),
        "positive control: the file was written before the fault"
    );
    let guard = Immutable::set(&ws.state().join("state.jsonl"));
    pause.release();
    let r = answer.join().unwrap();
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    // The feedback line written before the failed commit was taken back out of the log.
    assert!(ws.feedback_log().unwrap().is_empty());
    drop(guard);

    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    hub.kill9();
    let hub = ws.serve(&[]).unwrap();
    assert_eq!(state_of(&hub, &sid, &hid), "accepted");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(ws.feedback_log().unwrap().len(), 1);
}

#[tokio::test]
async fn a_full_state_directory_never_leaves_a_torn_journal() {
    if !require_root("a_full_state_directory_never_leaves_a_torn_journal") {
        return;
    }
    let a = numbered(40);
    let ws = Workspace::new(&[("a.txt", a.as_bytes())]).unwrap();
    let disk = Tmpfs::mount(&ws.state(), "32m");
    let mut hub = ws.serve(&[]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 30$/LINE 30/' a.txt",
        )
        .unwrap();
    let mut c = hub.ws().await.unwrap();
    // A long prompt makes every record of the suggestion longer than a page, so on a full disk
    // an append is cut short (or fails whole), never fits by chance.
    let prompt = format!("edit {}", "x".repeat(9000));
    let s = run_agent(&hub, &mut c, &agent, &prompt).await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let (h0, h1) = (hunk_id(&s, "a.txt", 0), hunk_id(&s, "a.txt", 1));

    let filler = disk.fill();
    let r = c.decide(&sid, &h0, "reject").await.unwrap();
    assert_eq!(r["success"], false, "{r}");
    assert_journal_whole(&ws.state());
    std::fs::remove_file(&filler).unwrap();

    let r = c.decide(&sid, &h1, "reject").await.unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_journal_whole(&ws.state());

    // The hub starts again with every decision.
    hub.stop().unwrap();
    drop(c);
    let hub = ws.serve(&[]).unwrap();
    assert_eq!(state_of(&hub, &sid, &h0), "pending");
    assert_eq!(state_of(&hub, &sid, &h1), "rejected");
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 1, "{log:#?}");
    assert_eq!(log[0]["hunk_id"], h1.as_str());
    drop(hub);
    drop(disk);
}

/// A publish whose journal append fails on a full disk (after its run commit is written) is
/// never announced: no suggestion, the run not `ready` and naming none — neither the
/// suggestion nor its run's update is adopted, before or after a restart — and the journal
/// stays whole. Positive control: the same agent with room on the disk publishes, and its
/// suggestion and `ready` run are back after a restart.
#[tokio::test]
async fn a_suggestion_that_cannot_be_journaled_is_never_announced() {
    if !require_root("a_suggestion_that_cannot_be_journaled_is_never_announced") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let disk = Tmpfs::mount(&ws.state(), "32m");
    let (mut hub, pauses) = ws.serve_pausable().unwrap();
    let (agent, template) = line3_agent(&ws);
    let mut c = hub.ws().await.unwrap();

    // A long prompt makes the suggestion's record longer than a page: on a full disk its
    // append fails, never fits by chance into the journal's last page.
    let prompt = format!("edit {}", "x".repeat(9000));
    let pause = Pause::arm(&pauses, "before-suggestion-journal");
    let failed = c.start_run(&prompt, &template, None).await.unwrap();
    pause.reached();
    let filler = disk.fill();
    pause.release();
    let run = hunkgate_tests::wait_run_finished(&hub, &failed, SECS10)
        .await
        .unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["suggestion_ids"], json!([]), "{run}");
    let listed = hub.curl().get("/suggestions").unwrap();
    assert_eq!(listed.body["suggestions"], json!([]), "{}", listed.body);
    assert_journal_whole(&ws.state());
    std::fs::remove_file(&filler).unwrap();

    let s = run_agent(&hub, &mut c, &agent, &prompt).await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let published = s["run_id"].as_str().unwrap().to_string();
    hunkgate_tests::wait_run_finished(&hub, &published, SECS10)
        .await
        .unwrap();

    hub.stop().unwrap();
    drop(c);
    let hub = ws.serve(&[]).unwrap();
    let run = hub.curl().get(&format!("/runs/{failed}")).unwrap().body;
    assert_ne!(run["status"], "ready", "{run}");
    assert_eq!(run["suggestion_ids"], json!([]), "{run}");
    let run = hub.curl().get(&format!("/runs/{published}")).unwrap().body;
    assert_eq!(run["status"], "ready", "{run}");
    assert_eq!(run["suggestion_ids"], json!([sid]), "{run}");
    let listed = hub.curl().get("/suggestions").unwrap().body;
    let ids: Vec<&str> = listed["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sid.as_str()], "{listed}");
    drop(hub);
    drop(disk);
}

/// An agent that changes line 3 of `a.txt`, and its command template.
fn line3_agent(ws: &Workspace) -> (PathBuf, String) {
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^line 3$/LINE 3/' a.txt")
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    (agent, template)
}

/// A suggestion's refs in the checkpoint store are set after it is announced; a hub killed in
/// between sets them when it starts again, at the run commit the journal names.
#[tokio::test]
async fn the_refs_of_a_suggestion_announced_before_a_kill_are_set_at_the_next_start() {
    let ws = Workspace::new(&[("a.txt", numbered(40).as_bytes())]).unwrap();
    let (mut hub, pauses) = ws.serve_pausable().unwrap();
    let (agent, template) = line3_agent(&ws);
    let mut c = hub.ws().await.unwrap();
    let refs = |prefix: &str| {
        String::from_utf8(
            ws.checkpoint_git(&["for-each-ref", "--format=%(refname) %(objectname)", prefix])
                .unwrap(),
        )
        .unwrap()
    };

    let pause = Pause::arm(&pauses, "suggestion-ready");
    let run = c.start_run("edit", &template, None).await.unwrap();
    pause.reached();
    // Journaled and announced, its refs not set yet; the run's base ref is (set at its start).
    assert_eq!(refs("refs/hunkgate/suggestions/"), "");
    assert_eq!(
        refs("refs/hunkgate/runs/")
            .lines()
            .collect::<Vec<_>>()
            .len(),
        1,
        "{}",
        refs("refs/hunkgate/runs/")
    );
    hub.kill9();
    drop(pause);
    drop(c);

    let hub = ws.serve(&[]).unwrap();
    let listed = hub.curl().get("/suggestions").unwrap().body;
    let sid = listed["suggestions"][0]["id"].as_str().unwrap().to_string();
    let s = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert_eq!(s["run_id"], run.as_str(), "{s}");
    let commit = s["run_commit"].as_str().unwrap();
    assert_eq!(
        refs("refs/hunkgate/suggestions/"),
        format!("refs/hunkgate/suggestions/{sid}/run {commit}\n")
    );
    assert!(
        refs("refs/hunkgate/runs/").contains(&format!("refs/hunkgate/runs/{run}/head {commit}\n")),
        "{}",
        refs("refs/hunkgate/runs/")
    );
    let shown = ws
        .checkpoint_git(&[
            "show",
            &format!("refs/hunkgate/suggestions/{sid}/run:a.txt"),
        ])
        .unwrap();
    assert!(String::from_utf8(shown).unwrap().contains("LINE 3\n"));
    ws.checkpoint_git(&["fsck", "--no-dangling"]).unwrap();

    // A suggestion published while the hub runs has its refs once its publish is over.
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "again").await.unwrap();
    let want = format!(
        "refs/hunkgate/suggestions/{}/run {}\n",
        s["id"].as_str().unwrap(),
        s["run_commit"].as_str().unwrap()
    );
    let deadline = std::time::Instant::now() + SECS10;
    while !refs("refs/hunkgate/suggestions/").contains(&want)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        refs("refs/hunkgate/suggestions/").contains(&want),
        "{}",
        refs("refs/hunkgate/suggestions/")
    );
}

#[tokio::test]
async fn a_file_saved_while_an_accept_writes_it_is_kept() {
    if !require_root("a_file_saved_while_an_accept_writes_it_is_kept") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let (hub, pauses) = ws.serve_pausable().unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    // The hunk was checked against the file and the decision journaled; then the user saves.
    let pause = Pause::arm(&pauses, "before-write");
    let answer = decide_in_background(&hub, &sid, &hid, "accept");
    pause.reached();
    let mine = format!("{}my own line\n", numbered(10));
    ws.write("a.txt", mine.as_bytes()).unwrap();
    pause.release();
    let r = answer.join().unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "conflict", "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), mine);
    assert_eq!(state_of(&hub, &sid, &hid), "conflict");
    let names: Vec<String> = std::fs::read_dir(ws.repo())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.ends_with(".tmp")),
        "a temporary file was left: {names:?}"
    );

    // Positive control: with the file back as it was, the same pause and no save apply it.
    ws.write("a.txt", numbered(10).as_bytes()).unwrap();
    let pause = Pause::arm(&pauses, "before-write");
    let answer = decide_in_background(&hub, &sid, &hid, "accept");
    pause.reached();
    pause.release();
    let r = answer.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
}

/// Wait until `journal` has not grown for 300 ms (at most 10 s).
fn settle_journal(journal: &Path) {
    let deadline = std::time::Instant::now() + SECS10;
    let len = || std::fs::metadata(journal).map(|m| m.len()).unwrap_or(0);
    let mut last = len();
    let mut since = std::time::Instant::now();
    while since.elapsed() < Duration::from_millis(300) {
        assert!(
            std::time::Instant::now() < deadline,
            "the journal never settled"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = len();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
}

#[tokio::test]
async fn a_save_racing_an_accept_is_never_lost() {
    if !require_root("a_save_racing_an_accept_is_never_lost") {
        return;
    }
    // A real concurrent writer: it saves the file the moment the hub journals the decision
    // (the journal grows), while the hub goes on to write the checkout.
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("f{i}.txt"), numbered(10).into_bytes()))
        .collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let ws = Workspace::new(&refs).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "for f in f0 f1 f2 f3; do echo 'line 11' >> $f.txt; done",
        )
        .unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "append").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let journal = ws.state().join("state.jsonl");
    // The run goes on journaling its own records (its status, its session's history) after
    // `suggestion.ready`: the writer below must be set off by the decision's `prepare`, not by
    // those, or it saves before the accept even starts.
    settle_journal(&journal);
    for i in 0..4 {
        let file = format!("f{i}.txt");
        let hid = hunk_id(&s, &file, 0);
        let mine = format!("{}saved by the user {i}\n", numbered(10));
        let start = std::fs::metadata(&journal).unwrap().len();
        let (path, text, jpath) = (ws.repo().join(&file), mine.clone(), journal.clone());
        let writer = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + SECS10;
            while std::fs::metadata(&jpath).map(|m| m.len()).unwrap_or(0) == start {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no decision journaled"
                );
                std::hint::spin_loop();
            }
            std::fs::write(&path, text).unwrap();
        });
        let r = accept(&hub, &sid, &hid);
        writer.join().unwrap();
        assert_eq!(
            ws.read_string(&file).unwrap(),
            mine,
            "the user's save was lost (answer {} {})",
            r.status,
            r.body
        );
        // The answer agrees with the file: a save before the write is a conflict.
        let state = state_of(&hub, &sid, &hid);
        match r.status {
            409 => assert_eq!(state, "conflict"),
            200 => assert_eq!(state, "accepted"),
            other => panic!("unexpected answer {other}: {}", r.body),
        }
    }
}

#[tokio::test]
async fn a_rename_whose_source_cannot_be_removed_changes_nothing() {
    if !require_root("a_rename_whose_source_cannot_be_removed_changes_nothing") {
        return;
    }
    let ws = Workspace::new(&[("old/a.txt", b"moved content\n"), ("keep.txt", b"k\n")]).unwrap();
    let hub = ws.serve(&[]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "mkdir -p new && mv old/a.txt new/a.txt")
        .unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "move").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let h = hunkgate_tests::find_hunk(&s, "new/a.txt", 0);
    assert_eq!(h["kind"], "rename", "{s:#}");
    let hid = h["id"].as_str().unwrap().to_string();
    let before = tree_of(&ws.repo()).unwrap();

    // The new file can be written; the old one cannot be removed.
    let guard = Immutable::set(&ws.repo().join("old"));
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(
        tree_of(&ws.repo()).unwrap(),
        before,
        "the written step was taken back"
    );
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    assert!(ws.feedback_log().unwrap().is_empty());
    drop(guard);

    // The retry does the whole rename.
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read("new/a.txt").unwrap(), b"moved content\n");
    assert!(!ws.exists("old/a.txt"));
    assert_eq!(state_of(&hub, &sid, &hid), "accepted");
}

/// A disk that fails with EIO on demand. This kernel has no device-mapper (`error`, `flakey`)
/// and no block-layer fault injection, so the fault is made the closest real way: an ext4 file
/// system on a loop device whose backing file is then made immutable (`chattr +i`). The loop
/// driver's writes to it fail, the block layer reports `BLK_STS_IOERR`, and ext4 answers the
/// next `fsync` (or metadata write) with EIO — "Buffer I/O error on device loopN" in the kernel
/// log, exactly as a dying disk. Reads keep working from the page cache and the disk.
struct FailingDisk {
    on: PathBuf,
    image: PathBuf,
    device: String,
    _backing: tempfile::TempDir,
}

impl FailingDisk {
    /// An empty ext4 file system mounted on `on`, holding a copy of what `on` held.
    fn mount_over(on: &Path) -> Self {
        // The backing file must live on a file system that enforces `chattr +i` on files already
        // open (ext4, xfs, btrfs do; tmpfs does not): the test's own temporary directory.
        let backing = tempfile::tempdir_in(on.parent().unwrap()).unwrap();
        let image = backing.path().join("disk.img");
        run(Command::new("truncate").args(["-s", "64M"]).arg(&image));
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image)
            .output()
            .unwrap();
        assert!(out.status.success(), "losetup: {out:?}");
        let device = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let disk = Self {
            on: on.to_path_buf(),
            image,
            device,
            _backing: backing,
        };
        run(Command::new("mkfs.ext4").args(["-q", "-F", "-O", "^has_journal", &disk.device]));
        let stage = disk._backing.path().join("stage");
        std::fs::create_dir(&stage).unwrap();
        run(Command::new("mount").arg(&disk.device).arg(&stage));
        std::fs::create_dir_all(on).unwrap();
        run(Command::new("cp").arg("-a").arg(on.join(".")).arg(&stage));
        run(Command::new("umount").arg(&stage));
        let meta = std::fs::metadata(on).unwrap();
        run(Command::new("mount").arg(&disk.device).arg(on));
        // The new file system's root takes the mode and owner of the directory it covers.
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        std::fs::set_permissions(on, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
            .unwrap();
        std::os::unix::fs::chown(on, Some(meta.uid()), Some(meta.gid())).unwrap();
        disk
    }

    /// From now on every write reaching the disk fails with EIO. Checked, not assumed: a
    /// probe file's `fsync` must fail with EIO.
    fn fail(&self) {
        run(&mut Command::new("sync"));
        run(Command::new("chattr").arg("+i").arg(&self.image));
        use std::io::Write;
        let probe = self.on.join(".eio-probe");
        let mut f = std::fs::File::create(&probe).unwrap();
        f.write_all(&[7u8; 65536]).unwrap();
        let err = f
            .sync_all()
            .expect_err("positive control: fsync on the failing disk");
        assert_eq!(err.raw_os_error(), Some(nix::libc::EIO), "{err}");
        drop(f);
        let _ = std::fs::remove_file(&probe);
    }

    fn heal(&self) {
        run(Command::new("chattr").arg("-i").arg(&self.image));
    }

    /// Unmount and mount again: what is read from now on comes from the disk itself, not from
    /// the page cache of before (everything open on it must be closed first).
    fn remount(&self) {
        run(Command::new("umount").arg(&self.on));
        run(Command::new("mount").arg(&self.device).arg(&self.on));
    }
}

impl Drop for FailingDisk {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.image).status();
        let _ = Command::new("umount").arg("-l").arg(&self.on).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

fn require_root_eio(test: &str) -> bool {
    hunkgate_tests::require_root_for(test, "loop devices, mount, chattr")
}

/// The error a failed decision answers with names the fault.
fn assert_clear_io_error(r: &hunkgate_tests::curl::Reply, what: &[&str]) {
    assert!(r.status >= 400, "{} {}", r.status, r.body);
    let message = r.body["error"].as_str().unwrap_or_default().to_string() + &r.body.to_string();
    assert!(
        what.iter().any(|w| message.contains(w)),
        "the error should say {what:?}: {} {}",
        r.status,
        r.body
    );
}

/// EIO under the state directory in the middle of a review: the decision is answered with an
/// error naming the fault, changes nothing (checkout, hunk state, feedback log), and after the
/// disk is healed and the hub restarted (the file system unmounted and mounted again between,
/// so the hub reads what really reached the disk), the same accept applies the hunk exactly
/// once, and a second accept is refused.
#[tokio::test]
async fn eio_under_the_state_directory_changes_nothing_and_a_restart_recovers() {
    if !require_root_eio("eio_under_the_state_directory_changes_nothing_and_a_restart_recovers") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    std::fs::create_dir_all(ws.state()).unwrap();
    std::fs::set_permissions(
        ws.state(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let disk = FailingDisk::mount_over(&ws.state());
    let mut hub = ws.serve(&[]).unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    disk.fail();
    let r = accept(&hub, &sid, &hid);
    assert_clear_io_error(&r, &["Input/output error", "os error 5"]);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
    hub.kill9();
    disk.heal();
    disk.remount();
    assert_journal_whole(&ws.state());

    let hub = ws.serve(&[]).unwrap();
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    assert!(ws.feedback_log().unwrap().is_empty());
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(accept(&hub, &sid, &hid).body["code"], "already_decided");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(ws.feedback_log().unwrap().len(), 1);
    drop(hub);
    drop(disk);
}

/// EIO under the checkout: the accept's write cannot be made durable, so it is answered with
/// an error and the file stays as it was — also on the disk itself (the checkout is unmounted
/// and mounted again before it is read). Healed and restarted, the accept applies once.
#[tokio::test]
async fn eio_under_the_checkout_changes_nothing_and_a_restart_recovers() {
    if !require_root_eio("eio_under_the_checkout_changes_nothing_and_a_restart_recovers") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let disk = FailingDisk::mount_over(&ws.repo());
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
    let mut hub = ws.serve(&[]).unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    disk.fail();
    let r = accept(&hub, &sid, &hid);
    assert_clear_io_error(&r, &["Input/output error", "os error 5"]);
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    assert!(ws.feedback_log().unwrap().is_empty());
    hub.kill9();
    disk.heal();
    disk.remount();
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
    let stray: Vec<String> = std::fs::read_dir(ws.repo())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "a.txt" && n != ".git" && n != "lost+found")
        .collect();
    assert!(stray.is_empty(), "left in the checkout: {stray:?}");

    let hub = ws.serve(&[]).unwrap();
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(accept(&hub, &sid, &hid).body["code"], "already_decided");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(ws.feedback_log().unwrap().len(), 1);
    drop(hub);
    drop(disk);
}

/// A directory made read-only with a read-only bind mount, undone on drop.
struct ReadOnly(PathBuf);

impl ReadOnly {
    /// The remount is refused while a file is being written through the new mount, as the hub
    /// may be doing right after a suggestion was announced (its refs, the store's
    /// objects): it is tried again for up to ten seconds.
    fn set(dir: &Path) -> Self {
        run(Command::new("mount").arg("--bind").arg(dir).arg(dir));
        let guard = Self(dir.to_path_buf());
        let deadline = std::time::Instant::now() + SECS10;
        loop {
            let mut remount = Command::new("mount");
            remount.args(["-o", "remount,bind,ro"]).arg(dir);
            let out = remount.output().unwrap();
            if out.status.success() {
                return guard;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("busy") && std::time::Instant::now() < deadline,
                "{remount:?}: {err}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The checkout becomes read-only (a read-only bind mount: root, which CI runs as, ignores
/// mode bits): an accept is answered with an error naming the read-only file system and
/// changes nothing; writable again, and after a restart, the accept applies once.
#[tokio::test]
async fn a_read_only_checkout_changes_nothing_and_a_restart_recovers() {
    if !require_root_eio("a_read_only_checkout_changes_nothing_and_a_restart_recovers") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    let ro = ReadOnly::set(&ws.repo());
    assert!(
        std::fs::write(ws.repo().join("probe"), b"x").is_err(),
        "positive control: the checkout is read-only"
    );
    let r = accept(&hub, &sid, &hid);
    assert_clear_io_error(&r, &["Read-only file system", "os error 30"]);
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    assert!(ws.feedback_log().unwrap().is_empty());
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
    drop(ro);

    hub.kill9();
    let hub = ws.serve(&[]).unwrap();
    assert_eq!(state_of(&hub, &sid, &hid), "pending");
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(accept(&hub, &sid, &hid).body["code"], "already_decided");
    assert_eq!(ws.feedback_log().unwrap().len(), 1);
}

/// Start `serve` on `ws` and expect it to exit with an error (the harness's `Hub::start` would
/// read a previous hub's address, which a read-only state dir keeps); returns its output.
fn serve_refused(ws: &Workspace) -> String {
    let mut cmd = Command::new(hunkgate_tests::hunkgate_bin());
    hunkgate_tests::hermetic_env(&mut cmd, &ws.home());
    let mut child = cmd
        .current_dir(ws.repo())
        .args(["serve", "--port", "0", "--isolation", "none", "--state-dir"])
        .arg(ws.state())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + SECS10;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("a hub on a read-only state dir kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert!(!status.success());
    String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
}

/// The state directory becomes read-only while the hub runs (a read-only bind mount over it):
/// the files the hub already holds open stay writable, so a decision either completes —
/// durably: the checkout, the hunk state and the feedback log agree — or is answered with an
/// error naming the read-only file system and changes nothing. A hub started on the read-only
/// state directory refuses with a message naming it; writable again, the restarted hub shows
/// the same state, and nothing is ever applied twice.
#[tokio::test]
async fn a_read_only_state_directory_changes_nothing_and_a_restart_recovers() {
    if !require_root_eio("a_read_only_state_directory_changes_nothing_and_a_restart_recovers") {
        return;
    }
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let mut hub = ws.serve(&[]).unwrap();
    let (sid, hid) = appending_suggestion(&ws, &hub).await;

    let ro = ReadOnly::set(&ws.state());
    assert!(
        std::fs::write(ws.state().join("probe"), b"x").is_err(),
        "positive control: the state directory is read-only"
    );
    let r = accept(&hub, &sid, &hid);
    let applied = if r.status == 200 {
        assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
        assert_eq!(state_of(&hub, &sid, &hid), "accepted");
        assert_eq!(ws.feedback_log().unwrap().len(), 1);
        true
    } else {
        assert_clear_io_error(&r, &["Read-only file system", "os error 30"]);
        assert_eq!(ws.read_string("a.txt").unwrap(), numbered(10));
        assert_eq!(state_of(&hub, &sid, &hid), "pending");
        assert!(ws.feedback_log().unwrap().is_empty());
        false
    };
    hub.kill9();
    let err = serve_refused(&ws);
    assert!(
        err.contains("Read-only file system") || err.contains("os error 30"),
        "{err}"
    );
    // It never said it was serving (a hub that started says so: the control below).
    assert!(!err.contains("hunkgate: serving"), "{err}");
    drop(ro);

    let hub = ws.serve(&[]).unwrap();
    let log = hub.log_when(|l| l.contains("hunkgate: serving"));
    assert!(log.contains("hunkgate: serving"), "{log}");
    if !applied {
        assert_eq!(state_of(&hub, &sid, &hid), "pending");
        let r = accept(&hub, &sid, &hid);
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(state_of(&hub, &sid, &hid), "accepted");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(accept(&hub, &sid, &hid).body["code"], "already_decided");
    assert_eq!(ws.read_string("a.txt").unwrap(), numbered(11));
    assert_eq!(ws.feedback_log().unwrap().len(), 1);
}

/// `big.txt` (8 MiB) with the agent's three changes: lines 1000, 350000 and 690000 shouted.
const BIG_LINES: usize = 700_000;
const BIG_CHANGED: [usize; 3] = [1000, 350_000, 690_000];

/// `big.txt` with the changes of the hunks `accepted` says, then `tail`.
fn big_with(accepted: [bool; 3], tail: &str) -> String {
    let mut text = numbered(BIG_LINES);
    for (k, line) in BIG_CHANGED.iter().enumerate().rev() {
        if accepted[k] {
            text = text.replace(&format!("\nline {line}\n"), &format!("\nLINE {line}\n"));
        }
    }
    text + tail
}

fn assert_big(ws: &Workspace, accepted: [bool; 3], tail: &str, what: &str) {
    let got = ws.read_string("big.txt").unwrap();
    let want = big_with(accepted, tail);
    if got != want {
        let lost: Vec<&str> = tail.lines().filter(|l| !got.contains(l)).collect();
        panic!(
            "{what}: big.txt ({} bytes) is not the accepted content plus the user's lines ({} bytes); lines lost: {lost:?}",
            got.len(),
            want.len()
        );
    }
}

#[tokio::test]
async fn writes_to_a_multi_megabyte_file_during_its_accepts_are_kept() {
    let ws = Workspace::new(&[("big.txt", numbered(BIG_LINES).as_bytes())]).unwrap();
    let (hub, pauses) = ws.serve_pausable().unwrap();
    let sed: Vec<String> = BIG_CHANGED
        .iter()
        .map(|l| format!("s/^line {l}$/LINE {l}/"))
        .collect();
    let agent = ws
        .agent_script("agent.sh", &format!("sed -i '{}' big.txt", sed.join("; ")))
        .unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "shout").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hids: Vec<String> = (0..3).map(|k| hunk_id(&s, "big.txt", k)).collect();
    let path = ws.repo().join("big.txt");
    let append = |line: &str| {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    };
    let mut tail = String::new();

    // A descriptor held open for writing across the accept (a logger, a save in progress):
    // what it writes after the answer would go into a file with no name. The accept is
    // refused, and the line is in the file.
    let mut held = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let r = accept(&hub, &sid, &hids[0]);
    std::io::Write::write_all(&mut held, b"held open\n").unwrap();
    drop(held);
    tail.push_str("held open\n");
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "conflict", "{}", r.body);
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("open for writing"),
        "{}",
        r.body
    );
    assert_eq!(state_of(&hub, &sid, &hids[0]), "conflict");
    assert_big(&ws, [false; 3], &tail, "a descriptor held open");

    // A save that lands after the hub's last look at the file, right before the new content
    // goes in (open, write, close): a conflict, and the save is kept.
    let pause = Pause::arm(&pauses, "before-rename");
    let answer = decide_in_background(&hub, &sid, &hids[1], "accept");
    pause.reached();
    append("saved in the window\n");
    tail.push_str("saved in the window\n");
    pause.release();
    let r = answer.join().unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(state_of(&hub, &sid, &hids[1]), "conflict");
    assert_big(&ws, [false; 3], &tail, "a save in the window");

    // A writer appending over and over (a real process) while the hunks are accepted: each
    // is accepted or a conflict, and every line it wrote is there.
    let stop = ws.path("stop");
    let writer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "n=0; while [ ! -e '{}' ]; do n=$((n+1)); echo \"writer $n\" >> big.txt; sleep 0.01; done; echo $n",
            stop.display()
        ))
        .current_dir(ws.repo())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(hunkgate_tests::Reaped::new)
        .unwrap();
    let mut accepted = [false; 3];
    for _ in 0..3 {
        for (k, hid) in hids.iter().enumerate() {
            if !accepted[k] {
                let r = accept(&hub, &sid, hid);
                assert!(matches!(r.status, 200 | 409), "{}", r.body);
                accepted[k] = r.status == 200;
            }
        }
    }
    std::fs::write(&stop, b"").unwrap();
    let out = writer.wait_with_output().unwrap();
    let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(n > 0, "the writer wrote nothing");
    tail.extend((1..=n).map(|i| format!("writer {i}\n")));
    assert_big(&ws, accepted, &tail, "a writer appending");
    for (k, hid) in hids.iter().enumerate() {
        let want = if accepted[k] { "accepted" } else { "conflict" };
        assert_eq!(state_of(&hub, &sid, hid), want, "hunk {k}");
    }

    // Positive control: with nobody writing, every hunk left goes in.
    for (k, hid) in hids.iter().enumerate() {
        if !accepted[k] {
            let r = accept(&hub, &sid, hid);
            assert_eq!(r.status, 200, "{}", r.body);
            accepted[k] = true;
        }
    }
    assert_big(&ws, [true; 3], &tail, "after the writers");
    assert!(
        std::fs::read_dir(ws.repo()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp")),
        "a temporary file was left"
    );
}

/// A deletion accepted while another program holds the file open for writing (a logger, an
/// editor's save in progress) is refused, and what it writes next is still in the file at its
/// path: the removal looks at the file once more after moving it out of the way, as a write
/// does. A save that lands in the window (the `before-rename` pause, right after the last look
/// before the move) is kept the same way. The control: closed and unchanged, the deletion lands.
#[tokio::test]
async fn a_file_written_while_its_deletion_is_accepted_is_kept() {
    use std::io::Write;
    let ws =
        Workspace::new(&[("gone.txt", numbered(10).as_bytes()), ("keep.txt", b"k\n")]).unwrap();
    let (hub, pauses) = ws.serve_pausable().unwrap();
    let agent = ws.agent_script("agent.sh", "rm gone.txt").unwrap();
    let mut c = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut c, &agent, "delete").await.unwrap();
    let sid = s["id"].as_str().unwrap().to_string();
    let hid = hunk_id(&s, "gone.txt", 0);

    // Held open for writing across the accept.
    let mut writer = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.repo().join("gone.txt"))
        .unwrap();
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("open for writing"),
        "{}",
        r.body
    );
    writer.write_all(b"logged after\n").unwrap();
    drop(writer);
    let held = format!("{}logged after\n", numbered(10));
    assert_eq!(ws.read_string("gone.txt").unwrap(), held);
    assert_eq!(state_of(&hub, &sid, &hid), "conflict");

    // A save in the window between the last look and the removal.
    let pause = Pause::arm(&pauses, "before-rename");
    let answer = decide_in_background(&hub, &sid, &hid, "accept");
    pause.reached();
    let mut late = std::fs::OpenOptions::new()
        .append(true)
        .open(ws.repo().join("gone.txt"))
        .unwrap();
    late.write_all(b"saved in the window\n").unwrap();
    drop(late);
    pause.release();
    let r = answer.join().unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        ws.read_string("gone.txt").unwrap(),
        format!("{held}saved in the window\n")
    );

    // Positive control: the file as the hunk was checked against, nobody writing: it goes.
    ws.write("gone.txt", numbered(10).as_bytes()).unwrap();
    let r = accept(&hub, &sid, &hid);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!ws.exists("gone.txt"));
    let names: Vec<String> = std::fs::read_dir(ws.repo())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.ends_with(".tmp")),
        "a temporary file was left: {names:?}"
    );
}

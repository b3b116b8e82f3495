//! Between runs a sandbox slot holds exactly the base (#54.3), and what a run starts from is
//! the checkout as it is now, in a directory an ignore rule no longer hides too (#54.5). Each
//! check here runs under `--isolation none`; `isolation.rs` runs the same ones under `user`.

use std::path::Path;

use hunkgate_tests::{Hub, Workspace};
use serde_json::Value;

use crate::runs::{in_repo, start_and_wait};

/// The agent of [`planted_files_leave_every_sandbox`]. Every prompt lists the slot first
/// (`<out>/files-<prompt>`, directories too, `.git` aside). `plant` then leaves beside the
/// base what the reviewer would not see or cannot review — a self-ignoring directory
/// (`sub/.gitignore` of `*`), a line appended to the base's `.gitignore` and the file it
/// hides, a `chmod 000` directory, a path longer than 4096 bytes, a name that is not UTF-8,
/// an empty directory, a build cache the base's rules ignore — and edits `README`; `idle` does
/// nothing more.
pub(crate) fn planting_agent_body(out: &Path) -> String {
    format!(
        r#"find . -path ./.git -prune -o -print 2>&1 | sort > {out}/files-$HUNKGATE_PROMPT
[ "$HUNKGATE_PROMPT" = plant ] || exit 0
mkdir sub && printf '*\n' > sub/.gitignore && echo planted > sub/plant.py
echo plant2.py >> .gitignore && echo planted > plant2.py
mkdir -p locked/in && echo secret > locked/in/secret.txt && chmod 000 locked/in locked
n=$(printf '%0200d' 0 | tr 0 d) && p=$n/$n/$n/$n/$n/$n/$n/$n/$n/$n/$n/$n
mkdir -p deep/$p half/$p && echo leaf > half/$p/leaf && mv half deep/$p/
echo odd > "$(printf 'bad\377name')"
mkdir empty build && echo cache > build/cache.o
echo "$HUNKGATE_PROMPT" >> README"#,
        out = out.display()
    )
}

/// An agent that plants (see [`planting_agent_body`]) leaves none of it to the next run:
/// run 1's suggestion shows its reviewable change and names what it cannot review as skipped
/// (the path too long, the name not UTF-8, and with `unreadable` the `chmod 000` directory,
/// which only a hub that is not root cannot read); run 2, whose agent does nothing, has no
/// changes (a planted file would be its own); run 3 finds exactly the base; and so does a run
/// of a hub started afresh after another planting run. `start` starts the hub (`--max-runs
/// 1`); `git` runs a shell command in the checkout as its owner. Controls: run 1's agent did
/// plant (its `.gitignore` line is in its suggestion) and listed the same base before it.
pub(crate) fn planted_files_leave_every_sandbox(
    start: impl Fn() -> Hub,
    git: impl Fn(&str),
    agent: &Path,
    out: &Path,
    unreadable: bool,
) {
    git("printf 'build/\\n' > .gitignore && git add .gitignore && git commit -qm ignore");
    // Lossy: a name that is not UTF-8 left in the slot shows in the listing, not as a panic.
    let listed = |prompt: &str| {
        let bytes = std::fs::read(out.join(format!("files-{prompt}"))).unwrap();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let run = |hub: &Hub, prompt: &str, status: &str| -> Value {
        let r = start_and_wait(hub, prompt, agent);
        assert_eq!(r["status"], status, "{prompt}: {r}\n{}", hub.log_text());
        r
    };
    let mut hub = start();
    let r = run(&hub, "plant", "ready");
    let base = listed("plant");
    assert!(
        base.contains("./README\n") && !base.contains("plant"),
        "{base}"
    );
    let sid = r["suggestion_ids"][0].as_str().unwrap();
    let sug = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert!(sug["hunks"].to_string().contains("+plant2.py"), "{sug}");
    let skipped: Vec<(String, String)> = sug["skipped"]
        .as_array()
        .unwrap_or_else(|| panic!("no skipped list: {sug}"))
        .iter()
        .map(|s| {
            (
                s["path"].as_str().unwrap().into(),
                s["reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    let has = |path: &str, why: &str| {
        skipped
            .iter()
            .any(|(p, r)| p.starts_with(path) && r.contains(why))
    };
    assert!(has("deep/ddd", "longer than 4096"), "{skipped:?}");
    assert!(has("bad\\xffname", "not UTF-8"), "{skipped:?}");
    assert_eq!(has("locked", "cannot be read"), unreadable, "{skipped:?}");
    run(&hub, "idle", "no_changes");
    assert_eq!(listed("idle"), base, "{}", hub.log_text());
    run(&hub, "look", "no_changes");
    assert_eq!(listed("look"), base);
    // Planted again, and the hub stops: a hub started afresh (that never synced the slot)
    // puts it back as well.
    run(&hub, "plant", "ready");
    hub.stop().unwrap();
    hub = start();
    run(&hub, "look", "no_changes");
    assert_eq!(listed("look"), base, "after a restart\n{}", hub.log_text());
}

#[test]
fn planted_files_leave_every_sandbox_without_isolation() {
    let ws = Workspace::new(&[("README", b"plant\n")]).unwrap();
    let out = ws.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let agent = ws
        .agent_script("plant.sh", &planting_agent_body(&out))
        .unwrap();
    planted_files_leave_every_sandbox(
        || one_slot_hub(&ws),
        |script| git_in(&ws, script),
        &agent,
        &out,
        // The hub runs as root here (CI, this machine): a `chmod 000` directory is readable.
        !nix::unistd::geteuid().is_root(),
    );
}

/// The agent of [`unignored_directories_are_seen_by_every_run`]: it copies what `ign/`
/// holds (every file, name and content) to `<out>/ign-<prompt>`, and edits `README`.
pub(crate) fn ign_agent_body(out: &Path) -> String {
    format!(
        "for f in $(ls ign 2>/dev/null); do echo \"$f: $(cat ign/$f)\"; done > {out}/ign-$HUNKGATE_PROMPT\n\
         echo \"$HUNKGATE_PROMPT\" >> README",
        out = out.display()
    )
}

/// A directory the user stops ignoring (`ign/` dropped from `.gitignore`) is in every later
/// run's base as the checkout has it (#54.5): the next run sees its file, and the runs after
/// it see each later edit of that file and each new file there. Control: while ignored, no
/// run sees it.
pub(crate) fn unignored_directories_are_seen_by_every_run(
    start: impl Fn() -> Hub,
    git: impl Fn(&str),
    agent: &Path,
    out: &Path,
) {
    git(
        "printf 'ign/\\n' > .gitignore && git add .gitignore && git commit -qm ignore && \
         mkdir -p ign && echo one > ign/inner.txt",
    );
    let seen = |prompt: &str| std::fs::read_to_string(out.join(format!("ign-{prompt}"))).unwrap();
    let hub = start();
    let run = |prompt: &str| {
        let r = start_and_wait(&hub, prompt, agent);
        assert_eq!(r["status"], "ready", "{prompt}: {r}\n{}", hub.log_text());
    };
    run("ignored");
    assert_eq!(seen("ignored"), "", "while ignored");
    git("printf '' > .gitignore");
    run("unignored");
    assert_eq!(seen("unignored"), "inner.txt: one\n");
    let mut want = String::new();
    for round in 0..3 {
        git(&format!(
            "echo edit{round} > ign/inner.txt && echo new > ign/new{round}.txt"
        ));
        want = format!("{want}new{round}.txt: new\n");
        let prompt = format!("round{round}");
        run(&prompt);
        assert_eq!(
            seen(&prompt),
            format!("inner.txt: edit{round}\n{want}"),
            "{prompt}\n{}",
            hub.log_text()
        );
    }
}

#[test]
fn unignored_directories_are_seen_by_every_run_without_isolation() {
    let ws = Workspace::new(&[("README", b"ign\n")]).unwrap();
    let out = ws.path("out");
    std::fs::create_dir_all(&out).unwrap();
    let agent = ws.agent_script("ign.sh", &ign_agent_body(&out)).unwrap();
    unignored_directories_are_seen_by_every_run(
        || one_slot_hub(&ws),
        |script| git_in(&ws, script),
        &agent,
        &out,
    );
}

fn one_slot_hub(ws: &Workspace) -> Hub {
    ws.serve(&["--isolation", "none", "--max-runs", "1"])
        .unwrap()
}

/// Run `script` in the checkout of `ws` (see [`in_repo`]); it must succeed.
fn git_in(ws: &Workspace, script: &str) {
    let out = std::process::Command::new("sh")
        .args(["-c", &in_repo(&ws.repo(), script)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

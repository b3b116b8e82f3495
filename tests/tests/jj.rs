//! jj repositories with a real `jj` binary: each run is its own jj change in the sandbox, the
//! change id is reported as `jj_change_id`, and review works as in git repositories.

use std::path::Path;
use std::process::Command;

use hunkgate_tests::{hermetic_env, run_agent, Workspace};
use serde_json::json;

fn jj(home: &Path, dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("jj");
    hermetic_env(&mut cmd, home);
    let out = cmd
        .current_dir(dir)
        .env("JJ_CONFIG", home.join("jj.toml"))
        .args(["--no-pager", "--color=never"])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("jj is not installed ({e}); scripts/install-test-deps installs it")
        });
    assert!(
        out.status.success(),
        "jj {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn each_run_is_a_jj_change() {
    // A plain (non-colocated) jj repository: no .git at its root.
    let tmp = Workspace::new(&[]).unwrap();
    let home = tmp.home();
    std::fs::write(
        home.join("jj.toml"),
        "user.name = \"T\"\nuser.email = \"t@example.com\"\n",
    )
    .unwrap();
    let repo = tmp.path("jjrepo");
    std::fs::create_dir(&repo).unwrap();
    jj(&home, &repo, &["git", "init", "--no-colocate"]);
    assert!(!repo.join(".git").exists());
    std::fs::write(repo.join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    jj(&home, &repo, &["commit", "-m", "notes"]);

    // The agent publishes its change itself, then looks at its jj change while the run is
    // live: once a run is over its slot is put back to the base, jj metadata and all (under
    // either isolation), so the change is seen from inside the run.
    let out = tmp.path("seen");
    std::fs::create_dir(&out).unwrap();
    let agent = tmp
        .agent_script(
            "agent.sh",
            &format!(
                r#"sed -i 's/beta/BETA/' notes.txt
exec 2> {out}/err
curl -sS -o {out}/published -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" -H 'Content-Type: application/json' -d '{{"description":"shout beta"}}' "$HUNKGATE_URL/agent/publish"
export JJ_CONFIG={config}
jj --no-pager --color=never log -r @ --no-graph -T change_id > {out}/change
jj --no-pager --color=never log -r @ --no-graph -T description > {out}/desc
jj --no-pager --color=never log -r @- --no-graph -T description > {out}/parent"#,
                out = out.display(),
                config = home.join("jj.toml").display()
            ),
        )
        .unwrap();
    let state = tmp.state();
    let jj_config = home.join("jj.toml");
    let hub = hunkgate_tests::Hub::start_in(
        &repo,
        &home,
        &state,
        &tmp.path("hub.log"),
        &[],
        &[("JJ_CONFIG", jj_config.as_os_str())],
    )
    .unwrap();
    let mut client = hub.ws().await.unwrap();
    let s = run_agent(&hub, &mut client, &agent, "shout beta")
        .await
        .unwrap();

    let change = s["jj_change_id"].as_str().unwrap().to_string();
    assert_ne!(
        change,
        s["run_commit"].as_str().unwrap(),
        "a jj repository reports the change id"
    );
    assert!(
        change.len() >= 12 && change.chars().all(|c| ('k'..='z').contains(&c)),
        "{change}"
    );
    // The suggestion came with the agent's publish: wait for the agent to be done looking.
    let run_id = s["run_id"].as_str().unwrap();
    hunkgate_tests::wait_run_finished(&hub, run_id, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let seen = |f: &str| {
        let text = std::fs::read_to_string(out.join(f)).unwrap_or_default();
        text.trim_end().to_string()
    };
    assert_eq!(seen("change"), change, "{}", seen("err"));
    assert_eq!(seen("desc"), "suggestion: shout beta");
    let parent_desc = seen("parent");
    assert!(
        parent_desc.contains("your checkout"),
        "the change sits on the base: {parent_desc}"
    );

    let r = client
        .call(json!({"type": "feedback", "suggestionId": s["id"], "hunkId": s["hunks"][0]["id"], "action": "accept"}))
        .await
        .unwrap();
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(
        std::fs::read_to_string(repo.join("notes.txt")).unwrap(),
        "alpha\nBETA\ngamma\n"
    );
    // jj sees the accepted hunk as an ordinary working-copy change.
    let diff = jj(&home, &repo, &["diff", "--git"]);
    assert!(diff.contains("+BETA"), "{diff}");
}

//! The README's curl lines, run as written against a real hub (only the port differs).

use std::process::Command;
use std::time::Duration;

use hunkgate_tests::{hermetic_env, hunkgate_bin, wait_until, Workspace};
use serde_json::Value;

fn readme_curl_block() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let start = readme.find("## curl").expect("README has a curl section");
    let section = &readme[start..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .expect("curl section has a sh block");
    let block = block.split("```").next().unwrap();
    block
        .lines()
        .map(str::to_string)
        .filter(|l| !l.trim().is_empty())
        .collect()
}

#[test]
fn readme_curl_lines_work() {
    let lines = readme_curl_block();
    assert!(lines.len() >= 9, "{lines:?}");
    let prelude = &lines[0];
    // The hub's URL comes from `hunkgate url` (its discovery record), whatever port it took.
    assert!(prelude.starts_with("H=$(hunkgate url);"), "{prelude}");

    let ws = Workspace::new(&[("parse.py", b"def parse_args(argv):\n    return argv\n")]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "printf 'def parse_args(argv):\\n    assert isinstance(argv, list)\\n    return argv\\n' > parse.py")
        .unwrap();
    let agent_flag = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&["--agent", &agent_flag]).unwrap();
    let bin_dir = hunkgate_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let run = |line: &str, id: &str, hunk: &str| -> String {
        let mut cmd = Command::new("bash");
        hermetic_env(&mut cmd, &ws.home());
        let out = cmd
            .current_dir(ws.repo())
            .env("PATH", &path)
            .env("ID", id)
            .env("HUNK", hunk)
            .arg("-c")
            .arg(format!("set -e; {prelude}\n{line}"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        // curl's --max-time ends the WebSocket line on purpose (exit 28) once hello arrived.
        let ok =
            out.status.success() || (line.contains("--max-time") && out.status.code() == Some(28));
        assert!(
            ok,
            "{line}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let json =
        |s: String| -> Value { serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")) };

    let mut it = lines[1..].iter();
    let health = json(run(it.next().unwrap(), "", ""));
    assert_eq!(health["healthy"], true);
    assert_eq!(health["service"], "hunkgate");
    // `hunkgate url` found this repository's hub, not another one.
    let repo = ws.repo().canonicalize().unwrap();
    assert_eq!(health["repo"], repo.display().to_string(), "{health}");
    assert_eq!(run("echo $H", "", "").trim(), hub.url);
    let started = json(run(it.next().unwrap(), "", ""));
    assert_eq!(started["status"], "queued", "{started}");

    let mut listed = Value::Null;
    let list_line = it.next().unwrap();
    wait_until("the run's suggestion", Duration::from_secs(30), || {
        listed = json(run(list_line, "", ""));
        listed["suggestions"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    })
    .unwrap();
    let id = listed["suggestions"][0]["id"].as_str().unwrap().to_string();
    let shown = json(run(it.next().unwrap(), &id, ""));
    let hunk = shown["hunks"][0]["id"].as_str().unwrap().to_string();

    let accepted = json(run(it.next().unwrap(), &id, &hunk));
    assert_eq!(accepted["success"], true, "{accepted}");
    assert!(ws
        .read_string("parse.py")
        .unwrap()
        .contains("assert isinstance"));
    let undone = json(run(it.next().unwrap(), &id, &hunk));
    assert_eq!(undone["hunk"]["state"], "pending", "{undone}");
    assert_eq!(
        ws.read_string("parse.py").unwrap(),
        "def parse_args(argv):\n    return argv\n"
    );
    let rejected = json(run(it.next().unwrap(), &id, &hunk));
    assert_eq!(rejected["hunk"]["state"], "rejected", "{rejected}");
    let completed = json(run(it.next().unwrap(), &id, &hunk));
    assert_eq!(completed["action"], "finalize", "{completed}");

    let upgrade = run(it.next().unwrap(), "", "");
    assert!(upgrade.starts_with("HTTP/1.1 101"), "{upgrade}");
    assert!(upgrade.contains("\"type\":\"hello\""), "{upgrade}");
    assert!(
        it.next().is_none(),
        "a README curl line is not covered by this test"
    );
}

/// The relative links (`[text](path)`, `path#anchor`) of a Markdown text that name no file
/// under `dir`; web links and pure anchors are not looked at.
fn dead_links(text: &str, dir: &std::path::Path) -> Vec<String> {
    let mut dead = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let target = rest[..end].split('#').next().unwrap_or("");
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        if !dir.join(target).exists() {
            dead.push(rest[..end].to_string());
        }
    }
    dead
}

/// Every relative link in README.md and nvim/README.md names a file of this checkout (the
/// protocol spec moved once and the README kept pointing at its old place).
#[test]
fn relative_links_in_the_readmes_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Control: a link to a missing file is found, a link to an existing one is not.
    assert_eq!(
        dead_links(
            "[a](README.md) [b](no/such.md#x) [c](https://x.invalid/y)",
            &root
        ),
        ["no/such.md#x"]
    );
    for page in ["README.md", "nvim/README.md"] {
        let path = root.join(page);
        let text = std::fs::read_to_string(&path).unwrap();
        let dead = dead_links(&text, path.parent().unwrap());
        assert!(dead.is_empty(), "{page}: dead links {dead:?}");
    }
}

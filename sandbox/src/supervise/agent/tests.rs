use super::*;

#[test]
fn prompt_is_one_argument() {
    let argv = build_argv(
        "aider --yes-always --message {prompt}",
        "fix it; rm -rf / \"x\"",
    )
    .unwrap();
    assert_eq!(
        argv,
        vec![
            "aider",
            "--yes-always",
            "--message",
            "fix it; rm -rf / \"x\""
        ]
    );
    let argv = build_argv("tool --msg={prompt}", "a b").unwrap();
    assert_eq!(argv, vec!["tool", "--msg=a b"]);
}

/// Hostile prompts through every shape of shell template, run by the real `sh`: nothing in
/// the prompt runs, and the prompt arrives intact.
#[test]
fn shell_templates_never_run_the_prompt() {
    let tmp = tempfile::tempdir().unwrap();
    let mark = tmp.path().join("pwned");
    let m = mark.display();
    let prompts = [
        format!("it's a \"quoted\" prompt; $(touch {m}) `touch {m}` $HOME ${{PATH}} *"),
        format!("\"; touch {m}; echo \""),
        format!("'; touch {m}; echo '"),
        format!("'\"$(touch {m})\"'\nsecond line\n\ttab \\ back"),
        format!("`touch {m}`"),
        "plain words".to_string(),
    ];
    let templates = [
        ("sh -c 'printf %s {prompt} > out'", ""),
        ("sh -c 'printf %s \"{prompt}\" > out'", ""),
        ("sh -c 'printf %s \"<{prompt}>\" > out'", "<>"),
        ("sh -c \"printf %s '{prompt}' > out\"", ""),
        ("sh -c -- 'printf %s \"{prompt}\" > out'", ""),
        ("env sh -c 'printf %s \"{prompt}\" > out'", ""),
        ("env LC_ALL=C sh -e -c 'printf %s {prompt} > out'", ""),
        (
            "timeout 20 sh -c 'printf %s \"$(printf %s \"{prompt}\")\" > out'",
            "",
        ),
        ("sh -c 'printf %s \"`printf %s {prompt}`\" > out'", ""),
        ("/bin/sh -ec 'x=\"{prompt}\"; printf %s \"$x\" > out'", ""),
        ("sh -c 'printf %s \"$1\" > out' sh {prompt}", ""),
        ("sh -c 'printf %s \"$HUNKGATE_PROMPT\" > out'", ""),
    ];
    for prompt in &prompts {
        for (template, wrap) in templates {
            let argv = build_argv(template, prompt).unwrap();
            let _ = std::fs::remove_file(tmp.path().join("out"));
            let st = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(tmp.path())
                .env(PROMPT_VAR, prompt)
                .status()
                .unwrap();
            assert!(st.success(), "{template}: {argv:?}");
            assert!(
                !mark.exists(),
                "{template} ran the prompt {prompt:?}: {argv:?}"
            );
            let got = std::fs::read_to_string(tmp.path().join("out")).unwrap();
            // `$(…)` and backticks drop trailing newlines; none of the prompts has one.
            let want = match wrap {
                "<>" => format!("<{prompt}>"),
                _ => prompt.clone(),
            };
            assert_eq!(got, want, "{template}: {argv:?}");
        }
    }
    // The prompt never enters a script's text.
    let argv = build_argv("sh -c 'echo {prompt}'", "SECRET-TEXT").unwrap();
    assert_eq!(argv[2], "echo \"${HUNKGATE_PROMPT}\"");
}

#[test]
fn code_in_other_languages_with_the_prompt_is_refused() {
    for t in [
        "python3 -c 'print(\"{prompt}\")'",
        "perl -e 'print \"{prompt}\"'",
        "node -e 'console.log(`{prompt}`)'",
        "fish -c 'echo {prompt}'",
        "python3 -u -c 'print(\"{prompt}\")'",
    ] {
        let err = build_argv(t, "x").unwrap_err();
        assert!(matches!(err, TemplateError::PromptInCode { .. }), "{t}");
        assert!(err.to_string().contains("HUNKGATE_PROMPT"), "{err}");
    }
    // Positive controls: the prompt as an argument of its own is fine.
    assert_eq!(
        build_argv("python3 agent.py --task {prompt}", "$(x)").unwrap(),
        vec!["python3", "agent.py", "--task", "$(x)"]
    );
    assert_eq!(
        build_argv(
            "python3 -c 'import sys; print(sys.argv[1])' {prompt}",
            "$(x)"
        )
        .unwrap()[3],
        "$(x)"
    );
    // A shell that is just an argument of another program is not a script.
    assert_eq!(
        build_argv("aider --shell sh --message {prompt}", "a \"b\"").unwrap()[4],
        "a \"b\""
    );
}

/// Peak resident memory of this process, in KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A 128 MiB line without a newline is cut to MAX_LINE bytes with a marker, the lines after
/// it arrive intact, and reading it does not hold the line in memory.
#[tokio::test]
async fn a_huge_line_is_cut_without_being_held() {
    use tokio::io::AsyncReadExt;
    const HUGE: u64 = 128 * 1024 * 1024;
    let input = tokio::io::repeat(b'a')
        .take(HUGE)
        .chain(&b"\nnext line\nlast without newline"[..]);
    let before = vm_hwm_kib();
    let mut lines = Vec::new();
    read_lines(input, |l| {
        lines.push(l);
        async { true }
    })
    .await;
    let grown_mib = (vm_hwm_kib().saturating_sub(before)) / 1024;
    assert_eq!(
        lines.len(),
        3,
        "{:?}",
        lines.iter().map(|l| l.len()).collect::<Vec<_>>()
    );
    assert!(
        lines[0].starts_with(&"a".repeat(MAX_LINE)),
        "{}",
        &lines[0][..50]
    );
    assert!(
        lines[0].ends_with(&format!(
            " … [hunkgate: {} more bytes of this line dropped]",
            HUGE - MAX_LINE as u64
        )),
        "{}",
        &lines[0][MAX_LINE..]
    );
    assert_eq!(lines[1], "next line");
    assert_eq!(lines[2], "last without newline");
    assert!(
        grown_mib < 32,
        "reading one line grew the peak memory by {grown_mib} MiB"
    );
}

#[test]
fn bad_templates_are_clear_errors() {
    assert!(matches!(
        build_argv("  ", "p"),
        Err(TemplateError::Empty(_))
    ));
    assert!(matches!(
        build_argv("sh -c 'unterminated", "p"),
        Err(TemplateError::Syntax { .. })
    ));
}

#[test]
fn env_is_an_allowlist() {
    std::env::set_var("HUNKGATE_PROBE_API_KEY", "sk-secret");
    std::env::set_var("GIT_HUNKGATE_PROBE", "1");
    let env = scrubbed_env(&[]);
    assert!(env.iter().any(|(k, _)| k == "PATH"), "positive control");
    assert!(!env
        .iter()
        .any(|(k, _)| k == "HUNKGATE_PROBE_API_KEY" || k.starts_with("GIT_")));
    let env = scrubbed_env(&["HUNKGATE_PROBE_API_KEY".to_string()]);
    assert!(env.iter().any(|(k, _)| k == "HUNKGATE_PROBE_API_KEY"));
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
    let pidfile = tmp.path().join("bg.pid");
    let script = format!(
        // The agent may be in a PID namespace of its own, where `$!` is not our pid: the
        // child reads its pid from /proc, which is still the machine's, before `exec`.
        "sh -c 'echo $(cut -d\" \" -f4 /proc/self/stat) > {}; exec sleep 30' & echo started; wait",
        pidfile.display()
    );
    let argv = vec!["sh".to_string(), "-c".to_string(), script];
    let mut lines = Vec::new();
    let out = run(
        &sb,
        &argv,
        &scrubbed_env(&[]),
        Duration::from_millis(500),
        CancellationToken::new(),
        |_, l| lines.push(l.to_string()),
    )
    .await;
    assert_eq!(out.exit, Exit::TimedOut);
    assert_eq!(lines, vec!["started"]);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The background sleep was in the group, so it is gone (reaped by init or a zombie).
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true);
    assert!(!alive, "background process {pid} survived the timeout");
}

/// When the hub hears that the agent ended, nothing the agent started is left: in a PID
/// namespace the init kills and reaps the rest before its word (not even a zombie is left,
/// even of a child that left the process group), and without one the group is killed when
/// its leader has exited.
#[tokio::test]
async fn what_the_agent_left_running_is_gone_when_the_end_is_heard() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
    let file = |name: &str| tmp.path().join(name);
    // As above, each background child's pid as the machine's /proc has it; one of them in
    // a session (and process group) of its own. Neither holds the agent's output open, so
    // the hub does not wait for their end to read it.
    let child = |pidfile: &str| {
        format!(
            "sh -c 'echo $(cut -d\" \" -f4 /proc/self/stat) > {}; exec sleep 30' >/dev/null 2>&1",
            file(pidfile).display()
        )
    };
    let script = format!(
        "readlink /proc/self/ns/pid > {ns}; {grouped} & setsid {alone} & while [ ! -s {g} ] || [ ! -s {a} ]; do sleep 0.01; done; echo started; while [ ! -e {seen} ]; do sleep 0.01; done; exit 4",
        ns = file("ns").display(),
        grouped = child("grouped.pid"),
        alone = child("alone.pid"),
        g = file("grouped.pid").display(),
        a = file("alone.pid").display(),
        seen = file("seen").display(),
    );
    let argv = vec!["sh".to_string(), "-c".to_string(), script];
    let stat = |name: &str| {
        let pid = std::fs::read_to_string(file(name)).unwrap();
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
    };
    let mut alive_while_running = false;
    let out = run(
        &sb,
        &argv,
        &scrubbed_env(&[]),
        Duration::from_secs(20),
        CancellationToken::new(),
        |_, l| {
            // The agent waits for this look before it exits: the line is read concurrently
            // with the agent's end, so without the handshake the init may already have
            // killed the children when the hub gets to the line.
            if l == "started" {
                alive_while_running = stat("grouped.pid").is_ok() && stat("alone.pid").is_ok();
                std::fs::write(file("seen"), "").unwrap();
            }
        },
    )
    .await;
    let (grouped, alone) = (stat("grouped.pid"), stat("alone.pid"));
    assert_eq!(out.exit, Exit::Code(4));
    assert!(alive_while_running, "positive control: the children ran");
    let own_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let agent_ns = std::fs::read_to_string(file("ns")).unwrap();
    if agent_ns.trim() != own_ns.to_string_lossy() {
        assert!(grouped.is_err(), "left in the namespace: {grouped:?}");
        assert!(alone.is_err(), "left in the namespace: {alone:?}");
    } else {
        // No namespace here: the group was sent SIGKILL (its members die a moment later);
        // the child that left the group is beyond reach (a known gap).
        let dead = |s: &std::io::Result<String>| {
            s.as_ref()
                .map_or(true, |s| s.contains(") Z ") || s.contains(") X "))
        };
        let killed = std::time::Instant::now();
        while !dead(&stat("grouped.pid")) && killed.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(dead(&stat("grouped.pid")), "survived: {grouped:?}");
        if let Ok(pid) = std::fs::read_to_string(file("alone.pid")) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid.trim().parse().unwrap()),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// However the agent runs (in a PID namespace or not), the hub sees it end as it did.
#[tokio::test]
async fn a_signal_that_kills_the_agent_is_reported_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
    let argv = vec!["sh".into(), "-c".into(), "echo hi; kill -9 $$".into()];
    let mut lines = Vec::new();
    let out = run(
        &sb,
        &argv,
        &[],
        Duration::from_secs(10),
        CancellationToken::new(),
        |_, l| lines.push(l.to_string()),
    )
    .await;
    assert_eq!(out.exit, Exit::Signal(9));
    assert_eq!(lines, vec!["hi"]);
}

/// A sandbox whose agents run under a scripted supervisor: `sh -c <script>`, given the
/// request on its lifeline (stdin) like the sandbox helper.
#[derive(Debug)]
struct Supervised {
    local: crate::workspace::LocalSandbox,
    script: String,
}

impl Sandbox for Supervised {
    fn workdir(&self) -> &std::path::Path {
        self.local.workdir()
    }
    fn prepare(
        &self,
        store: &crate::odb::store::Store,
        base: &std::sync::Arc<crate::odb::store::FlatTree>,
    ) -> Result<(), crate::workspace::SandboxError> {
        self.local.prepare(store, base)
    }
    fn read_back(
        &self,
        objects: &mut crate::odb::store::ObjectBatch<'_>,
        base: &crate::odb::store::FlatTree,
        limits: crate::status::snapshot::ReadLimits,
    ) -> Result<crate::status::snapshot::ReadBack, crate::workspace::SandboxError> {
        self.local.read_back(objects, base, limits)
    }
    fn command(&self, argv: &[String], env: &[(String, String)]) -> tokio::process::Command {
        self.local.command(argv, env)
    }
    fn agent_command(
        &self,
        _argv: &[String],
        _env: &[(String, String)],
        _timeout: Duration,
    ) -> AgentCommand {
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", &self.script]);
        AgentCommand {
            command,
            stop: Stop::Lifeline {
                request: b"the request\n".to_vec(),
            },
        }
    }
    fn tool(
        &self,
        request: &crate::slot::tools::ToolRequest,
    ) -> Result<crate::slot::tools::ToolReply, crate::workspace::SandboxError> {
        self.local.tool(request)
    }
    fn isolation(&self) -> String {
        "a scripted supervisor".into()
    }
}

/// Run a scripted supervisor to its end (its `argv` is not used); returns how the run
/// ended and the lines the hub passed on.
async fn supervised(script: &str) -> (Outcome, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let sb = Supervised {
        local: crate::workspace::LocalSandbox::new(tmp.path().to_path_buf()),
        script: script.to_string(),
    };
    let mut lines = Vec::new();
    let out = run(
        &sb,
        &["unused".to_string()],
        &[],
        Duration::from_secs(60),
        CancellationToken::new(),
        |_, l| lines.push(l.to_string()),
    )
    .await;
    (out, lines)
}

/// The lines `i = 0..n` a scripted supervisor prints: 20,000 of them are over 200 KB, more
/// than a pipe holds, so the hub reads them while the supervisor writes.
fn numbered(n: usize) -> (String, Vec<String>) {
    let script = format!("i=0; while [ $i -lt {n} ]; do echo \"line $i\"; i=$((i+1)); done");
    (script, (0..n).map(|i| format!("line {i}")).collect())
}

/// A supervisor's word on its lifeline ends the run with the status it names, though the
/// supervisor goes on (holding the agent's output pipes) and exits otherwise: everything
/// written before the word is passed on, and nothing written after it is waited for.
#[tokio::test]
async fn a_supervisors_word_on_the_lifeline_ends_the_run() {
    let (lines, expected) = numbered(20_000);
    // The request arrives first, on stdin; the word goes back on the same socket.
    let script = format!(
        "read request; [ \"$request\" = 'the request' ] || exit 9; {lines}; printf '\\000\\007' >&0; sleep 1; echo after the word; exec sleep 30"
    );
    let (out, got) = supervised(&script).await;
    assert_eq!(out.exit, Exit::Code(7));
    assert_eq!(got.len(), expected.len(), "last: {:?}", got.last());
    assert!(
        got == expected,
        "the lines before the word, whole and in order"
    );

    // A death by signal, as the word says it.
    let (out, got) =
        supervised("read request; echo hi; printf '\\001\\011' >&0; exec sleep 30").await;
    assert_eq!((out.exit, got), (Exit::Signal(9), vec!["hi".to_string()]));

    // Positive control: without a word the supervisor's own exit ends the run, with every
    // line it wrote, however late.
    let (out, got) = supervised(&format!(
        "read request; {lines}; sleep 1; echo after the word; exit 5"
    ))
    .await;
    assert_eq!(out.exit, Exit::Code(5));
    assert_eq!(got.last().map(String::as_str), Some("after the word"));
    assert_eq!(got.len(), expected.len() + 1);
}

/// Talk to an interactive agent: send `input` on its stdin, read its stdout to the end,
/// and wait for it; returns its stdout and outcome.
async fn converse(sb: &dyn Sandbox, argv: &[String], input: &str) -> (String, Outcome) {
    use tokio::io::AsyncReadExt;
    let Interactive {
        stdin,
        mut stdout,
        process,
    } = spawn_interactive(sb, argv, &scrubbed_env(&[]), Duration::from_secs(60))
        .unwrap_or_else(|o| panic!("not started: {o:?}"));
    stdin.send(input.as_bytes().to_vec()).await.unwrap();
    // The last sender gone: the agent's EOF where the hub holds its stdin.
    drop(stdin);
    let mut stderr = Vec::new();
    let wait = process.wait(Duration::from_secs(60), CancellationToken::new(), |s, l| {
        stderr.push((s, l.to_string()))
    });
    let read = async {
        let mut out = String::new();
        stdout.read_to_string(&mut out).await.unwrap();
        out
    };
    let (outcome, out) = tokio::join!(wait, read);
    assert!(
        stderr.iter().all(|(s, _)| *s == Stream::Stderr),
        "only stderr goes to on_line: {stderr:?}"
    );
    (out, outcome)
}

/// An interactive agent run by the hub itself reads what the hub writes and its stdout
/// reaches the hub raw, not as lines for `on_line`; closing its stdin is its EOF.
#[tokio::test]
async fn an_interactive_agent_hears_its_stdin_and_speaks_on_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
    let argv: Vec<String> = ["sh", "-c", "read a; echo \"got $a\"; echo to-stderr >&2"]
        .map(String::from)
        .to_vec();
    let (out, outcome) = converse(&sb, &argv, "hello\n").await;
    assert_eq!(out, "got hello\n");
    assert_eq!(outcome.exit, Exit::Code(0));
    assert_eq!(outcome.stderr_tail, "to-stderr");
    // `cat` ends only at the EOF of its stdin: the hub closes it once done writing.
    let cat = vec!["cat".to_string()];
    let (out, outcome) = converse(&sb, &cat, "a\nb").await;
    assert_eq!((out.as_str(), outcome.exit), ("a\nb", Exit::Code(0)));
}

/// Under a supervisor, what the hub writes to an interactive agent follows the request on
/// the lifeline (the supervisor relays it), in order.
#[tokio::test]
async fn an_interactive_agents_stdin_follows_the_request_on_the_lifeline() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = Supervised {
        local: crate::workspace::LocalSandbox::new(tmp.path().to_path_buf()),
        script: "read request; read line; echo \"$request|$line\"".into(),
    };
    let (out, outcome) = converse(&sb, &["unused".to_string()], "after it\n").await;
    assert_eq!(out, "the request|after it\n");
    assert_eq!(outcome.exit, Exit::Code(0));
}

#[tokio::test]
async fn exit_codes_and_stderr_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = crate::workspace::LocalSandbox::new(tmp.path().to_path_buf());
    let sb = &sb;
    let run_to_end = |argv: Vec<String>| async move {
        let no_lines = |_: Stream, _: &str| {};
        let ten = Duration::from_secs(10);
        run(sb, &argv, &[], ten, CancellationToken::new(), no_lines).await
    };
    let out = run_to_end(vec![
        "sh".into(),
        "-c".into(),
        "echo oops >&2; exit 3".into(),
    ])
    .await;
    assert_eq!(out.exit, Exit::Code(3));
    assert_eq!(out.stderr_tail, "oops");
    let out = run_to_end(vec!["/nonexistent/agent".into()]).await;
    assert!(matches!(out.exit, Exit::SpawnFailed(_)));
}

#[test]
fn wait_statuses_become_exits() {
    use std::os::unix::process::ExitStatusExt;
    let status = |raw| Ok(std::process::ExitStatus::from_raw(raw));
    assert_eq!(exit_of(status(0)), Exit::Code(0));
    assert_eq!(exit_of(status(3 << 8)), Exit::Code(3));
    assert_eq!(exit_of(status(9)), Exit::Signal(9));
    let failed = exit_of(Err(std::io::Error::other("no child")));
    assert_eq!(failed, Exit::SpawnFailed("no child".into()));
}

#[test]
fn code_arguments_are_found_after_the_options() {
    let words = |t: &str| shell_words::split(t).unwrap();
    // (template, scan from, interpreter?) -> where the code is
    let cases = [
        ("sh -c x", 1, false, CodeArg::Word(2)),
        ("bash -lc x", 1, false, CodeArg::Word(2)),
        ("sh -c -- x", 1, false, CodeArg::Word(3)),
        ("bash -o pipefail -c x", 1, false, CodeArg::Word(4)),
        ("bash --rcfile r -c x", 1, false, CodeArg::Word(4)),
        ("bash --command x", 1, false, CodeArg::Word(2)),
        ("sh x.sh", 1, false, CodeArg::None),
        ("sh -c", 1, false, CodeArg::None),
        ("python -c x", 1, true, CodeArg::Word(2)),
        ("perl -e x", 1, true, CodeArg::Word(2)),
        ("python -cx", 1, true, CodeArg::Inline(1)),
        ("python -u -c x", 1, true, CodeArg::Word(3)),
        ("python script.py", 1, true, CodeArg::None),
    ];
    for (template, from, interp, want) in cases {
        assert_eq!(
            code_argument(&words(template), from, interp),
            want,
            "{template}"
        );
    }
}

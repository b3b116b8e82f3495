//! `--isolation user`: the agent runs as a separate OS user and provably cannot escape.
//!
//! These tests create real users (an owner who runs the hub, and the sandbox user through
//! `hunkgate setup`), so they need root — as CI has. Without root they fail loudly in CI
//! (`CI=true`) and skip with a printed reason elsewhere; they never pass vacuously. Every
//! negative check has a positive control: the same attempt by the owner succeeds, or the probe
//! shows it could reach the thing it was then denied.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use hunkgate_tests::isolation::{
    chown_tree, hub_pid, processes_of, require_root, start_hub, HubAs, TestUser,
};
use hunkgate_tests::{hunkgate_bin, wait_until, Hub, Workspace};
use serde_json::{json, Value};

const SECRETS: &[(&str, &str)] = &[
    ("ANTHROPIC_API_KEY", "sk-ant-probe-secret-1"),
    ("OPENAI_API_KEY", "sk-probe-secret-2"),
    ("SSH_AUTH_SOCK", "/tmp/probe-secret-ssh-agent.sock"),
    ("AWS_SECRET_ACCESS_KEY", "probe-secret-aws-3"),
    ("HUNKGATE_PROBE_SECRET", "probe-secret-4"),
];

/// An owner (running the hub, unless the hub is root), a sandbox user made by `hunkgate setup`,
/// and a repository that belongs to the owner.
struct Setup {
    ws: Workspace,
    /// Scripts and markers every user can read (root-owned, 0755).
    shared: tempfile::TempDir,
    // Users are removed when the test ends (declared after the directories: dropped last).
    agent: TestUser,
    owner: Option<TestUser>,
}

impl Setup {
    /// `root_hub`: the hub runs as root and drops privileges itself (no sudo involved).
    fn new(root_hub: bool) -> Result<Self> {
        let ws = Workspace::new(&[("hello.txt", b"hello\n"), ("src/lib.rs", b"fn x() {}\n")])?;
        let owner = if root_hub {
            None
        } else {
            let home = ws.home();
            let owner = TestUser::create(
                "hwo",
                &[
                    "-M",
                    "-d",
                    home.to_str().unwrap_or("/nonexistent"),
                    "-s",
                    "/bin/sh",
                ],
            )?;
            chown_tree(ws.dir.path(), &owner)?;
            Some(owner)
        };
        std::fs::set_permissions(ws.dir.path(), std::fs::Permissions::from_mode(0o700))?;
        std::fs::set_permissions(ws.home(), std::fs::Permissions::from_mode(0o700))?;
        // A key in the owner's ~/.ssh, as a real user would have.
        let ssh = ws.home().join(".ssh");
        std::fs::create_dir_all(&ssh)?;
        std::fs::write(
            ssh.join("id_ed25519"),
            "-----BEGIN OPENSSH PRIVATE KEY----- probe\n",
        )?;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700))?;
        std::fs::set_permissions(
            ssh.join("id_ed25519"),
            std::fs::Permissions::from_mode(0o600),
        )?;
        if let Some(o) = &owner {
            chown_tree(&ssh, o)?;
        }
        let name = format!(
            "hwa{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let hub_user = owner
            .as_ref()
            .map(|o| o.name.clone())
            .unwrap_or("root".into());
        let agent = TestUser::set_up_sandbox_user(&name, &hub_user)?;
        let shared = tempfile::tempdir()?;
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755))?;
        Ok(Self {
            ws,
            shared,
            agent,
            owner,
        })
    }

    /// A script every user can run, in the shared directory.
    fn script(&self, name: &str, body: &str) -> Result<PathBuf> {
        let p = self.shared.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n"))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        Ok(p)
    }

    fn hub(&self, tty: bool, extra: &[&str]) -> Result<Hub> {
        self.hub_env(tty, extra, &[])
    }

    /// A hub that runs one agent at a time (so every run reuses slot 0) and logs what its
    /// sandbox helpers do.
    fn one_slot_hub(&self) -> Result<Hub> {
        self.hub_env(
            false,
            &["--max-runs", "1"],
            &[("HUNKGATE_LOG", "warn,hunkgate_sandbox::user=debug")],
        )
    }

    /// `<shared>/<name>`, a directory every user may write (agents leave their findings there).
    fn open_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.shared.path().join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
        Ok(dir)
    }

    fn hub_env(&self, tty: bool, extra: &[&str], env: &[(&str, &str)]) -> Result<Hub> {
        let mut args = vec!["--isolation", "user", "--sandbox-user", &self.agent.name];
        args.extend_from_slice(extra);
        let mut all_env = SECRETS.to_vec();
        all_env.extend_from_slice(env);
        start_hub(
            &self.ws,
            &HubAs {
                user: self.owner.as_ref(),
                tty,
                extra: &args,
                env: &all_env,
            },
        )
    }

    /// Run a shell command as the hub's user (the owner, or root).
    fn as_owner(&self, script: &str) -> Result<std::process::Output> {
        match &self.owner {
            Some(o) => o.sh(script),
            None => Ok(Command::new("sh").args(["-c", script]).output()?),
        }
    }

    /// The sandbox directory of slot 0 (in the sandbox user's home).
    fn sandbox_dir(&self) -> Result<PathBuf> {
        let root = self.agent.home().join("sandboxes");
        for entry in std::fs::read_dir(&root).with_context(|| root.display().to_string())? {
            let dir = entry?.path().join("0");
            if dir.is_dir() {
                return Ok(dir);
            }
        }
        bail!("no sandbox under {}", root.display())
    }
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Start a run of `agent` and wait until it is finished; returns the run.
fn run_to_end(hub: &Hub, agent: &Path, timeout_secs: Option<u64>) -> Result<Value> {
    let id = start_run(hub, agent, timeout_secs)?;
    wait_run(hub, &id, Duration::from_secs(90))
}

fn start_run(hub: &Hub, agent: &Path, timeout_secs: Option<u64>) -> Result<String> {
    let mut body = json!({"prompt": "probe", "agent": agent.display().to_string()});
    if let Some(t) = timeout_secs {
        body["timeout_secs"] = json!(t);
    }
    let r = hub.curl().post("/runs", &body)?;
    anyhow::ensure!(r.status == 200, "POST /runs: {} {}", r.status, r.body);
    r.body["run_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no run_id in {}", r.body))
}

fn wait_run(hub: &Hub, id: &str, timeout: Duration) -> Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let r = hub.curl().get(&format!("/runs/{id}"))?;
        let status = r.body["status"].as_str().unwrap_or("");
        if !matches!(status, "queued" | "working" | "") {
            return Ok(r.body);
        }
        if Instant::now() > deadline {
            bail!("run {id} did not finish: {}\n{}", r.body, hub.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The agent's output as recorded by the hub (`runs/<id>.log`, lines `out ...` / `err ...`).
fn run_log(hub: &Hub, id: &str) -> Result<String> {
    let p = hub.state.join("runs").join(format!("{id}.log"));
    std::fs::read_to_string(&p).with_context(|| p.display().to_string())
}

/// `RESULT <name> <value...>` lines of the probe.
fn results(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("out RESULT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Wait until the sandbox user has no process left but, while `hub` runs, the helpers it
/// keeps after a read-back for each slot's next sync (`sandbox-helper snapshot`, started by the
/// hub itself or by the sudo it ran): never an agent's, which only ever descend from an
/// `exec` helper.
fn wait_no_process_of(user: &TestUser, hub: Option<&Hub>, within: Duration) -> Result<()> {
    let hub = hub.map(hub_pid).transpose()?;
    let left = || {
        processes_of(user.uid)
            .into_iter()
            .filter(|(pid, cmd)| !hub.is_some_and(|hub| kept_by(hub, *pid, cmd)))
            .collect::<Vec<_>>()
    };
    wait_until("no process of the sandbox user", within, || {
        left().is_empty()
    })
    .map_err(|e| anyhow!("{e}: {:?}", left()))
}

/// Whether `pid` (running `cmd`) is a read-back helper of the hub `hub`: its child, or its
/// sudo's.
fn kept_by(hub: i32, pid: i32, cmd: &str) -> bool {
    let parent = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    cmd.contains("sandbox-helper snapshot")
        && parent(pid).is_some_and(|p| p == hub || parent(p) == Some(hub))
}

/// The probe agent: tries every escape the issue lists and prints `RESULT name value` lines.
/// `kill_parent`: also try to kill the supervising process (in a PID namespace that is the
/// namespace's init, which ignores it; without one it is the helper itself — see docs/security.md).
fn probe_script(s: &Setup, hub: &Hub, kill_parent: bool) -> Result<PathBuf> {
    let repo = s.ws.repo();
    let state = &hub.state;
    let ssh = s.ws.home().join(".ssh/id_ed25519");
    let body = format!(
        r#"
r() {{ echo "RESULT $1 $2"; }}
try() {{ name=$1; shift; if "$@" >/dev/null 2>&1; then r "$name" ALLOWED; else r "$name" denied; fi; }}
r id "$(id -u)"
try write_checkout sh -c 'echo pwned >> {repo}/hello.txt'
try create_in_checkout sh -c 'echo pwned > {repo}/pwned.txt'
try read_token cat {state}/token
try read_feedback cat {state}/feedback.jsonl
try read_journal cat {state}/state.jsonl
try list_state ls {state}
try read_ssh cat {ssh}
r reviewer_api_with_agent_token "$(curl -s -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" "$HUNKGATE_URL/suggestions")"
r reviewer_api_no_token "$(curl -s -o /dev/null -w '%{{http_code}}' "$HUNKGATE_URL/suggestions")"
r runs_api_with_agent_token "$(curl -s -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" -H 'Content-Type: application/json' -d '{{"prompt":"x"}}' "$HUNKGATE_URL/runs")"
r agent_status "$(curl -s -o /dev/null -w '%{{http_code}}' -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" -H 'Content-Type: application/json' -d '{{"message":"probe says hi"}}' "$HUNKGATE_URL/agent/status")"
env | sed 's/^/ENV /'
r fds "$(ls /proc/self/fd | tr '\n' ' ')"
r tty_nr "$(cut -d' ' -f7 /proc/$$/stat)"
try devtty perl -e 'open(my $t, "+<", "/dev/tty") or die "$!\n"'
for fd in 0 1 2; do
  try tiocsti_$fd perl -e 'open(my $h, "+<&=", '$fd') or open($h, ">&=", '$fd') or die "$!\n"; my $c = "x"; ioctl($h, 0x5412, $c) or die "$!\n"'
done
# The agent token must not be in any process's argv (ps shows argv to everyone).
t=$(mktemp); printf %s "$HUNKGATE_AGENT_TOKEN" > "$t"
r token_in_argv "$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c -F -f "$t")"
rm -f "$t"
r helper_in_argv "$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c -F sandbox-helper)"
# Leave processes behind: plain, in a new session ignoring SIGTERM, double-forked.
sleep 300 &
bg=$!
setsid sh -c 'trap "" TERM HUP; sleep 301' &
(sh -c 'sleep 302 &' &)
kill -0 $bg && r background_alive yes
{kill_parent}
echo probe > probe.txt
"#,
        kill_parent = if kill_parent {
            "kill -9 $PPID 2>/dev/null; r kill_parent $?"
        } else {
            ""
        },
        repo = repo.display(),
        state = state.display(),
        ssh = ssh.display(),
    );
    s.script("probe.sh", &body)
}

/// Everything the probe must have been denied, and the controls that show it was not denied
/// for lack of trying.
fn check_probe(s: &Setup, hub: &Hub, pid_namespace: bool) -> Result<()> {
    let probe = probe_script(s, hub, pid_namespace)?;
    let run = run_to_end(hub, &probe, None)?;
    let id = run["run_id"].as_str().unwrap_or_default();
    let log = run_log(hub, id)?;
    let res = results(&log);
    let get = |k: &str| res.get(k).map(String::as_str).unwrap_or("<missing>");
    let ctx = || format!("probe log:\n{log}\nhub log:\n{}", hub.log_text());

    assert_eq!(run["status"], "ready", "{}", ctx());
    assert_eq!(get("id"), s.agent.uid.to_string(), "{}", ctx());
    for k in [
        "write_checkout",
        "create_in_checkout",
        "read_token",
        "read_feedback",
        "read_journal",
        "list_state",
        "read_ssh",
        "devtty",
        "tiocsti_0",
        "tiocsti_1",
        "tiocsti_2",
    ] {
        assert_eq!(get(k), "denied", "{k}: {}", ctx());
    }
    // Positive controls: the owner can do each of those things.
    let repo = s.ws.repo();
    let state = &hub.state;
    for (what, cmd) in [
        (
            "write the checkout",
            format!("test -w {}/hello.txt", repo.display()),
        ),
        ("read the token", format!("cat {}/token", state.display())),
        (
            "read the feedback log",
            format!("cat {}/feedback.jsonl", state.display()),
        ),
        (
            "read ~/.ssh",
            format!("cat {}/.ssh/id_ed25519", s.ws.home().display()),
        ),
    ] {
        let out = s.as_owner(&cmd)?;
        assert!(
            out.status.success(),
            "control: the owner must be able to {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(s.ws.read_string("hello.txt")?, "hello\n");
    assert!(!s.ws.exists("pwned.txt"));

    // The API: the agent token publishes and reports status (control), nothing more.
    assert_eq!(get("agent_status"), "200", "{}", ctx());
    assert_eq!(get("reviewer_api_with_agent_token"), "403", "{}", ctx());
    assert_eq!(get("runs_api_with_agent_token"), "403", "{}", ctx());
    assert_eq!(get("reviewer_api_no_token"), "401", "{}", ctx());

    // Environment: an allowlist. The hub had the secrets (it was started with them).
    let env: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("out ENV "))
        .collect();
    assert!(
        env.iter().any(|l| l.starts_with("HUNKGATE_AGENT_TOKEN=")),
        "{}",
        ctx()
    );
    assert!(env.iter().any(|l| l.starts_with("PATH=")), "{}", ctx());
    assert!(
        env.contains(&format!("HOME={}", s.agent.home().display()).as_str()),
        "the agent's HOME is its own: {env:?}"
    );
    for (name, value) in SECRETS {
        assert!(
            !log.contains(value) && !env.iter().any(|l| l.starts_with(&format!("{name}="))),
            "{name} leaked: {}",
            ctx()
        );
    }
    assert!(
        !env.iter().any(|l| l.starts_with("GIT_")),
        "GIT_* leaked: {env:?}"
    );
    assert!(!log.contains(&hub.token), "the reviewer token leaked");
    let hub_env = std::fs::read(format!("/proc/{}/environ", hub_pid(hub)?))?;
    assert!(
        String::from_utf8_lossy(&hub_env).contains("HUNKGATE_PROBE_SECRET=probe-secret-4"),
        "control: the hub itself has the secrets"
    );

    // Only fds 0-2 (3 is ls's own directory handle); the hub had plenty to leak.
    assert_eq!(get("fds"), "0 1 2 3", "{}", ctx());
    let hub_fds = std::fs::read_dir(format!("/proc/{}/fd", hub_pid(hub)?))?.count();
    assert!(
        hub_fds > 4,
        "control: the hub has descriptors of its own ({hub_fds})"
    );

    // No controlling terminal, although the hub has one (it runs on a pty).
    assert_eq!(get("tty_nr"), "0", "{}", ctx());
    let hub_stat = std::fs::read_to_string(format!("/proc/{}/stat", hub_pid(hub)?))?;
    let hub_tty = hub_stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().nth(4))
        .unwrap_or("0");
    assert_ne!(hub_tty, "0", "control: the hub has a controlling terminal");
    // Control: on this kernel a process with a terminal can inject keystrokes.
    let out = s.as_owner(
        r#"script -qec "perl -e 'open(my \$t, \"+<\", \"/dev/tty\") or die \"open: \$!\n\"; my \$c = \"x\"; ioctl(\$t, 0x5412, \$c) or die \"TIOCSTI: \$!\n\"; print \"injected\n\"'" /dev/null </dev/null"#,
    )?;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("injected"),
        "control: TIOCSTI works with a controlling terminal: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // No secret in argv; control: the helper is visible there, so the scan works.
    assert_eq!(get("token_in_argv"), "0", "{}", ctx());
    assert_ne!(get("helper_in_argv"), "0", "{}", ctx());

    // Nothing of the sandbox user outlives the run (control: it was running).
    assert_eq!(get("background_alive"), "yes", "{}", ctx());
    wait_no_process_of(&s.agent, Some(hub), Duration::from_secs(5))?;
    // And the run still produced its suggestion, read back through the helper.
    assert_eq!(
        run["suggestion_ids"].as_array().map(Vec::len),
        Some(1),
        "{}",
        ctx()
    );
    Ok(())
}

#[test]
fn probe_agent_cannot_escape_the_sandbox_user() {
    if !require_root("probe_agent_cannot_escape_the_sandbox_user") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let hub = s.hub(true, &[]).unwrap();
    check_probe(&s, &hub, true).unwrap();
}

#[test]
fn probe_agent_cannot_escape_when_the_hub_is_root() {
    if !require_root("probe_agent_cannot_escape_when_the_hub_is_root") {
        return;
    }
    let s = Setup::new(true).unwrap();
    let hub = s.hub(true, &[]).unwrap();
    let log = hub.log_when(|l| l.contains("isolation") || l.contains("serving"));
    assert!(
        log.contains("isolation") || log.contains("serving"),
        "{log}"
    );
    check_probe(&s, &hub, true).unwrap();
}

/// Machines without unprivileged user namespaces get no PID namespace: the helper, a child
/// subreaper, must still find and kill the whole tree (forced here with
/// `HUNKGATE_SANDBOX_PIDNS=off`).
#[test]
fn without_a_pid_namespace_the_tree_still_dies() {
    if !require_root("without_a_pid_namespace_the_tree_still_dies") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let env = [("HUNKGATE_SANDBOX_PIDNS", "off")];
    let mut hub = s.hub_env(true, &[], &env).unwrap();
    check_probe(&s, &hub, false).unwrap();
    let agent = lingering_agent(&s).unwrap();
    let id = start_run(&hub, &agent, None).unwrap();
    wait_lingering(&s).unwrap();
    // Control: really no PID namespace this time (the agent's parent is the helper).
    let helpers = processes_of(s.agent.uid)
        .into_iter()
        .filter(|(_, c)| c.contains("sandbox-helper exec"))
        .count();
    assert_eq!(helpers, 1, "{:?}", processes_of(s.agent.uid));
    hub.curl()
        .post(&format!("/runs/{id}/cancel"), &json!({}))
        .unwrap();
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(6)).unwrap();
    start_run(&hub, &agent, None).unwrap();
    wait_lingering(&s).unwrap();
    let pid = hub_pid(&hub).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    hub.kill9();
    wait_no_process_of(&s.agent, None, Duration::from_secs(6)).unwrap();
}

/// How a run under user isolation ends is heard from the agent's PID namespace, once nothing
/// it started is left: its init answers on the lifeline with the agent's own wait status. The
/// agent here writes 20,000 lines (more than a pipe holds), leaves a process behind that holds
/// its output open, and kills itself with SIGKILL. The run fails saying the agent was killed by
/// signal 9 — in a PID namespace only the init's word says so: the init, and so the helper and
/// sudo after it, exit with status 137 — and its log has every line. Also without a PID
/// namespace, where there is no init and no word: the helper's exit ends the run (it kills
/// itself with the agent's signal), with the same lines.
fn check_end_heard(root_hub: bool) -> Result<()> {
    let s = Setup::new(root_hub)?;
    let agent = s.script(
        "loud-end.sh",
        "i=0; while [ $i -lt 20000 ]; do echo \"line $i\"; i=$((i+1)); done; sleep 600 & kill -9 $$",
    )?;
    for pidns in ["on", "off"] {
        let hub = s.hub_env(false, &[], &[("HUNKGATE_SANDBOX_PIDNS", pidns)])?;
        let id = start_run(&hub, &agent, None)?;
        let run = wait_run(&hub, &id, Duration::from_secs(60))?;
        anyhow::ensure!(run["status"] == "failed", "{pidns}: {run}");
        let error = run["error"].as_str().unwrap_or("");
        anyhow::ensure!(
            error.starts_with("agent killed by signal 9"),
            "{pidns}: {run}"
        );
        let log = run_log(&hub, &id)?;
        let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("out ")).collect();
        let expected: Vec<String> = (0..20000).map(|i| format!("out line {i}")).collect();
        anyhow::ensure!(
            lines == expected,
            "{pidns}: {} lines of output, the last {:?}",
            lines.len(),
            lines.last()
        );
        wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(6))?;
    }
    Ok(())
}

#[test]
fn the_end_of_a_run_is_heard_from_the_agents_namespace_with_all_its_output() {
    if !require_root("the_end_of_a_run_is_heard_from_the_agents_namespace_with_all_its_output") {
        return;
    }
    check_end_heard(false).unwrap();
}

#[test]
fn the_end_of_a_run_is_heard_from_the_agents_namespace_when_the_hub_is_root() {
    if !require_root("the_end_of_a_run_is_heard_from_the_agents_namespace_when_the_hub_is_root") {
        return;
    }
    check_end_heard(true).unwrap();
}

/// An agent that leaves processes everywhere (new session ignoring SIGTERM, double fork) and
/// never exits.
fn lingering_agent(s: &Setup) -> Result<PathBuf> {
    s.script(
        "linger.sh",
        "sleep 300 &\nsetsid sh -c 'trap \"\" TERM HUP; sleep 301' &\n(sh -c 'sleep 302 &' &)\necho started\nexec sleep 303",
    )
}

fn wait_lingering(s: &Setup) -> Result<()> {
    wait_until("the agent's processes", Duration::from_secs(30), || {
        processes_of(s.agent.uid)
            .iter()
            .filter(|(_, cmd)| cmd.starts_with("sleep 30"))
            .count()
            >= 4
    })
}

#[test]
fn no_sandbox_process_survives_cancel_timeout_or_hub_kill9() {
    if !require_root("no_sandbox_process_survives_cancel_timeout_or_hub_kill9") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let agent = lingering_agent(&s).unwrap();
    let mut hub = s.hub(false, &[]).unwrap();

    // Cancel.
    let id = start_run(&hub, &agent, None).unwrap();
    wait_lingering(&s).unwrap();
    let r = hub
        .curl()
        .post(&format!("/runs/{id}/cancel"), &json!({}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(6)).unwrap();
    let run = wait_run(&hub, &id, Duration::from_secs(20)).unwrap();
    assert_eq!(run["status"], "cancelled", "{run}");

    // Timeout.
    let id = start_run(&hub, &agent, Some(3)).unwrap();
    wait_lingering(&s).unwrap();
    let run = wait_run(&hub, &id, Duration::from_secs(30)).unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"].as_str().unwrap_or("").contains("timed out"),
        "{run}"
    );
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(5)).unwrap();

    // kill -9 of the hub: the helper's lifeline closes and it takes the tree down.
    start_run(&hub, &agent, None).unwrap();
    wait_lingering(&s).unwrap();
    let pid = hub_pid(&hub).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    hub.kill9();
    wait_no_process_of(&s.agent, None, Duration::from_secs(6)).unwrap();
}

/// The agent configures its clone's git to run a marker command on every occasion git offers;
/// a whole review (run, publish, accept, finalize) must run none of it. The control runs git in
/// a copy the agent made of its clone as it left it (the slot itself is put back to its base
/// once the run is over) and sees the markers fire.
fn git_config_never_runs(
    hub: &Hub,
    shared: &Path,
    run_git_as: impl Fn(&str) -> Result<std::process::Output>,
) -> Result<()> {
    let marks = shared.join("marks");
    std::fs::create_dir_all(&marks)?;
    std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o777))?;
    let copies = shared.join("copies");
    std::fs::create_dir_all(&copies)?;
    std::fs::set_permissions(&copies, std::fs::Permissions::from_mode(0o777))?;
    let copy = copies.join("clone");
    let marker = shared.join("mark.sh");
    std::fs::write(
        &marker,
        format!(
            "#!/bin/sh\nid -un > {}/fired-\"$1\"-$$\ncat >/dev/null 2>&1 </dev/null\n",
            marks.display()
        ),
    )?;
    std::fs::set_permissions(&marker, std::fs::Permissions::from_mode(0o755))?;
    let m = marker.display().to_string();
    let agent = shared.join("hooks-agent.sh");
    std::fs::write(
        &agent,
        format!(
            r#"#!/bin/sh
set -e
M={m}
git config core.fsmonitor "$M fsmonitor"
git config diff.external "$M diff-external"
git config filter.evil.clean "$M filter-clean"
git config filter.evil.smudge "$M filter-smudge"
git config filter.evil.process "$M filter-process"
git config filter.evil.required true
git config diff.evil.textconv "$M textconv"
git config diff.evil.command "$M diff-command"
git config core.pager "$M pager"
git config core.sshCommand "$M ssh"
git config credential.helper "$M credential"
git config gpg.program "$M gpg"
git config commit.gpgSign true
for h in pre-commit post-commit post-checkout post-index-change reference-transaction pre-auto-gc post-merge post-rewrite fsmonitor-watchman; do
  printf '#!/bin/sh\n%s %s\n' "$M" "$h" > .git/hooks/$h
  chmod +x .git/hooks/$h
done
printf '* filter=evil diff=evil\n' > .gitattributes
echo "changed by the agent" >> hello.txt
cp -a . {copy}
"#,
            copy = copy.display()
        ),
    )?;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;

    let run = run_to_end(hub, &agent, None)?;
    anyhow::ensure!(run["status"] == "ready", "{run}\n{}", hub.log_text());
    let sid = run["suggestion_ids"][0]
        .as_str()
        .ok_or_else(|| anyhow!("no suggestion: {run}"))?
        .to_string();
    let r = hub.curl().post(
        "/feedback/all",
        &json!({"suggestion_id": sid, "action": "accept"}),
    )?;
    anyhow::ensure!(r.status == 200, "accept all: {}", r.body);
    let r = hub.curl().post(
        "/complete",
        &json!({"suggestion_id": sid, "action": "finalize"}),
    )?;
    anyhow::ensure!(r.status == 200, "finalize: {}", r.body);
    let fired: Vec<_> = std::fs::read_dir(&marks)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        fired.is_empty(),
        "the sandbox's git configuration ran: {fired:?}"
    );

    // Control: the same configuration does fire when git itself runs in the clone.
    let out = run_git_as(&format!(
        "cd {} && git status >/dev/null 2>&1; git diff HEAD >/dev/null 2>&1; git -c core.pager=cat log -1 >/dev/null 2>&1; true",
        copy.display()
    ))?;
    let fired = std::fs::read_dir(&marks)?.flatten().count();
    assert!(
        fired > 0,
        "control: git in the sandbox clone runs its configuration ({})",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn sandbox_git_config_never_runs_under_user_isolation() {
    if !require_root("sandbox_git_config_never_runs_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let hub = s.hub(false, &[]).unwrap();
    git_config_never_runs(&hub, s.shared.path(), |cmd| s.agent.sh(cmd)).unwrap();
    // The accepted hunks did land, so the review really happened.
    assert!(s
        .ws
        .read_string("hello.txt")
        .unwrap()
        .contains("changed by the agent"));
}

/// The same without isolation (no root needed): the hub never runs git in the sandbox either.
#[test]
fn sandbox_git_config_never_runs_without_isolation() {
    let ws = Workspace::new(&[("hello.txt", b"hello\n")]).unwrap();
    let shared = tempfile::tempdir().unwrap();
    let hub = ws.serve(&["--isolation", "none"]).unwrap();
    git_config_never_runs(&hub, shared.path(), |cmd| {
        let mut c = Command::new("sh");
        hunkgate_tests::hermetic_env(&mut c, &ws.home());
        Ok(c.args(["-c", cmd]).output()?)
    })
    .unwrap();
    assert!(ws
        .read_string("hello.txt")
        .unwrap()
        .contains("changed by the agent"));
}

#[test]
fn agent_network_none_has_no_network() {
    if !require_root("agent_network_none_has_no_network") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let hub = s.hub(false, &["--agent-network", "none"]).unwrap();
    let agent = s
        .script(
            "net.sh",
            "echo \"RESULT ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\"\n\
             echo \"RESULT health $(curl -s -m 3 -o /dev/null -w '%{http_code}' \"$HUNKGATE_URL/health\")\"\n\
             echo offline > offline.txt",
        )
        .unwrap();
    let run = run_to_end(&hub, &agent, None).unwrap();
    let id = run["run_id"].as_str().unwrap_or_default();
    let log = run_log(&hub, id).unwrap();
    let res = results(&log);
    assert_eq!(run["status"], "ready", "{run}\n{log}\n{}", hub.log_text());
    assert_eq!(res.get("ifaces").map(String::as_str), Some("lo"), "{log}");
    assert_eq!(res.get("health").map(String::as_str), Some("000"), "{log}");
    // Control: the sandbox user can reach the hub when not in the agent's namespace.
    let out = s
        .agent
        .sh(&format!(
            "curl -s -m 3 -o /dev/null -w '%{{http_code}}' {}/health",
            hub.url
        ))
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
}

#[test]
fn startup_refuses_state_or_checkout_the_sandbox_user_can_reach() {
    if !require_root("startup_refuses_state_or_checkout_the_sandbox_user_can_reach") {
        return;
    }
    let s = Setup::new(false).unwrap();
    // Control: it starts as set up.
    let mut hub = s.hub(false, &[]).unwrap();
    hub.stop().unwrap();
    drop(hub);

    // A state dir the sandbox user owns (reachable: the directory above is searchable).
    std::fs::set_permissions(s.ws.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let state = s.ws.state();
    chown_tree(&state, &s.agent).unwrap();
    let err = s
        .hub(false, &[])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("could") && err.contains(&s.agent.name),
        "a state dir of the sandbox user must be refused: {err}"
    );
    chown_tree(&state, s.owner.as_ref().unwrap()).unwrap();

    // A checkout anyone can write.
    std::fs::set_permissions(s.ws.repo(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = s
        .hub(false, &[])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("could write your checkout"),
        "a checkout the sandbox user can write must be refused: {err}"
    );
    // Readable (not writable) is started, with a warning.
    std::fs::set_permissions(s.ws.repo(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let hub = s.hub(false, &[]).unwrap();
    assert!(
        hub.log_text()
            .contains("your checkout is readable by other users"),
        "{}",
        hub.log_text()
    );
}

#[test]
fn setup_check_reports_what_is_missing() {
    let out = Command::new(hunkgate_bin())
        .args(["setup", "--check", "--user", "hwnosuchuser"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("does not exist") && text.contains("hunkgate setup"),
        "{text}"
    );
    // Without that user, serving defaults to no isolation and says so loudly.
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let hub = ws
        .serve(&[
            hunkgate_tests::MACHINE_DEFAULT_ISOLATION,
            "--sandbox-user",
            "hwnosuchuser",
        ])
        .unwrap();
    assert!(
        hub.log_text().contains("WARNING") && hub.log_text().contains("does not exist"),
        "{}",
        hub.log_text()
    );
    drop(hub);
    // And asking for it explicitly is an error that names the fix.
    let ws = Workspace::new(&[("a.txt", b"a\n")]).unwrap();
    let err = ws
        .serve(&["--isolation", "user", "--sandbox-user", "hwnosuchuser"])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("does not exist: create it with `sudo hunkgate setup"),
        "{err}"
    );
}

/// The built-in agent's tools run as the sandbox user: files it writes are that user's, its
/// commands run under that uid, and neither can read the hub's environment or the API key file
/// (the owner can: positive controls).
#[tokio::test]
async fn builtin_agent_tools_run_as_the_sandbox_user_and_never_see_the_key() {
    use hunkgate_tests::fake_llm::{FakeLlm, Recorded, Reply};
    if !require_root("builtin_agent_tools_run_as_the_sandbox_user_and_never_see_the_key") {
        return;
    }
    const KEY: &str = "sk-isolation-key-55aa";
    let s = Setup::new(false).unwrap();
    let key_file = s.ws.home().join("provider.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    if let Some(o) = &s.owner {
        chown_tree(&key_file, o).unwrap();
    }
    let hub_pid_cell = std::sync::Arc::new(std::sync::Mutex::new(0i32));
    let cell = hub_pid_cell.clone();
    let key_path = key_file.display().to_string();
    let probe_key = key_path.clone();
    // Who owns the file the model's `write_file` made, looked at while the run still goes on
    // (once it is over, the slot is put back to its base).
    let made_by = std::sync::Arc::new(std::sync::Mutex::new(None::<u32>));
    let (made_seen, sandboxes) = (made_by.clone(), s.agent.home().join("sandboxes"));
    let fake = FakeLlm::with(move |req: &Recorded| {
        let pid = *cell.lock().unwrap();
        let key_path = &probe_key;
        if req.tool_results().len() == 2 {
            let owner = std::fs::read_dir(&sandboxes)
                .into_iter()
                .flatten()
                .flatten()
                .find_map(|e| std::fs::metadata(e.path().join("0/made.txt")).ok())
                .map(|m| m.uid());
            *made_seen.lock().unwrap() = owner;
        }
        match req.tool_results().len() {
            0 => Reply::tool(
                "run_command",
                json!({"command": format!(
                    "echo uid=$(id -u); cat /proc/{pid}/environ >/dev/null 2>&1 && echo hub-env-readable; \
                     cat {key_path} >/dev/null 2>&1 && echo key-readable; echo end"
                )}),
            ),
            1 => Reply::tool("write_file", json!({"file_path": "made.txt", "content": "by the model\n"})),
            _ => Reply::tool("finish", json!({"description": "probe"})),
        }
    })
    .await;
    let url = fake.base_url();
    let hub = s
        .hub(
            true,
            &[
                "--provider-url",
                &url,
                "--model",
                "m",
                "--api-key-file",
                &key_path,
            ],
        )
        .unwrap();
    *hub_pid_cell.lock().unwrap() = hub_pid(&hub).unwrap();
    let r = hub
        .curl()
        .post("/runs", &json!({"prompt": "probe"}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let run = wait_run(
        &hub,
        r.body["run_id"].as_str().unwrap(),
        Duration::from_secs(90),
    )
    .unwrap();
    assert_eq!(run["status"], "ready", "{run}\n{}", hub.log_text());
    let reqs = fake.requests();
    let out = &reqs[1].tool_results()[0].1;
    assert!(out.contains(&format!("uid={}", s.agent.uid)), "{out}");
    assert!(out.contains("end"), "the command ran to its end: {out}");
    assert!(!out.contains("hub-env-readable"), "{out}");
    assert!(!out.contains("key-readable"), "{out}");
    // Positive controls: the hub's user reads both, and the key did reach the provider.
    let owner = s
        .as_owner(&format!(
            "cat /proc/{}/environ >/dev/null && cat {key_path} >/dev/null && echo both",
            hub_pid(&hub).unwrap()
        ))
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&owner.stdout).trim(), "both");
    assert_eq!(
        reqs[0].authorization().as_deref(),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(
        *made_by.lock().unwrap(),
        Some(s.agent.uid),
        "written by the sandbox user"
    );
    assert!(!hub.log_text().contains(KEY));
}

/// The incremental sandbox sync under user isolation: the helper writes only what differs and
/// reads back only what changed, and still every change is seen (see
/// [`crate::runs::sandbox_sync_sees_every_change`]).
#[test]
fn sandbox_sync_sees_every_change_under_user_isolation() {
    if !require_root("sandbox_sync_sees_every_change_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    let agent = s
        .script("sync.sh", &crate::runs::sync_agent_body(&out))
        .unwrap();
    let hub = s.one_slot_hub().unwrap();
    crate::runs::sandbox_sync_sees_every_change(
        &hub,
        &agent,
        &out,
        |f, b| s.ws.write(f, b).unwrap(),
        &s.ws.repo(),
    );
    // The second run was synced by the helper that read the first one back, kept for it.
    let kept_syncs = || hub.log_text().matches("synced by the kept helper").count();
    assert_eq!(kept_syncs(), 1, "{}", hub.log_text());
    let kept = || {
        processes_of(s.agent.uid)
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("sandbox-helper snapshot"))
            .map(|(pid, _)| pid)
            .collect::<Vec<_>>()
    };
    let helper = kept();
    assert_eq!(helper.len(), 1, "one helper kept for the slot: {helper:?}");

    // A third run, after the user added a file in a new directory and deleted one, and the
    // second run's agent left a directory and an edit deep in it: the kept helper syncs it too
    // (a base that changed by more than edits; directories that came and went), and the
    // sandbox is exactly the new base.
    s.ws.write("deep/new/added.txt", b"added\n").unwrap();
    std::fs::remove_file(s.ws.repo().join("keep.txt")).unwrap();
    let agent = s
        .script(
            "third.sh",
            &format!(
                "find . -path ./.git -prune -o \\( -type f -o -type l \\) -print | sort > {out}/files\n\
                 stat -c %i .git > {out}/git\n\
                 cat deep/new/added.txt > {out}/added\n\
                 git status --porcelain > {out}/status\n\
                 echo \"$HUNKGATE_PROMPT\" >> deep/new/added.txt",
                out = out.display()
            ),
        )
        .unwrap();
    let expected = "./deep/new/added.txt\n./edit.txt\n./gone.txt\n./hello.txt\n./mode.txt\n\
                    ./same.txt\n./src/lib.rs\n./todir.txt\n./tolink.txt\n./user.txt\n";
    let check_run = |prompt: &str| {
        let r = crate::runs::start_and_wait(&hub, prompt, &agent);
        let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
        assert_eq!(
            read("files"),
            expected,
            "{prompt}: the sandbox holds the new base"
        );
        assert_eq!(read("added"), "added\n", "{prompt}");
        assert_eq!(
            read("status"),
            "",
            "{prompt}: git sees the sandbox at its base"
        );
        assert_eq!(r["status"], "ready", "{prompt}: {r}\n{}", hub.log_text());
        let sid = r["suggestion_ids"][0].as_str().unwrap();
        let sug = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
        assert_eq!(
            sug["files"],
            json!(["deep/new/added.txt"]),
            "{prompt}: {sug}"
        );
        assert!(
            sug["hunks"].to_string().contains(&format!("+{prompt}")),
            "{sug}"
        );
    };
    check_run("third");
    assert_eq!(kept_syncs(), 2, "{}", hub.log_text());
    assert_eq!(kept(), helper, "the same helper, kept from run to run");

    // Once a run is over the kept helper puts the slot back to its base (a fresh .git shows
    // it), and the next sync looks only where its watch saw something since — as exact.
    wait_for_reset(&s, &out.join("git"));
    let resets = || hub.log_text().matches("after_reset=true").count();
    let before = resets();
    check_run("fourth");
    assert_eq!(resets(), before + 1, "{}", hub.log_text());
    assert_eq!(kept_syncs(), 3, "{}", hub.log_text());

    // Killed while kept (it is the sandbox user's process, though out of the agents' reach):
    // the next sync is made as if there had never been one kept, and is just as exact.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(helper[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    check_run("fifth");
    assert_eq!(kept_syncs(), 3, "{}", hub.log_text());
    assert!(
        hub.log_text().contains("the kept helper's sync failed"),
        "{}",
        hub.log_text()
    );
    let replaced = kept();
    assert!(
        replaced.len() == 1 && replaced != helper,
        "a new helper kept: {replaced:?}"
    );
}

/// An agent that publishes while it works (its own `POST /agent/publish`) has its sandbox read
/// back then by the helper that stood by, which is kept for the slot; but the slot is put back
/// to its base only once the run is over, never under the agent: its work after the publish
/// carries on from where it was, and its second publish (read back by a new helper) has it.
/// Control: once the run is over the kept helper does reset the slot (its `.git` is new), and
/// the next run's sync says so.
#[test]
fn a_publish_while_the_agent_works_leaves_its_sandbox_alone() {
    if !require_root("a_publish_while_the_agent_works_leaves_its_sandbox_alone") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    let agent = s
        .script(
            "midway.sh",
            &format!(
                r#"
echo "$HUNKGATE_PROMPT first" >> hello.txt
curl -sS -f -o /dev/null -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" -H 'Content-Type: application/json' -d '{{"description":"halfway"}}' "$HUNKGATE_URL/agent/publish" && echo yes > {out}/published
stat -c %i .git > {out}/git
sleep 1.5
cat hello.txt > {out}/after
echo "$HUNKGATE_PROMPT second" >> hello.txt
curl -sS -f -o /dev/null -H "Authorization: Bearer $HUNKGATE_AGENT_TOKEN" -H 'Content-Type: application/json' -d '{{"description":"done"}}' "$HUNKGATE_URL/agent/publish"
"#,
                out = out.display()
            ),
        )
        .unwrap();
    let hub = s.one_slot_hub().unwrap();
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    for (round, prompt) in ["one", "two"].into_iter().enumerate() {
        let r = crate::runs::start_and_wait(&hub, prompt, &agent);
        assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
        assert_eq!(read("published"), "yes\n", "{}", hub.log_text());
        assert!(
            read("after").ends_with(&format!("{prompt} first\n")),
            "{prompt}: the sandbox was changed under the agent: {:?}\n{}",
            read("after"),
            hub.log_text()
        );
        let ids = r["suggestion_ids"].as_array().unwrap();
        assert_eq!(ids.len(), 2, "{r}");
        let last = hub
            .curl()
            .get(&format!("/suggestions/{}", ids[1].as_str().unwrap()))
            .unwrap()
            .body;
        assert!(
            last["hunks"]
                .to_string()
                .contains(&format!("+{prompt} second")),
            "{last}"
        );
        if round == 0 {
            // The run is over: the kept helper puts the slot back to its base now.
            wait_for_reset(&s, &out.join("git"));
        }
    }
    let log = hub.log_text();
    assert!(log.contains("synced by the kept helper"), "{log}");
    assert_eq!(log.matches("after_reset=true").count(), 1, "{log}");
}

/// Wait until the slot's kept helper has put it back to its base between runs: its `.git` is
/// no longer the one whose inode the last agent wrote to `inode_file`.
fn wait_for_reset(s: &Setup, inode_file: &Path) {
    let seen = std::fs::read_to_string(inode_file).unwrap();
    let git = s.sandbox_dir().unwrap().join(".git");
    wait_until(
        "the kept helper to reset the slot",
        Duration::from_secs(30),
        || std::fs::metadata(&git).is_ok_and(|m| m.ino().to_string() != seen.trim()),
    )
    .unwrap();
}

/// Two concurrent runs under `--isolation user`: agent B sits with its token in its environment;
/// agent A, running as the same sandbox user, tries every way to get it — every process's
/// environ and cmdline, B's environ, fds and cmdline by B's pid (which the test hands it),
/// signals and `ptrace` to that pid, a nested user namespace that unmounts `/proc` to reveal
/// the machine's, and a nested PID namespace with its own `/proc`. It dumps everything it finds
/// into its output; B's token must appear nowhere in it. Positive controls: A finds its own
/// token the same way, the test (root) reads B's token from B's environ, and with the private
/// `/proc` forced off (`HUNKGATE_SANDBOX_PIDNS=off`, as on machines without unprivileged user
/// namespaces) the very same A does find B's token — and `serve` said so at start.
fn check_tokens_stay_private(root_hub: bool, private: bool) -> Result<()> {
    let s = Setup::new(root_hub)?;
    let env: &[(&str, &str)] = if private {
        &[]
    } else {
        &[("HUNKGATE_SANDBOX_PIDNS", "off")]
    };
    let hub = s.hub_env(false, &[], env)?;
    let warned = hub
        .log_text()
        .contains("could read another run's agent token");
    anyhow::ensure!(
        warned != private,
        "serve must warn exactly when agents share /proc (private: {private}): {}",
        hub.log_text()
    );
    let marks = s.shared.path().join("marks");
    std::fs::create_dir(&marks)?;
    std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o1777))?;
    let b_marker = format!("hunkgate-token-b-{}", std::process::id());
    let b = s.script(
        "b.sh",
        &format!(
            "touch {m}/b-started\nexec sh -c 'sleep 300; : {b_marker}' {b_marker}",
            m = marks.display()
        ),
    )?;
    let bpid_file = s.shared.path().join("bpid");
    let a = s.script(
        "a.sh",
        &format!(
            r#"
r() {{ echo "RESULT $1 $2"; }}
while [ ! -s {bpid} ]; do sleep 0.05; done
B=$(cat {bpid})
r own_token "$HUNKGATE_AGENT_TOKEN"
all_env() {{ cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'; }}
r own_token_found "$(all_env | grep -c -x -F "HUNKGATE_AGENT_TOKEN=$HUNKGATE_AGENT_TOKEN")"
all_env | rev | sed 's/^/ENVIRON /'
cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | sed 's/^/CMDLINE /'
r b_visible "$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c '[h]{b_rest}')"
cat /proc/$B/environ 2>&1 | tr '\0' '\n' | rev | sed 's/^/B_ENVIRON /'
cat /proc/$B/cmdline 2>&1 | tr '\0' '\n' | sed 's/^/B_CMDLINE /'
ls -l /proc/$B/fd/ 2>&1 | sed 's/^/B_FD /'
kill -0 $B 2>/dev/null && r kill_b ALLOWED || r kill_b denied
r ptrace_b "$(perl -MConfig -e '$n = $Config{{archname}} =~ /aarch64/ ? 117 : 101; $r = syscall($n, 16, $ARGV[0], 0, 0); print $r == -1 ? "denied" : "ALLOWED"' $B)"
unshare -Urm sh -c "umount -l /proc; cat /proc/[0-9]*/environ /proc/$B/environ" 2>&1 | tr '\0' '\n' | rev | sed 's/^/UMOUNT /'
unshare -Urmpf --mount-proc sh -c 'cat /proc/[0-9]*/environ' 2>&1 | tr '\0' '\n' | rev | sed 's/^/NESTED /'
r done yes
"#,
            bpid = bpid_file.display(),
            // `[h]unkgate-…`: a pattern that does not match the grep running it.
            b_rest = &b_marker[1..],
        ),
    )?;
    let b_id = start_run(&hub, &b, None)?;
    wait_until("agent B to start", Duration::from_secs(30), || {
        marks.join("b-started").exists()
            && processes_of(s.agent.uid)
                .iter()
                .any(|(_, cmd)| cmd.starts_with("sh -c sleep 300"))
    })?;
    let b_proc = processes_of(s.agent.uid)
        .into_iter()
        .find(|(_, cmd)| cmd.starts_with("sh -c sleep 300"))
        .ok_or_else(|| anyhow!("agent B not found: {:?}", processes_of(s.agent.uid)))?;
    // Control: B's token is there, in B's environment, for whoever may read it.
    let b_env = std::fs::read(format!("/proc/{}/environ", b_proc.0))?;
    let b_token = String::from_utf8_lossy(&b_env)
        .split('\0')
        .find_map(|kv| kv.strip_prefix("HUNKGATE_AGENT_TOKEN="))
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no token in agent B's environment"))?;
    anyhow::ensure!(b_token.len() >= 16, "B's token: {b_token:?}");
    std::fs::write(&bpid_file, b_proc.0.to_string())?;

    let a_run = run_to_end(&hub, &a, None)?;
    let log = run_log(&hub, a_run["run_id"].as_str().unwrap_or_default())?;
    let res = results(&log);
    let get = |k: &str| res.get(k).map(String::as_str).unwrap_or("<missing>");
    let ctx = || format!("agent A's log:\n{log}\nhub log:\n{}", hub.log_text());
    anyhow::ensure!(get("done") == "yes", "A did not finish: {}", ctx());
    // Control: A reads its own token the way it tried to read B's.
    anyhow::ensure!(get("own_token") != b_token, "{}", ctx());
    anyhow::ensure!(get("own_token_found") != "0", "{}", ctx());
    // The environ lines A printed are reversed: the hub redacts `…TOKEN=<random>` from run
    // logs, which would hide a leak from this check (and pass it for the wrong reason).
    let reversed: String = b_token.chars().rev().collect();
    let leaked = log.contains(&b_token) || log.contains(&reversed);
    if private {
        anyhow::ensure!(!leaked, "agent A found agent B's token: {}", ctx());
        anyhow::ensure!(get("b_visible") == "0", "{}", ctx());
        anyhow::ensure!(get("kill_b") == "denied", "{}", ctx());
        anyhow::ensure!(get("ptrace_b") == "denied", "{}", ctx());
    } else {
        // Without a private /proc the same probe succeeds: it is not denied for lack of trying.
        anyhow::ensure!(leaked, "control: A should see B's token here: {}", ctx());
        anyhow::ensure!(get("b_visible") != "0", "{}", ctx());
    }
    let r = hub
        .curl()
        .post(&format!("/runs/{b_id}/cancel"), &json!({}))?;
    anyhow::ensure!(r.status == 200, "{}", r.body);
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(10))?;
    Ok(())
}

#[test]
fn an_agent_cannot_read_a_concurrent_agents_token() {
    if !require_root("an_agent_cannot_read_a_concurrent_agents_token") {
        return;
    }
    check_tokens_stay_private(false, true).unwrap();
}

#[test]
fn an_agent_cannot_read_a_concurrent_agents_token_when_the_hub_is_root() {
    if !require_root("an_agent_cannot_read_a_concurrent_agents_token_when_the_hub_is_root") {
        return;
    }
    check_tokens_stay_private(true, true).unwrap();
}

/// The control of the two above: without a private `/proc` the probe does find the token, and
/// `serve` warned about it at start.
#[test]
fn without_a_private_proc_serve_warns_that_tokens_are_visible() {
    if !require_root("without_a_private_proc_serve_warns_that_tokens_are_visible") {
        return;
    }
    check_tokens_stay_private(false, false).unwrap();
}

/// The read-back helper that waits beside a running agent (the sandbox crate's `Standby`: it
/// reads the base and the sync record while the agent works, so the read-back at the run's end
/// only looks at the sandbox) runs as the sandbox user, like the agent, yet is out of its
/// reach. The agent is told the helper's pid and tries to signal it, stop it, kill it, trace it
/// and read its memory; every attempt fails, and the run's change comes back through that very
/// helper. Controls: the test (root) sees the helper waiting, as the sandbox user and
/// non-dumpable (its `/proc` entries are root's), and the agent can signal a process of its
/// own the same way.
#[test]
fn the_waiting_read_back_helper_is_out_of_the_agents_reach() {
    if !require_root("the_waiting_read_back_helper_is_out_of_the_agents_reach") {
        return;
    }
    check_standby(false).unwrap();
}

/// The control of the one above: a waiting read-back helper that dies while the agent runs
/// (here root kills it) costs nothing but its head start — the hub says so and reads the sandbox with a new helper,
/// and the change still comes back.
#[test]
fn a_read_back_helper_killed_while_waiting_is_replaced() {
    if !require_root("a_read_back_helper_killed_while_waiting_is_replaced") {
        return;
    }
    check_standby(true).unwrap();
}

fn check_standby(kill_it: bool) -> Result<()> {
    let s = Setup::new(true)?;
    let hub = s.one_slot_hub()?;
    let pid_file = s.shared.path().join("standby-pid");
    let marks = s.open_dir("marks")?;
    let started = marks.join("started");
    let agent = s.script(
        "standby.sh",
        &format!(
            r#"
r() {{ echo "RESULT $1 $2"; }}
echo yes > {started}
while [ ! -s {pid} ]; do sleep 0.05; done
P=$(cat {pid})
sleep 30 & S=$!
kill -0 $S 2>/dev/null && r signal_own allowed || r signal_own DENIED
kill $S
kill -0 $P 2>/dev/null && r signal ALLOWED || r signal denied
kill -STOP $P 2>/dev/null && r stop ALLOWED || r stop denied
kill -9 $P 2>/dev/null && r kill ALLOWED || r kill denied
r ptrace "$(perl -MConfig -e '$n = $Config{{archname}} =~ /aarch64/ ? 117 : 101; $r = syscall($n, 16, $ARGV[0], 0, 0); print $r == -1 ? "denied" : "ALLOWED"' $P)"
head -c 16 /proc/$P/mem >/dev/null 2>&1 && r mem ALLOWED || r mem denied
echo "changed by the agent" >> hello.txt
r done yes
"#,
            pid = pid_file.display(),
            started = started.display()
        ),
    )?;
    // Unharmed, the helper is kept after its read-back and stands by for the next run too:
    // still the same process, still out of that agent's reach.
    let mut first = None;
    for round in 0..if kill_it { 1 } else { 2 } {
        let _ = std::fs::remove_file(&pid_file);
        let _ = std::fs::remove_file(&started);
        let id = start_run(&hub, &agent, None)?;
        let is_standby = |cmd: &str| cmd.contains("sandbox-helper snapshot");
        // The helper starts with the run's sync; the agent, once it is ready.
        wait_until("the agent to start", Duration::from_secs(30), || {
            started.exists()
        })?;
        let (pid, _) = processes_of(s.agent.uid)
            .into_iter()
            .find(|(_, cmd)| is_standby(cmd))
            .ok_or_else(|| anyhow!("no read-back helper: {:?}", processes_of(s.agent.uid)))?;
        // Control: it is the sandbox user's process (processes_of goes by the real uid), and
        // non-dumpable: the kernel gives its /proc entries to root.
        let owner = std::fs::metadata(format!("/proc/{pid}/status"))?.uid();
        anyhow::ensure!(
            owner == 0,
            "the waiting helper is dumpable: /proc/{pid} is uid {owner}'s"
        );
        if kill_it {
            let pid = nix::unistd::Pid::from_raw(pid);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)?;
            wait_until("the helper to be gone", Duration::from_secs(10), || {
                !processes_of(s.agent.uid)
                    .iter()
                    .any(|(p, _)| *p == pid.as_raw())
            })?;
        }
        std::fs::write(&pid_file, pid.to_string())?;
        let run = wait_run(&hub, &id, Duration::from_secs(90))?;
        let log = run_log(&hub, &id)?;
        let res = results(&log);
        let get = |k: &str| res.get(k).map(String::as_str).unwrap_or("<missing>");
        let ctx = || {
            format!(
                "run: {run}\nagent's log:\n{log}\nhub log:\n{}",
                hub.log_text()
            )
        };
        anyhow::ensure!(get("done") == "yes", "the agent did not finish: {}", ctx());
        anyhow::ensure!(get("signal_own") == "allowed", "{}", ctx());
        for attempt in ["signal", "stop", "kill", "ptrace", "mem"] {
            anyhow::ensure!(get(attempt) == "denied", "{attempt}: {}", ctx());
        }
        anyhow::ensure!(run["status"] == "ready", "{}", ctx());
        let log_text = hub.log_text();
        let stood_by = log_text.contains("read back by the helper that stood by");
        let replaced = log_text.contains("the standby read-back failed; starting another");
        anyhow::ensure!(
            (stood_by, replaced) == (!kill_it, kill_it),
            "read back by the waiting helper: {stood_by}, by a new one: {replaced}: {}",
            ctx()
        );
        let sid = run["suggestion_ids"][0].as_str().unwrap_or_default();
        let sug = hub.curl().get(&format!("/suggestions/{sid}"))?;
        anyhow::ensure!(
            sug.body.to_string().contains("changed by the agent"),
            "the change is not in the suggestion: {}",
            sug.body
        );
        if round == 1 {
            anyhow::ensure!(
                Some(pid) == first,
                "not the kept helper: {pid} after {first:?}"
            );
            anyhow::ensure!(
                log_text.contains("synced by the kept helper"),
                "the second run was not synced by the kept helper: {}",
                ctx()
            );
        }
        first = Some(pid);
    }
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(10))?;
    Ok(())
}

/// The read-back helper that waits beside the agent watches the slot (inotify, from the end of
/// the run's sync), so the read-back at the run's end looks only where something happened.
/// Every kind of change is still seen — an edit deep in a watched directory, a removal, a new
/// directory, and a new file in `build/`, the name of a directory the first run's agent made
/// (holding only ignored files) and the second run's sync removed (between runs a slot holds
/// exactly its base). What a watch
/// cannot see — a write through a hard link the agent made outside the watched directories
/// (in its `.git`: outside its slot it cannot make one, the slot being a mount of its own in
/// the agent's namespace) — is not in the suggestion, so it can never reach the checkout, and the next run's sync puts the
/// file back (its stat changed). Controls: the hub logs that each run's helper watched;
/// and when the agent renames a directory, the watch gives up and that read-back looks at every
/// file, so the same write through a hard link is in the suggestion.
#[test]
fn a_watching_read_back_sees_every_change_and_nothing_it_missed_lands() {
    if !require_root("a_watching_read_back_sees_every_change_and_nothing_it_missed_lands") {
        return;
    }
    watching_read_back().unwrap();
}

fn watching_read_back() -> Result<()> {
    let s = Setup::new(false)?;
    for (f, body) in [
        (".gitignore", "*.o\n"),
        ("src/deep/a.txt", "a\n"),
        ("src/b.txt", "b\n"),
        ("keep.txt", "keep\n"),
    ] {
        s.ws.write(f, body.as_bytes())?;
    }
    let out = s.open_dir("out")?;
    let agent = s.script(
        "watched.sh",
        &format!(
            r#"
case "$HUNKGATE_PROMPT" in
first)
  mkdir build && echo obj > build/x.o
  echo first >> hello.txt ;;
second)
  echo deep >> src/deep/a.txt
  rm src/b.txt
  mkdir -p src/deep/new && echo n > src/deep/new/n.txt
  (test -e build && echo kept || echo gone) > {out}/build
  mkdir -p build && echo made > build/new.c
  ln keep.txt .git/outside-link && echo sneaky >> .git/outside-link && rm .git/outside-link
  echo linked > {out}/linked
  stat -c %i .git > {out}/git ;;
third)
  cat keep.txt > {out}/keep ;;
fourth)
  mv src/deep src/moved
  ln keep.txt .git/outside-link && echo sneaky >> .git/outside-link && rm .git/outside-link ;;
esac"#,
            out = out.display()
        ),
    )?;
    let hub = s.one_slot_hub()?;
    let run = |prompt: &str, status: &str| -> Result<Value> {
        let id = hub
            .curl()
            .post(
                "/runs",
                &json!({"prompt": prompt, "agent": agent.display().to_string()}),
            )?
            .body["run_id"]
            .as_str()
            .ok_or_else(|| anyhow!("no run id"))?
            .to_string();
        let r = wait_run(&hub, &id, Duration::from_secs(90))?;
        anyhow::ensure!(r["status"] == status, "{r}\n{}", hub.log_text());
        Ok(r)
    };
    run("first", "ready")?;
    let r = run("second", "ready")?;
    let ctx = || hub.log_text();
    anyhow::ensure!(
        std::fs::read_to_string(out.join("build"))? == "gone\n",
        "the first run's ignored build/ was still there: {}",
        ctx()
    );
    anyhow::ensure!(
        std::fs::read_to_string(out.join("linked")).is_ok(),
        "the agent could not write through its hard link: {}",
        ctx()
    );
    // The first run's standby was started with its sync; the second run's is the first
    // one, kept, and says so with that run's sync.
    let watched = ctx()
        .lines()
        .filter(|l| {
            l.contains("a read-back helper stands by") || l.contains("synced by the kept helper")
        })
        .map(|l| l.contains("watching=true"))
        .collect::<Vec<_>>();
    anyhow::ensure!(
        watched == [true, true],
        "both runs' helpers watch: {watched:?}\n{}",
        ctx()
    );
    anyhow::ensure!(
        ctx().contains("read back by the helper that stood by"),
        "{}",
        ctx()
    );
    let sid = r["suggestion_ids"][0].as_str().unwrap_or_default();
    let sug = hub.curl().get(&format!("/suggestions/{sid}"))?.body;
    let mut files: Vec<String> = sug["files"]
        .as_array()
        .ok_or_else(|| anyhow!("no files: {sug}"))?
        .iter()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    files.sort();
    anyhow::ensure!(
        files
            == [
                "build/new.c",
                "src/b.txt",
                "src/deep/a.txt",
                "src/deep/new/n.txt"
            ],
        "{files:?}: {sug}\n{}",
        ctx()
    );
    // What the watch missed is in no suggestion, and the next run starts from the base: the
    // kept helper, told the run was over, put the file back (every file `lstat`ed) before that
    // run's sync, which then looked only where its watch saw something.
    wait_for_reset(&s, &out.join("git"));
    run("third", "no_changes")?;
    let kept_syncs: Vec<bool> = ctx()
        .lines()
        .filter(|l| l.contains("synced by the kept helper"))
        .map(|l| l.contains("after_reset=true"))
        .collect();
    anyhow::ensure!(
        kept_syncs == [true, true],
        "the second and third runs' syncs did not follow a reset: {}",
        ctx()
    );
    anyhow::ensure!(
        std::fs::read_to_string(out.join("keep"))? == "keep\n",
        "the sandbox kept the unseen write"
    );
    anyhow::ensure!(std::fs::read_to_string(s.ws.repo().join("keep.txt"))? == "keep\n");
    // A renamed directory makes the watch give up: that read-back looks at every file, and
    // so it does see the write through the hard link (and the move, shown as a rename).
    let r = run("fourth", "ready")?;
    let sid = r["suggestion_ids"][0].as_str().unwrap_or_default();
    let sug = hub.curl().get(&format!("/suggestions/{sid}"))?.body;
    let mut files: Vec<&str> = sug["files"]
        .as_array()
        .ok_or_else(|| anyhow!("no files: {sug}"))?
        .iter()
        .filter_map(|f| f.as_str())
        .collect();
    files.sort();
    anyhow::ensure!(
        files == ["keep.txt", "src/moved/a.txt"],
        "{files:?}: {sug}\n{}",
        ctx()
    );
    anyhow::ensure!(sug.to_string().contains("+sneaky"), "{sug}");
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(10))?;
    Ok(())
}

/// Under `--isolation user`, the helper's stream is bounded as a whole: see
/// [`crate::runs::check_read_back_limits`].
#[test]
fn a_run_past_the_read_back_limits_is_refused_under_user_isolation() {
    if !require_root("a_run_past_the_read_back_limits_is_refused_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    let cfg = s.shared.path().join("hunkgate.toml");
    std::fs::write(&cfg, crate::runs::READ_LIMITS_TOML).unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let hub = s
        .hub(
            false,
            &["--config", cfg.to_str().unwrap(), "--max-runs", "1"],
        )
        .unwrap();
    let script = |name: &str, body: &str| s.script(name, &format!("set -e\n{body}")).unwrap();
    crate::runs::check_read_back_limits(&hub, &script, &s.ws.repo(), &out);
}

/// Under `--isolation user`, see [`crate::runs::check_multi_megabyte_publish`].
#[test]
fn a_run_adding_forty_megabytes_is_published_whole_under_user_isolation() {
    if !require_root("a_run_adding_forty_megabytes_is_published_whole_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let hub = s.hub(false, &["--max-runs", "1"]).unwrap();
    let script = |name: &str, body: &str| s.script(name, &format!("set -e\n{body}")).unwrap();
    crate::runs::check_multi_megabyte_publish(&s.ws, &hub, &script);
}

/// Under `--isolation user` the agent's program is looked for as the sandbox user would look:
/// on a `PATH` of the configured directories (`--agent-path`), the system's, and those of the
/// hub's `PATH` the sandbox user can search. A program it cannot find, or cannot run, fails the
/// run with a message naming the program and the fix — never "Permission denied (os error 13)"
/// for a program that is nowhere — in the run's error and in what `hunkgate run` prints.
#[test]
fn the_agents_program_is_found_as_the_sandbox_user_would() {
    if !require_root("the_agents_program_is_found_as_the_sandbox_user_would") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let shared = s.shared.path().display().to_string();
    let home = s.ws.home().display().to_string();
    let user = s.agent.name.clone();
    let program = |dir: &Path, name: &str, body: &str, mode: u32| {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    // In the owner's home (0700): on the hub's PATH, out of the sandbox user's reach.
    let hub_only = program(&s.ws.home().join("bin"), "hub-only-agent", "exit 0", 0o755);
    if let Some(o) = &s.owner {
        chown_tree(&s.ws.home().join("bin"), o).unwrap();
    }
    // Configured and reachable; one of them only root may run.
    let open = s.shared.path().join("open/bin");
    program(
        &open,
        "open-agent",
        "echo \"RESULT path $PATH\"\necho here > agent-was-here.txt",
        0o755,
    );
    program(&open, "root-only-agent", "exit 0", 0o744);
    // Configured, but under a directory only root may search.
    let private = s.shared.path().join("private");
    let locked = program(&private.join("bin"), "private-agent", "exit 0", 0o755);
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A directory of the hub's PATH that the sandbox user can search.
    std::fs::create_dir_all(s.shared.path().join("hubbin")).unwrap();
    let system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    let hub_path = format!("{home}/bin:{shared}/hubbin:{system}");
    let start = |configured: &str| {
        s.hub_env(false, &["--agent-path", configured], &[("PATH", &hub_path)])
            .unwrap()
    };
    let run = |hub: &Hub, template: &str| {
        let r = hub
            .curl()
            .post("/runs", &json!({"prompt": "probe", "agent": template}))
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let id = r.body["run_id"].as_str().unwrap().to_string();
        (wait_run(hub, &id, Duration::from_secs(90)).unwrap(), id)
    };
    let error = |run: &Value| run["error"].as_str().unwrap_or("").to_string();
    let install = format!("install it where {user} can run it (e.g. /usr/local/bin)");
    let fix = format!("{install}, or add its directory to `agent_path` in the hub's config");
    let left_out = format!("(left out of the hub's PATH as {user} cannot search them: {home}/bin)");

    let hub = start(&format!("{shared}/open/bin"));
    let agent_path = format!("{shared}/open/bin:{system}:{shared}/hubbin");
    // Positive control: a program in a configured directory it can reach runs, on exactly
    // the PATH described, the hub's unreachable directory left out.
    let (ok, id) = run(&hub, "open-agent {prompt}");
    assert_eq!(ok["status"], "ready", "{ok}");
    let log = run_log(&hub, &id).unwrap();
    assert_eq!(results(&log).get("path"), Some(&agent_path), "{log}");

    let (missing, _) = run(&hub, "nonexistent-program {prompt}");
    assert_eq!(missing["status"], "failed", "{missing}");
    assert_eq!(
        error(&missing),
        format!("agent could not be started: agent program `nonexistent-program` not found on the sandbox user's PATH ({agent_path}): {fix} {left_out}"),
        "{missing}"
    );

    // The hub's user has it, where the sandbox user cannot reach: the message says where.
    let by_owner = s.as_owner(&hub_only.display().to_string()).unwrap();
    assert!(by_owner.status.success(), "{by_owner:?}");
    let (theirs, _) = run(&hub, "hub-only-agent {prompt}");
    assert_eq!(
        error(&theirs),
        format!("agent could not be started: agent program `hub-only-agent` not found on the sandbox user's PATH ({agent_path}): {fix} {left_out} (the hub's own PATH has it at {home}/bin/hub-only-agent)"),
        "{theirs}"
    );

    // There, but not executable for the sandbox user (root runs it).
    assert!(Command::new(open.join("root-only-agent"))
        .status()
        .unwrap()
        .success());
    let (not_exec, _) = run(&hub, "root-only-agent {prompt}");
    assert_eq!(
        error(&not_exec),
        format!("agent could not be started: agent program `root-only-agent` cannot be run by the sandbox user {user}: permission denied, {shared}/open/bin/root-only-agent is not executable for it: {install}"),
        "{not_exec}"
    );

    // `hunkgate run` prints it.
    let state = hub.state.display().to_string();
    let out =
        s.ws.cli(&[
            "run",
            "probe",
            "--agent",
            "nonexistent-program {prompt}",
            "--state-dir",
            &state,
        ])
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("error: agent could not be started: agent program `nonexistent-program` not found on the sandbox user's PATH ({agent_path}): {fix}")),
        "{stderr}"
    );
    drop(hub);

    // Configured, in a directory the sandbox user cannot search (root runs it).
    let hub = start(&format!("{shared}/private/bin"));
    let agent_path = format!("{shared}/private/bin:{system}:{shared}/hubbin");
    assert!(Command::new(&locked).status().unwrap().success());
    let (denied, _) = run(&hub, "private-agent {prompt}");
    assert_eq!(
        error(&denied),
        format!("agent could not be started: agent program `private-agent` not found on the sandbox user's PATH ({agent_path}): permission denied, {user} cannot search {shared}/private, where it may be: {install}, or make that directory searchable for it"),
        "{denied}"
    );
}

/// An agent that leaves read-only directories with files in them (`chmod 555`, as Go's module
/// cache does, and a `chmod 000` one) does not wedge its slot: the kept helper's reset, and the
/// next run's sync, remove them (as the sandbox user, who made them), and the next run starts
/// in exactly the base. Control: the first run's agent did make them (its own listing).
#[test]
fn a_read_only_directory_the_agent_left_does_not_wedge_its_slot() {
    if !require_root("a_read_only_directory_the_agent_left_does_not_wedge_its_slot") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    let agent = s
        .script(
            "readonly.sh",
            &format!(
                "find . -path ./.git -prune -o -print | sort > {out}/files-$HUNKGATE_PROMPT\n\
                 mkdir -p gomod/pkg/mod locked\n\
                 echo module > gomod/pkg/mod/go.mod\n\
                 echo secret > locked/inside.txt\n\
                 chmod 444 gomod/pkg/mod/go.mod\n\
                 chmod 555 gomod/pkg/mod gomod/pkg gomod\n\
                 chmod 000 locked\n\
                 echo \"$HUNKGATE_PROMPT\" >> hello.txt",
                out = out.display()
            ),
        )
        .unwrap();
    let hub = s.one_slot_hub().unwrap();
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    let r = crate::runs::start_and_wait(&hub, "one", &agent);
    assert_eq!(r["status"], "ready", "{r}\n{}", hub.log_text());
    let base = ".\n./hello.txt\n./src\n./src/lib.rs\n";
    assert_eq!(read("files-one"), base);
    let sid = r["suggestion_ids"][0].as_str().unwrap();
    let sug = hub.curl().get(&format!("/suggestions/{sid}")).unwrap().body;
    assert!(
        sug["files"].to_string().contains("gomod/pkg/mod/go.mod"),
        "the agent made its read-only directory: {sug}"
    );
    // The run is over: the kept helper puts the slot back to its base, read-only
    // directories and all.
    let slot = s.sandbox_dir().unwrap();
    wait_until("the kept helper's reset", Duration::from_secs(30), || {
        !slot.join("gomod").exists() && !slot.join("locked").exists()
    })
    .unwrap();
    for prompt in ["two", "three"] {
        let r = crate::runs::start_and_wait(&hub, prompt, &agent);
        assert_eq!(r["status"], "ready", "{prompt}: {r}\n{}", hub.log_text());
        assert_eq!(
            read(&format!("files-{prompt}")),
            base,
            "{prompt}: the slot held exactly the base\n{}",
            hub.log_text()
        );
    }
}

/// [`crate::runs::untracked_files_leave_every_sandbox`] under `--isolation user`: the helper
/// that syncs the slot (kept, or new after the hub's restart) removes what left the base.
#[test]
fn untracked_files_leave_every_sandbox_under_user_isolation() {
    if !require_root("untracked_files_leave_every_sandbox_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    let agent = s
        .script("list.sh", &crate::runs::listing_agent_body(&out))
        .unwrap();
    s.ws.write("README", b"untrack\n").unwrap();
    s.as_owner(&crate::runs::in_repo(
        &s.ws.repo(),
        "git add README && git commit -qm readme",
    ))
    .unwrap();
    crate::runs::untracked_files_leave_every_sandbox(
        || s.one_slot_hub().unwrap(),
        |script| {
            let out = s
                .as_owner(&crate::runs::in_repo(&s.ws.repo(), script))
                .unwrap();
            assert!(out.status.success(), "{script}: {out:?}");
        },
        &agent,
        &out,
    );
}

/// [`crate::slots::planted_files_leave_every_sandbox`] under `--isolation user`: the kept
/// helper's put-back and the next run's sync (by that helper, or a new one after the hub's
/// restart) remove what the agent planted, as the sandbox user — its `chmod 000` directory
/// opened up first — and the read-back names that directory as skipped (the sandbox user
/// cannot read it).
#[test]
fn planted_files_leave_every_sandbox_under_user_isolation() {
    if !require_root("planted_files_leave_every_sandbox_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    s.ws.write("README", b"plant\n").unwrap();
    s.as_owner(&crate::runs::in_repo(
        &s.ws.repo(),
        "git add README && git commit -qm readme",
    ))
    .unwrap();
    let agent = s
        .script("plant.sh", &crate::slots::planting_agent_body(&out))
        .unwrap();
    crate::slots::planted_files_leave_every_sandbox(
        || s.one_slot_hub().unwrap(),
        |script| owner_git(&s, script),
        &agent,
        &out,
        true,
    );
}

/// [`crate::slots::unignored_directories_are_seen_by_every_run`] under `--isolation user`.
#[test]
fn unignored_directories_are_seen_by_every_run_under_user_isolation() {
    if !require_root("unignored_directories_are_seen_by_every_run_under_user_isolation") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let out = s.open_dir("out").unwrap();
    s.ws.write("README", b"ign\n").unwrap();
    s.as_owner(&crate::runs::in_repo(
        &s.ws.repo(),
        "git add README && git commit -qm readme",
    ))
    .unwrap();
    let agent = s
        .script("ign.sh", &crate::slots::ign_agent_body(&out))
        .unwrap();
    crate::slots::unignored_directories_are_seen_by_every_run(
        || s.one_slot_hub().unwrap(),
        |script| owner_git(&s, script),
        &agent,
        &out,
    );
}

/// Run `script` in the checkout as its owner (see [`crate::runs::in_repo`]); it must succeed.
fn owner_git(s: &Setup, script: &str) {
    let out = s
        .as_owner(&crate::runs::in_repo(&s.ws.repo(), script))
        .unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
}

/// Under `--isolation user` a checker (`[[check]]`) runs as the sandbox user, in the sandbox,
/// with the agents' scrubbed environment: what it prints names its user, the hub's secrets it
/// does not see, the tree it checked, and whether it could read the owner's SSH key. The
/// positive control is the owner reading that same key.
#[test]
fn checkers_run_as_the_sandbox_user_without_the_hubs_secrets() {
    if !require_root("checkers_run_as_the_sandbox_user_without_the_hubs_secrets") {
        return;
    }
    let s = Setup::new(false).unwrap();
    let key = s.ws.home().join(".ssh/id_ed25519");
    let cfg = s.shared.path().join("checks.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[check]]\nname = \"who\"\nformat = \"gnu\"\ncommand = '''echo \"hello.txt:1: warning: \
             user=$(id -un) secret=${{ANTHROPIC_API_KEY:-none}} text=$(cat hello.txt) \
             key=$(cat {} 2>/dev/null | head -c 20 || true)\"'''\n",
            key.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let hub = s
        .hub(
            false,
            &["--config", cfg.to_str().unwrap(), "--max-runs", "1"],
        )
        .unwrap();
    let agent = s.script("agent.sh", "echo hi > hello.txt").unwrap();
    let run = run_to_end(&hub, &agent, None).unwrap();
    let sid = run["suggestion_ids"][0].as_str().unwrap().to_string();
    let mut s_view = Value::Null;
    wait_until("the suggestion's checks", Duration::from_secs(60), || {
        s_view = hub
            .curl()
            .get(&format!("/suggestions/{sid}"))
            .map(|r| r.body)
            .unwrap_or(Value::Null);
        s_view.get("checks").is_some()
    })
    .unwrap();
    let hunk = &s_view["hunks"][0];
    let messages: Vec<(&str, &str)> = hunk["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["change"].as_str().unwrap(),
                d["message"].as_str().unwrap(),
            )
        })
        .collect();
    let user = &s.agent.name;
    assert_eq!(
        messages,
        vec![
            (
                "new",
                format!("user={user} secret=none text=hi key=").as_str()
            ),
            (
                "fixed",
                format!("user={user} secret=none text=hello key=").as_str()
            ),
        ],
        "{s_view}"
    );
    // The positive control: the owner can read the key the checker could not.
    let owner = s
        .as_owner(&format!("head -c 20 {}", key.display()))
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&owner.stdout),
        "-----BEGIN OPENSSH P"
    );
}

/// An ACP agent (`--acp`) runs as command agents do under user isolation: as the sandbox user,
/// with the scrubbed environment (none of the hub's secrets), spoken to through the
/// supervisor's lifeline; `session/cancel` reaches it the same way, and cancel leaves no
/// process of the sandbox user.
fn acp_agent_runs_as_the_sandbox_user(root_hub: bool) -> Result<()> {
    let s = Setup::new(root_hub)?;
    let hub = s.hub(false, &["--acp", &crate::acp::agent("probe")])?;
    let id = crate::acp::start(&hub, json!({"prompt": "probe"}))?;
    let run = wait_run(&hub, &id, Duration::from_secs(90))?;
    let log = crate::acp::run_log(&hub, &id);
    assert_eq!(run["status"], "ready", "{run}\n{log}");
    let sid = run["suggestion_ids"][0].as_str().context("suggestion")?;
    let sug = hub.curl().get(&format!("/suggestions/{sid}"))?.body;
    let files = crate::acp::added(&sug);
    let probe = files.get("probe.txt").context("probe.txt")?;
    assert!(
        probe.starts_with(&format!("uid {}\n", s.agent.uid)),
        "{probe}"
    );
    for (secret, _) in SECRETS {
        assert!(
            !probe.contains(secret),
            "{secret} reached the agent: {probe}"
        );
    }
    assert!(probe.contains("HUNKGATE_AGENT_TOKEN"), "{probe}");
    assert!(files.contains_key("hello.txt"), "{files:?}");
    assert!(log.contains("mcp: hunkgate"), "{log}");
    // The session's next run reaches the same process, kept as the sandbox user under its
    // supervisor, and the same ACP session; archiving the session ends it.
    let turn = |files: &std::collections::BTreeMap<String, String>| {
        files.get("turn.txt").cloned().unwrap_or_default()
    };
    let first = turn(&files);
    assert!(first.contains(" turn 1 session "), "{first}");
    let id2 = crate::acp::start(
        &hub,
        json!({"prompt": "probe again", "session_id": run["session_id"]}),
    )?;
    let run2 = wait_run(&hub, &id2, Duration::from_secs(90))?;
    assert_eq!(run2["status"], "ready", "{run2}");
    let sid2 = run2["suggestion_ids"][0].as_str().context("suggestion")?;
    let files2 = crate::acp::added(&hub.curl().get(&format!("/suggestions/{sid2}"))?.body);
    assert_eq!(
        turn(&files2),
        first.replace(" turn 1 ", " turn 2 "),
        "not the same process and session"
    );
    let r = hub.curl().delete(&format!(
        "/sessions/{}",
        run["session_id"].as_str().unwrap_or("")
    ))?;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(10))?;

    let id = crate::acp::start(
        &hub,
        json!({"prompt": "wait", "acp": crate::acp::agent("hang")}),
    )?;
    wait_until("the prompt to be sent", Duration::from_secs(60), || {
        crate::acp::run_log(&hub, &id).contains("new_session")
    })?;
    let r = hub.curl().post(&format!("/runs/{id}/cancel"), &json!({}))?;
    assert_eq!(r.status, 200, "{}", r.body);
    let run = wait_run(&hub, &id, Duration::from_secs(30))?;
    assert_eq!(run["status"], "cancelled", "{run}");
    let log = crate::acp::run_log(&hub, &id);
    assert!(log.contains("got session/cancel"), "{log}");
    wait_no_process_of(&s.agent, Some(&hub), Duration::from_secs(10))?;
    Ok(())
}

#[test]
fn acp_agent_runs_as_the_sandbox_user_via_sudo() {
    if !require_root("acp_agent_runs_as_the_sandbox_user_via_sudo") {
        return;
    }
    acp_agent_runs_as_the_sandbox_user(false).unwrap();
}

#[test]
fn acp_agent_runs_as_the_sandbox_user_when_the_hub_is_root() {
    if !require_root("acp_agent_runs_as_the_sandbox_user_when_the_hub_is_root") {
        return;
    }
    acp_agent_runs_as_the_sandbox_user(true).unwrap();
}

//! A sandbox slot is private to its run: nothing an earlier agent wrote into the slot's git
//! objects reaches a later run of the slot, and no agent can write into a concurrent run's
//! slot (where namespaces can be had; elsewhere `serve` says so).
//!
//! The `--isolation user` tests create a sandbox user through `hunkgate setup`, so they need
//! root, as CI has (see `hunkgate_tests::isolation::require_root`). The hub runs as root and
//! drops privileges itself.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use hunkgate_tests::isolation::{require_root, start_hub, HubAs, TestUser};
use hunkgate_tests::{wait_until, Hub, Workspace};
use serde_json::{json, Value};

const BASE: &str = "base content\n";
const POISON: &str = "POISONED by run 1";

/// A repository with `f.txt`, a sandbox user made by `hunkgate setup` (for a root hub), and a
/// directory every user can read for the agents' scripts.
struct Setup {
    ws: Workspace,
    shared: tempfile::TempDir,
    // Removed when the test ends (declared after the directories: dropped last).
    agent: TestUser,
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Setup {
    fn new() -> Result<Self> {
        let ws = Workspace::new(&[("f.txt", BASE.as_bytes()), ("g.txt", b"other\n")])?;
        std::fs::set_permissions(ws.dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let name = format!(
            "hps{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let agent = TestUser::set_up_sandbox_user(&name, "root")?;
        let shared = tempfile::tempdir()?;
        std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755))?;
        Ok(Self { ws, shared, agent })
    }

    /// A script every user can run, in the shared directory.
    fn script(&self, name: &str, body: &str) -> Result<PathBuf> {
        script_in(self.shared.path(), name, body)
    }

    /// `<shared>/<name>`, a directory every user may write.
    fn open_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.shared.path().join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))?;
        Ok(dir)
    }

    /// A root hub under `--isolation user` that logs what its sandbox helpers do.
    fn hub(&self, extra: &[&str], env: &[(&str, &str)]) -> Result<Hub> {
        let mut args = vec!["--isolation", "user", "--sandbox-user", &self.agent.name];
        args.extend_from_slice(extra);
        let mut env = env.to_vec();
        env.push(("HUNKGATE_LOG", "warn,hunkgate_sandbox::user=debug"));
        let env = &env;
        start_hub(
            &self.ws,
            &HubAs {
                user: None,
                tty: false,
                extra: &args,
                env,
            },
        )
    }
}

fn script_in(dir: &Path, name: &str, body: &str) -> Result<PathBuf> {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(p)
}

fn start_run(hub: &Hub, agent: &Path) -> Result<String> {
    let body = json!({"prompt": "probe", "agent": agent.display().to_string()});
    let r = hub.curl().post("/runs", &body)?;
    anyhow::ensure!(r.status == 200, "POST /runs: {} {}", r.status, r.body);
    r.body["run_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no run_id in {}", r.body))
}

fn wait_run(hub: &Hub, id: &str) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
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

/// The agent's output as the hub recorded it.
fn run_log(hub: &Hub, id: &str) -> Result<String> {
    let p = hub.state.join("runs").join(format!("{id}.log"));
    std::fs::read_to_string(&p).with_context(|| p.display().to_string())
}

/// The value of the agent's `RESULT <name> <value>` line, if it printed one.
fn result(log: &str, name: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| l.strip_prefix("out RESULT "))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
}

/// Every suggestion of `run`, as the hub serves it.
fn suggestions(hub: &Hub, run: &Value) -> Result<Vec<Value>> {
    let ids = run["suggestion_ids"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ids.iter()
        .map(|id| {
            let id = id.as_str().ok_or_else(|| anyhow!("bad id in {run}"))?;
            Ok(hub.curl().get(&format!("/suggestions/{id}"))?.body)
        })
        .collect()
}

/// Bring every object of the sandbox's repository into its own objects directory, loose, and
/// drop its packs and alternates, so that the objects this agent writes are the ones git reads.
const ALL_LOOSE: &str = r#"
T=.git/evil-tmp; mkdir -p $T
git rev-list --objects --all | cut -d' ' -f1 | git pack-objects -q "$T/all" >/dev/null
rm -f .git/objects/info/alternates .git/objects/pack/*
cat "$T"/all-*.pack | git unpack-objects -q
"#;

/// How run 1 of a slot poisons what run 2 will read of `f.txt` through git. Each leaves the
/// work tree as it found it, and checks that its poison works in its own run (the control):
/// `RESULT poisoned <what git now says f.txt is>`.
const POISONINGS: &[(&str, &str)] = &[
    (
        // The loose object behind HEAD:f.txt, rewritten (every object made loose first).
        "loose",
        r#"
P=$(printf 'POISONED by run 1\n' | git hash-object -w --stdin)
O=$(git rev-parse HEAD:f.txt)
LOOSE
rm -f .git/objects/$(echo $O | cut -c1-2)/$(echo $O | cut -c3-)
cp .git/objects/$(echo $P | cut -c1-2)/$(echo $P | cut -c3-) .git/objects/$(echo $O | cut -c1-2)/$(echo $O | cut -c3-)
"#,
    ),
    (
        // A pack of every object, with the poison in it under HEAD:f.txt's id (its index
        // rewritten), and no other pack or alternate.
        "pack",
        r#"
O=$(git rev-parse HEAD:f.txt)
P=$(printf 'POISONED by run 1\n' | git hash-object -w --stdin)
T=.git/evil-tmp; mkdir -p $T
{ git rev-list --objects --all | cut -d' ' -f1 | grep -v "^$O\$"; echo "$P"; } | git pack-objects -q "$T/evil" >/dev/null
rm -f .git/objects/info/alternates .git/objects/pack/*
chmod u+w "$T"/evil-*.idx
perl -e '
  open F, "+<", $ARGV[0] or die; binmode F; local $/; my $d = <F>;
  my $n = unpack("N", substr($d, 8 + 4 * 255, 4)); my $s = 8 + 1024;
  my @e = map { [substr($d, $s + 20 * $_, 20), substr($d, $s + 20 * $n + 4 * $_, 4),
                 substr($d, $s + 24 * $n + 4 * $_, 4)] } 0 .. $n - 1;
  my ($p, $o) = (pack("H40", $ARGV[1]), pack("H40", $ARGV[2]));
  for (@e) { $_->[0] = $o if $_->[0] eq $p }
  @e = sort { $a->[0] cmp $b->[0] } @e;
  my @f = (0) x 256; for my $x (@e) { $f[$_]++ for ord($x->[0]) .. 255 }
  seek F, 0, 0;
  print F substr($d, 0, 8), pack("N256", @f), (map { $_->[0] } @e), (map { $_->[1] } @e),
    (map { $_->[2] } @e), substr($d, $s + 28 * $n);
  close F' "$T"/evil-*.idx "$P" "$O"
mv "$T"/evil-* .git/objects/pack/
"#,
    ),
    (
        // An alternate, first in line, holding the poison under HEAD:f.txt's id.
        "alternate",
        r#"
O=$(git rev-parse HEAD:f.txt)
LOOSE
E=$(mktemp -d); chmod 755 $E
mkdir -p $E/$(echo $O | cut -c1-2)
printf 'POISONED by run 1\n' | git hash-object -w --stdin >/dev/null
P=$(printf 'POISONED by run 1\n' | git hash-object --stdin)
mv .git/objects/$(echo $P | cut -c1-2)/$(echo $P | cut -c3-) $E/$(echo $O | cut -c1-2)/$(echo $O | cut -c3-)
rm -f .git/objects/$(echo $O | cut -c1-2)/$(echo $O | cut -c3-)
mkdir -p .git/objects/info
echo "$E" > .git/objects/info/alternates
"#,
    ),
    (
        // A smudge filter for f.txt in the repository's configuration and attributes.
        "config",
        r#"
git config filter.evil.smudge "sh -c 'cat >/dev/null; echo POISONED by run 1'"
mkdir -p .git/info
echo 'f.txt filter=evil' > .git/info/attributes
"#,
    ),
];

/// Run 1's agent for `poisoning`: plant it, and report what git then restores `f.txt` to.
fn poisoner(poisoning: &str) -> String {
    format!(
        "set -e\n{}\nrm f.txt\ngit checkout -- f.txt\necho \"RESULT poisoned $(cat f.txt)\"\nprintf 'base content\\n' > f.txt\n",
        poisoning.replace("LOOSE", ALL_LOOSE)
    )
}

/// Run 2's agent: restore `f.txt` from git, and print what git says it is.
const RESTORER: &str = r#"set -e
rm f.txt
git checkout -- f.txt
echo "RESULT restored $(cat f.txt)"
echo "RESULT cat_file $(git cat-file -p HEAD:f.txt)"
"#;

/// For each poisoning: run 1 plants it in the slot's `.git` (and sees it work), run 2 of the
/// same slot (`--max-runs 1`) restores `f.txt` from git; run 2 must have no change, and git
/// must show it the base.
fn check_no_poison_survives(hub: &Hub, scripts: &Path) -> Result<()> {
    for (name, poisoning) in POISONINGS {
        let poison = script_in(scripts, &format!("poison-{name}.sh"), &poisoner(poisoning))?;
        let restore = script_in(scripts, &format!("restore-{name}.sh"), RESTORER)?;
        let first = wait_run(hub, &start_run(hub, &poison)?)?;
        let id = first["run_id"].as_str().unwrap_or_default().to_string();
        let log = run_log(hub, &id)?;
        // Control: the poison works where it was planted.
        anyhow::ensure!(
            result(&log, "poisoned").as_deref() == Some(POISON),
            "{name}: run 1 could not poison its own git: {first}\n{log}"
        );
        anyhow::ensure!(first["status"] == "no_changes", "{name}: {first}\n{log}");
        let second = wait_run(hub, &start_run(hub, &restore)?)?;
        let id = second["run_id"].as_str().unwrap_or_default().to_string();
        let log = run_log(hub, &id)?;
        let shown = suggestions(hub, &second)?;
        anyhow::ensure!(
            second["status"] == "no_changes" && !format!("{shown:?}").contains(POISON),
            "{name}: run 2 got run 1's poison: {second}\n{shown:?}\n{log}\n{}",
            hub.log_text()
        );
        anyhow::ensure!(
            result(&log, "restored").as_deref() == Some(BASE.trim())
                && result(&log, "cat_file").as_deref() == Some(BASE.trim()),
            "{name}: run 2's git does not show the base: {log}"
        );
    }
    Ok(())
}

#[test]
fn no_git_object_an_earlier_agent_wrote_reaches_the_next_run_under_user_isolation() {
    if !require_root(
        "no_git_object_an_earlier_agent_wrote_reaches_the_next_run_under_user_isolation",
    ) {
        return;
    }
    let s = Setup::new().unwrap();
    let hub = s.hub(&["--max-runs", "1"], &[]).unwrap();
    check_no_poison_survives(&hub, s.shared.path()).unwrap();
    // The slot's kept helper made the syncs: it holds nothing an earlier agent could write.
    assert!(
        hub.log_text().contains(KEPT_SYNC),
        "no sync by a kept helper: {}",
        hub.log_text()
    );
}

/// What the hub logs (at debug) when a slot's kept helper made its sync.
const KEPT_SYNC: &str = "sandbox synced by the kept helper";

/// The same without a private slot (`HUNKGATE_SANDBOX_PIDNS=off`, as on machines without
/// unprivileged user namespaces): no helper is kept, and each sync starts from no objects.
#[test]
fn no_git_object_an_earlier_agent_wrote_reaches_the_next_run_without_a_private_slot() {
    if !require_root(
        "no_git_object_an_earlier_agent_wrote_reaches_the_next_run_without_a_private_slot",
    ) {
        return;
    }
    let s = Setup::new().unwrap();
    let hub = s
        .hub(&["--max-runs", "1"], &[("HUNKGATE_SANDBOX_PIDNS", "off")])
        .unwrap();
    check_no_poison_survives(&hub, s.shared.path()).unwrap();
    assert!(
        !hub.log_text().contains(KEPT_SYNC),
        "a helper was kept for a slot that is not private: {}",
        hub.log_text()
    );
}

#[test]
fn no_git_object_an_earlier_agent_wrote_reaches_the_next_run_without_isolation() {
    let ws = Workspace::new(&[("f.txt", BASE.as_bytes()), ("g.txt", b"other\n")]).unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let hub = ws
        .serve(&["--isolation", "none", "--max-runs", "1"])
        .unwrap();
    check_no_poison_survives(&hub, scripts.path()).unwrap();
}

/// Two concurrent runs under `--isolation user`: agent B waits; agent A looks for B's slot as
/// an attacker would — the hub's layout under its home, `..`, every process's `/proc/<pid>/cwd`,
/// and, in a user namespace of its own, under the cover unmounted — and writes a file into
/// every slot it finds but its own. B's suggestion must not hold it. Controls: A's write into
/// its own slot lands (in A's suggestion), and with the private slot forced off
/// (`HUNKGATE_SANDBOX_PIDNS=off`, as on machines without unprivileged user namespaces) the very
/// same A does write into B's slot, and B's suggestion shows it — and `serve` said so at start.
fn check_slots_stay_private(private: bool) -> Result<()> {
    let s = Setup::new()?;
    let env: &[(&str, &str)] = if private {
        &[]
    } else {
        &[("HUNKGATE_SANDBOX_PIDNS", "off")]
    };
    let hub = s.hub(&["--max-runs", "2"], env)?;
    let warned = hub
        .log_text()
        .contains("could write into a concurrent run's sandbox");
    anyhow::ensure!(
        warned != private,
        "serve must warn exactly when slots are not private (private: {private}): {}",
        hub.log_text()
    );
    let marks = s.open_dir("marks")?;
    let m = marks.display();
    let b = s.script(
        "b.sh",
        &format!("touch {m}/b-started\nwhile [ ! -e {m}/a-done ]; do sleep 0.05; done"),
    )?;
    // What A tries in a user namespace of its own, where it is root: undo the cover, and
    // make the read-only mount writable.
    let nested = s.script(
        "nested.sh",
        r#"me=$1
perl -MConfig -e '$n = $Config{archname} =~ /aarch64/ ? 39 : 166; print syscall($n, $ARGV[0], 2) == 0 ? "umount2 done\n" : "umount2 refused: $!\n"' "$HOME/sandboxes"
for d in "$HOME"/sandboxes/*/* "$HOME"/sandboxes/*/.[!.]*; do
  [ "$(cd "$d" && pwd -P)" = "$me" ] && continue
  mount -o remount,bind,rw "$d" 2>&1
  printf 'planted by run A\n' > "$d/planted-by-a.txt" 2>/dev/null && echo "PLANTED $d"
done
ls -a "$HOME"/sandboxes/*/"#,
    )?;
    let a = s.script(
        "a.sh",
        &format!(
            r#"
while [ ! -e {m}/b-started ]; do sleep 0.05; done
me=$(pwd -P)
echo "RESULT me $me"
printf 'mine\n' > own.txt && echo "RESULT own yes"
ln own.txt "$HOME/link-out" 2>/dev/null && echo "RESULT link_out yes" || echo "RESULT link_out no"
rm -f "$HOME/link-out"
n=0
for d in "$HOME"/sandboxes/*/* "$HOME"/sandboxes/*/.[!.]* ../* ../../*/* /proc/[0-9]*/cwd; do
  t=$(cd "$d" 2>/dev/null && pwd -P) || continue
  [ "$t" = "$me" ] && continue
  echo "SEEN $d -> $t"
  if printf 'planted by run A\n' > "$d/planted-by-a.txt" 2>/dev/null; then n=$((n+1)); echo "PLANTED $t"; fi
done
echo "RESULT planted $n"
unshare -Urm {nested} "$me" 2>&1 | sed 's/^/NESTED /'
touch {m}/a-done
"#,
            nested = nested.display(),
        ),
    )?;
    let b_id = start_run(&hub, &b)?;
    wait_until("agent B to start", Duration::from_secs(60), || {
        marks.join("b-started").exists()
    })?;
    let a_run = wait_run(&hub, &start_run(&hub, &a)?)?;
    let a_id = a_run["run_id"].as_str().unwrap_or_default().to_string();
    let b_run = wait_run(&hub, &b_id)?;
    let log = run_log(&hub, &a_id)?;
    let a_shown = format!("{:?}", suggestions(&hub, &a_run)?);
    let b_shown = format!("{:?}", suggestions(&hub, &b_run)?);
    let ctx = || {
        format!(
            "A: {a_run}\n{log}\nB: {b_run}\n{b_shown}\nhub log:\n{}",
            hub.log_text()
        )
    };
    // Control: A writes its own slot the way it tried B's.
    anyhow::ensure!(result(&log, "own").as_deref() == Some("yes"), "{}", ctx());
    anyhow::ensure!(a_shown.contains("own.txt"), "{}", ctx());
    let planted = log.lines().filter(|l| l.contains("PLANTED")).count();
    if private {
        anyhow::ensure!(planted == 0, "{}", ctx());
        // Nor can it link a file of its slot from outside it (the slot is a mount of its own).
        anyhow::ensure!(
            result(&log, "link_out").as_deref() == Some("no"),
            "{}",
            ctx()
        );
        // It did try: the cover is there, and locked.
        anyhow::ensure!(log.contains("umount2 refused"), "{}", ctx());
        anyhow::ensure!(
            b_run["status"] == "no_changes" && !b_shown.contains("planted-by-a"),
            "B's suggestion holds what A wrote: {}",
            ctx()
        );
    } else {
        // Without a private slot the same probe succeeds: it is not denied for lack of trying.
        anyhow::ensure!(planted > 0, "{}", ctx());
        anyhow::ensure!(
            result(&log, "link_out").as_deref() == Some("yes"),
            "{}",
            ctx()
        );
        anyhow::ensure!(b_shown.contains("planted-by-a"), "{}", ctx());
    }
    Ok(())
}

#[test]
fn an_agent_cannot_write_into_a_concurrent_runs_slot() {
    if !require_root("an_agent_cannot_write_into_a_concurrent_runs_slot") {
        return;
    }
    check_slots_stay_private(true).unwrap();
}

/// The control of the one above: without namespaces the probe does write into B's slot, and
/// `serve` warned about it at start.
#[test]
fn without_a_private_slot_serve_warns_that_slots_are_writable() {
    if !require_root("without_a_private_slot_serve_warns_that_slots_are_writable") {
        return;
    }
    check_slots_stay_private(false).unwrap();
}

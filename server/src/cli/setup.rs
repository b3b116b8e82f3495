//! `hunkgate setup`: create and check the sandbox user and the sudoers rule that lets the hub
//! start the sandbox helper as that user.

use std::io::{BufRead, IsTerminal, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use hunkgate_sandbox::user::{
    check_exe, check_home, current_exe, find_sudo, sudoers_rule, Launch, SandboxUser,
    UserIsolation, DEFAULT_USER,
};

/// `hunkgate setup`.
// Its doc comments are `--help` text (clap), written for people: `[retention]`, `[1]` and
// `<id>` there are words, not rustdoc links or HTML.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
#[derive(clap::Args, Debug)]
pub struct SetupArgs {
    /// The sandbox user to create or check.
    #[arg(long, default_value = DEFAULT_USER)]
    pub user: String,
    /// The user the hub will run as (default: you; under sudo, the user who ran sudo).
    #[arg(long)]
    pub hub_user: Option<String>,
    /// Home of a new sandbox user (default /var/lib/<user> on Linux, /var/<user> on macOS).
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Only report what is missing, in plain words (exit status 1 if anything is).
    #[arg(long)]
    pub check: bool,
    /// Do it: create the user and write the sudoers rule (through sudo when not root),
    /// after asking.
    #[arg(long)]
    pub install: bool,
    /// Do not ask before changing the system (for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

struct Finding {
    ok: bool,
    text: String,
}

fn ok(text: impl Into<String>) -> Finding {
    Finding {
        ok: true,
        text: text.into(),
    }
}

fn missing(text: impl Into<String>) -> Finding {
    Finding {
        ok: false,
        text: text.into(),
    }
}

pub fn setup(args: SetupArgs) -> anyhow::Result<ExitCode> {
    let exe = current_exe()?;
    let root = nix::unistd::getuid().is_root();
    let hub_user = match &args.hub_user {
        Some(u) => u.clone(),
        None if root => std::env::var("SUDO_USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "root".into()),
        None => SandboxUser::current()?.name,
    };
    let hub = SandboxUser::lookup(&hub_user)?
        .with_context(|| format!("--hub-user {hub_user:?}: no such user"))?;
    if !args.check {
        if root {
            setup_as_root(&args, &hub, &exe)?;
        } else {
            let findings = check(&args.user, &hub, &exe);
            if findings.iter().all(|f| f.ok) {
                print_report(&args.user, &findings);
                return Ok(ExitCode::SUCCESS);
            }
            setup_through_sudo(&args, &hub, &exe)?;
        }
    }
    let findings = check(&args.user, &hub, &exe);
    print_report(&args.user, &findings);
    Ok(if findings.iter().all(|f| f.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(user: &str, findings: &[Finding]) {
    for f in findings {
        println!(
            "{} {}",
            if f.ok { "  ok     " } else { "  MISSING" },
            f.text
        );
    }
    if findings.iter().all(|f| f.ok) {
        println!("hunkgate is set up: `hunkgate serve` runs agents as {user}.");
    } else {
        println!("hunkgate is not set up for --isolation user yet: `hunkgate setup --install` does what is missing.");
    }
}

/// Everything `--isolation user` needs, checked from here (as the hub user, or as root on its
/// behalf).
fn check(name: &str, hub: &SandboxUser, exe: &Path) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(user) = check_account(name, hub, exe, &mut out) {
        check_helper(name, hub, exe, &user, &mut out);
    }
    out
}

/// The account: it exists, is not root nor the hub's user, has no login shell, a private home,
/// cannot replace the binary, shares no group with the hub's user.
fn check_account(
    name: &str,
    hub: &SandboxUser,
    exe: &Path,
    out: &mut Vec<Finding>,
) -> Option<SandboxUser> {
    let user = match SandboxUser::lookup(name) {
        Ok(Some(u)) => u,
        Ok(None) => {
            out.push(missing(format!(
                "the sandbox user {name} does not exist: `sudo hunkgate setup --user {name}` creates it"
            )));
            return None;
        }
        Err(e) => {
            out.push(missing(e.to_string()));
            return None;
        }
    };
    if user.uid == 0 || user.uid == hub.uid {
        out.push(missing(format!(
            "the sandbox user {name} (uid {}) must be neither root nor the hub's user {}",
            user.uid, hub.name
        )));
        return None;
    }
    out.push(ok(format!(
        "the sandbox user {name} exists (uid {}, gid {})",
        user.uid, user.gid
    )));
    if let Ok(Some(pw)) = nix::unistd::User::from_name(name) {
        let shell = pw.shell.display().to_string();
        if shell.ends_with("nologin") || shell.ends_with("false") {
            out.push(ok(format!("{name} has no login shell ({shell})")));
        } else {
            out.push(missing(format!(
                "{name} has a login shell ({shell}): `sudo usermod -s /usr/sbin/nologin {name}`"
            )));
        }
    }
    match check_home(&user) {
        Ok(()) => out.push(ok(format!(
            "its home {} is its own, mode 700",
            user.home.display()
        ))),
        Err(e) => out.push(missing(e.to_string())),
    }
    match check_exe(&user, exe) {
        Ok(()) => out.push(ok(format!(
            "it cannot replace the hunkgate binary {}",
            exe.display()
        ))),
        Err(e) => out.push(missing(e.to_string())),
    }
    if user
        .groups
        .iter()
        .any(|g| hub.groups.contains(g) && *g != 0)
    {
        out.push(missing(format!(
            "{name} shares a group with {}: group-readable files of yours are readable by the agent; remove it from your groups",
            hub.name
        )));
    }
    Some(user)
}

/// The helper: the hub's user can start it as the sandbox user (directly as root, else through
/// sudo), and whether agents get a PID namespace.
fn check_helper(
    name: &str,
    hub: &SandboxUser,
    exe: &Path,
    user: &SandboxUser,
    out: &mut Vec<Finding>,
) {
    let me = nix::unistd::getuid().as_raw();
    let launch = if hub.uid == 0 {
        out.push(ok(
            "the hub runs as root and drops privileges itself: no sudoers rule needed",
        ));
        Launch::Direct
    } else {
        match find_sudo() {
            Some(sudo) => Launch::Sudo { sudo },
            None => {
                out.push(missing(
                    "sudo is not installed (the hub is not root, so it needs sudo to start the sandbox helper)",
                ));
                return;
            }
        }
    };
    if me != 0 && me != hub.uid {
        out.push(missing(format!(
            "cannot test the helper for {} from this user: run the check as {} or as root",
            hub.name, hub.name
        )));
        return;
    }
    let iso = UserIsolation {
        user: user.clone(),
        launch: launch.clone(),
        helper_exe: exe.to_path_buf(),
        network_none: false,
        private_proc: false,
        agent_path: Vec::new(),
        accel: hunkgate_sandbox::accel::Accel::ALL,
    };
    let as_hub = (me == 0 && hub.uid != 0).then_some(hub);
    match iso.probe_as(as_hub) {
        Ok(answer) => {
            out.push(ok(match launch {
                Launch::Direct => format!("the sandbox helper starts as {name}"),
                Launch::Sudo { .. } => format!(
                    "{} can start the sandbox helper as {name} through sudo (the sudoers rule works)",
                    hub.name
                ),
            }));
            if launch == Launch::Direct || answer.contains("pidns=yes") {
                out.push(ok("agents get a PID namespace of their own: nothing they start can outlive them or signal the helper"));
            } else {
                // Not fatal: the helper then tracks the tree as a child subreaper.
                out.push(ok("NOTE: no unprivileged user namespaces here, so agents run without a PID namespace; the helper still kills every descendant it can find, but an agent that deliberately kills its own helper can leave processes behind (allow user namespaces, or run the hub as root, to close that)"));
            }
            if answer.contains("privateproc=yes") {
                out.push(ok("each agent sees only its own processes (a private /proc) and its own sandbox: no agent can read another run's token or write another run's sandbox"));
            } else {
                out.push(ok("NOTE: agents cannot get a private /proc here (no unprivileged user, PID and mount namespaces, or a masked /proc), so one agent could read a concurrent run's token from /proc and write into a concurrent run's sandbox (its change then shows in that run's suggestion), and each run's sandbox is sent every blob of its base; allow user namespaces, or run one agent at a time (--max-runs 1)"));
            }
        }
        Err(e) => out.push(missing(e.to_string())),
    }
}

/// Ask before changing the system; `--yes` answers for scripts.
fn confirm(yes: bool, question: &str) -> anyhow::Result<bool> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        bail!("{question} — no terminal to ask on: pass --yes to confirm");
    }
    print!("{question} [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

/// Not root: say what root has to do, and with `--install` do it through `sudo hunkgate setup`.
fn setup_through_sudo(args: &SetupArgs, hub: &SandboxUser, exe: &Path) -> anyhow::Result<()> {
    let rule = sudoers_rule(&hub.name, &args.user, exe)?;
    println!(
        "As root, hunkgate needs to create or fix the sandbox user {} and install this sudoers rule in {} (it lets {} run exactly the hunkgate sandbox helper as {}, nothing else):\n\n    {rule}\n",
        args.user,
        sudoers_path(&args.user).display(),
        hub.name,
        args.user
    );
    let mut cmd_args: Vec<String> = vec![
        exe.display().to_string(),
        "setup".into(),
        "--user".into(),
        args.user.clone(),
        "--hub-user".into(),
        hub.name.clone(),
        "--install".into(),
        "--yes".into(),
    ];
    if let Some(home) = &args.home {
        cmd_args.push("--home".into());
        cmd_args.push(home.display().to_string());
    }
    let shown = format!("sudo {}", cmd_args.join(" "));
    if !args.install {
        println!(
            "`hunkgate setup --install` runs `{shown}` for you after asking; or run it yourself."
        );
        return Ok(());
    }
    if !confirm(args.yes, &format!("Run `{shown}` now?"))? {
        println!("nothing changed");
        return Ok(());
    }
    let sudo = find_sudo().context("sudo is not installed: run the command above as root")?;
    let status = std::process::Command::new(sudo)
        .args(&cmd_args)
        .status()
        .with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

fn sudoers_path(user: &str) -> PathBuf {
    // sudo skips files in sudoers.d whose names contain a '.' or end in '~'.
    PathBuf::from("/etc/sudoers.d").join(format!("hunkgate-{}", user.replace('.', "_")))
}

fn setup_as_root(args: &SetupArgs, hub: &SandboxUser, exe: &Path) -> anyhow::Result<()> {
    let user = match SandboxUser::lookup(&args.user)? {
        Some(u) => {
            println!("sandbox user {} exists (uid {})", u.name, u.uid);
            u
        }
        None => {
            if !confirm(
                args.yes || args.install,
                &format!("Create the system user {}?", args.user),
            )? {
                bail!("nothing changed");
            }
            create_user(&args.user, args.home.as_deref())?;
            SandboxUser::lookup(&args.user)?
                .with_context(|| format!("{} was created but cannot be looked up", args.user))?
        }
    };
    if user.uid == 0 {
        bail!("{} has uid 0: pick another --user", user.name);
    }
    ensure_home(&user)?;
    if hub.uid != 0 {
        let rule = sudoers_rule(&hub.name, &user.name, exe)?;
        let path = sudoers_path(&user.name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current.lines().any(|l| l.trim() == rule) {
            println!("{} already holds the rule", path.display());
        } else if args.install {
            if !confirm(
                args.yes,
                &format!("Write this rule to {}?\n    {rule}\n", path.display()),
            )? {
                bail!("nothing changed");
            }
            install_sudoers(&path, &hub.name, &user.name, &rule)?;
            println!("wrote {}", path.display());
        } else {
            println!(
                "The hub (as {}) needs this sudoers rule; `hunkgate setup --install` writes it to {}:\n\n    {rule}\n",
                hub.name,
                path.display()
            );
        }
    }
    Ok(())
}

fn run(cmd: &mut std::process::Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn nologin_shell() -> &'static str {
    [
        "/usr/sbin/nologin",
        "/sbin/nologin",
        "/usr/bin/false",
        "/bin/false",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .unwrap_or("/bin/false")
}

#[cfg(not(target_os = "macos"))]
fn create_user(name: &str, home: Option<&Path>) -> anyhow::Result<()> {
    let home = home
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/var/lib").join(name));
    let shell = nologin_shell();
    let which = |p: &str| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(p))
            .find(|p| p.exists())
    };
    if let Some(useradd) = which("useradd") {
        // A system account with a group of its own, no login shell and no skeleton files; the
        // home is created below with the right owner and mode.
        run(std::process::Command::new(useradd)
            .args([
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                shell,
            ])
            .arg("--home-dir")
            .arg(&home)
            .args(["--comment", "hunkgate sandbox", name]))
    } else if let (Some(addgroup), Some(adduser)) = (which("addgroup"), which("adduser")) {
        // BusyBox (Alpine).
        run(std::process::Command::new(addgroup).args(["-S", name]))?;
        run(std::process::Command::new(adduser)
            .args(["-S", "-D", "-H", "-G", name, "-s", shell, "-h"])
            .arg(&home)
            .arg(name))
    } else {
        bail!("neither useradd nor adduser found: create a system user {name} with no login shell and home {} yourself, then run `hunkgate setup --check`", home.display())
    }
}

#[cfg(target_os = "macos")]
fn create_user(name: &str, home: Option<&Path>) -> anyhow::Result<()> {
    // Untested: written from Apple's dscl/dseditgroup documentation (see docs/testing.md, Platforms).
    let home = home
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/var").join(name));
    let out = std::process::Command::new("/usr/bin/dscl")
        .args([".", "-list", "/Users", "UniqueID"])
        .output()
        .context("listing users with dscl")?;
    let used: std::collections::BTreeSet<u32> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    let id = (400..500)
        .find(|i| !used.contains(i))
        .context("no free system uid between 400 and 499")?;
    run(std::process::Command::new("/usr/sbin/dseditgroup").args([
        "-o",
        "create",
        "-r",
        "hunkgate sandbox",
        "-i",
        &id.to_string(),
        name,
    ]))?;
    let user = format!("/Users/{name}");
    let home_s = home.display().to_string();
    let id_s = id.to_string();
    for (key, value) in [
        ("UserShell", "/usr/bin/false"),
        ("RealName", "hunkgate sandbox"),
        ("UniqueID", id_s.as_str()),
        ("PrimaryGroupID", id_s.as_str()),
        ("NFSHomeDirectory", home_s.as_str()),
        ("IsHidden", "1"),
        ("Password", "*"),
    ] {
        run(std::process::Command::new("/usr/bin/dscl").args([".", "-create", &user, key, value]))?;
    }
    let _ = nologin_shell;
    Ok(())
}

/// The sandbox user's home: created if missing, then owned by it with mode 0700. A home that
/// exists and belongs to someone else is never taken over.
fn ensure_home(user: &SandboxUser) -> anyhow::Result<()> {
    let home = &user.home;
    match std::fs::symlink_metadata(home) {
        Ok(meta) => {
            if !meta.is_dir() || meta.uid() != user.uid {
                bail!(
                    "the home {} of {} exists but is not a directory owned by it: pick another --user, or fix it by hand",
                    home.display(),
                    user.name
                );
            }
        }
        Err(_) => {
            std::fs::create_dir_all(home)
                .with_context(|| format!("creating {}", home.display()))?;
            std::os::unix::fs::chown(home, Some(user.uid), Some(user.gid))
                .with_context(|| format!("chown {}", home.display()))?;
        }
    }
    std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 700 {}", home.display()))?;
    Ok(())
}

/// Write the rule through a temporary file that `visudo -cf` validates first: a broken
/// sudoers file would lock everyone out of sudo.
fn install_sudoers(path: &Path, hub: &str, sandbox: &str, rule: &str) -> anyhow::Result<()> {
    let dir = path.parent().context("sudoers path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // The temporary name has a '.', so sudo ignores it even if we die half way.
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let text = format!(
        "# Written by `hunkgate setup`: {hub} may run exactly the hunkgate sandbox helper as {sandbox}, nothing else.\n{rule}\n"
    );
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o440))?;
    let visudo = ["/usr/sbin/visudo", "/sbin/visudo", "/usr/bin/visudo"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(visudo) = visudo else {
        let _ = std::fs::remove_file(&tmp);
        bail!("visudo not found, so the rule cannot be validated: install sudo's visudo, or add the rule with `visudo -f {}` yourself", path.display());
    };
    if let Err(e) = run(std::process::Command::new(visudo).arg("-cf").arg(&tmp)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context("the sudoers rule did not validate; nothing was installed"));
    }
    std::fs::rename(&tmp, path).with_context(|| format!("installing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudoers_files_have_names_sudo_reads() {
        assert_eq!(
            sudoers_path("hunkgate.agent"),
            PathBuf::from("/etc/sudoers.d/hunkgate-hunkgate_agent")
        );
    }
}

use super::*;
use std::os::unix::fs::PermissionsExt;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn configured_then_system_then_the_hubs_absolute_rest() {
    let system = strings(&["/usr/bin", "/bin"]);
    let p = compose(
        &strings(&["/opt/agents/bin"]),
        &system,
        Some("/root/.cargo/bin:.::/usr/bin:/opt/agents/bin:/root/.cargo/bin/:rel/bin:/snap/bin"),
    );
    assert_eq!(p.fixed, strings(&["/opt/agents/bin", "/usr/bin", "/bin"]));
    assert_eq!(p.if_searchable, strings(&["/root/.cargo/bin", "/snap/bin"]));
    let none = compose(&[], &system, None);
    assert_eq!(none.fixed, system);
    assert!(none.if_searchable.is_empty());
}

#[test]
fn a_program_is_found_as_exec_finds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for d in [&a, &b] {
        std::fs::create_dir(d).unwrap();
    }
    // In `a` not executable, in `b` executable: exec passes over the first.
    std::fs::write(a.join("tool"), "#!/bin/sh\n").unwrap();
    std::fs::write(b.join("tool"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(b.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", a.display(), b.display());
    let not_found = Err(Unrunnable::NotFound {
        unsearchable: vec![],
    });
    assert_eq!(find_program("tool", &path, tmp.path()), Ok(b.join("tool")));
    assert_eq!(find_program("nothing-here", &path, tmp.path()), not_found);
    assert_eq!(find_program("b/tool", "", tmp.path()), Ok(b.join("tool")));
    assert_eq!(find_program("b/none", "", tmp.path()), not_found);
    // Not even root runs a file without an execute bit, nor a directory.
    assert_eq!(
        find_program("tool", &a.display().to_string(), tmp.path()),
        Err(Unrunnable::NotExecutable {
            path: a.join("tool")
        })
    );
    assert_eq!(
        find_program("b", &tmp.path().display().to_string(), tmp.path()),
        Err(Unrunnable::NotExecutable { path: b.clone() })
    );
    // Directories this user cannot search are reported where root searches any: the
    // integration tests (`isolation::the_agents_program_is_found_as_the_sandbox_user_would`)
    // cover that as the sandbox user.
}

#[test]
fn the_messages_name_the_program_and_the_fix() {
    let not_found = Unrunnable::NotFound {
        unsearchable: vec![],
    }
    .message(
        "claude",
        "hunkgate-agent",
        "/usr/bin:/bin",
        &strings(&["/root/.local/bin"]),
    );
    assert_eq!(
        not_found,
        "agent program `claude` not found on the sandbox user's PATH (/usr/bin:/bin): install it where hunkgate-agent can run it (e.g. /usr/local/bin), or add its directory to `agent_path` in the hub's config (left out of the hub's PATH as hunkgate-agent cannot search them: /root/.local/bin)"
    );
    let blocked = Unrunnable::NotFound {
        unsearchable: vec!["/srv/private".into()],
    }
    .message("claude", "hunkgate-agent", "/srv/private/bin:/usr/bin", &[]);
    assert_eq!(
        blocked,
        "agent program `claude` not found on the sandbox user's PATH (/srv/private/bin:/usr/bin): permission denied, hunkgate-agent cannot search /srv/private, where it may be: install it where hunkgate-agent can run it (e.g. /usr/local/bin), or make that directory searchable for it"
    );
    let not_executable = Unrunnable::NotExecutable {
        path: "/opt/bin/claude".into(),
    }
    .message("claude", "hunkgate-agent", "/opt/bin", &[]);
    assert_eq!(
        not_executable,
        "agent program `claude` cannot be run by the sandbox user hunkgate-agent: permission denied, /opt/bin/claude is not executable for it: install it where hunkgate-agent can run it (e.g. /usr/local/bin)"
    );
}

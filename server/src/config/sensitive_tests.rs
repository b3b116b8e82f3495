use super::*;

fn policy(extra: &[&str], allow: &[&str], repo_file: Option<&str>) -> (Policy, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    if let Some(text) = repo_file {
        std::fs::write(tmp.path().join(REPO_FILE), text).unwrap();
    }
    let cfg = SensitiveFile {
        extra: extra.iter().map(|s| s.to_string()).collect(),
        allow: allow.iter().map(|s| s.to_string()).collect(),
    };
    (Policy::load(tmp.path(), &cfg), tmp)
}

/// Every default pattern with a path it catches and a near miss it must not.
#[test]
fn every_default_has_a_hit_and_a_near_miss() {
    let (p, _t) = policy(&[], &[], None);
    let cases = [
        (".env", "env.rs"),
        ("app/.env.production", "app/.envrc"),
        ("certs/server.pem", "docs/pem.md"),
        ("tls/server.key", "src/keyboard.rs"),
        ("id_rsa.pub", "src/rsa.rs"),
        ("home/id_ed25519", "ed25519.rs"),
        ("deploy/gcp-credentials.json", "src/cred.rs"),
        ("config/secrets.yml", "src/secre.rs"),
        (".netrc", "netrc.md"),
        ("web/.npmrc", "web/npmrc.txt"),
        (".pypirc", "pypirc"),
        (".aws/config", "aws/config"),
        (".ssh/known_hosts", "ssh/known_hosts"),
        (".gnupg/pubring.kbx", "gnupg.md"),
        ("ci/.docker/config.json", ".docker/daemon.json"),
        ("vault.kdbx", "vault.kdb"),
        (".hunkgateignore", "docs/hunkgateignore.md"),
    ];
    assert_eq!(cases.len(), DEFAULTS.len());
    for (hit, miss) in cases {
        assert!(p.is_sensitive(hit), "{hit} should be sensitive");
        assert!(!p.is_sensitive(miss), "{miss} should not be sensitive");
    }
}

#[test]
fn matching_ignores_case_and_a_leading_dot_slash() {
    let (p, _t) = policy(&[], &[], None);
    assert!(p.is_sensitive(".ENV"));
    assert!(p.is_sensitive("./.env"));
    assert!(!p.is_sensitive(""));
    assert!(!p.is_sensitive("src/main.rs"));
}

#[test]
fn extra_widens_and_allow_narrows() {
    let (p, _t) = policy(&["*.tfstate", "private/"], &[".env.example"], None);
    assert!(p.is_sensitive("infra/prod.tfstate"));
    assert!(p.is_sensitive("private/notes.txt"));
    assert!(!p.is_sensitive(".env.example"));
    assert!(
        p.is_sensitive(".env.local"),
        "allow names one file, not the rule"
    );
}

#[test]
fn the_repository_file_widens_and_narrows() {
    let (p, _t) = policy(&[], &[], Some("# ours\nvault/\n!*.pem\n"));
    assert!(p.is_sensitive("vault/a.txt"));
    assert!(!p.is_sensitive("certs/ca.pem"), "`!` narrows the defaults");
    assert!(p.is_sensitive(".env"));
    let (p, _t) = policy(&[], &[], None);
    assert!(!p.is_sensitive("vault/a.txt"));
}

#[test]
fn a_symlinked_repository_file_is_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("rules"), "vault/\n").unwrap();
    std::os::unix::fs::symlink("rules", tmp.path().join(REPO_FILE)).unwrap();
    let p = Policy::load(tmp.path(), &SensitiveFile::default());
    assert!(!p.is_sensitive("vault/a.txt"));
    std::fs::remove_file(tmp.path().join(REPO_FILE)).unwrap();
    std::fs::copy(tmp.path().join("rules"), tmp.path().join(REPO_FILE)).unwrap();
    let p = Policy::load(tmp.path(), &SensitiveFile::default());
    assert!(p.is_sensitive("vault/a.txt"));
}

#[test]
fn a_bad_config_pattern_is_named() {
    let cfg = SensitiveFile {
        extra: vec!["ok/".into()],
        allow: vec!["[z-a]".into()],
    };
    let err = cfg.check().unwrap_err().to_string();
    assert!(err.contains("allow") && err.contains("[z-a]"), "{err}");
    assert!(SensitiveFile::default().check().is_ok());
}

/// A bad line of `.hunkgateignore` is left out; the defaults and the other lines still hold.
#[test]
fn a_bad_repository_line_leaves_the_rest_standing() {
    let (p, _t) = policy(&[], &[], Some("[z-a]\nvault/\n"));
    assert!(p.is_sensitive(".env"));
    assert!(p.is_sensitive("vault/x"));
}

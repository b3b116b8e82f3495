use super::*;

/// Real-looking keys of the common providers (made up, in each provider's shape), each with the
/// rule that must catch it.
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("aws-access-key-id", "AKIAIOSFODNN7EXAMPLE"),
    ("github", "ghp_R8vT2mKq9XwZ4bN7cLp1sD3fG6hJ0kYuE5aQ"),
    (
        "github",
        "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefGHIJKLMNOPQRSTUVWX",
    ),
    (
        "openai",
        "sk-proj-Xq3vB8nM2kL9pR4tY7wZ1cF6hJ0dS5gA-uE_iO3pQ8rT2yW6",
    ),
    ("openai", "sk-4fGh7JkL9mNpQ2rStUvWxYz0123456789AbCdEfGhIjKl"),
    (
        "anthropic",
        "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe-dC_bA9zY8xW7vU6tS5rQ4pO3nM2lK1jI0hG",
    ),
    (
        "slack",
        "xoxb-2048123456-4096789012-Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7",
    ),
    ("stripe", "sk_live_51HxYzAbCdEfGhIjKlMnOpQrStUv"),
    ("google", "AIzaSyD4fG7hJ9kL2mN5pQ8rS1tU4vW7xY0zA3b"),
];

#[test]
fn every_provider_key_is_redacted_in_context() {
    for (rule, key) in KEYS {
        let line = format!("export KEY_{rule}=\"{key}\" # from the dashboard");
        let out = redact(&line);
        assert!(!out.contains(key), "{rule}: {out}");
        assert!(out.contains(&format!("[REDACTED:{rule}]")), "{rule}: {out}");
        assert!(out.ends_with("\" # from the dashboard"), "{out}");
    }
}

#[test]
fn an_aws_secret_key_assignment_is_redacted() {
    let text = "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n\
                aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n";
    let out = redact(text);
    assert!(!out.contains("wJalrXUtnFEMI"), "{out}");
    assert!(!out.contains("AKIAIOSFODNN7EXAMPLE"), "{out}");
    assert!(
        out.contains("aws_secret_access_key = [REDACTED:assignment]"),
        "{out}"
    );
}

#[test]
fn a_private_key_block_is_redacted_whole_even_when_cut() {
    let block = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n\
                 AAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ\n-----END OPENSSH PRIVATE KEY-----";
    let out = redacted(&format!("before\n{block}\nafter"));
    assert_eq!(out, "before\n[REDACTED:private-key]\nafter");
    let cut = "key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq";
    assert_eq!(redact(cut), "key: [REDACTED:private-key]");
}

#[test]
fn generic_assignments_with_random_values_are_redacted() {
    for line in [
        "DB_PASSWORD=x7Kp2Qz9Lm4Rt8Vw",
        "api_key: \"Zr8Qm2Lp5Xk9Wn3T\"",
        "AUTH_TOKEN => 'c2f8e1b9a7d64f03b5e2'",
    ] {
        let out = redact(line);
        assert!(out.contains("[REDACTED:assignment]"), "{line} -> {out}");
    }
}

/// The negative control: ordinary code, prose and low-entropy values are untouched.
#[test]
fn ordinary_text_is_untouched() {
    for text in [
        "fn main() { let token = next_token(); }",
        "password = \"hunter2\"",
        "let secret_name = get_secret_name_for_user();",
        "see https://example.com/docs?page=2 and sk-learn docs",
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
        "AKIA is a prefix; ghp_short; xoxb-; AIza",
        "tokens: 12345678901",
    ] {
        assert!(matches!(redact(text), Cow::Borrowed(_)), "{text} -> {}", redact(text));
    }
}

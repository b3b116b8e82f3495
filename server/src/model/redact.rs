//! Secret-looking strings taken out of text the hub keeps or sends on (issue #58.1; seed 003,
//! "redact secrets in logs"): run logs, session history, status lines and every request to a
//! model provider.
//!
//! The rules are a small set in the spirit of gitleaks' common ones: provider keys with a
//! recognisable shape (AWS access key ids, GitHub, OpenAI, Anthropic, Slack, Stripe and Google
//! keys), private-key PEM blocks, and `password=`/`token=`-style assignments whose value looks
//! random (long enough, a digit, high Shannon entropy) — so `token = next_token()` stays. A
//! match becomes `[REDACTED:<rule>]`. This is a net under the sensitive-file policy, not a
//! proof: a secret of no known shape in a file that is not sensitive is not found.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex_automata::meta::Regex;
use regex_automata::util::syntax;

/// One rule: its name (in the marker), its pattern, and whether only the value (group 1) is
/// replaced and checked for randomness (an assignment), rather than the whole match.
struct Rule {
    name: &'static str,
    re: Regex,
    assignment: bool,
}

/// (name, pattern, assignment) of every rule, in the order they are applied.
const RULES: &[(&str, &str, bool)] = &[
    (
        "private-key",
        r"-----BEGIN[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----(?:(?s:.)*?-----END[ A-Z0-9]*PRIVATE KEY( BLOCK)?-----|(?s:.)*)",
        false,
    ),
    (
        "aws-access-key-id",
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
        false,
    ),
    (
        "github",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b",
        false,
    ),
    ("github", r"\bgithub_pat_[A-Za-z0-9_]{22,255}", false),
    ("anthropic", r"\bsk-ant-[A-Za-z0-9_-]{20,}", false),
    (
        "openai",
        r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        false,
    ),
    ("slack", r"\bxox[baprs]-[A-Za-z0-9-]{10,}", false),
    ("stripe", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}", false),
    ("google", r"\bAIza[A-Za-z0-9_-]{35}", false),
    (
        "assignment",
        r#"(?i)(?:password|passwd|pwd|secret|token|api_?key|access_?key|auth|credential)[A-Za-z0-9_.-]*["']?[ \t]*(?:=|:|=>)[ \t]*["']?([A-Za-z0-9/+=_.~-]{10,})"#,
        true,
    ),
];

fn rules() -> &'static [Rule] {
    static RULES_BUILT: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES_BUILT.get_or_init(|| {
        RULES
            .iter()
            .map(|&(name, pattern, assignment)| Rule {
                name,
                // ASCII classes and word boundaries: the rules are about ASCII keys, and the
                // Unicode tables are not built into this binary.
                re: Regex::builder()
                    .syntax(syntax::Config::new().unicode(false).utf8(false))
                    .build(pattern)
                    .unwrap_or_else(|e| panic!("redaction rule {name}: {e}")),
                assignment,
            })
            .collect()
    })
}

/// `text` with every secret-looking string replaced by `[REDACTED:<rule>]` (borrowed when
/// there was none).
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for rule in rules() {
        if let Some(next) = apply(rule, &out) {
            out = Cow::Owned(next);
        }
    }
    out
}

/// [`redact`] into an owned string.
pub fn redacted(text: &str) -> String {
    redact(text).into_owned()
}

/// `text` with `rule`'s matches replaced, or None when it has none.
fn apply(rule: &Rule, text: &str) -> Option<String> {
    let mut out = String::new();
    let mut last = 0;
    let mut caps = rule.re.create_captures();
    let mut at = 0;
    while at <= text.len() {
        let input = regex_automata::Input::new(text).range(at..);
        rule.re.search_captures(&input, &mut caps);
        let Some(m) = caps.get_match() else { break };
        let span = if rule.assignment {
            caps.get_group(1).map(|g| g.range()).unwrap_or(m.range())
        } else {
            m.range()
        };
        if !rule.assignment || looks_random(&text[span.clone()]) {
            out.push_str(&text[last..span.start]);
            out.push_str("[REDACTED:");
            out.push_str(rule.name);
            out.push(']');
            last = span.end;
        }
        at = m.end().max(m.start() + 1);
    }
    (last > 0).then(|| {
        out.push_str(&text[last..]);
        out
    })
}

/// Whether an assigned value looks like a generated secret: a letter and a digit in it, and at least 3 bits
/// of Shannon entropy per character (`hunter2hunter2` and `get_token_name` fall short).
fn looks_random(value: &str) -> bool {
    let has = |f: fn(&u8) -> bool| value.as_bytes().iter().any(f);
    if value.starts_with("[REDACTED") || !has(u8::is_ascii_digit) || !has(u8::is_ascii_alphabetic) {
        return false;
    }
    let mut counts = [0usize; 256];
    for b in value.bytes() {
        counts[b as usize] += 1;
    }
    let n = value.len() as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum();
    entropy >= 3.0
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;

//! `[context]`: which web pages may be pinned to a session as context (issue #60.2, seed 003:
//! "network egress restricted to allowed hosts for URL fetch"), and how much of them is kept.
//!
//! Nothing is fetched until the user names a host: the allowlist is empty by default. Every
//! hop of a redirect is checked against it too, so an allowed host cannot send the hub on to
//! one that is not.

use std::time::Duration;

use serde::Deserialize;

/// Bytes of a page's body read at most; past it the fetch is refused (2 MiB).
pub const DEFAULT_URL_MAX_BYTES: u64 = 2 * 1024 * 1024;
/// Bytes of extracted text kept of one page (16 KiB, about 4,000 tokens).
pub const DEFAULT_URL_MAX_TEXT: usize = 16 * 1024;
/// Seconds one fetch may take, redirects included.
pub const DEFAULT_URL_TIMEOUT_SECS: u64 = 20;
/// The most text a row may hold ([`crate::model::session::MAX_CONTEXT_ROW`]).
const MAX_TEXT: usize = crate::model::session::MAX_CONTEXT_ROW;

/// `[context]` in the config file; every key optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextFile {
    /// Hosts whose pages may be pinned: `docs.rs` (any port), `127.0.0.1:8080` (that port
    /// only) or `*.python.org` (its subdomains, not itself). Empty: no page is fetched.
    #[serde(default)]
    pub url_hosts: Vec<String>,
    /// Bytes of a page's body read at most; a larger page is refused.
    pub url_max_bytes: Option<u64>,
    /// Bytes of extracted text kept of one page; the rest is cut, and the row says so.
    pub url_max_text: Option<usize>,
    /// Seconds one fetch may take, redirects included.
    pub url_timeout_secs: Option<u64>,
}

/// One allowed host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRule {
    /// This host, on any port (`port` None) or on that port only.
    Exact { host: String, port: Option<u16> },
    /// Any subdomain of this domain (`*.python.org`: `docs.python.org`, not `python.org`).
    Subdomains(String),
}

impl HostRule {
    /// Parse one `url_hosts` entry: a host name or IP address, with an optional `:port`, or
    /// `*.` and a domain. No scheme, no path.
    pub fn parse(entry: &str) -> Result<HostRule, String> {
        let e = entry.trim().to_ascii_lowercase();
        let bad = |why: &str| Err(format!("url_hosts entry {entry:?}: {why}"));
        if e.is_empty() {
            return bad("is empty");
        }
        if e.contains("://") || e.contains('/') {
            return bad(
                "name only the host (\"docs.rs\" or \"127.0.0.1:8080\"), no scheme or path",
            );
        }
        if let Some(domain) = e.strip_prefix("*.") {
            if domain.is_empty() || domain.contains('*') || domain.contains(':') {
                return bad("a wildcard is \"*.\" and a domain, without a port");
            }
            return Ok(HostRule::Subdomains(domain.to_string()));
        }
        if e.contains('*') {
            return bad("a wildcard may only start the entry, as \"*.example.com\"");
        }
        // An IPv6 address with a port is written [::1]:8080; without one, bare or in brackets.
        let (host, port) = match e.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') || h.ends_with(']') => match p.parse::<u16>() {
                Ok(p) => (h.to_string(), Some(p)),
                Err(_) => return bad("the port after ':' is not a number"),
            },
            _ => (e.clone(), None),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return bad("names no host");
        }
        Ok(HostRule::Exact { host, port })
    }

    /// Whether `host` (lower case, IPv6 without brackets) on `port` is allowed by this rule.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        match self {
            HostRule::Exact { host: h, port: p } => h == host && p.is_none_or(|p| p == port),
            HostRule::Subdomains(d) => host
                .strip_suffix(d.as_str())
                .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
        }
    }
}

/// The `[context]` settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPolicy {
    pub hosts: Vec<HostRule>,
    pub max_bytes: u64,
    pub max_text: usize,
    pub timeout: Duration,
}

impl Default for UrlPolicy {
    fn default() -> Self {
        UrlPolicy {
            hosts: Vec::new(),
            max_bytes: DEFAULT_URL_MAX_BYTES,
            max_text: DEFAULT_URL_MAX_TEXT,
            timeout: Duration::from_secs(DEFAULT_URL_TIMEOUT_SECS),
        }
    }
}

impl UrlPolicy {
    /// Whether a page of `host` on `port` may be fetched.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = host.to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        self.hosts.iter().any(|r| r.allows(host, port))
    }
}

impl ContextFile {
    pub fn resolve(&self) -> Result<UrlPolicy, String> {
        let d = UrlPolicy::default();
        let hosts = self
            .url_hosts
            .iter()
            .map(|h| HostRule::parse(h))
            .collect::<Result<Vec<_>, _>>()?;
        let max_text = self.url_max_text.unwrap_or(d.max_text);
        if max_text == 0 || max_text > MAX_TEXT {
            return Err(format!(
                "url_max_text = {max_text}: it must be between 1 and {MAX_TEXT} bytes"
            ));
        }
        let max_bytes = self.url_max_bytes.unwrap_or(d.max_bytes);
        if max_bytes == 0 {
            return Err("url_max_bytes = 0: no page could be read".into());
        }
        Ok(UrlPolicy {
            hosts,
            max_bytes,
            max_text,
            timeout: self
                .url_timeout_secs
                .map(|s| Duration::from_secs(s.max(1)))
                .unwrap_or(d.timeout),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: &[&str]) -> UrlPolicy {
        ContextFile {
            url_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..ContextFile::default()
        }
        .resolve()
        .unwrap()
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let p = UrlPolicy::default();
        assert!(!p.allows("docs.rs", 443));
        assert!(!p.allows("127.0.0.1", 80));
    }

    #[test]
    fn hosts_ports_and_subdomains_are_matched_exactly() {
        let p = policy(&["Docs.rs", "127.0.0.1:8080", "*.python.org", "[::1]:9000"]);
        assert!(p.allows("docs.rs", 443));
        assert!(
            p.allows("DOCS.RS.", 80),
            "case and a trailing dot do not matter"
        );
        assert!(!p.allows("docs.rs.evil.com", 443));
        assert!(!p.allows("evildocs.rs", 443));
        assert!(p.allows("127.0.0.1", 8080));
        assert!(!p.allows("127.0.0.1", 8081), "the port is part of the rule");
        assert!(p.allows("docs.python.org", 443));
        assert!(p.allows("a.b.python.org", 443));
        assert!(!p.allows("python.org", 443), "*. is subdomains only");
        assert!(!p.allows("notpython.org", 443));
        assert!(p.allows("[::1]", 9000));
        assert!(!p.allows("::1", 9001));
    }

    #[test]
    fn bad_entries_and_budgets_are_refused_with_the_fix() {
        for bad in [
            "https://docs.rs",
            "docs.rs/path",
            "",
            "*.",
            "a*.b",
            "h:port",
            "*.x:80",
        ] {
            let e = ContextFile {
                url_hosts: vec![bad.into()],
                ..ContextFile::default()
            }
            .resolve()
            .unwrap_err();
            assert!(e.contains("url_hosts entry"), "{bad:?}: {e}");
        }
        let e = ContextFile {
            url_max_text: Some(MAX_TEXT + 1),
            ..ContextFile::default()
        }
        .resolve()
        .unwrap_err();
        assert!(e.contains("url_max_text"), "{e}");
        // Positive control: the defaults resolve.
        assert_eq!(
            ContextFile::default().resolve().unwrap(),
            UrlPolicy::default()
        );
    }
}

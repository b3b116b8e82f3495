//! Tokens and the request guard: Host, Origin and Bearer checks in front of every route.
//!
//! The hub listens on loopback, but a browser on the same machine can still reach it: DNS
//! rebinding (a hostile page whose name resolves to 127.0.0.1) is stopped by the Host check, and
//! cross-site requests by refusing any `Origin` not explicitly allowed. The bearer token keeps
//! other local users and the agent (which has only its own, narrower token) out.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use axum::http::{header, HeaderMap};

use crate::error::AppError;

/// 256 random bits, hex encoded.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    // The OS RNG failing is not something to limp along from.
    if let Err(e) = getrandom::fill(&mut bytes) {
        panic!("the operating system's random number generator failed: {e}");
    }
    hex::encode(bytes)
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Load `<state>/token`, creating it (mode 0600) on first start. A token file others can read
/// is refused: anyone who can read it can approve hunks into the checkout.
pub fn load_or_create_token(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => {
            let mode = std::fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(std::io::Error::other(format!(
                    "{} is readable by other users (mode {:o}); run `chmod 600 {}`",
                    path.display(),
                    mode & 0o777,
                    path.display()
                )));
            }
            let t = t.trim().to_string();
            if t.len() >= 32 {
                return Ok(t);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let token = random_token();
    crate::store::journal::write_file_atomic(path, format!("{token}\n").as_bytes(), 0o600)?;
    Ok(token)
}

/// Host must name this server: 127.0.0.1, localhost or `[::1]` (or the bound host) with its port.
pub fn check_host(headers: &HeaderMap, bound_host: &str, port: u16) -> Result<(), AppError> {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return Err(AppError::forbidden("missing Host header".into()));
    };
    let host = host.to_ascii_lowercase();
    let mut names = vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        "[::1]".to_string(),
    ];
    let bound = bound_host.to_ascii_lowercase();
    if bound.contains(':') {
        names.push(format!("[{bound}]"));
    } else {
        names.push(bound);
    }
    let ok = names
        .iter()
        .any(|n| host == format!("{n}:{port}") || (port == 80 && host == *n));
    if ok {
        Ok(())
    } else {
        Err(AppError::forbidden(format!(
            "Host {host:?} does not name this server; use http://127.0.0.1:{port}"
        )))
    }
}

/// Any request carrying an Origin header is refused unless that origin is allowed.
pub fn check_origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), AppError> {
    match headers.get(header::ORIGIN) {
        None => Ok(()),
        Some(o) => {
            let o = o.to_str().unwrap_or("");
            if allowed.iter().any(|a| a == o) {
                Ok(())
            } else {
                Err(AppError::forbidden(format!(
                    "Origin {o:?} is not allowed (start the hub with --allow-origin to allow it)"
                )))
            }
        }
    }
}

pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn host_check() {
        for ok in [
            "127.0.0.1:4097",
            "localhost:4097",
            "[::1]:4097",
            "LOCALHOST:4097",
        ] {
            assert!(
                check_host(&headers(&[(header::HOST, ok)]), "127.0.0.1", 4097).is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "evil.com:4097",
            "127.0.0.1:80",
            "127.0.0.1",
            "localhost.evil.com:4097",
        ] {
            assert!(
                check_host(&headers(&[(header::HOST, bad)]), "127.0.0.1", 4097).is_err(),
                "{bad}"
            );
        }
        assert!(check_host(&HeaderMap::new(), "127.0.0.1", 4097).is_err());
    }

    #[test]
    fn origin_check() {
        assert!(check_origin(&HeaderMap::new(), &[]).is_ok());
        let h = headers(&[(header::ORIGIN, "https://evil.example")]);
        assert!(check_origin(&h, &[]).is_err());
        assert!(check_origin(&h, &["https://evil.example".into()]).is_ok());
    }

    #[test]
    fn token_file_is_private_and_stable() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("token");
        let t = load_or_create_token(&p).unwrap();
        assert_eq!(t.len(), 64);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_or_create_token(&p).unwrap(), t);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create_token(&p).is_err());
        assert!(constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd"));
    }
}

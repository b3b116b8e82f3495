//! The hub's records: suggestions and their hunks, runs, sessions, feedback lines, file
//! operations, and the canonical chat shapes. Data and pure functions over it; no I/O beyond
//! reading blobs a caller hands in.
//!
//! Layer 2: may import `crate::protocol` and `crate::error`.

pub mod chat;
pub mod checker_output;
pub mod decision;
pub mod diagnostics;
pub mod feedback;
pub mod fileop;
pub mod redact;
pub mod run;
pub mod session;
pub mod sizing;
pub mod suggestion;
pub mod text;

/// Resolve `id` to one of `keys`: the key equal to it, else the only key it is a prefix of
/// (the short ids the CLI prints). `strip` names a prefix every key carries that the user may
/// leave out (`sess_`). `what` names the resource and `hint` where to list them, for the
/// errors: none matches → `not_found`; several → `bad_request` asking for more of the id.
pub fn resolve_id<'a>(
    id: &str,
    keys: impl IntoIterator<Item = &'a String>,
    strip: &str,
    what: &str,
    hint: &str,
) -> Result<String, crate::error::AppError> {
    use crate::error::AppError;
    let mut found: Vec<&String> = Vec::new();
    for k in keys {
        if k == id {
            return Ok(k.clone());
        }
        let short = k.strip_prefix(strip).filter(|_| !strip.is_empty());
        if !id.is_empty() && (k.starts_with(id) || short.is_some_and(|r| r.starts_with(id))) {
            found.push(k);
        }
    }
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(AppError::not_found(format!("no {what} {id:?}; {hint}"))),
        _ => Err(AppError::bad_request(format!(
            "{id:?} matches {} {what}s; give more of the id",
            found.len()
        ))),
    }
}

/// Now, as the RFC 3339 UTC timestamp every record carries.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::resolve_id;

    #[test]
    fn ids_resolve_exactly_or_by_a_unique_prefix() {
        let keys: Vec<String> = ["sess_abc", "sess_abd", "sess_xyz"]
            .map(String::from)
            .to_vec();
        let r = |id: &str| resolve_id(id, &keys, "sess_", "session", "list them");
        assert_eq!(r("sess_abc").unwrap(), "sess_abc");
        assert_eq!(r("sess_x").unwrap(), "sess_xyz");
        assert_eq!(
            r("x").unwrap(),
            "sess_xyz",
            "the common prefix may be left out"
        );
        let e = r("ab").unwrap_err();
        assert_eq!(e.code(), "bad_request");
        assert_eq!(
            e.to_string(),
            "\"ab\" matches 2 sessions; give more of the id"
        );
        let e = r("q").unwrap_err();
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            ("not_found", "no session \"q\"; list them")
        );
        assert_eq!(
            r("").unwrap_err().code(),
            "not_found",
            "an empty id names nothing"
        );
        // An exact key wins over being the prefix of another.
        let keys: Vec<String> = ["ab", "abc"].map(String::from).to_vec();
        assert_eq!(resolve_id("ab", &keys, "", "suggestion", "").unwrap(), "ab");
    }
}

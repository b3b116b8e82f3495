//! The paths a Rust source text names after `crate::`, outside comments: the one import parser
//! of both layering tests (the sandbox crate's `layering.rs`, and the server's, which includes
//! this file by `#[path]`).
//!
//! `crate::a::b::C` gives `[a, b, C]`; a group gives one path per leaf, however nested and
//! however many lines rustfmt spread it over: `crate::{a::x, b::{y, z}}` gives `[a, x]`,
//! `[b, y]`, `[b, z]`. Comments (`//` to the end of the line, doc comments included) are
//! skipped, and so is `crate::` inside a longer name (`foo_crate::x`, `$crate::x`).

/// Every path named after `crate::` in `source`, in order, as its segments.
pub fn imports(source: &str) -> Vec<Vec<String>> {
    let code: String = source
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::") {
        let at = from + i;
        from = at + "crate::".len();
        let boundary = at == 0 || {
            let prev = code.as_bytes()[at - 1];
            !(prev.is_ascii_alphanumeric() || prev == b'_' || prev == b'$')
        };
        if boundary {
            let mut rest = &code[from..];
            tree(&mut rest, &[], &mut out);
        }
    }
    out
}

/// One use tree at the start of `rest` (`a::b`, `a::{…}`, `{…}`), its paths pushed to `out`
/// after `prefix`; `rest` is left just past it.
fn tree(rest: &mut &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    loop {
        *rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            *rest = group;
            loop {
                tree(rest, &path, out);
                *rest = rest.trim_start();
                if let Some(more) = rest.strip_prefix(',') {
                    *rest = more;
                } else {
                    *rest = rest.strip_prefix('}').unwrap_or(rest);
                    return;
                }
                if rest.trim_start().starts_with('}') {
                    *rest = &rest.trim_start()[1..];
                    return;
                }
            }
        }
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len > 0 {
            path.push(rest[..len].to_string());
            *rest = &rest[len..];
        }
        match rest.trim_start().strip_prefix("::") {
            Some(deeper) if len > 0 => *rest = deeper,
            _ => break,
        }
    }
    if path.len() > prefix.len() {
        out.push(path);
    }
}

#[cfg(test)]
mod tests {
    use super::imports;

    fn paths(code: &str) -> Vec<String> {
        imports(code).iter().map(|p| p.join("::")).collect()
    }

    #[test]
    fn plain_grouped_nested_and_inline_paths_are_found() {
        let code =
            "use crate::user::X;\nuse crate::{helper::Y, wire};\nlet a = crate::sync::f();\n\
                    use crate::odb::{self, store::{Store, Mode}, pack};\n";
        assert_eq!(
            paths(code),
            [
                "user::X",
                "helper::Y",
                "wire",
                "sync::f",
                "odb::self",
                "odb::store::Store",
                "odb::store::Mode",
                "odb::pack"
            ]
        );
    }

    #[test]
    fn a_group_over_several_lines_is_read_whole() {
        let code = "use crate::{\n    fs::beneath::Beneath, // the confined root\n    status::{\n        snapshot,\n        watch::Watch,\n    },\n};\n";
        assert_eq!(
            paths(code),
            [
                "fs::beneath::Beneath",
                "status::snapshot",
                "status::watch::Watch"
            ]
        );
    }

    #[test]
    fn comments_and_longer_names_are_skipped() {
        let code = "// crate::agent is only mentioned\n/// [`crate::jj`]\n//! crate::x\n\
                    let x = foo_crate::bar; let y = $crate::baz; crate::model::now();\n";
        assert_eq!(paths(code), ["model::now"]);
    }
}

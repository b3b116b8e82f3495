//! The crate's layers, checked: a module may import only from layers strictly below its own
//! (and from itself). Unit-test files (`tests.rs`) are exempt: a test may open a whole hub. The table is the one in the crate docs (`lib.rs`); a new top-level module
//! must be added here, which is the moment to decide where it belongs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level module → layer.
const LAYERS: &[(&str, u8)] = &[
    ("protocol", 0),
    ("error", 1),
    ("model", 2),
    ("store", 3),
    ("isolation", 4),
    ("config", 5),
    ("hub", 6),
    ("discovery", 6),
    ("decide", 7),
    ("sessions", 7),
    ("agent", 8),
    ("gc", 8),
    ("runs", 9),
    ("api", 10),
    ("mcp", 11),
    ("cli", 12),
    ("layering", 13),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

// The import parser is the sandbox crate's, shared by both layering tests.
#[path = "../../sandbox/src/layering/imports.rs"]
mod imports;

/// The top-level modules a source text names as `crate::<module>`, outside comments.
fn imports(source: &str) -> Vec<String> {
    imports::imports(source)
        .into_iter()
        .filter_map(|path| path.into_iter().next())
        .collect()
}

/// Every import against the layer order, as `file: module (layer a) imports other (layer b)`.
fn violations(files: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (file, source) in files {
        let module = file
            .split('/')
            .next()
            .unwrap_or(file)
            .trim_end_matches(".rs");
        // The crate root, unit-test modules (a test may set up any layer it needs), and this
        // test, whose strings name paths.
        if matches!(module, "lib" | "main" | "layering") || file.ends_with("/tests.rs") {
            continue;
        }
        let Some(own) = layer(module) else {
            out.push(format!(
                "{file}: module `{module}` has no layer in layering.rs"
            ));
            continue;
        };
        for other in imports(source) {
            if other == module {
                continue;
            }
            match layer(&other) {
                Some(l) if l < own => {}
                Some(l) => out.push(format!(
                    "{file}: `{module}` (layer {own}) imports `crate::{other}` (layer {l})"
                )),
                None => out.push(format!("{file}: imports unknown module `crate::{other}`")),
            }
        }
    }
    out
}

fn sources(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src");
            let text = std::fs::read_to_string(&path).expect("read source");
            out.insert(rel.to_string_lossy().into_owned(), text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_imports_only_from_the_layers_below_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        sources(&root, &root, &mut files);
        assert!(files.len() > 20, "found only {} source files", files.len());
        let bad = violations(&files);
        assert!(
            bad.is_empty(),
            "imports against the layers:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn an_upward_import_is_caught_and_a_downward_one_is_not() {
        let mut files = BTreeMap::new();
        files.insert(
            "model/run.rs".to_string(),
            "use crate::protocol::RunView; // crate::hub in a comment is fine\n".to_string(),
        );
        assert!(violations(&files).is_empty());
        files.insert(
            "store/journal.rs".to_string(),
            "fn f() { let _ = crate::runs::INTERRUPTED; }\n".to_string(),
        );
        files.insert(
            "decide/mod.rs".to_string(),
            "use crate::sessions::Thing;\n".to_string(),
        );
        let bad = violations(&files);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("`decide` (layer 7) imports `crate::sessions` (layer 7)"));
        assert!(bad[1].contains("`store` (layer 3) imports `crate::runs` (layer 9)"));
    }

    #[test]
    fn paths_are_read_outside_comments_only() {
        let src = "use crate::hub::Hub;\n// use crate::api::x;\nlet x = foo_crate::bar; crate::model::now();\n";
        assert_eq!(imports(src), vec!["hub".to_string(), "model".to_string()]);
    }
}

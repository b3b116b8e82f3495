//! The pure helpers of planning: what a created file holds, which way a whole-entry plan goes,
//! and which executable bit a file keeps or gets back.

use hunkgate_patch::parse_hunks;
use serde_json::json;

use super::*;

fn side(mode: Mode) -> Side {
    Side {
        mode,
        oid: hunkgate_sandbox::ObjectId::from_hex(&[b'0'; 40]).unwrap(),
    }
}

/// A record of `kind` with the given run sides.
fn rec(kind: &str, old: Option<Side>, new: Option<Side>) -> HunkRec {
    let mut r: HunkRec = serde_json::from_value(json!({
        "id": "s:a:0", "file": "a", "index": 0, "kind": kind, "state": "accepted",
    }))
    .unwrap();
    r.old = old;
    r.new = new;
    r
}

#[test]
fn a_created_file_holds_the_new_lines_of_its_hunk() {
    let h = &parse_hunks("@@ -0,0 +1,2 @@\n+one\n+two\n").unwrap()[0];
    assert_eq!(created_text("a", Some(h)).unwrap(), "one\ntwo\n");
    assert_eq!(created_text("a", None).unwrap(), "");
    // A hunk with old lines does not apply to nothing: a conflict naming the file.
    let h = &parse_hunks("@@ -1 +1 @@\n-x\n+y\n").unwrap()[0];
    match created_text("a", Some(h)) {
        Err(PlanError::Conflict(m)) => assert!(m.starts_with("a: "), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_whole_entry_plan_goes_old_to_new_and_back_when_undone() {
    let r = rec(
        "binary",
        Some(side(Mode::File)),
        Some(side(Mode::Executable)),
    );
    let (from, to) = directed(&r, false);
    assert_eq!(
        (from.map(|s| s.mode), to.map(|s| s.mode)),
        (Some(Mode::File), Some(Mode::Executable))
    );
    let (from, to) = directed(&r, true);
    assert_eq!(
        (from.map(|s| s.mode), to.map(|s| s.mode)),
        (Some(Mode::Executable), Some(Mode::File))
    );
    assert_eq!(since(false), "run");
    assert_eq!(since(true), "hunk was applied");
}

#[test]
fn only_executable_files_are_executable() {
    assert!(is_exec(&Cur::File {
        bytes: vec![],
        exec: true
    }));
    assert!(!is_exec(&Cur::File {
        bytes: vec![],
        exec: false
    }));
    assert!(!is_exec(&Cur::Link(b"t".to_vec())));
    assert!(side_exec(Some(&side(Mode::Executable))));
    assert!(!side_exec(Some(&side(Mode::File))));
    assert!(!side_exec(Some(&side(Mode::Symlink))));
    assert!(!side_exec(None));
}

#[test]
fn an_undone_hunk_keeps_the_files_bit_or_brings_back_the_old_one() {
    let file = |exec| Cur::File {
        bytes: vec![],
        exec,
    };
    let exe = side(Mode::Executable);
    // The file's own bit wins while it exists.
    assert!(!restored_exec(&file(false), Some(&exe)));
    assert!(restored_exec(&file(true), None));
    // An undone delete: the run's old side says.
    assert!(restored_exec(&Cur::Absent, Some(&exe)));
    assert!(!restored_exec(&Cur::Absent, Some(&side(Mode::File))));
    assert!(!restored_exec(&Cur::Absent, None));
}

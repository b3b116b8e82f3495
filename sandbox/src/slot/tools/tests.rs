use super::*;
use proptest::prelude::*;

fn edit(op: Operation, start: usize, end: Option<usize>, text: &str, base: &str) -> ProposedEdit {
    ProposedEdit {
        file_path: "f.txt".into(),
        operation: op,
        start_line: start,
        end_line: end,
        new_text: text.into(),
        expected_hash: file_hash(base.as_bytes()),
        rationale: None,
        edit_id: None,
    }
}

#[test]
fn replace_insert_delete_follow_the_seed() {
    let base = "a\nb\nc\nd\n";
    let r = apply_edit(base, &edit(Operation::Replace, 2, Some(3), "B\nC\nX", base)).unwrap();
    assert_eq!(r.text, "a\nB\nC\nX\nd\n");
    assert_eq!((r.start_line, r.line_count), (2, 3));
    let r = apply_edit(base, &edit(Operation::Insert, 1, None, "top\n", base)).unwrap();
    assert_eq!(r.text, "top\na\nb\nc\nd\n");
    let r = apply_edit(base, &edit(Operation::Insert, 5, None, "end", base)).unwrap();
    assert_eq!(r.text, "a\nb\nc\nd\nend\n");
    let r = apply_edit(base, &edit(Operation::Delete, 1, Some(4), "", base)).unwrap();
    assert_eq!(r.text, "");
}

#[test]
fn edits_keep_line_endings_and_a_missing_final_newline() {
    let crlf = "a\r\nb\r\nc\r\n";
    let r = apply_edit(crlf, &edit(Operation::Replace, 2, Some(2), "x\ny\n", crlf)).unwrap();
    assert_eq!(r.text, "a\r\nx\r\ny\r\nc\r\n");
    let open = "a\nb\nc";
    let r = apply_edit(open, &edit(Operation::Replace, 3, Some(3), "C\n", open)).unwrap();
    assert_eq!(r.text, "a\nb\nC");
    let r = apply_edit(open, &edit(Operation::Insert, 4, None, "d", open)).unwrap();
    assert_eq!(r.text, "a\nb\nc\nd");
    let r = apply_edit(open, &edit(Operation::Delete, 3, Some(3), "", open)).unwrap();
    assert_eq!(r.text, "a\nb");
    let r = apply_edit(open, &edit(Operation::Replace, 1, Some(1), "A", open)).unwrap();
    assert_eq!(r.text, "A\nb\nc");
    let blank = "a\n\nX";
    let r = apply_edit(blank, &edit(Operation::Delete, 3, Some(3), "", blank)).unwrap();
    assert_eq!(
        r.text, "a\n\n",
        "a blank last line is kept, with its newline"
    );
}

#[test]
fn bad_edits_are_refused_with_the_reason() {
    let base = "a\nb\n";
    let cases = [
        (
            edit(Operation::Replace, 0, Some(1), "x", base),
            "start_line",
        ),
        (
            edit(Operation::Replace, 1, None, "x", base),
            "needs end_line",
        ),
        (edit(Operation::Replace, 2, Some(1), "x", base), "before"),
        (edit(Operation::Replace, 2, Some(3), "x", base), "outside"),
        (
            edit(Operation::Insert, 4, None, "x", base),
            "insert before 1..=3",
        ),
        (
            edit(Operation::Delete, 1, Some(1), "x", base),
            "no new_text",
        ),
        (edit(Operation::Replace, 1, Some(1), "", base), "use delete"),
    ];
    for (e, want) in cases {
        let err = apply_edit(base, &e).unwrap_err().to_string();
        assert!(err.contains(want), "{e:?}: {err}");
    }
    let mut stale = edit(Operation::Replace, 1, Some(1), "x", "other\n");
    let err = apply_edit(base, &stale).unwrap_err();
    assert!(matches!(err, EditError::HashMismatch { .. }), "{err}");
    stale.expected_hash = "md5:abc".into();
    assert!(matches!(
        apply_edit(base, &stale).unwrap_err(),
        EditError::BadHash(_)
    ));
    // Positive control: the same edit with the right hash applies.
    assert!(apply_edit(base, &edit(Operation::Replace, 1, Some(1), "x", base)).is_ok());
}

proptest! {
    /// Replacing a range and then replacing the new lines with the old ones gives the file
    /// back; deleting and re-inserting does too.
    #[test]
    fn edits_round_trip(
        lines in proptest::collection::vec("[a-z]{0,3}", 1..12),
        final_nl in any::<bool>(),
        a in 0usize..12, b in 0usize..12,
        new in proptest::collection::vec("[A-Z]{1,3}", 1..4),
    ) {
        let mut base = lines.join("\n");
        if final_nl { base.push('\n'); }
        let total = lines_of(&base).len();
        prop_assume!(total > 0);
        let (s, e) = (a.min(b) % total + 1, a.max(b) % total + 1);
        let (s, e) = (s.min(e), s.max(e));
        let old: String = lines_of(&base)[s - 1..e].concat();
        let r = apply_edit(&base, &edit(Operation::Replace, s, Some(e), &new.join("\n"), &base)).unwrap();
        prop_assert_eq!(r.line_count, new.len());
        let back = apply_edit(
            &r.text,
            &edit(Operation::Replace, s, Some(s + r.line_count - 1), &old, &r.text),
        ).unwrap();
        prop_assert_eq!(&back.text, &base);
        let d = apply_edit(&base, &edit(Operation::Delete, s, Some(e), "", &base)).unwrap();
        // Deleting the unterminated end changes where the file ends (see the unit test).
        if final_nl || e < total {
            let re = apply_edit(&d.text, &edit(Operation::Insert, s, None, &old, &d.text)).unwrap();
            prop_assert_eq!(&re.text, &base);
        }
    }
}

fn sandbox(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for (p, c) in files {
        let path = tmp.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c).unwrap();
    }
    tmp
}

fn ok(r: ToolReply) -> Value {
    match r {
        ToolReply::Ok { result } => result,
        ToolReply::Error { message } => panic!("tool failed: {message}"),
    }
}

fn err(r: ToolReply) -> String {
    match r {
        ToolReply::Ok { result } => panic!("tool succeeded: {result}"),
        ToolReply::Error { message } => message,
    }
}

/// A project with an ignored `target/`, hits for "fixme" in several cases, and a 30-line
/// file; returns it with its numbered file's content.
fn project() -> (tempfile::TempDir, String) {
    let numbered: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let tmp = sandbox(&[
        (".gitignore", "target/\n"),
        ("src/a.rs", "fn main() {\n    // fixme\n}\n"),
        ("src/b.rs", &numbered),
        ("target/out.rs", "// fixme\n"),
        ("docs/x.md", "FIXME: write\n"),
    ]);
    (tmp, numbered)
}

#[test]
fn list_files_respects_gitignore_and_prefix() {
    let (tmp, _) = project();
    let run = |t: FileTool| execute(tmp.path(), &t, &ToolLimits::default());
    let files = ok(run(FileTool::ListFiles {
        prefix: Some("./src".into()),
        glob: None,
    }));
    assert_eq!(files["files"], json!(["src/a.rs", "src/b.rs"]));
    let all = ok(run(FileTool::ListFiles {
        prefix: None,
        glob: Some("**/*.rs".into()),
    }));
    assert_eq!(
        all["files"],
        json!(["src/a.rs", "src/b.rs"]),
        "ignored target/ is left out"
    );
}

#[test]
fn read_file_is_capped_at_max_read_lines() {
    let (tmp, numbered) = project();
    let limits = ToolLimits {
        max_read_lines: 10,
        ..ToolLimits::default()
    };
    let read = ok(execute(
        tmp.path(),
        &FileTool::ReadFile {
            file_path: "src/b.rs".into(),
            start_line: Some(5),
            end_line: None,
            max_bytes: None,
        },
        &limits,
    ));
    assert_eq!(read["start_line"], 5);
    assert_eq!(read["end_line"], 14, "capped at max_read_lines");
    assert_eq!(read["truncated"], true);
    assert_eq!(read["next_start_line"], 15);
    assert_eq!(read["file_hash"], json!(file_hash(numbered.as_bytes())));
    assert!(read["content"].as_str().unwrap().starts_with("line 5\n"));
}

#[test]
fn search_is_smart_case_skips_ignored_files_and_caps() {
    let (tmp, _) = project();
    let search = |query: &str, glob: Option<&str>, limit: Option<usize>| {
        let tool = FileTool::SearchProject {
            query: query.into(),
            glob: glob.map(Into::into),
            limit,
        };
        ok(execute(tmp.path(), &tool, &ToolLimits::default()))
    };
    let found = search("fixme", None, None);
    let hits: Vec<&str> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["file_path"].as_str().unwrap())
        .collect();
    assert_eq!(
        hits,
        vec!["docs/x.md", "src/a.rs"],
        "smart case, ignored files skipped"
    );
    assert_eq!(found["results"][1]["start_line"], 1);
    assert_eq!(found["results"][1]["end_line"], 3);
    let exact = search("FIXME", None, None);
    assert_eq!(exact["results"].as_array().unwrap().len(), 1);
    let capped = search("line", Some("src/*.rs"), Some(1));
    assert_eq!(capped["results"][0]["start_line"], 1);
    assert_eq!(capped["results"][0]["end_line"], 20, "snippets are capped");
    assert_eq!(capped["results"].as_array().unwrap().len(), 1);
    assert_eq!(capped["truncated"], true);
}

#[test]
fn paths_outside_the_sandbox_are_refused() {
    let tmp = sandbox(&[("a.txt", "one\ntwo\n")]);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("link")).unwrap();
    let limits = ToolLimits::default();
    let run = |t: FileTool| execute(tmp.path(), &t, &limits);
    for bad in [
        "../x",
        "/etc/passwd",
        ".git/config",
        "link/secret",
        "a/../../x",
    ] {
        let e = err(run(FileTool::WriteFile {
            file_path: bad.into(),
            content: "x".into(),
            expected_hash: None,
        }));
        assert!(!e.is_empty(), "{bad}");
        let e = err(run(FileTool::ReadFile {
            file_path: bad.into(),
            start_line: None,
            end_line: None,
            max_bytes: None,
        }));
        assert!(!e.is_empty(), "{bad}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).unwrap(),
        "s\n"
    );
    // Positive control: ordinary paths work, parents are created.
    let w = ok(run(FileTool::WriteFile {
        file_path: "new/dir/b.txt".into(),
        content: "b\n".into(),
        expected_hash: None,
    }));
    assert_eq!(w["created"], true);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("new/dir/b.txt")).unwrap(),
        "b\n"
    );
}

/// `edit_file` replacing line 2 of `a.txt` by `TWO`, against `expected_hash`.
fn replace_line_2(expected_hash: &str) -> FileTool {
    FileTool::EditFile(ProposedEdit {
        file_path: "a.txt".into(),
        operation: Operation::Replace,
        start_line: 2,
        end_line: Some(2),
        new_text: "TWO".into(),
        expected_hash: expected_hash.into(),
        rationale: None,
        edit_id: None,
    })
}

#[test]
fn edit_move_and_delete_change_the_sandbox() {
    let tmp = sandbox(&[("a.txt", "one\ntwo\n")]);
    let limits = ToolLimits::default();
    let run = |t: FileTool| execute(tmp.path(), &t, &limits);
    let hash = file_hash(b"one\ntwo\n");
    let e = ok(run(replace_line_2(&hash)));
    assert_eq!(e["file_hash"], json!(file_hash(b"one\nTWO\n")));
    assert!(e["preview"].as_str().unwrap().contains("2| TWO"));
    // The same edit again is stale now.
    let stale = err(run(replace_line_2(&hash)));
    assert!(stale.contains("read_file it again"), "{stale}");
    ok(run(FileTool::MoveFile {
        from_path: "a.txt".into(),
        to_path: "moved/a.txt".into(),
    }));
    assert!(!tmp.path().join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("moved/a.txt")).unwrap(),
        "one\nTWO\n"
    );
    ok(run(FileTool::DeleteFile {
        file_path: "moved/a.txt".into(),
    }));
    assert!(!tmp.path().join("moved/a.txt").exists());
    let e = err(run(FileTool::DeleteFile {
        file_path: "moved/a.txt".into(),
    }));
    assert!(e.contains("no such file"), "{e}");
}

#[test]
fn snippets_merge_touching_hits_and_stay_under_the_cap() {
    // (hits, lines in the file, context, max lines) -> snippets
    type Case = (
        &'static [usize],
        usize,
        usize,
        usize,
        &'static [(usize, usize)],
    );
    let cases: &[Case] = &[
        (&[], 10, 2, 20, &[]),
        (&[0], 1, 2, 20, &[(0, 0)]),
        (&[5], 30, 2, 20, &[(3, 7)]),
        // Snippets that touch (7 and 8) merge; a gap keeps them apart.
        (&[5, 10], 30, 2, 20, &[(3, 12)]),
        (&[5, 11], 30, 2, 20, &[(3, 7), (9, 13)]),
        (&[5, 20], 30, 2, 20, &[(3, 7), (18, 22)]),
        // A merge that would pass the cap starts a new snippet.
        (&[0, 3, 6], 30, 2, 6, &[(0, 5), (4, 8)]),
        // A snippet is cut to the cap even alone.
        (&[5], 30, 2, 1, &[(3, 3)]),
        (&[29], 30, 2, 20, &[(27, 29)]),
    ];
    for (hits, len, context, max, want) in cases {
        assert_eq!(
            snippet_ranges(hits, *len, *context, *max),
            want.to_vec(),
            "{hits:?} in {len} lines, context {context}, max {max}"
        );
    }
}

#[test]
fn needles_are_smart_case() {
    let lower = Needle::new("fixme");
    assert!(lower.is_in("// FIXME later") && lower.is_in("fixme"));
    let upper = Needle::new("FIXME");
    assert!(upper.is_in("// FIXME later"));
    assert!(
        !upper.is_in("// fixme later"),
        "an upper-case letter makes it exact"
    );
}

#[test]
fn read_slices_stop_at_either_cap() {
    let text: String = (1..=10).map(|i| format!("l{i}\n")).collect();
    let window = |start, end, max_bytes| ReadWindow {
        start_line: start,
        end_line: end,
        max_bytes,
    };
    let limits = ToolLimits {
        max_read_lines: 4,
        ..ToolLimits::default()
    };
    let s = read_slice(&text, "f", window(Some(2), None, None), &limits).unwrap();
    assert_eq!(
        (s.content.as_str(), s.start, s.end),
        ("l2\nl3\nl4\nl5\n", 2, 5)
    );
    assert_eq!((s.wanted_end, s.total), (10, 10));
    let s = read_slice(&text, "f", window(None, Some(9), Some(7)), &limits).unwrap();
    assert_eq!(
        (s.content.as_str(), s.end, s.wanted_end),
        ("l1\nl2\n", 2, 9)
    );
    let s = read_slice(&text, "f", window(Some(3), Some(4), None), &limits).unwrap();
    assert_eq!((s.content.as_str(), s.end), ("l3\nl4\n", 4), "nothing cut");
    let past = read_slice(&text, "f", window(Some(11), None, None), &limits);
    assert!(matches!(past, Err(ToolError::Invalid(m)) if m.contains("past the end of f")));
    let back = read_slice(&text, "f", window(Some(5), Some(4), None), &limits);
    assert!(matches!(back, Err(ToolError::Invalid(m)) if m.contains("before start_line")));
    let empty = read_slice("", "f", window(None, None, None), &limits).unwrap();
    assert_eq!((empty.start, empty.end, empty.total), (1, 0, 0));
}

#[test]
fn new_text_takes_the_file_line_ending() {
    assert_eq!(terminated_lines("", "\n"), Vec::<String>::new());
    assert_eq!(terminated_lines("a\r\nb", "\n"), ["a\n", "b\n"]);
    assert_eq!(terminated_lines("a\nb\n", "\r\n"), ["a\r\n", "b\r\n"]);
    assert_eq!(terminated_lines("\n", "\n"), ["\n"]);
}

#[test]
fn edit_previews_show_numbered_context() {
    let applied = Applied {
        text: (1..=10).map(|i| format!("l{i}\n")).collect(),
        start_line: 6,
        line_count: 1,
    };
    let want = "    3| l3\n    4| l4\n    5| l5\n    6| l6\n    7| l7\n    8| l8\n    9| l9";
    assert_eq!(edit_preview(&applied), want);
    assert!(under_prefix("src/a.rs", Some("src")) && under_prefix("src", Some("src")));
    assert!(!under_prefix("srcx/a.rs", Some("src")) && under_prefix("x", None));
}

use super::*;

#[test]
fn git_orders_a_tree_as_if_its_name_ended_in_a_slash() {
    // "a.c" < "a/" (as '.' < '/'), but "a" the file < "a.c".
    assert_eq!(git_order(b"a", true, b"a.c", false), Ordering::Greater);
    assert_eq!(git_order(b"a", false, b"a.c", false), Ordering::Less);
    assert_eq!(git_order(b"a", true, b"a0", false), Ordering::Less);
    assert_eq!(git_order(b"ab", false, b"ab", false), Ordering::Equal);
}

#[test]
fn modes_of_trees_are_told_from_files() {
    assert!(is_tree_mode(b"40000"));
    assert!(is_tree_mode(b"040000"));
    for file in [&b"100644"[..], b"100755", b"120000", b"160000", b"", b"4x"] {
        assert!(!is_tree_mode(file), "{file:?}");
    }
}

#[test]
fn bytes_that_are_not_a_tree_are_refused() {
    let oid = [7u8; 20];
    let mut good = b"100644 a\0".to_vec();
    good.extend_from_slice(&oid);
    let parsed = parse(&good).unwrap();
    assert_eq!(
        (
            parsed[0].mode(&good),
            parsed[0].name(&good),
            parsed[0].oid(&good)
        ),
        (&b"100644"[..], &b"a"[..], &oid[..])
    );
    // Positive control above; each of these is cut or misses a part.
    for bad in [
        &good[..good.len() - 1],
        b"100644 a".as_slice(),
        b"100644a\0aaaaaaaaaaaaaaaaaaaa".as_slice(),
        b"10064a a\0aaaaaaaaaaaaaaaaaaaa".as_slice(),
        b" a\0aaaaaaaaaaaaaaaaaaaa".as_slice(),
        b"100644 \0aaaaaaaaaaaaaaaaaaaa".as_slice(),
    ] {
        assert!(parse(bad).is_none(), "{bad:?}");
    }
}

use super::*;

#[test]
fn stat_lines_with_hostile_names_parse() {
    assert_eq!(parse_stat("12 (sh) S 7 12 12 0"), Some((7, false)));
    assert_eq!(parse_stat("13 (a) Z (b) Z 9 1 1"), Some((9, true)));
    assert_eq!(parse_stat("garbage"), None);
}

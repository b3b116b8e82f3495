use super::*;

#[test]
fn a_tally_holds_up_to_its_limit_and_not_past_it() {
    let mut t = Tally::new(10);
    assert!(t.take(4));
    assert!(t.take(6), "exactly the limit is within it");
    assert!(!t.take(1));
    let mut unlimited = Tally::new(u64::MAX);
    assert!(unlimited.take(u64::MAX) && unlimited.take(u64::MAX));
}

#[test]
fn the_errors_name_the_limit_and_the_setting() {
    let files = OverLimit::Files { limit: 20_000 }.to_string();
    assert!(files.contains("20000 files") && files.contains("max_changed_files"));
    let bytes = OverLimit::Bytes { limit: 512 << 20 }.to_string();
    assert!(bytes.contains("512 MiB") && bytes.contains("max_changed_bytes"));
    let kib = OverLimit::Bytes { limit: 64 << 10 }.to_string();
    assert!(kib.contains("64 KiB"), "{kib}");
    let odd = OverLimit::Bytes { limit: 1000 }.to_string();
    assert!(odd.contains("1000 bytes"), "{odd}");
}

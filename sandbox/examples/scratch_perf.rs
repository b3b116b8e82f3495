use hunkgate_sandbox::snapshot::{snapshot_checkout, DEFAULT_FILE_CAP};
use hunkgate_sandbox::store::Store;
use hunkgate_sandbox::workspace::{LocalSandbox, Sandbox};
use std::time::Instant;
fn main() {
    let repo = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let state = std::path::PathBuf::from(std::env::args().nth(2).unwrap());
    let store = Store::open_or_init(&state.join("s.git")).unwrap();
    let sb = LocalSandbox::new(state.join("sb"));
    for round in 0..3 {
        let t = Instant::now();
        let snap = snapshot_checkout(&repo, &store, DEFAULT_FILE_CAP).unwrap();
        let t1 = t.elapsed();
        let tree = store.write_tree(&snap.tree).unwrap();
        let t2 = t.elapsed();
        sb.prepare(&store, &snap.tree).unwrap();
        let t3 = t.elapsed();
        let back = sb.snapshot(&store, &snap.tree, DEFAULT_FILE_CAP).unwrap();
        let t4 = t.elapsed();
        assert_eq!(back.tree, snap.tree);
        println!(
            "round {round}: snapshot {t1:?} tree {:?} prepare {:?} readback {:?} ({tree})",
            t2 - t1,
            t3 - t2,
            t4 - t3
        );
    }
}

use super::*;

/// A slot's state is the registry's: the next run in the slot gets what the last one left
/// (the same `Slot`), a run in another slot does not, and another hub's registry shares
/// nothing with this one.
#[test]
fn a_slot_keeps_its_state_from_run_to_run_and_with_its_hub_only() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Runs::new(tmp.path().join("sandboxes"));
    let (first, state) = runs.acquire_slot(false).unwrap();
    let (second, other) = runs.acquire_slot(false).unwrap();
    assert_ne!(first, second);
    assert!(!Arc::ptr_eq(&state, &other), "two slots, two states");
    runs.release_slot(first);
    let (again, same) = runs.acquire_slot(false).unwrap();
    assert_eq!(again, first);
    assert!(
        Arc::ptr_eq(&state, &same),
        "the slot's state outlives its run"
    );

    let hub2 = Runs::new(tmp.path().join("sandboxes"));
    let (slot, theirs) = hub2.acquire_slot(false).unwrap();
    assert_eq!(slot, first);
    assert!(
        !Arc::ptr_eq(&state, &theirs),
        "another hub's slot 0 is its own"
    );
}

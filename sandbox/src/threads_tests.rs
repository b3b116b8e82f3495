//! [`streamed_on_threads`]: order, the bound on the work ahead, panics and errors.

use super::streamed_on_threads;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// No bound on the work ahead that these tests could reach.
const ANY: (usize, fn(&usize) -> usize) = (usize::MAX, |_| 1);

#[test]
fn results_come_in_order_while_later_items_are_still_being_worked_on() {
    let consumed = AtomicUsize::new(0);
    let mut got = Vec::new();
    let result: Result<(), ()> = streamed_on_threads(
        (0..64).collect(),
        2,
        ANY,
        |i: usize| {
            if i == 40 {
                // Done only once the first results were consumed: with everything handed
                // over at the end, this waits in vain and says so.
                let start = Instant::now();
                while consumed.load(Ordering::SeqCst) < 8 {
                    if start.elapsed() > Duration::from_secs(10) {
                        return usize::MAX;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            i * 2
        },
        |r| {
            got.push(r);
            consumed.fetch_add(1, Ordering::SeqCst);
            Ok(())
        },
    );
    assert_eq!(result, Ok(()));
    assert_eq!(got, (0..64).map(|i| i * 2).collect::<Vec<_>>());
}

#[test]
fn a_slow_consumer_holds_the_threads_back_to_the_budget() {
    // Items weigh their value; the consumer is slow. What is taken and not yet consumed
    // never weighs more than the budget (one item at least); the control, without a
    // budget, runs far ahead.
    let most_ahead = |budget: usize| {
        let in_flight = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let mut got = Vec::new();
        streamed_on_threads(
            (0..200).map(|i| 1 + i % 7).collect(),
            4,
            (budget, |w: &usize| *w),
            |w: usize| {
                let now = in_flight.fetch_add(w, Ordering::SeqCst) + w;
                most.fetch_max(now, Ordering::SeqCst);
                w
            },
            |w| {
                std::thread::sleep(Duration::from_micros(200));
                in_flight.fetch_sub(w, Ordering::SeqCst);
                got.push(w);
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        assert_eq!(got, (0..200).map(|i| 1 + i % 7).collect::<Vec<_>>());
        most.load(Ordering::SeqCst)
    };
    let bounded = most_ahead(20);
    assert!(
        (7..=20).contains(&bounded),
        "{bounded} ahead with a budget of 20"
    );
    let unbounded = most_ahead(usize::MAX);
    assert!(
        unbounded > 100,
        "control: {unbounded} ahead without a budget"
    );
    // An item heavier than the whole budget still goes, alone.
    assert!(most_ahead(3) <= 7);
}

/// Run `f` on a thread of its own and return its panic's message: were the threads left
/// waiting for room, it would never end, and the test fails saying `hang` after 20 s
/// instead of hanging.
fn panic_of(hang: &str, f: impl FnOnce() + Send + 'static) -> Result<(), Option<String>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(panic.map_err(|p| p.downcast_ref::<String>().cloned()));
    });
    rx.recv_timeout(Duration::from_secs(20)).expect(hang)
}

#[test]
fn a_panic_in_the_work_with_others_waiting_for_room_is_raised_too() {
    let got = panic_of("the other threads were left waiting for room", || {
        let _ = streamed_on_threads(
            (0..50).collect(),
            3,
            (2, |_: &usize| 1),
            |i: usize| {
                if i == 1 {
                    std::thread::sleep(Duration::from_millis(20));
                    panic!("item {i} is bad");
                }
                i
            },
            |_| Ok::<(), ()>(()),
        );
    });
    assert_eq!(got, Err(Some("item 1 is bad".to_string())));
}

#[test]
fn a_panic_in_the_consumer_with_threads_waiting_for_room_is_raised_too() {
    let got = panic_of("the threads were left waiting for room", || {
        let _ = streamed_on_threads(
            (0..50).collect(),
            3,
            (2, |_: &usize| 1),
            |i: usize| i,
            |i| {
                if i == 1 {
                    // The threads fill the budget and wait for room meanwhile.
                    std::thread::sleep(Duration::from_millis(20));
                    panic!("result {i} is bad");
                }
                Ok::<(), ()>(())
            },
        );
    });
    assert_eq!(got, Err(Some("result 1 is bad".to_string())));
}

#[test]
fn a_consumer_error_stops_the_threads_taking_more() {
    let worked = AtomicUsize::new(0);
    let mut consumed = 0;
    let result = streamed_on_threads(
        (0..1000).collect(),
        2,
        ANY,
        |i: usize| {
            worked.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
            i
        },
        |i| {
            consumed += 1;
            if i == 3 {
                Err(format!("no more after {i}"))
            } else {
                Ok(())
            }
        },
    );
    assert_eq!(result, Err("no more after 3".to_string()));
    assert_eq!(consumed, 4);
    let worked = worked.load(Ordering::SeqCst);
    assert!((4..100).contains(&worked), "{worked} items worked on");
}

#[test]
fn a_panic_in_the_work_is_raised_again_with_its_message() {
    let panic = std::panic::catch_unwind(|| {
        let _ = streamed_on_threads(
            (0..50).collect(),
            2,
            ANY,
            |i: usize| {
                if i == 5 {
                    panic!("item {i} is bad");
                }
                i
            },
            |_| Ok::<(), ()>(()),
        );
    })
    .unwrap_err();
    assert_eq!(panic.downcast_ref::<String>().unwrap(), "item 5 is bad");
}

#[test]
fn no_items_and_one_thread_work_too() {
    let run = |items: Vec<usize>, threads| {
        let mut got = Vec::new();
        streamed_on_threads(
            items,
            threads,
            ANY,
            |i| i + 1,
            |r| {
                got.push(r);
                Ok::<(), ()>(())
            },
        )
        .unwrap();
        got
    };
    assert!(run(Vec::new(), 4).is_empty());
    assert_eq!(run(vec![3, 1, 2], 1), vec![4, 2, 3]);
    assert_eq!(run(vec![3, 1, 2], 8), vec![4, 2, 3]);
}

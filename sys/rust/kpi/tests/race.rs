//! kpi's locks under ksim's race scheduler: pieces of kernel work on host
//! threads of their own interleave at lock and allocation points, exclude
//! each other at the locks, and interleave the same way for the same seed.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::sync::Mutex as StdMutex;

use kpi::malloc::{KBox, Wait};
use kpi::sync::SpinMutex;
use ksim::sched::Piece;
use ksim::{Cred, Machine, MachineConfig};

/// Two pieces each add 1 a hundred times under a spin lock, allocating
/// between the read and the write of the shared value (a scheduling
/// point); a third only allocates. Returns the hand-overs, the final
/// count, and the order the pieces ran their steps in.
fn run(seed: u64) -> (u64, u32, Vec<u8>) {
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, tid) = m.spawn(Cred::root(), "t");
    let counter = m.in_thread(tid, || {
        SpinMutex::new(c"t-race", 0u32, Wait::WaitOk).unwrap()
    });
    let order = StdMutex::new(Vec::new());
    let adder = |who: u8| -> Piece<'_> {
        let (counter, order) = (&counter, &order);
        Box::new(move || {
            for _ in 0..100 {
                // Outside the lock: may be preempted here.
                drop(KBox::try_new(0u8, Wait::NoWait));
                let mut g = counter.lock();
                let v = *g;
                order.lock().unwrap().push(who);
                *g = v + 1;
            }
        })
    };
    let other: Piece<'_> = Box::new(|| {
        for _ in 0..50 {
            drop(KBox::try_new(0u64, Wait::WaitOk));
        }
    });
    let switches = m.race(seed, vec![adder(1), adder(2), other]);
    let total = *counter.lock();
    assert_eq!(m.violations(), vec![]);
    m.in_thread(tid, || drop(counter));
    assert_eq!(m.kmem_live(), (0, 0));
    (switches, total, order.into_inner().unwrap())
}

#[test]
fn pieces_interleave_and_exclude_each_other_at_locks() {
    let (switches, total, order) = run(7);
    assert_eq!(total, 200, "no lost update: the lock excludes");
    assert!(switches > 20, "{switches} hand-overs");
    let changes = order.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        changes > 5,
        "the adders interleave: {changes} changes of hands"
    );
}

#[test]
fn the_same_seed_interleaves_the_same_way() {
    assert_eq!(run(11), run(11));
    assert_ne!(run(11).2, run(12).2);
}

#[test]
fn a_lock_taken_twice_outside_a_race_still_panics() {
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, tid) = m.spawn(Cred::root(), "t");
    let lock = m.in_thread(tid, || {
        SpinMutex::new(c"t-twice", (), Wait::WaitOk).unwrap()
    });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _a = lock.lock();
        let _b = lock.lock();
    }));
    assert!(r.is_err());
}

//! kpi's locks and allocations under the simulator's witness: each of
//! FreeBSD's rules (locking(9), mutex(9), sx(9), malloc(9), WITNESS) is
//! broken once through the kpi API, and the witness must name it.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use kpi::hooks::Hook;
use kpi::malloc::{KBox, KVec, Wait};
use kpi::sync::{CriticalSection, Mutex, SpinMutex, Sx};
use ksim::witness::Violation;
use ksim::{Cred, Machine, MachineConfig};

/// Runs `f` as kernel code of a fresh process; returns what the witness saw.
fn in_kernel(f: impl FnOnce()) -> Vec<Violation> {
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, tid) = m.spawn(Cred::root(), "t");
    m.in_thread(tid, f);
    let v = m.violations();
    assert_eq!(m.kmem_live(), (0, 0), "the test itself leaked");
    v
}

#[test]
fn no_allocation_or_free_under_a_spin_lock_even_without_sleeping() {
    let v = in_kernel(|| {
        let spin = SpinMutex::new(c"t-spin", (), Wait::WaitOk).unwrap();
        let outside = KBox::try_new(1u32, Wait::WaitOk).unwrap();
        let g = spin.lock();
        let inside = KBox::try_new(2u32, Wait::NoWait).unwrap();
        drop(outside);
        drop(g);
        drop(inside);
    });
    assert_eq!(
        v,
        vec![
            Violation::AllocUnderSpin("t-spin"),
            Violation::FreeUnderSpin("t-spin")
        ]
    );
}

#[test]
fn no_allocation_in_a_critical_section() {
    let v = in_kernel(|| {
        let cs = CriticalSection::enter();
        let b = KBox::try_new(1u32, Wait::NoWait);
        drop(b);
        drop(cs);
    });
    assert_eq!(
        v,
        vec![
            Violation::AllocInCriticalSection,
            Violation::FreeInCriticalSection
        ]
    );
}

#[test]
fn no_sleep_with_a_default_mutex_held() {
    let v = in_kernel(|| {
        let mtx = Mutex::new(c"t-mtx", (), Wait::WaitOk).unwrap();
        let sx = Sx::new(c"t-sx", (), Wait::WaitOk).unwrap();
        let g = mtx.lock();
        // M_NOWAIT is fine under a default mutex; M_WAITOK may sleep.
        let ok = KVec::<u8>::with_capacity(8, Wait::NoWait).unwrap();
        let sleeps = KVec::<u8>::with_capacity(8, Wait::WaitOk).unwrap();
        let s = sx.lock();
        drop(s);
        drop(g);
        drop((ok, sleeps));
    });
    assert_eq!(
        v,
        vec![
            Violation::SleepWithMutexHeld("t-mtx"),
            Violation::SleepableUnderMutex {
                taken: "t-sx",
                mutex: "t-mtx"
            },
        ]
    );
}

#[test]
fn lock_order_reversal_between_sx_and_mutex() {
    let v = in_kernel(|| {
        let sx = Sx::new(c"t-order-sx", (), Wait::WaitOk).unwrap();
        let spin = SpinMutex::new(c"t-order-spin", (), Wait::WaitOk).unwrap();
        {
            let _a = sx.lock_shared();
            let _b = spin.lock();
        }
        let _b = spin.lock();
        let _a = sx.lock_shared();
    });
    assert!(
        v.contains(&Violation::LockOrderReversal {
            held: "t-order-spin",
            taken: "t-order-sx"
        }),
        "{v:?}"
    );
}

#[test]
fn no_lock_at_all_in_nmi_context() {
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, tid) = m.spawn(Cred::root(), "t");
    let spin = m.in_thread(tid, || {
        SpinMutex::new(c"t-nmi", 0u32, Wait::WaitOk).unwrap()
    });
    m.switch_in(0, tid);
    m.nmi(0, tid, || {
        *spin.lock() += 1;
    });
    m.switch_out(0);
    assert_eq!(m.violations(), vec![Violation::LockInNmi("t-nmi")]);
    m.in_thread(tid, || drop(spin));
}

/// Sleep locks in NMI context are flagged too (each also breaks the
/// rules of its kind in an interrupt), and the NMI's context ends with it:
/// the same locks taken by the interrupted thread afterwards are fine.
#[test]
fn no_sleep_lock_in_nmi_context_either() {
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, tid) = m.spawn(Cred::root(), "t");
    let (mtx, sx) = m.in_thread(tid, || {
        (
            Mutex::new(c"t-nmi-mtx", (), Wait::WaitOk).unwrap(),
            Sx::new(c"t-nmi-sx", (), Wait::WaitOk).unwrap(),
        )
    });
    m.switch_in(0, tid);
    m.nmi(0, tid, || {
        drop(mtx.lock());
        drop(sx.lock_shared());
        drop(sx.lock());
    });
    let v = m.violations();
    for lock in ["t-nmi-mtx", "t-nmi-sx"] {
        assert!(v.contains(&Violation::LockInNmi(lock)), "{lock}: {v:?}");
    }
    assert_eq!(
        v.iter()
            .filter(|x| matches!(x, Violation::LockInNmi(_)))
            .count(),
        3,
        "each acquisition: {v:?}"
    );
    m.switch_out(0);
    m.in_thread(tid, || {
        drop(mtx.lock());
        drop(sx.lock());
    });
    assert_eq!(m.violations(), v, "outside the NMI");
    m.in_thread(tid, || drop((mtx, sx)));
}

#[test]
fn context_switch_hooks_run_in_a_critical_section() {
    let m = Machine::new(MachineConfig::default());
    let _e = m.enter();
    let (_, tid) = m.spawn(Cred::root(), "t");
    m.in_thread(tid, || {
        // The scheduler calls them for processes that use PMCs.
        kpi::proc::set_flags(kpi::proc::curproc(), kpi::proc::P_HWPMC, 0);
        let hook = kpi::kbox_dyn!(
            |h: &Hook| {
                if *h == Hook::CswOut {
                    // What a driver must not do at a context switch.
                    drop(KBox::try_new(0u8, Wait::NoWait));
                }
            },
            Wait::WaitOk,
            dyn Fn(&Hook) + Send + Sync
        )
        .unwrap();
        kpi::hooks::set_pmc_hook(Some(hook)).unwrap();
    });
    // Two switch-outs with the hook set: the end of the system call that
    // set it, and the end of the run.
    m.run(tid, 0, 1);
    m.in_thread(tid, || kpi::hooks::set_pmc_hook(None).unwrap());
    let pair = [
        Violation::AllocInCriticalSection,
        Violation::FreeInCriticalSection,
    ];
    assert_eq!(m.violations(), [pair.clone(), pair].concat());
}

#[test]
fn kassert_panics_in_the_simulator() {
    let r = std::panic::catch_unwind(|| kpi::kassert!(1 + 1 == 3, "arithmetic is {}", "broken"));
    let msg = r.expect_err("a false kassert panics");
    let text = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains("KASSERT failed: arithmetic is broken"),
        "{text}"
    );
    kpi::kassert!(1 + 1 == 2, "not reached");
}

#[test]
fn notification_posts_and_thread_signals_take_default_mutexes() {
    let v = in_kernel(|| {
        let (file, _fd) = kpi::file::notify_file_create(8).unwrap();
        // In thread context with nothing held: fine.
        file.post(&[1; 8]);
        let me = kpi::proc::curproc();
        let tid = kpi::proc::curthread();
        assert!(kpi::proc::tdsignal(me, tid, 30, 7));
        // Under a spin lock: selwakeup's and the process's mutexes are
        // default mutexes, which a spin lock holder may not take.
        let spin = SpinMutex::new(c"t-spin", (), Wait::WaitOk).unwrap();
        let g = spin.lock();
        file.post(&[2; 8]);
        file.hangup();
        kpi::proc::tdsignal(me, tid, 30, 7);
        drop(g);
        drop(file);
    });
    assert_eq!(
        v,
        vec![
            Violation::SleepLockUnderSpin {
                taken: "pmcnotify",
                spin: "t-spin"
            },
            Violation::SleepLockUnderSpin {
                taken: "pmcnotify",
                spin: "t-spin"
            },
            Violation::SleepLockUnderSpin {
                taken: "proc",
                spin: "t-spin"
            },
        ]
    );
}

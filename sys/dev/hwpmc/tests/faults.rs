//! Allocation failure injection: every kernel allocation an operation
//! makes is failed in turn; the operation must return ENOMEM, leave the
//! driver's state as it was, succeed when retried, and leave nothing
//! allocated once the driver is unloaded.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use hwpmc::Module;
use ksim::{Cred, Machine, MachineConfig};
use uapi::pmc::*;

/// The setup of a scenario, and the operation under test.
struct Scenario {
    setup: fn(&Sim) -> Vec<P>,
    op: fn(&Sim, &[P]) -> Result<(), Errno>,
    /// What the driver's state looks like, to compare before and after a
    /// failed attempt.
    state: fn(&Sim, &[P]) -> (usize, Vec<u32>),
}

fn snapshot(s: &Sim, ps: &[P]) -> (usize, Vec<u32>) {
    let info = s.pmcinfo(ps[0], 0).unwrap();
    (
        s.module().driver().target_count(),
        info.iter().map(|i| i.pm_rowdisp).collect(),
    )
}

fn run(name: &str, sc: Scenario) {
    // Count the allocations of a successful run.
    let calls = {
        let s = Sim::new();
        let ps = (sc.setup)(&s);
        let before = s.m.kmem_calls();
        (sc.op)(&s, &ps)
            .unwrap_or_else(|e| panic!("{name}: the operation fails without injection: {e}"));
        let n = s.m.kmem_calls() - before;
        s.finish();
        n
    };
    assert!(
        calls > 0,
        "{name}: the operation allocates nothing, so nothing is tested"
    );
    for k in 1..=calls {
        let s = Sim::new();
        let ps = (sc.setup)(&s);
        let state = (sc.state)(&s, &ps);
        s.m.fail_alloc_in(k);
        assert_eq!(
            (sc.op)(&s, &ps),
            Err(ENOMEM),
            "{name}: allocation {k} of {calls} failed"
        );
        s.m.clear_alloc_failure();
        assert_eq!(
            (sc.state)(&s, &ps),
            state,
            "{name}: allocation {k}: state changed"
        );
        // Spare capacity a failed call reserved in the driver's tables
        // belongs to those tables; finish() checks that unload frees all.
        (sc.op)(&s, &ps)
            .unwrap_or_else(|e| panic!("{name}: retry after allocation {k} failed: {e}"));
        s.finish();
    }
}

#[test]
fn allocate_fails_cleanly_at_every_allocation() {
    run(
        "allocate (first PMC of a new owner)",
        Scenario {
            setup: |s| vec![s.root()],
            op: |s, ps| {
                s.allocate(
                    ps[0],
                    PmcClass::Soft,
                    s.soft("CLOCK.HARD"),
                    PmcMode::Tc,
                    0,
                    PmcFlags::empty(),
                )
                .map(|_| ())
            },
            state: snapshot,
        },
    );
    run(
        "allocate (system PMC)",
        Scenario {
            setup: |s| vec![s.root()],
            op: |s, ps| {
                s.allocate(
                    ps[0],
                    PmcClass::Soft,
                    s.soft("CLOCK.HARD"),
                    PmcMode::Sc,
                    0,
                    PmcFlags::empty(),
                )
                .map(|_| ())
            },
            state: snapshot,
        },
    );
}

#[test]
fn attach_fails_cleanly_at_every_allocation() {
    run(
        "attach",
        Scenario {
            setup: |s| {
                let (p, t) = (s.root(), s.root());
                s.soft_tc(p);
                vec![p, t]
            },
            op: |s, ps| {
                s.attach(
                    ps[0],
                    pmc_id_make_id(0xFFF, PmcMode::Tc.raw(), PmcClass::Soft.raw(), 0),
                    ps[1].pid as i32,
                )
            },
            state: snapshot,
        },
    );
    run(
        "attach with descendants",
        Scenario {
            setup: |s| {
                let (p, t) = (s.root(), s.root());
                s.allocate(
                    p,
                    PmcClass::Soft,
                    s.soft("CLOCK.HARD"),
                    PmcMode::Tc,
                    0,
                    PmcFlags::DESCENDANTS,
                )
                .unwrap();
                let c = s.fork(t);
                s.fork(c);
                s.fork(t);
                vec![p, t]
            },
            op: |s, ps| {
                s.attach(
                    ps[0],
                    pmc_id_make_id(0xFFF, PmcMode::Tc.raw(), PmcClass::Soft.raw(), 0),
                    ps[1].pid as i32,
                )
            },
            state: snapshot,
        },
    );
}

#[test]
fn start_fails_cleanly_at_every_allocation() {
    run(
        "start (implicit attach to the owner)",
        Scenario {
            setup: |s| {
                let p = s.root();
                s.soft_tc(p);
                vec![p]
            },
            op: |s, ps| {
                s.start(
                    ps[0],
                    pmc_id_make_id(0xFFF, PmcMode::Tc.raw(), PmcClass::Soft.raw(), 0),
                )
            },
            state: snapshot,
        },
    );
}

#[test]
fn module_load_fails_cleanly_at_every_allocation() {
    let count = {
        let m = Machine::new(MachineConfig::default());
        let _e = m.enter();
        let (_, t) = m.spawn(Cred::root(), "kldload");
        let before = m.kmem_calls();
        let module = m.in_thread(t, Module::load).unwrap();
        let n = m.kmem_calls() - before;
        m.in_thread(t, || module.unload());
        assert_eq!(m.kmem_live(), (0, 0));
        n
    };
    assert!(count > 10);
    for k in 1..=count {
        let m = Machine::new(MachineConfig::default());
        let _e = m.enter();
        let (_, t) = m.spawn(Cred::root(), "kldload");
        m.fail_alloc_in(k);
        let r = m.in_thread(t, Module::load);
        assert_eq!(r.err(), Some(ENOMEM), "allocation {k} of {count}");
        assert_eq!(m.kmem_live(), (0, 0), "allocation {k}: leaked");
        assert!(
            m.syscalls().is_empty(),
            "allocation {k}: a failed load registered its system call"
        );
        assert_eq!(m.violations(), vec![]);
    }
}

/// The row dispositions, the targets and the count of running system
/// samplers: a failed start must not count the PMC as running.
fn snapshot_with_samplers(s: &Sim, ps: &[P]) -> (usize, Vec<u32>) {
    let (targets, mut v) = snapshot(s, ps);
    v.push(s.module().driver().system_samplers());
    (targets, v)
}

#[test]
fn system_sampler_start_fails_cleanly_at_every_allocation() {
    // Starting a system sampler gathers the process list, every process's
    // threads and mappings, and the kernel's objects before the first
    // record: each of those allocations failing fails the start.
    run(
        "start (system sampler with its mappings)",
        Scenario {
            setup: |s| {
                let p = s.root();
                let fd = s.open(p, ksim::FileKind::Regular, true);
                s.configurelog(p, fd, 0).unwrap();
                let other = s.root();
                s.m.mmap(other.pid, "/lib/libc.so.7", 0x8_0000_0000, 0x10_0000);
                s.allocate(
                    p,
                    PmcClass::Soft,
                    s.soft("CLOCK.HARD"),
                    PmcMode::Ss,
                    0,
                    PmcFlags::empty(),
                )
                .unwrap();
                vec![p]
            },
            op: |s, ps| {
                s.start(
                    ps[0],
                    pmc_id_make_id(0, PmcMode::Ss.raw(), PmcClass::Soft.raw(), 0),
                )
            },
            state: snapshot_with_samplers,
        },
    );
}

#[test]
fn attach_with_a_log_fails_cleanly_at_every_allocation() {
    // A sampling PMC attached with a log writes PMCATTACH with the
    // target's path and MAP_IN for its mappings: both are read before the
    // attach changes anything.
    run(
        "attach (sampling, with a log)",
        Scenario {
            setup: |s| {
                let (p, t) = (s.root(), s.root());
                let fd = s.open(p, ksim::FileKind::Regular, true);
                s.configurelog(p, fd, 0).unwrap();
                s.m.mmap(t.pid, "/lib/libc.so.7", 0x8_0000_0000, 0x10_0000);
                s.allocate(
                    p,
                    PmcClass::Soft,
                    s.soft("CLOCK.HARD"),
                    PmcMode::Ts,
                    1000,
                    PmcFlags::empty(),
                )
                .unwrap();
                vec![p, t]
            },
            op: |s, ps| {
                s.attach(
                    ps[0],
                    pmc_id_make_id(0xFFF, PmcMode::Ts.raw(), PmcClass::Soft.raw(), 0),
                    ps[1].pid as i32,
                )
            },
            state: snapshot,
        },
    );
}

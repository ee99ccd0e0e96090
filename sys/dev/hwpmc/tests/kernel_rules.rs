//! The kernel's rules as the driver must follow them: a hook that cannot
//! allocate loses its records openly (counted, as records lost for want
//! of a log buffer are), never silently; and the simulator's witness
//! catches the driver's own kind of mistake at the driver's own locks.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use ksim::FileKind;
use uapi::pmc::*;
use uapi::pmclog::{PmclogBody, records};

/// An owner with a log and a running system sampler on CPU 0, so that
/// every process event concerns it.
fn system_sampler(s: &Sim) -> (P, i32) {
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    let id = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Ss,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.start(p, id).unwrap();
    (p, fd)
}

fn forks_logged(s: &Sim, p: P, fd: i32) -> Vec<u32> {
    s.flushlog(p).unwrap();
    records(&s.file(p, fd))
        .filter_map(|r| match r.expect("the log parses").body {
            PmclogBody::Procfork { newpid, .. } => Some(newpid),
            _ => None,
        })
        .collect()
}

#[test]
fn a_hook_that_cannot_allocate_counts_its_records_as_lost() {
    let s = Sim::new();
    let (p, fd) = system_sampler(&s);
    let parent = s.root();
    let failed_before = s.stats(p).pm_buffer_requests_failed;

    // The fork hook's first allocation (the child's snapshot) fails.
    s.m.fail_alloc_in(1);
    let lost = s.fork(parent);
    s.m.clear_alloc_failure();
    assert_eq!(
        s.stats(p).pm_buffer_requests_failed,
        failed_before + 1,
        "the lost PROCFORK is counted"
    );
    assert!(!forks_logged(&s, p, fd).contains(&lost.pid));

    // Without the failure the record is there, and nothing else is lost.
    let kept = s.fork(parent);
    assert!(forks_logged(&s, p, fd).contains(&kept.pid));
    assert_eq!(s.stats(p).pm_buffer_requests_failed, failed_before + 1);

    // The mapping hook counts the same way.
    let before = s.stats(p).pm_buffer_requests_failed;
    s.m.fail_alloc_in(1);
    s.m.mmap(parent.pid, "/lib/libm.so.5", 0x9_0000_0000, 0x1000);
    s.m.clear_alloc_failure();
    assert_eq!(
        s.stats(p).pm_buffer_requests_failed,
        before + 1,
        "mmap: the lost record is counted"
    );

    // The thread hooks allocate nothing (the kernel hands them what the
    // record needs): a failing allocator loses no THR_CREATE.
    let before = s.stats(p).pm_buffer_requests_failed;
    s.m.fail_alloc_in(1);
    let tid = s.m.thread_create(parent.pid);
    s.m.clear_alloc_failure();
    assert_eq!(s.stats(p).pm_buffer_requests_failed, before);
    s.flushlog(p).unwrap();
    assert!(
        records(&s.file(p, fd)).any(|r| matches!(
            r.expect("the log parses").body,
            PmclogBody::ThrCreate { tid: t, .. } if t == tid
        )),
        "THR_CREATE of {tid}"
    );
    s.finish();
}

#[test]
fn scheduler_hooks_run_in_a_critical_section() {
    // The driver's context-switch code takes only spin locks and frees
    // nothing; the witness would report anything else, since the hooks
    // run in a critical section as under FreeBSD's thread lock.
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    for cpu in 0..2 {
        s.run(p, cpu, 3);
    }
    // Release while the target is still on a CPU: the PMC is taken off
    // there by the system call, not freed by the switch-out.
    s.m.switch_in(0, p.tid);
    s.release(p, id).unwrap();
    s.m.switch_out(0);
    assert_eq!(s.m.violations(), vec![]);
    s.finish();
}

/// A context switch of a target with SOFT process PMCs allocates nothing
/// (the old switch-in rebuilt the list of every soft event on the heap for
/// each PMC), and per PMC takes the kernel's soft-event lock once at the
/// start and once at the stop, as FreeBSD's soft_start_pmc and
/// soft_stop_pmc do; the CPU's rows are locked once per switch, whatever
/// the number of PMCs (the SOFT class had a lock of its own, taken once
/// more per PMC each way).
#[test]
fn a_switch_pair_of_soft_process_pmcs_allocates_nothing() {
    const PMCS: u64 = 4;
    const PAIRS: u64 = 10;
    let s = Sim::new();
    let owner = s.root();
    let target = s.spawn(ksim::Cred::root(), "target");
    for _ in 0..PMCS {
        let id = s.soft_tc(owner);
        s.attach(owner, id, target.pid as i32).unwrap();
        s.start(owner, id).unwrap();
    }
    // The first switch-in finds the process's descriptor ready: nothing
    // is left to allocate later.
    s.m.switch_in(1, target.tid);
    s.m.switch_out(1);
    let (allocs, before) = (s.m.kmem_calls(), s.m.lock_acquisitions());
    for _ in 0..PAIRS {
        s.m.switch_in(1, target.tid);
        s.m.switch_out(1);
    }
    let after = s.m.lock_acquisitions();
    let taken = |class: &str| {
        after.get(class).copied().unwrap_or(0) - before.get(class).copied().unwrap_or(0)
    };
    assert_eq!(
        s.m.kmem_calls(),
        allocs,
        "allocations during {PAIRS} switch pairs"
    );
    assert_eq!(taken(ksim::kern::SOFTS_LOCK), 2 * PMCS * PAIRS);
    // The SOFT class keeps no lock of its own: its rows are ordered by
    // the core's lock of the CPU's rows, taken once per switch.
    assert_eq!(taken("soft-pcpu"), 0);
    assert_eq!(taken("pmc-pcpu"), 2 * PAIRS);
    assert!(s.m.violations().is_empty(), "{:?}", s.m.violations());
    s.finish();
}

//! Extended errors (exterror(9)): the driver records hwpmc_mod.c's
//! messages where FreeBSD's 2026 driver does, as FreeBSD's 2026 tests
//! (tests/sys/pmc/pmc_exterr_test.c) check them through the raw system
//! call, and the simulated kernel copies them out as FreeBSD does.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use core::mem::size_of;
use ksim::MachineConfig;
use uapi::exterr::*;
use uapi::pmc::*;
use uapi::{AsBytes, Plain};

/// What FreeBSD's libc does for each thread: a `struct uexterror` in the
/// process's memory, registered with exterrctl(2). Returns its address.
fn register(s: &Sim, p: P) -> u64 {
    let at = s.m.user_alloc(p.pid, size_of::<Uexterror>());
    let ue = Uexterror {
        ver: UEXTERROR_VER,
        ..Uexterror::default()
    };
    s.m.user_write(p.pid, at, ue.as_bytes());
    s.m.exterrctl(p.tid, EXTERRCTL_ENABLE, 0, at).unwrap();
    at
}

/// The registered structure as the kernel left it.
fn last(s: &Sim, p: P, at: u64) -> Uexterror {
    Uexterror::read_from(&s.m.user_read(p.pid, at, size_of::<Uexterror>())).unwrap()
}

fn msg(ue: &Uexterror) -> &str {
    let end = ue.msg.iter().position(|&b| b == 0).unwrap();
    core::str::from_utf8(&ue.msg[..end]).unwrap()
}

/// Checks the extended error of the last failed call: `errno`, hwpmc_mod.c's
/// category, a source line, and the message.
#[track_caller]
fn expect(s: &Sim, p: P, at: u64, errno: Errno, text: &str) {
    let ue = last(s, p, at);
    assert_eq!(ue.ver, UEXTERROR_VER, "the kernel leaves ver alone");
    assert_eq!(ue.error, errno.get() as u32);
    assert_eq!(ue.cat, EXTERR_CAT_HWPMC_MOD);
    assert_ne!(ue.src_line, 0);
    assert_eq!(msg(&ue), text);
}

fn soft_request(s: &Sim, mode: u32, cpu: u32, flags: u32) -> PmcOpPmcallocate {
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    a.pm_mode = mode;
    a.pm_cpu = cpu;
    a.pm_flags = flags;
    a
}

#[test]
fn pmcallocate_invalid_mode() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let a = soft_request(&s, 0xff, PMC_CPU_ANY, 0);
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    expect(&s, p, at, EINVAL, "Invalid PMC mode");
    s.finish();
}

#[test]
fn pmcallocate_invalid_cpu() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let ncpu = s.cpuinfo(p).pm_ncpu;
    let a = soft_request(&s, PmcMode::Tc.raw(), ncpu, 0);
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    expect(&s, p, at, EINVAL, "Invalid PMC CPU");
    s.finish();
}

#[test]
fn pmcallocate_invalid_flags() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let a = soft_request(&s, PmcMode::Tc.raw(), PMC_CPU_ANY, 1 << 31);
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    expect(&s, p, at, EINVAL, "Invalid PMC flags");
    s.finish();
}

#[test]
fn pmcallocate_no_row_accepts() {
    // An event the SOFT class does not have: every SOFT row refuses it.
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let mut a = soft_request(&s, PmcMode::Tc.raw(), PMC_CPU_ANY, 0);
    a.pm_ev = uapi::pmc_events::PMC_EV_SOFT_LAST;
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    expect(&s, p, at, EINVAL, "No PMC row accepted");
    s.finish();
}

#[test]
fn pmcattach_system_mode() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let id = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Sc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    assert_eq!(s.attach(p, id, p.pid as i32), Err(EINVAL));
    expect(&s, p, at, EINVAL, "Cannot attach a system-mode PMC");
    s.release(p, id).unwrap();
    s.finish();
}

#[test]
fn pmcattach_running_pmc() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    assert_eq!(s.attach(p, id, p.pid as i32), Err(EBUSY));
    expect(&s, p, at, EBUSY, "PMC must be stopped before attach");
    s.stop(p, id).unwrap();
    s.release(p, id).unwrap();
    s.finish();
}

#[test]
fn pmcrw_no_flags() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let id = s.soft_tc(p);
    assert_eq!(s.rw(p, id, PmcFlags::empty(), 0), Err(EINVAL));
    expect(&s, p, at, EINVAL, "PMCRW requires PMC_F_OLDVALUE");
    s.release(p, id).unwrap();
    s.finish();
}

#[test]
fn pmcrw_write_running() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    assert_eq!(s.rw(p, id, PmcFlags::NEWVALUE, 1), Err(EBUSY));
    expect(&s, p, at, EBUSY, "Cannot write a PMC while it is running");
    s.stop(p, id).unwrap();
    s.release(p, id).unwrap();
    s.finish();
}

/// As FreeBSD's kernel: a failed call without an extended error leaves
/// error 0 (uexterr_gettext(3) gives ""), a successful call leaves the
/// structure alone, and `EXTERRCTL_UD` is such a failure.
#[test]
fn later_calls_replace_or_keep_the_record_as_freebsd_does() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    let a = soft_request(&s, 0xff, PMC_CPU_ANY, 0);
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    expect(&s, p, at, EINVAL, "Invalid PMC mode");
    // STOP of a PMC that is not this process's: ESRCH, nothing recorded.
    let other = s.root();
    assert_eq!(s.stop(other, id), Err(ESRCH));
    expect(&s, p, at, EINVAL, "Invalid PMC mode");
    // A failure of this thread's without one: error 0.
    assert!(s.simple(p, PmcOp::Pmcstop, id ^ 0x1_0000).is_err());
    assert_eq!(last(&s, p, at).error, 0);
    assert_eq!(s.attach(p, id, p.pid as i32), Err(EBUSY));
    expect(&s, p, at, EBUSY, "PMC must be stopped before attach");
    assert_eq!(s.m.exterrctl(p.tid, EXTERRCTL_UD, 0, 0), Err(22));
    assert_eq!(last(&s, p, at).error, 0);
    s.stop(p, id).unwrap();
    s.release(p, id).unwrap();
    s.finish();
}

/// Nothing is recorded for a thread that has no structure registered, or
/// no longer: its memory stays as it was.
#[test]
fn unregistered_threads_get_nothing() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    s.m.exterrctl(p.tid, EXTERRCTL_DISABLE, 0, 0).unwrap();
    assert!(!s.m.exterr_registered(p.tid));
    let a = soft_request(&s, 0xff, PMC_CPU_ANY, 0);
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    assert_eq!(
        last(&s, p, at),
        Uexterror {
            ver: UEXTERROR_VER,
            ..Uexterror::default()
        }
    );
    s.finish();
}

/// exterrctl(2) as sys_exterrctl: one registration per thread unless
/// forced, the version checked, unknown flags and operations refused.
#[test]
fn exterrctl_registers_as_freebsd_does() {
    let s = Sim::new();
    let p = s.root();
    let at = register(&s, p);
    assert_eq!(s.m.exterrctl(p.tid, EXTERRCTL_ENABLE, 0, at), Err(16));
    assert_eq!(
        s.m.exterrctl(p.tid, EXTERRCTL_ENABLE, EXTERRCTLF_FORCE, at),
        Ok(())
    );
    assert_eq!(s.m.exterrctl(p.tid, EXTERRCTL_ENABLE, 2, at), Err(22));
    assert_eq!(s.m.exterrctl(p.tid, 99, 0, at), Err(22));
    // A wrong version: refused, and the old registration is gone.
    let bad = s.m.user_alloc(p.pid, size_of::<Uexterror>());
    assert_eq!(
        s.m.exterrctl(p.tid, EXTERRCTL_ENABLE, EXTERRCTLF_FORCE, bad),
        Err(22)
    );
    assert!(!s.m.exterr_registered(p.tid));
    assert_eq!(s.m.exterrctl(p.tid, EXTERRCTL_DISABLE, 0, 0), Err(22));
    s.finish();
}

/// fork keeps the registration for the child's thread, exec drops it.
#[test]
fn fork_keeps_and_exec_drops_the_registration() {
    let s = Sim::new();
    let p = s.root();
    let _ = register(&s, p);
    let child = s.fork(p);
    assert!(s.m.exterr_registered(child.tid));
    s.m.exec(child.pid, "/usr/bin/true", None);
    assert!(!s.m.exterr_registered(child.tid));
    assert!(s.m.exterr_registered(p.tid));
    s.finish();
}

/// A kernel without `options EXTERR_STRINGS` records the error without
/// its message.
#[test]
fn without_exterr_strings_there_is_no_message() {
    let s = Sim::with(
        MachineConfig {
            exterr_strings: false,
            ..MachineConfig::default()
        },
        &[],
    );
    let p = s.root();
    let at = register(&s, p);
    let a = soft_request(&s, 0xff, PMC_CPU_ANY, 0);
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    let ue = last(&s, p, at);
    assert_eq!((ue.error, ue.cat), (22, EXTERR_CAT_HWPMC_MOD));
    assert_eq!(msg(&ue), "");
    s.finish();
}

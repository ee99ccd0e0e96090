//! Logs the driver writes on the simulated machine, for the tests that
//! read them back (driver_logs.rs) and for tools/pmclog-compat, which
//! reads them with FreeBSD's own pmclog.c too (examples/driver_logs.rs).

use super::common::*;
use ksim::FileKind;
use ksim::elf::{ImageBuilder, ImageKind};
use ksim::workload::Program;
use uapi::pmc::*;

/// A profiling session's log: process-sampling with call chains on a
/// program that runs, forks and exits, a counting PMC logging context
/// switches and exits, user data and CLOSELOG.
pub fn session_log() -> Vec<u8> {
    let s = Sim::with(
        ksim::MachineConfig::default(),
        &[("kern.hwpmc.mincount", "1")],
    );
    let img = ImageBuilder::new("/usr/bin/work", ImageKind::Executable)
        .function("main", 64)
        .function("compute", 256)
        .build();
    s.m.install("/usr/bin/work", img.bytes.clone());
    let owner = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let worker = s.root();
    s.m.exec(worker.pid, "/usr/bin/work", None);
    let prog = Program::builder(&img, 0, 7)
        .func("compute", 80, &["main"])
        .func("main", 20, &[])
        .build();
    s.m.set_activity(worker.tid, Box::new(prog));
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    a.pm_mode = PmcMode::Ts.raw();
    a.pm_cpu = PMC_CPU_ANY;
    a.pm_flags = (PmcFlags::CALLCHAIN | PmcFlags::DESCENDANTS).bits();
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = 1;
    let sampler = s.allocate_raw(owner, &a).unwrap();
    // Context-switch and exit values are logged for counting PMCs.
    a.pm_mode = PmcMode::Tc.raw();
    a.pm_flags = (PmcFlags::DESCENDANTS | PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT).bits();
    a.pm_count = 0;
    let counter = s.allocate_raw(owner, &a).unwrap();
    for id in [sampler, counter] {
        s.attach(owner, id, worker.pid as i32).unwrap();
        s.start(owner, id).unwrap();
    }
    for round in 0..50 {
        s.run(worker, round % 2, 10);
    }
    let child = s.fork(worker);
    s.run(child, 1, 10);
    s.writelog(owner, 0x1234_5678).unwrap();
    s.m.exit(child.pid);
    s.closelog(owner).unwrap();
    let data = s.file(owner, fd);
    s.finish();
    data
}

/// One session that makes the driver write every record type: a TSC
/// counter (PMCALLOCATE), a system sampler on a tiny ring (PROC_CREATE,
/// THR_CREATE/THR_EXIT, MAP_IN/MAP_OUT of mmap and modules, SYSEXIT,
/// CALLCHAIN, DROPNOTIFY), a counting PMC on a target with its
/// descendants (PMCATTACH, PROCCSW, PROCFORK, PROCEXEC, PROCEXIT,
/// PMCDETACH), user data, and the close.
pub fn every_record_log() -> Vec<u8> {
    let s = Sim::with(
        ksim::MachineConfig::default(),
        &[("kern.hwpmc.nsamples", "4"), ("kern.hwpmc.mincount", "1")],
    );
    let owner = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let tsc = s
        .allocate(
            owner,
            PmcClass::Tsc,
            uapi::pmc_events::PMC_EV_TSC_TSC,
            PmcMode::Sc,
            2,
            PmcFlags::empty(),
        )
        .unwrap();
    // The counting PMC on a target and its descendants, first: an owner
    // with a system sampler hears of execs as mappings instead.
    let target = s.root();
    let ev = s.soft("CLOCK.HARD");
    let flags = PmcFlags::DESCENDANTS | PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT;
    let tc = s
        .allocate(owner, PmcClass::Soft, ev, PmcMode::Tc, 0, flags)
        .unwrap();
    s.attach(owner, tc, target.pid as i32).unwrap();
    s.start(owner, tc).unwrap();
    s.run(target, 1, 4);
    let child = s.fork(target);
    s.run(child, 2, 3);
    s.m.exec(child.pid, "/usr/bin/cc", None);
    // The system sampler: a sample per page fault on CPU 0.
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("PAGE_FAULT.ALL");
    a.pm_mode = PmcMode::Ss.raw();
    a.pm_cpu = 0;
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = 1;
    let ss = s.allocate_raw(owner, &a).unwrap();
    s.start(owner, ss).unwrap();
    // More faults in one tick than the ring holds: a drop.
    let w = s.root();
    s.m.switch_in(0, w.tid);
    for _ in 0..10 {
        s.m.soft_event(0, "PAGE_FAULT.ALL");
    }
    s.m.tick(0);
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    s.m.switch_out(0);
    s.m.mmap(child.pid, "/lib/libc.so.7", 0x8_0000_0000, 0x10_0000);
    s.m.munmap(child.pid, 0x8_0000_0000, 0x10_0000);
    let t = s.m.thread_create(child.pid);
    s.m.thread_exit(t);
    s.m.kld_load(
        owner.tid,
        "/boot/kernel/if_em.ko",
        0xffff_ffff_8300_0000,
        0x4_0000,
    );
    s.m.kld_unload(owner.tid, 0xffff_ffff_8300_0000);
    s.writelog(owner, 77).unwrap();
    s.m.exit(child.pid);
    s.detach(owner, tc, target.pid as i32).unwrap();
    let _ = tsc;
    s.configurelog(owner, -1, 0).unwrap();
    let data = s.file(owner, fd);
    s.finish();
    data
}

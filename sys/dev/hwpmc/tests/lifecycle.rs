//! PMC life cycles on the simulated machine: counting across context
//! switches, the modes and dispositions, attach and detach rules, fork,
//! exec and exit, and the cases of FreeBSD's tests/sys/pmc api and
//! lifecycle suites.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use kpi::proc::{SIGBUS, SIGIO};
use ksim::{Cred, MachineConfig};
use uapi::pmc::*;
use uapi::pmc_events::PMC_EV_TSC_TSC;

#[test]
fn process_counting_follows_the_target_across_cpus_and_switches() {
    let s = Sim::new();
    let (owner, target, other) = (s.root(), s.root(), s.root());
    let id = s.soft_tc(owner);
    s.attach(owner, id, target.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    s.run(target, 0, 10);
    s.run(other, 0, 7); // not a target: not counted
    s.run(target, 2, 5);
    s.run(target, 3, 1);
    assert_eq!(s.read(owner, id), Ok(16));
    s.stop(owner, id).unwrap();
    s.run(target, 1, 9); // stopped: not counted
    assert_eq!(s.read(owner, id), Ok(16));
    s.start(owner, id).unwrap();
    s.run(target, 1, 4);
    assert_eq!(
        s.read(owner, id),
        Ok(20),
        "counting resumes from the saved value"
    );
    s.finish();
}

#[test]
fn implicit_attach_to_the_owner_at_start_counts_its_own_ticks() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    s.run(p, 1, 12);
    assert_eq!(s.read(p, id), Ok(12));
    let info = s.pmcinfo(p, 0).unwrap();
    assert_eq!(
        info[pmc_id_to_rowindex(id) as usize].pm_rowdisp,
        PmcDisp::Thread.raw()
    );
    s.finish();
}

#[test]
fn system_counting_counts_every_process_on_its_cpu_only() {
    let s = Sim::new();
    let (owner, a, b) = (s.root(), s.root(), s.root());
    let id = s
        .allocate(
            owner,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Sc,
            1,
            PmcFlags::empty(),
        )
        .unwrap();
    assert_eq!(pmc_id_to_cpu(id), 1);
    assert_eq!(pmc_id_to_mode(id), PmcMode::Sc.raw());
    s.start(owner, id).unwrap();
    s.run(a, 1, 3);
    s.run(b, 1, 4);
    s.run(a, 0, 100);
    assert_eq!(s.read(owner, id), Ok(7));
    s.stop(owner, id).unwrap();
    s.run(a, 1, 5);
    assert_eq!(s.read(owner, id), Ok(7));
    s.write(owner, id, 1000).unwrap();
    assert_eq!(s.read(owner, id), Ok(1000));
    let info = s.pmcinfo(owner, 1).unwrap();
    let row = &info[pmc_id_to_rowindex(id) as usize];
    assert_eq!(row.pm_rowdisp, PmcDisp::Standalone.raw());
    assert_eq!(row.pm_ownerpid, owner.pid as i32);
    assert_eq!(row.pm_mode, PmcMode::Sc.raw());
    s.finish();
}

#[test]
fn tsc_counts_time_on_its_cpu_and_is_shareable() {
    let s = Sim::new();
    let (a, b, w) = (s.root(), s.root(), s.root());
    let ta = s
        .allocate(
            a,
            PmcClass::Tsc,
            PMC_EV_TSC_TSC,
            PmcMode::Sc,
            2,
            PmcFlags::empty(),
        )
        .unwrap();
    let tb = s
        .allocate(
            b,
            PmcClass::Tsc,
            PMC_EV_TSC_TSC,
            PmcMode::Sc,
            2,
            PmcFlags::empty(),
        )
        .unwrap();
    assert_eq!(
        pmc_id_to_rowindex(ta),
        pmc_id_to_rowindex(tb),
        "two owners share the TSC row"
    );
    s.start(a, ta).unwrap();
    let t0 = s.read(a, ta).unwrap();
    assert_eq!(
        t0 + 2_400,
        s.m.tsc(2),
        "the value of the read, then the caller's switch-out"
    );
    s.run(w, 2, 3);
    let t1 = s.read(a, ta).unwrap();
    // Three ticks of a 2.4 GHz TSC at hz=1000, and the four context
    // switches of 1 µs each between the two reads.
    assert_eq!(t1 - t0, 3 * 2_400_000 + 4 * 2_400);
    s.write(a, ta, 0).expect_err("a running PMC is not written");
    s.stop(a, ta).unwrap();
    s.write(a, ta, 5).unwrap();
    assert_eq!(
        s.read(a, ta).unwrap() + 2_400,
        s.m.tsc(2),
        "TSC writes are ignored"
    );
    s.finish();
}

#[test]
fn read_and_write_work_before_start() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    s.write(p, id, 42).unwrap();
    assert_eq!(
        s.rw(p, id, PmcFlags::OLDVALUE | PmcFlags::NEWVALUE, 7),
        Ok(42),
        "old value out, new value in"
    );
    assert_eq!(s.read(p, id), Ok(7));
    s.finish();
}

#[test]
fn pmcrw_on_a_process_pmc_with_no_target_signals_sigio() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    assert!(s.signals_to(p.pid).is_empty());
    s.read(p, id).unwrap();
    assert_eq!(s.signals_to(p.pid), vec![SIGIO]);
    s.attach(p, id, 0).unwrap();
    s.read(p, id).unwrap();
    assert_eq!(
        s.signals_to(p.pid),
        vec![SIGIO],
        "no signal once a target exists"
    );
    s.finish();
}

#[test]
fn forged_released_and_foreign_ids_are_refused_by_every_id_op() {
    let s = Sim::new();
    let (p, q) = (s.root(), s.root());
    let id = s.soft_tc(p);
    let foreign = s.soft_tc(q);
    let released = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.STAT"),
            PmcMode::Tc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.release(p, released).unwrap();
    let ncpu = s.cpuinfo(p).pm_ncpu;
    let ri = pmc_id_to_rowindex(id);
    let forged = [
        pmc_id_make_id(0xFFF, 0xF, 0xFF, ri),
        pmc_id_make_id(ncpu, PmcMode::Tc.raw(), PmcClass::Soft.raw(), ri),
        pmc_id_make_id(0xFFF, PmcMode::Sc.raw(), PmcClass::Soft.raw(), ri),
        released,
    ];
    // `foreign` has the same row and mode as `id` and another owner: for
    // the owner `p` it is indistinguishable from its own id only if equal.
    assert_eq!(foreign, id, "ids are unique per owner, not globally");
    for bad in forged {
        assert_eq!(s.start(p, bad), Err(EINVAL), "start {bad:#x}");
        assert_eq!(s.stop(p, bad), Err(EINVAL));
        assert_eq!(s.read(p, bad), Err(EINVAL));
        assert_eq!(s.write(p, bad, 1), Err(EINVAL));
        assert_eq!(s.setcount(p, bad, 1), Err(EINVAL));
        assert_eq!(s.attach(p, bad, 0), Err(EINVAL));
        assert_eq!(s.detach(p, bad, 0), Err(EINVAL));
        assert_eq!(s.getcaps(p, bad), Err(EINVAL));
        assert_eq!(s.getmsr(p, bad), Err(EINVAL));
        assert_eq!(s.release(p, bad), Err(EINVAL));
    }
    s.finish();
}

#[test]
fn double_attach_and_double_detach_are_refused() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    assert_eq!(s.attach(p, id, t.pid as i32), Err(EEXIST));
    s.detach(p, id, t.pid as i32).unwrap();
    assert_eq!(s.detach(p, id, t.pid as i32), Err(ESRCH));
    assert_eq!(s.module().driver().target_count(), 0);
    s.finish();
}

#[test]
fn detach_after_the_target_was_reaped_is_refused_but_release_works() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    s.start(p, id).unwrap();
    s.run(t, 0, 3);
    s.m.exit(t.pid);
    s.m.reap(t.pid);
    assert_eq!(
        s.signals_to(p.pid),
        vec![SIGIO],
        "the owner learns its PMC lost its last target"
    );
    assert_eq!(s.detach(p, id, t.pid as i32), Err(ESRCH));
    assert_eq!(
        s.read(p, id),
        Ok(3),
        "the exited target's counts stay in the PMC"
    );
    s.release(p, id).unwrap();
    s.finish();
}

#[test]
fn a_running_attached_pmc_can_be_released() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    s.start(p, id).unwrap();
    s.m.switch_in(2, t.tid); // the target is on a CPU with the PMC loaded
    s.m.tick(2);
    s.release(p, id).unwrap();
    s.m.tick(2);
    s.m.switch_out(2);
    assert_eq!(s.module().driver().target_count(), 0);
    assert!(
        s.m.soft_events().iter().all(|e| e.running == 0),
        "no soft event left armed"
    );
    s.finish();
}

/// A target detached while it runs no longer uses PMCs, so its
/// switch-out does not reach the driver (as under FreeBSD's scheduler):
/// the detach takes the PMC off the target's CPU itself. Left there, it
/// kept its run count and its event armed until another process's PMC
/// replaced it on the row (found by hwpmc-random, seed 1000286).
#[test]
fn detaching_a_running_target_takes_the_pmc_off_its_cpu() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    s.start(p, id).unwrap();
    s.m.switch_in(2, t.tid);
    let runcount = || {
        let mut n = None;
        s.module().driver().for_each_pmc(|v| {
            if v.id == id {
                n = Some(v.runcount);
            }
        });
        n.expect("the PMC exists")
    };
    let armed = || {
        s.m.soft_events()
            .iter()
            .find(|e| e.name == "CLOCK.HARD")
            .unwrap()
            .running
    };
    assert_eq!((runcount(), armed()), (1, 1));
    s.detach(p, id, t.pid as i32).unwrap();
    assert_eq!(s.m.proc_info(t.pid).unwrap().flags & kpi::proc::P_HWPMC, 0);
    assert_eq!((runcount(), armed()), (0, 0), "still loaded on CPU 2");
    s.m.tick(2);
    s.m.switch_out(2);
    // Started again on a new target, it runs on that target's CPU only.
    let t2 = s.root();
    s.stop(p, id).unwrap();
    s.attach(p, id, t2.pid as i32).unwrap();
    s.start(p, id).unwrap();
    s.m.switch_in(2, t2.tid);
    assert_eq!((runcount(), armed()), (1, 1));
    s.m.switch_out(2);
    assert_eq!((runcount(), armed()), (0, 0));
    s.release(p, id).unwrap();
    s.finish();
}

#[test]
fn owner_exit_before_its_target_releases_the_pmcs() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    s.start(p, id).unwrap();
    s.run(t, 1, 2);
    s.m.exit(p.pid);
    assert_eq!(
        s.module().driver().target_count(),
        0,
        "the target is no longer monitored"
    );
    s.run(t, 1, 2);
    assert_eq!(s.m.proc_info(t.pid).unwrap().flags & kpi::proc::P_HWPMC, 0);
    s.finish();
}

#[test]
fn row_exhaustion_then_release_in_reverse_order() {
    let s = Sim::new();
    let p = s.root();
    let ev = s.soft("CLOCK.HARD");
    let ids: Vec<PmcId> = (0..16)
        .map(|_| {
            s.allocate(p, PmcClass::Soft, ev, PmcMode::Tc, 0, PmcFlags::empty())
                .unwrap()
        })
        .collect();
    let rows: std::collections::BTreeSet<u32> =
        ids.iter().map(|&i| pmc_id_to_rowindex(i)).collect();
    assert_eq!(rows.len(), 16, "one row each");
    assert_eq!(
        s.allocate(p, PmcClass::Soft, ev, PmcMode::Tc, 0, PmcFlags::empty()),
        Err(EINVAL)
    );
    for id in ids.iter().rev() {
        s.release(p, *id).unwrap();
    }
    assert!(
        s.allocate(p, PmcClass::Soft, ev, PmcMode::Tc, 0, PmcFlags::empty())
            .is_ok()
    );
    s.finish();
}

#[test]
fn descendants_follow_a_32_child_fork_storm_and_counts_aggregate() {
    let s = Sim::new();
    let owner = s.root();
    let parent = s.root();
    let id = s
        .allocate(
            owner,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Tc,
            0,
            PmcFlags::DESCENDANTS,
        )
        .unwrap();
    s.attach(owner, id, parent.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    let mut kids = Vec::new();
    for i in 0..32 {
        let k = s.fork(parent);
        kids.push(k);
        s.run(k, (i % 3) as u32 + 1, 1);
    }
    // Grandchildren too.
    let g = s.fork(kids[5]);
    s.run(g, 1, 10);
    s.run(parent, 2, 2);
    assert_eq!(s.module().driver().target_count(), 34);
    assert_eq!(s.read(owner, id), Ok(32 + 10 + 2));
    for k in &kids {
        s.m.exit(k.pid);
    }
    assert_eq!(s.module().driver().target_count(), 2);
    assert_eq!(
        s.read(owner, id),
        Ok(44),
        "exited children keep their counts in the total"
    );
    s.finish();
}

#[test]
fn attach_with_descendants_covers_existing_children() {
    let s = Sim::new();
    let owner = s.root();
    let parent = s.root();
    let kids: Vec<P> = (0..3).map(|_| s.fork(parent)).collect();
    let id = s
        .allocate(
            owner,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Tc,
            0,
            PmcFlags::DESCENDANTS,
        )
        .unwrap();
    s.attach(owner, id, parent.pid as i32).unwrap();
    assert_eq!(s.module().driver().target_count(), 4);
    s.start(owner, id).unwrap();
    for k in &kids {
        s.run(*k, 1, 2);
    }
    assert_eq!(s.read(owner, id), Ok(6));
    s.detach(owner, id, parent.pid as i32).unwrap();
    assert_eq!(s.module().driver().target_count(), 0);
    s.finish();
}

#[test]
fn the_four_modes_and_their_ids() {
    let s = Sim::new();
    let p = s.root();
    let ev = s.soft("CLOCK.HARD");
    for (mode, cpu) in [
        (PmcMode::Ss, 1),
        (PmcMode::Sc, 2),
        (PmcMode::Ts, 0),
        (PmcMode::Tc, 0),
    ] {
        let id = s
            .allocate(p, PmcClass::Soft, ev, mode, cpu, PmcFlags::empty())
            .unwrap();
        assert_eq!(pmc_id_to_mode(id), mode.raw());
        assert_eq!(pmc_id_to_class(id), PmcClass::Soft.raw());
        assert_eq!(
            pmc_id_to_cpu(id),
            if mode.is_system() { cpu } else { 0xFFF }
        );
        let info = s
            .pmcinfo(p, if mode.is_system() { cpu as i32 } else { 0 })
            .unwrap();
        let disp = info[pmc_id_to_rowindex(id) as usize].pm_rowdisp;
        let want = if mode.is_system() {
            PmcDisp::Standalone
        } else {
            PmcDisp::Thread
        };
        assert_eq!(disp, want.raw(), "{mode:?}");
    }
    s.finish();
}

#[test]
fn dispositions_keep_system_and_process_pmcs_on_separate_rows() {
    let s = Sim::new();
    let p = s.root();
    let ev = s.soft("CLOCK.HARD");
    let sys = s
        .allocate(p, PmcClass::Soft, ev, PmcMode::Sc, 0, PmcFlags::empty())
        .unwrap();
    let virt = s
        .allocate(p, PmcClass::Soft, ev, PmcMode::Tc, 0, PmcFlags::empty())
        .unwrap();
    assert_ne!(pmc_id_to_rowindex(sys), pmc_id_to_rowindex(virt));
    let info = s.pmcinfo(p, 3).unwrap();
    assert_eq!(
        info[pmc_id_to_rowindex(sys) as usize].pm_rowdisp,
        PmcDisp::Standalone.raw()
    );
    assert_eq!(
        info[pmc_id_to_rowindex(virt) as usize].pm_rowdisp,
        PmcDisp::Thread.raw()
    );
    assert_eq!(info[15].pm_rowdisp, PmcDisp::Free.raw());
    s.release(p, sys).unwrap();
    s.release(p, virt).unwrap();
    let info = s.pmcinfo(p, 3).unwrap();
    assert!(info.iter().all(|i| i.pm_rowdisp == PmcDisp::Free.raw()));
    s.finish();
}

#[test]
fn pmcadmin_disables_and_frees_rows() {
    let s = Sim::new();
    let p = s.root();
    s.admin(p, 1, 0, PmcState::Disabled).unwrap();
    let info = s.pmcinfo(p, 1).unwrap();
    assert_eq!(info[0].pm_enabled, 0);
    assert_eq!(info[0].pm_rowdisp, PmcDisp::Standalone.raw());
    assert_eq!(&info[0].pm_name[..6], b"SOFT0\0");
    // A standalone row takes no process PMC.
    let id = s.soft_tc(p);
    assert_eq!(pmc_id_to_rowindex(id), 1);
    s.admin(p, 1, 0, PmcState::Free).unwrap();
    s.admin(p, 1, 0, PmcState::Free).unwrap(); // already free: no-op
    assert_eq!(s.pmcinfo(p, 1).unwrap()[0].pm_enabled, 1);
    s.finish();
}

#[test]
fn flags_accepted_and_refused() {
    let s = Sim::new();
    let p = s.root();
    let ev = s.soft("CLOCK.HARD");
    let ok = [
        (PmcMode::Tc, PmcFlags::DESCENDANTS),
        (PmcMode::Ts, PmcFlags::CALLCHAIN),
        (PmcMode::Ts, PmcFlags::CALLCHAIN | PmcFlags::USERCALLCHAIN),
        (PmcMode::Ss, PmcFlags::CALLCHAIN | PmcFlags::USERCALLCHAIN),
        (PmcMode::Tc, PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT),
        (PmcMode::Sc, PmcFlags::DESCENDANTS),
        (PmcMode::Tc, PmcFlags::EV_PMU),
    ];
    for (mode, flags) in ok {
        let id = s
            .allocate(p, PmcClass::Soft, ev, mode, 0, flags)
            .unwrap_or_else(|e| panic!("{mode:?} {flags:?}: {e}"));
        s.release(p, id).unwrap();
    }
    s.finish();
}

#[test]
fn sampling_counts_are_raised_to_mincount() {
    let s = Sim::with(MachineConfig::default(), &[("kern.hwpmc.mincount", "5000")]);
    let p = s.root();
    let ev = s.soft("CLOCK.HARD");
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = ev;
    a.pm_mode = PmcMode::Ts.raw();
    a.pm_cpu = PMC_CPU_ANY;
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = 10;
    let id = s.allocate_raw(p, &a).unwrap();
    s.attach(p, id, 0).unwrap();
    s.start(p, id).unwrap();
    s.m.switch_in(3, p.tid);
    let info = s.pmcinfo(p, 3).unwrap();
    assert_eq!(info[pmc_id_to_rowindex(id) as usize].pm_reloadcount, 5000);
    s.m.switch_out(3);
    s.stop(p, id).unwrap();
    s.setcount(p, id, 6000).unwrap();
    s.m.sysctl_set("kern.hwpmc.mincount", 7000);
    s.setcount(p, id, 6000).unwrap();
    s.start(p, id).unwrap();
    s.m.switch_in(3, p.tid);
    assert_eq!(
        s.pmcinfo(p, 3).unwrap()[pmc_id_to_rowindex(id) as usize].pm_reloadcount,
        7000
    );
    s.m.switch_out(3);
    s.finish();
}

#[test]
fn exec_releases_an_owners_pmcs_and_setid_exec_detaches_unprivileged_owners() {
    let s = Sim::new();
    let owner = s.user(1001);
    let target = s.user(1001);
    let id = s.soft_tc(owner);
    s.attach(owner, id, target.pid as i32).unwrap();
    s.m.exec(target.pid, "/usr/bin/make", None);
    assert_eq!(
        s.module().driver().target_count(),
        1,
        "a plain exec keeps the target"
    );
    s.m.exec(target.pid, "/usr/bin/su", Some(Cred::root()));
    assert_eq!(
        s.module().driver().target_count(),
        0,
        "the owner may not follow a set-uid exec"
    );
    let root = s.root();
    let rid = s.soft_tc(root);
    let t2 = s.user(1001);
    s.attach(root, rid, t2.pid as i32).unwrap();
    s.m.exec(t2.pid, "/usr/bin/su", Some(Cred::root()));
    assert_eq!(s.module().driver().target_count(), 1, "root may follow");
    s.m.exec(root.pid, "/bin/sh", None);
    assert_eq!(
        s.release(root, rid),
        Err(ESRCH),
        "PMCs do not survive their owner's exec"
    );
    s.finish();
}

#[test]
fn unload_with_live_owners_sends_sigbus_and_leaks_nothing() {
    let s = Sim::new();
    let (a, b, t) = (s.root(), s.root(), s.root());
    let ia = s.soft_tc(a);
    s.attach(a, ia, t.pid as i32).unwrap();
    s.start(a, ia).unwrap();
    let ib = s
        .allocate(
            b,
            PmcClass::Tsc,
            PMC_EV_TSC_TSC,
            PmcMode::Sc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.start(b, ib).unwrap();
    s.m.switch_in(1, t.tid);
    let (a_pid, b_pid, t_pid) = (a.pid, b.pid, t.pid);
    let m = s.m.clone();
    s.finish();
    assert!(m.signals().contains(&(a_pid, SIGBUS)));
    assert!(m.signals().contains(&(b_pid, SIGBUS)));
    assert!(
        !m.signals().contains(&(t_pid, SIGBUS)),
        "targets are not owners"
    );
    assert!(m.syscalls().is_empty(), "the system call is gone");
}

#[test]
fn getcpuinfo_getcaps_dyneventinfo_and_driverstats() {
    let s = Sim::new();
    let p = s.root();
    let ci = s.cpuinfo(p);
    assert_eq!(ci.pm_cputype, PmcCputype::Generic.raw());
    assert_eq!((ci.pm_ncpu, ci.pm_npmc, ci.pm_nclass), (4, 17, 2));
    assert_eq!(
        ci.pm_classes[0],
        PmcClassinfo {
            pm_class: PmcClass::Soft.raw(),
            pm_caps: 0x67,
            pm_width: 64,
            pm_num: 16
        }
    );
    assert_eq!(
        ci.pm_classes[1],
        PmcClassinfo {
            pm_class: PmcClass::Tsc.raw(),
            pm_caps: 0x20,
            pm_width: 64,
            pm_num: 1
        }
    );
    let id = s.soft_tc(p);
    assert_eq!(s.getcaps(p, id), Ok(PmcCaps::from_bits_retain(0x67)));

    let mut b = vec![0u8; core::mem::size_of::<PmcOpGetdyneventinfo>()];
    b[..4].copy_from_slice(&PmcClass::Soft.raw().to_ne_bytes());
    s.call_bytes(p, PmcOp::Getdyneventinfo.raw(), &mut b)
        .unwrap();
    let n = u32::from_ne_bytes(b[4..8].try_into().unwrap()) as usize;
    let names: Vec<String> = (0..n)
        .map(|i| {
            let d = &b[8 + i * 68..8 + (i + 1) * 68];
            String::from_utf8(c_field_str(&d[..64]).to_vec()).unwrap()
        })
        .collect();
    assert_eq!(
        names,
        [
            "CLOCK.HARD",
            "CLOCK.STAT",
            "CLOCK.PROF",
            "PAGE_FAULT.ALL",
            "PAGE_FAULT.READ",
            "PAGE_FAULT.WRITE"
        ]
    );
    b[..4].copy_from_slice(&PmcClass::Tsc.raw().to_ne_bytes());
    assert_eq!(
        s.call_bytes(p, PmcOp::Getdyneventinfo.raw(), &mut b),
        Err(EINVAL)
    );

    let before = s.stats(p);
    assert_eq!(s.start(p, 0xFFFF_FFFF), Err(EINVAL));
    let after = s.stats(p);
    assert_eq!(
        after.pm_syscalls - before.pm_syscalls,
        2,
        "the failed call and this one"
    );
    assert_eq!(after.pm_syscall_errors - before.pm_syscall_errors, 1);
    assert_eq!(s.call_bad_pointer(p, PmcOp::Getdriverstats), Err(EFAULT));
    s.finish();
}

#[test]
fn soft_events_count_only_while_armed() {
    let s = Sim::new();
    let p = s.root();
    let pf = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("PAGE_FAULT.ALL"),
            PmcMode::Sc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.m.switch_in(0, p.tid);
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    s.m.switch_out(0);
    s.start(p, pf).unwrap();
    s.m.switch_in(0, p.tid);
    for _ in 0..5 {
        s.m.soft_event(0, "PAGE_FAULT.ALL");
    }
    s.m.soft_event(0, "CLOCK.STAT");
    s.m.switch_out(0);
    assert_eq!(s.read(p, pf), Ok(5));
    let st = s.stats(p);
    assert_eq!(st.pm_intr_processed, 5);
    s.finish();
}

/// An owner that reads its own counting SOFT PMC while it runs gets the
/// slices it was switched out of and what the running slice counted so
/// far: the row counts the slice from zero, and the read adds the total.
/// A second thread's slice on another CPU is in the total once it ends.
#[test]
fn an_owner_reads_its_own_running_soft_counter_whole() {
    let s = Sim::new();
    let p = s.root();
    let pf = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("PAGE_FAULT.ALL"),
            PmcMode::Tc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.attach(p, pf, p.pid as i32).unwrap();
    s.start(p, pf).unwrap();
    let events = |cpu, n| {
        for _ in 0..n {
            s.m.soft_event(cpu, "PAGE_FAULT.ALL");
        }
    };
    s.m.switch_in(0, p.tid);
    events(0, 3);
    s.m.switch_out(0);
    s.m.switch_in(1, p.tid);
    events(1, 2);
    assert_eq!(s.read(p, pf), Ok(5), "3 switched out, 2 running");
    events(1, 4);
    assert_eq!(s.read(p, pf), Ok(9), "the running slice goes on");
    s.m.switch_out(1);
    assert_eq!(s.read(p, pf), Ok(9), "read switched in for the call");
    let t2 = s.m.thread_create(p.pid);
    s.m.switch_in(2, t2);
    events(2, 6);
    s.m.switch_in(0, p.tid);
    events(0, 1);
    assert_eq!(s.read(p, pf), Ok(10), "the other thread's slice still runs");
    s.m.switch_out(2);
    assert_eq!(s.read(p, pf), Ok(16), "and is in the total once it ends");
    s.m.switch_out(0);
    assert_eq!(s.read(p, pf), Ok(16));
    s.finish();
}

//! One test for each row of the ERRORS section of hwpmc(4), named after it.
//! Rows that need the log file or a class with RDPMC are in the sampling
//! and backend work; see the note in README.md.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use ksim::{CpuState, Cred, MachineConfig};
use uapi::Plain;
use uapi::pmc::*;
use uapi::pmc_events::PMC_EV_TSC_TSC;

fn soft_sc(s: &Sim, p: P, cpu: u32) -> Result<PmcId, Errno> {
    s.allocate(
        p,
        PmcClass::Soft,
        s.soft("CLOCK.HARD"),
        PmcMode::Sc,
        cpu,
        PmcFlags::empty(),
    )
}

#[test]
fn ebusy_pmcadmin_disable_of_a_row_used_by_process_pmcs() {
    let s = Sim::new();
    let root = s.root();
    let id = s.soft_tc(root);
    let ri = pmc_id_to_rowindex(id) as i32;
    assert_eq!(s.admin(root, 0, ri, PmcState::Disabled), Err(EBUSY));
    s.finish();
}

#[test]
fn ebusy_pmcadmin_on_a_row_with_an_active_system_pmc() {
    let s = Sim::new();
    let root = s.root();
    let id = soft_sc(&s, root, 1).unwrap();
    let ri = pmc_id_to_rowindex(id) as i32;
    assert_eq!(s.admin(root, 1, ri, PmcState::Disabled), Err(EBUSY));
    s.finish();
}

#[test]
fn ebusy_pmcattach_to_a_target_another_pmc_uses_the_row_of() {
    let s = Sim::new();
    let (a, b, t) = (s.root(), s.root(), s.root());
    let pa = s.soft_tc(a);
    let pb = s.soft_tc(b);
    assert_eq!(
        pmc_id_to_rowindex(pa),
        pmc_id_to_rowindex(pb),
        "both take the first free row"
    );
    s.attach(a, pa, t.pid as i32).unwrap();
    assert_eq!(s.attach(b, pb, t.pid as i32), Err(EBUSY));
    s.finish();
}

#[test]
fn ebusy_pmcrw_write_to_a_running_pmc() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    assert_eq!(s.write(p, id, 5), Err(EBUSY));
    assert!(s.read(p, id).is_ok(), "reading a running PMC is allowed");
    s.finish();
}

#[test]
fn ebusy_pmcsetcount_on_a_running_pmc() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    assert_eq!(s.setcount(p, id, 100), Err(EBUSY));
    s.stop(p, id).unwrap();
    assert_eq!(s.setcount(p, id, 100), Ok(()));
    s.finish();
}

#[test]
fn ebusy_pmcattach_of_a_running_pmc() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    assert_eq!(s.attach(p, id, t.pid as i32), Err(EBUSY));
    s.finish();
}

#[test]
fn edoofus_pmcstart_of_a_log_procexit_or_log_proccsw_pmc_without_a_log() {
    let s = Sim::new();
    let p = s.root();
    for flag in [PmcFlags::LOG_PROCEXIT, PmcFlags::LOG_PROCCSW] {
        let id = s
            .allocate(
                p,
                PmcClass::Soft,
                s.soft("CLOCK.HARD"),
                PmcMode::Tc,
                0,
                flag,
            )
            .unwrap();
        assert_eq!(s.start(p, id), Err(EDOOFUS));
        s.release(p, id).unwrap();
    }
    s.finish();
}

#[test]
fn edoofus_pmcstart_of_a_system_sampling_pmc_without_a_log() {
    let s = Sim::new();
    let p = s.root();
    let id = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Ss,
            2,
            PmcFlags::empty(),
        )
        .unwrap();
    assert_eq!(s.start(p, id), Err(EDOOFUS));
    s.finish();
}

#[test]
fn edoofus_pmcstart_of_a_process_sampling_pmc_attached_to_another_process_without_a_log() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let own = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Ts,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.start(p, own)
        .expect("a sampling PMC on its owner needs no log");
    let other = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.STAT"),
            PmcMode::Ts,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.attach(p, other, t.pid as i32).unwrap();
    assert_eq!(s.start(p, other), Err(EDOOFUS));
    s.finish();
}

#[test]
fn eexist_pmcattach_reissued_for_a_current_target() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    assert_eq!(s.attach(p, id, t.pid as i32), Err(EEXIST));
    s.finish();
}

#[test]
fn efault_bad_address_passed_to_the_driver() {
    let s = Sim::new();
    let p = s.root();
    for op in [
        PmcOp::Pmcallocate,
        PmcOp::Getcpuinfo,
        PmcOp::Getmoduleversion,
        PmcOp::Pmcattach,
        PmcOp::Getpmcinfo,
    ] {
        assert_eq!(s.call_bad_pointer(p, op), Err(EFAULT), "{op:?}");
    }
    s.finish();
}

#[test]
fn einval_invalid_pmc_handle() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    let forged = pmc_id_make_id(
        0xFFF,
        PmcMode::Tc.raw(),
        PmcClass::Soft.raw(),
        pmc_id_to_rowindex(id) + 1,
    );
    assert_eq!(s.start(p, forged), Err(EINVAL));
    assert_eq!(s.start(p, id | 0x00FF_0000), Err(EINVAL), "mode 0xF");
    assert_eq!(
        s.start(p, 0xFFFF_FFFF),
        Err(EINVAL),
        "row 0xFF does not exist"
    );
    s.finish();
}

#[test]
fn einval_getpmcinfo_invalid_cpu_number() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(s.pmcinfo(p, 4).err(), Some(EINVAL));
    assert_eq!(s.pmcinfo(p, -1).err(), Some(EINVAL));
    s.finish();
}

#[test]
fn einval_configurelog_unknown_flags() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(s.configurelog(p, -1, 1), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_configurelog_deconfigure_without_a_log() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(s.configurelog(p, -1, 0), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_flushlog_without_a_log() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(
        s.call(p, PmcOp::Flushlog, &mut 0u32),
        Err(EINVAL),
        "no owner"
    );
    s.soft_tc(p);
    assert_eq!(
        s.call(p, PmcOp::Flushlog, &mut 0u32),
        Err(EINVAL),
        "owner without a log"
    );
    s.finish();
}

#[test]
fn einval_pmcadmin_invalid_cpu_number() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(s.admin(p, 4, 0, PmcState::Disabled), Err(EINVAL));
    assert_eq!(s.admin(p, -1, 0, PmcState::Disabled), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcadmin_invalid_operation_request() {
    let s = Sim::new();
    let p = s.root();
    for state in [
        PmcState::Allocated,
        PmcState::Running,
        PmcState::Stopped,
        PmcState::Deleted,
    ] {
        assert_eq!(s.admin(p, 0, 0, state), Err(EINVAL), "{state:?}");
    }
    s.finish();
}

#[test]
fn einval_pmcadmin_invalid_pmc_id() {
    let s = Sim::new();
    let p = s.root();
    let npmc = s.cpuinfo(p).pm_npmc as i32;
    assert_eq!(s.admin(p, 0, npmc, PmcState::Disabled), Err(EINVAL));
    assert_eq!(s.admin(p, 0, -1, PmcState::Disabled), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcallocate_no_pmc_matches_the_request() {
    let s = Sim::new();
    let p = s.root();
    // A soft event code nobody registered.
    assert_eq!(
        s.allocate(
            p,
            PmcClass::Soft,
            0x20FFF,
            PmcMode::Tc,
            0,
            PmcFlags::empty()
        ),
        Err(EINVAL)
    );
    // TSC counts only system-wide.
    assert_eq!(
        s.allocate(
            p,
            PmcClass::Tsc,
            PMC_EV_TSC_TSC,
            PmcMode::Tc,
            0,
            PmcFlags::empty()
        ),
        Err(EINVAL)
    );
    s.finish();
}

#[test]
fn einval_pmcallocate_invalid_mode() {
    let s = Sim::new();
    let p = s.root();
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    a.pm_mode = 4;
    a.pm_cpu = PMC_CPU_ANY;
    a.pm_caps = PmcCaps::READ.bits();
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcallocate_invalid_cpu_number() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(soft_sc(&s, p, 4), Err(EINVAL));
    assert_eq!(soft_sc(&s, p, 0x7FFF_FFFF), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcallocate_process_pmc_with_a_cpu_other_than_pmc_cpu_any() {
    let s = Sim::new();
    let p = s.root();
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    a.pm_mode = PmcMode::Tc.raw();
    a.pm_cpu = 0;
    a.pm_caps = PmcCaps::READ.bits();
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcallocate_system_pmc_with_pmc_cpu_any() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(soft_sc(&s, p, PMC_CPU_ANY), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcallocate_unknown_flags() {
    let s = Sim::new();
    let p = s.root();
    let ev = s.soft("CLOCK.HARD");
    for bits in [
        1u32 << 31,
        PmcFlags::ATTACHED_TO_OWNER.bits(),
        PmcFlags::NEEDS_LOGFILE.bits(),
        PmcFlags::OLDVALUE.bits(),
        0x40,
    ] {
        let flags = PmcFlags::from_bits_retain(bits);
        assert_eq!(
            s.allocate(p, PmcClass::Soft, ev, PmcMode::Tc, 0, flags),
            Err(EINVAL),
            "{bits:#x}"
        );
    }
    // USERCALLCHAIN needs CALLCHAIN and a sampling mode; the log flags
    // need a process mode.
    assert_eq!(
        s.allocate(
            p,
            PmcClass::Soft,
            ev,
            PmcMode::Ts,
            0,
            PmcFlags::USERCALLCHAIN
        ),
        Err(EINVAL)
    );
    assert_eq!(
        s.allocate(
            p,
            PmcClass::Soft,
            ev,
            PmcMode::Tc,
            0,
            PmcFlags::USERCALLCHAIN | PmcFlags::CALLCHAIN
        ),
        Err(EINVAL)
    );
    assert_eq!(
        s.allocate(
            p,
            PmcClass::Soft,
            ev,
            PmcMode::Sc,
            0,
            PmcFlags::LOG_PROCEXIT
        ),
        Err(EINVAL)
    );
    s.finish();
}

#[test]
fn einval_pentium4_htt_per_logical_cpu_check_has_no_p4_class_to_apply_to() {
    // The P4 class (and its HTT restriction) is gone; a request for its old
    // class number finds no class.
    let s = Sim::new();
    let p = s.root();
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = 0x05;
    a.pm_mode = PmcMode::Tc.raw();
    a.pm_cpu = PMC_CPU_ANY;
    assert_eq!(s.allocate_raw(p, &a), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcattach_or_pmcdetach_of_a_system_pmc() {
    let s = Sim::new();
    let p = s.root();
    let id = soft_sc(&s, p, 0).unwrap();
    assert_eq!(s.attach(p, id, 0), Err(EINVAL));
    assert_eq!(s.detach(p, id, 0), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcattach_or_pmcdetach_illegal_pid() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    assert_eq!(s.attach(p, id, -5), Err(EINVAL));
    assert_eq!(s.detach(p, id, -1), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcdetach_of_a_pmc_not_attached_to_the_target() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let a = s.soft_tc(p);
    let b = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.STAT"),
            PmcMode::Tc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    s.attach(p, a, t.pid as i32).unwrap();
    assert_eq!(s.detach(p, b, t.pid as i32), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcrw_illegal_flags() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    assert_eq!(s.rw(p, id, PmcFlags::empty(), 0), Err(EINVAL));
    assert_eq!(s.rw(p, id, PmcFlags::DESCENDANTS, 0), Err(EINVAL));
    s.finish();
}

#[test]
fn einval_pmcgetmsr_of_a_system_descendants_or_shared_pmc() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let sys = s
        .allocate(
            p,
            PmcClass::Tsc,
            PMC_EV_TSC_TSC,
            PmcMode::Sc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    assert_eq!(s.getmsr(p, sys), Err(EINVAL), "system mode");
    let desc = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Tc,
            0,
            PmcFlags::DESCENDANTS,
        )
        .unwrap();
    s.attach(p, desc, 0).unwrap();
    assert_eq!(s.getmsr(p, desc), Err(EINVAL), "DESCENDANTS");
    let other = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.STAT"),
            PmcMode::Tc,
            0,
            PmcFlags::empty(),
        )
        .unwrap();
    assert_eq!(s.getmsr(p, other), Err(EINVAL), "no target");
    s.attach(p, other, t.pid as i32).unwrap();
    assert_eq!(
        s.getmsr(p, other),
        Err(EINVAL),
        "attached to another process"
    );
    s.attach(p, other, 0).unwrap();
    assert_eq!(
        s.getmsr(p, other),
        Err(EINVAL),
        "attached to the owner and another"
    );
    s.finish();
}

#[test]
fn einval_writelog_without_a_log() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(
        s.call(p, PmcOp::Writelog, &mut PmcOpWritelog { pm_userdata: 7 }),
        Err(EINVAL)
    );
    s.soft_tc(p);
    assert_eq!(
        s.call(p, PmcOp::Writelog, &mut PmcOpWritelog { pm_userdata: 7 }),
        Err(EINVAL)
    );
    s.finish();
}

#[test]
fn enomem_kernel_memory_cannot_be_allocated() {
    let s = Sim::new();
    let p = s.root();
    s.m.fail_alloc_in(1);
    assert_eq!(
        s.allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Tc,
            0,
            PmcFlags::empty()
        ),
        Err(ENOMEM)
    );
    s.finish();
}

#[test]
fn enosys_pmcgetmsr_where_the_class_has_no_rdpmc() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    s.attach(p, id, 0).unwrap();
    assert_eq!(s.getmsr(p, id), Err(ENOSYS));
    s.finish();
}

#[test]
fn enxio_getpmcinfo_on_an_absent_or_disabled_cpu() {
    let cfg = MachineConfig {
        cpus: vec![
            CpuState::Online,
            CpuState::Absent,
            CpuState::Disabled,
            CpuState::Online,
        ],
        ..MachineConfig::default()
    };
    let s = Sim::with(cfg, &[]);
    let p = s.root();
    assert_eq!(s.pmcinfo(p, 1).err(), Some(ENXIO));
    assert_eq!(s.pmcinfo(p, 2).err(), Some(ENXIO));
    assert!(s.pmcinfo(p, 3).is_ok());
    s.finish();
}

#[test]
fn enxio_pmcallocate_system_pmc_on_an_absent_or_disabled_cpu() {
    let cfg = MachineConfig {
        cpus: vec![
            CpuState::Online,
            CpuState::Absent,
            CpuState::Disabled,
            CpuState::Online,
        ],
        ..MachineConfig::default()
    };
    let s = Sim::with(cfg, &[]);
    let p = s.root();
    assert_eq!(soft_sc(&s, p, 1), Err(ENXIO));
    assert_eq!(soft_sc(&s, p, 2), Err(ENXIO));
    assert!(soft_sc(&s, p, 3).is_ok());
    s.finish();
}

#[test]
fn enxio_pmcstart_or_pmcstop_of_a_system_pmc_whose_cpu_went_away() {
    let s = Sim::new();
    let p = s.root();
    let id = soft_sc(&s, p, 3).unwrap();
    s.m.set_cpu_state(3, CpuState::Disabled);
    assert_eq!(s.start(p, id), Err(ENXIO));
    s.m.set_cpu_state(3, CpuState::Online);
    s.start(p, id).unwrap();
    s.m.set_cpu_state(3, CpuState::Disabled);
    assert_eq!(s.stop(p, id), Err(ENXIO));
    s.m.set_cpu_state(3, CpuState::Online);
    s.finish();
}

#[test]
fn eopnotsupp_pmcallocate_capability_the_class_lacks() {
    let s = Sim::new();
    let p = s.root();
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = PmcClass::Tsc.raw();
    a.pm_ev = PMC_EV_TSC_TSC;
    a.pm_mode = PmcMode::Sc.raw();
    a.pm_cpu = 0;
    a.pm_caps = (PmcCaps::READ | PmcCaps::WRITE).bits();
    assert_eq!(s.allocate_raw(p, &a), Err(EOPNOTSUPP));
    a.pm_caps = PmcCaps::PRECISE.bits();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    assert_eq!(s.allocate_raw(p, &a), Err(EOPNOTSUPP));
    s.finish();
}

#[test]
fn eopnotsupp_sampling_pmc_where_the_counter_cannot_interrupt() {
    // The i386-without-APIC row: a sampling PMC needs PMC_CAP_INTERRUPT,
    // which the TSC does not have.
    let s = Sim::new();
    let p = s.root();
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = PmcClass::Tsc.raw();
    a.pm_ev = PMC_EV_TSC_TSC;
    a.pm_mode = PmcMode::Ss.raw();
    a.pm_cpu = 0;
    a.pm_caps = PmcCaps::READ.bits();
    assert_eq!(s.allocate_raw(p, &a), Err(EOPNOTSUPP));
    s.finish();
}

#[test]
fn eperm_pmcadmin_without_privilege_or_in_a_jail() {
    let s = Sim::new();
    let user = s.user(1001);
    let jailed_root = s.spawn(Cred::root().in_jail(3), "jailed");
    assert_eq!(s.admin(user, 0, 0, PmcState::Disabled), Err(EPERM));
    assert_eq!(s.admin(jailed_root, 0, 0, PmcState::Disabled), Err(EPERM));
    s.finish();
}

#[test]
fn eperm_pmcattach_to_a_process_the_caller_may_not_debug() {
    let s = Sim::new();
    let user = s.user(1001);
    let other = s.user(1002);
    let wall = s.user(1001);
    s.m.exec(
        wall.pid,
        "/usr/bin/wall",
        Some(Cred {
            gid: 5,
            svgid: 5,
            ..Cred::user(1001)
        }),
    );
    let id = s.soft_tc(user);
    assert_eq!(
        s.attach(user, id, other.pid as i32),
        Err(EPERM),
        "other uid"
    );
    assert_eq!(
        s.attach(user, id, wall.pid as i32),
        Err(EPERM),
        "set-gid target"
    );
    s.m.sysctl_set("security.bsd.unprivileged_proc_debug", 0);
    let mine = s.user(1001);
    assert_eq!(
        s.attach(user, id, mine.pid as i32),
        Err(EPERM),
        "unprivileged_proc_debug=0"
    );
    s.finish();
}

#[test]
fn eperm_system_pmc_without_privilege_unless_unprivileged_syspmcs() {
    let s = Sim::new();
    let user = s.user(1001);
    assert_eq!(soft_sc(&s, user, 0), Err(EPERM));
    s.m.sysctl_set("security.bsd.unprivileged_syspmcs", 1);
    assert!(soft_sc(&s, user, 0).is_ok());
    let jailed_root = s.spawn(Cred::root().in_jail(3), "jailed");
    assert_eq!(
        soft_sc(&s, jailed_root, 1),
        Err(EPERM),
        "a jail never gets system PMCs"
    );
    s.finish();
}

#[test]
fn esrch_request_from_a_process_with_no_pmcs() {
    let s = Sim::new();
    let (owner, stranger) = (s.root(), s.root());
    let id = s.soft_tc(owner);
    assert_eq!(s.start(stranger, id), Err(ESRCH));
    assert_eq!(s.read(stranger, id), Err(ESRCH));
    assert_eq!(s.release(stranger, id), Err(ESRCH));
    assert_eq!(s.getcaps(stranger, id), Err(ESRCH));
    s.finish();
}

#[test]
fn esrch_request_after_the_pmc_was_detached_from_all_targets() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.attach(p, id, t.pid as i32).unwrap();
    s.detach(p, id, t.pid as i32).unwrap();
    assert_eq!(s.start(p, id), Err(ESRCH));
    s.finish();
}

#[test]
fn esrch_pmcattach_or_pmcdetach_of_a_nonexistent_process() {
    let s = Sim::new();
    let p = s.root();
    let id = s.soft_tc(p);
    assert_eq!(s.attach(p, id, 99_999), Err(ESRCH));
    assert_eq!(s.detach(p, id, 99_999), Err(ESRCH));
    s.finish();
}

#[test]
fn esrch_pmcdetach_of_a_process_hwpmc_does_not_monitor() {
    let s = Sim::new();
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    assert_eq!(s.detach(p, id, t.pid as i32), Err(ESRCH));
    s.finish();
}

#[test]
fn eprogmismatch_getmoduleversion_from_a_newer_client() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(
        s.module_version(p, PMC_VERSION + 0x0001_0000),
        Err(EPROGMISMATCH),
        "newer minor"
    );
    assert_eq!(
        s.module_version(p, 0x0B00_0000),
        Err(EPROGMISMATCH),
        "newer major"
    );
    assert_eq!(s.module_version(p, PMC_VERSION), Ok(PMC_VERSION));
    assert_eq!(
        s.module_version(p, 0x0A00_0000),
        Ok(PMC_VERSION),
        "older minor is served"
    );
    assert_eq!(
        s.module_version(p, PMC_VERSION | 0xFFFF),
        Ok(PMC_VERSION),
        "patch level is not compared"
    );
    s.finish();
}

#[test]
fn eperm_system_pmc_on_a_row_disabled_by_pmcadmin() {
    let s = Sim::new();
    let root = s.root();
    // Disable every SOFT row on CPU 2: no system SOFT PMC fits there.
    for ri in 0..16 {
        s.admin(root, 2, ri, PmcState::Disabled).unwrap();
    }
    assert_eq!(soft_sc(&s, root, 2), Err(EPERM));
    assert!(soft_sc(&s, root, 1).is_ok(), "other CPUs are unaffected");
    s.finish();
}

#[test]
fn eagain_configurelog_cannot_create_the_helper_process() {
    let s = Sim::new();
    let p = s.root();
    s.soft_tc(p); // an owner already: the next allocations are the log's
    let fd = s.open(p, ksim::FileKind::Regular, true);
    let mut results = Vec::new();
    for k in 1..32 {
        s.m.fail_alloc_in(k);
        let r = s.configurelog(p, fd, 0);
        s.m.clear_alloc_failure();
        results.push(r);
        if r.is_ok() {
            break;
        }
    }
    assert!(results.contains(&Err(EAGAIN)), "{results:?}");
    s.finish();
}

#[test]
fn ebusy_configurelog_while_a_log_is_active() {
    let s = Sim::new();
    let p = s.root();
    let a = s.open(p, ksim::FileKind::Regular, true);
    let b = s.open(p, ksim::FileKind::Regular, true);
    s.configurelog(p, a, 0).unwrap();
    assert_eq!(s.configurelog(p, b, 0), Err(EBUSY));
    s.finish();
}

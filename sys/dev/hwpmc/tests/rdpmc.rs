//! PMC_OP_PMCGETMSR with a class that has RDPMC, and the machine-dependent
//! plug-in point: a test class stands in for a hardware class whose rows
//! user code may read directly.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use hwpmc::hwpmc_class::{AllocRequest, PmcClassDep};
use hwpmc::{MachineDep, Pmc};
use kpi::KResult;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use ksim::MachineConfig;
use uapi::pmc::*;

/// Two rows whose RDPMC index is 0x40000000 + row, counting nothing by
/// themselves: the values are what was written.
struct RdpmcClass;

const EVENT: u32 = 0x1_2345;

impl PmcClassDep for RdpmcClass {
    fn class(&self) -> PmcClass {
        PmcClass::Iap
    }
    fn caps(&self) -> PmcCaps {
        PmcCaps::READ | PmcCaps::WRITE | PmcCaps::USER | PmcCaps::SYSTEM | PmcCaps::INTERRUPT
    }
    fn width(&self) -> u32 {
        48
    }
    fn num(&self) -> u32 {
        2
    }
    fn row_name(&self, ri: u32) -> [u8; PMC_NAME_MAX] {
        let mut n = [0; PMC_NAME_MAX];
        set_c_field_str(&mut n, if ri == 0 { b"IAP-0" } else { b"IAP-1" });
        n
    }
    fn pcpu_init(&self, _cpu: u32) -> KResult<()> {
        Ok(())
    }
    fn pcpu_fini(&self, _cpu: u32) {}
    fn allocate_pmc(&self, _cpu: u32, _ri: u32, req: &AllocRequest<'_>) -> KResult<()> {
        if req.raw.pm_class == PmcClass::Iap.raw() && req.raw.pm_ev == EVENT {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }
    fn config_pmc(&self, _cpu: u32, _ri: u32, _pm: Option<&KArc<Pmc>>) -> KResult<()> {
        Ok(())
    }
    fn read_pmc(&self, _cpu: u32, _ri: u32) -> KResult<u64> {
        Ok(0)
    }
    fn write_pmc(&self, _cpu: u32, _ri: u32, _value: u64) -> KResult<()> {
        Ok(())
    }
    fn start_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn stop_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn get_msr(&self, ri: u32) -> KResult<u32> {
        Ok(0x4000_0000 + ri)
    }
}

fn md(_ncpu: u32) -> KResult<MachineDep> {
    let mut classes = KVec::with_capacity(2, Wait::WaitOk)?;
    let tsc = KBox::try_new_unsize(hwpmc::hwpmc_tsc::TscClass, Wait::WaitOk, |b| {
        b as Box<dyn PmcClassDep>
    })?;
    let rdpmc = KBox::try_new_unsize(RdpmcClass, Wait::WaitOk, |b| b as Box<dyn PmcClassDep>)?;
    let _ = classes.push_within_capacity(tsc);
    let _ = classes.push_within_capacity(rdpmc);
    Ok(MachineDep {
        cputype: PmcCputype::IntelSkylake,
        classes,
        intr: None,
    })
}

fn iap_tc(s: &Sim, p: P) -> PmcId {
    s.allocate(p, PmcClass::Iap, EVENT, PmcMode::Tc, 0, PmcFlags::empty())
        .unwrap()
}

#[test]
fn machine_dependent_classes_follow_soft_in_cpuinfo_and_the_banner() {
    let s = Sim::with_md(MachineConfig::default(), &[], md);
    let p = s.root();
    let ci = s.cpuinfo(p);
    assert_eq!(ci.pm_cputype, PmcCputype::IntelSkylake.raw());
    assert_eq!((ci.pm_nclass, ci.pm_npmc), (3, 16 + 1 + 2));
    assert_eq!(ci.pm_classes[2].pm_class, PmcClass::Iap.raw());
    assert_eq!(ci.pm_classes[2].pm_width, 48);
    assert!(
        s.m.console()
            .last()
            .unwrap()
            .ends_with(" IAP/2/48/0x67<INT,USR,SYS,REA,WRI>")
    );
    let id = iap_tc(&s, p);
    assert_eq!(
        pmc_id_to_rowindex(id),
        17,
        "the first IAP row comes after SOFT and TSC"
    );
    s.finish();
}

#[test]
fn getmsr_gives_the_rdpmc_index_of_a_pmc_attached_to_its_owner_only() {
    let s = Sim::with_md(MachineConfig::default(), &[], md);
    let p = s.root();
    let id = iap_tc(&s, p);
    s.attach(p, id, 0).unwrap();
    assert_eq!(s.getmsr(p, id), Ok(0x4000_0000));
    s.finish();
}

#[test]
fn eperm_pmcattach_after_the_msr_was_retrieved() {
    let s = Sim::with_md(MachineConfig::default(), &[], md);
    let (p, t) = (s.root(), s.root());
    let id = iap_tc(&s, p);
    s.attach(p, id, 0).unwrap();
    s.getmsr(p, id).unwrap();
    assert_eq!(s.attach(p, id, t.pid as i32), Err(EPERM));
    // Detaching from the owner gives the PMC back to ordinary use.
    s.detach(p, id, 0).unwrap();
    assert_eq!(s.attach(p, id, t.pid as i32), Ok(()));
    s.finish();
}

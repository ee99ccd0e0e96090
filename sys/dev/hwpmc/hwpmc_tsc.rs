//! The TSC class (hwpmc_tsc.c): one read-only, shareable row per CPU that
//! counts in system counting mode only and reads the time-stamp counter.

use kpi::KResult;
use kpi::errno::EINVAL;
use kpi::malloc::KArc;
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcClass, PmcMode, set_c_field_str};
use uapi::pmc_events::PMC_EV_TSC_TSC;

use crate::Pmc;
use crate::hwpmc_class::{AllocRequest, PmcClassDep};

/// `MSR_TSC`, what GETMSR would report.
const MSR_TSC: u32 = 0x10;

/// The TSC class.
#[derive(Debug, Default)]
pub struct TscClass;

impl PmcClassDep for TscClass {
    fn class(&self) -> PmcClass {
        PmcClass::Tsc
    }
    fn caps(&self) -> PmcCaps {
        PmcCaps::READ
    }
    fn width(&self) -> u32 {
        64
    }
    fn num(&self) -> u32 {
        1
    }
    fn shareable(&self) -> bool {
        true
    }
    fn row_name(&self, _ri: u32) -> [u8; PMC_NAME_MAX] {
        let mut name = [0; PMC_NAME_MAX];
        set_c_field_str(&mut name, b"TSC");
        name
    }
    fn pcpu_init(&self, _cpu: u32) -> KResult<()> {
        Ok(())
    }
    fn pcpu_fini(&self, _cpu: u32) {}
    fn allocate_pmc(&self, _cpu: u32, _ri: u32, req: &AllocRequest<'_>) -> KResult<()> {
        if req.raw.pm_class != PmcClass::Tsc.raw() || !req.caps.intersects(PmcCaps::READ) {
            return Err(EINVAL);
        }
        if req.raw.pm_ev != PMC_EV_TSC_TSC || req.mode != PmcMode::Sc {
            return Err(EINVAL);
        }
        Ok(())
    }
    fn config_pmc(&self, _cpu: u32, _ri: u32, _pm: Option<&KArc<Pmc>>) -> KResult<()> {
        Ok(())
    }
    fn read_pmc(&self, _cpu: u32, _ri: u32) -> KResult<u64> {
        // The core has bound the thread to the PMC's CPU.
        Ok(kpi::time::rdtsc())
    }
    fn write_pmc(&self, _cpu: u32, _ri: u32, _value: u64) -> KResult<()> {
        // The TSC is the system's timecounter; writes are ignored.
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
    fn get_msr(&self, _ri: u32) -> KResult<u32> {
        Ok(MSR_TSC)
    }
}

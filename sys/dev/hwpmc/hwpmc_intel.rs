//! Intel CPUs (hwpmc_intel.c): the CPU type from CPUID's family and
//! model, the TSC class, and the architectural counters of
//! [`crate::hwpmc_core`].

use kpi::KResult;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use uapi::pmc::PmcCputype;

use crate::hwpmc_class::{IntrSink, MdIntr, PmcClassDep};
use crate::hwpmc_core::{Core, IafClass, IapClass};
use crate::hwpmc_tsc::TscClass;
use crate::hwpmc_x86::Signature;
use crate::{MachineDep, say};

/// The CPU type of a family 6 model, as `pmc_intel_initialize` maps
/// them; None for models it does not know.
pub fn cputype_of(model: u32, stepping: u32) -> Option<PmcCputype> {
    use PmcCputype::*;
    Some(match model {
        0x0E => IntelCore,
        0x0F if stepping == 7 => IntelCore,
        0x0F => IntelCore2,
        0x17 => IntelCore2Extreme,
        0x1A | 0x1E | 0x1F => IntelCorei7,
        0x2E => IntelNehalemEx,
        0x25 | 0x2C => IntelWestmere,
        0x2F => IntelWestmereEx,
        0x2A => IntelSandybridge,
        0x2D => IntelSandybridgeXeon,
        0x3A => IntelIvybridge,
        0x3E => IntelIvybridgeXeon,
        0x3D | 0x47 => IntelBroadwell,
        0x4F | 0x56 => IntelBroadwellXeon,
        0x3C | 0x45 => IntelHaswell,
        0x3F | 0x46 => IntelHaswellXeon,
        0x4E | 0x5E | 0x8E | 0x9E | 0xA5 | 0xA6 => IntelSkylake,
        0x55 => IntelSkylakeXeon,
        0x7D | 0x7E | 0x8C | 0x8D | 0xA7 => IntelIcelake,
        0x6A | 0x6C => IntelIcelakeXeon,
        0x97 | 0x9A => IntelAlderlake,
        0x1C | 0x26 | 0x27 | 0x35 | 0x36 => IntelAtom,
        0x37 | 0x4A | 0x4D | 0x5A | 0x5D => IntelAtomSilvermont,
        0x5C | 0x5F => IntelAtomGoldmont,
        0x7A => IntelAtomGoldmontP,
        0x86 | 0x96 => IntelAtomTremont,
        _ => return None,
    })
}

/// The PMI handler of Intel's core counters.
struct CoreIntr(KArc<Core>);

impl MdIntr for CoreIntr {
    fn intr(&self, cpu: u32, sink: &dyn IntrSink) -> bool {
        self.0.intr(cpu, sink)
    }
}

/// `pmc_intel_initialize`: None (after FreeBSD's message) for a CPU the
/// driver does not know; the caller then falls back to the generic
/// classes.
pub fn initialize(sig: Signature, ncpu: u32) -> KResult<Option<MachineDep>> {
    let cputype = if sig.base_family == 6 {
        cputype_of(sig.model, sig.stepping)
    } else {
        None
    };
    let Some(cputype) = cputype else {
        say(format_args!("pmc: Unknown Intel CPU."));
        return Ok(None);
    };
    let core = match Core::initialize(cputype, ncpu) {
        Ok(core) => core,
        Err(e) if e == kpi::errno::EPROGMISMATCH => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut classes = KVec::with_capacity(3, Wait::WaitOk)?;
    let tsc = kpi::kbox_dyn!(TscClass, Wait::WaitOk, dyn PmcClassDep)?;
    let iap = kpi::kbox_dyn!(IapClass(core.clone()), Wait::WaitOk, dyn PmcClassDep)?;
    let iaf = kpi::kbox_dyn!(IafClass(core.clone()), Wait::WaitOk, dyn PmcClassDep)?;
    let _ = classes.push_within_capacity(tsc);
    let _ = classes.push_within_capacity(iap);
    let _ = classes.push_within_capacity(iaf);
    let intr: KBox<dyn MdIntr> = kpi::kbox_dyn!(CoreIntr(core), Wait::WaitOk, dyn MdIntr)?;
    Ok(Some(MachineDep {
        cputype,
        classes,
        intr: Some(intr),
    }))
}

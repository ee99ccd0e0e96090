//! Event specifications (pmc_allocate's first argument) as arbitrary
//! text: parsing never panics, and a specification it accepts names an
//! event of the class it chose, with the capabilities that class needs;
//! the same for the PMU tables of every CPU model.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pmc::libpmc_sim::{SimConfig, SimTransport};
use pmc::pmc::Pmc;
use pmc::libpmc_pmu_util::PmuTable;
use uapi::pmc::{PmcCaps, PmcClass, PmcFlags, PmcMode, PmcOpPmcallocate};
use uapi::Plain;

fn library() -> &'static Pmc {
    static LIB: OnceLock<Pmc> = OnceLock::new();
    LIB.get_or_init(|| {
        let t = SimTransport::boot(SimConfig::default()).expect("the simulated machine boots");
        Pmc::init(Box::new(t)).expect("pmc_init")
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((&m, spec)) = input.split_first() else { return };
    let spec = String::from_utf8_lossy(spec);
    let mode = PmcMode::ALL[usize::from(m) % PmcMode::ALL.len()];
    let pmc = library();
    if let Ok(a) = pmc.parse_spec(&spec, mode, 0, 0, 1) {
        let class = PmcClass::from_raw(a.pm_class).expect("a known class");
        if a.pm_flags & PmcFlags::EV_PMU.bits() != 0 {
            // An event of the machine's PMU table, by its index there.
            let table = pmc.pmu().expect("a PMU event needs the machine's table");
            assert!(table.event(a.pm_ev as usize).is_some(), "{spec:?} gave index {}", a.pm_ev);
        } else {
            let events = pmc.events_of_class(class).expect("a class of this machine");
            assert!(events.iter().any(|e| e.code == a.pm_ev), "{spec:?} gave event {:#x}", a.pm_ev);
        }
        let caps = PmcCaps::from_bits_truncate(a.pm_caps);
        assert!(caps.contains(PmcCaps::READ));
        assert_eq!(caps.contains(PmcCaps::INTERRUPT), mode.is_sampling());
    }
    // The PMU tables of every model: an accepted specification names an
    // event of the table and marks the request as a PMU event.
    for model in pmc::libpmc_pmu_util::PMU_MODELS {
        let table = PmuTable { model, vendor: pmc::libpmc_pmu_util::Vendor::Intel };
        let mut a = PmcOpPmcallocate::zeroed();
        if table.allocate(&spec, &mut a).is_ok() {
            assert!((a.pm_ev as usize) < model.events.len());
            assert_ne!(a.pm_flags & PmcFlags::EV_PMU.bits(), 0);
        }
    }
});

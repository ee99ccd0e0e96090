//! Event specifications (pmc_allocate's first argument) as arbitrary
//! text: parsing never panics, and a specification it accepts names an
//! event of the class it chose, with the capabilities that class needs.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pmc::libpmc_sim::{SimConfig, SimTransport};
use pmc::pmc::Pmc;
use uapi::pmc::{PmcCaps, PmcClass, PmcMode};

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
        let events = pmc.events_of_class(class).expect("a class of this machine");
        assert!(events.iter().any(|e| e.code == a.pm_ev), "{spec:?} gave event {:#x}", a.pm_ev);
        let caps = PmcCaps::from_bits_truncate(a.pm_caps);
        assert!(caps.contains(PmcCaps::READ));
        assert_eq!(caps.contains(PmcCaps::INTERRUPT), mode.is_sampling());
    }
});

//! The static event tables of FreeBSD's libpmc (the `*_event_table`
//! arrays of its libpmc.c): the events `pmc_event_names_of_class` lists
//! for a class, and the names `_pmc_name_of_event` gives event codes, as
//! FreeBSD 15.0's library lays them out. Each table is a class's list of
//! `<sys/pmc_events.h>` with, for the TSC and the ARM cores, the
//! `__PMC_EV_ALIAS_*` entries; an alias table stands first, so that a
//! code with an alias is named by it (`CPU_CYCLES` rather than
//! `EVENT_11H` on a Cortex-A53), and the TSC's one event is named
//! `cycles`. The IAF class, whose table libpmc keeps for its parser, has
//! no name for its codes there.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use uapi::pmc::{PmcClass, PmcCputype};
use uapi::pmc_events as ev;

use crate::pmc::EventDescr;

/// One of libpmc's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Iaf,
    Tsc,
    K8,
    CortexA8,
    CortexA9,
    CortexA53,
    CortexA57,
    CortexA76,
    Cmn600,
    Dmc620Cd2,
    Dmc620C,
    Ppc7450,
    Ppc970,
    E500,
}

const TABLES: [Table; 14] = [
    Table::Iaf,
    Table::Tsc,
    Table::K8,
    Table::CortexA8,
    Table::CortexA9,
    Table::CortexA53,
    Table::CortexA57,
    Table::CortexA76,
    Table::Cmn600,
    Table::Dmc620Cd2,
    Table::Dmc620C,
    Table::Ppc7450,
    Table::Ppc970,
    Table::E500,
];

/// A class's block of `<sys/pmc_events.h>`, by its name there.
fn block(class: &str) -> impl Iterator<Item = (&'static str, u32)> {
    ev::PMC_EVENT_BLOCKS
        .iter()
        .filter(move |b| b.class == class)
        .flat_map(|b| (b.first..).zip(b.names).map(|(code, name)| (*name, code)))
}

impl Table {
    /// The table's entries in libpmc's order: aliases, then the class's
    /// list.
    fn entries(self) -> Vec<(&'static str, u32)> {
        let with_aliases = |aliases: &'static [(&'static str, u32)], class| {
            aliases.iter().copied().chain(block(class)).collect()
        };
        match self {
            Table::Iaf => block("IAF").collect(),
            Table::Tsc => ev::PMC_EV_ALIAS_TSC.to_vec(),
            Table::K8 => block("K8").collect(),
            Table::CortexA8 => with_aliases(ev::PMC_EV_ALIAS_ARMV7_CORTEX_A8, "ARMV7"),
            Table::CortexA9 => with_aliases(ev::PMC_EV_ALIAS_ARMV7_CORTEX_A9, "ARMV7"),
            Table::CortexA53 => with_aliases(ev::PMC_EV_ALIAS_ARMV8_CORTEX_A53, "ARMV8"),
            Table::CortexA57 => with_aliases(ev::PMC_EV_ALIAS_ARMV8_CORTEX_A57, "ARMV8"),
            Table::CortexA76 => with_aliases(ev::PMC_EV_ALIAS_ARMV8_CORTEX_A76, "ARMV8"),
            Table::Cmn600 => block("CMN600_PMU").collect(),
            Table::Dmc620Cd2 => block("DMC620_PMU_CD2").collect(),
            Table::Dmc620C => block("DMC620_PMU_C").collect(),
            Table::Ppc7450 => block("PPC7450").collect(),
            Table::Ppc970 => block("PPC970").collect(),
            Table::E500 => block("E500").collect(),
        }
    }

    /// The table's events, as C strings that live as long as the program
    /// (`pmc_event_names_of_class` hands out pointers to them).
    fn events(self) -> &'static [EventDescr] {
        static BUILT: OnceLock<Vec<Vec<EventDescr>>> = OnceLock::new();
        let built = BUILT.get_or_init(|| {
            TABLES
                .iter()
                .map(|t| {
                    t.entries()
                        .into_iter()
                        .filter_map(|(name, code)| {
                            Some(EventDescr {
                                name: CString::new(name).ok()?,
                                code,
                            })
                        })
                        .collect()
                })
                .collect()
        });
        &built[self as usize]
    }

    /// The table `pmc_event_names_of_class` lists for `class` on a CPU of
    /// type `cputype`: an ARM class's depends on the core, an unknown
    /// core taking the first one's (Cortex-A8, Cortex-A53).
    fn of_class(class: PmcClass, cputype: u32) -> Option<Table> {
        let is = |t: PmcCputype| cputype == t.raw();
        Some(match class {
            PmcClass::Iaf => Table::Iaf,
            PmcClass::Tsc => Table::Tsc,
            PmcClass::K8 => Table::K8,
            PmcClass::Armv7 if is(PmcCputype::Armv7CortexA9) => Table::CortexA9,
            PmcClass::Armv7 => Table::CortexA8,
            PmcClass::Armv8 if is(PmcCputype::Armv8CortexA57) => Table::CortexA57,
            PmcClass::Armv8 if is(PmcCputype::Armv8CortexA76) => Table::CortexA76,
            PmcClass::Armv8 => Table::CortexA53,
            PmcClass::Cmn600Pmu => Table::Cmn600,
            PmcClass::Dmc620PmuCd2 => Table::Dmc620Cd2,
            PmcClass::Dmc620PmuC => Table::Dmc620C,
            PmcClass::Ppc7450 => Table::Ppc7450,
            PmcClass::Ppc970 => Table::Ppc970,
            PmcClass::E500 => Table::E500,
            _ => return None,
        })
    }

    /// The table `_pmc_name_of_event` looks code `code` up in on a CPU of
    /// type `cputype`: none for an ARM code on another core than those
    /// libpmc has tables for, for the IAF codes, and for every code
    /// outside the tables' classes.
    fn of_code(code: u32, cputype: u32) -> Option<Table> {
        let is = |t: PmcCputype| cputype == t.raw();
        let within = |first, last| (first..=last).contains(&code);
        Some(if within(ev::PMC_EV_K8_FIRST, ev::PMC_EV_K8_LAST) {
            Table::K8
        } else if within(ev::PMC_EV_ARMV7_FIRST, ev::PMC_EV_ARMV7_LAST) {
            match () {
                () if is(PmcCputype::Armv7CortexA8) => Table::CortexA8,
                () if is(PmcCputype::Armv7CortexA9) => Table::CortexA9,
                () => return None,
            }
        } else if within(ev::PMC_EV_ARMV8_FIRST, ev::PMC_EV_ARMV8_LAST) {
            match () {
                () if is(PmcCputype::Armv8CortexA53) => Table::CortexA53,
                () if is(PmcCputype::Armv8CortexA57) => Table::CortexA57,
                () if is(PmcCputype::Armv8CortexA76) => Table::CortexA76,
                () => return None,
            }
        } else if within(ev::PMC_EV_CMN600_PMU_FIRST, ev::PMC_EV_CMN600_PMU_LAST) {
            Table::Cmn600
        } else if within(
            ev::PMC_EV_DMC620_PMU_CD2_FIRST,
            ev::PMC_EV_DMC620_PMU_CD2_LAST,
        ) {
            Table::Dmc620Cd2
        } else if within(ev::PMC_EV_DMC620_PMU_C_FIRST, ev::PMC_EV_DMC620_PMU_C_LAST) {
            Table::Dmc620C
        } else if within(ev::PMC_EV_PPC7450_FIRST, ev::PMC_EV_PPC7450_LAST) {
            Table::Ppc7450
        } else if within(ev::PMC_EV_PPC970_FIRST, ev::PMC_EV_PPC970_LAST) {
            Table::Ppc970
        } else if within(ev::PMC_EV_E500_FIRST, ev::PMC_EV_E500_LAST) {
            Table::E500
        } else if code == ev::PMC_EV_TSC_TSC {
            Table::Tsc
        } else {
            return None;
        })
    }
}

/// The events `pmc_event_names_of_class` lists for `class` on a CPU of
/// type `cputype`; None for the software events (the kernel's list) and
/// for the classes libpmc has no table for (the Intel programmable
/// counters and the other classes whose events the PMU tables name).
pub fn class_events(class: PmcClass, cputype: u32) -> Option<&'static [EventDescr]> {
    Table::of_class(class, cputype).map(Table::events)
}

/// The name `_pmc_name_of_event` gives the static event `code` on a CPU
/// of type `cputype` (the software events are the kernel's to name).
pub fn static_event_name(code: u32, cputype: u32) -> Option<&'static CStr> {
    Table::of_code(code, cputype)?
        .events()
        .iter()
        .find(|e| e.code == code)
        .map(|e| e.name.as_c_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(class: PmcClass, cputype: PmcCputype) -> Vec<&'static str> {
        class_events(class, cputype.raw())
            .unwrap()
            .iter()
            .map(|e| e.name.to_str().unwrap())
            .collect()
    }

    fn name(code: u32, cputype: PmcCputype) -> Option<&'static str> {
        static_event_name(code, cputype.raw()).map(|n| n.to_str().unwrap())
    }

    #[test]
    fn the_tsc_is_named_cycles_and_iaf_codes_have_no_name() {
        assert_eq!(names(PmcClass::Tsc, PmcCputype::Generic), ["cycles"]);
        assert_eq!(
            name(ev::PMC_EV_TSC_TSC, PmcCputype::Generic),
            Some("cycles")
        );
        assert_eq!(
            names(PmcClass::Iaf, PmcCputype::IntelSkylake),
            [
                "INSTR_RETIRED_ANY",
                "CPU_CLK_UNHALTED_CORE",
                "CPU_CLK_UNHALTED_REF"
            ]
        );
        assert_eq!(
            name(ev::PMC_EV_IAF_INSTR_RETIRED_ANY, PmcCputype::IntelSkylake),
            None
        );
        assert!(class_events(PmcClass::Iap, PmcCputype::IntelSkylake.raw()).is_none());
        assert!(class_events(PmcClass::Soft, PmcCputype::Generic.raw()).is_none());
    }

    #[test]
    fn k8_names_are_their_constants_without_the_class() {
        let k8 = names(PmcClass::K8, PmcCputype::AmdK8);
        assert_eq!(
            k8.len(),
            (ev::PMC_EV_K8_LAST - ev::PMC_EV_K8_FIRST + 1) as usize
        );
        assert_eq!(k8[0], "FP_DISPATCHED_FPU_OPS");
        assert_eq!(
            name(ev::PMC_EV_K8_DC_MISS, PmcCputype::Generic),
            Some("DC_MISS")
        );
    }

    #[test]
    fn arm_codes_are_named_by_their_core_alias_first() {
        let a53 = names(PmcClass::Armv8, PmcCputype::Armv8CortexA53);
        // The aliases, then the 1024 codes of the class.
        assert_eq!(a53[0], "SW_INCR");
        assert_eq!(a53.len(), ev::PMC_EV_ALIAS_ARMV8_CORTEX_A53.len() + 0x400);
        assert_eq!(
            name(ev::PMC_EV_ARMV8_EVENT_11H, PmcCputype::Armv8CortexA53),
            Some("CPU_CYCLES")
        );
        assert_eq!(
            name(ev::PMC_EV_ARMV8_EVENT_A0H, PmcCputype::Armv8CortexA76),
            Some("L3_CACHE_RD")
        );
        // A code without an alias on that core keeps its generic name.
        assert_eq!(
            name(ev::PMC_EV_ARMV8_EVENT_A0H, PmcCputype::Armv8CortexA53),
            Some("EVENT_A0H")
        );
        // Another core: no table for the codes, the first one's list.
        assert_eq!(name(ev::PMC_EV_ARMV8_EVENT_11H, PmcCputype::Generic), None);
        assert_eq!(names(PmcClass::Armv8, PmcCputype::Generic), a53);
        assert_eq!(
            names(PmcClass::Armv7, PmcCputype::Armv7CortexA9)[0],
            ev::PMC_EV_ALIAS_ARMV7_CORTEX_A9[0].0
        );
        assert_eq!(
            name(ev::PMC_EV_ARMV7_EVENT_00H, PmcCputype::Armv7CortexA15),
            None
        );
    }

    #[test]
    fn every_code_of_a_named_table_has_its_name() {
        for (class, cputype) in [
            (PmcClass::Cmn600Pmu, PmcCputype::Generic),
            (PmcClass::Dmc620PmuCd2, PmcCputype::Generic),
            (PmcClass::Dmc620PmuC, PmcCputype::Generic),
            (PmcClass::Ppc7450, PmcCputype::Ppc7450),
            (PmcClass::Ppc970, PmcCputype::Ppc970),
            (PmcClass::E500, PmcCputype::PpcE500),
            (PmcClass::Armv7, PmcCputype::Armv7CortexA8),
            (PmcClass::Armv8, PmcCputype::Armv8CortexA57),
        ] {
            let events = class_events(class, cputype.raw()).unwrap();
            assert!(!events.is_empty(), "{class:?}");
            for e in events {
                let n = static_event_name(e.code, cputype.raw()).unwrap();
                // The first entry of the code's, which is the alias where
                // the table has one.
                let first = events.iter().find(|x| x.code == e.code).unwrap();
                assert_eq!(n, first.name.as_c_str(), "{class:?} {:#x}", e.code);
            }
        }
    }
}

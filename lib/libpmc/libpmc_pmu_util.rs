//! The PMU event tables (FreeBSD's `libpmc_pmu_util.c`): event names of
//! the hardware classes from the pmu-events JSON, chosen by the CPU key
//! `kern.hwpmc.cpuid`, with per-vendor aliases, and their encoding into an
//! allocation request (`pm_md`, `PMC_F_EV_PMU`).
//!
//! Differences from FreeBSD, all deliberate:
//! - qualifiers after the event name are honoured (`usr`, `os`, `edge`,
//!   `inv`, `cmask=N`, `any`), and an unknown one is EINVAL; FreeBSD drops
//!   them silently;
//! - an event's own `inv=1` sets the invert bit (FreeBSD sets edge);
//! - an alias names candidates and takes the first the CPU model has, so
//!   `cycles` works on models without `cpu_clk_unhalted.thread_p_any`;
//!   `cycles`, `cache-references` and `cache-misses` are added.

use core::ffi::CStr;
use std::io::Write;

use uapi::pmc::{PmcCaps, PmcClass, PmcFlags, PmcOpPmcallocate};

use crate::pmc::Errno;
use crate::regcomp::Regex;

/// One event of a table, as jevents generates it.
#[derive(Debug, Clone, Copy)]
pub struct PmuEvent {
    /// Lowercase event name (`br_inst_retired.all_branches`); empty for
    /// an entry of the table that is not an event (a metric), which
    /// counts in the indices but is never found or listed.
    pub name: &'static CStr,
    /// Encoding: `event=0xc4,period=400009,umask=0x4` and so on.
    pub encoding: &'static str,
    /// Short description.
    pub desc: &'static str,
    /// Long description (may be empty).
    pub long_desc: &'static str,
    /// The JSON file the event came from (`pipeline`, `cache`, ...).
    pub topic: &'static str,
    /// The PMU: `cpu`, `cpu_core`, `cpu_atom`, `uncore_cha`, ...
    pub pmu: &'static str,
    /// The counters that can count it, as the JSON says.
    pub counter: &'static str,
    /// Kept for compatibility; a newer event replaces it.
    pub deprecated: bool,
}

impl PmuEvent {
    /// Whether the entry is an event (it has a name).
    pub fn is_named(&self) -> bool {
        !self.name.is_empty()
    }
}

/// One CPU model of mapfile.csv.
#[derive(Debug)]
pub struct PmuModel {
    /// The mapfile's CPU-key pattern (a POSIX extended regular expression).
    pub cpuid: &'static str,
    /// Version of the event files.
    pub version: &'static str,
    /// Directory of the model (`skylake`).
    pub name: &'static str,
    /// The events, in table order: an index is a `pm_ev` value.
    pub events: &'static [PmuEvent],
}

include!(concat!(env!("OUT_DIR"), "/pmu_events.rs"));

/// `DEFAULT_SAMPLE_COUNT`: the sampling rate of an event that names none.
pub const DEFAULT_SAMPLE_COUNT: u64 = 65536;

/// The CPU vendor, from the start of the CPU key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// `GenuineIntel-...`
    Intel,
    /// `AuthenticAMD-...` or `HygonGenuine-...`
    Amd,
    /// `0x...`: an arm64 MIDR.
    Arm64,
}

impl Vendor {
    /// The vendor a CPU key names, if libpmc knows it.
    pub fn of_cpuid(cpuid: &str) -> Option<Vendor> {
        let lower = cpuid.to_ascii_lowercase();
        if lower.contains("genuineintel") {
            Some(Vendor::Intel)
        } else if lower.contains("authenticamd") || lower.contains("hygongenuine") {
            Some(Vendor::Amd)
        } else if lower.starts_with("0x") {
            Some(Vendor::Arm64)
        } else {
            None
        }
    }

    /// The vendor's aliases: (alias, candidate event names in order).
    fn aliases(self) -> &'static [(&'static str, &'static [&'static str])] {
        const INTEL_CYCLES: &[&str] = &[
            "cpu_clk_unhalted.thread_p",
            "cpu_clk_unhalted.thread_p_any",
            "cpu_clk_unhalted.core_p",
            "cpu_clk_unhalted.thread",
            "cpu_clk_unhalted.core",
        ];
        const INTEL_INSTRUCTIONS: &[&str] = &["inst_retired.any_p", "inst_retired.any"];
        const INTEL_BRANCHES: &[&str] = &["br_inst_retired.all_branches"];
        const INTEL_MISPREDICTS: &[&str] = &["br_misp_retired.all_branches"];
        const INTEL_LLC_REFERENCES: &[&str] = &["longest_lat_cache.reference"];
        const INTEL_LLC_MISSES: &[&str] = &["longest_lat_cache.miss"];
        const AMD_CYCLES: &[&str] = &["ls_not_halted_cyc"];
        const AMD_LLC_REFERENCES: &[&str] = &["l3_request_g1.caching_l3_cache_accesses"];
        const AMD_LLC_MISSES: &[&str] = &["l3_comb_clstr_state.request_miss"];
        const AMD_BRANCHES: &[&str] = &["ex_ret_brn"];
        const AMD_MISPREDICTS: &[&str] = &["ex_ret_brn_misp"];
        const ARM_CYCLES: &[&str] = &["cpu_cycles"];
        const ARM_BRANCHES: &[&str] = &["br_retired", "br_pred"];
        const ARM_MISPREDICTS: &[&str] = &["br_mis_pred_retired", "br_mis_pred"];
        const ARM_LLC_REFERENCES: &[&str] = &["ll_cache_rd", "l2d_cache"];
        const ARM_LLC_MISSES: &[&str] = &["ll_cache_miss_rd", "l2d_cache_refill"];
        match self {
            Vendor::Intel => &[
                ("instructions", INTEL_INSTRUCTIONS),
                ("cycles", INTEL_CYCLES),
                ("unhalted-cycles", INTEL_CYCLES),
                ("UNHALTED_CORE_CYCLES", INTEL_CYCLES),
                ("UNHALTED-CORE-CYCLES", INTEL_CYCLES),
                ("branches", INTEL_BRANCHES),
                ("BRANCH_INSTRUCTION_RETIRED", INTEL_BRANCHES),
                ("BRANCH-INSTRUCTION-RETIRED", INTEL_BRANCHES),
                ("branch-mispredicts", INTEL_MISPREDICTS),
                ("BRANCH_MISSES_RETIRED", INTEL_MISPREDICTS),
                ("BRANCH-MISSES-RETIRED", INTEL_MISPREDICTS),
                ("cache-references", INTEL_LLC_REFERENCES),
                ("LLC_REFERENCE", INTEL_LLC_REFERENCES),
                ("LLC-REFERENCE", INTEL_LLC_REFERENCES),
                ("cache-misses", INTEL_LLC_MISSES),
                ("LLC_MISSES", INTEL_LLC_MISSES),
                ("LLC-MISSES", INTEL_LLC_MISSES),
                ("LLC_MISS_RHITM", &["mem_load_l3_miss_retired.remote_hitm"]),
                ("LLC-MISS-RHITM", &["mem_load_l3_miss_retired.remote_hitm"]),
                ("RESOURCE_STALL", &["resource_stalls.any"]),
                ("RESOURCE_STALLS_ANY", &["resource_stalls.any"]),
                ("interrupts", &["hw_interrupts.received"]),
                ("ic-misses", &["frontend_retired.l1i_miss", "icache.misses"]),
            ],
            Vendor::Amd => &[
                ("instructions", &["ex_ret_instr"]),
                ("cycles", AMD_CYCLES),
                ("unhalted-cycles", AMD_CYCLES),
                ("UNHALTED_CORE_CYCLES", AMD_CYCLES),
                ("UNHALTED-CORE-CYCLES", AMD_CYCLES),
                ("branches", AMD_BRANCHES),
                ("BRANCH_INSTRUCTION_RETIRED", AMD_BRANCHES),
                ("BRANCH-INSTRUCTION-RETIRED", AMD_BRANCHES),
                ("branch-mispredicts", AMD_MISPREDICTS),
                ("BRANCH_MISSES_RETIRED", AMD_MISPREDICTS),
                ("BRANCH-MISSES-RETIRED", AMD_MISPREDICTS),
                ("cache-references", AMD_LLC_REFERENCES),
                ("LLC_REFERENCE", AMD_LLC_REFERENCES),
                ("LLC-REFERENCE", AMD_LLC_REFERENCES),
                ("cache-misses", AMD_LLC_MISSES),
                ("LLC_MISSES", AMD_LLC_MISSES),
                ("LLC-MISSES", AMD_LLC_MISSES),
                ("interrupts", &["ls_int_taken"]),
            ],
            // FreeBSD's pmu_armv8_alias_table, and the additions
            // "cycles", "cache-references" and "cache-misses".
            Vendor::Arm64 => &[
                ("UNHALTED_CORE_CYCLES", ARM_CYCLES),
                ("UNHALTED-CORE-CYCLES", ARM_CYCLES),
                ("LLC_MISSES", ARM_LLC_MISSES),
                ("LLC-MISSES", ARM_LLC_MISSES),
                ("LLC_REFERENCE", ARM_LLC_REFERENCES),
                ("LLC-REFERENCE", ARM_LLC_REFERENCES),
                ("BRANCH_INSTRUCTION_RETIRED", ARM_BRANCHES),
                ("BRANCH-INSTRUCTION-RETIRED", ARM_BRANCHES),
                ("BRANCH_MISSES_RETIRED", ARM_MISPREDICTS),
                ("BRANCH-MISSES-RETIRED", ARM_MISPREDICTS),
                ("unhalted-cycles", ARM_CYCLES),
                ("instructions", &["inst_retired"]),
                ("branch-mispredicts", ARM_MISPREDICTS),
                ("branches", ARM_BRANCHES),
                ("interrupts", &["exc_irq"]),
                ("cycles", ARM_CYCLES),
                ("cache-references", ARM_LLC_REFERENCES),
                ("cache-misses", ARM_LLC_MISSES),
            ],
        }
    }
}

/// An event's encoding, parsed (`struct pmu_event_desc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventDesc {
    /// Event select code.
    pub event: u64,
    /// Unit mask, when the encoding has one.
    pub umask: Option<u64>,
    /// Sampling period (`SampleAfterValue`).
    pub period: Option<u64>,
    /// Off-core response MSR value.
    pub offcore_rsp: u64,
    /// Count on any thread of the core.
    pub any: u64,
    /// Counter mask.
    pub cmask: u64,
    /// Invert the counter-mask comparison.
    pub inv: u64,
    /// Count edges.
    pub edge: u64,
    /// Front-end MSR value.
    pub frontend: u64,
    /// Load latency threshold.
    pub ldlat: u64,
    /// Uncore filters.
    pub fc_mask: u64,
    /// Uncore port mask.
    pub ch_mask: u64,
    /// AMD L3 thread mask.
    pub l3_thread: u64,
    /// AMD L3 slice mask.
    pub l3_slice: u64,
}

impl EventDesc {
    /// Parses an encoding string; an unknown key or a bad number is
    /// EINVAL naming nothing (the tables are generated, so this means a
    /// corrupt table).
    pub fn parse(encoding: &str) -> Result<EventDesc, Errno> {
        let mut d = EventDesc::default();
        for pair in encoding.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or(libc::EINVAL)?;
            let hex = || parse_number(value, 16).ok_or(libc::EINVAL);
            let dec = || parse_number(value, 10).ok_or(libc::EINVAL);
            match key {
                "event" => d.event = hex()?,
                "umask" => d.umask = Some(hex()?),
                "period" => d.period = Some(dec()?),
                "offcore_rsp" => d.offcore_rsp = hex()?,
                "any" => d.any = dec()?,
                "cmask" => d.cmask = dec()?,
                "inv" => d.inv = dec()?,
                "edge" => d.edge = dec()?,
                "frontend" => d.frontend = hex()?,
                "ldlat" => d.ldlat = hex()?,
                "fc_mask" => d.fc_mask = hex()?,
                "ch_mask" => d.ch_mask = hex()?,
                "l3_thread_mask" => d.l3_thread = hex()?,
                "l3_slice_mask" => d.l3_slice = hex()?,
                // Keys for PMUs libpmc does not program (config1, ...).
                _ => {}
            }
        }
        Ok(d)
    }
}

/// A number as strtol(3) reads it in `base`, with an optional 0x prefix
/// for hexadecimal; the JSON writes some decimal fields in hexadecimal.
fn parse_number(text: &str, base: u32) -> Option<u64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok();
    }
    u64::from_str_radix(t, base).ok()
}

// Event-select register fields shared by Intel (IA32_PERFEVTSELx) and
// AMD (PERF_CTL) core counters.
const SEL_USR: u64 = 1 << 16;
const SEL_OS: u64 = 1 << 17;
const SEL_EDGE: u64 = 1 << 18;
const SEL_INT: u64 = 1 << 20;
const SEL_ANY: u64 = 1 << 21;
const SEL_INV: u64 = 1 << 23;
const SEL_CMASK_SHIFT: u32 = 24;

/// `PM_MD_RAW_EVENT` of arm64's `pm_md_flags`.
const PM_MD_RAW_EVENT: u32 = 0x1;

/// Qualifiers a user may add after an event name.
#[derive(Debug, Default, Clone, Copy)]
struct Qualifiers {
    usr: bool,
    os: bool,
    edge: bool,
    inv: bool,
    any: bool,
    cmask: Option<u64>,
}

fn parse_qualifiers<'a>(quals: impl Iterator<Item = &'a str>) -> Result<Qualifiers, Errno> {
    let mut q = Qualifiers::default();
    for word in quals {
        let word = word.trim();
        let (key, value) = word
            .split_once('=')
            .map_or((word, None), |(k, v)| (k, Some(v)));
        match (key.to_ascii_lowercase().as_str(), value) {
            ("usr", None) => q.usr = true,
            ("os", None) => q.os = true,
            ("edge", None) => q.edge = true,
            ("inv", None) => q.inv = true,
            ("any" | "anythread", None) => q.any = true,
            ("cmask", Some(v)) => {
                let n = parse_number(v, 10)
                    .filter(|&n| n <= 0xFF)
                    .ok_or(libc::EINVAL)?;
                q.cmask = Some(n);
            }
            _ => return Err(libc::EINVAL),
        }
    }
    Ok(q)
}

/// The table of one CPU model.
#[derive(Debug, Clone, Copy)]
pub struct PmuTable {
    /// The model.
    pub model: &'static PmuModel,
    /// Its vendor, which picks the aliases and the encoding.
    pub vendor: Vendor,
}

impl PmuTable {
    /// The table for a CPU key: the first mapfile row whose pattern
    /// matches the key from its start up to its end or a `-`
    /// (`GenuineIntel-6-5E` takes `GenuineIntel-6-5E-3`).
    pub fn for_cpuid(cpuid: &str) -> Option<PmuTable> {
        Self::for_cpuid_in(PMU_MODELS, cpuid)
    }

    /// [`PmuTable::for_cpuid`] over given models.
    pub fn for_cpuid_in(models: &'static [PmuModel], cpuid: &str) -> Option<PmuTable> {
        let vendor = Vendor::of_cpuid(cpuid)?;
        models
            .iter()
            .find(|m| {
                // As FreeBSD's libpmc: the leftmost-longest match must
                // start the key and end at its end or at a `-`.
                Regex::new(m.cpuid).is_ok_and(|r| {
                    r.find(cpuid).is_some_and(|(start, end)| {
                        start == 0 && matches!(cpuid.as_bytes().get(end), None | Some(b'-'))
                    })
                })
            })
            .map(|model| PmuTable { model, vendor })
    }

    /// The event name an alias stands for on this model (its first
    /// candidate the model has), or `name` itself.
    pub fn resolve_alias<'a>(&self, name: &'a str) -> &'a str {
        let Some((_, candidates)) = self
            .vendor
            .aliases()
            .iter()
            .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        else {
            return name;
        };
        candidates
            .iter()
            .find(|c| self.lookup(c).is_some())
            .or(candidates.first())
            .copied()
            .unwrap_or(name)
    }

    fn lookup(&self, name: &str) -> Option<(usize, &'static PmuEvent)> {
        self.model
            .events
            .iter()
            .enumerate()
            .find(|(_, e)| e.is_named() && e.name.to_bytes().eq_ignore_ascii_case(name.as_bytes()))
    }

    /// An event by name or alias, with its table index
    /// (`pmc_pmu_idx_get_by_event`).
    pub fn find(&self, name: &str) -> Option<(usize, &'static PmuEvent)> {
        self.lookup(self.resolve_alias(name))
    }

    /// The event at a table index (`pmc_pmu_event_get_by_idx`); none
    /// for an entry without a name.
    pub fn event(&self, index: usize) -> Option<&'static PmuEvent> {
        self.model.events.get(index).filter(|e| e.is_named())
    }

    /// The sampling rate of an event (`pmc_pmu_sample_rate_get`): its
    /// `period`, or [`DEFAULT_SAMPLE_COUNT`]. Qualifiers are ignored.
    pub fn sample_rate(&self, spec: &str) -> u64 {
        let name = spec.split(',').next().unwrap_or("");
        self.find(name)
            .and_then(|(_, e)| EventDesc::parse(e.encoding).ok()?.period)
            .filter(|&p| p > 0)
            .unwrap_or(DEFAULT_SAMPLE_COUNT)
    }

    /// Fills `a` (class, `pm_ev`, `pm_md`, capabilities and
    /// `PMC_F_EV_PMU`) for a specification `event[,qualifier...]`
    /// (`pmc_pmu_pmcallocate`). ENOENT for a name the table lacks, EINVAL
    /// for a qualifier the event's class refuses; `a` is unchanged then.
    pub fn allocate(&self, spec: &str, a: &mut PmcOpPmcallocate) -> Result<(), Errno> {
        let mut words = spec.split(',');
        let name = self.resolve_alias(words.next().unwrap_or("").trim());
        let (index, event) = self.lookup(name).ok_or(libc::ENOENT)?;
        let desc = EventDesc::parse(event.encoding).map_err(|_| libc::ENOENT)?;
        let q = parse_qualifiers(words)?;
        let mut caps = a.pm_caps | (PmcCaps::READ | PmcCaps::WRITE).bits();
        if q.usr {
            caps |= PmcCaps::USER.bits();
        }
        if q.os {
            caps |= PmcCaps::SYSTEM.bits();
        }
        let mut out = *a;
        match self.vendor {
            Vendor::Intel => intel(name, &desc, &q, &mut caps, &mut out)?,
            Vendor::Amd => amd(event.topic, &desc, &q, &mut caps, &mut out)?,
            Vendor::Arm64 => arm64(&desc, &q, &mut out)?,
        }
        out.pm_caps = caps;
        out.pm_ev = index as u32;
        out.pm_flags |= PmcFlags::EV_PMU.bits();
        *a = out;
        Ok(())
    }

    /// `pmc_pmu_print_counters`: a tab and the name of every event whose
    /// name contains `filter` (any case).
    pub fn print_counters(&self, filter: Option<&str>, out: &mut dyn Write) -> std::io::Result<()> {
        for e in self.matching(filter) {
            writeln!(out, "\t{}", name_of(e))?;
        }
        Ok(())
    }

    /// `pmc_pmu_print_counter_desc`: `name:<tab>description`.
    pub fn print_counter_desc(&self, filter: &str, out: &mut dyn Write) -> std::io::Result<()> {
        for e in self.matching(Some(filter)).filter(|e| !e.desc.is_empty()) {
            writeln!(out, "{}:\t{}", name_of(e), e.desc)?;
        }
        Ok(())
    }

    /// `pmc_pmu_print_counter_desc_long`: the long description on its own
    /// line, else the short one.
    pub fn print_counter_desc_long(
        &self,
        filter: &str,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        for e in self.matching(Some(filter)) {
            if !e.long_desc.is_empty() {
                writeln!(out, "{}:\n{}", name_of(e), e.long_desc)?;
            } else if !e.desc.is_empty() {
                writeln!(out, "{}:\t{}", name_of(e), e.desc)?;
            }
        }
        Ok(())
    }

    /// `pmc_pmu_print_counter_full`: every field of each match.
    pub fn print_counter_full(&self, filter: &str, out: &mut dyn Write) -> std::io::Result<()> {
        for e in self.matching(Some(filter)) {
            writeln!(out, "name: {}", name_of(e))?;
            let desc = if e.long_desc.is_empty() {
                e.desc
            } else {
                e.long_desc
            };
            writeln!(out, "desc: {desc}")?;
            writeln!(out, "event: {}", e.encoding)?;
            writeln!(out, "topic: {}", e.topic)?;
            writeln!(out, "pmu: {}", e.pmu)?;
        }
        Ok(())
    }

    fn matching(&self, filter: Option<&str>) -> impl Iterator<Item = &'static PmuEvent> {
        let filter = filter.map(str::to_ascii_lowercase);
        self.model.events.iter().filter(move |e| {
            e.is_named()
                && filter
                    .as_deref()
                    .is_none_or(|f| name_of(e).to_ascii_lowercase().contains(f))
        })
    }
}

fn name_of(e: &PmuEvent) -> &str {
    e.name.to_str().unwrap_or("")
}

fn user_system_bits(caps: u32) -> u64 {
    let user = caps & PmcCaps::USER.bits() != 0;
    let system = caps & PmcCaps::SYSTEM.bits() != 0;
    match (user, system) {
        (true, false) => SEL_USR,
        (false, true) => SEL_OS,
        _ => SEL_USR | SEL_OS,
    }
}

/// The qualifier fields that Intel's IA32_PERFEVTSELx and AMD's core
/// PERF_CTL share: counter mask, user/kernel, edge, invert, interrupt.
fn select_bits(d: &EventDesc, q: &Qualifiers, caps: u32) -> u64 {
    let mut bits = (q.cmask.unwrap_or(d.cmask) & 0xFF) << SEL_CMASK_SHIFT | user_system_bits(caps);
    if d.edge != 0 || q.edge {
        bits |= SEL_EDGE;
    }
    if d.inv != 0 || q.inv {
        bits |= SEL_INV;
    }
    if caps & PmcCaps::INTERRUPT.bits() != 0 {
        bits |= SEL_INT;
    }
    bits
}

fn intel(
    name: &str,
    d: &EventDesc,
    q: &Qualifiers,
    caps: &mut u32,
    a: &mut PmcOpPmcallocate,
) -> Result<(), Errno> {
    let lower = name.to_ascii_lowercase();
    let uncore = lower.starts_with("unc_") || lower.contains("uncore");
    // Fixed-function events have event select 0 (the unit mask names the
    // counter): INST_RETIRED.ANY, CPU_CLK_UNHALTED.THREAD, REF_TSC, ...
    let fixed = !uncore && d.event == 0;
    let class = if uncore {
        PmcClass::Ucp
    } else if fixed {
        PmcClass::Iaf
    } else {
        PmcClass::Iap
    };
    if fixed && (q.edge || q.inv || q.cmask.is_some()) {
        return Err(libc::EINVAL);
    }
    if !fixed {
        *caps |= PmcCaps::QUALIFIER.bits();
    }
    let mut config = (d.event & 0xFF) | (d.umask.unwrap_or(0) & 0xFF) << 8;
    config |= select_bits(d, q, *caps);
    if d.any != 0 || q.any {
        config |= SEL_ANY;
    }
    a.pm_class = class.raw();
    a.pm_md = md_zeroed();
    set_md(a, 0, &config.to_ne_bytes());
    set_md(a, 8, &d.offcore_rsp.to_ne_bytes());
    Ok(())
}

fn amd(
    topic: &str,
    d: &EventDesc,
    q: &Qualifiers,
    caps: &mut u32,
    a: &mut PmcOpPmcallocate,
) -> Result<(), Errno> {
    // PERF_CTL event select: bits 7:0 and 11:8 at 35:32.
    let eventmask = (d.event & 0xFF) | ((d.event >> 8) & 0xF) << 32;
    let umask = d.umask.unwrap_or(0);
    if umask > 0 {
        *caps |= PmcCaps::QUALIFIER.bits();
    }
    let core_only = q.edge || q.inv || q.cmask.is_some() || q.usr || q.os;
    let (config, sub_class) = match topic {
        "l3cache" => {
            if core_only || q.any {
                return Err(libc::EINVAL);
            }
            let config = eventmask
                | (umask << 8) & 0xFF00
                | (d.l3_slice << 48) & 0x000F_0000_0000_0000
                | (d.l3_thread << 56) & 0xFF00_0000_0000_0000;
            (config, 1u32)
        }
        "data fabric" => {
            if core_only || q.any {
                return Err(libc::EINVAL);
            }
            let config = eventmask | ((d.event >> 12) & 0x3) << 59 | (umask << 8) & 0xFF00;
            (config, 2u32)
        }
        _ => {
            if q.any {
                return Err(libc::EINVAL);
            }
            let config = eventmask | (umask << 8) & 0xFF00 | select_bits(d, q, *caps);
            (config, 0u32)
        }
    };
    a.pm_class = PmcClass::K8.raw();
    a.pm_md = md_zeroed();
    set_md(a, 0, &config.to_ne_bytes());
    set_md(a, 8, &sub_class.to_ne_bytes());
    Ok(())
}

fn arm64(d: &EventDesc, q: &Qualifiers, a: &mut PmcOpPmcallocate) -> Result<(), Errno> {
    // PMEVTYPER filters by exception level only; usr/os become caps.
    if q.edge || q.inv || q.any || q.cmask.is_some() {
        return Err(libc::EINVAL);
    }
    a.pm_class = PmcClass::Armv8.raw();
    a.pm_md = md_zeroed();
    set_md(a, 0, &(d.event as u32).to_ne_bytes());
    set_md(a, 4, &PM_MD_RAW_EVENT.to_ne_bytes());
    Ok(())
}

fn md_zeroed() -> uapi::pmc_mdep::PmcMdOpPmcallocate {
    uapi::pmc_mdep::PmcMdOpPmcallocate { __pad: [0; 4] }
}

/// Writes `bytes` at `offset` into the 32-byte `pm_md` union, as the
/// machine lays its members out.
fn set_md(a: &mut PmcOpPmcallocate, offset: usize, bytes: &[u8]) {
    // SAFETY: every member of the union is plain old data of at most 32
    // bytes, so its `__pad` view is always initialised and any bytes are
    // a valid value.
    let words = unsafe { &mut a.pm_md.__pad };
    let mut all = words_to_bytes(words);
    all[offset..offset + bytes.len()].copy_from_slice(bytes);
    *words = bytes_to_words(&all);
}

fn words_to_bytes(words: &[u64; 4]) -> [u8; 32] {
    let mut b = [0u8; 32];
    for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    b
}

fn bytes_to_words(b: &[u8; 32]) -> [u64; 4] {
    let mut w = [0u64; 4];
    for (word, chunk) in w.iter_mut().zip(b.chunks_exact(8)) {
        *word = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
    }
    w
}

/// Reads `pm_md` back as bytes (for tests and logs).
pub fn md_bytes(a: &PmcOpPmcallocate) -> [u8; 32] {
    // SAFETY: as in `set_md`.
    words_to_bytes(unsafe { &a.pm_md.__pad })
}

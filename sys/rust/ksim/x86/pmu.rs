//! x86 performance-monitoring units that count what the simulated CPUs
//! execute: Intel's architectural performance monitoring (versions 2 to
//! 5: programmable IA32_PMCx with IA32_PERFEVTSELx, fixed-function
//! counters with IA32_FIXED_CTR_CTRL, the global control, status and
//! overflow-reset registers) and AMD's core counters (PERF_CTL/PERF_CTR,
//! six with PerfCtrExtCore), with the local APIC's performance-counter
//! LVT entry that turns an overflow into an NMI.
//!
//! The registers behave as the Intel SDM (vol. 3B, ch. 20) and AMD's APM
//! (vol. 2, 13.2) and family 17h PPR describe (family 10h has only the
//! four legacy counters), bit for bit where the
//! driver can tell: a read or write of an MSR the model does not have, a
//! write that sets a reserved bit, and a write to a read-only register
//! raise #GP ([`GpFault`]), which the simulated kernel turns into a panic.
//! Choices where the manuals leave room, documented here:
//! - IA32_PMCx at 0xC1 takes the low 32 bits sign-extended (SDM 20.2.6);
//!   IA32_A_PMCx at 0x4C1 (IA32_PERF_CAPABILITIES.FW_WRITE is set) and the
//!   fixed counters take the full width, and bits above it are reserved;
//! - AMD's PERF_CTR ignores bits 63:48 on writes (they read as zero), as
//!   the counters' sign-extended reload values need;
//! - AnyThread came with version 3, and version 5 deprecates it
//!   (CPUID.0AH:EDX[15]): on the version 2 and 5 models PERFEVTSEL bit 21
//!   and the fixed counters' AnyThread bits are
//!   reserved;
//! - MSR_OFFCORE_RSP_0/1 keep bits 37:0 (request, supplier and snoop
//!   fields), less bits 12-14 and 23-30 on Sandy Bridge and Ivy Bridge;
//!   the off-core response events themselves count nothing.
//!
//! What the counters count comes from the event model of the CPU
//! ([`crate::cpu::events`]) and its cost model ([`crate::cpu::cost`]):
//! retired instructions, unhalted core cycles (the cost model's cycles;
//! the reference clock runs at the core clock, so reference cycles are
//! the same number), branches by kind and taken or not, mispredicted
//! branches, instructions that load or store, L1D lines replaced, and
//! loads that hit or miss L1D ([`EventSource`]). An event the model cannot
//! produce counts zero (the table in [`intel_event`] and [`amd_event`]
//! says which); none is invented. The kernel's work in system calls is
//! straight-line work to the model: it counts instructions and one cycle
//! each in kernel mode, and no branches or memory accesses. The counter
//! mask, invert and edge qualifiers apply per instruction, not per cycle.
//!
//! Interrupts have no skid: a counter that overflows with its interrupt
//! enabled sets its status bit (Intel) and, if the LVT entry is not
//! masked, raises the PMI after the overflowing instruction retires and
//! before the next one starts; delivering it masks the LVT entry, as the
//! hardware does, until the handler unmasks it (`lapic_reenable_pcint`).
//! An overflow while the entry is masked raises no interrupt (the status
//! bit stays set). Freeze on PMI (IA32_DEBUGCTL bit 12) clears
//! IA32_PERF_GLOBAL_CTRL before version 4 and sets the status's CTR_FRZ
//! bit, which stops every counter until it is reset, from version 4 on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{CpuModel, PmuSpec};
use crate::cpu::cost::{CostConfig, CostModel};
use crate::cpu::events::{BranchKind, Mode, Retired, Subscriber};

/// A general-protection fault of `rdmsr` or `wrmsr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpFault {
    /// The MSR.
    pub msr: u32,
    /// The value of a write; None for a read.
    pub value: Option<u64>,
    /// Why the access faults.
    pub why: &'static str,
}

impl std::fmt::Display for GpFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.value {
            Some(v) => write!(f, "#GP: wrmsr({:#x}, {v:#x}): {}", self.msr, self.why),
            None => write!(f, "#GP: rdmsr({:#x}): {}", self.msr, self.why),
        }
    }
}

/// Intel's MSR numbers.
pub mod msr {
    /// IA32_PMC0; IA32_PMCx is 0xC1 + x.
    pub const IA32_PMC0: u32 = 0xC1;
    /// IA32_PERFEVTSEL0.
    pub const IA32_PERFEVTSEL0: u32 = 0x186;
    /// MSR_OFFCORE_RSP_0.
    pub const MSR_OFFCORE_RSP0: u32 = 0x1A6;
    /// MSR_OFFCORE_RSP_1.
    pub const MSR_OFFCORE_RSP1: u32 = 0x1A7;
    /// IA32_DEBUGCTL.
    pub const IA32_DEBUGCTL: u32 = 0x1D9;
    /// IA32_FIXED_CTR0.
    pub const IA32_FIXED_CTR0: u32 = 0x309;
    /// IA32_PERF_CAPABILITIES.
    pub const IA32_PERF_CAPABILITIES: u32 = 0x345;
    /// IA32_FIXED_CTR_CTRL.
    pub const IA32_FIXED_CTR_CTRL: u32 = 0x38D;
    /// IA32_PERF_GLOBAL_STATUS.
    pub const IA32_PERF_GLOBAL_STATUS: u32 = 0x38E;
    /// IA32_PERF_GLOBAL_CTRL.
    pub const IA32_PERF_GLOBAL_CTRL: u32 = 0x38F;
    /// IA32_PERF_GLOBAL_OVF_CTRL (IA32_PERF_GLOBAL_STATUS_RESET from
    /// version 4).
    pub const IA32_PERF_GLOBAL_OVF_CTRL: u32 = 0x390;
    /// IA32_PERF_GLOBAL_STATUS_SET (version 4).
    pub const IA32_PERF_GLOBAL_STATUS_SET: u32 = 0x391;
    /// IA32_PERF_GLOBAL_INUSE (version 4).
    pub const IA32_PERF_GLOBAL_INUSE: u32 = 0x392;
    /// IA32_A_PMC0, the full-width alias of IA32_PMC0.
    pub const IA32_A_PMC0: u32 = 0x4C1;
    /// AMD's legacy PERF_CTL0 (four counters).
    pub const AMD_K7_EVSEL0: u32 = 0xC001_0000;
    /// AMD's legacy PERF_CTR0.
    pub const AMD_K7_PERFCTR0: u32 = 0xC001_0004;
    /// AMD's PERF_CTL0 with PerfCtrExtCore; PERF_CTLn is this + 2n and
    /// PERF_CTRn this + 2n + 1.
    pub const AMD_F17H_CTL0: u32 = 0xC001_0200;
}

/// IA32_PERF_CAPABILITIES.FW_WRITE: IA32_A_PMCx exist.
pub const PERF_CAP_FW_WRITE: u64 = 1 << 13;
/// IA32_DEBUGCTL.FREEZE_PERFMON_ON_PMI.
pub const DEBUGCTL_FREEZE_PERFMON_ON_PMI: u64 = 1 << 12;
/// IA32_DEBUGCTL bits the model keeps: LBR, BTF, TR, BTS, BTINT,
/// BTS_OFF_OS, BTS_OFF_USR, FREEZE_LBRS_ON_PMI, FREEZE_PERFMON_ON_PMI,
/// FREEZE_WHILE_SMM, RTM_DEBUG.
const DEBUGCTL_VALID: u64 = 0b1101_1011_1100_0011;
/// IA32_PERF_GLOBAL_STATUS.Trace_ToPA_PMI (version 4, bit 55): a ToPA
/// region with INT filled (Intel PT, [`super::pt`]).
pub const STATUS_TRACE_TOPA_PMI: u64 = 1 << 55;
/// IA32_PERF_GLOBAL_STATUS.CTR_FRZ (version 4, bit 59).
pub const STATUS_CTR_FRZ: u64 = 1 << 59;
/// PERFEVTSEL: user mode.
pub const SEL_USR: u64 = 1 << 16;
/// PERFEVTSEL: kernel mode.
pub const SEL_OS: u64 = 1 << 17;
/// PERFEVTSEL: edge detect.
pub const SEL_EDGE: u64 = 1 << 18;
/// PERFEVTSEL: interrupt on overflow.
pub const SEL_INT: u64 = 1 << 20;
/// PERFEVTSEL: any thread of the core (Intel).
pub const SEL_ANY: u64 = 1 << 21;
/// PERFEVTSEL: enable.
pub const SEL_EN: u64 = 1 << 22;
/// PERFEVTSEL: invert the counter mask.
pub const SEL_INV: u64 = 1 << 23;
/// The LVT entry's mask bit.
pub const LVT_MASKED: u32 = 1 << 16;
/// The LVT entry's NMI delivery mode (bits 10:8 = 100b).
pub const LVT_DM_NMI: u32 = 0b100 << 8;

/// CPUID leaf 0xA of an Intel PMU model: version, counters and widths,
/// the architectural events (the two last-level-cache events are marked
/// unavailable: the model has no last-level cache), the fixed counters'
/// bitmap (version 5) and AnyThread deprecation (version 5).
pub fn intel_leaf_0a(version: u8, gp: u8, fixed: u8, width: u8) -> [u32; 4] {
    let eax = u32::from(version) | u32::from(gp) << 8 | u32::from(width) << 16 | 7 << 24;
    let ebx = 1 << 3 | 1 << 4;
    let ecx = if version >= 5 { (1 << fixed) - 1 } else { 0 };
    let deprecated_any = if version >= 5 { 1 << 15 } else { 0 };
    let edx = u32::from(fixed) | u32::from(width) << 5 | deprecated_any;
    [eax, ebx, ecx, edx]
}

/// What an event counts, among what the model produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventSource {
    /// Retired instructions.
    Instructions,
    /// Unhalted core cycles.
    Cycles,
    /// Unhalted reference cycles (the same as core cycles here).
    RefCycles,
    /// Retired branches of every kind.
    Branches,
    /// Retired conditional branches.
    Conditional,
    /// Retired calls.
    Calls,
    /// Retired returns.
    Returns,
    /// Retired branches that were taken.
    Taken,
    /// Retired conditional branches that were not taken.
    NotTaken,
    /// Retired mispredicted branches.
    Mispredicted,
    /// Retired mispredicted conditional branches.
    MispredictedConditional,
    /// Retired instructions that load.
    Loads,
    /// Retired instructions that store.
    Stores,
    /// Data accesses (every load and store, AMD's LsDcAccesses).
    DataAccesses,
    /// Lines brought into L1D.
    L1dReplacements,
    /// Retired loads that missed L1D.
    LoadL1Miss,
    /// Retired loads that hit L1D.
    LoadL1Hit,
    /// Something the model does not produce: counts zero.
    Nothing,
}

/// The source of Intel event `event` with unit mask `umask` (the
/// programmable counters' encodings of the pmu-events tables):
///
/// | event | umask | name | counts |
/// |---|---|---|---|
/// | 0xC0 | 0x00, 0x01 | INST_RETIRED.ANY_P, .PREC_DIST | instructions |
/// | 0x3C | 0x00 | CPU_CLK_UNHALTED.THREAD_P | cycles |
/// | 0xC4 | 0x00 / 0x01 / 0x02 / 0x08 / 0x10 / 0x20 | BR_INST_RETIRED.ALL_BRANCHES / CONDITIONAL / NEAR_CALL / NEAR_RETURN / NOT_TAKEN / NEAR_TAKEN | branches |
/// | 0xC5 | 0x00 / 0x01 | BR_MISP_RETIRED.ALL_BRANCHES / CONDITIONAL | mispredictions |
/// | 0xD0 | 0x81 / 0x82 | MEM_INST_RETIRED.ALL_LOADS / ALL_STORES | loads, stores |
/// | 0x51 | 0x01 | L1D.REPLACEMENT | L1D fills |
/// | 0xD1 | 0x01 / 0x08 | MEM_LOAD_RETIRED.L1_HIT / L1_MISS | loads by L1D outcome |
///
/// Everything else counts zero: the reference crystal clock
/// (CPU_CLK_UNHALTED.REF_XCLK), far branches, caches past L1D,
/// off-core responses, TLBs, the front end and the execution ports.
pub fn intel_event(event: u8, umask: u8) -> EventSource {
    use EventSource::*;
    match (event, umask) {
        (0xC0, 0x00 | 0x01) => Instructions,
        (0x3C, 0x00) => Cycles,
        (0xC4, 0x00) => Branches,
        (0xC4, 0x01) => Conditional,
        (0xC4, 0x02) => Calls,
        (0xC4, 0x08) => Returns,
        (0xC4, 0x10) => NotTaken,
        (0xC4, 0x20) => Taken,
        (0xC5, 0x00) => Mispredicted,
        (0xC5, 0x01) => MispredictedConditional,
        (0xD0, 0x81) => Loads,
        (0xD0, 0x82) => Stores,
        (0x51, 0x01) => L1dReplacements,
        (0xD1, 0x01) => LoadL1Hit,
        (0xD1, 0x08) => LoadL1Miss,
        _ => Nothing,
    }
}

/// What Intel's fixed counter `index` counts: INST_RETIRED.ANY,
/// CPU_CLK_UNHALTED.THREAD, CPU_CLK_UNHALTED.REF_TSC; TOPDOWN.SLOTS (the
/// fourth, version 5) counts zero.
pub fn intel_fixed_event(index: usize) -> EventSource {
    match index {
        0 => EventSource::Instructions,
        1 => EventSource::Cycles,
        2 => EventSource::RefCycles,
        _ => EventSource::Nothing,
    }
}

/// The source of AMD core event `event` (12 bits) with `umask`:
///
/// | event | name | counts |
/// |---|---|---|
/// | 0x0C0 | ExRetInstr | instructions |
/// | 0x076 | LsNotHaltedCyc | cycles |
/// | 0x0C2 / 0x0C3 / 0x0C4 / 0x0C8 / 0x0D1 | ExRetBrn / ExRetBrnMisp / ExRetBrnTkn / ExRetNearRet / ExRetCond | branches |
/// | 0x029 | LsDispatch (umask 1 loads, 2 stores, 4 load-stores) | dispatched accesses |
/// | 0x040 | LsDcAccesses | data accesses |
/// | 0x041 | LsMabAlloc | L1D misses |
///
/// Everything else counts zero, as do LsDispatch's unit-mask bits for
/// load-op-stores (the model does not tell them apart).
pub fn amd_event(event: u16, umask: u8) -> EventSource {
    use EventSource::*;
    match (event, umask) {
        (0x0C0, _) => Instructions,
        (0x076, _) => Cycles,
        (0x0C2, _) => Branches,
        (0x0C3, _) => Mispredicted,
        (0x0C4, _) => Taken,
        (0x0C8, _) => Returns,
        (0x0D1, _) => Conditional,
        (0x029, 0x01) => Loads,
        (0x029, 0x02) => Stores,
        (0x040, _) => DataAccesses,
        (0x041, u) if u != 0 => LoadL1Miss,
        _ => Nothing,
    }
}

/// What one retired instruction (or one instruction of kernel work)
/// contributed to each source.
#[derive(Debug, Clone, Copy, Default)]
struct Occurred {
    kernel: bool,
    cycles: u64,
    branch: Option<(BranchKind, bool)>,
    mispredicted: bool,
    loads: bool,
    stores: bool,
    accesses: u64,
    l1d_misses: u64,
}

impl Occurred {
    fn value(&self, source: EventSource) -> u64 {
        use EventSource::*;
        let kind = self.branch.map(|(k, _)| k);
        let taken = self.branch.is_some_and(|(_, t)| t);
        match source {
            Instructions => 1,
            Cycles | RefCycles => self.cycles,
            Branches => u64::from(kind.is_some()),
            Conditional => u64::from(kind == Some(BranchKind::Conditional)),
            Calls => u64::from(matches!(
                kind,
                Some(BranchKind::Call | BranchKind::IndirectCall)
            )),
            Returns => u64::from(kind == Some(BranchKind::Return)),
            Taken => u64::from(taken),
            NotTaken => u64::from(kind.is_some() && !taken),
            Mispredicted => u64::from(self.mispredicted),
            MispredictedConditional => {
                u64::from(self.mispredicted && kind == Some(BranchKind::Conditional))
            }
            Loads => u64::from(self.loads),
            Stores => u64::from(self.stores),
            DataAccesses => self.accesses,
            L1dReplacements => self.l1d_misses,
            LoadL1Miss => u64::from(self.loads && self.l1d_misses > 0),
            LoadL1Hit => u64::from(self.loads && self.l1d_misses == 0),
            Nothing => 0,
        }
    }
}

/// One counter: its value and what it counts as programmed.
#[derive(Debug, Clone, Copy, Default)]
struct Counter {
    value: u64,
    /// The select register (Intel PERFEVTSEL, AMD PERF_CTL); for a fixed
    /// counter, its four control bits.
    select: u64,
    /// The thresholded signal of the last instruction, for edge detect.
    last: bool,
}

/// The Intel part of a PMU.
#[derive(Debug, Clone)]
struct IntelRegs {
    version: u8,
    global_ctrl: u64,
    global_status: u64,
    fixed_ctrl: u64,
    debugctl: u64,
    offcore: [u64; 2],
    /// The bits the off-core response registers keep.
    offcore_valid: u64,
}

/// One logical CPU's PMU.
#[derive(Debug, Clone)]
pub struct Pmu {
    gp: Vec<Counter>,
    fixed: Vec<Counter>,
    intel: Option<IntelRegs>,
    width_mask: u64,
    lvt: u32,
    cost: CostModel,
    /// A PMI waits for the CPU to take it.
    pmi: bool,
}

impl Pmu {
    fn new(spec: PmuSpec, cost: CostConfig) -> Pmu {
        let (gp, fixed, width, intel) = match spec {
            PmuSpec::Intel {
                version,
                gp,
                fixed,
                width,
                offcore_valid,
                ..
            } => (
                gp,
                fixed,
                width,
                Some(IntelRegs {
                    version,
                    // Power-on: every counter enabled globally (SDM
                    // 20.2.2), none enabled locally.
                    global_ctrl: ((1u64 << gp) - 1) | (((1u64 << fixed) - 1) << 32),
                    global_status: 0,
                    fixed_ctrl: 0,
                    debugctl: 0,
                    offcore: [0; 2],
                    offcore_valid,
                }),
            ),
            PmuSpec::Amd {
                counters, width, ..
            } => (counters, 0, width, None),
        };
        Pmu {
            gp: vec![Counter::default(); gp as usize],
            fixed: vec![Counter::default(); fixed as usize],
            intel,
            width_mask: (1u64 << width) - 1,
            lvt: LVT_MASKED,
            cost: CostModel::new(cost),
            pmi: false,
        }
    }

    fn gp_fault(msr: u32, value: Option<u64>, why: &'static str) -> GpFault {
        GpFault { msr, value, why }
    }

    fn version(&self) -> u8 {
        self.intel.as_ref().map_or(0, |i| i.version)
    }

    /// Bits of the global registers that name counters.
    fn counter_bits(&self) -> u64 {
        ((1u64 << self.gp.len()) - 1) | (((1u64 << self.fixed.len()) - 1) << 32)
    }

    fn status_reset_valid(&self) -> u64 {
        // Version 4 adds Trace_ToPA_PMI (55), LBR_Frz (58), CTR_Frz (59)
        // and ASCI (60) to Ovf_Uncore, OvfBuf and CondChgd (61-63).
        let extra = if self.version() >= 4 {
            1 << 55 | 0x3F << 58
        } else {
            0x7 << 61
        };
        self.counter_bits() | extra
    }

    /// AnyThread: versions 3 and 4.
    fn has_any_thread(&self) -> bool {
        (3..5).contains(&self.version())
    }

    fn evtsel_valid(&self) -> u64 {
        let any = if self.has_any_thread() { SEL_ANY } else { 0 };
        0xFFFF_FFFF & !(SEL_ANY) | any
    }

    fn fixed_ctrl_valid(&self) -> u64 {
        let per = if self.has_any_thread() { 0xF } else { 0xB };
        (0..self.fixed.len()).fold(0, |m, i| m | per << (4 * i))
    }

    /// `rdmsr`.
    pub fn rdmsr(&self, msr: u32) -> Result<u64, GpFault> {
        let fault = |why| Err(Self::gp_fault(msr, None, why));
        if let Some(intel) = &self.intel {
            let gp = self.gp.len() as u32;
            let fixed = self.fixed.len() as u32;
            return match msr {
                m if (msr::IA32_PMC0..msr::IA32_PMC0 + gp).contains(&m) => {
                    Ok(self.gp[(m - msr::IA32_PMC0) as usize].value)
                }
                m if (msr::IA32_A_PMC0..msr::IA32_A_PMC0 + gp).contains(&m) => {
                    Ok(self.gp[(m - msr::IA32_A_PMC0) as usize].value)
                }
                m if (msr::IA32_PERFEVTSEL0..msr::IA32_PERFEVTSEL0 + gp).contains(&m) => {
                    Ok(self.gp[(m - msr::IA32_PERFEVTSEL0) as usize].select)
                }
                m if (msr::IA32_FIXED_CTR0..msr::IA32_FIXED_CTR0 + fixed).contains(&m) => {
                    Ok(self.fixed[(m - msr::IA32_FIXED_CTR0) as usize].value)
                }
                msr::IA32_FIXED_CTR_CTRL => Ok(intel.fixed_ctrl),
                msr::IA32_PERF_GLOBAL_CTRL => Ok(intel.global_ctrl),
                msr::IA32_PERF_GLOBAL_STATUS => Ok(intel.global_status),
                msr::IA32_PERF_GLOBAL_OVF_CTRL => Ok(0),
                msr::IA32_PERF_GLOBAL_STATUS_SET if intel.version >= 4 => Ok(0),
                msr::IA32_PERF_GLOBAL_INUSE if intel.version >= 4 => Ok(self.inuse()),
                msr::IA32_PERF_CAPABILITIES => Ok(PERF_CAP_FW_WRITE),
                msr::IA32_DEBUGCTL => Ok(intel.debugctl),
                msr::MSR_OFFCORE_RSP0 => Ok(intel.offcore[0]),
                msr::MSR_OFFCORE_RSP1 => Ok(intel.offcore[1]),
                _ => fault("no such MSR on this model"),
            };
        }
        match self.amd_counter(msr) {
            Some((i, true)) => Ok(self.gp[i].select),
            Some((i, false)) => Ok(self.gp[i].value),
            None => fault("no such MSR on this model"),
        }
    }

    /// The counter and whether the MSR is its control (else its count).
    fn amd_counter(&self, msr: u32) -> Option<(usize, bool)> {
        let n = self.gp.len() as u32;
        // The extended range exists only with PerfCtrExtCore (six).
        if n > 4 && (msr::AMD_F17H_CTL0..msr::AMD_F17H_CTL0 + 2 * n).contains(&msr) {
            let off = msr - msr::AMD_F17H_CTL0;
            return Some(((off / 2) as usize, off % 2 == 0));
        }
        if (msr::AMD_K7_EVSEL0..msr::AMD_K7_EVSEL0 + 4).contains(&msr) {
            return Some(((msr - msr::AMD_K7_EVSEL0) as usize, true));
        }
        if (msr::AMD_K7_PERFCTR0..msr::AMD_K7_PERFCTR0 + 4).contains(&msr) {
            return Some(((msr - msr::AMD_K7_PERFCTR0) as usize, false));
        }
        None
    }

    fn inuse(&self) -> u64 {
        let mut v = 0;
        for (i, c) in self.gp.iter().enumerate() {
            if c.select & 0xFF != 0 {
                v |= 1 << i;
            }
        }
        for (i, c) in self.fixed.iter().enumerate() {
            if c.select != 0 {
                v |= 1 << (32 + i);
            }
        }
        let pmi = self.gp.iter().any(|c| c.select & SEL_INT != 0)
            || self.fixed.iter().any(|c| c.select & 0x8 != 0);
        v | u64::from(pmi) << 63
    }

    /// `wrmsr`.
    pub fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), GpFault> {
        let fault = |why| Err(Self::gp_fault(msr, Some(value), why));
        let mask = self.width_mask;
        if self.intel.is_none() {
            return match self.amd_counter(msr) {
                Some((i, true)) => {
                    // Reserved: 19, 21, 39:36, 63:42.
                    const VALID: u64 =
                        0x0300_0000_0000 | 0xF_0000_0000 | 0xFFFF_FFFF & !(1 << 19 | 1 << 21);
                    if value & !VALID != 0 {
                        return fault("reserved PERF_CTL bits set");
                    }
                    self.gp[i].select = value;
                    self.gp[i].last = false;
                    Ok(())
                }
                Some((i, false)) => {
                    self.gp[i].value = value & mask;
                    Ok(())
                }
                None => fault("no such MSR on this model"),
            };
        }
        let gp = self.gp.len() as u32;
        let fixed = self.fixed.len() as u32;
        let counter_bits = self.counter_bits();
        let status_valid = self.status_reset_valid();
        let evtsel_valid = self.evtsel_valid();
        let fixed_ctrl_valid = self.fixed_ctrl_valid();
        let version = self.version();
        match msr {
            m if (msr::IA32_PMC0..msr::IA32_PMC0 + gp).contains(&m) => {
                // The low 32 bits, sign-extended to the width.
                let v = value as u32 as i32 as i64 as u64;
                self.gp[(m - msr::IA32_PMC0) as usize].value = v & mask;
            }
            m if (msr::IA32_A_PMC0..msr::IA32_A_PMC0 + gp).contains(&m) => {
                if value & !mask != 0 {
                    return fault("bits above the counter width set");
                }
                self.gp[(m - msr::IA32_A_PMC0) as usize].value = value;
            }
            m if (msr::IA32_PERFEVTSEL0..msr::IA32_PERFEVTSEL0 + gp).contains(&m) => {
                if value & !evtsel_valid != 0 {
                    return fault("reserved PERFEVTSEL bits set");
                }
                let c = &mut self.gp[(m - msr::IA32_PERFEVTSEL0) as usize];
                c.select = value;
                c.last = false;
            }
            m if (msr::IA32_FIXED_CTR0..msr::IA32_FIXED_CTR0 + fixed).contains(&m) => {
                if value & !mask != 0 {
                    return fault("bits above the counter width set");
                }
                self.fixed[(m - msr::IA32_FIXED_CTR0) as usize].value = value;
            }
            msr::IA32_FIXED_CTR_CTRL => {
                if value & !fixed_ctrl_valid != 0 {
                    return fault("reserved IA32_FIXED_CTR_CTRL bits set");
                }
                for (i, c) in self.fixed.iter_mut().enumerate() {
                    c.select = value >> (4 * i) & 0xF;
                }
                self.intel_mut().fixed_ctrl = value;
            }
            msr::IA32_PERF_GLOBAL_CTRL => {
                if value & !counter_bits != 0 {
                    return fault("reserved IA32_PERF_GLOBAL_CTRL bits set");
                }
                self.intel_mut().global_ctrl = value;
            }
            msr::IA32_PERF_GLOBAL_STATUS => return fault("IA32_PERF_GLOBAL_STATUS is read-only"),
            msr::IA32_PERF_GLOBAL_OVF_CTRL => {
                if value & !status_valid != 0 {
                    return fault("reserved overflow-reset bits set");
                }
                self.intel_mut().global_status &= !value;
            }
            msr::IA32_PERF_GLOBAL_STATUS_SET if version >= 4 => {
                if value & !status_valid != 0 {
                    return fault("reserved IA32_PERF_GLOBAL_STATUS_SET bits set");
                }
                self.intel_mut().global_status |= value;
            }
            msr::IA32_PERF_GLOBAL_INUSE if version >= 4 => {
                return fault("IA32_PERF_GLOBAL_INUSE is read-only");
            }
            msr::IA32_PERF_CAPABILITIES => return fault("IA32_PERF_CAPABILITIES is read-only"),
            msr::IA32_DEBUGCTL => {
                if value & !DEBUGCTL_VALID != 0 {
                    return fault("reserved IA32_DEBUGCTL bits set");
                }
                self.intel_mut().debugctl = value;
            }
            msr::MSR_OFFCORE_RSP0 | msr::MSR_OFFCORE_RSP1 => {
                if value & !self.intel_mut().offcore_valid != 0 {
                    return fault("reserved MSR_OFFCORE_RSP bits set");
                }
                self.intel_mut().offcore[(msr - msr::MSR_OFFCORE_RSP0) as usize] = value;
            }
            _ => return fault("no such MSR on this model"),
        }
        Ok(())
    }

    fn intel_mut(&mut self) -> &mut IntelRegs {
        self.intel.as_mut().expect("an Intel PMU")
    }

    /// Whether some counter counts (so the CPU must report its
    /// instructions).
    pub fn counting(&self) -> bool {
        match &self.intel {
            Some(i) => {
                if i.global_status & STATUS_CTR_FRZ != 0 {
                    return false;
                }
                let gp = self
                    .gp
                    .iter()
                    .enumerate()
                    .any(|(n, c)| i.global_ctrl >> n & 1 != 0 && c.select & SEL_EN != 0);
                let fixed = self
                    .fixed
                    .iter()
                    .enumerate()
                    .any(|(n, c)| i.global_ctrl >> (32 + n) & 1 != 0 && c.select & 0x3 != 0);
                gp || fixed
            }
            None => self.gp.iter().any(|c| c.select & SEL_EN != 0),
        }
    }

    /// `rdpmc` of counter `index` (Intel: bit 30 selects the fixed
    /// counters; AMD: the core counter); None for an index the model has
    /// not, which faults.
    pub fn rdpmc(&self, index: u32) -> Option<u64> {
        if self.intel.is_some() && index & (1 << 30) != 0 {
            return self
                .fixed
                .get((index & !(1 << 30)) as usize)
                .map(|c| c.value);
        }
        self.gp.get(index as usize).map(|c| c.value)
    }

    /// The LVT performance-counter entry.
    pub fn lvt(&self) -> u32 {
        self.lvt
    }

    /// Programs the LVT performance-counter entry.
    pub fn set_lvt(&mut self, value: u32) {
        self.lvt = value;
    }

    /// Intel PT's ToPA PMI: sets Trace_ToPA_PMI in the global status and
    /// raises the PMI through the same LVT entry as the counters.
    pub fn raise_topa_pmi(&mut self) {
        let Some(intel) = self.intel.as_mut() else {
            return;
        };
        intel.global_status |= STATUS_TRACE_TOPA_PMI;
        if self.lvt & LVT_MASKED == 0 {
            self.lvt |= LVT_MASKED;
            self.pmi = true;
        }
    }

    /// Whether a PMI waits; taking it clears it.
    pub fn take_pmi(&mut self) -> bool {
        std::mem::replace(&mut self.pmi, false)
    }

    /// Whether a PMI waits.
    pub fn pmi_pending(&self) -> bool {
        self.pmi
    }

    /// Counts one retired instruction.
    pub fn retired(&mut self, insn: &Retired<'_>) {
        let before = self.cost.counts();
        self.cost.retired(insn);
        let after = self.cost.counts();
        let occurred = Occurred {
            kernel: insn.mode == Mode::Kernel,
            cycles: after.cycles - before.cycles,
            branch: insn.branch.map(|b| (b.kind, b.taken)),
            mispredicted: after.branch_misses > before.branch_misses,
            loads: insn.loads(),
            stores: insn.stores(),
            accesses: insn.accesses.len() as u64,
            l1d_misses: after.cache_misses - before.cache_misses,
        };
        self.count(&occurred);
    }

    /// Counts up to `n` instructions of the kernel's straight-line work;
    /// stops after the one that raises a PMI. Returns how many it counted.
    pub fn kernel_work(&mut self, n: u64) -> u64 {
        let occurred = Occurred {
            kernel: true,
            cycles: self.cost_base(),
            ..Occurred::default()
        };
        for done in 1..=n {
            self.count(&occurred);
            if self.pmi {
                return done;
            }
        }
        n
    }

    fn cost_base(&self) -> u64 {
        self.cost.config().base
    }

    fn count(&mut self, occurred: &Occurred) {
        let mask = self.width_mask;
        let mut overflowed = 0u64;
        let mut interrupt = false;
        match &self.intel {
            Some(intel) => {
                if intel.global_status & STATUS_CTR_FRZ != 0 {
                    return;
                }
                let ctrl = intel.global_ctrl;
                for (n, c) in self.gp.iter_mut().enumerate() {
                    if ctrl >> n & 1 == 0 || c.select & SEL_EN == 0 {
                        continue;
                    }
                    let source = intel_event(c.select as u8, (c.select >> 8) as u8);
                    if step_counter(c, source, occurred, c.select, mask) {
                        overflowed |= 1 << n;
                        interrupt |= c.select & SEL_INT != 0;
                    }
                }
                for (n, c) in self.fixed.iter_mut().enumerate() {
                    if ctrl >> (32 + n) & 1 == 0 || c.select & 0x3 == 0 {
                        continue;
                    }
                    // Fixed control: bit 0 OS, bit 1 USR, bit 3 PMI.
                    let select = (c.select & 1) << 17 | (c.select >> 1 & 1) << 16;
                    if step_counter(c, intel_fixed_event(n), occurred, select, mask) {
                        overflowed |= 1 << (32 + n);
                        interrupt |= c.select & 0x8 != 0;
                    }
                }
            }
            None => {
                for (n, c) in self.gp.iter_mut().enumerate() {
                    if c.select & SEL_EN == 0 {
                        continue;
                    }
                    let event = (c.select & 0xFF | c.select >> 24 & 0xF00) as u16;
                    let source = amd_event(event, (c.select >> 8) as u8);
                    if step_counter(c, source, occurred, c.select, mask) {
                        overflowed |= 1 << n;
                        interrupt |= c.select & SEL_INT != 0;
                    }
                }
            }
        }
        if overflowed == 0 {
            return;
        }
        if let Some(intel) = self.intel.as_mut() {
            intel.global_status |= overflowed;
            if interrupt && intel.debugctl & DEBUGCTL_FREEZE_PERFMON_ON_PMI != 0 {
                if intel.version >= 4 {
                    intel.global_status |= STATUS_CTR_FRZ;
                } else {
                    intel.global_ctrl = 0;
                }
            }
        }
        if interrupt && self.lvt & LVT_MASKED == 0 {
            if self.intel.is_some() {
                self.lvt |= LVT_MASKED;
            }
            self.pmi = true;
        }
    }
}

/// Advances counter `c` by what `occurred` gives `source`, under the
/// user/kernel, counter-mask, invert and edge bits of `select` (PERFEVTSEL
/// layout); true when it wrapped past its width.
fn step_counter(
    c: &mut Counter,
    source: EventSource,
    occurred: &Occurred,
    select: u64,
    mask: u64,
) -> bool {
    let mode_bit = if occurred.kernel { SEL_OS } else { SEL_USR };
    if select & mode_bit == 0 {
        return false;
    }
    let raw = occurred.value(source);
    let cmask = select >> 24 & 0xFF;
    let mut inc = if cmask != 0 {
        let above = raw >= cmask;
        u64::from(above != (select & SEL_INV != 0))
    } else {
        raw
    };
    if select & SEL_EDGE != 0 {
        let now = inc != 0;
        inc = u64::from(now && !c.last);
        c.last = now;
    }
    if inc == 0 {
        return false;
    }
    let sum = c.value + inc;
    c.value = sum & mask;
    sum > mask
}

/// The PMUs of a machine's CPUs.
#[derive(Debug)]
pub struct PmuSet {
    pmus: Vec<Mutex<Pmu>>,
    /// Per CPU: some counter counts.
    counting: Vec<AtomicBool>,
    /// Per CPU: a PMI waits.
    pmi: Vec<AtomicBool>,
}

impl PmuSet {
    /// The PMUs of `ncpus` CPUs of `model`; None if the model has none.
    pub fn new(model: CpuModel, ncpus: u32, cost: CostConfig) -> Option<Arc<PmuSet>> {
        let spec = model.pmu?;
        Some(Arc::new(PmuSet {
            pmus: (0..ncpus)
                .map(|_| Mutex::new(Pmu::new(spec, cost)))
                .collect(),
            counting: (0..ncpus).map(|_| AtomicBool::new(false)).collect(),
            pmi: (0..ncpus).map(|_| AtomicBool::new(false)).collect(),
        }))
    }

    /// The PMU of `cpu`.
    pub fn pmu(&self, cpu: u32) -> MutexGuard<'_, Pmu> {
        self.pmus[cpu as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn update_counting(&self, cpu: u32, pmu: &Pmu) {
        self.counting[cpu as usize].store(pmu.counting(), Ordering::Relaxed);
        self.pmi[cpu as usize].store(pmu.pmi_pending(), Ordering::Relaxed);
    }

    /// `rdmsr` on `cpu`.
    pub fn rdmsr(&self, cpu: u32, msr: u32) -> Result<u64, GpFault> {
        self.pmu(cpu).rdmsr(msr)
    }

    /// `wrmsr` on `cpu`.
    pub fn wrmsr(&self, cpu: u32, msr: u32, value: u64) -> Result<(), GpFault> {
        let mut pmu = self.pmu(cpu);
        let r = pmu.wrmsr(msr, value);
        self.update_counting(cpu, &pmu);
        r
    }

    /// `rdpmc` on `cpu`.
    pub fn rdpmc(&self, cpu: u32, index: u32) -> Option<u64> {
        self.pmu(cpu).rdpmc(index)
    }

    /// Whether a counter of `cpu` counts.
    pub fn counting(&self, cpu: u32) -> bool {
        self.counting
            .get(cpu as usize)
            .is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// Whether a PMI waits on `cpu`.
    pub fn pmi_pending(&self, cpu: u32) -> bool {
        self.pmi
            .get(cpu as usize)
            .is_some_and(|p| p.load(Ordering::Relaxed))
    }

    /// Raises Intel PT's ToPA PMI on `cpu` ([`Pmu::raise_topa_pmi`]).
    pub fn raise_topa_pmi(&self, cpu: u32) {
        let mut pmu = self.pmu(cpu);
        pmu.raise_topa_pmi();
        self.update_counting(cpu, &pmu);
    }

    /// Takes the PMI waiting on `cpu`, if one does.
    pub fn take_pmi(&self, cpu: u32) -> bool {
        let mut pmu = self.pmu(cpu);
        let taken = pmu.take_pmi();
        self.update_counting(cpu, &pmu);
        taken
    }

    /// Counts `n` instructions of kernel work on `cpu`, up to a PMI;
    /// returns how many were counted.
    pub fn kernel_work(&self, cpu: u32, n: u64) -> u64 {
        if !self.counting(cpu) {
            return n;
        }
        let mut pmu = self.pmu(cpu);
        let done = pmu.kernel_work(n);
        self.update_counting(cpu, &pmu);
        done
    }

    /// Programs the LVT entry of every CPU (`lapic_enable_pcint`,
    /// `lapic_disable_pcint`).
    pub fn set_lvt_all(&self, value: u32) {
        for p in &self.pmus {
            p.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .set_lvt(value);
        }
    }

    /// Unmasks `cpu`'s LVT entry (`lapic_reenable_pcint`).
    pub fn unmask_lvt(&self, cpu: u32) {
        let mut pmu = self.pmu(cpu);
        let v = pmu.lvt() & !LVT_MASKED;
        pmu.set_lvt(v);
    }

    /// The subscriber that feeds a CPU's retired instructions to the PMU
    /// of the machine CPU they retire on.
    pub fn feed(self: &Arc<Self>) -> PmuFeed {
        PmuFeed {
            set: self.clone(),
            last_cpu: 0,
        }
    }
}

/// Feeds retired instructions to the PMUs ([`PmuSet::feed`]).
#[derive(Debug)]
pub struct PmuFeed {
    set: Arc<PmuSet>,
    last_cpu: u32,
}

impl Subscriber for PmuFeed {
    fn retired(&mut self, insn: &Retired<'_>) {
        self.last_cpu = insn.cpu;
        if !self.set.counting(insn.cpu) {
            return;
        }
        let mut pmu = self.set.pmu(insn.cpu);
        pmu.retired(insn);
        self.set.update_counting(insn.cpu, &pmu);
    }

    fn wants_stop(&self) -> bool {
        self.set.pmi_pending(self.last_cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::events::{Branch, MemAccess};

    fn skylake() -> Pmu {
        let m = CpuModel::from_key("GenuineIntel-6-5E-3").expect("a key");
        Pmu::new(m.pmu.expect("a PMU"), CostConfig::default())
    }

    fn insn(branch: Option<Branch>, accesses: &[MemAccess]) -> Retired<'_> {
        Retired {
            cpu: 0,
            mode: Mode::User,
            pc: 0x1000,
            len: 2,
            next_pc: 0x1002,
            branch,
            accesses,
        }
    }

    #[test]
    fn leaf_0a_describes_the_models() {
        let [eax, ebx, _, edx] = intel_leaf_0a(4, 4, 3, 48);
        assert_eq!(eax & 0xFF, 4);
        assert_eq!(eax >> 8 & 0xFF, 4);
        assert_eq!(eax >> 16 & 0xFF, 48);
        assert_eq!(ebx, 0x18);
        assert_eq!(edx & 0x1F, 3);
        assert_eq!(edx >> 5 & 0xFF, 48);
        let icx = CpuModel::from_key("GenuineIntel-6-6A-6").expect("a key");
        let [eax, _, ecx, edx] = icx.cpuid(0xA, 0);
        assert_eq!((eax & 0xFF, eax >> 8 & 0xFF, edx & 0x1F), (5, 8, 4));
        assert_eq!(ecx, 0xF);
        assert_eq!(edx >> 15 & 1, 1);
    }

    #[test]
    fn reserved_bits_fault() {
        let mut p = skylake();
        assert!(p.wrmsr(msr::IA32_PERFEVTSEL0, 1 << 32).is_err());
        assert!(p.wrmsr(msr::IA32_PERFEVTSEL0 + 4, 0).is_err());
        assert!(p.wrmsr(msr::IA32_PERF_GLOBAL_CTRL, 1 << 4).is_err());
        assert!(p.wrmsr(msr::IA32_PERF_GLOBAL_CTRL, 1 << 35).is_err());
        assert!(p.wrmsr(msr::IA32_PERF_GLOBAL_STATUS, 0).is_err());
        assert!(p.wrmsr(msr::IA32_FIXED_CTR_CTRL, 1 << 12).is_err());
        assert!(p.wrmsr(msr::IA32_A_PMC0, 1 << 48).is_err());
        assert!(p.wrmsr(msr::IA32_FIXED_CTR0 + 3, 0).is_err());
        assert!(p.rdmsr(0x12345).is_err());
        assert!(p.wrmsr(msr::IA32_PERF_CAPABILITIES, 0).is_err());
        assert!(p.wrmsr(msr::IA32_PERF_GLOBAL_OVF_CTRL, 1 << 40).is_err());
        p.wrmsr(msr::IA32_PERFEVTSEL0, 0x0043_00C0 | SEL_ANY)
            .expect("AnyThread is defined before version 5");
        let icx = CpuModel::from_key("GenuineIntel-6-6A-6").expect("a key");
        let mut p = Pmu::new(icx.pmu.expect("a PMU"), CostConfig::default());
        assert!(
            p.wrmsr(msr::IA32_PERFEVTSEL0, 0x0043_00C0 | SEL_ANY)
                .is_err()
        );
        assert!(p.wrmsr(msr::IA32_FIXED_CTR_CTRL, 0x4).is_err());
        p.wrmsr(msr::IA32_FIXED_CTR_CTRL, 0xBBBB)
            .expect("four fixed counters");
    }

    #[test]
    fn legacy_writes_sign_extend() {
        let mut p = skylake();
        p.wrmsr(msr::IA32_PMC0, 0xFFFF_FFFF_8000_0000_u64 | 0x1_0000_0000)
            .expect("upper bits ignored");
        assert_eq!(p.rdmsr(msr::IA32_PMC0), Ok(0xFFFF_8000_0000));
        p.wrmsr(msr::IA32_A_PMC0 + 1, 0x1234_5678_9ABC)
            .expect("full width");
        assert_eq!(p.rdmsr(msr::IA32_PMC0 + 1), Ok(0x1234_5678_9ABC));
    }

    #[test]
    fn counts_filter_and_overflow_with_pmi() {
        let mut p = skylake();
        p.set_lvt(LVT_DM_NMI);
        // PMC0: branches, user, interrupt; PMC1: instructions, kernel only.
        p.wrmsr(msr::IA32_PERFEVTSEL0, 0xC4 | SEL_USR | SEL_INT | SEL_EN)
            .expect("valid");
        p.wrmsr(msr::IA32_PERFEVTSEL0 + 1, 0xC0 | SEL_OS | SEL_EN)
            .expect("valid");
        p.wrmsr(msr::IA32_A_PMC0, (1 << 48) - 2).expect("valid");
        let jcc = Some(Branch {
            kind: BranchKind::Conditional,
            taken: true,
        });
        p.retired(&insn(None, &[]));
        assert_eq!(p.rdmsr(msr::IA32_PMC0), Ok((1 << 48) - 2));
        p.retired(&insn(jcc, &[]));
        assert!(!p.pmi_pending());
        p.retired(&insn(jcc, &[]));
        assert_eq!(p.rdmsr(msr::IA32_PMC0), Ok(0));
        assert!(p.take_pmi(), "the overflow raises a PMI");
        assert_eq!(p.rdmsr(msr::IA32_PERF_GLOBAL_STATUS), Ok(1));
        assert_eq!(p.lvt() & LVT_MASKED, LVT_MASKED, "delivery masks the LVT");
        assert_eq!(p.rdmsr(msr::IA32_PMC0 + 1), Ok(0), "user work is not OS");
        assert_eq!(p.kernel_work(5), 5);
        assert_eq!(p.rdmsr(msr::IA32_PMC0 + 1), Ok(5));
        // A second overflow with the LVT masked raises nothing.
        p.wrmsr(msr::IA32_A_PMC0, (1 << 48) - 1).expect("valid");
        p.retired(&insn(jcc, &[]));
        assert!(!p.pmi_pending());
        p.wrmsr(msr::IA32_PERF_GLOBAL_OVF_CTRL, 1).expect("valid");
        assert_eq!(p.rdmsr(msr::IA32_PERF_GLOBAL_STATUS), Ok(0));
    }

    #[test]
    fn freeze_on_pmi() {
        let mut p = skylake();
        p.set_lvt(LVT_DM_NMI);
        p.wrmsr(msr::IA32_DEBUGCTL, DEBUGCTL_FREEZE_PERFMON_ON_PMI)
            .expect("valid");
        // Fixed counter 0 (instructions), user, PMI.
        p.wrmsr(msr::IA32_FIXED_CTR_CTRL, 0xA).expect("valid");
        p.wrmsr(msr::IA32_FIXED_CTR0, (1 << 48) - 1).expect("valid");
        p.retired(&insn(None, &[]));
        assert!(p.take_pmi());
        let status = p.rdmsr(msr::IA32_PERF_GLOBAL_STATUS).expect("readable");
        assert_eq!(status, 1 << 32 | STATUS_CTR_FRZ);
        p.retired(&insn(None, &[]));
        assert_eq!(p.rdmsr(msr::IA32_FIXED_CTR0), Ok(0), "frozen");
        p.wrmsr(msr::IA32_PERF_GLOBAL_OVF_CTRL, STATUS_CTR_FRZ | 1 << 32)
            .expect("valid");
        p.retired(&insn(None, &[]));
        assert_eq!(p.rdmsr(msr::IA32_FIXED_CTR0), Ok(1));
    }

    #[test]
    fn amd_counters() {
        let m = CpuModel::from_key("AuthenticAMD-23-31-0").expect("a key");
        let mut p = Pmu::new(m.pmu.expect("a PMU"), CostConfig::default());
        assert!(p.wrmsr(msr::AMD_F17H_CTL0, 1 << 19).is_err());
        assert!(p.wrmsr(msr::AMD_F17H_CTL0 + 12, 0).is_err(), "six counters");
        p.wrmsr(msr::AMD_F17H_CTL0 + 2, 0xC0 | SEL_USR | SEL_EN)
            .expect("valid");
        p.wrmsr(msr::AMD_K7_PERFCTR0 + 1, u64::MAX - 1)
            .expect("upper bits ignored");
        assert_eq!(p.rdmsr(msr::AMD_F17H_CTL0 + 3), Ok((1 << 48) - 2));
        let load = [MemAccess {
            kind: crate::cpu::events::AccessKind::Load,
            addr: 0x2000,
            size: 8,
        }];
        p.retired(&insn(None, &load));
        assert_eq!(p.rdmsr(msr::AMD_K7_PERFCTR0 + 1), Ok((1 << 48) - 1));
        assert_eq!(p.rdmsr(msr::AMD_K7_EVSEL0 + 1), Ok(0xC0 | SEL_USR | SEL_EN));
    }
}

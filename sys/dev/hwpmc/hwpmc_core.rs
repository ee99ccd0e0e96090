//! Intel's architectural performance counters (hwpmc_core.c): the IAP
//! class (programmable counters, IA32_PERFEVTSELx / IA32_PMCx) and the
//! IAF class (fixed-function counters, IA32_FIXED_CTR_CTRL /
//! IA32_FIXED_CTRx), on architectural performance monitoring versions 2
//! to 5, and their interrupt handler.
//!
//! Counts and widths come from CPUID leaf 0xA. Both classes share one
//! per-CPU state: the fixed counters' control word and the global
//! control word the driver keeps (`pc_iafctrl`, `pc_globalctrl`), the
//! rows stalled on a full sample ring, and each row's PMC in an
//! [`NmiSlot`], which the PMI handler reads without a lock.
//!
//! Differences from FreeBSD, deliberate:
//! - a request whose configuration sets bits the hardware reserves (or
//!   that the driver owns: EN) is refused with EINVAL, so that no request
//!   can make the driver's `wrmsr` fault;
//! - the off-core response value of the request is written to
//!   MSR_OFFCORE_RSP_0/1 for events 0xB7 and 0xBB (FreeBSD drops it);
//!   which bits a model keeps there varies, so the allocation tries the
//!   value on the register (`wrmsr_safe`) and refuses one that faults;
//! - counter constraints for the models whose tables FreeBSD leaves
//!   unchecked (Skylake, Skylake-X, Ice Lake-X) follow the pmu-events
//!   tables' "Counter" field.

use kpi::KResult;
use kpi::atomic::{AtomicU64, Ordering};
use kpi::errno::{EINVAL, EPROGMISMATCH};
use kpi::malloc::{KArc, KVec, Wait};
use kpi::nmi::NmiSlot;
use kpi::x86::{rdmsr, wrmsr};
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcClass, PmcCputype, PmcFlags};
use uapi::pmc_mdep::x86::{IAF_ANY, IAF_OS, IAF_PMI, IAF_USR};

use crate::Pmc;
use crate::hwpmc_class::{AllocRequest, IntrSink, PmcClassDep, RowPmcs, unstall_on};
use crate::hwpmc_x86::{from_perfctr, row_name, samples, to_perfctr};
use crate::ops::width_mask;

/// IA32_PMC0.
const IAP_PMC0: u32 = 0xC1;
/// IA32_A_PMC0 minus IA32_PMC0: where full-width writes go.
const IAP_A_PMC_OFFSET: u32 = 0x4C1 - 0xC1;
/// IA32_PERFEVTSEL0.
const IAP_EVSEL0: u32 = 0x186;
/// MSR_OFFCORE_RSP_0, _1.
const OFFCORE_RSP0: u32 = 0x1A6;
const OFFCORE_RSP1: u32 = 0x1A7;
/// IA32_DEBUGCTL and its freeze-on-PMI bit.
const DEBUGCTL: u32 = 0x1D9;
const DEBUGCTL_FREEZE_ON_PMI: u64 = 1 << 12;
/// IA32_FIXED_CTR0.
const IAF_CTR0: u32 = 0x309;
/// IA32_PERF_CAPABILITIES and its full-width-write bit.
const PERF_CAPABILITIES: u32 = 0x345;
const PERFCAP_FW_WRITE: u64 = 1 << 13;
/// IA32_FIXED_CTR_CTRL.
const IAF_CTRL: u32 = 0x38D;
/// IA32_PERF_GLOBAL_STATUS, _CTRL, _OVF_CTRL.
const GLOBAL_STATUS: u32 = 0x38E;
const GLOBAL_CTRL: u32 = 0x38F;
const GLOBAL_OVF_CTRL: u32 = 0x390;
/// GLOBAL_STATUS.Trace_ToPA_PMI (version 4): Intel PT's output interrupt.
const STATUS_TRACE_TOPA_PMI: u64 = 1 << 55;
/// GLOBAL_STATUS.CTR_FRZ (version 4): the hardware froze the counters.
const STATUS_CTR_FRZ: u64 = 1 << 59;
/// The fixed counters' bits in the global registers start here.
const IAF_OFFSET: u32 = 32;
/// The RDPMC index of fixed counter 0.
const RDPMC_FIXED: u32 = 1 << 30;

/// PERFEVTSEL fields.
const SEL_USR: u64 = 1 << 16;
const SEL_OS: u64 = 1 << 17;
const SEL_INT: u64 = 1 << 20;
const SEL_ANY: u64 = 1 << 21;
const SEL_EN: u64 = 1 << 22;
/// PERFEVTSEL bits a request may set: event, umask, USR, OS, edge, pin
/// control, INT, ANY, INV and cmask (EN is the driver's).
const SEL_REQUEST: u64 = 0xFFFF_FFFF & !SEL_EN;

/// `IAP_PMC_CAPS`.
const IAP_CAPS: PmcCaps = PmcCaps::INTERRUPT
    .union(PmcCaps::USER)
    .union(PmcCaps::SYSTEM)
    .union(PmcCaps::EDGE)
    .union(PmcCaps::THRESHOLD)
    .union(PmcCaps::READ)
    .union(PmcCaps::WRITE)
    .union(PmcCaps::INVERT)
    .union(PmcCaps::QUALIFIER)
    .union(PmcCaps::PRECISE);
/// `IAF_PMC_CAPS`.
const IAF_CAPS: PmcCaps = PmcCaps::READ
    .union(PmcCaps::WRITE)
    .union(PmcCaps::INTERRUPT)
    .union(PmcCaps::USER)
    .union(PmcCaps::SYSTEM);

/// One CPU's state (`struct core_cpu`).
struct CoreCpu {
    iap: KVec<NmiSlot<Pmc>>,
    iaf: KVec<NmiSlot<Pmc>>,
    /// `pc_iafctrl`.
    iafctrl: AtomicU64,
    /// `pc_globalctrl`.
    globalctrl: AtomicU64,
    /// Global-control bits of counters stalled on a full ring.
    stalled: AtomicU64,
}

/// What the two classes share (`core_*` of hwpmc_core.c).
pub struct Core {
    cputype: PmcCputype,
    version: u32,
    iap_npmc: u32,
    iap_width: u32,
    /// `iap_width` bits set.
    iap_mask: u64,
    iaf_npmc: u32,
    iaf_width: u32,
    /// `iaf_width` bits set.
    iaf_mask: u64,
    /// Offset of the MSR that IAP writes go to (full-width when the CPU
    /// has IA32_A_PMCx).
    wroffset: u32,
    cpus: KVec<CoreCpu>,
}

impl core::fmt::Debug for Core {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Core")
            .field("version", &self.version)
            .field("iap", &(self.iap_npmc, self.iap_width))
            .field("iaf", &(self.iaf_npmc, self.iaf_width))
            .finish()
    }
}

impl Core {
    /// `pmc_core_initialize`: reads CPUID leaf 0xA; EPROGMISMATCH for an
    /// architecture version the driver does not know.
    pub fn initialize(cputype: PmcCputype, ncpu: u32) -> KResult<KArc<Core>> {
        let [eax, _ebx, _ecx, edx] = kpi::x86::cpuid(0xA, 0);
        let version = eax & 0xFF;
        if !(2..=5).contains(&version) {
            crate::say(format_args!(
                "hwpmc_core: unknown PMC architecture: {version}"
            ));
            return Err(EPROGMISMATCH);
        }
        let pdcm = kpi::x86::cpuid(1, 0)[2] & (1 << 15) != 0;
        let wroffset = if pdcm && rdmsr(PERF_CAPABILITIES) & PERFCAP_FW_WRITE != 0 {
            IAP_A_PMC_OFFSET
        } else {
            0
        };
        let iap_npmc = eax >> 8 & 0xFF;
        let iap_width = eax >> 16 & 0xFF;
        let iaf_npmc = edx & 0x1F;
        let iaf_width = edx >> 5 & 0xFF;
        let cpus = KVec::try_from_fn(ncpu as usize, Wait::WaitOk, |cpu| {
            Ok(CoreCpu {
                iap: KVec::from_fn(iap_npmc as usize, Wait::WaitOk, |_| {
                    NmiSlot::new(cpu as u32)
                })?,
                iaf: KVec::from_fn(iaf_npmc as usize, Wait::WaitOk, |_| {
                    NmiSlot::new(cpu as u32)
                })?,
                iafctrl: AtomicU64::new(0),
                globalctrl: AtomicU64::new(0),
                stalled: AtomicU64::new(0),
            })
        })?;
        KArc::try_new(
            Core {
                cputype,
                version,
                iap_npmc,
                iap_width,
                iap_mask: width_mask(iap_width),
                iaf_npmc,
                iaf_width,
                iaf_mask: width_mask(iaf_width),
                wroffset,
                cpus,
            },
            Wait::WaitOk,
        )
    }

    /// The architecture version.
    pub fn version(&self) -> u32 {
        self.version
    }

    fn cpu(&self, cpu: u32) -> KResult<&CoreCpu> {
        self.cpus.get(cpu as usize).ok_or(EINVAL)
    }

    /// Whether the counters have AnyThread: it came with version 3, and
    /// version 5 deprecates it; elsewhere the bit is reserved.
    fn has_any_thread(&self) -> bool {
        (3..5).contains(&self.version)
    }

    /// Writes the global control word the driver keeps.
    fn write_globalctrl(&self, c: &CoreCpu) {
        wrmsr(GLOBAL_CTRL, c.globalctrl.load(Ordering::Acquire));
    }

    /// Turns `bit` on in the global control (a stop leaves it on: the
    /// counter's own enable is what stops it), writing the MSR only when
    /// it changes, and clears the counter's stall. A counter whose bit is
    /// on is not stalled (the PMI handler, which this code cannot
    /// interrupt, stalls a counter and turns its bit off together), so
    /// most starts read the control word and are done.
    #[inline]
    fn enable(&self, c: &CoreCpu, bit: u64) {
        if c.globalctrl.load(Ordering::Acquire) & bit != 0 {
            return;
        }
        c.stalled.fetch_and(!bit, Ordering::AcqRel);
        let was = c.globalctrl.fetch_or(bit, Ordering::AcqRel);
        if was & bit == 0 {
            wrmsr(GLOBAL_CTRL, was | bit);
        }
    }

    /// `core_pcpu_init`, on the CPU: freeze on PMI where the
    /// architecture has it, and not in a virtual machine's guest, whose
    /// hypervisor may refuse the bit (as FreeBSD's).
    fn pcpu_init(&self, _cpu: u32) -> KResult<()> {
        if !kpi::x86::vm_guest() {
            wrmsr(DEBUGCTL, rdmsr(DEBUGCTL) | DEBUGCTL_FREEZE_ON_PMI);
        }
        Ok(())
    }

    /// `core_pcpu_fini`: every counter off.
    fn pcpu_fini(&self, _cpu: u32) {
        for ri in 0..self.iap_npmc {
            wrmsr(IAP_EVSEL0 + ri, 0);
        }
        wrmsr(IAF_CTRL, 0);
    }

    /// `core2_intr`: the PMI handler. Reads and clears the overflow
    /// status, takes a sample for each overflowed sampling PMC that runs,
    /// reloads its counter and stalls it if the ring was full. NMI
    /// context: no lock, no allocation, no reference count. Out of line,
    /// so that benchmarks can attribute its instructions (tools/bench/run).
    #[inline(never)]
    pub fn intr(&self, cpu: u32, sink: &dyn IntrSink) -> bool {
        let Ok(c) = self.cpu(cpu) else {
            return false;
        };
        let status = rdmsr(GLOBAL_STATUS);
        let frozen = status & STATUS_CTR_FRZ != 0;
        if !frozen {
            wrmsr(GLOBAL_CTRL, 0);
        }
        let mut found = false;
        let mut disable = 0u64;
        let mut take = |bit: u64, slot: &NmiSlot<Pmc>, ctr: u32, mask: u64| {
            if status & bit == 0 {
                return;
            }
            found = true;
            slot.with(|pm| {
                let Some(pm) = pm.filter(|pm| pm.running_unlocked() && !pm.mode.is_counting())
                else {
                    return;
                };
                if !sink.sample(pm, cpu) {
                    disable |= bit;
                }
                wrmsr(ctr, to_perfctr(true, pm.reload_unlocked(), mask));
            });
        };
        for (n, slot) in c.iaf.iter().enumerate() {
            let n = n as u32;
            take(1 << (IAF_OFFSET + n), slot, IAF_CTR0 + n, self.iaf_mask);
        }
        for (n, slot) in c.iap.iter().enumerate() {
            let n = n as u32;
            take(1 << n, slot, self.wroffset + IAP_PMC0 + n, self.iap_mask);
        }
        if found {
            sink.processed();
            kpi::x86::lapic_reenable_pcint();
        } else {
            sink.ignored();
        }
        if disable != 0 {
            c.stalled.fetch_or(disable, Ordering::AcqRel);
            c.globalctrl.fetch_and(!disable, Ordering::AcqRel);
        }
        // The Intel PT ToPA bit is pt(4)'s, whose NMI handler runs after
        // this one: left set for it (FreeBSD acknowledges it here too, and
        // pt(4) then misses its interrupt while hwpmc is loaded).
        let ack = status & !STATUS_TRACE_TOPA_PMI;
        if frozen {
            if disable != 0 {
                self.write_globalctrl(c);
            }
            wrmsr(GLOBAL_OVF_CTRL, ack);
        } else {
            wrmsr(GLOBAL_OVF_CTRL, ack);
            self.write_globalctrl(c);
        }
        found
    }

    /// Counters stalled on a full ring run again, for those of `bits`
    /// (the class's) whose PMC `pmc_of` finds running.
    fn unstall(&self, cpu: u32, bits: u64, pmc_of: impl Fn(u32) -> bool) {
        let Ok(c) = self.cpu(cpu) else {
            return;
        };
        unstall_on(cpu, c.stalled.load(Ordering::Acquire) & bits, |bit| {
            if pmc_of(bit) {
                self.enable(c, 1 << bit);
            }
        });
    }

    fn stalled(&self, cpu: u32, bits: u64) -> bool {
        self.cpu(cpu)
            .is_ok_and(|c| c.stalled.load(Ordering::Acquire) & bits != 0)
    }
}

/// The events that the model's tables restrict to some counters: the
/// counter mask allowed, or None for any counter.
fn iap_counters(cputype: PmcCputype, event: u8, umask: u8, cmask: u8) -> Option<u32> {
    use PmcCputype::*;
    match cputype {
        // FreeBSD's table for these models (by event only).
        IntelSandybridge | IntelSandybridgeXeon | IntelIvybridge | IntelIvybridgeXeon
        | IntelHaswell | IntelHaswellXeon | IntelBroadwell | IntelBroadwellXeon => match event {
            0xB7 => Some(1 << 0),
            0xC0 => Some(1 << 1),
            0x48 | 0xA2 | 0xA3 => Some(1 << 2),
            0xBB | 0xCD => Some(1 << 3),
            _ => None,
        },
        // The pmu-events tables: INST_RETIRED.PREC_DIST on counter 1;
        // with a counter mask (INST_RETIRED.TOTAL_CYCLES_PS) on 0, 2, 3.
        IntelSkylake | IntelSkylakeXeon => match (event, umask) {
            (0xC0, 0x01) if cmask == 0 => Some(1 << 1),
            (0xC0, 0x01) => Some(0b1101),
            _ => None,
        },
        // Ice Lake-X: the events its tables keep to counters 0-3.
        IntelIcelakeXeon if ICELAKEX_LOW_COUNTERS.contains(&(event, umask)) => Some(0xF),
        _ => None,
    }
}

/// (event, umask) pairs of the Ice Lake-X tables whose "Counter" is
/// "0,1,2,3" (of eight).
const ICELAKEX_LOW_COUNTERS: &[(u8, u8)] = &[
    (0x03, 0x02),
    (0x03, 0x08),
    (0x07, 0x01),
    (0x08, 0x02),
    (0x08, 0x04),
    (0x08, 0x08),
    (0x08, 0x0E),
    (0x08, 0x10),
    (0x08, 0x20),
    (0x24, 0x21),
    (0x24, 0x22),
    (0x24, 0x24),
    (0x24, 0x27),
    (0x24, 0x28),
    (0x24, 0xC1),
    (0x24, 0xC2),
    (0x24, 0xC4),
    (0x24, 0xC8),
    (0x24, 0xE1),
    (0x24, 0xE2),
    (0x24, 0xE4),
    (0x28, 0x07),
    (0x28, 0x18),
    (0x28, 0x20),
    (0x32, 0x01),
    (0x32, 0x02),
    (0x32, 0x04),
    (0x32, 0x08),
    (0x48, 0x01),
    (0x48, 0x02),
    (0x48, 0x04),
    (0x49, 0x02),
    (0x49, 0x04),
    (0x49, 0x08),
    (0x49, 0x0E),
    (0x49, 0x10),
    (0x49, 0x20),
    (0x4C, 0x01),
    (0x51, 0x01),
    (0x54, 0x01),
    (0x54, 0x02),
    (0x54, 0x80),
    (0x55, 0x01),
    (0x56, 0x01),
    (0x60, 0x01),
    (0x60, 0x02),
    (0x60, 0x04),
    (0x60, 0x08),
    (0x60, 0x10),
    (0x79, 0x04),
    (0x79, 0x08),
    (0x79, 0x30),
    (0x80, 0x04),
    (0x83, 0x01),
    (0x83, 0x02),
    (0x83, 0x04),
    (0x85, 0x02),
    (0x85, 0x04),
    (0x85, 0x0E),
    (0x85, 0x10),
    (0x85, 0x20),
    (0x87, 0x01),
    (0xA3, 0x01),
    (0xA3, 0x05),
    (0xA3, 0x06),
    (0xA3, 0x08),
    (0xA3, 0x0C),
    (0xA8, 0x01),
    (0xAB, 0x02),
    (0xB0, 0x01),
    (0xB0, 0x02),
    (0xB0, 0x04),
    (0xB0, 0x08),
    (0xB0, 0x10),
    (0xB0, 0x80),
    (0xB7, 0x01),
    (0xBD, 0x01),
    (0xBD, 0x20),
    (0xD0, 0x11),
    (0xD0, 0x12),
    (0xD0, 0x21),
    (0xD0, 0x41),
    (0xD0, 0x42),
    (0xD0, 0x81),
    (0xD0, 0x82),
    (0xD0, 0x83),
    (0xD1, 0x01),
    (0xD1, 0x02),
    (0xD1, 0x04),
    (0xD1, 0x08),
    (0xD1, 0x10),
    (0xD1, 0x20),
    (0xD1, 0x40),
    (0xD1, 0x80),
    (0xD2, 0x01),
    (0xD2, 0x02),
    (0xD2, 0x04),
    (0xD2, 0x08),
    (0xD3, 0x01),
    (0xD3, 0x02),
    (0xD3, 0x04),
    (0xD3, 0x08),
    (0xD3, 0x10),
    (0xD4, 0x04),
    (0xE6, 0x01),
    (0xEF, 0x01),
    (0xEF, 0x02),
    (0xEF, 0x04),
    (0xEF, 0x08),
    (0xEF, 0x10),
    (0xEF, 0x20),
    (0xEF, 0x40),
    (0xF0, 0x40),
    (0xF1, 0x1F),
    (0xF2, 0x01),
    (0xF2, 0x02),
    (0xF4, 0x04),
];

/// Whether an allocation request is for a PMU table event.
fn from_pmu_tables(req: &AllocRequest<'_>) -> bool {
    PmcFlags::from_bits_retain(req.raw.pm_flags).contains(PmcFlags::EV_PMU)
}

/// The IAP class.
#[derive(Debug)]
pub struct IapClass(pub KArc<Core>);

/// Whether this processor's off-core response register `msr` takes
/// `value`, which the PMC's start writes there: the bits it keeps differ
/// from model to model (Atom's reach above bit 37, Sandy Bridge's leave
/// holes), so the value is tried on the register, which gets its own
/// value back, in a critical section on this CPU (all CPUs are one
/// model). A register the processor lacks takes nothing.
fn offcore_takes(msr: u32, value: u64) -> bool {
    let _cs = kpi::sync::CriticalSection::enter();
    let Some(old) = kpi::x86::rdmsr_safe(msr) else {
        return false;
    };
    let taken = kpi::x86::wrmsr_safe(msr, value);
    if taken {
        wrmsr(msr, old);
    }
    taken
}

impl IapClass {
    /// The event select the class keeps in the PMC, EN included
    /// ([`PmcClassDep::md_config`]).
    fn evsel(&self, pm: &Pmc) -> u64 {
        pm.md_config
    }

    /// `start_pmc` with the CPU's state found: the off-core response
    /// register for the events that use one, the event select with EN,
    /// and the counter's global enable.
    #[inline(always)]
    fn start(&self, c: &CoreCpu, ri: u32, pm: &Pmc) {
        let evsel = self.evsel(pm);
        match evsel as u8 {
            0xB7 => wrmsr(OFFCORE_RSP0, pm.md.iap().pm_iap_rsp),
            0xBB => wrmsr(OFFCORE_RSP1, pm.md.iap().pm_iap_rsp),
            _ => {}
        }
        wrmsr(IAP_EVSEL0 + ri, evsel);
        self.0.enable(c, 1 << ri);
    }
}

impl PmcClassDep for IapClass {
    fn class(&self) -> PmcClass {
        PmcClass::Iap
    }
    fn caps(&self) -> PmcCaps {
        IAP_CAPS
    }
    fn width(&self) -> u32 {
        self.0.iap_width
    }
    fn num(&self) -> u32 {
        self.0.iap_npmc
    }
    fn row_name(&self, ri: u32) -> [u8; PMC_NAME_MAX] {
        row_name("IAP", ri)
    }
    fn pcpu_init(&self, cpu: u32) -> KResult<()> {
        self.0.pcpu_init(cpu)
    }
    fn pcpu_fini(&self, cpu: u32) {
        self.0.pcpu_fini(cpu)
    }
    fn allocate_pmc(&self, _cpu: u32, ri: u32, req: &AllocRequest<'_>) -> KResult<()> {
        if req.raw.pm_class != PmcClass::Iap.raw() || !from_pmu_tables(req) {
            return Err(EINVAL);
        }
        let md = req.raw.pm_md.iap();
        let config = md.pm_iap_config;
        if config & !SEL_REQUEST != 0 {
            return Err(EINVAL);
        }
        let offcore = match config as u8 {
            0xB7 => Some(OFFCORE_RSP0),
            0xBB => Some(OFFCORE_RSP1),
            _ => None,
        };
        if offcore.is_some_and(|msr| !offcore_takes(msr, md.pm_iap_rsp)) {
            return Err(EINVAL);
        }
        if config & SEL_ANY != 0 && !self.0.has_any_thread() {
            return Err(EINVAL);
        }
        let (event, umask, cmask) = (config as u8, (config >> 8) as u8, (config >> 24) as u8);
        match iap_counters(self.0.cputype, event, umask, cmask) {
            Some(allowed) if allowed & (1 << ri) == 0 => Err(EINVAL),
            _ => Ok(()),
        }
    }
    fn md_config(&self, req: &AllocRequest<'_>) -> u64 {
        req.raw.pm_md.iap().pm_iap_config & SEL_REQUEST | SEL_EN
    }
    fn config_pmc(&self, cpu: u32, ri: u32, pm: Option<&KArc<Pmc>>) -> KResult<()> {
        let c = self.0.cpu(cpu)?;
        let slot = c.iap.get(ri as usize).ok_or(EINVAL)?;
        let old = slot.replace(pm.cloned());
        drop(old);
        Ok(())
    }
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64> {
        let c = self.0.cpu(cpu)?;
        let slot = c.iap.get(ri as usize).ok_or(EINVAL)?;
        Ok(from_perfctr(
            samples(slot),
            rdmsr(IAP_PMC0 + ri),
            self.0.iap_mask,
        ))
    }
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()> {
        let c = self.0.cpu(cpu)?;
        let slot = c.iap.get(ri as usize).ok_or(EINVAL)?;
        let v = to_perfctr(samples(slot), value, self.0.iap_mask);
        wrmsr(self.0.wroffset + IAP_PMC0 + ri, v);
        Ok(())
    }
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        self.start(self.0.cpu(cpu)?, ri, pm);
        Ok(())
    }
    fn stop_pmc(&self, _cpu: u32, ri: u32, _pm: &Pmc) -> KResult<()> {
        wrmsr(IAP_EVSEL0 + ri, 0);
        Ok(())
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn get_msr(&self, ri: u32) -> KResult<u32> {
        Ok(ri)
    }
    fn switch_in(&self, cpu: u32, ri: u32, pm: &KArc<Pmc>, value: u64) {
        // config_pmc, write_pmc and start_pmc, with one look-up.
        let Ok(c) = self.0.cpu(cpu) else {
            return;
        };
        let Some(slot) = c.iap.get(ri as usize) else {
            return;
        };
        drop(slot.replace(Some(pm.clone())));
        let v = to_perfctr(!pm.mode.is_counting(), value, self.0.iap_mask);
        wrmsr(self.0.wroffset + IAP_PMC0 + ri, v);
        self.start(c, ri, pm);
    }
    fn switch_out(&self, cpu: u32, ri: u32, pm: &Pmc) -> Option<u64> {
        // stop_pmc, read_pmc and config_pmc(None), with one look-up.
        let slot = self.0.cpu(cpu).ok()?.iap.get(ri as usize)?;
        wrmsr(IAP_EVSEL0 + ri, 0);
        let v = rdmsr(IAP_PMC0 + ri);
        drop(slot.replace(None));
        Some(from_perfctr(!pm.mode.is_counting(), v, self.0.iap_mask))
    }
    fn unstall(&self, cpu: u32, pmcs: &RowPmcs<'_>) {
        let bits = width_mask(self.0.iap_npmc);
        self.0.unstall(cpu, bits, |bit| {
            pmcs.get(bit).is_some_and(|pm| pm.running_unlocked())
        });
    }
    fn stalled(&self, cpu: u32) -> bool {
        self.0.stalled(cpu, width_mask(self.0.iap_npmc))
    }
}

/// The IAF class.
#[derive(Debug)]
pub struct IafClass(pub KArc<Core>);

impl IafClass {
    /// The counter's four control bits: from the request's
    /// configuration, then from the PMC's capabilities.
    fn ctrl(&self, pm: &Pmc) -> u64 {
        let config = pm.md.iap().pm_iap_config;
        let mut flags = 0;
        if config & SEL_OS != 0 {
            flags |= IAF_OS;
        }
        if config & SEL_USR != 0 {
            flags |= IAF_USR;
        }
        if config & SEL_ANY != 0 {
            flags |= IAF_ANY;
        }
        if config & SEL_INT != 0 || pm.caps.contains(PmcCaps::INTERRUPT) {
            flags |= IAF_PMI;
        }
        if pm.caps.contains(PmcCaps::SYSTEM) {
            flags |= IAF_OS;
        }
        if pm.caps.contains(PmcCaps::USER) {
            flags |= IAF_USR;
        }
        if !pm.caps.intersects(PmcCaps::USER.union(PmcCaps::SYSTEM)) {
            flags |= IAF_OS | IAF_USR;
        }
        u64::from(flags)
    }
}

impl PmcClassDep for IafClass {
    fn class(&self) -> PmcClass {
        PmcClass::Iaf
    }
    fn caps(&self) -> PmcCaps {
        IAF_CAPS
    }
    fn width(&self) -> u32 {
        self.0.iaf_width
    }
    fn num(&self) -> u32 {
        self.0.iaf_npmc
    }
    fn row_name(&self, ri: u32) -> [u8; PMC_NAME_MAX] {
        row_name("IAF", ri)
    }
    fn pcpu_init(&self, _cpu: u32) -> KResult<()> {
        Ok(())
    }
    fn pcpu_fini(&self, _cpu: u32) {}
    fn allocate_pmc(&self, _cpu: u32, ri: u32, req: &AllocRequest<'_>) -> KResult<()> {
        if ri >= self.0.iaf_npmc || req.raw.pm_class != PmcClass::Iaf.raw() || !from_pmu_tables(req)
        {
            return Err(EINVAL);
        }
        let config = req.raw.pm_md.iap().pm_iap_config;
        // Only the mode, any-thread and interrupt bits mean anything to
        // a fixed counter.
        let allowed = 0xFFFF | SEL_USR | SEL_OS | SEL_INT | SEL_ANY;
        if config & !allowed != 0 || (config & SEL_ANY != 0 && !self.0.has_any_thread()) {
            return Err(EINVAL);
        }
        let (event, umask) = (config as u8, (config >> 8) as u8);
        let ok = if event == 0 {
            u32::from(umask) == ri + 1
        } else {
            matches!(
                (ri, event, umask),
                (0, 0xC0, 0x00) | (1, 0x3C, 0x00) | (2, 0x3C, 0x01) | (3, 0xA4, 0x01)
            )
        };
        if ok { Ok(()) } else { Err(EINVAL) }
    }
    fn config_pmc(&self, cpu: u32, ri: u32, pm: Option<&KArc<Pmc>>) -> KResult<()> {
        let c = self.0.cpu(cpu)?;
        let slot = c.iaf.get(ri as usize).ok_or(EINVAL)?;
        let old = slot.replace(pm.cloned());
        drop(old);
        Ok(())
    }
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64> {
        let c = self.0.cpu(cpu)?;
        let slot = c.iaf.get(ri as usize).ok_or(EINVAL)?;
        Ok(from_perfctr(
            samples(slot),
            rdmsr(IAF_CTR0 + ri),
            self.0.iaf_mask,
        ))
    }
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()> {
        let c = self.0.cpu(cpu)?;
        let slot = c.iaf.get(ri as usize).ok_or(EINVAL)?;
        let v = to_perfctr(samples(slot), value, self.0.iaf_mask);
        // The counter is off while it is written.
        let ctrl = c.iafctrl.load(Ordering::Acquire);
        wrmsr(IAF_CTRL, ctrl & !(0xF << (4 * ri)));
        wrmsr(IAF_CTR0 + ri, v);
        wrmsr(IAF_CTRL, ctrl);
        Ok(())
    }
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        let c = self.0.cpu(cpu)?;
        let field = self.ctrl(pm) << (4 * ri);
        let ctrl = c.iafctrl.fetch_or(field, Ordering::AcqRel) | field;
        wrmsr(IAF_CTRL, ctrl);
        self.0.enable(c, 1 << (IAF_OFFSET + ri));
        Ok(())
    }
    fn stop_pmc(&self, cpu: u32, ri: u32, _pm: &Pmc) -> KResult<()> {
        let c = self.0.cpu(cpu)?;
        let field = 0xF << (4 * ri);
        let ctrl = c.iafctrl.fetch_and(!field, Ordering::AcqRel) & !field;
        wrmsr(IAF_CTRL, ctrl);
        Ok(())
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn get_msr(&self, ri: u32) -> KResult<u32> {
        Ok(RDPMC_FIXED + ri)
    }
    fn unstall(&self, cpu: u32, pmcs: &RowPmcs<'_>) {
        let bits = width_mask(self.0.iaf_npmc) << IAF_OFFSET;
        self.0.unstall(cpu, bits, |bit| {
            pmcs.get(bit - IAF_OFFSET)
                .is_some_and(|pm| pm.running_unlocked())
        });
    }
    fn stalled(&self, cpu: u32) -> bool {
        self.0
            .stalled(cpu, width_mask(self.0.iaf_npmc) << IAF_OFFSET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints() {
        use PmcCputype::*;
        assert_eq!(iap_counters(IntelSkylake, 0xC0, 0x01, 0), Some(2));
        assert_eq!(iap_counters(IntelSkylake, 0xC0, 0x00, 0), None);
        assert_eq!(iap_counters(IntelHaswell, 0xCD, 0x01, 0), Some(8));
        assert_eq!(iap_counters(IntelIcelakeXeon, 0xD0, 0x81, 0), Some(0xF));
        assert_eq!(iap_counters(IntelIcelakeXeon, 0xC0, 0x00, 0), None);
    }
}

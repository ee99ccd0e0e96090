//! AMD core performance counters (hwpmc_amd.c): the K8 class, on every
//! family from K8 (0Fh) on, as FreeBSD identifies them.
//!
//! This driver gives the core counters (PERF_CTL0-3/PERF_CTR0-3 at
//! C001_0000h and C001_0004h, and with PerfCtrExtCore counters 4 and 5 at
//! C001_0208h-C001_020Bh; FreeBSD offers six whatever the CPU) and not
//! FreeBSD's ten L3 and Data Fabric rows: a request for those sub-classes
//! is refused with EINVAL (hwpmc(4) says so).
//!
//! Differences from FreeBSD, deliberate: a configuration that sets bits
//! the hardware reserves, or EN, is refused with EINVAL; the RDPMC index
//! of counters 4 and 5 is 4 and 5 (FreeBSD reports their MSR offsets).

use kpi::KResult;
use kpi::atomic::{AtomicU32, AtomicU64, Ordering};
use kpi::errno::EINVAL;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::nmi::NmiSlot;
use kpi::x86::{rdmsr, wrmsr};
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcClass, PmcCputype, PmcFlags};
use uapi::pmc_mdep::x86::AmdSubClass;

use crate::hwpmc_class::{AllocRequest, IntrSink, MdIntr, PmcClassDep, RowPmcs, unstall_on};
use crate::hwpmc_tsc::TscClass;
use crate::hwpmc_x86::{Signature, from_perfctr, row_name, samples, to_perfctr};
use crate::{MachineDep, Pmc, say};

/// Core counters with PerfCtrExtCore (CPUID 0x80000001 ECX bit 23).
pub const AMD_CORE_NPMCS: u32 = 6;
/// Core counters without it (the legacy four).
pub const AMD_LEGACY_NPMCS: u32 = 4;
/// Counter width.
const AMD_WIDTH: u32 = 48;
/// Its bits.
const AMD_MASK: u64 = (1 << AMD_WIDTH) - 1;
/// PERF_CTL: enable.
const AMD_PMC_ENABLE: u64 = 1 << 22;
/// How many microseconds a stop waits at most for the NMI of an overflow
/// that came just before it (`OVERFLOW_WAIT_COUNT`).
const OVERFLOW_WAIT_COUNT: u32 = 50;
/// PERF_CTL bits a request may set: event select (7:0, 35:32), unit
/// mask, USR, OS, edge, INT, INV, counter mask, guest-only and host-only.
const AMD_REQUEST: u64 =
    0xFF | 0xFF00 | 0x7 << 16 | 1 << 20 | 1 << 23 | 0xFF << 24 | 0xF << 32 | 0x3 << 40;

/// `AMD_PMC_CAPS`.
const AMD_CAPS: PmcCaps = PmcCaps::INTERRUPT
    .union(PmcCaps::USER)
    .union(PmcCaps::SYSTEM)
    .union(PmcCaps::EDGE)
    .union(PmcCaps::THRESHOLD)
    .union(PmcCaps::READ)
    .union(PmcCaps::WRITE)
    .union(PmcCaps::INVERT)
    .union(PmcCaps::QUALIFIER);

/// The (PERF_CTL, PERF_CTR) MSRs of core counter `ri`.
fn msrs(ri: u32) -> (u32, u32) {
    if ri < 4 {
        (0xC001_0000 + ri, 0xC001_0004 + ri)
    } else {
        (0xC001_0200 + 2 * ri, 0xC001_0201 + 2 * ri)
    }
}

struct AmdCpu {
    rows: KVec<NmiSlot<Pmc>>,
    stalled: AtomicU64,
    /// NMIs still to claim after an overflow (the PMI of an overflow can
    /// arrive after a later NMI already handled it).
    nmi_counter: AtomicU32,
}

/// The K8 class.
pub struct AmdClass {
    /// Core counters: 6 with PerfCtrExtCore, else 4.
    npmc: u32,
    cpus: KVec<AmdCpu>,
}

impl core::fmt::Debug for AmdClass {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AmdClass").finish_non_exhaustive()
    }
}

impl AmdClass {
    fn new(ncpu: u32, npmc: u32) -> KResult<AmdClass> {
        let cpus = KVec::try_from_fn(ncpu as usize, Wait::WaitOk, |cpu| {
            Ok(AmdCpu {
                rows: KVec::from_fn(npmc as usize, Wait::WaitOk, |_| NmiSlot::new(cpu as u32))?,
                stalled: AtomicU64::new(0),
                nmi_counter: AtomicU32::new(0),
            })
        })?;
        Ok(AmdClass { npmc, cpus })
    }

    fn row(&self, cpu: u32, ri: u32) -> KResult<(&AmdCpu, &NmiSlot<Pmc>)> {
        let c = self.cpus.get(cpu as usize).ok_or(EINVAL)?;
        Ok((c, c.rows.get(ri as usize).ok_or(EINVAL)?))
    }

    fn evsel(pm: &Pmc) -> u64 {
        pm.md.amd().pm_amd_config & AMD_REQUEST
    }

    /// `amd_intr`: the PMI handler. NMI context.
    fn intr(&self, cpu: u32, sink: &dyn IntrSink) -> bool {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return false;
        };
        let mut found = false;
        let mut active = 0;
        for (ri, slot) in c.rows.iter().enumerate() {
            let ri = ri as u32;
            let (evsel, perfctr) = msrs(ri);
            slot.with(|pm| {
                let Some(pm) = pm.filter(|pm| !pm.mode.is_counting()) else {
                    return;
                };
                active += 1;
                // A sampling counter starts negative: bit 47 clear is an
                // overflow.
                if rdmsr(perfctr) >> (AMD_WIDTH - 1) & 1 != 0 {
                    return;
                }
                found = true;
                if !pm.running_unlocked() {
                    return;
                }
                let config = rdmsr(evsel);
                wrmsr(evsel, config & !AMD_PMC_ENABLE);
                let reload = pm.reload_unlocked();
                wrmsr(perfctr, to_perfctr(true, reload, AMD_MASK));
                if sink.sample(pm, cpu) {
                    wrmsr(evsel, config);
                } else {
                    c.stalled.fetch_or(1 << ri, Ordering::AcqRel);
                }
            });
        }
        if found {
            c.nmi_counter.store(active.min(2), Ordering::Relaxed);
        } else if c.nmi_counter.load(Ordering::Relaxed) > 0 {
            c.nmi_counter.fetch_sub(1, Ordering::Relaxed);
            found = true;
        }
        if found {
            sink.processed();
        } else {
            sink.ignored();
        }
        found
    }
}

impl PmcClassDep for AmdClass {
    fn class(&self) -> PmcClass {
        PmcClass::K8
    }
    fn caps(&self) -> PmcCaps {
        AMD_CAPS
    }
    fn width(&self) -> u32 {
        AMD_WIDTH
    }
    fn num(&self) -> u32 {
        self.npmc
    }
    fn row_name(&self, ri: u32) -> [u8; PMC_NAME_MAX] {
        row_name("K8", ri)
    }
    fn pcpu_init(&self, _cpu: u32) -> KResult<()> {
        Ok(())
    }
    fn pcpu_fini(&self, _cpu: u32) {
        for ri in 0..self.npmc {
            let (evsel, _) = msrs(ri);
            wrmsr(evsel, rdmsr(evsel) & !AMD_PMC_ENABLE);
        }
    }
    fn allocate_pmc(&self, _cpu: u32, ri: u32, req: &AllocRequest<'_>) -> KResult<()> {
        if ri >= self.npmc
            || req.raw.pm_class != PmcClass::K8.raw()
            || !PmcFlags::from_bits_retain(req.raw.pm_flags).contains(PmcFlags::EV_PMU)
        {
            return Err(EINVAL);
        }
        let md = req.raw.pm_md.amd();
        if md.pm_amd_sub_class != AmdSubClass::Core as u32 || md.pm_amd_config & !AMD_REQUEST != 0 {
            return Err(EINVAL);
        }
        Ok(())
    }
    fn config_pmc(&self, cpu: u32, ri: u32, pm: Option<&KArc<Pmc>>) -> KResult<()> {
        let (_, slot) = self.row(cpu, ri)?;
        let old = slot.replace(pm.cloned());
        drop(old);
        Ok(())
    }
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64> {
        let (_, slot) = self.row(cpu, ri)?;
        Ok(from_perfctr(samples(slot), rdmsr(msrs(ri).1), AMD_MASK))
    }
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()> {
        let (_, slot) = self.row(cpu, ri)?;
        wrmsr(msrs(ri).1, to_perfctr(samples(slot), value, AMD_MASK));
        Ok(())
    }
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        let (c, _) = self.row(cpu, ri)?;
        c.stalled.fetch_and(!(1 << ri), Ordering::AcqRel);
        wrmsr(msrs(ri).0, Self::evsel(pm) | AMD_PMC_ENABLE);
        Ok(())
    }
    fn stop_pmc(&self, _cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        let (evsel, perfctr) = msrs(ri);
        wrmsr(evsel, Self::evsel(pm) & !AMD_PMC_ENABLE);
        // The NMI of an overflow just before the stop comes late on newer
        // processors; it must find the PMC still on its row, or nobody
        // claims it. While the sampling counter's top bit is clear (it
        // wrapped, and the handler has not reloaded it yet), wait, up to
        // 50 times 1 us, as FreeBSD's amd_stop_pmc does. (Its test shifts
        // an int by 47, which x86 takes modulo 32; this one tests bit 47,
        // and only for sampling PMCs, which raise the NMI.)
        if pm.mode.is_sampling() {
            for _ in 0..OVERFLOW_WAIT_COUNT {
                if rdmsr(perfctr) & (1 << (AMD_WIDTH - 1)) != 0 {
                    break;
                }
                kpi::x86::delay(1);
            }
        }
        Ok(())
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn get_msr(&self, ri: u32) -> KResult<u32> {
        Ok(ri)
    }
    fn unstall(&self, cpu: u32, pmcs: &RowPmcs<'_>) {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return;
        };
        unstall_on(cpu, c.stalled.load(Ordering::Acquire), |ri| {
            if let Some(pm) = pmcs.get(ri).filter(|pm| pm.running_unlocked()) {
                let _ = self.start_pmc(cpu, ri, pm);
            }
        });
    }
    fn stalled(&self, cpu: u32) -> bool {
        self.cpus
            .get(cpu as usize)
            .is_some_and(|c| c.stalled.load(Ordering::Acquire) != 0)
    }
}

/// The PMI handler.
struct AmdIntr(KArc<AmdClass>);

impl MdIntr for AmdIntr {
    fn intr(&self, cpu: u32, sink: &dyn IntrSink) -> bool {
        self.0.intr(cpu, sink)
    }
}

/// A class the MD layer shares with its interrupt handler.
struct Shared(KArc<AmdClass>);

impl core::fmt::Debug for Shared {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

impl PmcClassDep for Shared {
    crate::forward_class_common!();
    crate::forward_class! {
        caps() -> PmcCaps;
    }
}

/// `pmc_amd_initialize`: every family from 0Fh on (base family field
/// 0xF) is `PMC_CPU_AMD_K8`; None (after FreeBSD's message) otherwise.
pub fn initialize(sig: Signature, ncpu: u32) -> KResult<Option<MachineDep>> {
    if sig.base_family != 0xF {
        say(format_args!(
            "pmc: Unknown AMD CPU {:x} {}-{}.",
            sig.eax, sig.family, sig.model
        ));
        return Ok(None);
    }
    // Counters 4 and 5 exist only with PerfCtrExtCore: without it their
    // MSRs would fault (FreeBSD offers them on every family).
    let ext_core = kpi::x86::cpuid(0x8000_0001, 0)[2] & (1 << 23) != 0;
    let npmc = if ext_core {
        AMD_CORE_NPMCS
    } else {
        AMD_LEGACY_NPMCS
    };
    let amd = KArc::try_new(AmdClass::new(ncpu, npmc)?, Wait::WaitOk)?;
    let mut classes = KVec::with_capacity(2, Wait::WaitOk)?;
    let tsc = kpi::kbox_dyn!(TscClass, Wait::WaitOk, dyn PmcClassDep)?;
    let k8 = kpi::kbox_dyn!(Shared(amd.clone()), Wait::WaitOk, dyn PmcClassDep)?;
    let _ = classes.push_within_capacity(tsc);
    let _ = classes.push_within_capacity(k8);
    let intr: KBox<dyn MdIntr> = kpi::kbox_dyn!(AmdIntr(amd), Wait::WaitOk, dyn MdIntr)?;
    Ok(Some(MachineDep {
        cputype: PmcCputype::AmdK8,
        classes,
        intr: Some(intr),
    }))
}

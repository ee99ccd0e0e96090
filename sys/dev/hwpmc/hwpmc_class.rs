//! The class interface (`struct pmc_classdep` of sys/pmc.h): what every
//! family of counters implements. The SOFT and TSC classes here, and the
//! Intel, AMD and ARM backends later, plug into the machine-independent
//! core through it.
//!
//! Row indices given to a class are relative to the class (`adjri`); the
//! core maps its global rows onto them. Calls that touch hardware run on
//! the CPU they name (the core binds there first), and those marked as
//! such may run with spin locks held or in interrupt context: they must not
//! sleep or allocate.

use kpi::KResult;
use kpi::errno::ENOSYS;
use kpi::malloc::{KArc, KBox};
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcClass, PmcMode, PmcOpPmcallocate};

use crate::{CpuRows, PhwRow, Pmc};

/// The PMCs configured on one class's rows of one CPU, lent by the core
/// (whose rows hold them) to the class's interrupt path and sweep, under
/// the core's lock of that CPU's rows.
#[derive(Debug, Clone, Copy)]
pub struct RowPmcs<'a> {
    rows: &'a [PhwRow],
    occupied: u64,
}

impl<'a> RowPmcs<'a> {
    /// The class's `num` rows among a CPU's rows, from its first row on.
    pub(crate) fn new(rows: &'a CpuRows, first_ri: u32, num: u32) -> RowPmcs<'a> {
        RowPmcs {
            rows: rows.get(first_ri as usize..).unwrap_or(&[]),
            occupied: rows.occupied().checked_shr(first_ri).unwrap_or(0)
                & crate::ops::width_mask(num),
        }
    }

    /// The class's rows that have a PMC, a bit each (bit 0 for its first
    /// row).
    pub fn occupied(&self) -> u64 {
        self.occupied
    }

    /// The PMC configured on the class's row `ri`.
    pub fn get(&self, ri: u32) -> Option<&'a KArc<Pmc>> {
        self.rows.get(ri as usize)?.pmc.as_ref()
    }

    /// The class's first `N` rows, for a class of `N` rows: indices below
    /// `N` need no check. None when the CPU has fewer.
    pub(crate) fn first<const N: usize>(&self) -> Option<&'a [PhwRow; N]> {
        self.rows.first_chunk::<N>()
    }
}

/// What the core asks a class to allocate: the request after the core's
/// own checks.
#[derive(Debug, Clone, Copy)]
pub struct AllocRequest<'a> {
    /// The mode.
    pub mode: PmcMode,
    /// Capabilities, including INTERRUPT for sampling modes.
    pub caps: PmcCaps,
    /// The raw request (event, class, machine-dependent configuration).
    pub raw: &'a PmcOpPmcallocate,
}

/// What a class's interrupt path reports to the core.
pub trait IntrSink {
    /// An interrupt was handled.
    fn processed(&self);
    /// An interrupt concerned no running PMC.
    fn ignored(&self);
    /// A sampling PMC reached its count on `cpu`: take a sample of the
    /// interrupted context (`pmc_process_interrupt`). False when the
    /// sample was dropped on a full ring; the class then stalls the
    /// counter until [`PmcClassDep::unstall`].
    fn sample(&self, pm: &Pmc, cpu: u32) -> bool;
}

/// The machine-dependent PMI handler (`pmd_intr`): NMI context, on the
/// interrupted CPU; true when the NMI was the PMU's.
pub trait MdIntr: Send + Sync {
    /// Handles the PMI of `cpu`.
    fn intr(&self, cpu: u32, sink: &dyn IntrSink) -> bool;
}

/// Runs `restart` for each bit of `stalled` (a class's counters stalled on
/// a full ring of `cpu`) on that CPU; from another CPU it asks for that
/// CPU's next sweep instead, since the counters' registers are per CPU.
pub fn unstall_on(cpu: u32, mut stalled: u64, mut restart: impl FnMut(u32)) {
    if stalled == 0 {
        return;
    }
    if kpi::cpu::curcpu() != cpu {
        kpi::kern_pmc::set_cpu_sampled(cpu);
        return;
    }
    while stalled != 0 {
        let bit = stalled.trailing_zeros();
        stalled &= stalled - 1;
        restart(bit);
    }
}

/// The [`PmcClassDep`] methods every wrapper of a class forwards (all but
/// `caps`, `get_caps` and `shareable`), for [`forward_class!`].
#[macro_export]
#[doc(hidden)]
macro_rules! forward_class_common {
    () => {
        $crate::forward_class! {
            class() -> PmcClass;
            width() -> u32;
            num() -> u32;
            row_name(ri: u32) -> [u8; PMC_NAME_MAX];
            pcpu_init(cpu: u32) -> KResult<()>;
            pcpu_fini(cpu: u32) -> ();
            allocate_pmc(cpu: u32, ri: u32, req: &AllocRequest<'_>) -> KResult<()>;
            md_config(req: &AllocRequest<'_>) -> u64;
            config_pmc(cpu: u32, ri: u32, pm: Option<&KArc<Pmc>>) -> KResult<()>;
            read_pmc(cpu: u32, ri: u32) -> KResult<u64>;
            write_pmc(cpu: u32, ri: u32, value: u64) -> KResult<()>;
            start_pmc(cpu: u32, ri: u32, pm: &Pmc) -> KResult<()>;
            stop_pmc(cpu: u32, ri: u32, pm: &Pmc) -> KResult<()>;
            release_pmc(cpu: u32, ri: u32, pm: &Pmc) -> KResult<()>;
            get_msr(ri: u32) -> KResult<u32>;
            unstall(cpu: u32, pmcs: &RowPmcs<'_>) -> ();
            stalled(cpu: u32) -> bool;
        }
    };
}

/// Implements [`PmcClassDep`] methods by calling the same methods of
/// `self.0`.
#[macro_export]
#[doc(hidden)]
macro_rules! forward_class {
    ($($name:ident($($arg:ident: $t:ty),*) -> $r:ty;)*) => {
        $(fn $name(&self, $($arg: $t),*) -> $r { self.0.$name($($arg),*) })*
    };
}

/// A class with some capabilities taken away (no PMC interrupt: the local
/// APIC has no entry for it).
pub struct WithoutCaps(pub KBox<dyn PmcClassDep>, pub PmcCaps);

impl core::fmt::Debug for WithoutCaps {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("WithoutCaps").field(&self.1).finish()
    }
}

impl PmcClassDep for WithoutCaps {
    crate::forward_class_common!();
    crate::forward_class! {
        shareable() -> bool;
    }
    fn caps(&self) -> PmcCaps {
        self.0.caps().difference(self.1)
    }
    fn get_caps(&self, ri: u32) -> PmcCaps {
        self.0.get_caps(ri).difference(self.1)
    }
}

/// Wraps `dep` so that it lacks `caps`.
pub fn without_caps(dep: KBox<dyn PmcClassDep>, caps: PmcCaps) -> KResult<KBox<dyn PmcClassDep>> {
    kpi::kbox_dyn!(
        WithoutCaps(dep, caps),
        kpi::malloc::Wait::WaitOk,
        dyn PmcClassDep
    )
}

/// One family of counters (`struct pmc_classdep`).
pub trait PmcClassDep: Send + Sync {
    /// `pcd_class`.
    fn class(&self) -> PmcClass;
    /// `pcd_caps`: what the class can do.
    fn caps(&self) -> PmcCaps;
    /// `pcd_width`: counter width in bits.
    fn width(&self) -> u32;
    /// `pcd_num`: rows per CPU.
    fn num(&self) -> u32;
    /// Whether several PMCs may be configured on one row of one CPU
    /// (`PMC_PHW_FLAG_IS_SHAREABLE`).
    fn shareable(&self) -> bool {
        false
    }
    /// `pcd_describe`: the row's name.
    fn row_name(&self, ri: u32) -> [u8; PMC_NAME_MAX];
    /// `pcd_pcpu_init` (may allocate).
    fn pcpu_init(&self, cpu: u32) -> KResult<()>;
    /// `pcd_pcpu_fini`.
    fn pcpu_fini(&self, cpu: u32);
    /// `pcd_allocate_pmc`: accept or refuse row `ri` for the request.
    fn allocate_pmc(&self, cpu: u32, ri: u32, req: &AllocRequest<'_>) -> KResult<()>;
    /// The class's configuration word for a PMC of an accepted request,
    /// kept in the PMC ([`Pmc::md_config`]) so that starts need not derive
    /// it again (FreeBSD's classes fill `pm_md` at allocation).
    fn md_config(&self, _req: &AllocRequest<'_>) -> u64 {
        0
    }
    /// `pcd_config_pmc`: load (`Some`) or unload (`None`) a PMC on a row.
    /// No sleeping.
    fn config_pmc(&self, cpu: u32, ri: u32, pm: Option<&KArc<Pmc>>) -> KResult<()>;
    /// `pcd_read_pmc`. No sleeping.
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64>;
    /// `pcd_write_pmc`. No sleeping.
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()>;
    /// `pcd_start_pmc`. No sleeping.
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()>;
    /// `pcd_stop_pmc`. No sleeping.
    fn stop_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()>;
    /// `pcd_release_pmc`.
    fn release_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()>;
    /// A context switch-in loads `pm` on a row: `config_pmc`, `write_pmc`
    /// of `value` and `start_pmc`, whose errors the switch ignores. One
    /// call, so that a class can take its locks once. No sleeping.
    fn switch_in(&self, cpu: u32, ri: u32, pm: &KArc<Pmc>, value: u64) {
        let _ = self.config_pmc(cpu, ri, Some(pm));
        let _ = self.write_pmc(cpu, ri, value);
        let _ = self.start_pmc(cpu, ri, pm);
    }
    /// A context switch-out takes `pm` off a row: `stop_pmc`, `read_pmc`
    /// and `config_pmc(None)`; the value read, or None when it could not
    /// be read. No sleeping.
    fn switch_out(&self, cpu: u32, ri: u32, pm: &Pmc) -> Option<u64> {
        let _ = self.stop_pmc(cpu, ri, pm);
        let value = self.read_pmc(cpu, ri);
        let _ = self.config_pmc(cpu, ri, None);
        value.ok()
    }
    /// `pcd_get_caps`: capabilities of one row (GETCAPS).
    fn get_caps(&self, _ri: u32) -> PmcCaps {
        self.caps()
    }
    /// `pcd_get_msr`: the RDPMC index of a row; ENOSYS without RDPMC.
    fn get_msr(&self, _ri: u32) -> KResult<u32> {
        Err(ENOSYS)
    }
    /// The core drained `cpu`'s sample rings: counters stalled on a full
    /// ring run again. `pmcs` are the PMCs on the class's rows of `cpu`.
    fn unstall(&self, _cpu: u32, _pmcs: &RowPmcs<'_>) {}
    /// Whether a counter of `cpu` is stalled on a full ring.
    fn stalled(&self, _cpu: u32) -> bool {
        false
    }
    /// Rows that count kernel event `event`, as (holding the event armed,
    /// stalled): for the invariant checks of tests.
    fn rows_on_event(&self, _event: u32) -> (u32, u32) {
        (0, 0)
    }
}

//! hwpmc(4): the machine-independent core of the PMC driver (FreeBSD's
//! hwpmc_mod.c), written against `kpi`.
//!
//! The driver serves one system call taking an operation and a user
//! pointer, tracks owners (processes that allocated PMCs) and targets
//! (processes PMCs are attached to), keeps per-row dispositions, and moves
//! process-virtual counters on and off the hardware at context switches.
//!
//! Locking, outermost first (the simulator's witness checks the order):
//! - `pmc-sx` ([`Sx`]) serialises the system call and the fork, exit and
//!   exec handlers; it guards owners, PMC targets and row dispositions;
//! - `pmc-processhash` (spin) guards the target descriptors, which the
//!   context-switch hooks use;
//! - `pmc-pcpu` (spin, one per CPU) guards what each CPU's rows hold;
//! - the classes' own per-CPU spin locks;
//! - `pmc-pool` (spin, one per PMC) guards a PMC's state and values;
//!   what the context switches and the interrupt path use of them (the
//!   state as published, the run count, a process counting PMC's total)
//!   they read and change atomically, without it.
//!
//! Memory is allocated only with `pmc-sx` held and no spin lock: anything a
//! spin-locked section inserts is allocated before it.

#![no_std]

extern crate alloc;

#[macro_use]
extern crate kpi;

/// `EXTERROR(error, msg)` of hwpmc_mod.c (category
/// `EXTERR_CAT_HWPMC_MOD`): the failing system call's extended error,
/// with hwpmc_mod.c's messages (those of FreeBSD's 2026 tests,
/// tests/sys/pmc/pmc_exterr_test.c); gives `error` back.
macro_rules! exterror {
    ($error:expr, $msg:expr) => {
        kpi::exterr::set(
            $error,
            uapi::exterr::EXTERR_CAT_HWPMC_MOD,
            $msg,
            0,
            0,
            line!(),
        )
    };
}

#[macro_use]
mod debug;
#[cfg(target_arch = "x86_64")]
pub mod hwpmc_amd;
pub mod hwpmc_class;
#[cfg(target_arch = "x86_64")]
pub mod hwpmc_core;
#[cfg(target_arch = "x86_64")]
pub mod hwpmc_intel;
mod hwpmc_logging;
mod hwpmc_notify;
pub mod hwpmc_soft;
pub mod hwpmc_tsc;
#[cfg(target_arch = "x86_64")]
pub mod hwpmc_x86;
mod inspect;
mod maps;
mod ops;
mod procs;
mod sampling;
pub mod sysctls;

use core::fmt::Write as _;
use kpi::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kpi::sysctl::SysctlSet;

use kpi::errno::{EINVAL, ENOSYS, EPROGMISMATCH};
use kpi::hooks::{Hook, KernelEvent};
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::proc::Pid;
use kpi::sync::{SpinMutex, SpinMutexBox, Sx, SxBox};
use kpi::{Errno, KResult};
use uapi::pmc::*;

use crate::hwpmc_class::{IntrSink, MdIntr, PmcClassDep, RowPmcs};
use crate::hwpmc_logging::{LogPool, OwnerLog};
use crate::maps::SsOwners;
use crate::procs::{PidHash, PmcProcess, ThreadFreeList};
pub use crate::sampling::SampleStats as SamplingStats;
use crate::sampling::{Ring, SampleStats, Samplers};
use crate::sysctls::Knobs;
pub use crate::sysctls::{PMC_MINCOUNT, SYSCTLS, Stats};

/// A PMC: what was allocated (immutable) and its run-time values.
#[derive(Debug)]
pub struct Pmc {
    /// The id returned to the owner.
    pub id: PmcId,
    /// Event code.
    pub event: u32,
    /// Mode.
    pub mode: PmcMode,
    /// Class.
    pub class: PmcClass,
    /// Capabilities granted (INTERRUPT added for sampling modes).
    pub caps: PmcCaps,
    /// Global row index.
    pub ri: u32,
    /// CPU of a system-mode PMC; `PMC_CPU_ANY` for a process-mode one.
    pub cpu: u32,
    /// The owner process.
    pub owner: Pid,
    /// Machine-dependent configuration from the allocation request.
    pub md: PmcMdOpPmcallocate,
    /// The class's own configuration word for the PMC, computed once from
    /// the request at allocation ([`PmcClassDep::md_config`]; IAP: the
    /// event select with its enable bit), as FreeBSD's classes keep theirs
    /// in `pm_md` for the context switches.
    pub md_config: u64,
    /// The flags as allocated. The call-chain and logging requests among
    /// them never change; the interrupt path reads them without the
    /// lock of `vals`, whose flags the driver's own bits change.
    pub alloc_flags: PmcFlags,
    vals: SpinMutexBox<PmcVals>,
    /// Whether `vals.state` is Running, and `vals.reloadcount`, published
    /// whenever they change under the lock, for the interrupt path, which
    /// reads them without the lock, as FreeBSD's reads `pm_state` and
    /// `pm_reloadcount`.
    running: AtomicBool,
    /// Whether `vals.state` is Deleted, published with `running`: a
    /// switch-out does not credit a released PMC.
    deleted: AtomicBool,
    reload: AtomicU64,
    /// CPUs a process PMC is loaded on now (`pm_runcount`, a counter(9)
    /// there): changed by the switch paths without the lock of `vals`.
    runcount: AtomicU32,
    /// `pm_gv.pm_savedvalue`: a process counting PMC's total, which the
    /// switch-outs of every CPU add to without a lock.
    savedvalue: AtomicU64,
    /// The owner's log, while it has one.
    log: SpinMutexBox<Option<KArc<OwnerLog>>>,
    /// What the PMC's samples name it by (`sampling`'s table of sampling
    /// PMCs; `sampling::NO_KEY` until it is entered there, and again
    /// once released).
    sample_key: AtomicU64,
    /// Samples dropped on a full ring since the last DROPNOTIFY, counted
    /// by the interrupt path without a lock.
    dropped: AtomicU64,
    /// Samples dropped on a full ring, all told.
    dropped_total: AtomicU64,
    /// Notification counts (`hwpmc_notify`), read without a lock.
    notify: hwpmc_notify::NotifyCounts,
    /// The notification's thread-context half, once configured.
    notifier: SpinMutexBox<Option<KArc<hwpmc_notify::Notifier>>>,
}

/// The values of a PMC that change while it runs (`pmc-pool`).
#[derive(Debug, Clone, Copy)]
pub struct PmcVals {
    /// `pm_state`.
    pub state: PmcState,
    /// `pm_flags`, with the driver's internal bits.
    pub flags: PmcFlags,
    /// `pm_sc.pm_reloadcount` of a sampling PMC.
    pub reloadcount: u64,
    /// `pm_sc.pm_initial` of a system counting PMC.
    pub initial: u64,
}

impl Pmc {
    /// A PMC of `event` in `mode`, running, for the unit tests of the
    /// classes.
    #[cfg(test)]
    pub(crate) fn for_test(event: u32, mode: PmcMode, reloadcount: u64) -> KArc<Pmc> {
        KArc::try_new(
            Pmc {
                id: 0,
                event,
                mode,
                class: PmcClass::Soft,
                caps: PmcCaps::READ,
                ri: 0,
                cpu: 0,
                owner: 1,
                // SAFETY: the machine-dependent part is plain integers.
                md: unsafe { core::mem::zeroed() },
                md_config: 0,
                alloc_flags: PmcFlags::empty(),
                vals: kpi::sync::SpinMutex::new(
                    c"pmc-pool",
                    PmcVals {
                        state: PmcState::Running,
                        flags: PmcFlags::empty(),
                        reloadcount,
                        initial: 0,
                    },
                    Wait::WaitOk,
                )
                .expect("allocate"),
                running: AtomicBool::new(true),
                deleted: AtomicBool::new(false),
                reload: AtomicU64::new(reloadcount),
                runcount: AtomicU32::new(0),
                savedvalue: AtomicU64::new(0),
                log: kpi::sync::SpinMutex::new(c"pmc-logref", None, Wait::WaitOk)
                    .expect("allocate"),
                sample_key: AtomicU64::new(sampling::NO_KEY),
                dropped: AtomicU64::new(0),
                dropped_total: AtomicU64::new(0),
                notify: Default::default(),
                notifier: kpi::sync::SpinMutex::new(c"pmc-notifier", None, Wait::WaitOk)
                    .expect("allocate"),
            },
            Wait::WaitOk,
        )
        .expect("allocate")
    }

    /// The current state.
    pub fn state(&self) -> PmcState {
        self.vals.lock().state
    }
    /// A copy of the run-time values.
    pub fn vals(&self) -> PmcVals {
        *self.vals.lock()
    }
    fn update<R>(&self, f: impl FnOnce(&mut PmcVals) -> R) -> R {
        let mut v = self.vals.lock();
        let published = (v.state, v.reloadcount);
        let r = f(&mut v);
        // What the interrupt path reads unlocked changes only through
        // update_published (checked in test builds).
        debug_assert!(
            published == (v.state, v.reloadcount),
            "PMC {:#x}: state or reload count changed without being published",
            self.id
        );
        r
    }
    /// [`Pmc::update`] for changes of the state or the reload count:
    /// publishes both before the lock is let go.
    fn update_published<R>(&self, f: impl FnOnce(&mut PmcVals) -> R) -> R {
        let mut v = self.vals.lock();
        let r = f(&mut v);
        self.running
            .store(v.state == PmcState::Running, Ordering::Release);
        self.deleted
            .store(v.state == PmcState::Deleted, Ordering::Release);
        self.reload.store(v.reloadcount, Ordering::Release);
        r
    }
    /// Whether the PMC runs, read without its lock (the interrupt path):
    /// its state is Running and its refresh count, if it has one, did not
    /// run out.
    pub(crate) fn running_unlocked(&self) -> bool {
        self.running.load(Ordering::Acquire) && !self.notify.exhausted()
    }
    /// The reload count of a sampling PMC, read without its lock.
    pub(crate) fn reload_unlocked(&self) -> u64 {
        self.reload.load(Ordering::Acquire)
    }
    /// The owner's log, if it takes records.
    fn log(&self) -> Option<KArc<OwnerLog>> {
        self.log.lock().clone().filter(|l| l.is_open())
    }
    /// Sets the log reference; the old one is dropped after the spin
    /// lock, since dropping the last reference frees.
    fn set_log(&self, log: Option<KArc<OwnerLog>>) {
        let old = core::mem::replace(&mut *self.log.lock(), log);
        drop(old);
    }
}

/// What tests may see of an allocated PMC ([`Hwpmc::for_each_pmc`]).
#[derive(Debug, Clone, Copy)]
pub struct PmcView {
    /// The PMC's id.
    pub id: PmcId,
    /// The owner process.
    pub owner: Pid,
    /// Event code.
    pub event: u32,
    /// Class.
    pub class: PmcClass,
    /// Mode.
    pub mode: PmcMode,
    /// CPU of a system PMC, `PMC_CPU_ANY` for a process one.
    pub cpu: u32,
    /// `pm_state`.
    pub state: PmcState,
    /// `pm_flags`.
    pub flags: PmcFlags,
    /// CPUs it is configured on now.
    pub runcount: u32,
    /// Processes it is attached to.
    pub targets: usize,
    /// The owner's running system samplers (`po_sscount`).
    pub owner_sscount: u32,
    /// The owner has a log configured.
    pub owner_has_log: bool,
}

/// The hardware classes' sink: samples go to the hardware ring.
struct HardSink<'a>(&'a Hwpmc);

impl IntrSink for HardSink<'_> {
    fn processed(&self) {
        self.0.processed();
    }
    fn ignored(&self) {
        self.0.ignored();
    }
    fn sample(&self, pm: &Pmc, cpu: u32) -> bool {
        self.0.process_interrupt(RING_HARD, pm, cpu)
    }
}

/// The ring of hardware samples (`PMC_HR`).
const RING_HARD: usize = 0;

impl Hwpmc {
    /// The PMI (NMI context): the machine's handler on this CPU.
    fn pmc_intr(&self) -> bool {
        let cpu = kpi::cpu::curcpu();
        self.intr
            .as_ref()
            .is_some_and(|i| i.intr(cpu, &HardSink(self)))
    }

    /// Registers the NMI handler when the machine's classes interrupt.
    fn register_pmc_intr(this: &KArc<Self>) -> KResult<()> {
        if this.intr.is_none() {
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        {
            let d = this.clone();
            let handler = kpi::kbox_dyn!(
                move || d.pmc_intr(),
                Wait::WaitOk,
                dyn Fn() -> bool + Send + Sync
            )?;
            kpi::x86::set_pmc_intr(Some(handler))?;
        }
        Ok(())
    }

    /// Removes the NMI handler and the local APIC's PMC interrupt.
    fn unregister_pmc_intr(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.intr.is_some() {
                let _ = kpi::x86::set_pmc_intr(None);
            }
            hwpmc_x86::md_finalize(self.cputype);
        }
    }
}

impl IntrSink for Hwpmc {
    fn processed(&self) {
        self.stats.intr_processed.add(1);
    }
    fn ignored(&self) {
        self.stats.intr_ignored.add(1);
    }
    fn sample(&self, pm: &Pmc, cpu: u32) -> bool {
        self.process_interrupt(sampling::RING_SOFT, pm, cpu)
    }
}

/// The loader tunables, after validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunables {
    /// `kern.hwpmc.hashsize`.
    pub hashsize: u32,
    /// `kern.hwpmc.nsamples`.
    pub nsamples: u32,
    /// `kern.hwpmc.callchaindepth`.
    pub callchaindepth: u32,
    /// `kern.hwpmc.mtxpoolsize`.
    pub mtxpoolsize: u32,
    /// `kern.hwpmc.logbuffersize` (KiB).
    pub logbuffersize: u32,
    /// `kern.hwpmc.nbuffers_pcpu`.
    pub nbuffers_pcpu: u32,
}

/// Most KiB of log buffer per CPU.
const LOG_MEM_PCPU_MAX_KB: i64 = 32 * 1024;
/// Largest log buffer, KiB.
const LOG_BUFFER_SIZE_MAX_KB: i64 = 16 * 1024;

/// A console line, formatted without allocating (cut at 256 bytes).
fn say(args: core::fmt::Arguments<'_>) {
    let mut line = kpi::LineBuf::<256>::new();
    let _ = line.write_fmt(args);
    kpi::printf(line.as_str());
}

impl Tunables {
    /// Validates the loader tunables, which the kernel loaded into the
    /// driver's variables when it linked the module in, as
    /// `pmc_initialize` and `pmclog_initialize` do: a bad value is
    /// reported and the variable (what sysctl(8) shows) reset to its
    /// default.
    fn fetch(k: &Knobs) -> Tunables {
        let mut hashsize = k.hashsize.get();
        if hashsize <= 0 {
            say(format_args!(
                "hwpmc: tunable hashsize={hashsize} must be greater than zero."
            ));
            hashsize = PMC_HASH_SIZE as i64;
            k.hashsize.set(hashsize);
        }
        let mut nsamples = k.nsamples.get();
        if nsamples <= 0 || nsamples > 65535 {
            say(format_args!(
                "hwpmc: tunable nsamples={nsamples} out of range."
            ));
            nsamples = PMC_NSAMPLES as i64;
            k.nsamples.set(nsamples);
        }
        let mut callchaindepth = k.callchaindepth.get();
        if callchaindepth <= 0 || callchaindepth > PMC_CALLCHAIN_DEPTH_MAX as i64 {
            say(format_args!(
                "hwpmc: tunable callchaindepth={callchaindepth} out of range - using {PMC_CALLCHAIN_DEPTH_MAX}."
            ));
            callchaindepth = PMC_CALLCHAIN_DEPTH_MAX as i64;
            k.callchaindepth.set(callchaindepth);
        }
        let mut mtxpoolsize = k.mtxpoolsize.get();
        if mtxpoolsize <= 0 {
            mtxpoolsize = PMC_MTXPOOL_SIZE as i64;
            k.mtxpoolsize.set(mtxpoolsize);
        }
        let mut logbuffersize = k.logbuffersize.get();
        if logbuffersize <= 0 || logbuffersize > LOG_BUFFER_SIZE_MAX_KB {
            say(format_args!(
                "hwpmc: logbuffersize={logbuffersize} must be greater than zero and less than or equal to {LOG_BUFFER_SIZE_MAX_KB}, resetting to {PMC_LOG_BUFFER_SIZE}."
            ));
            logbuffersize = PMC_LOG_BUFFER_SIZE as i64;
            k.logbuffersize.set(logbuffersize);
        }
        let mut nbuffers = k.nbuffers_pcpu.get();
        if nbuffers <= 0 {
            say(format_args!(
                "hwpmc: nbuffers_pcpu={nbuffers} must be greater than zero, resetting to {PMC_NLOGBUFFERS_PCPU}."
            ));
            nbuffers = PMC_NLOGBUFFERS_PCPU as i64;
            k.nbuffers_pcpu.set(nbuffers);
        }
        if nbuffers * logbuffersize > LOG_MEM_PCPU_MAX_KB {
            say(format_args!(
                "hwpmc: nbuffers_pcpu={nbuffers} * logbuffersize={logbuffersize} exceeds {}MB per CPU limit, resetting to defaults ({PMC_NLOGBUFFERS_PCPU} * {PMC_LOG_BUFFER_SIZE}).",
                LOG_MEM_PCPU_MAX_KB / 1024
            ));
            nbuffers = PMC_NLOGBUFFERS_PCPU as i64;
            logbuffersize = PMC_LOG_BUFFER_SIZE as i64;
            k.nbuffers_pcpu.set(nbuffers);
            k.logbuffersize.set(logbuffersize);
        }
        Tunables {
            hashsize: hashsize as u32,
            nsamples: nsamples as u32,
            callchaindepth: callchaindepth as u32,
            mtxpoolsize: mtxpoolsize as u32,
            logbuffersize: logbuffersize as u32,
            nbuffers_pcpu: nbuffers as u32,
        }
    }
}

/// A class and the first global row it owns.
pub(crate) struct ClassSlot {
    dep: KBox<dyn PmcClassDep>,
    first_ri: u32,
    /// `dep.num()`, kept: the context-switch path maps rows to classes
    /// without calling through the class for it.
    num: u32,
    /// The mask of `dep.width()` bits, kept for the same reason.
    width_mask: u64,
}

/// The path of a process's executable as the PMCATTACH and PROCEXEC
/// records give it: "unknown" when it could not be found, as FreeBSD's
/// `pmc_getfilename` writes it.
pub(crate) fn executable_path(path: &[u8]) -> &[u8] {
    if path.is_empty() { b"unknown" } else { path }
}

/// What one row of one CPU holds (`struct pmc_hw`).
#[derive(Debug, Default)]
pub(crate) struct PhwRow {
    /// `PMC_PHW_FLAG_IS_ENABLED` (PMCADMIN).
    enabled: bool,
    /// The PMC configured on the row.
    pmc: Option<KArc<Pmc>>,
    /// `PMC_PCPU_SAVED`: the value loaded at switch-in.
    saved: u64,
}

/// One CPU's rows (`struct pmc_cpu`).
#[derive(Debug)]
pub(crate) struct CpuRows {
    /// Room for every row a mask bit can name, so that the switch paths
    /// index it by a bit's position without a bounds check; the first
    /// `len` (the driver's rows, none on an absent CPU) are in use.
    rows: [PhwRow; NPMC_MAX as usize],
    len: usize,
    /// The SOFT class's state of this CPU's rows 0 to 15, as the class
    /// has it, for the context-switch paths.
    soft: KArc<hwpmc_soft::SoftRows>,
    /// Bit `ri` is set while row `ri` holds a process PMC loaded by a
    /// switch-in: the switch-out visits only those rows.
    loaded: u64,
    /// The process the `loaded` rows were loaded for: the one switched in
    /// last (a switch-out unloads every row it loaded).
    loaded_pid: Pid,
    /// Bit `ri` is set while row `ri` holds a system PMC. With `loaded`,
    /// the rows that hold a PMC, which the classes' interrupt paths visit
    /// ([`RowPmcs::occupied`]); kept apart so that a switch changes one
    /// mask, not two.
    system: u64,
    /// User mode may execute RDPMC on this CPU (CR4.PCE on x86) since a
    /// switch-in of a process that asked for it; unknown, so true, at
    /// load. The switch-out clears CR4.PCE only then, rather than at
    /// every switch-out as FreeBSD's `core_switch_out` does: a write of
    /// CR4 serializes the CPU.
    user_rdpmc: bool,
}

impl PhwRow {
    /// The PMC configured on the row.
    pub(crate) fn pmc(&self) -> Option<&KArc<Pmc>> {
        self.pmc.as_ref()
    }
}

impl CpuRows {
    /// The rows that hold a PMC, a bit each.
    pub(crate) fn occupied(&self) -> u64 {
        self.system | self.loaded
    }

    /// Puts system PMC `pm` on row `ri`.
    pub(crate) fn put_system(&mut self, ri: u32, pm: &KArc<Pmc>) {
        if let Some(row) = self.get_mut(ri as usize) {
            row.pmc = Some(pm.clone());
            self.system |= 1 << ri;
        }
    }

    /// Empties row `ri` (its PMC is no longer there, nor loaded).
    pub(crate) fn clear(&mut self, ri: u32) {
        if let Some(row) = self.get_mut(ri as usize) {
            row.pmc = None;
            let bit = !(1u64 << ri);
            self.loaded &= bit;
            self.system &= bit;
        }
    }
}

impl core::ops::Deref for CpuRows {
    type Target = [PhwRow];
    fn deref(&self) -> &[PhwRow] {
        &self.rows[..self.len]
    }
}

impl core::ops::DerefMut for CpuRows {
    fn deref_mut(&mut self) -> &mut [PhwRow] {
        &mut self.rows[..self.len]
    }
}

/// Most rows the driver handles: the context-switch paths keep a bit per
/// row.
const NPMC_MAX: u32 = u64::BITS;

/// [`Hwpmc::row_class`] of a row no class owns.
const NO_CLASS: u8 = u8::MAX;

/// An owner's PMC and the processes it is attached to.
struct OwnedPmc {
    pmc: KArc<Pmc>,
    targets: KVec<Pid>,
    /// The owner read the row's RDPMC index (PMCGETMSR).
    msr_taken: bool,
}

/// `struct pmc_owner`.
struct Owner {
    pid: Pid,
    pmcs: KVec<OwnedPmc>,
    /// The log file (`PMC_PO_OWNS_LOGFILE` when set).
    log: Option<KArc<OwnerLog>>,
    /// Running system-sampling PMCs (`po_sscount`).
    sscount: u32,
    /// Kernel mappings were logged (`PMC_PO_INITIAL_MAPPINGS_DONE`).
    kernel_maps_logged: bool,
    /// Every process's mappings were logged (`po_logprocmaps`).
    procmaps_logged: bool,
}

impl Owner {
    fn new(pid: Pid, pmcs: KVec<OwnedPmc>) -> Owner {
        Owner {
            pid,
            pmcs,
            log: None,
            sscount: 0,
            kernel_maps_logged: false,
            procmaps_logged: false,
        }
    }
    /// The log, if it takes records.
    fn open_log(&self) -> Option<&KArc<OwnerLog>> {
        self.log.as_ref().filter(|l| l.is_open())
    }
}

/// What `pmc-sx` guards.
struct Core {
    owners: KVec<KBox<Owner>>,
    /// `pmc_pmcdisp`: 0 free, > 0 process PMCs, < 0 system PMCs or
    /// administratively disabled.
    rowdisp: KVec<i32>,
}

/// The driver.
pub struct Hwpmc {
    tun: Tunables,
    cputype: PmcCputype,
    /// The SOFT class, also `classes[0]`: the software events' hook calls
    /// it directly, as FreeBSD's calls `pmc_soft_intr`.
    soft: KArc<hwpmc_soft::SoftClass>,
    classes: KVec<ClassSlot>,
    /// The index in `classes` of each global row's class (`NO_CLASS`
    /// past the last row), so that the context-switch paths find a row's
    /// class without a search.
    row_class: [u8; NPMC_MAX as usize],
    npmc: u32,
    ncpu: u32,
    core: SxBox<Core>,
    procs: SpinMutexBox<PidHash<PmcProcess>>,
    pcpu: KVec<SpinMutexBox<CpuRows>>,
    stats: KArc<Stats>,
    sample_stats: SampleStats,
    /// Refresh counts that ran out on a dropped sample, for the next drain
    /// (`hwpmc_notify`).
    notify_ends_due: AtomicU64,
    /// Per CPU: a sample of a PMC with notification waits in its ring, to
    /// be drained at the interrupted thread's return to user mode rather
    /// than at the next clock tick.
    notify_due: KVec<AtomicBool>,
    /// Owners of running system-wide sampling PMCs (`pmc_ss_owners`);
    /// the kernel's `pmc_ss_count` counts them.
    ss_owners: SpinMutexBox<SsOwners>,
    /// Thread descriptors kept for reuse (`pmc_threadfreelist`).
    thread_freelist: SpinMutexBox<ThreadFreeList>,
    logpool: KArc<LogPool>,
    rings: KVec<KVec<Ring>>,
    /// The sampling PMCs, by the keys their samples carry.
    samplers: SpinMutexBox<Samplers>,
    unloading: AtomicBool,
    /// The machine's PMI handler.
    intr: Option<KBox<dyn MdIntr>>,
    /// Inline, not shared: the trace points' test is one load from the
    /// driver (the sysctl's handler holds the driver).
    debug: debug::DebugFlags,
    knobs: Knobs,
}

impl core::fmt::Debug for Hwpmc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Hwpmc")
            .field("npmc", &self.npmc)
            .field("ncpu", &self.ncpu)
            .finish_non_exhaustive()
    }
}

/// The machine-dependent part of the driver (`struct pmc_mdep`): the CPU
/// type and the hardware classes, which follow the SOFT class.
pub struct MachineDep {
    /// `pmd_cputype`.
    pub cputype: PmcCputype,
    /// The classes, in classdep order.
    pub classes: KVec<KBox<dyn PmcClassDep>>,
    /// The PMI handler (`pmd_intr`), for hardware classes that interrupt.
    pub intr: Option<KBox<dyn MdIntr>>,
}

impl core::fmt::Debug for MachineDep {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MachineDep")
            .field("cputype", &self.cputype)
            .field("classes", &self.classes.len())
            .finish()
    }
}

impl MachineDep {
    /// `pmc_md_initialize` for a machine without a supported PMU backend:
    /// the generic CPU type and the time-stamp counter.
    pub fn detect(_ncpu: u32) -> KResult<MachineDep> {
        let mut classes = KVec::with_capacity(1, Wait::WaitOk)?;
        let tsc = kpi::kbox_dyn!(hwpmc_tsc::TscClass, Wait::WaitOk, dyn PmcClassDep)?;
        let _ = classes.push_within_capacity(tsc);
        Ok(MachineDep {
            cputype: PmcCputype::Generic,
            classes,
            intr: None,
        })
    }

    /// `pmc_md_initialize`: the hardware classes of this machine's CPU
    /// (x86: Intel core or AMD), or [`MachineDep::detect`]'s.
    pub fn initialize(ncpu: u32) -> KResult<MachineDep> {
        #[cfg(target_arch = "x86_64")]
        {
            hwpmc_x86::md_initialize(ncpu)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            MachineDep::detect(ncpu)
        }
    }
}

/// The loaded module: the driver and its registrations with the kernel.
/// Dropping it without [`Module::unload`] leaves the registrations.
#[derive(Debug)]
pub struct Module {
    /// Its handler holds the driver: dropped (detached) first.
    _debugflags: kpi::sysctl::StrKnob,
    driver: KArc<Hwpmc>,
    syscall: u32,
    _events: kpi::hooks::EventTag,
    /// Declared first and dropped last: the sysctls outlive the driver.
    _sysctls: SysctlSet,
}

/// `%b` bit names of the capabilities in the load banner.
const CAP_BITS: [&str; 12] = [
    "INT", "USR", "SYS", "EDG", "THR", "REA", "WRI", "INV", "QUA", "PRC", "TAG", "CSC",
];

/// The capabilities as the kernel's `%b` prints them: hex, then the names
/// of the set bits.
fn write_caps(out: &mut impl core::fmt::Write, caps: PmcCaps) -> core::fmt::Result {
    write!(out, "0x{:x}", caps.bits())?;
    let mut sep = '<';
    for (i, name) in CAP_BITS.iter().enumerate() {
        if caps.bits() & (1 << i) != 0 {
            write!(out, "{sep}{name}")?;
            sep = ',';
        }
    }
    if sep == ',' {
        out.write_char('>')?;
    }
    Ok(())
}

impl Module {
    /// Module load (`pmc_initialize`): checks the kernel, validates the
    /// tunables, sets up the classes and per-CPU state, registers the
    /// system call, the hooks and the event handlers, and prints the
    /// banner.
    pub fn load() -> KResult<Module> {
        Module::load_with(MachineDep::initialize)
    }

    /// Module load with the machine-dependent part built by `md` (after
    /// the kernel checks): the entry the hardware backends use.
    pub fn load_with(md: fn(u32) -> KResult<MachineDep>) -> KResult<Module> {
        // FreeBSD's rule: the kernel's version equals PMC_VERSION of the
        // tree the module is built in (a 15.0 tree's for a 15.0 kernel),
        // not the newest ABI the driver knows.
        let kernel = kpi::kern_pmc::pmc_kernel_version();
        let module = kpi::kern_pmc::pmc_module_version();
        if kernel != module {
            if kernel == 0 {
                kpi::printf("hwpmc: this kernel has not been compiled with 'options HWPMC_HOOKS'.");
            } else {
                say(format_args!(
                    "hwpmc: kernel version (0x{kernel:x}) does not match module version (0x{module:x})."
                ));
            }
            return Err(EPROGMISMATCH);
        }
        let sysctls = SysctlSet::declare(&SYSCTLS)?;
        let knobs = Knobs::find()?;
        let tun = Tunables::fetch(&knobs);
        kpi::kern_pmc::pmc_ss_count_reset();
        let ncpu = kpi::cpu::ncpu_ids();
        let md = md(ncpu)?;
        let mut classes: KVec<ClassSlot> = KVec::with_capacity(1 + md.classes.len(), Wait::WaitOk)?;
        // The SOFT class comes first, as classdep index 0; the driver
        // keeps it by its type too, for the software events' hook.
        let soft = KArc::try_new(hwpmc_soft::SoftClass::new(ncpu)?, Wait::WaitOk)?;
        let soft_dep = kpi::kbox_dyn!(
            hwpmc_soft::SoftDep(soft.clone()),
            Wait::WaitOk,
            dyn PmcClassDep
        )?;
        let mut npmc = soft_dep.num();
        let _ = classes.push_within_capacity(ClassSlot {
            width_mask: ops::width_mask(soft_dep.width()),
            dep: soft_dep,
            first_ri: 0,
            num: npmc,
        });
        let cputype = md.cputype;
        let intr = md.intr;
        let mut md_classes = md.classes;
        while !md_classes.is_empty() {
            let dep = md_classes.remove(0);
            let num = dep.num();
            let _ = classes.push_within_capacity(ClassSlot {
                width_mask: ops::width_mask(dep.width()),
                dep,
                first_ri: npmc,
                num,
            });
            npmc += num;
        }
        if npmc > NPMC_MAX {
            say(format_args!(
                "hwpmc: {npmc} rows, more than the {NPMC_MAX} supported"
            ));
            return Err(EINVAL);
        }
        let mut row_class = [NO_CLASS; NPMC_MAX as usize];
        for (i, slot) in classes.iter().enumerate() {
            for ri in slot.first_ri..slot.first_ri + slot.num {
                row_class[ri as usize] = i as u8;
            }
        }
        // The switch paths call rows 0 to SOFT_NPMCS - 1 as the SOFT class.
        kassert!(
            row_class[..hwpmc_soft::SOFT_NPMCS as usize]
                .iter()
                .all(|&c| c == 0),
            "the SOFT class does not hold rows 0 to {}",
            hwpmc_soft::SOFT_NPMCS - 1
        );
        let mut pcpu = KVec::try_from_fn(ncpu as usize, Wait::WaitOk, |cpu| {
            let rows = CpuRows {
                rows: core::array::from_fn(|_| PhwRow {
                    enabled: true,
                    pmc: None,
                    saved: 0,
                }),
                len: 0,
                soft: soft.rows_of(cpu as u32).ok_or(EINVAL)?,
                loaded: 0,
                loaded_pid: 0,
                system: 0,
                user_rdpmc: true,
            };
            SpinMutex::new(c"pmc-pcpu", rows, Wait::WaitOk)
        })?;
        for cpu in 0..ncpu {
            if !kpi::cpu::exists(cpu) {
                continue;
            }
            pcpu[cpu as usize].as_mut().data_mut().len = npmc as usize;
            // On the CPU itself, as FreeBSD's pmc_select_cpu: the classes
            // set up its registers.
            let _bound = kpi::cpu::bind(cpu);
            for slot in classes.iter() {
                slot.dep.pcpu_init(cpu)?;
            }
        }
        let rowdisp = KVec::from_fn(npmc as usize, Wait::WaitOk, |_| 0i32)?;
        let cpus = (0..ncpu).filter(|&c| kpi::cpu::exists(c)).count();
        let logpool = KArc::try_new(
            LogPool::new(
                cpus * tun.nbuffers_pcpu as usize,
                tun.logbuffersize as usize * 1024,
            )?,
            Wait::WaitOk,
        )?;
        let stats = KArc::try_new(Stats::attach()?, Wait::WaitOk)?;
        let rings = sampling::alloc_rings(ncpu, tun.nsamples, tun.callchaindepth)?;
        let samplers = sampling::alloc_samplers()?;
        let owners = KVec::new();
        let procs = PidHash::new(tun.hashsize, Wait::WaitOk)?;
        let debug = debug::DebugFlags::default();
        let initial = kpi::sysctl::tunable_str("kern.hwpmc.debugflags", Wait::WaitOk)?;
        let initial = initial.as_deref().unwrap_or(&[]);
        let initial_text = core::str::from_utf8(initial).ok();
        let valid = initial_text.is_some_and(|t| debug.set(t).is_ok());
        if !valid {
            say(format_args!(
                "hwpmc: tunable debugflags=\"{}\" is not valid, ignored.",
                initial.escape_ascii()
            ));
        }
        let driver = KArc::try_new(
            Hwpmc {
                tun,
                cputype,
                soft,
                classes,
                row_class,
                npmc,
                ncpu,
                core: Sx::new(c"pmc-sx", Core { owners, rowdisp }, Wait::WaitOk)?,
                procs: SpinMutex::new(c"pmc-processhash", procs, Wait::WaitOk)?,
                pcpu,
                stats,
                sample_stats: SampleStats::default(),
                notify_ends_due: AtomicU64::new(0),
                notify_due: KVec::from_fn(ncpu as usize, Wait::WaitOk, |_| AtomicBool::new(false))?,
                ss_owners: SpinMutex::new(c"pmc-ssowners", SsOwners::default(), Wait::WaitOk)?,
                thread_freelist: SpinMutex::new(
                    c"pmc-threadfreelist",
                    ThreadFreeList::default(),
                    Wait::WaitOk,
                )?,
                logpool,
                rings,
                samplers,
                unloading: AtomicBool::new(false),
                intr,
                debug,
                knobs,
            },
            Wait::WaitOk,
        )?;
        let d = driver.clone();
        let debugflags = kpi::sysctl::StrKnob::new(
            "kern.hwpmc.debugflags",
            initial_text.filter(|_| valid).unwrap_or(""),
            kpi::kbox_dyn!(
                move |v: &str| d.debug.set(v),
                Wait::WaitOk,
                dyn Fn(&str) -> KResult<()> + Send + Sync
            )?,
        )?;

        // Everything the registrations need is allocated before the first
        // one, so that a failure leaves nothing registered.
        let d = driver.clone();
        let syscall_fn = kpi::kbox_dyn!(
            move |args: &[u64]| d.syscall(args),
            Wait::WaitOk,
            dyn Fn(&[u64]) -> KResult<i64> + Send + Sync
        )?;
        let d = driver.clone();
        let hook_fn = kpi::kbox_dyn!(
            move |h: &Hook| d.hook(h),
            Wait::WaitOk,
            dyn Fn(&Hook) + Send + Sync
        )?;
        let d = driver.clone();
        let event_fn = kpi::kbox_dyn!(
            move |e: &KernelEvent| d.event(e),
            Wait::WaitOk,
            dyn Fn(&KernelEvent) + Send + Sync
        )?;
        let events = kpi::hooks::eventhandler_register(event_fn)?;
        let syscall = kpi::syscall_register(syscall_fn)?;
        if let Err(e) = kpi::hooks::set_pmc_hook(Some(hook_fn)) {
            kpi::syscall_deregister(syscall);
            return Err(e);
        }
        if let Err(e) = Hwpmc::register_pmc_intr(&driver) {
            let _ = kpi::hooks::set_pmc_hook(None);
            kpi::syscall_deregister(syscall);
            return Err(e);
        }

        let mut banner = kpi::LineBuf::<512>::new();
        let _ = banner.write_str("hwpmc:");
        for slot in driver.classes.iter() {
            let dep = &slot.dep;
            if dep.num() == 0 {
                continue;
            }
            let _ = write!(
                banner,
                " {}/{}/{}/",
                dep.class().name(),
                dep.num(),
                dep.width()
            );
            let _ = write_caps(&mut banner, dep.caps());
        }
        kpi::printf(banner.as_str());
        pmcdbg!(
            driver.debug,
            "module",
            "init",
            "npmc={} ncpu={}",
            driver.npmc,
            ncpu
        );
        Ok(Module {
            _debugflags: debugflags,
            driver,
            syscall,
            _events: events,
            _sysctls: sysctls,
        })
    }

    /// The dynamic system call number (what modstat(2) reports).
    pub fn syscall_number(&self) -> u32 {
        self.syscall
    }

    /// The driver, for inspection.
    pub fn driver(&self) -> &Hwpmc {
        &self.driver
    }

    /// Module unload (`pmc_cleanup`): unhooks the driver, releases every
    /// owner's PMCs and sends it SIGBUS, and frees all state.
    pub fn unload(self) {
        let _ = self.unload_counted();
    }

    /// [`Module::unload`], returning the sampling statistics as they were
    /// at the end (samples taken, logged, not logged), for tests that
    /// compare them with the logs.
    pub fn unload_counted(self) -> (u64, u64, u64) {
        let d = &self.driver;
        d.unloading.store(true, Ordering::Release);
        let _ = kpi::hooks::set_pmc_hook(None);
        kpi::syscall_deregister(self.syscall);
        d.process_all_samples();
        {
            let mut core = d.core.lock();
            while let Some(last) = core.owners.len().checked_sub(1) {
                let pid = core.owners[last].pid;
                d.remove_owner_at(&mut core, last);
                kpi::proc::psignal(pid, kpi::proc::SIGBUS);
            }
        }
        // Samples that waited for a user call chain, of PMCs now released,
        // are counted as not logged rather than left in the rings.
        d.process_all_samples();
        kassert!(
            kpi::kern_pmc::pmc_ss_count() == 0 && d.ss_owner_count() == 0,
            "system samplers left at unload: pmc_ss_count {}, {} on the list",
            kpi::kern_pmc::pmc_ss_count(),
            d.ss_owner_count()
        );
        d.drain_thread_freelist();
        for cpu in 0..d.ncpu {
            if kpi::cpu::exists(cpu) {
                let _bound = kpi::cpu::bind(cpu);
                for slot in d.classes.iter() {
                    slot.dep.pcpu_fini(cpu);
                }
            }
        }
        d.unregister_pmc_intr();
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let s = &d.sample_stats;
        let counts = (ld(&s.taken), ld(&s.logged), ld(&s.unlogged));
        // The closures registered above hold references; dropping the
        // registrations (done) and `self` frees the driver.
        drop(self);
        counts
    }
}

impl Hwpmc {
    /// The validated tunables.
    pub fn tunables(&self) -> Tunables {
        self.tun
    }

    /// Rows per CPU over all classes (`pmd_npmc`).
    pub fn npmc(&self) -> u32 {
        self.npmc
    }

    /// The statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Sampling statistics (logged, not logged, merged user chains).
    pub fn sample_stats(&self) -> &SampleStats {
        &self.sample_stats
    }

    /// Log buffers not in use by any owner.
    pub fn log_buffers_free(&self) -> usize {
        self.logpool.available()
    }

    /// The class that owns global row `ri` and the row index within it.
    #[inline]
    fn ri_to_class(&self, ri: u32) -> Option<(&dyn PmcClassDep, u32)> {
        self.ri_to_slot(ri).map(|s| (&*s.dep, ri - s.first_ri))
    }

    #[inline]
    fn ri_to_slot(&self, ri: u32) -> Option<&ClassSlot> {
        self.classes
            .get(usize::from(*self.row_class.get(ri as usize)?))
    }

    fn class_of(&self, class: u32) -> Option<&ClassSlot> {
        self.classes.iter().find(|s| s.dep.class().raw() == class)
    }

    /// The system call: `args[0]` is the operation, `args[1]` the user
    /// pointer to its argument.
    fn syscall(&self, args: &[u64]) -> KResult<i64> {
        if self.unloading.load(Ordering::Acquire) {
            return Err(ENOSYS);
        }
        let op = args.first().copied().unwrap_or(u64::MAX) as i32;
        let arg = kpi::uio::UserPtr(args.get(1).copied().unwrap_or(0));
        self.stats.syscalls.add(1);
        pmcdbg!(
            self.debug,
            "module",
            "syscall",
            "op={} arg={:#x}",
            op,
            arg.0
        );
        let r = match PmcOp::from_raw(op as u32).filter(|_| op >= 0) {
            Some(op) => self.dispatch(op, arg),
            None => self.dispatch_extension(op as u32, arg),
        };
        if r.is_err() {
            self.stats.syscall_errors.add(1);
        }
        // Thread descriptors past kern.hwpmc.threadfreelist_max are freed
        // here, where freeing is allowed (FreeBSD's free task).
        self.trim_thread_freelist();
        r.map(|()| 0)
    }

    /// The kernel's hook (`pmc_hook`). The context switches, by far the
    /// most frequent calls, go to their own functions before anything
    /// else is set up.
    #[inline]
    fn hook(&self, h: &Hook) {
        match *h {
            Hook::CswIn => self.csw_in(),
            Hook::CswOut => self.csw_out(),
            _ => self.hook_other(h),
        }
    }

    /// Every other hook.
    #[inline(never)]
    fn hook_other(&self, h: &Hook) {
        match *h {
            Hook::CswIn => self.csw_in(),
            Hook::CswOut => self.csw_out(),
            Hook::SoftSampling { ev, cpu } => {
                let Some(rows) = self.pcpu.get(cpu as usize) else {
                    return;
                };
                let rows = rows.lock();
                // The SOFT class's rows come first.
                let pmcs = RowPmcs::new(&rows, 0, hwpmc_soft::SOFT_NPMCS);
                self.soft.soft_event(cpu, ev, &pmcs, self);
            }
            Hook::ProcessExec {
                credentials_changed,
                base,
                dyn_base,
            } => {
                self.ss_exec(base, dyn_base);
                self.process_exec(credentials_changed, base, dyn_base)
            }
            Hook::UserRet => self.user_callchain(),
            Hook::DoSamples => self.process_samples(kpi::cpu::curcpu()),
            Hook::Mmap { addr } => self.process_mmap(addr),
            Hook::Munmap { addr, size } => self.process_munmap(addr, size),
            Hook::ThrCreate { thread } => {
                self.thread_add(&thread);
                self.ss_thread_create(&thread);
            }
            Hook::ThrExit { tid } => {
                self.thread_delete(tid);
                self.ss_thread_exit(tid);
            }
            Hook::ThrCreateLog { thread } => self.ss_thread_create(&thread),
            Hook::ThrExitLog { tid } => self.ss_thread_exit(tid),
            Hook::ProcCreateLog { pid, flags, comm } => self.ss_proc_create(pid, flags, &comm),
        }
    }

    fn event(&self, e: &KernelEvent) {
        match *e {
            KernelEvent::ProcessFork { parent, child } => {
                self.ss_fork(parent, child);
                self.process_fork(parent, child)
            }
            KernelEvent::ProcessExit { pid } => {
                self.ss_exit(pid);
                self.process_exit(pid)
            }
            KernelEvent::KldLoad { addr } => self.kld_changed(addr, None),
            KernelEvent::KldUnload { addr, size } => self.kld_changed(addr, Some(size)),
        }
    }
}

/// Convenience for errno comparisons in callers.
pub fn errno_name(e: Errno) -> &'static str {
    e.name()
}

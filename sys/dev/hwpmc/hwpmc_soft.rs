//! The SOFT class (hwpmc_soft.c): PMCs that count the kernel's software
//! events (clock ticks, page faults, ...) registered with
//! `PMC_SOFT_DEFINE`. Each CPU has 16 rows; a row counts the events of the
//! PMC configured on it while that PMC runs.
//!
//! As in FreeBSD, where the class's `pmc_hw` rows are the core's rows, the
//! PMC configured on a row is held by the core's row only: the core lends
//! its CPU's rows to the interrupt path and the sweep ([`RowPmcs`]), with
//! the mask of the rows that have one. A row's own state is its count and
//! one word of event and flags, so that loading, starting, stopping and
//! unloading a row take no lock of the class's and one atomic operation
//! on that word; only the kernel's soft-event lock is taken, once per
//! start or stop, as FreeBSD's `soft_start_pmc` and `soft_stop_pmc` do.
//! Configuration, the context switch, the interrupt path and the sweep
//! all run under the core's lock of the CPU's rows, which orders them.

use kpi::KResult;
use kpi::errno::EINVAL;

use kpi::atomic::{AtomicU64, Ordering};
use kpi::malloc::{KArc, KVec, Wait};
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcClass, PmcState, set_c_field_str};
use uapi::pmc_events::{PMC_EV_SOFT_FIRST, PMC_EV_SOFT_LAST};

use crate::Pmc;
use crate::hwpmc_class::{AllocRequest, IntrSink, PmcClassDep, RowPmcs};

/// `SOFT_NPMCS`: rows per CPU.
pub const SOFT_NPMCS: u32 = 16;
/// The counters' width in bits.
pub const SOFT_WIDTH: u32 = 64;
/// `SOFT_CAPS`.
pub const SOFT_CAPS: PmcCaps = PmcCaps::READ
    .union(PmcCaps::WRITE)
    .union(PmcCaps::INTERRUPT)
    .union(PmcCaps::USER)
    .union(PmcCaps::SYSTEM);

/// One row of one CPU.
#[derive(Debug, Default)]
pub(crate) struct SoftRow {
    /// The count (counting) or the events left to the next sample
    /// (sampling).
    value: AtomicU64,
    /// The event of the PMC configured on the row (`EVENT` bits), for
    /// giving its use back, with two flags:
    /// - `ARMED`: the row holds one use of the event (`ps_running`): taken
    ///   at start and unstall, given back at stop and stall, each at most
    ///   once, so that a stalled row that is stopped does not give it back
    ///   twice and starve another owner's PMC on the same event;
    /// - `STALLED`: a sample was dropped on a full ring: events are
    ///   ignored, and the event disarmed, until the rings are drained.
    ///
    /// One word, so that each change is one atomic operation whose old
    /// value says what the row held: whoever clears `ARMED` gives the use
    /// back, which keeps the count right against the interrupt path.
    state: AtomicU64,
}

/// [`SoftRow::state`]: the event.
const EVENT: u64 = u32::MAX as u64;
/// [`SoftRow::state`]: the row holds a use of its event.
const ARMED: u64 = 1 << 32;
/// [`SoftRow::state`]: the row is stalled on a full ring.
const STALLED: u64 = 1 << 33;

/// Gives back the use of the event a row held, if `old`, its state before
/// a change that cleared `ARMED`, says it held one.
fn give_back(old: u64) {
    if old & ARMED != 0 {
        kpi::kern_pmc::soft_event_running((old & EVENT) as u32, -1);
    }
}

impl SoftRow {
    /// Gives the row's use of its event back, if it holds one.
    fn disarm(&self) {
        give_back(self.state.fetch_and(!ARMED, Ordering::AcqRel));
    }

    /// Configures the row for `event` (or for none), unarmed and not
    /// stalled; a row still armed gives its use back.
    fn configure(&self, event: Option<u32>) {
        let old = match event {
            Some(event) => self.state.swap(u64::from(event), Ordering::AcqRel),
            None => self.state.fetch_and(EVENT, Ordering::AcqRel),
        };
        give_back(old);
    }

    /// `soft_start_pmc`: takes one use of `event` unless the row holds
    /// one; EINVAL when the event is not registered.
    fn start(&self, event: u32) -> KResult<()> {
        if self.state.fetch_or(ARMED, Ordering::AcqRel) & ARMED != 0 {
            // It holds its event already: only the event is checked.
            if !kpi::kern_pmc::soft_event_registered(event) {
                return Err(EINVAL);
            }
        } else if !kpi::kern_pmc::soft_event_running(event, 1) {
            self.state.fetch_and(!ARMED, Ordering::AcqRel);
            return Err(EINVAL);
        }
        self.state.fetch_and(!STALLED, Ordering::AcqRel);
        Ok(())
    }

    /// `soft_stop_pmc`: gives the row's use of its event back. A stalled
    /// row gave it back when it stalled.
    fn stop(&self) {
        give_back(self.state.fetch_and(!(ARMED | STALLED), Ordering::AcqRel));
    }

    /// A context switch-in of process PMC `pm` at `value`: config_pmc,
    /// write_pmc and start_pmc. The row was unconfigured by the last
    /// switch-out, so the start takes the event's use.
    #[inline]
    pub(crate) fn switch_in(&self, pm: &Pmc, value: u64) {
        self.value.store(value, Ordering::Relaxed);
        let armed = if kpi::kern_pmc::soft_event_running(pm.event, 1) {
            ARMED
        } else {
            0
        };
        // Should the row still hold a use, it gives it back, as
        // config_pmc does.
        give_back(
            self.state
                .swap(u64::from(pm.event) | armed, Ordering::AcqRel),
        );
    }

    /// A context switch-out of process PMC `pm`: stop_pmc, read_pmc and
    /// config_pmc(None); the row keeps only its event, neither armed nor
    /// stalled. Returns the count.
    #[inline]
    pub(crate) fn switch_out(&self, pm: &Pmc) -> u64 {
        give_back(self.state.swap(u64::from(pm.event), Ordering::AcqRel));
        self.value.load(Ordering::Relaxed)
    }

    /// Whether the row is stalled on a full ring.
    fn is_stalled(&self) -> bool {
        self.state.load(Ordering::Acquire) & STALLED != 0
    }

    /// Counts one event; true when a sampling row reached its count, which
    /// reloads it (less this event) from `pm`: after a start at R, the
    /// first sample comes at event R + 1, then one every R events.
    fn count(&self, sampling: bool, pm: &Pmc) -> bool {
        if !sampling {
            self.value.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if self.value.fetch_sub(1, Ordering::Relaxed) > 0 {
            return false;
        }
        // It was at zero, and wrapped: reload. (A write of the row from
        // another CPU in between is lost, as in FreeBSD's.)
        self.value
            .store(pm.reload_unlocked().saturating_sub(1), Ordering::Relaxed);
        true
    }
}

/// One CPU's SOFT rows.
pub(crate) type SoftRows = [SoftRow; SOFT_NPMCS as usize];

/// The SOFT class: per CPU, the state of each row. Which rows have a PMC
/// is the core's to say (its rows hold them): [`RowPmcs::occupied`].
#[derive(Debug)]
pub struct SoftClass {
    /// Shared with the core's rows of each CPU, through which the
    /// context-switch paths reach them without looking the CPU up again.
    cpus: KVec<KArc<SoftRows>>,
}

impl SoftClass {
    /// A SOFT class for `ncpu` CPU ids, with every CPU's rows.
    pub fn new(ncpu: u32) -> KResult<SoftClass> {
        let cpus = KVec::try_from_fn(ncpu as usize, Wait::WaitOk, |_| {
            KArc::try_new(SoftRows::default(), Wait::WaitOk)
        })?;
        Ok(SoftClass { cpus })
    }

    /// `cpu`'s rows, for the core's rows of that CPU.
    pub(crate) fn rows_of(&self, cpu: u32) -> Option<KArc<SoftRows>> {
        self.cpus.get(cpu as usize).cloned()
    }

    fn cpu(&self, cpu: u32) -> KResult<&SoftRows> {
        self.cpus
            .get(cpu as usize)
            .map(|rows| &**rows)
            .ok_or(EINVAL)
    }

    /// A CPU's row `ri`.
    #[inline]
    fn row(&self, cpu: u32, ri: u32) -> KResult<&SoftRow> {
        self.cpu(cpu)?.get(ri as usize).ok_or(EINVAL)
    }

    fn registered(ev: u32) -> bool {
        kpi::kern_pmc::soft_event_registered(ev)
    }

    /// A software event fired on `cpu` (PMC_FN_SOFT_SAMPLING), in
    /// interrupt context (`pmc_soft_intr`): each running PMC of the event
    /// on the CPU's rows counts it, and a sampler that reaches its count
    /// takes a sample through `sink`. Returns whether a PMC used it.
    /// `pmcs` are the PMCs on the class's rows of `cpu`. Called by the
    /// core's hook directly, as FreeBSD's `pmc_soft_intr` is (out of line,
    /// so that benchmarks can attribute its instructions).
    #[inline(never)]
    pub(crate) fn soft_event<S: IntrSink>(
        &self,
        cpu: u32,
        ev: u32,
        pmcs: &RowPmcs<'_>,
        sink: &S,
    ) -> bool {
        let (Ok(rows), Some(pmc_rows)) = (self.cpu(cpu), pmcs.first::<{ SOFT_NPMCS as usize }>())
        else {
            return false;
        };
        let mut used = false;
        // Only the rows that have a PMC (of the class's SOFT_NPMCS, which
        // lets the compiler see each index in range).
        let mut left = pmcs.occupied() & ((1 << SOFT_NPMCS) - 1);
        while left != 0 {
            let ri = left.trailing_zeros();
            left &= left - 1;
            let (Some(row), Some(pm)) = (
                rows.get(ri as usize),
                pmc_rows.get(ri as usize).and_then(|r| r.pmc()),
            ) else {
                continue;
            };
            if pm.event != ev || row.is_stalled() {
                continue;
            }
            // The state without the PMC's lock, as FreeBSD reads it: a
            // stop that comes after is seen below, should the row stall.
            if !pm.running_unlocked() {
                continue;
            }
            used = true;
            if !row.count(!pm.mode.is_counting(), pm) || sink.sample(pm, cpu) {
                continue;
            }
            give_back(
                row.state
                    .swap(u64::from(pm.event) | STALLED, Ordering::AcqRel),
            );
            // start and stop take no lock of ours: the stop of a system
            // PMC since the state was read above cleared the row before
            // the flag was set, so its row is not left stalled. A process
            // PMC's stop leaves its rows alone (as FreeBSD's): its row
            // stays stalled while it is loaded, for the sweep to re-arm
            // once the PMC runs again.
            if pm.mode.is_system() && pm.state() != PmcState::Running {
                row.state.fetch_and(!STALLED, Ordering::AcqRel);
            }
        }
        if used {
            sink.processed();
        } else {
            sink.ignored();
        }
        used
    }
}

impl PmcClassDep for SoftClass {
    fn class(&self) -> PmcClass {
        PmcClass::Soft
    }
    fn caps(&self) -> PmcCaps {
        SOFT_CAPS
    }
    fn width(&self) -> u32 {
        SOFT_WIDTH
    }
    fn num(&self) -> u32 {
        SOFT_NPMCS
    }
    fn row_name(&self, ri: u32) -> [u8; PMC_NAME_MAX] {
        let mut name = [0; PMC_NAME_MAX];
        let mut text = *b"SOFT\0\0";
        let n = if ri >= 10 {
            text[4] = b'0' + (ri / 10) as u8;
            text[5] = b'0' + (ri % 10) as u8;
            6
        } else {
            text[4] = b'0' + ri as u8;
            5
        };
        set_c_field_str(&mut name, &text[..n]);
        name
    }
    fn pcpu_init(&self, cpu: u32) -> KResult<()> {
        for row in self.cpu(cpu)? {
            row.value.store(0, Ordering::Relaxed);
            row.state.store(0, Ordering::Release);
        }
        Ok(())
    }
    fn pcpu_fini(&self, _cpu: u32) {
        // The core unconfigured every row before: nothing holds an event.
    }
    fn allocate_pmc(&self, _cpu: u32, _ri: u32, req: &AllocRequest<'_>) -> KResult<()> {
        if req.raw.pm_class != PmcClass::Soft.raw() || !req.caps.intersects(SOFT_CAPS) {
            return Err(EINVAL);
        }
        let ev = req.raw.pm_ev;
        if !(PMC_EV_SOFT_FIRST..=PMC_EV_SOFT_LAST).contains(&ev) || !Self::registered(ev) {
            return Err(EINVAL);
        }
        Ok(())
    }
    fn config_pmc(&self, cpu: u32, ri: u32, pm: Option<&KArc<Pmc>>) -> KResult<()> {
        // A row is stopped before it is unconfigured; should it still
        // hold its event, it gives it back now.
        self.row(cpu, ri)?.configure(pm.map(|pm| pm.event));
        Ok(())
    }
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64> {
        Ok(self.row(cpu, ri)?.value.load(Ordering::Relaxed))
    }
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()> {
        self.row(cpu, ri)?.value.store(value, Ordering::Relaxed);
        Ok(())
    }
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        self.row(cpu, ri)?.start(pm.event)
    }
    fn stop_pmc(&self, cpu: u32, ri: u32, _pm: &Pmc) -> KResult<()> {
        self.row(cpu, ri)?.stop();
        Ok(())
    }
    #[inline]
    fn switch_in(&self, cpu: u32, ri: u32, pm: &KArc<Pmc>, value: u64) {
        if let Ok(row) = self.row(cpu, ri) {
            row.switch_in(pm, value);
        }
    }
    #[inline]
    fn switch_out(&self, cpu: u32, ri: u32, pm: &Pmc) -> Option<u64> {
        Some(self.row(cpu, ri).ok()?.switch_out(pm))
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn rows_on_event(&self, event: u32) -> (u32, u32) {
        // A row without a PMC is neither armed nor stalled.
        let (mut armed, mut stalled) = (0, 0);
        for row in self.cpus.iter().flat_map(|c| c.iter()) {
            let state = row.state.load(Ordering::Acquire);
            if state & EVENT == u64::from(event) {
                armed += (state & ARMED != 0) as u32;
                stalled += (state & STALLED != 0) as u32;
            }
        }
        (armed, stalled)
    }

    fn stalled(&self, cpu: u32) -> bool {
        self.cpu(cpu)
            .is_ok_and(|rows| rows.iter().any(SoftRow::is_stalled))
    }

    fn unstall(&self, cpu: u32, pmcs: &RowPmcs<'_>) {
        let Ok(rows) = self.cpu(cpu) else {
            return;
        };
        for (ri, row) in rows.iter().enumerate() {
            if !row.is_stalled() {
                continue;
            }
            // Only a PMC that runs takes its event back. A stopped one
            // stays stalled, so that a sweep after it is started again
            // re-arms it (as FreeBSD keeps pps_stalled until then).
            let Some(pm) = pmcs
                .get(ri as u32)
                .filter(|pm| pm.state() == PmcState::Running)
            else {
                continue;
            };
            let old = row
                .state
                .swap(u64::from(pm.event) | ARMED, Ordering::AcqRel);
            if old & ARMED == 0 {
                kpi::kern_pmc::soft_event_running(pm.event, 1);
            }
            // A stop since the state was read found the row not yet
            // armed (stop takes no lock of ours): give the event back.
            if pm.state() != PmcState::Running {
                row.disarm();
            }
        }
    }
}

/// The SOFT class as the core's classes hold it: the same class, which the
/// core also keeps by its type (for [`SoftClass::soft_event`]).
#[derive(Debug)]
pub struct SoftDep(pub KArc<SoftClass>);

impl PmcClassDep for SoftDep {
    crate::forward_class_common!();
    crate::forward_class! {
        caps() -> PmcCaps;
        get_caps(ri: u32) -> PmcCaps;
        shareable() -> bool;
        switch_in(cpu: u32, ri: u32, pm: &KArc<Pmc>, value: u64) -> ();
        switch_out(cpu: u32, ri: u32, pm: &Pmc) -> Option<u64>;
        rows_on_event(event: u32) -> (u32, u32);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods)] // host test code
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    use uapi::pmc::PmcMode;

    /// Lock acquisitions per class between two snapshots.
    fn taken(
        before: &BTreeMap<&'static str, u64>,
        m: &ksim::Machine,
    ) -> BTreeMap<&'static str, u64> {
        m.lock_acquisitions()
            .into_iter()
            .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0)))
            .filter(|&(_, v)| v > 0)
            .collect()
    }

    /// FreeBSD's soft_start_pmc and soft_stop_pmc take the kernel's
    /// soft-event lock once (pmc_soft_ev_acquire) and allocate nothing;
    /// so do ours, and so do a context switch's load and unload of a row
    /// (configure, write and start; stop, read and unconfigure).
    #[test]
    fn start_and_stop_take_only_the_soft_event_lock_and_allocate_nothing() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _e = m.enter();
        let ev = m
            .soft_events()
            .iter()
            .find(|e| e.name == "CLOCK.HARD")
            .expect("CLOCK.HARD")
            .code;
        let running = || {
            m.soft_events()
                .iter()
                .find(|e| e.code == ev)
                .map(|e| e.running)
        };
        let soft = SoftClass::new(1).unwrap();
        soft.pcpu_init(0).unwrap();
        let pm = Pmc::for_test(ev, PmcMode::Tc, 0);
        soft.config_pmc(0, 3, Some(&pm)).unwrap();

        let softs = |n| BTreeMap::from([(ksim::kern::SOFTS_LOCK, n)]);
        let (allocs, locks) = (m.kmem_calls(), m.lock_acquisitions());
        soft.start_pmc(0, 3, &pm).unwrap();
        assert_eq!(taken(&locks, &m), softs(1), "start");
        assert_eq!(m.kmem_calls(), allocs, "start allocates");
        let locks = m.lock_acquisitions();
        soft.stop_pmc(0, 3, &pm).unwrap();
        assert_eq!(taken(&locks, &m), softs(1), "stop");
        assert_eq!(m.kmem_calls(), allocs, "stop allocates");
        // Started twice, the row holds its event once; the second start
        // only checks the event, under the same lock, once.
        soft.start_pmc(0, 3, &pm).unwrap();
        let locks = m.lock_acquisitions();
        soft.start_pmc(0, 3, &pm).unwrap();
        assert_eq!(taken(&locks, &m), softs(1), "second start");
        soft.stop_pmc(0, 3, &pm).unwrap();
        assert_eq!(running(), Some(0));

        // A switch pair: config, write and start; stop, read and
        // unconfigure.
        soft.config_pmc(0, 3, None).unwrap();
        let locks = m.lock_acquisitions();
        soft.switch_in(0, 3, &pm, 7);
        assert_eq!(taken(&locks, &m), softs(1), "switch-in");
        let locks = m.lock_acquisitions();
        assert_eq!(soft.switch_out(0, 3, &pm), Some(7));
        assert_eq!(taken(&locks, &m), softs(1), "switch-out");
        assert_eq!(m.kmem_calls(), allocs, "allocations");
        assert_eq!(running(), Some(0));
        assert!(m.violations().is_empty(), "{:?}", m.violations());
    }
}

//! The SOFT class (hwpmc_soft.c): PMCs that count the kernel's software
//! events (clock ticks, page faults, ...) registered with
//! `PMC_SOFT_DEFINE`. Each CPU has 16 rows; a row counts the events of the
//! PMC configured on it while that PMC runs.

use kpi::KResult;
use kpi::errno::EINVAL;

use kpi::atomic::{AtomicBool, Ordering};
use kpi::malloc::{KArc, KVec, Wait};
use kpi::sync::{SpinMutex, SpinMutexBox};
use uapi::pmc::{PMC_NAME_MAX, PmcCaps, PmcClass, PmcState, set_c_field_str};
use uapi::pmc_events::{PMC_EV_SOFT_FIRST, PMC_EV_SOFT_LAST};

use crate::Pmc;
use crate::hwpmc_class::{AllocRequest, IntrSink, PmcClassDep};

/// `SOFT_NPMCS`: rows per CPU.
pub const SOFT_NPMCS: u32 = 16;
/// `SOFT_CAPS`.
pub const SOFT_CAPS: PmcCaps = PmcCaps::READ
    .union(PmcCaps::WRITE)
    .union(PmcCaps::INTERRUPT)
    .union(PmcCaps::USER)
    .union(PmcCaps::SYSTEM);

#[derive(Debug, Default)]
struct SoftRow {
    pmc: Option<KArc<Pmc>>,
    value: u64,
}

/// A row's state that start and stop change. It is kept out of the rows'
/// lock, so that starting and stopping a PMC takes no lock of the
/// driver's, only the kernel's soft-event lock once, as FreeBSD's
/// `soft_start_pmc` and `soft_stop_pmc` do; every change is a swap, which
/// keeps the two flags right against the interrupt path on the same CPU.
#[derive(Debug, Default)]
struct RowFlags {
    /// A sample was dropped on a full ring: events are ignored, and the
    /// event disarmed, until the rings are drained.
    stalled: AtomicBool,
    /// The row holds one use of its PMC's event (`ps_running`): taken at
    /// start and unstall, given back at stop and stall, each at most once,
    /// so that a stalled row that is stopped does not give it back twice
    /// and starve another owner's PMC on the same event.
    armed: AtomicBool,
}

impl RowFlags {
    /// Gives the row's use of `event` back, if it holds one.
    fn disarm(&self, event: u32) {
        if self.armed.swap(false, Ordering::AcqRel) {
            kpi::kern_pmc::soft_event_running(event, -1);
        }
    }

    /// `soft_start_pmc`: takes one use of `event` unless the row holds
    /// one; EINVAL when the event is not registered.
    fn start(&self, event: u32) -> KResult<()> {
        if self.armed.swap(true, Ordering::AcqRel) {
            // It holds its event already: only the event is checked.
            if !kpi::kern_pmc::soft_event_registered(event) {
                return Err(EINVAL);
            }
        } else if !kpi::kern_pmc::soft_event_running(event, 1) {
            self.armed.store(false, Ordering::Release);
            return Err(EINVAL);
        }
        self.stalled.store(false, Ordering::Release);
        Ok(())
    }

    /// `soft_stop_pmc`: gives the row's use of `event` back. A stalled
    /// row gave it back when it stalled.
    fn stop(&self, event: u32) {
        self.stalled.store(false, Ordering::Release);
        self.disarm(event);
    }
}

/// One CPU's rows.
#[derive(Debug, Default)]
struct Rows {
    rows: KVec<SoftRow>,
    /// Bit `ri` is set while row `ri` has a PMC: the interrupt path
    /// visits only those rows.
    configured: u32,
}

/// One CPU's rows and their flags.
#[derive(Debug)]
struct SoftCpu {
    /// The configured PMC and the count of each row.
    rows: SpinMutexBox<Rows>,
    flags: KVec<RowFlags>,
}

/// The SOFT class: per CPU, the configured PMC and the count of each row.
#[derive(Debug)]
pub struct SoftClass {
    cpus: KVec<SoftCpu>,
}

impl SoftClass {
    /// A SOFT class for `ncpu` CPU ids; rows are allocated by `pcpu_init`.
    pub fn new(ncpu: u32) -> KResult<SoftClass> {
        let cpus = KVec::try_from_fn(ncpu as usize, Wait::WaitOk, |_| {
            Ok(SoftCpu {
                rows: SpinMutex::new(c"soft-pcpu", Rows::default(), Wait::WaitOk)?,
                flags: KVec::from_fn(SOFT_NPMCS as usize, Wait::WaitOk, |_| RowFlags::default())?,
            })
        })?;
        Ok(SoftClass { cpus })
    }

    /// Runs `f` on a row under the rows' lock, and keeps the mask of
    /// configured rows up to date with what it did.
    fn row<R>(
        &self,
        cpu: u32,
        ri: u32,
        f: impl FnOnce(&mut SoftRow, &RowFlags) -> R,
    ) -> KResult<R> {
        let c = self.cpus.get(cpu as usize).ok_or(EINVAL)?;
        let flags = c.flags.get(ri as usize).ok_or(EINVAL)?;
        let mut guard = c.rows.lock();
        let Rows { rows, configured } = &mut *guard;
        let row = rows.get_mut(ri as usize).ok_or(EINVAL)?;
        let r = f(row, flags);
        // ri < SOFT_NPMCS (16): the row exists.
        if row.pmc.is_some() {
            *configured |= 1 << ri;
        } else {
            *configured &= !(1 << ri);
        }
        Ok(r)
    }

    fn flags(&self, cpu: u32, ri: u32) -> KResult<&RowFlags> {
        self.cpus
            .get(cpu as usize)
            .and_then(|c| c.flags.get(ri as usize))
            .ok_or(EINVAL)
    }

    fn registered(ev: u32) -> bool {
        kpi::kern_pmc::soft_event_registered(ev)
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
        64
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
        let rows = KVec::from_fn(SOFT_NPMCS as usize, Wait::WaitOk, |_| SoftRow::default())?;
        let slot = self.cpus.get(cpu as usize).ok_or(EINVAL)?;
        *slot.rows.lock() = Rows {
            rows,
            configured: 0,
        };
        Ok(())
    }
    fn pcpu_fini(&self, cpu: u32) {
        if let Some(slot) = self.cpus.get(cpu as usize) {
            let rows = core::mem::take(&mut *slot.rows.lock());
            drop(rows);
        }
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
        let old = self.row(cpu, ri, |row, flags| {
            // A row is stopped before it is unconfigured; should it still
            // hold its event, it gives it back now.
            if let Some(old) = &row.pmc {
                flags.disarm(old.event);
            }
            flags.armed.store(false, Ordering::Release);
            flags.stalled.store(false, Ordering::Release);
            core::mem::replace(&mut row.pmc, pm.cloned())
        })?;
        // A last reference is dropped after the spin lock.
        drop(old);
        Ok(())
    }
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64> {
        self.row(cpu, ri, |row, _| row.value)
    }
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()> {
        self.row(cpu, ri, |row, _| row.value = value)
    }
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        self.flags(cpu, ri)?.start(pm.event)
    }
    fn stop_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        self.flags(cpu, ri)?.stop(pm.event);
        Ok(())
    }
    fn switch_in(&self, cpu: u32, ri: u32, pm: &KArc<Pmc>, value: u64) {
        // config_pmc, write_pmc and start_pmc under one acquisition of
        // the rows' lock.
        if let Ok(old) = self.row(cpu, ri, |row, flags| {
            // The row is empty at a switch-in; should it hold an armed
            // PMC, that gives its event back, as config_pmc does.
            if let Some(old) = &row.pmc {
                flags.disarm(old.event);
            }
            row.value = value;
            let old = row.pmc.replace(pm.clone());
            let _ = flags.start(pm.event);
            old
        }) {
            // A last reference is dropped after the spin lock.
            drop(old);
        }
    }
    fn switch_out(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<u64> {
        // stop_pmc, read_pmc and config_pmc(None) under one acquisition.
        let (value, old) = self.row(cpu, ri, |row, flags| {
            flags.stop(pm.event);
            (row.value, row.pmc.take())
        })?;
        drop(old);
        Ok(value)
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn soft_event(&self, cpu: u32, ev: u32, sink: &dyn IntrSink) -> bool {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return false;
        };
        let mut guard = c.rows.lock();
        let Rows { rows, configured } = &mut *guard;
        let mut used = false;
        let mut left = *configured;
        while left != 0 {
            let ri = left.trailing_zeros() as usize;
            left &= left - 1;
            let (Some(SoftRow { pmc, value }), Some(flags)) = (rows.get_mut(ri), c.flags.get(ri))
            else {
                continue;
            };
            let Some(pm) = pmc.as_ref() else { continue };
            if pm.event != ev || flags.stalled.load(Ordering::Acquire) {
                continue;
            }
            // The state and the reload count under one acquisition of
            // the PMC's lock.
            let (state, reloadcount) = pm.update(|v| (v.state, v.reloadcount));
            if state != PmcState::Running {
                continue;
            }
            used = true;
            if pm.mode.is_counting() {
                *value = value.wrapping_add(1);
                continue;
            }
            // Sampling rows count down; the event that finds zero reloads
            // the count (less this event) and takes the sample: after a
            // start at R, the first sample comes at event R + 1, then one
            // every R events.
            if *value > 0 {
                *value -= 1;
                continue;
            }
            *value = reloadcount.saturating_sub(1);
            if !sink.sample(pm, cpu) {
                flags.stalled.store(true, Ordering::Release);
                flags.disarm(pm.event);
                // start and stop take no lock of ours: a stop since the
                // state was read above cleared the flag before it was
                // set. A stopped PMC's row is not left stalled.
                if pm.state() != PmcState::Running {
                    flags.stalled.store(false, Ordering::Release);
                }
            }
        }
        if used {
            sink.processed();
        } else {
            sink.ignored();
        }
        used
    }

    fn rows_on_event(&self, event: u32) -> (u32, u32) {
        let (mut armed, mut stalled) = (0, 0);
        for c in self.cpus.iter() {
            for (row, flags) in c.rows.lock().rows.iter().zip(c.flags.iter()) {
                if row.pmc.as_ref().is_some_and(|pm| pm.event == event) {
                    armed += flags.armed.load(Ordering::Acquire) as u32;
                    stalled += flags.stalled.load(Ordering::Acquire) as u32;
                }
            }
        }
        (armed, stalled)
    }

    fn unstall(&self, cpu: u32) {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return;
        };
        // Most sweeps find nothing stalled: no lock for them.
        if !c.flags.iter().any(|f| f.stalled.load(Ordering::Acquire)) {
            return;
        }
        for (row, flags) in c.rows.lock().rows.iter().zip(c.flags.iter()) {
            if !flags.stalled.load(Ordering::Acquire) {
                continue;
            }
            // Only a PMC that runs takes its event back. A stopped one
            // stays stalled, so that a sweep after it is started again
            // re-arms it (as FreeBSD keeps pps_stalled until then).
            if let Some(pm) = row
                .pmc
                .as_ref()
                .filter(|pm| pm.state() == PmcState::Running)
            {
                flags.stalled.store(false, Ordering::Release);
                if !flags.armed.swap(true, Ordering::AcqRel) {
                    kpi::kern_pmc::soft_event_running(pm.event, 1);
                }
                // A stop since the state was read found the row not yet
                // armed (stop takes no lock of ours): give the event back.
                if pm.state() != PmcState::Running {
                    flags.disarm(pm.event);
                }
            }
        }
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
    /// so do ours, and a context switch's load and unload of a row take
    /// the rows' lock once more each, for the row's PMC and count.
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
        assert_eq!(
            m.soft_events()
                .iter()
                .find(|e| e.code == ev)
                .unwrap()
                .running,
            0
        );

        // A switch pair: config, write and start; stop, read and
        // unconfigure.
        soft.config_pmc(0, 3, None).unwrap();
        let locks = m.lock_acquisitions();
        soft.switch_in(0, 3, &pm, 7);
        assert_eq!(
            taken(&locks, &m),
            BTreeMap::from([("soft-pcpu", 1), (ksim::kern::SOFTS_LOCK, 1)]),
            "switch-in"
        );
        let locks = m.lock_acquisitions();
        assert_eq!(soft.switch_out(0, 3, &pm), Ok(7));
        assert_eq!(
            taken(&locks, &m),
            BTreeMap::from([("soft-pcpu", 1), (ksim::kern::SOFTS_LOCK, 1)]),
            "switch-out"
        );
        assert_eq!(m.kmem_calls(), allocs, "allocations");
        assert_eq!(
            m.soft_events()
                .iter()
                .find(|e| e.code == ev)
                .unwrap()
                .running,
            0
        );
        assert!(m.violations().is_empty(), "{:?}", m.violations());
    }
}

//! The SOFT class (hwpmc_soft.c): PMCs that count the kernel's software
//! events (clock ticks, page faults, ...) registered with
//! `PMC_SOFT_DEFINE`. Each CPU has 16 rows; a row counts the events of the
//! PMC configured on it while that PMC runs.

use kpi::KResult;
use kpi::errno::EINVAL;

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
    /// A sample was dropped on a full ring: events are ignored, and the
    /// event disarmed, until the rings are drained.
    stalled: bool,
    /// The row holds one use of its PMC's event (`ps_running`): taken at
    /// start and unstall, given back at stop and stall, each at most once,
    /// so that a stalled row that is stopped does not give it back twice
    /// and starve another owner's PMC on the same event.
    armed: bool,
}

/// The SOFT class: per CPU, the configured PMC and the count of each row.
#[derive(Debug)]
pub struct SoftClass {
    cpus: KVec<SpinMutexBox<KVec<SoftRow>>>,
}

impl SoftClass {
    /// A SOFT class for `ncpu` CPU ids; rows are allocated by `pcpu_init`.
    pub fn new(ncpu: u32) -> KResult<SoftClass> {
        let cpus = KVec::try_from_fn(ncpu as usize, Wait::WaitOk, |_| {
            SpinMutex::new(c"soft-pcpu", KVec::new(), Wait::WaitOk)
        })?;
        Ok(SoftClass { cpus })
    }

    fn row<R>(&self, cpu: u32, ri: u32, f: impl FnOnce(&mut SoftRow) -> R) -> KResult<R> {
        let cpu = self.cpus.get(cpu as usize).ok_or(EINVAL)?;
        let mut rows = cpu.lock();
        rows.get_mut(ri as usize).map(f).ok_or(EINVAL)
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
        *slot.lock() = rows;
        Ok(())
    }
    fn pcpu_fini(&self, cpu: u32) {
        if let Some(slot) = self.cpus.get(cpu as usize) {
            let rows = core::mem::take(&mut *slot.lock());
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
        self.row(cpu, ri, |row| {
            // A row is stopped before it is unconfigured; should it still
            // hold its event, it gives it back now.
            if let (true, Some(old)) = (row.armed, &row.pmc) {
                kpi::kern_pmc::soft_event_running(old.event, -1);
            }
            row.armed = false;
            row.stalled = false;
            row.pmc = pm.cloned();
        })
    }
    fn read_pmc(&self, cpu: u32, ri: u32) -> KResult<u64> {
        self.row(cpu, ri, |row| row.value)
    }
    fn write_pmc(&self, cpu: u32, ri: u32, value: u64) -> KResult<()> {
        self.row(cpu, ri, |row| row.value = value)
    }
    fn start_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        if !Self::registered(pm.event) {
            return Err(EINVAL);
        }
        self.row(cpu, ri, |row| {
            row.stalled = false;
            if !row.armed {
                row.armed = true;
                kpi::kern_pmc::soft_event_running(pm.event, 1);
            }
        })
    }
    fn stop_pmc(&self, cpu: u32, ri: u32, pm: &Pmc) -> KResult<()> {
        self.row(cpu, ri, |row| {
            // A stalled row gave its event back when it stalled.
            row.stalled = false;
            if row.armed {
                row.armed = false;
                kpi::kern_pmc::soft_event_running(pm.event, -1);
            }
        })
    }
    fn release_pmc(&self, _cpu: u32, _ri: u32, _pm: &Pmc) -> KResult<()> {
        Ok(())
    }
    fn soft_event(&self, cpu: u32, ev: u32, sink: &dyn IntrSink) -> bool {
        let Some(slot) = self.cpus.get(cpu as usize) else {
            return false;
        };
        let mut rows = slot.lock();
        let mut used = false;
        for row in rows.iter_mut() {
            let Some(pm) = row.pmc.clone() else { continue };
            if pm.event != ev || row.stalled || pm.state() != PmcState::Running {
                continue;
            }
            used = true;
            if pm.mode.is_counting() {
                row.value = row.value.wrapping_add(1);
                continue;
            }
            // Sampling rows count down; the event that finds zero reloads
            // the count (less this event) and takes the sample: after a
            // start at R, the first sample comes at event R + 1, then one
            // every R events.
            if row.value > 0 {
                row.value -= 1;
                continue;
            }
            row.value = pm.vals().reloadcount.saturating_sub(1);
            if !sink.sample(&pm, cpu) {
                row.stalled = true;
                if row.armed {
                    row.armed = false;
                    kpi::kern_pmc::soft_event_running(pm.event, -1);
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
        for cpu in self.cpus.iter() {
            for row in cpu.lock().iter() {
                if row.pmc.as_ref().is_some_and(|pm| pm.event == event) {
                    armed += row.armed as u32;
                    stalled += row.stalled as u32;
                }
            }
        }
        (armed, stalled)
    }

    fn unstall(&self, cpu: u32) {
        let Some(slot) = self.cpus.get(cpu as usize) else {
            return;
        };
        for row in slot.lock().iter_mut() {
            if !row.stalled {
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
                row.stalled = false;
                if !row.armed {
                    row.armed = true;
                    kpi::kern_pmc::soft_event_running(pm.event, 1);
                }
            }
        }
    }
}

//! What tests, benchmarks and the random-operation harness may see of
//! the driver's state, without allocating.

use kpi::proc::Pid;

use crate::Hwpmc;

impl Hwpmc {
    /// Number of target descriptors (for tests and statistics).
    pub fn target_count(&self) -> usize {
        self.procs.lock().len()
    }

    /// Calls `f` with a view of every allocated PMC, owners in order (for
    /// tests and the random-operation harness; allocates nothing).
    pub fn for_each_pmc(&self, mut f: impl FnMut(&crate::PmcView)) {
        let core = self.core.lock_shared();
        for o in core.owners.iter() {
            for p in o.pmcs.iter() {
                let v = p.pmc.vals();
                f(&crate::PmcView {
                    id: p.pmc.id,
                    owner: o.pid,
                    event: p.pmc.event,
                    class: p.pmc.class,
                    mode: p.pmc.mode,
                    cpu: p.pmc.cpu,
                    state: v.state,
                    flags: v.flags,
                    runcount: p.pmc.runcount.load(kpi::atomic::Ordering::Relaxed),
                    targets: p.targets.len(),
                    owner_sscount: o.sscount,
                    owner_has_log: o.log.is_some(),
                });
            }
        }
    }

    /// Rows of every class that count kernel event `event`, as (holding
    /// it armed, stalled on a full ring).
    pub fn rows_on_event(&self, event: u32) -> (u32, u32) {
        self.classes.iter().fold((0, 0), |(a, s), slot| {
            let (x, y) = slot.dep.rows_on_event(event);
            (a + x, s + y)
        })
    }

    /// The owner of the PMC that id `id` names for process `caller`: its
    /// own, or that of the owner whose self-attached DESCENDANTS PMC
    /// follows it (as the operations find it).
    pub fn pmc_owner_for(&self, caller: Pid, id: uapi::pmc::PmcId) -> Option<Pid> {
        let core = self.core.lock_shared();
        let at = self.find_pmc_for(&core, caller, id).ok()?;
        Some(core.owners[at.owner].pid)
    }

    /// Whether `pid` has a target descriptor (a PMC attached to it).
    pub fn is_target(&self, pid: Pid) -> bool {
        self.procs.lock().get(pid).is_some()
    }

    /// Owners (processes with PMCs or a log).
    pub fn owner_count(&self) -> usize {
        self.core.lock_shared().owners.len()
    }

    /// Running system-sampling PMCs over all owners (the sum of their
    /// `po_sscount`).
    pub fn system_samplers(&self) -> u32 {
        self.core
            .lock_shared()
            .owners
            .iter()
            .map(|o| o.sscount)
            .sum()
    }

    /// Thread descriptors on the free list.
    pub fn thread_freelist_entries(&self) -> u32 {
        self.thread_freelist.lock().entries()
    }

    /// How many thread descriptors process `pid`'s descriptor holds for
    /// thread `tid` (at most one).
    pub fn thread_descriptors(&self, pid: Pid, tid: kpi::proc::Tid) -> usize {
        let procs = self.procs.lock();
        procs
            .get(pid)
            .map_or(0, |pp| pp.threads.iter().filter(|t| t.tid == tid).count())
    }

    /// The first row whose bit in the process's mask of attached rows
    /// disagrees with its slot, if any.
    pub fn attached_mask_mismatch(&self, pid: Pid) -> Option<u32> {
        let procs = self.procs.lock();
        let pp = procs.get(pid)?;
        (0..pp.slots.len())
            .map(|ri| ri as u32)
            .find(|&ri| (pp.attached >> ri & 1 == 1) != pp.slots[ri as usize].pmc.is_some())
    }

    /// The first row of `cpu` holding a process PMC that the switch-out
    /// would not visit, or one not attached to the process the rows were
    /// loaded for, or a row the switch-out would visit that holds a
    /// system PMC, or a row whose bit in the mask of rows with a PMC
    /// (which the interrupt paths walk) is wrong, if any.
    pub fn loaded_mask_mismatch(&self, cpu: u32) -> Option<u32> {
        let procs = self.procs.lock();
        let rows = self.pcpu.get(cpu as usize)?.lock();
        let owner = procs.get(rows.loaded_pid);
        (0..rows.len()).map(|ri| ri as u32).find(|&ri| {
            let bit = rows.loaded >> ri & 1 == 1;
            let pmc = rows[ri as usize].pmc.as_ref();
            let wrong = match pmc {
                Some(pm) if pm.mode.is_virtual() => {
                    let attached = owner
                        .and_then(|pp| pp.slots.get(ri as usize)?.pmc.as_ref())
                        .is_some_and(|c| kpi::malloc::KArc::ptr_eq(c, pm));
                    !bit || !attached
                }
                Some(_) => bit,
                None => false,
            };
            wrong || (rows.occupied() >> ri & 1 == 1) != pmc.is_some()
        })
    }
}

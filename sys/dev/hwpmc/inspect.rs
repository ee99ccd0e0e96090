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
                    runcount: v.runcount,
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
}

//! Software interrupts (swi_add(9), swi_sched(9)): work an NMI handler
//! hands to a thread that may take locks and allocate.
//!
//! On FreeBSD the handler is one of `clk_intr_event`'s (the only event
//! that `swi_sched(9)` with `SWI_FROMNMI` serves on x86), and a schedule
//! from NMI context passes `SWI_FROMNMI`. The simulator runs it as a
//! kernel process woken by each schedule.

use crate::KResult;
use crate::kproc::KprocFn;

/// A software interrupt handler; removed (`swi_remove`) when dropped,
/// after a run in progress has ended.
#[derive(Debug)]
pub struct Swi(u64);

impl Swi {
    /// `swi_add`: `handler` runs, at some point after each
    /// [`Swi::schedule`], in a thread of its own.
    pub fn add(name: &str, handler: KprocFn) -> KResult<Swi> {
        crate::backend::swi_add(name, handler).map(Swi)
    }

    /// `swi_sched(cookie, SWI_FROMNMI)`: the handler runs soon; callable
    /// from NMI context.
    pub fn schedule(&self) {
        crate::backend::swi_sched(self.0);
    }

    /// A handle that schedules the handler without owning it, for an NMI
    /// handler that is removed before the software interrupt is.
    pub fn handle(&self) -> SwiHandle {
        SwiHandle(self.0)
    }
}

/// Schedules a [`Swi`] (`swi_sched`); valid while the [`Swi`] lives.
#[derive(Debug, Clone, Copy)]
pub struct SwiHandle(u64);

impl SwiHandle {
    /// `swi_sched(cookie, SWI_FROMNMI)`.
    pub fn schedule(&self) {
        crate::backend::swi_sched(self.0);
    }
}

impl Drop for Swi {
    fn drop(&mut self) {
        crate::backend::swi_remove(self.0);
    }
}

//! Software interrupts (swi_add(9), swi_sched(9)): work an NMI handler
//! hands to a thread that may take locks and allocate.

use crate::KResult;
use crate::kproc::KprocFn;

/// A software interrupt handler; removed when dropped.
#[derive(Debug)]
pub struct Swi(Option<crate::kproc::Kproc>);

impl Swi {
    /// `swi_add`: `handler` runs, at some point after each
    /// [`Swi::schedule`], in a thread of its own.
    pub fn add(name: &str, handler: KprocFn) -> KResult<Swi> {
        // The simulator runs it as a kernel process woken by the schedule.
        crate::kproc::kproc_create(name, handler).map(|k| Swi(Some(k)))
    }

    /// `swi_sched(cookie, SWI_FROMNMI)`: the handler runs soon; callable
    /// from NMI context.
    pub fn schedule(&self) {
        if let Some(k) = &self.0 {
            k.wakeup();
        }
    }

    /// A handle that schedules the handler without owning it, for an NMI
    /// handler that is removed before the software interrupt is.
    pub fn handle(&self) -> SwiHandle {
        SwiHandle(self.0.as_ref().map(|k| k.id()))
    }
}

/// Schedules a [`Swi`] (`swi_sched`); valid while the [`Swi`] lives.
#[derive(Debug, Clone, Copy)]
pub struct SwiHandle(Option<u64>);

impl SwiHandle {
    /// `swi_sched(cookie, SWI_FROMNMI)`.
    pub fn schedule(&self) {
        if let Some(id) = self.0 {
            crate::backend::kproc_wakeup(id);
        }
    }
}

impl Drop for Swi {
    fn drop(&mut self) {
        if let Some(k) = self.0.take() {
            k.stop();
        }
    }
}

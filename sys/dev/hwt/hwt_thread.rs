//! The threads of a thread-mode context (hwt_thread.c).

use kpi::KResult;
use kpi::atomic::{AtomicU32, Ordering};
use kpi::malloc::Wait;
use kpi::proc::Tid;
use kpi::sync::{Mutex, MutexBox};

use crate::hwt_vm::HwtVm;

/// No CPU traces the thread.
const NO_CPU: u32 = u32::MAX;

/// A traced thread and its buffer (`struct hwt_thread`).
#[derive(Debug)]
pub(crate) struct HwtThread {
    /// Its index in the context, from 0 in creation order.
    pub(crate) thread_id: i32,
    pub(crate) tid: Tid,
    pub(crate) vm: HwtVm,
    /// The CPU whose unit traces it now, or [`NO_CPU`].
    pub(crate) active_cpu: AtomicU32,
    /// HWT_THREAD_STATE_EXITED.
    pub(crate) exited: kpi::atomic::AtomicBool,
    /// Its pause in the exec/mmap hook ("thr").
    pub(crate) mtx: MutexBox<Pause>,
}

/// What a pause in the exec/mmap hook waits for.
#[derive(Debug, Default)]
pub(crate) struct Pause {
    /// A WAKEUP came before the thread went to sleep: the next pause
    /// returns at once (FreeBSD would lose that wakeup).
    pub(crate) wake_pending: bool,
    /// The context is gone: no pause any more.
    pub(crate) released: bool,
}

impl HwtThread {
    /// WAKEUP: the thread paused in the hook goes on, or, if it is on its
    /// way there, will not stop.
    pub(crate) fn wakeup(&self) {
        let mut p = self.mtx.lock();
        p.wake_pending = true;
        kpi::sync::wakeup(kpi::sync::Chan::of(self));
    }

    /// Teardown: wakes the thread and keeps it from pausing again.
    pub(crate) fn release(&self) {
        let mut p = self.mtx.lock();
        p.released = true;
        kpi::sync::wakeup(kpi::sync::Chan::of(self));
    }

    /// The pause of the exec/mmap hook ("hwt-mmap", PCATCH).
    pub(crate) fn pause(&self) {
        let mut p = self.mtx.lock();
        while !p.released && !p.wake_pending {
            let (g, r) = p.sleep(kpi::sync::Chan::of(self), c"hwt-mmap", true);
            p = g;
            if r.is_err() {
                // A signal ends the pause.
                break;
            }
        }
        p.wake_pending = false;
    }
}

impl HwtThread {
    /// `hwt_thread_alloc`: the thread `tid` with its buffer.
    pub(crate) fn alloc(thread_id: i32, tid: Tid, vm: HwtVm) -> KResult<HwtThread> {
        Ok(HwtThread {
            thread_id,
            tid,
            vm,
            active_cpu: AtomicU32::new(NO_CPU),
            exited: kpi::atomic::AtomicBool::new(false),
            mtx: Mutex::new(c"thr", Pause::default(), Wait::WaitOk)?,
        })
    }

    /// Marks the unit of `cpu` tracing this thread.
    pub(crate) fn set_active(&self, cpu: Option<u32>) {
        self.active_cpu
            .store(cpu.unwrap_or(NO_CPU), Ordering::Relaxed);
    }

    /// The CPU whose unit traces this thread, if any.
    pub(crate) fn active_cpu(&self) -> Option<u32> {
        let c = self.active_cpu.load(Ordering::Relaxed);
        (c != NO_CPU).then_some(c)
    }

    /// Whether the unit of `cpu` traces this thread.
    pub(crate) fn active_on(&self, cpu: u32) -> bool {
        self.active_cpu.load(Ordering::Relaxed) == cpu
    }
}

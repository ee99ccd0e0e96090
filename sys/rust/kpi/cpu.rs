//! CPUs: `curcpu`, `mp_maxid`, `CPU_ABSENT` and halted CPUs.

/// The CPU the current thread runs on (`curcpu`).
#[inline]
pub fn curcpu() -> u32 {
    crate::backend::curcpu()
}

/// Number of CPU ids (`mp_maxid + 1`); ids may have holes.
pub fn ncpu_ids() -> u32 {
    crate::backend::ncpu_ids()
}

/// A CPU id that exists (`!CPU_ABSENT(cpu)`).
pub fn exists(cpu: u32) -> bool {
    crate::backend::cpu_exists(cpu)
}

/// A CPU that exists and is not halted (`!pmc_cpu_is_disabled(cpu)`).
pub fn is_active(cpu: u32) -> bool {
    crate::backend::cpu_active(cpu)
}

/// True in interrupt or NMI context.
pub fn in_interrupt() -> bool {
    crate::backend::in_interrupt()
}

/// `sched_bind`: runs the current thread on `cpu` until the returned guard
/// is dropped (`sched_unbind`).
pub fn bind(cpu: u32) -> CpuBinding {
    CpuBinding(crate::backend::bind(cpu))
}

/// Restores the previous CPU when dropped.
#[derive(Debug)]
pub struct CpuBinding(u32);

impl Drop for CpuBinding {
    fn drop(&mut self) {
        crate::backend::unbind(self.0);
    }
}

/// `cpu_spinwait()`: one turn of a busy-wait loop (a scheduling point of
/// the simulator's races, so the awaited work can run).
#[inline]
pub fn spinwait() {
    crate::backend::cpu_spinwait();
}

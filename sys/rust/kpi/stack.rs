//! Call chains of the interrupted thread: the kernel stack from the
//! interrupt frame, and the user stack once the thread is back at its
//! return to user mode (where reading user memory cannot fault in an
//! interrupt).

/// What the interrupt caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted {
    /// The thread was running in user mode.
    pub user_mode: bool,
    /// The interrupted PC.
    pub pc: usize,
}

/// The mode and PC of the interrupted context (`PMC_TRAPFRAME_TO_PC`).
#[inline]
pub fn interrupted() -> Interrupted {
    crate::backend::interrupted()
}

/// Fills `out` with the kernel call chain of the interrupted context,
/// innermost first; returns how many entries were written. Empty for a
/// user-mode interrupt.
#[inline]
pub fn kernel_callchain(out: &mut [usize]) -> usize {
    crate::backend::kernel_callchain(out)
}

/// Fills `out` with the current thread's user call chain, innermost first
/// (at the return to user mode only).
pub fn user_callchain(out: &mut [usize]) -> usize {
    crate::backend::user_callchain(out)
}

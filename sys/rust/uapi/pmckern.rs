//! `sys/sys/pmckern.h`: the hook interface between the kernel and hwpmc.
//!
//! Only the parts with a fixed layout are here: the hook function codes and
//! the argument structs the kernel passes to `pmc_hook`.

use core::ffi::c_void;

use crate::plain::impl_plain;

/// exec(2) replaced a process image; arg [`PmckernProcexec`].
pub const PMC_FN_PROCESS_EXEC: i32 = 1;
/// A thread is switched in.
pub const PMC_FN_CSW_IN: i32 = 2;
/// A thread is switched out.
pub const PMC_FN_CSW_OUT: i32 = 3;
/// hardclock: process this CPU's pending samples.
pub const PMC_FN_DO_SAMPLES: i32 = 4;
/// Unused (was KLD_LOAD, now an event handler).
pub const PMC_FN_UNUSED1: i32 = 5;
/// Unused (was KLD_UNLOAD, now an event handler).
pub const PMC_FN_UNUSED2: i32 = 6;
/// An executable mapping was created; arg [`PmckernMapIn`].
pub const PMC_FN_MMAP: i32 = 7;
/// A mapping was removed; arg [`PmckernMapOut`].
pub const PMC_FN_MUNMAP: i32 = 8;
/// Capture the user call chain of a hardware sample; arg the trap frame.
pub const PMC_FN_USER_CALLCHAIN: i32 = 9;
/// Same for a software sample.
pub const PMC_FN_USER_CALLCHAIN_SOFT: i32 = 10;
/// A software event fired; arg [`PmckernSoft`].
pub const PMC_FN_SOFT_SAMPLING: i32 = 11;
/// A thread was created.
pub const PMC_FN_THR_CREATE: i32 = 12;
/// A thread exits.
pub const PMC_FN_THR_EXIT: i32 = 13;
/// A thread with pending samples returns to user mode.
pub const PMC_FN_THR_USERRET: i32 = 14;
/// Log a kernel thread's creation (system sampling active).
pub const PMC_FN_THR_CREATE_LOG: i32 = 15;
/// Log a thread's exit.
pub const PMC_FN_THR_EXIT_LOG: i32 = 16;
/// Log a kernel process's creation; arg the process.
pub const PMC_FN_PROC_CREATE_LOG: i32 = 17;

/// `ring_type_t`: the per-CPU sample rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum RingType {
    /// Samples taken by hardware interrupts.
    Hr = 0,
    /// Samples taken by software events.
    Sr = 1,
    /// Samples whose user call chain is completed at return to user mode.
    Ur = 2,
}
/// `PMC_NUM_SR`: number of rings.
pub const PMC_NUM_SR: usize = 3;

/// `struct pmckern_procexec`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmckernProcexec {
    /// Non-zero when exec changed the credentials (set-id image).
    pub pm_credentialschanged: i32,
    /// Interpreter base address (AT_BASE).
    pub pm_baseaddr: usize,
    /// Load base of a position-independent executable.
    pub pm_dynaddr: usize,
}

/// `struct pmckern_map_in`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmckernMapIn {
    /// The mapped vnode.
    pub pm_file: *mut c_void,
    /// Address the object is mapped at.
    pub pm_address: usize,
}

/// `struct pmckern_map_out`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmckernMapOut {
    /// Start of the removed region.
    pub pm_address: usize,
    /// Size of the removed region.
    pub pm_size: usize,
}

/// `struct pmckern_soft`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PmckernSoft {
    /// Event code of the software event.
    pub pm_ev: u32,
    /// CPU it fired on.
    pub pm_cpu: i32,
    /// Trap frame of the interrupted context.
    pub pm_tf: *mut c_void,
}

impl_plain!(PmckernProcexec, PmckernMapIn, PmckernMapOut, PmckernSoft);

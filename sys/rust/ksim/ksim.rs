//! ksim: a deterministic simulated FreeBSD machine for host tests.
//!
//! The machine has CPUs (with sparse ids; a CPU may be absent or
//! disabled), processes and threads with credentials and jails, user
//! memory, a steppable scheduler that calls the PMC hooks where FreeBSD's
//! scheduler does, a kernel allocator that can be made to fail at the Nth
//! call and counts what is still allocated, and a lock witness that reports
//! order reversals and sleeping or allocating while a spin lock is held or
//! in interrupt context.
//!
//! Kernel code never calls ksim directly: it calls `kpi`, whose simulator
//! backend calls the [`kern`] services of the current machine. A test makes
//! a machine current for its thread with [`Machine::enter`].

// The simulator is host code: the kernel allocation lints of
// sys/clippy.toml do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

pub mod cpu;
pub mod elf;
pub mod host_file;
pub mod imgact_elf;
pub mod kern;
mod machine;
pub use machine::physmem;
pub mod programs;
pub mod sched;
pub mod user_process;
pub mod witness;
pub mod workload;
pub mod x86;

pub mod machine_guard {
    //! The guard of [`crate::Machine::enter`].
    pub use crate::machine::Entered;
}

pub use machine::{
    Activity, CpuState, Cred, Event, EventFn, FileKind, HookCall, HookFn, KernelRequest, KprocFn,
    Location, MAXCOMLEN, Machine, MachineConfig, Mapping, NotifyRead, P_HWPMC, P_KPROC, P_SYSTEM,
    P_WEXIT, PAGE_SIZE, PmcIntrFn, ProcInfo, SoftEvent, SyscallHandler, SysctlInfo, SysctlStrFn,
    SysctlType, SysctlValue, ThreadSignal, TickContext, UserProt, UserRegs, Violation, ctlflag,
};

/// FreeBSD's errno values used by the simulated kernel.
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// No such process.
    pub const ESRCH: i32 = 3;
    /// Device not configured.
    pub const ENXIO: i32 = 6;
    /// Cannot allocate memory.
    pub const ENOMEM: i32 = 12;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
}

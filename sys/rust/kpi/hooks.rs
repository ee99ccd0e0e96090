//! The kernel's calls into hwpmc: `pmc_hook` (context switches, exec,
//! software events, threads) and the process_fork / process_exit event
//! handlers.

use crate::malloc::KBox;

use crate::proc::{Pid, Tid};

/// A `pmc_hook` call; the thread it concerns is [`crate::proc::curthread`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// PMC_FN_CSW_IN.
    CswIn,
    /// PMC_FN_CSW_OUT.
    CswOut,
    /// PMC_FN_PROCESS_EXEC.
    ProcessExec {
        /// The image changed the credentials (set-id).
        credentials_changed: bool,
        /// AT_BASE.
        base: u64,
        /// PIE load base.
        dyn_base: u64,
    },
    /// PMC_FN_SOFT_SAMPLING: software event `ev` fired on `cpu`
    /// (interrupt context).
    SoftSampling {
        /// Event code.
        ev: u32,
        /// CPU.
        cpu: u32,
    },
    /// PMC_FN_THR_CREATE.
    ThrCreate {
        /// The new thread (the hook may run in its creator).
        tid: Tid,
    },
    /// PMC_FN_THR_EXIT.
    ThrExit {
        /// The exiting thread.
        tid: Tid,
    },
    /// PMC_FN_USER_CALLCHAIN(_SOFT): the thread returns to user mode with
    /// the AST it asked for ([`crate::proc::request_userret`]).
    UserRet,
    /// PMC_FN_DO_SAMPLES: hardclock on a CPU marked with samples
    /// (interrupt context).
    DoSamples,
    /// PMC_FN_MMAP: the current process mapped an executable object at
    /// `addr` ([`crate::proc::mappings`] names it).
    Mmap {
        /// Start address.
        addr: u64,
    },
    /// PMC_FN_MUNMAP: the current process unmapped `[addr, addr + size)`.
    Munmap {
        /// Start address.
        addr: u64,
        /// Length.
        size: u64,
    },
}

/// An event handler call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelEvent {
    /// process_fork.
    ProcessFork {
        /// Parent.
        parent: Pid,
        /// Child.
        child: Pid,
    },
    /// process_exit (in the exiting process's context).
    ProcessExit {
        /// Process.
        pid: Pid,
    },
    /// kld_load: a kernel module was loaded at `addr`.
    KldLoad {
        /// Load address.
        addr: u64,
    },
    /// kld_unload: the module at `[addr, addr + size)` is gone.
    KldUnload {
        /// Load address.
        addr: u64,
        /// Size.
        size: u64,
    },
}

/// The hook function type.
pub type HookFn = KBox<dyn Fn(&Hook) + Send + Sync>;
/// The event handler type.
pub type EventFn = KBox<dyn Fn(&KernelEvent) + Send + Sync>;

/// Installs `pmc_hook`; `None` removes it.
pub fn set_pmc_hook(hook: Option<HookFn>) -> crate::KResult<()> {
    crate::backend::set_pmc_hook(hook)
}

/// A registered event handler; deregistered when dropped.
#[derive(Debug)]
pub struct EventTag(u64);

/// `EVENTHANDLER_REGISTER` for process_fork and process_exit.
pub fn eventhandler_register(handler: EventFn) -> crate::KResult<EventTag> {
    crate::backend::eventhandler_register(handler).map(EventTag)
}

impl Drop for EventTag {
    fn drop(&mut self) {
        crate::backend::eventhandler_deregister(self.0);
    }
}

//! The kernel's calls into hwpmc: `pmc_hook` (context switches, exec,
//! software events, threads) and the process_fork / process_exit event
//! handlers.
//!
//! The kernel calls each hook only under its own condition (sys/kern):
//! the context-switch hooks, PMC_FN_THR_CREATE and PMC_FN_THR_EXIT for
//! processes with `P_HWPMC`; the *_LOG hooks for other processes only
//! while its `pmc_ss_count` ([`crate::kern_pmc::pmc_ss_count`]) is
//! non-zero; PMC_FN_PROCESS_EXEC when either holds.

use crate::malloc::KBox;

use crate::proc::{Pid, Tid};

/// `MAXCOMLEN`: the longest command or thread name.
pub const MAXCOMLEN: usize = 19;

/// A command or thread name (`p_comm`, `td_name`), cut to [`MAXCOMLEN`]
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm {
    bytes: [u8; MAXCOMLEN],
    len: u8,
}

impl Comm {
    /// A name from `name`, cut to [`MAXCOMLEN`] bytes and at a NUL.
    pub fn new(name: &[u8]) -> Comm {
        let name = name.split(|&b| b == 0).next().unwrap_or(&[]);
        let len = name.len().min(MAXCOMLEN);
        let mut bytes = [0; MAXCOMLEN];
        bytes[..len].copy_from_slice(&name[..len]);
        Comm {
            bytes,
            len: len as u8,
        }
    }
    /// The name.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// What the thread hooks read of a thread and its process when called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadInfo {
    /// `td_tid`.
    pub tid: Tid,
    /// `td_proc->p_pid`.
    pub pid: Pid,
    /// `td_proc->p_flag`.
    pub flags: u32,
    /// `td_name`.
    pub name: Comm,
}

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
    /// PMC_FN_THR_CREATE: a thread of a process using PMCs was created
    /// (the hook runs in its creator).
    ThrCreate {
        /// The new thread.
        thread: ThreadInfo,
    },
    /// PMC_FN_THR_EXIT: a thread of a process using PMCs exits; the
    /// kernel holds the process's spin lock.
    ThrExit {
        /// The exiting thread.
        tid: Tid,
    },
    /// PMC_FN_THR_CREATE_LOG: with system-wide sampling active, a thread
    /// of a process not using PMCs was created, or any thread was renamed
    /// (thr_set_name), or a kernel thread was created.
    ThrCreateLog {
        /// The thread.
        thread: ThreadInfo,
    },
    /// PMC_FN_THR_EXIT_LOG: with system-wide sampling active, a thread of
    /// a process not using PMCs exits; the kernel may hold the process's
    /// spin lock.
    ThrExitLog {
        /// The exiting thread.
        tid: Tid,
    },
    /// PMC_FN_PROC_CREATE_LOG: with system-wide sampling active, a kernel
    /// process was created (kproc_create).
    ProcCreateLog {
        /// The new process.
        pid: Pid,
        /// Its `p_flag`.
        flags: u32,
        /// Its `p_comm`.
        comm: Comm,
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

/// `struct hwt_record_entry` as the kernel hands it to the hwt hook (on
/// its stack; the hook copies what it keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtRecordIn<'a> {
    /// `record_type` (`uapi::hwt_record::HwtRecordType`).
    pub record_type: u32,
    /// The object's path; None for MUNMAP.
    pub fullpath: Option<&'a [u8]>,
    /// Where it was mapped (PIE base for an executable).
    pub addr: u64,
    /// Where the run-time linker was mapped (executables).
    pub baseaddr: u64,
}

/// The calls of `HWT_CALL_HOOK(td, func, arg)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwtHook<'a> {
    /// HWT_SWITCH_IN: the thread is switched in (thread lock held).
    SwitchIn,
    /// HWT_SWITCH_OUT: the thread is switched out (thread lock held).
    SwitchOut,
    /// HWT_THREAD_EXIT: the thread exits (process lock held).
    ThreadExit,
    /// HWT_THREAD_CREATE: the thread was just created (its creator runs
    /// the hook).
    ThreadCreate,
    /// HWT_THREAD_SET_NAME.
    ThreadSetName,
    /// HWT_RECORD: queue the record (munmap).
    Record(HwtRecordIn<'a>),
    /// HWT_MMAP: an executable object was mapped.
    Mmap(HwtRecordIn<'a>),
    /// HWT_EXEC: the process executed an image.
    Exec(HwtRecordIn<'a>),
}

/// The thread an hwt hook call is about (`td`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwtThread {
    /// `td->td_tid`.
    pub tid: Tid,
    /// `td->td_proc->p_pid`.
    pub pid: Pid,
    /// `td->td_proc->p_flag2` when the hook was called, read without the
    /// process lock as hwt's handler reads it: the switch hooks run with
    /// the thread lock (a spin lock) held, where [`crate::proc::flag2`]
    /// cannot look the process up.
    pub flag2: u32,
}

/// The hwt hook type.
pub type HwtHookFn = KBox<dyn Fn(HwtThread, &HwtHook<'_>) + Send + Sync>;

/// Installs `hwt_hook` (`hwt_hook_load`); `None` removes it
/// (`hwt_hook_unload`). The kernel calls it for every thread while it is
/// installed; the hook tests `P2_HWT` itself.
pub fn set_hwt_hook(hook: Option<HwtHookFn>) {
    crate::backend::set_hwt_hook(hook);
}

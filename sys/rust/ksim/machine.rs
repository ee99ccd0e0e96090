//! The simulated machine: CPUs, processes, threads, memory and the
//! scheduler, and the test-facing API that drives them.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

pub use crate::witness::Violation;
use crate::witness::Witness;

pub mod devices;
pub(crate) mod exterr;
mod files;
mod knobs;
pub mod physmem;
mod procs;
mod umem;

pub(crate) use knobs::{Sysctl, SysctlCell, parse_tunable};
pub use knobs::{SysctlInfo, SysctlType, SysctlValue, ctlflag};

/// Whether a CPU id exists and runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuState {
    /// Present and running.
    Online,
    /// Present but halted or taken offline.
    Disabled,
    /// No CPU with this id (a hole in sparse numbering).
    Absent,
}

/// How the machine is built.
#[derive(Debug, Clone)]
pub struct MachineConfig {
    /// State of each CPU id, from 0 to `mp_maxid`.
    pub cpus: Vec<CpuState>,
    /// TSC frequency in Hz.
    pub tsc_freq: u64,
    /// Clock interrupts per second (`hz`).
    pub hz: u64,
    /// Whether the kernel was built with `options HWPMC_HOOKS`.
    pub hwpmc_hooks: bool,
    /// The PMC version the kernel was built with.
    pub kernel_pmc_version: u32,
    /// The `PMC_VERSION` of the tree the driver is built in (on FreeBSD
    /// the glue's, from that tree's `sys/pmc.h`).
    pub module_pmc_version: u32,
    /// CPU identification string (`kern.hwpmc.cpuid`).
    pub cpuid: String,
    /// Whether the lock witness checks lock orders (benchmarks turn it off
    /// to measure the kernel code rather than the checker).
    pub witness: bool,
    /// The largest pid (`pid_max`); past it pids wrap around and the
    /// lowest free one from `first_pid` on is reused, as on FreeBSD.
    pub pid_max: u32,
    /// The first pid the machine hands out (100, as FreeBSD). A machine
    /// that mirrors a host's processes under their own pids (ksimd) puts
    /// its own processes above the host's pid range.
    pub first_pid: u32,
    /// Whether the kernel has `options EXTERR_STRINGS` (GENERIC has):
    /// without it, extended errors carry no message.
    pub exterr_strings: bool,
    /// Instructions a thread that runs a real program retires per clock
    /// tick, user and kernel work together (10,000 at 1000 Hz: a 10 MIPS
    /// machine, slow enough that the emulator keeps up with the clock).
    pub insns_per_tick: u64,
    /// The kernel runs as a virtual machine's guest (`vm_guest` is not
    /// `VM_GUEST_NO`).
    pub vm_guest: bool,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            cpus: vec![CpuState::Online; 4],
            tsc_freq: 2_400_000_000,
            hz: 1000,
            hwpmc_hooks: true,
            kernel_pmc_version: 0x0A03_0000,
            module_pmc_version: 0x0A03_0000,
            cpuid: "GenuineIntel-6-55-4".into(),
            witness: true,
            pid_max: 99_999,
            first_pid: FIRST_PID,
            exterr_strings: true,
            insns_per_tick: 10_000,
            vm_guest: false,
        }
    }
}

/// The protection of a page of user memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserProt {
    /// Readable and writable.
    ReadWrite,
    /// Readable only: copyout faults on it.
    ReadOnly,
    /// Unmapped: copyin and copyout fault on it.
    None,
}

/// The size of a page of user memory.
pub const PAGE_SIZE: u64 = 4096;

/// `P_WEXIT` of `p_flag`: the process is working on exiting.
pub const P_WEXIT: u32 = 0x0000_2000;
/// `P_KPROC` of `p_flag`: a kernel process.
pub const P_KPROC: u32 = 0x0000_0004;
/// `P_SYSTEM` of `p_flag`: a system process (no signals, no statistics).
pub const P_SYSTEM: u32 = 0x0000_0200;
/// `P_HWPMC` of `p_flag`: the process uses PMCs (`PMC_PROC_IS_USING_PMCS`).
pub const P_HWPMC: u32 = 0x0080_0000;
/// `MAXCOMLEN`: the longest command or thread name.
pub const MAXCOMLEN: usize = 19;

/// Process credentials, as far as the debug and privilege checks use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cred {
    /// Effective user id.
    pub uid: u32,
    /// Real user id.
    pub ruid: u32,
    /// Saved user id.
    pub svuid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Real group id.
    pub rgid: u32,
    /// Saved group id.
    pub svgid: u32,
    /// Jail id; 0 is the host.
    pub jail: u32,
}

impl Cred {
    /// Root on the host.
    pub const fn root() -> Cred {
        Cred::user(0)
    }
    /// An ordinary user whose ids are all `uid`, on the host.
    pub const fn user(uid: u32) -> Cred {
        Cred {
            uid,
            ruid: uid,
            svuid: uid,
            gid: uid,
            rgid: uid,
            svgid: uid,
            jail: 0,
        }
    }
    /// The same credentials inside jail `jail`.
    pub const fn in_jail(self, jail: u32) -> Cred {
        Cred { jail, ..self }
    }
}

/// A snapshot of a process for kernel code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Credentials.
    pub cred: Cred,
    /// Credentials changed by a set-id exec (P_SUGID).
    pub sugid: bool,
    /// A kernel or init process nobody may debug.
    pub system: bool,
    /// Exited, not yet reaped.
    pub zombie: bool,
    /// `p_flag` bits kernel code set (e.g. P_HWPMC).
    pub flags: u32,
    /// Command name.
    pub comm: String,
    /// Executable path.
    pub path: String,
    /// Threads.
    pub threads: Vec<u32>,
    /// The wait(2) status a program that ended by itself left (exit(2)
    /// or a fatal signal); None while it runs, or when the machine's
    /// caller made it exit.
    pub exit_status: Option<i32>,
}

/// Calls the scheduler and the VM make into the PMC hook (`pmc_hook`),
/// with the thread they concern as the current thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookCall {
    /// PMC_FN_CSW_IN: the current thread was switched in.
    CswIn,
    /// PMC_FN_CSW_OUT: the current thread is being switched out.
    CswOut,
    /// PMC_FN_PROCESS_EXEC.
    ProcessExec {
        /// exec changed the credentials.
        credentials_changed: bool,
        /// AT_BASE.
        base: u64,
        /// PIE load base.
        dyn_base: u64,
    },
    /// PMC_FN_SOFT_SAMPLING: a software event fired on `cpu`.
    SoftSampling {
        /// Event code.
        ev: u32,
        /// CPU.
        cpu: u32,
    },
    /// PMC_FN_THR_CREATE, called by the creating thread.
    ThrCreate {
        /// The new thread.
        tid: u32,
    },
    /// PMC_FN_THR_EXIT, called by the exiting thread.
    ThrExit {
        /// The exiting thread.
        tid: u32,
    },
    /// PMC_FN_THR_CREATE_LOG: a thread of a process that does not use
    /// PMCs was created, or a thread was renamed, while system-wide
    /// sampling is active (the hook runs in the creating thread).
    ThrCreateLog {
        /// The thread.
        tid: u32,
        /// Its process.
        pid: u32,
        /// The process's `p_flag`.
        flags: u32,
        /// The thread's name (`td_name`).
        name: String,
    },
    /// PMC_FN_THR_EXIT_LOG: a thread of a process that does not use PMCs
    /// exits while system-wide sampling is active.
    ThrExitLog {
        /// The exiting thread.
        tid: u32,
    },
    /// PMC_FN_PROC_CREATE_LOG: a kernel process was created while
    /// system-wide sampling is active.
    ProcCreateLog {
        /// The new process.
        pid: u32,
        /// Its `p_flag`.
        flags: u32,
        /// Its command name (`p_comm`).
        comm: String,
    },
    /// PMC_FN_USER_CALLCHAIN / PMC_FN_USER_CALLCHAIN_SOFT: the current
    /// thread returns to user mode with an AST the PMC code requested.
    UserRet,
    /// PMC_FN_DO_SAMPLES: hardclock on a CPU with pending samples
    /// (interrupt context).
    DoSamples,
    /// PMC_FN_MMAP: an executable mapping was made at `addr`.
    Mmap {
        /// Start address.
        addr: u64,
    },
    /// PMC_FN_MUNMAP: `[addr, addr + size)` was unmapped.
    Munmap {
        /// Start address.
        addr: u64,
        /// Length.
        size: u64,
    },
}

/// An executable mapping of a process, or a kernel object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Path of the mapped object.
    pub path: String,
}

/// Where a thread is when an interrupt catches it: the mode it runs in and
/// its stacks as return-address chains, innermost first (the first kernel
/// entry is the interrupted kernel PC; the first user entry is the user PC).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The thread was in user mode.
    pub user_mode: bool,
    /// Kernel PCs (empty in user mode).
    pub kernel_stack: Vec<u64>,
    /// User PCs.
    pub user_stack: Vec<u64>,
    /// The user registers, for a thread that runs real code: the user
    /// call chain is then walked from them through its memory, as
    /// FreeBSD's is, instead of taken from `user_stack`.
    pub user_regs: Option<UserRegs>,
}

/// The user registers a trap frame holds, which the call-chain capture
/// starts from (`PMC_TRAPFRAME_TO_PC`, `_FP`, `_USER_SP`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserRegs {
    /// The instruction set (FreeBSD's name: `amd64`, `arm64`).
    pub arch: &'static str,
    /// The user PC.
    pub pc: u64,
    /// The frame pointer (`%rbp`, `x29`).
    pub fp: u64,
    /// The stack pointer.
    pub sp: u64,
}

/// What a thread does: asked for its next location at every clock tick
/// while it runs (a workload program).
pub trait Activity: Send {
    /// The location for the coming tick.
    fn step(&mut self) -> Location;

    /// Runs one clock tick's worth on the CPU `ctx` names, with the
    /// kernel services `ctx` offers, and returns where the tick leaves
    /// the thread; by default [`Activity::step`].
    fn tick_on(&mut self, ctx: &mut TickContext<'_>) -> Location {
        let _ = ctx;
        self.step()
    }

    /// Reads the thread's own address space (for activities that run real
    /// code): `None` when it has none, `Some(false)` when `addr` is not
    /// mapped readable.
    fn copyin(&self, addr: u64, buf: &mut [u8]) -> Option<bool> {
        let _ = (addr, buf);
        None
    }

    /// Writes the thread's own address space, as [`Activity::copyin`]
    /// reads it.
    fn copyout(&mut self, addr: u64, data: &[u8]) -> Option<bool> {
        let _ = (addr, data);
        None
    }

    /// The result of a system call of a kernel module the thread made
    /// ([`KernelRequest::ModuleSyscall`]), which it waited for.
    fn module_syscall_done(&mut self, result: Result<i64, i32>) {
        let _ = result;
    }

    /// The wait(2) status once the program has ended: the machine then
    /// makes its process exit.
    fn ended(&self) -> Option<i32> {
        None
    }
}

/// What a thread's system calls during a tick ask of the machine, done
/// when the tick's clock interrupt has been taken.
pub enum KernelRequest {
    /// thr_new(2): a thread of the same process, with the id
    /// [`TickContext::new_tid`] reserved, running `activity`.
    NewThread {
        /// The new thread's id.
        tid: u32,
        /// What it runs.
        activity: Box<dyn Activity>,
    },
    /// thr_exit(2) of the calling thread (the process's last thread makes
    /// the process exit with status 0).
    ThreadExit,
    /// mmap(2) of an executable mapping of file `path` (PMC_FN_MMAP).
    Mmap {
        /// The file.
        path: String,
        /// First address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// What write(2) put on descriptor 1 or 2 (the machine keeps each
    /// process's output: [`Machine::program_output`]).
    Output {
        /// 1 or 2.
        fd: i32,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A system call of a kernel module (`syscall_register`: the numbers
    /// from 210, as FreeBSD's lkmnosys slots), such as hwpmc's: the
    /// machine serves it after the tick in the thread's context and hands
    /// the result to [`Activity::module_syscall_done`]; the thread waits
    /// in the kernel until then.
    ModuleSyscall {
        /// The system call number.
        number: u32,
        /// Its arguments.
        args: [u64; 6],
    },
    /// munmap(2) of a range holding an executable mapping
    /// (PMC_FN_MUNMAP).
    Munmap {
        /// First address.
        addr: u64,
        /// Length.
        len: u64,
    },
}

impl std::fmt::Debug for KernelRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelRequest::NewThread { tid, .. } => write!(f, "NewThread({tid})"),
            KernelRequest::ThreadExit => f.write_str("ThreadExit"),
            KernelRequest::Mmap { path, addr, len } => {
                write!(f, "Mmap({path}, {addr:#x}, {len:#x})")
            }
            KernelRequest::Munmap { addr, len } => write!(f, "Munmap({addr:#x}, {len:#x})"),
            KernelRequest::Output { fd, bytes } => write!(f, "Output({fd}, {} bytes)", bytes.len()),
            KernelRequest::ModuleSyscall { number, args } => {
                write!(f, "ModuleSyscall({number}, {args:x?})")
            }
        }
    }
}

/// A thread that ran in a tick, and the requests it left.
type TickDone = (u32, Vec<KernelRequest>);

/// The kernel as a thread's activity sees it during a clock tick: the
/// CPU it runs on, the machine's files, thread ids, and the requests its
/// system calls leave for the machine.
#[derive(Debug)]
pub struct TickContext<'a> {
    cpu: u32,
    insns_per_tick: u64,
    files: Option<&'a BTreeMap<String, Vec<u8>>>,
    next_tid: Option<&'a mut u32>,
    requests: Vec<KernelRequest>,
    pmus: Option<Arc<crate::x86::PmuSet>>,
    pts: Option<Arc<crate::x86::PtSet>>,
    user_rdpmc: bool,
    resume: bool,
}

impl<'a> TickContext<'a> {
    /// A context with the files `files` and thread ids from `next_tid`
    /// but no machine around (tests and fuzzing of system calls).
    pub fn detached(
        cpu: u32,
        files: &'a BTreeMap<String, Vec<u8>>,
        next_tid: &'a mut u32,
    ) -> TickContext<'a> {
        TickContext {
            cpu,
            insns_per_tick: MachineConfig::default().insns_per_tick,
            files: Some(files),
            next_tid: Some(next_tid),
            requests: Vec::new(),
            pmus: None,
            pts: None,
            user_rdpmc: false,
            resume: false,
        }
    }

    /// A context with no machine around: no files, no new threads.
    pub fn standalone(cpu: u32) -> TickContext<'static> {
        TickContext {
            cpu,
            insns_per_tick: MachineConfig::default().insns_per_tick,
            files: None,
            next_tid: None,
            requests: Vec::new(),
            pmus: None,
            pts: None,
            user_rdpmc: false,
            resume: false,
        }
    }

    /// The CPU the tick runs on.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// The machine's [`MachineConfig::insns_per_tick`].
    pub fn insns_per_tick(&self) -> u64 {
        self.insns_per_tick
    }

    /// A file of the machine.
    pub fn read_file(&self, path: &str) -> Option<&[u8]> {
        self.files?.get(path).map(Vec::as_slice)
    }

    /// Reserves the id of a thread to be created (None: no threads can
    /// be made here).
    pub fn new_tid(&mut self) -> Option<u32> {
        let next = self.next_tid.as_deref_mut()?;
        let tid = *next;
        *next += 1;
        Some(tid)
    }

    /// Leaves a request for the machine.
    pub fn request(&mut self, r: KernelRequest) {
        self.requests.push(r);
    }

    /// The machine's PMUs, which count what the thread executes.
    pub fn pmus(&self) -> Option<&Arc<crate::x86::PmuSet>> {
        self.pmus.as_ref()
    }

    /// The machine's Intel PT units, which trace what the thread executes.
    pub fn pts(&self) -> Option<&Arc<crate::x86::PtSet>> {
        self.pts.as_ref()
    }

    /// Whether user mode may execute `rdpmc` on this CPU (CR4.PCE).
    pub fn user_rdpmc(&self) -> bool {
        self.user_rdpmc
    }

    /// Whether this call goes on with the tick that a PMI interrupted
    /// (what was left of its budget), rather than starting a new one.
    pub fn resumes(&self) -> bool {
        self.resume
    }
}

/// Event handlers (EVENTHANDLER(9)) the driver registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// process_fork: `child` was forked from `parent`.
    ProcessFork {
        /// Parent.
        parent: u32,
        /// Child.
        child: u32,
    },
    /// process_exit: the current process is exiting.
    ProcessExit {
        /// Process.
        pid: u32,
    },
    /// kld_load: a kernel module was loaded at `addr`.
    KldLoad {
        /// Load address.
        addr: u64,
    },
    /// kld_unload: the module at `[addr, addr + size)` was unloaded.
    KldUnload {
        /// Load address.
        addr: u64,
        /// Size.
        size: u64,
    },
}

/// What a file descriptor refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// The write end of a pipe.
    Pipe,
    /// A connected socket.
    Socket,
    /// A directory (opened read-only, as directories are).
    Directory,
    /// `/dev/full`: every write fails with ENOSPC.
    Full,
    /// A device that accepts `after` bytes, then fails writes with `errno`
    /// (EIO for a failing disk).
    Failing {
        /// Bytes accepted before the failure.
        after: usize,
        /// The error of the failing writes.
        errno: i32,
    },
    /// A file that takes at most `max` bytes a write: short writes.
    Short {
        /// Bytes a write takes at most.
        max: usize,
    },
    /// A file whose every `every`th write is interrupted (EINTR) before
    /// taking anything.
    Interrupting {
        /// Period of the interruptions.
        every: u32,
    },
    /// The write end of a pipe holding at most `capacity` unread bytes: a
    /// write to a full pipe blocks (the writer is woken when the reader
    /// drains it, [`Machine::drain`]). A writer's last pass before it
    /// exits is not left blocked: the reader is taken to read meanwhile.
    BoundedPipe {
        /// Unread bytes the pipe holds.
        capacity: usize,
    },
    /// A descriptor of the host's (ksimd's clients pass their log
    /// descriptors): writes go to it with write(2) and nothing is kept;
    /// its errors are the host's, in FreeBSD's numbers. A write never
    /// blocks the machine: a pipe or socket with no room is EAGAIN and
    /// the writer waits for [`Machine::retry_host_writers`]. The machine
    /// owns the descriptor and closes it with the file's last reference.
    Host {
        /// The host's descriptor.
        fd: i32,
    },
    /// A notification descriptor the kernel made (`kpi::file::NotifyFile`):
    /// its state is the file's [`NotifyState`].
    Notify,
}

/// The state of a [`FileKind::Notify`] file.
#[derive(Debug, Default, Clone)]
pub(crate) struct NotifyState {
    /// The record's length.
    pub(crate) record_len: usize,
    /// The record posted and not read yet.
    pub(crate) pending: Option<Vec<u8>>,
    /// Hung up: after the pending record, end of file.
    pub(crate) hup: bool,
    /// Records posted.
    pub(crate) posts: u64,
}

/// What a read of a notification descriptor finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyRead {
    /// The pending record, now read.
    Record(Vec<u8>),
    /// Nothing pending yet.
    Empty,
    /// Hung up, with nothing pending: end of file.
    End,
}

/// A signal the kernel sent to a thread with a value (`tdsendsignal`
/// with SI_QUEUE), for ksimd to pass on to the host thread it mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSignal {
    /// The process.
    pub pid: u32,
    /// The thread (the process's, when it is gone).
    pub tid: u32,
    /// The signal.
    pub sig: i32,
    /// `si_value.sival_int`.
    pub value: i32,
}

#[derive(Debug)]
pub(crate) struct File {
    pub(crate) kind: FileKind,
    pub(crate) writable: bool,
    pub(crate) data: Vec<u8>,
    /// Descriptors and kernel references.
    pub(crate) refs: u32,
    /// Write calls so far.
    pub(crate) writes: u32,
    /// Bytes of a pipe not read yet.
    pub(crate) unread: usize,
    /// Kernel processes blocked writing to it.
    pub(crate) waiters: Vec<u64>,
    /// A notification file's state.
    pub(crate) notify: Option<NotifyState>,
}

/// A kernel process body: one pass of its loop, run when woken.
pub type KprocFn = Arc<dyn Fn() + Send + Sync>;

pub(crate) struct Kproc {
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) pending: bool,
    /// Running its last pass (kproc_stop).
    pub(crate) stopping: bool,
    /// Running a pass now.
    pub(crate) running: bool,
}

/// A registered system call: its arguments in, an errno or a return value
/// out.
pub type SyscallHandler = Arc<dyn Fn(&[u64]) -> Result<i64, i32> + Send + Sync>;
/// The `pmc_hook` function.
pub type HookFn = Arc<dyn Fn(&HookCall) + Send + Sync>;

/// The PMC interrupt handler (`pmc_intr`): true when the NMI was a PMC's.
pub type PmcIntrFn = Arc<dyn Fn() -> bool + Send + Sync>;
/// An event handler.
pub type EventFn = Arc<dyn Fn(&Event) + Send + Sync>;

/// A kernel software event (`PMC_SOFT_DEFINE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftEvent {
    /// Name, e.g. `CLOCK.HARD`.
    pub name: String,
    /// Event code, from `PMC_EV_SOFT_FIRST` up.
    pub code: u32,
    /// How many PMCs use it (`ps_running`), signed as FreeBSD's is, so
    /// that a decrement too many shows as a negative count.
    pub running: i32,
}

#[derive(Debug)]
struct Proc {
    info: ProcInfo,
    umem: BTreeMap<u64, Vec<u8>>,
    /// Pages of `umem` that are not read-write, by page address.
    prot: BTreeMap<u64, UserProt>,
    next_uaddr: u64,
    fds: BTreeMap<i32, u64>,
    maps: Vec<Mapping>,
    /// What a program wrote to descriptors 1 and 2.
    output: [Vec<u8>; 2],
    /// `p_flag2` bits kernel code set (P2_HWT).
    flag2: u32,
}

#[derive(Debug)]
struct Thread {
    pid: u32,
    /// `td_name`.
    name: String,
    cpu: Option<u32>,
    location: Location,
    activity: Option<Box<dyn Activity>>,
    /// An AST is pending: the hook runs when the thread returns to user
    /// mode (TDP_CALLCHAIN).
    ast: bool,
    /// The `struct uexterror` the thread registered with exterrctl(2)
    /// (`TDP2_UEXTERR` and `td_exterr_ptr`).
    exterr_ptr: Option<u64>,
    /// The extended error of the current system call (`TDP2_EXTERR` and
    /// `td_kexterr`).
    kexterr: Option<exterr::Kexterr>,
}

impl std::fmt::Debug for dyn Activity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Activity")
    }
}

#[derive(Debug)]
struct Cpu {
    state: CpuState,
    tsc: u64,
    running: Option<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct Kmem {
    pub(crate) live: BTreeMap<u64, usize>,
    pub(crate) calls: u64,
    pub(crate) fail_at: Option<u64>,
}

pub(crate) struct State {
    pub(crate) cfg: MachineConfig,
    cpus: Vec<Cpu>,
    procs: BTreeMap<u32, Proc>,
    threads: BTreeMap<u32, Thread>,
    next_pid: u32,
    pub(crate) next_tid: u32,
    /// (cpu, thread) the kernel code is running on behalf of.
    pub(crate) ctx: Option<(u32, u32)>,
    pub(crate) in_intr: bool,
    /// In a non-maskable interrupt.
    pub(crate) in_nmi: bool,
    /// `td_critnest` of the kernel code running now.
    pub(crate) critnest: u32,
    pub(crate) witness: Witness,
    pub(crate) kmem: Kmem,
    pub(crate) console: Vec<String>,
    pub(crate) signals: Vec<(u32, i32)>,
    /// Signals sent to threads with a value, not taken yet.
    pub(crate) thread_signals: Vec<ThreadSignal>,
    pub(crate) kenv: BTreeMap<String, String>,
    /// The sysctl tree: every oid by its full name.
    pub(crate) sysctl: BTreeMap<String, knobs::Sysctl>,
    /// `pmc_ss_count` (kern_pmc.c): owners of running system-wide
    /// sampling PMCs, kept by hwpmc; the kernel calls the *_LOG hooks
    /// only while it is non-zero.
    pub(crate) pmc_ss_count: i32,
    pub(crate) soft_events: Vec<SoftEvent>,
    pub(crate) time_ns: u64,
    /// Microseconds of DELAY(9) so far.
    pub(crate) delayed_us: u64,
    pub(crate) files: BTreeMap<u64, File>,
    next_file: u64,
    pub(crate) kprocs: BTreeMap<u64, Kproc>,
    pub(crate) next_kproc: u64,
    /// Kernel processes that called kproc_exit(), as (pid, tid), whose
    /// exit1() has not run yet.
    pub(crate) exiting_kprocs: Vec<(u32, u32)>,
    /// Per CPU: samples are waiting (DPCPU pmc_sampled).
    pub(crate) sampled: Vec<bool>,
    /// The kernel and its loaded modules.
    pub(crate) klds: Vec<Mapping>,
    /// Files by path (executables, libraries, the kernel), for tools.
    pub(crate) vfs: BTreeMap<String, Vec<u8>>,
    /// ktr(4) trace entries.
    pub(crate) ktr: Vec<String>,
    /// The hook calls, when tests keep them.
    pub(crate) hook_trace: Option<Vec<HookCall>>,
    /// The x86 CPU model the CPU key names, if it names one.
    pub(crate) x86: Option<crate::x86::CpuModel>,
    /// Its PMUs, if it has them.
    pub(crate) pmus: Option<Arc<crate::x86::PmuSet>>,
    /// Per CPU: CR4.PCE.
    pub(crate) user_rdpmc: Vec<bool>,
    /// Per CPU: writes of CR4.PCE (each a serializing CR4 write).
    pub(crate) user_rdpmc_writes: Vec<u64>,
    /// The users of the PMC LVT entry (`pcint_refcnt` of local_apic.c):
    /// hwpmc and pt enable and disable it independently.
    pub(crate) pcint_refs: u32,
    /// Physical memory, for the hardware models' output.
    pub(crate) physmem: Arc<physmem::PhysMem>,
    /// The Intel PT units, if the model has them.
    pub(crate) pts: Option<Arc<crate::x86::PtSet>>,
    /// CR3 of each process's address space (made at its first switch-in
    /// after an exec).
    pub(crate) cr3s: BTreeMap<u32, u64>,
    next_cr3: u64,
}

/// The handler of a writable string sysctl (`SYSCTL_PROC`): validates
/// and applies a new value.
pub type SysctlStrFn = Arc<dyn Fn(&str) -> Result<(), i32> + Send + Sync>;

#[derive(Default)]
pub(crate) struct Handlers {
    pub(crate) sysctl_str: BTreeMap<String, SysctlStrFn>,
    pub(crate) kprocs: BTreeMap<u64, KprocFn>,
    pub(crate) settling: bool,
    pub(crate) syscalls: BTreeMap<u32, SyscallHandler>,
    pub(crate) hook: Option<HookFn>,
    pub(crate) pmc_intr: Option<PmcIntrFn>,
    /// Handlers registered with nmi_register_handler (Intel PT's ToPA
    /// interrupt), called after `pmc_intr` on each NMI.
    pub(crate) nmi_handlers: Vec<(u64, PmcIntrFn)>,
    pub(crate) next_nmi_handler: u64,
    pub(crate) events: Vec<(u64, EventFn)>,
    pub(crate) next_event_id: u64,
    /// Told of each post on a notification file (benchmarks that time
    /// them against what a program has retired).
    pub(crate) notify_observer: Option<NotifyObserver>,
    /// The devices in /dev, by name.
    pub(crate) devices: BTreeMap<String, devices::Device>,
    pub(crate) next_device_id: u64,
    /// `hwt_hook`.
    pub(crate) hwt_hook: Option<devices::HwtHookFn>,
}

/// What [`Machine::observe_notify_posts`] calls: the file posted on.
pub type NotifyObserver = Arc<dyn Fn(u64) + Send + Sync>;

pub(crate) struct Inner {
    st: Mutex<State>,
    handlers: Mutex<Handlers>,
    /// Passed between the pieces of a race (`sched`).
    pub(crate) baton: crate::sched::Baton,
}

/// Locks `m`. Kernel code of the simulated machine runs one piece at a
/// time (the scheduler of `sched` passes a baton between host threads), so
/// a held lock means this thread took it twice: that is a bug in the
/// simulator, reported as RefCell would report it.
fn take<'a, T>(m: &'a Mutex<T>, what: &str) -> MutexGuard<'a, T> {
    match m.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => panic!("ksim: the machine's {what} taken twice"),
    }
}

impl Inner {
    pub(crate) fn st(&self) -> MutexGuard<'_, State> {
        take(&self.st, "state")
    }
    pub(crate) fn handlers(&self) -> MutexGuard<'_, Handlers> {
        take(&self.handlers, "handlers")
    }
}

/// A simulated machine. Cloning gives another handle to the same machine.
#[derive(Clone)]
pub struct Machine(pub(crate) Arc<Inner>);

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine").finish_non_exhaustive()
    }
}

thread_local! {
    static CURRENT: RefCell<Vec<Machine>> = const { RefCell::new(Vec::new()) };
}

/// Makes a machine current until dropped.
#[derive(Debug)]
pub struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().pop());
    }
}

pub(crate) fn try_current() -> Option<Machine> {
    CURRENT
        .try_with(|c| c.borrow().last().cloned())
        .ok()
        .flatten()
}

pub(crate) fn current() -> Machine {
    CURRENT
        .with(|c| c.borrow().last().cloned())
        .expect("kernel code ran outside a simulated machine")
}

const FIRST_PID: u32 = 100;
const FIRST_TID: u32 = 100_000;
/// The first address-space CR3 (page-aligned, under MAXPHYADDR, away
/// from the physical memory the models' objects use).
const FIRST_CR3: u64 = 0x10_0000;
/// The soft events FreeBSD's kernel defines with PMC_SOFT_DEFINE.
const KERNEL_SOFT_EVENTS: &[&str] = &[
    "CLOCK.HARD",
    "CLOCK.STAT",
    "CLOCK.PROF",
    "PAGE_FAULT.ALL",
    "PAGE_FAULT.READ",
    "PAGE_FAULT.WRITE",
];

impl Machine {
    /// Builds a machine with init (pid 1) running as root.
    pub fn new(cfg: MachineConfig) -> Machine {
        let cpu_count = cfg.cpus.len();
        let witness_on = cfg.witness;
        let cpus = cfg
            .cpus
            .iter()
            .map(|&state| Cpu {
                state,
                tsc: 0,
                running: None,
            })
            .collect();
        let sysctl = knobs::kernel_sysctls(cfg.hwpmc_hooks);
        let soft_events = KERNEL_SOFT_EVENTS
            .iter()
            .enumerate()
            .map(|(i, n)| SoftEvent {
                name: (*n).into(),
                code: 0x20000 + 1 + i as u32,
                running: 0,
            })
            .collect();
        let first_pid = cfg.first_pid;
        let x86 = crate::x86::CpuModel::from_key(&cfg.cpuid);
        let pmus = x86.and_then(|m| {
            crate::x86::PmuSet::new(m, cpu_count as u32, crate::cpu::cost::CostConfig::default())
        });
        let physmem = Arc::new(physmem::PhysMem::new());
        let pts = x86.and_then(|m| {
            crate::x86::PtSet::new(m, cpu_count as u32, physmem.clone(), pmus.clone())
        });
        let st = State {
            x86,
            pmus,
            physmem,
            pts,
            cr3s: BTreeMap::new(),
            next_cr3: FIRST_CR3,
            user_rdpmc: vec![false; cpu_count],
            user_rdpmc_writes: vec![0; cpu_count],
            pcint_refs: 0,
            cfg,
            cpus,
            procs: BTreeMap::new(),
            threads: BTreeMap::new(),
            next_pid: first_pid,
            next_tid: FIRST_TID,
            ctx: None,
            in_intr: false,
            in_nmi: false,
            critnest: 0,
            witness: Witness::new(witness_on),
            kmem: Kmem::default(),
            console: Vec::new(),
            signals: Vec::new(),
            thread_signals: Vec::new(),
            kenv: BTreeMap::new(),
            sysctl,
            pmc_ss_count: 0,
            soft_events,
            time_ns: 1_790_000_000_000_000_000,
            delayed_us: 0,
            files: BTreeMap::new(),
            next_file: 1,
            kprocs: BTreeMap::new(),
            next_kproc: 1,
            exiting_kprocs: Vec::new(),
            sampled: vec![false; cpu_count],
            klds: vec![Mapping {
                start: crate::elf::KERNEL_BASE,
                end: crate::elf::KERNEL_BASE + 0x100_0000,
                path: "/boot/kernel/kernel".into(),
            }],
            vfs: BTreeMap::new(),
            ktr: Vec::new(),
            hook_trace: None,
        };
        let m = Machine(Arc::new(Inner {
            st: Mutex::new(st),
            handlers: Mutex::new(Handlers::default()),
            baton: crate::sched::Baton::default(),
        }));
        m.insert_proc(1, 0, Cred::root(), "init", "/sbin/init", true);
        m
    }

    /// Makes this machine the one kernel code on this host thread uses.
    pub fn enter(&self) -> Entered {
        CURRENT.with(|c| c.borrow_mut().push(self.clone()));
        Entered(())
    }

    pub(crate) fn st(&self) -> MutexGuard<'_, State> {
        self.0.st()
    }

    /// Advances the machine's clock (a context switch costs a little time,
    /// so events on different CPUs get distinct timestamps).
    fn advance_ns(&self, ns: u64) {
        let mut st = self.st();
        let cycles = (st.cfg.tsc_freq as u128 * ns as u128 / 1_000_000_000) as u64;
        for c in st.cpus.iter_mut() {
            c.tsc += cycles;
        }
        st.time_ns += ns;
    }

    /// Puts `tid` on `cpu` (PMC_FN_CSW_IN when its process uses PMCs).
    /// The CPU loads the CR3 of the thread's address space.
    pub fn switch_in(&self, cpu: u32, tid: u32) {
        self.advance_ns(1000);
        {
            let mut st = self.st();
            if let Some(pid) = st.thread_pid(tid) {
                let cr3 = st.cr3_of(pid);
                let tsc = st.tsc(cpu);
                if let Some(pts) = &st.pts {
                    pts.sync_tsc(cpu, tsc);
                    pts.set_cr3(cpu, cr3);
                }
            }
            assert_eq!(
                st.cpus[cpu as usize].state,
                CpuState::Online,
                "switch_in on CPU {cpu} that is not online"
            );
            assert!(st.cpus[cpu as usize].running.is_none(), "CPU {cpu} is busy");
            assert!(
                st.threads.get(&tid).is_some_and(|t| t.cpu.is_none()),
                "switch_in of thread {tid}, which is on a CPU already or gone"
            );
            st.cpus[cpu as usize].running = Some(tid);
            st.threads
                .get_mut(&tid)
                .expect("switch_in of unknown thread")
                .cpu = Some(cpu);
        }
        if self.thread_uses_pmcs(tid) {
            self.with_ctx_on(cpu, tid, || self.critical_hook(&HookCall::CswIn));
        }
        self.hwt_switch_hook(cpu, tid, &devices::HwtHookCall::SwitchIn);
    }

    /// `PMC_PROC_IS_USING_PMCS(td->td_proc)`: the scheduler's condition for
    /// the context-switch hooks.
    pub(crate) fn thread_uses_pmcs(&self, tid: u32) -> bool {
        let st = self.0.st();
        st.threads
            .get(&tid)
            .and_then(|t| st.procs.get(&t.pid))
            .is_some_and(|p| p.info.flags & P_HWPMC != 0)
    }

    /// `PMC_SYSTEM_SAMPLING_ACTIVE()`: `pmc_ss_count > 0`, the kernel's own
    /// count, which the driver keeps.
    pub(crate) fn system_sampling_active(&self) -> bool {
        self.0.st().pmc_ss_count > 0
    }

    /// A hook the kernel calls with a spin mutex held, so in a critical
    /// section: sched_switch calls PMC_SWITCH_CONTEXT with the thread
    /// lock held, thread_exit() the thread hooks with the process's spin
    /// lock held.
    fn critical_hook(&self, call: &HookCall) {
        self.st().critnest += 1;
        self.hook(call);
        self.st().critnest -= 1;
    }

    /// Runs `f` as a non-maskable interrupt on `cpu` while `tid` runs
    /// there (the x86 PMC interrupt).
    pub fn nmi<R>(&self, cpu: u32, tid: u32, f: impl FnOnce() -> R) -> R {
        self.with_ctx_on(cpu, tid, || {
            let saved = std::mem::replace(&mut self.st().in_nmi, true);
            let r = f();
            self.st().in_nmi = saved;
            r
        })
    }

    /// Takes the running thread off `cpu` (PMC_FN_CSW_OUT when its process
    /// uses PMCs).
    pub fn switch_out(&self, cpu: u32) {
        self.switch_out_hooks(cpu, true);
    }

    /// Takes the running thread off `cpu`; `hwt` says whether the hwt
    /// hook hears of it (sched_throw() of an exiting thread calls none).
    pub(crate) fn switch_out_hooks(&self, cpu: u32, hwt: bool) {
        let Some(tid) = self.st().cpus[cpu as usize].running else {
            return;
        };
        self.advance_ns(1000);
        if self.thread_uses_pmcs(tid) {
            self.with_ctx_on(cpu, tid, || self.critical_hook(&HookCall::CswOut));
        }
        if hwt {
            self.hwt_switch_hook(cpu, tid, &devices::HwtHookCall::SwitchOut);
        }
        let mut st = self.st();
        st.cpus[cpu as usize].running = None;
        if let Some(t) = st.threads.get_mut(&tid) {
            t.cpu = None;
        }
    }

    /// One clock tick on `cpu`: the TSC advances, the running thread moves
    /// on in its activity, CLOCK.HARD fires, hardclock processes pending
    /// PMC samples, and a thread in user mode takes its pending AST.
    pub fn tick(&self, cpu: u32) {
        let (ran, ev) = {
            let mut st = self.st();
            Self::advance_clock(&mut st);
            let ran = Self::step_running(&mut st, cpu, false);
            (ran, Self::clock_hard(&st))
        };
        let mut ran = ran;
        self.take_pmis(cpu, &mut ran);
        self.clock_interrupt(cpu, ran.as_ref().map(|r| r.0), ev);
        self.after_ticks(ran.into_iter().collect());
        self.settle();
    }

    /// Makes the process of `tid` exit if its program ended in this tick.
    fn end_if_finished(&self, tid: u32) {
        let ended = {
            let mut st = self.st();
            let Some(t) = st.threads.get(&tid) else {
                return;
            };
            let pid = t.pid;
            let status = t.activity.as_ref().and_then(|a| a.ended());
            match (status, st.procs.get_mut(&pid)) {
                (Some(status), Some(p)) if p.info.flags & P_WEXIT == 0 => {
                    p.info.exit_status = Some(status);
                    Some(pid)
                }
                _ => None,
            }
        };
        if let Some(pid) = ended {
            self.exit(pid);
        }
    }

    /// One clock tick on every online CPU at once: time advances by one
    /// tick, and on each CPU the running thread moves on in its activity
    /// and takes the clock interrupt, as [`Machine::tick`] does for one.
    pub fn tick_all(&self) {
        let (running, ev) = {
            let mut st = self.st();
            Self::advance_clock(&mut st);
            let cpus: Vec<u32> = (0..st.cpus.len() as u32)
                .filter(|&c| st.cpus[c as usize].state == CpuState::Online)
                .collect();
            let running: Vec<(u32, Option<TickDone>)> = cpus
                .into_iter()
                .map(|c| (c, Self::step_running(&mut st, c, false)))
                .collect();
            (running, Self::clock_hard(&st))
        };
        let mut running = running;
        for (cpu, ran) in running.iter_mut() {
            self.take_pmis(*cpu, ran);
        }
        for (cpu, ran) in &running {
            self.clock_interrupt(*cpu, ran.as_ref().map(|r| r.0), ev);
        }
        self.after_ticks(running.into_iter().filter_map(|(_, ran)| ran).collect());
        self.settle();
    }

    fn advance_clock(st: &mut State) {
        let step = st.cfg.tsc_freq / st.cfg.hz;
        // Invariant TSCs run in step on every CPU.
        for c in st.cpus.iter_mut() {
            c.tsc += step;
        }
        st.time_ns += 1_000_000_000 / st.cfg.hz;
    }

    /// Moves the thread running on `cpu` on in its activity for a tick
    /// (or for the rest of one a PMI stopped: `resume`; an activity stops
    /// its tick early while a PMI waits on the CPU's PMU); returns it with
    /// the requests it left.
    fn step_running(st: &mut State, cpu: u32, resume: bool) -> Option<TickDone> {
        let running = st.cpus[cpu as usize].running?;
        let State {
            threads,
            vfs,
            next_tid,
            cfg,
            pmus,
            pts,
            user_rdpmc,
            ..
        } = st;
        let mut requests = Vec::new();
        if let Some(t) = threads.get_mut(&running) {
            if let Some(a) = t.activity.as_mut() {
                let mut ctx = TickContext {
                    cpu,
                    insns_per_tick: cfg.insns_per_tick,
                    files: Some(vfs),
                    next_tid: Some(next_tid),
                    requests: Vec::new(),
                    pmus: pmus.clone(),
                    pts: pts.clone(),
                    user_rdpmc: user_rdpmc.get(cpu as usize).copied().unwrap_or(false),
                    resume,
                };
                t.location = a.tick_on(&mut ctx);
                requests = ctx.requests;
            }
        }
        Some((running, requests))
    }

    /// Takes the PMIs of the tick that ran on `cpu`: each is an NMI at
    /// the thread's location, after which the tick goes on where it
    /// stopped, until its budget is spent. The requests of every part of
    /// the tick are added to `done`.
    fn take_pmis(&self, cpu: u32, done: &mut Option<TickDone>) {
        loop {
            let Some((tid, _)) = done.as_ref() else {
                return;
            };
            let tid = *tid;
            let pmus = self.st().pmus.clone();
            let Some(pmus) = pmus else {
                return;
            };
            if !pmus.take_pmi(cpu) {
                return;
            }
            self.pmc_nmi(cpu, tid);
            self.after_interrupt(cpu, false);
            let more = {
                let mut st = self.st();
                if st.cpus[cpu as usize].running != Some(tid) {
                    return;
                }
                Self::step_running(&mut st, cpu, true)
            };
            let Some((_, requests)) = more else {
                return;
            };
            if let Some((_, all)) = done.as_mut() {
                all.extend(requests);
            }
        }
    }

    /// The machine's x86 PMUs, if its CPU model has them.
    pub fn pmus(&self) -> Option<Arc<crate::x86::PmuSet>> {
        self.st().pmus.clone()
    }

    /// The machine's Intel PT units, if its CPU model has them.
    pub fn pts(&self) -> Option<Arc<crate::x86::PtSet>> {
        self.st().pts.clone()
    }

    /// The machine's physical memory.
    pub fn physmem(&self) -> Arc<physmem::PhysMem> {
        self.st().physmem.clone()
    }

    /// The CR3 of `pid`'s address space (distinct per address space: an
    /// exec makes a new one).
    pub fn cr3_of(&self, pid: u32) -> u64 {
        self.st().cr3_of(pid)
    }

    /// The microseconds the kernel has busy-waited with DELAY(9).
    pub fn delayed_us(&self) -> u64 {
        self.st().delayed_us
    }

    /// `rdmsr` on `cpu`: the PT units' MSRs, else the PMU's.
    pub fn rdmsr(&self, cpu: u32, msr: u32) -> Result<u64, crate::x86::GpFault> {
        let (pmus, pts) = {
            let st = self.st();
            (st.pmus.clone(), st.pts.clone())
        };
        match (pts, pmus) {
            (Some(pts), _) if crate::x86::PtSet::is_pt_msr(msr) => pts.rdmsr(cpu, msr),
            (_, Some(pmus)) => pmus.rdmsr(cpu, msr),
            _ => Err(crate::x86::GpFault {
                msr,
                value: None,
                why: "this CPU model has no such MSR",
            }),
        }
    }

    /// `wrmsr` on `cpu`, routed as [`Machine::rdmsr`].
    pub fn wrmsr(&self, cpu: u32, msr: u32, value: u64) -> Result<(), crate::x86::GpFault> {
        let (pmus, pts) = {
            let st = self.st();
            (st.pmus.clone(), st.pts.clone())
        };
        match (pts, pmus) {
            (Some(pts), _) if crate::x86::PtSet::is_pt_msr(msr) => pts.wrmsr(cpu, msr, value),
            (_, Some(pmus)) => pmus.wrmsr(cpu, msr, value),
            _ => Err(crate::x86::GpFault {
                msr,
                value: Some(value),
                why: "this CPU model has no such MSR",
            }),
        }
    }

    /// Delivers a performance-counter NMI to `cpu` now, for the thread
    /// running there (benchmarks and tests that set overflow bits
    /// themselves), then returns from it as [`Machine::tick`] does.
    pub fn pmc_interrupt(&self, cpu: u32) {
        let running = self.st().cpus[cpu as usize].running;
        let tid = running.unwrap_or_else(|| self.idle_tid());
        self.pmc_nmi(cpu, tid);
        self.after_interrupt(cpu, false);
    }

    /// The PMC interrupt (an NMI) on `cpu`, which `tid` was running:
    /// `pmc_intr` is called; an NMI nothing claims panics the machine,
    /// as FreeBSD's default `machdep.panic_on_nmi` does.
    fn pmc_nmi(&self, cpu: u32, tid: u32) {
        let handler = self.0.handlers().pmc_intr.clone();
        let others: Vec<PmcIntrFn> = self
            .0
            .handlers()
            .nmi_handlers
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        // nmi_handle_intr(): hwpmc's pmc_intr first, then every registered
        // handler; claimed when any claims it.
        let mut claimed = match handler {
            Some(h) => self.nmi(cpu, tid, || h()),
            None => false,
        };
        for h in others {
            claimed |= self.nmi(cpu, tid, || h());
        }
        if !claimed {
            self.st().console.push("NMI ISA 0, EISA 0".into());
            panic!(
                "CPU {cpu}: a performance-counter NMI that no handler claimed \
                 (FreeBSD panics: machdep.panic_on_nmi)"
            );
        }
    }

    /// Does what the ticks' system calls asked (in CPU order), then makes
    /// the processes whose programs ended exit.
    fn after_ticks(&self, ran: Vec<TickDone>) {
        for (tid, requests) in ran {
            for r in requests {
                self.serve_request(tid, r);
            }
            self.end_if_finished(tid);
        }
    }

    fn serve_request(&self, tid: u32, r: KernelRequest) {
        let Some(pid) = self.st().thread_pid(tid) else {
            return;
        };
        match r {
            KernelRequest::NewThread { tid: new, activity } => {
                self.thread_create_reserved(pid, new, tid);
                self.set_activity(new, activity);
            }
            KernelRequest::ThreadExit => {
                let last = self.st().procs[&pid].info.threads.len() == 1;
                if last {
                    if let Some(p) = self.st().procs.get_mut(&pid) {
                        p.info.exit_status = Some(0);
                    }
                    self.exit(pid);
                } else {
                    self.thread_exit(tid);
                }
            }
            KernelRequest::Mmap { path, addr, len } => self.mmap_by(tid, pid, &path, addr, len),
            KernelRequest::Munmap { addr, len } => self.munmap_by(tid, pid, addr, len),
            KernelRequest::Output { fd, bytes } => {
                if let Some(p) = self.st().procs.get_mut(&pid) {
                    p.output[usize::from(fd == 2)].extend_from_slice(&bytes);
                }
            }
            KernelRequest::ModuleSyscall { number, args } => {
                let result = self.syscall(tid, number, &args);
                let mut st = self.st();
                if let Some(a) = st.threads.get_mut(&tid).and_then(|t| t.activity.as_mut()) {
                    a.module_syscall_done(result);
                }
            }
        }
    }

    /// The CLOCK.HARD soft event: its code and how many PMCs use it.
    fn clock_hard(st: &State) -> Option<(u32, i32)> {
        st.soft_events
            .iter()
            .find(|e| e.name == "CLOCK.HARD")
            .map(|e| (e.code, e.running))
    }

    /// The clock interrupt on `cpu`: CLOCK.HARD for the running thread,
    /// then hardclock's sample processing and the AST on return.
    fn clock_interrupt(&self, cpu: u32, running: Option<u32>, ev: Option<(u32, i32)>) {
        if let (Some(tid), Some((code, n))) = (running, ev) {
            if n > 0 {
                self.interrupt(cpu, tid, &HookCall::SoftSampling { ev: code, cpu });
            }
        }
        self.after_interrupt(cpu, true);
    }

    /// The end of an interrupt on `cpu`: hardclock (`clock`) calls
    /// PMC_FN_DO_SAMPLES when samples wait, then the return to a user-mode
    /// thread runs its AST.
    fn after_interrupt(&self, cpu: u32, clock: bool) {
        let (sampled, running) = {
            let mut st = self.st();
            let sampled = clock && std::mem::replace(&mut st.sampled[cpu as usize], false);
            (sampled, st.cpus[cpu as usize].running)
        };
        if sampled {
            let tid = running.unwrap_or_else(|| self.idle_tid());
            self.interrupt(cpu, tid, &HookCall::DoSamples);
        }
        if let Some(tid) = running {
            let ast = {
                let mut st = self.st();
                let t = st.threads.get_mut(&tid);
                match t {
                    Some(t) if t.ast && t.location.user_mode => {
                        t.ast = false;
                        true
                    }
                    _ => false,
                }
            };
            if ast {
                self.with_ctx_on(cpu, tid, || self.hook(&HookCall::UserRet));
                // What the AST woke (a notification's delivering process)
                // runs now, as on an idle CPU, not at the end of the tick.
                if !clock {
                    self.settle();
                }
            }
        }
    }

    /// A thread of init standing in for the idle thread.
    fn idle_tid(&self) -> u32 {
        self.0.st().procs[&1].info.threads[0]
    }

    /// Fires the software event `name` on `cpu` for its running thread
    /// (e.g. a page fault).
    pub fn soft_event(&self, cpu: u32, name: &str) {
        let (running, ev) = {
            let st = self.0.st();
            let ev = st
                .soft_events
                .iter()
                .find(|e| e.name == name)
                .map(|e| (e.code, e.running));
            (st.cpus[cpu as usize].running, ev)
        };
        let (code, n) = ev.unwrap_or_else(|| panic!("no soft event {name}"));
        if let (Some(tid), true) = (running, n > 0) {
            self.interrupt(cpu, tid, &HookCall::SoftSampling { ev: code, cpu });
        }
        self.after_interrupt(cpu, false);
        self.settle();
    }

    fn interrupt(&self, cpu: u32, tid: u32, call: &HookCall) {
        self.with_ctx_on(cpu, tid, || {
            self.st().in_intr = true;
            self.hook(call);
            self.st().in_intr = false;
        });
    }

    /// Runs `tid` on `cpu` for `ticks` clock ticks, switching it in and out.
    pub fn run(&self, tid: u32, cpu: u32, ticks: u32) {
        self.switch_in(cpu, tid);
        for _ in 0..ticks {
            self.tick(cpu);
        }
        self.switch_out(cpu);
    }

    /// Changes a CPU's state (hot-unplug, halt).
    pub fn set_cpu_state(&self, cpu: u32, state: CpuState) {
        self.st().cpus[cpu as usize].state = state;
    }

    /// A system call by thread `tid` through syscall number `num`. A thread
    /// makes system calls while it runs: one that is not on a CPU is
    /// switched in on the first idle online CPU for the call, and out
    /// again after it.
    pub fn syscall(&self, tid: u32, num: u32, args: &[u64]) -> Result<i64, i32> {
        let handler = self.0.handlers().syscalls.get(&num).cloned();
        let Some(handler) = handler else {
            return Err(78); // ENOSYS
        };
        // syscallenter: a new call has no extended error yet.
        self.exterr_clear(tid);
        let r = self.kernel_call(tid, "system call", || handler(args));
        // syscallret: a failure tells the registered uexterror.
        if r.is_err() {
            self.exterr_copyout(tid);
        }
        r
    }

    /// Runs `f` as kernel code on behalf of thread `tid` (a system call
    /// that is not hwpmc's, such as kldload(2) or kldunload(2)).
    pub fn in_thread<R>(&self, tid: u32, f: impl FnOnce() -> R) -> R {
        self.kernel_call(tid, "kernel call", f)
    }

    /// Runs `f` in the kernel for thread `tid`, on its CPU or, for a
    /// thread not on one, switched in on the first idle online CPU for the
    /// call and out again after it; then lets woken kernel processes run.
    fn kernel_call<R>(&self, tid: u32, what: &str, f: impl FnOnce() -> R) -> R {
        let on_cpu = self.0.st().threads.get(&tid).and_then(|t| t.cpu).is_some();
        let placed = if on_cpu {
            None
        } else {
            let cpu = {
                let st = self.0.st();
                st.cpus
                    .iter()
                    .position(|c| c.state == CpuState::Online && c.running.is_none())
            };
            let cpu = cpu.unwrap_or_else(|| panic!("no idle online CPU for the {what}")) as u32;
            self.switch_in(cpu, tid);
            Some(cpu)
        };
        let r = self.with_ctx(tid, f);
        self.st().witness.check_return();
        if let Some(cpu) = placed {
            if self.running_on(cpu) == Some(tid) {
                self.switch_out(cpu);
            }
        }
        self.settle();
        r
    }

    /// Lets the woken kernel processes run, as the scheduler would once the
    /// current activity sleeps or returns to user mode.
    pub fn settle(&self) {
        if std::mem::replace(&mut self.0.handlers().settling, true) {
            return;
        }
        loop {
            let next = {
                let mut st = self.st();
                // A kernel process runs one pass at a time (one that is
                // running in another piece of a race stays pending).
                let id = st
                    .kprocs
                    .iter()
                    .find(|(_, k)| k.pending && !k.running)
                    .map(|(id, _)| *id);
                id.map(|id| {
                    let k = st.kprocs.get_mut(&id).unwrap();
                    k.pending = false;
                    k.running = true;
                    (id, k.tid)
                })
            };
            let Some((id, tid)) = next else {
                if self.0.st().exiting_kprocs.is_empty() {
                    break;
                }
                self.reap_kprocs();
                continue;
            };
            let body = self.0.handlers().kprocs.get(&id).cloned();
            if let Some(body) = body {
                self.with_ctx(tid, || body());
                self.st().witness.check_return();
            }
            if let Some(k) = self.st().kprocs.get_mut(&id) {
                k.running = false;
            }
        }
        self.0.handlers().settling = false;
    }

    pub(crate) fn kproc_create(&self, name: &str, body: KprocFn) -> u64 {
        let pid = {
            let mut st = self.st();
            st.alloc_pid()
        };
        let tid = self.insert_proc(pid, 0, Cred::root(), name, "", true);
        if let Some(p) = self.st().procs.get_mut(&pid) {
            p.info.flags |= P_SYSTEM | P_KPROC;
        }
        // kproc_create1() tells the system samplers of the new process and
        // its thread, in the creator's context.
        if self.system_sampling_active() {
            let comm = name.chars().take(MAXCOMLEN).collect::<String>();
            let flags = self.0.st().procs[&pid].info.flags;
            self.hook(&HookCall::ProcCreateLog {
                pid,
                flags,
                comm: comm.clone(),
            });
            self.hook(&HookCall::ThrCreateLog {
                tid,
                pid,
                flags,
                name: comm,
            });
        }
        let mut st = self.st();
        let id = st.next_kproc;
        st.next_kproc += 1;
        st.kprocs.insert(
            id,
            Kproc {
                pid,
                tid,
                pending: false,
                stopping: false,
                running: false,
            },
        );
        drop(st);
        self.0.handlers().kprocs.insert(id, body);
        id
    }

    /// Runs a kernel process's body now, in its own context, then removes
    /// it (`kproc_exit` after its last pass).
    pub(crate) fn kproc_stop(&self, id: u64) {
        // The process finishes the pass it is in (in another piece of a
        // race) before its last one.
        while self.0.st().kprocs.get(&id).is_some_and(|k| k.running) {
            crate::sched::wait_for("a kernel process's pass");
        }
        let tid = self.0.st().kprocs.get(&id).map(|k| k.tid);
        let body = self.0.handlers().kprocs.remove(&id);
        if let (Some(tid), Some(body)) = (tid, body) {
            if let Some(k) = self.st().kprocs.get_mut(&id) {
                k.stopping = true;
            }
            self.with_ctx(tid, || body());
            let mut st = self.st();
            if let Some(k) = st.kprocs.remove(&id) {
                // kproc_exit() goes through exit1() once its waiter is
                // woken: the exit runs later, at the next scheduling point.
                st.exiting_kprocs.push((k.pid, k.tid));
            }
        }
    }

    /// exit1() of kernel processes that called kproc_exit(): the
    /// process_exit handlers, then thread_exit()'s hooks; then they are
    /// reaped.
    fn reap_kprocs(&self) {
        loop {
            let next = self.st().exiting_kprocs.pop();
            let Some((pid, tid)) = next else { break };
            if let Some(p) = self.st().procs.get_mut(&pid) {
                p.info.flags |= P_WEXIT;
            }
            self.with_ctx(tid, || self.event(&Event::ProcessExit { pid }));
            self.st().witness.check_return();
            self.thread_exit_hooks(tid);
            let mut st = self.st();
            st.threads.remove(&tid);
            st.procs.remove(&pid);
        }
    }

    /// Wakes every kernel process and lets them run (the log writers'
    /// periodic pass).
    pub fn wake_kprocs(&self) {
        for k in self.st().kprocs.values_mut() {
            k.pending = true;
        }
        self.settle();
    }

    /// The state of `cpu`.
    pub fn cpu_state(&self, cpu: u32) -> CpuState {
        self.0.st().cpu_state(cpu)
    }

    /// The thread running on `cpu`, if any.
    pub fn running_on(&self, cpu: u32) -> Option<u32> {
        self.0.st().cpus.get(cpu as usize).and_then(|c| c.running)
    }

    pub(crate) fn may_sleep_here(&self) {
        let mut st = self.st();
        let ctx = st.context();
        st.witness.check_sleep(ctx);
    }

    fn with_ctx<R>(&self, tid: u32, f: impl FnOnce() -> R) -> R {
        let cpu = {
            let st = self.0.st();
            let running = st.threads.get(&tid).and_then(|t| t.cpu);
            running.unwrap_or_else(|| {
                st.cpus
                    .iter()
                    .position(|c| c.state == CpuState::Online)
                    .expect("no online CPU") as u32
            })
        };
        self.with_ctx_on(cpu, tid, f)
    }

    fn with_ctx_on<R>(&self, cpu: u32, tid: u32, f: impl FnOnce() -> R) -> R {
        let saved = self.st().ctx.replace((cpu, tid));
        let _enter = self.enter();
        let r = f();
        self.st().ctx = saved;
        r
    }

    fn hook(&self, call: &HookCall) {
        let hook = self.0.handlers().hook.clone();
        if let Some(h) = hook {
            if let Some(trace) = self.st().hook_trace.as_mut() {
                trace.push(call.clone());
            }
            h(call);
        }
    }

    /// Starts keeping the hook calls made from now on (for tests of when
    /// the kernel calls them).
    pub fn trace_hooks(&self) {
        self.st().hook_trace = Some(Vec::new());
    }

    /// The hook calls made since [`Machine::trace_hooks`] or the last
    /// call of this, in order.
    pub fn traced_hooks(&self) -> Vec<HookCall> {
        self.st()
            .hook_trace
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn event(&self, ev: &Event) {
        let handlers: Vec<EventFn> = self
            .0
            .handlers()
            .events
            .iter()
            .map(|e| e.1.clone())
            .collect();
        for h in handlers {
            h(ev);
        }
    }
}

impl State {
    /// The pid `want` when it is free, else the next free one.
    pub(crate) fn pid_for(&mut self, want: Option<u32>) -> u32 {
        match want {
            Some(pid) if pid > 1 && !self.procs.contains_key(&pid) => pid,
            _ => self.alloc_pid(),
        }
    }

    /// Drops a reference to file `id`; a host descriptor is closed with
    /// the last one.
    pub(crate) fn unref_file(&mut self, id: u64) {
        if let Some(f) = self.files.get_mut(&id) {
            f.refs = f.refs.saturating_sub(1);
            if let (0, FileKind::Host { fd }) = (f.refs, f.kind) {
                if fd >= 0 {
                    // SAFETY: the machine owns the host descriptor of a
                    // Host file and closes it once, with its last
                    // reference (fd is -1 afterwards).
                    unsafe { libc::close(fd) };
                    f.kind = FileKind::Host { fd: -1 };
                }
            }
        }
    }

    /// A free pid: the next one, or past `pid_max` the lowest free one
    /// from the first (pids of live processes and zombies are taken).
    pub(crate) fn alloc_pid(&mut self) -> u32 {
        let first = self.cfg.first_pid.max(2);
        let max = self.cfg.pid_max.max(first);
        if self.next_pid > max || self.next_pid < first {
            self.next_pid = first;
        }
        let start = self.next_pid;
        let mut pid = start;
        while self.procs.contains_key(&pid) {
            pid = if pid >= max { first } else { pid + 1 };
            assert!(pid != start, "no free pid below pid_max {max}");
        }
        self.next_pid = pid + 1;
        pid
    }

    /// Takes the execution state of the kernel code running now (for a
    /// hand-over between the pieces of a race).
    pub(crate) fn take_task_ctx(&mut self) -> crate::sched::TaskCtx {
        crate::sched::TaskCtx {
            ctx: self.ctx.take(),
            in_intr: std::mem::take(&mut self.in_intr),
            in_nmi: std::mem::take(&mut self.in_nmi),
            critnest: std::mem::take(&mut self.critnest),
            held: self.witness.take_held(),
        }
    }

    /// Installs the execution state of the kernel code that runs next.
    pub(crate) fn put_task_ctx(&mut self, t: crate::sched::TaskCtx) {
        self.ctx = t.ctx;
        self.in_intr = t.in_intr;
        self.in_nmi = t.in_nmi;
        self.critnest = t.critnest;
        self.witness.put_held(t.held);
    }

    /// What the witness needs to know of where kernel code runs now.
    pub(crate) fn context(&self) -> crate::witness::Context {
        crate::witness::Context {
            intr: self.in_intr,
            nmi: self.in_nmi,
            critnest: self.critnest,
        }
    }

    pub(crate) fn cur(&self) -> (u32, u32) {
        self.ctx.expect("kernel code ran with no current thread")
    }

    pub(crate) fn cur_pid(&self) -> u32 {
        let (_, tid) = self.cur();
        self.threads
            .get(&tid)
            .map(|t| t.pid)
            .expect("current thread is gone")
    }

    pub(crate) fn proc_info(&self, pid: u32) -> Option<&ProcInfo> {
        self.procs.get(&pid).map(|p| &p.info)
    }

    pub(crate) fn proc_info_mut(&mut self, pid: u32) -> Option<&mut ProcInfo> {
        self.procs.get_mut(&pid).map(|p| &mut p.info)
    }

    pub(crate) fn proc_fd(&self, pid: u32, fd: i32) -> Option<u64> {
        self.procs.get(&pid).and_then(|p| p.fds.get(&fd).copied())
    }

    pub(crate) fn maps(&self, pid: u32) -> Vec<Mapping> {
        self.procs
            .get(&pid)
            .map(|p| p.maps.clone())
            .unwrap_or_default()
    }

    /// A new thread of `pid` named `name`, not yet on a CPU; its id.
    fn new_thread(&mut self, pid: u32, name: &str) -> u32 {
        let tid = self.next_tid;
        self.next_tid += 1;
        self.insert_thread(pid, name, tid);
        tid
    }

    /// A thread with an id reserved before.
    pub(crate) fn insert_thread(&mut self, pid: u32, name: &str, tid: u32) {
        self.threads.insert(
            tid,
            Thread {
                pid,
                name: name.into(),
                cpu: None,
                location: Location::default(),
                activity: None,
                ast: false,
                exterr_ptr: None,
                kexterr: None,
            },
        );
    }

    pub(crate) fn live_pids(&self) -> Vec<u32> {
        self.procs
            .values()
            .filter(|p| !p.info.zombie)
            .map(|p| p.info.pid)
            .collect()
    }

    pub(crate) fn children(&self, pid: u32) -> Vec<u32> {
        self.procs
            .values()
            .filter(|p| p.info.ppid == pid && !p.info.zombie)
            .map(|p| p.info.pid)
            .collect()
    }

    pub(crate) fn cpu_state(&self, cpu: u32) -> CpuState {
        self.cpus
            .get(cpu as usize)
            .map_or(CpuState::Absent, |c| c.state)
    }

    pub(crate) fn ncpus(&self) -> u32 {
        self.cpus.len() as u32
    }

    pub(crate) fn tsc(&self, cpu: u32) -> u64 {
        self.cpus[cpu as usize].tsc
    }

    pub(crate) fn location(&self, tid: u32) -> Location {
        self.threads
            .get(&tid)
            .map(|t| t.location.clone())
            .unwrap_or_default()
    }

    /// copyin from the address space of a thread that runs real code
    /// (None for other threads: their memory is the process's `umem`).
    pub(crate) fn thread_copyin(&self, tid: u32, addr: u64, buf: &mut [u8]) -> Option<bool> {
        self.threads
            .get(&tid)
            .and_then(|t| t.activity.as_ref())
            .and_then(|a| a.copyin(addr, buf))
    }

    pub(crate) fn thread_copyout(&mut self, tid: u32, addr: u64, data: &[u8]) -> Option<bool> {
        self.threads
            .get_mut(&tid)
            .and_then(|t| t.activity.as_mut())
            .and_then(|a| a.copyout(addr, data))
    }

    pub(crate) fn request_ast(&mut self, tid: u32) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.ast = true;
        }
    }

    /// The CR3 of `pid`'s address space, made on first use.
    pub(crate) fn cr3_of(&mut self, pid: u32) -> u64 {
        if let Some(&c) = self.cr3s.get(&pid) {
            return c;
        }
        let c = self.next_cr3;
        self.next_cr3 += 0x1000;
        self.cr3s.insert(pid, c);
        c
    }

    pub(crate) fn thread_pid(&self, tid: u32) -> Option<u32> {
        self.threads.get(&tid).map(|t| t.pid)
    }
}

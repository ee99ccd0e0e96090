//! The CPUs' execution engine: a [`Cpu`] runs real x86-64 or AArch64
//! machine code in an address space of its own, stops at system calls and
//! faults, and reports every retired instruction to its subscribers (the
//! event model, [`events`]).
//!
//! Design notes:
//! - The emulator (Unicorn 2, `cpu/unicorn.rs`) is private to this module:
//!   nothing above names it, and another engine could replace it behind
//!   the same interface. Its library is loaded when the first CPU is made,
//!   so that programs linking ksim (libpmc's simulator) need it only if
//!   they make CPUs.
//! - With no subscriber the emulator runs without any per-instruction
//!   hook; only the system-call instruction, interrupts and invalid
//!   accesses call back, and those stop the run. A first subscriber
//!   installs a code hook (one call per instruction, before it runs) and
//!   memory hooks (one call per access). An instruction is reported when
//!   the next one starts or the run stops, because only then is it known
//!   where control went: that is how taken branches are told from
//!   branches that fell through.
//! - Runs are deterministic: the engine has no timer and the address
//!   space holds only what the caller put there, so the same program,
//!   arguments and system-call results give the same instruction stream.

mod aarch64;
pub mod cost;
pub mod events;
mod unicorn;
mod vmspace;
mod x86_64;

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use vmspace::{Region, VmSpace};

use events::{
    AccessKind, Branch, BranchKind, KernelEntry, MemAccess, Mode, Retired, Subscriber, SubscriberId,
};
use unicorn as uc;

/// The page size of the address spaces.
pub const PAGE_SIZE: u64 = 0x1000;

/// The instruction set a CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// x86-64 in 64-bit mode (FreeBSD's amd64).
    X86_64,
    /// AArch64 (FreeBSD's arm64).
    Aarch64,
}

impl Arch {
    /// FreeBSD's name of the architecture.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }
}

/// Access rights of mapped memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Prot(u32);

impl Prot {
    /// No access.
    pub const NONE: Prot = Prot(0);
    /// Readable.
    pub const READ: Prot = Prot(uc::UC_PROT_READ);
    /// Writable.
    pub const WRITE: Prot = Prot(uc::UC_PROT_WRITE);
    /// Executable.
    pub const EXEC: Prot = Prot(uc::UC_PROT_EXEC);

    /// Both sets of rights.
    pub const fn union(self, other: Prot) -> Prot {
        Prot(self.0 | other.0)
    }

    /// Whether every right of `other` is in `self`.
    pub const fn contains(self, other: Prot) -> bool {
        self.0 & other.0 == other.0
    }
}

/// What a memory access was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reading data.
    Read,
    /// Writing data.
    Write,
    /// Fetching an instruction.
    Execute,
}

/// Why an instruction could not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// An access to an address with nothing mapped.
    Unmapped {
        /// What the access did.
        access: Access,
        /// The address.
        addr: u64,
    },
    /// An access that the page's rights forbid.
    Protection {
        /// What the access did.
        access: Access,
        /// The address.
        addr: u64,
    },
    /// An undefined or unimplemented instruction.
    IllegalInstruction,
    /// Another processor exception: the x86 vector (0 for a divide error,
    /// 3 for `int3`, 13 for a general protection fault, ...) or the
    /// AArch64 exception number.
    Exception {
        /// The vector.
        vector: u32,
    },
}

/// Why [`Cpu::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stop {
    /// The program made a system call; the PC is past the instruction and
    /// [`Cpu::syscall_request`] reads it.
    Syscall,
    /// The instruction at `pc` faulted and did not retire.
    Fault {
        /// Address of the faulting instruction.
        pc: u64,
        /// What went wrong.
        fault: Fault,
    },
}

/// What a budgeted run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Run {
    /// Instructions that retired (the system call instruction included;
    /// a faulting one not).
    pub retired: u64,
    /// Instructions of kernel work of the system calls served without
    /// stopping ([`FastSyscalls`]), which the budget paid for too.
    pub kernel_work: u64,
    /// Why the run stopped before its budget was spent, if it did.
    pub stop: Option<Stop>,
    /// A subscriber stopped the run after the last instruction that
    /// retired, to take an interrupt there ([`Subscriber::wants_stop`]).
    pub interrupted: bool,
}

/// An error of the emulator or of a request to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuError {
    /// The emulator refused a call.
    Emulator {
        /// What was asked of it.
        call: &'static str,
        /// Its error text.
        text: String,
    },
    /// A mapping request whose address or length is not page-aligned.
    Unaligned {
        /// The address asked for.
        addr: u64,
        /// The length asked for.
        len: u64,
    },
    /// A read or write of memory that is not mapped.
    BadAddress {
        /// The first address.
        addr: u64,
        /// The length.
        len: u64,
    },
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuError::Emulator { call, text } => write!(f, "CPU emulator: {call}: {text}"),
            CpuError::Unaligned { addr, len } => {
                write!(f, "mapping {addr:#x}+{len:#x} is not page-aligned")
            }
            CpuError::BadAddress { addr, len } => {
                write!(f, "memory {addr:#x}+{len:#x} is not mapped")
            }
        }
    }
}

impl std::error::Error for CpuError {}

fn check_aligned(addr: u64, len: u64) -> Result<(), CpuError> {
    if addr % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 || len == 0 {
        return Err(CpuError::Unaligned { addr, len });
    }
    usize::try_from(len).map_err(|_| CpuError::Unaligned { addr, len })?;
    Ok(())
}

fn check(api: &uc::Api, call: &'static str, code: uc::UcErr) -> Result<(), CpuError> {
    if code == uc::UC_ERR_OK {
        Ok(())
    } else {
        Err(CpuError::Emulator {
            call,
            text: api.strerror(code),
        })
    }
}

/// A system call as the program made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyscallRequest {
    /// The system call number.
    pub number: u64,
    /// The arguments, in order.
    pub args: [u64; 6],
}

/// The instruction whose hook ran last: it retires when the next starts.
#[derive(Debug, Clone, Copy)]
struct Pending {
    pc: u64,
    len: u32,
    branch: Option<BranchKind>,
}

/// Direct-mapped cache of branch classifications by PC, so that an
/// instruction's bytes are read and decoded once, not at every execution.
struct DecodeCache {
    tags: Box<[u64]>,
    kinds: Box<[Option<BranchKind>]>,
}

const DECODE_CACHE_SLOTS: usize = 1 << 14;

impl DecodeCache {
    fn new() -> Self {
        DecodeCache {
            // No instruction starts at u64::MAX: an empty slot.
            tags: vec![u64::MAX; DECODE_CACHE_SLOTS].into_boxed_slice(),
            kinds: vec![None; DECODE_CACHE_SLOTS].into_boxed_slice(),
        }
    }

    fn clear(&mut self) {
        self.tags.fill(u64::MAX);
    }

    fn slot(pc: u64) -> usize {
        ((pc ^ (pc >> 14)) as usize) & (DECODE_CACHE_SLOTS - 1)
    }
}

/// System calls a CPU serves inside the emulator's hook, without stopping
/// the run: the short ones whose kernel work fits in what is left of the
/// run's budget. Served so, a call has the same effect and cost as when
/// the run stops for it; only the emulator's stop and restart are saved.
pub trait FastSyscalls: Send {
    /// The kernel work, in instructions, of `req` if it can be served
    /// without stopping; None to stop the run for it.
    fn fast_cost(&self, req: &SyscallRequest) -> Option<u64>;

    /// Serves `req` (one `fast_cost` accepted), with the program's memory
    /// to read its arguments from.
    fn serve(&mut self, req: &SyscallRequest, mem: &UserMemory<'_>) -> Result<[u64; 2], i32>;
}

/// The memory of the program whose system call a [`FastSyscalls`] serves.
pub struct UserMemory<'a> {
    space: &'a Mutex<VmSpace>,
}

impl fmt::Debug for UserMemory<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserMemory").finish_non_exhaustive()
    }
}

impl UserMemory<'_> {
    /// Reads memory as copyin(9) does for the kernel ([`Cpu::read_user`]):
    /// every byte must be mapped readable.
    pub fn copyin(&self, addr: u64, buf: &mut [u8]) -> Result<(), CpuError> {
        let space = self.space.lock().unwrap_or_else(PoisonError::into_inner);
        read_space(&space, addr, buf, Prot::READ)
    }
}

/// Reads `buf.len()` bytes at `addr` of `space`, each mapped with the
/// rights `need`.
fn read_space(space: &VmSpace, addr: u64, buf: &mut [u8], need: Prot) -> Result<(), CpuError> {
    let bad = CpuError::BadAddress {
        addr,
        len: buf.len() as u64,
    };
    let mut at = addr;
    let mut done = 0;
    while done < buf.len() {
        let r = space.region_at(at, need).ok_or_else(|| bad.clone())?;
        let off = (at - r.addr) as usize;
        let n = (r.len as usize - off).min(buf.len() - done);
        // SAFETY: `off + n` is within the region, whose block has
        // `r.offset + r.len` bytes; `buf[done..done + n]` is ours.
        unsafe {
            std::ptr::copy_nonoverlapping(r.block.at(r.offset + off), buf[done..].as_mut_ptr(), n);
        }
        done += n;
        at += n as u64;
    }
    Ok(())
}

/// FreeBSD/amd64's system call argument registers, in order.
const X86_SYSCALL_ARGS: [c_int; 6] = [
    uc::UC_X86_REG_RDI,
    uc::UC_X86_REG_RSI,
    uc::UC_X86_REG_RDX,
    uc::UC_X86_REG_R10,
    uc::UC_X86_REG_R8,
    uc::UC_X86_REG_R9,
];

/// The registers of a system call's result: the two values, the flags,
/// and the carry bit that says it failed.
fn result_registers(arch: Arch) -> (c_int, c_int, c_int, u64) {
    match arch {
        Arch::X86_64 => (
            uc::UC_X86_REG_RAX,
            uc::UC_X86_REG_RDX,
            uc::UC_X86_REG_EFLAGS,
            1, // PSL_C
        ),
        Arch::Aarch64 => (
            uc::UC_ARM64_REG_X0,
            uc::UC_ARM64_REG_X0 + 1,
            uc::UC_ARM64_REG_NZCV,
            1 << 29, // PSR_C
        ),
    }
}

/// Register access to an engine: the [`Cpu`]'s, or the one running a hook.
struct Regs {
    api: &'static uc::Api,
    engine: uc::UcEngine,
    arch: Arch,
}

impl Regs {
    fn get(&self, id: c_int) -> u64 {
        let mut v = 0u64;
        // SAFETY: every register this module names is 64 bits wide (NZCV
        // and EFLAGS are read into the low bits of the u64); reading
        // registers from a hook is allowed.
        let err = unsafe { (self.api.uc_reg_read)(self.engine, id, (&raw mut v).cast()) };
        debug_assert_eq!(err, uc::UC_ERR_OK, "register {id}");
        v
    }

    fn set(&self, id: c_int, v: u64) {
        // SAFETY: as in get; the engine reads as many bytes as the
        // register has, at most 8.
        let err = unsafe { (self.api.uc_reg_write)(self.engine, id, (&raw const v).cast()) };
        debug_assert_eq!(err, uc::UC_ERR_OK, "register {id}");
    }

    /// The registers `ids`, in one call of the engine.
    fn get_many<const N: usize>(&self, mut ids: [c_int; N]) -> [u64; N] {
        let mut vals = [0u64; N];
        let mut ptrs: [*mut c_void; N] = [std::ptr::null_mut(); N];
        for (p, v) in ptrs.iter_mut().zip(vals.iter_mut()) {
            *p = (v as *mut u64).cast();
        }
        // SAFETY: as in get, for each of the N registers, each read into
        // its own u64; the arrays hold N entries.
        let err = unsafe {
            (self.api.uc_reg_read_batch)(
                self.engine,
                ids.as_mut_ptr(),
                ptrs.as_mut_ptr(),
                N as c_int,
            )
        };
        debug_assert_eq!(err, uc::UC_ERR_OK, "registers {ids:?}");
        vals
    }

    /// Sets the registers `ids` to `vals`, in one call of the engine.
    fn set_many<const N: usize>(&self, mut ids: [c_int; N], vals: [u64; N]) {
        let mut ptrs: [*const c_void; N] = [std::ptr::null(); N];
        for (p, v) in ptrs.iter_mut().zip(vals.iter()) {
            *p = (v as *const u64).cast();
        }
        // SAFETY: as in set, for each of the N registers; the arrays hold
        // N entries.
        let err = unsafe {
            (self.api.uc_reg_write_batch)(self.engine, ids.as_mut_ptr(), ptrs.as_ptr(), N as c_int)
        };
        debug_assert_eq!(err, uc::UC_ERR_OK, "registers {ids:?}");
    }

    fn syscall_request(&self) -> SyscallRequest {
        self.syscall_entry().0
    }

    /// The system call the program makes, with its PC and flags, in one
    /// call of the engine.
    fn syscall_entry(&self) -> (SyscallRequest, u64, u64) {
        match self.arch {
            Arch::X86_64 => {
                let [number, a0, a1, a2, a3, a4, a5, pc, flags] = self.get_many([
                    uc::UC_X86_REG_RAX,
                    X86_SYSCALL_ARGS[0],
                    X86_SYSCALL_ARGS[1],
                    X86_SYSCALL_ARGS[2],
                    X86_SYSCALL_ARGS[3],
                    X86_SYSCALL_ARGS[4],
                    X86_SYSCALL_ARGS[5],
                    uc::UC_X86_REG_RIP,
                    uc::UC_X86_REG_EFLAGS,
                ]);
                let args = [a0, a1, a2, a3, a4, a5];
                (SyscallRequest { number, args }, pc, flags)
            }
            Arch::Aarch64 => {
                let x = uc::UC_ARM64_REG_X0;
                let [number, a0, a1, a2, a3, a4, a5, pc, flags] = self.get_many([
                    uc::UC_ARM64_REG_X8,
                    x,
                    x + 1,
                    x + 2,
                    x + 3,
                    x + 4,
                    x + 5,
                    uc::UC_ARM64_REG_PC,
                    uc::UC_ARM64_REG_NZCV,
                ]);
                let args = [a0, a1, a2, a3, a4, a5];
                (SyscallRequest { number, args }, pc, flags)
            }
        }
    }

    /// Sets the result registers; `return_pc` is where the program goes
    /// on (amd64's sysretq takes it from %rcx).
    fn set_syscall_result(&self, result: Result<[u64; 2], i32>, return_pc: u64) {
        let (_, _, flags, _) = result_registers(self.arch);
        self.set_syscall_result_with(result, return_pc, self.get(flags));
    }

    /// [`Regs::set_syscall_result`] with the flags as the call found
    /// them, in one call of the engine.
    fn set_syscall_result_with(&self, result: Result<[u64; 2], i32>, return_pc: u64, flags: u64) {
        let (ret0, ret1, flags_reg, carry) = result_registers(self.arch);
        // On failure the second value register keeps what it held.
        let (v0, v1, f) = match result {
            Ok([v0, v1]) => (v0, Some(v1), flags & !carry),
            Err(errno) => (errno as u64, None, flags | carry),
        };
        match (self.arch, v1) {
            // The kernel returns with sysretq, which takes the return
            // address from %rcx and the flags from %r11: both are
            // clobbered, as a program sees on FreeBSD.
            (Arch::X86_64, Some(v1)) => self.set_many(
                [
                    ret0,
                    ret1,
                    flags_reg,
                    uc::UC_X86_REG_RCX,
                    uc::UC_X86_REG_R11,
                ],
                [v0, v1, f, return_pc, f],
            ),
            (Arch::X86_64, None) => self.set_many(
                [ret0, flags_reg, uc::UC_X86_REG_RCX, uc::UC_X86_REG_R11],
                [v0, f, return_pc, f],
            ),
            (Arch::Aarch64, Some(v1)) => self.set_many([ret0, ret1, flags_reg], [v0, v1, f]),
            (Arch::Aarch64, None) => self.set_many([ret0, flags_reg], [v0, f]),
        }
    }
}

/// What the emulator's callbacks share with the [`Cpu`]. It lives on the
/// heap at a fixed address, passed to every hook as its user data.
struct Hooks {
    api: &'static uc::Api,
    arch: Arch,
    cpu: u32,
    mode: Mode,
    subscribers: Vec<(SubscriberId, Box<dyn Subscriber>)>,
    pending: Option<Pending>,
    accesses: Vec<MemAccess>,
    decode: DecodeCache,
    /// Instructions that started since the CPU was made (each counted
    /// before it runs; one that faults is taken back).
    executed: u64,
    /// Instructions of kernel work of the system calls served in the
    /// hook.
    kernel_work: u64,
    /// System calls served in the hook.
    fast_served: u64,
    fast: Option<Box<dyn FastSyscalls>>,
    /// The address space (the [`Cpu`]'s), for the fast path's copyin.
    space: Arc<Mutex<VmSpace>>,
    /// The fast path is held off ([`Cpu::hold_fast_syscalls`]).
    fast_held: bool,
    /// The run stops before the instruction that would make `executed`
    /// plus `kernel_work` pass this (u64::MAX: no limit).
    limit: u64,
    /// Set by a callback that stopped the run.
    budget_spent: bool,
    /// Set when a subscriber stopped the run ([`Subscriber::wants_stop`]).
    interrupted: bool,
    syscall: bool,
    exception: Option<u32>,
    bad_access: Option<Fault>,
}

impl Hooks {
    /// Counts the instruction about to run, or stops the run before it
    /// when the budget is spent (the engine then does not run it).
    fn count(&mut self, engine: uc::UcEngine) -> bool {
        if self.executed + self.kernel_work >= self.limit {
            self.budget_spent = true;
            // SAFETY: the engine running this hook; stopping from a hook
            // is what uc_emu_stop is for.
            unsafe { (self.api.uc_emu_stop)(engine) };
            return false;
        }
        self.executed += 1;
        true
    }

    /// Serves the system call the engine stopped at in the hook, if the
    /// fast path takes it and its kernel work fits in the budget. The
    /// instruction is `insn_len` bytes before the return address (0: the
    /// PC is past it already). The registers are read in one call of the
    /// engine and written in another.
    fn try_fast(&mut self, engine: uc::UcEngine, insn_len: u64) -> bool {
        if self.fast_held {
            return false;
        }
        let Some(fast) = self.fast.as_mut() else {
            return false;
        };
        let regs = Regs {
            api: self.api,
            engine,
            arch: self.arch,
        };
        let (req, pc, flags) = regs.syscall_entry();
        let Some(cost) = fast.fast_cost(&req) else {
            return false;
        };
        if self.executed + self.kernel_work + cost > self.limit {
            return false;
        }
        // The call retires and enters the kernel before it is served
        // (trace units see the entry, then the return at the next
        // instruction).
        self.retire_pending(pc + insn_len);
        self.enter_kernel(KernelEntry::Syscall);
        let Some(fast) = self.fast.as_mut() else {
            return false;
        };
        let mem = UserMemory { space: &self.space };
        let result = fast.serve(&req, &mem);
        regs.set_syscall_result_with(result, pc + insn_len, flags);
        self.kernel_work += cost;
        self.fast_served += 1;
        true
    }

    /// Reports the pending instruction, now that execution goes on at
    /// `next_pc`.
    fn retire_pending(&mut self, next_pc: u64) {
        if let Some(p) = self.pending.take() {
            let branch = p.branch.map(|kind| Branch {
                kind,
                taken: kind.is_unconditional() || next_pc != p.pc + u64::from(p.len),
            });
            let insn = Retired {
                cpu: self.cpu,
                mode: self.mode,
                pc: p.pc,
                len: p.len,
                next_pc,
                branch,
                accesses: &self.accesses,
            };
            for (_, s) in &mut self.subscribers {
                s.retired(&insn);
            }
        }
        self.accesses.clear();
    }

    /// Tells the subscribers that user mode was left for the kernel.
    fn enter_kernel(&mut self, entry: KernelEntry) {
        for (_, s) in &mut self.subscribers {
            s.kernel_entry(self.cpu, entry);
        }
    }

    /// Forgets the pending instruction: it faulted.
    fn drop_pending(&mut self) {
        self.pending = None;
        self.accesses.clear();
    }

    fn classify(&mut self, engine: uc::UcEngine, pc: u64, len: u32) -> Option<BranchKind> {
        let slot = DecodeCache::slot(pc);
        if self.decode.tags[slot] == pc {
            return self.decode.kinds[slot];
        }
        let mut bytes = [0u8; x86_64::MAX_INSN_LEN];
        let n = (len as usize).clamp(1, bytes.len());
        // SAFETY: `bytes` has room for `n` bytes; the engine is the one
        // running this hook, and reading its memory from a hook is allowed.
        let err = unsafe { (self.api.uc_mem_read)(engine, pc, bytes.as_mut_ptr().cast(), n) };
        if err != uc::UC_ERR_OK {
            // The engine fetched these bytes a moment ago; should that
            // ever fail, the instruction counts as no branch, uncached.
            return None;
        }
        let kind = match self.arch {
            Arch::X86_64 => x86_64::classify(&bytes[..n]),
            Arch::Aarch64 => {
                aarch64::classify(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
            }
        };
        self.decode.tags[slot] = pc;
        self.decode.kinds[slot] = kind;
        kind
    }
}

/// # Safety
/// `data` must be the `Hooks` a live [`Cpu`] registered, and nothing else
/// may be using it while the engine runs its callbacks.
unsafe fn hooks<'a>(data: *mut c_void) -> &'a mut Hooks {
    // SAFETY: as the caller promises.
    unsafe { &mut *data.cast::<Hooks>() }
}

extern "C" fn on_code(engine: uc::UcEngine, pc: u64, len: u32, data: *mut c_void) {
    // SAFETY: registered by Cpu::install_trace_hooks with its Hooks, which
    // the Cpu leaves alone while the engine runs.
    let h = unsafe { hooks(data) };
    h.retire_pending(pc);
    if h.subscribers.iter().any(|(_, s)| s.wants_stop()) {
        h.interrupted = true;
        // SAFETY: the engine running this hook; stopping from a hook is
        // what uc_emu_stop is for. The instruction at `pc` does not run.
        unsafe { (h.api.uc_emu_stop)(engine) };
        return;
    }
    if !h.count(engine) {
        return;
    }
    let branch = h.classify(engine, pc, len);
    h.pending = Some(Pending { pc, len, branch });
}

extern "C" fn on_count(engine: uc::UcEngine, _pc: u64, _len: u32, data: *mut c_void) {
    // SAFETY: registered by Cpu::count_instructions with its Hooks, which
    // the Cpu leaves alone while the engine runs.
    let h = unsafe { hooks(data) };
    h.count(engine);
}

extern "C" fn on_mem(
    _engine: uc::UcEngine,
    kind: c_int,
    addr: u64,
    size: c_int,
    _value: i64,
    data: *mut c_void,
) {
    // SAFETY: as in on_code.
    let h = unsafe { hooks(data) };
    let kind = if kind == uc::UC_MEM_WRITE {
        AccessKind::Store
    } else {
        AccessKind::Load
    };
    h.accesses.push(MemAccess {
        kind,
        addr,
        size: size as u32,
    });
}

extern "C" fn on_invalid_mem(
    _engine: uc::UcEngine,
    kind: c_int,
    addr: u64,
    _size: c_int,
    _value: i64,
    data: *mut c_void,
) -> bool {
    // SAFETY: registered by Cpu::new with its Hooks.
    let h = unsafe { hooks(data) };
    let fault = match kind {
        uc::UC_MEM_READ_UNMAPPED => Fault::Unmapped {
            access: Access::Read,
            addr,
        },
        uc::UC_MEM_WRITE_UNMAPPED => Fault::Unmapped {
            access: Access::Write,
            addr,
        },
        uc::UC_MEM_FETCH_UNMAPPED => Fault::Unmapped {
            access: Access::Execute,
            addr,
        },
        uc::UC_MEM_READ_PROT => Fault::Protection {
            access: Access::Read,
            addr,
        },
        uc::UC_MEM_WRITE_PROT => Fault::Protection {
            access: Access::Write,
            addr,
        },
        _ => Fault::Protection {
            access: Access::Execute,
            addr,
        },
    };
    h.bad_access = Some(fault);
    // Stop: the run returns the fault.
    false
}

extern "C" fn on_syscall(engine: uc::UcEngine, data: *mut c_void) {
    // SAFETY: registered by Cpu::new with its Hooks.
    let h = unsafe { hooks(data) };
    // In the hook %rip is still at the two-byte `syscall`.
    if h.try_fast(engine, 2) {
        return;
    }
    h.syscall = true;
    // SAFETY: the engine running this hook; stopping from a hook is what
    // uc_emu_stop is for.
    unsafe { (h.api.uc_emu_stop)(engine) };
}

/// AArch64's exception number of `svc` (QEMU's EXCP_SWI).
const AARCH64_EXCP_SWI: u32 = 2;
/// AArch64's exception number of an undefined instruction (EXCP_UDEF).
const AARCH64_EXCP_UDEF: u32 = 1;
/// x86's invalid-opcode vector (#UD).
const X86_VECTOR_UD: u32 = 6;

extern "C" fn on_interrupt(engine: uc::UcEngine, vector: u32, data: *mut c_void) {
    // SAFETY: registered by Cpu::new with its Hooks.
    let h = unsafe { hooks(data) };
    if h.arch == Arch::Aarch64 && vector == AARCH64_EXCP_SWI {
        // The PC is past the `svc` already.
        if h.try_fast(engine, 0) {
            return;
        }
        h.syscall = true;
    } else {
        h.exception = Some(vector);
    }
    // SAFETY: as in on_syscall.
    unsafe { (h.api.uc_emu_stop)(engine) };
}

/// A CPU with its own address space.
pub struct Cpu {
    api: &'static uc::Api,
    engine: uc::UcEngine,
    arch: Arch,
    /// Owned (made by Box::into_raw in new, freed in drop).
    hooks: *mut Hooks,
    /// The code and memory hooks, while someone subscribes.
    trace_hooks: Option<[uc::UcHook; 2]>,
    /// The counting code hook, once a budgeted run needed it and while
    /// no one subscribes (the trace hook counts then).
    count_hook: Option<uc::UcHook>,
    /// The address space, shared with the CPUs of the process's other
    /// threads.
    space: Arc<Mutex<VmSpace>>,
    /// The regions the engine maps now, and the space's generation they
    /// reflect.
    mapped: BTreeMap<u64, Region>,
    mapped_generation: u64,
    next_subscriber: u64,
}

// SAFETY: the engine and the hooks are used only through `&mut self` (or
// `&self` for reads while nothing runs), never from two threads at once;
// Unicorn 2 keeps an engine's whole state in the engine, so it may be
// driven from another thread than the one that made it, and the hooks'
// subscribers are Send.
unsafe impl Send for Cpu {}

impl fmt::Debug for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cpu")
            .field("arch", &self.arch)
            .field("subscribed", &self.trace_hooks.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Cpu {
    fn drop(&mut self) {
        // SAFETY: the engine was opened by new and is closed once, here;
        // after it no callback can run, so the hooks can be freed.
        unsafe {
            (self.api.uc_close)(self.engine);
            drop(Box::from_raw(self.hooks));
        }
    }
}

impl Cpu {
    /// A CPU numbered `id` running `arch` code, with nothing mapped.
    pub fn new(arch: Arch, id: u32) -> Result<Cpu, CpuError> {
        Cpu::with_space(arch, id, Arc::default())
    }

    /// A CPU for another thread of this CPU's process: the same address
    /// space, registers all zero.
    pub fn new_thread(&self, id: u32) -> Result<Cpu, CpuError> {
        let mut cpu = Cpu::with_space(self.arch, id, self.space.clone())?;
        cpu.sync()?;
        Ok(cpu)
    }

    fn space(&self) -> std::sync::MutexGuard<'_, VmSpace> {
        self.space.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Brings the engine's mappings up to date with the address space.
    fn sync(&mut self) -> Result<(), CpuError> {
        let (generation, wanted) = {
            let space = self.space();
            if space.generation == self.mapped_generation {
                return Ok(());
            }
            (space.generation, space.regions.clone())
        };
        self.mapped_generation = generation;
        let stale: Vec<Region> = self
            .mapped
            .values()
            .filter(|r| !wanted.get(&r.addr).is_some_and(|w| w.same(r)))
            .cloned()
            .collect();
        for r in stale {
            // SAFETY: plain call on our engine, of a range it maps.
            check(self.api, "uc_mem_unmap", unsafe {
                (self.api.uc_mem_unmap)(self.engine, r.addr, r.len as usize)
            })?;
            self.mapped.remove(&r.addr);
        }
        for r in wanted.values() {
            if self.mapped.contains_key(&r.addr) {
                continue;
            }
            // SAFETY: the host pages stay allocated while `self.mapped`
            // holds the region's block, which it does until the engine
            // unmaps them (above) or is closed (drop).
            check(self.api, "uc_mem_map_ptr", unsafe {
                (self.api.uc_mem_map_ptr)(
                    self.engine,
                    r.addr,
                    r.len as usize,
                    r.prot.0,
                    r.block.at(r.offset).cast(),
                )
            })?;
            self.mapped.insert(r.addr, r.clone());
        }
        self.hooks_mut().decode.clear();
        Ok(())
    }

    fn with_space(arch: Arch, id: u32, space: Arc<Mutex<VmSpace>>) -> Result<Cpu, CpuError> {
        let (uc_arch, uc_mode) = match arch {
            Arch::X86_64 => (uc::UC_ARCH_X86, uc::UC_MODE_64),
            Arch::Aarch64 => (uc::UC_ARCH_ARM64, uc::UC_MODE_ARM),
        };
        let api = uc::api().map_err(|text| CpuError::Emulator {
            call: "dlopen",
            text,
        })?;
        let mut engine: uc::UcEngine = std::ptr::null_mut();
        // SAFETY: uc_open writes the handle through the pointer it is given.
        check(api, "uc_open", unsafe {
            (api.uc_open)(uc_arch, uc_mode, &mut engine)
        })?;
        let hooks = Box::into_raw(Box::new(Hooks {
            api,
            arch,
            cpu: id,
            mode: Mode::User,
            subscribers: Vec::new(),
            pending: None,
            accesses: Vec::with_capacity(8),
            decode: DecodeCache::new(),
            executed: 0,
            kernel_work: 0,
            fast_served: 0,
            fast: None,
            space: space.clone(),
            fast_held: false,
            limit: u64::MAX,
            budget_spent: false,
            interrupted: false,
            syscall: false,
            exception: None,
            bad_access: None,
        }));
        let cpu = Cpu {
            api,
            engine,
            arch,
            hooks,
            trace_hooks: None,
            count_hook: None,
            space,
            mapped: BTreeMap::new(),
            mapped_generation: 0,
            next_subscriber: 0,
        };
        cpu.add_hook(
            uc::UC_HOOK_MEM_INVALID,
            on_invalid_mem as uc::HookMemInvalid as *mut c_void,
            None,
        )?;
        cpu.add_hook(
            uc::UC_HOOK_INTR,
            on_interrupt as uc::HookIntr as *mut c_void,
            None,
        )?;
        if arch == Arch::X86_64 {
            cpu.add_hook(
                uc::UC_HOOK_INSN,
                on_syscall as uc::HookSyscall as *mut c_void,
                Some(uc::UC_X86_INS_SYSCALL),
            )?;
        }
        Ok(cpu)
    }

    fn add_hook(
        &self,
        kind: c_int,
        callback: *mut c_void,
        insn: Option<c_int>,
    ) -> Result<uc::UcHook, CpuError> {
        let mut handle: uc::UcHook = 0;
        // SAFETY: the callback has the C signature Unicorn expects for
        // `kind` (each caller casts from the matching type), and its user
        // data is this CPU's Hooks, which outlive the engine. begin > end
        // asks for every address.
        let err = unsafe {
            match insn {
                Some(id) => (self.api.uc_hook_add)(
                    self.engine,
                    &mut handle,
                    kind,
                    callback,
                    self.hooks.cast(),
                    1,
                    0,
                    id,
                ),
                None => (self.api.uc_hook_add)(
                    self.engine,
                    &mut handle,
                    kind,
                    callback,
                    self.hooks.cast(),
                    1,
                    0,
                ),
            }
        };
        check(self.api, "uc_hook_add", err)?;
        Ok(handle)
    }

    /// The instruction set.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    fn hooks_mut(&mut self) -> &mut Hooks {
        // SAFETY: the engine is not running (that needs `&mut self` too,
        // and callbacks only run inside uc_emu_start), so this is the only
        // reference.
        unsafe { &mut *self.hooks }
    }

    /// Maps `len` bytes at `addr` (both page-aligned), zero-filled, in
    /// the address space of every thread of the process.
    pub fn map(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), CpuError> {
        check_aligned(addr, len)?;
        self.space().map(addr, len, prot)?;
        self.sync()
    }

    /// Changes the rights of mapped pages.
    pub fn protect(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), CpuError> {
        check_aligned(addr, len)?;
        self.space().protect(addr, len, prot)?;
        self.sync()
    }

    /// Unmaps pages (munmap(2)); every page of the range must be mapped.
    pub fn unmap(&mut self, addr: u64, len: u64) -> Result<(), CpuError> {
        check_aligned(addr, len)?;
        self.space().unmap(addr, len)?;
        self.sync()
    }

    /// Unmaps whatever is mapped of the pages of a range (munmap(2) and
    /// MAP_FIXED, which accept holes).
    pub fn unmap_holes(&mut self, addr: u64, len: u64) -> Result<(), CpuError> {
        check_aligned(addr, len)?;
        self.space().unmap_holes(addr, len)?;
        self.sync()
    }

    /// The lowest free range of `len` bytes from `hint` on, where mmap(2)
    /// without MAP_FIXED puts a mapping.
    pub fn find_free(&self, hint: u64, len: u64) -> Option<u64> {
        self.space().find_free(hint, len)
    }

    /// Writes mapped memory, whatever its rights (as the kernel does).
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), CpuError> {
        self.sync()?;
        // SAFETY: `bytes` is valid for its length.
        let err = unsafe {
            (self.api.uc_mem_write)(self.engine, addr, bytes.as_ptr().cast(), bytes.len())
        };
        if err != uc::UC_ERR_OK {
            return Err(CpuError::BadAddress {
                addr,
                len: bytes.len() as u64,
            });
        }
        self.hooks_mut().decode.clear();
        Ok(())
    }

    /// Writes memory as copyout(9) does for the kernel: every byte must
    /// be mapped writable (BadAddress otherwise, and nothing is written).
    pub fn write_user(&mut self, addr: u64, bytes: &[u8]) -> Result<(), CpuError> {
        let bad = CpuError::BadAddress {
            addr,
            len: bytes.len() as u64,
        };
        let end = addr.checked_add(bytes.len() as u64).ok_or(bad.clone())?;
        {
            let space = self.space();
            let mut at = addr;
            while at < end {
                let r = space
                    .region_at(at, Prot::WRITE)
                    .ok_or_else(|| bad.clone())?;
                at = r.addr + r.len;
            }
        }
        self.write(addr, bytes)
    }

    /// Reads mapped memory, whatever its rights, from the address space
    /// itself (so it sees what every thread wrote).
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), CpuError> {
        self.read_with(addr, buf, Prot::NONE)
    }

    /// Reads memory as copyin(9) does for the kernel: every byte must be
    /// mapped readable (BadAddress otherwise).
    pub fn read_user(&self, addr: u64, buf: &mut [u8]) -> Result<(), CpuError> {
        self.read_with(addr, buf, Prot::READ)
    }

    fn read_with(&self, addr: u64, buf: &mut [u8], need: Prot) -> Result<(), CpuError> {
        read_space(&self.space(), addr, buf, need)
    }

    fn regs(&self) -> Regs {
        Regs {
            api: self.api,
            engine: self.engine,
            arch: self.arch,
        }
    }

    fn reg(&self, id: c_int) -> u64 {
        self.regs().get(id)
    }

    fn set_reg(&mut self, id: c_int, v: u64) {
        self.regs().set(id, v);
    }

    /// The program counter.
    pub fn pc(&self) -> u64 {
        self.reg(match self.arch {
            Arch::X86_64 => uc::UC_X86_REG_RIP,
            Arch::Aarch64 => uc::UC_ARM64_REG_PC,
        })
    }

    /// Sets the program counter.
    pub fn set_pc(&mut self, pc: u64) {
        let id = match self.arch {
            Arch::X86_64 => uc::UC_X86_REG_RIP,
            Arch::Aarch64 => uc::UC_ARM64_REG_PC,
        };
        self.set_reg(id, pc);
    }

    /// The stack pointer.
    pub fn sp(&self) -> u64 {
        self.reg(match self.arch {
            Arch::X86_64 => uc::UC_X86_REG_RSP,
            Arch::Aarch64 => uc::UC_ARM64_REG_SP,
        })
    }

    /// The frame pointer (`%rbp`, `x29`).
    pub fn frame_pointer(&self) -> u64 {
        self.reg(match self.arch {
            Arch::X86_64 => uc::UC_X86_REG_RBP,
            Arch::Aarch64 => uc::UC_ARM64_REG_X29,
        })
    }

    /// Whether the instruction at the PC is x86's `rdpmc` (0F 33), which
    /// the emulator does not implement: it faults, and the caller serves
    /// it with [`Cpu::complete_rdpmc`] when the kernel allows it.
    pub fn at_rdpmc(&self) -> bool {
        let mut op = [0u8; 2];
        self.arch == Arch::X86_64 && self.read(self.pc(), &mut op).is_ok() && op == [0x0F, 0x33]
    }

    /// The counter `rdpmc` asks for (%ecx).
    pub fn rdpmc_index(&self) -> u32 {
        self.reg(uc::UC_X86_REG_RCX) as u32
    }

    /// Completes an `rdpmc` with the counter's `value`: %edx:%eax (the
    /// upper halves of %rax and %rdx cleared, as a 32-bit write does) and
    /// the PC past the instruction.
    pub fn complete_rdpmc(&mut self, value: u64) {
        let r = self.regs();
        r.set(uc::UC_X86_REG_RAX, value & 0xFFFF_FFFF);
        r.set(uc::UC_X86_REG_RDX, value >> 32);
        let pc = self.pc();
        self.set_pc(pc + 2);
    }

    /// Sets the registers a new image starts with, as FreeBSD's
    /// exec_setregs does: the PC at `entry`, the stack pointer at `stack`
    /// aligned as the ABI wants at a function's entry, and the first
    /// argument register pointing at `stack` (argc, then argv, envp and
    /// the auxiliary vector).
    pub fn set_exec_registers(&mut self, entry: u64, stack: u64) {
        match self.arch {
            Arch::X86_64 => {
                self.set_reg(uc::UC_X86_REG_RSP, ((stack - 8) & !0xf) + 8);
                self.set_reg(uc::UC_X86_REG_RDI, stack);
                // PSL_USER: the reserved bit 1 and interrupts enabled.
                self.set_reg(uc::UC_X86_REG_EFLAGS, 0x202);
            }
            Arch::Aarch64 => {
                self.set_reg(uc::UC_ARM64_REG_SP, stack & !0xf);
                self.set_reg(uc::UC_ARM64_REG_X0, stack);
            }
        }
        self.set_pc(entry);
    }

    /// Sets the registers a new thread starts with, as FreeBSD's
    /// cpu_set_upcall does: the PC at `entry`, its argument in the first
    /// argument register, the stack pointer at the top of the stack
    /// (`stack_top`, aligned; on amd64 one word below, where a call would
    /// have put the return address) and no frame pointer.
    pub fn set_thread_registers(&mut self, entry: u64, arg: u64, stack_top: u64) {
        match self.arch {
            Arch::X86_64 => {
                self.set_reg(uc::UC_X86_REG_RBP, 0);
                self.set_reg(uc::UC_X86_REG_RSP, (stack_top & !0xf).wrapping_sub(8));
                self.set_reg(uc::UC_X86_REG_RDI, arg);
                self.set_reg(uc::UC_X86_REG_EFLAGS, 0x202);
            }
            Arch::Aarch64 => {
                self.set_reg(uc::UC_ARM64_REG_SP, stack_top & !0xf);
                self.set_reg(uc::UC_ARM64_REG_X0, arg);
                self.set_reg(uc::UC_ARM64_REG_X29, 0);
                self.set_reg(uc::UC_ARM64_REG_X30, 0);
            }
        }
        self.set_pc(entry);
    }

    /// The system call the program made (valid after [`Stop::Syscall`]):
    /// FreeBSD's conventions, the number in `%rax` and the arguments in
    /// `%rdi, %rsi, %rdx, %r10, %r8, %r9` on amd64; the number in `x8`
    /// and the arguments in `x0`-`x5` on arm64.
    pub fn syscall_request(&self) -> SyscallRequest {
        self.regs().syscall_request()
    }

    /// Returns from a system call as FreeBSD does: on success the two
    /// values in `%rax`/`%rdx` (`x0`/`x1`) and the carry flag clear; on
    /// failure the errno value in `%rax` (`x0`) and the carry flag set
    /// (and on amd64 `%rcx` and `%r11` as sysretq leaves them).
    pub fn set_syscall_result(&mut self, result: Result<[u64; 2], i32>) {
        let pc = self.pc();
        self.regs().set_syscall_result(result, pc);
    }

    /// Puts a system call's number and arguments where the program would
    /// (the inverse of [`Cpu::syscall_request`]).
    pub fn set_syscall_request(&mut self, req: &SyscallRequest) {
        let regs = self.regs();
        match self.arch {
            Arch::X86_64 => {
                regs.set(uc::UC_X86_REG_RAX, req.number);
                for (r, v) in X86_SYSCALL_ARGS.into_iter().zip(req.args) {
                    regs.set(r, v);
                }
            }
            Arch::Aarch64 => {
                regs.set(uc::UC_ARM64_REG_X8, req.number);
                for (i, v) in req.args.into_iter().enumerate() {
                    regs.set(uc::UC_ARM64_REG_X0 + i as c_int, v);
                }
            }
        }
    }

    /// The result registers as the program reads them after a system
    /// call: the values on success, the errno value when the carry flag
    /// is set.
    pub fn syscall_result(&self) -> Result<[u64; 2], i32> {
        let (ret0, ret1, flags, carry) = result_registers(self.arch);
        if self.reg(flags) & carry != 0 {
            Err(self.reg(ret0) as i32)
        } else {
            Ok([self.reg(ret0), self.reg(ret1)])
        }
    }

    /// Serves the system calls `fast` takes inside the emulator's hook,
    /// without stopping the run (None: every call stops it).
    pub fn set_fast_syscalls(&mut self, fast: Option<Box<dyn FastSyscalls>>) {
        self.hooks_mut().fast = fast;
    }

    /// Holds the fast path off (every system call stops the run) while
    /// `held`, without forgetting it: for a caller that must see each
    /// call's kernel work itself.
    pub fn hold_fast_syscalls(&mut self, held: bool) {
        self.hooks_mut().fast_held = held;
    }

    /// System calls served without stopping, so far.
    pub fn fast_syscalls_served(&self) -> u64 {
        // SAFETY: as in hooks_mut, read only.
        unsafe { (*self.hooks).fast_served }
    }

    /// Reports every instruction this CPU retires from now on to `s`.
    pub fn subscribe(&mut self, s: Box<dyn Subscriber>) -> Result<SubscriberId, CpuError> {
        if self.trace_hooks.is_none() {
            let code = self.add_hook(
                uc::UC_HOOK_CODE,
                on_code as uc::HookCode as *mut c_void,
                None,
            )?;
            let mem = self.add_hook(
                uc::UC_HOOK_MEM_READ | uc::UC_HOOK_MEM_WRITE,
                on_mem as uc::HookMem as *mut c_void,
                None,
            );
            let mem = match mem {
                Ok(m) => m,
                Err(e) => {
                    // SAFETY: the handle uc_hook_add just gave.
                    unsafe { (self.api.uc_hook_del)(self.engine, code) };
                    return Err(e);
                }
            };
            self.trace_hooks = Some([code, mem]);
            if let Some(handle) = self.count_hook.take() {
                // SAFETY: a handle uc_hook_add gave and not yet deleted.
                unsafe { (self.api.uc_hook_del)(self.engine, handle) };
            }
        }
        let id = SubscriberId(self.next_subscriber);
        self.next_subscriber += 1;
        self.hooks_mut().subscribers.push((id, s));
        Ok(id)
    }

    /// Ends a subscription, returning the subscriber; the last one removes
    /// the per-instruction hooks.
    pub fn unsubscribe(&mut self, id: SubscriberId) -> Option<Box<dyn Subscriber>> {
        let h = self.hooks_mut();
        let at = h.subscribers.iter().position(|(i, _)| *i == id)?;
        let (_, s) = h.subscribers.remove(at);
        if h.subscribers.is_empty() {
            h.pending = None;
            h.accesses.clear();
            if let Some(handles) = self.trace_hooks.take() {
                for handle in handles {
                    // SAFETY: handles uc_hook_add gave and not yet deleted.
                    unsafe { (self.api.uc_hook_del)(self.engine, handle) };
                }
            }
        }
        Some(s)
    }

    /// Runs from the PC until the program makes a system call or faults.
    pub fn run(&mut self) -> Result<Stop, CpuError> {
        self.execute(u64::MAX)?
            .stop
            .ok_or_else(|| CpuError::Emulator {
                call: "uc_emu_start",
                text: "the run stopped with no system call and no fault".into(),
            })
    }

    /// Runs one instruction: `None` when it retired without a system call
    /// or a fault.
    pub fn step(&mut self) -> Result<Option<Stop>, CpuError> {
        Ok(self.run_for(1)?.stop)
    }

    /// Runs at most `budget` instructions: until they have all retired
    /// (`stop` is None), or to the first system call or fault. This is
    /// how the machine's clock preempts a program at an exact instruction
    /// count, so that runs are deterministic.
    pub fn run_for(&mut self, budget: u64) -> Result<Run, CpuError> {
        if budget == 0 {
            return Ok(Run {
                retired: 0,
                kernel_work: 0,
                stop: None,
                interrupted: false,
            });
        }
        if self.trace_hooks.is_none() && self.count_hook.is_none() {
            self.count_hook = Some(self.add_hook(
                uc::UC_HOOK_CODE,
                on_count as uc::HookCode as *mut c_void,
                None,
            )?);
        }
        self.execute(budget)
    }

    /// Instructions this CPU has retired (counted only while a budgeted
    /// run or a subscriber has the counting hook installed).
    pub fn retired(&self) -> u64 {
        // SAFETY: as in hooks_mut, read only.
        unsafe { (*self.hooks).executed }
    }

    /// Renumbers the CPU: the machine's CPU the thread whose registers it
    /// holds runs on, which its events report.
    pub fn set_id(&mut self, id: u32) {
        self.hooks_mut().cpu = id;
    }

    /// Runs until `budget` more instructions have started (u64::MAX: no
    /// limit; the counting hook must be installed for any other value).
    fn execute(&mut self, budget: u64) -> Result<Run, CpuError> {
        self.sync()?;
        let begin = self.pc();
        let counted = self.trace_hooks.is_some() || self.count_hook.is_some();
        let start_count = self.retired();
        // SAFETY: as in hooks_mut, read only.
        let start_kernel = unsafe { (*self.hooks).kernel_work };
        {
            let h = self.hooks_mut();
            h.limit = (h.executed + h.kernel_work).saturating_add(budget);
            h.budget_spent = false;
            h.interrupted = false;
            h.syscall = false;
            h.exception = None;
            h.bad_access = None;
        }
        // SAFETY: the engine is ours; the callbacks it runs use only the
        // Hooks, which `&mut self` keeps everyone else from touching. No
        // instruction starts at u64::MAX, so `until` is never reached.
        let err = unsafe { (self.api.uc_emu_start)(self.engine, begin, u64::MAX, 0, 0) };
        let pc = self.pc();
        let h = self.hooks_mut();
        let fault = match err {
            uc::UC_ERR_OK => None,
            uc::UC_ERR_INSN_INVALID => Some(Fault::IllegalInstruction),
            uc::UC_ERR_READ_UNMAPPED
            | uc::UC_ERR_WRITE_UNMAPPED
            | uc::UC_ERR_FETCH_UNMAPPED
            | uc::UC_ERR_READ_PROT
            | uc::UC_ERR_WRITE_PROT
            | uc::UC_ERR_FETCH_PROT => Some(h.bad_access.unwrap_or(Fault::Unmapped {
                access: Access::Read,
                addr: 0,
            })),
            uc::UC_ERR_EXCEPTION => Some(Fault::Exception { vector: u32::MAX }),
            e => {
                h.drop_pending();
                return Err(CpuError::Emulator {
                    call: "uc_emu_start",
                    text: h.api.strerror(e),
                });
            }
        };
        let fault = fault.or(match h.exception {
            Some(X86_VECTOR_UD) if h.arch == Arch::X86_64 => Some(Fault::IllegalInstruction),
            Some(AARCH64_EXCP_UDEF) if h.arch == Arch::Aarch64 => Some(Fault::IllegalInstruction),
            Some(vector) => Some(Fault::Exception { vector }),
            None => None,
        });
        match fault {
            Some(fault) => {
                // The faulting instruction did not retire; the one before
                // it (if its report is still pending) did, and control
                // went to the faulting one.
                if h.pending.is_some_and(|p| p.pc == pc) {
                    h.drop_pending();
                } else {
                    h.retire_pending(pc);
                }
                h.enter_kernel(KernelEntry::Exception { ip: pc });
                if counted {
                    h.executed = h.executed.saturating_sub(1).max(start_count);
                }
                let retired = h.executed - start_count;
                Ok(Run {
                    retired,
                    kernel_work: h.kernel_work - start_kernel,
                    stop: Some(Stop::Fault { pc, fault }),
                    interrupted: false,
                })
            }
            None => {
                h.retire_pending(pc);
                let stop = h.syscall.then_some(Stop::Syscall);
                // Every stop leaves user mode: a system call, or the
                // interrupt (clock, PMI) that ends the budget.
                h.enter_kernel(match stop {
                    Some(_) => KernelEntry::Syscall,
                    None => KernelEntry::Interrupt { ip: pc },
                });
                if !counted && stop.is_none() && !h.interrupted {
                    return Err(CpuError::Emulator {
                        call: "uc_emu_start",
                        text: "the run stopped with no system call and no fault".into(),
                    });
                }
                let interrupted = h.interrupted;
                Ok(Run {
                    retired: h.executed - start_count,
                    kernel_work: h.kernel_work - start_kernel,
                    stop,
                    interrupted,
                })
            }
        }
    }
}

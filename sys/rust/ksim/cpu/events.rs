//! The event model: what a CPU reports for each retired instruction, for
//! the hardware models (PMU counters, trace units) that count from it.
//!
//! A [`Subscriber`] registered with [`crate::cpu::Cpu::subscribe`] sees
//! every instruction the CPU retires, in order, with its branch outcome and
//! its memory accesses. While no subscriber is registered the CPU installs
//! no per-instruction hook at all, so an unobserved machine runs at the
//! emulator's full speed.

/// The privilege level an instruction ran at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// User mode (CPL 3, EL0).
    User,
    /// Kernel mode (CPL 0, EL1).
    Kernel,
}

/// What kind of control transfer a branch instruction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// A conditional direct branch (x86 `Jcc`, `LOOP`, `JRCXZ`; AArch64
    /// `B.cond`, `CBZ`, `CBNZ`, `TBZ`, `TBNZ`).
    Conditional,
    /// An unconditional direct jump (`JMP rel`, `B`).
    Jump,
    /// An unconditional jump through a register or memory (`JMP r/m`,
    /// `BR`): jump tables land here.
    IndirectJump,
    /// A direct call (`CALL rel`, `BL`).
    Call,
    /// A call through a register or memory (`CALL r/m`, `BLR`).
    IndirectCall,
    /// A return (`RET`).
    Return,
}

impl BranchKind {
    /// Whether the branch always transfers control.
    pub fn is_unconditional(self) -> bool {
        self != BranchKind::Conditional
    }

    /// Whether the target comes from a register or memory (returns
    /// included).
    pub fn is_indirect(self) -> bool {
        matches!(
            self,
            BranchKind::IndirectJump | BranchKind::IndirectCall | BranchKind::Return
        )
    }
}

/// The branch part of a retired instruction. System calls (`syscall`,
/// `svc`) are not branches in this model: they enter the kernel, which
/// returns to the next instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Branch {
    /// What kind of branch it is.
    pub kind: BranchKind,
    /// Whether control went somewhere else than the next instruction.
    pub taken: bool,
}

/// Whether a memory access read or wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A read of data (instruction fetches are not reported).
    Load,
    /// A write.
    Store,
}

/// One data access of an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemAccess {
    /// Load or store.
    pub kind: AccessKind,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Size in bytes.
    pub size: u32,
}

/// One retired instruction.
#[derive(Debug, Clone, Copy)]
pub struct Retired<'a> {
    /// The CPU that retired it.
    pub cpu: u32,
    /// The mode it ran in.
    pub mode: Mode,
    /// Its address.
    pub pc: u64,
    /// Its length in bytes.
    pub len: u32,
    /// Where execution went on: the next instruction, a branch target, or
    /// the return point of a system call.
    pub next_pc: u64,
    /// `Some` when the instruction is a branch.
    pub branch: Option<Branch>,
    /// Its data accesses, in the order it made them. An instruction that
    /// both reads and writes memory (`add %eax,(%rdi)`, `push`, `call`)
    /// has both.
    pub accesses: &'a [MemAccess],
}

impl Retired<'_> {
    /// Whether the instruction read memory.
    pub fn loads(&self) -> bool {
        self.accesses.iter().any(|a| a.kind == AccessKind::Load)
    }

    /// Whether the instruction wrote memory.
    pub fn stores(&self) -> bool {
        self.accesses.iter().any(|a| a.kind == AccessKind::Store)
    }
}

/// How user mode was left for the kernel (which the emulator does not
/// run), for trace units that mark where the traced code stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelEntry {
    /// The system call instruction just reported entered the kernel; the
    /// kernel returns past it.
    Syscall,
    /// An interrupt (the clock, a PMI) before the instruction at `ip` ran.
    Interrupt {
        /// The next instruction to run.
        ip: u64,
    },
    /// The instruction at `ip` faulted; it did not retire.
    Exception {
        /// The faulting instruction.
        ip: u64,
    },
}

/// A consumer of a CPU's retired instructions.
pub trait Subscriber: Send {
    /// Called once per retired instruction, in program order.
    fn retired(&mut self, insn: &Retired<'_>);

    /// Called when the CPU leaves user mode for the kernel, after the
    /// last instruction it retired there. The next user instruction
    /// reported is where the kernel returned to.
    fn kernel_entry(&mut self, _cpu: u32, _entry: KernelEntry) {}

    /// Whether the run must stop before the next instruction starts (a
    /// hardware model raised an interrupt at the one just retired).
    fn wants_stop(&self) -> bool {
        false
    }
}

/// Names a subscription, to end it with
/// [`crate::cpu::Cpu::unsubscribe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriberId(pub(crate) u64);

/// A subscriber that counts what the PMU's architectural events count:
/// instructions, branches, taken branches, instructions that load and
/// instructions that store, per mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Retired instructions.
    pub instructions: u64,
    /// Retired branches of any [`BranchKind`].
    pub branches: u64,
    /// Retired branches that were taken.
    pub taken_branches: u64,
    /// Retired conditional branches.
    pub conditional: u64,
    /// Retired calls, direct and indirect.
    pub calls: u64,
    /// Retired returns.
    pub returns: u64,
    /// Retired indirect jumps and calls (returns not included).
    pub indirect: u64,
    /// Retired instructions that read memory.
    pub loads: u64,
    /// Retired instructions that wrote memory.
    pub stores: u64,
    /// Instructions retired in kernel mode.
    pub kernel_instructions: u64,
}

impl Counts {
    /// Counts one retired instruction.
    pub fn add(&mut self, insn: &Retired<'_>) {
        self.instructions += 1;
        if insn.mode == Mode::Kernel {
            self.kernel_instructions += 1;
        }
        if let Some(b) = insn.branch {
            self.branches += 1;
            self.taken_branches += u64::from(b.taken);
            match b.kind {
                BranchKind::Conditional => self.conditional += 1,
                BranchKind::Call => self.calls += 1,
                BranchKind::IndirectCall => {
                    self.calls += 1;
                    self.indirect += 1;
                }
                BranchKind::IndirectJump => self.indirect += 1,
                BranchKind::Return => self.returns += 1,
                BranchKind::Jump => {}
            }
        }
        self.loads += u64::from(insn.loads());
        self.stores += u64::from(insn.stores());
    }
}

impl Subscriber for Counts {
    fn retired(&mut self, insn: &Retired<'_>) {
        self.add(insn);
    }
}

/// A subscriber shared with its owner, so that the owner can read what it
/// saw while the CPU holds it.
impl<S: Subscriber> Subscriber for std::sync::Arc<std::sync::Mutex<S>> {
    fn retired(&mut self, insn: &Retired<'_>) {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retired(insn);
    }

    fn kernel_entry(&mut self, cpu: u32, entry: KernelEntry) {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .kernel_entry(cpu, entry);
    }

    fn wants_stop(&self) -> bool {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .wants_stop()
    }
}

/// A subscriber that keeps the address of every user-mode instruction
/// retired, in order: what the trace tests compare a decoded trace with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserPcs {
    /// The addresses.
    pub pcs: Vec<u64>,
}

impl Subscriber for UserPcs {
    fn retired(&mut self, insn: &Retired<'_>) {
        if insn.mode == Mode::User {
            self.pcs.push(insn.pc);
        }
    }
}

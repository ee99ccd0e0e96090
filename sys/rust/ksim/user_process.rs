//! A user process that runs a real program on a [`Cpu`]: loaded from its
//! ELF file by [`crate::imgact_elf`], with the FreeBSD system calls it
//! makes served here under FreeBSD's numbers (sys/kern/syscalls.master)
//! and conventions, and its faults turned into the signals FreeBSD's
//! trap handlers send. Signals are not caught: a signal ends the process,
//! as their default action does.
//!
//! [`UserThread`] ties a process to the machine: it is the activity of
//! the machine's thread, runs a clock tick's worth of instructions each
//! time the machine's clock ticks on the CPU it is on, and spends the
//! kernel's share of each system call in the functions of a simulated
//! kernel image ([`kernel_image`]), so that an interrupt can find the
//! thread in user mode at its real PC or in the kernel under a
//! meaningful kernel call chain.

use std::sync::OnceLock;

use crate::cpu::{Arch, Cpu, CpuError, Fault, Stop};
use crate::elf::{Image, ImageBuilder, ImageKind, PROLOGUE};
use crate::imgact_elf::{self, ElfError};
use crate::machine::{Activity, Location, UserRegs};

/// FreeBSD's system call numbers, of the calls implemented here.
pub mod sys {
    /// exit(2).
    pub const EXIT: u64 = 1;
    /// write(2).
    pub const WRITE: u64 = 4;
    /// getpid(2).
    pub const GETPID: u64 = 20;
    /// sched_yield(2).
    pub const SCHED_YIELD: u64 = 331;
}

/// FreeBSD's signal numbers the simulated kernel sends.
pub mod signal {
    /// Illegal instruction.
    pub const SIGILL: i32 = 4;
    /// Trace trap (breakpoint).
    pub const SIGTRAP: i32 = 5;
    /// Arithmetic exception.
    pub const SIGFPE: i32 = 8;
    /// Bus error.
    pub const SIGBUS: i32 = 10;
    /// Kill (what an emulator failure ends a thread with).
    pub const SIGKILL: i32 = 9;
    /// Segmentation violation.
    pub const SIGSEGV: i32 = 11;
    /// Nonexistent system call.
    pub const SIGSYS: i32 = 12;
}

/// errno values the system calls return.
pub mod errno {
    /// Bad file descriptor.
    pub const EBADF: i32 = 9;
    /// Bad address.
    pub const EFAULT: i32 = 14;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
}

/// How a process ended, as wait(2) tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called exit(2) with this status (its low 8 bits).
    Exited(i32),
    /// A signal ended it.
    Signaled(i32),
}

/// Why a process could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// The CPU could not be made.
    Cpu(CpuError),
    /// The file is not a loadable executable.
    Elf(ElfError),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Cpu(e) => write!(f, "{e}"),
            ExecError::Elf(e) => write!(f, "ELF image: {e}"),
        }
    }
}

impl std::error::Error for ExecError {}

/// The largest write(2) served: FreeBSD's limit is SSIZE_MAX, but a
/// simulated process has no use for more, and a bad length must not make
/// the host allocate without bound.
const MAX_WRITE: u64 = 16 << 20;

/// A process running one program on its own CPU.
#[derive(Debug)]
pub struct UserProcess {
    cpu: Cpu,
    pid: i32,
    ppid: i32,
    status: Option<ExitStatus>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    syscalls: u64,
    fault: Option<(u64, Fault)>,
}

impl UserProcess {
    /// Loads the executable `image` (the bytes of its file, which claims
    /// to be at `path`) on a new CPU numbered `cpu_id`, with `argv` and
    /// `envp`, ready to run as process `pid`.
    pub fn exec(
        image: &[u8],
        path: &str,
        argv: &[&str],
        envp: &[&str],
        pid: i32,
        cpu_id: u32,
    ) -> Result<UserProcess, ExecError> {
        let exe = imgact_elf::parse(image).map_err(ExecError::Elf)?;
        let mut cpu = Cpu::new(exe.arch, cpu_id).map_err(ExecError::Cpu)?;
        imgact_elf::load(&mut cpu, &exe, image, path, argv, envp).map_err(ExecError::Elf)?;
        Ok(UserProcess {
            cpu,
            pid,
            ppid: 1,
            status: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            syscalls: 0,
            fault: None,
        })
    }

    /// Sets the parent's pid, which getpid(2) returns second.
    pub fn set_ppid(&mut self, ppid: i32) {
        self.ppid = ppid;
    }

    /// The CPU the process runs on (to subscribe to its events).
    pub fn cpu(&mut self) -> &mut Cpu {
        &mut self.cpu
    }

    /// The instruction set.
    pub fn arch(&self) -> Arch {
        self.cpu.arch()
    }

    /// What it wrote to descriptor 1.
    pub fn stdout(&self) -> &[u8] {
        &self.stdout
    }

    /// What it wrote to descriptor 2.
    pub fn stderr(&self) -> &[u8] {
        &self.stderr
    }

    /// System calls it made.
    pub fn syscalls(&self) -> u64 {
        self.syscalls
    }

    /// The fault that ended it, with the faulting PC.
    pub fn fault(&self) -> Option<(u64, Fault)> {
        self.fault
    }

    /// How it ended, once it has.
    pub fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Runs until the next system call or fault and serves it; returns the
    /// exit status once the process has ended.
    pub fn run_to_kernel_entry(&mut self) -> Result<Option<ExitStatus>, CpuError> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        match self.cpu.run()? {
            Stop::Syscall => self.syscall(),
            Stop::Fault { pc, fault } => self.end_by_fault(pc, fault),
        }
        Ok(self.status)
    }

    /// Runs one instruction (serving the system call it makes, or ending
    /// the process on its fault); returns the exit status once the
    /// process has ended.
    pub fn step(&mut self) -> Result<Option<ExitStatus>, CpuError> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        match self.cpu.step()? {
            None => {}
            Some(Stop::Syscall) => self.syscall(),
            Some(Stop::Fault { pc, fault }) => self.end_by_fault(pc, fault),
        }
        Ok(self.status)
    }

    fn end_by_fault(&mut self, pc: u64, fault: Fault) {
        self.fault = Some((pc, fault));
        self.status = Some(ExitStatus::Signaled(signal_for(self.cpu.arch(), fault)));
    }

    /// Runs the process to its end.
    pub fn run(&mut self) -> Result<ExitStatus, CpuError> {
        loop {
            if let Some(status) = self.run_to_kernel_entry()? {
                return Ok(status);
            }
        }
    }

    fn syscall(&mut self) {
        self.syscalls += 1;
        let req = self.cpu.syscall_request();
        let result = match req.number {
            sys::EXIT => {
                self.status = Some(ExitStatus::Exited(i32::from(req.args[0] as u8)));
                return;
            }
            sys::WRITE => self.write(req.args[0], req.args[1], req.args[2]),
            // The parent's pid in the second register, as FreeBSD's
            // getpid does with COMPAT_43 (GENERIC has it).
            sys::GETPID => Ok([self.pid as u64, self.ppid as u64]),
            sys::SCHED_YIELD => Ok([0, 0]),
            _ => {
                // nosys: SIGSYS, whose default action ends the process.
                self.status = Some(ExitStatus::Signaled(signal::SIGSYS));
                return;
            }
        };
        self.cpu.set_syscall_result(result);
    }

    fn write(&mut self, fd: u64, buf: u64, len: u64) -> Result<[u64; 2], i32> {
        let out = match fd {
            1 => &mut self.stdout,
            2 => &mut self.stderr,
            _ => return Err(errno::EBADF),
        };
        if len > MAX_WRITE {
            return Err(errno::EINVAL);
        }
        let mut bytes = vec![0u8; len as usize];
        self.cpu.read(buf, &mut bytes).map_err(|_| errno::EFAULT)?;
        out.extend_from_slice(&bytes);
        Ok([len, 0])
    }
}

/// The signal FreeBSD's trap handler sends for a user-mode fault.
fn signal_for(arch: Arch, fault: Fault) -> i32 {
    match fault {
        // Both an unmapped page and a protection violation are SIGSEGV
        // (the latter with SEGV_ACCERR).
        Fault::Unmapped { .. } | Fault::Protection { .. } => signal::SIGSEGV,
        Fault::IllegalInstruction => signal::SIGILL,
        Fault::Exception { vector } => match (arch, vector) {
            // #DE divide error, #MF and #XM floating point.
            (Arch::X86_64, 0 | 16 | 19) => signal::SIGFPE,
            // #DB, #BP.
            (Arch::X86_64, 1 | 3) => signal::SIGTRAP,
            // #GP, #SS, #NP and #AC: FreeBSD sends SIGBUS.
            (Arch::X86_64, 11 | 12 | 13 | 17) => signal::SIGBUS,
            // AArch64 breakpoint (QEMU's EXCP_BKPT).
            (Arch::Aarch64, 7) => signal::SIGTRAP,
            _ => signal::SIGILL,
        },
    }
}

/// wait(2)'s encoding of how a process ended (`W_EXITCODE`, or the signal
/// number).
pub fn wait_status(status: ExitStatus) -> i32 {
    match status {
        ExitStatus::Exited(code) => (code & 0xff) << 8,
        ExitStatus::Signaled(sig) => sig & 0x7f,
    }
}

/// The simulated kernel's path through a system call, outermost first,
/// on each architecture: the entry code, the trap handler, then the
/// system call's own function.
fn entry_path(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::X86_64 => &["Xfast_syscall", "amd64_syscall"],
        Arch::Aarch64 => &["handle_el0_sync", "do_el0_sync", "svc_handler"],
    }
}

/// The kernel function that serves system call `number` (`nosys` for
/// the ones not implemented), and its cost in instructions of kernel work
/// for a call with arguments `args`, entry and return included.
///
/// The cost model: 150 instructions to enter and leave the kernel, plus
/// the call's own work: 20 for getpid, 400 for sched_yield (a pass of the
/// scheduler), 250 for write plus one per 8 bytes copied, 300 for exit,
/// 50 for nosys.
pub fn syscall_handler(number: u64, args: &[u64; 6]) -> (&'static str, u64) {
    const ENTRY_AND_RETURN: u64 = 150;
    let (name, work) = match number {
        sys::EXIT => ("sys_exit", 300),
        sys::WRITE => ("sys_write", 250 + args[2].min(MAX_WRITE) / 8),
        sys::GETPID => ("sys_getpid", 20),
        sys::SCHED_YIELD => ("sys_sched_yield", 400),
        _ => ("nosys", 50),
    };
    (name, ENTRY_AND_RETURN + work)
}

/// The simulated kernel (`/boot/kernel/kernel`, linked at
/// [`crate::elf::KERNEL_BASE`]): an image with symbols for the functions
/// that system calls and the clock interrupt pass through, on both
/// architectures.
pub fn kernel_image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let mut b = ImageBuilder::new("/boot/kernel/kernel", ImageKind::Kernel);
        for name in entry_path(Arch::X86_64)
            .iter()
            .chain(entry_path(Arch::Aarch64))
            .chain(&[
                "sys_exit",
                "sys_write",
                "sys_getpid",
                "sys_sched_yield",
                "nosys",
                "hardclock",
            ])
        {
            b.function(name, 256);
        }
        b.build()
    })
}

/// A PC at `fraction` (in 1/1024ths) of the way through the body of
/// kernel function `name`.
fn kernel_pc(name: &str, fraction: u64) -> u64 {
    let f = kernel_image()
        .function(name)
        .expect("the kernel image has every function the entry path names");
    let body = f.size - PROLOGUE.len() as u64 - 2;
    f.start + PROLOGUE.len() as u64 + fraction.min(1023) * body / 1024
}

/// The system call a thread is in the kernel for.
#[derive(Debug, Clone, Copy)]
struct KernelWork {
    handler: &'static str,
    done: u64,
    total: u64,
}

/// A thread of the machine that runs a real program: the [`Activity`]
/// that [`crate::Machine::exec_program`] gives it. Each clock tick runs
/// `insns_per_tick` instructions, user and kernel together: a system call
/// stops the CPU, is served at once, and then costs its kernel work
/// ([`syscall_handler`]) out of the tick, carried over into the next tick
/// when the tick ends first.
#[derive(Debug)]
pub struct UserThread {
    process: UserProcess,
    insns_per_tick: u64,
    in_kernel: Option<KernelWork>,
    user_instructions: u64,
    kernel_instructions: u64,
    error: Option<CpuError>,
}

impl UserThread {
    /// The thread of `process`, running `insns_per_tick` instructions a
    /// tick (at least one).
    pub fn new(process: UserProcess, insns_per_tick: u64) -> UserThread {
        UserThread {
            process,
            insns_per_tick: insns_per_tick.max(1),
            in_kernel: None,
            user_instructions: 0,
            kernel_instructions: 0,
            error: None,
        }
    }

    /// The process it runs.
    pub fn process(&self) -> &UserProcess {
        &self.process
    }

    /// The process, to subscribe to its CPU's events.
    pub fn process_mut(&mut self) -> &mut UserProcess {
        &mut self.process
    }

    /// Instructions retired in user mode so far.
    pub fn user_instructions(&self) -> u64 {
        self.user_instructions
    }

    /// Instructions of kernel work spent in system calls so far.
    pub fn kernel_instructions(&self) -> u64 {
        self.kernel_instructions
    }

    /// The emulator's failure that ended the thread, if one did (the
    /// process then ends with SIGKILL).
    pub fn emulator_error(&self) -> Option<&CpuError> {
        self.error.as_ref()
    }

    fn user_regs(&self) -> UserRegs {
        let cpu = &self.process.cpu;
        UserRegs {
            arch: cpu.arch().name(),
            pc: cpu.pc(),
            fp: cpu.frame_pointer(),
            sp: cpu.sp(),
        }
    }

    /// Runs one tick's budget; returns where the thread is.
    fn run_budget(&mut self) {
        let mut left = self.insns_per_tick;
        while left > 0 && self.process.status.is_none() {
            if let Some(k) = self.in_kernel.as_mut() {
                let n = left.min(k.total - k.done);
                k.done += n;
                left -= n;
                self.kernel_instructions += n;
                if k.done == k.total {
                    self.in_kernel = None;
                }
                continue;
            }
            let run = match self.process.cpu.run_for(left) {
                Ok(run) => run,
                Err(e) => {
                    self.error = Some(e);
                    self.process.status = Some(ExitStatus::Signaled(signal::SIGKILL));
                    return;
                }
            };
            left -= run.retired.min(left);
            self.user_instructions += run.retired;
            match run.stop {
                None => {}
                Some(Stop::Syscall) => {
                    let req = self.process.cpu.syscall_request();
                    let (handler, total) = syscall_handler(req.number, &req.args);
                    self.process.syscall();
                    self.in_kernel = Some(KernelWork {
                        handler,
                        done: 0,
                        total,
                    });
                }
                Some(Stop::Fault { pc, fault }) => self.process.end_by_fault(pc, fault),
            }
        }
    }

    fn location(&self) -> Location {
        let regs = self.user_regs();
        match self.in_kernel {
            Some(k) if self.process.status.is_none() => {
                let path = entry_path(self.process.arch());
                // Innermost first: the handler where the work has got to,
                // then the return addresses into the entry path (a fixed
                // call site half-way through each function).
                let mut kernel_stack = vec![kernel_pc(k.handler, k.done * 1024 / k.total)];
                kernel_stack.extend(path.iter().rev().map(|f| kernel_pc(f, 512)));
                Location {
                    user_mode: false,
                    kernel_stack,
                    user_stack: Vec::new(),
                    user_regs: Some(regs),
                }
            }
            _ => Location {
                user_mode: true,
                kernel_stack: Vec::new(),
                user_stack: Vec::new(),
                user_regs: Some(regs),
            },
        }
    }
}

impl Activity for UserThread {
    fn step(&mut self) -> Location {
        self.tick_on(0)
    }

    fn tick_on(&mut self, cpu: u32) -> Location {
        self.process.cpu.set_id(cpu);
        self.run_budget();
        self.location()
    }

    fn copyin(&self, addr: u64, buf: &mut [u8]) -> Option<bool> {
        Some(self.process.cpu.read(addr, buf).is_ok())
    }

    fn ended(&self) -> Option<i32> {
        self.process.status.map(wait_status)
    }
}

//! A user process that runs a real program on a [`Cpu`]: loaded from its
//! ELF file by [`crate::imgact_elf`], with the FreeBSD system calls it
//! makes served here under FreeBSD's numbers (sys/kern/syscalls.master)
//! and conventions, and its faults turned into the signals FreeBSD's
//! trap handlers send. Signals are not caught: a signal ends the process,
//! as their default action does.
//!
//! This is the CPU-side half of a simulated process; tying it to the
//! machine's processes, scheduler and clock is still to come.

use crate::cpu::{Arch, Cpu, CpuError, Fault, Stop};
use crate::imgact_elf::{self, ElfError};

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

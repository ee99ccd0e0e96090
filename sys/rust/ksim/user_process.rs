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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::cpu::{
    Arch, Cpu, CpuError, FastSyscalls, Fault, PAGE_SIZE, Prot, Stop, SyscallRequest, UserMemory,
};
use crate::elf::{Image, ImageBuilder, ImageKind, PROLOGUE};
use crate::imgact_elf::{self, ElfError};
use crate::machine::{Activity, KernelRequest, Location, TickContext, UserRegs};

/// FreeBSD's system call numbers, of the calls implemented here.
pub mod sys {
    /// exit(2).
    pub const EXIT: u64 = 1;
    /// read(2).
    pub const READ: u64 = 3;
    /// write(2).
    pub const WRITE: u64 = 4;
    /// open(2).
    pub const OPEN: u64 = 5;
    /// close(2).
    pub const CLOSE: u64 = 6;
    /// getpid(2).
    pub const GETPID: u64 = 20;
    /// munmap(2).
    pub const MUNMAP: u64 = 73;
    /// sched_yield(2).
    pub const SCHED_YIELD: u64 = 331;
    /// The first number of the kernel modules' system calls (FreeBSD's
    /// lkmnosys slots, which kldload'ed modules such as hwpmc take).
    pub const MODULE_FIRST: u64 = 210;
    /// The last.
    pub const MODULE_LAST: u64 = 219;
    /// thr_exit(2).
    pub const THR_EXIT: u64 = 431;
    /// thr_new(2).
    pub const THR_NEW: u64 = 455;
    /// mmap(2).
    pub const MMAP: u64 = 477;
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
    /// No such file or directory.
    pub const ENOENT: i32 = 2;
    /// Bad file descriptor.
    pub const EBADF: i32 = 9;
    /// Resource temporarily unavailable.
    pub const EAGAIN: i32 = 35;
    /// Cannot allocate memory.
    pub const ENOMEM: i32 = 12;
    /// Read-only file system.
    pub const EROFS: i32 = 30;
    /// File name too long.
    pub const ENAMETOOLONG: i32 = 63;
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

/// What a thread wrote to its descriptors (fd, bytes), shared with the
/// fast system call path that serves write in the emulator's hook.
type SharedOutput = Arc<Mutex<Vec<(i32, Vec<u8>)>>>;

/// The system calls served without stopping the CPU: getpid(2) and
/// sched_yield(2), which only read the process's ids or give up the CPU
/// (a no-op for a thread that the clock preempts anyway), and write(2) to
/// descriptors 1 and 2, with the kernel work [`syscall_handler`] gives
/// them. A write's output goes to the process's at once and waits in
/// `output` for the thread to pass it to the machine when the run stops
/// ([`UserProcess::pass_fast_output`]), before anything the stop asks for.
#[derive(Debug)]
struct FastPath {
    pid: i32,
    ppid: i32,
    shared: Arc<Mutex<ProcShared>>,
    output: SharedOutput,
}

impl FastSyscalls for FastPath {
    fn fast_cost(&self, req: &SyscallRequest) -> Option<u64> {
        let fast = match req.number {
            sys::GETPID | sys::SCHED_YIELD => true,
            sys::WRITE => matches!(req.args[0], 1 | 2) && req.args[2] <= MAX_WRITE,
            _ => false,
        };
        fast.then(|| syscall_handler(req.number, &req.args).1)
    }

    fn serve(&mut self, req: &SyscallRequest, mem: &UserMemory<'_>) -> Result<[u64; 2], i32> {
        // As in UserProcess::syscall.
        match req.number {
            sys::GETPID => Ok([self.pid as u64, self.ppid as u64]),
            sys::WRITE => {
                let [fd, buf, len, ..] = req.args;
                let mut bytes = vec![0u8; len as usize];
                mem.copyin(buf, &mut bytes).map_err(|_| errno::EFAULT)?;
                let mut sh = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
                if fd == 1 {
                    sh.stdout.extend_from_slice(&bytes);
                } else {
                    sh.stderr.extend_from_slice(&bytes);
                }
                drop(sh);
                self.output
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((fd as i32, bytes));
                Ok([len, 0])
            }
            _ => Ok([0, 0]),
        }
    }
}

/// What the threads of a process share: its descriptors, its output
/// and how it ended.
#[derive(Debug, Default)]
struct ProcShared {
    status: Option<ExitStatus>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    files: BTreeMap<i32, OpenFile>,
    /// Executable mappings of files, for munmap's PMC_FN_MUNMAP.
    exec_maps: Vec<(u64, u64)>,
}

/// A file opened with open(2): read-only, from the machine's files.
#[derive(Debug)]
struct OpenFile {
    path: String,
    bytes: Vec<u8>,
    offset: u64,
}

/// A thread of a process running a program on a CPU of its own (the
/// registers and the engine; the address space and the rest are the
/// process's, shared by its threads).
#[derive(Debug)]
pub struct UserProcess {
    cpu: Cpu,
    pid: i32,
    ppid: i32,
    shared: Arc<Mutex<ProcShared>>,
    /// What write(2) served in the emulator's hook put out, for the
    /// machine (the thread's [`FastPath`] fills it).
    fast_output: SharedOutput,
    /// The thread called thr_exit(2).
    thread_exited: bool,
    /// The thread waits in the kernel for a module's system call
    /// ([`KernelRequest::ModuleSyscall`]).
    awaiting_module: bool,
    syscalls: u64,
    fault: Option<(u64, Fault)>,
}

/// The lowest address mmap(2) picks without MAP_FIXED.
const MMAP_BASE: u64 = 0x0000_0008_0000_0000;
/// The largest mmap(2) served: a simulated process's memory is host
/// memory, so a mapping larger than this fails with ENOMEM, as one past
/// the process's resource limit does.
const MAX_MMAP: u64 = 256 << 20;
/// The longest path open(2) reads (MAXPATHLEN).
const MAXPATHLEN: usize = 1024;

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
        let mut p = UserProcess {
            cpu,
            pid,
            ppid: 1,
            shared: Arc::default(),
            fast_output: Arc::default(),
            thread_exited: false,
            awaiting_module: false,
            syscalls: 0,
            fault: None,
        };
        p.set_fast_path();
        Ok(p)
    }

    /// Serves the short system calls in the CPU's hook ([`FastPath`]).
    fn set_fast_path(&mut self) {
        let fast = FastPath {
            pid: self.pid,
            ppid: self.ppid,
            shared: self.shared.clone(),
            output: self.fast_output.clone(),
        };
        self.cpu.set_fast_syscalls(Some(Box::new(fast)));
    }

    /// Passes what write(2) served in the hook put out to the machine, in
    /// order: after a run, before what its stop asks for.
    fn pass_fast_output(&mut self, ctx: &mut TickContext<'_>) {
        let output = std::mem::take(
            &mut *self
                .fast_output
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (fd, bytes) in output {
            ctx.request(KernelRequest::Output { fd, bytes });
        }
    }

    fn shared(&self) -> MutexGuard<'_, ProcShared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the parent's pid, which getpid(2) returns second.
    pub fn set_ppid(&mut self, ppid: i32) {
        self.ppid = ppid;
        self.set_fast_path();
    }

    /// The CPU the process runs on (to subscribe to its events).
    pub fn cpu(&mut self) -> &mut Cpu {
        &mut self.cpu
    }

    /// The instruction set.
    pub fn arch(&self) -> Arch {
        self.cpu.arch()
    }

    /// What the process wrote to descriptor 1.
    pub fn stdout(&self) -> Vec<u8> {
        self.shared().stdout.clone()
    }

    /// What the process wrote to descriptor 2.
    pub fn stderr(&self) -> Vec<u8> {
        self.shared().stderr.clone()
    }

    /// System calls this thread made.
    pub fn syscalls(&self) -> u64 {
        self.syscalls + self.cpu.fast_syscalls_served()
    }

    /// The fault that ended the process in this thread, with the
    /// faulting PC.
    pub fn fault(&self) -> Option<(u64, Fault)> {
        self.fault
    }

    /// How the process ended, once it has.
    pub fn status(&self) -> Option<ExitStatus> {
        self.shared().status
    }

    /// Whether this thread has ended: by thr_exit(2), or with its process.
    pub fn thread_ended(&self) -> bool {
        self.thread_exited || self.status().is_some()
    }

    fn end(&mut self, status: ExitStatus) {
        let mut sh = self.shared();
        if sh.status.is_none() {
            sh.status = Some(status);
        }
    }

    /// Runs until the next system call or fault and serves it; returns the
    /// exit status once the process has ended. Without a machine around
    /// it there are no files and no other threads: open(2) fails with
    /// ENOENT and thr_new(2) with EAGAIN.
    pub fn run_to_kernel_entry(&mut self) -> Result<Option<ExitStatus>, CpuError> {
        if self.thread_ended() {
            return Ok(self.status());
        }
        let stop = self.cpu.run()?;
        let mut ctx = TickContext::standalone(0);
        self.pass_fast_output(&mut ctx);
        match stop {
            Stop::Syscall => self.syscall(&mut ctx),
            Stop::Fault { pc, fault } => self.end_by_fault(pc, fault),
        }
        Ok(self.status())
    }

    /// Runs one instruction (serving the system call it makes, or ending
    /// the process on its fault); returns the exit status once the
    /// process has ended.
    pub fn step(&mut self) -> Result<Option<ExitStatus>, CpuError> {
        if self.thread_ended() {
            return Ok(self.status());
        }
        let stop = self.cpu.step()?;
        let mut ctx = TickContext::standalone(0);
        self.pass_fast_output(&mut ctx);
        match stop {
            None => {}
            Some(Stop::Syscall) => self.syscall(&mut ctx),
            Some(Stop::Fault { pc, fault }) => self.end_by_fault(pc, fault),
        }
        Ok(self.status())
    }

    fn end_by_fault(&mut self, pc: u64, fault: Fault) {
        self.fault = Some((pc, fault));
        self.end(ExitStatus::Signaled(signal_for(self.cpu.arch(), fault)));
    }

    /// Runs the process to its end (a single-threaded one: see
    /// [`UserProcess::run_to_kernel_entry`]).
    pub fn run(&mut self) -> Result<ExitStatus, CpuError> {
        loop {
            if let Some(status) = self.run_to_kernel_entry()? {
                return Ok(status);
            }
            if self.thread_exited {
                // thr_exit of the only thread: the process exits with 0.
                self.end(ExitStatus::Exited(0));
            }
        }
    }

    /// Makes system call `req` as if the program had, with the kernel
    /// `ctx` offers: the result the program would read, or None when the
    /// call ended the thread or the process (exit, thr_exit, SIGSYS).
    pub fn make_syscall(
        &mut self,
        req: &SyscallRequest,
        ctx: &mut TickContext<'_>,
    ) -> Option<Result<[u64; 2], i32>> {
        if self.thread_ended() {
            return None;
        }
        self.cpu.set_syscall_request(req);
        self.syscall(ctx);
        (!self.thread_ended()).then(|| self.cpu.syscall_result())
    }

    fn syscall(&mut self, ctx: &mut TickContext<'_>) {
        self.syscalls += 1;
        let req = self.cpu.syscall_request();
        let a = req.args;
        let result = match req.number {
            sys::EXIT => {
                self.end(ExitStatus::Exited(i32::from(a[0] as u8)));
                return;
            }
            sys::READ => self.read(a[0], a[1], a[2]),
            sys::WRITE => self.write(a[0], a[1], a[2], ctx),
            sys::OPEN => self.open(a[0], a[1], ctx),
            sys::CLOSE => self.close(a[0]),
            // The parent's pid in the second register, as FreeBSD's
            // getpid does with COMPAT_43 (GENERIC has it).
            sys::GETPID => Ok([self.pid as u64, self.ppid as u64]),
            sys::MUNMAP => self.munmap(a[0], a[1], ctx),
            sys::SCHED_YIELD => Ok([0, 0]),
            sys::THR_EXIT => {
                if a[0] != 0 {
                    // The kernel stores 1 in *state for thread joiners;
                    // a bad address is ignored, as suword's failure is.
                    let _ = self.cpu.write_user(a[0], &1u64.to_le_bytes());
                }
                self.thread_exited = true;
                ctx.request(KernelRequest::ThreadExit);
                return;
            }
            sys::THR_NEW => self.thr_new(a[0], a[1], ctx),
            sys::MMAP => self.mmap([a[0], a[1], a[2], a[3], a[4], a[5]], ctx),
            // A kernel module's (hwpmc's): the machine serves it after
            // the tick; the thread waits in the kernel for the result.
            n @ sys::MODULE_FIRST..=sys::MODULE_LAST => {
                ctx.request(KernelRequest::ModuleSyscall {
                    number: n as u32,
                    args: a,
                });
                self.awaiting_module = true;
                return;
            }
            _ => {
                // nosys: SIGSYS, whose default action ends the process.
                self.end(ExitStatus::Signaled(signal::SIGSYS));
                return;
            }
        };
        self.cpu.set_syscall_result(result);
    }

    /// write(2) to descriptor 1 or 2: the bytes go to the process's
    /// output and, as a request, to the machine's record of it.
    fn write(
        &mut self,
        fd: u64,
        buf: u64,
        len: u64,
        ctx: &mut TickContext<'_>,
    ) -> Result<[u64; 2], i32> {
        // Descriptors 1 and 2 are the output; the others are files
        // opened read-only, or none.
        if fd != 1 && fd != 2 {
            return Err(errno::EBADF);
        }
        if len > MAX_WRITE {
            return Err(errno::EINVAL);
        }
        let mut bytes = vec![0u8; len as usize];
        self.cpu
            .read_user(buf, &mut bytes)
            .map_err(|_| errno::EFAULT)?;
        let mut sh = self.shared();
        let out = if fd == 1 {
            &mut sh.stdout
        } else {
            &mut sh.stderr
        };
        out.extend_from_slice(&bytes);
        drop(sh);
        ctx.request(KernelRequest::Output {
            fd: fd as i32,
            bytes,
        });
        Ok([len, 0])
    }

    fn read(&mut self, fd: u64, buf: u64, len: u64) -> Result<[u64; 2], i32> {
        if len > MAX_WRITE {
            return Err(errno::EINVAL);
        }
        let chunk = {
            let sh = self.shared();
            let f = sh.files.get(&(fd as i32)).ok_or(errno::EBADF)?;
            let start = (f.offset as usize).min(f.bytes.len());
            let end = start.saturating_add(len as usize).min(f.bytes.len());
            f.bytes[start..end].to_vec()
        };
        self.cpu
            .write_user(buf, &chunk)
            .map_err(|_| errno::EFAULT)?;
        if let Some(f) = self.shared().files.get_mut(&(fd as i32)) {
            f.offset += chunk.len() as u64;
        }
        Ok([chunk.len() as u64, 0])
    }

    /// A NUL-terminated string of user memory (copyinstr).
    fn user_string(&self, addr: u64) -> Result<String, i32> {
        let mut out = Vec::new();
        let mut byte = [0u8];
        loop {
            self.cpu
                .read_user(addr + out.len() as u64, &mut byte)
                .map_err(|_| errno::EFAULT)?;
            if byte[0] == 0 {
                return String::from_utf8(out).map_err(|_| errno::ENOENT);
            }
            out.push(byte[0]);
            if out.len() >= MAXPATHLEN {
                return Err(errno::ENAMETOOLONG);
            }
        }
    }

    fn open(&mut self, path: u64, flags: u64, ctx: &TickContext<'_>) -> Result<[u64; 2], i32> {
        const O_ACCMODE: u64 = 3;
        let path = self.user_string(path)?;
        let bytes = ctx.read_file(&path).ok_or(errno::ENOENT)?.to_vec();
        if flags & O_ACCMODE != 0 {
            // The machine's files are read-only to programs.
            return Err(errno::EROFS);
        }
        let mut sh = self.shared();
        let fd = (3..).find(|fd| !sh.files.contains_key(fd)).unwrap_or(3);
        sh.files.insert(
            fd,
            OpenFile {
                path,
                bytes,
                offset: 0,
            },
        );
        Ok([fd as u64, 0])
    }

    fn close(&mut self, fd: u64) -> Result<[u64; 2], i32> {
        match self.shared().files.remove(&(fd as i32)) {
            Some(_) => Ok([0, 0]),
            None if fd <= 2 => Ok([0, 0]),
            None => Err(errno::EBADF),
        }
    }

    /// mmap(addr, len, prot, flags, fd, pos): anonymous memory, or a
    /// private copy of a file's bytes; an executable mapping of a file is
    /// reported to the machine (PMC_FN_MMAP).
    fn mmap(&mut self, a: [u64; 6], ctx: &mut TickContext<'_>) -> Result<[u64; 2], i32> {
        const PROT_READ: u64 = 1;
        const PROT_WRITE: u64 = 2;
        const PROT_EXEC: u64 = 4;
        const MAP_FIXED: u64 = 0x10;
        const MAP_ANON: u64 = 0x1000;
        let [addr, len, prot, flags, fd, pos] = a;
        // prot, flags and fd are C ints: only their low 32 bits count.
        let (prot, flags, fd) = (prot & 0xffff_ffff, flags & 0xffff_ffff, fd as i32);
        if len == 0 || prot & !(PROT_READ | PROT_WRITE | PROT_EXEC) != 0 {
            return Err(errno::EINVAL);
        }
        let size = len
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or(errno::ENOMEM)?;
        if size > MAX_MMAP {
            return Err(errno::ENOMEM);
        }
        let file = if flags & MAP_ANON != 0 {
            if fd != -1 || pos != 0 {
                return Err(errno::EINVAL);
            }
            None
        } else {
            if pos % PAGE_SIZE != 0 {
                return Err(errno::EINVAL);
            }
            let sh = self.shared();
            let f = sh.files.get(&fd).ok_or(errno::EBADF)?;
            let start = (pos as usize).min(f.bytes.len());
            let end = start.saturating_add(len as usize).min(f.bytes.len());
            Some((f.path.clone(), f.bytes[start..end].to_vec()))
        };
        let at = if flags & MAP_FIXED != 0 {
            if addr % PAGE_SIZE != 0 {
                return Err(errno::EINVAL);
            }
            let _ = self.cpu.unmap_holes(addr, size);
            addr
        } else {
            self.cpu
                .find_free(addr.max(MMAP_BASE), size)
                .ok_or(errno::ENOMEM)?
        };
        let rw = Prot::READ.union(Prot::WRITE);
        self.cpu.map(at, size, rw).map_err(|_| errno::ENOMEM)?;
        if let Some((_, bytes)) = &file {
            self.cpu.write(at, bytes).map_err(|_| errno::EFAULT)?;
        }
        let mut want = Prot::NONE;
        for (bit, p) in [
            (PROT_READ, Prot::READ),
            (PROT_WRITE, Prot::WRITE),
            (PROT_EXEC, Prot::EXEC),
        ] {
            if prot & bit != 0 {
                want = want.union(p);
            }
        }
        self.cpu
            .protect(at, size, want)
            .map_err(|_| errno::ENOMEM)?;
        if let (Some((path, _)), true) = (file, prot & PROT_EXEC != 0) {
            self.shared().exec_maps.push((at, at + size));
            ctx.request(KernelRequest::Mmap {
                path,
                addr: at,
                len: size,
            });
        }
        Ok([at, 0])
    }

    fn munmap(&mut self, addr: u64, len: u64, ctx: &mut TickContext<'_>) -> Result<[u64; 2], i32> {
        if addr % PAGE_SIZE != 0 || len == 0 {
            return Err(errno::EINVAL);
        }
        let size = len
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or(errno::EINVAL)?;
        let end = addr.checked_add(size).ok_or(errno::EINVAL)?;
        self.cpu
            .unmap_holes(addr, size)
            .map_err(|_| errno::EINVAL)?;
        let executable = {
            let mut sh = self.shared();
            let before = sh.exec_maps.len();
            sh.exec_maps.retain(|&(s, e)| e <= addr || s >= end);
            sh.exec_maps.len() != before
        };
        if executable {
            ctx.request(KernelRequest::Munmap { addr, len: size });
        }
        Ok([0, 0])
    }

    /// thr_new(param, param_size): a thread of this process starting at
    /// `start_func(arg)` on the stack the parameters give, set up as
    /// FreeBSD's cpu_set_upcall does.
    fn thr_new(
        &mut self,
        param: u64,
        size: u64,
        ctx: &mut TickContext<'_>,
    ) -> Result<[u64; 2], i32> {
        const THR_PARAM_SIZE: u64 = 104;
        if size > THR_PARAM_SIZE {
            return Err(errno::EINVAL);
        }
        let mut raw = [0u8; THR_PARAM_SIZE as usize];
        self.cpu
            .read_user(param, &mut raw[..size as usize])
            .map_err(|_| errno::EFAULT)?;
        let word =
            |i: usize| u64::from_le_bytes(raw[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let (start, arg, stack_base, stack_size) = (word(0), word(1), word(2), word(3));
        let (child_tid, parent_tid) = (word(6), word(7));
        let tid = ctx.new_tid().ok_or(errno::EAGAIN)?;
        let mut cpu = self.cpu.new_thread(ctx.cpu()).map_err(|_| errno::ENOMEM)?;
        cpu.set_thread_registers(start, arg, stack_base.wrapping_add(stack_size));
        for at in [child_tid, parent_tid] {
            if at != 0 {
                self.cpu
                    .write_user(at, &u64::from(tid).to_le_bytes())
                    .map_err(|_| errno::EFAULT)?;
            }
        }
        let mut thread = UserProcess {
            cpu,
            pid: self.pid,
            ppid: self.ppid,
            shared: self.shared.clone(),
            fast_output: Arc::default(),
            thread_exited: false,
            awaiting_module: false,
            syscalls: 0,
            fault: None,
        };
        thread.set_fast_path();
        ctx.request(KernelRequest::NewThread {
            tid,
            activity: Box::new(UserThread::new(thread, ctx.insns_per_tick())),
        });
        Ok([0, 0])
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
/// the call's own work: 20 for getpid, 100 for close, 400 for sched_yield
/// (a pass of the scheduler) and munmap, 250 for read and write plus one
/// per 8 bytes copied, 300 for exit, 500 for thr_exit, 600 for mmap plus
/// one per 64 bytes mapped, 800 for open (a path lookup), 1500 for
/// thr_new, 50 for nosys.
pub fn syscall_handler(number: u64, args: &[u64; 6]) -> (&'static str, u64) {
    const ENTRY_AND_RETURN: u64 = 150;
    let (name, work) = match number {
        sys::EXIT => ("sys_exit", 300),
        sys::READ => ("sys_read", 250 + args[2].min(MAX_WRITE) / 8),
        sys::WRITE => ("sys_write", 250 + args[2].min(MAX_WRITE) / 8),
        sys::OPEN => ("sys_open", 800),
        sys::CLOSE => ("sys_close", 100),
        sys::GETPID => ("sys_getpid", 20),
        sys::MUNMAP => ("sys_munmap", 400),
        sys::SCHED_YIELD => ("sys_sched_yield", 400),
        sys::THR_EXIT => ("sys_thr_exit", 500),
        sys::THR_NEW => ("sys_thr_new", 1500),
        sys::MMAP => ("sys_mmap", 600 + args[1].min(MAX_WRITE) / 64),
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
                "sys_read",
                "sys_write",
                "sys_open",
                "sys_close",
                "sys_getpid",
                "sys_munmap",
                "sys_sched_yield",
                "sys_thr_exit",
                "sys_thr_new",
                "sys_mmap",
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
    /// What a PMI left of the tick's budget.
    left_in_tick: u64,
    /// The subscription that feeds the machine's PMUs, while one counts.
    pmu_feed: Option<crate::cpu::events::SubscriberId>,
    /// The subscription that feeds the machine's PT unit, while it traces.
    pt_feed: Option<crate::cpu::events::SubscriberId>,
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
            left_in_tick: 0,
            pmu_feed: None,
            pt_feed: None,
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

    /// Feeds the CPU's instructions to the machine's PMUs while a
    /// counter of the CPU counts, and installs no hook otherwise. While
    /// they count, every system call stops the CPU, so that its kernel
    /// work reaches them ([`Self::run_budget`] feeds it; the calls served
    /// inside the emulator's hook would not count in OS mode).
    fn sync_pmu_feed(&mut self, ctx: &TickContext<'_>) {
        let Some(pmus) = ctx.pmus() else {
            return;
        };
        let want = pmus.counting(ctx.cpu());
        match (want, self.pmu_feed) {
            (true, None) => {
                if let Ok(id) = self.process.cpu.subscribe(Box::new(pmus.feed())) {
                    self.pmu_feed = Some(id);
                    self.process.cpu.hold_fast_syscalls(true);
                }
            }
            (false, Some(id)) => {
                self.process.cpu.unsubscribe(id);
                self.pmu_feed = None;
                self.process.cpu.hold_fast_syscalls(false);
            }
            _ => {}
        }
    }

    /// Feeds the CPU's instructions to the machine's Intel PT unit while
    /// it traces (TraceEn, which only the kernel sets, between ticks).
    fn sync_pt_feed(&mut self, ctx: &TickContext<'_>) {
        let Some(pts) = ctx.pts() else {
            return;
        };
        let want = pts.tracing(ctx.cpu());
        match (want, self.pt_feed) {
            (true, None) => {
                if let Ok(id) = self.process.cpu.subscribe(Box::new(pts.feed())) {
                    self.pt_feed = Some(id);
                }
            }
            (false, Some(id)) => {
                self.process.cpu.unsubscribe(id);
                self.pt_feed = None;
            }
            _ => {}
        }
    }

    /// Serves an `rdpmc` the emulator faulted on, as the CPU executes it
    /// when CR4.PCE is set: the counter's value from the machine's PMU.
    /// False (the fault stands: a #GP, SIGBUS) when the instruction is not
    /// `rdpmc`, user mode may not execute it, or the index names no
    /// counter. The instruction itself is not reported to subscribers.
    fn serve_rdpmc(&mut self, ctx: &TickContext<'_>) -> bool {
        let cpu = &mut self.process.cpu;
        if !ctx.user_rdpmc() || !cpu.at_rdpmc() {
            return false;
        }
        let Some(value) = ctx
            .pmus()
            .and_then(|p| p.rdpmc(ctx.cpu(), cpu.rdpmc_index()))
        else {
            return false;
        };
        cpu.complete_rdpmc(value);
        true
    }

    /// Whether a PMI waits on the CPU, which stops the tick: what is left
    /// of it is kept for the call that resumes it once the machine has
    /// taken the PMI.
    fn pmi_stops(&mut self, ctx: &TickContext<'_>, left: u64) -> bool {
        if ctx.pmus().is_some_and(|p| p.pmi_pending(ctx.cpu())) {
            self.left_in_tick = left;
            return true;
        }
        false
    }

    /// Runs one tick's budget (or the rest of one a PMI stopped).
    fn run_budget(&mut self, ctx: &mut TickContext<'_>) {
        let mut left = if ctx.resumes() {
            std::mem::take(&mut self.left_in_tick)
        } else {
            self.insns_per_tick
        };
        self.sync_pmu_feed(ctx);
        self.sync_pt_feed(ctx);
        while left > 0 && !self.process.thread_ended() {
            // In the kernel for a module's system call: the rest of the
            // tick is spent waiting (the machine serves it after the tick).
            if self.process.awaiting_module {
                return;
            }
            if let Some(k) = self.in_kernel.as_mut() {
                let mut n = left.min(k.total - k.done);
                if let Some(p) = ctx.pmus() {
                    n = p.kernel_work(ctx.cpu(), n);
                }
                k.done += n;
                left -= n;
                self.kernel_instructions += n;
                if k.done == k.total {
                    self.in_kernel = None;
                }
                if self.pmi_stops(ctx, left) {
                    return;
                }
                continue;
            }
            let run = self.process.cpu.run_for(left);
            self.process.pass_fast_output(ctx);
            let run = match run {
                Ok(run) => run,
                Err(e) => {
                    self.error = Some(e);
                    self.process.end(ExitStatus::Signaled(signal::SIGKILL));
                    return;
                }
            };
            left -= (run.retired + run.kernel_work).min(left);
            self.user_instructions += run.retired;
            self.kernel_instructions += run.kernel_work;
            match run.stop {
                None => {}
                Some(Stop::Syscall) => {
                    let req = self.process.cpu.syscall_request();
                    let (handler, total) = syscall_handler(req.number, &req.args);
                    self.process.syscall(ctx);
                    self.in_kernel = Some(KernelWork {
                        handler,
                        done: 0,
                        total,
                    });
                }
                Some(Stop::Fault { .. }) if self.serve_rdpmc(ctx) => {}
                Some(Stop::Fault { pc, fault }) => {
                    // A refused rdpmc is a #GP, whatever the emulator
                    // reported (FreeBSD sends SIGBUS).
                    let fault = if self.process.cpu.at_rdpmc() {
                        Fault::Exception { vector: 13 }
                    } else {
                        fault
                    };
                    self.process.end_by_fault(pc, fault);
                }
            }
            if self.pmi_stops(ctx, left) {
                return;
            }
        }
    }

    fn location(&self) -> Location {
        let regs = self.user_regs();
        match self.in_kernel {
            Some(k) if !self.process.thread_ended() => {
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
        self.tick_on(&mut TickContext::standalone(0))
    }

    fn tick_on(&mut self, ctx: &mut TickContext<'_>) -> Location {
        self.process.cpu.set_id(ctx.cpu());
        self.run_budget(ctx);
        self.location()
    }

    fn copyin(&self, addr: u64, buf: &mut [u8]) -> Option<bool> {
        Some(self.process.cpu.read_user(addr, buf).is_ok())
    }

    fn copyout(&mut self, addr: u64, data: &[u8]) -> Option<bool> {
        Some(self.process.cpu.write_user(addr, data).is_ok())
    }

    fn module_syscall_done(&mut self, result: Result<i64, i32>) {
        if std::mem::replace(&mut self.process.awaiting_module, false) {
            self.process
                .cpu
                .set_syscall_result(result.map(|v| [v as u64, 0]));
        }
    }

    fn ended(&self) -> Option<i32> {
        self.process.status().map(wait_status)
    }
}

/// The errno values the system calls served here may return.
pub const SYSCALL_ERRNOS: &[i32] = &[
    errno::ENOENT,
    errno::EBADF,
    errno::ENOMEM,
    errno::EFAULT,
    errno::EINVAL,
    errno::EROFS,
    errno::EAGAIN,
    errno::ENAMETOOLONG,
];

/// Replays system calls decoded from `bytes` against a fresh process of
/// `image` (fuzzing and random tests of the system call layer): each call
/// is a byte choosing the number, then a byte per argument choosing an
/// interesting value (addresses of mapped and unmapped memory, a path of
/// an existing file, sizes, flags, -1) or, for the high values, the next
/// eight bytes as the raw argument. Panics if a call panics, returns an
/// errno outside [`SYSCALL_ERRNOS`] or leaves the process in a state that
/// cannot run; returns the calls made.
pub fn replay_syscalls(image: &[u8], mut bytes: &[u8]) -> usize {
    const NUMBERS: [u64; 12] = [
        sys::READ,
        sys::WRITE,
        sys::OPEN,
        sys::CLOSE,
        sys::GETPID,
        sys::MUNMAP,
        sys::SCHED_YIELD,
        sys::THR_NEW,
        sys::MMAP,
        sys::THR_EXIT,
        sys::EXIT,
        9999,
    ];
    const PATH: &str = "/lib/replay.so";
    let mut p = UserProcess::exec(image, "/replay", &["replay"], &[], 42, 0).expect("exec");
    let text = imgact_elf::parse(image).expect("an executable").entry & !(PAGE_SIZE - 1);
    // A page of scratch memory with the file's path at its start, and
    // room for a thr_param after it.
    let scratch = 0x0000_0007_0000_0000;
    p.cpu
        .map(scratch, 4 * PAGE_SIZE, Prot::READ.union(Prot::WRITE))
        .expect("scratch memory");
    p.cpu
        .write(scratch, format!("{PATH}\0").as_bytes())
        .expect("scratch memory");
    let mut files = BTreeMap::new();
    files.insert(PATH.to_string(), (0..=255u8).cycle().take(9000).collect());
    let mut next_tid = 100_000;
    let interesting = [
        0,
        1,
        2,
        3,
        u64::MAX,
        scratch,
        scratch + 64,
        text,
        PAGE_SIZE,
        3 * PAGE_SIZE,
        104,
        0x1012,
        7,
        1 << 47,
        u64::MAX - PAGE_SIZE + 1,
        0x0000_0008_0000_0000,
    ];
    let mut calls = 0;
    while let Some((&pick, rest)) = bytes.split_first() {
        bytes = rest;
        let number = NUMBERS[usize::from(pick) % NUMBERS.len()];
        let mut args = [0u64; 6];
        for a in &mut args {
            let Some((&sel, rest)) = bytes.split_first() else {
                break;
            };
            bytes = rest;
            *a = match interesting.get(usize::from(sel)) {
                Some(&v) => v,
                None if bytes.len() >= 8 => {
                    let (raw, rest) = bytes.split_at(8);
                    bytes = rest;
                    u64::from_le_bytes(raw.try_into().expect("eight bytes"))
                }
                None => u64::from(sel),
            };
        }
        let req = SyscallRequest { number, args };
        let mut ctx = TickContext::detached(0, &files, &mut next_tid);
        let pc = p.cpu.pc();
        let result = p.make_syscall(&req, &mut ctx);
        calls += 1;
        // A system call returns to where it was made.
        assert_eq!(p.cpu.pc(), pc, "{req:?} moved the PC");
        match result {
            None => return calls,
            Some(Err(e)) => assert!(
                SYSCALL_ERRNOS.contains(&e),
                "{req:?} failed with errno {e}, which it should not return"
            ),
            Some(Ok(_)) => {}
        }
    }
    calls
}

//! The simulator backend: every kpi call served by the current `ksim`
//! machine. Its functions are never inlined into kpi's front end, so that
//! what the simulator does stays apart from the driver's own code in a
//! profile (tools/bench/driver-cost counts `kpi::backend::` as the
//! simulator's).

// The simulator backend is host code: the kernel allocation lints of
// sys/clippy.toml do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use alloc::vec::Vec;
use std::sync::Arc;

use ksim::kern;
pub use ksim::kern::LockKind;

use crate::errno::{Errno, KResult};
use crate::hooks::{Comm, EventFn, Hook, HookFn, KernelEvent, ThreadInfo};
use crate::malloc::{KVec, Wait};
use crate::proc::{ProcSnapshot, ProcState};

/// A FreeBSD errno from the simulated kernel (never 0 there).
fn errno(e: i32) -> Errno {
    Errno::new(e).unwrap_or(crate::errno::EDOOFUS)
}

#[inline(never)]
pub fn printf(line: &str) {
    kern::printf(line);
}

#[inline(never)]
pub fn curcpu() -> u32 {
    kern::curcpu()
}
#[inline(never)]
pub fn ncpu_ids() -> u32 {
    kern::ncpu_ids()
}
#[inline(never)]
pub fn cpu_exists(cpu: u32) -> bool {
    kern::cpu_state(cpu) != ksim::CpuState::Absent
}
#[inline(never)]
pub fn cpu_active(cpu: u32) -> bool {
    kern::cpu_state(cpu) == ksim::CpuState::Online
}
#[inline(never)]
pub fn bind(cpu: u32) -> u32 {
    kern::bind(cpu)
}
#[inline(never)]
pub fn unbind(previous: u32) {
    kern::unbind(previous);
}
#[inline(never)]
pub fn in_interrupt() -> bool {
    kern::in_interrupt()
}

#[inline(never)]
pub fn rdtsc() -> u64 {
    kern::rdtsc()
}
#[inline(never)]
pub fn tsc_freq() -> u64 {
    kern::tsc_freq()
}
#[inline(never)]
pub fn delay(usec: u32) {
    kern::delay(usec);
}
#[inline(never)]
pub fn nanotime() -> (i64, i64) {
    kern::nanotime()
}

/// malloc(9): the simulated kernel checks the context and may fail the
/// allocation; the memory is the host's.
#[inline(never)]
pub fn kmalloc(layout: core::alloc::Layout, wait: bool, zero: bool) -> Option<NonNull<u8>> {
    sched_point();
    kern::malloc(wait).ok()?;
    // SAFETY: the layout has a non-zero size (kpi::malloc's contract).
    let ptr = unsafe {
        if zero {
            std::alloc::alloc_zeroed(layout)
        } else {
            std::alloc::alloc(layout)
        }
    };
    let ptr = NonNull::new(ptr)?;
    kern::malloc_done(ptr.as_ptr() as u64, layout.size());
    Some(ptr)
}

/// free(9) of what [`kmalloc`] returned.
///
/// # Safety
/// `ptr` came from [`kmalloc`] with `layout` and is not used again.
pub unsafe fn kfree(ptr: NonNull<u8>, layout: core::alloc::Layout) {
    sched_point();
    kern::free(ptr.as_ptr() as u64);
    // SAFETY: host memory from kmalloc with this layout.
    unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
}

/// A scheduling point of ksim's races (locks, allocations, atomics).
#[inline(never)]
pub fn sched_point() {
    ksim::sched::point();
}

#[inline(never)]
pub fn critical_enter() {
    kern::critical_enter();
}
#[inline(never)]
pub fn critical_exit() {
    kern::critical_exit();
}

use core::ffi::CStr;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const EXCLUSIVE: u32 = u32::MAX;

/// The state word shared by the three lock types: 0 free, EXCLUSIVE
/// held exclusively, otherwise the number of shared holders. Taking a lock
/// is a scheduling point of a race (`ksim::sched`), and so is releasing
/// one; a piece that finds the lock held lets the others run until it is
/// free.
#[derive(Debug)]
pub struct LockWord {
    state: AtomicU32,
    /// The race piece holding it exclusively, plus one (0: none, or code
    /// outside a race).
    owner: AtomicU64,
    class: &'static str,
    kind: LockKind,
}

fn piece() -> u64 {
    ksim::sched::task().map_or(0, |t| t as u64 + 1)
}

impl LockWord {
    pub fn new(name: &'static CStr, kind: LockKind) -> Self {
        LockWord {
            state: AtomicU32::new(0),
            owner: AtomicU64::new(0),
            class: name.to_str().unwrap_or("(lock name not UTF-8)"),
            kind,
        }
    }

    /// `mtx_init` / `sx_init`: the simulator keeps nothing per lock.
    ///
    /// # Safety
    /// Called once, with the lock at the address it keeps.
    pub unsafe fn init(&self) {}

    /// Waits while the lock is held elsewhere; a lock this piece holds
    /// itself (or held outside a race) is taken twice: a panic.
    fn contended(&self) {
        let me = piece();
        if me == 0 || self.owner.load(Ordering::Relaxed) == me {
            panic!("lock {} taken while held", self.class);
        }
        ksim::sched::wait_for(self.class);
    }

    pub fn lock_exclusive(&self) {
        sched_point();
        lock_acquire(self.class, self.kind);
        while self
            .state
            .compare_exchange(0, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.contended();
        }
        self.owner.store(piece(), Ordering::Relaxed);
    }

    pub fn lock_shared(&self) {
        sched_point();
        lock_acquire(self.class, self.kind);
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            if cur == EXCLUSIVE {
                self.contended();
                cur = self.state.load(Ordering::Relaxed);
                continue;
            }
            match self.state.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
    }

    pub fn unlock_exclusive(&self) {
        self.owner.store(0, Ordering::Relaxed);
        self.state.store(0, Ordering::Release);
        lock_release(self.class);
        sched_point();
    }

    pub fn unlock_shared(&self) {
        self.state.fetch_sub(1, Ordering::Release);
        lock_release(self.class);
        sched_point();
    }
}

#[inline(never)]
pub fn lock_acquire(class: &'static str, kind: LockKind) {
    kern::lock_acquire(class, kind);
}
#[inline(never)]
pub fn lock_release(class: &'static str) {
    kern::lock_release(class);
}
#[inline(never)]
pub fn may_sleep() {
    kern::may_sleep();
}
#[inline(never)]
pub fn force_context_switch() {
    kern::force_context_switch();
}

#[inline(never)]
pub fn curthread() -> u32 {
    kern::curthread()
}
#[inline(never)]
pub fn curproc() -> u32 {
    kern::curproc()
}
/// Host data copied into kernel memory, as the kernel's own copy would be.
fn kvec<T: Clone>(items: &[T], wait: Wait) -> KResult<KVec<T>> {
    KVec::try_from_slice(items, wait)
}

#[inline(never)]
pub fn pfind(pid: u32, wait: Wait) -> KResult<Option<ProcSnapshot>> {
    let Some(p) = kern::pfind(pid) else {
        return Ok(None);
    };
    Ok(Some(ProcSnapshot {
        pid: p.pid,
        ppid: p.ppid,
        zombie: p.zombie,
        flags: p.flags,
        comm: kvec(p.comm.as_bytes(), wait)?,
        path: kvec(p.path.as_bytes(), wait)?,
        threads: kvec(&p.threads, wait)?,
    }))
}
#[inline(never)]
pub fn proc_state(pid: u32) -> Option<ProcState> {
    kern::pfind(pid).map(|p| ProcState {
        flags: p.flags,
        zombie: p.zombie,
    })
}
#[inline(never)]
pub fn children(pid: u32, wait: Wait) -> KResult<KVec<u32>> {
    kvec(&kern::children(pid), wait)
}
#[inline(never)]
pub fn thread_pid(tid: u32) -> Option<u32> {
    kern::thread_pid(tid)
}
/// As on FreeBSD, where looking a thread up takes locks that an
/// interrupt handler may not take: unknown in interrupt context.
#[inline(never)]
pub fn thread_exists(tid: u32) -> Option<bool> {
    if kern::in_interrupt() {
        None
    } else {
        Some(kern::thread_pid(tid).is_some())
    }
}
#[inline(never)]
pub fn proc_flags(pid: u32, set: u32, clear: u32) {
    kern::proc_flags(pid, set, clear);
}
#[inline(never)]
pub fn p_candebug(pid: u32) -> KResult<()> {
    kern::p_candebug(pid).map_err(errno)
}
#[inline(never)]
pub fn priv_check(privilege: u32) -> KResult<()> {
    kern::priv_check(privilege).map_err(errno)
}
#[inline(never)]
pub fn cred_covers(owner: u32, target: u32) -> bool {
    kern::cred_covers(owner, target)
}
#[inline(never)]
pub fn jailed() -> bool {
    kern::jailed()
}
#[inline(never)]
pub fn curproc_flags() -> u32 {
    kern::curproc_flags()
}
#[inline(never)]
pub fn psignal(pid: u32, sig: i32) {
    kern::psignal(pid, sig);
}

#[inline(never)]
pub fn copyin(uaddr: u64, out: &mut [u8]) -> KResult<()> {
    let bytes = kern::copyin(uaddr, out.len()).map_err(errno)?;
    out.copy_from_slice(&bytes);
    Ok(())
}
#[inline(never)]
pub fn copyout(data: &[u8], uaddr: u64) -> KResult<()> {
    kern::copyout(data, uaddr).map_err(errno)
}

#[inline(never)]
pub fn kenv_str(name: &str, wait: Wait) -> KResult<Option<KVec<u8>>> {
    kern::kenv_str(name)
        .map(|v| kvec(v.as_bytes(), wait))
        .transpose()
}

/// A declared int oid's variable.
pub type IntHandle = Arc<std::sync::atomic::AtomicI64>;
/// A declared counter oid's counter.
pub type CounterHandle = Arc<AtomicU64>;

#[inline(never)]
pub fn sysctl_declare(d: &crate::sysctl::SysctlDecl) -> KResult<()> {
    kern::sysctl_declare(d.name, d.kind, d.flags, d.default, "")
        .map(drop)
        .map_err(errno)
}
#[inline(never)]
pub fn sysctl_undeclare(d: &crate::sysctl::SysctlDecl) {
    kern::sysctl_undeclare(d.name);
}
#[inline(never)]
pub fn int_knob(name: &str) -> KResult<IntHandle> {
    match kern::sysctl_handle(name) {
        Some(kern::SysctlHandle::Int(v)) => Ok(v),
        _ => Err(crate::errno::ENOENT),
    }
}
pub fn int_knob_get(h: &IntHandle) -> i64 {
    h.load(Ordering::Relaxed)
}
pub fn int_knob_set(h: &IntHandle, v: i64) {
    h.store(v, Ordering::Relaxed);
}
pub fn counter_attach(name: &str) -> KResult<CounterHandle> {
    match kern::sysctl_handle(name) {
        Some(kern::SysctlHandle::Counter(v)) => {
            // counter_u64_alloc(M_WAITOK): a new counter reads zero.
            kern::malloc(true).map_err(errno)?;
            v.store(0, Ordering::Relaxed);
            Ok(v)
        }
        _ => Err(crate::errno::ENOENT),
    }
}
pub fn counter_add(h: &CounterHandle, n: u64) {
    h.fetch_add(n, Ordering::Relaxed);
}
pub fn counter_fetch(h: &CounterHandle) -> u64 {
    h.load(Ordering::Relaxed)
}
pub fn counter_detach(_h: &CounterHandle) {}

#[inline(never)]
pub fn syscall_register(handler: crate::SyscallFn) -> KResult<u32> {
    Ok(kern::syscall_register(Arc::new(move |args: &[u64]| {
        handler(args).map_err(|e| e.get())
    })))
}
#[inline(never)]
pub fn syscall_deregister(num: u32) {
    kern::syscall_deregister(num);
}

/// What the glue reads of a new thread for PMC_FN_THR_CREATE.
fn thread_info(tid: u32) -> ThreadInfo {
    let pid = kern::thread_pid(tid).unwrap_or(0);
    let p = kern::pfind(pid);
    ThreadInfo {
        tid,
        pid,
        flags: p.as_ref().map_or(0, |p| p.flags),
        name: Comm::new(kern::thread_name(tid).unwrap_or_default().as_bytes()),
    }
}

#[inline(never)]
pub fn set_pmc_hook(hook: Option<HookFn>) -> KResult<()> {
    kern::set_pmc_hook(hook.map(|h| {
        Arc::new(move |call: &ksim::HookCall| {
            let hook = match *call {
                ksim::HookCall::CswIn => Hook::CswIn,
                ksim::HookCall::CswOut => Hook::CswOut,
                ksim::HookCall::ProcessExec {
                    credentials_changed,
                    base,
                    dyn_base,
                } => Hook::ProcessExec {
                    credentials_changed,
                    base,
                    dyn_base,
                },
                ksim::HookCall::SoftSampling { ev, cpu } => Hook::SoftSampling { ev, cpu },
                ksim::HookCall::ThrCreate { tid } => Hook::ThrCreate {
                    thread: thread_info(tid),
                },
                ksim::HookCall::ThrExit { tid } => Hook::ThrExit { tid },
                ksim::HookCall::ThrCreateLog {
                    tid,
                    pid,
                    flags,
                    ref name,
                } => Hook::ThrCreateLog {
                    thread: ThreadInfo {
                        tid,
                        pid,
                        flags,
                        name: Comm::new(name.as_bytes()),
                    },
                },
                ksim::HookCall::ThrExitLog { tid } => Hook::ThrExitLog { tid },
                ksim::HookCall::ProcCreateLog {
                    pid,
                    flags,
                    ref comm,
                } => Hook::ProcCreateLog {
                    pid,
                    flags,
                    comm: Comm::new(comm.as_bytes()),
                },
                ksim::HookCall::UserRet => Hook::UserRet,
                ksim::HookCall::DoSamples => Hook::DoSamples,
                ksim::HookCall::Mmap { addr } => Hook::Mmap { addr },
                ksim::HookCall::Munmap { addr, size } => Hook::Munmap { addr, size },
            };
            h(&hook);
        }) as Arc<dyn Fn(&ksim::HookCall) + Send + Sync>
    }));
    Ok(())
}

#[inline(never)]
pub fn eventhandler_register(handler: EventFn) -> KResult<u64> {
    Ok(kern::eventhandler_register(Arc::new(
        move |ev: &ksim::Event| {
            let ev = match *ev {
                ksim::Event::ProcessFork { parent, child } => {
                    KernelEvent::ProcessFork { parent, child }
                }
                ksim::Event::ProcessExit { pid } => KernelEvent::ProcessExit { pid },
                ksim::Event::KldLoad { addr } => KernelEvent::KldLoad { addr },
                ksim::Event::KldUnload { addr, size } => KernelEvent::KldUnload { addr, size },
            };
            handler(&ev);
        },
    )))
}
#[inline(never)]
pub fn eventhandler_deregister(tag: u64) {
    if kern::has_machine() {
        kern::eventhandler_deregister(tag);
    }
}

#[inline(never)]
pub fn pmc_kernel_version() -> u32 {
    kern::pmc_kernel_version()
}
#[inline(never)]
pub fn exterr_set(
    error: Errno,
    category: u32,
    msg: &'static core::ffi::CStr,
    p1: u64,
    p2: u64,
    line: u32,
) -> Errno {
    kern::exterr_set(error.get(), category, msg, p1, p2, line);
    error
}
#[inline(never)]
pub fn pmc_module_version() -> u32 {
    if kern::has_machine() {
        kern::pmc_module_version()
    } else {
        uapi::pmc::PMC_VERSION
    }
}
#[inline(never)]
pub fn pmc_cpuid(wait: Wait) -> KResult<KVec<u8>> {
    kvec(kern::pmc_cpuid().as_bytes(), wait)
}
#[inline(never)]
pub fn soft_events(wait: Wait) -> KResult<KVec<crate::kern_pmc::SoftEvent>> {
    let all: Vec<_> = kern::soft_events()
        .iter()
        .map(|(name, code)| crate::kern_pmc::SoftEvent::new(name.as_bytes(), *code))
        .collect();
    kvec(&all, wait)
}
#[inline(never)]
pub fn soft_event_registered(code: u32) -> bool {
    kern::soft_event_registered(code)
}
#[inline(never)]
pub fn soft_event_running(code: u32, delta: i32) -> bool {
    kern::soft_event_running(code, delta)
}

#[inline(never)]
pub fn fget_write(fd: i32) -> KResult<u64> {
    kern::fget_write(fd).map_err(errno)
}
#[inline(never)]
pub fn fdrop(id: u64) {
    kern::fdrop(id);
}
#[inline(never)]
pub fn file_write(id: u64, data: &[u8]) -> KResult<usize> {
    kern::file_write(id, data).map_err(errno)
}

#[inline(never)]
pub fn notify_create(record_len: usize) -> KResult<(u64, i32)> {
    kern::notify_create(record_len).map_err(errno)
}
#[inline(never)]
pub fn notify_post(id: u64, record: &[u8]) {
    kern::notify_post(id, record);
}
#[inline(never)]
pub fn notify_hangup(id: u64) {
    kern::notify_hangup(id);
}
#[inline(never)]
pub fn notify_release(id: u64) {
    kern::fdrop(id);
}
pub fn tdsignal(pid: u32, tid: u32, sig: i32, value: i32) -> bool {
    kern::tdsignal(pid, tid, sig, value)
}

#[inline(never)]
pub fn kproc_create(name: &str, body: crate::kproc::KprocFn) -> KResult<u64> {
    kern::kproc_create(
        name,
        Arc::new(move || {
            body();
        }),
    )
    .map_err(errno)
}
#[inline(never)]
pub fn kproc_wakeup(id: u64) {
    kern::kproc_wakeup(id);
}
#[inline(never)]
pub fn kproc_stop(id: u64) {
    kern::kproc_stop(id);
}
/// A software interrupt is a kernel process woken by each schedule.
pub fn swi_add(name: &str, handler: crate::kproc::KprocFn) -> KResult<u64> {
    kproc_create(name, handler)
}
pub fn swi_sched(id: u64) {
    kproc_wakeup(id);
}
pub fn swi_remove(id: u64) {
    kproc_stop(id);
}
#[inline(never)]
pub fn kproc_pid(id: u64) -> Option<u32> {
    kern::kproc_pid(id)
}

#[inline(never)]
pub fn pmc_ss_count_add(delta: i32) {
    // An atomic of the kernel's: a scheduling point of a race.
    sched_point();
    kern::pmc_ss_count_add(delta);
}
#[inline(never)]
pub fn pmc_ss_count() -> i32 {
    sched_point();
    kern::pmc_ss_count()
}
#[inline(never)]
pub fn pmc_ss_count_reset() {
    kern::pmc_ss_count_add(-kern::pmc_ss_count());
}

#[inline(never)]
pub fn set_cpu_sampled(cpu: u32) {
    kern::set_cpu_sampled(cpu);
}
#[inline(never)]
pub fn request_userret() {
    kern::request_userret();
}
#[inline(never)]
pub fn interrupted() -> crate::stack::Interrupted {
    let loc = kern::location();
    let pc = match (loc.user_mode, loc.user_regs) {
        (true, Some(regs)) => Some(regs.pc),
        (true, None) => loc.user_stack.first().copied(),
        (false, _) => loc.kernel_stack.first().copied(),
    };
    crate::stack::Interrupted {
        user_mode: loc.user_mode,
        pc: pc.unwrap_or(0) as usize,
    }
}
fn fill(out: &mut [usize], from: &[u64]) -> usize {
    let n = out.len().min(from.len());
    for (o, f) in out.iter_mut().zip(from) {
        *o = *f as usize;
    }
    n
}
#[inline(never)]
pub fn kernel_callchain(out: &mut [usize]) -> usize {
    let loc = kern::location();
    if loc.user_mode {
        0
    } else {
        fill(out, &loc.kernel_stack)
    }
}
#[inline(never)]
pub fn user_callchain(out: &mut [usize]) -> usize {
    let loc = kern::location();
    match loc.user_regs {
        Some(regs) => walk_user_frames(&regs, out),
        None => fill(out, &loc.user_stack),
    }
}

/// A word of the current thread's user memory, through copyin.
fn user_word(addr: u64) -> Option<u64> {
    let bytes = kern::copyin(addr, 8).ok()?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// The frame record at `fp`: the return address above it, and the
/// caller's frame pointer in it.
fn frame_record(fp: u64) -> Option<(u64, u64)> {
    Some((user_word(fp + 8)?, user_word(fp)?))
}

/// The user call chain of a thread that runs real code, walked from its
/// trap frame's registers through its frame records with copyin, as
/// FreeBSD's pmc_save_user_callchain does on each architecture
/// (sys/dev/hwpmc/hwpmc_x86.c and hwpmc_arm64_md.c).
fn walk_user_frames(regs: &ksim::UserRegs, out: &mut [usize]) -> usize {
    if out.is_empty() {
        return 0;
    }
    if regs.arch == "arm64" {
        walk_arm64(regs, out)
    } else {
        walk_amd64(regs, out)
    }
}

/// amd64's VM_MAXUSER_ADDRESS (the LA57 limit, which PMC_IN_USERSPACE
/// compares with).
const AMD64_MAXUSER: u64 = 0x0100_0000_0000_0000;
/// arm64's VM_MAXUSER_ADDRESS (48-bit user addresses).
const ARM64_MAXUSER: u64 = 0x0001_0000_0000_0000;

fn walk_amd64(regs: &ksim::UserRegs, out: &mut [usize]) -> usize {
    let user = |va: u64| va <= AMD64_MAXUSER;
    let mut fp = regs.fp;
    let mut oldfp = fp;
    out[0] = regs.pc as usize;
    let mut n = 1;
    if !user(regs.pc) {
        return n;
    }
    let Some(insn) = kern::copyin(regs.pc, 4)
        .ok()
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
    else {
        return n;
    };
    // At `push %rbp; mov %rsp,%rbp` or at `ret` the return address is
    // on top of the stack; after the push it is one word up; elsewhere
    // the frame record at %rbp holds it.
    let at_push = insn == 0xe589_4855;
    let at_mov = insn & 0x00ff_ffff == 0x00e5_8948;
    let at_ret = insn & 0xff == 0xc3;
    let first = if at_push || at_ret {
        user_word(regs.sp)
    } else if at_mov {
        user_word(regs.sp + 8)
    } else {
        frame_record(fp).map(|(pc, next)| {
            fp = next;
            pc
        })
    };
    let Some(mut pc) = first else {
        return n;
    };
    while n < out.len() {
        if pc == 0 || !user(pc) {
            break;
        }
        out[n] = pc as usize;
        n += 1;
        if fp < oldfp {
            break;
        }
        oldfp = fp;
        match frame_record(fp) {
            Some((next_pc, next_fp)) => {
                pc = next_pc;
                fp = next_fp;
            }
            None => break,
        }
    }
    n
}

fn walk_arm64(regs: &ksim::UserRegs, out: &mut [usize]) -> usize {
    let user = |va: u64| va <= ARM64_MAXUSER;
    out[0] = regs.pc as usize;
    if out.len() <= 1 {
        return 1;
    }
    let mut fp = regs.fp;
    if !user(regs.pc) || !user(fp) {
        return 1;
    }
    let mut count = 1;
    while count < out.len() {
        // The frame record: the caller's x29, then the saved link register.
        let Some(pc) = user_word(fp + 8) else {
            break;
        };
        if !user(pc) {
            break;
        }
        out[count] = pc as usize;
        count += 1;
        let oldfp = fp;
        match user_word(fp) {
            Some(next) if next >= oldfp && user(next) => fp = next,
            _ => break,
        }
    }
    count
}

fn mappings_of(from: Vec<ksim::Mapping>, wait: Wait) -> KResult<KVec<crate::proc::Mapping>> {
    let mut out = KVec::with_capacity(from.len(), wait)?;
    for m in from {
        let _ = out.push_within_capacity(crate::proc::Mapping {
            start: m.start,
            end: m.end,
            path: kvec(m.path.as_bytes(), wait)?,
        });
    }
    Ok(out)
}
#[inline(never)]
pub fn mappings(pid: u32, wait: Wait) -> KResult<KVec<crate::proc::Mapping>> {
    mappings_of(kern::proc_mappings(pid), wait)
}
#[inline(never)]
pub fn all_pids(wait: Wait) -> KResult<KVec<u32>> {
    kvec(&kern::all_pids(), wait)
}
#[inline(never)]
pub fn kernel_objects(wait: Wait) -> KResult<KVec<crate::proc::Mapping>> {
    mappings_of(kern::kernel_objects(), wait)
}

#[inline(never)]
pub fn sysctl_str_register(
    name: &str,
    value: &str,
    handler: crate::sysctl::StrHandler,
) -> KResult<()> {
    kern::sysctl_str_register(
        name,
        value,
        Arc::new(move |v: &str| handler(v).map_err(|e| e.get())),
    )
    .map_err(errno)
}
#[inline(never)]
pub fn sysctl_str_remove(name: &str) {
    kern::sysctl_str_remove(name);
}
#[inline(never)]
pub fn ktr(line: &str) {
    kern::ktr(line);
}

pub fn rdmsr(msr: u32) -> u64 {
    kern::rdmsr(msr)
}
pub fn wrmsr(msr: u32, value: u64) {
    kern::wrmsr(msr, value)
}
#[inline(never)]
pub fn vm_guest() -> bool {
    kern::vm_guest()
}
#[inline(never)]
pub fn rdmsr_safe(msr: u32) -> Option<u64> {
    kern::rdmsr_safe(msr)
}
#[inline(never)]
pub fn wrmsr_safe(msr: u32, value: u64) -> bool {
    kern::wrmsr_safe(msr, value)
}
pub fn cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    kern::cpuid(leaf, subleaf)
}
pub fn lapic_enable_pcint() -> bool {
    kern::lapic_enable_pcint()
}
pub fn lapic_disable_pcint() {
    kern::lapic_disable_pcint()
}
pub fn lapic_reenable_pcint() {
    kern::lapic_reenable_pcint()
}
pub fn set_pmc_intr(handler: Option<crate::x86::PmcIntrFn>) -> KResult<()> {
    // The closure owns the kernel box, which the simulator's Arc cannot.
    #[allow(clippy::redundant_closure)]
    kern::set_pmc_intr(handler.map(|h| Arc::new(move || h()) as ksim::PmcIntrFn));
    Ok(())
}
pub fn set_user_rdpmc(enabled: bool) {
    kern::set_user_rdpmc(enabled)
}

/// msleep(9) with `word` as the interlock.
#[inline(never)]
pub fn msleep(word: &LockWord, chan: usize, wmesg: &CStr, catch: bool) -> KResult<()> {
    let wmesg = wmesg.to_str().unwrap_or("?");
    let r = kern::msleep(chan, catch, wmesg, || word.unlock_exclusive());
    word.lock_exclusive();
    r.map_err(errno)
}

/// tsleep(9).
#[inline(never)]
pub fn tsleep(chan: usize, wmesg: &CStr, catch: bool) -> KResult<()> {
    let wmesg = wmesg.to_str().unwrap_or("?");
    kern::msleep(chan, catch, wmesg, || {}).map_err(errno)
}

/// wakeup(9).
#[inline(never)]
pub fn wakeup(chan: usize) {
    kern::wakeup(chan);
}

/// A driver's device as the simulated kernel calls it.
struct SimCdev(crate::malloc::KBox<dyn crate::cdev::CdevSw>);

impl ksim::DeviceSw for SimCdev {
    fn ioctl(&self, cmd: u32, data: &mut [u8]) -> Result<(), i32> {
        self.0.ioctl(cmd, data).map_err(Errno::get)
    }
    fn mmap_single(&self, offset: u64, size: u64, prot: i32) -> Result<ksim::MappedObject, i32> {
        let pages = self.0.mmap_single(offset, size, prot).map_err(Errno::get)?;
        Ok(Arc::new(SimMapping(pages)))
    }
}

/// A process's view of device pages.
struct SimMapping(crate::cdev::PageObject);

impl ksim::PagedObject for SimMapping {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) {
        self.0.read(offset as usize, buf);
    }
    fn fd(&self) -> Option<std::os::fd::OwnedFd> {
        let pages = &(self.0).0;
        pages.0.mem.object_fd(pages.0.obj)
    }
}

#[inline(never)]
pub fn make_dev(
    name: &str,
    uid: u32,
    gid: u32,
    mode: u32,
    sw: crate::malloc::KBox<dyn crate::cdev::CdevSw>,
) -> KResult<u64> {
    kern::may_sleep();
    kern::make_dev(name, uid, gid, mode, Arc::new(SimCdev(sw))).map_err(errno)
}

#[inline(never)]
pub fn destroy_dev(id: u64) {
    kern::destroy_dev(id);
}

/// Pages of a device object: an object of the machine's physical memory
/// (shared memory a process can map; each page has the physical address
/// hardware models write to), counted as kernel memory so that failures
/// can be injected and leaks seen.
#[derive(Debug, Clone)]
pub struct PageObject(Arc<SimPages>);

#[derive(Debug)]
struct SimPages {
    mem: Arc<ksim::physmem::PhysMem>,
    obj: ksim::physmem::ObjId,
    npages: usize,
}

impl Drop for SimPages {
    fn drop(&mut self) {
        if kern::has_machine() {
            kern::free(self.mem.page_paddr(self.obj, 0).unwrap_or(0));
        }
        let _ = self.mem.free_object(self.obj);
    }
}

impl PageObject {
    pub fn alloc(npages: usize, wait: Wait) -> KResult<PageObject> {
        sched_point();
        // One allocation per page, as vm_page_alloc is called; any may
        // fail.
        for _ in 0..npages.max(1) {
            kern::malloc(wait == Wait::WaitOk).map_err(|_| crate::errno::ENOMEM)?;
        }
        let mem = kern::physmem();
        let obj = mem
            .alloc_object(npages, true)
            .map_err(|_| crate::errno::ENOMEM)?;
        let first = mem.page_paddr(obj, 0).unwrap_or(0);
        kern::malloc_done(first, npages * crate::cdev::PAGE_SIZE);
        Ok(PageObject(Arc::new(SimPages { mem, obj, npages })))
    }
    pub fn npages(&self) -> usize {
        self.0.npages
    }
    pub fn phys(&self, i: usize) -> u64 {
        self.0.mem.page_paddr(self.0.obj, i).unwrap_or(0)
    }
    pub fn read(&self, offset: usize, buf: &mut [u8]) {
        self.0
            .mem
            .read_object(self.0.obj, offset, buf)
            .expect("a read within the object");
    }
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.0
            .mem
            .write_object(self.0.obj, offset, data)
            .expect("a write within the object");
    }
}

#[inline(never)]
pub fn proc_flag2(pid: u32) -> u32 {
    kern::proc_flag2(pid)
}
#[inline(never)]
pub fn proc_flag2_set(pid: u32, set: u32, clear: u32) {
    kern::proc_flag2_set(pid, set, clear);
}
#[inline(never)]
pub fn cred_same_user(owner: u32, target: u32) -> bool {
    kern::cred_same_user(owner, target)
}

#[inline(never)]
pub fn set_hwt_hook(hook: Option<crate::hooks::HwtHookFn>) {
    use crate::hooks::{HwtHook, HwtRecordIn, HwtThread};
    kern::set_hwt_hook(hook.map(|h| {
        Arc::new(move |tid: u32, call: &ksim::HwtHookCall| {
            let pid = kern::thread_pid(tid).unwrap_or(0);
            let rec = |e: &ksim::HwtRecordEntry| -> (u32, Option<Vec<u8>>, u64, u64) {
                (
                    e.record_type,
                    e.fullpath.as_ref().map(|p| p.as_bytes().to_vec()),
                    e.addr,
                    e.baseaddr,
                )
            };
            let entry = match call {
                ksim::HwtHookCall::Record(e)
                | ksim::HwtHookCall::Mmap(e)
                | ksim::HwtHookCall::Exec(e) => Some(rec(e)),
                _ => None,
            };
            let record = entry.as_ref().map(|(t, p, a, b)| HwtRecordIn {
                record_type: *t,
                fullpath: p.as_deref(),
                addr: *a,
                baseaddr: *b,
            });
            let hook = match (call, record) {
                (ksim::HwtHookCall::SwitchIn, _) => HwtHook::SwitchIn,
                (ksim::HwtHookCall::SwitchOut, _) => HwtHook::SwitchOut,
                (ksim::HwtHookCall::ThreadExit, _) => HwtHook::ThreadExit,
                (ksim::HwtHookCall::ThreadCreate, _) => HwtHook::ThreadCreate,
                (ksim::HwtHookCall::ThreadSetName, _) => HwtHook::ThreadSetName,
                (ksim::HwtHookCall::Record(_), Some(r)) => HwtHook::Record(r),
                (ksim::HwtHookCall::Mmap(_), Some(r)) => HwtHook::Mmap(r),
                (ksim::HwtHookCall::Exec(_), Some(r)) => HwtHook::Exec(r),
                _ => return,
            };
            let flag2 = kern::proc_flag2(pid);
            h(HwtThread { tid, pid, flag2 }, &hook);
        }) as ksim::HwtHookFn
    }));
}

#[inline(never)]
pub fn cpu_spinwait() {
    sched_point();
}

#[inline(never)]
pub fn nmi_register_handler(handler: crate::x86::PmcIntrFn) -> KResult<u64> {
    // The closure owns the kernel box, which the simulator's Arc cannot.
    #[allow(clippy::redundant_closure)]
    Ok(kern::nmi_register_handler(
        Arc::new(move || handler()) as ksim::PmcIntrFn
    ))
}
#[inline(never)]
pub fn nmi_remove_handler(id: u64) {
    kern::nmi_remove_handler(id);
}
#[inline(never)]
pub fn xsaves_pt() -> [u64; 9] {
    kern::xsaves_pt()
}
#[inline(never)]
pub fn xrstors_pt(state: &[u64; 9]) {
    kern::xrstors_pt(state)
}

//! Processes, threads and credentials, through opaque ids and accessor
//! calls (Rust never sees `struct proc`), and the checks the kernel makes
//! on them: p_candebug(9), priv_check(9), jails, signals.

use crate::errno::KResult;
use crate::malloc::{KVec, Wait};

/// A process id.
pub type Pid = u32;
/// A thread id (`td_tid`).
pub type Tid = u32;

/// `P_HWPMC`: the process uses PMCs.
pub const P_HWPMC: u32 = 0x0080_0000;
/// `P_WEXIT`: the process is working on exiting.
pub const P_WEXIT: u32 = 0x0000_2000;
/// `P_KPROC`: a kernel process, which never returns to user mode.
pub const P_KPROC: u32 = 0x0000_0004;
/// `PRIV_PMC_MANAGE`.
pub const PRIV_PMC_MANAGE: u32 = 450;
/// `PRIV_PMC_SYSTEM`.
pub const PRIV_PMC_SYSTEM: u32 = 451;
/// SIGIO.
pub const SIGIO: i32 = 23;
/// SIGBUS.
pub const SIGBUS: i32 = 10;

/// What kernel code may know about a process, in kernel memory.
#[derive(Debug)]
pub struct ProcSnapshot {
    /// Process id.
    pub pid: Pid,
    /// Parent.
    pub ppid: Pid,
    /// Exited, not yet reaped.
    pub zombie: bool,
    /// `p_flag`.
    pub flags: u32,
    /// `p_comm`.
    pub comm: KVec<u8>,
    /// Path of the executable.
    pub path: KVec<u8>,
    /// Threads.
    pub threads: KVec<Tid>,
}

/// A process's state, read without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcState {
    /// `p_flag`.
    pub flags: u32,
    /// Exited, not yet reaped.
    pub zombie: bool,
}

impl ProcState {
    /// A zombie, or working on exiting (`P_WEXIT`): its process_exit
    /// handlers may have run already.
    pub fn exiting(&self) -> bool {
        self.zombie || self.flags & P_WEXIT != 0
    }
}

/// The current thread (`curthread`).
#[inline]
pub fn curthread() -> Tid {
    crate::backend::curthread()
}

/// The current process (`curproc`).
#[inline]
pub fn curproc() -> Pid {
    crate::backend::curproc()
}

/// `pfind(pid)` (zombies included, as `pfind_any`), copied into memory
/// allocated with `wait`; `Ok(None)` when there is no such process.
pub fn pfind(pid: Pid, wait: Wait) -> KResult<Option<ProcSnapshot>> {
    crate::backend::pfind(pid, wait)
}

/// The flags and state of `pid` (zombies included), without allocating.
pub fn proc_state(pid: Pid) -> Option<ProcState> {
    crate::backend::proc_state(pid)
}

/// The live children of `pid` (`p_children`).
pub fn children(pid: Pid, wait: Wait) -> KResult<KVec<Pid>> {
    crate::backend::children(pid, wait)
}

/// The process of thread `tid`.
pub fn thread_pid(tid: Tid) -> Option<Pid> {
    crate::backend::thread_pid(tid)
}

/// Whether thread `tid` exists: `None` when that cannot be learnt here
/// (FreeBSD's thread lookup takes locks an interrupt handler may not).
pub fn thread_exists(tid: Tid) -> Option<bool> {
    crate::backend::thread_exists(tid)
}

/// Sets and clears `p_flag` bits (under the process lock).
pub fn set_flags(pid: Pid, set: u32, clear: u32) {
    crate::backend::proc_flags(pid, set, clear);
}

/// `p_candebug(curthread, p)`: may the current thread debug `pid`.
pub fn p_candebug(pid: Pid) -> KResult<()> {
    crate::backend::p_candebug(pid)
}

/// `priv_check(curthread, privilege)`.
pub fn priv_check(privilege: u32) -> KResult<()> {
    crate::backend::priv_check(privilege)
}

/// Whether `owner`'s credentials cover `target`'s (`pmc_can_attach`):
/// root outside a jail, or the owner's effective uid among the target's
/// uids and the target's groups among the owner's.
pub fn cred_covers(owner: Pid, target: Pid) -> bool {
    crate::backend::cred_covers(owner, target)
}

/// `jailed(curthread->td_ucred)`.
pub fn jailed() -> bool {
    crate::backend::jailed()
}

/// The current process's `p_flag`, read without its lock, so callable in
/// interrupt context and under spin locks: reliable for the bits that
/// never change (`P_KPROC`) and those the current thread sets itself
/// (`P_WEXIT`).
#[inline]
pub fn curproc_flags() -> u32 {
    crate::backend::curproc_flags()
}

/// `kern_psignal(p, sig)`.
pub fn psignal(pid: Pid, sig: i32) {
    crate::backend::psignal(pid, sig);
}

/// `tdsendsignal` of `sig` to thread `tid` of process `pid` (to the
/// process when the thread is gone), with `si_code` SI_QUEUE and
/// `si_value.sival_int` = `value`. False when the process is gone. Takes
/// the process's lock: thread context, no spin lock held.
pub fn tdsignal(pid: Pid, tid: Tid, sig: i32, value: i32) -> bool {
    crate::backend::tdsignal(pid, tid, sig, value)
}

/// The highest signal number (`_SIG_MAXSIG`).
pub const SIG_MAXSIG: i32 = 128;
/// SIGKILL.
pub const SIGKILL: i32 = 9;
/// SIGSTOP.
pub const SIGSTOP: i32 = 17;

/// `msleep`-style points: the current thread may sleep here. The
/// simulator's witness checks that no spin lock is held.
pub fn may_sleep() {
    crate::backend::may_sleep();
}

/// Forces the current thread through a context switch, so that the
/// context-switch hooks reload per-thread hardware state (the effect of
/// `pause(9)` for one tick in hwpmc).
pub fn force_context_switch() {
    crate::backend::force_context_switch();
}

/// Schedules an AST for the current thread so that the PMC hook runs at
/// its return to user mode (`TDP_CALLCHAIN`).
pub fn request_userret() {
    crate::backend::request_userret();
}

/// An executable mapping of a process, or a kernel object.
#[derive(Debug)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Full path of the object (`vn_fullpath`).
    pub path: KVec<u8>,
}

/// The executable mappings of `pid`.
pub fn mappings(pid: Pid, wait: Wait) -> KResult<KVec<Mapping>> {
    crate::backend::mappings(pid, wait)
}

/// Every live process.
pub fn all_pids(wait: Wait) -> KResult<KVec<Pid>> {
    crate::backend::all_pids(wait)
}

/// `P2_HWT` of `p_flag2`: the process is traced by hwt(4).
pub const P2_HWT: u32 = 0x0200_0000;

/// `p_flag2` of `pid` (0 when it is gone). It looks the process up
/// (sleep locks): not under a spin lock; the hwt hook has
/// [`crate::hooks::HwtThread::flag2`].
pub fn flag2(pid: Pid) -> u32 {
    crate::backend::proc_flag2(pid)
}

/// `p_flag2 = (p_flag2 | set) & ~clear` under the process lock.
pub fn set_flag2(pid: Pid, set: u32, clear: u32) {
    crate::backend::proc_flag2_set(pid, set, clear);
}

/// hwt(4)'s credential test of an owner over a target (no privilege
/// overrides it): the owner's effective uid is one of the target's
/// effective, saved or real uids, and every group of the target (its
/// group list, effective, real and saved gid) is one of the owner's.
pub fn cred_same_user(owner: Pid, target: Pid) -> bool {
    crate::backend::cred_same_user(owner, target)
}

//! Kernel services of the current machine, for kpi's simulator backend.
//! Each corresponds to a FreeBSD KPI (named in its documentation).

use crate::errno::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};

use crate::machine::{
    CpuState, EventFn, File, FileKind, HookFn, KprocFn, NotifyState, ProcInfo, SyscallHandler,
    Sysctl, SysctlCell, SysctlType, ThreadSignal, ctlflag, current,
};
pub use crate::witness::LockKind;

/// `curcpu`.
pub fn curcpu() -> u32 {
    current().st().cur().0
}

/// `curthread->td_tid`.
pub fn curthread() -> u32 {
    current().st().cur().1
}

/// `curproc->p_pid`.
pub fn curproc() -> u32 {
    current().st().cur_pid()
}

/// `mp_maxid + 1`: the number of CPU ids.
pub fn ncpu_ids() -> u32 {
    current().st().ncpus()
}

/// `CPU_ABSENT` / `pmc_cpu_is_disabled`.
pub fn cpu_state(cpu: u32) -> CpuState {
    current().st().cpu_state(cpu)
}

/// True in interrupt (or NMI) context.
pub fn in_interrupt() -> bool {
    let m = current();
    let st = m.st();
    st.in_intr || st.in_nmi
}

/// `rdtsc()` on the current CPU.
pub fn rdtsc() -> u64 {
    let m = current();
    let st = m.st();
    let cpu = st.cur().0;
    st.tsc(cpu)
}

/// `tsc_freq`.
pub fn tsc_freq() -> u64 {
    current().st().cfg.tsc_freq
}

/// `DELAY(usec)`: the machine's clock moves on by the wait, which is
/// counted ([`crate::Machine::delayed_us`]).
pub fn delay(usec: u32) {
    let m = current();
    let mut st = m.st();
    st.time_ns += u64::from(usec) * 1000;
    st.delayed_us += u64::from(usec);
}

/// `nanotime()` as (seconds, nanoseconds).
pub fn nanotime() -> (i64, i64) {
    let ns = current().st().time_ns;
    ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64)
}

/// Whether the kernel has `options HWPMC_HOOKS`, and `pmc_kernel_version`
/// (0 without the hooks).
/// The `PMC_VERSION` the driver was built with (`MachineConfig`).
pub fn pmc_module_version() -> u32 {
    current().st().cfg.module_pmc_version
}

pub fn pmc_kernel_version() -> u32 {
    let m = current();
    let st = m.st();
    if st.cfg.hwpmc_hooks {
        st.cfg.kernel_pmc_version
    } else {
        0
    }
}

/// `pmc_cpuid`: the CPU identification hwpmc's machine-dependent code
/// names the CPU with.
pub fn pmc_cpuid() -> String {
    current().st().cfg.cpuid.clone()
}

/// `malloc(9)`'s checks before memory is taken: the witness rules for
/// the context, and fault injection (an `M_NOWAIT` allocation can fail on
/// a real kernel too). ENOMEM when this allocation is to fail.
pub fn malloc(wait: bool) -> Result<(), i32> {
    let m = current();
    let mut st = m.st();
    let ctx = st.context();
    st.witness.check_alloc(wait, ctx);
    st.kmem.calls += 1;
    if st.kmem.fail_at == Some(st.kmem.calls) {
        return Err(ENOMEM);
    }
    Ok(())
}

/// Enters an allocation that [`malloc`] allowed in the ledger.
pub fn malloc_done(addr: u64, size: usize) {
    if let Some(m) = crate::machine::try_current() {
        m.st().kmem.live.insert(addr, size);
    }
}

/// `free(9)`: the witness rules for the context, and the ledger.
pub fn free(addr: u64) {
    if let Some(m) = crate::machine::try_current() {
        let mut st = m.st();
        let ctx = st.context();
        st.witness.check_free(ctx);
        st.kmem.live.remove(&addr);
    }
}

/// Records a lock acquisition for the witness.
pub fn lock_acquire(class: &'static str, kind: LockKind) {
    let m = current();
    let mut st = m.st();
    let ctx = st.context();
    st.witness.acquire(class, kind, ctx);
}

/// Records a lock release.
pub fn lock_release(class: &'static str) {
    if let Some(m) = crate::machine::try_current() {
        m.st().witness.release(class);
    }
}

/// A point where the current thread may sleep (msleep, M_WAITOK, sx).
pub fn may_sleep() {
    let m = current();
    let mut st = m.st();
    let ctx = st.context();
    st.witness.check_sleep(ctx);
}

/// `critical_enter`.
pub fn critical_enter() {
    current().st().critnest += 1;
}

/// `critical_exit`.
pub fn critical_exit() {
    let m = current();
    let mut st = m.st();
    assert!(st.critnest > 0, "critical_exit without critical_enter");
    st.critnest -= 1;
}

/// True in NMI context.
pub fn in_nmi() -> bool {
    current().st().in_nmi
}

/// `pfind(pid)` including zombies (`pfind_any`).
pub fn pfind(pid: u32) -> Option<ProcInfo> {
    current().st().proc_info(pid).cloned()
}

/// Live children of `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    current().st().children(pid)
}

/// Sets or clears `p_flag` bits.
pub fn proc_flags(pid: u32, set: u32, clear: u32) {
    if let Some(p) = current().st().proc_info_mut(pid) {
        p.flags = (p.flags | set) & !clear;
    }
}

/// A thread's name (`td_name`).
pub fn thread_name(tid: u32) -> Option<String> {
    current().thread_name(tid)
}

/// The process of a thread.
pub fn thread_pid(tid: u32) -> Option<u32> {
    current().st().thread_pid(tid)
}

/// `priv_check(td, priv)` for the current thread: root outside a jail
/// holds every privilege this driver asks for; nobody else does.
pub fn priv_check(_privilege: u32) -> Result<(), i32> {
    let m = current();
    let st = m.st();
    let pid = st.cur_pid();
    let cred = st.proc_info(pid).map(|p| p.cred).ok_or(ESRCH)?;
    if cred.uid == 0 && cred.jail == 0 {
        Ok(())
    } else {
        Err(EPERM)
    }
}

/// `jailed(td->td_ucred)` for the current thread.
pub fn jailed() -> bool {
    let m = current();
    let st = m.st();
    let pid = st.cur_pid();
    st.proc_info(pid).is_some_and(|p| p.cred.jail != 0)
}

/// `curproc->p_flag`.
pub fn curproc_flags() -> u32 {
    let m = current();
    let st = m.st();
    let pid = st.cur_pid();
    st.proc_info(pid).map_or(0, |p| p.flags)
}

/// `p_candebug(curthread, p)`, following FreeBSD's order of checks: the
/// same process may always; the target must be visible from the caller's
/// jail (ESRCH); then, unless the caller is privileged, it needs
/// `security.bsd.unprivileged_proc_debug`, the same real and saved ids as
/// the target, a target that did not change credentials, and a target that
/// is not a system process (EPERM).
pub fn p_candebug(target: u32) -> Result<(), i32> {
    let m = current();
    let st = m.st();
    let me = st.cur_pid();
    if me == target {
        return Ok(());
    }
    let mine = st.proc_info(me).ok_or(ESRCH)?.cred;
    let t = st.proc_info(target).ok_or(ESRCH)?;
    if mine.jail != 0 && mine.jail != t.cred.jail {
        return Err(ESRCH);
    }
    let privileged = mine.uid == 0;
    if t.system {
        return Err(EPERM);
    }
    if privileged {
        return Ok(());
    }
    let unprivileged_proc_debug = match st.sysctl.get("security.bsd.unprivileged_proc_debug") {
        Some(Sysctl {
            cell: SysctlCell::Int(v),
            ..
        }) => v.load(std::sync::atomic::Ordering::Relaxed),
        _ => 1,
    };
    if unprivileged_proc_debug == 0 {
        return Err(EPERM);
    }
    let tc = t.cred;
    let same_uids = [tc.uid, tc.ruid, tc.svuid]
        .iter()
        .all(|&u| u == mine.uid && u == mine.ruid);
    let same_gids = [tc.gid, tc.rgid, tc.svgid]
        .iter()
        .all(|&g| g == mine.gid || g == mine.rgid);
    if !same_uids || !same_gids || t.sugid {
        return Err(EPERM);
    }
    Ok(())
}

/// `kern_psignal(p, sig)`.
pub fn psignal(pid: u32, sig: i32) {
    current().st().signals.push((pid, sig));
    crate::sched::signal(pid);
}

/// `tdsendsignal(p, td, sig, ksi)` with SI_QUEUE and `value`: thread
/// `tid` of `pid` (the process when the thread is gone). Takes the
/// process's (sleep) lock, as FreeBSD does. False when `pid` is gone.
pub fn tdsignal(pid: u32, tid: u32, sig: i32, value: i32) -> bool {
    lock_acquire("proc", LockKind::Sleep);
    let sent = {
        let m = current();
        let mut st = m.st();
        let live = st.proc_info(pid).is_some_and(|p| !p.zombie);
        if live {
            let tid = if st.thread_pid(tid) == Some(pid) {
                tid
            } else {
                pid
            };
            st.thread_signals.push(ThreadSignal {
                pid,
                tid,
                sig,
                value,
            });
        }
        live
    };
    if sent {
        crate::sched::signal(pid);
    }
    lock_release("proc");
    sent
}

/// The lock class of a notification file's mutex (its selinfo's and
/// knlist's, in FreeBSD).
const NOTIFY_LOCK: &str = "pmcnotify";

/// `falloc` + `finit` + `finstall` of a notification file in the current
/// process: (file id, descriptor). The descriptor and the kernel each hold
/// a reference.
pub fn notify_create(record_len: usize) -> Result<(u64, i32), i32> {
    const EMFILE: i32 = 24;
    let m = current();
    m.may_sleep_here();
    let mut st = m.st();
    let pid = st.cur_pid();
    let mut file = File::new(FileKind::Notify, false);
    file.refs = 2;
    file.notify = Some(NotifyState {
        record_len,
        ..NotifyState::default()
    });
    let (fd, id) = st.install_file(pid, file).ok_or(EMFILE)?;
    Ok((id, fd))
}

/// Posts `record` on notification file `id`.
pub fn notify_post(id: u64, record: &[u8]) {
    lock_acquire(NOTIFY_LOCK, LockKind::Sleep);
    {
        let m = current();
        let mut st = m.st();
        if let Some(n) = st.files.get_mut(&id).and_then(|f| f.notify.as_mut()) {
            let mut r = record.to_vec();
            r.resize(n.record_len, 0);
            n.pending = Some(r);
            n.posts += 1;
        }
    }
    lock_release(NOTIFY_LOCK);
    let observer = current().0.handlers().notify_observer.clone();
    if let Some(f) = observer {
        f(id);
    }
}

/// Hangs notification file `id` up.
pub fn notify_hangup(id: u64) {
    lock_acquire(NOTIFY_LOCK, LockKind::Sleep);
    {
        let m = current();
        let mut st = m.st();
        if let Some(n) = st.files.get_mut(&id).and_then(|f| f.notify.as_mut()) {
            n.hup = true;
        }
    }
    lock_release(NOTIFY_LOCK);
}

/// `copyin`: `len` bytes of the current process's memory at `uaddr`.
pub fn copyin(uaddr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let m = current();
    let mut st = m.st();
    let (_, tid) = st.cur();
    let mut buf = vec![0; len];
    match st.thread_copyin(tid, uaddr, &mut buf) {
        Some(true) => return Ok(buf),
        Some(false) => return Err(EFAULT),
        None => {}
    }
    let pid = st.cur_pid();
    st.umem_read(pid, uaddr, len).ok_or(EFAULT)
}

/// `copyout` to the current process's memory.
pub fn copyout(data: &[u8], uaddr: u64) -> Result<(), i32> {
    let m = current();
    let mut st = m.st();
    let (_, tid) = st.cur();
    match st.thread_copyout(tid, uaddr, data) {
        Some(true) => return Ok(()),
        Some(false) => return Err(EFAULT),
        None => {}
    }
    let pid = st.cur_pid();
    st.umem_write(pid, uaddr, data).ok_or(EFAULT)
}

/// `exterr_set`: records an extended error of the current system call
/// for the current thread, if it registered a `struct uexterror`; returns
/// `error`. The message is dropped on a machine without `options
/// EXTERR_STRINGS` ([`crate::MachineConfig::exterr_strings`]).
pub fn exterr_set(
    error: i32,
    category: u32,
    msg: &'static core::ffi::CStr,
    p1: u64,
    p2: u64,
    line: u32,
) -> i32 {
    current().st().exterr_set(crate::machine::exterr::Kexterr {
        error,
        category,
        msg: Some(msg),
        p1,
        p2,
        line,
    });
    error
}

/// `getenv` of a string.
pub fn kenv_str(name: &str) -> Option<String> {
    current().st().kenv.get(name).cloned()
}

/// An integer oid of the sysctl tree, read now.
pub fn sysctl_int(name: &str) -> Option<i64> {
    current().sysctl_get(name)
}

/// What a declared oid holds, for the code that declared it.
#[derive(Debug, Clone)]
pub enum SysctlHandle {
    /// A node.
    Node,
    /// An integer the declarer reads and sets as its C variable.
    Int(Arc<AtomicI64>),
    /// A counter(9).
    Counter(Arc<AtomicU64>),
    /// A string, written by sysctl(8) through the handler registered with
    /// [`sysctl_str_register`].
    Str,
}

/// Declares oid `name` (`SYSCTL_INT`, `SYSCTL_COUNTER_U64`,
/// `SYSCTL_STRING`, `SYSCTL_PROC`, `SYSCTL_NODE`) with access `flags`
/// and default value `int` or `text`; a `CTLFLAG_TUN` oid without
/// `CTLFLAG_NOFETCH` takes the loader tunable of its name when it parses.
/// `kern.hwpmc.cpuid` takes the machine's CPU identification, which
/// hwpmc's machine-dependent code writes there at load. EEXIST for a name
/// already declared.
pub fn sysctl_declare(
    name: &str,
    kind: SysctlType,
    flags: u32,
    int: i64,
    text: &str,
) -> Result<SysctlHandle, i32> {
    const EEXIST: i32 = 17;
    let m = current();
    let mut st = m.st();
    if st.sysctl.contains_key(name) {
        return Err(EEXIST);
    }
    let fetch = flags & ctlflag::TUN != 0 && flags & ctlflag::NOFETCH == 0;
    let tunable = st
        .kenv
        .get(name)
        .filter(|_| fetch)
        .and_then(|v| crate::machine::parse_tunable(v, kind));
    let (cell, handle) = match kind {
        SysctlType::Node => (SysctlCell::Node, SysctlHandle::Node),
        SysctlType::Int => {
            let v = Arc::new(AtomicI64::new(tunable.unwrap_or(int)));
            (SysctlCell::Int(v.clone()), SysctlHandle::Int(v))
        }
        SysctlType::Counter => {
            let v = Arc::new(AtomicU64::new(tunable.unwrap_or(int) as u64));
            (SysctlCell::Counter(v.clone()), SysctlHandle::Counter(v))
        }
        SysctlType::String => {
            let mut v = text.to_string();
            if fetch {
                if let Some(t) = st.kenv.get(name) {
                    v = t.clone();
                }
            }
            if name == "kern.hwpmc.cpuid" {
                v = st.cfg.cpuid.clone();
            }
            (SysctlCell::Str(v), SysctlHandle::Str)
        }
    };
    st.sysctl.insert(name.into(), Sysctl { kind, flags, cell });
    Ok(handle)
}

/// What declared oid `name` holds.
pub fn sysctl_handle(name: &str) -> Option<SysctlHandle> {
    let m = current();
    let st = m.st();
    Some(match &st.sysctl.get(name)?.cell {
        SysctlCell::Node => SysctlHandle::Node,
        SysctlCell::Int(v) => SysctlHandle::Int(v.clone()),
        SysctlCell::Counter(v) => SysctlHandle::Counter(v.clone()),
        SysctlCell::Str(_) => SysctlHandle::Str,
    })
}

/// Removes an oid (its module is unloading).
pub fn sysctl_undeclare(name: &str) {
    if let Some(m) = crate::machine::try_current() {
        let old = m.0.handlers().sysctl_str.remove(name);
        drop(old);
        m.st().sysctl.remove(name);
    }
}

/// Atomically adds `delta` to `pmc_ss_count`; returns the new value.
pub fn pmc_ss_count_add(delta: i32) -> i32 {
    let m = current();
    let mut st = m.st();
    st.pmc_ss_count += delta;
    st.pmc_ss_count
}

/// `pmc_ss_count`, read now.
pub fn pmc_ss_count() -> i32 {
    current().st().pmc_ss_count
}

/// `printf(9)` to the console.
pub fn printf(line: &str) {
    current().st().console.push(line.into());
}

/// `syscall_register` with NO_SYSCALL: the first free dynamic slot.
pub fn syscall_register(handler: SyscallHandler) -> u32 {
    let m = current();
    let mut h = m.0.handlers();
    let num = (210..).find(|n| !h.syscalls.contains_key(n)).unwrap_or(210);
    h.syscalls.insert(num, handler);
    num
}

/// `syscall_deregister`.
pub fn syscall_deregister(num: u32) {
    // Dropped after the borrow ends: the handler may own the last
    // reference to kernel state whose teardown calls back in here.
    let old = current().0.handlers().syscalls.remove(&num);
    drop(old);
}

/// Sets `pmc_hook`; `None` clears it.
pub fn set_pmc_hook(hook: Option<HookFn>) {
    let old = std::mem::replace(&mut current().0.handlers().hook, hook);
    drop(old);
}

/// `EVENTHANDLER_REGISTER` for process_fork and process_exit; returns a tag.
pub fn eventhandler_register(handler: EventFn) -> u64 {
    let m = current();
    let mut h = m.0.handlers();
    h.next_event_id += 1;
    let id = h.next_event_id;
    h.events.push((id, handler));
    id
}

/// `EVENTHANDLER_DEREGISTER`.
pub fn eventhandler_deregister(tag: u64) {
    let m = current();
    let old: Vec<_> = {
        let mut h = m.0.handlers();
        let (gone, keep) = std::mem::take(&mut h.events)
            .into_iter()
            .partition(|e| e.0 == tag);
        h.events = keep;
        gone
    };
    drop(old);
}

/// The kernel's soft events (the registry of kern_pmc.c), as (name, code).
pub fn soft_events() -> Vec<(String, u32)> {
    current()
        .st()
        .soft_events
        .iter()
        .map(|e| (e.name.clone(), e.code))
        .collect()
}

/// Whether a soft event with `code` is registered (`pmc_soft_ev_acquire`).
pub fn soft_event_registered(code: u32) -> bool {
    with_softs_lock(|st| st.soft_events.iter().any(|e| e.code == code))
}

/// Adjusts a soft event's `ps_running` count; false when no event has
/// `code`.
pub fn soft_event_running(code: u32, delta: i32) -> bool {
    with_softs_lock(
        |st| match st.soft_events.iter_mut().find(|e| e.code == code) {
            Some(e) => {
                e.running += delta;
                true
            }
            None => false,
        },
    )
}

/// `pmc_softs_mtx` of kern_pmc.c, which `pmc_soft_ev_acquire` takes: a
/// spin lock the witness checks and counts like the driver's own.
pub const SOFTS_LOCK: &str = "pmc-softs";

fn with_softs_lock<R>(f: impl FnOnce(&mut crate::machine::State) -> R) -> R {
    let m = current();
    let mut st = m.st();
    let ctx = st.context();
    st.witness.acquire(SOFTS_LOCK, LockKind::Spin, ctx);
    let r = f(&mut st);
    st.witness.release(SOFTS_LOCK);
    r
}

/// True while the current machine's hooks are being torn down; kernel code
/// asks nothing of it here, but a `free` may run after the test dropped the
/// machine.
pub fn has_machine() -> bool {
    crate::machine::try_current().is_some()
}

/// A voluntary context switch of the current thread on its CPU: the
/// CSW_OUT and CSW_IN hooks run as the scheduler would call them.
pub fn force_context_switch() {
    let m = current();
    let (cpu, tid) = m.st().cur();
    m.may_sleep_here();
    if m.running_on(cpu) == Some(tid) {
        m.switch_out(cpu);
        m.switch_in(cpu, tid);
    }
}

/// `sched_bind(curthread, cpu)`: kernel code runs on `cpu` until
/// [`unbind`] restores the returned CPU.
pub fn bind(cpu: u32) -> u32 {
    let m = current();
    let mut st = m.st();
    let (old, tid) = st.cur();
    st.ctx = Some((cpu, tid));
    old
}

/// Undoes [`bind`].
pub fn unbind(previous: u32) {
    let m = current();
    let mut st = m.st();
    let (_, tid) = st.cur();
    st.ctx = Some((previous, tid));
}

/// `pmc_can_attach`'s credential test: may `owner` still attach to
/// `target`. Root outside a jail may; otherwise the owner's effective uid
/// must be one of the target's uids and the target's group ids must all be
/// the owner's.
pub fn cred_covers(owner: u32, target: u32) -> bool {
    let m = current();
    let st = m.st();
    let (Some(o), Some(t)) = (st.proc_info(owner), st.proc_info(target)) else {
        return false;
    };
    let (o, t) = (o.cred, t.cred);
    if o.uid == 0 && o.jail == 0 {
        return true;
    }
    let uid_ok = o.uid == t.uid || o.uid == t.svuid || o.uid == t.ruid;
    let member = |g: u32| g == o.gid || g == o.rgid || g == o.svgid;
    uid_ok && member(t.gid) && member(t.rgid) && member(t.svgid)
}

/// `fget_write(td, fd, ...)`: a reference to a file the current process
/// has open for writing; EBADF otherwise.
pub fn fget_write(fd: i32) -> Result<u64, i32> {
    const EBADF: i32 = 9;
    let m = current();
    let mut st = m.st();
    let pid = st.cur_pid();
    let id = st.proc_fd(pid, fd).ok_or(EBADF)?;
    let f = st.files.get_mut(&id).ok_or(EBADF)?;
    if !f.writable {
        return Err(EBADF);
    }
    f.refs += 1;
    Ok(id)
}

/// `fdrop`.
pub fn fdrop(id: u64) {
    if let Some(m) = crate::machine::try_current() {
        m.st().unref_file(id);
    }
}

/// How long a kernel writer's last pass waits for a host descriptor to
/// take its bytes before it gives up (EAGAIN) rather than hang the
/// machine for ever on a reader that is gone without closing.
const HOST_LAST_WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `fo_write` of `data`: how much the file took, which may be less than
/// all of it (a short write), or why it took nothing. A full device fails
/// with ENOSPC; a failing one takes what it can, then fails with its
/// errno; an interrupting one fails with EINTR now and then; a full
/// bounded pipe blocks: EAGAIN here, and the writing kernel process is
/// woken when the pipe is drained. May sleep.
pub fn file_write(id: u64, data: &[u8]) -> Result<usize, i32> {
    const ENOSPC: i32 = 28;
    const EBADF: i32 = 9;
    const EINTR: i32 = 4;
    const EAGAIN: i32 = 35;
    let m = current();
    m.may_sleep_here();
    let mut st = m.st();
    let (_, tid) = st.cur();
    let writer = st
        .kprocs
        .iter()
        .find(|(_, k)| k.tid == tid)
        .map(|(id, k)| (*id, k.stopping));
    let f = st.files.get_mut(&id).ok_or(EBADF)?;
    f.writes += 1;
    let n = match f.kind {
        FileKind::Full => return Err(ENOSPC),
        FileKind::Host { fd } => {
            // A writer's last pass waits for the host's reader, as the
            // kernel's writer sleeps on a full pipe; the others never hold
            // the machine up.
            let last_pass = writer.is_some_and(|w| w.1);
            let r = if last_pass {
                crate::host_file::write_waiting(fd, data, HOST_LAST_WRITE_WAIT)
            } else {
                crate::host_file::write(fd, data)
            };
            return match r {
                Err(EAGAIN) => {
                    if let Some((k, _)) = writer {
                        if !f.waiters.contains(&k) {
                            f.waiters.push(k);
                        }
                    }
                    Err(EAGAIN)
                }
                r => r,
            };
        }
        FileKind::Failing { after, errno } => {
            let n = after.saturating_sub(f.data.len()).min(data.len());
            if n == 0 && !data.is_empty() {
                return Err(errno);
            }
            n
        }
        FileKind::Short { max } => max.max(1).min(data.len()),
        FileKind::Interrupting { every } => {
            if f.writes % every.max(2) == 0 {
                return Err(EINTR);
            }
            data.len()
        }
        FileKind::BoundedPipe { capacity } => {
            if f.unread >= capacity && writer.is_some_and(|w| w.1) {
                // A last pass is not left blocked: the reader runs.
                f.unread = 0;
            }
            let room = capacity.saturating_sub(f.unread);
            if room == 0 && !data.is_empty() {
                if let Some((k, _)) = writer {
                    if !f.waiters.contains(&k) {
                        f.waiters.push(k);
                    }
                }
                return Err(EAGAIN);
            }
            let n = room.min(data.len());
            f.unread += n;
            n
        }
        _ => data.len(),
    };
    f.data.extend_from_slice(&data[..n]);
    Ok(n)
}

/// `kproc_create`: a kernel process named `name` whose `body` runs each
/// time it is woken. Fails with EAGAIN when the allocation fault injector
/// says so (fork1 out of resources).
pub fn kproc_create(name: &str, body: KprocFn) -> Result<u64, i32> {
    const EAGAIN: i32 = 35;
    let m = current();
    {
        let mut st = m.st();
        st.kmem.calls += 1;
        if st.kmem.fail_at == Some(st.kmem.calls) {
            return Err(EAGAIN);
        }
    }
    Ok(m.kproc_create(name, body))
}

/// `wakeup` of a kernel process: it runs at the next scheduling point.
pub fn kproc_wakeup(id: u64) {
    if let Some(k) = current().st().kprocs.get_mut(&id) {
        k.pending = true;
    }
}

/// Makes a kernel process run its last pass now and exit.
pub fn kproc_stop(id: u64) {
    current().kproc_stop(id);
}

/// The pid of a kernel process.
pub fn kproc_pid(id: u64) -> Option<u32> {
    current().st().kprocs.get(&id).map(|k| k.pid)
}

/// Where the current thread was when the interrupt being handled (or the
/// kernel entry) caught it.
pub fn location() -> crate::machine::Location {
    let m = current();
    let st = m.st();
    let (_, tid) = st.cur();
    st.location(tid)
}

/// Asks for the current thread's AST at its return to user mode
/// (TDP_CALLCHAIN and `ast_sched`).
pub fn request_userret() {
    let m = current();
    let mut st = m.st();
    let (_, tid) = st.cur();
    st.request_ast(tid);
}

/// Marks `cpu` as having samples for hardclock (DPCPU pmc_sampled).
pub fn set_cpu_sampled(cpu: u32) {
    if let Some(f) = current().st().sampled.get_mut(cpu as usize) {
        *f = true;
    }
}

/// The executable mappings of a process (`vm_map` entries backed by
/// executable vnodes).
pub fn proc_mappings(pid: u32) -> Vec<crate::machine::Mapping> {
    current().st().maps(pid)
}

/// Live processes.
pub fn all_pids() -> Vec<u32> {
    current().st().live_pids()
}

/// The kernel and its modules (`linker_hwpmc_list_objects`).
pub fn kernel_objects() -> Vec<crate::machine::Mapping> {
    current().st().klds.clone()
}

/// Attaches the handler that validates and applies sysctl(8)'s writes to
/// the declared string oid `name`, whose value becomes `value`. ENOENT for
/// an oid not declared as a string.
pub fn sysctl_str_register(
    name: &str,
    value: &str,
    handler: crate::machine::SysctlStrFn,
) -> Result<(), i32> {
    const ENOENT: i32 = 2;
    let m = current();
    {
        let mut st = m.st();
        let o = st
            .sysctl
            .get_mut(name)
            .filter(|o| o.kind == SysctlType::String)
            .ok_or(ENOENT)?;
        o.cell = SysctlCell::Str(value.into());
    }
    m.0.handlers().sysctl_str.insert(name.into(), handler);
    Ok(())
}

/// Detaches a string oid's handler.
pub fn sysctl_str_remove(name: &str) {
    if let Some(m) = crate::machine::try_current() {
        let old = m.0.handlers().sysctl_str.remove(name);
        drop(old);
    }
}

/// `CTR*`: a ktr(4) trace entry.
pub fn ktr(line: &str) {
    current().st().ktr.push(line.into());
}

/// `rdmsr` on the current CPU (the PMU's and the PT unit's MSRs,
/// [`Machine::rdmsr`]). A #GP in the kernel is a panic, as on FreeBSD (a
/// fault in kernel mode with no recovery handler).
pub fn rdmsr(msr: u32) -> u64 {
    let (cpu, value) = rdmsr_here(msr);
    value.unwrap_or_else(|gp| {
        panic!("fatal trap 9: general protection fault in kernel mode on CPU {cpu}: {gp}")
    })
}

/// Whether the kernel runs as a virtual machine's guest (`vm_guest`).
pub fn vm_guest() -> bool {
    current().st().cfg.vm_guest
}

/// `rdmsr_safe`: None where `rdmsr` faults.
pub fn rdmsr_safe(msr: u32) -> Option<u64> {
    rdmsr_here(msr).1.ok()
}

/// `wrmsr_safe`: false where `wrmsr` faults, which then writes nothing.
pub fn wrmsr_safe(msr: u32, value: u64) -> bool {
    wrmsr_here(msr, value).1.is_ok()
}

/// `rdmsr` on the current CPU: that CPU, and what its MSRs answered.
fn rdmsr_here(msr: u32) -> (u32, Result<u64, crate::x86::GpFault>) {
    let m = current();
    let cpu = m.st().cur().0;
    (cpu, m.rdmsr(cpu, msr))
}

/// `wrmsr` on the current CPU: that CPU, and what its MSRs answered.
fn wrmsr_here(msr: u32, value: u64) -> (u32, Result<(), crate::x86::GpFault>) {
    let m = current();
    let cpu = m.st().cur().0;
    (cpu, m.wrmsr(cpu, msr, value))
}

/// `wrmsr` on the current CPU; a #GP panics, as [`rdmsr`].
pub fn wrmsr(msr: u32, value: u64) {
    let (cpu, written) = wrmsr_here(msr, value);
    written.unwrap_or_else(|gp| {
        panic!("fatal trap 9: general protection fault in kernel mode on CPU {cpu}: {gp}")
    })
}

/// `cpuid` (`do_cpuid`/`cpuid_count`): zeros when the machine's CPU key
/// names no x86 model.
pub fn cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    current()
        .st()
        .x86
        .map_or([0; 4], |m| m.cpuid(leaf, subleaf))
}

/// XSAVES of the current CPU's Intel PT state component (state 8): the
/// nine registers in XSAVE order; clears TraceEn as XSAVES does. The
/// component is saved only with IA32_XSS.PT set (pt.c sets it around the
/// instruction); the simulator panics when it is clear, as the caller
/// would otherwise get no state. A CPU without PT faults.
pub fn pt_xsaves() -> [u64; 9] {
    let m = current();
    let (pts, cpu) = {
        let st = m.st();
        (st.pts.clone(), st.cur().0)
    };
    match pts {
        Some(p) => {
            assert!(
                p.xss_of(cpu) & crate::x86::pt::XSS_PT != 0,
                "XSAVES of the PT component on CPU {cpu} with IA32_XSS.PT clear: nothing is saved"
            );
            p.save_state(cpu)
        }
        None => panic!(
            "fatal trap 9: general protection fault in kernel mode on CPU {cpu}: XSAVES of PT state on a CPU without Intel PT"
        ),
    }
}

/// XRSTORS of the current CPU's Intel PT state component; a #GP (a
/// reserved bit, TraceEn already set) panics, as in the kernel.
pub fn pt_xrstors(state: &[u64; 9]) {
    let m = current();
    let (pts, cpu) = {
        let st = m.st();
        (st.pts.clone(), st.cur().0)
    };
    let r = match pts {
        Some(p) => {
            assert!(
                p.xss_of(cpu) & crate::x86::pt::XSS_PT != 0,
                "XRSTORS of the PT component on CPU {cpu} with IA32_XSS.PT clear: nothing is restored"
            );
            p.restore_state(cpu, state)
        }
        None => Err(crate::x86::GpFault {
            msr: crate::x86::pt::msr::CTL,
            value: Some(state[0]),
            why: "XRSTORS of PT state on a CPU without Intel PT",
        }),
    };
    r.unwrap_or_else(|gp| {
        panic!("fatal trap 9: general protection fault in kernel mode on CPU {cpu}: {gp}")
    })
}

/// The machine's physical memory (the kernel's `vm_page_alloc` and
/// `vtophys` for buffers the hardware models reach).
pub fn physmem() -> std::sync::Arc<crate::physmem::PhysMem> {
    current().physmem()
}

/// `lapic_enable_pcint`: the performance-counter LVT entry of every CPU
/// delivers an NMI, unmasked; false when the machine has no such entry.
/// Counted, as FreeBSD counts its users: the first unmasks.
pub fn lapic_enable_pcint() -> bool {
    let m = current();
    let pmus = {
        let mut st = m.st();
        let Some(p) = st.pmus.clone() else {
            return false;
        };
        st.pcint_refs += 1;
        (st.pcint_refs == 1).then_some(p)
    };
    if let Some(p) = pmus {
        p.set_lvt_all(crate::x86::pmu::LVT_DM_NMI);
    }
    true
}

/// `lapic_disable_pcint`: the last user masks every CPU's entry.
pub fn lapic_disable_pcint() {
    let m = current();
    let pmus = {
        let mut st = m.st();
        let Some(p) = st.pmus.clone() else {
            return;
        };
        st.pcint_refs = st.pcint_refs.saturating_sub(1);
        (st.pcint_refs == 0).then_some(p)
    };
    if let Some(p) = pmus {
        p.set_lvt_all(crate::x86::pmu::LVT_DM_NMI | crate::x86::pmu::LVT_MASKED);
    }
}

/// `lapic_reenable_pcint`: unmasks the current CPU's entry (a delivered PMI
/// masked it).
pub fn lapic_reenable_pcint() {
    let m = current();
    let (pmus, cpu) = {
        let st = m.st();
        (st.pmus.clone(), st.cur().0)
    };
    if let Some(p) = pmus {
        p.unmask_lvt(cpu);
    }
}

/// `nmi_register_handler` (`Some`) or `nmi_remove_handler` (`None`) of
/// the PMC interrupt handler, which the NMI trap calls.
pub fn set_pmc_intr(handler: Option<crate::machine::PmcIntrFn>) {
    let old = std::mem::replace(&mut current().0.handlers().pmc_intr, handler);
    drop(old);
}

/// CR4.PCE of the current CPU: whether its user mode may run `rdpmc`.
pub fn set_user_rdpmc(enabled: bool) {
    let m = current();
    let mut st = m.st();
    let cpu = st.cur().0 as usize;
    if let Some(v) = st.user_rdpmc.get_mut(cpu) {
        *v = enabled;
    }
    if let Some(n) = st.user_rdpmc_writes.get_mut(cpu) {
        *n += 1;
    }
}

/// How many times CPU `cpu`'s CR4.PCE was written.
pub fn user_rdpmc_writes(cpu: u32) -> u64 {
    current()
        .st()
        .user_rdpmc_writes
        .get(cpu as usize)
        .copied()
        .unwrap_or(0)
}

/// Whether CPU `cpu` lets user mode run `rdpmc` (CR4.PCE).
pub fn user_rdpmc(cpu: u32) -> bool {
    current()
        .st()
        .user_rdpmc
        .get(cpu as usize)
        .copied()
        .unwrap_or(false)
}

/// `msleep(9)` / `tsleep(9)` of the current thread on `chan`: `unlock`
/// releases the interlock once the thread is on the sleep queue. Ok when
/// woken, EINTR when a signal ended a `catch` (PCATCH) sleep. Sleeping
/// needs a race (`Machine::race`) for anything else to run.
pub fn msleep(chan: usize, catch: bool, wmesg: &str, unlock: impl FnOnce()) -> Result<(), i32> {
    const EINTR: i32 = 4;
    let pid = curproc();
    let why = crate::sched::sleep(chan, catch, pid, wmesg, || {
        unlock();
        may_sleep();
    });
    match why {
        crate::sched::Wake::Signal => Err(EINTR),
        _ => Ok(()),
    }
}

/// `wakeup(9)`.
pub fn wakeup(chan: usize) {
    crate::sched::wakeup(chan);
}

pub use crate::machine::devices::{
    destroy_dev, make_dev, proc_flag2, proc_flag2_set, set_hwt_hook,
};

/// hwt(4)'s credential test (hwt_priv_check): the owner's effective uid
/// is one of the target's uids, and each of the target's group ids is a
/// group of the owner (groupmember(): its effective gid; the simulated
/// credentials have no supplementary groups). No privilege bypasses it.
pub fn cred_same_user(owner: u32, target: u32) -> bool {
    let m = current();
    let st = m.st();
    let (Some(o), Some(t)) = (st.proc_info(owner), st.proc_info(target)) else {
        return false;
    };
    let (o, t) = (o.cred, t.cred);
    let uid_ok = o.uid == t.uid || o.uid == t.svuid || o.uid == t.ruid;
    uid_ok && [t.gid, t.rgid, t.svgid].iter().all(|&g| g == o.gid)
}

/// `nmi_register_handler`: `handler` runs on every NMI after `pmc_intr`
/// and says whether it claimed it. Returns a tag for
/// [`nmi_remove_handler`].
pub fn nmi_register_handler(handler: crate::machine::PmcIntrFn) -> u64 {
    let m = current();
    let mut h = m.0.handlers();
    h.next_nmi_handler += 1;
    let id = h.next_nmi_handler;
    h.nmi_handlers.push((id, handler));
    id
}

/// `nmi_remove_handler`.
pub fn nmi_remove_handler(id: u64) {
    if let Some(m) = crate::machine::try_current() {
        let removed: Vec<_> = {
            let mut h = m.0.handlers();
            let (gone, kept) = std::mem::take(&mut h.nmi_handlers)
                .into_iter()
                .partition(|(i, _)| *i == id);
            h.nmi_handlers = kept;
            gone
        };
        drop(removed);
    }
}

/// What FreeBSD's pt(4) does around XSAVES or XRSTORS of the PT
/// component (pt_cpu_toggle_local): IA32_XSS.PT set for the instruction,
/// then restored.
fn with_xss_pt<R>(f: impl FnOnce() -> R) -> R {
    const MSR_IA32_XSS: u32 = 0xDA0;
    let xss = rdmsr(MSR_IA32_XSS);
    wrmsr(MSR_IA32_XSS, xss | crate::x86::pt::XSS_PT);
    let r = f();
    wrmsr(MSR_IA32_XSS, xss);
    r
}

/// XSAVES of the PT component as the kernel's driver makes it.
pub fn xsaves_pt() -> [u64; 9] {
    with_xss_pt(pt_xsaves)
}

/// XRSTORS of the PT component as the kernel's driver makes it.
pub fn xrstors_pt(state: &[u64; 9]) {
    with_xss_pt(|| pt_xrstors(state))
}

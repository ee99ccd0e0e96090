//! `/dev/hwt`'s ioctl (hwt_ioctl.c): HWT_IOC_ALLOC makes a context for a
//! process (thread mode) or a set of CPUs (CPU mode); nothing else is
//! accepted (ENXIO).

use core::fmt::Write;

use kpi::KResult;
use kpi::errno::{EEXIST, EINVAL, ENODEV, ENXIO, EPERM};
use kpi::malloc::{KArc, Wait};
use kpi::proc::Pid;
use kpi::uio::{UserPtr, copyin_bytes, copyinstr, copyout};
use uapi::Plain;
use uapi::hwt::{HWT_BACKEND_MAXNAMELEN, HWT_IOC_ALLOC, HWT_MODE_CPU, HWT_MODE_THREAD, HwtAlloc};
use uapi::hwt_record::HwtRecordType;

use crate::Hwt;
use crate::hwt_backend::{Backend, BufId};
use crate::hwt_context::{CPUSET_BYTES, CpuMap, HwtContext};
use crate::hwt_cpu::HwtCpu;
use crate::hwt_owner::HwtOwner;
use crate::hwt_record::Record;
use crate::hwt_thread::HwtThread;
use crate::hwt_vm::HwtVm;

/// `HWT_MAXBUFSIZE`: 32 GiB.
const HWT_MAXBUFSIZE: usize = 32 << 30;

/// `hwt_ioctl`.
pub(crate) fn hwt_ioctl(hwt: &KArc<Hwt>, cmd: u32, data: &mut [u8]) -> KResult<()> {
    match cmd {
        HWT_IOC_ALLOC => {
            let arg = HwtAlloc::read_from(data).ok_or(EINVAL)?;
            alloc(hwt, &arg)
        }
        _ => Err(ENXIO),
    }
}

/// The device name of thread `thread_id` of context `ident` tracing
/// `pid`: `hwt_<ident>_<pid>` for the first, `hwt_<ident>_<pid>_<id>`
/// for the others.
pub(crate) fn thread_dev_name(out: &mut kpi::LineBuf<64>, ident: i32, pid: Pid, thread_id: i32) {
    let _ = if thread_id == 0 {
        write!(out, "hwt_{ident}_{pid}")
    } else {
        write!(out, "hwt_{ident}_{pid}_{thread_id}")
    };
}

/// `hwt_ioctl_alloc`: the checks in FreeBSD's order, then the mode.
fn alloc(hwt: &KArc<Hwt>, arg: &HwtAlloc) -> KResult<()> {
    if arg.bufsize > HWT_MAXBUFSIZE || arg.bufsize % kpi::cdev::PAGE_SIZE != 0 {
        return Err(EINVAL);
    }
    if arg.backend_name.is_null() {
        return Err(EINVAL);
    }
    let name = copyinstr(
        UserPtr(arg.backend_name as u64),
        HWT_BACKEND_MAXNAMELEN,
        Wait::WaitOk,
    )?;
    let backend = hwt.backend_lookup(&name).ok_or(ENODEV)?;
    let owner = hwt.owner_get_or_insert(kpi::proc::curproc())?;
    match arg.mode {
        HWT_MODE_THREAD => alloc_thread_mode(hwt, &owner, backend, arg),
        HWT_MODE_CPU => alloc_cpu_mode(hwt, &owner, backend, arg),
        _ => Err(ENXIO),
    }
}

/// Frees a context that never became visible (an ALLOC that failed).
fn discard(hwt: &Hwt, ctx: HwtContext) {
    ctx.free_members();
    hwt.ident_free(ctx.ident);
}

/// Thread mode: every thread of `pid` gets a buffer and a device, and a
/// THREAD_CREATE record; then the hooks see the process.
fn alloc_thread_mode(
    hwt: &KArc<Hwt>,
    owner: &HwtOwner,
    backend: KArc<Backend>,
    arg: &HwtAlloc,
) -> KResult<()> {
    let pid = arg.pid as Pid;
    if owner.ctx_for_pid(pid).is_some() {
        return Err(EEXIST);
    }
    let ctx = HwtContext::alloc(
        hwt,
        HWT_MODE_THREAD,
        pid,
        arg.bufsize,
        arg.kqueue_fd,
        CpuMap::default(),
        backend,
    )?;
    let ctx = publish(hwt, owner, ctx, arg, |ctx| fill_thread_mode(hwt, ctx, pid))?;
    // From here the hooks act on it, though it is stopped.
    if let Err(e) = hwt.context_insert(ctx.clone()) {
        owner.ctxs.lock().retain(|c| !KArc::ptr_eq(c, &ctx));
        ctx.backend.ops.deinit(&ctx);
        retire(hwt, ctx);
        return Err(e);
    }
    kpi::proc::set_flag2(pid, kpi::proc::P2_HWT, 0);
    Ok(())
}

/// The steps of ALLOC once the context exists: its ident to userland
/// first (as in FreeBSD, before anything else can fail), `fill`, the
/// backend's init, then the owner's list. A failure frees the context.
fn publish(
    hwt: &Hwt,
    owner: &HwtOwner,
    mut ctx: HwtContext,
    arg: &HwtAlloc,
    fill: impl FnOnce(&mut HwtContext) -> KResult<()>,
) -> KResult<KArc<HwtContext>> {
    let r = copyout(&ctx.ident, UserPtr(arg.ident as u64))
        .and_then(|()| fill(&mut ctx))
        .and_then(|()| ctx.backend.ops.init(&ctx));
    if let Err(e) = r {
        discard(hwt, ctx);
        return Err(e);
    }
    let ctx = shared(hwt, ctx)?;
    if let Err(e) = owner.insert(ctx.clone()) {
        ctx.backend.ops.deinit(&ctx);
        retire(hwt, ctx);
        return Err(e);
    }
    Ok(ctx)
}

/// The context behind a reference; if that fails, its members go with
/// it and its ident is freed.
fn shared(hwt: &Hwt, ctx: HwtContext) -> KResult<KArc<HwtContext>> {
    let ident = ctx.ident;
    KArc::try_new(ctx, Wait::WaitOk).inspect_err(|_| hwt.ident_free(ident))
}

/// Frees a context that was shared but never reached the hooks.
fn retire(hwt: &Hwt, ctx: KArc<HwtContext>) {
    ctx.free_members();
    hwt.ident_free(ctx.ident);
}

/// The target checks and the threads of a thread-mode context.
fn fill_thread_mode(hwt: &KArc<Hwt>, ctx: &HwtContext, pid: Pid) -> KResult<()> {
    let target = kpi::proc::pfind(pid, Wait::WaitOk)?.ok_or(ENXIO)?;
    if target.zombie {
        return Err(ENXIO);
    }
    if !kpi::proc::cred_same_user(kpi::proc::curproc(), pid) {
        return Err(EPERM);
    }
    if hwt.context_exists(pid) {
        return Err(EEXIST);
    }
    for &tid in target.threads.iter() {
        let thread_id = ctx.next_thread_id();
        let mut name = kpi::LineBuf::<64>::new();
        thread_dev_name(&mut name, ctx.ident, pid, thread_id);
        let vm = HwtVm::alloc(
            hwt,
            ctx.ident,
            BufId::Thread(thread_id),
            ctx.bufsize,
            name.as_str(),
        )?;
        let thr = KArc::try_new(HwtThread::alloc(thread_id, tid, vm)?, Wait::WaitOk)?;
        // The backend's data first, as the thread-create hook and
        // FreeBSD's ALLOC do: a thread in the context always has it.
        ctx.backend.thread_alloc(ctx, thread_id, &thr.vm.pages)?;
        if let Err(e) = ctx.thread_insert(thr) {
            ctx.backend.thread_free(ctx, thread_id);
            return Err(e);
        }
        ctx.enqueue(Record::Thread {
            kind: HwtRecordType::ThreadCreate,
            thread_id,
        });
    }
    Ok(())
}

/// CPU mode: each CPU of the set gets a buffer and a device; the kernel's
/// objects are recorded. The scheduler's hooks do not see the context.
fn alloc_cpu_mode(
    hwt: &KArc<Hwt>,
    owner: &HwtOwner,
    backend: KArc<Backend>,
    arg: &HwtAlloc,
) -> KResult<()> {
    let size = arg.cpusetsize.min(CPUSET_BYTES);
    let bytes = copyin_bytes(UserPtr(arg.cpu_map as u64), size, Wait::WaitOk)?;
    let map = CpuMap::from_bytes(&bytes);
    let mut count = 0;
    for cpu in map.iter() {
        // Halted CPUs are refused, as FreeBSD does; so are CPUs that do
        // not exist.
        if !kpi::cpu::is_active(cpu) {
            return Err(ENXIO);
        }
        count += 1;
    }
    if count == 0 {
        return Err(ENODEV);
    }
    let ctx = HwtContext::alloc(
        hwt,
        HWT_MODE_CPU,
        0,
        arg.bufsize,
        arg.kqueue_fd,
        map,
        backend,
    )?;
    let ctx = publish(hwt, owner, ctx, arg, |ctx| {
        ctx.cpus.try_reserve(count, Wait::WaitOk)?;
        for cpu in map.iter() {
            let mut name = kpi::LineBuf::<64>::new();
            let _ = write!(name, "hwt_{}_{}", ctx.ident, cpu);
            let vm = HwtVm::alloc(hwt, ctx.ident, BufId::Cpu(cpu), ctx.bufsize, name.as_str())?;
            let _ = ctx.cpus.push_within_capacity(HwtCpu { cpu_id: cpu, vm });
        }
        Ok(())
    })?;
    // Best effort, as in FreeBSD: a context without them still traces.
    let _ = ctx.record_kernel_objects();
    Ok(())
}

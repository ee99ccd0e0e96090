//! The hook (hwt_hook.c) the kernel calls through `hwt_hook` for the
//! threads of every process; it acts only for processes with `P2_HWT`.

use kpi::KResult;
use kpi::hooks::{HwtHook, HwtThread as HookThread};
use kpi::malloc::{KArc, Wait};
use uapi::hwt_record::HwtRecordType;

use crate::Hwt;
use crate::hwt_backend::BufId;
use crate::hwt_context::CtxState;
use crate::hwt_record::Record;
use crate::hwt_thread::HwtThread;
use crate::hwt_vm::HwtVm;

/// `hwt_hook_load`.
pub(crate) fn hook_load(hwt: &KArc<Hwt>) -> KResult<()> {
    let hwt = hwt.clone();
    let hook = kpi::kbox_dyn!(
        move |td: HookThread, call: &HwtHook<'_>| hook_handler(&hwt, td, call),
        Wait::WaitOk,
        dyn Fn(HookThread, &HwtHook<'_>) + Send + Sync
    )?;
    kpi::hooks::set_hwt_hook(Some(hook));
    Ok(())
}

/// `hwt_hook_unload`.
pub(crate) fn hook_unload() {
    kpi::hooks::set_hwt_hook(None);
}

/// `hwt_hook_handler`.
fn hook_handler(hwt: &KArc<Hwt>, td: HookThread, call: &HwtHook<'_>) {
    if td.flag2 & kpi::proc::P2_HWT == 0 {
        return;
    }
    match call {
        HwtHook::SwitchIn => switch_in(hwt, td),
        HwtHook::SwitchOut => switch_out(hwt, td),
        HwtHook::ThreadExit => thread_exit(hwt, td),
        HwtHook::ThreadCreate => {
            // A thread the context could not take is not traced; the
            // process runs on regardless.
            let _ = thread_create(hwt, td);
        }
        HwtHook::ThreadSetName => {}
        HwtHook::Exec(rec) | HwtHook::Mmap(rec) => {
            crate::hwt_record::record_td(hwt, td.pid, rec);
            pause_on_mmap(hwt, td);
        }
        HwtHook::Record(rec) => crate::hwt_record::record_td(hwt, td.pid, rec),
    }
}

/// SWITCH_IN: a running context's thread gets the unit of this CPU.
fn switch_in(hwt: &Hwt, td: HookThread) {
    let Some(ctx) = hwt.context_lookup(td.pid) else {
        return;
    };
    if ctx.state() != CtxState::Running {
        return;
    }
    let Some(thr) = ctx.thread_lookup(td.tid) else {
        return;
    };
    let cpu = kpi::cpu::curcpu();
    if ctx
        .backend
        .ops
        .configure(&ctx, cpu, BufId::Thread(thr.thread_id))
        .is_ok()
    {
        ctx.backend.ops.enable(&ctx, cpu);
        thr.set_active(Some(cpu));
    }
}

/// SWITCH_OUT: the unit that traced the thread stops (whatever the
/// context's state now: a STOP while it ran leaves the unit on until
/// here).
fn switch_out(hwt: &Hwt, td: HookThread) {
    let Some(ctx) = hwt.context_lookup(td.pid) else {
        return;
    };
    let Some(thr) = ctx.thread_lookup(td.tid) else {
        return;
    };
    let cpu = kpi::cpu::curcpu();
    if thr.active_on(cpu) {
        ctx.backend.ops.disable(&ctx, cpu);
        thr.set_active(None);
    }
}

/// THREAD_EXIT: the thread is marked exited and its unit stops.
fn thread_exit(hwt: &Hwt, td: HookThread) {
    let Some(ctx) = hwt.context_lookup(td.pid) else {
        return;
    };
    let Some(thr) = ctx.thread_lookup(td.tid) else {
        return;
    };
    thr.exited.store(true, kpi::atomic::Ordering::Relaxed);
    let cpu = kpi::cpu::curcpu();
    if thr.active_on(cpu) {
        ctx.backend.ops.disable(&ctx, cpu);
        thr.set_active(None);
    }
}

/// THREAD_CREATE (`hwt_hook_thread_create`): the new thread gets a
/// buffer and a device (made without holding the context), the backend's
/// data, and a THREAD_CREATE record for userland.
fn thread_create(hwt: &KArc<Hwt>, td: HookThread) -> KResult<()> {
    let Some(ctx) = hwt.context_lookup(td.pid) else {
        return Ok(());
    };
    if ctx.state() == CtxState::Dying {
        return Ok(());
    }
    let thread_id = ctx.next_thread_id();
    let (ident, pid, bufsize) = (ctx.ident, ctx.pid, ctx.bufsize);
    drop(ctx);
    let mut name = kpi::LineBuf::<64>::new();
    crate::hwt_ioctl::thread_dev_name(&mut name, ident, pid, thread_id);
    let vm = HwtVm::alloc(hwt, ident, BufId::Thread(thread_id), bufsize, name.as_str())?;
    let thr = KArc::try_new(HwtThread::alloc(thread_id, td.tid, vm)?, Wait::WaitOk)?;
    let Some(ctx) = hwt.context_lookup(td.pid) else {
        return Ok(());
    };
    // The backend's data first, so that the hooks never find the thread
    // without it; the thread is not in the context yet, so the backend
    // is given its buffer.
    ctx.backend.thread_alloc(&ctx, thread_id, &thr.vm.pages)?;
    if let Err(e) = ctx.thread_insert(thr) {
        ctx.backend.thread_free(&ctx, thread_id);
        return Err(e);
    }
    ctx.enqueue(Record::Thread {
        kind: HwtRecordType::ThreadCreate,
        thread_id,
    });
    Ok(())
}

/// After an EXEC or MMAP record: with pause-on-mmap set, the thread
/// sleeps ("hwt-mmap") until WAKEUP on its device, a signal, or the
/// context's teardown.
fn pause_on_mmap(hwt: &Hwt, td: HookThread) {
    let Some(ctx) = hwt.context_lookup(td.pid) else {
        return;
    };
    let pause = ctx.locked.lock().pause_on_mmap && ctx.state() != CtxState::Dying;
    let Some(thr) = ctx.thread_lookup(td.tid) else {
        return;
    };
    // The thread's reference keeps it while it sleeps; the context's is
    // let go, so that teardown can go ahead and wake it.
    drop(ctx);
    if pause {
        thr.pause();
    }
}

//! Owners (hwt_owner.c): the processes that allocated contexts. A
//! context lives until its owner exits (or the module unloads); then
//! every context of the owner is torn down.

use kpi::KResult;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::Pid;
use kpi::sync::{Mutex, MutexBox};

use crate::Hwt;
use crate::hwt_context::{CtxState, HwtContext};

/// An owner (`struct hwt_owner`).
#[derive(Debug)]
pub(crate) struct HwtOwner {
    pub(crate) pid: Pid,
    /// Its contexts ("hwts").
    pub(crate) ctxs: MutexBox<KVec<KArc<HwtContext>>>,
}

impl HwtOwner {
    pub(crate) fn alloc(pid: Pid) -> KResult<HwtOwner> {
        Ok(HwtOwner {
            pid,
            ctxs: Mutex::new(c"hwts", KVec::new(), Wait::WaitOk)?,
        })
    }

    /// `hwt_owner_lookup_ctx`: its context for `pid`. A CPU-mode context
    /// has pid 0, as in FreeBSD's, so that it is also the one found for
    /// a thread-mode request for pid 0.
    pub(crate) fn ctx_for_pid(&self, pid: Pid) -> Option<KArc<HwtContext>> {
        let l = self.ctxs.lock();
        l.iter().find(|c| c.pid == pid).cloned()
    }

    /// Its context `ident`.
    pub(crate) fn ctx_by_ident(&self, ident: i32) -> Option<KArc<HwtContext>> {
        let l = self.ctxs.lock();
        l.iter().find(|c| c.ident == ident).cloned()
    }

    /// Adds a context (`LIST_INSERT_HEAD(&ho->hwts, ...)`).
    pub(crate) fn insert(&self, ctx: KArc<HwtContext>) -> KResult<()> {
        self.ctxs.lock().try_push(ctx, Wait::NoWait)
    }
}

/// The process_exit handler (`hwt_process_exit`).
pub(crate) fn process_exit(hwt: &KArc<Hwt>, pid: Pid) {
    if let Some(owner) = hwt.owner_lookup(pid) {
        owner_shutdown(hwt, owner);
    }
}

/// Every owner's contexts (module unload).
pub(crate) fn shutdown_all(hwt: &KArc<Hwt>) {
    loop {
        let owner = hwt.owners.lock().list.first().cloned();
        match owner {
            Some(o) => owner_shutdown(hwt, o),
            None => break,
        }
    }
}

/// `hwt_owner_shutdown`: each context leaves the hooks' table, stops,
/// waits for the hooks still using it, and is freed with its threads,
/// buffers, devices and records; then the owner goes.
fn owner_shutdown(hwt: &KArc<Hwt>, owner: KArc<HwtOwner>) {
    loop {
        let ctx = {
            let mut l = owner.ctxs.lock();
            if l.is_empty() {
                None
            } else {
                Some(l.remove(0))
            }
        };
        let Some(ctx) = ctx else { break };
        ctx_teardown(hwt, ctx);
    }
    drop(hwt.owner_remove(&owner));
}

/// Frees one context whose owner let it go.
pub(crate) fn ctx_teardown(hwt: &KArc<Hwt>, ctx: KArc<HwtContext>) {
    if !ctx.cpu_mode() {
        hwt.context_remove(&ctx);
    }
    ctx.locked.lock().state = CtxState::Dying;
    ctx.records.close();
    // The hooks, and a RECORD_GET that was waiting, hold references
    // while they act on the context; wait for them, so that the last
    // reference is this one.
    while KArc::count(&ctx) > 1 {
        kpi::cpu::spinwait();
    }
    // Units still tracing for it (a thread on a CPU now, the CPUs of a
    // running CPU-mode context) stop before its buffers go: FreeBSD frees
    // them under a running unit.
    let _ = ctx.backend.stop(&ctx);
    ctx.backend.ops.deinit(&ctx);
    ctx.free_members();
    hwt.ident_free(ctx.ident);
    if !ctx.cpu_mode() {
        kpi::proc::set_flag2(ctx.pid, 0, kpi::proc::P2_HWT);
    }
    drop(ctx);
}

impl HwtContext {
    /// `hwt_ctx_free` of the members: the threads (a thread paused in
    /// the exec or mmap hook is woken and lets its reference go), the
    /// backend's per-thread data, records and configuration.
    pub(crate) fn free_members(&self) {
        let threads = core::mem::take(&mut self.locked.lock().threads);
        for thr in threads.iter() {
            self.backend.thread_free(self, thr.thread_id);
            thr.release();
        }
        drop(threads);
        self.records.queue.lock().clear();
        let config = self.locked.lock().config.take();
        drop(config);
    }
}

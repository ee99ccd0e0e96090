//! The traced processes' contexts (hwt_contexthash.c), by target pid:
//! the hooks find a thread-mode context here. A spin lock guards it, the
//! hooks being called from the scheduler.

use kpi::KResult;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::Pid;

use crate::Hwt;
use crate::hwt_context::HwtContext;

/// The table: few processes are traced at once, so a list does.
#[derive(Debug, Default)]
pub(crate) struct ContextHash {
    pub(crate) list: KVec<KArc<HwtContext>>,
}

impl Hwt {
    /// `hwt_contexthash_lookup`: the context tracing `pid`, with a
    /// reference.
    pub(crate) fn context_lookup(&self, pid: Pid) -> Option<KArc<HwtContext>> {
        let h = self.contexts.lock();
        h.list.iter().find(|c| c.pid == pid).cloned()
    }

    /// Whether some context traces `pid`.
    pub(crate) fn context_exists(&self, pid: Pid) -> bool {
        self.contexts.lock().list.iter().any(|c| c.pid == pid)
    }

    /// `hwt_contexthash_insert`; the table grows outside the spin lock.
    pub(crate) fn context_insert(&self, ctx: KArc<HwtContext>) -> KResult<()> {
        let mut ctx = Some(ctx);
        loop {
            let need = {
                let mut h = self.contexts.lock();
                if h.list.spare_capacity() > 0 {
                    if let Some(c) = ctx.take() {
                        let _ = h.list.push_within_capacity(c);
                    }
                    return Ok(());
                }
                h.list.len() * 2 + 1
            };
            let mut bigger = KVec::with_capacity(need, Wait::WaitOk)?;
            let old = {
                let mut h = self.contexts.lock();
                if h.list.spare_capacity() == 0 && bigger.capacity() > h.list.len() {
                    for c in h.list.iter() {
                        let _ = bigger.push_within_capacity(c.clone());
                    }
                    Some(core::mem::replace(&mut h.list, bigger))
                } else {
                    None
                }
            };
            // The old table and its references go after the lock.
            drop(old);
        }
    }

    /// `hwt_contexthash_remove`.
    pub(crate) fn context_remove(&self, ctx: &KArc<HwtContext>) {
        let removed = {
            let mut h = self.contexts.lock();
            let at = h.list.iter().position(|c| KArc::ptr_eq(c, ctx));
            at.map(|i| h.list.swap_remove(i))
        };
        drop(removed);
    }
}

//! The owners (hwt_ownerhash.c), by the owner process's pid.

use kpi::KResult;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::Pid;

use crate::Hwt;
use crate::hwt_owner::HwtOwner;

/// The table: few processes own contexts at once, so a list does.
#[derive(Debug, Default)]
pub(crate) struct OwnerHash {
    pub(crate) list: KVec<KArc<HwtOwner>>,
}

impl OwnerHash {
    /// The contexts of every owner.
    pub(crate) fn contexts(&self) -> usize {
        self.list.iter().map(|o| o.ctxs.lock().len()).sum()
    }
}

impl Hwt {
    /// `hwt_ownerhash_lookup`.
    pub(crate) fn owner_lookup(&self, pid: Pid) -> Option<KArc<HwtOwner>> {
        self.owners
            .lock()
            .list
            .iter()
            .find(|o| o.pid == pid)
            .cloned()
    }

    /// The owner record of `pid`, made if it has none
    /// (`hwt_owner_alloc` + `hwt_ownerhash_insert`).
    pub(crate) fn owner_get_or_insert(&self, pid: Pid) -> KResult<KArc<HwtOwner>> {
        if let Some(o) = self.owner_lookup(pid) {
            return Ok(o);
        }
        let owner = KArc::try_new(HwtOwner::alloc(pid)?, Wait::WaitOk)?;
        let mut h = self.owners.lock();
        if let Some(o) = h.list.iter().find(|o| o.pid == pid) {
            return Ok(o.clone());
        }
        h.list.try_push(owner.clone(), Wait::NoWait)?;
        Ok(owner)
    }

    /// `hwt_ownerhash_remove`.
    pub(crate) fn owner_remove(&self, owner: &KArc<HwtOwner>) -> Option<KArc<HwtOwner>> {
        let mut h = self.owners.lock();
        let at = h.list.iter().position(|o| KArc::ptr_eq(o, owner));
        at.map(|i| h.list.swap_remove(i))
    }
}

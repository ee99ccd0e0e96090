//! Target process descriptors (`struct pmc_process`) and the pid hash that
//! holds them. The context-switch hooks look descriptors up with a spin
//! lock held, so insertion never allocates: a node is allocated first
//! ([`PidHash::prepare`]) and linked in afterwards.

use kpi::KResult;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::proc::Pid;

use crate::Pmc;

/// One row of a target descriptor (`pp_pmcs[ri]`).
#[derive(Debug, Default)]
pub(crate) struct PpSlot {
    /// The PMC attached to the process on this row.
    pub pmc: Option<KArc<Pmc>>,
    /// The process's own count (counting) or remaining count (sampling).
    pub pmcval: u64,
}

/// `struct pmc_process`: a process some PMC is attached to.
#[derive(Debug)]
pub(crate) struct PmcProcess {
    /// One slot per row.
    pub slots: KVec<PpSlot>,
    /// Attached PMCs.
    pub refcnt: u32,
    /// The owner enabled user-mode RDPMC (`PMC_PP_ENABLE_MSR_ACCESS`).
    pub msr_access: bool,
    /// Per-thread state of process sampling PMCs (`struct pmc_thread`).
    pub threads: KVec<PmcThread>,
}

/// `struct pmc_thread`: a thread's remaining sampling count per row.
#[derive(Debug)]
pub(crate) struct PmcThread {
    /// The thread.
    pub tid: u32,
    /// Remaining count per row (0: start from the reload count).
    pub vals: KVec<u64>,
}

impl PmcThread {
    /// A descriptor for `tid` with `npmc` rows.
    pub fn new(tid: u32, npmc: u32, wait: Wait) -> KResult<PmcThread> {
        Ok(PmcThread {
            tid,
            vals: KVec::from_fn(npmc as usize, wait, |_| 0)?,
        })
    }
}

impl PmcProcess {
    /// The descriptor of thread `tid`.
    pub fn thread_mut(&mut self, tid: u32) -> Option<&mut PmcThread> {
        self.threads.iter_mut().find(|t| t.tid == tid)
    }

    /// A descriptor with `npmc` empty slots and a thread descriptor for
    /// each of `tids`.
    pub fn new(npmc: u32, tids: &[u32], wait: Wait) -> KResult<PmcProcess> {
        let mut threads = KVec::with_capacity(tids.len(), wait)?;
        for &tid in tids {
            let _ = threads.push_within_capacity(PmcThread::new(tid, npmc, wait)?);
        }
        Ok(PmcProcess {
            slots: KVec::from_fn(npmc as usize, wait, |_| PpSlot::default())?,
            refcnt: 0,
            msr_access: false,
            threads,
        })
    }
}

#[derive(Debug)]
pub(crate) struct Node<T> {
    pid: Pid,
    value: T,
    next: Option<KBox<Node<T>>>,
}

/// A node allocated ahead of its insertion.
#[derive(Debug)]
pub(crate) struct Prepared<T>(KBox<Node<T>>);

impl<T> Prepared<T> {
    /// The value, freeing the node.
    #[cfg(test)]
    pub fn into_value(self) -> T {
        self.0.into_inner().value
    }
}

/// A hash of values by pid with `kern.hwpmc.hashsize` chains.
#[derive(Debug)]
pub(crate) struct PidHash<T> {
    buckets: KVec<Option<KBox<Node<T>>>>,
    len: usize,
}

impl<T> PidHash<T> {
    /// An empty hash of `size` chains.
    pub fn new(size: u32, wait: Wait) -> KResult<PidHash<T>> {
        Ok(PidHash {
            buckets: KVec::from_fn(size.max(1) as usize, wait, |_| None)?,
            len: 0,
        })
    }

    fn bucket(&self, pid: Pid) -> usize {
        // Fibonacci hashing spreads consecutive pids.
        (pid.wrapping_mul(0x9E37_79B9) as usize) % self.buckets.len()
    }

    /// Allocates the node for `value` without touching the hash.
    pub fn prepare(pid: Pid, value: T, wait: Wait) -> KResult<Prepared<T>> {
        Ok(Prepared(KBox::try_new(
            Node {
                pid,
                value,
                next: None,
            },
            wait,
        )?))
    }

    /// Links a prepared node in; allocates nothing.
    pub fn insert(&mut self, node: Prepared<T>) {
        let mut node = node.0;
        let b = self.bucket(node.pid);
        node.next = self.buckets[b].take();
        self.buckets[b] = Some(node);
        self.len += 1;
    }

    /// The value for `pid`.
    pub fn get(&self, pid: Pid) -> Option<&T> {
        let mut cur = self.buckets[self.bucket(pid)].as_ref();
        while let Some(n) = cur {
            if n.pid == pid {
                return Some(&n.value);
            }
            cur = n.next.as_ref();
        }
        None
    }

    /// The value for `pid`, mutably.
    pub fn get_mut(&mut self, pid: Pid) -> Option<&mut T> {
        let b = self.bucket(pid);
        let mut cur = self.buckets[b].as_mut();
        while let Some(n) = cur {
            if n.pid == pid {
                return Some(&mut n.value);
            }
            cur = n.next.as_mut();
        }
        None
    }

    /// Unlinks the entry of `pid` and returns its node whole, so that the
    /// caller frees it (and what it holds) after dropping its spin lock.
    pub fn remove(&mut self, pid: Pid) -> Option<Prepared<T>> {
        let b = self.bucket(pid);
        let mut cur = &mut self.buckets[b];
        while cur.as_ref().is_some_and(|n| n.pid != pid) {
            let n = cur.as_mut()?;
            cur = &mut n.next;
        }
        let mut node = cur.take()?;
        *cur = node.next.take();
        self.len -= 1;
        Some(Prepared(node))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove_in_one_chain() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _e = m.enter();
        let mut h: PidHash<u32> = PidHash::new(1, Wait::WaitOk).unwrap();
        for pid in [5, 6, 7, 8] {
            h.insert(PidHash::prepare(pid, pid * 10, Wait::WaitOk).unwrap());
        }
        assert_eq!(h.len(), 4);
        assert_eq!(h.get(7), Some(&70));
        *h.get_mut(6).unwrap() += 1;
        assert_eq!(h.get(6), Some(&61));
        assert_eq!(h.remove(7).map(Prepared::into_value), Some(70));
        assert!(h.remove(7).is_none());
        assert_eq!(h.get(8), Some(&80));
        assert_eq!(h.get(5), Some(&50));
        assert_eq!(h.len(), 3);
        drop(h);
        assert_eq!(m.kmem_live().0, 0);
    }
}

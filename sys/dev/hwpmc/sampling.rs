//! Sampling (the interrupt half of hwpmc_mod.c): samples taken when a
//! sampling PMC overflows go into per-CPU rings allocated at load; user
//! call chains are completed at the thread's return to user mode; the
//! rings are drained into the owners' logs as CALLCHAIN records by
//! hardclock (PMC_FN_DO_SAMPLES), at context switches, at exit and on
//! flush.
//!
//! Every sample taken is accounted for: it is logged, or counted as
//! dropped on a full ring (`intr_bufferfull`) or as not logged (its PMC
//! was released, or its owner has no log or no free log buffer).

use kpi::atomic::Ordering;

use kpi::KResult;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::{Pid, Tid};
use kpi::sync::{SpinMutex, SpinMutexBox};
use uapi::pmc::{PMC_CC_F_USERSPACE, PmcFlags, PmcState};
use uapi::pmclog::{PcList, PmclogBody, PmclogRecord, pmc_callchain_to_cpuflags};

use crate::hwpmc_class::RowPmcs;
use crate::{Hwpmc, Pmc};

/// The rings of a CPU: hardware samples, software samples (`PMC_HR`,
/// `PMC_SR`).
pub(crate) const NRINGS: usize = 2;
/// Ring of software-event samples.
pub(crate) const RING_SOFT: usize = 1;

#[derive(Debug, Default)]
struct SampleMeta {
    pmc: Option<KArc<Pmc>>,
    pid: Pid,
    tid: Tid,
    user: bool,
    /// The user part of the call chain is added at the return to user
    /// mode (PMC_USER_CALLCHAIN_PENDING).
    pending: bool,
    tsc: u64,
    npc: usize,
}

/// One CPU's ring of `nsamples` samples of up to `depth` PCs each.
#[derive(Debug)]
pub(crate) struct Ring {
    meta: KVec<SampleMeta>,
    pcs: KVec<usize>,
    depth: usize,
    head: usize,
    tail: usize,
    count: usize,
}

impl Ring {
    pub fn new(nsamples: u32, depth: u32) -> KResult<Ring> {
        let n = nsamples as usize;
        let d = depth as usize;
        Ok(Ring {
            meta: KVec::from_fn(n, Wait::WaitOk, |_| SampleMeta::default())?,
            pcs: KVec::from_fn(n * d, Wait::WaitOk, |_| 0usize)?,
            depth: d,
            head: 0,
            tail: 0,
            count: 0,
        })
    }
}

/// What became of the samples, for tests and the random harness (not
/// FreeBSD's; it has no such counts).
#[derive(Debug, Default)]
pub struct SampleStats {
    /// Samples recorded in a ring.
    pub taken: kpi::atomic::AtomicU64,
    /// Samples written to a log as CALLCHAIN records.
    pub logged: kpi::atomic::AtomicU64,
    /// Samples taken but not logged.
    pub unlogged: kpi::atomic::AtomicU64,
}

impl Hwpmc {
    /// `pmc_process_interrupt`: records a sample of `pm` for the
    /// interrupted context of this CPU. Returns false when the ring was
    /// full and the sample was dropped (the caller stalls the counter).
    /// Interrupt context: no sleeping, no allocation.
    pub(crate) fn process_interrupt(&self, ring: usize, pm: &KArc<Pmc>, cpu: u32) -> bool {
        let intr = kpi::stack::interrupted();
        let flags = pm.alloc_flags;
        let Some(rings) = self.rings.get(cpu as usize) else {
            return false;
        };
        let mut r = rings[ring].lock();
        if r.count == r.meta.len() {
            self.stats.intr_bufferfull.add(1);
            pm.update(|v| v.dropped += 1);
            return false;
        }
        let slot = r.head;
        kassert!(
            slot < r.meta.len() && r.count < r.meta.len(),
            "ring on CPU {cpu}: head {slot} count {} of {}",
            r.count,
            r.meta.len()
        );
        let depth = r.depth;
        let (npc, pending) = {
            let start = slot * depth;
            let pcs = &mut r.pcs[start..start + depth];
            if !flags.contains(PmcFlags::CALLCHAIN) {
                pcs[0] = intr.pc;
                (1, false)
            } else if intr.user_mode {
                // User stacks are read at the return to user mode; until
                // then the sample holds the interrupted PC.
                pcs[0] = intr.pc;
                (1, true)
            } else {
                let n = kpi::stack::kernel_callchain(pcs).max(1);
                if n == 1 && pcs[0] == 0 {
                    pcs[0] = intr.pc;
                }
                (n, flags.contains(PmcFlags::USERCALLCHAIN) && n < depth)
            }
        };
        r.meta[slot] = SampleMeta {
            pmc: Some(pm.clone()),
            pid: kpi::proc::curproc(),
            tid: kpi::proc::curthread(),
            user: intr.user_mode,
            pending,
            tsc: kpi::time::rdtsc(),
            npc,
        };
        // The next slot, without a division (slot < len).
        r.head = if slot + 1 == r.meta.len() {
            0
        } else {
            slot + 1
        };
        r.count += 1;
        drop(r);
        self.sample_stats.taken.fetch_add(1, Ordering::Relaxed);
        pmcdbg!(
            self.debug,
            "sampling",
            "sample",
            "cpu={cpu} id={:#x} user={}",
            pm.id,
            intr.user_mode
        );
        if pending {
            kpi::proc::request_userret();
        }
        kpi::kern_pmc::set_cpu_sampled(cpu);
        true
    }

    /// `pmc_capture_user_callchain`: at the return to user mode, completes
    /// this thread's pending samples on this CPU with its user stack.
    pub(crate) fn user_callchain(&self) {
        let cpu = kpi::cpu::curcpu();
        let tid = kpi::proc::curthread();
        let Some(rings) = self.rings.get(cpu as usize) else {
            return;
        };
        for ring in rings.iter() {
            let mut r = ring.lock();
            let (n, depth) = (r.meta.len(), r.depth);
            let mut i = r.tail;
            for _ in 0..r.count {
                if r.meta[i].pending && r.meta[i].tid == tid {
                    let user = r.meta[i].user;
                    // A user-mode sample is replaced by the full user
                    // chain (its first entry is the same PC); a kernel
                    // one gets the user chain appended.
                    let start = if user { 0 } else { r.meta[i].npc };
                    let got =
                        kpi::stack::user_callchain(&mut r.pcs[i * depth + start..(i + 1) * depth]);
                    r.meta[i].npc = (start + got).max(r.meta[i].npc.min(1));
                    r.meta[i].pending = false;
                    self.stats.merges.add(1);
                }
                i = (i + 1) % n;
            }
        }
        kpi::kern_pmc::set_cpu_sampled(cpu);
    }

    /// `pmc_process_samples`: drains `cpu`'s rings into the owners' logs.
    /// A sample still waiting for its user call chain stops its ring until
    /// the thread returns to user mode (or is gone).
    pub(crate) fn process_samples(&self, cpu: u32) {
        let Some(rings) = self.rings.get(cpu as usize) else {
            return;
        };
        self.stats.log_sweeps.add(1);
        for ring in rings.iter() {
            let mut r = ring.lock();
            let (n, depth) = (r.meta.len(), r.depth);
            while r.count > 0 {
                kassert!(
                    r.count <= n && r.tail < n && r.head < n,
                    "ring on CPU {cpu}: count {} tail {} head {} of {n}",
                    r.count,
                    r.tail,
                    r.head
                );
                let i = r.tail;
                // A sample of a released PMC waits for nothing.
                let live = r.meta[i]
                    .pmc
                    .as_ref()
                    .is_some_and(|pm| pm.state() != PmcState::Deleted);
                if r.meta[i].pending && live {
                    // Wait for the thread's return to user mode, unless it
                    // is gone; when that cannot be learnt here (an
                    // interrupt), wait at most 1/16 s, as FreeBSD does.
                    let waited = kpi::time::rdtsc().saturating_sub(r.meta[i].tsc);
                    let wait = match kpi::proc::thread_exists(r.meta[i].tid) {
                        Some(alive) => alive,
                        None => waited <= kpi::time::tsc_freq() / 16,
                    };
                    if wait {
                        // Come back at the next clock tick: the thread may
                        // be gone by then, or the wait over, even if no
                        // other sample arrives on this CPU.
                        kpi::kern_pmc::set_cpu_sampled(cpu);
                        break;
                    }
                    // Its user call chain is given up on (FreeBSD counts
                    // it so and drops the sample; it is logged here with
                    // what it has).
                    self.stats.overwrites.add(1);
                }
                let meta = core::mem::take(&mut r.meta[i]);
                r.tail = (i + 1) % n;
                r.count -= 1;
                let Some(pm) = meta.pmc else {
                    // Its PMC was released while the sample waited.
                    self.sample_stats.unlogged.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let log = pm.log().filter(|_| pm.state() != PmcState::Deleted);
                let Some(log) = log else {
                    self.sample_stats.unlogged.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let dropped = pm.update(|v| core::mem::take(&mut v.dropped));
                if dropped > 0 {
                    let _ = log.emit(&PmclogRecord {
                        tsc: meta.tsc,
                        body: PmclogBody::Dropnotify,
                    });
                }
                let cpuflags =
                    pmc_callchain_to_cpuflags(cpu, if meta.user { PMC_CC_F_USERSPACE } else { 0 });
                let pcs = PcList::from_words(&r.pcs[i * depth..i * depth + meta.npc]);
                let body = PmclogBody::Callchain {
                    pid: meta.pid,
                    tid: meta.tid,
                    pmcid: pm.id,
                    cpuflags,
                    pcs,
                };
                match log.emit(&PmclogRecord {
                    tsc: meta.tsc,
                    body,
                }) {
                    Ok(()) => self.sample_stats.logged.fetch_add(1, Ordering::Relaxed),
                    Err(_) => self.sample_stats.unlogged.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
        // Counters stalled on a full ring run again. Most sweeps find
        // none: no lock for them.
        if !self.classes.iter().any(|slot| slot.dep.stalled(cpu)) {
            return;
        }
        let Some(rows) = self.pcpu.get(cpu as usize) else {
            return;
        };
        let rows = rows.lock();
        for slot in self.classes.iter() {
            slot.dep.unstall(cpu, &RowPmcs::new(&rows, slot.first_ri));
        }
    }

    /// Makes the rings forget `pm` (at its release, after the rings were
    /// drained): samples still waiting there are dropped unlogged when
    /// their turn comes. The rings then hold no reference to it, so the
    /// last one is never dropped in interrupt context or under a ring's
    /// spin lock (FreeBSD's release waits for the PMC's samples instead).
    pub(crate) fn forget_samples_of(&self, pm: &KArc<Pmc>) {
        for rings in self.rings.iter() {
            for ring in rings.iter() {
                let mut r = ring.lock();
                let (n, count, tail) = (r.meta.len(), r.count, r.tail);
                for k in 0..count {
                    let meta = &mut r.meta[(tail + k) % n];
                    if meta.pmc.as_ref().is_some_and(|x| KArc::ptr_eq(x, pm)) {
                        // Not the last reference: the caller holds one.
                        meta.pmc = None;
                    }
                }
            }
        }
    }

    /// Drains every CPU's rings (flush, release, exit, unload).
    pub(crate) fn process_all_samples(&self) {
        for cpu in 0..self.ncpu {
            self.process_samples(cpu);
        }
    }

    /// Samples still in the rings.
    pub fn samples_pending(&self) -> usize {
        self.rings
            .iter()
            .flat_map(|r| r.iter())
            .map(|r| r.lock().count)
            .sum()
    }
}

/// Allocates the rings of every existing CPU.
pub(crate) fn alloc_rings(
    ncpu: u32,
    nsamples: u32,
    depth: u32,
) -> KResult<KVec<KVec<SpinMutexBox<Ring>>>> {
    let mut all = KVec::with_capacity(ncpu as usize, Wait::WaitOk)?;
    for cpu in 0..ncpu {
        let mut rings = KVec::with_capacity(NRINGS, Wait::WaitOk)?;
        if kpi::cpu::exists(cpu) {
            for _ in 0..NRINGS {
                let _ = rings.push_within_capacity(SpinMutex::new(
                    c"pmc-samples",
                    Ring::new(nsamples, depth)?,
                    Wait::WaitOk,
                )?);
            }
        }
        let _ = all.push_within_capacity(rings);
    }
    Ok(all)
}

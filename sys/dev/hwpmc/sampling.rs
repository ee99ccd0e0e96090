//! Sampling (the interrupt half of hwpmc_mod.c): samples taken when a
//! sampling PMC overflows go into per-CPU rings allocated at load; user
//! call chains are completed at the thread's return to user mode; the
//! rings are drained into the owners' logs as CALLCHAIN records by
//! hardclock (PMC_FN_DO_SAMPLES), at exit, at release and on flush.
//!
//! Every sample taken is accounted for: it is logged, or counted as
//! dropped on a full ring (`intr_bufferfull`) or as not logged (its PMC
//! was released, or its owner has no log or no free log buffer).
//!
//! # The interrupt path is safe in NMI context
//!
//! The PMC interrupt is an NMI on x86: it can interrupt any code on its
//! CPU, a holder of any lock included. So [`Hwpmc::process_interrupt`]
//! takes no lock, allocates and frees nothing, and touches no reference
//! count (dropping a `KArc` could free). As FreeBSD's `pmc_add_sample`,
//! it writes into the CPU's ring through a producer index and a consumer
//! index ([`kpi::spsc`]: the slot is written, then the producer index is
//! published with Release; consumers read it with Acquire and give slots
//! back with a Release store of the consumer index). The consumers
//! (hardclock's PMC_FN_DO_SAMPLES on the CPU, the return to user mode
//! that completes user call chains, and the drains of release, exit,
//! flush and unload from any CPU) are serialised by the ring's spin lock,
//! `pmc-samples`, which the producer never takes.
//!
//! A sample names its PMC by a key, not by a reference: the index of the
//! PMC's entry in the driver's table of sampling PMCs ([`Samplers`],
//! `pmc-samplers`) and that entry's generation. The table holds a `KArc`
//! of every sampling PMC from its allocation to its release; a consumer
//! resolves a sample's key under the table's lock and uses the PMC only
//! while it holds it. Release empties the entry and bumps its generation,
//! so a sample of a released PMC, wherever it still waits (in a ring, or
//! in an interrupt that was taking it on another CPU while the PMC was
//! released), resolves to nothing and is counted as not logged. That is
//! sound whatever the interrupt paths of the classes do: nothing a sample
//! holds can dangle, and the PMC is freed (by whoever drops the last
//! reference: the owner at release, in thread context) with no interrupt
//! involved. FreeBSD keeps `pm_runcount` raised instead, from the
//! interrupt, and waits at release for it to come down.
//!
//! The interrupt reads only what does not change while the PMC can
//! interrupt (`alloc_flags`, the key) and counts a drop on a full ring in
//! an atomic (`Pmc::dropped`), taken by the consumer that writes the next
//! DROPNOTIFY.

use kpi::atomic::Ordering;

use kpi::KResult;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::{Pid, Tid};
use kpi::spsc::SpscRing;
use kpi::sync::{SpinMutex, SpinMutexBox};
use uapi::pmc::{PMC_CC_F_USERSPACE, PmcFlags, PmcState};
use uapi::pmclog::{PcList, PmclogBody, PmclogRecord, pmc_callchain_to_cpuflags};

use crate::hwpmc_class::RowPmcs;
use crate::hwpmc_notify::Overflow;
use crate::{Hwpmc, Pmc};

/// The rings of a CPU: hardware samples, software samples (`PMC_HR`,
/// `PMC_SR`).
pub(crate) const NRINGS: usize = 2;
/// Ring of software-event samples.
pub(crate) const RING_SOFT: usize = 1;

/// The key of a PMC that has not been entered in [`Samplers`]: its samples
/// are not logged.
pub(crate) const NO_KEY: u64 = u64::MAX;

/// A sample, without its program counters.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SampleMeta {
    /// The PMC's key in [`Samplers`].
    key: u64,
    pid: Pid,
    tid: Tid,
    user: bool,
    /// The user part of the call chain is added at the return to user
    /// mode (PMC_USER_CALLCHAIN_PENDING).
    pending: bool,
    tsc: u64,
    npc: usize,
    /// Its PMC's notification counts it as in a ring.
    notify: bool,
}

/// One CPU's ring of `nsamples` samples of up to `depth` PCs each.
pub(crate) type Ring = SpscRing<SampleMeta, usize>;

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

/// An entry of [`Samplers`].
#[derive(Debug, Default)]
struct SamplerSlot {
    /// Bumped at each release, so that the keys of the samples of an
    /// earlier PMC of the entry no longer match.
    generation: u32,
    pmc: Option<KArc<Pmc>>,
}

/// The sampling PMCs, by the key their samples carry: the entry's index
/// (low 32 bits) and its generation (high 32 bits). A generation would
/// have to come round again, 2^32 releases of the entry's PMCs later,
/// while a sample of the first still waited in a ring, for a key to match
/// the wrong PMC; the rings are drained at every clock tick.
///
/// Entries are made and emptied only with `pmc-sx` held (allocation and
/// release), so the table grows only there; consumers only look keys up.
#[derive(Debug, Default)]
pub(crate) struct Samplers {
    slots: KVec<SamplerSlot>,
}

impl Samplers {
    fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| s.pmc.is_none())
    }

    /// The PMC of `key`, while it is entered.
    fn get(&self, key: u64) -> Option<&KArc<Pmc>> {
        let slot = self.slots.get((key & u64::from(u32::MAX)) as usize)?;
        slot.pmc
            .as_ref()
            .filter(|_| u64::from(slot.generation) == key >> 32)
    }
}

/// What a consumer does with the oldest sample of a ring.
enum Next {
    /// Leave it (and the ones after it) for a later drain.
    Wait,
    /// It was logged (true) or not (false): give its slot back.
    Done(bool),
}

impl Hwpmc {
    /// `pmc_process_interrupt`: records a sample of `pm` for the
    /// interrupted context of this CPU in ring `ring`. Returns false when
    /// the ring was full and the sample was dropped (the caller stalls the
    /// counter). NMI context: no lock, no allocation, no reference count.
    pub(crate) fn process_interrupt(&self, ring: usize, pm: &Pmc, cpu: u32) -> bool {
        let Some(r) = self.rings.get(cpu as usize).and_then(|r| r.get(ring)) else {
            return false;
        };
        // A refresh count is counted down here, so that the PMC stops at
        // exactly its last overflow.
        let (overflow, in_ring) = pm.notify.overflow();
        if overflow == Overflow::Exhausted {
            return false;
        }
        let intr = kpi::stack::interrupted();
        let flags = pm.alloc_flags;
        let key = pm.sample_key.load(Ordering::Relaxed);
        let stored = r.produce(|meta, pcs| {
            let depth = pcs.len();
            let (npc, pending) = if !flags.contains(PmcFlags::CALLCHAIN) {
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
                // A kernel process never returns to user mode: its
                // sample is whole now (FreeBSD defers only other threads).
                let user_chain = flags.contains(PmcFlags::USERCALLCHAIN)
                    && n < depth
                    && kpi::proc::curproc_flags() & kpi::proc::P_KPROC == 0;
                (n, user_chain)
            };
            // Field by field, each value stored as it is read (the slot
            // is the producer's).
            meta.key = key;
            meta.pid = kpi::proc::curproc();
            meta.tid = kpi::proc::curthread();
            meta.tsc = kpi::time::rdtsc();
            meta.user = intr.user_mode;
            meta.pending = pending;
            meta.npc = npc;
            meta.notify = in_ring;
            // Counted before it is published: taken never trails what the
            // consumers count.
            self.sample_stats.taken.fetch_add(1, Ordering::Relaxed);
            pending
        });
        let Ok(pending) = stored else {
            // Full, or Busy: another producer on this ring (which a class
            // feeding one ring from two interrupt paths would make); the
            // sample is dropped either way.
            self.stats.intr_bufferfull.add(1);
            pm.dropped.fetch_add(1, Ordering::Relaxed);
            pm.dropped_total.fetch_add(1, Ordering::Relaxed);
            pm.notify.not_taken(in_ring);
            if overflow == Overflow::Last {
                // No sample to carry the end: the next drain looks.
                self.notify_ends_due.fetch_add(1, Ordering::Release);
                kpi::kern_pmc::set_cpu_sampled(cpu);
            }
            return false;
        };
        pmcdbg!(
            self.debug,
            "sampling",
            "sample",
            "cpu={cpu} id={:#x} user={}",
            pm.id,
            intr.user_mode
        );
        // A sample a notification counts is drained at the return to user
        // mode, the next clock tick's drain being a whole tick away.
        if in_ring {
            if let Some(due) = self.notify_due.get(cpu as usize) {
                due.store(true, Ordering::Release);
            }
        }
        if pending || in_ring {
            kpi::proc::request_userret();
        }
        kpi::kern_pmc::set_cpu_sampled(cpu);
        // The last overflow of a refresh count stalls its counter.
        overflow != Overflow::Last
    }

    /// `pmc_capture_user_callchain`: at the return to user mode, completes
    /// this thread's pending samples on this CPU with its user stack; and
    /// drains the CPU's rings when a sample that a notification counts
    /// waits there (`hwpmc_notify`).
    pub(crate) fn user_callchain(&self) {
        let cpu = kpi::cpu::curcpu();
        let tid = kpi::proc::curthread();
        let Some(rings) = self.rings.get(cpu as usize) else {
            return;
        };
        for ring in rings.iter() {
            let mut c = ring.consumer();
            for k in 0..c.len() {
                c.with(k, |meta, pcs| {
                    if !meta.pending || meta.tid != tid {
                        return;
                    }
                    // A user-mode sample is replaced by the full user
                    // chain (its first entry is the same PC); a kernel
                    // one gets the user chain appended.
                    let start = if meta.user { 0 } else { meta.npc };
                    let got = kpi::stack::user_callchain(&mut pcs[start..]);
                    meta.npc = (start + got).max(meta.npc.min(1));
                    meta.pending = false;
                    self.stats.merges.add(1);
                });
            }
        }
        kpi::kern_pmc::set_cpu_sampled(cpu);
        let notify = self
            .notify_due
            .get(cpu as usize)
            .is_some_and(|due| due.swap(false, Ordering::AcqRel));
        if notify {
            self.process_samples(cpu);
        }
    }

    /// `pmc_process_samples`: drains `cpu`'s rings into the owners' logs.
    /// A sample still waiting for its user call chain stops its ring until
    /// the thread returns to user mode (or is gone).
    pub(crate) fn process_samples(&self, cpu: u32) {
        let Some(rings) = self.rings.get(cpu as usize) else {
            return;
        };
        self.stats.log_sweeps.add(1);
        let mut consumed = 0u32;
        for ring in rings.iter() {
            let mut c = ring.consumer();
            loop {
                let next = c.with(0, |meta, pcs| self.consume(cpu, meta, &pcs[..meta.npc]));
                match next {
                    None | Some(Next::Wait) => break,
                    Some(Next::Done(logged)) => {
                        c.pop();
                        consumed += 1;
                        let count = if logged {
                            &self.sample_stats.logged
                        } else {
                            &self.sample_stats.unlogged
                        };
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        if self.notify_ends_due.load(Ordering::Acquire) != 0 {
            self.wake_ended_notifiers();
        }
        // Counters stalled on a full ring run again, once the sweep has
        // made room in it: a ring whose samples all wait for their user
        // call chain keeps them stalled, as FreeBSD's does, rather than
        // dropping the next sample and stalling again. Most sweeps find
        // none: no lock for them.
        if consumed == 0 || !self.classes.iter().any(|slot| slot.dep.stalled(cpu)) {
            return;
        }
        let Some(rows) = self.pcpu.get(cpu as usize) else {
            return;
        };
        let rows = rows.lock();
        for slot in self.classes.iter() {
            slot.dep
                .unstall(cpu, &RowPmcs::new(&rows, slot.first_ri, slot.num));
        }
    }

    /// The oldest sample of a ring of `cpu`: logged, counted as not
    /// logged, or left for later.
    fn consume(&self, cpu: u32, meta: &SampleMeta, pcs: &[usize]) -> Next {
        let samplers = self.samplers.lock();
        // A sample of a released PMC waits for nothing.
        let pm = samplers
            .get(meta.key)
            .filter(|pm| pm.state() != PmcState::Deleted);
        if meta.pending && pm.is_some() {
            // Wait for the thread's return to user mode, unless it is
            // gone; when that cannot be learnt here (an interrupt), wait
            // at most 1/16 s, as FreeBSD does.
            let waited = kpi::time::rdtsc().saturating_sub(meta.tsc);
            let wait = match kpi::proc::thread_exists(meta.tid) {
                Some(alive) => alive,
                None => waited <= kpi::time::tsc_freq() / 16,
            };
            if wait {
                // Come back at the next clock tick: the thread may be
                // gone by then, or the wait over, even if no other sample
                // arrives on this CPU.
                kpi::kern_pmc::set_cpu_sampled(cpu);
                return Next::Wait;
            }
            // Its user call chain is given up on (FreeBSD counts it so
            // and drops the sample; it is logged here with what it has).
            self.stats.overwrites.add(1);
        }
        // Its PMC was released while the sample waited, or its owner has
        // no log.
        let Some(pm) = pm else {
            return Next::Done(false);
        };
        let logged = self.log_sample(cpu, meta, pcs, pm);
        if pm.notify.count(cpu, logged.unwrap_or(0), meta.notify) || pm.notify.exhausted() {
            if let Some(n) = pm.notifier.lock().as_ref() {
                n.wake();
            }
        }
        Next::Done(logged.is_some())
    }

    /// Writes the sample to its PMC's log: the bytes it took, or None when
    /// it was not logged.
    fn log_sample(&self, cpu: u32, meta: &SampleMeta, pcs: &[usize], pm: &Pmc) -> Option<usize> {
        let log = pm.log()?;
        let dropped = pm.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = log.emit(&PmclogRecord {
                tsc: meta.tsc,
                body: PmclogBody::Dropnotify,
            });
        }
        let cpuflags =
            pmc_callchain_to_cpuflags(cpu, if meta.user { PMC_CC_F_USERSPACE } else { 0 });
        let body = PmclogBody::Callchain {
            pid: meta.pid,
            tid: meta.tid,
            pmcid: pm.id,
            cpuflags,
            pcs: PcList::from_words(pcs),
        };
        let record = PmclogRecord {
            tsc: meta.tsc,
            body,
        };
        let len = record.encoded_len();
        log.emit(&record).ok().map(|()| len)
    }

    /// Wakes the notifiers of PMCs whose refresh count ran out on an
    /// overflow whose sample was dropped (no sample will carry the end).
    /// Spin-lock context.
    fn wake_ended_notifiers(&self) {
        self.notify_ends_due.store(0, Ordering::Release);
        let samplers = self.samplers.lock();
        for pm in samplers.slots.iter().filter_map(|s| s.pmc.as_ref()) {
            if pm.notify.armed() && pm.notify.exhausted() {
                if let Some(n) = pm.notifier.lock().as_ref() {
                    n.wake();
                }
            }
        }
    }

    /// Makes room in the table of sampling PMCs for one more entry, before
    /// an allocation changes anything ([`Hwpmc::enter_sampler`] then
    /// cannot fail). With `pmc-sx` held.
    pub(crate) fn reserve_sampler(&self) -> KResult<()> {
        let (len, cap, free) = {
            let t = self.samplers.lock();
            (t.slots.len(), t.slots.capacity(), t.free_slot().is_some())
        };
        if free || len < cap {
            return Ok(());
        }
        // Allocated without the spin lock, then filled under it by moves
        // alone, in order (indices are keys); the old array, its entries
        // all moved out, is freed after it.
        let mut bigger = KVec::with_capacity((cap * 2).max(8), Wait::WaitOk)?;
        let old = {
            let mut t = self.samplers.lock();
            for slot in t.slots.iter_mut() {
                let _ = bigger.push_within_capacity(core::mem::take(slot));
            }
            core::mem::replace(&mut t.slots, bigger)
        };
        drop(old);
        Ok(())
    }

    /// Enters the sampling PMC `pm` in the table: its samples are logged
    /// from now on. With `pmc-sx` held, after [`Hwpmc::reserve_sampler`].
    pub(crate) fn enter_sampler(&self, pm: &KArc<Pmc>) {
        let held = pm.clone();
        let mut t = self.samplers.lock();
        let i = match t.free_slot() {
            Some(i) => i,
            None => {
                let _ = t.slots.push_within_capacity(SamplerSlot::default());
                t.slots.len() - 1
            }
        };
        kassert!(
            i < t.slots.len() && t.slots[i].pmc.is_none(),
            "no room reserved for PMC {:#x}",
            pm.id
        );
        let key = u64::from(t.slots[i].generation) << 32 | i as u64;
        t.slots[i].pmc = Some(held);
        pm.sample_key.store(key, Ordering::Release);
    }

    /// Takes the released PMC `pm` out of the table (`pmc-sx` held): the
    /// samples of it still waiting, and any an interrupt is taking now,
    /// are dropped unlogged when their turn comes. The table's reference
    /// is dropped here, in thread context and without the spin lock (it is
    /// not the last: the caller holds one).
    pub(crate) fn forget_samples_of(&self, pm: &KArc<Pmc>) {
        let key = pm.sample_key.swap(NO_KEY, Ordering::AcqRel);
        if key == NO_KEY {
            return;
        }
        let held = {
            let mut t = self.samplers.lock();
            let ours = t.get(key).is_some_and(|x| KArc::ptr_eq(x, pm));
            kassert!(ours, "PMC {:#x}: key {key:#x} is not its", pm.id);
            let slot = &mut t.slots[(key & u64::from(u32::MAX)) as usize];
            slot.generation = slot.generation.wrapping_add(1);
            slot.pmc.take()
        };
        drop(held);
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
            .map(|r| r.len())
            .sum()
    }
}

/// Allocates the rings of every existing CPU.
pub(crate) fn alloc_rings(ncpu: u32, nsamples: u32, depth: u32) -> KResult<KVec<KVec<Ring>>> {
    let mut all = KVec::with_capacity(ncpu as usize, Wait::WaitOk)?;
    for cpu in 0..ncpu {
        let mut rings = KVec::with_capacity(NRINGS, Wait::WaitOk)?;
        if kpi::cpu::exists(cpu) {
            for _ in 0..NRINGS {
                let _ = rings.push_within_capacity(Ring::new(
                    c"pmc-samples",
                    nsamples as usize,
                    depth as usize,
                    Wait::WaitOk,
                )?);
            }
        }
        let _ = all.push_within_capacity(rings);
    }
    Ok(all)
}

/// The empty table of sampling PMCs, allocated at load.
pub(crate) fn alloc_samplers() -> KResult<SpinMutexBox<Samplers>> {
    SpinMutex::new(c"pmc-samplers", Samplers::default(), Wait::WaitOk)
}

#[cfg(test)]
#[allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)] // host test code
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use uapi::pmc::PmcMode;

    /// The ring of hardware samples (`PMC_HR`), which the NMI fills.
    const RING_HARD: usize = 0;

    /// A machine with the driver loaded (rings of `nsamples`) and a thread
    /// running on CPU 0.
    fn loaded(nsamples: u32) -> (ksim::Machine, u32, crate::Module) {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        m.kenv_set("kern.hwpmc.nsamples", &alloc::format!("{nsamples}"));
        let (_, tid) = m.spawn(ksim::Cred::root(), "t");
        let module = {
            let _e = m.enter();
            m.in_thread(tid, crate::Module::load).expect("load")
        };
        (m, tid, module)
    }

    /// The interrupt path in NMI context, on a ring that fills: no lock,
    /// no allocation, no free, nothing the witness objects to; the sample
    /// that finds the ring full is counted as dropped.
    #[test]
    fn the_interrupt_path_takes_no_lock_and_allocates_nothing_in_an_nmi() {
        const N: u32 = 3;
        let (m, tid, module) = loaded(N);
        let _e = m.enter();
        let d = module.driver.clone();
        let pm = m.in_thread(tid, || {
            let pm = Pmc::for_test(0, PmcMode::Ss, 1);
            d.reserve_sampler().unwrap();
            d.enter_sampler(&pm);
            pm
        });
        m.switch_in(0, tid);
        let (allocs, locks) = (m.kmem_calls(), m.lock_acquisitions());
        let took: Vec<bool> = m.nmi(0, tid, || {
            (0..=N)
                .map(|_| d.process_interrupt(RING_HARD, &pm, 0))
                .collect()
        });
        assert_eq!(took, [true, true, true, false]);
        assert_eq!(m.kmem_calls(), allocs, "the interrupt allocated");
        assert_eq!(m.lock_acquisitions(), locks, "the interrupt took a lock");
        assert!(m.violations().is_empty(), "{:?}", m.violations());
        assert_eq!(pm.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(d.stats.intr_bufferfull.fetch(), 1);
        assert_eq!(d.samples_pending(), N as usize);
        m.switch_out(0);
        // The PMC has no log: its samples are counted as not logged.
        m.in_thread(tid, || d.process_all_samples());
        let s = &d.sample_stats;
        let ld = |a: &kpi::atomic::AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!((ld(&s.taken), ld(&s.logged), ld(&s.unlogged)), (3, 0, 3));
        assert_eq!(d.samples_pending(), 0);
        m.in_thread(tid, || {
            d.forget_samples_of(&pm);
            drop(pm);
            module.unload();
            drop(d);
        });
        assert!(m.violations().is_empty(), "{:?}", m.violations());
        assert_eq!(m.kmem_live(), (0, 0));
    }

    /// A sample that names a released PMC resolves to nothing, even once
    /// another PMC has the released one's entry in the table; it is
    /// counted as not logged.
    #[test]
    fn a_sample_of_a_released_pmc_never_names_the_next_pmc_of_its_entry() {
        let (m, tid, module) = loaded(4);
        let _e = m.enter();
        let d = module.driver.clone();
        m.in_thread(tid, || {
            let first = Pmc::for_test(0, PmcMode::Ss, 1);
            d.reserve_sampler().unwrap();
            d.enter_sampler(&first);
            let stale = first.sample_key.load(Ordering::Relaxed);
            d.forget_samples_of(&first);
            assert_eq!(first.sample_key.load(Ordering::Relaxed), NO_KEY);
            let next = Pmc::for_test(0, PmcMode::Ss, 1);
            d.reserve_sampler().unwrap();
            d.enter_sampler(&next);
            let key = next.sample_key.load(Ordering::Relaxed);
            assert_eq!(key & 0xffff_ffff, stale & 0xffff_ffff, "the same entry");
            assert_ne!(key, stale);
            {
                let t = d.samplers.lock();
                assert!(t.get(stale).is_none());
                assert!(t.get(key).is_some_and(|p| KArc::ptr_eq(p, &next)));
                assert!(t.get(NO_KEY).is_none());
            }
            // A sample taken with the stale key (an interrupt that read it
            // before the release) is not logged.
            d.rings[0][RING_SOFT]
                .produce(|meta, _| {
                    *meta = SampleMeta {
                        key: stale,
                        npc: 0,
                        ..SampleMeta::default()
                    }
                })
                .unwrap();
            d.process_samples(0);
            assert_eq!(d.sample_stats.unlogged.load(Ordering::Relaxed), 1);
            d.forget_samples_of(&next);
            drop((first, next));
            module.unload();
            drop(d);
        });
        assert!(m.violations().is_empty(), "{:?}", m.violations());
        assert_eq!(m.kmem_live(), (0, 0));
    }

    /// The table grows by moves alone, keeping every entry's index (the
    /// keys of samples in the rings stay valid).
    #[test]
    fn the_table_of_sampling_pmcs_grows_without_moving_keys() {
        let (m, tid, module) = loaded(4);
        let _e = m.enter();
        let d = module.driver.clone();
        m.in_thread(tid, || {
            let pmcs: Vec<_> = (0..20)
                .map(|_| {
                    let pm = Pmc::for_test(0, PmcMode::Ss, 1);
                    d.reserve_sampler().unwrap();
                    d.enter_sampler(&pm);
                    pm
                })
                .collect();
            let keys: Vec<u64> = pmcs
                .iter()
                .map(|p| p.sample_key.load(Ordering::Relaxed))
                .collect();
            let t = d.samplers.lock();
            for (pm, key) in pmcs.iter().zip(&keys) {
                assert!(t.get(*key).is_some_and(|p| KArc::ptr_eq(p, pm)));
            }
            drop(t);
            for pm in pmcs.iter() {
                d.forget_samples_of(pm);
            }
            drop(pmcs);
            module.unload();
            drop(d);
        });
        assert!(m.violations().is_empty(), "{:?}", m.violations());
        assert_eq!(m.kmem_live(), (0, 0));
    }
}

//! Target processes: their descriptors (`struct pmc_process`) and the pid
//! hash that holds them, and what the driver does when they run and change
//! (hwpmc_mod.c's context-switch, fork, exec, exit and thread handlers).
//! The context-switch hooks look descriptors up with a spin lock held, so
//! insertion never allocates: a node is allocated first
//! ([`PidHash::prepare`]) and linked in afterwards.

use kpi::KResult;
use kpi::atomic::Ordering;
use kpi::hooks::ThreadInfo;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::proc::{Pid, Tid};
use uapi::pmc::{PmcFlags, PmcMode};
use uapi::pmclog::PmclogBody;

use crate::ops::ARMED_AT_ZERO;
use crate::{ClassSlot, Core, Hwpmc, PhwRow, Pmc, hwpmc_soft};

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
    /// Bit `ri` is set while slot `ri` holds a PMC: the switch-in visits
    /// only those rows (kept by `attach_slot` and `detach_slot`).
    pub attached: u64,
    /// Attached PMCs.
    pub refcnt: u32,
    /// The owner enabled user-mode RDPMC (`PMC_PP_ENABLE_MSR_ACCESS`).
    pub msr_access: bool,
    /// Per-thread state of process sampling PMCs (`struct pmc_thread`).
    pub threads: KVec<KBox<PmcThread>>,
}

/// `struct pmc_thread`: a thread's remaining sampling count per row.
#[derive(Debug)]
pub(crate) struct PmcThread {
    /// The thread.
    pub tid: u32,
    /// Remaining count per row (0: start from the reload count).
    pub vals: KVec<u64>,
    /// The next descriptor on the free list.
    next: Option<KBox<PmcThread>>,
}

impl PmcThread {
    /// A descriptor with `npmc` rows, for the free list or a thread.
    fn new(npmc: u32, wait: Wait) -> KResult<KBox<PmcThread>> {
        KBox::try_new(
            PmcThread {
                tid: 0,
                vals: KVec::from_fn(npmc as usize, wait, |_| 0)?,
                next: None,
            },
            wait,
        )
    }
}

/// `pmc_threadfreelist`: thread descriptors kept for reuse, so that a
/// thread's exit, which the kernel reports with the process's spin lock
/// held, frees nothing, and most thread creations allocate nothing.
#[derive(Debug, Default)]
pub(crate) struct ThreadFreeList {
    head: Option<KBox<PmcThread>>,
    entries: u32,
}

impl ThreadFreeList {
    fn push(&mut self, mut t: KBox<PmcThread>) {
        t.next = self.head.take();
        self.head = Some(t);
        self.entries += 1;
    }

    fn pop(&mut self) -> Option<KBox<PmcThread>> {
        let mut t = self.head.take()?;
        self.head = t.next.take();
        self.entries -= 1;
        Some(t)
    }

    /// Descriptors on the list.
    pub fn entries(&self) -> u32 {
        self.entries
    }
}

impl Drop for ThreadFreeList {
    fn drop(&mut self) {
        // Iteratively, not by recursion down the chain.
        while self.pop().is_some() {}
    }
}

impl PmcProcess {
    /// Attaches `pm` on slot `ri` with the process's starting count.
    pub fn attach_slot(&mut self, ri: usize, pm: &KArc<Pmc>, pmcval: u64) {
        self.slots[ri] = PpSlot {
            pmc: Some(pm.clone()),
            pmcval,
        };
        self.attached |= 1 << ri;
    }

    /// Empties slot `ri`, returning its PMC: the process's count and each
    /// thread's for the row go (a sampling PMC attached there later starts
    /// every thread from its own reload count, as FreeBSD's unlink clears
    /// them).
    pub fn detach_slot(&mut self, ri: usize) -> Option<KArc<Pmc>> {
        self.attached &= !(1 << ri);
        self.slots[ri].pmcval = 0;
        for t in self.threads.iter_mut() {
            if let Some(v) = t.vals.get_mut(ri) {
                *v = 0;
            }
        }
        self.slots[ri].pmc.take()
    }

    /// A descriptor with `npmc` empty slots and no thread descriptors.
    pub fn new(npmc: u32, wait: Wait) -> KResult<PmcProcess> {
        Ok(PmcProcess {
            slots: KVec::from_fn(npmc as usize, wait, |_| PpSlot::default())?,
            attached: 0,
            refcnt: 0,
            msr_access: false,
            threads: KVec::new(),
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
    pub fn into_value(self) -> T {
        self.0.into_inner().value
    }
}

/// A hash of values by pid with as many chains as hashinit(9) makes of
/// `kern.hwpmc.hashsize`: the largest power of two not above it, so that a
/// chain is chosen with a mask.
#[derive(Debug)]
pub(crate) struct PidHash<T> {
    buckets: KVec<Option<KBox<Node<T>>>>,
    /// The number of chains less one (`hashmask`).
    mask: usize,
    len: usize,
}

impl<T> PidHash<T> {
    /// An empty hash for `size` entries (hashinit(9)'s `elements`).
    pub fn new(size: u32, wait: Wait) -> KResult<PidHash<T>> {
        let chains = 1usize << size.max(1).ilog2();
        Ok(PidHash {
            buckets: KVec::from_fn(chains, wait, |_| None)?,
            mask: chains - 1,
            len: 0,
        })
    }

    #[inline]
    fn bucket(&self, pid: Pid) -> usize {
        // Fibonacci hashing spreads consecutive pids.
        pid.wrapping_mul(0x9E37_79B9) as usize & self.mask
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

/// A row's class as the context-switch paths call it: a SOFT row
/// (`classes[0]`, rows 0 to 15) by its state in the CPU's rows, so that
/// its switch-in and switch-out are inlined; the others through their
/// class.
enum SwitchClass<'a> {
    Soft(&'a hwpmc_soft::SoftRow),
    Dep(&'a ClassSlot),
}

impl SwitchClass<'_> {
    /// Stops and reads the row: its count (the value loaded at the
    /// switch-in, `saved`, when the class cannot read it), and the mask of
    /// the counter's width. (The other classes' CPU is read where they
    /// need it, not kept across the SOFT rows' loops.)
    #[inline]
    fn switch_out(&self, ri: usize, pm: &Pmc, saved: u64) -> (u64, u64) {
        match self {
            SwitchClass::Soft(row) => (
                row.switch_out(pm),
                crate::ops::width_mask(hwpmc_soft::SOFT_WIDTH),
            ),
            SwitchClass::Dep(cls) => (
                cls.dep
                    .switch_out(kpi::cpu::curcpu(), ri as u32 - cls.first_ri, pm)
                    .unwrap_or(saved),
                cls.width_mask,
            ),
        }
    }
}

impl Hwpmc {
    // ----- context switches ---------------------------------------------

    /// `pmc_process_csw_in`: loads the running PMCs of the incoming
    /// thread's process on this CPU. Kept out of the hook's dispatch, so
    /// that the switch paths have frames of their own size.
    #[inline(never)]
    pub(crate) fn csw_in(&self) {
        let cpu = kpi::cpu::curcpu();
        let pid = kpi::proc::curproc();
        pmcdbg!(self.debug, "csw", "swi", "cpu={cpu} pid={pid}");
        let mut procs = self.procs.lock();
        let Some(pp) = procs.get_mut(pid) else { return };
        let mut guard = self.pcpu[cpu as usize].lock();
        let rows = &mut *guard;
        // The owner may read its counters with RDPMC while it runs; the
        // switch-out turns that off again (as FreeBSD's core_switch_in and
        // core_switch_out do).
        if pp.msr_access {
            self.md_switch(true);
            rows.user_rdpmc = true;
        }
        // Only the rows the process has a PMC on; a row that does not load
        // (rare: a PMC stopped since) loses its bit again.
        let mut left = pp.attached;
        rows.loaded |= left;
        rows.loaded_pid = pid;
        while left != 0 {
            let ri = left.trailing_zeros() as usize;
            left &= left - 1;
            // Any bit position is a row of the array (the driver's rows
            // are the only ones a mask names).
            let row = &mut rows.rows[ri % crate::NPMC_MAX as usize];
            if !self.load_row(ri, pp, row, &rows.soft) {
                rows.loaded &= !(1 << ri);
            }
        }
    }

    /// Loads the PMC of a process's row on this CPU's row `ri`.
    #[inline]
    fn load_row(
        &self,
        ri: usize,
        pp: &mut PmcProcess,
        row: &mut PhwRow,
        soft: &hwpmc_soft::SoftRows,
    ) -> bool {
        let PmcProcess { slots, threads, .. } = pp;
        let Some(PpSlot { pmc, pmcval }) = slots.get_mut(ri) else {
            return false;
        };
        let Some(pm) = pmc.as_ref() else {
            return false;
        };
        let Some(cls) = self.switch_class(ri, soft) else {
            return false;
        };
        // The state as published for the unlocked readers (FreeBSD's
        // csw_in reads pm_state without a lock too): a release or a stop
        // racing with this switch-in takes the row off again under this
        // CPU's rows' lock, which this holds.
        if !pm.running.load(Ordering::Acquire) {
            return false;
        }
        let before = pm.runcount.fetch_add(1, Ordering::Relaxed);
        kassert!(
            before < self.ncpu,
            "PMC {:#x} running on {} CPUs",
            pm.id,
            before + 1
        );
        // Where the row starts: a sampling PMC from the thread's count
        // left (or its reload count); a SOFT counting PMC from zero, its
        // count at the switch-out being what it adds to the total; a
        // hardware counting PMC from the total, which user-mode RDPMC
        // then reads, as FreeBSD loads it.
        let ts = pm.mode == PmcMode::Ts;
        let mut start = |counting: fn(&Pmc) -> u64| {
            let value = if ts {
                let reload = pm.reload.load(Ordering::Acquire);
                Self::thread_start(ri, reload, pmcval, threads)
            } else {
                counting(pm)
            };
            row.saved = value;
            row.pmc = Some(pm.clone());
            value
        };
        // One test of the class for both the start and the switch-in.
        match cls {
            SwitchClass::Soft(soft) => soft.switch_in(pm, start(|_| 0)),
            SwitchClass::Dep(slot) => {
                let value = start(|pm| pm.savedvalue.load(Ordering::Acquire));
                let cpu = kpi::cpu::curcpu();
                slot.dep
                    .switch_in(cpu, ri as u32 - slot.first_ri, pm, value)
            }
        }
        true
    }

    /// Where a sampling PMC starts for the thread switching in, given its
    /// reload count: a thread resumes its own count; a thread the driver
    /// has no descriptor for uses the process's.
    fn thread_start(
        ri: usize,
        reloadcount: u64,
        pmcval: &mut u64,
        threads: &mut [KBox<PmcThread>],
    ) -> u64 {
        let tid = kpi::proc::curthread();
        let left = match threads.iter_mut().find(|t| t.tid == tid) {
            Some(t) => core::mem::take(&mut t.vals[ri]),
            None => core::mem::replace(pmcval, reloadcount),
        };
        match left {
            ARMED_AT_ZERO => 0,
            0 => reloadcount,
            left => left,
        }
    }

    /// `pmc_process_csw_out`: takes process PMCs off this CPU, adding what
    /// they counted to the PMC's total and to the process's own count.
    /// (FreeBSD drains the sample rings at the next clock tick, not here.)
    #[inline(never)]
    pub(crate) fn csw_out(&self) {
        let cpu = kpi::cpu::curcpu();
        let pid = kpi::proc::curproc();
        pmcdbg!(self.debug, "csw", "swo", "cpu={cpu} pid={pid}");
        let mut procs = self.procs.lock();
        // The process's descriptor, if it is still a target.
        let mut pp = procs.get_mut(pid);
        let mut guard = self.pcpu[cpu as usize].lock();
        let rows = &mut *guard;
        // Only the rows a switch-in loaded.
        let mut left = core::mem::take(&mut rows.loaded);
        while left != 0 {
            let ri = left.trailing_zeros() as usize;
            left &= left - 1;
            let row = &mut rows.rows[ri % crate::NPMC_MAX as usize];
            if self.unload_row(ri, row, pp.as_deref_mut(), &rows.soft) {
                rows.loaded |= 1 << ri;
            }
        }
        if core::mem::take(&mut rows.user_rdpmc) {
            self.md_switch(false);
        }
    }

    /// The class of row `ri` for the context-switch paths.
    #[inline]
    fn switch_class<'a>(
        &'a self,
        ri: usize,
        soft: &'a hwpmc_soft::SoftRows,
    ) -> Option<SwitchClass<'a>> {
        if let Some(row) = soft.get(ri) {
            return Some(SwitchClass::Soft(row));
        }
        self.ri_to_slot(ri as u32).map(SwitchClass::Dep)
    }

    /// The machine-dependent part of a switch (`pmd_switch_in`/`_out`):
    /// CR4.PCE on x86, which lets user mode execute RDPMC, is on only
    /// while a process that asked for it (PMC_OP_PMCGETMSR) runs.
    fn md_switch(&self, user_rdpmc: bool) {
        #[cfg(target_arch = "x86_64")]
        if self.cputype != uapi::pmc::PmcCputype::Generic {
            kpi::x86::set_user_rdpmc(user_rdpmc);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = user_rdpmc;
    }

    /// Takes the process PMC on this CPU's row `ri` off; true when the row
    /// keeps it, still loaded (a row without a class, which cannot be).
    /// `pp` is the process's descriptor, if it is still a target.
    #[inline]
    fn unload_row(
        &self,
        ri: usize,
        row: &mut PhwRow,
        pp: Option<&mut PmcProcess>,
        soft: &hwpmc_soft::SoftRows,
    ) -> bool {
        // A row whose PMC was released since the switch-in is empty (the
        // release cleared its loaded bit too, so a system PMC given the
        // row since is not visited).
        let Some(pm) = row.pmc.take() else {
            return false;
        };
        let Some(cls) = self.switch_class(ri, soft) else {
            row.pmc = Some(pm);
            return true;
        };
        let (hw, width_mask) = cls.switch_out(ri, &pm, row.saved);
        // The process's own row, if this PMC is still attached to it.
        let mine = pp.and_then(|pp| {
            let slot = pp
                .slots
                .get_mut(ri)
                .filter(|s| s.pmc.as_ref().is_some_and(|c| KArc::ptr_eq(c, &pm)))?;
            Some((slot, &mut pp.threads))
        });
        Self::switched_out(&pm);
        // What it counted goes to the process, and to the total, unless
        // the PMC was released since (its state as published: FreeBSD's
        // csw_out reads pm_state unlocked too). No lock: other CPUs'
        // switch-outs add to the total atomically.
        let Some((slot, threads)) = mine.filter(|_| !pm.deleted.load(Ordering::Acquire)) else {
            return false;
        };
        if pm.mode == PmcMode::Tc {
            let delta = hw.wrapping_sub(row.saved) & width_mask;
            pm.savedvalue.fetch_add(delta, Ordering::AcqRel);
            slot.pmcval = slot.pmcval.wrapping_add(delta);
            // An allocation flag: it never changes.
            if pm.alloc_flags.contains(PmcFlags::LOG_PROCCSW) {
                self.log_proccsw(&pm, delta);
            }
        } else {
            // The remaining count belongs to the thread.
            let tid = kpi::proc::curthread();
            // A counter switched out at zero samples on its next event; 0
            // in a descriptor means "nothing saved".
            let saved = if hw == 0 { ARMED_AT_ZERO } else { hw };
            match threads.iter_mut().find(|t| t.tid == tid) {
                Some(t) => t.vals[ri] = saved,
                None => slot.pmcval = saved,
            }
        }
        false
    }

    /// A switch-out's change of the run count.
    #[inline]
    fn switched_out(pm: &Pmc) {
        let before = pm.runcount.fetch_sub(1, Ordering::Relaxed);
        kassert!(before > 0, "PMC {:#x} switched out with runcount 0", pm.id);
    }

    /// A PROCCSW record of what `pm` counted for the current process in
    /// the slice that ended (its pid read here, off the switch's path);
    /// none for the pseudo switch-out of an exiting process, as FreeBSD's
    /// `pmc_process_exit` writes none (PROCEXIT has the count). Under the CPU rows' spin lock: the flag
    /// is read without the process's lock.
    #[cold]
    fn log_proccsw(&self, pm: &Pmc, delta: u64) {
        if kpi::proc::curproc_flags() & kpi::proc::P_WEXIT != 0 {
            return;
        }
        if let Some(log) = pm.log() {
            let body = PmclogBody::Proccsw {
                value: delta,
                pmcid: pm.id,
                pid: kpi::proc::curproc(),
                tid: kpi::proc::curthread(),
            };
            let _ = log.log(body);
        }
    }

    /// Takes process PMC `pm` off every CPU where it is loaded (only
    /// where it was loaded for `pid`, when given) without crediting what
    /// it counted there: at its release, and at a detach, after which a
    /// target that no longer uses PMCs gets no switch-out.
    pub(crate) fn unload_everywhere(&self, pm: &KArc<Pmc>, pid: Option<Pid>) {
        let Some((dep, adjri)) = self.ri_to_class(pm.ri) else {
            return;
        };
        for (cpu, rows) in (0..self.ncpu).zip(self.pcpu.iter()) {
            let mut rows = rows.lock();
            let Some(row) = rows.get_mut(pm.ri as usize) else {
                continue;
            };
            if !row.pmc.as_ref().is_some_and(|c| KArc::ptr_eq(c, pm))
                || pid.is_some_and(|pid| pid != rows.loaded_pid)
            {
                continue;
            }
            let _bind = kpi::cpu::bind(cpu);
            let _ = dep.stop_pmc(cpu, adjri, pm);
            let _ = dep.config_pmc(cpu, adjri, None);
            rows.clear(pm.ri);
            let before = pm.runcount.fetch_sub(1, Ordering::Relaxed);
            kassert!(before > 0, "PMC {:#x} on CPU {cpu} with runcount 0", pm.id);
        }
    }

    // ----- fork, exec, exit ---------------------------------------------

    /// `pmc_process_fork`: a child of a target inherits the parent's
    /// DESCENDANTS PMCs.
    pub(crate) fn process_fork(&self, parent: Pid, child: Pid) {
        pmcdbg!(
            self.debug,
            "process",
            "fork",
            "parent={parent} child={child}"
        );
        if !Self::uses_pmcs(parent) {
            return;
        }
        let mut core = self.core.lock();
        // Row by row, so that nothing is allocated to walk the rows.
        for ri in 0..self.npmc {
            let Some(pm) = self
                .attached_at(parent, ri)
                .filter(|pm| pm.vals().flags.contains(PmcFlags::DESCENDANTS))
            else {
                continue;
            };
            let Some(at) = Self::locate(&core, &pm) else {
                continue;
            };
            if self.attach_one(&mut core, at, child, false).is_ok()
                && core.owners[at.owner].sscount == 0
            {
                if let Some(log) = core.owners[at.owner].open_log() {
                    let body = PmclogBody::Procfork {
                        oldpid: parent,
                        newpid: child,
                    };
                    let _ = log.log(body);
                }
            }
        }
    }

    /// `pmc_process_exec`: an owner's PMCs do not survive exec; a target
    /// whose credentials changed keeps only the PMCs whose owner could
    /// still attach to it.
    pub(crate) fn process_exec(&self, credentials_changed: bool, base: u64, dyn_base: u64) {
        let pid = kpi::proc::curproc();
        if !Self::uses_pmcs(pid) {
            return;
        }
        let mut core = self.core.lock();
        if let Some(o) = Self::owner_index(&core, pid) {
            self.remove_owner_at(&mut core, o);
        }
        if self.log_procexec(&core, pid, base, dyn_base).is_err() {
            self.records_lost();
        }
        if !credentials_changed {
            return;
        }
        for ri in 0..self.npmc {
            let Some(pm) = self.attached_at(pid, ri) else {
                continue;
            };
            if pm.owner == pid {
                continue;
            }
            // The owner could attach only if it may still debug the
            // process; root outside a jail always may.
            if owner_may_debug(pm.owner, pid) {
                continue;
            }
            let Some(at) = Self::locate(&core, &pm) else {
                continue;
            };
            let _ = self.detach_one(&mut core, at, pid, true);
        }
    }

    /// A PROCEXIT record with the exiting target's own count, for counting
    /// PMCs that need a log.
    fn log_procexit(&self, pm: &Pmc, pid: Pid) {
        let v = pm.vals();
        if !v.flags.contains(PmcFlags::NEEDS_LOGFILE) || !pm.mode.is_counting() {
            return;
        }
        if let Some(log) = pm.log() {
            let value = self
                .procs
                .lock()
                .get(pid)
                .map_or(0, |pp| pp.slots[pm.ri as usize].pmcval);
            let body = PmclogBody::Procexit {
                pmcid: pm.id,
                pid,
                value,
            };
            let _ = log.log(body);
        }
    }

    /// The PMC attached to `pid` on row `ri`, if any (a reference taken
    /// under the spin lock, which allocates nothing).
    fn attached_at(&self, pid: Pid, ri: u32) -> Option<KArc<Pmc>> {
        let procs = self.procs.lock();
        procs.get(pid)?.slots.get(ri as usize)?.pmc.clone()
    }

    /// A PROCEXEC record to each owner with a log whose PMC follows `pid`.
    fn log_procexec(&self, core: &Core, pid: Pid, base: u64, dyn_base: u64) -> KResult<()> {
        let Some(p) = kpi::proc::pfind(pid, Wait::WaitOk)? else {
            return Ok(());
        };
        for pm in (0..self.npmc).filter_map(|ri| self.attached_at(pid, ri)) {
            let Some(o) = Self::owner_index(core, pm.owner) else {
                continue;
            };
            if core.owners[o].sscount != 0 {
                continue;
            }
            if let Some(log) = pm.log() {
                let body = PmclogBody::Procexec {
                    pid,
                    pmcid: pm.id,
                    base: base as usize,
                    dyn_base: dyn_base as usize,
                    pathname: crate::executable_path(&p.path),
                };
                let _ = log.log_sync(body);
            }
        }
        Ok(())
    }

    /// A target descriptor for a process with threads `tids`, their
    /// descriptors from the free list where it has some
    /// (`pmc_add_thread_descriptors_from_proc`).
    pub(crate) fn new_process(&self, tids: &[Tid]) -> KResult<PmcProcess> {
        let mut pp = PmcProcess::new(self.npmc, Wait::WaitOk)?;
        pp.threads.try_reserve(tids.len(), Wait::WaitOk)?;
        for &tid in tids {
            let t = self.thread_alloc(tid, Wait::WaitOk);
            match t {
                Ok(t) => {
                    let _ = pp.threads.push_within_capacity(t);
                }
                Err(e) => {
                    self.destroy_process(pp);
                    return Err(e);
                }
            }
        }
        Ok(pp)
    }

    /// `pmc_destroy_process_descriptor`: its thread descriptors go to the
    /// free list.
    pub(crate) fn destroy_process(&self, mut pp: PmcProcess) {
        while let Some(t) = pp.threads.pop() {
            self.thread_free(t);
        }
    }

    /// A descriptor for thread `tid`: one from the free list
    /// (`pmc_thread_descriptor_pool_alloc`), else a new one.
    fn thread_alloc(&self, tid: Tid, wait: Wait) -> KResult<KBox<PmcThread>> {
        let reused = {
            let mut list = self.thread_freelist.lock();
            let t = list.pop();
            self.knobs
                .threadfreelist_entries
                .set(i64::from(list.entries));
            t
        };
        let mut t = match reused {
            Some(t) => t,
            None => PmcThread::new(self.npmc, wait)?,
        };
        t.tid = tid;
        t.vals.iter_mut().for_each(|v| *v = 0);
        Ok(t)
    }

    /// `pmc_thread_descriptor_pool_free`: a descriptor goes to the free
    /// list; this frees nothing, so it may run with spin locks held.
    fn thread_free(&self, t: KBox<PmcThread>) {
        let mut list = self.thread_freelist.lock();
        list.push(t);
        self.knobs
            .threadfreelist_entries
            .set(i64::from(list.entries));
    }

    /// Frees the descriptors on the free list past
    /// `kern.hwpmc.threadfreelist_max` (FreeBSD's free task), where freeing
    /// is allowed.
    pub(crate) fn trim_thread_freelist(&self) {
        let max = self.knobs.threadfreelist_max.get().max(0);
        loop {
            let extra = {
                let mut list = self.thread_freelist.lock();
                if i64::from(list.entries) <= max {
                    break;
                }
                let t = list.pop();
                self.knobs
                    .threadfreelist_entries
                    .set(i64::from(list.entries));
                t
            };
            // Freed with no spin lock held.
            drop(extra);
        }
    }

    /// Frees the whole free list (`pmc_thread_descriptor_pool_drain`, at
    /// unload).
    pub(crate) fn drain_thread_freelist(&self) {
        loop {
            let t = {
                let mut list = self.thread_freelist.lock();
                let t = list.pop();
                self.knobs
                    .threadfreelist_entries
                    .set(i64::from(list.entries));
                t
            };
            match t {
                Some(t) => drop(t),
                None => break,
            }
        }
    }

    /// `pmc_process_thread_add` (PMC_FN_THR_CREATE): a new thread of a
    /// target gets a descriptor. The kernel calls this inside an epoch
    /// section, where nothing may sleep: descriptors come from the free
    /// list or an `M_NOWAIT` allocation, made before the spin lock; if
    /// none can be had the thread uses its process's count.
    pub(crate) fn thread_add(&self, t: &ThreadInfo) {
        let Some(len) = self.procs.lock().get(t.pid).map(|pp| pp.threads.len()) else {
            return;
        };
        let Ok(d) = self.thread_alloc(t.tid, Wait::NoWait) else {
            return;
        };
        // Room to grow, doubling so that most creations find some.
        let mut grown = KVec::with_capacity((len + 1).next_power_of_two(), Wait::NoWait).ok();
        let (old, unused) = {
            let mut procs = self.procs.lock();
            match procs.get_mut(t.pid) {
                None => (None, Some(d)),
                // An attach between the thread's linking and this hook
                // gave it its descriptor already (FreeBSD's looks first).
                Some(pp) if pp.threads.iter().any(|x| x.tid == t.tid) => (None, Some(d)),
                Some(pp) if pp.threads.spare_capacity() > 0 => {
                    let _ = pp.threads.push_within_capacity(d);
                    (None, None)
                }
                Some(pp) => match grown.take() {
                    Some(mut g) if g.capacity() > pp.threads.len() => {
                        while let Some(x) = pp.threads.pop() {
                            let _ = g.push_within_capacity(x);
                        }
                        let _ = g.push_within_capacity(d);
                        (Some(core::mem::replace(&mut pp.threads, g)), None)
                    }
                    g => {
                        grown = g;
                        (None, Some(d))
                    }
                },
            }
        };
        // Freed, or put back, with no spin lock held.
        drop((old, grown));
        if let Some(d) = unused {
            self.thread_free(d);
        }
    }

    /// `pmc_process_thread_delete` (PMC_FN_THR_EXIT): the thread's
    /// descriptor goes to the free list. The kernel calls this with the
    /// process's spin lock held: nothing here sleeps or frees.
    pub(crate) fn thread_delete(&self, tid: Tid) {
        // Threads exit in their own process.
        let pid = kpi::proc::curproc();
        let gone = {
            let mut procs = self.procs.lock();
            procs.get_mut(pid).and_then(|pp| {
                let i = pp.threads.iter().position(|t| t.tid == tid)?;
                Some(pp.threads.swap_remove(i))
            })
        };
        if let Some(t) = gone {
            self.thread_free(t);
        }
    }

    /// `pmc_process_exit`: the exiting process's PMCs come off the CPU
    /// with their last slice counted, it stops being a target, and the
    /// PMCs it owns are released.
    pub(crate) fn process_exit(&self, pid: Pid) {
        pmcdbg!(self.debug, "process", "exit", "pid={pid}");
        if !Self::uses_pmcs(pid) {
            return;
        }
        // The exiting thread still runs here: its PMCs come off this CPU
        // first, as at a switch-out, so that PROCEXIT and the PMCs' totals
        // count its last slice (FreeBSD's pseudo switch-out).
        if kpi::proc::curproc() == pid {
            self.csw_out();
        }
        let mut core = self.core.lock();
        self.process_all_samples();
        for ri in 0..self.npmc {
            let Some(pm) = self.attached_at(pid, ri) else {
                continue;
            };
            let Some(at) = Self::locate(&core, &pm) else {
                continue;
            };
            self.log_procexit(&pm, pid);
            let _ = self.detach_one(&mut core, at, pid, false);
        }
        if let Some(o) = Self::owner_index(&core, pid) {
            self.remove_owner_at(&mut core, o);
        }
        drop(core);
        self.trim_thread_freelist();
    }
}

/// Whether `owner` may still attach to `target` after a credential change:
/// the owner's effective uid matches one of the target's uids and its
/// groups cover the target's (`pmc_can_attach`), or the owner is root
/// outside a jail.
fn owner_may_debug(owner: Pid, target: Pid) -> bool {
    kpi::proc::cred_covers(owner, target)
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

    #[test]
    fn chains_are_a_power_of_two_as_hashinit_makes() {
        let m = ksim::Machine::new(ksim::MachineConfig::default());
        let _e = m.enter();
        for (size, chains) in [
            (1, 1),
            (2, 2),
            (3, 2),
            (1000, 512),
            (1024, 1024),
            (1025, 1024),
        ] {
            let h: PidHash<u32> = PidHash::new(size, Wait::WaitOk).unwrap();
            assert_eq!((h.buckets.len(), h.mask), (chains, chains - 1), "{size}");
        }
        // Consecutive pids fall in different chains.
        let mut h: PidHash<u32> = PidHash::new(64, Wait::WaitOk).unwrap();
        let mut seen = 0u64;
        for pid in 100..164 {
            seen |= 1 << h.bucket(pid);
            h.insert(PidHash::prepare(pid, pid, Wait::WaitOk).unwrap());
        }
        assert_eq!(seen, u64::MAX);
        assert!((100..164).all(|pid| h.get(pid) == Some(&pid)));
        drop(h);
        assert_eq!(m.kmem_live().0, 0);
    }
}

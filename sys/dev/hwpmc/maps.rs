//! The records that let a log reader name what was sampled: MAP_IN and
//! MAP_OUT for executable mappings and kernel modules, and, for owners of
//! system-wide sampling PMCs, the process and thread events of the whole
//! system (PROCFORK, PROC_CREATE, PROCEXEC, THR_CREATE, THR_EXIT,
//! SYSEXIT).
//!
//! Those owners are on a list of their own (`pmc_ss_owners`) under a spin
//! lock, not `pmc-sx`: the kernel's *_LOG hooks read it in any context,
//! with the process's spin lock held (thread exit) or from kproc_create()
//! while this driver holds `pmc-sx`. The kernel's `pmc_ss_count` counts
//! them; the kernel calls those hooks only while it is non-zero.

use kpi::KResult;
use kpi::hooks::{Comm, ThreadInfo};
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::proc::{Mapping, P_HWPMC, Pid, Tid};
use uapi::pmclog::PmclogBody;

use crate::hwpmc_logging::OwnerLog;
use crate::{Core, Hwpmc};

/// An owner with running system-wide sampling PMCs.
#[derive(Debug)]
pub(crate) struct SsOwner {
    pid: Pid,
    /// Its log, while it has one.
    log: Option<KArc<OwnerLog>>,
    next: Option<KBox<SsOwner>>,
}

/// `pmc_ss_owners`, linked through nodes allocated before the spin lock.
#[derive(Debug, Default)]
pub(crate) struct SsOwners {
    head: Option<KBox<SsOwner>>,
    len: usize,
}

impl SsOwners {
    fn push(&mut self, mut node: KBox<SsOwner>) {
        node.next = self.head.take();
        self.head = Some(node);
        self.len += 1;
    }

    /// Unlinks the node of `pid`, for the caller to free after the lock.
    fn remove(&mut self, pid: Pid) -> Option<KBox<SsOwner>> {
        let mut cur = &mut self.head;
        while cur.as_ref().is_some_and(|n| n.pid != pid) {
            cur = &mut cur.as_mut()?.next;
        }
        let mut node = cur.take()?;
        *cur = node.next.take();
        self.len -= 1;
        Some(node)
    }

    fn get_mut(&mut self, pid: Pid) -> Option<&mut SsOwner> {
        let mut cur = self.head.as_deref_mut();
        while let Some(n) = cur {
            if n.pid == pid {
                return Some(n);
            }
            cur = n.next.as_deref_mut();
        }
        None
    }

    fn logs(&self) -> impl Iterator<Item = &OwnerLog> {
        core::iter::successors(self.head.as_deref(), |n| n.next.as_deref())
            .filter_map(|n| n.log.as_deref())
            .filter(|l| l.is_open())
    }

    /// Owners on the list.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for SsOwners {
    fn drop(&mut self) {
        // Iteratively, not by recursion down the chain.
        let mut cur = self.head.take();
        while let Some(mut n) = cur {
            cur = n.next.take();
        }
    }
}

/// The pid of kernel mappings in MAP_IN and MAP_OUT records (-1).
const KERNEL_PID: u32 = u32::MAX;

impl Hwpmc {
    /// `PMC_SYSTEM_SAMPLING_ACTIVE()`: whether system-wide events need the
    /// logs of system samplers (the kernel's count, which this driver
    /// keeps).
    fn ss_active(&self) -> bool {
        kpi::kern_pmc::pmc_ss_count() > 0
    }

    /// Records a hook could not write for want of memory: they count as
    /// lost, as records for which no log buffer was free do.
    pub(crate) fn records_lost(&self) {
        self.stats.buffer_requests.add(1);
        self.stats.buffer_requests_failed.add(1);
    }

    /// Calls `f` with the open log of each owner of running system-wide
    /// sampling PMCs, with their list's spin lock held. A record a log
    /// cannot take is lost, and counted there, as FreeBSD's.
    fn for_each_ss_log(&self, mut f: impl FnMut(&OwnerLog) -> KResult<()>) {
        for log in self.ss_owners.lock().logs() {
            let _ = f(log);
        }
    }

    /// A system-wide sampling PMC of `owner` starts: the owner counts it
    /// (`po_sscount`), and at its first the owner joins the system
    /// samplers and the kernel's `pmc_ss_count` (pmc_start). ENOMEM with
    /// nothing changed when the list's node cannot be allocated.
    pub(crate) fn ss_start(&self, core: &mut Core, owner: usize) -> KResult<()> {
        let o = &mut core.owners[owner];
        if o.sscount == 0 {
            let node = KBox::try_new(
                SsOwner {
                    pid: o.pid,
                    log: o.log.clone(),
                    next: None,
                },
                Wait::WaitOk,
            )?;
            self.ss_owners.lock().push(node);
            kpi::kern_pmc::pmc_ss_count_add(1);
        }
        o.sscount += 1;
        Ok(())
    }

    /// A running system-wide sampling PMC of `owner` stops or goes: at its
    /// last the owner leaves the system samplers and `pmc_ss_count`
    /// (pmc_stop, pmc_release_pmc_descriptor).
    pub(crate) fn ss_stop(&self, core: &mut Core, owner: usize) {
        let o = &mut core.owners[owner];
        kassert!(
            o.sscount > 0,
            "owner {} stops a sampler it does not count",
            o.pid
        );
        o.sscount = o.sscount.saturating_sub(1);
        if o.sscount == 0 {
            let node = self.ss_owners.lock().remove(o.pid);
            kassert!(node.is_some(), "system sampler {} not on the list", o.pid);
            kpi::kern_pmc::pmc_ss_count_add(-1);
            // Freed with no spin lock held.
            drop(node);
        }
    }

    /// An owner's log changed (configured or deconfigured): a system
    /// sampler's records go to the new one.
    pub(crate) fn ss_set_log(&self, core: &Core, owner: usize) {
        let o = &core.owners[owner];
        if o.sscount == 0 {
            return;
        }
        let old = {
            let mut list = self.ss_owners.lock();
            let node = list.get_mut(o.pid);
            kassert!(node.is_some(), "system sampler {} not on the list", o.pid);
            node.and_then(|n| core::mem::replace(&mut n.log, o.log.clone()))
        };
        // The last reference may go here, with no spin lock held.
        drop(old);
    }

    /// Owners of running system-wide sampling PMCs (`pmc_ss_owners`).
    pub fn ss_owner_count(&self) -> usize {
        self.ss_owners.lock().len()
    }

    /// The logs of owners of sampling PMCs attached to `pid`.
    fn target_logs(&self, core: &Core, pid: Pid) -> KResult<KVec<KArc<OwnerLog>>> {
        // Room for every row, allocated before the spin lock.
        let mut owners: KVec<Pid> = KVec::with_capacity(self.npmc as usize, Wait::WaitOk)?;
        {
            let procs = self.procs.lock();
            if let Some(pp) = procs.get(pid) {
                for pm in pp.slots.iter().filter_map(|s| s.pmc.as_ref()) {
                    if pm.mode.is_sampling() && !owners.contains(&pm.owner) {
                        let pushed = owners.push_within_capacity(pm.owner);
                        kpi::kassert!(pushed.is_ok(), "more owners than rows on pid {pid}");
                    }
                }
            }
        }
        let mut v = KVec::new();
        for o in core
            .owners
            .iter()
            .filter(|o| owners.contains(&o.pid) && o.sscount == 0)
        {
            if let Some(log) = o.open_log() {
                v.try_push(log.clone(), Wait::WaitOk)?;
            }
        }
        Ok(v)
    }

    /// MAP_IN records for the executable mappings `maps` of `pid`.
    pub(crate) fn log_mappings(log: &OwnerLog, pid: Pid, maps: &[Mapping]) {
        for m in maps {
            let _ = log.log_sync(PmclogBody::MapIn {
                pid,
                start: m.start as usize,
                pathname: &m.path,
            });
        }
    }

    /// `pmc_log_kernel_mappings`, once per owner: for a system sampler
    /// first PROC_CREATE and THR_CREATE for every process, then MAP_IN
    /// (pid -1) for the kernel and each module.
    pub(crate) fn log_kernel_mappings(
        &self,
        core: &mut Core,
        owner: usize,
        system: bool,
    ) -> KResult<()> {
        let Some(log) = core.owners[owner].open_log().cloned() else {
            return Ok(());
        };
        if core.owners[owner].kernel_maps_logged {
            return Ok(());
        }
        // Everything is gathered before the first record, so that a
        // failed allocation fails the start with nothing logged twice.
        let pids = if system {
            kpi::proc::all_pids(Wait::WaitOk)?
        } else {
            KVec::new()
        };
        let mut procs = KVec::with_capacity(pids.len(), Wait::WaitOk)?;
        for &pid in pids.iter() {
            if let Some(p) = kpi::proc::pfind(pid, Wait::WaitOk)? {
                let _ = procs.push_within_capacity(p);
            }
        }
        let objects = kpi::kern_pmc::kernel_objects(Wait::WaitOk)?;
        core.owners[owner].kernel_maps_logged = true;
        for p in procs.iter() {
            let _ = log.log(PmclogBody::ProcCreate {
                pid: p.pid,
                flags: p.flags,
                pcomm: &p.comm,
            });
            for tid in p.threads.iter() {
                let body = PmclogBody::ThrCreate {
                    tid: *tid,
                    pid: p.pid,
                    flags: p.flags,
                    tdname: &p.comm,
                };
                let _ = log.log(body);
            }
        }
        for m in objects.iter() {
            let _ = log.log_sync(PmclogBody::MapIn {
                pid: KERNEL_PID,
                start: m.start as usize,
                pathname: &m.path,
            });
        }
        Ok(())
    }

    /// `pmc_log_all_process_mappings`, once per owner of a system sampler.
    pub(crate) fn log_all_process_mappings(&self, core: &mut Core, owner: usize) -> KResult<()> {
        let Some(log) = core.owners[owner].open_log().cloned() else {
            return Ok(());
        };
        if core.owners[owner].procmaps_logged {
            return Ok(());
        }
        let pids = kpi::proc::all_pids(Wait::WaitOk)?;
        let mut maps = KVec::with_capacity(pids.len(), Wait::WaitOk)?;
        for &pid in pids.iter() {
            let _ = maps.push_within_capacity((pid, kpi::proc::mappings(pid, Wait::WaitOk)?));
        }
        core.owners[owner].procmaps_logged = true;
        for (pid, ms) in maps.iter() {
            Self::log_mappings(&log, *pid, ms);
        }
        Ok(())
    }

    /// Whether `pid` uses PMCs (`P_HWPMC`).
    pub(crate) fn uses_pmcs(pid: Pid) -> bool {
        kpi::proc::proc_state(pid).is_some_and(|p| p.flags & P_HWPMC != 0)
    }

    /// `pmc_process_mmap`.
    pub(crate) fn process_mmap(&self, addr: u64) {
        let pid = kpi::proc::curproc();
        if !self.ss_active() && !Self::uses_pmcs(pid) {
            return;
        }
        if self.try_process_mmap(pid, addr).is_err() {
            self.records_lost();
        }
    }

    fn try_process_mmap(&self, pid: Pid, addr: u64) -> KResult<()> {
        let maps = kpi::proc::mappings(pid, Wait::WaitOk)?;
        let Some(m) = maps.iter().find(|m| m.start == addr) else {
            return Ok(());
        };
        let body = PmclogBody::MapIn {
            pid,
            start: addr as usize,
            pathname: &m.path,
        };
        let core = self.core.lock();
        self.for_each_ss_log(|log| log.log_sync(body));
        for log in self.target_logs(&core, pid)?.iter() {
            let _ = log.log_sync(body);
        }
        Ok(())
    }

    /// `pmc_process_munmap`.
    pub(crate) fn process_munmap(&self, addr: u64, size: u64) {
        let pid = kpi::proc::curproc();
        if !self.ss_active() && !Self::uses_pmcs(pid) {
            return;
        }
        let core = self.core.lock();
        let body = PmclogBody::MapOut {
            pid,
            start: addr as usize,
            end: addr.saturating_add(size) as usize,
        };
        self.for_each_ss_log(|log| log.log(body));
        let Ok(logs) = self.target_logs(&core, pid) else {
            self.records_lost();
            return;
        };
        for log in logs.iter() {
            let _ = log.log(body);
        }
    }

    /// `pmc_kld_load` / `pmc_kld_unload`: system samplers hear of modules.
    pub(crate) fn kld_changed(&self, addr: u64, unloaded: Option<u64>) {
        if !self.ss_active() {
            return;
        }
        if self.try_kld_changed(addr, unloaded).is_err() {
            self.records_lost();
        }
    }

    fn try_kld_changed(&self, addr: u64, unloaded: Option<u64>) -> KResult<()> {
        let objects = kpi::kern_pmc::kernel_objects(Wait::WaitOk)?;
        let path = objects.iter().find(|m| m.start == addr).map(|m| &m.path);
        let body = match (unloaded, path) {
            (Some(size), _) => PmclogBody::MapOut {
                pid: KERNEL_PID,
                start: addr as usize,
                end: addr.saturating_add(size) as usize,
            },
            (None, Some(p)) => PmclogBody::MapIn {
                pid: KERNEL_PID,
                start: addr as usize,
                pathname: p,
            },
            (None, None) => return Ok(()),
        };
        // MAP_IN goes out at once, MAP_OUT with the buffer, as FreeBSD's.
        let sync = matches!(body, PmclogBody::MapIn { .. });
        self.for_each_ss_log(|log| match sync {
            true => log.log_sync(body),
            false => log.log(body),
        });
        Ok(())
    }

    /// `pmc_process_fork`'s part for system samplers: every fork
    /// (PROCFORK, PROC_CREATE).
    pub(crate) fn ss_fork(&self, parent: Pid, child: Pid) {
        if !self.ss_active() {
            return;
        }
        match kpi::proc::pfind(child, Wait::WaitOk) {
            Ok(Some(p)) => self.for_each_ss_log(|log| {
                let _ = log.log(PmclogBody::Procfork {
                    oldpid: parent,
                    newpid: child,
                });
                log.log_sync(PmclogBody::ProcCreate {
                    pid: child,
                    flags: p.flags,
                    pcomm: &p.comm,
                })
            }),
            Ok(None) => {}
            Err(_) => self.records_lost(),
        }
    }

    /// `pmc_process_exec`'s part for system samplers: every exec
    /// (PROCEXEC with no PMC id), so that a reader attributes later
    /// samples to the new image.
    pub(crate) fn ss_exec(&self, base: u64, dyn_base: u64) {
        if !self.ss_active() {
            return;
        }
        let pid = kpi::proc::curproc();
        match kpi::proc::pfind(pid, Wait::WaitOk) {
            Ok(Some(p)) => self.for_each_ss_log(|log| {
                log.log_sync(PmclogBody::Procexec {
                    pid,
                    pmcid: uapi::pmc::PMC_ID_INVALID,
                    base: base as usize,
                    dyn_base: dyn_base as usize,
                    pathname: crate::executable_path(&p.path),
                })
            }),
            Ok(None) => {}
            Err(_) => self.records_lost(),
        }
    }

    /// `pmc_process_exit`'s part for system samplers: every exit
    /// (SYSEXIT).
    pub(crate) fn ss_exit(&self, pid: Pid) {
        self.for_each_ss_log(|log| log.log(PmclogBody::Sysexit { pid }));
    }

    /// `pmc_process_threadcreate`: THR_CREATE for the system samplers
    /// (PMC_FN_THR_CREATE and PMC_FN_THR_CREATE_LOG). Allocates nothing.
    pub(crate) fn ss_thread_create(&self, t: &ThreadInfo) {
        let body = PmclogBody::ThrCreate {
            tid: t.tid,
            pid: t.pid,
            flags: t.flags,
            tdname: t.name.as_bytes(),
        };
        self.for_each_ss_log(|log| log.log_sync(body));
    }

    /// `pmc_process_threadexit`: THR_EXIT for the system samplers
    /// (PMC_FN_THR_EXIT and PMC_FN_THR_EXIT_LOG, which the kernel calls
    /// with the process's spin lock held). Allocates nothing.
    pub(crate) fn ss_thread_exit(&self, tid: Tid) {
        self.for_each_ss_log(|log| log.log(PmclogBody::ThrExit { tid }));
    }

    /// `pmc_process_proccreate`: PROC_CREATE for the system samplers
    /// (PMC_FN_PROC_CREATE_LOG, for a kernel process). Allocates nothing.
    pub(crate) fn ss_proc_create(&self, pid: Pid, flags: u32, comm: &Comm) {
        let body = PmclogBody::ProcCreate {
            pid,
            flags,
            pcomm: comm.as_bytes(),
        };
        self.for_each_ss_log(|log| log.log_sync(body));
    }
}

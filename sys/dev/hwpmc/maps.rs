//! The records that let a log reader name what was sampled: MAP_IN and
//! MAP_OUT for executable mappings and kernel modules, and, for owners of
//! system-wide sampling PMCs, the process and thread events of the whole
//! system (PROCFORK, PROC_CREATE, THR_CREATE, THR_EXIT, SYSEXIT).

use kpi::atomic::Ordering;

use kpi::KResult;
use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::{Mapping, P_HWPMC, Pid};
use uapi::pmclog::{PmclogBody, PmclogRecord};

use crate::hwpmc_logging::OwnerLog;
use crate::{Core, Hwpmc};

/// The pid of kernel mappings in MAP_IN and MAP_OUT records (-1).
const KERNEL_PID: u32 = u32::MAX;

fn emit(log: &OwnerLog, body: PmclogBody<'_>) {
    let _ = log.emit(&PmclogRecord {
        tsc: kpi::time::rdtsc(),
        body,
    });
}

impl Hwpmc {
    /// Whether system-wide events need the logs of system samplers.
    fn ss_active(&self) -> bool {
        self.ss_running.load(Ordering::Acquire) > 0
    }

    /// Records a hook could not write for want of memory: they count as
    /// lost, as records for which no log buffer was free do.
    pub(crate) fn records_lost(&self) {
        self.stats.buffer_requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .buffer_requests_failed
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The logs of owners with running system-wide sampling PMCs.
    fn ss_logs(core: &Core) -> KResult<KVec<KArc<OwnerLog>>> {
        let mut v = KVec::new();
        for o in core.owners.iter().filter(|o| o.sscount > 0) {
            if let Some(log) = o.open_log() {
                v.try_push(log.clone(), Wait::WaitOk)?;
            }
        }
        Ok(v)
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

    /// The system samplers' logs and those of the owners of sampling PMCs
    /// attached to `pid`.
    fn interested_logs(&self, core: &Core, pid: Pid) -> KResult<KVec<KArc<OwnerLog>>> {
        let mut logs = Self::ss_logs(core)?;
        let targets = self.target_logs(core, pid)?;
        logs.try_reserve(targets.len(), Wait::WaitOk)?;
        for l in targets.iter() {
            let _ = logs.push_within_capacity(l.clone());
        }
        Ok(logs)
    }

    /// MAP_IN records for the executable mappings `maps` of `pid`.
    pub(crate) fn log_mappings(log: &OwnerLog, pid: Pid, maps: &[Mapping]) {
        for m in maps {
            emit(
                log,
                PmclogBody::MapIn {
                    pid,
                    start: m.start as usize,
                    pathname: &m.path,
                },
            );
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
            emit(
                &log,
                PmclogBody::ProcCreate {
                    pid: p.pid,
                    flags: p.flags,
                    pcomm: &p.comm,
                },
            );
            for tid in p.threads.iter() {
                let body = PmclogBody::ThrCreate {
                    tid: *tid,
                    pid: p.pid,
                    flags: p.flags,
                    tdname: &p.comm,
                };
                emit(&log, body);
            }
        }
        for m in objects.iter() {
            emit(
                &log,
                PmclogBody::MapIn {
                    pid: KERNEL_PID,
                    start: m.start as usize,
                    pathname: &m.path,
                },
            );
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
        let core = self.core.lock();
        for log in self.interested_logs(&core, pid)?.iter() {
            emit(
                log,
                PmclogBody::MapIn {
                    pid,
                    start: addr as usize,
                    pathname: &m.path,
                },
            );
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
        let end = addr.saturating_add(size) as usize;
        let Ok(logs) = self.interested_logs(&core, pid) else {
            self.records_lost();
            return;
        };
        for log in logs.iter() {
            emit(
                log,
                PmclogBody::MapOut {
                    pid,
                    start: addr as usize,
                    end,
                },
            );
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
        let core = self.core.lock();
        for log in Self::ss_logs(&core)?.iter() {
            match (unloaded, &path) {
                (Some(size), _) => {
                    let end = addr.saturating_add(size) as usize;
                    emit(
                        log,
                        PmclogBody::MapOut {
                            pid: KERNEL_PID,
                            start: addr as usize,
                            end,
                        },
                    );
                }
                (None, Some(p)) => emit(
                    log,
                    PmclogBody::MapIn {
                        pid: KERNEL_PID,
                        start: addr as usize,
                        pathname: p,
                    },
                ),
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// System samplers hear of every fork (PROCFORK, PROC_CREATE).
    pub(crate) fn ss_fork(&self, parent: Pid, child: Pid) {
        if !self.ss_active() {
            return;
        }
        if self.try_ss_fork(parent, child).is_err() {
            self.records_lost();
        }
    }

    fn try_ss_fork(&self, parent: Pid, child: Pid) -> KResult<()> {
        let Some(p) = kpi::proc::pfind(child, Wait::WaitOk)? else {
            return Ok(());
        };
        let core = self.core.lock();
        for log in Self::ss_logs(&core)?.iter() {
            emit(
                log,
                PmclogBody::Procfork {
                    oldpid: parent,
                    newpid: child,
                },
            );
            emit(
                log,
                PmclogBody::ProcCreate {
                    pid: child,
                    flags: p.flags,
                    pcomm: &p.comm,
                },
            );
        }
        Ok(())
    }

    /// System samplers hear of every exec (PROCEXEC with no PMC id), so
    /// that a reader attributes later samples to the new image.
    pub(crate) fn ss_exec(&self, base: u64, dyn_base: u64) {
        if !self.ss_active() {
            return;
        }
        let pid = kpi::proc::curproc();
        if self.try_ss_exec(pid, base, dyn_base).is_err() {
            self.records_lost();
        }
    }

    fn try_ss_exec(&self, pid: Pid, base: u64, dyn_base: u64) -> KResult<()> {
        let Some(p) = kpi::proc::pfind(pid, Wait::WaitOk)? else {
            return Ok(());
        };
        let core = self.core.lock();
        for log in Self::ss_logs(&core)?.iter() {
            emit(
                log,
                PmclogBody::Procexec {
                    pid,
                    pmcid: uapi::pmc::PMC_ID_INVALID,
                    base: base as usize,
                    dyn_base: dyn_base as usize,
                    pathname: &p.path,
                },
            );
        }
        Ok(())
    }

    /// System samplers hear of every exit (SYSEXIT).
    pub(crate) fn ss_exit(&self, pid: Pid) {
        if !self.ss_active() {
            return;
        }
        let core = self.core.lock();
        let Ok(logs) = Self::ss_logs(&core) else {
            self.records_lost();
            return;
        };
        for log in logs.iter() {
            emit(log, PmclogBody::Sysexit { pid });
        }
    }

    /// System samplers hear of thread creation and exit.
    pub(crate) fn ss_thread(&self, created: bool, tid: kpi::proc::Tid) {
        if !self.ss_active() {
            return;
        }
        // Threads are created and exit within their process.
        let pid = kpi::proc::curproc();
        if self.try_ss_thread(created, pid, tid).is_err() {
            self.records_lost();
        }
    }

    fn try_ss_thread(&self, created: bool, pid: Pid, tid: kpi::proc::Tid) -> KResult<()> {
        let Some(p) = kpi::proc::pfind(pid, Wait::WaitOk)? else {
            return Ok(());
        };
        let core = self.core.lock();
        for log in Self::ss_logs(&core)?.iter() {
            if created {
                emit(
                    log,
                    PmclogBody::ThrCreate {
                        tid,
                        pid,
                        flags: p.flags,
                        tdname: &p.comm,
                    },
                );
            } else {
                emit(log, PmclogBody::ThrExit { tid });
            }
        }
        Ok(())
    }
}

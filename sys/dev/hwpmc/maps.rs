//! The records that let a log reader name what was sampled: MAP_IN and
//! MAP_OUT for executable mappings and kernel modules, and, for owners of
//! system-wide sampling PMCs, the process and thread events of the whole
//! system (PROCFORK, PROC_CREATE, THR_CREATE, THR_EXIT, SYSEXIT).

use core::sync::atomic::Ordering;

use kpi::malloc::{KArc, KVec, Wait};
use kpi::proc::{P_HWPMC, Pid};
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

    /// The logs of owners with running system-wide sampling PMCs.
    fn ss_logs(core: &Core) -> KVec<KArc<OwnerLog>> {
        let mut v = KVec::new();
        for o in core.owners.iter().filter(|o| o.sscount > 0) {
            if let Some(log) = o.open_log() {
                if v.try_push(log.clone(), Wait::WaitOk).is_err() {
                    break;
                }
            }
        }
        v
    }

    /// The logs of owners of sampling PMCs attached to `pid`.
    fn target_logs(&self, core: &Core, pid: Pid) -> KVec<KArc<OwnerLog>> {
        let mut owners: KVec<Pid> = KVec::new();
        {
            let procs = self.procs.lock();
            if let Some(pp) = procs.get(pid) {
                let _ = owners.try_reserve(pp.slots.len(), Wait::NoWait);
                for pm in pp.slots.iter().filter_map(|s| s.pmc.as_ref()) {
                    if pm.mode.is_sampling() && !owners.contains(&pm.owner) {
                        let _ = owners.push_within_capacity(pm.owner);
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
                if v.try_push(log.clone(), Wait::WaitOk).is_err() {
                    break;
                }
            }
        }
        v
    }

    /// MAP_IN records for every executable mapping of `pid`.
    pub(crate) fn log_process_mappings(log: &OwnerLog, pid: Pid) {
        for m in kpi::proc::mappings(pid) {
            emit(
                log,
                PmclogBody::MapIn {
                    pid,
                    start: m.start as usize,
                    pathname: m.path.as_bytes(),
                },
            );
        }
    }

    /// `pmc_log_kernel_mappings`, once per owner: for a system sampler
    /// first PROC_CREATE and THR_CREATE for every process, then MAP_IN
    /// (pid -1) for the kernel and each module.
    pub(crate) fn log_kernel_mappings(&self, core: &mut Core, owner: usize, system: bool) {
        let Some(log) = core.owners[owner].open_log().cloned() else {
            return;
        };
        if core.owners[owner].kernel_maps_logged {
            return;
        }
        core.owners[owner].kernel_maps_logged = true;
        if system {
            for pid in kpi::proc::all_pids() {
                let Some(p) = kpi::proc::pfind(pid) else {
                    continue;
                };
                emit(
                    &log,
                    PmclogBody::ProcCreate {
                        pid,
                        flags: p.flags,
                        pcomm: p.comm.as_bytes(),
                    },
                );
                for tid in p.threads.iter() {
                    let body = PmclogBody::ThrCreate {
                        tid: *tid,
                        pid,
                        flags: p.flags,
                        tdname: p.comm.as_bytes(),
                    };
                    emit(&log, body);
                }
            }
        }
        for m in kpi::kern_pmc::kernel_objects() {
            emit(
                &log,
                PmclogBody::MapIn {
                    pid: KERNEL_PID,
                    start: m.start as usize,
                    pathname: m.path.as_bytes(),
                },
            );
        }
    }

    /// `pmc_log_all_process_mappings`, once per owner of a system sampler.
    pub(crate) fn log_all_process_mappings(&self, core: &mut Core, owner: usize) {
        let Some(log) = core.owners[owner].open_log().cloned() else {
            return;
        };
        if core.owners[owner].procmaps_logged {
            return;
        }
        core.owners[owner].procmaps_logged = true;
        for pid in kpi::proc::all_pids() {
            Self::log_process_mappings(&log, pid);
        }
    }

    /// `pmc_process_mmap`.
    pub(crate) fn process_mmap(&self, addr: u64) {
        let pid = kpi::proc::curproc();
        if !self.ss_active() && kpi::proc::pfind(pid).is_none_or(|p| p.flags & P_HWPMC == 0) {
            return;
        }
        let Some(m) = kpi::proc::mappings(pid)
            .into_iter()
            .find(|m| m.start == addr)
        else {
            return;
        };
        let core = self.core.lock();
        for log in Self::ss_logs(&core)
            .iter()
            .chain(self.target_logs(&core, pid).iter())
        {
            emit(
                log,
                PmclogBody::MapIn {
                    pid,
                    start: addr as usize,
                    pathname: m.path.as_bytes(),
                },
            );
        }
    }

    /// `pmc_process_munmap`.
    pub(crate) fn process_munmap(&self, addr: u64, size: u64) {
        let pid = kpi::proc::curproc();
        if !self.ss_active() && kpi::proc::pfind(pid).is_none_or(|p| p.flags & P_HWPMC == 0) {
            return;
        }
        let core = self.core.lock();
        let end = addr.saturating_add(size) as usize;
        for log in Self::ss_logs(&core)
            .iter()
            .chain(self.target_logs(&core, pid).iter())
        {
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
        let core = self.core.lock();
        let path = kpi::kern_pmc::kernel_objects()
            .into_iter()
            .find(|m| m.start == addr)
            .map(|m| m.path);
        for log in Self::ss_logs(&core).iter() {
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
                        pathname: p.as_bytes(),
                    },
                ),
                (None, None) => {}
            }
        }
    }

    /// System samplers hear of every fork (PROCFORK, PROC_CREATE).
    pub(crate) fn ss_fork(&self, parent: Pid, child: Pid) {
        if !self.ss_active() {
            return;
        }
        let Some(p) = kpi::proc::pfind(child) else {
            return;
        };
        let core = self.core.lock();
        for log in Self::ss_logs(&core).iter() {
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
                    pcomm: p.comm.as_bytes(),
                },
            );
        }
    }

    /// System samplers hear of every exit (SYSEXIT).
    pub(crate) fn ss_exit(&self, pid: Pid) {
        if !self.ss_active() {
            return;
        }
        let core = self.core.lock();
        for log in Self::ss_logs(&core).iter() {
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
        let Some(p) = kpi::proc::pfind(pid) else {
            return;
        };
        let core = self.core.lock();
        for log in Self::ss_logs(&core).iter() {
            if created {
                emit(
                    log,
                    PmclogBody::ThrCreate {
                        tid,
                        pid,
                        flags: p.flags,
                        tdname: p.comm.as_bytes(),
                    },
                );
            } else {
                emit(log, PmclogBody::ThrExit { tid });
            }
        }
    }
}

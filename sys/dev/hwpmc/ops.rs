//! The operations of the hwpmc system call (hwpmc_mod.c's `pmc_syscall_handler`
//! and the `pmc_do_op_*` functions): lookups, information, administration,
//! allocation, attach and detach, start, stop, read and write, release,
//! and the log's configuration. The handlers of target processes' events
//! are in procs.rs.

use core::mem::{offset_of, size_of};

use kpi::KResult;
use kpi::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kpi::errno::*;
use kpi::malloc::{KArc, KBox, KVec, Wait};
use kpi::proc::{P_HWPMC, PRIV_PMC_MANAGE, PRIV_PMC_SYSTEM, Pid, SIGIO};
use kpi::uio::{UserPtr, copyin, copyout};
use uapi::Plain;
use uapi::pmc::*;
use uapi::pmc_events::{PMC_EV_SOFT_FIRST, PMC_EV_SOFT_LAST};
use uapi::pmclog::{PmclogBody, PmclogRecord, Timespec};

use crate::hwpmc_class::{AllocRequest, PmcClassDep};
use crate::hwpmc_logging::OwnerLog;
use crate::procs::PidHash;
use crate::sampling;
use crate::{Core, Hwpmc, OwnedPmc, Owner, Pmc, PmcVals};

/// Flags a user may pass to PMCALLOCATE.
const ALLOCATE_FLAGS: PmcFlags = PmcFlags::DESCENDANTS
    .union(PmcFlags::LOG_PROCCSW)
    .union(PmcFlags::LOG_PROCEXIT)
    .union(PmcFlags::CALLCHAIN)
    .union(PmcFlags::USERCALLCHAIN)
    .union(PmcFlags::EV_PMU);

/// Where an owner's PMC sits in `Core`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    pub(crate) owner: usize,
    pub(crate) pmc: usize,
}

pub(crate) fn width_mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// The saved count of a process sampling PMC switched out with nothing
/// left to count: it samples on its next event. (A saved 0 means no count
/// was saved, and the reload count is used.)
pub(crate) const ARMED_AT_ZERO: u64 = u64::MAX;

impl Hwpmc {
    pub(crate) fn dispatch(&self, op: PmcOp, arg: UserPtr) -> KResult<()> {
        if op == PmcOp::Getpmcinfo {
            // Read-only: taken shared, as FreeBSD downgrades pmc_sx.
            let core = self.core.lock_shared();
            return self.op_getpmcinfo(&core, arg);
        }
        let mut core = self.core.lock();
        let core = &mut *core;
        match op {
            PmcOp::Configurelog => self.op_configurelog(core, arg),
            PmcOp::Flushlog => self.op_flushlog(core),
            PmcOp::Closelog => self.op_closelog(core),
            PmcOp::Writelog => self.op_writelog(core, arg),
            PmcOp::Getcpuinfo => self.op_getcpuinfo(arg),
            PmcOp::Getdriverstats => self.op_getdriverstats(arg),
            PmcOp::Getmoduleversion => op_getmoduleversion(arg),
            PmcOp::Getpmcinfo => Err(EINVAL),
            PmcOp::Pmcadmin => self.op_pmcadmin(core, arg),
            PmcOp::Pmcallocate => self.op_pmcallocate(core, arg),
            PmcOp::Pmcattach => self.op_pmcattach(core, arg),
            PmcOp::Pmcdetach => self.op_pmcdetach(core, arg),
            PmcOp::Pmcgetmsr => self.op_pmcgetmsr(core, arg),
            PmcOp::Pmcrelease => self.op_pmcrelease(core, arg),
            PmcOp::Pmcrw => self.op_pmcrw(core, arg),
            PmcOp::Pmcsetcount => self.op_pmcsetcount(core, arg),
            PmcOp::Pmcstart => self.op_pmcstart(core, arg),
            PmcOp::Pmcstop => self.op_pmcstop(core, arg),
            PmcOp::Getdyneventinfo => self.op_getdyneventinfo(arg),
            // An operation newer than the tree the driver is built in is
            // one that tree's driver does not know.
            PmcOp::Getcaps if kpi::kern_pmc::pmc_module_version() < PMC_VERSION_WITH_GETCAPS => {
                Err(EINVAL)
            }
            PmcOp::Getcaps => self.op_getcaps(core, arg),
        }
    }

    /// The extension operations (hwpmc(4) NOTIFICATIONS); any other
    /// number is unknown (EINVAL).
    pub(crate) fn dispatch_extension(&self, op: u32, arg: UserPtr) -> KResult<()> {
        match op {
            PMC_OP_EXT_GETCAPS => copyout(
                &PmcOpExtcaps {
                    pm_version: PMC_EXT_VERSION,
                    pm_caps: PMC_EXTCAP_NOTIFY,
                },
                arg,
            ),
            PMC_OP_EXT_NOTIFY => {
                let mut core = self.core.lock();
                self.op_notify(&mut core, arg)
            }
            _ => Err(EINVAL),
        }
    }

    /// PMC_OP_EXT_NOTIFY: notification on one of the caller's sampling
    /// PMCs; the descriptor goes out in `pm_fd`.
    fn op_notify(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let mut req = copyin::<PmcOpNotify>(arg)?;
        let bad_signal = req.pm_signo < 0
            || req.pm_signo > kpi::proc::SIG_MAXSIG
            || req.pm_signo == kpi::proc::SIGKILL
            || req.pm_signo == kpi::proc::SIGSTOP;
        if req.pm_flags & !PMC_NOTIFY_FLAGS != 0
            || req.pm_spare != [0; 2]
            || req.pm_count == 0
            || bad_signal
        {
            return Err(EINVAL);
        }
        let at = self.find_pmc(core, req.pm_pmcid)?;
        let pm = Self::pmc_at(core, at).pmc.clone();
        if !pm.mode.is_sampling() {
            return Err(EINVAL);
        }
        if pm.notifier.lock().is_some() {
            return Err(EBUSY);
        }
        let fd = crate::hwpmc_notify::Notifier::configure(
            &pm,
            crate::hwpmc_notify::NotifyRequest {
                every: req.pm_count,
                bytes: req.pm_flags & PMC_NOTIFY_BYTES != 0,
                refresh: req.pm_refresh,
                signo: req.pm_signo,
            },
        )?;
        req.pm_fd = fd;
        // The descriptor stays the caller's even if it cannot learn its
        // number (EFAULT), as with any descriptor-making call.
        copyout(&req, arg)
    }

    // ----- lookups -------------------------------------------------------

    pub(crate) fn owner_index(core: &Core, pid: Pid) -> Option<usize> {
        core.owners.iter().position(|o| o.pid == pid)
    }

    /// Where `pm` sits in its owner's list, if the owner still has it.
    pub(crate) fn locate(core: &Core, pm: &KArc<Pmc>) -> Option<At> {
        let owner = Self::owner_index(core, pm.owner)?;
        let pmc = core.owners[owner]
            .pmcs
            .iter()
            .position(|x| KArc::ptr_eq(&x.pmc, pm))?;
        Some(At { owner, pmc })
    }

    fn pmc_at(core: &Core, at: At) -> &OwnedPmc {
        &core.owners[at.owner].pmcs[at.pmc]
    }

    /// `pmc_find_pmc`: the caller's PMC with id `id`. A process that owns
    /// nothing gets ESRCH, except a descendant of an owner whose
    /// self-attached DESCENDANTS PMC follows it; an unknown id of an owner
    /// gets EINVAL.
    fn find_pmc(&self, core: &Core, id: PmcId) -> KResult<At> {
        self.find_pmc_for(core, kpi::proc::curproc(), id)
    }

    /// [`Hwpmc::find_pmc`] for process `me`.
    pub(crate) fn find_pmc_for(&self, core: &Core, me: Pid, id: PmcId) -> KResult<At> {
        let ri = pmc_id_to_rowindex(id);
        if ri >= self.npmc {
            return Err(EINVAL);
        }
        let owner = match Self::owner_index(core, me) {
            Some(o) => o,
            None => {
                let inherited = {
                    let procs = self.procs.lock();
                    let pp = procs.get(me).ok_or(ESRCH)?;
                    let pm = pp.slots[ri as usize].pmc.as_ref().ok_or(ESRCH)?;
                    let need = PmcFlags::ATTACHED_TO_OWNER | PmcFlags::DESCENDANTS;
                    if !pm.vals().flags.contains(need) {
                        return Err(ESRCH);
                    }
                    pm.owner
                };
                Self::owner_index(core, inherited).ok_or(ESRCH)?
            }
        };
        let pmc = core.owners[owner]
            .pmcs
            .iter()
            .position(|p| p.pmc.id == id)
            .ok_or(EINVAL)?;
        Ok(At { owner, pmc })
    }

    fn classdep(&self, ri: u32) -> KResult<(&dyn PmcClassDep, u32)> {
        self.ri_to_class(ri).ok_or(EINVAL)
    }

    // ----- informational operations -------------------------------------

    fn op_getcpuinfo(&self, arg: UserPtr) -> KResult<()> {
        let mut gci = PmcOpGetcpuinfo::zeroed();
        gci.pm_cputype = self.cputype.raw();
        gci.pm_ncpu = self.ncpu;
        gci.pm_npmc = self.npmc;
        gci.pm_nclass = self.classes.len() as u32;
        for (info, slot) in gci.pm_classes.iter_mut().zip(self.classes.iter()) {
            *info = PmcClassinfo {
                pm_class: slot.dep.class().raw(),
                pm_caps: slot.dep.caps().bits(),
                pm_width: slot.dep.width(),
                pm_num: slot.dep.num(),
            };
        }
        copyout(&gci, arg)
    }

    fn op_getdriverstats(&self, arg: UserPtr) -> KResult<()> {
        let s = &self.stats;
        // Truncated to the struct's unsigned ints, as FreeBSD's are.
        let get = |c: &kpi::sysctl::Counter| c.fetch() as u32;
        let gms = PmcOpGetdriverstats {
            pm_intr_ignored: get(&s.intr_ignored),
            pm_intr_processed: get(&s.intr_processed),
            pm_intr_bufferfull: get(&s.intr_bufferfull),
            pm_syscalls: get(&s.syscalls),
            pm_syscall_errors: get(&s.syscall_errors),
            pm_buffer_requests: get(&s.buffer_requests),
            pm_buffer_requests_failed: get(&s.buffer_requests_failed),
            pm_log_sweeps: get(&s.log_sweeps),
        };
        copyout(&gms, arg)
    }

    fn op_getpmcinfo(&self, core: &Core, arg: UserPtr) -> KResult<()> {
        let cpu = copyin::<i32>(arg)?;
        if cpu < 0 || cpu as u32 >= self.ncpu {
            return Err(EINVAL);
        }
        let cpu = cpu as u32;
        if !kpi::cpu::is_active(cpu) {
            return Err(ENXIO);
        }
        let base = arg.offset(offset_of!(PmcOpGetpmcinfo, pm_pmcs));
        for ri in 0..self.npmc {
            let (dep, adjri) = self.classdep(ri)?;
            let mut info = PmcInfo::zeroed();
            info.pm_name = dep.row_name(adjri);
            info.pm_class = dep.class().raw();
            let disp = core.rowdisp[ri as usize];
            info.pm_rowdisp = match disp {
                d if d < 0 => PmcDisp::Standalone,
                d if d > 0 => PmcDisp::Thread,
                _ => PmcDisp::Free,
            }
            .raw();
            info.pm_ownerpid = -1;
            let (enabled, pm) = {
                let rows = self.pcpu[cpu as usize].lock();
                let row = &rows[ri as usize];
                (
                    row.enabled,
                    if row.enabled { row.pmc.clone() } else { None },
                )
            };
            info.pm_enabled = enabled as i32;
            if let Some(pm) = pm {
                let v = pm.vals();
                info.pm_ownerpid = pm.owner as i32;
                info.pm_mode = pm.mode.raw();
                info.pm_event = pm.event;
                info.pm_flags = v.flags.bits();
                if pm.mode.is_sampling() {
                    info.pm_reloadcount = v.reloadcount;
                }
            }
            copyout(&info, base.offset(ri as usize * size_of::<PmcInfo>()))?;
        }
        Ok(())
    }

    fn op_getdyneventinfo(&self, arg: UserPtr) -> KResult<()> {
        let class = copyin::<u32>(arg)?;
        if class != PmcClass::Soft.raw() {
            return Err(EINVAL);
        }
        let mut events = kpi::kern_pmc::soft_events(Wait::WaitOk)?;
        events.retain(|e| (PMC_EV_SOFT_FIRST..=PMC_EV_SOFT_LAST).contains(&e.code));
        events.sort_by_key(|e| e.code);
        let base = arg.offset(offset_of!(PmcOpGetdyneventinfo, pm_events));
        for (i, e) in events
            .iter()
            .enumerate()
            .take(uapi::pmc::PMC_EV_DYN_COUNT as usize)
        {
            let mut d = PmcDynEventDescr {
                pm_ev_name: [0; PMC_NAME_MAX],
                pm_ev_code: e.code,
            };
            set_c_field_str(&mut d.pm_ev_name, e.name());
            copyout(&d, base.offset(i * size_of::<PmcDynEventDescr>()))?;
        }
        copyout(
            &(events.len() as u32),
            arg.offset(offset_of!(PmcOpGetdyneventinfo, pm_nevent)),
        )
    }

    fn op_getcaps(&self, core: &Core, arg: UserPtr) -> KResult<()> {
        let req = copyin::<PmcOpCaps>(arg)?;
        let at = self.find_pmc(core, req.pm_pmcid)?;
        let pm = &Self::pmc_at(core, at).pmc;
        let (dep, adjri) = self.classdep(pm.ri)?;
        let caps = dep.get_caps(adjri);
        copyout(&caps.bits(), arg.offset(offset_of!(PmcOpCaps, pm_caps)))
    }

    // ----- administration ------------------------------------------------

    fn op_pmcadmin(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        kpi::proc::priv_check(PRIV_PMC_MANAGE)?;
        let pma = copyin::<PmcOpPmcadmin>(arg)?;
        if pma.pm_cpu < 0 || pma.pm_cpu as u32 >= self.ncpu {
            return Err(EINVAL);
        }
        let cpu = pma.pm_cpu as u32;
        if !kpi::cpu::is_active(cpu) {
            return Err(ENXIO);
        }
        let request = PmcState::from_raw(pma.pm_state)
            .filter(|s| matches!(s, PmcState::Disabled | PmcState::Free));
        let request = request.ok_or(EINVAL)?;
        if pma.pm_pmc < 0 || pma.pm_pmc as u32 >= self.npmc {
            return Err(EINVAL);
        }
        let ri = pma.pm_pmc as usize;
        if core.rowdisp[ri] > 0 && request == PmcState::Disabled {
            return Err(EBUSY);
        }
        let mut rows = self.pcpu[cpu as usize].lock();
        let row = &mut rows[ri];
        if row.pmc.is_some() {
            return Err(EBUSY);
        }
        match request {
            PmcState::Disabled if row.enabled => {
                row.enabled = false;
                core.rowdisp[ri] -= 1;
            }
            PmcState::Free if !row.enabled => {
                row.enabled = true;
                core.rowdisp[ri] += 1;
            }
            _ => {}
        }
        Ok(())
    }

    // ----- allocation ----------------------------------------------------

    fn can_allocate_row(core: &Core, ri: u32, mode: PmcMode) -> bool {
        let disp = core.rowdisp[ri as usize];
        disp == 0 || (mode.is_virtual() && disp > 0) || (mode.is_system() && disp < 0)
    }

    /// `pmc_can_allocate_rowindex`: the caller owns no process PMC on the
    /// row, no system PMC on the row and CPU, and is no PMC's target there.
    fn can_allocate_rowindex(&self, core: &Core, pid: Pid, ri: u32, cpu: u32) -> bool {
        if let Some(o) = Self::owner_index(core, pid) {
            for p in core.owners[o].pmcs.iter() {
                if p.pmc.ri == ri && (p.pmc.mode.is_virtual() || p.pmc.cpu == cpu) {
                    return false;
                }
            }
        }
        let procs = self.procs.lock();
        procs
            .get(pid)
            .is_none_or(|pp| pp.slots[ri as usize].pmc.is_none())
    }

    fn op_pmcallocate(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let pa = copyin::<PmcOpPmcallocate>(arg)?;
        let mode =
            PmcMode::from_raw(pa.pm_mode).ok_or_else(|| exterror!(EINVAL, c"Invalid PMC mode"))?;
        let cpu = pa.pm_cpu;
        if cpu != PMC_CPU_ANY && cpu >= self.ncpu {
            return Err(exterror!(EINVAL, c"Invalid PMC CPU"));
        }
        if (mode.is_virtual() && cpu != PMC_CPU_ANY) || (mode.is_system() && cpu == PMC_CPU_ANY) {
            return Err(EINVAL);
        }
        if mode.is_system() && !kpi::cpu::is_active(cpu) {
            return Err(ENXIO);
        }
        if mode.is_system() {
            if kpi::proc::jailed() {
                return Err(EPERM);
            }
            if self.knobs.unprivileged_syspmcs.get() == 0 {
                kpi::proc::priv_check(PRIV_PMC_SYSTEM)?;
            }
        }
        let flags = PmcFlags::from_bits(pa.pm_flags)
            .filter(|f| ALLOCATE_FLAGS.contains(*f))
            .ok_or_else(|| exterror!(EINVAL, c"Invalid PMC flags"))?;
        if flags.contains(PmcFlags::USERCALLCHAIN) && !flags.contains(PmcFlags::CALLCHAIN) {
            return Err(EINVAL);
        }
        if flags.contains(PmcFlags::USERCALLCHAIN) && !mode.is_sampling() {
            return Err(EINVAL);
        }
        if mode.is_system() && flags.intersects(PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT) {
            return Err(EINVAL);
        }
        let mut caps = PmcCaps::from_bits_retain(pa.pm_caps);
        if mode.is_sampling() {
            caps |= PmcCaps::INTERRUPT;
        }
        let slot = self.class_of(pa.pm_class).ok_or(EINVAL)?;
        if !slot.dep.caps().contains(caps) {
            return Err(EOPNOTSUPP);
        }
        let me = kpi::proc::curproc();
        let req = AllocRequest {
            mode,
            caps,
            raw: &pa,
        };

        // Find a row whose class accepts the request.
        let mut chosen = None;
        for ri in slot.first_ri..self.npmc {
            let (dep, adjri) = self.classdep(ri)?;
            if !Self::can_allocate_row(core, ri, mode) {
                continue;
            }
            let on_cpu = if mode.is_system() { cpu } else { PMC_CPU_ANY };
            if !self.can_allocate_rowindex(core, me, ri, on_cpu) {
                continue;
            }
            if mode.is_system() {
                let rows = self.pcpu[cpu as usize].lock();
                if rows[ri as usize].pmc.is_some() && !dep.shareable() {
                    continue;
                }
            }
            let _bind = mode.is_system().then(|| kpi::cpu::bind(cpu));
            let on = if mode.is_system() {
                cpu
            } else {
                kpi::cpu::curcpu()
            };
            if dep.allocate_pmc(on, adjri, &req).is_ok() {
                chosen = Some((ri, dep, adjri));
                break;
            }
        }
        let (ri, dep, adjri) = chosen.ok_or_else(|| exterror!(EINVAL, c"No PMC row accepted"))?;

        let mut pflags = flags;
        if mode == PmcMode::Ss || flags.intersects(PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT) {
            pflags |= PmcFlags::NEEDS_LOGFILE;
        }
        let (reloadcount, initial) = if mode.is_sampling() {
            let min = self.knobs.mincount.get().max(1) as u64;
            (pa.pm_count.max(min), 0)
        } else {
            (0, pa.pm_count)
        };
        let class = dep.class();
        let id = pmc_id_make_id(cpu, mode.raw(), class.raw(), ri);
        // Everything that can fail to allocate, before any state changes.
        let evname = if class == PmcClass::Soft {
            kpi::kern_pmc::soft_events(Wait::WaitOk)?
                .iter()
                .find(|e| e.code == pa.pm_ev)
                .copied()
        } else {
            None
        };
        if mode.is_sampling() {
            self.reserve_sampler()?;
        }
        let pmc = KArc::try_new(
            Pmc {
                id,
                event: pa.pm_ev,
                mode,
                class,
                caps,
                ri,
                cpu,
                owner: me,
                md: pa.pm_md,
                md_config: dep.md_config(&req),
                alloc_flags: pflags,
                vals: kpi::sync::SpinMutex::new(
                    c"pmc-pool",
                    PmcVals {
                        state: PmcState::Allocated,
                        flags: pflags,
                        reloadcount,
                        initial,
                    },
                    Wait::WaitOk,
                )?,
                running: AtomicBool::new(false),
                deleted: AtomicBool::new(false),
                reload: AtomicU64::new(reloadcount),
                runcount: AtomicU32::new(0),
                savedvalue: AtomicU64::new(0),
                log: kpi::sync::SpinMutex::new(c"pmc-logref", None, Wait::WaitOk)?,
                sample_key: AtomicU64::new(sampling::NO_KEY),
                dropped: AtomicU64::new(0),
                dropped_total: AtomicU64::new(0),
                notify: Default::default(),
                notifier: kpi::sync::SpinMutex::new(c"pmc-notifier", None, Wait::WaitOk)?,
            },
            Wait::WaitOk,
        )?;
        let owner = match Self::owner_index(core, me) {
            Some(o) => o,
            None => {
                core.owners.try_reserve(1, Wait::WaitOk)?;
                let pmcs = KVec::with_capacity(1, Wait::WaitOk)?;
                let o = KBox::try_new(Owner::new(me, pmcs), Wait::WaitOk)?;
                let _ = core.owners.push_within_capacity(o);
                core.owners.len() - 1
            }
        };
        if let Err(e) = core.owners[owner].pmcs.try_reserve(1, Wait::WaitOk) {
            self.maybe_remove_owner(core, owner);
            return Err(e);
        }

        if mode.is_system() {
            let _bind = kpi::cpu::bind(cpu);
            let mut rows = self.pcpu[cpu as usize].lock();
            if !rows[ri as usize].enabled || dep.config_pmc(cpu, adjri, Some(&pmc)).is_err() {
                drop(rows);
                let _ = dep.release_pmc(cpu, adjri, &pmc);
                self.maybe_remove_owner(core, owner);
                return Err(EPERM);
            }
            rows.put_system(ri, &pmc);
            core.rowdisp[ri as usize] -= 1;
        } else {
            core.rowdisp[ri as usize] += 1;
        }
        pmc.set_log(core.owners[owner].log.clone());
        self.log_allocation(&pmc, evname.as_ref().map_or(&[][..], |e| e.name()));
        if mode.is_sampling() {
            self.enter_sampler(&pmc);
        }
        let _ = core.owners[owner].pmcs.push_within_capacity(OwnedPmc {
            pmc,
            targets: KVec::new(),
            msr_taken: false,
        });
        kpi::proc::set_flags(me, P_HWPMC, 0);
        pmcdbg!(
            self.debug,
            "pmc",
            "allocate",
            "id={id:#x} ri={ri} mode={mode:?} ev={:#x}",
            pa.pm_ev
        );
        copyout(&id, arg.offset(offset_of!(PmcOpPmcallocate, pm_pmcid)))
    }

    /// A PMCALLOCATE record, or PMCALLOCATEDYN with the event name for a
    /// SOFT PMC, when the owner has a log.
    fn log_allocation(&self, pmc: &Pmc, evname: &[u8]) {
        let Some(log) = pmc.log() else { return };
        let v = pmc.vals();
        let tsc = kpi::time::rdtsc();
        if pmc.class == PmcClass::Soft {
            let body = PmclogBody::Pmcallocatedyn {
                pmcid: pmc.id,
                event: pmc.event,
                flags: v.flags.bits(),
                evname,
            };
            let _ = log.emit_sync(&PmclogRecord { tsc, body });
        } else {
            let body = PmclogBody::Pmcallocate {
                pmcid: pmc.id,
                event: pmc.event,
                flags: v.flags.bits(),
                // FreeBSD's pm_sc union: a counting PMC's initial count
                // where a sampling one has its reload count.
                rate: if pmc.mode.is_sampling() {
                    v.reloadcount
                } else {
                    v.initial
                },
            };
            let _ = log.emit_sync(&PmclogRecord { tsc, body });
        }
    }

    /// `pmc_maybe_remove_owner`: an owner with no PMCs and no log goes.
    fn maybe_remove_owner(&self, core: &mut Core, owner: usize) {
        if core.owners[owner].pmcs.is_empty() && core.owners[owner].log.is_none() {
            core.owners.swap_remove(owner);
        }
    }

    // ----- attach and detach --------------------------------------------

    fn op_pmcattach(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let a = copyin::<PmcOpPmcattach>(arg)?;
        if a.pm_pid < 0 {
            return Err(EINVAL);
        }
        let at = self.find_pmc(core, a.pm_pmc)?;
        let pid = if a.pm_pid == 0 {
            kpi::proc::curproc()
        } else {
            a.pm_pid as u32
        };
        let pm = Self::pmc_at(core, at).pmc.clone();
        if pm.mode.is_system() {
            return Err(exterror!(EINVAL, c"Cannot attach a system-mode PMC"));
        }
        match pm.state() {
            PmcState::Running => {
                return Err(exterror!(EBUSY, c"PMC must be stopped before attach"));
            }
            PmcState::Allocated | PmcState::Stopped => {}
            _ => return Err(EINVAL),
        }
        // A process working on exiting counts as gone, as on FreeBSD: its
        // exit handler may have run already.
        kpi::proc::proc_state(pid)
            .filter(|p| !p.exiting())
            .ok_or(ESRCH)?;
        // Its error as it comes, as FreeBSD returns it: EPERM, or EBUSY
        // for a process in the middle of an exec, or a MAC policy's.
        kpi::proc::p_candebug(pid)?;
        self.attach_process(core, at, pid)
    }

    fn op_pmcdetach(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let a = copyin::<PmcOpPmcattach>(arg)?;
        if a.pm_pid < 0 {
            return Err(EINVAL);
        }
        let at = self.find_pmc(core, a.pm_pmc)?;
        if Self::pmc_at(core, at).pmc.mode.is_system() {
            return Err(EINVAL);
        }
        let pid = if a.pm_pid == 0 {
            kpi::proc::curproc()
        } else {
            a.pm_pid as u32
        };
        // A process working on exiting counts as gone, as on FreeBSD: its
        // exit handler may have run already.
        kpi::proc::proc_state(pid)
            .filter(|p| !p.exiting())
            .ok_or(ESRCH)?;
        self.detach_process(core, at, pid)
    }

    /// The process and its live descendants, parents first.
    fn subtree(pid: Pid) -> KResult<KVec<Pid>> {
        let mut out = KVec::with_capacity(1, Wait::WaitOk)?;
        out.try_push(pid, Wait::WaitOk)?;
        let mut i = 0;
        while i < out.len() {
            for &child in kpi::proc::children(out[i], Wait::WaitOk)?.iter() {
                // An exiting child would keep a descriptor its exit
                // handler no longer removes.
                if kpi::proc::proc_state(child).is_some_and(|c| !c.exiting()) {
                    out.try_push(child, Wait::WaitOk)?;
                }
            }
            i += 1;
        }
        Ok(out)
    }

    /// `pmc_attach_process`: attaches to `pid`, and with DESCENDANTS to its
    /// whole subtree; on a failure undoes what this call attached.
    fn attach_process(&self, core: &mut Core, at: At, pid: Pid) -> KResult<()> {
        let (pm, msr_taken) = {
            let o = Self::pmc_at(core, at);
            (o.pmc.clone(), o.msr_taken)
        };
        // A PMC whose RDPMC index was handed out stays with its owner.
        if msr_taken && pid != pm.owner {
            return Err(EPERM);
        }
        if !pm.vals().flags.contains(PmcFlags::DESCENDANTS) {
            return self.attach_one(core, at, pid, true);
        }
        let procs = Self::subtree(pid)?;
        for (n, &p) in procs.iter().enumerate() {
            if let Err(e) = self.attach_one(core, at, p, true) {
                for &q in procs[..n].iter() {
                    let _ = self.detach_one(core, at, q, false);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// `pmc_attach_one_process`.
    pub(crate) fn attach_one(&self, core: &mut Core, at: At, pid: Pid, log: bool) -> KResult<()> {
        let pm = Self::pmc_at(core, at).pmc.clone();
        let ri = pm.ri as usize;
        // Allocate first: a descriptor if the process has none, room in
        // the PMC's target list, and what the records need.
        let record = if log { pm.log() } else { None };
        let exists = self.procs.lock().get(pid).is_some();
        let snapshot = if !exists || record.is_some() {
            kpi::proc::pfind(pid, Wait::WaitOk)?
        } else {
            None
        };
        let maps = match &record {
            Some(_) if pm.mode.is_sampling() => Some(kpi::proc::mappings(pid, Wait::WaitOk)?),
            _ => None,
        };
        let fresh = if exists {
            None
        } else {
            let no_threads = KVec::new();
            let threads = snapshot.as_ref().map_or(&no_threads, |p| &p.threads);
            Some(PidHash::prepare(
                pid,
                self.new_process(threads)?,
                Wait::WaitOk,
            )?)
        };
        core.owners[at.owner].pmcs[at.pmc]
            .targets
            .try_reserve(1, Wait::WaitOk)?;
        {
            let mut procs = self.procs.lock();
            if let Some(node) = fresh {
                procs.insert(node);
            }
            let Some(pp) = procs.get_mut(pid) else {
                return Err(ESRCH);
            };
            match &pp.slots[ri].pmc {
                Some(cur) if KArc::ptr_eq(cur, &pm) => return Err(EEXIST),
                Some(_) => return Err(EBUSY),
                None => {}
            }
            let pmcval = if pm.mode == PmcMode::Ts {
                pm.vals().reloadcount
            } else {
                0
            };
            pp.attach_slot(ri, &pm, pmcval);
            pp.refcnt += 1;
        }
        let _ = core.owners[at.owner].pmcs[at.pmc]
            .targets
            .push_within_capacity(pid);
        pm.update(|v| {
            if pid == pm.owner {
                v.flags |= PmcFlags::ATTACHED_TO_OWNER;
            } else if pm.mode.is_sampling() && !v.flags.contains(PmcFlags::ATTACHED_TO_OWNER) {
                v.flags |= PmcFlags::NEEDS_LOGFILE;
            }
            v.flags |= PmcFlags::ATTACH_DONE;
        });
        kpi::proc::set_flags(pid, P_HWPMC, 0);
        pmcdbg!(self.debug, "pmc", "attach", "id={:#x} pid={pid}", pm.id);
        if let (Some(log), Some(p)) = (record, snapshot) {
            let _ = log.log_sync(PmclogBody::Pmcattach {
                pmcid: pm.id,
                pid,
                pathname: crate::executable_path(&p.path),
            });
            if let Some(maps) = maps {
                Self::log_mappings(&log, pid, &maps);
            }
        }
        Ok(())
    }

    /// `pmc_detach_process`: without DESCENDANTS, detaches from `pid`;
    /// with it, from the whole subtree, ignoring processes that were not
    /// attached. With no target left, a later START re-attaches the owner.
    fn detach_process(&self, core: &mut Core, at: At, pid: Pid) -> KResult<()> {
        let pm = Self::pmc_at(core, at).pmc.clone();
        if !pm.vals().flags.contains(PmcFlags::DESCENDANTS) {
            return self.detach_one(core, at, pid, true);
        }
        for p in Self::subtree(pid)?.iter() {
            let _ = self.detach_one(core, at, *p, true);
        }
        if Self::pmc_at(core, at).targets.is_empty() {
            pm.update(|v| v.flags.remove(PmcFlags::ATTACH_DONE));
        }
        Ok(())
    }

    /// `pmc_detach_one_process`.
    pub(crate) fn detach_one(&self, core: &mut Core, at: At, pid: Pid, log: bool) -> KResult<()> {
        let pm = Self::pmc_at(core, at).pmc.clone();
        let removed = {
            let mut procs = self.procs.lock();
            let pp = procs.get_mut(pid).ok_or(ESRCH)?;
            let slot = &pp.slots[pm.ri as usize];
            if !slot.pmc.as_ref().is_some_and(|c| KArc::ptr_eq(c, &pm)) {
                return Err(EINVAL);
            }
            let _detached = pp.detach_slot(pm.ri as usize);
            kassert!(pp.refcnt > 0, "target {pid} with no references");
            pp.refcnt -= 1;
            if pid == pm.owner {
                pp.msr_access = false;
            }
            if pp.refcnt == 0 {
                procs.remove(pid)
            } else {
                None
            }
        };
        // A target running now keeps the PMC loaded on its CPU; once it
        // no longer uses PMCs, no switch-out comes to take it off.
        self.unload_everywhere(&pm, Some(pid));
        if let Some(node) = removed {
            self.destroy_process(node.into_value());
        }
        pmcdbg!(
            self.debug,
            "pmc",
            "unlinktarget",
            "id={:#x} pid={pid}",
            pm.id
        );
        self.unlink_target(core, at, pid);
        if let Some(log) = pm.log().filter(|_| log) {
            let _ = log.log_sync(PmclogBody::Pmcdetach { pmcid: pm.id, pid });
        }
        Ok(())
    }

    /// Drops `pid` from the PMC's targets; the owner gets SIGIO when the
    /// last one goes.
    fn unlink_target(&self, core: &mut Core, at: At, pid: Pid) {
        let owned = &mut core.owners[at.owner].pmcs[at.pmc];
        let pm = owned.pmc.clone();
        owned.targets.retain(|&t| t != pid);
        if pid == pm.owner {
            pm.update(|v| v.flags.remove(PmcFlags::ATTACHED_TO_OWNER));
            owned.msr_taken = false;
        }
        if owned.targets.is_empty() {
            kpi::proc::psignal(pm.owner, SIGIO);
        }
        let still_target = self.procs.lock().get(pid).is_some();
        if !still_target && Self::owner_index(core, pid).is_none() {
            kpi::proc::set_flags(pid, 0, P_HWPMC);
        }
    }

    // ----- start, stop, read, write -------------------------------------

    fn op_pmcstart(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let sp = copyin::<PmcOpSimple>(arg)?;
        let at = self.find_pmc(core, sp.pm_pmcid)?;
        pmcdbg!(self.debug, "pmc", "start", "id={:#x}", sp.pm_pmcid);
        let pm = Self::pmc_at(core, at).pmc.clone();
        match pm.state() {
            PmcState::Running => return Ok(()),
            PmcState::Stopped | PmcState::Allocated => {}
            _ => return Err(EINVAL),
        }
        let owner_has_log = core.owners[at.owner].log.is_some();
        if pm.vals().flags.contains(PmcFlags::NEEDS_LOGFILE) && !owner_has_log {
            return Err(EDOOFUS);
        }
        if pm.mode.is_sampling() {
            self.log_kernel_mappings(core, at.owner, pm.mode == PmcMode::Ss)?;
        }
        if pm.mode.is_virtual() {
            if Self::pmc_at(core, at).targets.is_empty() {
                if pm.vals().flags.contains(PmcFlags::ATTACH_DONE) {
                    return Err(ESRCH);
                }
                self.attach_process(core, at, pm.owner)?;
            }
            pm.update_published(|v| v.state = PmcState::Running);
            if pm.vals().flags.contains(PmcFlags::ATTACHED_TO_OWNER) {
                // Reload the owner's thread so the PMC goes on its CPU now.
                kpi::proc::force_context_switch();
            }
            return Ok(());
        }
        let cpu = pm.cpu;
        if !kpi::cpu::is_active(cpu) {
            return Err(ENXIO);
        }
        if pm.mode == PmcMode::Ss {
            self.log_all_process_mappings(core, at.owner)?;
            self.ss_start(core, at.owner)?;
        }
        let _bind = kpi::cpu::bind(cpu);
        let (dep, adjri) = self.classdep(pm.ri)?;
        let v = pm.update_published(|v| {
            v.state = PmcState::Running;
            if pm.mode.is_sampling() {
                v.reloadcount
            } else {
                v.initial
            }
        });
        dep.write_pmc(cpu, adjri, v)?;
        dep.start_pmc(cpu, adjri, &pm)
    }

    fn op_pmcstop(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let sp = copyin::<PmcOpSimple>(arg)?;
        let at = self.find_pmc(core, sp.pm_pmcid)?;
        pmcdbg!(self.debug, "pmc", "stop", "id={:#x}", sp.pm_pmcid);
        let pm = Self::pmc_at(core, at).pmc.clone();
        match pm.state() {
            PmcState::Stopped => return Ok(()),
            PmcState::Running => {}
            _ => return Err(EINVAL),
        }
        self.stop_pmc(core, at)
    }

    /// `pmc_stop` of a running PMC. A process PMC stops at each target's
    /// next switch-out, which still adds the last slice. A system PMC
    /// stops on its CPU, keeping the count for a later start, and stops
    /// counting as a system sampler of its owner. A system PMC whose CPU
    /// is away stays running with ENXIO (FreeBSD marks it stopped and
    /// leaves the hardware armed, so a release after the CPU returns would
    /// not stop it).
    fn stop_pmc(&self, core: &mut Core, at: At) -> KResult<()> {
        let pm = Self::pmc_at(core, at).pmc.clone();
        kassert!(
            pm.state() == PmcState::Running,
            "stopping PMC {:#x} in state {:?}",
            pm.id,
            pm.state()
        );
        if pm.mode.is_virtual() {
            pm.update_published(|v| v.state = PmcState::Stopped);
            return Ok(());
        }
        let cpu = pm.cpu;
        if !kpi::cpu::is_active(cpu) {
            return Err(ENXIO);
        }
        pm.update_published(|v| v.state = PmcState::Stopped);
        let (dep, adjri) = self.classdep(pm.ri)?;
        let r = {
            let _bind = kpi::cpu::bind(cpu);
            dep.stop_pmc(cpu, adjri, &pm).and_then(|()| {
                if pm.mode.is_counting() {
                    let now = dep.read_pmc(cpu, adjri)?;
                    pm.update(|v| v.initial = now);
                }
                Ok(())
            })
        };
        if pm.mode == PmcMode::Ss {
            self.ss_stop(core, at.owner);
        }
        r
    }

    fn op_pmcrw(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let prw = copyin::<PmcOpPmcrw>(arg)?;
        let flags = PmcFlags::from_bits_retain(prw.pm_flags);
        if !flags.intersects(PmcFlags::OLDVALUE | PmcFlags::NEWVALUE) {
            return Err(exterror!(EINVAL, c"PMCRW requires PMC_F_OLDVALUE"));
        }
        let at = self.find_pmc(core, prw.pm_pmcid)?;
        let pm = Self::pmc_at(core, at).pmc.clone();
        let state = pm.state();
        if !matches!(
            state,
            PmcState::Allocated | PmcState::Stopped | PmcState::Running
        ) {
            return Err(EINVAL);
        }
        if state == PmcState::Running && flags.contains(PmcFlags::NEWVALUE) {
            return Err(exterror!(EBUSY, c"Cannot write a PMC while it is running"));
        }
        let (dep, adjri) = self.classdep(pm.ri)?;
        let mut old = 0;
        if pm.mode.is_virtual() {
            if Self::pmc_at(core, at).targets.is_empty() {
                // hwpmc(4): a process PMC with no target is read through
                // PMCRW only with the owner warned.
                kpi::proc::psignal(pm.owner, SIGIO);
            }
            if flags.contains(PmcFlags::OLDVALUE) {
                let v = pm.vals();
                old = pm.savedvalue.load(Ordering::Acquire);
                if v.flags.contains(PmcFlags::ATTACHED_TO_OWNER) && v.state == PmcState::Running {
                    // The owner is running it here: the row. A counting
                    // PMC's count is the total and what the row counted
                    // since its switch-in (a row starts from the total, or
                    // from zero for a SOFT counting PMC).
                    let cpu = kpi::cpu::curcpu();
                    let rows = self.pcpu[cpu as usize].lock();
                    let row = &rows[pm.ri as usize];
                    if row.pmc.as_ref().is_some_and(|c| KArc::ptr_eq(c, &pm)) {
                        let hw = dep.read_pmc(cpu, adjri)?;
                        old = if pm.mode == PmcMode::Tc {
                            let width_mask =
                                self.ri_to_slot(pm.ri).map_or(u64::MAX, |s| s.width_mask);
                            old.wrapping_add(hw.wrapping_sub(row.saved) & width_mask)
                        } else {
                            hw
                        };
                    }
                }
            }
            if flags.contains(PmcFlags::NEWVALUE) {
                pm.savedvalue.store(prw.pm_value, Ordering::Release);
            }
        } else {
            let cpu = pm.cpu;
            if !kpi::cpu::is_active(cpu) {
                return Err(ENXIO);
            }
            let _bind = kpi::cpu::bind(cpu);
            if flags.contains(PmcFlags::OLDVALUE) {
                old = dep.read_pmc(cpu, adjri)?;
            }
            if flags.contains(PmcFlags::NEWVALUE) {
                dep.write_pmc(cpu, adjri, prw.pm_value)?;
            }
        }
        if flags.contains(PmcFlags::OLDVALUE) {
            copyout(&old, arg.offset(offset_of!(PmcOpPmcrw, pm_value)))?;
        }
        Ok(())
    }

    fn op_pmcsetcount(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let sc = copyin::<PmcOpPmcsetcount>(arg)?;
        let at = self.find_pmc(core, sc.pm_pmcid)?;
        let pm = Self::pmc_at(core, at).pmc.clone();
        if pm.state() == PmcState::Running {
            return Err(EBUSY);
        }
        if pm.mode.is_sampling() {
            let min = self.knobs.mincount.get().max(1) as u64;
            pm.update_published(|v| v.reloadcount = sc.pm_count.max(min));
        } else {
            pm.update(|v| v.initial = sc.pm_count);
            // hwpmc(4): counting continues from the count set. A process
            // counting PMC's count is its total over its targets (what
            // PMCRW reads), so the count set becomes that total. FreeBSD's
            // C driver keeps it in pm_initial, which process mode never
            // reads; see hwpmc(4) COMPATIBILITY.
            if pm.mode.is_virtual() {
                pm.savedvalue.store(sc.pm_count, Ordering::Release);
            }
        }
        Ok(())
    }

    fn op_pmcgetmsr(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let gm = copyin::<PmcOpGetmsr>(arg)?;
        let at = self.find_pmc(core, gm.pm_pmcid)?;
        let owned = Self::pmc_at(core, at);
        let pm = owned.pmc.clone();
        if !pm.mode.is_virtual() || pm.vals().flags.contains(PmcFlags::DESCENDANTS) {
            return Err(EINVAL);
        }
        if owned.targets.len() != 1 || owned.targets[0] != pm.owner {
            return Err(EINVAL);
        }
        let (dep, adjri) = self.classdep(pm.ri)?;
        let msr = dep.get_msr(adjri)?;
        copyout(
            &PmcOpGetmsr {
                pm_msr: msr,
                pm_pmcid: gm.pm_pmcid,
            },
            arg,
        )?;
        core.owners[at.owner].pmcs[at.pmc].msr_taken = true;
        if let Some(pp) = self.procs.lock().get_mut(pm.owner) {
            pp.msr_access = true;
        }
        kpi::proc::force_context_switch();
        Ok(())
    }

    // ----- release -------------------------------------------------------

    fn op_pmcrelease(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let sp = copyin::<PmcOpSimple>(arg)?;
        let at = self.find_pmc(core, sp.pm_pmcid)?;
        self.release_pmc(core, at);
        self.maybe_remove_owner(core, at.owner);
        Ok(())
    }

    /// `pmc_release_pmc_descriptor` and removal from the owner: stops the
    /// PMC, takes it off every CPU, detaches it from every target and
    /// gives the row back.
    fn release_pmc(&self, core: &mut Core, at: At) {
        let pm = Self::pmc_at(core, at).pmc.clone();
        pmcdbg!(
            self.debug,
            "pmc",
            "release",
            "id={:#x} owner={}",
            pm.id,
            pm.owner
        );
        if pm.mode.is_sampling() {
            // Its samples are logged before it goes.
            self.process_all_samples();
        }
        let Ok((dep, adjri)) = self.classdep(pm.ri) else {
            return;
        };
        let was = pm.update_published(|v| core::mem::replace(&mut v.state, PmcState::Deleted));
        kassert!(was != PmcState::Deleted, "PMC {:#x} released twice", pm.id);
        if pm.mode.is_system() {
            let cpu = pm.cpu;
            let _bind = kpi::cpu::bind(cpu);
            if was == PmcState::Running {
                let _ = dep.stop_pmc(cpu, adjri, &pm);
            }
            let mut rows = self.pcpu[cpu as usize].lock();
            let row = &rows[pm.ri as usize];
            if row.pmc.as_ref().is_some_and(|c| KArc::ptr_eq(c, &pm)) {
                let _ = dep.config_pmc(cpu, adjri, None);
                rows.clear(pm.ri);
            }
            drop(rows);
            if pm.mode == PmcMode::Ss && was == PmcState::Running {
                self.ss_stop(core, at.owner);
            }
            kassert!(
                core.rowdisp[pm.ri as usize] < 0,
                "row {} disposition {} releasing a system PMC",
                pm.ri,
                core.rowdisp[pm.ri as usize]
            );
            core.rowdisp[pm.ri as usize] += 1;
        } else {
            // Take it off any CPU where a target runs now.
            self.unload_everywhere(&pm, None);
            while let Some(&pid) = Self::pmc_at(core, at).targets.last() {
                if self.detach_one(core, at, pid, false).is_err() {
                    // The descriptor is gone already; drop the stale entry.
                    self.unlink_target(core, at, pid);
                }
            }
            kassert!(
                core.rowdisp[pm.ri as usize] > 0,
                "row {} disposition {} releasing a process PMC",
                pm.ri,
                core.rowdisp[pm.ri as usize]
            );
            core.rowdisp[pm.ri as usize] -= 1;
        }
        self.forget_samples_of(&pm);
        let notifier = pm.notifier.lock().take();
        if let Some(n) = notifier {
            n.finish();
        }
        let _ = dep.release_pmc(
            if pm.mode.is_system() {
                pm.cpu
            } else {
                kpi::cpu::curcpu()
            },
            adjri,
            &pm,
        );
        core.owners[at.owner].pmcs.remove(at.pmc);
    }

    /// `pmc_remove_owner`: releases every PMC of owner `o`, then forgets
    /// the owner.
    pub(crate) fn remove_owner_at(&self, core: &mut Core, o: usize) {
        if let Some(log) = core.owners[o].log.take() {
            self.deconfigure_log(core, o, log);
        }
        while let Some(last) = core.owners[o].pmcs.len().checked_sub(1) {
            self.release_pmc(
                core,
                At {
                    owner: o,
                    pmc: last,
                },
            );
        }
        core.owners.swap_remove(o);
    }

    // ----- the log (configuration only; records come with sampling) -----

    fn op_configurelog(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let cl = copyin::<PmcOpConfigurelog>(arg)?;
        if cl.pm_flags != 0 {
            return Err(EINVAL);
        }
        let me = kpi::proc::curproc();
        let owner = match Self::owner_index(core, me) {
            Some(o) => o,
            None => {
                core.owners.try_reserve(1, Wait::WaitOk)?;
                let o = KBox::try_new(Owner::new(me, KVec::new()), Wait::WaitOk)?;
                let _ = core.owners.push_within_capacity(o);
                core.owners.len() - 1
            }
        };
        if cl.pm_logfd >= 0 {
            if core.owners[owner].log.is_some() {
                return Err(EBUSY);
            }
            let cpuid = kpi::kern_pmc::pmc_cpuid(Wait::WaitOk)?;
            let log = OwnerLog::configure(me, cl.pm_logfd, &self.logpool, &self.stats, self.ncpu)?;
            pmcdbg!(
                self.debug,
                "logging",
                "config",
                "owner={me} fd={}",
                cl.pm_logfd
            );
            kpi::proc::set_flags(me, P_HWPMC, 0);
            let (sec, nsec) = kpi::time::nanotime();
            let init = PmclogBody::Initialize {
                version: kpi::kern_pmc::pmc_module_version(),
                cpu: self.cputype.raw(),
                tsc_freq: kpi::time::tsc_freq(),
                ts: Timespec {
                    tv_sec: sec as isize,
                    tv_nsec: nsec as isize,
                },
                cpuid: &cpuid,
            };
            // INITIALIZE is written at once, as FreeBSD does.
            if let Err(e) = log.log_sync(init) {
                log.deconfigure();
                return Err(e);
            }
            for p in core.owners[owner].pmcs.iter() {
                p.pmc.set_log(Some(log.clone()));
            }
            core.owners[owner].log = Some(log);
            self.ss_set_log(core, owner);
            return Ok(());
        }
        let Some(log) = core.owners[owner].log.take() else {
            return Err(EINVAL);
        };
        self.deconfigure_log(core, owner, log);
        Ok(())
    }

    /// Closes and deconfigures an owner's log. Its running PMCs that need
    /// a log are stopped first, as PMCSTOP stops them (`pmc_stop`): the
    /// counter stops and a system sampler no longer counts for its owner.
    fn deconfigure_log(&self, core: &mut Core, owner: usize, log: KArc<OwnerLog>) {
        // A system sampler whose CPU is away stays one, without a log.
        self.ss_set_log(core, owner);
        // Stopped first, so that the one sweep below logs every sample
        // they took before CLOSELOG.
        for i in 0..core.owners[owner].pmcs.len() {
            let v = core.owners[owner].pmcs[i].pmc.vals();
            if v.state == PmcState::Running && v.flags.contains(PmcFlags::NEEDS_LOGFILE) {
                // A CPU that is away keeps its PMC running until release.
                let _ = self.stop_pmc(core, At { owner, pmc: i });
            }
        }
        self.process_all_samples();
        log.close();
        for p in core.owners[owner].pmcs.iter() {
            p.pmc.set_log(None);
        }
        log.deconfigure();
    }

    fn op_flushlog(&self, core: &mut Core) -> KResult<()> {
        let o = Self::owner_index(core, kpi::proc::curproc()).ok_or(EINVAL)?;
        self.process_all_samples();
        core.owners[o].log.as_ref().ok_or(EINVAL)?.flush()
    }

    fn op_closelog(&self, core: &mut Core) -> KResult<()> {
        let o = Self::owner_index(core, kpi::proc::curproc()).ok_or(EINVAL)?;
        if let Some(log) = &core.owners[o].log {
            log.close();
        }
        Ok(())
    }

    fn op_writelog(&self, core: &mut Core, arg: UserPtr) -> KResult<()> {
        let wl = copyin::<PmcOpWritelog>(arg)?;
        let o = Self::owner_index(core, kpi::proc::curproc()).ok_or(EINVAL)?;
        let log = core.owners[o].log.as_ref().ok_or(EINVAL)?;
        log.log(PmclogBody::Userdata {
            userdata: wl.pm_userdata,
        })
    }
}

/// The module's version is that of the tree it was built in (what its
/// load check and MODULE_VERSION use), not necessarily uapi's.
fn op_getmoduleversion(arg: UserPtr) -> KResult<()> {
    let version = kpi::kern_pmc::pmc_module_version();
    let cv = copyin::<u32>(arg)?;
    if (cv & 0xFFFF_0000) > (version & 0xFFFF_0000) {
        return Err(EPROGMISMATCH);
    }
    copyout(&version, arg)
}

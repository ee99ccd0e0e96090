//! System-wide sampling and the kernel's hooks (issue 12, item 8).
//!
//! FreeBSD's kernel calls PMC_FN_THR_CREATE_LOG, PMC_FN_THR_EXIT_LOG,
//! PMC_FN_PROC_CREATE_LOG (and PMC_FN_PROCESS_EXEC for processes without
//! PMCs) only while its `pmc_ss_count` is non-zero, and hwpmc keeps that
//! count: one per owner with a running system-wide sampling PMC. The
//! simulator calls the hooks under the same conditions, with the kernel's
//! count, so a driver that keeps its own count, or drops those hooks,
//! loses the records system samplers need to name threads and processes.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use ksim::{CpuState, FileKind, HookCall, MachineConfig, P_KPROC, P_SYSTEM};
use uapi::pmc::*;
use uapi::pmclog::{PmclogBody, records};

/// A system-wide sampling PMC of `p` on `cpu`, allocated, not started.
fn ss_pmc(s: &Sim, p: P, cpu: u32) -> PmcId {
    s.allocate(
        p,
        PmcClass::Soft,
        s.soft("CLOCK.HARD"),
        PmcMode::Ss,
        cpu,
        PmcFlags::empty(),
    )
    .unwrap()
}

/// An owner with a log (on a regular file) and a system sampler on CPU 0,
/// not started.
fn owner_with_log(s: &Sim) -> (P, i32, PmcId) {
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    let id = ss_pmc(s, p, 0);
    (p, fd, id)
}

/// A record the tests look for, with the fields that identify it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rec {
    ProcFork(u32, u32),
    ProcCreate(u32, u32, String),
    ThrCreate(u32, u32, u32, String),
    ThrExit(u32),
    SysExit(u32),
    ProcExec(u32),
}

/// The process and thread records in the log `fd` of `p` so far, in
/// order (after a FLUSHLOG).
fn process_records(s: &Sim, p: P, fd: i32) -> Vec<Rec> {
    s.flushlog(p).unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    records(&s.file(p, fd))
        .filter_map(|r| match r.expect("the log parses").body {
            PmclogBody::Procfork { oldpid, newpid } => Some(Rec::ProcFork(oldpid, newpid)),
            PmclogBody::ProcCreate { pid, flags, pcomm } => {
                Some(Rec::ProcCreate(pid, flags, text(pcomm)))
            }
            PmclogBody::ThrCreate {
                tid,
                pid,
                flags,
                tdname,
            } => Some(Rec::ThrCreate(tid, pid, flags, text(tdname))),
            PmclogBody::ThrExit { tid } => Some(Rec::ThrExit(tid)),
            PmclogBody::Sysexit { pid } => Some(Rec::SysExit(pid)),
            PmclogBody::Procexec { pid, .. } => Some(Rec::ProcExec(pid)),
            _ => None,
        })
        .collect()
}

/// The records added since `before` records were seen.
fn new_records(s: &Sim, p: P, fd: i32, before: &mut usize) -> Vec<Rec> {
    let all = process_records(s, p, fd);
    let fresh = all[*before..].to_vec();
    *before = all.len();
    fresh
}

/// The hook calls that only system-wide sampling causes.
fn log_hooks(calls: &[HookCall]) -> Vec<HookCall> {
    calls
        .iter()
        .filter(|c| {
            matches!(
                c,
                HookCall::ThrCreateLog { .. }
                    | HookCall::ThrExitLog { .. }
                    | HookCall::ProcCreateLog { .. }
                    | HookCall::ProcessExec { .. }
            )
        })
        .cloned()
        .collect()
}

#[test]
fn a_running_system_sampler_hears_of_every_thread_and_process() {
    let s = Sim::new();
    let (owner, fd, id) = owner_with_log(&s);
    s.start(owner, id).unwrap();
    let mut seen = process_records(&s, owner, fd).len();

    // A process that uses no PMCs: its fork, threads and exit.
    let other = s.spawn(ksim::Cred::user(1001), "daemon");
    let child = s.fork(other);
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [
            Rec::ProcFork(other.pid, child.pid),
            Rec::ProcCreate(child.pid, 0, "daemon".into()),
        ],
        "fork (pmc_process_fork): PROCFORK and PROC_CREATE, no THR_CREATE"
    );
    let t2 = s.m.thread_create(child.pid);
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [Rec::ThrCreate(t2, child.pid, 0, "daemon".into())],
        "thr_new: PMC_FN_THR_CREATE_LOG"
    );
    s.m.thread_set_name(t2, "worker");
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [Rec::ThrCreate(t2, child.pid, 0, "worker".into())],
        "thr_set_name: PMC_FN_THR_CREATE_LOG with the new name"
    );
    let t3 = s.m.thread_create(child.pid);
    s.m.thread_exit(t3);
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [
            Rec::ThrCreate(t3, child.pid, 0, "daemon".into()),
            Rec::ThrExit(t3)
        ],
        "thr_exit: PMC_FN_THR_EXIT_LOG"
    );
    s.m.exec(child.pid, "/usr/sbin/ntpd", None);
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [Rec::ProcExec(child.pid)],
        "exec of a process without PMCs"
    );
    // Exit: the other threads exit first, then the process_exit handlers
    // run, then the last thread goes.
    s.m.exit(child.pid);
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [
            Rec::ThrExit(t2),
            Rec::SysExit(child.pid),
            Rec::ThrExit(child.tid)
        ]
    );

    // A kernel process: another owner's log writer, made and ended by
    // CONFIGURELOG (PMC_FN_PROC_CREATE_LOG and THR_CREATE_LOG from
    // kproc_create; kproc_exit goes through exit1()).
    let other_owner = s.root();
    let fd2 = s.open(other_owner, FileKind::Regular, true);
    s.configurelog(other_owner, fd2, 0).unwrap();
    let name = format!("hwpmc: proc({})", other_owner.pid);
    let writer =
        s.m.processes()
            .into_iter()
            .find(|(_, comm)| *comm == name)
            .map(|(pid, _)| pid)
            .expect("the log writer runs");
    let wtid = s.m.proc_info(writer).unwrap().threads[0];
    let kflags = P_SYSTEM | P_KPROC;
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [
            Rec::ProcCreate(writer, kflags, name.clone()),
            Rec::ThrCreate(wtid, writer, kflags, name.clone()),
        ]
    );
    s.configurelog(other_owner, -1, 0).unwrap();
    assert_eq!(
        new_records(&s, owner, fd, &mut seen),
        [Rec::SysExit(writer), Rec::ThrExit(wtid)]
    );
    s.finish();
}

#[test]
fn the_hooks_run_only_while_a_system_sampler_runs() {
    let s = Sim::new();
    let (owner, fd, id) = owner_with_log(&s);
    let other = s.spawn(ksim::Cred::user(1001), "daemon");
    // What a process without PMCs does: threads, a new name, exec, fork,
    // exit, and a kernel process that comes and goes.
    let busy = |s: &Sim| {
        let t = s.m.thread_create(other.pid);
        s.m.thread_set_name(t, "worker");
        s.m.thread_exit(t);
        s.m.exec(other.pid, "/usr/sbin/cron", None);
        let c = s.fork(other);
        s.m.exit(c.pid);
        let q = s.root();
        let qfd = s.open(q, FileKind::Regular, true);
        s.configurelog(q, qfd, 0).unwrap();
        s.configurelog(q, -1, 0).unwrap();
    };

    s.m.trace_hooks();
    s.run(other, 1, 2);
    let calls = s.m.traced_hooks();
    assert_eq!(calls, [], "no hooks at all for a process without PMCs");
    busy(&s);
    assert_eq!(s.m.pmc_ss_count(), 0);
    let calls = s.m.traced_hooks();
    assert_eq!(log_hooks(&calls), [], "no system sampler: none of them");
    let quiet = process_records(&s, owner, fd).len();

    s.start(owner, id).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1);
    busy(&s);
    let calls = log_hooks(&s.m.traced_hooks());
    let count = |f: fn(&HookCall) -> bool| calls.iter().filter(|c| f(c)).count();
    assert_eq!(
        count(|c| matches!(c, HookCall::ThrCreateLog { .. })),
        3,
        "thr_new, thr_set_name and the kernel process's thread: {calls:?}"
    );
    assert_eq!(
        count(|c| matches!(c, HookCall::ThrExitLog { .. })),
        3,
        "thr_exit, the forked child's thread, the writer's thread: {calls:?}"
    );
    assert_eq!(count(|c| matches!(c, HookCall::ProcCreateLog { .. })), 1);
    assert_eq!(count(|c| matches!(c, HookCall::ProcessExec { .. })), 1);
    assert!(process_records(&s, owner, fd).len() > quiet);

    s.stop(owner, id).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 0);
    busy(&s);
    assert_eq!(log_hooks(&s.m.traced_hooks()), [], "stopped: none again");
    s.finish();
}

#[test]
fn pmc_ss_count_counts_owners_and_returns_to_zero() {
    let cfg = MachineConfig::default();
    let s = Sim::with(cfg, &[]);
    let a = s.root();
    let b = s.root();
    for p in [a, b] {
        let fd = s.open(p, FileKind::Regular, true);
        s.configurelog(p, fd, 0).unwrap();
    }
    let (a0, a1, b0) = (ss_pmc(&s, a, 0), ss_pmc(&s, a, 1), ss_pmc(&s, b, 2));
    assert_eq!(s.m.pmc_ss_count(), 0, "allocated, not running");

    s.start(a, a0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1);
    s.start(a, a1).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1, "one per owner, not per PMC");
    s.start(b, b0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 2);
    s.start(b, b0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 2, "starting a running PMC again");

    // Stop.
    s.stop(a, a0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 2, "a still has a1 running");
    s.stop(a, a1).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1);
    s.stop(a, a1).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1, "stopping a stopped PMC again");

    // Release of a running one.
    s.release(b, b0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 0);

    // The owner's exit.
    s.start(a, a0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1);
    s.m.exit(a.pid);
    assert_eq!(s.m.pmc_ss_count(), 0);

    // Deconfiguring the log stops system samplers (they need it); one on
    // a CPU that is away stays running, and counted, until released.
    let c = s.root();
    let fd = s.open(c, FileKind::Regular, true);
    s.configurelog(c, fd, 0).unwrap();
    let (c0, c3) = (ss_pmc(&s, c, 0), ss_pmc(&s, c, 3));
    s.start(c, c0).unwrap();
    s.start(c, c3).unwrap();
    s.m.set_cpu_state(3, CpuState::Disabled);
    s.configurelog(c, -1, 0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1, "c3's CPU is away: still running");
    s.release(c, c3).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 0);
    s.m.set_cpu_state(3, CpuState::Online);

    // Unload with a system sampler running.
    let d = s.root();
    let fd = s.open(d, FileKind::Regular, true);
    s.configurelog(d, fd, 0).unwrap();
    let d0 = ss_pmc(&s, d, 0);
    s.start(d, d0).unwrap();
    assert_eq!(s.m.pmc_ss_count(), 1);
    let m = s.m.clone();
    s.finish();
    assert_eq!(m.pmc_ss_count(), 0, "unload");
}

#[test]
fn thread_exit_of_a_target_frees_nothing_and_the_free_list_follows_its_sysctls() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.spawn(ksim::Cred::root(), "target");
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let id = s
        .allocate(
            owner,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Ts,
            PMC_CPU_ANY,
            PmcFlags::empty(),
        )
        .unwrap();
    s.attach(owner, id, target.pid as i32).unwrap();
    let entries = || s.m.sysctl_get("kern.hwpmc.threadfreelist_entries");
    assert_eq!(entries(), Some(0));
    assert_eq!(s.m.sysctl_get("kern.hwpmc.threadfreelist_max"), Some(128));

    // Three threads come and go: thread_exit() reports each with the
    // process's spin lock held (a critical section to the witness), and
    // the descriptors go to the free list; new threads take them back.
    let threads: Vec<u32> = (0..3).map(|_| s.m.thread_create(target.pid)).collect();
    for &t in &threads {
        s.m.thread_exit(t);
    }
    assert_eq!(entries(), Some(3));
    assert_eq!(s.module().driver().thread_freelist_entries(), 3);
    let t = s.m.thread_create(target.pid);
    assert_eq!(entries(), Some(2), "reused");

    // The maximum is writable; the rest is freed at the next system call.
    s.m.sysctl_set("kern.hwpmc.threadfreelist_max", 1);
    let _ = s.stats(owner);
    assert_eq!(entries(), Some(1));
    // The count is read-only.
    assert_eq!(
        s.m.sysctl_write("kern.hwpmc.threadfreelist_entries", 5),
        Err(EPERM.get())
    );

    // Detaching puts the process's descriptors on the list too.
    s.m.thread_exit(t);
    assert_eq!(entries(), Some(2), "past the maximum until the next trim");
    s.m.sysctl_set("kern.hwpmc.threadfreelist_max", 128);
    s.detach(owner, id, target.pid as i32).unwrap();
    assert_eq!(entries(), Some(3), "and the main thread's");
    assert_eq!(s.m.violations(), []);
    s.finish();
}

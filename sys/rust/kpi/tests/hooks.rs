//! When the simulated kernel calls the PMC hook: under the conditions of
//! FreeBSD's sys/kern (kern_thr.c, kern_thread.c, kern_exec.c,
//! kern_kthread.c, sched_ule.c), with the kernel's own `pmc_ss_count`.
//! A hook that records its calls stands in for the driver.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::sync::{Arc, Mutex};

use kpi::hooks::{Hook, ThreadInfo};
use kpi::malloc::Wait;
use ksim::{Cred, Machine, MachineConfig};

/// What the recording hook keeps of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    CswIn,
    CswOut,
    Exec,
    ThrCreate(u32, String),
    ThrExit(u32),
    ThrCreateLog(u32, String),
    ThrExitLog(u32),
    ProcCreateLog(u32, String),
}

fn name(t: &ThreadInfo) -> String {
    String::from_utf8_lossy(t.name.as_bytes()).into_owned()
}

/// A machine with the recording hook installed.
fn machine() -> (Machine, Arc<Mutex<Vec<Call>>>) {
    let m = Machine::new(MachineConfig::default());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (_, tid) = m.spawn(Cred::root(), "kldload");
    let rec = calls.clone();
    m.in_thread(tid, || {
        let hook = kpi::kbox_dyn!(
            move |h: &Hook| {
                let c = match *h {
                    Hook::CswIn => Call::CswIn,
                    Hook::CswOut => Call::CswOut,
                    Hook::ProcessExec { .. } => Call::Exec,
                    Hook::ThrCreate { thread } => Call::ThrCreate(thread.tid, name(&thread)),
                    Hook::ThrExit { tid } => Call::ThrExit(tid),
                    Hook::ThrCreateLog { thread } => Call::ThrCreateLog(thread.tid, name(&thread)),
                    Hook::ThrExitLog { tid } => Call::ThrExitLog(tid),
                    Hook::ProcCreateLog { pid, comm, .. } => Call::ProcCreateLog(
                        pid,
                        String::from_utf8_lossy(comm.as_bytes()).into_owned(),
                    ),
                    _ => return,
                };
                rec.lock().unwrap().push(c);
            },
            Wait::WaitOk,
            dyn Fn(&Hook) + Send + Sync
        )
        .unwrap();
        kpi::hooks::set_pmc_hook(Some(hook)).unwrap();
    });
    (m, calls)
}

fn take(calls: &Arc<Mutex<Vec<Call>>>) -> Vec<Call> {
    std::mem::take(&mut *calls.lock().unwrap())
}

/// What a process does: a thread comes, is renamed and goes; an exec; a
/// time slice; a second thread; the exit. Returns (pid, main thread,
/// second thread).
fn life(m: &Machine, pid: u32, main: u32) -> (u32, u32) {
    let t = m.thread_create(pid);
    m.thread_set_name(t, "worker");
    m.thread_exit(t);
    m.exec(pid, "/bin/sh", None);
    m.run(main, 0, 1);
    let t2 = m.thread_create(pid);
    m.exit(pid);
    (t, t2)
}

#[test]
fn a_process_without_pmcs_and_no_system_sampling_calls_no_hook() {
    let (m, calls) = machine();
    let _e = m.enter();
    let (pid, main) = m.spawn(Cred::user(1001), "sh");
    life(&m, pid, main);
    m.fork(1);
    assert_eq!(take(&calls), []);
}

#[test]
fn with_system_sampling_the_log_hooks_are_called() {
    let (m, calls) = machine();
    let _e = m.enter();
    let (_, k) = m.spawn(Cred::root(), "k");
    m.in_thread(k, || kpi::kern_pmc::pmc_ss_count_add(1));
    assert_eq!(m.pmc_ss_count(), 1);
    let (pid, main) = m.spawn(Cred::user(1001), "sh");
    let (t, t2) = life(&m, pid, main);
    assert_eq!(
        take(&calls),
        [
            Call::ThrCreateLog(t, "sh".into()),
            Call::ThrCreateLog(t, "worker".into()),
            Call::ThrExitLog(t),
            Call::Exec,
            Call::ThrCreateLog(t2, "sh".into()),
            Call::ThrExitLog(t2),
            Call::ThrExitLog(main),
        ]
    );
    // A kernel process: kproc_create and, once stopped, its exit.
    let kp = m.in_thread(k, || {
        kpi::kproc::kproc_create(
            "kworker",
            kpi::kbox_dyn!(|| {}, Wait::WaitOk, dyn Fn() + Send + Sync).unwrap(),
        )
        .unwrap()
    });
    let kpid = kp.pid().unwrap();
    let ktid = m.proc_info(kpid).unwrap().threads[0];
    m.in_thread(k, || kp.stop());
    assert_eq!(
        take(&calls),
        [
            Call::ProcCreateLog(kpid, "kworker".into()),
            Call::ThrCreateLog(ktid, "kworker".into()),
            Call::ThrExitLog(ktid),
        ]
    );
    m.in_thread(k, || kpi::kern_pmc::pmc_ss_count_add(-1));
    let (pid, main) = m.spawn(Cred::user(1001), "sh");
    life(&m, pid, main);
    assert_eq!(take(&calls), [], "the count is back to zero");
}

#[test]
fn a_process_using_pmcs_gets_the_thread_and_context_switch_hooks() {
    let (m, calls) = machine();
    let _e = m.enter();
    let (pid, main) = m.spawn(Cred::user(1001), "sh");
    m.in_thread(main, || kpi::proc::set_flags(pid, kpi::proc::P_HWPMC, 0));
    take(&calls);
    let (t, t2) = life(&m, pid, main);
    assert_eq!(
        take(&calls),
        [
            Call::ThrCreate(t, "sh".into()),
            // thr_set_name: PMC_PROC_IS_USING_PMCS || system sampling.
            Call::ThrCreateLog(t, "worker".into()),
            Call::ThrExit(t),
            Call::Exec,
            Call::CswIn,
            Call::CswOut,
            Call::ThrCreate(t2, "sh".into()),
            Call::ThrExit(t2),
            Call::ThrExit(main),
        ]
    );
}

//! hwt(4)'s life cycles on the simulated machine: the scheduler's hooks,
//! pause-on-exec/mmap and WAKEUP, waiting for records, signals, owner
//! exit and module unload, allocation failures.

// Host test code: the kernel crates' allocation lints (sys/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use hwt::BufId;
use ksim::{Cred, P2_HWT};
use uapi::hwt::*;

const SIGINT: i32 = 2;

#[test]
fn the_hooks_program_the_unit_only_while_running() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let bystander = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    assert_ne!(s.m.proc_flag2(target.pid) & P2_HWT, 0);
    assert_eq!(s.m.proc_flag2(bystander.pid) & P2_HWT, 0);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    s.take_calls();
    // Stopped: nothing.
    s.m.switch_in(0, target.tid);
    s.m.switch_out(0);
    assert_eq!(s.take_calls(), vec![]);
    s.simple(owner, &fd, HWT_IOC_START).unwrap();
    s.take_calls();
    s.m.switch_in(1, target.tid);
    s.m.switch_out(1);
    s.m.switch_in(0, bystander.tid);
    s.m.switch_out(0);
    assert_eq!(
        s.take_calls(),
        vec![
            Call::Configure {
                cpu: 1,
                buf: BufId::Thread(0),
                curcpu: 1,
                config: None
            },
            Call::Enable { cpu: 1, curcpu: 1 },
            Call::Disable { cpu: 1, curcpu: 1 },
        ]
    );
    // STOP while the thread runs: the unit stops at its switch-out, and
    // it is not enabled again.
    s.m.switch_in(0, target.tid);
    s.take_calls();
    s.simple(owner, &fd, HWT_IOC_STOP).unwrap();
    s.m.switch_out(0);
    s.m.switch_in(0, target.tid);
    s.m.switch_out(0);
    assert_eq!(
        s.take_calls(),
        vec![Call::Stop { ident }, Call::Disable { cpu: 0, curcpu: 0 }]
    );
    s.unload_clean();
}

#[test]
fn an_exiting_thread_stops_its_unit_once() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let t2 = s.m.thread_create(target.pid);
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    // Both threads got buffers at ALLOC.
    let devs = s.m.dev_names();
    assert!(
        devs.contains(&format!("hwt_{ident}_{}_1", target.pid)),
        "{devs:?}"
    );
    s.simple(owner, &fd, HWT_IOC_START).unwrap();
    s.m.switch_in(1, t2);
    s.take_calls();
    s.m.thread_exit(t2);
    assert_eq!(s.take_calls(), vec![Call::Disable { cpu: 1, curcpu: 1 }]);
    // The target exits; its context stays until the owner goes.
    s.m.exit(target.pid);
    assert_eq!(s.module.as_ref().unwrap().contexts(), 1);
    let recs = s.records(owner, &fd, 8, false).unwrap();
    assert_eq!(recs.iter().filter(|r| r.record_type == 4).count(), 2);
    s.m.exit(owner.pid);
    assert_eq!(s.module.as_ref().unwrap().contexts(), 0);
    let calls = s.take_calls();
    assert!(calls.contains(&Call::Deinit { ident }), "{calls:?}");
    assert!(
        calls.contains(&Call::ThreadFree { thread_id: 1 }),
        "{calls:?}"
    );
    s.unload_clean();
}

#[test]
fn owner_exit_tears_everything_down() {
    let s = Sim::new();
    let owner = s.root();
    let targets: Vec<P> = (0..3).map(|_| s.root()).collect();
    let fd = s.open(owner, "/dev/hwt");
    for t in &targets {
        s.alloc_raw(owner, &fd, &AllocArgs::thread(t.pid)).unwrap();
    }
    s.alloc_raw(owner, &fd, &AllocArgs::cpu(&[0, 1])).unwrap();
    assert_eq!(s.module.as_ref().unwrap().contexts(), 4);
    let live = s.m.kmem_live();
    s.m.exit(owner.pid);
    assert_eq!(s.module.as_ref().unwrap().contexts(), 0);
    assert_eq!(s.m.dev_names(), vec!["hwt".to_string()]);
    for t in &targets {
        assert_eq!(s.m.proc_flag2(t.pid) & P2_HWT, 0);
    }
    assert!(s.m.kmem_live().0 < live.0);
    // The idents are free again.
    let owner2 = s.root();
    let fd2 = s.open(owner2, "/dev/hwt");
    assert_eq!(
        s.alloc_raw(owner2, &fd2, &AllocArgs::thread(targets[0].pid)),
        Ok(0)
    );
    s.unload_clean();
}

#[test]
fn unloading_tears_down_contexts_whose_owners_live() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, "/dev/hwt");
    s.alloc_raw(owner, &fd, &AllocArgs::cpu(&[1])).unwrap();
    // unload_clean checks: no device, no memory left, witness clean.
    s.unload_clean();
}

/// Runs `pieces` under several seeds of the race scheduler.
fn seeds() -> impl Iterator<Item = u64> {
    0..12
}

#[test]
fn pause_on_mmap_holds_the_thread_until_wakeup() {
    for seed in seeds() {
        let s = Sim::new();
        let owner = s.root();
        let target = s.root();
        let (_, ident) = s.alloc_thread(owner, target.pid);
        let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
        s.set_config(owner, &fd, true, None, 0).unwrap();
        let mapped = Arc::new(AtomicBool::new(false));
        let (m1, m2) = (s.m.clone(), s.io());
        let (flag1, flag2) = (mapped.clone(), mapped.clone());
        let fd2 = fd.clone();
        s.m.race(
            seed,
            vec![
                Box::new(move || {
                    m1.mmap(target.pid, "/lib/libtwo.so", 0x9000_0000, 0x4000);
                    flag1.store(true, Ordering::SeqCst);
                }),
                Box::new(move || {
                    let r = m2.wait_for(owner, &fd2, 0);
                    assert_eq!(r.path, "/lib/libtwo.so");
                    assert!(
                        !flag2.load(Ordering::SeqCst),
                        "the thread went on before WAKEUP"
                    );
                    m2.simple(owner, &fd2, HWT_IOC_WAKEUP).unwrap();
                }),
            ],
        );
        assert!(mapped.load(Ordering::SeqCst), "seed {seed}");
        assert_eq!(ksim::sched::sleepers(), vec![]);
        s.unload_clean();
    }
}

#[test]
fn pause_on_exec_ends_with_a_signal_or_the_owners_exit() {
    for seed in seeds() {
        for by_signal in [true, false] {
            let s = Sim::new();
            let owner = s.root();
            let target = s.root();
            let (_, ident) = s.alloc_thread(owner, target.pid);
            let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
            s.set_config(owner, &fd, true, None, 0).unwrap();
            let (m1, m2) = (s.m.clone(), s.io());
            let done = Arc::new(AtomicBool::new(false));
            let d1 = done.clone();
            let fd2 = fd.clone();
            s.m.race(
                seed,
                vec![
                    Box::new(move || {
                        m1.exec(target.pid, "/usr/bin/traced", None);
                        d1.store(true, Ordering::SeqCst);
                    }),
                    Box::new(move || {
                        let r = m2.wait_for(owner, &fd2, 2);
                        assert_eq!(r.path, "/usr/bin/traced");
                        if by_signal {
                            m2.m.kill(target.pid, SIGINT);
                        } else {
                            m2.m.exit(owner.pid);
                        }
                    }),
                ],
            );
            assert!(
                done.load(Ordering::SeqCst),
                "seed {seed} signal {by_signal}"
            );
            s.unload_clean();
        }
    }
}

#[test]
fn a_wakeup_before_the_pause_is_not_lost() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    s.set_config(owner, &fd, true, None, 0).unwrap();
    // The tool wakes the thread before it reaches the pause (outside a
    // race, a pause that waited would panic: nothing could wake it).
    s.simple(owner, &fd, HWT_IOC_WAKEUP).unwrap();
    s.m.mmap(target.pid, "/lib/libthree.so", 0xa000_0000, 0x1000);
    // Without pause_on_mmap there is no pause at all.
    s.set_config(owner, &fd, false, None, 0).unwrap();
    s.m.mmap(target.pid, "/lib/libfour.so", 0xb000_0000, 0x1000);
    let recs = s.records(owner, &fd, 8, false).unwrap();
    assert_eq!(recs.iter().filter(|r| r.record_type == 0).count(), 2);
    s.unload_clean();
}

#[test]
fn record_get_waits_for_a_record_or_a_signal() {
    for seed in seeds() {
        let s = Sim::new();
        let owner = s.root();
        let target = s.root();
        let (_, ident) = s.alloc_thread(owner, target.pid);
        let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
        s.records(owner, &fd, 8, false).unwrap();
        let (m1, io) = (s.m.clone(), s.io());
        let fd2 = fd.clone();
        s.m.race(
            seed,
            vec![
                Box::new(move || {
                    m1.munmap(target.pid, 0x5000, 0x1000);
                }),
                Box::new(move || {
                    let recs = io.records(owner, &fd2, 8, true).unwrap();
                    assert_eq!(recs.len(), 1);
                    assert_eq!((recs[0].record_type, recs[0].addr), (1, 0x5000));
                }),
            ],
        );
        // A signal ends the wait with nothing read.
        let (m1, io) = (s.m.clone(), s.io());
        let fd2 = fd.clone();
        s.m.race(
            seed,
            vec![
                Box::new(move || {
                    // Let the tool reach its sleep first, whatever the seed.
                    while ksim::sched::sleepers().is_empty() {
                        kpi::cpu::spinwait();
                    }
                    m1.kill(owner.pid, SIGINT);
                }),
                Box::new(move || {
                    assert_eq!(io.records(owner, &fd2, 8, true).unwrap(), vec![]);
                }),
            ],
        );
        s.unload_clean();
    }
}

/// An unload tears the contexts down; a thread of a living owner that
/// waits in RECORD_GET is woken and returns with nothing, instead of the
/// teardown waiting for its reference for ever.
#[test]
fn unloading_ends_a_record_get_that_waits() {
    // The failure this guards against is a teardown that spins for ever:
    // a watchdog turns it into a failure with a message.
    let finished = Arc::new(AtomicBool::new(false));
    let watched = finished.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(300));
        if !watched.load(Ordering::SeqCst) {
            eprintln!("unloading_ends_a_record_get_that_waits: the unload never ended");
            std::process::abort();
        }
    });
    for seed in seeds() {
        let mut s = Sim::new();
        let owner = s.root();
        let target = s.root();
        let (_, ident) = s.alloc_thread(owner, target.pid);
        let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
        s.records(owner, &fd, 8, false).unwrap();
        let (_, kld) = s.m.spawn(Cred::root(), "kldunload");
        let (tag, module) = (s.tag.take(), s.module.take());
        let (m1, io) = (s.m.clone(), s.io());
        s.m.race(
            seed,
            vec![
                Box::new(move || {
                    // The tool is asleep in RECORD_GET first, whatever
                    // the seed.
                    while ksim::sched::sleepers().is_empty() {
                        kpi::cpu::spinwait();
                    }
                    m1.in_thread(kld, || {
                        drop(tag);
                        drop(module);
                    });
                }),
                Box::new(move || {
                    assert_eq!(io.records(owner, &fd, 8, true), Ok(vec![]));
                }),
            ],
        );
        assert_eq!(ksim::sched::sleepers(), vec![], "seed {seed}");
        s.assert_unloaded_clean();
    }
    finished.store(true, Ordering::SeqCst);
}

#[test]
fn a_lonely_wait_is_reported_not_hung() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    s.records(owner, &fd, 8, false).unwrap();
    let io = s.io();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.m.race(
            1,
            vec![Box::new(move || {
                let _ = io.records(owner, &fd, 8, true);
            })],
        );
    }));
    let msg = r.expect_err("a sleep nothing can end");
    let text = msg
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| msg.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        text.contains("deadlock") && text.contains("recsnd"),
        "{text}"
    );
}

#[test]
fn allocation_failures_leave_nothing_behind() {
    let s = Sim::new();
    let target = s.root();
    // A first round grows the tables of owners and traced processes,
    // which keep their room.
    let warm = s.root();
    let fd = s.open(warm, "/dev/hwt");
    s.alloc_raw(warm, &fd, &AllocArgs::thread(target.pid))
        .unwrap();
    s.alloc_raw(warm, &fd, &AllocArgs::cpu(&[0, 1])).unwrap();
    s.m.exit(warm.pid);
    let baseline = s.m.kmem_live();
    let mut failures = 0;
    for n in 1..200 {
        let owner = s.spawn(Cred::root(), "tool");
        let fd = s.open(owner, "/dev/hwt");
        s.m.fail_alloc_in(n);
        let thread = s.alloc_raw(owner, &fd, &AllocArgs::thread(target.pid));
        let cpu = s.alloc_raw(owner, &fd, &AllocArgs::cpu(&[0, 1]));
        s.m.clear_alloc_failure();
        for r in [&thread, &cpu] {
            match r {
                Ok(_) => {}
                Err(e) => {
                    failures += 1;
                    assert!(*e == ENOMEM || *e == EEXIST, "n={n}: {e}");
                }
            }
        }
        s.m.exit(owner.pid);
        assert_eq!(s.module.as_ref().unwrap().contexts(), 0);
        assert_eq!(s.m.dev_names(), vec!["hwt".to_string()], "n={n}");
        assert_eq!(s.m.kmem_live(), baseline, "n={n}");
        assert_eq!(s.m.proc_flag2(target.pid) & P2_HWT, 0, "n={n}");
        if thread.is_ok() && cpu.is_ok() && n > 150 {
            break;
        }
    }
    assert!(failures > 20, "the injector hit ALLOC {failures} times");
    s.unload_clean();
}

#[test]
fn teardown_stops_the_unit_of_a_thread_on_a_cpu() {
    use hwt::BackendOps;
    // A backend without a stop operation: the framework disables the
    // unit of the CPU the thread runs on, there.
    let s = Sim::with(ksim::MachineConfig::default(), BackendOps::THREAD_DATA);
    let owner = s.root();
    let target = s.root();
    let (_, ident) = s.alloc_thread(owner, target.pid);
    let fd = s.open(owner, &format!("/dev/hwt_{ident}_{}", target.pid));
    s.simple(owner, &fd, HWT_IOC_START).unwrap();
    s.m.switch_in(1, target.tid);
    s.take_calls();
    s.m.exit(owner.pid);
    let calls = s.take_calls();
    assert_eq!(calls[0], Call::Disable { cpu: 1, curcpu: 1 }, "{calls:?}");
    assert!(calls.contains(&Call::Deinit { ident }), "{calls:?}");
    // The thread's switch-out then finds nothing to stop.
    s.m.switch_out(1);
    assert_eq!(s.take_calls(), vec![]);
    s.unload_clean();
}

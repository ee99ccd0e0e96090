//! Overflow notification (hwpmc(4) NOTIFICATIONS): the extension
//! operations and their errors, notification every N samples or log
//! bytes of hardware sampling PMCs on real programs, the refresh count
//! stopping a PMC at exactly its Nth overflow, signals to the asking
//! thread, system-mode PMCs on every CPU at once, and an owner that never
//! reads. Every machine ends with the witness clean and no kernel memory
//! left.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::x86::*;
use common::*;
use ksim::NotifyRead;
use uapi::pmc::*;
use uapi::pmclog::PmclogBody;
use uapi::{AsBytes, Plain};

/// FreeBSD's SIGUSR1 and first realtime signal.
const SIGUSR1: i32 = 30;
const SIGRTMIN: i32 = 65;

/// A notification request.
fn notify_request(pmc: PmcId, flags: u32, count: u32, refresh: u32, signo: i32) -> PmcOpNotify {
    PmcOpNotify {
        pm_pmcid: pmc,
        pm_flags: flags,
        pm_count: count,
        pm_refresh: refresh,
        pm_signo: signo,
        pm_fd: -1,
        pm_spare: [0; 2],
    }
}

/// PMC_OP_EXT_NOTIFY with `req`: the descriptor.
fn notify_raw(s: &Sim, p: P, req: PmcOpNotify) -> Result<i32, Errno> {
    let mut b = req.as_bytes().to_vec();
    s.call_bytes(p, PMC_OP_EXT_NOTIFY, &mut b)?;
    Ok(PmcOpNotify::read_from(&b).expect("sized").pm_fd)
}

fn notify(s: &Sim, p: P, pmc: PmcId, flags: u32, count: u32, refresh: u32, signo: i32) -> i32 {
    notify_raw(s, p, notify_request(pmc, flags, count, refresh, signo)).expect("notify")
}

/// Reads the pending record of notification descriptor `fd` of `p`.
fn read_record(s: &Sim, p: P, fd: i32) -> Option<PmcNotification> {
    match s
        .m
        .notify_read(p.pid, fd)
        .expect("a notification descriptor")
    {
        NotifyRead::Record(r) => Some(PmcNotification::read_from(&r).expect("a whole record")),
        NotifyRead::Empty | NotifyRead::End => None,
    }
}

/// An IAP sampling PMC of retired instructions in user mode.
fn instruction_sampler(s: &Sim, owner: P, mode: PmcMode, cpu: u32, period: u64) -> PmcId {
    let mut a = request(
        PmcClass::Iap,
        mode,
        0xC0 | USR | INT,
        PmcCaps::USER | PmcCaps::INTERRUPT,
        period,
    );
    a.pm_cpu = cpu;
    allocate(s, owner, a).expect("IAP sampling")
}

/// A log of the owner's on a regular file: its descriptor.
fn with_log(s: &Sim, owner: P) -> i32 {
    let fd = s.open(owner, ksim::FileKind::Regular, true);
    s.configurelog(owner, fd, 0).expect("log");
    fd
}

/// The CALLCHAIN records of PMC `id` in a log, and their bytes.
fn logged_samples(log: &[u8], id: PmcId) -> (u64, u64) {
    let mut n = 0;
    let mut bytes = 0;
    let mut rest = log;
    while !rest.is_empty() {
        let (rec, len) = uapi::pmclog::decode(rest).expect("a well-formed log");
        if matches!(rec.body, PmclogBody::Callchain { pmcid, .. } if pmcid == id) {
            n += 1;
            bytes += len as u64;
        }
        rest = &rest[len..];
    }
    (n, bytes)
}

#[test]
fn the_extension_operations_and_their_errors() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let mut caps = PmcOpExtcaps::default().as_bytes().to_vec();
    s.call_bytes(owner, PMC_OP_EXT_GETCAPS, &mut caps)
        .expect("GETCAPS");
    let caps = PmcOpExtcaps::read_from(&caps).unwrap();
    assert_eq!(caps.pm_version, PMC_EXT_VERSION);
    assert_eq!(caps.pm_caps & PMC_EXTCAP_NOTIFY, PMC_EXTCAP_NOTIFY);
    // The range holds nothing else.
    let mut b = [0u8; 32];
    for op in [
        PMC_OP_EXT_BASE + 2,
        PMC_OP_EXT_BASE + 0xffff,
        PMC_OP_EXT_BASE - 1,
    ] {
        assert_eq!(s.call_bytes(owner, op, &mut b), Err(EINVAL), "op {op:#x}");
    }

    // A process that owns nothing.
    let other = s.root();
    assert_eq!(
        notify_raw(&s, other, notify_request(0, 0, 1, 0, 0)),
        Err(ESRCH)
    );
    with_log(&s, owner);
    let sampler = instruction_sampler(&s, owner, PmcMode::Ts, PMC_CPU_ANY, 10_000);
    let counter = user_counter(&s, owner, PmcClass::Iap, 0xC0, "counter");
    let good = notify_request(sampler, 0, 1, 0, SIGUSR1);
    let bad = [
        PmcOpNotify {
            pm_flags: 0x2,
            ..good
        },
        PmcOpNotify {
            pm_spare: [0, 1],
            ..good
        },
        PmcOpNotify {
            pm_count: 0,
            ..good
        },
        PmcOpNotify {
            pm_signo: -1,
            ..good
        },
        PmcOpNotify {
            pm_signo: 129,
            ..good
        },
        PmcOpNotify {
            pm_signo: 9,
            ..good
        },
        PmcOpNotify {
            pm_signo: 17,
            ..good
        },
        // Counting PMCs have no overflows to tell of.
        PmcOpNotify {
            pm_pmcid: counter,
            ..good
        },
        // Not a PMC of the owner's.
        PmcOpNotify {
            pm_pmcid: sampler ^ 0x100,
            ..good
        },
    ];
    for req in bad {
        assert_eq!(notify_raw(&s, owner, req), Err(EINVAL), "{req:?}");
    }
    assert_eq!(
        s.m.syscall(
            owner.tid,
            s.sysnum,
            &[u64::from(PMC_OP_EXT_NOTIFY), 0xdead_0000]
        ),
        Err(EFAULT.get())
    );
    let fd = notify_raw(&s, owner, good).expect("notify");
    assert!(fd >= 3, "a descriptor of the owner's: {fd}");
    assert_eq!(notify_raw(&s, owner, good), Err(EBUSY));
    // Nothing happened yet: nothing to read, and no end.
    assert_eq!(s.m.notify_read(owner.pid, fd), Some(NotifyRead::Empty));
    // Release ends it: a last record says so, then end of file.
    s.release(owner, sampler).expect("release");
    let last = read_record(&s, owner, fd).expect("the end's record");
    assert_eq!(last.pn_flags, PMC_NOTIFICATION_END);
    assert_eq!(last.pn_notifications, 0);
    assert_eq!(s.m.notify_read(owner.pid, fd), Some(NotifyRead::End));
    assert!(s.m.take_thread_signals().is_empty());
    s.finish();
}

#[test]
fn a_signal_every_n_samples_to_the_thread_that_asked() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let (prog, seen) = exec(&s, "sort", &["sort", "2"]);
    let log = with_log(&s, owner);
    let period = 5_000;
    let every = 3;
    let id = instruction_sampler(&s, owner, PmcMode::Ts, PMC_CPU_ANY, period);
    let fd = notify(&s, owner, id, 0, every, 0, SIGRTMIN);
    follow(&s, owner, &[id], prog.pid);
    run_to_exit(&s, prog, 0);
    let samples = seen.counts.lock().unwrap().instructions / period;
    assert!(samples >= 10, "{samples} samples: a longer run is needed");
    s.flushlog(owner).expect("flush");
    let (logged, _) = logged_samples(&s.file(owner, log), id);
    assert_eq!(logged, samples, "every overflow's sample is logged");
    // The last notification's record has the counts of its moment; the
    // release's end record has them all.
    let rec = read_record(&s, owner, fd).expect("a record");
    let made = samples / u64::from(every);
    assert_eq!(rec.pn_pmcid, id);
    assert_eq!(rec.pn_notifications, made);
    assert!((made * u64::from(every)..=samples).contains(&rec.pn_samples));
    assert_eq!(rec.pn_dropped, 0);
    assert_eq!(rec.pn_flags, 0);
    s.release(owner, id).expect("release");
    let end = read_record(&s, owner, fd).expect("the end's record");
    assert_eq!(end.pn_flags, PMC_NOTIFICATION_END);
    assert_eq!((end.pn_samples, end.pn_notifications), (samples, made));
    let signals = s.m.take_thread_signals();
    assert_eq!(signals.len() as u64, samples / u64::from(every));
    for sig in signals {
        assert_eq!((sig.pid, sig.tid), (owner.pid, owner.tid));
        assert_eq!(sig.sig, SIGRTMIN);
        assert_eq!(sig.value as u32, id);
    }
    s.finish();
}

#[test]
fn a_refresh_count_stops_the_pmc_at_exactly_its_last_overflow() {
    for refresh in [1, 7] {
        let s = sim(SKYLAKE);
        let owner = s.root();
        let (prog, seen) = exec(&s, "sort", &["sort", "2"]);
        let log = with_log(&s, owner);
        let period = 5_000;
        let id = instruction_sampler(&s, owner, PmcMode::Ts, PMC_CPU_ANY, period);
        let fd = notify(&s, owner, id, 0, 1, refresh, SIGUSR1);
        follow(&s, owner, &[id], prog.pid);
        run_to_exit(&s, prog, 0);
        let could = seen.counts.lock().unwrap().instructions / period;
        assert!(
            could > u64::from(refresh) * 3,
            "the run overflows {could} times"
        );
        s.flushlog(owner).expect("flush");
        let (logged, _) = logged_samples(&s.file(owner, log), id);
        assert_eq!(logged, u64::from(refresh), "samples logged");
        let rec = read_record(&s, owner, fd).expect("the end's record");
        assert_eq!(rec.pn_samples, u64::from(refresh));
        assert_eq!(rec.pn_notifications, u64::from(refresh));
        assert_eq!(rec.pn_flags, PMC_NOTIFICATION_END);
        assert_eq!(s.m.notify_read(owner.pid, fd), Some(NotifyRead::End));
        assert_eq!(s.m.take_thread_signals().len() as u32, refresh);
        // The PMC stays allocated; its release changes nothing more.
        s.release(owner, id).expect("release");
        assert_eq!(s.m.notify_read(owner.pid, fd), Some(NotifyRead::End));
        assert!(s.m.take_thread_signals().is_empty());
        s.finish();
    }
}

#[test]
fn log_bytes_are_counted_with_pmc_notify_bytes() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let (prog, _) = exec(&s, "sort", &["sort", "2"]);
    let log = with_log(&s, owner);
    let id = instruction_sampler(&s, owner, PmcMode::Ts, PMC_CPU_ANY, 5_000);
    let every = 100;
    let fd = notify(&s, owner, id, PMC_NOTIFY_BYTES, every, 0, 0);
    follow(&s, owner, &[id], prog.pid);
    run_to_exit(&s, prog, 0);
    s.flushlog(owner).expect("flush");
    let (logged, bytes) = logged_samples(&s.file(owner, log), id);
    assert!(bytes > u64::from(every) * 3, "{bytes} bytes logged");
    s.release(owner, id).expect("release");
    let end = read_record(&s, owner, fd).expect("the end's record");
    assert_eq!(end.pn_flags, PMC_NOTIFICATION_END);
    assert_eq!(end.pn_samples, logged);
    assert_eq!(end.pn_notifications, bytes / u64::from(every));
    assert!(s.m.take_thread_signals().is_empty(), "no signal asked for");
    s.finish();
}

#[test]
fn system_pmcs_on_every_cpu_notify_at_once_with_their_own_counts() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    with_log(&s, owner);
    let ncpu = 4;
    let period = 4_000;
    let progs: Vec<_> = (0..ncpu)
        .map(|_| exec(&s, "sort", &["sort", "2"]))
        .collect();
    let pmcs: Vec<(PmcId, i32)> = (0..ncpu)
        .map(|cpu| {
            let id = instruction_sampler(&s, owner, PmcMode::Ss, cpu, period);
            let fd = notify(&s, owner, id, 0, 2, 0, 0);
            s.start(owner, id).expect("start");
            (id, fd)
        })
        .collect();
    // Each program on its own CPU, in turns, so that every CPU samples.
    let mut running = true;
    while running {
        running = false;
        for (cpu, (p, _)) in progs.iter().enumerate() {
            if s.m.proc_info(p.pid).is_some_and(|i| !i.zombie) {
                s.run(*p, cpu as u32, 10);
                running = true;
            }
        }
    }
    for (cpu, &(id, fd)) in pmcs.iter().enumerate() {
        let retired = progs[cpu].1.counts.lock().unwrap().instructions;
        // The CPU's program and nothing else ran there in user mode.
        let samples = retired / period;
        // The last notification's record: its counts as they were then.
        let rec = read_record(&s, owner, fd).expect("a record");
        assert_eq!(rec.pn_pmcid, id);
        assert_eq!(rec.pn_cpu, cpu as u32, "the PMC's own CPU");
        assert_eq!(rec.pn_notifications, samples / 2, "CPU {cpu}");
        assert_eq!(rec.pn_samples, samples / 2 * 2, "CPU {cpu}");
        // The release's end record: every sample.
        s.release(owner, id).expect("release");
        let end = read_record(&s, owner, fd).expect("the end's record");
        assert_eq!(end.pn_flags, PMC_NOTIFICATION_END);
        assert_eq!(end.pn_samples, samples, "CPU {cpu}");
        assert_eq!(end.pn_notifications, samples / 2, "CPU {cpu}");
    }
    s.finish();
}

#[test]
fn an_owner_that_never_reads_costs_no_memory_and_takes_nothing_from_others() {
    let s = sim(SKYLAKE);
    let lazy = s.root();
    let reader = s.root();
    with_log(&s, lazy);
    let log = with_log(&s, reader);
    // Two programs (a process has one PMC a row), on CPUs of their own.
    let (lazy_prog, _) = exec(&s, "sort", &["sort", "3"]);
    let (prog, seen) = exec(&s, "sort", &["sort", "3"]);
    let period = 2_000;
    let ignored = instruction_sampler(&s, lazy, PmcMode::Ts, PMC_CPU_ANY, period);
    let fd_ignored = notify(&s, lazy, ignored, 0, 1, 0, 0);
    let watched = instruction_sampler(&s, reader, PmcMode::Ts, PMC_CPU_ANY, period);
    let fd = notify(&s, reader, watched, 0, 1, 0, 0);
    follow(&s, lazy, &[ignored], lazy_prog.pid);
    follow(&s, reader, &[watched], prog.pid);
    let mut memory = None;
    let mut unread_rounds = 0;
    let mut reads = 0;
    let mut seen_notifications = 0;
    for round in 0..100_000 {
        let alive = |p: P| s.m.proc_info(p.pid).is_some_and(|i| !i.zombie);
        if !alive(prog) && !alive(lazy_prog) {
            break;
        }
        for (p, cpu) in [(prog, 0), (lazy_prog, 1)] {
            if alive(p) {
                s.run(p, cpu, 1);
            }
        }
        if let Some(r) = read_record(&s, reader, fd) {
            assert!(r.pn_notifications >= seen_notifications);
            seen_notifications = r.pn_notifications;
            reads += 1;
        }
        // While both run, the kernel's memory stays what it was.
        if round >= 5 && alive(prog) && alive(lazy_prog) {
            let now = s.m.kmem_live();
            let first = *memory.get_or_insert(now);
            assert_eq!(
                now, first,
                "kernel memory changed while notifications went unread"
            );
            unread_rounds += 1;
        }
    }
    assert!(reads > 5, "the reader read {reads} times");
    assert!(unread_rounds > 10, "both ran {unread_rounds} ticks");
    let samples = seen.counts.lock().unwrap().instructions / period;
    s.flushlog(reader).expect("flush");
    let (logged, _) = logged_samples(&s.file(reader, log), watched);
    assert_eq!(logged, samples, "the reader's samples are all logged");
    let last = read_record(&s, reader, fd);
    let watched_total = last.map_or(seen_notifications, |r| r.pn_notifications);
    assert_eq!(watched_total, samples);
    // The one record the lazy owner finds counts everything it missed.
    let missed = read_record(&s, lazy, fd_ignored).expect("a record");
    assert!(
        missed.pn_notifications > 20,
        "{} notifications",
        missed.pn_notifications
    );
    assert_eq!(missed.pn_notifications, missed.pn_samples);
    assert_eq!(missed.pn_dropped, 0);
    assert_eq!(
        s.m.notify_read(lazy.pid, fd_ignored),
        Some(NotifyRead::Empty)
    );
    s.finish();
}

#[test]
fn the_owners_exit_ends_its_descriptors() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    with_log(&s, owner);
    let id = instruction_sampler(&s, owner, PmcMode::Ts, PMC_CPU_ANY, 10_000);
    let fd = notify(&s, owner, id, 0, 1, 0, SIGUSR1);
    let file = s.m.file_of(owner.pid, fd).expect("the descriptor's file");
    // The exit releases the PMC, whose last pass ends the file (which the
    // kernel still holds).
    s.m.exit(owner.pid);
    let rec = match s.m.notify_read_file(file) {
        Some(NotifyRead::Record(r)) => PmcNotification::read_from(&r).expect("a record"),
        other => panic!("no end record: {other:?}"),
    };
    assert_eq!(rec.pn_flags, PMC_NOTIFICATION_END);
    assert_eq!(s.m.notify_read_file(file), Some(NotifyRead::End));
    assert!(
        s.m.take_thread_signals().is_empty(),
        "no signal to the dead"
    );
    s.finish();
}

//! The log file: PMC_OP_CONFIGURELOG, FLUSHLOG, CLOSELOG and WRITELOG with
//! the cases of FreeBSD's pmc_log_test, write errors, and the records the
//! driver writes for allocation, attach, context switches, fork, exec,
//! exit and user data, parsed back with the pmclog decoder.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use kpi::proc::SIGIO;
use ksim::FileKind;
use uapi::pmc::*;
use uapi::pmclog::{PmclogBody, PmclogRecord, PmclogType, records};

fn parse(data: &[u8]) -> Vec<PmclogRecord<'_>> {
    records(data)
        .collect::<Result<Vec<_>, _>>()
        .expect("the log parses completely")
}

fn kinds(data: &[u8]) -> Vec<PmclogType> {
    parse(data).iter().map(|r| r.kind()).collect()
}

#[test]
fn bad_descriptors_give_ebadf() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(s.configurelog(p, 42, 0), Err(EBADF), "not open");
    let ro = s.open(p, FileKind::Regular, false);
    assert_eq!(s.configurelog(p, ro, 0), Err(EBADF), "read-only");
    let dir = s.open(p, FileKind::Directory, true);
    assert_eq!(s.configurelog(p, dir, 0), Err(EBADF), "a directory");
    let closed = s.open(p, FileKind::Regular, true);
    s.m.close(p.pid, closed);
    assert_eq!(s.configurelog(p, closed, 0), Err(EBADF), "closed");
    assert!(s.m.kprocs().is_empty(), "no writer is left behind");
    s.finish();
}

#[test]
fn sockets_and_pipes_are_accepted_and_a_second_log_is_ebusy() {
    let s = Sim::new();
    let (a, b) = (s.root(), s.root());
    let sock = s.open(a, FileKind::Socket, true);
    s.configurelog(a, sock, 0).unwrap();
    let other = s.open(a, FileKind::Regular, true);
    assert_eq!(s.configurelog(a, other, 0), Err(EBUSY));
    let pipe = s.open(b, FileKind::Pipe, true);
    s.configurelog(b, pipe, 0).unwrap();
    assert_eq!(s.m.kprocs().len(), 2);
    assert!(s.m.kprocs().contains(&format!("hwpmc: proc({})", a.pid)));
    assert_eq!(kinds(&s.file(a, sock)), [PmclogType::Initialize]);
    s.finish();
}

#[test]
fn log_ops_without_an_owner_or_a_log_give_einval() {
    let s = Sim::new();
    let p = s.root();
    assert_eq!(s.flushlog(p), Err(EINVAL));
    assert_eq!(s.closelog(p), Err(EINVAL));
    assert_eq!(s.writelog(p, 1), Err(EINVAL));
    assert_eq!(s.configurelog(p, -1, 0), Err(EINVAL));
    s.finish();
}

#[test]
fn kproc_creation_failure_gives_eagain() {
    let s = Sim::new();
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    let mut seen = Vec::new();
    for k in 1..32 {
        s.m.fail_alloc_in(k);
        let r = s.configurelog(p, fd, 0);
        s.m.clear_alloc_failure();
        seen.push(r);
        if r.is_ok() {
            break;
        }
    }
    assert!(seen.contains(&Err(EAGAIN)), "{seen:?}");
    assert!(
        seen.iter()
            .all(|r| matches!(r, Ok(()) | Err(EAGAIN) | Err(ENOMEM))),
        "{seen:?}"
    );
    assert_eq!(
        s.m.kprocs().len(),
        1,
        "exactly the writer of the configured log"
    );
    s.finish();
}

#[test]
fn the_log_survives_the_owner_closing_its_descriptor() {
    let s = Sim::new();
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    let file = s.m.file_of(p.pid, fd).unwrap();
    s.configurelog(p, fd, 0).unwrap();
    s.m.close(p.pid, fd);
    s.writelog(p, 0xC0FFEE).unwrap();
    s.flushlog(p).unwrap();
    let data = s.m.file_data(file);
    let recs = parse(&data);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1].body, PmclogBody::Userdata { userdata: 0xC0FFEE });
    s.configurelog(p, -1, 0).unwrap();
    assert_eq!(s.m.file_refs(file), 0, "the driver dropped its reference");
    assert_eq!(
        kinds(&s.m.file_data(file)),
        [
            PmclogType::Initialize,
            PmclogType::Userdata,
            PmclogType::Closelog
        ]
    );
    s.finish();
}

#[test]
fn records_a_reader_needs_first_go_out_without_a_flush() {
    // FreeBSD's PMCLOG_DESPATCH_SYNC: the log's start, allocations,
    // attachments and detachments hand their buffer to the writer at once
    // (with whatever the buffer held before them); other records wait for
    // the buffer to fill or for a flush.
    use PmclogType::*;
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    assert_eq!(kinds(&s.file(owner, fd)), [Initialize]);
    let id = s.soft_tc(owner);
    assert_eq!(kinds(&s.file(owner, fd)), [Initialize, Pmcallocatedyn]);
    s.writelog(owner, 7).unwrap();
    assert_eq!(kinds(&s.file(owner, fd)), [Initialize, Pmcallocatedyn]);
    s.attach(owner, id, target.pid as i32).unwrap();
    assert_eq!(
        kinds(&s.file(owner, fd)),
        [Initialize, Pmcallocatedyn, Userdata, Pmcattach]
    );
    s.detach(owner, id, target.pid as i32).unwrap();
    s.writelog(owner, 8).unwrap();
    assert_eq!(
        kinds(&s.file(owner, fd)),
        [Initialize, Pmcallocatedyn, Userdata, Pmcattach, Pmcdetach]
    );
    s.flushlog(owner).unwrap();
    assert_eq!(
        kinds(&s.file(owner, fd)),
        [
            Initialize,
            Pmcallocatedyn,
            Userdata,
            Pmcattach,
            Pmcdetach,
            Userdata
        ]
    );
    s.configurelog(owner, -1, 0).unwrap();
    s.finish();
}

#[test]
fn write_errors_stop_the_log_and_come_back_from_flushlog() {
    for (kind, errno) in [
        (FileKind::Full, ENOSPC),
        (
            FileKind::Failing {
                after: 200,
                errno: 5,
            },
            EIO,
        ),
    ] {
        let s = Sim::new();
        let p = s.root();
        let fd = s.open(p, kind, true);
        // INITIALIZE is written at configuration; the device takes it or
        // fails it, and the error shows at the next flush.
        s.configurelog(p, fd, 0).unwrap();
        for i in 0..10 {
            s.writelog(p, i).unwrap();
        }
        let first = s.flushlog(p);
        let second = s.flushlog(p);
        assert!(
            first == Err(errno) || second == Err(errno),
            "{kind:?}: {first:?} {second:?}"
        );
        assert_eq!(s.flushlog(p), Err(errno), "the error stays");
        assert!(s.signals_to(p.pid).contains(&SIGIO), "the owner is told");
        assert_eq!(
            s.configurelog(p, -1, 0),
            Ok(()),
            "the log can be taken down"
        );
        s.finish();
    }
}

/// A target that exits while it runs: its PMCs come off the CPU first
/// (FreeBSD's pseudo switch-out at process exit), so that PROCEXIT and the
/// PMC's total count the last slice, and no PROCCSW is written for it.
#[test]
fn procexit_counts_the_slice_of_a_target_that_exits_running() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let flags = PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT;
    let ev = s.soft("PAGE_FAULT.ALL");
    let id = s
        .allocate(owner, PmcClass::Soft, ev, PmcMode::Tc, 0, flags)
        .unwrap();
    s.attach(owner, id, target.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    // One slice switched out (3 events), then 5 in the slice it exits in.
    s.m.switch_in(1, target.tid);
    for _ in 0..3 {
        s.m.soft_event(1, "PAGE_FAULT.ALL");
    }
    s.m.switch_out(1);
    s.m.switch_in(1, target.tid);
    for _ in 0..5 {
        s.m.soft_event(1, "PAGE_FAULT.ALL");
    }
    s.m.exit(target.pid);
    assert_eq!(s.read(owner, id), Ok(8), "the PMC's total");
    s.configurelog(owner, -1, 0).unwrap();
    let data = s.file(owner, fd);
    let recs = parse(&data);
    let counted: Vec<&PmclogBody<'_>> = recs
        .iter()
        .map(|r| &r.body)
        .filter(|b| matches!(b, PmclogBody::Proccsw { .. } | PmclogBody::Procexit { .. }))
        .collect();
    assert_eq!(
        counted,
        [
            &PmclogBody::Proccsw {
                value: 3,
                pmcid: id,
                pid: target.pid,
                tid: target.tid
            },
            &PmclogBody::Procexit {
                pmcid: id,
                pid: target.pid,
                value: 8
            },
        ]
    );
    s.finish();
}

#[test]
fn every_record_of_a_counting_session_in_order() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let flags = PmcFlags::DESCENDANTS | PmcFlags::LOG_PROCCSW | PmcFlags::LOG_PROCEXIT;
    let ev = s.soft("CLOCK.HARD");
    let id = s
        .allocate(owner, PmcClass::Soft, ev, PmcMode::Tc, 0, flags)
        .unwrap();
    s.attach(owner, id, target.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    s.run(target, 1, 4);
    let child = s.fork(target);
    s.run(child, 2, 3);
    s.m.exec(child.pid, "/usr/bin/cc", None);
    s.writelog(owner, 77).unwrap();
    s.m.exit(child.pid);
    s.detach(owner, id, target.pid as i32).unwrap();
    s.configurelog(owner, -1, 0).unwrap();

    let data = s.file(owner, fd);
    let mut recs = parse(&data);
    // Each CPU fills its own buffer, so the file is ordered per CPU; the
    // timestamps give the global order.
    assert_eq!(
        recs.last().map(|r| r.kind()),
        Some(PmclogType::Closelog),
        "CLOSELOG comes last"
    );
    recs.sort_by_key(|r| r.tsc);
    let seq: Vec<PmclogType> = recs.iter().map(|r| r.kind()).collect();
    use PmclogType::*;
    assert_eq!(
        seq,
        [
            Initialize,
            Pmcallocatedyn,
            Pmcattach,
            Proccsw,
            Procfork,
            Proccsw,
            Procexec,
            Userdata,
            Procexit,
            Pmcdetach,
            Closelog
        ],
        "{seq:?}"
    );
    let PmclogBody::Initialize {
        version,
        cpu,
        tsc_freq,
        cpuid,
        ..
    } = recs[0].body
    else {
        unreachable!()
    };
    assert_eq!(
        (version, cpu, tsc_freq),
        (PMC_VERSION, PmcCputype::Generic.raw(), 2_400_000_000)
    );
    assert_eq!(cpuid, b"GenuineIntel-6-55-4");
    assert_eq!(
        recs[1].body,
        PmclogBody::Pmcallocatedyn {
            pmcid: id,
            event: ev,
            flags: (flags | PmcFlags::NEEDS_LOGFILE).bits(),
            evname: b"CLOCK.HARD"
        }
    );
    assert_eq!(
        recs[2].body,
        PmclogBody::Pmcattach {
            pmcid: id,
            pid: target.pid,
            pathname: b"/usr/bin/root"
        }
    );
    assert_eq!(
        recs[3].body,
        PmclogBody::Proccsw {
            value: 4,
            pmcid: id,
            pid: target.pid,
            tid: target.tid
        }
    );
    assert_eq!(
        recs[4].body,
        PmclogBody::Procfork {
            oldpid: target.pid,
            newpid: child.pid
        }
    );
    assert_eq!(
        recs[5].body,
        PmclogBody::Proccsw {
            value: 3,
            pmcid: id,
            pid: child.pid,
            tid: child.tid
        }
    );
    let PmclogBody::Procexec {
        pid,
        pmcid,
        pathname,
        ..
    } = recs[6].body
    else {
        unreachable!()
    };
    assert_eq!((pid, pmcid, pathname), (child.pid, id, &b"/usr/bin/cc"[..]));
    assert_eq!(
        recs[8].body,
        PmclogBody::Procexit {
            pmcid: id,
            pid: child.pid,
            value: 3
        }
    );
    assert_eq!(
        recs[9].body,
        PmclogBody::Pmcdetach {
            pmcid: id,
            pid: target.pid
        }
    );
    s.finish();
}

#[test]
fn a_log_makes_the_edoofus_cases_start() {
    let s = Sim::new();
    let p = s.root();
    let ss = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.HARD"),
            PmcMode::Ss,
            1,
            PmcFlags::empty(),
        )
        .unwrap();
    let tc = s
        .allocate(
            p,
            PmcClass::Soft,
            s.soft("CLOCK.STAT"),
            PmcMode::Tc,
            0,
            PmcFlags::LOG_PROCEXIT,
        )
        .unwrap();
    assert_eq!(s.start(p, ss), Err(EDOOFUS));
    assert_eq!(s.start(p, tc), Err(EDOOFUS));
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    s.start(p, ss).unwrap();
    s.start(p, tc).unwrap();
    // Taking the log down stops the PMCs that need it.
    s.configurelog(p, -1, 0).unwrap();
    assert_eq!(s.stop(p, tc), Ok(()), "already stopped");
    s.finish();
}

#[test]
fn the_owner_may_exit_with_a_running_pmc_and_an_open_log() {
    let s = Sim::new();
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    let file = s.m.file_of(p.pid, fd).unwrap();
    s.configurelog(p, fd, 0).unwrap();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    s.run(p, 0, 5);
    s.m.exit(p.pid);
    assert!(s.m.kprocs().is_empty(), "the writer exited");
    let data = s.m.file_data(file);
    assert_eq!(kinds(&data).last(), Some(&PmclogType::Closelog));
    assert_eq!(s.m.file_refs(file), 0);
    assert_eq!(
        s.module().driver().log_buffers_free(),
        4 * 32,
        "every buffer is back in the pool"
    );
    s.finish();
}

#[test]
fn closelog_drains_and_a_new_log_can_follow_deconfiguration() {
    let s = Sim::new();
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    s.writelog(p, 1).unwrap();
    s.closelog(p).unwrap();
    assert_eq!(
        kinds(&s.file(p, fd)),
        [
            PmclogType::Initialize,
            PmclogType::Userdata,
            PmclogType::Closelog
        ]
    );
    // After CLOSELOG the log takes no more records: FreeBSD refuses them
    // once its shutdown has begun, and so does WRITELOG.
    assert_eq!(s.writelog(p, 2), Err(ENOMEM));
    s.configurelog(p, -1, 0).unwrap();
    assert_eq!(kinds(&s.file(p, fd)).len(), 3);
    let fd2 = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd2, 0).unwrap();
    assert_eq!(kinds(&s.file(p, fd2)), [PmclogType::Initialize]);
    s.finish();
}

/// A target whose executable's path cannot be found (its file removed,
/// here an exec with no path) is named "unknown" in PMCATTACH and
/// PROCEXEC, as FreeBSD's pmc_getfilename names it.
#[test]
fn an_executable_without_a_path_is_unknown() {
    let s = Sim::new();
    let owner = s.root();
    let target = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    s.m.exec(target.pid, "", None);
    let id = s.soft_tc(owner);
    s.attach(owner, id, target.pid as i32).unwrap();
    s.m.exec(target.pid, "", None);
    s.flushlog(owner).unwrap();
    let data = s.file(owner, fd);
    let names: Vec<&[u8]> = parse(&data)
        .iter()
        .filter_map(|r| match r.body {
            PmclogBody::Pmcattach { pathname, .. } | PmclogBody::Procexec { pathname, .. } => {
                Some(pathname)
            }
            _ => None,
        })
        .collect();
    assert_eq!(names, [&b"unknown"[..], &b"unknown"[..]]);
    s.finish();
}

/// PMCALLOCATE's rate is FreeBSD's `pm_sc` union: the reload count of a
/// sampling PMC, the initial count a counting one was asked for.
#[test]
fn a_hardware_class_pmc_is_logged_as_pmcallocate_with_its_rate() {
    let s = Sim::new();
    let p = s.root();
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Tsc.raw();
    a.pm_ev = uapi::pmc_events::PMC_EV_TSC_TSC;
    a.pm_mode = PmcMode::Sc.raw();
    a.pm_cpu = 2;
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = 1000;
    let id = s.allocate_raw(p, &a).unwrap();
    s.flushlog(p).unwrap();
    let data = s.file(p, fd);
    let recs = parse(&data);
    assert_eq!(
        recs[1].body,
        PmclogBody::Pmcallocate {
            pmcid: id,
            event: uapi::pmc_events::PMC_EV_TSC_TSC,
            flags: 0,
            rate: 1000
        }
    );
    s.finish();
}

//! A log the driver writes, read back through libpmc's pmclog(3) reader:
//! every record arrives as an event with the bytes and values the
//! driver wrote, however the log is split, and CLOSELOG ends it. (Here,
//! not with the driver's tests, so that the driver does not depend on
//! libpmc, which with its simulator depends on the driver.)

#[path = "../../../sys/dev/hwpmc/tests/common/mod.rs"]
mod common;
mod logs;

use logs::{every_record_log, session_log};
use pmc::pmclog::{PMCLOG_FD_NONE, Parser, PmclogEv, PmclogState};
use uapi::pmclog::{PmclogBody, PmclogType, records};

fn read_fed(log: &[u8], chunk: usize) -> (Vec<(u32, Vec<u8>, i64)>, PmclogState) {
    let mut parser = Parser::new(PMCLOG_FD_NONE);
    let mut ev = PmclogEv::zeroed();
    let mut rest = log;
    let mut events = Vec::new();
    loop {
        match parser.read(&mut ev) {
            PmclogState::Ok => {
                // SAFETY: pl_data holds pl_len bytes until the next read.
                let bytes = unsafe {
                    core::slice::from_raw_parts(ev.pl_data.cast::<u8>(), ev.pl_len as usize)
                };
                events.push((ev.pl_type, bytes.to_vec(), ev.pl_offset));
            }
            PmclogState::RequireData if !rest.is_empty() => {
                let n = chunk.min(rest.len());
                parser.feed(&rest[..n]);
                rest = &rest[n..];
            }
            end => return (events, end),
        }
    }
}

#[test]
fn the_driver_log_reads_back_event_by_event() {
    let log = session_log();
    let recs: Vec<_> = records(&log).collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.last().unwrap().kind(), PmclogType::Closelog);
    let kinds: Vec<PmclogType> = recs.iter().map(|r| r.kind()).collect();
    for want in [
        PmclogType::Initialize,
        PmclogType::Pmcallocatedyn,
        PmclogType::Pmcattach,
        PmclogType::Callchain,
        PmclogType::Proccsw,
        PmclogType::Procfork,
        PmclogType::Userdata,
        PmclogType::Procexit,
    ] {
        assert!(kinds.contains(&want), "{want:?} missing from {kinds:?}");
    }
    for chunk in [1, 5, 512, log.len()] {
        let (events, end) = read_fed(&log, chunk);
        assert_eq!(end, PmclogState::Eof, "chunk {chunk}");
        assert_eq!(
            events.len(),
            recs.len() - 1,
            "all but CLOSELOG, chunk {chunk}"
        );
        let mut offset = 0usize;
        for ((ty, bytes, end_offset), rec) in events.iter().zip(&recs) {
            assert_eq!(*ty, rec.kind().raw());
            assert_eq!(bytes[..], log[offset..offset + bytes.len()]);
            offset += rec.encoded_len().max(bytes.len());
            assert_eq!(*end_offset as usize, offset);
        }
    }
}

#[test]
fn driver_values_arrive_in_the_event_union() {
    let log = session_log();
    let mut parser = Parser::new(PMCLOG_FD_NONE);
    parser.feed(&log);
    let mut ev = PmclogEv::zeroed();
    let mut seen = 0;
    for rec in records(&log) {
        let rec = rec.unwrap();
        let state = parser.read(&mut ev);
        if rec.kind() == PmclogType::Closelog {
            assert_eq!(state, PmclogState::Eof);
            break;
        }
        assert_eq!(state, PmclogState::Ok);
        assert_eq!(ev.pl_ts.tv_sec as u64, rec.tsc);
        // SAFETY: each arm reads the union member of the record's type.
        unsafe {
            match rec.body {
                PmclogBody::Callchain {
                    pid, pmcid, pcs, ..
                } => {
                    let cc = &ev.pl_u.pl_cc;
                    assert_eq!(
                        (cc.pl_pid, cc.pl_pmcid, cc.pl_npc as usize),
                        (pid, pmcid, pcs.len())
                    );
                    assert!(pcs.iter().eq(cc.pl_pc[..pcs.len()].iter().copied()));
                    seen |= 1;
                }
                PmclogBody::Procfork { oldpid, newpid } => {
                    assert_eq!(
                        (ev.pl_u.pl_f.pl_oldpid, ev.pl_u.pl_f.pl_newpid),
                        (oldpid as i32, newpid as i32)
                    );
                    seen |= 2;
                }
                PmclogBody::Userdata { userdata } => {
                    assert_eq!(ev.pl_u.pl_u.pl_userdata, 0x1234_5678);
                    assert_eq!(userdata, 0x1234_5678);
                    seen |= 4;
                }
                PmclogBody::Proccsw {
                    value,
                    pmcid,
                    pid,
                    tid,
                } => {
                    let c = ev.pl_u.pl_c;
                    assert_eq!(
                        (c.pl_value, c.pl_pmcid, c.pl_pid, c.pl_tid),
                        (value, pmcid, pid as i32, tid as i32)
                    );
                    seen |= 8;
                }
                _ => {}
            }
        }
    }
    assert_eq!(
        seen, 15,
        "call chain, fork, user data and context switch were all checked"
    );
}

#[test]
fn every_record_type_the_driver_writes_reads_back_through_pmclog_read() {
    let log = every_record_log();
    let recs: Vec<_> = records(&log).collect::<Result<_, _>>().unwrap();
    let mut kinds: Vec<PmclogType> = recs.iter().map(|r| r.kind()).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(
        kinds,
        PmclogType::ALL,
        "the session writes every record type"
    );

    // Fed in uneven pieces, the reader gives each record with the values
    // the decoder finds in its bytes.
    let mut parser = Parser::new(PMCLOG_FD_NONE);
    let mut ev = PmclogEv::zeroed();
    let mut rest = &log[..];
    let mut offset = 0usize;
    for rec in &recs {
        let state = loop {
            match parser.read(&mut ev) {
                PmclogState::RequireData if !rest.is_empty() => {
                    let n = 13.min(rest.len());
                    parser.feed(&rest[..n]);
                    rest = &rest[n..];
                }
                state => break state,
            }
        };
        if rec.kind() == PmclogType::Closelog {
            assert_eq!(state, PmclogState::Eof);
            break;
        }
        assert_eq!(state, PmclogState::Ok, "{:?}", rec.kind());
        let len = ev.pl_len as usize;
        // SAFETY: pl_data holds pl_len bytes until the next read.
        let bytes = unsafe { core::slice::from_raw_parts(ev.pl_data.cast::<u8>(), len) };
        assert_eq!(bytes, &log[offset..offset + len]);
        offset += len;
        assert_eq!(
            (ev.pl_type, ev.pl_ts.tv_sec as u64, ev.pl_offset as usize),
            (rec.kind().raw(), rec.tsc, offset)
        );
        assert_eq!(ev.body(), Some(rec.body), "{:?}", rec.kind());
        match rec.body {
            PmclogBody::Pmcallocate { .. } => {
                // SAFETY: a PMCALLOCATE event's name is a C string of the
                // library's.
                let name = unsafe { core::ffi::CStr::from_ptr(ev.pl_u.pl_a.pl_evname) };
                // The TSC's name in libpmc's table (__PMC_EV_ALIAS_TSC).
                assert_eq!(name, c"cycles");
            }
            PmclogBody::Callchain { pcs, .. } => {
                // SAFETY: the event is a CALLCHAIN.
                assert!(unsafe { ev.pl_u.pl_cc.pl_pc[pcs.len()..].iter().all(|&pc| pc == 0) });
            }
            _ => {}
        }
    }
    assert!(rest.is_empty() || parser.read(&mut ev) == PmclogState::Eof);
}

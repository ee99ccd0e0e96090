//! pmclog(3) reader: every record type, any fragmentation, malformed
//! logs, descriptors and the C entry points.

use core::ffi::{CStr, c_int, c_void};
use std::io::Write;
use std::os::fd::AsRawFd;

use pmc::pmclog::{
    PMCLOG_FD_NONE, Parser, PmclogEv, PmclogState, pmclog_close, pmclog_feed, pmclog_open,
    pmclog_read,
};
mod common;

use common::{FREQ, T0, encode, every_record};
use uapi::pmclog::{PmclogBody as B, PmclogRecord, PmclogType, Timespec};

/// Reads events until the parser stops, feeding `chunk` bytes at a time
/// whenever it asks for data.
fn read_all(log: &[u8], chunk: usize) -> (Vec<Box<PmclogEv>>, Vec<Vec<u8>>, PmclogState) {
    let mut parser = Parser::new(PMCLOG_FD_NONE);
    let mut rest = log;
    let (mut events, mut data) = (Vec::new(), Vec::new());
    loop {
        let mut ev = PmclogEv::zeroed();
        match parser.read(&mut ev) {
            PmclogState::Ok => {
                // SAFETY: pl_data points to pl_len bytes the parser keeps
                // until the next read.
                let bytes = unsafe {
                    core::slice::from_raw_parts(ev.pl_data.cast::<u8>(), ev.pl_len as usize)
                };
                data.push(bytes.to_vec());
                events.push(ev);
            }
            PmclogState::RequireData if !rest.is_empty() => {
                let n = chunk.min(rest.len());
                parser.feed(&rest[..n]);
                rest = &rest[n..];
            }
            state => {
                assert_eq!(ev.pl_state, state as u32);
                return (events, data, state);
            }
        }
    }
}

fn check_every_record(events: &[Box<PmclogEv>], data: &[Vec<u8>], log: &[u8]) {
    let records = every_record();
    // CLOSELOG ends the log and is not an event.
    assert_eq!(events.len(), records.len() - 1);
    let mut offset = 0usize;
    for (i, (ev, rec)) in events.iter().zip(&records).enumerate() {
        let len = rec.encoded_len();
        assert_eq!(ev.pl_type, rec.kind().raw(), "event {i}");
        assert_eq!(ev.pl_count, i + 1);
        assert_eq!(ev.pl_len as usize, len);
        assert_eq!(data[i], log[offset..offset + len], "pl_data of event {i}");
        offset += len;
        assert_eq!(ev.pl_offset as usize, offset, "event {i}");
        assert_eq!(
            ev.pl_ts,
            Timespec {
                tv_sec: rec.tsc as isize,
                tv_nsec: 0
            },
            "event {i}"
        );
        assert_eq!(ev.body(), Some(rec.body), "event {i}");
        match rec.body {
            // The name comes from libpmc's table (this code has none).
            B::Pmcallocate { .. } => {
                // SAFETY: a PMCALLOCATE event's name is a C string of the
                // library's.
                assert_eq!(unsafe { CStr::from_ptr(ev.pl_u.pl_a.pl_evname) }, c"");
            }
            // The chain's tail is zero, as FreeBSD's reader leaves it.
            B::Callchain { pcs, .. } => {
                // SAFETY: the event is a CALLCHAIN.
                assert!(unsafe { ev.pl_u.pl_cc.pl_pc[pcs.len()..].iter().all(|&pc| pc == 0) });
            }
            _ => {}
        }
    }
}

#[test]
fn every_record_type_in_one_buffer() {
    let log = encode(&every_record());
    let (events, data, end) = read_all(&log, log.len());
    assert_eq!(end, PmclogState::Eof);
    check_every_record(&events, &data, &log);
}

#[test]
fn any_fragmentation_gives_the_same_events() {
    let log = encode(&every_record());
    for chunk in [1, 3, 4, 7, 16, 63, 4096] {
        let (events, data, end) = read_all(&log, chunk);
        assert_eq!(end, PmclogState::Eof, "chunk {chunk}");
        check_every_record(&events, &data, &log);
    }
}

/// As [`read_all`], through the C entry points: each piece is fed from a
/// buffer of its own, which, as pmclog(3) allows, is overwritten and
/// freed as soon as pmclog_read has returned -1.
fn read_all_c(log: &[u8], chunk: usize) -> (Vec<Box<PmclogEv>>, Vec<Vec<u8>>, PmclogState) {
    let cookie = pmclog_open(PMCLOG_FD_NONE);
    let mut rest = log;
    let (mut events, mut data) = (Vec::new(), Vec::new());
    let mut fed: Option<Vec<u8>> = None;
    loop {
        let mut ev = PmclogEv::zeroed();
        // SAFETY: `cookie` is live until pmclog_close and `ev` writable.
        let ok = unsafe { pmclog_read(cookie, &mut *ev) } == 0;
        if ok {
            // SAFETY: pl_data points to pl_len bytes that stay valid
            // until the next read.
            let bytes =
                unsafe { core::slice::from_raw_parts(ev.pl_data.cast::<u8>(), ev.pl_len as usize) };
            data.push(bytes.to_vec());
            events.push(ev);
            continue;
        }
        // pmclog_read returned -1: the parser no longer needs what it was fed.
        if let Some(mut old) = fed.take() {
            old.fill(0xa5);
        }
        if ev.pl_state == PmclogState::RequireData as u32 && !rest.is_empty() {
            let n = chunk.min(rest.len());
            let piece = fed.insert(rest[..n].to_vec());
            rest = &rest[n..];
            // SAFETY: `piece` holds `n` bytes and is kept until pmclog_read
            // next returns -1.
            let fed_ok = unsafe { pmclog_feed(cookie, piece.as_mut_ptr().cast(), n as c_int) };
            assert_eq!(fed_ok, 0);
            continue;
        }
        // SAFETY: `cookie` came from pmclog_open and is not used again.
        unsafe { pmclog_close(cookie) };
        let state = match ev.pl_state {
            1 => PmclogState::Eof,
            2 => PmclogState::RequireData,
            _ => PmclogState::Error,
        };
        return (events, data, state);
    }
}

#[test]
fn fed_buffers_may_be_reused_once_pmclog_read_returns_minus_one() {
    let log = encode(&every_record());
    for chunk in [1, 2, 3, 5, 7, 13, 64, 100, 1000, log.len()] {
        let (events, data, end) = read_all_c(&log, chunk);
        assert_eq!(end, PmclogState::Eof, "chunk {chunk}");
        check_every_record(&events, &data, &log);
    }
}

#[test]
fn a_partial_record_asks_for_more_data() {
    let log = encode(&every_record());
    let mut parser = Parser::new(PMCLOG_FD_NONE);
    let mut ev = PmclogEv::zeroed();
    assert_eq!(parser.read(&mut ev), PmclogState::RequireData);
    parser.feed(&log[..10]);
    assert_eq!(parser.read(&mut ev), PmclogState::RequireData);
    assert_eq!(ev.pl_state, PmclogState::RequireData as u32);
    parser.feed(&log[10..]);
    assert_eq!(parser.read(&mut ev), PmclogState::Ok);
    assert_eq!(ev.pl_type, PmclogType::Initialize.raw());
}

#[test]
fn events_after_closelog_are_not_read() {
    let mut records = every_record();
    records.push(PmclogRecord {
        tsc: 0,
        body: B::Userdata { userdata: 7 },
    });
    let log = encode(&records);
    let (events, _, end) = read_all(&log, log.len());
    assert_eq!(end, PmclogState::Eof);
    assert_eq!(events.len(), records.len() - 2);
}

#[test]
fn malformed_logs_put_the_parser_in_the_error_state() {
    let good = encode(&every_record());
    let init_len = every_record()[0].encoded_len();
    let header_of_second = init_len;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut bad_magic = good.clone();
    bad_magic[header_of_second + 3] = 0xEF;
    cases.push(("bad magic", bad_magic));
    let mut zero_len = good.clone();
    zero_len[header_of_second..header_of_second + 2].copy_from_slice(&[0, 0]);
    cases.push(("zero length", zero_len));
    let mut odd_len = good.clone();
    odd_len[header_of_second] |= 1;
    cases.push(("unaligned length", odd_len));
    let mut bad_type = good.clone();
    bad_type[header_of_second + 2] = 4;
    cases.push(("retired type 4", bad_type));
    let mut long_path = good.clone();
    // PMCATTACH (the fourth record) claiming a path longer than PATH_MAX.
    let attach: usize = every_record()[..3].iter().map(|r| r.encoded_len()).sum();
    long_path[attach..attach + 2].copy_from_slice(&(24u16 + 1028).to_le_bytes());
    cases.push(("oversized path", long_path));
    for (what, log) in cases {
        let (events, _, end) = read_all(&log, 5);
        assert_eq!(end, PmclogState::Error, "{what}");
        let delivered = if what == "oversized path" { 3 } else { 1 };
        assert_eq!(events.len(), delivered, "{what}");
        // The error is sticky.
        let mut parser = Parser::new(PMCLOG_FD_NONE);
        parser.feed(&log);
        let mut ev = PmclogEv::zeroed();
        while parser.read(&mut ev) == PmclogState::Ok {}
        assert_eq!(parser.read(&mut ev), PmclogState::Error, "{what}");
    }
}

fn temp_log(bytes: &[u8]) -> std::fs::File {
    let path = std::env::temp_dir().join(format!(
        "pmclog-test-{}-{}",
        std::process::id(),
        bytes.len()
    ));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(bytes).unwrap();
    drop(f);
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

#[test]
fn reads_a_log_from_a_descriptor() {
    // Enough records that the file is read in several chunks.
    let mut records = every_record();
    let closelog = records.pop().unwrap();
    let extra: Vec<_> = (0..500)
        .map(|i| PmclogRecord {
            tsc: T0 + 100 * FREQ,
            body: B::Userdata { userdata: i },
        })
        .collect();
    records.extend(extra);
    records.push(closelog);
    let log = encode(&records);
    assert!(log.len() > 3 * 4096);
    let file = temp_log(&log);
    let mut parser = Parser::new(file.as_raw_fd());
    let mut ev = PmclogEv::zeroed();
    let mut n = 0;
    while parser.read(&mut ev) == PmclogState::Ok {
        n += 1;
    }
    assert_eq!(ev.pl_state, PmclogState::Eof as u32);
    assert_eq!(n, records.len() - 1);

    // Without CLOSELOG the end of the file ends the log.
    let log = encode(&records[..records.len() - 1]);
    let file = temp_log(&log);
    let mut parser = Parser::new(file.as_raw_fd());
    let mut n = 0;
    while parser.read(&mut ev) == PmclogState::Ok {
        n += 1;
    }
    assert_eq!(
        (PmclogState::Eof as u32, n),
        (ev.pl_state, records.len() - 1)
    );

    // A file that ends inside a record ends before it (as in FreeBSD);
    // once the rest is written the record is read.
    let path = std::env::temp_dir().join(format!("pmclog-grow-{}", std::process::id()));
    let mut writer = std::fs::File::create(&path).unwrap();
    writer.write_all(&log[..log.len() - 2]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut parser = Parser::new(file.as_raw_fd());
    let mut n = 0;
    while parser.read(&mut ev) == PmclogState::Ok {
        n += 1;
    }
    assert_eq!(
        (PmclogState::Eof as u32, n),
        (ev.pl_state, records.len() - 2)
    );
    writer.write_all(&log[log.len() - 2..]).unwrap();
    assert_eq!(parser.read(&mut ev), PmclogState::Ok);
    // SAFETY: the event is USERDATA.
    assert_eq!(unsafe { ev.pl_u.pl_u.pl_userdata }, 499);
    assert_eq!(ev.pl_offset as usize, log.len());
    assert_eq!(parser.read(&mut ev), PmclogState::Eof);
}

#[test]
fn a_pipe_that_would_block_asks_for_data() {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is the pipe's read end, just created.
    let set = unsafe { libc::fcntl(fds[0], libc::F_SETFL, libc::O_NONBLOCK) };
    assert_eq!(set, 0);
    let log = encode(&every_record());
    let mut parser = Parser::new(fds[0]);
    let mut ev = PmclogEv::zeroed();
    assert_eq!(parser.read(&mut ev), PmclogState::RequireData);
    // SAFETY: fds[1] is the write end; `log` holds the bytes written.
    let written = unsafe { libc::write(fds[1], log.as_ptr().cast(), log.len()) };
    assert_eq!(written, log.len() as isize);
    let mut n = 0;
    while parser.read(&mut ev) == PmclogState::Ok {
        n += 1;
    }
    assert_eq!(
        (ev.pl_state, n),
        (PmclogState::Eof as u32, every_record().len() - 1)
    );
    // SAFETY: both descriptors are ours and closed once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn c_entry_points() {
    let log = encode(&every_record());
    let cookie = pmclog_open(PMCLOG_FD_NONE);
    assert!(!cookie.is_null());
    let mut ev = PmclogEv::zeroed();
    let evp: *mut PmclogEv = &mut *ev;
    // SAFETY: `cookie` is live until pmclog_close, `evp` is writable and
    // the fed buffer holds `len` bytes.
    unsafe {
        assert_eq!(pmclog_read(cookie, evp), -1);
        assert_eq!((*evp).pl_state, PmclogState::RequireData as u32);
        assert_eq!(
            pmclog_feed(cookie, log.as_ptr().cast_mut().cast(), log.len() as c_int),
            0
        );
        assert_eq!(pmclog_feed(cookie, log.as_ptr().cast_mut().cast(), -1), -1);
        assert_eq!(
            pmclog_feed(
                core::ptr::null_mut::<c_void>(),
                log.as_ptr().cast_mut().cast(),
                1
            ),
            -1
        );
        let mut n = 0;
        while pmclog_read(cookie, evp) == 0 {
            assert_eq!((*evp).pl_state, PmclogState::Ok as u32);
            n += 1;
        }
        assert_eq!((*evp).pl_state, PmclogState::Eof as u32);
        assert_eq!(n, every_record().len() - 1);
        assert_eq!(pmclog_read(core::ptr::null_mut(), evp), -1);
        pmclog_close(cookie);
    }
    // A descriptor-backed parser takes no fed data.
    let file = temp_log(&log);
    let cookie = pmclog_open(file.as_raw_fd());
    // SAFETY: as above.
    unsafe {
        assert_eq!(pmclog_feed(cookie, log.as_ptr().cast_mut().cast(), 4), -1);
        pmclog_close(cookie);
    }
}

//! The log writer against files that do not take everything at once:
//! short writes, interrupted writes (EINTR), and a pipe whose reader is
//! behind (the write blocks until the pipe is drained). Every record must
//! reach the file, once and in order, however the writes went.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use ksim::{FileKind, MachineConfig};
use uapi::pmclog::{PmclogBody, records};

/// Small buffers, so that the records below fill several.
fn sim() -> Sim {
    Sim::with(
        MachineConfig::default(),
        &[("kern.hwpmc.logbuffersize", "4")],
    )
}

/// The user records of a complete log (INITIALIZE first, CLOSELOG last).
fn user_records(data: &[u8]) -> Vec<u32> {
    let all: Vec<PmclogBody<'_>> = records(data)
        .map(|r| r.expect("the log parses completely").body)
        .collect();
    assert!(matches!(all.first(), Some(PmclogBody::Initialize { .. })));
    assert!(matches!(all.last(), Some(PmclogBody::Closelog)));
    all.iter()
        .filter_map(|b| match b {
            PmclogBody::Userdata { userdata } => Some(*userdata),
            _ => None,
        })
        .collect()
}

/// Logs 1000 user records through a file of `kind`, calling `between`
/// after every 100, and returns what the file holds.
fn log_through(kind: FileKind, between: impl Fn(&Sim, u64)) -> (Vec<u8>, Sim) {
    let s = sim();
    let p = s.root();
    let fd = s.open(p, kind, true);
    s.configurelog(p, fd, 0).unwrap();
    let file = s.m.file_of(p.pid, fd).unwrap();
    for k in 0..1000u32 {
        s.writelog(p, k).unwrap();
        if k % 100 == 99 {
            s.flushlog(p).unwrap();
            between(&s, file);
        }
    }
    s.configurelog(p, -1, 0).unwrap();
    (s.file(p, fd), s)
}

#[test]
fn short_writes_lose_nothing() {
    let (data, s) = log_through(FileKind::Short { max: 7 }, |_, _| {});
    assert_eq!(user_records(&data), (0..1000).collect::<Vec<_>>());
    s.finish();
}

#[test]
fn interrupted_writes_are_retried() {
    let (data, s) = log_through(FileKind::Interrupting { every: 3 }, |_, _| {});
    assert_eq!(user_records(&data), (0..1000).collect::<Vec<_>>());
    s.finish();
}

#[test]
fn a_blocked_writer_goes_on_when_the_pipe_is_drained() {
    // A pipe that holds less than one buffer: every flush blocks the
    // writer until the reader drains it.
    let (data, s) = log_through(FileKind::BoundedPipe { capacity: 1000 }, |s, file| {
        let before = s.m.file_data(file).len();
        s.m.drain(file);
        assert!(
            s.m.file_data(file).len() > before,
            "draining let the blocked writer go on"
        );
    });
    assert_eq!(user_records(&data), (0..1000).collect::<Vec<_>>());
    s.finish();
}

#[test]
fn a_writer_blocked_at_close_finishes_its_last_pass() {
    // Nobody drains the pipe until the log goes: its last pass still
    // writes everything, as the reader reads while the closer waits.
    let (data, s) = log_through(FileKind::BoundedPipe { capacity: 512 }, |_, _| {});
    assert_eq!(user_records(&data), (0..1000).collect::<Vec<_>>());
    s.finish();
}

//! `pmcstat -R` streams: what it has read is printed before it waits for
//! more of a log that is still being written, and a reader that goes away
//! (`pmcstat -R log | head`) ends it as it ends a C program (SIGPIPE)
//! instead of letting it read the whole log.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use uapi::pmclog::{PmclogBody, PmclogRecord, Timespec};

fn record(body: PmclogBody<'_>) -> Vec<u8> {
    let rec = PmclogRecord { tsc: 1, body };
    let mut buf = vec![0u8; rec.encoded_len()];
    let n = rec.encode(&mut buf).expect("encodes");
    buf.truncate(n);
    buf
}

fn initialize() -> Vec<u8> {
    record(PmclogBody::Initialize {
        version: uapi::pmc::PMC_VERSION,
        cpu: 0,
        tsc_freq: 1_000_000,
        ts: Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        },
        cpuid: b"GenuineIntel-6-55-4",
    })
}

fn userdata(v: u32) -> Vec<u8> {
    record(PmclogBody::Userdata { userdata: v })
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("pmcstat-stream-{}-{name}", std::process::id()))
}

#[test]
fn a_growing_log_is_printed_as_it_grows() {
    let fifo = tmp("fifo");
    let _ = std::fs::remove_file(&fifo);
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-R", fifo.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run pmcstat");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    // The writer keeps the log open: pmcstat must show these records
    // while it waits for the rest.
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(&initialize()).unwrap();
    for v in 0..10 {
        w.write_all(&userdata(v)).unwrap();
    }
    w.flush().unwrap();
    // A generous bound: this is about waiting for the end of the log or
    // not, not about speed.
    let first: Vec<String> = (0..11)
        .map(|_| rx.recv_timeout(Duration::from_secs(60)))
        .collect::<Result<_, _>>()
        .expect("the records written so far are printed before the log ends");
    assert!(first[0].starts_with("initlog"), "{first:?}");
    assert!(
        first[1..].iter().all(|l| l.starts_with("userdata")),
        "{first:?}"
    );
    w.write_all(&userdata(10)).unwrap();
    w.write_all(&record(PmclogBody::Closelog)).unwrap();
    drop(w);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    // The last record; the CLOSELOG that ends the log prints nothing, as
    // in FreeBSD.
    let rest: Vec<String> = rx.try_iter().collect();
    assert_eq!(rest, ["userdata  0xa"]);
    std::fs::remove_file(&fifo).unwrap();
}

#[test]
fn a_reader_that_goes_away_ends_the_dump() {
    // Far more text than pipes buffer.
    let log = tmp("big.log");
    let mut data = initialize();
    for v in 0..200_000 {
        data.extend_from_slice(&userdata(v));
    }
    data.extend_from_slice(&record(PmclogBody::Closelog));
    std::fs::write(&log, &data).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmcstat"))
        .args(["-R", log.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run pmcstat");
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 7];
    out.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"initlog");
    drop(out);
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGPIPE),
        "killed by SIGPIPE, as `pmcstat -R log | head` is on FreeBSD: {status:?}"
    );
    std::fs::remove_file(&log).unwrap();
}

//! pmclog(3) on a descriptor: a regular file is mapped a window at a
//! time (one window at most, whatever the file's length), read from the
//! descriptor's offset, and followed as it grows or shrinks; pipes,
//! sockets and descriptors that cannot be mapped are read with read(2).

use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use pmc::pmclog::{Parser, PmclogEv, PmclogState};
use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord};

mod common;
use common::{encode, every_record};

/// A log of about `bytes` bytes whose records have many lengths (call
/// chains of 1 to 64 frames, paths of several lengths), so that records
/// straddle every window and page boundary; with its records' offsets.
fn long_log(bytes: usize) -> (Vec<u8>, Vec<usize>) {
    let pcs: Vec<usize> = (0..64).map(|i| 0x40_0000 + i * 8).collect();
    let paths: [&[u8]; 3] = [b"/a", b"/usr/lib/libthr.so.3", b"/usr/local/bin/some-tool"];
    let (mut log, mut starts) = (Vec::new(), Vec::new());
    let mut i = 0usize;
    while log.len() < bytes {
        i += 1;
        let body = match i % 5 {
            0 => B::MapIn {
                pid: i as u32,
                start: i,
                pathname: paths[i % 3],
            },
            1 => B::Userdata { userdata: i as u32 },
            _ => B::Callchain {
                pid: i as u32,
                tid: 7,
                pmcid: 0x100,
                cpuflags: 1,
                pcs: PcList::from_words(&pcs[..1 + i % 64]),
            },
        };
        starts.push(log.len());
        log.extend_from_slice(&encode(&[PmclogRecord {
            tsc: i as u64,
            body,
        }]));
    }
    (log, starts)
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pmclog-fd-{}-{name}", std::process::id()))
}

/// Lines of /proc/self/maps that map `path`.
fn mappings_of(path: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.to_str().unwrap();
    maps.lines().filter(|l| l.ends_with(name)).count()
}

/// pl_data's bytes of an event.
fn data(ev: &PmclogEv) -> &[u8] {
    // SAFETY: after an Ok read pl_data points to pl_len bytes that stay
    // valid until the next read.
    unsafe { core::slice::from_raw_parts(ev.pl_data.cast::<u8>(), ev.pl_len as usize) }
}

#[test]
fn a_regular_file_is_mapped_one_window_at_a_time() {
    // Several windows long.
    let (log, starts) = long_log(5 << 20);
    let path = temp_path("long");
    std::fs::write(&path, &log).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let mut parser = Parser::new(file.as_raw_fd());
    let mut ev = PmclogEv::zeroed();
    let mut n = 0;
    let mut most = 0;
    while parser.read(&mut ev) == PmclogState::Ok {
        let start = starts[n];
        let end = starts.get(n + 1).copied().unwrap_or(log.len());
        assert_eq!(data(&ev), &log[start..end], "record {n}");
        assert_eq!(ev.pl_offset as usize, end, "record {n}");
        n += 1;
        assert_eq!(ev.pl_count, n);
        if n % 2000 == 1 {
            most = most.max(mappings_of(&path));
        }
    }
    assert_eq!(ev.pl_state, PmclogState::Eof as u32);
    assert_eq!(n, starts.len());
    // The bytes were mapped, never more than one window at once (Linux
    // shows one mapping as one line).
    #[cfg(target_os = "linux")]
    assert_eq!(most, 1, "mappings of the log seen while reading");
    drop(parser);
    #[cfg(target_os = "linux")]
    assert_eq!(mappings_of(&path), 0, "the parser unmaps its window");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn reading_starts_at_the_descriptors_offset_and_moves_it() {
    let (log, starts) = long_log(3 << 20);
    let path = temp_path("offset");
    std::fs::write(&path, &log).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let first = starts.len() / 2;
    file.seek(SeekFrom::Start(starts[first] as u64)).unwrap();
    let mut parser = Parser::new(file.as_raw_fd());
    let mut ev = PmclogEv::zeroed();
    assert_eq!(parser.read(&mut ev), PmclogState::Ok);
    assert_eq!(data(&ev), &log[starts[first]..starts[first + 1]]);
    // Offsets count from where the parser began, as with read(2).
    assert_eq!(ev.pl_offset as usize, starts[first + 1] - starts[first]);
    let mut n = 1;
    while parser.read(&mut ev) == PmclogState::Ok {
        n += 1;
    }
    assert_eq!(ev.pl_state, PmclogState::Eof as u32);
    assert_eq!(n, starts.len() - first);
    // The descriptor is left at the end of what was consumed.
    assert_eq!(file.stream_position().unwrap(), log.len() as u64);
}

#[test]
fn a_file_that_shrinks_and_grows_again_is_followed_without_a_fault() {
    let records = every_record();
    let log = encode(&records[..records.len() - 1]);
    let path = temp_path("shrink");
    let mut writer = std::fs::File::create(&path).unwrap();
    // The file ends inside its last record: that record's first bytes
    // are in the mapped window when the end is reached.
    writer.write_all(&log[..log.len() - 2]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut parser = Parser::new(file.as_raw_fd());
    let mut ev = PmclogEv::zeroed();
    let mut n = 0;
    while parser.read(&mut ev) == PmclogState::Ok {
        n += 1;
    }
    assert_eq!(
        (ev.pl_state, n),
        (PmclogState::Eof as u32, records.len() - 2)
    );
    // Another program truncates the log under the parser: the pages of
    // the partial record are no longer part of the file, and touching
    // them would kill the process with SIGBUS.
    writer.set_len(0).unwrap();
    assert_eq!(parser.read(&mut ev), PmclogState::Eof);
    assert_eq!(parser.read(&mut ev), PmclogState::Eof);
    // Written again, whole and longer, the log goes on from the record
    // the parser had reached.
    let more = encode(&[PmclogRecord {
        tsc: 9,
        body: B::Userdata { userdata: 0xfeed },
    }]);
    writer.write_all_at(&log, 0).unwrap();
    writer.write_all_at(&more, log.len() as u64).unwrap();
    assert_eq!(parser.read(&mut ev), PmclogState::Ok);
    assert_eq!(ev.pl_type, records[records.len() - 2].kind().raw());
    assert_eq!(parser.read(&mut ev), PmclogState::Ok);
    assert_eq!(data(&ev), &more[..]);
    assert_eq!(parser.read(&mut ev), PmclogState::Eof);
}

/// FileExt::write_all_at, under the name the test uses.
trait WriteAt {
    fn write_all_at(&self, buf: &[u8], at: u64) -> std::io::Result<()>;
}
impl WriteAt for std::fs::File {
    fn write_all_at(&self, buf: &[u8], at: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, at)
    }
}

#[test]
fn a_socket_is_read_with_read() {
    let (log, starts) = long_log(1 << 20);
    let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        // Odd pieces, so records arrive split.
        for piece in log.chunks(4093) {
            tx.write_all(piece).unwrap();
        }
        log
    });
    let mut parser = Parser::new(rx.as_raw_fd());
    let mut ev = PmclogEv::zeroed();
    let mut got = Vec::new();
    while parser.read(&mut ev) == PmclogState::Ok {
        got.extend_from_slice(data(&ev));
    }
    let log = writer.join().unwrap();
    assert_eq!(ev.pl_state, PmclogState::Eof as u32);
    assert_eq!(ev.pl_count, starts.len());
    assert_eq!(got, log);
}

#[test]
fn a_descriptor_that_cannot_be_read_is_an_error() {
    let path = temp_path("wronly");
    std::fs::write(&path, encode(&every_record())).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut parser = Parser::new(file.as_raw_fd());
    let mut ev = PmclogEv::zeroed();
    assert_eq!(parser.read(&mut ev), PmclogState::Error);
    assert_eq!(parser.read(&mut ev), PmclogState::Error);
}

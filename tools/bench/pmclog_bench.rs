//! pmclog_read throughput: writes a log of mixed records (mostly call
//! chains, and every other record type now and then) and reads it back through libpmc's reader from a descriptor, or
//! reads the same file with plain read(2) calls as the bound.
//!
//!   pmclog-bench gen FILE MIB     write a log of at least MIB MiB
//!   pmclog-bench read FILE        pmclog_read every record
//!   pmclog-bench feed FILE        mmap the log, give it whole to
//!                                 pmclog_feed, pmclog_read every record
//!   pmclog-bench plain FILE       read(2) the file in 1 MiB chunks
//!   pmclog-bench profile FILE N ELF PATH [DISTINCT]
//!                                 write a log of N call chain samples of
//!                                 the program ELF (exec'd as PATH): 18
//!                                 frames each, PCs inside its functions
//!                                 (nm(1)'s), for pmcstat's analysis; a
//!                                 quarter of them from 64 chains, the
//!                                 rest from DISTINCT (16384)
//!
//! Each reading mode prints one line: records (or 0), bytes, seconds, and
//! the peak resident set size (VmHWM) in KiB.

use std::io::{BufWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::time::Instant;

use pmc::pmclog::{Parser, PmclogEv, PmclogState};
use uapi::pmc::PMC_VERSION;
use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord, Timespec};

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn encode(out: &mut impl Write, rec: &PmclogRecord<'_>) -> usize {
    let mut buf = [0u8; uapi::pmclog::PMCLOG_MAX_RECORD];
    let n = rec.encode(&mut buf).expect("bench records encode");
    out.write_all(&buf[..n]).expect("write the log");
    n
}

/// The `n`th (modulo their number) of the record types the main mix
/// lacks, so that a generated log holds every type.
fn rare(n: usize, i: u64) -> B<'static> {
    let pid = (i % 500) as u32;
    let all = [
        B::Pmcallocate {
            pmcid: 0x0001_0100,
            event: 0x1000, // TSC
            flags: 0x20,
            rate: 0,
        },
        B::Pmcallocate {
            pmcid: 0x0002_0200,
            event: 0x2080, // K8_FP_DISPATCHED_FPU_OPS
            flags: 0x20,
            rate: 65536,
        },
        B::Pmcallocatedyn {
            pmcid: 0x0003_0f00,
            event: 0x20001,
            flags: 0x80,
            evname: b"CLOCK.HARD",
        },
        B::Pmcattach {
            pmcid: 0x100,
            pid,
            pathname: b"/usr/bin/make",
        },
        B::Pmcdetach { pmcid: 0x100, pid },
        B::Procexit {
            pmcid: 0x100,
            pid,
            value: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        },
        B::Procfork {
            oldpid: pid,
            newpid: pid + 1,
        },
        B::Sysexit { pid },
        B::MapOut {
            pid,
            start: 0x80_0000,
            end: 0x90_0000,
        },
        B::ThrCreate {
            tid: 100_000 + (i % 900) as u32,
            pid,
            flags: 0x80_0000,
            tdname: b"worker",
        },
        B::ThrExit {
            tid: 100_000 + (i % 900) as u32,
        },
        B::ProcCreate {
            pid,
            flags: 0x10,
            pcomm: b"cc",
        },
        B::Dropnotify,
        // A static executable: no dynamic base (a null %p).
        B::Procexec {
            pid,
            pmcid: 0x100,
            base: 0x20_0000,
            dyn_base: 0,
            pathname: b"/rescue/sh",
        },
    ];
    all[n % all.len()]
}

fn generate(path: &str, mib: u64) {
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut written = encode(
        &mut out,
        &PmclogRecord {
            tsc: 0,
            body: B::Initialize {
                version: PMC_VERSION,
                // PMC_CPU_INTEL_SKYLAKE_XEON, which the CPU id names.
                cpu: 0x99,
                tsc_freq: 2_400_000_000,
                ts: Timespec::default(),
                cpuid: b"GenuineIntel-6-55-4",
            },
        },
    ) as u64;
    let pcs: Vec<usize> = (0..64).map(|i| 0x40_0000 + i * 0x140).collect();
    let mut tsc = 1u64;
    let mut i = 0u64;
    // A deterministic mix: 4 call chains of 4..64 frames for each
    // context switch, mapping, user datum or exec record.
    while written < mib << 20 {
        tsc += 997;
        i += 1;
        let depth = 4 + (i * 7919 % 61) as usize;
        let body = match i % 8 {
            // Once in 2048 records, one of the rarer types, in turn.
            5 if i % 2048 == 5 => rare((i / 2048) as usize, i),
            0 => B::Proccsw {
                value: i * 31,
                pmcid: 0x100,
                pid: (i % 500) as u32,
                tid: 100_000 + (i % 900) as u32,
            },
            4 => match i % 3 {
                0 => B::MapIn {
                    pid: (i % 500) as u32,
                    start: 0x80_0000,
                    pathname: b"/lib/libc.so.7",
                },
                1 => B::Userdata { userdata: i as u32 },
                _ => B::Procexec {
                    pid: (i % 500) as u32,
                    pmcid: 0x100,
                    base: 0x20_0000,
                    dyn_base: 0x8000_0000,
                    pathname: b"/usr/bin/cc",
                },
            },
            _ => B::Callchain {
                pid: (i % 500) as u32,
                tid: 100_000 + (i % 900) as u32,
                pmcid: 0x100,
                cpuflags: ((i % 4) << 16) as u32 | 1,
                pcs: PcList::from_words(&pcs[..depth]),
            },
        };
        written += encode(&mut out, &PmclogRecord { tsc, body }) as u64;
    }
    encode(
        &mut out,
        &PmclogRecord {
            tsc: tsc + 1,
            body: B::Closelog,
        },
    );
    out.flush().expect("flush the log");
}

/// A log of `samples` call chains in the functions of the ELF file
/// `elf`, which the log says was exec'd as `exec_path`: 18 frames each,
/// each frame a PC inside one of its functions, chosen by a fixed
/// generator (64 hot chains and 16384 others), so that an analysis
/// resolves every frame.
fn profile(path: &str, samples: u64, elf: &str, exec_path: &str, distinct: u64) {
    let nm = std::process::Command::new("nm")
        .args(["-n", "-S", "--defined-only", elf])
        .output()
        .expect("nm (binutils)");
    let funcs: Vec<(u64, u64)> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && matches!(f[2], "T" | "t")).then(|| {
                let start = u64::from_str_radix(f[0], 16).unwrap_or(0);
                (start, u64::from_str_radix(f[1], 16).unwrap_or(0))
            })
        })
        .filter(|&(_, size)| size >= 4)
        .collect();
    assert!(!funcs.is_empty(), "{elf} has no sized functions");
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut tsc = 1u64;
    let mut rec = |out: &mut BufWriter<std::fs::File>, body: B<'_>| {
        tsc += 997;
        encode(out, &PmclogRecord { tsc, body });
    };
    rec(
        &mut out,
        B::Initialize {
            version: PMC_VERSION,
            cpu: 0x99,
            tsc_freq: 2_400_000_000,
            ts: Timespec::default(),
            cpuid: b"GenuineIntel-6-55-4",
        },
    );
    rec(
        &mut out,
        B::Pmcallocatedyn {
            pmcid: 0x100,
            event: 0,
            flags: 0,
            evname: b"inst_retired.any",
        },
    );
    rec(
        &mut out,
        B::Procexec {
            pid: 42,
            pmcid: 0x100,
            base: 0,
            dyn_base: 0,
            pathname: exec_path.as_bytes(),
        },
    );
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut pcs = [0usize; 18];
    for i in 0..samples {
        // One chain in four is one of 64 hot ones, the rest one of
        // `distinct` (a program's distinct stacks are a few thousand, not
        // millions: 16384 unless asked).
        let seed = if i % 4 == 0 {
            next() % 64
        } else {
            next() % distinct
        };
        let mut y = seed | 1;
        for pc in &mut pcs {
            y = y
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (start, size) = funcs[(y >> 33) as usize % funcs.len()];
            *pc = (start + (y >> 13) % size) as usize;
        }
        rec(
            &mut out,
            B::Callchain {
                pid: 42,
                tid: 100_042,
                pmcid: 0x100,
                cpuflags: (((i % 4) << 16) | 1) as u32,
                pcs: PcList::from_words(&pcs),
            },
        );
    }
    rec(&mut out, B::Closelog);
    out.flush().expect("flush the log");
}

fn read_log(path: &str) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut ev = PmclogEv::zeroed();
    let start = Instant::now();
    let mut parser = Parser::new(file.as_raw_fd());
    let (mut records, mut bytes, mut check) = (0u64, 0u64, 0u64);
    let end = loop {
        match parser.read(&mut ev) {
            PmclogState::Ok => {
                records += 1;
                bytes += ev.pl_len as u64;
                check = check.wrapping_add(ev.pl_ts.tv_sec as u64);
            }
            other => break other,
        }
    };
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(end, PmclogState::Eof, "the log reads to its end");
    println!("{records} {bytes} {secs:.3} {} {check}", peak_rss_kib());
}

/// The log mmapped and fed whole through the C entry points, as a C
/// program that maps its log does.
fn feed_log(path: &str) {
    use pmc::pmclog::{PMCLOG_FD_NONE, pmclog_close, pmclog_feed, pmclog_open, pmclog_read};
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let len = file.metadata().expect("stat the log").len() as usize;
    let len_c = core::ffi::c_int::try_from(len).expect("pmclog_feed takes an int length");
    // SAFETY: a private read-only mapping of the whole open file; nothing
    // else maps or writes it while the benchmark runs.
    let map = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap the log");
    let mut ev = PmclogEv::zeroed();
    let start = Instant::now();
    let (mut records, mut bytes, mut check) = (0u64, 0u64, 0u64);
    let cookie = pmclog_open(PMCLOG_FD_NONE);
    // SAFETY: `cookie` is live until pmclog_close, `ev` is writable, and
    // the mapping holds `len` bytes and outlives the parser.
    unsafe {
        assert_eq!(pmclog_feed(cookie, map.cast(), len_c), 0);
        while pmclog_read(cookie, &mut *ev) == 0 {
            records += 1;
            bytes += ev.pl_len as u64;
            check = check.wrapping_add(ev.pl_ts.tv_sec as u64);
        }
        pmclog_close(cookie);
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(
        ev.pl_state,
        PmclogState::Eof as u32,
        "the log reads to its end"
    );
    println!("{records} {bytes} {secs:.3} {} {check}", peak_rss_kib());
}

fn read_plain(path: &str) {
    let mut file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut buf = vec![0u8; 1 << 20];
    let start = Instant::now();
    let (mut bytes, mut check) = (0u64, 0u64);
    loop {
        let n = file.read(&mut buf).expect("read the file");
        if n == 0 {
            break;
        }
        bytes += n as u64;
        // Touch the data once, as a reader must.
        check = check.wrapping_add(buf[..n].iter().step_by(64).map(|&b| b as u64).sum::<u64>());
    }
    let secs = start.elapsed().as_secs_f64();
    println!("0 {bytes} {secs:.3} {} {check}", peak_rss_kib());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["gen", path, mib] => generate(path, mib.parse().expect("MiB")),
        ["read", path] => read_log(path),
        ["feed", path] => feed_log(path),
        ["plain", path] => read_plain(path),
        ["profile", path, n, elf, exec] => {
            profile(path, n.parse().expect("samples"), elf, exec, 16384)
        }
        ["profile", path, n, elf, exec, distinct] => profile(
            path,
            n.parse().expect("samples"),
            elf,
            exec,
            distinct.parse::<u64>().expect("distinct chains").max(1),
        ),
        _ => {
            eprintln!(
                "usage: pmclog-bench gen FILE MIB | read FILE | feed FILE | plain FILE | \
                 profile FILE SAMPLES ELF PATH [DISTINCT]"
            );
            std::process::exit(64);
        }
    }
}

//! Writes seed logs for the pmclog_read fuzz target: one file per record
//! type and one log holding them all, each prefixed with the target's
//! chunk-size byte.
//!
//! Usage: pmclog_seeds DIR

use uapi::pmc::PMC_VERSION;
use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord, Timespec};

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: pmclog_seeds DIR");
        std::process::exit(64);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let pcs = [0x40_1000usize, 0x40_2000, 0xffff_ffff_8000_0000];
    let bodies = [
        B::Initialize {
            version: PMC_VERSION,
            cpu: 0x10,
            tsc_freq: 2_000_000_000,
            ts: Timespec {
                tv_sec: 1,
                tv_nsec: 2,
            },
            cpuid: b"GenuineIntel-6-55-4",
        },
        B::Pmcallocate {
            pmcid: 0x100,
            event: 0x2000,
            flags: 0x20,
            rate: 65536,
        },
        B::Pmcallocatedyn {
            pmcid: 0x200,
            event: 0x3000,
            flags: 0x10,
            evname: b"SOFT-CLOCK.HARD",
        },
        B::Pmcattach {
            pmcid: 0x100,
            pid: 42,
            pathname: b"/usr/bin/make",
        },
        B::Pmcdetach {
            pmcid: 0x100,
            pid: 42,
        },
        B::Proccsw {
            value: 123,
            pmcid: 0x100,
            pid: 42,
            tid: 100_042,
        },
        B::Procexec {
            pid: 42,
            pmcid: 0x100,
            base: 0x20_0000,
            dyn_base: 0x8000_0000,
            pathname: b"/bin/sh",
        },
        B::Procexit {
            pmcid: 0x100,
            pid: 42,
            value: 987,
        },
        B::Procfork {
            oldpid: 42,
            newpid: 43,
        },
        B::Sysexit { pid: 43 },
        B::Userdata { userdata: 7 },
        B::MapIn {
            pid: 42,
            start: 0x80_0000,
            pathname: b"/lib/libc.so.7",
        },
        B::MapOut {
            pid: 42,
            start: 0x80_0000,
            end: 0x90_0000,
        },
        B::Callchain {
            pid: 42,
            tid: 100_042,
            pmcid: 0x100,
            cpuflags: 1,
            pcs: PcList::from_words(&pcs),
        },
        B::ThrCreate {
            tid: 100_043,
            pid: 42,
            flags: 0,
            tdname: b"worker",
        },
        B::ThrExit { tid: 100_043 },
        B::ProcCreate {
            pid: 44,
            flags: 0,
            pcomm: b"cc",
        },
        B::Dropnotify,
        B::Closelog,
    ];
    let mut all = vec![7u8];
    for (i, body) in bodies.into_iter().enumerate() {
        let rec = PmclogRecord {
            tsc: 1000 + i as u64,
            body,
        };
        let mut bytes = vec![0u8; rec.encoded_len()];
        rec.encode(&mut bytes).expect("seed records encode");
        all.extend_from_slice(&bytes);
        let mut one = vec![3u8];
        one.extend_from_slice(&bytes);
        let path = dir.join(format!("{:02}-{:?}", i, rec.kind()));
        std::fs::write(&path, one).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let path = dir.join("all-records");
    std::fs::write(&path, all).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

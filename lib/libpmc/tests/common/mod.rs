//! Log records for the pmclog tests and the fuzz seeds: one record of
//! every type, and their bytes.

use uapi::pmc::PMC_VERSION;
use uapi::pmclog::{PcList, PmclogBody as B, PmclogRecord, Timespec};

pub const FREQ: u64 = 2_000_000_000;
pub const T0: u64 = 1_000_000;
pub const PCS: [usize; 3] = [0x40_1000, 0x40_2000, 0xffff_ffff_8000_0000];

/// One record of every type, INITIALIZE first and CLOSELOG last, each
/// 1/1000 s after the previous one.
pub fn every_record() -> Vec<PmclogRecord<'static>> {
    let bodies = [
        B::Initialize {
            version: PMC_VERSION,
            cpu: 0x10,
            tsc_freq: FREQ,
            ts: Timespec {
                tv_sec: 1_700_000_000,
                tv_nsec: 999_000_000,
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
            evname: b"inst_retired.any",
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
            value: 123_456_789,
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
        B::Userdata {
            userdata: 0xdead_beef,
        },
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
            cpuflags: (3 << 16) | 1,
            pcs: PcList::from_words(&PCS),
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
    bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| PmclogRecord {
            tsc: T0 + i as u64 * (FREQ / 1000),
            body,
        })
        .collect()
}

pub fn encode(records: &[PmclogRecord<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        let mut buf = vec![0u8; r.encoded_len()];
        assert_eq!(r.encode(&mut buf).unwrap(), buf.len());
        out.extend_from_slice(&buf);
    }
    out
}

//! pmclog encoding and decoding: every record type round-trips, byte
//! layouts match the C structs, and malformed input is rejected.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use core::mem::{offset_of, size_of};

use uapi::pmc::PMC_VERSION;
use uapi::pmclog::*;

const W: usize = size_of::<usize>();

fn samples() -> Vec<PmclogRecord<'static>> {
    static PCS: [usize; 5] = [0x40_1000, 0x40_2000, 0x40_3000, 0xffff_8000, 7];
    let b = |body| PmclogRecord {
        tsc: 0x1122_3344_5566_7788,
        body,
    };
    use PmclogBody as B;
    vec![
        b(B::Closelog),
        b(B::Dropnotify),
        b(B::Initialize {
            version: PMC_VERSION,
            cpu: 0x98,
            tsc_freq: 2_400_000_000,
            ts: Timespec {
                tv_sec: 1_790_000_000,
                tv_nsec: 999_999_999,
            },
            cpuid: b"GenuineIntel-6-55-4",
        }),
        b(B::Pmcallocate {
            pmcid: 0xFFF2_0700,
            event: 0x10000,
            flags: 0x82,
            rate: 65536,
        }),
        b(B::Pmcattach {
            pmcid: 0xFFF3_0F00,
            pid: 4242,
            pathname: b"/usr/bin/make",
        }),
        b(B::Pmcattach {
            pmcid: 1,
            pid: 2,
            pathname: b"",
        }),
        b(B::Pmcdetach {
            pmcid: 0xFFF3_0F00,
            pid: 4242,
        }),
        b(B::Proccsw {
            value: 123_456_789,
            pmcid: 5,
            pid: 6,
            tid: 100_007,
        }),
        b(B::Procexec {
            pid: 77,
            pmcid: 0x00F2_0000,
            base: 0x8_0000_0000,
            dyn_base: 0x20_0000,
            pathname: b"/bin/sh",
        }),
        b(B::Procexit {
            pmcid: 9,
            pid: 77,
            value: u64::MAX,
        }),
        b(B::Procfork {
            oldpid: 77,
            newpid: 78,
        }),
        b(B::Sysexit { pid: 78 }),
        b(B::Userdata {
            userdata: 0xDEAD_BEEF,
        }),
        b(B::MapIn {
            pid: 77,
            start: 0x40_0000,
            pathname: b"/lib/libc.so.7",
        }),
        b(B::MapIn {
            pid: 77,
            start: 0x40_0000,
            pathname: b"abc",
        }),
        b(B::MapOut {
            pid: 77,
            start: 0x40_0000,
            end: 0x48_0000,
        }),
        b(B::Callchain {
            pid: 77,
            tid: 100_077,
            pmcid: 0x0012_0000,
            cpuflags: pmc_callchain_to_cpuflags(3, 1),
            pcs: PcList::from_words(&PCS),
        }),
        b(B::Pmcallocatedyn {
            pmcid: 0xFFF2_0F00,
            event: 0x20001,
            flags: 0,
            evname: b"CLOCK.HARD",
        }),
        b(B::ThrCreate {
            tid: 100_078,
            pid: 78,
            flags: 0x1000,
            tdname: b"worker",
        }),
        b(B::ThrExit { tid: 100_078 }),
        b(B::ProcCreate {
            pid: 78,
            flags: 0x4000,
            pcomm: b"cc",
        }),
    ]
}

#[test]
fn every_record_type_round_trips() {
    let recs = samples();
    let mut seen = std::collections::BTreeSet::new();
    for rec in &recs {
        let mut buf = vec![0xAAu8; 8192];
        let n = rec.encode(&mut buf).expect("encode");
        assert_eq!(n, rec.encoded_len());
        assert_eq!(n % 4, 0, "{:?} length not a multiple of 4", rec.kind());
        let (back, used) = decode(&buf[..n]).expect("decode");
        assert_eq!(used, n);
        assert_eq!(&back, rec);
        seen.insert(rec.kind());
    }
    assert_eq!(
        seen.len(),
        PmclogType::ALL.len(),
        "a record type has no sample"
    );
}

#[test]
fn header_word_layout() {
    let rec = PmclogRecord {
        tsc: 42,
        body: PmclogBody::Userdata { userdata: 7 },
    };
    let mut buf = [0u8; 24];
    rec.encode(&mut buf).unwrap();
    let h = u32::from_ne_bytes(buf[0..4].try_into().unwrap());
    assert_eq!(h, 0xEE0D_0018, "magic 0xEE, type 13, length 24");
    assert_eq!(&buf[4..8], &[0; 4], "spare word");
    assert_eq!(u64::from_ne_bytes(buf[8..16].try_into().unwrap()), 42);
    assert_eq!(u32::from_ne_bytes(buf[16..20].try_into().unwrap()), 7);
    assert_eq!(&buf[20..24], &[0; 4], "pad");
}

#[test]
fn fixed_sizes_match_the_c_structs() {
    let lp64 = W == 8;
    assert_eq!(size_of::<PmclogHeader>(), 16);
    assert_eq!(size_of::<PmclogInitialize>(), if lp64 { 112 } else { 104 });
    assert_eq!(size_of::<PmclogPmcallocate>(), 40);
    assert_eq!(size_of::<PmclogPmcallocatedyn>(), 96);
    assert_eq!(size_of::<PmclogProccsw>(), 40);
    assert_eq!(size_of::<PmclogProccreate>(), 44);
    assert_eq!(size_of::<PmclogThreadcreate>(), 52);
    assert_eq!(size_of::<PmclogMapOut>(), 24 + 2 * W);
    assert_eq!(size_of::<PmclogCallchain>(), 32 + 512 * W);
    assert_eq!(offset_of!(PmclogProcexec, pl_pathname), 24 + 2 * W);
}

#[test]
fn initialize_bytes_sit_at_the_c_offsets() {
    let recs = samples();
    let rec = recs
        .iter()
        .find(|r| r.kind() == PmclogType::Initialize)
        .unwrap();
    let mut buf = vec![0u8; 256];
    let n = rec.encode(&mut buf).unwrap();
    let at = |off: usize, len: usize| &buf[off..off + len];
    assert_eq!(n, size_of::<PmclogInitialize>());
    assert_eq!(
        at(offset_of!(PmclogInitialize, pl_version), 4),
        &PMC_VERSION.to_ne_bytes()
    );
    assert_eq!(
        at(offset_of!(PmclogInitialize, pl_cpu), 4),
        &0x98u32.to_ne_bytes()
    );
    assert_eq!(
        at(offset_of!(PmclogInitialize, pl_tsc_freq), 8),
        &2_400_000_000u64.to_ne_bytes()
    );
    assert_eq!(
        at(offset_of!(PmclogInitialize, pl_ts), W),
        &1_790_000_000usize.to_ne_bytes()
    );
    let cpuid = offset_of!(PmclogInitialize, pl_cpuid);
    assert_eq!(&buf[cpuid..cpuid + 20], b"GenuineIntel-6-55-4\0");
    assert!(buf[cpuid + 20..n].iter().all(|&b| b == 0));
}

#[test]
fn callchain_and_map_in_bytes() {
    let pcs = [0x1111usize, 0x2222, 0x3333];
    let rec = PmclogRecord {
        tsc: 1,
        body: PmclogBody::Callchain {
            pid: 10,
            tid: 11,
            pmcid: 12,
            cpuflags: pmc_callchain_to_cpuflags(2, 1),
            pcs: PcList::from_words(&pcs),
        },
    };
    let mut buf = vec![0u8; 128];
    let n = rec.encode(&mut buf).unwrap();
    assert_eq!(n, 32 + 3 * W);
    let word = |off: usize| u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap());
    assert_eq!(pmclog_header_to_length(word(0)) as usize, n);
    assert_eq!(pmclog_header_to_type(word(0)), 16);
    assert_eq!((word(16), word(20), word(24)), (10, 11, 12));
    assert_eq!(pmc_callchain_cpuflags_to_cpu(word(28)), 2);
    assert_eq!(pmc_callchain_cpuflags_to_usermode(word(28)), 1);
    let pc1 = offset_of!(PmclogCallchain, pl_pc) + W;
    assert_eq!(&buf[pc1..pc1 + W], &0x2222usize.to_ne_bytes());

    // MAP_IN: the path and its NUL, rounded up to 4 with zeros.
    let rec = PmclogRecord {
        tsc: 0,
        body: PmclogBody::MapIn {
            pid: 3,
            start: 0x1000,
            pathname: b"/a/bc",
        },
    };
    let n = rec.encode(&mut buf).unwrap();
    let path = offset_of!(PmclogMapIn, pl_pathname);
    assert_eq!(n, path + 8, "5 bytes + NUL rounded to 8");
    assert_eq!(&buf[path..path + 8], b"/a/bc\0\0\0");
}

#[test]
fn every_prefix_of_a_record_asks_for_more() {
    for rec in samples() {
        let mut buf = vec![0u8; 8192];
        let n = rec.encode(&mut buf).unwrap();
        for cut in 0..n {
            match decode(&buf[..cut]) {
                Err(PmclogDecodeError::Truncated { needed }) => {
                    assert!(
                        needed > cut && needed <= n,
                        "{:?} cut {cut}: needed {needed}",
                        rec.kind()
                    )
                }
                other => panic!("{:?} cut at {cut}: {other:?}", rec.kind()),
            }
        }
    }
}

fn with_header(h: u32, total: usize) -> Vec<u8> {
    let mut v = vec![0u8; total];
    v[..4].copy_from_slice(&h.to_ne_bytes());
    v
}

#[test]
fn malformed_headers_are_rejected() {
    let bad_magic = with_header(0xEF0D_0018, 24);
    assert_eq!(
        decode(&bad_magic).unwrap_err(),
        PmclogDecodeError::BadMagic {
            header: 0xEF0D_0018
        }
    );
    let zero = with_header(0xEE0D_0000, 24);
    assert!(matches!(
        decode(&zero),
        Err(PmclogDecodeError::BadLength { len: 0, .. })
    ));
    let unaligned = with_header(0xEE0D_0017, 24);
    assert!(matches!(
        decode(&unaligned),
        Err(PmclogDecodeError::BadLength { len: 23, .. })
    ));
    let short_fixed = with_header(0xEE0D_0014, 24);
    assert!(matches!(
        decode(&short_fixed),
        Err(PmclogDecodeError::BadLength { kind: 13, len: 20 })
    ));
    let oversized_map_in = with_header(pmclog_to_header(PmclogType::MapIn, 0x8000), 0x8000);
    assert!(matches!(
        decode(&oversized_map_in),
        Err(PmclogDecodeError::BadLength { .. })
    ));
    let chain_tail = with_header(
        pmclog_to_header(PmclogType::Callchain, (32 + W + 4) as u32),
        64,
    );
    if W == 8 {
        assert!(matches!(
            decode(&chain_tail),
            Err(PmclogDecodeError::BadLength { .. })
        ));
    }
    let deep = 32 + 513 * W;
    let too_deep = with_header(pmclog_to_header(PmclogType::Callchain, deep as u32), deep);
    assert!(matches!(
        decode(&too_deep),
        Err(PmclogDecodeError::BadLength { .. })
    ));
    let mut no_nul = with_header(pmclog_to_header(PmclogType::MapIn, 40), 40);
    no_nul[32..40].copy_from_slice(b"/bin/abc");
    if W == 8 {
        assert_eq!(
            decode(&no_nul).unwrap_err(),
            PmclogDecodeError::UnterminatedString { kind: 14 }
        );
    }
    let retired = with_header(0xEE04_0010, 16);
    assert_eq!(
        decode(&retired).unwrap_err(),
        PmclogDecodeError::UnknownType { kind: 4 }
    );
    let beyond = with_header(0xEE15_0010, 16);
    assert_eq!(
        decode(&beyond).unwrap_err(),
        PmclogDecodeError::UnknownType { kind: 21 }
    );
}

#[test]
fn encoding_refuses_what_the_format_cannot_hold() {
    let long = vec![b'x'; 1024];
    let rec = PmclogRecord {
        tsc: 0,
        body: PmclogBody::MapIn {
            pid: 1,
            start: 0,
            pathname: &long,
        },
    };
    assert_eq!(
        rec.encode(&mut [0u8; 4096]),
        Err(PmclogEncodeError::PathTooLong)
    );
    let longest = vec![b'x'; 1023];
    let rec = PmclogRecord {
        tsc: 0,
        body: PmclogBody::MapIn {
            pid: 1,
            start: 0,
            pathname: &longest,
        },
    };
    let mut buf = vec![0u8; 4096];
    let n = rec.encode(&mut buf).unwrap();
    assert_eq!(
        decode(&buf[..n]).unwrap().0,
        rec,
        "a PATH_MAX-1 path is the longest accepted"
    );
    let pcs = vec![1usize; 513];
    let rec = PmclogRecord {
        tsc: 0,
        body: PmclogBody::Callchain {
            pid: 0,
            tid: 0,
            pmcid: 0,
            cpuflags: 0,
            pcs: PcList::from_words(&pcs),
        },
    };
    assert_eq!(
        rec.encode(&mut vec![0u8; 8192]),
        Err(PmclogEncodeError::CallchainTooDeep)
    );
    let rec = PmclogRecord {
        tsc: 0,
        body: PmclogBody::Sysexit { pid: 1 },
    };
    assert_eq!(
        rec.encode(&mut [0u8; 23]),
        Err(PmclogEncodeError::BufferTooSmall { needed: 24 })
    );
}

#[test]
fn a_stream_of_records_reads_back_in_order() {
    let recs = samples();
    let mut log = Vec::new();
    for rec in &recs {
        let mut buf = vec![0u8; 8192];
        let n = rec.encode(&mut buf).unwrap();
        log.extend_from_slice(&buf[..n]);
    }
    let back: Vec<_> = records(&log).collect::<Result<_, _>>().unwrap();
    assert_eq!(back, recs);
    // A corrupted middle record stops the stream with the error.
    let mut broken = log.clone();
    let second = recs[0].encoded_len();
    broken[second + 3] = 0x12;
    let out: Vec<_> = records(&broken).collect();
    assert_eq!(out.len(), 2);
    assert!(out[1].is_err());
}

#[test]
fn arbitrary_bytes_never_panic_or_overread() {
    // Deterministic xorshift inputs; headers are biased towards valid
    // magic and types so the length and body checks are exercised.
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..20_000 {
        let len = (next() % 200) as usize;
        let mut buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if len >= 4 && next() % 4 != 0 {
            let kind = (next() % 22) as u32;
            let rlen = (next() % 256) as u32 & !3;
            buf[..4].copy_from_slice(&(0xEE00_0000 | (kind << 16) | rlen).to_ne_bytes());
        }
        if let Ok((rec, used)) = decode(&buf) {
            assert!(used <= buf.len());
            let mut out = vec![0u8; 8192];
            let n = rec.encode(&mut out).unwrap();
            assert!(n <= used, "re-encoding can only drop trailing string bytes");
        }
    }
}

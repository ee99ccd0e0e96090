//! Profiles of known workloads: programs in synthetic ELF images run on the
//! simulated machine, a SOFT sampling PMC profiles them, and the log must
//! show the configured distribution over functions, the configured call
//! chains, and the mapping and process records a reader needs.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use std::collections::BTreeMap;

use common::*;
use ksim::elf::{Image, ImageBuilder, ImageKind, KERNEL_BASE};
use ksim::workload::Program;
use ksim::{FileKind, MachineConfig};
use uapi::pmc::*;
use uapi::pmclog::{
    PmclogBody, PmclogCallchain, PmclogInitialize, PmclogMapIn, PmclogType, records,
};

fn image() -> Image {
    ImageBuilder::new("/usr/bin/work", ImageKind::Executable)
        .function("main", 64)
        .function("compute", 256)
        .function("hash", 128)
        .function("io", 96)
        .build()
}

fn program(img: &Image, seed: u64) -> Program {
    Program::builder(img, 0, seed)
        .func("compute", 50, &["main"])
        .func("hash", 30, &["compute", "main"])
        .func("io", 15, &["main"])
        .func("main", 5, &[])
        .build()
}

fn sampling_pmc(s: &Sim, owner: P, mode: PmcMode, cpu: u32, flags: PmcFlags) -> PmcId {
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    a.pm_mode = mode.raw();
    a.pm_cpu = if mode.is_virtual() { PMC_CPU_ANY } else { cpu };
    a.pm_flags = flags.bits();
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = 1;
    s.allocate_raw(owner, &a).unwrap()
}

#[test]
fn sample_shares_follow_the_workloads_rates_and_chains_its_callers() {
    let s = Sim::with(MachineConfig::default(), &[("kern.hwpmc.mincount", "1")]);
    let img = image();
    s.m.install("/usr/bin/work", img.bytes.clone());
    let owner = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let worker = s.root();
    s.m.exec(worker.pid, "/usr/bin/work", None);
    let prog = program(&img, 42);
    s.m.set_activity(worker.tid, Box::new(prog.clone()));
    let id = sampling_pmc(&s, owner, PmcMode::Ts, 0, PmcFlags::CALLCHAIN);
    s.attach(owner, id, worker.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    for round in 0..400 {
        s.run(worker, round % 4, 10);
    }
    s.configurelog(owner, -1, 0).unwrap();

    let data = s.file(owner, fd);
    let recs: Vec<_> = records(&data).collect::<Result<_, _>>().unwrap();
    let mut by_fn: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0usize;
    for r in &recs {
        let PmclogBody::Callchain {
            pid, pmcid, pcs, ..
        } = r.body
        else {
            continue;
        };
        assert_eq!((pid, pmcid), (worker.pid, id));
        let pcs: Vec<u64> = pcs.iter().map(|p| p as u64).collect();
        let (name, _) = img
            .symbolize(pcs[0], 0)
            .expect("every sampled PC is in a function");
        // The chain is the function's configured callers, at their call
        // sites.
        let callers: &[&str] = match name {
            "hash" => &["compute", "main"],
            "compute" | "io" => &["main"],
            _ => &[],
        };
        let mut callee = name;
        for (i, caller) in callers.iter().enumerate() {
            assert_eq!(
                pcs[i + 1],
                prog.call_site(caller, callee),
                "{name}: frame {}",
                i + 1
            );
            callee = caller;
        }
        assert_eq!(pcs.len(), 1 + callers.len());
        *by_fn.entry(name.to_string()).or_default() += 1;
        total += 1;
    }
    // 4000 ticks, a sample every tick after the first of each time slice.
    assert!(total > 3000, "{total} samples");
    for f in prog.functions() {
        let got = by_fn.get(f).copied().unwrap_or(0) as f64 / total as f64;
        let want = prog.expected_share(f);
        assert!(
            (got - want).abs() < 0.04,
            "{f}: {got:.3} of samples, configured {want:.3}"
        );
    }
    // The reader can map the PCs: the target's executable and the kernel.
    let map_ins: Vec<(u32, usize, &[u8])> = recs
        .iter()
        .filter_map(|r| match r.body {
            PmclogBody::MapIn {
                pid,
                start,
                pathname,
            } => Some((pid, start, pathname)),
            _ => None,
        })
        .collect();
    assert!(
        map_ins.contains(&(worker.pid, img.base as usize, &b"/usr/bin/work"[..])),
        "{map_ins:?}"
    );
    assert!(map_ins.contains(&(u32::MAX, KERNEL_BASE as usize, &b"/boot/kernel/kernel"[..])));
    s.finish();
}

#[test]
fn system_samplers_hear_of_mappings_modules_processes_and_threads() {
    let s = Sim::with(MachineConfig::default(), &[("kern.hwpmc.mincount", "1")]);
    let owner = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let before = s.root();
    s.m.exec(before.pid, "/usr/bin/old", None);
    let id = sampling_pmc(&s, owner, PmcMode::Ss, 1, PmcFlags::empty());
    s.start(owner, id).unwrap();
    let p = s.root();
    let child = s.fork(p);
    s.m.mmap(child.pid, "/lib/libc.so.7", 0x8_0000_0000, 0x10_0000);
    s.m.munmap(child.pid, 0x8_0000_0000, 0x10_0000);
    let t = s.m.thread_create(child.pid);
    s.m.thread_exit(t);
    s.m.kld_load(
        owner.tid,
        "/boot/kernel/if_em.ko",
        0xffff_ffff_8300_0000,
        0x4_0000,
    );
    s.m.kld_unload(owner.tid, 0xffff_ffff_8300_0000);
    s.m.exit(child.pid);
    s.configurelog(owner, -1, 0).unwrap();

    let data = s.file(owner, fd);
    let recs: Vec<_> = records(&data).collect::<Result<_, _>>().unwrap();
    let has = |want: &PmclogBody<'_>| recs.iter().any(|r| &r.body == want);
    assert!(
        has(&PmclogBody::MapIn {
            pid: before.pid,
            start: 0x40_0000,
            pathname: b"/usr/bin/old"
        }),
        "existing processes"
    );
    assert!(recs.iter().any(|r| matches!(r.body, PmclogBody::ProcCreate { pid, pcomm, .. } if pid == before.pid && pcomm == b"old")));
    assert!(has(&PmclogBody::Procfork {
        oldpid: p.pid,
        newpid: child.pid
    }));
    assert!(
        recs.iter()
            .any(|r| matches!(r.body, PmclogBody::ProcCreate { pid, .. } if pid == child.pid))
    );
    assert!(has(&PmclogBody::MapIn {
        pid: child.pid,
        start: 0x8_0000_0000,
        pathname: b"/lib/libc.so.7"
    }));
    assert!(has(&PmclogBody::MapOut {
        pid: child.pid,
        start: 0x8_0000_0000,
        end: 0x8_0010_0000
    }));
    assert!(recs.iter().any(
        |r| matches!(r.body, PmclogBody::ThrCreate { tid, pid, .. } if tid == t && pid == child.pid)
    ));
    assert!(has(&PmclogBody::ThrExit { tid: t }));
    assert!(has(&PmclogBody::MapIn {
        pid: u32::MAX,
        start: 0xffff_ffff_8300_0000,
        pathname: b"/boot/kernel/if_em.ko"
    }));
    assert!(has(&PmclogBody::MapOut {
        pid: u32::MAX,
        start: 0xffff_ffff_8300_0000,
        end: 0xffff_ffff_8304_0000
    }));
    assert!(has(&PmclogBody::Sysexit { pid: child.pid }));
    s.finish();
}

#[test]
fn the_logs_bytes_sit_at_freebsds_offsets() {
    // uapi's offsets are the ones tools/abi-check proves equal to
    // FreeBSD's pmclog.h on amd64, arm64 and i386.
    use core::mem::offset_of;
    let s = Sim::with(MachineConfig::default(), &[("kern.hwpmc.mincount", "1")]);
    let img = image();
    s.m.install("/usr/bin/work", img.bytes.clone());
    let owner = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let w = s.root();
    s.m.exec(w.pid, "/usr/bin/work", None);
    s.m.set_activity(w.tid, Box::new(program(&img, 7)));
    let id = sampling_pmc(&s, owner, PmcMode::Ts, 0, PmcFlags::CALLCHAIN);
    s.attach(owner, id, w.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    s.run(w, 2, 3);
    s.configurelog(owner, -1, 0).unwrap();
    let data = s.file(owner, fd);

    let u32_at = |off: usize| u32::from_ne_bytes(data[off..off + 4].try_into().unwrap());
    let u64_at = |off: usize| u64::from_ne_bytes(data[off..off + 8].try_into().unwrap());
    let mut off = 0;
    let mut seen = BTreeMap::new();
    while off < data.len() {
        let h = u32_at(off);
        assert_eq!(h >> 24, 0xEE, "magic at {off}");
        let (kind, len) = ((h >> 16) & 0xFF, (h & 0xFFFF) as usize);
        assert!(len >= 16 && len % 4 == 0);
        match PmclogType::from_raw(kind).unwrap() {
            PmclogType::Initialize => {
                assert_eq!(len, core::mem::size_of::<PmclogInitialize>());
                assert_eq!(
                    u32_at(off + offset_of!(PmclogInitialize, pl_version)),
                    PMC_VERSION
                );
                assert_eq!(
                    u32_at(off + offset_of!(PmclogInitialize, pl_cpu)),
                    PmcCputype::Generic.raw()
                );
                assert_eq!(
                    u64_at(off + offset_of!(PmclogInitialize, pl_tsc_freq)),
                    2_400_000_000
                );
                let cpuid = off + offset_of!(PmclogInitialize, pl_cpuid);
                assert_eq!(&data[cpuid..cpuid + 20], b"GenuineIntel-6-55-4\0");
            }
            PmclogType::Callchain => {
                assert_eq!(u32_at(off + offset_of!(PmclogCallchain, pl_pid)), w.pid);
                assert_eq!(u32_at(off + offset_of!(PmclogCallchain, pl_tid)), w.tid);
                assert_eq!(u32_at(off + offset_of!(PmclogCallchain, pl_pmcid)), id);
                assert_eq!(
                    u32_at(off + offset_of!(PmclogCallchain, pl_cpuflags)) >> 16,
                    2
                );
                let pc0 = u64_at(off + offset_of!(PmclogCallchain, pl_pc));
                assert!(img.symbolize(pc0, 0).is_some());
                assert_eq!((len - offset_of!(PmclogCallchain, pl_pc)) % 8, 0);
            }
            PmclogType::MapIn => {
                let start = u64_at(off + offset_of!(PmclogMapIn, pl_start));
                let path = off + offset_of!(PmclogMapIn, pl_pathname);
                let name = &data[path..off + len];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
                if name == b"/usr/bin/work" {
                    assert_eq!(u32_at(off + offset_of!(PmclogMapIn, pl_pid)), w.pid);
                    assert_eq!(start, img.base);
                }
            }
            _ => {}
        }
        *seen.entry(kind).or_insert(0) += 1;
        off += len;
    }
    assert_eq!(off, data.len(), "records tile the file exactly");
    for k in [
        PmclogType::Initialize,
        PmclogType::Callchain,
        PmclogType::MapIn,
    ] {
        assert!(seen.contains_key(&k.raw()), "{k:?} present");
    }
    s.finish();
}

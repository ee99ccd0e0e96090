//! pmc(3) through the Rust API on the simulator transport: the version
//! handshake, event specifications, counting with SOFT and TSC PMCs, the
//! row table, and the errors FreeBSD's library reports.

use pmc::libpmc_sim::{SimConfig, SimTransport};
use pmc::pmc::{Pmc, event_name_matches};
use uapi::pmc::*;
use uapi::pmc_events::{PMC_EV_K8_FIRST, PMC_EV_K8_LAST, PMC_EV_TSC_TSC};

fn machine(cpus: u32) -> Pmc {
    boot(SimConfig {
        cpus,
        comm: "pmc_api".into(),
        ..SimConfig::default()
    })
}

fn boot(cfg: SimConfig) -> Pmc {
    let t = SimTransport::boot(cfg).expect("the simulated machine boots");
    Pmc::init(Box::new(t)).expect("pmc_init on the simulator")
}

/// The pid of the machine's process named `comm` (its workload).
fn pid_of(pmc: &Pmc, comm: &str) -> i32 {
    let procs = pmc.transport().simulator().unwrap().processes().unwrap();
    let found: Vec<u32> = procs
        .iter()
        .filter(|(_, c)| c == comm)
        .map(|&(p, _)| p)
        .collect();
    assert_eq!(found.len(), 1, "one {comm} among {procs:?}");
    found[0] as i32
}

/// Runs `session` with the log on a new temporary file, then closes the
/// log: the CALLCHAIN records the file holds.
fn logged_samples(pmc: &Pmc, session: impl FnOnce()) -> usize {
    use std::os::fd::AsRawFd;
    let path = std::env::temp_dir().join(format!(
        "pmc-api-samples-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::File::create(&path).unwrap();
    pmc.configure_logfile(file.as_raw_fd()).unwrap();
    session();
    pmc.close_logfile().unwrap();
    let types = log_events(&std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    types
        .iter()
        .filter(|&&t| t == uapi::pmclog::PmclogType::Callchain.raw())
        .count()
}

#[test]
fn init_reads_the_machine() {
    let pmc = machine(3);
    let ci = pmc.cpuinfo();
    assert_eq!(ci.pm_ncpu, 3);
    let classes: Vec<u32> = ci.pm_classes[..ci.pm_nclass as usize]
        .iter()
        .map(|c| c.pm_class)
        .collect();
    assert!(classes.contains(&PmcClass::Soft.raw()), "{classes:?}");
    assert!(classes.contains(&PmcClass::Tsc.raw()), "{classes:?}");
    let soft: Vec<_> = pmc
        .events_of_class(PmcClass::Soft)
        .unwrap()
        .iter()
        .map(|e| e.name.to_str().unwrap().to_owned())
        .collect();
    for want in ["CLOCK.HARD", "CLOCK.STAT", "PAGE_FAULT.ALL"] {
        assert!(
            soft.iter().any(|s| s == want),
            "{want} missing from {soft:?}"
        );
    }
    // libpmc's static tables, whether or not the machine has the class
    // (FreeBSD's pmc_event_names_of_class); none for IAP, whose events
    // are the PMU tables'.
    let k8 = pmc.events_of_class(PmcClass::K8).unwrap();
    assert_eq!(k8[0].name.to_str(), Ok("FP_DISPATCHED_FPU_OPS"));
    assert_eq!(k8.len(), (PMC_EV_K8_LAST - PMC_EV_K8_FIRST + 1) as usize);
    let tsc: Vec<_> = pmc
        .events_of_class(PmcClass::Tsc)
        .unwrap()
        .iter()
        .map(|e| e.name.to_str().unwrap())
        .collect();
    assert_eq!(tsc, ["cycles"]);
    assert_eq!(
        pmc.events_of_class(PmcClass::Iap).unwrap_err(),
        libc::EINVAL
    );
    // Every row of every CPU is described.
    let rows = pmc.pmcinfo(2).unwrap();
    assert_eq!(rows.len(), ci.pm_npmc as usize);
    assert!(rows.iter().all(|r| r.pm_rowdisp == PmcDisp::Free.raw()));
    assert_eq!(pmc.pmcinfo(3).unwrap_err(), libc::EINVAL);
}

#[test]
fn event_names_match_as_in_freebsd() {
    assert!(event_name_matches("clock.hard", "CLOCK.HARD"));
    assert!(event_name_matches("Clock-Hard", "CLOCK.HARD"));
    assert!(event_name_matches("CLOCK_HARD", "CLOCK.HARD"));
    assert!(!event_name_matches("CLOCK.HAR", "CLOCK.HARD"));
    assert!(!event_name_matches("CLOCKXHARD", "CLOCK.HARD"));
}

#[test]
fn specifications_become_allocation_requests() {
    let pmc = machine(2);
    let hard = pmc
        .events_of_class(PmcClass::Soft)
        .unwrap()
        .iter()
        .find(|e| e.name.to_bytes() == b"CLOCK.HARD")
        .unwrap()
        .code;
    for spec in [
        "SOFT-CLOCK.HARD",
        "soft-clock-hard",
        "CLOCK.HARD",
        "SOFT-CLOCK.HARD,usr",
    ] {
        let a = pmc
            .parse_spec(spec, PmcMode::Ts, 0, PMC_CPU_ANY, 100)
            .unwrap();
        assert_eq!(
            (a.pm_class, a.pm_ev),
            (PmcClass::Soft.raw(), hard),
            "{spec}"
        );
        assert_eq!(
            a.pm_caps,
            (PmcCaps::INTERRUPT | PmcCaps::READ | PmcCaps::WRITE).bits(),
            "{spec}"
        );
        assert_eq!(
            (a.pm_mode, a.pm_count, a.pm_cpu),
            (PmcMode::Ts.raw(), 100, PMC_CPU_ANY)
        );
    }
    for spec in ["TSC", "tsc-tsc", "TSC-TSC"] {
        let a = pmc.parse_spec(spec, PmcMode::Sc, 0, 1, 0).unwrap();
        assert_eq!(
            (a.pm_class, a.pm_ev, a.pm_caps),
            (PmcClass::Tsc.raw(), 0x1000, PmcCaps::READ.bits()),
            "{spec}"
        );
    }
    // The last two are not ASCII (the event_spec fuzz target found that
    // the first used to panic).
    for bad in [
        "",
        "NO-SUCH-EVENT",
        "SOFT-TSC",
        "TSC,usr",
        "SOFT-",
        "K8-FP_DISPATCHED_FPU_OPS",
        "SO\u{20ac}X",
        "\u{1F600}",
    ] {
        assert_eq!(
            pmc.parse_spec(bad, PmcMode::Sc, 0, 0, 0).unwrap_err(),
            libc::EINVAL,
            "{bad:?}"
        );
    }
    assert_eq!(
        pmc.allocate("SOFT-CLOCK.HARD", 9, 0, -1, 0).unwrap_err(),
        libc::EINVAL,
        "bad mode"
    );
}

#[test]
fn a_soft_pmc_counts_the_programs_ticks() {
    let pmc = machine(2);
    let id = pmc
        .allocate(
            "SOFT-CLOCK.HARD",
            PmcMode::Tc.raw(),
            0,
            PMC_CPU_ANY as i32,
            0,
        )
        .unwrap();
    assert_eq!(pmc_id_to_class(id), PmcClass::Soft.raw());
    // Attaching to pid 0 means the caller itself.
    pmc.attach(id, 0).unwrap();
    pmc.start(id).unwrap();
    pmc.transport().simulator().unwrap().advance(25);
    let first = pmc.read(id).unwrap();
    assert_eq!(first, 25, "one CLOCK.HARD per tick the program ran");
    pmc.transport().simulator().unwrap().advance(5);
    assert_eq!(pmc.read(id).unwrap(), 30);
    pmc.stop(id).unwrap();
    pmc.transport().simulator().unwrap().advance(5);
    assert_eq!(pmc.read(id).unwrap(), 30, "a stopped PMC does not count");
    // A write or a read-and-write of a stopped PMC.
    pmc.write(id, 1000).unwrap();
    assert_eq!(pmc.rw(id, 7).unwrap(), 1000);
    assert_eq!(pmc.read(id).unwrap(), 7);
    assert_eq!(
        pmc.capabilities(id).unwrap() & PmcCaps::READ.bits(),
        PmcCaps::READ.bits()
    );
    assert!(pmc.width(id).unwrap() > 0);
    pmc.detach(id, 0).unwrap();
    pmc.release(id).unwrap();
    // With its last PMC gone the program owns nothing: ESRCH, as in
    // FreeBSD, where the owner lookup fails before the PMC lookup.
    assert_eq!(pmc.release(id).unwrap_err(), libc::ESRCH, "released twice");
    assert_eq!(pmc.read(id).unwrap_err(), libc::ESRCH, "read after release");
}

#[test]
fn a_tsc_pmc_reads_the_timestamp_counter() {
    let pmc = machine(2);
    let id = pmc.allocate("TSC", PmcMode::Sc.raw(), 0, 1, 0).unwrap();
    pmc.start(id).unwrap();
    let before = pmc.read(id).unwrap();
    pmc.transport().simulator().unwrap().advance(10);
    let after = pmc.read(id).unwrap();
    let cfg = ksim::MachineConfig::default();
    // Ten ticks, plus the microsecond the simulator charges for each
    // context switch and system call around them.
    let ticks = 10 * cfg.tsc_freq / cfg.hz;
    let delta = after - before;
    assert!(
        (ticks..ticks + 10 * cfg.tsc_freq / 1_000_000).contains(&delta),
        "{delta} for {ticks}"
    );
    // Process-mode TSC PMCs do not exist.
    assert_eq!(
        pmc.allocate("TSC", PmcMode::Tc.raw(), 0, -1, 0)
            .unwrap_err(),
        libc::EINVAL
    );
    pmc.stop(id).unwrap();
    pmc.release(id).unwrap();
}

#[test]
fn rows_can_be_disabled_and_enabled() {
    let pmc = machine(2);
    let rows = pmc.pmcinfo(1).unwrap();
    let soft_row = rows
        .iter()
        .position(|r| r.pm_class == PmcClass::Soft.raw())
        .unwrap() as i32;
    pmc.admin(1, soft_row, PmcState::Disabled).unwrap();
    assert_eq!(pmc.pmcinfo(1).unwrap()[soft_row as usize].pm_enabled, 0);
    pmc.admin(1, soft_row, PmcState::Free).unwrap();
    assert_ne!(pmc.pmcinfo(1).unwrap()[soft_row as usize].pm_enabled, 0);
    assert_eq!(
        pmc.admin(5, 0, PmcState::Free).unwrap_err(),
        libc::EINVAL,
        "no CPU 5"
    );
}

#[test]
fn driver_statistics_count_system_calls() {
    let pmc = machine(1);
    let before = pmc.driver_stats().unwrap();
    let _ = pmc.read(0x1234);
    let after = pmc.driver_stats().unwrap();
    assert_eq!(
        after.pm_syscalls - before.pm_syscalls,
        2,
        "the failed read and this call"
    );
    assert_eq!(after.pm_syscall_errors - before.pm_syscall_errors, 1);
}

fn log_events(bytes: &[u8]) -> Vec<u32> {
    use pmc::pmclog::{PMCLOG_FD_NONE, Parser, PmclogEv, PmclogState};
    let mut parser = Parser::new(PMCLOG_FD_NONE);
    parser.feed(bytes);
    let mut ev = PmclogEv::zeroed();
    let mut types = Vec::new();
    loop {
        match parser.read(&mut ev) {
            PmclogState::Ok => types.push(ev.pl_type),
            PmclogState::Eof => return types,
            // All of a log still open has been read.
            PmclogState::RequireData => return types,
            other => panic!("log ends with {other:?} after {types:?}"),
        }
    }
}

#[test]
fn the_log_goes_to_the_programs_descriptor() {
    use std::os::fd::AsRawFd;
    use uapi::pmclog::PmclogType as T;
    let pmc = machine(2);
    let path = std::env::temp_dir().join(format!("pmc-api-log-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    pmc.configure_logfile(file.as_raw_fd()).unwrap();
    // The program may close its descriptor: the driver keeps the file.
    let fd = file.as_raw_fd();
    drop(file);
    assert_eq!(
        pmc.configure_logfile(fd).unwrap_err(),
        libc::EBUSY,
        "a log is configured already"
    );
    // The driver raises sampling counts below kern.hwpmc.mincount (1000)
    // to it: 2500 ticks give two samples.
    let id = pmc
        .allocate("SOFT-CLOCK.HARD", PmcMode::Ts.raw(), 0, -1, 1)
        .unwrap();
    pmc.attach(id, 0).unwrap();
    pmc.start(id).unwrap();
    pmc.transport().simulator().unwrap().advance(2500);
    pmc.writelog(42).unwrap();
    pmc.flush_logfile().unwrap();
    // Flushed records are in the file before the log is closed.
    let flushed = log_events(&std::fs::read(&path).unwrap());
    assert_eq!(flushed[0], T::Initialize.raw());
    assert_eq!(*flushed.last().unwrap(), T::Userdata.raw());
    pmc.stop(id).unwrap();
    pmc.release(id).unwrap();
    pmc.close_logfile().unwrap();
    let types = log_events(&std::fs::read(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    let count = |t: T| types.iter().filter(|&&x| x == t.raw()).count();
    assert_eq!(types[0], T::Initialize.raw());
    assert_eq!(count(T::Pmcallocatedyn), 1);
    assert_eq!(count(T::Pmcattach), 1);
    assert_eq!(count(T::Callchain), 2, "one sample per 1000 ticks");
    assert_eq!(count(T::Userdata), 1);
}

#[test]
fn log_descriptors_the_kernel_refuses() {
    use std::os::fd::AsRawFd;
    let pmc = machine(1);
    let path = std::env::temp_dir().join(format!("pmc-api-ro-{}", std::process::id()));
    std::fs::write(&path, b"").unwrap();
    let read_only = std::fs::File::open(&path).unwrap();
    assert_eq!(
        pmc.configure_logfile(read_only.as_raw_fd()).unwrap_err(),
        libc::EBADF,
        "read-only"
    );
    std::fs::remove_file(&path).unwrap();
    let dir = std::fs::File::open(std::env::temp_dir()).unwrap();
    assert_eq!(
        pmc.configure_logfile(dir.as_raw_fd()).unwrap_err(),
        libc::EBADF,
        "a directory"
    );
    assert_eq!(
        pmc.configure_logfile(987).unwrap_err(),
        libc::EBADF,
        "not open"
    );
    // A program that never configured a log owns nothing to close.
    assert_eq!(
        machine(1).close_logfile().unwrap_err(),
        libc::EINVAL,
        "no log"
    );
}

#[test]
fn a_system_sampling_pmc_samples_the_running_program() {
    let pmc = machine(2);
    // pmcstat allocates and releases one first to learn its capabilities,
    // before it configures the log.
    let probe = pmc
        .allocate("SOFT-CLOCK.HARD", PmcMode::Ss.raw(), 0, 0, 1000)
        .unwrap();
    pmc.release(probe).unwrap();
    let samples = logged_samples(&pmc, || {
        let id = pmc
            .allocate("SOFT-CLOCK.HARD", PmcMode::Ss.raw(), 0, 0, 1000)
            .unwrap();
        pmc.set(id, 1000).unwrap();
        pmc.start(id).unwrap();
        pmc.transport().simulator().unwrap().advance(3500);
        pmc.stop(id).unwrap();
    });
    assert_eq!(samples, 3);
}

#[test]
fn workload_names() {
    use pmc::libpmc_sim::Workload;
    assert_eq!(Workload::parse("work"), Some(Workload::Work { threads: 4 }));
    assert_eq!(
        Workload::parse("work:64"),
        Some(Workload::Work { threads: 64 })
    );
    assert_eq!(
        Workload::parse("threads:8,1000"),
        Some(Workload::Program {
            name: "threads".into(),
            arch: ksim::cpu::Arch::X86_64,
            args: vec!["8".into(), "1000".into()],
        })
    );
    assert_eq!(
        Workload::parse("arm64/sort"),
        Some(Workload::Program {
            name: "sort".into(),
            arch: ksim::cpu::Arch::Aarch64,
            args: Vec::new(),
        })
    );
    for bad in [
        "work:0",
        "work:65",
        "work:x",
        "make",
        "",
        "riscv/sort",
        "sort:",
        "sort:1,,2",
        "amd64/",
    ] {
        assert_eq!(Workload::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn process_sampling_of_the_workload() {
    for (with_set, flags) in [(false, 0), (true, 0), (false, PmcFlags::CALLCHAIN.bits())] {
        let pmc = boot(SimConfig {
            comm: "pmc_api".into(),
            workload: Some(pmc::libpmc_sim::Workload::Work { threads: 1 }),
            ..SimConfig::default()
        });
        let samples = logged_samples(&pmc, || {
            let id = pmc
                .allocate("SOFT-CLOCK.HARD", PmcMode::Ts.raw(), flags, -1, 1000)
                .unwrap();
            if with_set {
                pmc.set(id, 1000).unwrap();
            }
            pmc.attach(id, pid_of(&pmc, "work")).unwrap();
            pmc.start(id).unwrap();
            pmc.transport().simulator().unwrap().advance(3500);
            pmc.stop(id).unwrap();
        });
        assert_eq!(samples, 3, "set {with_set} flags {flags:#x}");
    }
}

/// pmc_capabilities asks the driver (PMC_OP_GETCAPS): ids that were never
/// allocated, or were released, fail, as FreeBSD's 2026 tests expect.
#[test]
fn capabilities_come_from_the_drivers_row() {
    let pmc = machine(2);
    assert!(
        pmc.driver_has_getcaps(),
        "the simulated driver is 0x0A030000"
    );
    let id = pmc
        .allocate(
            "SOFT-CLOCK.HARD",
            PmcMode::Tc.raw(),
            0,
            PMC_CPU_ANY as i32,
            0,
        )
        .unwrap();
    let caps = pmc.capabilities(id).unwrap();
    assert_eq!(caps, pmc.row_caps(id).unwrap());
    assert_ne!(caps & PmcCaps::READ.bits(), 0);
    // An id of the same class, never allocated, while the program owns a
    // PMC: the driver finds no such PMC.
    let other = (id & !0xFF) | ((pmc_id_to_rowindex(id) + 1) & 0xFF);
    assert_ne!(other, id);
    assert_eq!(pmc.capabilities(other).unwrap_err(), libc::EINVAL);
    pmc.release(id).unwrap();
    // Released: the program owns nothing any more.
    assert_eq!(pmc.capabilities(id).unwrap_err(), libc::ESRCH);
}

/// A driver of FreeBSD 15.0 (0x0A000000) has no PMC_OP_GETCAPS: the class
/// table answers, and the operation is never issued.
struct Driver15 {
    sim: SimTransport,
    getcaps_calls: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl pmc::transport::Transport for Driver15 {
    fn call(&self, op: u32, arg: &mut [u8]) -> Result<(), libc::c_int> {
        if op == PmcOp::Getcaps.raw() {
            self.getcaps_calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(libc::EINVAL);
        }
        self.sim.call(op, arg)?;
        if op == PmcOp::Getmoduleversion.raw() {
            arg[..4].copy_from_slice(&0x0A00_0000u32.to_ne_bytes());
        }
        Ok(())
    }
}

#[test]
fn capabilities_of_a_driver_without_getcaps_come_from_the_class() {
    let sim = SimTransport::boot(SimConfig {
        cpus: 1,
        comm: "pmc_api".into(),
        ..SimConfig::default()
    })
    .unwrap();
    let getcaps_calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let pmc = Pmc::init(Box::new(Driver15 {
        sim,
        getcaps_calls: getcaps_calls.clone(),
    }))
    .unwrap();
    assert_eq!(pmc.driver_version(), 0x0A00_0000);
    assert!(!pmc.driver_has_getcaps());
    let id = pmc
        .allocate(
            "SOFT-CLOCK.HARD",
            PmcMode::Tc.raw(),
            0,
            PMC_CPU_ANY as i32,
            0,
        )
        .unwrap();
    let class = pmc
        .cpuinfo()
        .pm_classes
        .iter()
        .find(|c| c.pm_class == PmcClass::Soft.raw())
        .unwrap()
        .pm_caps;
    assert_eq!(pmc.capabilities(id).unwrap(), class);
    assert_eq!(getcaps_calls.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// A hardware event name of the PMU table, on a driver without the
/// hardware class: the request names the hardware class and the driver
/// refuses it, as on FreeBSD; no software event stands in for it.
#[test]
fn a_hardware_event_without_its_class_is_refused() {
    // Sapphire Rapids: libpmc has its tables, FreeBSD 15's driver does not
    // know the model and has the generic classes only.
    let pmc = boot(SimConfig {
        cpus: 1,
        comm: "pmc_api".into(),
        cpuid: "GenuineIntel-6-8F-4".into(),
        ..SimConfig::default()
    });
    assert!(pmc.pmu().is_some(), "libpmc has the model's tables");
    assert!(!pmc.has_class(PmcClass::Iap.raw()));
    let a = pmc
        .parse_spec("instructions", PmcMode::Sc, 0, 0, 0)
        .unwrap();
    assert_eq!(a.pm_class, PmcClass::Iap.raw());
    for spec in ["instructions", "inst_retired.any_p", "cycles"] {
        assert_eq!(
            pmc.allocate(spec, PmcMode::Sc.raw(), 0, 0, 0).unwrap_err(),
            libc::EINVAL,
            "{spec}"
        );
    }
    // Nothing was allocated: the program owns no PMC.
    assert_eq!(pmc.release(0).unwrap_err(), libc::ESRCH);
}

/// The TSC by the names libpmc's table gives it: "cycles" only where the
/// PMU table does not take the name first, "TSC-cycles" everywhere; and
/// by "TSC" and "TSC-TSC", which FreeBSD 15.0's library refuses.
#[test]
fn the_tsc_is_named_cycles_after_the_pmu_table() {
    let skylake = boot(SimConfig {
        cpus: 1,
        comm: "pmc_api".into(),
        ..SimConfig::default()
    });
    assert!(skylake.pmu().is_some());
    let class_event = |pmc: &Pmc, spec: &str| {
        pmc.parse_spec(spec, PmcMode::Sc, 0, 0, 0)
            .map(|a| (PmcClass::from_raw(a.pm_class), a.pm_ev))
    };
    for spec in ["tsc-cycles", "TSC-CYCLES", "tsc", "tsc-tsc"] {
        assert_eq!(
            class_event(&skylake, spec),
            Ok((Some(PmcClass::Tsc), PMC_EV_TSC_TSC)),
            "{spec}"
        );
    }
    let (class, _) = class_event(&skylake, "cycles").unwrap();
    assert_eq!(class, Some(PmcClass::Iap), "the PMU table's cycles");
    assert_eq!(
        class_event(&skylake, "tsc-cycles,usr").unwrap_err(),
        libc::EINVAL,
        "no qualifiers"
    );
    assert_eq!(skylake.event_name(PMC_EV_TSC_TSC), Some("cycles"));
}

/// On the default Skylake the same names allocate IAP and IAF PMCs that
/// count.
#[test]
fn hardware_events_count_on_a_cpu_with_a_pmu() {
    let pmc = machine(1);
    assert!(pmc.has_class(PmcClass::Iap.raw()) && pmc.has_class(PmcClass::Iaf.raw()));
    let insts = pmc
        .allocate("instructions", PmcMode::Sc.raw(), 0, 0, 0)
        .unwrap();
    let fixed = pmc
        .allocate("inst_retired.any", PmcMode::Sc.raw(), 0, 0, 0)
        .unwrap();
    assert_eq!(uapi::pmc::pmc_id_to_class(insts), PmcClass::Iap.raw());
    assert_eq!(uapi::pmc::pmc_id_to_class(fixed), PmcClass::Iaf.raw());
    for id in [insts, fixed] {
        pmc.start(id).unwrap();
    }
    for id in [insts, fixed] {
        pmc.stop(id).unwrap();
        pmc.release(id).unwrap();
    }
}

/// FreeBSD's generic aliases (`instructions` is SOFT-CLOCK.HARD) hold for
/// the generic CPU type when libpmc has no PMU table for the CPU.
#[test]
fn the_generic_cpu_type_has_the_generic_aliases() {
    let pmc = boot(SimConfig {
        cpus: 1,
        comm: "pmc_api".into(),
        cpuid: "NoSuchVendor-0-0".into(),
        ..SimConfig::default()
    });
    assert!(pmc.pmu().is_none());
    assert_eq!(pmc.cpuinfo().pm_cputype, PmcCputype::Generic.raw());
    let hard = pmc
        .events_of_class(PmcClass::Soft)
        .unwrap()
        .iter()
        .find(|e| e.name.to_bytes() == b"CLOCK.HARD")
        .unwrap()
        .code;
    let a = pmc
        .parse_spec("instructions", PmcMode::Sc, 0, 0, 0)
        .unwrap();
    assert_eq!((a.pm_class, a.pm_ev), (PmcClass::Soft.raw(), hard));
    // Without a PMU table, "cycles" is the TSC's name in libpmc's table;
    // other names of the PMU tables are unknown.
    let a = pmc.parse_spec("cycles", PmcMode::Sc, 0, 0, 0).unwrap();
    assert_eq!((a.pm_class, a.pm_ev), (PmcClass::Tsc.raw(), PMC_EV_TSC_TSC));
    assert_eq!(
        pmc.parse_spec("branch-misses", PmcMode::Sc, 0, 0, 0)
            .unwrap_err(),
        libc::EINVAL
    );
}

fn strerror(e: i32) -> String {
    std::io::Error::from_raw_os_error(e)
        .to_string()
        .split(" (os error")
        .next()
        .unwrap()
        .to_owned()
}

/// The simulated driver answers with FreeBSD's errno values; the caller
/// gets the host's, whose strerror(3) says what FreeBSD's would.
#[test]
fn driver_errors_arrive_as_the_hosts_errno_values() {
    let pmc = machine(1);
    // ENOSYS (78 on FreeBSD): a SOFT PMC has no MSR (asked of a
    // process-mode PMC attached to its owner alone, as the driver wants).
    let soft = pmc
        .allocate(
            "SOFT-CLOCK.HARD",
            PmcMode::Tc.raw(),
            0,
            PMC_CPU_ANY as i32,
            0,
        )
        .unwrap();
    pmc.attach(soft, 0).unwrap();
    let e = pmc.get_msr(soft).unwrap_err();
    assert_eq!(e, libc::ENOSYS);
    assert_eq!(strerror(e), "Function not implemented");
    // EOPNOTSUPP (45): the TSC class cannot interrupt, so cannot sample.
    let e = pmc
        .allocate("TSC", PmcMode::Ss.raw(), 0, 0, 1000)
        .unwrap_err();
    assert_eq!(e, libc::EOPNOTSUPP);
    assert_eq!(strerror(e), "Operation not supported");
    // EDOOFUS (88, "Programming error"; no such value on Linux): a
    // sampling PMC started without a log.
    let sampling = pmc
        .allocate("SOFT-CLOCK.HARD", PmcMode::Ss.raw(), 0, 0, 1000)
        .unwrap();
    let e = pmc.start(sampling).unwrap_err();
    assert_eq!(e, pmc::transport::host_errno(88));
    #[cfg(target_os = "linux")]
    assert_eq!(strerror(e), "Invalid argument");
}

/// The translation table against FreeBSD's `sys/errno.h` texts, for the
/// values whose numbers differ between FreeBSD and Linux.
#[test]
#[cfg(target_os = "linux")]
fn freebsd_errno_values_become_the_hosts() {
    use pmc::transport::host_errno;
    for (freebsd, text) in [
        (11, "Resource deadlock avoided"),
        (22, "Invalid argument"),
        (35, "Resource temporarily unavailable"),
        (45, "Operation not supported"),
        (55, "No buffer space available"),
        (60, "Connection timed out"),
        (63, "File name too long"),
        (66, "Directory not empty"),
        (78, "Function not implemented"),
        (84, "Value too large for defined data type"),
        (92, "Protocol error"),
    ] {
        assert_eq!(strerror(host_errno(freebsd)), text, "{freebsd}");
    }
    // EPROGMISMATCH, the library's own version error, is the host's too.
    assert_eq!(pmc::pmc::EPROGMISMATCH, libc::EPROTO);
    assert_eq!(host_errno(0x7fff), libc::EIO);
    // The machine's side (ksimd's log files) turns host errors back into
    // FreeBSD's numbers: the inverse on every value both systems have.
    for freebsd in 1..=97 {
        if pmc::transport::freebsd_only_text(freebsd).is_none() {
            assert_eq!(
                ksim::host_file::freebsd_errno(host_errno(freebsd)),
                freebsd,
                "{freebsd}"
            );
        }
    }
}

#[test]
fn freebsd_only_errors_keep_freebsd_text() {
    use pmc::transport::{freebsd_text_of, host_errno, note_freebsd_errno};
    // EDOOFUS is EINVAL here, but says what FreeBSD says for it.
    note_freebsd_errno(88);
    assert_eq!(freebsd_text_of(libc::EINVAL), Some("Programming error"));
    assert_eq!(freebsd_text_of(host_errno(75)), None, "not the last error");
    note_freebsd_errno(75);
    assert_eq!(freebsd_text_of(libc::EPROTO), Some("Program version wrong"));
    // A plain EINVAL afterwards is the host's own.
    note_freebsd_errno(22);
    assert_eq!(freebsd_text_of(libc::EINVAL), None);
}

/// A request the driver refuses with an extended error: the library
/// gives its text, as libc's uexterr_gettext(3) does on FreeBSD, until
/// another request fails; a failure without one leaves none.
#[test]
fn the_driver_says_why_a_request_failed() {
    let pmc = machine(2);
    let system = pmc
        .allocate("SOFT-CLOCK.HARD", PmcMode::Sc.raw(), 0, 0, 0)
        .unwrap();
    assert_eq!(pmc.attach(system, 0).unwrap_err(), libc::EINVAL);
    assert_eq!(pmc::uexterr::gettext(), "Cannot attach a system-mode PMC");
    // Success leaves it.
    pmc.start(system).unwrap();
    assert_eq!(pmc::uexterr::gettext(), "Cannot attach a system-mode PMC");
    let process = pmc
        .allocate(
            "SOFT-CLOCK.HARD",
            PmcMode::Tc.raw(),
            0,
            PMC_CPU_ANY as i32,
            0,
        )
        .unwrap();
    pmc.start(process).unwrap();
    assert_eq!(pmc.write(process, 5).unwrap_err(), libc::EBUSY);
    assert_eq!(
        pmc::uexterr::gettext(),
        "Cannot write a PMC while it is running"
    );
    // A failure without an extended error: the text is gone.
    assert_eq!(pmc.release(0x00ff_0000).unwrap_err(), libc::EINVAL);
    assert_eq!(pmc::uexterr::gettext(), "");
}

#[test]
fn sampling_a_real_program_workload() {
    // The threads program on the machine's CPUs: samples of its process,
    // with call chains, land in its text or in the kernel's, and the user
    // chains walked from its frames end in its entry code.
    use std::os::fd::AsRawFd;
    use uapi::pmclog::{PmclogBody, records};
    let pmc = boot(SimConfig {
        comm: "pmc_api".into(),
        workload: Some(pmc::libpmc_sim::Workload::parse("threads:2,100000").unwrap()),
        // Sampling counts as small as 1 (kern.hwpmc.mincount is 1000 by
        // default).
        kenv: vec![("kern.hwpmc.mincount".into(), "1".into())],
        ..SimConfig::default()
    });
    let path = std::env::temp_dir().join(format!("pmc-api-program-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    pmc.configure_logfile(file.as_raw_fd()).unwrap();
    let id = pmc
        .allocate(
            "SOFT-CLOCK.HARD",
            PmcMode::Ts.raw(),
            PmcFlags::CALLCHAIN.bits(),
            -1,
            1000,
        )
        .unwrap();
    // A sample at every tick of the process's threads.
    pmc.set(id, 1).unwrap();
    let workload = pid_of(&pmc, "threads");
    pmc.attach(id, workload).unwrap();
    pmc.start(id).unwrap();
    pmc.transport().simulator().unwrap().advance(1_000);
    pmc.stop(id).unwrap();
    pmc.close_logfile().unwrap();
    let log = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let image = ksim::programs::image(ksim::cpu::Arch::X86_64, "threads").unwrap();
    let (text_start, text_end) = ksim::elf::image_span(&image).unwrap();
    let symbols = ksim::elf::parse_symbols(&image).unwrap();
    let name_of = |pc: u64| {
        symbols
            .iter()
            .find(|(_, start, size)| (*start..start + size).contains(&pc))
            .map(|(n, _, _)| n.as_str())
    };
    let (mut user, mut kernel, mut compute) = (0, 0, 0);
    for rec in records(&log) {
        let PmclogBody::Callchain { pid, pcs, .. } = rec.unwrap().body else {
            continue;
        };
        assert_eq!(pid, workload as u32);
        let pcs: Vec<u64> = pcs.iter().map(|pc| pc as u64).collect();
        // A sample in the kernel carries the kernel chain; the user part
        // is captured at the return to user mode, as on FreeBSD.
        let Some(first_user) = pcs.iter().position(|&pc| pc < ksim::elf::KERNEL_BASE) else {
            kernel += 1;
            continue;
        };
        if first_user > 0 {
            kernel += 1;
        } else {
            user += 1;
        }
        for &pc in &pcs[first_user..] {
            assert!(
                (text_start..text_end).contains(&pc) || pc == 0,
                "{pc:#x} outside the text in {pcs:x?}"
            );
        }
        let names: Vec<Option<&str>> = pcs[first_user..].iter().map(|&pc| name_of(pc)).collect();
        if names.first() == Some(&Some("mix")) {
            // mix is called by compute, which the worker calls.
            assert_eq!(names.get(1), Some(&Some("compute")), "{names:?}");
            assert_eq!(names.get(2), Some(&Some("worker")), "{names:?}");
            compute += 1;
        }
    }
    assert!(user > 1000 && compute > 100, "{user} {kernel} {compute}");
    eprintln!("{user} user samples, {kernel} kernel, {compute} in mix");
    assert!(kernel > 10, "the main thread's sched_yield calls: {kernel}");
}

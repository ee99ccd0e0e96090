//! Benchmark scenarios for tools/bench/run. Each scenario sets up a
//! simulated machine with hwpmc loaded, then repeats one operation a given
//! number of times; the script runs every scenario under callgrind with and
//! without the driver work and divides the difference in instructions by
//! the number of operations.
//!
//!     hwpmc-bench csw PMCS SWITCHES     context switches of a target with
//!                                       PMCS process counting PMCs (0 = none)
//!     hwpmc-bench sample ON TICKS       clock ticks of a thread under a
//!                                       system sampling PMC with call chains
//!                                       (ON = 0: the PMC is not started)
//!     hwpmc-bench hwcsw PMCS SWITCHES   the same with PMCS IAP counting PMCs
//!                                       on an Ice Lake-SP (8 counters)
//!     hwpmc-bench pmi ON COUNT          PMIs of a system sampling IAP PMC
//!                                       with call chains on a 16-frame kernel
//!                                       stack (ON = 0: the PMC is not started)
//!     hwpmc-bench pipeline              the log pipeline at increasing sample
//!                                       rates: samples logged per second of
//!                                       host time, and where drops begin
//!     hwpmc-bench notify ON COUNT       PMIs of a system sampling IAP PMC,
//!                                       each drained at the next tick, with
//!                                       (ON = 1) a notification and a signal
//!                                       per sample, or without (ON = 0)
//!     hwpmc-bench notify-latency        a real program under a sampling PMC
//!                                       with a notification per sample: how
//!                                       many simulated instructions pass from
//!                                       each overflow to its notification

use std::mem::size_of;
use std::time::Instant;

use hwpmc::Module;
use ksim::{Cred, FileKind, Location, Machine, MachineConfig};
use uapi::Plain;
use uapi::pmc::*;

struct Bench {
    m: Machine,
    sysnum: u32,
    module: Option<Module>,
}

impl Bench {
    fn new(kenv: &[(&str, &str)]) -> (Bench, ksim::machine_guard::Entered) {
        Bench::with_cpu(kenv, &MachineConfig::default().cpuid)
    }

    /// A machine of CPU key `cpuid`.
    fn with_cpu(kenv: &[(&str, &str)], cpuid: &str) -> (Bench, ksim::machine_guard::Entered) {
        Bench::with_config(
            kenv,
            MachineConfig {
                cpuid: cpuid.into(),
                ..MachineConfig::default()
            },
        )
    }

    /// A machine of `cfg`, with the witness off (it is the simulator's
    /// checker, not kernel work).
    fn with_config(
        kenv: &[(&str, &str)],
        cfg: MachineConfig,
    ) -> (Bench, ksim::machine_guard::Entered) {
        let m = Machine::new(MachineConfig {
            witness: false,
            ..cfg
        });
        let e = m.enter();
        for (k, v) in kenv {
            m.kenv_set(k, v);
        }
        let (_, t) = m.spawn(Cred::root(), "kldload");
        let module = m.in_thread(t, Module::load).expect("load");
        let sysnum = module.syscall_number();
        (
            Bench {
                m,
                sysnum,
                module: Some(module),
            },
            e,
        )
    }

    fn call(&self, pid: u32, tid: u32, op: PmcOp, bytes: &mut [u8]) -> Result<(), i32> {
        self.call_raw(pid, tid, op.raw(), bytes)
    }

    /// The system call by operation number (the extension's too).
    fn call_raw(&self, pid: u32, tid: u32, op: u32, bytes: &mut [u8]) -> Result<(), i32> {
        let ua = self.m.user_alloc(pid, bytes.len());
        self.m.user_write(pid, ua, bytes);
        let r = self.m.syscall(tid, self.sysnum, &[u64::from(op), ua]);
        bytes.copy_from_slice(&self.m.user_read(pid, ua, bytes.len()));
        r.map(|_| ())
    }

    /// A SOFT PMC of event `ev`.
    fn allocate(
        &self,
        owner: (u32, u32),
        ev: u32,
        mode: PmcMode,
        cpu: u32,
        flags: PmcFlags,
        count: u64,
    ) -> PmcId {
        let mut a = PmcOpPmcallocate::zeroed();
        a.pm_caps = PmcCaps::READ.bits();
        a.pm_cpu = if mode.is_virtual() { PMC_CPU_ANY } else { cpu };
        a.pm_class = PmcClass::Soft.raw();
        a.pm_ev = ev;
        a.pm_flags = flags.bits();
        a.pm_mode = mode.raw();
        a.pm_count = count;
        self.allocate_request(owner, &a)
    }

    /// Allocates a request whole (pm_md included): the system call's
    /// argument block as the caller lays it out.
    fn allocate_request(&self, owner: (u32, u32), a: &PmcOpPmcallocate) -> PmcId {
        let mut b = vec![0u8; size_of::<PmcOpPmcallocate>()];
        let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_caps),
            &a.pm_caps.to_ne_bytes(),
        );
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_cpu),
            &a.pm_cpu.to_ne_bytes(),
        );
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_class),
            &a.pm_class.to_ne_bytes(),
        );
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_ev),
            &a.pm_ev.to_ne_bytes(),
        );
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_flags),
            &a.pm_flags.to_ne_bytes(),
        );
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_mode),
            &a.pm_mode.to_ne_bytes(),
        );
        put(
            core::mem::offset_of!(PmcOpPmcallocate, pm_count),
            &a.pm_count.to_ne_bytes(),
        );
        let md = a.pm_md.iap();
        let at = core::mem::offset_of!(PmcOpPmcallocate, pm_md);
        put(at, &md.pm_iap_config.to_ne_bytes());
        put(at + 8, &md.pm_iap_rsp.to_ne_bytes());
        self.call(owner.0, owner.1, PmcOp::Pmcallocate, &mut b)
            .expect("allocate");
        let off = core::mem::offset_of!(PmcOpPmcallocate, pm_pmcid);
        u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"))
    }

    /// PMC_OP_PMCATTACH of `id` to process `target`, then PMC_OP_PMCSTART.
    fn attach_and_start(&self, owner: (u32, u32), id: PmcId, target: u32) {
        let mut a = [0u8; 8];
        a[0..4].copy_from_slice(&id.to_ne_bytes());
        a[4..8].copy_from_slice(&(target as i32).to_ne_bytes());
        self.call(owner.0, owner.1, PmcOp::Pmcattach, &mut a)
            .expect("attach");
        self.simple(owner.0, owner.1, PmcOp::Pmcstart, id);
    }

    fn simple(&self, pid: u32, tid: u32, op: PmcOp, id: PmcId) {
        let mut b = id.to_ne_bytes();
        self.call(pid, tid, op, &mut b).expect("op");
    }

    fn soft(&self, name: &str) -> u32 {
        self.m
            .soft_events()
            .iter()
            .find(|e| e.name == name)
            .unwrap()
            .code
    }

    fn log_to_file(&self, pid: u32, tid: u32) -> i32 {
        let fd = self.m.open(pid, FileKind::Regular, true);
        let mut b = [0u8; 8];
        b[4..8].copy_from_slice(&fd.to_ne_bytes());
        self.call(pid, tid, PmcOp::Configurelog, &mut b)
            .expect("configurelog");
        fd
    }

    fn finish(mut self) {
        if let Some(module) = self.module.take() {
            let (_, t) = self.m.spawn(Cred::root(), "kldunload");
            self.m.in_thread(t, || module.unload());
        }
        assert!(self.m.violations().is_empty());
    }
}

fn kernel_location() -> Location {
    Location {
        user_mode: false,
        kernel_stack: vec![
            0xffff_ffff_8020_1010,
            0xffff_ffff_8020_2020,
            0xffff_ffff_8020_3030,
            0xffff_ffff_8020_4040,
        ],
        user_stack: vec![0x40_1010, 0x40_2020],
        user_regs: None,
    }
}

fn csw(pmcs: u32, switches: u32) {
    let (b, _e) = Bench::new(&[]);
    let (opid, otid) = b.m.spawn(Cred::root(), "owner");
    let (tpid, ttid) = b.m.spawn(Cred::root(), "target");
    let ev = b.soft("CLOCK.STAT");
    for _ in 0..pmcs {
        let id = b.allocate((opid, otid), ev, PmcMode::Tc, 0, PmcFlags::empty(), 0);
        b.attach_and_start((opid, otid), id, tpid);
    }
    for _ in 0..switches {
        b.m.switch_in(1, ttid);
        b.m.switch_out(1);
    }
    b.finish();
}

fn sample(on: bool, ticks: u32) {
    let (b, _e) = Bench::new(&[("kern.hwpmc.mincount", "1")]);
    let (opid, otid) = b.m.spawn(Cred::root(), "owner");
    let (_, wtid) = b.m.spawn(Cred::root(), "worker");
    b.log_to_file(opid, otid);
    let id = b.allocate(
        (opid, otid),
        b.soft("CLOCK.HARD"),
        PmcMode::Ss,
        1,
        PmcFlags::CALLCHAIN,
        1,
    );
    if on {
        b.simple(opid, otid, PmcOp::Pmcstart, id);
    }
    b.m.set_location(wtid, kernel_location());
    b.m.switch_in(1, wtid);
    for _ in 0..ticks {
        b.m.tick(1);
    }
    b.m.switch_out(1);
    b.finish();
}

/// An IAP request for INST_RETIRED.ANY_P in user and kernel mode, as
/// libpmc encodes it.
fn iap_request(mode: PmcMode, cpu: u32, flags: PmcFlags, count: u64) -> PmcOpPmcallocate {
    let mut a = PmcOpPmcallocate::zeroed();
    a.pm_class = PmcClass::Iap.raw();
    a.pm_mode = mode.raw();
    a.pm_cpu = cpu;
    a.pm_flags = (flags | PmcFlags::EV_PMU).bits();
    a.pm_caps = (PmcCaps::READ | PmcCaps::WRITE | PmcCaps::INTERRUPT).bits();
    a.pm_count = count;
    let int = if mode.is_sampling() { 1 << 20 } else { 0 };
    a.pm_md = uapi::pmc_mdep::x86::PmcMdOpPmcallocate {
        pm_iap: uapi::pmc_mdep::x86::PmcMdIapOpPmcallocate {
            pm_iap_config: 0xC0 | 1 << 16 | 1 << 17 | int,
            pm_iap_rsp: 0,
        },
    };
    a
}

fn hwcsw(pmcs: u32, switches: u32) {
    let (b, _e) = Bench::with_cpu(&[], "GenuineIntel-6-6A-6");
    let (opid, otid) = b.m.spawn(Cred::root(), "owner");
    let (tpid, ttid) = b.m.spawn(Cred::root(), "target");
    for _ in 0..pmcs {
        let id = b.allocate_request(
            (opid, otid),
            &iap_request(PmcMode::Tc, PMC_CPU_ANY, PmcFlags::empty(), 0),
        );
        b.attach_and_start((opid, otid), id, tpid);
    }
    for _ in 0..switches {
        b.m.switch_in(1, ttid);
        b.m.switch_out(1);
    }
    b.finish();
}

/// A kernel stack of 16 frames.
fn deep_kernel_location() -> Location {
    Location {
        user_mode: false,
        kernel_stack: (0..16).map(|i| 0xffff_ffff_8020_1010 + i * 0x100).collect(),
        user_stack: vec![0x40_1010, 0x40_2020],
        user_regs: None,
    }
}

/// A Skylake-SP machine whose owner has a log and a system sampling IAP
/// PMC on CPU 1 (`flags`), and a worker thread in the kernel at `at`.
struct SystemSampler {
    b: Bench,
    _e: ksim::machine_guard::Entered,
    owner: (u32, u32),
    worker: u32,
    id: PmcId,
}

fn system_iap_sampler(flags: PmcFlags, at: Location) -> SystemSampler {
    let (b, e) = Bench::with_cpu(&[("kern.hwpmc.mincount", "1")], "GenuineIntel-6-55-4");
    let owner = b.m.spawn(Cred::root(), "owner");
    let (_, wtid) = b.m.spawn(Cred::root(), "worker");
    b.log_to_file(owner.0, owner.1);
    let id = b.allocate_request(owner, &iap_request(PmcMode::Ss, 1, flags, 1000));
    b.m.set_location(wtid, at);
    SystemSampler {
        b,
        _e: e,
        owner,
        worker: wtid,
        id,
    }
}

/// A PMI of IAP-0 on `cpu`: its overflow bit set as the hardware sets it
/// (the handler clears it again), the LVT entry unmasked, the NMI.
fn raise_pmi(b: &Bench, cpu: u32) {
    let pmus = b.m.pmus().expect("a PMU model");
    pmus.wrmsr(cpu, 0x391, 1)
        .expect("IA32_PERF_GLOBAL_STATUS_SET");
    pmus.set_lvt_all(ksim::x86::pmu::LVT_DM_NMI);
    b.m.pmc_interrupt(cpu);
}

fn pmi(on: bool, count: u32) {
    let SystemSampler {
        b,
        _e,
        owner: (opid, otid),
        worker,
        id,
    } = system_iap_sampler(PmcFlags::CALLCHAIN, deep_kernel_location());
    if on {
        b.simple(opid, otid, PmcOp::Pmcstart, id);
    }
    b.m.switch_in(1, worker);
    // Each PMI's sample is drained at a later tick.
    for i in 0..count {
        raise_pmi(&b, 1);
        if i % 64 == 63 {
            b.m.tick(1);
        }
    }
    b.m.switch_out(1);
    b.finish();
}

/// Samples per clock tick on one CPU, raised until the ring overflows;
/// reports host throughput of the whole pipeline (interrupt, ring, log
/// buffers, writer) and the drops.
fn pipeline() {
    println!("events/tick  ticks  samples_logged  dropped  host_samples_per_s");
    for per_tick in [16u32, 64, 128, 255, 256, 257, 512, 1024] {
        let (b, _e) = Bench::new(&[("kern.hwpmc.mincount", "1")]);
        let (opid, otid) = b.m.spawn(Cred::root(), "owner");
        let (_, wtid) = b.m.spawn(Cred::root(), "worker");
        b.log_to_file(opid, otid);
        let id = b.allocate(
            (opid, otid),
            b.soft("PAGE_FAULT.ALL"),
            PmcMode::Ss,
            1,
            PmcFlags::CALLCHAIN,
            1,
        );
        b.simple(opid, otid, PmcOp::Pmcstart, id);
        b.m.set_location(wtid, kernel_location());
        b.m.switch_in(1, wtid);
        let ticks = 200u32;
        let t0 = Instant::now();
        for _ in 0..ticks {
            for _ in 0..per_tick {
                b.m.soft_event(1, "PAGE_FAULT.ALL");
            }
            b.m.tick(1);
        }
        let secs = t0.elapsed().as_secs_f64();
        b.m.switch_out(1);
        let d = b.module.as_ref().unwrap().driver();
        let logged = d
            .sample_stats()
            .logged
            .load(std::sync::atomic::Ordering::Relaxed);
        let dropped = d.stats().intr_bufferfull.fetch();
        println!(
            "{per_tick:>11}  {ticks:>5}  {logged:>14}  {dropped:>7}  {:>18.0}",
            logged as f64 / secs
        );
        b.finish();
    }
}

impl Bench {
    /// PMC_OP_EXT_NOTIFY every `every` samples with signal `signo`: the
    /// descriptor's kernel file.
    fn notify(&self, owner: (u32, u32), id: PmcId, every: u32, signo: i32) -> u64 {
        let req = PmcOpNotify {
            pm_pmcid: id,
            pm_flags: 0,
            pm_count: every,
            pm_refresh: 0,
            pm_signo: signo,
            pm_fd: -1,
            pm_spare: [0; 2],
        };
        let mut b = uapi::AsBytes::as_bytes(&req).to_vec();
        self.call_raw(owner.0, owner.1, PMC_OP_EXT_NOTIFY, &mut b)
            .expect("notify");
        let fd = PmcOpNotify::read_from(&b).expect("sized").pm_fd;
        self.m.file_of(owner.0, fd).expect("the descriptor")
    }
}

/// FreeBSD's SIGUSR1.
const SIGUSR1: i32 = 30;

/// As [`pmi`] without call chains, each PMI's sample drained at the next
/// tick; with `on`, a notification and a signal per sample.
fn notify(on: bool, count: u32) {
    let SystemSampler {
        b,
        _e,
        owner: (opid, otid),
        worker,
        id,
    } = system_iap_sampler(PmcFlags::empty(), kernel_location());
    let file = on.then(|| b.notify((opid, otid), id, 1, SIGUSR1));
    b.simple(opid, otid, PmcOp::Pmcstart, id);
    b.m.switch_in(1, worker);
    for _ in 0..count {
        raise_pmi(&b, 1);
        b.m.tick(1);
    }
    b.m.switch_out(1);
    if let Some(file) = file {
        let posted = b.m.notify_posts(file).unwrap_or(0);
        let signals = b.m.take_thread_signals().len();
        assert_eq!(
            (posted, signals),
            (u64::from(count), count as usize),
            "a record and a signal per sample"
        );
    }
    b.finish();
}

/// The `sort` program under an IAP sampling PMC of its retired
/// instructions with a notification per sample: for each, the program's
/// instructions retired from the overflow (the PMI, at a multiple of the
/// period) to the notification's post (the machine tells of each post as
/// it is made; the program's CPU counts what it retired).
fn notify_latency() {
    use ksim::cpu::events::Counts;
    use ksim::user_process::{UserProcess, UserThread};
    use std::sync::{Arc, Mutex};

    println!("period  insns/tick  notifications  mean_insns  min_insns  max_insns  mean_ticks");
    // Periods prime to the tick's length, so that overflows fall all over
    // the tick.
    for (period, per_tick) in [(7_919u64, 10_000u64), (30_011, 10_000), (7_919, 1_000)] {
        let (b, _e) = Bench::with_config(
            &[("kern.hwpmc.mincount", "1")],
            MachineConfig {
                cpuid: "GenuineIntel-6-5E-3".into(),
                insns_per_tick: per_tick,
                ..MachineConfig::default()
            },
        );
        let (opid, otid) = b.m.spawn(Cred::root(), "owner");
        b.log_to_file(opid, otid);
        let mut req = iap_request(PmcMode::Ts, PMC_CPU_ANY, PmcFlags::empty(), period);
        // User mode only (USR, INT): the program's own instructions.
        req.pm_md = uapi::pmc_mdep::x86::PmcMdOpPmcallocate {
            pm_iap: uapi::pmc_mdep::x86::PmcMdIapOpPmcallocate {
                pm_iap_config: 0xC0 | 1 << 16 | 1 << 20,
                pm_iap_rsp: 0,
            },
        };
        let id = b.allocate_request((opid, otid), &req);
        let file = b.notify((opid, otid), id, 1, 0);
        let image = ksim::programs::image(ksim::cpu::Arch::X86_64, "sort").expect("built");
        let (ppid, ptid) = b.m.spawn(Cred::root(), "sort");
        let mut process =
            UserProcess::exec(&image, "/usr/bin/sort", &["sort", "3"], &[], ppid as i32, 0)
                .expect("exec");
        let counts = Arc::new(Mutex::new(Counts::default()));
        process
            .cpu()
            .subscribe(Box::new(counts.clone()))
            .expect("subscribe");
        b.m.exec_user_thread(
            ppid,
            "/usr/bin/sort",
            &image,
            UserThread::new(process, per_tick),
        );
        b.attach_and_start((opid, otid), id, ppid);
        // Each post: the program's instructions retired at that moment.
        let posts = Arc::new(Mutex::new(Vec::new()));
        {
            let posts = posts.clone();
            let counts = counts.clone();
            b.m.observe_notify_posts(Some(Arc::new(move |f| {
                if f == file {
                    let retired = counts.lock().expect("counts").instructions;
                    posts.lock().expect("posts").push(retired);
                }
            })));
        }
        let mut seen = 0u64;
        let mut latencies = Vec::new();
        while b.m.proc_info(ppid).is_some_and(|i| !i.zombie) {
            b.m.run(ptid, 0, 1);
            let at: Vec<u64> = std::mem::take(&mut *posts.lock().expect("posts"));
            if let Some(ksim::NotifyRead::Record(r)) = b.m.notify_read_file(file) {
                let rec = PmcNotification::read_from(&r).expect("a record");
                // One post per notification here (a count of 1): the
                // notifications in order, each with its post.
                let made: Vec<u64> = (seen + 1..=rec.pn_notifications).collect();
                assert_eq!(made.len(), at.len(), "a post per notification");
                for (k, retired) in made.into_iter().zip(at) {
                    latencies.push(retired - k * period);
                }
                seen = rec.pn_notifications;
            }
        }
        b.m.observe_notify_posts(None);
        let n = latencies.len() as u64;
        let sum: u64 = latencies.iter().sum();
        println!(
            "{period:>6}  {per_tick:>10}  {n:>13}  {:>10}  {:>9}  {:>9}  {:>10.2}",
            sum / n.max(1),
            latencies.iter().min().copied().unwrap_or(0),
            latencies.iter().max().copied().unwrap_or(0),
            sum as f64 / n.max(1) as f64 / per_tick as f64
        );
        b.finish();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| {
        args.get(i)
            .and_then(|a| a.parse::<u32>().ok())
            .unwrap_or_else(|| usage())
    };
    match args.get(1).map(String::as_str) {
        Some("csw") => csw(num(2), num(3)),
        Some("sample") => sample(num(2) != 0, num(3)),
        Some("hwcsw") => hwcsw(num(2), num(3)),
        Some("pmi") => pmi(num(2) != 0, num(3)),
        Some("pipeline") => pipeline(),
        Some("notify") => notify(num(2) != 0, num(3)),
        Some("notify-latency") => notify_latency(),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: hwpmc-bench csw PMCS SWITCHES | hwcsw PMCS SWITCHES | sample ON TICKS | pmi ON COUNT | pipeline | notify ON COUNT | notify-latency"
    );
    std::process::exit(2);
}

//! hwt(4) with its Intel PT backend, timed on the simulated machine, and
//! hwt(8)'s decoding of the traces it makes (run by `tools/bench/hwt`).
//!
//!   hwt-bench gen DIR [scale [reps]]
//!
//! runs the workload programs `calls`, `sort` and `recurse` on a machine
//! with hwt and pt loaded, each to its exit, untraced and then traced in
//! thread mode (user-mode branch tracing through /dev/hwt, as
//! `sys/amd64/pt/tests/oracle.rs` does), `reps` times in turn (3), and
//! prints the simulated instructions per second of each and the trace's
//! bytes per second of host CPU time (the process's CPU time over the
//! runs of the scheduler: the simulated execution, PT model and driver
//! included; the set-up, exec and read-out of the buffer excluded). It
//! leaves in DIR, for each program, the trace (`NAME.pt`), the program
//! (`usr/bin/NAME`, DIR is a file system root for hwt(8)'s images) and its
//! executable segments (`NAME.seg`: `offset size vaddr` a line), which
//! the decode benchmarks read.
//!
//!   hwt-bench decode ipt|hwt DIR NAME
//!
//! decodes `DIR/NAME.pt` once and prints `seconds cpu-seconds
//! instructions sum-of-ips`: `ipt`, the `ipt` crate's instruction flow
//! decoder alone (instructions counted); `hwt`, hwt(8)'s decode path
//! (`usr.sbin/hwt/hwt_pt.rs`, compiled into this program from the tool's
//! own source: the decoder, each instruction's image and function, and
//! its line written to /dev/null). The time covers the decoder's and the
//! image's set-up and the decode, not the reading of the trace file.
//!
//!   hwt-bench print DIR NAME
//!
//! hwt(8)'s decode of `DIR/NAME.pt` to standard output (thread 0), to
//! compare with what the hwt program prints for the same trace.

// Host code: the kernel allocation lints of sys/clippy.toml do not apply.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

// hwt(8)'s decoding, from the tool's source (a binary crate, which a
// benchmark cannot link); only `decode` and the images are used here, and
// the tool's `sim` feature is not this package's.
#[allow(dead_code, unexpected_cfgs)]
#[path = "../../usr.sbin/hwt/hwt_pt.rs"]
mod hwt_pt;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ksim::cpu::Arch;
use ksim::programs;
use ksim::user_process::{UserProcess, UserThread};
use ksim::{CpuState, Cred, DevFd, Machine, MachineConfig};
use uapi::hwt::*;
use uapi::pt::*;

/// Skylake client: family 6, model 0x5E, stepping 3.
const CPU_KEY: &str = "GenuineIntel-6-5E-3";
const CPU: hwt_pt::Cpu = hwt_pt::Cpu {
    family: 6,
    model: 0x5E,
    stepping: 3,
};
/// hwt(8)'s default output: FreeBSD's text line.
const TEXT: hwt_pt::Style = hwt_pt::Style {
    columns: None,
    json: false,
};
const PAGE: usize = 4096;
/// Instructions per clock tick (the machine's default).
const TICK: u64 = 10_000;
/// Ticks a thread runs before it is switched out and in again.
const SLICE: u32 = 10;
/// The trace buffer: large enough that no run wraps it.
const BUFFER_PAGES: usize = 64 << 8;

/// The process's CPU time (all its threads).
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock and a timespec to fill.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A machine with hwt and pt loaded.
struct Sim {
    m: Machine,
    hwt: Option<hwt::Module>,
    pt: Option<intel_pt::Module>,
    _e: ksim::machine_guard::Entered,
}

impl Sim {
    fn new() -> Sim {
        let m = Machine::new(MachineConfig {
            cpus: vec![CpuState::Online; 2],
            insns_per_tick: TICK,
            cpuid: CPU_KEY.into(),
            ..MachineConfig::default()
        });
        let e = m.enter();
        let (_, kld) = m.spawn(Cred::root(), "kldload");
        let (hwt, pt) = m.in_thread(kld, || {
            let hwt = hwt::Module::load().expect("hwt loads");
            let pt = intel_pt::Module::load(&hwt).expect("pt loads on Skylake");
            (hwt, pt)
        });
        Sim {
            m,
            hwt: Some(hwt),
            pt: Some(pt),
            _e: e,
        }
    }

    fn ioctl(&self, tid: u32, pid: u32, fd: &DevFd, cmd: u32, arg: &mut [u8]) {
        let a = self.m.user_alloc(pid, arg.len());
        self.m.user_write(pid, a, arg);
        self.m
            .dev_ioctl(tid, fd, cmd, a)
            .unwrap_or_else(|e| panic!("ioctl {cmd:#x}: {e}"));
        arg.copy_from_slice(&self.m.user_read(pid, a, arg.len()));
    }

    /// ALLOC of a thread-mode context for `pid`, SET_CONFIG (user-mode
    /// branch tracing), START: the owner and the thread's device.
    fn trace(&self, pid: u32) -> ((u32, u32), DevFd) {
        let (opid, otid) = self.m.spawn(Cred::root(), "hwt");
        let fd = self.m.dev_open(otid, "/dev/hwt", true, true).unwrap();
        let name = self.m.user_alloc(opid, 3);
        self.m.user_write(opid, name, b"pt\0");
        let ident = self.m.user_alloc(opid, 4);
        let mut a = vec![0u8; 64];
        a[0..8].copy_from_slice(&((BUFFER_PAGES * PAGE) as u64).to_ne_bytes());
        a[8..12].copy_from_slice(&HWT_MODE_THREAD.to_ne_bytes());
        a[12..16].copy_from_slice(&(pid as i32).to_ne_bytes());
        a[32..40].copy_from_slice(&name.to_ne_bytes());
        a[40..48].copy_from_slice(&ident.to_ne_bytes());
        self.ioctl(otid, opid, &fd, HWT_IOC_ALLOC, &mut a);
        let ident = i32::from_ne_bytes(self.m.user_read(opid, ident, 4).try_into().unwrap());
        let dev = self
            .m
            .dev_open(otid, &format!("/dev/hwt_{ident}_{pid}"), true, true)
            .unwrap();
        // struct pt_cpu_config: RTIT_CTL, no ranges.
        let mut config = vec![0u8; 72];
        config[0..8].copy_from_slice(&(RTIT_CTL_USER | RTIT_CTL_BRANCHEN).to_ne_bytes());
        let cfg = self.m.user_alloc(opid, config.len());
        self.m.user_write(opid, cfg, &config);
        let mut c = vec![0u8; 32];
        c[8..16].copy_from_slice(&cfg.to_ne_bytes());
        c[16..24].copy_from_slice(&(config.len() as u64).to_ne_bytes());
        c[24..28].copy_from_slice(&1i32.to_ne_bytes());
        self.ioctl(otid, opid, &dev, HWT_IOC_SET_CONFIG, &mut c);
        self.ioctl(otid, opid, &dev, HWT_IOC_START, &mut [0u8; 16]);
        ((opid, otid), dev)
    }

    /// The bytes written into the thread's buffer (BUFPTR_GET).
    fn written(&self, owner: (u32, u32), dev: &DevFd) -> usize {
        let (opid, otid) = owner;
        let page = self.m.user_alloc(opid, 4);
        let off = self.m.user_alloc(opid, 8);
        let mut a = vec![0u8; 32];
        a[0..8].copy_from_slice(&page.to_ne_bytes());
        a[8..16].copy_from_slice(&off.to_ne_bytes());
        self.ioctl(otid, opid, dev, HWT_IOC_BUFPTR_GET, &mut a);
        let page = i32::from_ne_bytes(self.m.user_read(opid, page, 4).try_into().unwrap());
        let off = u64::from_ne_bytes(self.m.user_read(opid, off, 8).try_into().unwrap());
        page as usize * PAGE + off as usize
    }

    /// The first `len` bytes of the buffer, mapped as hwt(8) maps it.
    fn buffer(&self, owner: (u32, u32), dev: &DevFd, len: usize) -> Vec<u8> {
        let map = self
            .m
            .dev_mmap(owner.1, dev, 0, len as u64, 1)
            .expect("mmap");
        let mut b = vec![0u8; len];
        map.read(0, &mut b);
        b
    }

    fn alive(&self, pid: u32) -> bool {
        self.m.proc_info(pid).is_some_and(|p| !p.zombie)
    }

    /// Runs `pid`'s thread on CPU 0, SLICE ticks at a time, to its exit.
    fn run(&self, pid: u32, tid: u32) {
        while self.alive(pid) {
            self.m.switch_in(0, tid);
            for _ in 0..SLICE {
                self.m.tick(0);
                if self.m.running_on(0) != Some(tid) {
                    break;
                }
            }
            if self.m.running_on(0) == Some(tid) {
                self.m.switch_out(0);
            }
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let (_, kld) = self.m.spawn(Cred::root(), "kldunload");
        let (pt, hwt) = (self.pt.take(), self.hwt.take());
        self.m.in_thread(kld, || {
            drop(pt);
            drop(hwt);
        });
    }
}

/// One run of `name` to its exit: the run's wall and CPU time, the
/// instructions the PT unit saw and the trace (traced runs).
struct Run {
    wall: Duration,
    cpu: Duration,
    insns: u64,
    trace: Vec<u8>,
}

fn run(name: &str, argv: &[&str], traced: bool) -> Run {
    let sim = Sim::new();
    let (pid, tid) = sim.m.spawn(Cred::root(), name);
    let session = traced.then(|| sim.trace(pid));
    let image = programs::image(Arch::X86_64, name).expect("the ksim build made the programs");
    let path = format!("/usr/bin/{name}");
    let process = UserProcess::exec(&image, &path, argv, &[], pid as i32, 0).expect("exec");
    sim.m
        .exec_user_thread(pid, &path, &image, UserThread::new(process, TICK));
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    sim.run(pid, tid);
    let (wall, cpu) = (wall0.elapsed(), cpu_time() - cpu0);
    assert_eq!(sim.m.program_output(pid, 2), b"", "{name}'s errors");
    let stats = sim.m.pts().expect("a PT unit").stats(0);
    let trace = match &session {
        Some((owner, dev)) => {
            let len = sim.written(*owner, dev);
            assert_eq!(
                len as u64, stats.bytes_out,
                "{name}: all the trace is there"
            );
            assert!(len < BUFFER_PAGES * PAGE, "{name}: the buffer wrapped");
            sim.buffer(*owner, dev, len)
        }
        None => Vec::new(),
    };
    Run {
        wall,
        cpu,
        insns: stats.insns,
        trace,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The programs and their arguments at `scale` (1: about 10^7
/// instructions each).
fn cases(scale: u64) -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("calls", vec!["calls".into(), (30_000 * scale).to_string()]),
        ("sort", vec!["sort".into(), (60 * scale).to_string()]),
        (
            "recurse",
            vec!["recurse".into(), "600".into(), (200 * scale).to_string()],
        ),
    ]
}

fn generate(dir: &Path, scale: u64, reps: usize) {
    std::fs::create_dir_all(dir.join("usr/bin")).expect("mkdir");
    println!(
        "{:<8} {:>12} {:>11} {:>9} {:>12} {:>12} {:>8} {:>12} {:>12}",
        "program",
        "instructions",
        "trace bytes",
        "bytes/insn",
        "untraced M/s",
        "traced M/s",
        "slowdown",
        "trace MB/s",
        "trace MB/s"
    );
    println!(
        "{:<8} {:>12} {:>11} {:>9} {:>12} {:>12} {:>8} {:>12} {:>12}",
        "", "", "", "", "(CPU, med)", "(CPU, med)", "(med)", "(CPU, med)", "(CPU, max)"
    );
    for (name, argv) in cases(scale) {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let (mut plain, mut traced) = (Vec::new(), Vec::new());
        let (mut insns, mut trace) = (0, Vec::new());
        for _ in 0..reps {
            let u = run(name, &argv, false);
            let t = run(name, &argv, true);
            insns = t.insns;
            plain.push((u.cpu, u.wall));
            traced.push((t.cpu, t.wall));
            if trace.is_empty() {
                trace = t.trace;
            } else {
                assert_eq!(trace, t.trace, "{name}: the same trace each run");
            }
        }
        let rate = |d: &Duration, n: f64| n / d.as_secs_f64() / 1e6;
        let mut u: Vec<f64> = plain.iter().map(|p| rate(&p.0, insns as f64)).collect();
        let mut t: Vec<f64> = traced.iter().map(|p| rate(&p.0, insns as f64)).collect();
        let mut slow: Vec<f64> = plain
            .iter()
            .zip(&traced)
            .map(|(p, t)| t.0.as_secs_f64() / p.0.as_secs_f64())
            .collect();
        let mut bytes: Vec<f64> = traced
            .iter()
            .map(|p| rate(&p.0, trace.len() as f64))
            .collect();
        let best = bytes.iter().copied().fold(0.0, f64::max);
        println!(
            "{:<8} {:>12} {:>11} {:>9.3} {:>12.1} {:>12.1} {:>8.2} {:>12.2} {:>12.2}",
            name,
            insns,
            trace.len(),
            trace.len() as f64 / insns as f64,
            median(&mut u),
            median(&mut t),
            median(&mut slow),
            median(&mut bytes),
            best
        );
        let walls: Vec<String> = plain
            .iter()
            .zip(&traced)
            .map(|(p, t)| format!("{:.3}/{:.3}", p.1.as_secs_f64(), t.1.as_secs_f64()))
            .collect();
        eprintln!("{name}: wall seconds untraced/traced: {}", walls.join(" "));
        let elf = programs::image(Arch::X86_64, name).unwrap();
        std::fs::write(dir.join(format!("{name}.pt")), &trace).expect("write the trace");
        std::fs::write(dir.join("usr/bin").join(name), &elf).expect("write the program");
        let segs: String = ksim::elf::exec_segments(&elf)
            .iter()
            .map(|(off, size, vaddr)| format!("{off} {size} {vaddr}\n"))
            .collect();
        std::fs::write(dir.join(format!("{name}.seg")), segs).expect("write the segments");
    }
}

/// hwt(8)'s images of program `name` under root `dir`.
fn images(dir: &Path, name: &str) -> hwt_pt::Images {
    let mut images = hwt_pt::Images::new();
    let path = format!("/usr/bin/{name}");
    let file: PathBuf = dir.join(path.trim_start_matches('/'));
    images
        .add(&path, file.to_str().expect("a UTF-8 path"), 0)
        .expect("the program's image");
    images
}

fn decode(how: &str, dir: &Path, name: &str) {
    let trace = std::fs::read(dir.join(format!("{name}.pt"))).expect("the trace");
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    let (insns, sum) = match how {
        "ipt" => {
            let cfg = ipt::Config::new(&trace)
                .cpu(CPU.family, CPU.model, CPU.stepping)
                .expect("libipt knows the CPU");
            let mut image = ipt::Image::new("hwt");
            let file = dir.join("usr/bin").join(name);
            for (off, size, vaddr) in
                ksim::elf::exec_segments(&std::fs::read(&file).expect("the program"))
            {
                image.add_file(&file, off, size, vaddr).expect("add_file");
            }
            let mut dec = ipt::InsnDecoder::new(&cfg, &mut image).expect("decoder");
            let (mut n, mut sum) = (0u64, 0u64);
            let Ok(()) = dec.decode_each(|item| {
                if let ipt::Item::Insn(i) = item {
                    n += 1;
                    sum = sum.wrapping_add(i.ip);
                }
                Ok::<(), std::convert::Infallible>(())
            });
            (n, sum)
        }
        "hwt" => {
            let images = images(dir, name);
            let null = std::fs::File::create("/dev/null").expect("/dev/null");
            (hwt_text(null, &trace, &images).insns, 0)
        }
        _ => usage(),
    };
    let (wall, cpu) = (wall0.elapsed(), cpu_time() - cpu0);
    println!(
        "{:.6} {:.6} {insns} {sum}",
        wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
}

fn print(dir: &Path, name: &str) {
    let trace = std::fs::read(dir.join(format!("{name}.pt"))).expect("the trace");
    hwt_text(std::io::stdout().lock(), &trace, &images(dir, name));
}

/// hwt(8)'s text decode of thread 0's `trace`, buffered into `out`.
fn hwt_text(out: impl Write, trace: &[u8], images: &hwt_pt::Images) -> hwt_pt::Summary {
    let mut out = std::io::BufWriter::new(out);
    let mut summary = hwt_pt::Summary::default();
    hwt_pt::decode_as(
        &mut out,
        &TEXT,
        hwt_pt::Id::Thread(0),
        trace,
        images,
        CPU,
        None,
        &mut summary,
    )
    .expect("write");
    out.flush().expect("flush");
    summary
}

fn usage() -> ! {
    eprintln!(
        "usage: hwt-bench gen DIR [scale [reps]]\n       hwt-bench decode ipt|hwt DIR NAME\n       hwt-bench print DIR NAME"
    );
    std::process::exit(64)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    match (arg(0), arg(1), arg(2), arg(3)) {
        (Some("gen"), Some(dir), _, _) => {
            let scale = arg(2).map_or(1, |s| s.parse().unwrap_or_else(|_| usage()));
            let reps = arg(3).map_or(3, |s| s.parse().unwrap_or_else(|_| usage()));
            generate(Path::new(dir), scale, reps);
        }
        (Some("decode"), Some(how), Some(dir), Some(name)) => decode(how, Path::new(dir), name),
        (Some("print"), Some(dir), Some(name), None) => print(Path::new(dir), name),
        _ => usage(),
    }
}

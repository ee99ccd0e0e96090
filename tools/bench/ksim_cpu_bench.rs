//! Simulated instructions per second of ksim's CPUs, running the workload
//! programs (release build, wall-clock time, best of three runs):
//!
//! - with no subscriber (the emulator with no per-instruction hook);
//! - with a counting subscriber (the event model's `Counts`: every
//!   retired instruction, its branch and its accesses reported);
//! - with a tracing subscriber, which does per-instruction work on every
//!   field of every event (a hash of each PC, next PC and access address);
//! - ticked: with no subscriber, as a thread of the machine, which the
//!   clock preempts every 10,000 instructions (`UserThread`: the counting
//!   hook that stops the emulator at an exact instruction count).
//!
//! The instruction count of each program is taken from a counted run; the
//! runs are deterministic, so the unobserved run executes exactly as many.
//!
//!   ksim-cpu-bench [scale [arch/program]]
//!
//! scale multiplies the programs' work (1); arch/program (such as
//! `amd64/syscalls`, or `arm64/` for one architecture) runs only the rows
//! it names.

// Host code: the kernel allocation lints of sys/clippy.toml do not apply.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ksim::cpu::Arch;
use ksim::cpu::events::{Counts, Retired, Subscriber};
use ksim::programs;
use ksim::user_process::{ExitStatus, UserProcess, UserThread};
use ksim::{Activity, TickContext};

#[derive(Default)]
struct Trace {
    hash: u64,
}

impl Subscriber for Trace {
    fn retired(&mut self, insn: &Retired<'_>) {
        let mut h = self.hash;
        for v in [
            insn.pc,
            insn.next_pc,
            u64::from(insn.branch.is_some_and(|b| b.taken)),
        ] {
            h = (h ^ v).wrapping_mul(0x0100_0000_01b3);
        }
        for a in insn.accesses {
            h = (h ^ a.addr).wrapping_mul(0x0100_0000_01b3);
        }
        self.hash = h;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Observer {
    None,
    Counting,
    Tracing,
    /// No subscriber, run as a thread of the machine: preempted by the
    /// clock every TICK instructions (the counting hook installed).
    Ticked,
}

/// Instructions per clock tick of the ticked runs (the machine's default).
const TICK: u64 = 10_000;

/// One run: wall time, and the instruction count when counted.
fn run(arch: Arch, name: &str, args: &[&str], observer: Observer) -> (Duration, Option<u64>) {
    let image = programs::image(arch, name).expect("the ksim build made the programs");
    let mut argv = vec![name];
    argv.extend_from_slice(args);
    let mut p = UserProcess::exec(&image, name, &argv, &[], 100, 0).expect("exec");
    let counts = Arc::new(Mutex::new(Counts::default()));
    match observer {
        Observer::None => {}
        Observer::Counting => {
            p.cpu()
                .subscribe(Box::new(counts.clone()))
                .expect("subscribe");
        }
        Observer::Tracing => {
            p.cpu()
                .subscribe(Box::new(Trace::default()))
                .expect("subscribe");
        }
        Observer::Ticked => {
            let mut t = UserThread::new(p, TICK);
            let start = Instant::now();
            while t.ended().is_none() {
                t.tick_on(&mut TickContext::standalone(0));
            }
            let elapsed = start.elapsed();
            assert_eq!(t.ended(), Some(0), "{name}");
            return (elapsed, None);
        }
    }
    let start = Instant::now();
    let status = p.run().expect("the CPU runs");
    let elapsed = start.elapsed();
    assert_eq!(status, ExitStatus::Exited(0), "{name}");
    let n = counts.lock().unwrap().instructions;
    (elapsed, (observer == Observer::Counting).then_some(n))
}

fn best_of_three(arch: Arch, name: &str, args: &[&str], observer: Observer) -> Duration {
    (0..3)
        .map(|_| run(arch, name, args, observer).0)
        .min()
        .expect("three runs")
}

fn main() {
    let scale: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("scale: a number"))
        .unwrap_or(1);
    let only = std::env::args().nth(2).unwrap_or_default();
    // Program, argument: each runs on the order of 10^8 instructions at
    // scale 1.
    let cases = [
        ("sort", vec![600 * scale]),
        ("calls", vec![300_000 * scale]),
        ("recurse", vec![600, 2000 * scale]),
        ("syscalls", vec![200_000 * scale]),
    ];
    println!(
        "{:<6} {:<9} {:>13} {:>12} {:>12} {:>12} {:>12} {:>9}",
        "arch",
        "program",
        "instructions",
        "none M/s",
        "counting M/s",
        "tracing M/s",
        "ticked M/s",
        "syscalls"
    );
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for (name, numbers) in &cases {
            if !format!("{}/{name}", arch.name()).starts_with(&only) {
                continue;
            }
            let strings: Vec<String> = numbers.iter().map(u64::to_string).collect();
            let args: Vec<&str> = strings.iter().map(String::as_str).collect();
            let args = &args[..];
            let (_, counted) = run(arch, name, args, Observer::Counting);
            let n = counted.expect("counted");
            let syscalls = {
                let image = programs::image(arch, name).unwrap();
                let mut argv = vec![*name];
                argv.extend_from_slice(args);
                let mut p = UserProcess::exec(&image, name, &argv, &[], 100, 0).unwrap();
                p.run().unwrap();
                p.syscalls()
            };
            let rate = |d: Duration| n as f64 / d.as_secs_f64() / 1e6;
            let none = best_of_three(arch, name, args, Observer::None);
            let counting = best_of_three(arch, name, args, Observer::Counting);
            let tracing = best_of_three(arch, name, args, Observer::Tracing);
            let ticked = best_of_three(arch, name, args, Observer::Ticked);
            println!(
                "{:<6} {:<9} {:>13} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>9}",
                arch.name(),
                name,
                n,
                rate(none),
                rate(counting),
                rate(tracing),
                rate(ticked),
                syscalls
            );
        }
    }
}

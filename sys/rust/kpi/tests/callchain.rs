//! User call chains of threads that run real programs: the simulator's
//! capture walks the frame records from the trap frame's registers with
//! copyin, as FreeBSD's pmc_save_user_callchain does, and the chains it
//! finds are compared with the true call stack, which a subscriber to the
//! thread's CPU keeps from the calls and returns it retires.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::sync::{Arc, Mutex};

use ksim::cpu::Arch;
use ksim::cpu::events::{BranchKind, Retired, Subscriber};
use ksim::elf::parse_symbols;
use ksim::programs;
use ksim::user_process::{UserProcess, UserThread};
use ksim::{Cred, Machine, MachineConfig};

/// The return addresses of the calls in progress, outermost first.
#[derive(Default)]
struct ShadowStack {
    returns: Vec<u64>,
    pc: u64,
}

impl Subscriber for ShadowStack {
    fn retired(&mut self, insn: &Retired<'_>) {
        if let Some(b) = insn.branch {
            match b.kind {
                BranchKind::Call | BranchKind::IndirectCall => {
                    self.returns.push(insn.pc + u64::from(insn.len));
                }
                BranchKind::Return => {
                    self.returns.pop();
                }
                _ => {}
            }
        }
        self.pc = insn.next_pc;
    }
}

impl ShadowStack {
    /// The true chain, innermost first: the PC, then the return addresses.
    fn chain(&self) -> Vec<u64> {
        std::iter::once(self.pc)
            .chain(self.returns.iter().rev().copied())
            .collect()
    }
}

/// Where a PC is: inside the body of a C function, past its prologue
/// and before its epilogue (where any frame-pointer walk is exact), or
/// elsewhere (an assembly stub without a frame, a prologue, an
/// epilogue).
fn in_body(symbols: &[(String, u64, u64)], arch: Arch, pc: u64) -> bool {
    let stubs = ["_start", "_exit", "write", "getpid", "sched_yield"];
    symbols.iter().any(|(name, start, size)| {
        let (head, tail) = match arch {
            // FreeBSD's walker handles `push %rbp`, `mov %rsp,%rbp` and
            // `ret` itself.
            Arch::X86_64 => (0, 0),
            // Up to `sub sp; stp x29, x30; add x29`, and `ldp; ret`.
            Arch::Aarch64 => (12, 8),
        };
        !stubs.contains(&name.as_str()) && pc >= start + head && pc + tail < start + size
    })
}

/// Runs `recurse` as a process of the machine, tick by tick, and at every
/// tick that leaves it in user mode captures its call chain in its
/// context; returns (ticks compared exactly, ticks checked as a subset).
fn chains_match(arch: Arch, per_tick: u64) -> (u32, u32) {
    let image = programs::image(arch, "recurse").expect("the ksim build made the programs");
    let symbols = parse_symbols(&image).expect("symbols");
    let m = Machine::new(MachineConfig {
        cpus: vec![ksim::CpuState::Online; 2],
        insns_per_tick: per_tick,
        ..MachineConfig::default()
    });
    let _g = m.enter();
    let (pid, tid) = m.spawn(Cred::root(), "recurse");
    let mut process = UserProcess::exec(
        &image,
        "/usr/bin/recurse",
        &["recurse", "40", "1"],
        &[],
        0,
        0,
    )
    .expect("exec");
    let shadow = Arc::new(Mutex::new(ShadowStack::default()));
    process
        .cpu()
        .subscribe(Box::new(shadow.clone()))
        .expect("subscribe");
    m.exec_user_thread(
        pid,
        "/usr/bin/recurse",
        &image,
        UserThread::new(process, per_tick),
    );
    m.switch_in(1, tid);
    let (mut exact, mut subset) = (0, 0);
    let mut deepest = 0;
    for _ in 0..100_000 {
        m.tick(1);
        if m.proc_info(pid).is_none_or(|p| p.zombie) {
            break;
        }
        let mut buf = [0usize; 256];
        let (user_mode, n) = m.in_thread(tid, || {
            (
                kpi::stack::interrupted().user_mode,
                kpi::stack::user_callchain(&mut buf),
            )
        });
        let walked: Vec<u64> = buf[..n].iter().map(|&pc| pc as u64).collect();
        let truth = shadow.lock().unwrap().chain();
        deepest = deepest.max(walked.len());
        assert_eq!(walked[0], truth[0], "the chain starts at the real PC");
        if user_mode && in_body(&symbols, arch, truth[0]) {
            // Past the outermost frame (that of _start) the walk may read
            // one more word, as FreeBSD's does.
            assert!(
                walked.len() >= truth.len() && walked.len() <= truth.len() + 1,
                "{arch:?}: walked {walked:x?}, true {truth:x?}"
            );
            assert_eq!(walked[..truth.len()], truth[..], "{arch:?}");
            exact += 1;
        } else {
            // Every return address found is a real one, in order (but
            // for a last word read past the outermost frame).
            let mut rest = truth.iter();
            let last = walked.len() - 1;
            for (i, pc) in walked.iter().enumerate().skip(1) {
                if i == last && !truth.contains(pc) {
                    break;
                }
                assert!(
                    rest.any(|t| t == pc),
                    "{arch:?}: walked {walked:x?} is not within {truth:x?}"
                );
            }
            subset += 1;
        }
    }
    assert_eq!(
        m.proc_info(pid).and_then(|p| p.exit_status),
        Some(0),
        "recurse ran to its end and exited 0"
    );
    // descend(40) nests 41 frames under main: ticks inside the descent
    // saw chains at least 40 deep.
    assert!(deepest >= 40, "deepest chain {deepest}");
    eprintln!("{arch:?}: {exact} chains exact, {subset} checked as subsets, deepest {deepest}");
    (exact, subset)
}

#[test]
fn user_chains_walked_from_real_frames_are_the_true_call_stack_on_amd64() {
    let (exact, subset) = chains_match(Arch::X86_64, 97);
    assert!(exact > 500 && exact > 10 * subset, "{exact} {subset}");
}

#[test]
fn user_chains_walked_from_real_frames_are_the_true_call_stack_on_arm64() {
    let (exact, subset) = chains_match(Arch::Aarch64, 89);
    assert!(exact > 300 && exact > subset, "{exact} {subset}");
}

/// A program that makes system calls is often caught in the kernel: the
/// interrupted PC and the kernel chain are in the simulated kernel's
/// functions for the call it made (the handler, then the entry path), and
/// its user chain starts right after its system call instruction.
fn kernel_chains(arch: Arch, entry: &[&str]) {
    let image = programs::image(arch, "syscalls").expect("the ksim build made the programs");
    let symbols = parse_symbols(&image).expect("symbols");
    let kernel = ksim::user_process::kernel_image();
    let m = Machine::new(MachineConfig {
        insns_per_tick: 211,
        ..MachineConfig::default()
    });
    let _g = m.enter();
    let (pid, tid) = m.spawn(Cred::root(), "syscalls");
    m.exec_program(pid, "/usr/bin/syscalls", &image, &["syscalls", "300"])
        .expect("exec");
    m.switch_in(0, tid);
    let mut handlers = std::collections::BTreeMap::new();
    let mut user_ticks = 0;
    while m.proc_info(pid).is_some_and(|p| !p.zombie) {
        m.tick(0);
        if m.proc_info(pid).is_none_or(|p| p.zombie) {
            break;
        }
        let mut kbuf = [0usize; 16];
        let mut ubuf = [0usize; 16];
        let (at, kn, un) = m.in_thread(tid, || {
            (
                kpi::stack::interrupted(),
                kpi::stack::kernel_callchain(&mut kbuf),
                kpi::stack::user_callchain(&mut ubuf),
            )
        });
        if at.user_mode {
            assert_eq!(kn, 0);
            user_ticks += 1;
            continue;
        }
        let names: Vec<&str> = kbuf[..kn]
            .iter()
            .map(|&pc| kernel.symbolize(pc as u64, 0).expect("a kernel function").0)
            .collect();
        assert_eq!(at.pc, kbuf[0], "the interrupted PC heads the kernel chain");
        assert!(names[0].starts_with("sys_"), "{names:?}");
        let path: Vec<&str> = names[1..].iter().rev().copied().collect();
        assert_eq!(path, entry, "{names:?}");
        *handlers.entry(names[0]).or_insert(0) += 1;
        // The user chain starts in the system call's stub, just past the
        // instruction (two bytes of `syscall`, four of `svc #0`), and
        // goes on into main.
        let stub = symbols
            .iter()
            .find(|(_, start, size)| (*start..start + size).contains(&(ubuf[0] as u64 - 1)))
            .map(|(name, _, _)| name.as_str());
        assert!(
            matches!(stub, Some("getpid" | "sched_yield" | "write")),
            "{stub:?}"
        );
        assert!(
            un >= 2,
            "the chain goes on past the stub: {:x?}",
            &ubuf[..un]
        );
    }
    assert_eq!(m.proc_info(pid).unwrap().exit_status, Some(0));
    for h in ["sys_getpid", "sys_sched_yield", "sys_write"] {
        assert!(handlers.get(h).is_some_and(|&n| n > 3), "{handlers:?}");
    }
    assert!(user_ticks > 10, "{user_ticks}");
}

#[test]
fn system_calls_show_as_kernel_chains_in_the_kernel_image_on_amd64() {
    kernel_chains(Arch::X86_64, &["Xfast_syscall", "amd64_syscall"]);
}

#[test]
fn system_calls_show_as_kernel_chains_in_the_kernel_image_on_arm64() {
    kernel_chains(
        Arch::Aarch64,
        &["handle_el0_sync", "do_el0_sync", "svc_handler"],
    );
}

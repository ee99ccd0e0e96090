//! The workload programs run on ksim's CPUs: their results, their system
//! calls and faults as FreeBSD's kernel would serve them, determinism, and
//! the event model's counts against an independent count (x86-64: each
//! instruction single-stepped and decoded by iced-x86).

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use std::sync::{Arc, Mutex};

use iced_x86::{Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, Mnemonic, OpAccess};
use ksim::cpu::events::{AccessKind, BranchKind, Counts, MemAccess, Retired, Subscriber};
use ksim::cpu::{Access, Arch, Fault};
use ksim::elf::parse_symbols;
use ksim::programs;
use ksim::user_process::{ExitStatus, UserProcess, signal};

const ARCHES: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

fn exec(arch: Arch, name: &str, args: &[&str]) -> UserProcess {
    let image = programs::image(arch, name).expect("the build made the program");
    let mut argv = vec![name];
    argv.extend_from_slice(args);
    UserProcess::exec(&image, name, &argv, &["HOME=/"], 42, 0).expect("exec")
}

fn run(arch: Arch, name: &str, args: &[&str]) -> (ExitStatus, String, UserProcess) {
    let mut p = exec(arch, name, args);
    let status = p.run().expect("the CPU runs");
    let out = String::from_utf8(p.stdout().to_vec()).expect("text");
    (status, out, p)
}

#[test]
fn sort_sorts_on_both_architectures() {
    for arch in ARCHES {
        let (status, out, _) = run(arch, "sort", &["3"]);
        assert_eq!(status, ExitStatus::Exited(0), "{arch:?}: {out}");
        assert!(
            out.starts_with("sort: checksum ") && out.ends_with(" sorted\n"),
            "{out}"
        );
    }
}

/// The same C compiled for two instruction sets by two back ends, run by
/// two emulations, must print the same.
#[test]
fn programs_print_the_same_on_both_architectures() {
    for (name, args) in [
        ("sort", &["5"][..]),
        ("calls", &["777"][..]),
        ("recurse", &["300"][..]),
        ("syscalls", &["20"][..]),
    ] {
        let (s0, out0, _) = run(Arch::X86_64, name, args);
        let (s1, out1, _) = run(Arch::Aarch64, name, args);
        assert_eq!(s0, ExitStatus::Exited(0), "{name}: {out0}");
        assert_eq!((s0, &out0), (s1, &out1), "{name}");
    }
}

#[test]
fn recursion_computes_what_it_should() {
    fn descend(n: u64, acc: u64) -> u64 {
        // The C function, iteratively: each level adds 1 on the way back.
        let (mut n, mut acc, mut levels) = (n, acc, 0);
        loop {
            let local = acc.wrapping_mul(31).wrapping_add(n);
            if n == 0 {
                return local.wrapping_add(levels);
            }
            acc = local;
            n -= 1;
            levels += 1;
        }
    }
    for arch in ARCHES {
        let (status, out, _) = run(arch, "recurse", &["700"]);
        assert_eq!(status, ExitStatus::Exited(0));
        assert_eq!(
            out,
            format!("recurse: {} 1597\n", descend(700, 1)),
            "{arch:?}"
        );
    }
}

#[test]
fn system_calls_follow_freebsd_conventions() {
    for arch in ARCHES {
        let (status, out, p) = run(arch, "syscalls", &["17"]);
        assert_eq!(status, ExitStatus::Exited(0), "getpid kept its value");
        let rounds: Vec<_> = out.lines().collect();
        assert_eq!(
            rounds,
            [
                "syscalls: round 0",
                "syscalls: round 8",
                "syscalls: round 16"
            ]
        );
        // getpid once, then getpid and sched_yield per round, a write per
        // put_str/put_u64 (3 per printed round), and exit.
        assert_eq!(p.syscalls(), 1 + 2 * 17 + 3 * 3 + 1, "{arch:?}");

        // An error comes back with the carry flag set and errno in the
        // return register: the stub stores it in errno.
        let (status, _, _) = run(arch, "faults", &["badfd"]);
        assert_eq!(status, ExitStatus::Exited(9), "{arch:?}: EBADF");
    }
}

/// The PC of a fault is inside `main` of the program's symbol table.
fn in_main(arch: Arch, pc: u64) -> bool {
    let image = programs::image(arch, "faults").unwrap();
    let syms = parse_symbols(&image).expect("symbols");
    let (_, start, size) = syms.iter().find(|(n, _, _)| n == "main").expect("main");
    (*start..start + size).contains(&pc)
}

#[test]
fn faults_become_signals() {
    for arch in ARCHES {
        let (status, _, p) = run(arch, "faults", &["segv"]);
        assert_eq!(status, ExitStatus::Signaled(signal::SIGSEGV), "{arch:?}");
        let (pc, fault) = p.fault().expect("a fault");
        assert_eq!(
            fault,
            Fault::Unmapped {
                access: Access::Write,
                addr: 0x10
            }
        );
        assert!(in_main(arch, pc), "{arch:?}: fault at {pc:#x}");

        let (status, _, p) = run(arch, "faults", &["ill"]);
        assert_eq!(status, ExitStatus::Signaled(signal::SIGILL), "{arch:?}");
        let (pc, fault) = p.fault().expect("a fault");
        assert_eq!(fault, Fault::IllegalInstruction);
        assert!(in_main(arch, pc), "{arch:?}: fault at {pc:#x}");

        let (status, _, p) = run(arch, "faults", &["nosys"]);
        assert_eq!(status, ExitStatus::Signaled(signal::SIGSYS), "{arch:?}");
        assert_eq!(p.fault(), None);

        // A process that has ended stays ended.
        let mut p = p;
        assert_eq!(p.run().unwrap(), ExitStatus::Signaled(signal::SIGSYS));
    }
}

/// A subscriber that hashes the instruction stream.
#[derive(Default)]
struct StreamHash {
    hash: u64,
    count: u64,
}

impl Subscriber for StreamHash {
    fn retired(&mut self, insn: &Retired<'_>) {
        for v in [insn.pc, insn.next_pc]
            .into_iter()
            .chain(insn.accesses.iter().map(|a| a.addr))
        {
            self.hash = (self.hash ^ v).wrapping_mul(0x0100_0000_01b3);
        }
        self.count += 1;
    }
}

#[test]
fn runs_are_deterministic() {
    for arch in ARCHES {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let mut p = exec(arch, "sort", &["2"]);
            let h = Arc::new(Mutex::new(StreamHash::default()));
            let c = Arc::new(Mutex::new(Counts::default()));
            p.cpu().subscribe(Box::new(h.clone())).unwrap();
            p.cpu().subscribe(Box::new(c.clone())).unwrap();
            assert_eq!(p.run().unwrap(), ExitStatus::Exited(0));
            let h = h.lock().unwrap();
            assert!(h.count > 100_000, "{}", h.count);
            seen.push((h.hash, h.count, c.lock().unwrap().clone()));
        }
        assert_eq!(seen[0], seen[1], "{arch:?}");
    }
}

/// What one instruction did, as the event model reports it and as the
/// independent count finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    pc: u64,
    next_pc: u64,
    branch: Option<(BranchKind, bool)>,
    loads: bool,
    stores: bool,
}

#[derive(Default)]
struct Record(Vec<Seen>, Vec<Vec<MemAccess>>);

impl Subscriber for Record {
    fn retired(&mut self, insn: &Retired<'_>) {
        self.1.push(insn.accesses.to_vec());
        self.0.push(Seen {
            pc: insn.pc,
            next_pc: insn.next_pc,
            branch: insn.branch.map(|b| (b.kind, b.taken)),
            loads: insn.loads(),
            stores: insn.stores(),
        });
    }
}

/// The stack slot a push, call, pop or return accesses, found from the
/// stack pointer before it runs: where the event model must report an
/// access of that kind.
type StackSlot = Option<(AccessKind, u64)>;

/// Single-steps `p` to its end, decoding each instruction with iced-x86.
fn reference_x86(p: &mut UserProcess) -> (Vec<Seen>, Vec<StackSlot>) {
    let mut seen = Vec::new();
    let mut slots = Vec::new();
    let mut info = InstructionInfoFactory::new();
    loop {
        let pc = p.cpu().pc();
        let mut bytes = [0u8; 15];
        // The last instruction of a mapping may be shorter than 15 bytes.
        let mut n = bytes.len();
        while p.cpu().read(pc, &mut bytes[..n]).is_err() {
            n -= 1;
            assert!(n > 0, "no code at {pc:#x}");
        }
        let mut decoder = Decoder::with_ip(64, &bytes[..n], pc, DecoderOptions::NONE);
        let insn = decoder.decode();
        let sp = p.cpu().sp();
        let slot = match insn.mnemonic() {
            Mnemonic::Push | Mnemonic::Call => Some((AccessKind::Store, sp - 8)),
            Mnemonic::Pop | Mnemonic::Ret => Some((AccessKind::Load, sp)),
            _ => None,
        };
        let ended = p.step().expect("the CPU steps");
        let faulted = ended.is_some() && p.fault().is_some();
        if faulted {
            break;
        }
        let next_pc = if ended.is_some() {
            pc + insn.len() as u64
        } else {
            p.cpu().pc()
        };
        let fallthrough = pc + insn.len() as u64;
        let branch = match insn.flow_control() {
            // The event model does not count system calls as branches.
            _ if insn.mnemonic() == Mnemonic::Syscall => None,
            FlowControl::ConditionalBranch => {
                Some((BranchKind::Conditional, next_pc != fallthrough))
            }
            FlowControl::UnconditionalBranch => Some((BranchKind::Jump, true)),
            FlowControl::IndirectBranch => Some((BranchKind::IndirectJump, true)),
            FlowControl::Call => Some((BranchKind::Call, true)),
            FlowControl::IndirectCall => Some((BranchKind::IndirectCall, true)),
            FlowControl::Return => Some((BranchKind::Return, true)),
            _ => None,
        };
        let used = info.info(&insn).used_memory();
        let loads = used.iter().any(|m| {
            matches!(
                m.access(),
                OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
            )
        });
        let stores = used.iter().any(|m| {
            matches!(
                m.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            )
        });
        seen.push(Seen {
            pc,
            next_pc,
            branch,
            loads,
            stores,
        });
        slots.push(slot);
        if ended.is_some() {
            break;
        }
    }
    (seen, slots)
}

fn counts_of(seen: &[Seen]) -> Counts {
    let mut c = Counts::default();
    for s in seen {
        c.instructions += 1;
        if let Some((kind, taken)) = s.branch {
            c.branches += 1;
            c.taken_branches += u64::from(taken);
            match kind {
                BranchKind::Conditional => c.conditional += 1,
                BranchKind::Call => c.calls += 1,
                BranchKind::IndirectCall => {
                    c.calls += 1;
                    c.indirect += 1
                }
                BranchKind::IndirectJump => c.indirect += 1,
                BranchKind::Return => c.returns += 1,
                BranchKind::Jump => {}
            }
        }
        c.loads += u64::from(s.loads);
        c.stores += u64::from(s.stores);
    }
    c
}

/// For every workload: the counting subscriber's instructions, branches,
/// taken branches, loads and stores equal the independent count, and so
/// does the stream instruction by instruction.
#[test]
fn event_counts_match_an_independent_decode_x86_64() {
    let cases: &[(&str, &[&str])] = &[
        ("sort", &["1"]),
        ("calls", &["200"]),
        ("recurse", &["600"]),
        ("syscalls", &["24"]),
        ("faults", &["segv"]),
        ("faults", &["ill"]),
        ("faults", &["badfd"]),
    ];
    for &(name, args) in cases {
        let mut p = exec(Arch::X86_64, name, args);
        let counts = Arc::new(Mutex::new(Counts::default()));
        let record = Arc::new(Mutex::new(Record::default()));
        p.cpu().subscribe(Box::new(counts.clone())).unwrap();
        p.cpu().subscribe(Box::new(record.clone())).unwrap();
        let status = p.run().unwrap();

        let mut q = exec(Arch::X86_64, name, args);
        let (reference, slots) = reference_x86(&mut q);
        assert_eq!(q.status(), Some(status), "{name} {args:?}");

        let record = record.lock().unwrap();
        for (i, (got, want)) in record.0.iter().zip(&reference).enumerate() {
            assert_eq!(got, want, "{name} {args:?}: instruction {i}");
        }
        // The addresses of stack accesses.
        let mut checked = 0;
        for (i, (accesses, slot)) in record.1.iter().zip(&slots).enumerate() {
            if let Some((kind, addr)) = *slot {
                assert!(
                    accesses
                        .iter()
                        .any(|a| a.kind == kind && a.addr == addr && a.size == 8),
                    "{name} {args:?}: instruction {i} at {:#x}: {accesses:?}, want {kind:?} at {addr:#x}",
                    reference[i].pc
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "{name}: pushes, calls, pops and returns");
        assert_eq!(record.0.len(), reference.len(), "{name} {args:?}");
        let want = counts_of(&reference);
        let got = counts.lock().unwrap().clone();
        assert_eq!(got, want, "{name} {args:?}");
        assert!(got.instructions > 0 && got.loads > 0 && got.stores > 0);
        if name != "faults" {
            assert!(
                got.taken_branches < got.branches,
                "{name}: some fall through"
            );
        }
    }
}

/// Each workload exercises what it is for, as the event model sees it.
#[test]
fn workloads_cover_their_branch_kinds() {
    let count = |name: &str, args: &[&str]| {
        let mut p = exec(Arch::X86_64, name, args);
        let depth = Arc::new(Mutex::new(Depth::default()));
        let counts = Arc::new(Mutex::new(Counts::default()));
        p.cpu().subscribe(Box::new(depth.clone())).unwrap();
        p.cpu().subscribe(Box::new(counts.clone())).unwrap();
        assert_eq!(p.run().unwrap(), ExitStatus::Exited(0));
        let d = depth.lock().unwrap().max;
        let c = counts.lock().unwrap().clone();
        (c, d, p.syscalls())
    };
    let (sort, _, _) = count("sort", &["1"]);
    assert!(
        sort.conditional > 10_000 && sort.taken_branches > 5_000,
        "{sort:?}"
    );
    let (calls, _, _) = count("calls", &["100"]);
    // Most of the 25 interpreted instructions per round dispatch through
    // the jump table, and four calls per round go through pointers.
    assert!(calls.indirect >= 100 * 20 + 100 * 4, "{calls:?}");
    assert!(calls.calls >= 100 * 4, "{calls:?}");
    let (_, depth, _) = count("recurse", &["600"]);
    assert!(depth > 600, "call depth {depth}");
    let (sys, _, syscalls) = count("syscalls", &["64"]);
    assert!(
        syscalls > 128 && sys.instructions < syscalls * 200,
        "{sys:?} {syscalls}"
    );
}

#[derive(Default)]
struct Depth {
    now: i64,
    max: i64,
}

impl Subscriber for Depth {
    fn retired(&mut self, insn: &Retired<'_>) {
        match insn.branch.map(|b| b.kind) {
            Some(BranchKind::Call | BranchKind::IndirectCall) => self.now += 1,
            Some(BranchKind::Return) => self.now -= 1,
            _ => {}
        }
        self.max = self.max.max(self.now);
    }
}

/// Subscribing and unsubscribing mid-run: the counts cover exactly the
/// instructions retired while subscribed, and an unobserved run gives the
/// same result.
#[test]
fn subscriptions_come_and_go() {
    for arch in ARCHES {
        let whole = {
            let mut p = exec(arch, "syscalls", &["16"]);
            let c = Arc::new(Mutex::new(Counts::default()));
            p.cpu().subscribe(Box::new(c.clone())).unwrap();
            p.run().unwrap();
            c.lock().unwrap().instructions
        };
        let mut p = exec(arch, "syscalls", &["16"]);
        // Every system call a kernel entry (none served in the hook), so
        // that there are stretches between them.
        p.cpu().hold_fast_syscalls(true);
        let mut total = 0;
        let mut n = 0;
        loop {
            // Observe every other stretch between kernel entries.
            let c = Arc::new(Mutex::new(Counts::default()));
            let id = if n % 2 == 0 {
                Some(p.cpu().subscribe(Box::new(c.clone())).unwrap())
            } else {
                None
            };
            let ended = p.run_to_kernel_entry().unwrap();
            if let Some(id) = id {
                assert!(p.cpu().unsubscribe(id).is_some());
                assert!(p.cpu().unsubscribe(id).is_none(), "gone");
                total += c.lock().unwrap().instructions;
            }
            n += 1;
            if ended.is_some() {
                break;
            }
        }
        assert!(total > 0 && total < whole, "{arch:?}: {total} of {whole}");
        assert_eq!(p.status(), Some(ExitStatus::Exited(0)));
    }
}

/// The names of an ELF64 file's sections with their sizes.
fn sections(image: &[u8]) -> Vec<(String, u64)> {
    let u16_at = |o: usize| u16::from_le_bytes([image[o], image[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(image[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(image[o..o + 8].try_into().unwrap());
    let (shoff, shnum, shstrndx) = (u64_at(0x28) as usize, u16_at(0x3c), u16_at(0x3e));
    let header = |i: u16| shoff + usize::from(i) * 64;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let name = strtab + u32_at(header(i)) as usize;
            let end = name + image[name..].iter().position(|&b| b == 0).unwrap();
            (
                String::from_utf8(image[name..end].to_vec()).unwrap(),
                u64_at(header(i) + 0x20),
            )
        })
        .collect()
}

/// The programs carry symbols and DWARF line information, for profilers
/// and trace decoders to map PCs back to source lines.
#[test]
fn programs_have_symbols_and_line_information() {
    for arch in ARCHES {
        for name in programs::NAMES {
            let image = programs::image(arch, name).unwrap();
            let s = sections(&image);
            let size = |n: &str| s.iter().find(|(m, _)| m == n).map(|&(_, z)| z);
            assert!(
                size(".debug_line").is_some_and(|z| z > 0),
                "{arch:?} {name}: {s:?}"
            );
            assert!(size(".symtab").is_some_and(|z| z > 0), "{arch:?} {name}");
            let syms = parse_symbols(&image).unwrap();
            for f in ["_start", "main", "write", "__ksim_start"] {
                assert!(syms.iter().any(|(n, _, _)| n == f), "{arch:?} {name}: {f}");
            }
        }
    }
}

/// AArch64 has fixed 4-byte instructions, so single-stepping alone tells
/// which instructions were taken branches (the PC went elsewhere than the
/// next word) without decoding anything: the event model's instruction
/// and taken-branch counts must equal that, for every workload.
#[test]
fn event_counts_match_single_stepping_aarch64() {
    let cases: &[(&str, &[&str])] = &[
        ("sort", &["1"]),
        ("calls", &["200"]),
        ("recurse", &["600"]),
        ("syscalls", &["24"]),
        ("faults", &["segv"]),
        ("faults", &["badfd"]),
    ];
    for &(name, args) in cases {
        let mut p = exec(Arch::Aarch64, name, args);
        let counts = Arc::new(Mutex::new(Counts::default()));
        p.cpu().subscribe(Box::new(counts.clone())).unwrap();
        let status = p.run().unwrap();

        let mut q = exec(Arch::Aarch64, name, args);
        let (mut instructions, mut taken) = (0u64, 0u64);
        loop {
            let pc = q.cpu().pc();
            let syscalls = q.syscalls();
            let ended = q.step().unwrap();
            if q.fault().is_some() {
                break;
            }
            instructions += 1;
            // A system call returns to the next instruction; exit ends.
            if ended.is_none() && q.syscalls() == syscalls && q.cpu().pc() != pc + 4 {
                taken += 1;
            }
            if ended.is_some() {
                break;
            }
        }
        assert_eq!(q.status(), Some(status), "{name} {args:?}");
        let c = counts.lock().unwrap();
        assert_eq!(
            (c.instructions, c.taken_branches),
            (instructions, taken),
            "{name} {args:?}"
        );
        assert!(
            c.branches > c.taken_branches && c.loads > 0 && c.stores > 0,
            "{c:?}"
        );
    }
}

/// The cost model on real programs: deterministic, at least a cycle per
/// instruction, and misses where the programs cause them.
#[test]
fn cost_model_on_workloads() {
    use ksim::cpu::cost::{CostCounts, CostModel, RETURN_STACK_DEPTH};
    let cost = |arch: Arch, name: &str, args: &[&str]| -> CostCounts {
        let mut p = exec(arch, name, args);
        let m = Arc::new(Mutex::new(CostModel::default()));
        p.cpu().subscribe(Box::new(m.clone())).unwrap();
        assert_eq!(p.run().unwrap(), ExitStatus::Exited(0));
        m.lock().unwrap().counts()
    };
    for arch in ARCHES {
        let sort = cost(arch, "sort", &["2"]);
        assert_eq!(sort, cost(arch, "sort", &["2"]), "{arch:?}: deterministic");
        assert!(sort.cycles > sort.instructions, "{sort:?}");
        assert!(
            sort.branch_misses > 1000 && sort.cache_misses > 0,
            "{arch:?}: {sort:?}"
        );
        // Nested calls return through a 16-entry return stack: the returns
        // past its depth miss, so 500 more levels of descent (the rest of
        // the program unchanged) give 500 more misses, give or take the
        // predictor's few on the descent's own branch.
        let shallow = cost(arch, "recurse", &["100"]);
        let deep = cost(arch, "recurse", &["600"]);
        let more = deep.branch_misses - shallow.branch_misses;
        assert!(
            (495..=510).contains(&more),
            "{arch:?}: {more} ({RETURN_STACK_DEPTH})"
        );
    }
}

//! The x86 hardware classes on the simulated PMU models: rows and
//! capabilities per model, counting of real programs against the CPU's
//! own retired-instruction and cycle counts, sampling by overflow
//! interrupts, the errors of bad requests, and the fallback of an unknown
//! CPU.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use std::sync::{Arc, Mutex};

use common::x86::*;
use common::*;
use ksim::cpu::events::Counts;
use ksim::user_process::{UserProcess, UserThread};
use ksim::{Cred, MachineConfig};
use uapi::pmc::*;

fn row_names(s: &Sim, p: P) -> Vec<String> {
    s.pmcinfo(p, 0)
        .expect("pmcinfo")
        .iter()
        .map(|i| String::from_utf8_lossy(uapi::pmc::c_field_str(&i.pm_name)).into_owned())
        .collect()
}

#[test]
fn each_model_has_the_rows_and_widths_of_its_cpuid() {
    for (cpuid, cputype, iap, iaf) in [
        (SKYLAKE, PmcCputype::IntelSkylake, 4, 3),
        (SKYLAKE_X, PmcCputype::IntelSkylakeXeon, 4, 3),
        (ICELAKE_X, PmcCputype::IntelIcelakeXeon, 8, 4),
    ] {
        let s = sim(cpuid);
        let root = s.root();
        let info = s.cpuinfo(root);
        assert_eq!(info.pm_cputype, cputype.raw(), "{cpuid}");
        let names = row_names(&s, root);
        let want_iap: Vec<String> = (0..iap).map(|i| format!("IAP-{i}")).collect();
        let want_iaf: Vec<String> = (0..iaf).map(|i| format!("IAF-{i}")).collect();
        assert_eq!(
            names
                .iter()
                .filter(|n| n.starts_with("IAP-"))
                .cloned()
                .collect::<Vec<_>>(),
            want_iap
        );
        assert_eq!(
            names
                .iter()
                .filter(|n| n.starts_with("IAF-"))
                .cloned()
                .collect::<Vec<_>>(),
            want_iaf
        );
        let classes: Vec<(u32, u32, u32)> = info.pm_classes[..info.pm_nclass as usize]
            .iter()
            .map(|c| (c.pm_class, c.pm_num, c.pm_width))
            .collect();
        assert!(
            classes.contains(&(PmcClass::Iap.raw(), iap, 48)),
            "{cpuid}: {classes:?}"
        );
        assert!(
            classes.contains(&(PmcClass::Iaf.raw(), iaf, 48)),
            "{cpuid}: {classes:?}"
        );
        let banner = s.m.console().join("\n");
        assert!(
            banner.contains(&format!(
                "IAP/{iap}/48/0x3ff<INT,USR,SYS,EDG,THR,REA,WRI,INV,QUA,PRC>"
            )),
            "{banner}"
        );
        assert!(
            banner.contains(&format!("IAF/{iaf}/48/0x67<INT,USR,SYS,REA,WRI>")),
            "{banner}"
        );
        s.finish();
    }
    // Six core counters with PerfCtrExtCore (Zen 2), the legacy four
    // without it (family 10h), whose extended MSRs would fault.
    for (cpuid, n) in [(ZEN2, 6), ("AuthenticAMD-16-04-2", 4)] {
        let s = sim(cpuid);
        let root = s.root();
        assert_eq!(s.cpuinfo(root).pm_cputype, PmcCputype::AmdK8.raw());
        let k8: Vec<String> = row_names(&s, root)
            .into_iter()
            .filter(|n| n.starts_with("K8-"))
            .collect();
        assert_eq!(
            k8,
            (0..n).map(|i| format!("K8-{i}")).collect::<Vec<_>>(),
            "{cpuid}"
        );
        s.finish();
    }
}

#[test]
fn an_unknown_cpu_falls_back_to_the_generic_classes() {
    let s = sim("GenuineIntel-6-01-1");
    let root = s.root();
    assert_eq!(s.cpuinfo(root).pm_cputype, PmcCputype::Generic.raw());
    assert!(s.m.console().iter().any(|l| l == "pmc: Unknown Intel CPU."));
    assert!(row_names(&s, root).iter().all(|n| !n.starts_with("IA")));
    s.finish();
}

#[test]
fn counting_matches_the_cpus_own_retired_instructions_and_cycles() {
    let s = sim(SKYLAKE_X);
    let owner = s.root();
    let (prog, seen) = exec(&s, "calls", &["calls", "300"]);
    // INST_RETIRED.ANY_P on IAP, user mode; the fixed instructions and
    // cycles counters; branches.
    let insts = user_counter(&s, owner, PmcClass::Iap, 0xC0, "IAP");
    let fixed = user_counter(&s, owner, PmcClass::Iaf, 0x100, "IAF-0");
    let cycles = user_counter(&s, owner, PmcClass::Iaf, 0x200, "IAF-1");
    let branches = user_counter(&s, owner, PmcClass::Iap, 0xC4, "IAP branches");
    let all = allocate(
        &s,
        owner,
        request(
            PmcClass::Iap,
            PmcMode::Tc,
            0xC0 | USR | OS,
            PmcCaps::USER | PmcCaps::SYSTEM,
            0,
        ),
    )
    .expect("IAP both modes");
    follow(&s, owner, &[insts, fixed, cycles, branches, all], prog.pid);
    run_to_exit(&s, prog, 1);
    let counts = seen.counts.lock().unwrap().clone();
    assert!(counts.instructions > 10_000, "the program ran: {counts:?}");
    assert_eq!(s.read(owner, insts), Ok(counts.instructions));
    assert_eq!(s.read(owner, fixed), Ok(counts.instructions));
    assert_eq!(s.read(owner, branches), Ok(counts.branches));
    assert_eq!(
        s.read(owner, cycles),
        Ok(seen.cost.lock().unwrap().counts().cycles)
    );
    let both = s.read(owner, all).expect("read");
    assert!(
        both > counts.instructions,
        "kernel work counts in OS mode: {both}"
    );
    s.finish();
}

#[test]
fn sampling_interrupts_every_reload_count_instructions() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let (prog, seen) = exec(&s, "sort", &["sort", "2"]);
    let fd = s.open(owner, ksim::FileKind::Regular, true);
    s.configurelog(owner, fd, 0).expect("log");
    let period = 5_000;
    let id = allocate(
        &s,
        owner,
        request(
            PmcClass::Iap,
            PmcMode::Ts,
            0xC0 | USR | INT,
            PmcCaps::USER | PmcCaps::INTERRUPT,
            period,
        ),
    )
    .expect("IAP sampling");
    follow(&s, owner, &[id], prog.pid);
    let before = s.stats(owner);
    run_to_exit(&s, prog, 0);
    let after = s.stats(owner);
    let n = seen.counts.lock().unwrap().instructions;
    let taken = after.pm_intr_processed - before.pm_intr_processed;
    assert_eq!(
        u64::from(taken),
        n / period,
        "one PMI per {period} of {n} instructions"
    );
    assert_eq!(after.pm_intr_bufferfull, before.pm_intr_bufferfull);
    s.finish();
}

#[test]
fn amd_core_counters_count_instructions() {
    let s = sim(ZEN2);
    let owner = s.root();
    let (prog, seen) = exec(&s, "calls", &["calls", "200"]);
    let fd = s.open(owner, ksim::FileKind::Regular, true);
    s.configurelog(owner, fd, 0).expect("log");
    let id = allocate(
        &s,
        owner,
        amd_request(PmcMode::Tc, 0xC0 | USR, PmcCaps::USER, 0),
    )
    .expect("K8");
    let sampler = allocate(
        &s,
        owner,
        amd_request(
            PmcMode::Ts,
            0xC0 | USR | INT,
            PmcCaps::USER | PmcCaps::INTERRUPT,
            4000,
        ),
    )
    .expect("K8 sampling");
    follow(&s, owner, &[id, sampler], prog.pid);
    let before = s.stats(owner).pm_intr_processed;
    run_to_exit(&s, prog, 2);
    let n = seen.counts.lock().unwrap().instructions;
    assert_eq!(s.read(owner, id), Ok(n));
    assert_eq!(
        u64::from(s.stats(owner).pm_intr_processed - before),
        n / 4000
    );
    s.finish();
}

#[test]
fn requests_the_hardware_would_fault_on_are_refused() {
    let s = sim(ICELAKE_X);
    let owner = s.root();
    let bad = [
        // A reserved PERFEVTSEL bit.
        request(
            PmcClass::Iap,
            PmcMode::Tc,
            0xC0 | USR | 1 << 32,
            PmcCaps::USER,
            0,
        ),
        // EN is the driver's.
        request(
            PmcClass::Iap,
            PmcMode::Tc,
            0xC0 | USR | 1 << 22,
            PmcCaps::USER,
            0,
        ),
        // AnyThread is deprecated on version 5.
        request(
            PmcClass::Iap,
            PmcMode::Tc,
            0xC0 | USR | 1 << 21,
            PmcCaps::USER,
            0,
        ),
        // A fixed counter with a counter mask.
        request(
            PmcClass::Iaf,
            PmcMode::Tc,
            0x100 | 1 << 24,
            PmcCaps::USER,
            0,
        ),
        // A fixed-counter umask that names no counter.
        request(PmcClass::Iaf, PmcMode::Tc, 0x900, PmcCaps::USER, 0),
    ];
    for a in bad {
        assert_eq!(
            allocate(&s, owner, a),
            Err(EINVAL),
            "{:#x}",
            a.pm_md.iap().pm_iap_config
        );
    }
    // Without PMC_F_EV_PMU.
    let mut a = request(PmcClass::Iap, PmcMode::Tc, 0xC0 | USR, PmcCaps::USER, 0);
    a.pm_flags = 0;
    assert_eq!(allocate(&s, owner, a), Err(EINVAL));
    s.finish();
}

#[test]
fn more_system_pmcs_than_counters_are_refused() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let system = |config| {
        let mut a = request(PmcClass::Iap, PmcMode::Sc, config, PmcCaps::USER, 0);
        a.pm_cpu = 0;
        a
    };
    for _ in 0..4 {
        allocate(&s, owner, system(0xC0 | USR)).expect("a free counter");
    }
    assert_eq!(
        allocate(&s, owner, system(0xC0 | USR)),
        Err(EINVAL),
        "no fifth counter"
    );
    // INST_RETIRED.PREC_DIST lives on counter 1 only, now taken.
    let s2 = sim(SKYLAKE);
    let o2 = s2.root();
    let prec = || {
        let mut a = request(PmcClass::Iap, PmcMode::Sc, 0x1C0 | USR, PmcCaps::USER, 0);
        a.pm_cpu = 0;
        a
    };
    allocate(&s2, o2, prec()).expect("counter 1");
    assert_eq!(allocate(&s2, o2, prec()), Err(EINVAL));
    s2.finish();
    s.finish();
}

/// Runs `p` until it exits, moving it to the next CPU every `slice` ticks.
fn run_migrating(s: &Sim, p: P, cpus: u32, slice: u32) {
    for round in 0..100_000 {
        if s.m.proc_info(p.pid).is_none_or(|i| i.zombie) {
            return;
        }
        s.run(p, round % cpus, slice);
    }
    panic!("{} did not exit", p.pid);
}

#[test]
fn per_thread_values_survive_migrations_and_switches() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let (prog, seen) = exec(&s, "recurse", &["recurse"]);
    let insts = user_counter(&s, owner, PmcClass::Iap, 0xC0, "IAP");
    let fixed = user_counter(&s, owner, PmcClass::Iaf, 0x100, "IAF");
    follow(&s, owner, &[insts, fixed], prog.pid);
    // Another process counts on the same counters in between.
    let (other, other_seen) = exec(&s, "calls", &["calls", "50"]);
    let theirs = user_counter(&s, owner, PmcClass::Iap, 0xC0, "IAP");
    follow(&s, owner, &[theirs], other.pid);
    for round in 0..100_000u32 {
        let mine = s.m.proc_info(prog.pid).is_some_and(|i| !i.zombie);
        let its = s.m.proc_info(other.pid).is_some_and(|i| !i.zombie);
        if !mine && !its {
            break;
        }
        if mine {
            s.run(prog, round % 4, 3);
        }
        if its {
            s.run(other, (round + 1) % 4, 2);
        }
    }
    let n = seen.counts.lock().unwrap().instructions;
    assert!(n > 10_000);
    assert_eq!(s.read(owner, insts), Ok(n));
    assert_eq!(s.read(owner, fixed), Ok(n));
    assert_eq!(
        s.read(owner, theirs),
        Ok(other_seen.counts.lock().unwrap().instructions)
    );
    s.finish();
}

/// Tallies retired instructions by PC.
#[derive(Default)]
struct ByPc(std::collections::BTreeMap<u64, u64>);

impl ksim::cpu::events::Subscriber for ByPc {
    fn retired(&mut self, insn: &ksim::cpu::events::Retired<'_>) {
        *self.0.entry(insn.pc).or_default() += 1;
    }
}

#[test]
fn sample_shares_follow_the_instructions_the_cpu_retired() {
    use uapi::pmclog::{PmclogBody, records};
    let s = Sim::with_md(
        MachineConfig {
            cpuid: SKYLAKE_X.into(),
            ..MachineConfig::default()
        },
        &[("kern.hwpmc.mincount", "1")],
        hwpmc::MachineDep::initialize,
    );
    let owner = s.root();
    let fd = s.open(owner, ksim::FileKind::Regular, true);
    s.configurelog(owner, fd, 0).expect("log");
    let image = ksim::programs::image(ksim::cpu::Arch::X86_64, "calls").expect("built");
    let symbols = ksim::elf::parse_symbols(&image).expect("symbols");
    let function_of = |pc: u64| {
        symbols
            .iter()
            .find(|(_, start, size)| (*start..start + size.max(&1)).contains(&pc))
            .map(|(name, _, _)| name.clone())
    };
    let prog = s.spawn(Cred::root(), "calls");
    let mut process = UserProcess::exec(
        &image,
        "/usr/bin/calls",
        &["calls", "400"],
        &[],
        prog.pid as i32,
        0,
    )
    .expect("exec");
    let by_pc = Arc::new(Mutex::new(ByPc::default()));
    process
        .cpu()
        .subscribe(Box::new(by_pc.clone()))
        .expect("subscribe");
    s.m.exec_user_thread(
        prog.pid,
        "/usr/bin/calls",
        &image,
        UserThread::new(process, 10_000),
    );
    let period = 997;
    let mut a = request(
        PmcClass::Iap,
        PmcMode::Ts,
        0xC0 | USR | INT,
        PmcCaps::USER | PmcCaps::INTERRUPT,
        period,
    );
    a.pm_flags |= PmcFlags::CALLCHAIN.bits();
    let id = allocate(&s, owner, a).expect("sampler");
    follow(&s, owner, &[id], prog.pid);
    run_migrating(&s, prog, 2, 5);
    s.configurelog(owner, -1, 0).expect("close");

    let mut want: std::collections::BTreeMap<String, u64> = Default::default();
    let mut total_insns = 0;
    for (&pc, &n) in &by_pc.lock().unwrap().0 {
        total_insns += n;
        *want
            .entry(function_of(pc).unwrap_or_else(|| "?".into()))
            .or_default() += n;
    }
    let data = s.file(owner, fd);
    let mut got: std::collections::BTreeMap<String, u64> = Default::default();
    let mut samples = 0u64;
    let mut chained = 0;
    for r in records(&data) {
        let r = r.expect("a well-formed log");
        let PmclogBody::Callchain {
            pid, pmcid, pcs, ..
        } = r.body
        else {
            continue;
        };
        assert_eq!((pid, pmcid), (prog.pid, id));
        let pcs: Vec<u64> = pcs.iter().map(|p| p as u64).collect();
        let f = function_of(pcs[0]).unwrap_or_else(|| "?".into());
        if pcs.len() > 1 {
            chained += 1;
            assert!(
                function_of(pcs[1]).is_some(),
                "caller {:#x} of {f} is in the program",
                pcs[1]
            );
        }
        *got.entry(f).or_default() += 1;
        samples += 1;
    }
    assert_eq!(
        samples,
        total_insns / period,
        "a sample every {period} instructions"
    );
    assert!(chained > 0, "user call chains were walked");
    // The statistical bound: four standard errors of a share estimated
    // from `samples` samples, at most 2/sqrt(samples), plus 1%.
    let bound = 2.0 / (samples as f64).sqrt() + 0.01;
    for (f, n) in &want {
        let share = *n as f64 / total_insns as f64;
        let sampled = got.get(f).copied().unwrap_or(0) as f64 / samples as f64;
        assert!(
            (share - sampled).abs() <= bound,
            "{f}: {share:.4} of the instructions, {sampled:.4} of the samples (bound {bound:.4})"
        );
    }
    s.finish();
}

#[test]
fn getmsr_gives_rdpmc_indices_and_user_rdpmc_only_while_the_owner_runs() {
    let s = sim(SKYLAKE);
    let p = s.root();
    let iap = user_counter(&s, p, PmcClass::Iap, 0xC0, "IAP");
    let iaf = user_counter(&s, p, PmcClass::Iaf, 0x300, "IAF-2");
    // Not yet attached to its owner.
    assert_eq!(s.getmsr(p, iap), Err(EINVAL));
    for id in [iap, iaf] {
        s.attach(p, id, p.pid as i32).expect("attach to self");
    }
    let ri = pmc_id_to_rowindex(iap) - 17;
    assert_eq!(s.getmsr(p, iap), Ok(ri), "IAP rows are RDPMC index n");
    assert_eq!(s.getmsr(p, iaf), Ok(0x4000_0002), "IAF-2 is 1<<30 | 2");
    assert!(!ksim::kern::user_rdpmc(1));
    s.m.switch_in(1, p.tid);
    assert!(ksim::kern::user_rdpmc(1), "CR4.PCE on while the owner runs");
    s.m.switch_out(1);
    assert!(!ksim::kern::user_rdpmc(1), "and off after");
    let writes = ksim::kern::user_rdpmc_writes(1);
    // Another target, whose switches leave CR4 alone: it is clear.
    let other = s.root();
    let id = user_counter(&s, other, PmcClass::Iap, 0xC0, "IAP");
    follow(&s, other, &[id], other.pid);
    for _ in 0..3 {
        s.m.switch_in(1, other.tid);
        assert!(!ksim::kern::user_rdpmc(1), "off for another process");
        s.m.switch_out(1);
    }
    assert_eq!(ksim::kern::user_rdpmc_writes(1), writes, "no CR4 write");
    // The owner again: on, and off once it leaves.
    s.m.switch_in(1, p.tid);
    s.m.switch_out(1);
    assert_eq!(ksim::kern::user_rdpmc_writes(1), writes + 2);
    assert!(!ksim::kern::user_rdpmc(1));
    s.finish();
}

#[test]
fn descendants_are_counted_across_fork_and_exec() {
    let s = sim(SKYLAKE);
    let owner = s.root();
    let parent = s.spawn(Cred::root(), "sh");
    let mut a = request(PmcClass::Iap, PmcMode::Tc, 0xC0 | USR, PmcCaps::USER, 0);
    a.pm_flags |= PmcFlags::DESCENDANTS.bits();
    let id = allocate(&s, owner, a).expect("IAP");
    follow(&s, owner, &[id], parent.pid);
    // The parent forks; its child execs a real program.
    let child = s.fork(parent);
    let image = ksim::programs::image(ksim::cpu::Arch::X86_64, "calls").expect("built");
    let mut process = UserProcess::exec(
        &image,
        "/usr/bin/calls",
        &["calls", "100"],
        &[],
        child.pid as i32,
        0,
    )
    .expect("exec");
    let counts = Arc::new(Mutex::new(Counts::default()));
    process
        .cpu()
        .subscribe(Box::new(counts.clone()))
        .expect("subscribe");
    s.m.exec_user_thread(
        child.pid,
        "/usr/bin/calls",
        &image,
        UserThread::new(process, 10_000),
    );
    let child = P {
        pid: child.pid,
        tid: s.m.proc_info(child.pid).expect("the child").threads[0],
    };
    run_migrating(&s, child, 2, 4);
    let n = counts.lock().unwrap().instructions;
    assert!(n > 10_000);
    assert_eq!(
        s.read(owner, id),
        Ok(n),
        "the child's instructions, counted through PMC_F_DESCENDANTS"
    );
    s.finish();
}

/// Runs ksim's rdpmc program: it allocates, attaches to itself and
/// starts an IAP counting PMC through hwpmc's system call, as pmc(3)
/// would in it, asks for its RDPMC index unless `getmsr` is false, and
/// reads the counter with the rdpmc instruction around `rounds` rounds
/// of a loop. Returns its status and output.
fn run_rdpmc(s: &Sim, rounds: u64, getmsr: bool) -> (Option<i32>, String) {
    let p = s.spawn(Cred::root(), "rdpmc");
    let image = ksim::programs::image(ksim::cpu::Arch::X86_64, "rdpmc").expect("built");
    let (n, r) = (s.sysnum.to_string(), rounds.to_string());
    let argv = ["rdpmc", &n, &r, if getmsr { "1" } else { "0" }];
    let process =
        UserProcess::exec(&image, "/usr/bin/rdpmc", &argv, &[], p.pid as i32, 0).expect("exec");
    s.m.exec_user_thread(
        p.pid,
        "/usr/bin/rdpmc",
        &image,
        UserThread::new(process, 10_000),
    );
    run_to_exit(s, p, 1);
    let status = s.m.proc_info(p.pid).and_then(|i| i.exit_status);
    let out = String::from_utf8_lossy(&s.m.program_output(p.pid, 1)).into_owned();
    (status, out)
}

#[test]
fn a_program_reads_its_own_counter_with_rdpmc_after_getmsr() {
    let s = sim(SKYLAKE);
    let rounds = 5_000;
    let (status, out) = run_rdpmc(&s, rounds, true);
    assert_eq!(status, Some(0), "{out}");
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        (words.len(), words[0], words[2]),
        (4, "rdpmc:", "msr:"),
        "{out}"
    );
    let read: u64 = words[1].parse().expect("a count");
    // IAP-0's RDPMC index is 0.
    assert_eq!(words[3], "0", "{out}");
    // The loop's instructions between the two reads: each round is at
    // least four instructions (load, xor, shift, add, store, compare and
    // branch compiled at -O2 with a volatile), and not hundreds.
    assert!(
        (4 * rounds..20 * rounds).contains(&read),
        "rdpmc read {read}"
    );
    s.finish();

    // Without PMC_OP_PMCGETMSR, CR4.PCE stays off: rdpmc is a #GP,
    // SIGBUS, before the program prints anything.
    let s = sim(SKYLAKE);
    let (status, out) = run_rdpmc(&s, 10, false);
    let sigbus = ksim::user_process::wait_status(ksim::user_process::ExitStatus::Signaled(10));
    assert_eq!(status, Some(sigbus), "{out}");
    assert_eq!(out, "");
    s.finish();
}

/// The kernel work of the system calls that ksim serves inside the
/// emulator's hook when nothing counts (getpid, sched_yield) counts in OS
/// mode as that of any call: a counter of the thread's kernel-mode
/// instructions reads the kernel work its system calls spent, which the
/// same program run alone, every call stopping its CPU, reports.
#[test]
fn the_kernel_work_of_every_system_call_counts_in_os_mode() {
    let image = ksim::programs::image(ksim::cpu::Arch::X86_64, "syscalls").expect("built");
    let argv = ["syscalls", "300"];
    let path = "/usr/bin/syscalls";
    let alone = {
        use ksim::Activity;
        let mut p = UserProcess::exec(&image, path, &argv, &[], 7, 0).expect("exec");
        p.cpu().hold_fast_syscalls(true);
        let mut t = UserThread::new(p, MachineConfig::default().insns_per_tick);
        while t.ended().is_none() {
            t.tick_on(&mut ksim::TickContext::standalone(0));
        }
        (t.user_instructions(), t.kernel_instructions())
    };
    let s = sim(SKYLAKE_X);
    let owner = s.root();
    let p = s.spawn(Cred::root(), "syscalls");
    let process = UserProcess::exec(&image, path, &argv, &[], p.pid as i32, 0).expect("exec");
    let per_tick = MachineConfig::default().insns_per_tick;
    s.m.exec_user_thread(p.pid, path, &image, UserThread::new(process, per_tick));
    let usr = user_counter(&s, owner, PmcClass::Iap, 0xC0, "IAP user");
    let os = allocate(
        &s,
        owner,
        request(PmcClass::Iap, PmcMode::Tc, 0xC0 | OS, PmcCaps::SYSTEM, 0),
    )
    .expect("IAP kernel mode");
    follow(&s, owner, &[usr, os], p.pid);
    run_to_exit(&s, p, 1);
    assert_eq!(
        (s.read(owner, usr), s.read(owner, os)),
        (Ok(alone.0), Ok(alone.1))
    );
    s.finish();
}

/// The row index of `id`'s system PMC on CPU 0, from PMCGETPMCINFO's row
/// names (`K8-N`).
fn k8_row_of(s: &Sim, owner: P, mode: PmcMode) -> u32 {
    let rows = s.pmcinfo(owner, 0).expect("pmcinfo");
    let row = rows
        .iter()
        .find(|r| r.pm_ownerpid == owner.pid as i32 && r.pm_mode == mode.raw())
        .expect("the PMC's row");
    let name = String::from_utf8_lossy(uapi::pmc::c_field_str(&row.pm_name)).into_owned();
    name.strip_prefix("K8-").unwrap().parse().unwrap()
}

/// An AMD sampling PMC's stop waits, up to 50 times 1 us, for the NMI of
/// an overflow that came just before it, so that the NMI finds the PMC on
/// its row (FreeBSD's amd_stop_pmc): only while the counter shows a wrap
/// the handler has not reloaded yet, and not for a counting PMC.
#[test]
fn an_amd_stop_waits_for_the_nmi_of_an_overflow_just_before_it() {
    let s = sim(ZEN2);
    let owner = s.root();
    let fd = s.open(owner, ksim::FileKind::Regular, true);
    s.configurelog(owner, fd, 0).expect("log");
    let mut r = amd_request(
        PmcMode::Ss,
        0xC0 | USR | INT,
        PmcCaps::USER | PmcCaps::INTERRUPT,
        100_000,
    );
    r.pm_cpu = 0;
    let sampler = allocate(&s, owner, r).expect("K8 system sampler");
    let mut c = amd_request(PmcMode::Sc, 0xC0 | USR, PmcCaps::USER, 0);
    c.pm_cpu = 0;
    let counter = allocate(&s, owner, c).expect("K8 system counter");
    let perfctr = |ri: u32| 0xC001_0004 + ri;
    let sampler_ctr = perfctr(k8_row_of(&s, owner, PmcMode::Ss));
    let counter_ctr = perfctr(k8_row_of(&s, owner, PmcMode::Sc));
    s.start(owner, sampler).unwrap();
    s.start(owner, counter).unwrap();
    let before = s.m.delayed_us();
    // No overflow pending: the counter is 100000 short of its wrap.
    s.stop(owner, sampler).unwrap();
    assert_eq!(s.m.delayed_us(), before);
    // Wrapped and not reloaded: no NMI comes here, so the whole wait.
    s.start(owner, sampler).unwrap();
    s.m.wrmsr(0, sampler_ctr, 5).unwrap();
    s.stop(owner, sampler).unwrap();
    assert_eq!(s.m.delayed_us(), before + 50);
    // A counting PMC raises no NMI: its top bit clear means nothing.
    s.m.wrmsr(0, counter_ctr, 5).unwrap();
    s.stop(owner, counter).unwrap();
    assert_eq!(s.m.delayed_us(), before + 50);
    s.finish();
}

/// An off-core response event's allocation tries its response value on
/// the register, which keeps different bits on different models: Sandy
/// Bridge reserves bits 12-14 and 23-30 (FreeBSD's
/// IA_OFFCORE_RSP_MASK_SBIB), where a fixed mask of bits 37:0 had let a
/// process PMC, which needs no privilege, make the start's `wrmsr` fault.
/// The register gets its own value back; a value it takes is written at
/// the PMC's start.
#[test]
fn off_core_response_values_are_tried_on_the_register() {
    const RSP0: u32 = 0x1A6;
    let s = sim("GenuineIntel-6-2A-7");
    let owner = s.root();
    let ncpu = s.cpuinfo(owner).pm_ncpu;
    for cpu in 0..ncpu {
        s.m.wrmsr(cpu, RSP0, 0x8FFF).unwrap();
    }
    let offcore = |rsp: u64| {
        let mut r = request(PmcClass::Iap, PmcMode::Tc, 0x01B7 | USR, PmcCaps::USER, 0);
        r.pm_md.pm_iap.pm_iap_rsp = rsp;
        allocate(&s, owner, r)
    };
    for bad in [1 << 12, 1 << 23, 1 << 38, 1 << 63] {
        assert_eq!(offcore(bad), Err(EINVAL), "{bad:#x}");
    }
    let id = offcore(0x10001).expect("a response value Sandy Bridge keeps");
    for cpu in 0..ncpu {
        assert_eq!(
            s.m.rdmsr(cpu, RSP0),
            Ok(0x8FFF),
            "CPU {cpu} got its value back"
        );
    }
    let (prog, _) = exec(&s, "calls", &["calls", "10"]);
    follow(&s, owner, &[id], prog.pid);
    s.m.switch_in(0, prog.tid);
    assert_eq!(s.m.rdmsr(0, RSP0), Ok(0x10001));
    s.m.switch_out(0);
    s.finish();
}

/// Each CPU's IA32_DEBUGCTL gets freeze-on-PMI from the load, done on
/// that CPU (it had been the loading CPU's, once per CPU); in a virtual
/// machine's guest the bit is left alone, as FreeBSD's core_pcpu_init
/// leaves it.
#[test]
fn freeze_on_pmi_is_set_on_every_cpu_but_not_in_a_guest() {
    const DEBUGCTL: u32 = 0x1D9;
    const FREEZE_ON_PMI: u64 = 1 << 12;
    for vm_guest in [false, true] {
        let s = Sim::with_md(
            MachineConfig {
                cpuid: SKYLAKE_X.into(),
                vm_guest,
                ..MachineConfig::default()
            },
            &[],
            hwpmc::MachineDep::initialize,
        );
        let ncpu = s.cpuinfo(s.root()).pm_ncpu;
        assert!(ncpu > 1);
        for cpu in 0..ncpu {
            let debugctl = s.m.rdmsr(cpu, DEBUGCTL).unwrap();
            assert_eq!(
                debugctl & FREEZE_ON_PMI != 0,
                !vm_guest,
                "CPU {cpu}, guest {vm_guest}"
            );
        }
        s.finish();
    }
}

/// AnyThread came with version 3 of the architectural facility: on a
/// version 2 processor (Core 2) the bit is reserved, and a request that
/// sets it, for a programmable or a fixed-function counter, is refused
/// rather than written (where it faults: FreeBSD's writes it).
#[test]
fn any_thread_is_refused_before_version_3() {
    const ANY: u64 = 1 << 21;
    let s = sim("GenuineIntel-6-17-6");
    let owner = s.root();
    assert_eq!(
        s.cpuinfo(owner).pm_cputype,
        PmcCputype::IntelCore2Extreme.raw()
    );
    for class in [PmcClass::Iap, PmcClass::Iaf] {
        let config = if class == PmcClass::Iaf {
            0x00C0
        } else {
            0x00C0 | USR
        };
        let any = request(class, PmcMode::Tc, config | USR | ANY, PmcCaps::USER, 0);
        assert_eq!(allocate(&s, owner, any), Err(EINVAL), "{class:?}");
        let plain = request(class, PmcMode::Tc, config | USR, PmcCaps::USER, 0);
        let id = allocate(&s, owner, plain).unwrap_or_else(|e| panic!("{class:?}: {e:?}"));
        s.release(owner, id).unwrap();
    }
    s.finish();
}

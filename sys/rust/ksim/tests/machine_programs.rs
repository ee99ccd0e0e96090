//! Real programs as processes of the simulated machine: threads made with
//! thr_new(2) that share memory, a shared object mapped at run time with
//! the mapping hooks it causes, preemption at exact instruction counts,
//! and determinism of the whole machine.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

use ksim::cpu::Arch;
use ksim::programs;
use ksim::{CpuState, Cred, HookCall, Machine, MachineConfig};

const ARCHES: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

fn machine(cpus: usize, insns_per_tick: u64) -> Machine {
    Machine::new(MachineConfig {
        cpus: vec![CpuState::Online; cpus],
        insns_per_tick,
        ..MachineConfig::default()
    })
}

/// Round-robin of `pid`'s threads over the machine's CPUs, `slice` ticks
/// at a time, until the process has exited; returns what each tick found
/// running where: (cpu, tid, interrupted user PC or 0 in the kernel).
fn run_to_exit(m: &Machine, pid: u32, cpus: u32, slice: u32) -> Vec<(u32, u32, u64)> {
    let mut seen = Vec::new();
    let mut next = 0;
    for _ in 0..1_000_000 {
        let Some(info) = m.proc_info(pid).filter(|p| !p.zombie) else {
            return seen;
        };
        let threads = info.threads;
        let n = threads.len().min(cpus as usize);
        let placed: Vec<(u32, u32)> = (0..n)
            .map(|i| (i as u32, threads[(next + i) % threads.len()]))
            .collect();
        next = (next + n) % threads.len();
        for &(cpu, tid) in &placed {
            m.switch_in(cpu, tid);
        }
        for _ in 0..slice {
            m.tick_all();
            for &(cpu, tid) in &placed {
                if m.running_on(cpu) == Some(tid) {
                    seen.push((cpu, tid, user_pc(m, tid).unwrap_or(0)));
                }
            }
        }
        for &(cpu, _) in &placed {
            m.switch_out(cpu);
        }
    }
    panic!("process {pid} did not exit");
}

/// The user PC a tick left thread `tid` at (None in the kernel).
fn user_pc(m: &Machine, tid: u32) -> Option<u64> {
    let loc = m.location_of(tid);
    if loc.user_mode {
        loc.user_regs.map(|r| r.pc)
    } else {
        None
    }
}

fn exec(m: &Machine, arch: Arch, name: &str, argv: &[&str]) -> u32 {
    let image = programs::image(arch, name).expect("the ksim build made the programs");
    let (pid, _) = m.spawn(Cred::root(), name);
    m.exec_program(pid, &format!("/usr/bin/{name}"), &image, argv)
        .expect("exec");
    pid
}

#[test]
fn threads_made_with_thr_new_share_memory_and_are_scheduled_on_every_cpu() {
    for arch in ARCHES {
        let m = machine(2, 2_000);
        let _g = m.enter();
        let pid = exec(&m, arch, "threads", &["threads", "4", "20"]);
        let seen = run_to_exit(&m, pid, 2, 5);
        let info = m.proc_info(pid).unwrap();
        assert_eq!(info.exit_status, Some(0), "{arch:?}");
        let out = String::from_utf8(m.program_output(pid, 1)).unwrap();
        assert!(
            out.starts_with("threads: 4 workers, ") && out.ends_with(" ok\n"),
            "{arch:?}: {out:?}"
        );
        // Five threads ran, on both CPUs.
        let mut tids: Vec<u32> = seen.iter().map(|s| s.1).collect();
        tids.sort_unstable();
        tids.dedup();
        assert_eq!(tids.len(), 5, "{arch:?}: {tids:?}");
        for cpu in 0..2 {
            assert!(seen.iter().any(|s| s.0 == cpu), "{arch:?}");
        }
    }
}

/// A PMC hook that does nothing: the kernel calls hooks only when one is
/// installed, and the trace records those calls.
fn install_quiet_hook() {
    ksim::kern::set_pmc_hook(Some(std::sync::Arc::new(|_: &HookCall| {})));
}

#[test]
fn the_thread_hooks_run_for_threads_a_program_makes() {
    let m = machine(2, 2_000);
    let _g = m.enter();
    install_quiet_hook();
    // System-wide sampling is on: kern_thr.c logs thread creation and
    // exit (PMC_FN_THR_CREATE_LOG, PMC_FN_THR_EXIT_LOG).
    ksim::kern::pmc_ss_count_add(1);
    let pid = exec(&m, Arch::X86_64, "threads", &["threads", "3", "5"]);
    let main = m.proc_info(pid).unwrap().threads[0];
    m.trace_hooks();
    let seen = run_to_exit(&m, pid, 2, 5);
    assert_eq!(m.proc_info(pid).unwrap().exit_status, Some(0));
    let mut workers: Vec<u32> = seen.iter().map(|s| s.1).filter(|&t| t != main).collect();
    workers.sort_unstable();
    workers.dedup();
    assert_eq!(workers.len(), 3);
    let hooks = m.traced_hooks();
    let created: Vec<u32> = hooks
        .iter()
        .filter_map(|h| match h {
            HookCall::ThrCreateLog { tid, pid: p, .. } if *p == pid => Some(*tid),
            _ => None,
        })
        .collect();
    assert_eq!(created, workers, "{hooks:?}");
    for w in &workers {
        assert!(
            hooks
                .iter()
                .any(|h| matches!(h, HookCall::ThrExitLog { tid } if tid == w)),
            "{hooks:?}"
        );
    }
    ksim::kern::pmc_ss_count_add(-1);
}

#[test]
fn a_shared_object_mapped_at_run_time_runs_and_changes_the_mappings() {
    for arch in ARCHES {
        let m = machine(1, 1_000);
        let _g = m.enter();
        let object = programs::image(arch, programs::SECOND_OBJECT).expect("built");
        m.install(programs::SECOND_OBJECT_PATH, object);
        install_quiet_hook();
        let pid = exec(&m, arch, "mapobj", &["mapobj", "200"]);
        let tid = m.proc_info(pid).unwrap().threads[0];
        m.trace_hooks();
        m.switch_in(0, tid);
        let mut mapped_at = None;
        let mut unmapped = false;
        while m.proc_info(pid).is_some_and(|p| !p.zombie) {
            m.tick(0);
            let maps = m.mappings(pid);
            let second = maps
                .iter()
                .find(|map| map.path == programs::SECOND_OBJECT_PATH);
            match (second, mapped_at) {
                (Some(map), None) => mapped_at = Some(map.start),
                (None, Some(_)) => unmapped = true,
                _ => {}
            }
        }
        let info = m.proc_info(pid).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&m.program_output(pid, 1)),
            "mapobj: ok\n",
            "{arch:?}"
        );
        assert_eq!(info.exit_status, Some(0), "{arch:?}");
        let start = mapped_at.expect("the object's text was mapped");
        assert!(unmapped, "{arch:?}: and unmapped before the exit");
        let hooks = m.traced_hooks();
        assert!(
            hooks
                .iter()
                .any(|h| matches!(h, HookCall::Mmap { addr } if *addr == start)),
            "{arch:?}: {hooks:?}"
        );
        assert!(
            hooks.iter().any(|h| matches!(h, HookCall::Munmap { .. })),
            "{arch:?}: {hooks:?}"
        );
    }
}

#[test]
fn a_missing_shared_object_is_an_error_the_program_reports() {
    let m = machine(1, 1_000);
    let _g = m.enter();
    let pid = exec(&m, Arch::X86_64, "mapobj", &["mapobj", "10"]);
    let tid = m.proc_info(pid).unwrap().threads[0];
    m.switch_in(0, tid);
    while m.proc_info(pid).is_some_and(|p| !p.zombie) {
        m.tick(0);
    }
    assert_eq!(m.proc_info(pid).unwrap().exit_status, Some(2 << 8));
    assert_eq!(
        m.program_output(pid, 1),
        b"mapobj: cannot open the object\n"
    );
}

#[test]
fn the_clock_preempts_a_program_at_exact_instruction_counts() {
    // The same program with the same tick length is caught at the same
    // PCs; another tick length catches it elsewhere.
    let pcs = |per_tick: u64| {
        let m = machine(1, per_tick);
        let _g = m.enter();
        let pid = exec(&m, Arch::X86_64, "sort", &["sort", "3"]);
        run_to_exit(&m, pid, 1, 10)
    };
    let a = pcs(1_000);
    assert_eq!(a, pcs(1_000));
    assert_ne!(a, pcs(1_001));
    assert!(a.len() > 100, "{}", a.len());
}

#[test]
fn a_machine_of_several_programs_runs_the_same_way_twice() {
    let run = || {
        let m = machine(2, 1_500);
        let _g = m.enter();
        let a = exec(&m, Arch::X86_64, "threads", &["threads", "3", "10"]);
        let b = exec(&m, Arch::Aarch64, "syscalls", &["syscalls", "500"]);
        let mut seen = Vec::new();
        let mut rounds = 0;
        while [a, b]
            .iter()
            .any(|&p| m.proc_info(p).is_some_and(|i| !i.zombie))
        {
            rounds += 1;
            assert!(rounds < 100_000, "the programs did not end");
            let mut runnable: Vec<u32> = [a, b]
                .iter()
                .filter_map(|&p| m.proc_info(p).filter(|i| !i.zombie))
                .flat_map(|i| i.threads)
                .collect();
            let turn = rounds % runnable.len().max(1);
            runnable.rotate_left(turn);
            let placed: Vec<(u32, u32)> = runnable
                .iter()
                .take(2)
                .enumerate()
                .map(|(c, &t)| (c as u32, t))
                .collect();
            for &(c, t) in &placed {
                m.switch_in(c, t);
            }
            for _ in 0..3 {
                m.tick_all();
                for &(c, t) in &placed {
                    if m.running_on(c) == Some(t) {
                        seen.push((c, t, user_pc(&m, t)));
                    }
                }
            }
            for &(c, _) in &placed {
                m.switch_out(c);
            }
        }
        let status = (
            m.proc_info(a).unwrap().exit_status,
            m.proc_info(b).unwrap().exit_status,
        );
        (seen, status)
    };
    let first = run();
    assert_eq!(first.1, (Some(0), Some(0)));
    assert_eq!(first, run());
}

#[test]
fn system_calls_served_without_a_stop_change_nothing_a_tick_sees() {
    use ksim::user_process::{UserProcess, UserThread};
    use ksim::{Activity, TickContext};
    for arch in ARCHES {
        let run = |fast: bool| {
            let image = programs::image(arch, "syscalls").unwrap();
            let mut p =
                UserProcess::exec(&image, "/usr/bin/syscalls", &["syscalls", "400"], &[], 7, 0)
                    .unwrap();
            if !fast {
                p.cpu().set_fast_syscalls(None);
            }
            let mut t = UserThread::new(p, 4_999);
            let mut ticks = Vec::new();
            while t.ended().is_none() {
                ticks.push(t.tick_on(&mut TickContext::standalone(0)));
                assert!(ticks.len() < 100_000);
            }
            let served = t.process().syscalls();
            let fast_served = {
                let p = t.process_mut();
                p.cpu().fast_syscalls_served()
            };
            (
                ticks,
                t.ended(),
                t.user_instructions(),
                t.kernel_instructions(),
                served,
                fast_served,
            )
        };
        let (slow, fast) = (run(false), run(true));
        assert_eq!(slow.1, Some(0), "{arch:?}");
        assert_eq!(slow.5, 0, "{arch:?}");
        // getpid and sched_yield twice a round, mostly without a stop.
        assert!(fast.5 > 400, "{arch:?}: {}", fast.5);
        assert_eq!(slow.0, fast.0, "{arch:?}: the ticks found the same places");
        assert_eq!(
            (slow.1, slow.2, slow.3, slow.4),
            (fast.1, fast.2, fast.3, fast.4),
            "{arch:?}"
        );
        assert!(slow.0.iter().any(|l| !l.user_mode), "{arch:?}");
    }
}

/// write(2) served inside the emulator's hook: the machine gets the
/// program's output whole and in order, on both architectures.
#[test]
fn output_written_without_a_stop_reaches_the_machine_in_order() {
    for arch in ARCHES {
        let m = machine(1, 10_000);
        let _g = m.enter();
        let pid = exec(&m, arch, "syscalls", &["syscalls", "40"]);
        run_to_exit(&m, pid, 1, 3);
        assert_eq!(m.proc_info(pid).unwrap().exit_status, Some(0), "{arch:?}");
        let want: String = (0..40)
            .step_by(8)
            .map(|r| format!("syscalls: round {r}\n"))
            .collect();
        assert_eq!(
            String::from_utf8(m.program_output(pid, 1)).unwrap(),
            want,
            "{arch:?}"
        );
    }
}

#[test]
fn random_system_calls_fail_cleanly() {
    // Seeded random byte strings decoded into system calls with bad and
    // good arguments (ksim/fuzz's syscalls target runs the same replay).
    let mut state = 0x5eed_u64;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u8
    };
    for arch in ARCHES {
        let image = programs::image(arch, "calls").unwrap();
        let mut calls = 0;
        for _ in 0..150 {
            let len = usize::from(next()) % 96;
            let bytes: Vec<u8> = (0..len).map(|_| next()).collect();
            calls += ksim::user_process::replay_syscalls(&image, &bytes);
        }
        assert!(calls > 150, "{arch:?}: {calls}");
    }
}

#[test]
fn the_kernel_copies_user_memory_only_where_the_rights_allow() {
    use ksim::cpu::{Cpu, Prot};
    let mut cpu = Cpu::new(Arch::X86_64, 0).unwrap();
    let (none, ro, rw) = (0x10_0000, 0x20_0000, 0x30_0000);
    cpu.map(none, 0x1000, Prot::NONE).unwrap();
    cpu.map(ro, 0x1000, Prot::READ).unwrap();
    cpu.map(rw, 0x2000, Prot::READ.union(Prot::WRITE)).unwrap();
    let mut buf = [0u8; 8];
    // The kernel's own view reads anything mapped; copyin does not read
    // a PROT_NONE page, nor past the end of a mapping.
    assert!(cpu.read(none, &mut buf).is_ok());
    assert!(cpu.read_user(none, &mut buf).is_err());
    assert!(cpu.read_user(ro, &mut buf).is_ok());
    assert!(cpu.read_user(rw + 0x1ffc, &mut buf).is_err());
    // copyout writes only writable pages, and nothing when a page is not.
    assert!(cpu.write_user(ro, &[1; 8]).is_err());
    cpu.read(ro, &mut buf).unwrap();
    assert_eq!(buf, [0; 8]);
    assert!(cpu.write_user(rw + 0x1000 - 4, &[2; 8]).is_ok());
    cpu.read(rw + 0x1000 - 4, &mut buf).unwrap();
    assert_eq!(buf, [2; 8]);
    cpu.protect(rw + 0x1000, 0x1000, Prot::READ).unwrap();
    assert!(cpu.write_user(rw + 0x1000 - 4, &[3; 8]).is_err());
    cpu.read(rw + 0x1000 - 4, &mut buf).unwrap();
    assert_eq!(buf, [2; 8]);
}

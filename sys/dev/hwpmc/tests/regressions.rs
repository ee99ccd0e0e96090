//! Minimal cases of the life-cycle defects that random operation
//! sequences found (see tools/hwpmc-random and tests/random.rs), one test
//! each; every one failed before its fix.

// Host test code: the kernel allocation lints of sys/clippy.toml do not
// apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use common::*;
use ksim::{CpuState, FileKind, Location, MachineConfig};
use uapi::pmc::*;
use uapi::pmclog::{PmclogBody, PmclogType, records};

fn sim(kenv: &[(&str, &str)]) -> Sim {
    let mut env = vec![("kern.hwpmc.mincount", "1")];
    env.extend_from_slice(kenv);
    Sim::with(MachineConfig::default(), &env)
}

/// How many PMCs the kernel's soft event `name` is armed for.
fn armed(s: &Sim, name: &str) -> i32 {
    s.m.soft_events()
        .iter()
        .find(|e| e.name == name)
        .map(|e| e.running)
        .expect("a kernel soft event")
}

fn system_pmc(s: &Sim, p: P, ev: &str, mode: PmcMode, cpu: u32, count: u64) -> PmcId {
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft(ev);
    a.pm_mode = mode.raw();
    a.pm_cpu = cpu;
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = count;
    s.allocate_raw(p, &a).unwrap()
}

fn with_log(s: &Sim, p: P) -> i32 {
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    fd
}

fn log_of(s: &Sim, p: P, fd: i32) -> Vec<PmclogBody<'static>> {
    let data: &'static [u8] = Box::leak(s.file(p, fd).into_boxed_slice());
    records(data)
        .map(|r| r.expect("the log parses").body)
        .collect()
}

#[test]
fn removing_the_log_stops_a_running_system_sampler() {
    let s = sim(&[]);
    let p = s.root();
    with_log(&s, p);
    let id = system_pmc(&s, p, "CLOCK.HARD", PmcMode::Ss, 0, 100);
    s.start(p, id).unwrap();
    assert_eq!(armed(&s, "CLOCK.HARD"), 1);
    s.configurelog(p, -1, 0).unwrap();
    assert_eq!(armed(&s, "CLOCK.HARD"), 0, "the counter stopped");
    assert_eq!(s.module().driver().system_samplers(), 0);
    s.release(p, id).unwrap();
    assert_eq!(armed(&s, "CLOCK.HARD"), 0, "and stays stopped");
    s.finish();
}

#[test]
fn an_owner_whose_log_went_is_no_longer_a_system_sampler() {
    let s = sim(&[]);
    let p = s.root();
    with_log(&s, p);
    let id = system_pmc(&s, p, "CLOCK.HARD", PmcMode::Ss, 0, 100);
    s.start(p, id).unwrap();
    s.configurelog(p, -1, 0).unwrap();
    // A new log hears nothing of unrelated processes.
    let fd = with_log(&s, p);
    let other = s.root();
    let child = s.fork(other);
    s.m.exit(child.pid);
    s.flushlog(p).unwrap();
    let log = log_of(&s, p, fd);
    assert!(
        log.iter().all(|b| !matches!(
            b,
            PmclogBody::Procfork { .. }
                | PmclogBody::Sysexit { .. }
                | PmclogBody::ProcCreate { .. }
        )),
        "{log:?}"
    );
    s.finish();
}

#[test]
fn system_samplers_hear_of_every_exec() {
    let s = sim(&[]);
    let p = s.root();
    let fd = with_log(&s, p);
    let id = system_pmc(&s, p, "CLOCK.HARD", PmcMode::Ss, 0, 100);
    s.start(p, id).unwrap();
    let other = s.root();
    s.m.exec(other.pid, "/usr/bin/yes", None);
    s.flushlog(p).unwrap();
    let execs: Vec<_> = log_of(&s, p, fd)
        .into_iter()
        .filter_map(|b| match b {
            PmclogBody::Procexec {
                pid,
                pmcid,
                pathname,
                ..
            } => Some((pid, pmcid, pathname.to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(
        execs,
        vec![(other.pid, PMC_ID_INVALID, b"/usr/bin/yes".to_vec())]
    );
    s.finish();
}

#[test]
fn stopping_a_stalled_sampler_does_not_starve_another_owner() {
    let s = sim(&[("kern.hwpmc.nsamples", "1")]);
    let (a, b, w1, w2) = (s.root(), s.root(), s.root(), s.root());
    with_log(&s, a);
    let sampler = system_pmc(&s, a, "PAGE_FAULT.ALL", PmcMode::Ss, 1, 1);
    s.start(a, sampler).unwrap();
    let counter = system_pmc(&s, b, "PAGE_FAULT.ALL", PmcMode::Sc, 2, 0);
    s.start(b, counter).unwrap();
    s.m.switch_in(1, w1.tid);
    s.m.switch_in(2, w2.tid);
    // Page faults are not followed by hardclock: the one-sample ring
    // fills, the next sample is dropped and the sampler stalls.
    for _ in 0..3 {
        s.m.soft_event(1, "PAGE_FAULT.ALL");
    }
    assert_eq!(s.stats(a).pm_intr_bufferfull, 1, "the sampler stalled");
    s.stop(a, sampler).unwrap();
    assert_eq!(armed(&s, "PAGE_FAULT.ALL"), 1, "only the counter's use");
    for _ in 0..5 {
        s.m.soft_event(2, "PAGE_FAULT.ALL");
    }
    // Draining the rings does not re-arm the stopped sampler either.
    s.m.tick(1);
    assert_eq!(armed(&s, "PAGE_FAULT.ALL"), 1);
    assert_eq!(s.read(b, counter), Ok(5));
    s.m.switch_out(1);
    s.m.switch_out(2);
    s.finish();
}

#[test]
fn closelog_is_written_when_every_log_buffer_is_full() {
    // One buffer per CPU, each taken by a record of the owner on that CPU:
    // none is left for CLOSELOG but its own.
    let s = sim(&[("kern.hwpmc.nbuffers_pcpu", "1")]);
    let p = s.root();
    let fd = with_log(&s, p);
    let ncpu = s.cpuinfo(p).pm_ncpu;
    for cpu in 0..ncpu {
        s.m.switch_in(cpu, p.tid);
        s.writelog(p, cpu).unwrap();
        s.m.switch_out(cpu);
    }
    assert_eq!(s.module().driver().log_buffers_free(), 0);
    s.closelog(p).unwrap();
    let kinds: Vec<PmclogType> = records(&s.file(p, fd)).map(|r| r.unwrap().kind()).collect();
    assert_eq!(kinds.last(), Some(&PmclogType::Closelog), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == PmclogType::Userdata).count(),
        ncpu as usize,
        "every record before CLOSELOG"
    );
    s.finish();
}

#[test]
fn writelog_after_closelog_is_refused() {
    let s = sim(&[]);
    let p = s.root();
    with_log(&s, p);
    s.closelog(p).unwrap();
    assert_eq!(s.writelog(p, 7), Err(ENOMEM));
    s.finish();
}

#[test]
fn a_system_pmc_stopped_while_its_cpu_is_away_is_stopped_at_release() {
    let s = sim(&[]);
    let p = s.root();
    let id = system_pmc(&s, p, "CLOCK.HARD", PmcMode::Sc, 1, 0);
    s.start(p, id).unwrap();
    s.m.set_cpu_state(1, CpuState::Disabled);
    assert_eq!(s.stop(p, id), Err(ENXIO));
    s.m.set_cpu_state(1, CpuState::Online);
    assert_eq!(armed(&s, "CLOCK.HARD"), 1, "still running");
    s.release(p, id).unwrap();
    assert_eq!(armed(&s, "CLOCK.HARD"), 0, "release stopped it");
    s.finish();
}

/// Starts a system sampling PMC of `owner` on CPU 0's page faults, a
/// sample each, with kernel and user call chains.
fn user_chain_sampler(s: &Sim, owner: P) {
    let mut r = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    r.pm_class = PmcClass::Soft.raw();
    r.pm_ev = s.soft("PAGE_FAULT.ALL");
    r.pm_mode = PmcMode::Ss.raw();
    r.pm_cpu = 0;
    r.pm_caps = PmcCaps::READ.bits();
    r.pm_count = 1;
    r.pm_flags = (PmcFlags::CALLCHAIN | PmcFlags::USERCALLCHAIN).bits();
    let id = s.allocate_raw(owner, &r).unwrap();
    s.start(owner, id).unwrap();
}

/// A kernel process never returns to user mode: its sample under a
/// sampler with user call chains is whole at once (the kernel's chain),
/// as FreeBSD defers only other threads' samples, instead of waiting in
/// the ring for a return that never comes.
#[test]
fn a_kernel_process_sample_does_not_wait_for_a_user_return() {
    let s = sim(&[]);
    let owner = s.root();
    let fd = with_log(&s, owner);
    // The log's writer is a kernel process (P_KPROC).
    let (kpid, _) =
        s.m.processes()
            .into_iter()
            .find(|(_, comm)| comm.starts_with("hwpmc: proc"))
            .expect("the log writer's kernel process");
    let info = s.m.proc_info(kpid).unwrap();
    assert_ne!(info.flags & ksim::P_KPROC, 0);
    let ktid = info.threads[0];
    user_chain_sampler(&s, owner);
    s.m.set_location(
        ktid,
        Location {
            user_mode: false,
            kernel_stack: vec![0xffff_ffff_8020_1010, 0xffff_ffff_8020_2020],
            user_stack: vec![],
            user_regs: None,
        },
    );
    s.m.switch_in(0, ktid);
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    // The next clock tick drains it: nothing waits for a user return.
    s.m.tick(0);
    assert_eq!(s.module().driver().samples_pending(), 0);
    s.m.switch_out(0);
    s.flushlog(owner).unwrap();
    let chains: Vec<usize> = log_of(&s, owner, fd)
        .iter()
        .filter_map(|b| match b {
            PmclogBody::Callchain { pid, pcs, .. } if *pid == kpid => Some(pcs.len()),
            _ => None,
        })
        .collect();
    assert_eq!(chains, [2], "the sample, with the kernel's two frames");
    assert_eq!(s.stats(owner).pm_intr_bufferfull, 0);
    s.finish();
}

#[test]
fn a_pending_sample_of_an_exited_thread_is_logged_without_another_sample() {
    let s = sim(&[]);
    let (owner, w, idle) = (s.root(), s.root(), s.root());
    let fd = with_log(&s, owner);
    // A sampler with user call chains: the sample of a thread in the
    // kernel waits for its return to user mode.
    user_chain_sampler(&s, owner);
    s.m.set_location(
        w.tid,
        Location {
            user_mode: false,
            kernel_stack: vec![0xffff_ffff_8020_1010],
            user_stack: vec![0x40_1010],
            user_regs: None,
        },
    );
    s.m.switch_in(0, w.tid);
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    s.m.switch_out(0);
    let d = s.module().driver();
    assert_eq!(d.samples_pending(), 1);
    s.m.exit(w.pid);
    // Another thread runs on the CPU; no event of the sampler happens.
    // Only hardclock looks at the ring (a switch-out would too, but from
    // thread context, where the exited thread is known to be gone).
    let hz = MachineConfig::default().hz;
    s.m.switch_in(0, idle.tid);
    for _ in 0..hz / 16 + 4 {
        s.m.tick(0);
    }
    assert_eq!(d.samples_pending(), 0, "logged within 1/16 s");
    s.m.switch_out(0);
    s.flushlog(owner).unwrap();
    assert!(
        log_of(&s, owner, fd)
            .iter()
            .any(|b| matches!(b, PmclogBody::Callchain { pid, .. } if *pid == w.pid))
    );
    s.finish();
}

#[test]
fn setcount_gives_a_process_counting_pmc_its_starting_count() {
    let s = sim(&[]);
    let p = s.root();
    let id = s.soft_tc(p);
    s.setcount(p, id, 100).unwrap();
    s.start(p, id).unwrap();
    s.run(p, 0, 3);
    assert_eq!(s.read(p, id), Ok(103));
    s.finish();
}

#[test]
fn threads_and_processes_may_exit_while_on_a_cpu() {
    let s = sim(&[]);
    let p = s.root();
    let id = s.soft_tc(p);
    s.start(p, id).unwrap();
    let t = s.m.thread_create(p.pid);
    s.m.switch_in(1, t);
    s.m.thread_exit(t);
    s.m.switch_in(0, p.tid);
    s.m.tick(0);
    s.m.exit(p.pid);
    assert_eq!(armed(&s, "CLOCK.HARD"), 0);
    s.finish();
}

#[test]
fn a_process_in_the_middle_of_exiting_cannot_be_attached_to() {
    let s = sim(&[]);
    let (p, t) = (s.root(), s.root());
    let id = s.soft_tc(p);
    s.m.exit_begin(t.pid);
    assert_eq!(s.attach(p, id, t.pid as i32), Err(ESRCH));
    assert_eq!(s.detach(p, id, t.pid as i32), Err(ESRCH));
    s.m.exit_finish(t.pid);
    assert!(!s.module().driver().is_target(t.pid));
    s.finish();
}

#[test]
fn a_reused_pid_is_not_the_old_process_s_target() {
    let cfg = MachineConfig {
        pid_max: 110,
        ..MachineConfig::default()
    };
    let s = Sim::with(cfg, &[]);
    let p = s.root();
    let id = s.soft_tc(p);
    let t = s.root();
    s.attach(p, id, t.pid as i32).unwrap();
    s.m.exit(t.pid);
    s.m.reap(t.pid);
    // The pid space is small: the ninth process gets the old pid back.
    let spawned: Vec<P> = (0..9).map(|_| s.root()).collect();
    let again = *spawned.last().unwrap();
    assert_eq!(again.pid, t.pid, "the pid is reused");
    assert!(!s.module().driver().is_target(again.pid));
    assert_eq!(
        s.detach(p, id, again.pid as i32),
        Err(ESRCH),
        "no descriptor"
    );
    // Room for the unloading process.
    s.m.exit(spawned[0].pid);
    s.m.reap(spawned[0].pid);
    s.finish();
}

#[test]
fn copyout_to_a_read_only_page_fails_half_way_with_efault() {
    let s = sim(&[]);
    let p = s.root();
    let id = s.soft_tc(p);
    s.setcount(p, id, 0x1122_3344_5566_7788).unwrap();
    // PMCRW: the id and flags on a writable page, the value on a
    // read-only one: copyin works, copyout of the old value faults.
    let page = ksim::PAGE_SIZE;
    let base = s.m.user_alloc(p.pid, 2 * page as usize);
    let arg = base + page - 8;
    let mut rw = PmcOpPmcrw {
        pm_pmcid: id,
        pm_flags: PmcFlags::OLDVALUE.bits(),
        pm_value: 0,
    };
    s.m.user_write(p.pid, arg, uapi::AsBytes::as_bytes(&rw));
    s.m.user_protect(p.pid, base + page, page, ksim::UserProt::ReadOnly);
    let r =
        s.m.syscall(p.tid, s.sysnum, &[PmcOp::Pmcrw.raw() as u64, arg]);
    assert_eq!(r, Err(EFAULT.get()));
    let back = s.m.user_read(p.pid, arg, 16);
    rw.pm_value = u64::from_ne_bytes(back[8..16].try_into().unwrap());
    assert_eq!(rw.pm_value, 0, "nothing landed on the read-only page");
    // Unmapped: copyin itself faults.
    s.m.user_protect(p.pid, base + page, page, ksim::UserProt::None);
    let r =
        s.m.syscall(p.tid, s.sysnum, &[PmcOp::Pmcrw.raw() as u64, arg]);
    assert_eq!(r, Err(EFAULT.get()));
    s.finish();
}

/// A sampler stalled on a full ring whose samples all wait for their
/// thread's return to user mode stays stalled through a sweep that frees
/// nothing, as FreeBSD restarts stalled PMCs only after a sweep that took
/// a sample off its rings (it had been restarted at every sweep, to drop
/// its next sample on the same full ring and stall again); it runs again
/// once a sweep makes room.
#[test]
fn a_stalled_sampler_waits_for_a_sweep_that_frees_its_ring() {
    let s = sim(&[("kern.hwpmc.nsamples", "4")]);
    let (owner, w) = (s.root(), s.root());
    let fd = with_log(&s, owner);
    user_chain_sampler(&s, owner);
    let location = |user_mode| Location {
        user_mode,
        kernel_stack: vec![0xffff_ffff_8020_1010],
        user_stack: vec![0x40_1010],
        user_regs: None,
    };
    s.m.set_location(w.tid, location(false));
    s.m.switch_in(0, w.tid);
    // A count of 1: the first sample at the second event, then one an
    // event; four fill the ring, the next stalls the sampler.
    for _ in 0..6 {
        s.m.soft_event(0, "PAGE_FAULT.ALL");
    }
    let d = s.module().driver();
    assert_eq!(d.samples_pending(), 4);
    assert_eq!(s.stats(owner).pm_intr_bufferfull, 1, "stalled");
    // The clock's sweep finds every sample waiting: it frees nothing, and
    // the sampler stays stalled through the next events.
    s.m.tick(0);
    assert_eq!(d.samples_pending(), 4);
    for _ in 0..3 {
        s.m.soft_event(0, "PAGE_FAULT.ALL");
    }
    assert_eq!(s.stats(owner).pm_intr_bufferfull, 1, "still stalled");
    // Back in user mode: the samples get their user chains and a sweep
    // logs them; the sampler runs again.
    s.m.set_location(w.tid, location(true));
    s.m.tick(0);
    s.m.tick(0);
    assert_eq!(d.samples_pending(), 0);
    s.m.set_location(w.tid, location(false));
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    assert_eq!(d.samples_pending(), 1, "sampling again");
    assert_eq!(s.stats(owner).pm_intr_bufferfull, 1);
    s.m.switch_out(0);
    s.flushlog(owner).unwrap();
    let chains = log_of(&s, owner, fd)
        .iter()
        .filter(|b| matches!(b, PmclogBody::Callchain { pid, .. } if *pid == w.pid))
        .count();
    assert_eq!(chains, 4, "the four samples of the full ring");
    s.finish();
}

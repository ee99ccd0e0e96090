//! Sampling: SOFT sampling PMCs take samples into per-CPU rings, call
//! chains are captured (kernel at the interrupt, user at the return to user
//! mode), the rings drain into CALLCHAIN records, and every sample is
//! either logged or counted.

// Host test code: the kernel crates' allocation lints (sys/dev/clippy.toml)
// do not apply to it.
#![allow(
    clippy::disallowed_types,
    clippy::disallowed_macros,
    clippy::disallowed_methods
)]

mod common;

use std::sync::atomic::Ordering;

use common::*;
use ksim::{FileKind, Location, MachineConfig};
use uapi::pmc::*;
use uapi::pmclog::{PmclogBody, PmclogType, records};

const KPC: [u64; 5] = [
    0xffff_ffff_8020_1010,
    0xffff_ffff_8020_2020,
    0xffff_ffff_8020_3030,
    0xffff_ffff_8020_4040,
    0xffff_ffff_8020_5050,
];
const UPC: [u64; 3] = [0x40_1010, 0x40_2020, 0x40_3030];

fn kernel_loc() -> Location {
    Location {
        user_mode: false,
        kernel_stack: KPC.to_vec(),
        user_stack: UPC.to_vec(),
        user_regs: None,
    }
}

fn user_loc() -> Location {
    Location {
        user_mode: true,
        kernel_stack: vec![],
        user_stack: UPC.to_vec(),
        user_regs: None,
    }
}

fn sim(kenv: &[(&str, &str)]) -> Sim {
    let mut env = vec![("kern.hwpmc.mincount", "1")];
    env.extend_from_slice(kenv);
    Sim::with(MachineConfig::default(), &env)
}

/// A system sampling PMC on `cpu` with reload `count`, its owner logging
/// to a regular file.
fn ss(s: &Sim, p: P, ev: &str, cpu: u32, count: u64, flags: PmcFlags) -> (PmcId, i32) {
    let fd = s.open(p, FileKind::Regular, true);
    s.configurelog(p, fd, 0).unwrap();
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft(ev);
    a.pm_mode = PmcMode::Ss.raw();
    a.pm_cpu = cpu;
    a.pm_flags = flags.bits();
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = count;
    let id = s.allocate_raw(p, &a).unwrap();
    s.start(p, id).unwrap();
    (id, fd)
}

/// A process sampling PMC on CLOCK.HARD with reload `count`, attached to
/// `target` and started; its owner logs to a regular file.
fn ts(s: &Sim, owner: P, target: P, count: u64) -> (PmcId, i32) {
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    (ts_more(s, owner, target, count), fd)
}

/// A thread in the kernel, sampled on every tick of CPU 1 with kernel and
/// user call chains: (machine, owner, thread, log descriptor).
fn kernel_thread_sampled_with_user_chains() -> (Sim, P, P, i32) {
    let s = sim(&[]);
    let (owner, w) = (s.root(), s.root());
    let (_, fd) = ss(
        &s,
        owner,
        "CLOCK.HARD",
        1,
        1,
        PmcFlags::CALLCHAIN | PmcFlags::USERCALLCHAIN,
    );
    s.m.set_location(w.tid, kernel_loc());
    (s, owner, w, fd)
}

struct Chain {
    pid: u32,
    tid: u32,
    pmcid: u32,
    cpu: u32,
    user: bool,
    pcs: Vec<u64>,
}

fn chains(data: &[u8]) -> Vec<Chain> {
    records(data)
        .map(|r| r.expect("the log parses"))
        .filter_map(|r| match r.body {
            PmclogBody::Callchain {
                pid,
                tid,
                pmcid,
                cpuflags,
                pcs,
            } => Some(Chain {
                pid,
                tid,
                pmcid,
                cpu: cpuflags >> 16,
                user: cpuflags & PMC_CC_F_USERSPACE != 0,
                pcs: pcs.iter().map(|p| p as u64).collect(),
            }),
            _ => None,
        })
        .collect()
}

#[test]
fn the_first_sample_comes_after_count_plus_one_events_then_every_count() {
    let s = sim(&[]);
    let (owner, w) = (s.root(), s.root());
    let (id, fd) = ss(&s, owner, "CLOCK.HARD", 1, 3, PmcFlags::empty());
    s.m.set_location(w.tid, user_loc());
    s.run(w, 1, 10); // samples at ticks 4, 7 and 10
    s.run(w, 2, 10); // another CPU: not this PMC's
    s.flushlog(owner).unwrap();
    let c = chains(&s.file(owner, fd));
    assert_eq!(c.len(), 3);
    for ch in &c {
        assert_eq!(
            (ch.pid, ch.tid, ch.pmcid, ch.cpu, ch.user),
            (w.pid, w.tid, id, 1, true)
        );
        assert_eq!(ch.pcs, [UPC[0]], "without CALLCHAIN, just the PC");
    }
    s.finish();
}

#[test]
fn kernel_call_chains_are_taken_at_the_interrupt_and_cut_at_callchaindepth() {
    let s = sim(&[("kern.hwpmc.callchaindepth", "3")]);
    let (owner, w) = (s.root(), s.root());
    let (_, fd) = ss(&s, owner, "CLOCK.HARD", 1, 1, PmcFlags::CALLCHAIN);
    s.m.set_location(w.tid, kernel_loc());
    s.run(w, 1, 4);
    s.flushlog(owner).unwrap();
    let c = chains(&s.file(owner, fd));
    assert_eq!(c.len(), 3, "events 2, 3 and 4");
    for ch in &c {
        assert!(!ch.user);
        assert_eq!(ch.pcs, KPC[..3], "the innermost 3 frames");
    }
    s.finish();
}

#[test]
fn user_call_chains_are_completed_at_the_return_to_user_mode() {
    let s = sim(&[]);
    let (owner, w) = (s.root(), s.root());
    let (_, fd) = ss(&s, owner, "CLOCK.HARD", 1, 1, PmcFlags::CALLCHAIN);
    s.m.set_location(w.tid, user_loc());
    s.run(w, 1, 3);
    s.flushlog(owner).unwrap();
    let c = chains(&s.file(owner, fd));
    assert_eq!(c.len(), 2);
    for ch in &c {
        assert!(ch.user);
        assert_eq!(ch.pcs, UPC, "the whole user stack");
    }
    assert!(s.module().driver().stats().merges.fetch() >= 2);
    assert!(s.m.sysctl_get("kern.hwpmc.stats.merges") >= Some(2));
    s.finish();
}

#[test]
fn usercallchain_appends_the_user_stack_to_a_kernel_chain() {
    let (s, owner, w, fd) = kernel_thread_sampled_with_user_chains();
    s.run(w, 1, 2);
    // The thread goes back to user mode: its AST completes the chain.
    s.m.set_location(w.tid, user_loc());
    s.run(w, 1, 1);
    s.flushlog(owner).unwrap();
    let c = chains(&s.file(owner, fd));
    assert!(!c.is_empty());
    let first = &c[0];
    assert!(!first.user);
    let mut want = KPC.to_vec();
    want.extend_from_slice(&UPC);
    assert_eq!(first.pcs, want, "kernel frames, then user frames");
    s.finish();
}

#[test]
fn a_sample_waits_at_most_a_sixteenth_of_a_second_for_its_user_chain() {
    // The clock interrupt cannot look threads up (on FreeBSD tdfind takes
    // locks): a sample waiting for a thread that stays in the kernel is
    // logged with its kernel chain once it is 1/16 s old.
    let (s, owner, w, fd) = kernel_thread_sampled_with_user_chains();
    let hz = MachineConfig::default().hz;
    s.run(w, 1, (hz / 16 + 20) as u32);
    s.flushlog(owner).unwrap();
    let c = chains(&s.file(owner, fd));
    assert!(c.len() >= 10, "{} chains", c.len());
    for ch in &c {
        assert!(!ch.user);
        assert_eq!(ch.pcs, KPC, "kernel frames only");
    }
    s.finish();
}

#[test]
fn a_full_ring_drops_and_counts_then_recovers_after_draining() {
    let s = sim(&[("kern.hwpmc.nsamples", "4")]);
    let (owner, w) = (s.root(), s.root());
    let (_, fd) = ss(&s, owner, "PAGE_FAULT.ALL", 0, 1, PmcFlags::empty());
    s.m.set_location(w.tid, user_loc());
    s.m.switch_in(0, w.tid);
    for _ in 0..10 {
        s.m.soft_event(0, "PAGE_FAULT.ALL");
    }
    let st = s.stats(owner);
    assert_eq!(
        st.pm_intr_bufferfull, 1,
        "one dropped, then the counter stalls"
    );
    let d = s.module().driver();
    assert_eq!(d.sample_stats().taken.load(Ordering::Relaxed), 4);
    assert_eq!(d.samples_pending(), 4);
    s.m.tick(0); // hardclock drains the ring and restarts the counter
    assert_eq!(d.samples_pending(), 0);
    s.m.soft_event(0, "PAGE_FAULT.ALL");
    s.m.switch_out(0);
    s.flushlog(owner).unwrap();
    let kinds: Vec<PmclogType> = records(&s.file(owner, fd))
        .map(|r| r.unwrap().kind())
        .collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == PmclogType::Callchain)
            .count(),
        5
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == PmclogType::Dropnotify)
            .count(),
        1
    );
    s.finish();
}

#[test]
fn samples_of_an_owner_without_a_log_are_counted_not_lost() {
    let s = sim(&[]);
    let p = s.root();
    let id = ts_alloc(&s, p, 1);
    s.start(p, id).unwrap();
    s.m.set_location(p.tid, user_loc());
    s.run(p, 2, 9);
    let d = s.module().driver();
    let ss = d.sample_stats();
    assert!(ss.taken.load(Ordering::Relaxed) > 0);
    assert_eq!(
        ss.taken.load(Ordering::Relaxed),
        ss.unlogged.load(Ordering::Relaxed) + d.samples_pending() as u64
    );
    s.finish();
}

#[test]
fn a_long_run_logs_every_sample_and_parses_completely() {
    let s = sim(&[("kern.hwpmc.nsamples", "64")]);
    let owner = s.root();
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let ev = s.soft("CLOCK.HARD");
    let mut ids = Vec::new();
    for cpu in 0..4 {
        let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
        a.pm_class = PmcClass::Soft.raw();
        a.pm_ev = ev;
        a.pm_mode = PmcMode::Ss.raw();
        a.pm_cpu = cpu;
        a.pm_flags = PmcFlags::CALLCHAIN.bits();
        a.pm_caps = PmcCaps::READ.bits();
        a.pm_count = 2;
        let id = s.allocate_raw(owner, &a).unwrap();
        s.start(owner, id).unwrap();
        ids.push(id);
    }
    let root = s.root();
    let mut live = vec![root];
    for round in 0..60u32 {
        let parent = live[(round as usize * 7) % live.len()];
        let child = s.fork(parent);
        s.m.set_location(
            child.tid,
            if round % 2 == 0 {
                kernel_loc()
            } else {
                user_loc()
            },
        );
        live.push(child);
        for (i, p) in live.iter().enumerate() {
            s.run(*p, (i as u32 + round) % 4, 1 + (round % 3));
        }
        if round % 5 == 4 {
            s.m.exec(child.pid, "/usr/bin/true", None);
        }
        if round % 4 == 3 && live.len() > 3 {
            let gone = live.remove(1);
            s.m.exit(gone.pid);
        }
    }
    s.configurelog(owner, -1, 0).unwrap();
    let data = s.file(owner, fd);
    let recs: Vec<_> = records(&data)
        .collect::<Result<_, _>>()
        .expect("no gap, overlap or torn record");
    assert_eq!(recs.first().unwrap().kind(), PmclogType::Initialize);
    assert_eq!(recs.last().unwrap().kind(), PmclogType::Closelog);
    let logged = recs
        .iter()
        .filter(|r| r.kind() == PmclogType::Callchain)
        .count() as u64;
    let d = s.module().driver();
    let st = d.sample_stats();
    assert!(logged > 500, "{logged} samples");
    assert_eq!(st.logged.load(Ordering::Relaxed), logged);
    assert_eq!(
        st.taken.load(Ordering::Relaxed),
        st.logged.load(Ordering::Relaxed)
            + st.unlogged.load(Ordering::Relaxed)
            + d.samples_pending() as u64,
        "every sample taken is logged or counted"
    );
    s.finish();
}

#[test]
fn each_thread_of_a_target_keeps_its_own_sampling_count() {
    let s = sim(&[]);
    let (owner, target) = (s.root(), s.root());
    let (_, fd) = ts(&s, owner, target, 3);
    // A thread created after the attach gets its own count too.
    let second = P {
        pid: target.pid,
        tid: s.m.thread_create(target.pid),
    };
    for t in [target, second] {
        s.m.set_location(t.tid, user_loc());
    }
    // Interleaved time slices: 4 events each, so each thread's first
    // sample falls on its own 4th event (count + 1).
    for _ in 0..2 {
        s.run(target, 1, 2);
        s.run(second, 2, 2);
    }
    s.flushlog(owner).unwrap();
    let c = chains(&s.file(owner, fd));
    let per = |tid| c.iter().filter(|ch| ch.tid == tid).count();
    assert_eq!(
        (per(target.tid), per(second.tid)),
        (1, 1),
        "one sample per thread"
    );
    s.m.thread_exit(second.tid);
    s.finish();
}

/// A process sampling PMC keeps its remaining count across context
/// switches, also when a switch comes exactly as the count reaches zero
/// (slices that divide the count): 3500 events at a count of 1000 give
/// three samples however the thread's time is cut.
#[test]
fn process_sampling_counts_survive_context_switches() {
    for slice in [3500u32, 700, 500, 100, 10, 1] {
        // The driver's own minimum count, 1000, not this file's 1.
        let s = Sim::new();
        let (owner, worker) = (s.root(), s.root());
        let (_, fd) = ts(&s, owner, worker, 1000);
        for i in 0..3500 / slice {
            s.run(worker, i % 2, slice);
        }
        s.configurelog(owner, -1, 0).unwrap();
        assert_eq!(
            chains(&s.file(owner, fd)).len(),
            3,
            "slices of {slice} ticks"
        );
        s.finish();
    }
}

/// A process sampling PMC of `count` on CLOCK.HARD, allocated by `owner`.
fn ts_alloc(s: &Sim, owner: P, count: u64) -> PmcId {
    let mut a = <PmcOpPmcallocate as uapi::Plain>::zeroed();
    a.pm_class = PmcClass::Soft.raw();
    a.pm_ev = s.soft("CLOCK.HARD");
    a.pm_mode = PmcMode::Ts.raw();
    a.pm_cpu = PMC_CPU_ANY;
    a.pm_caps = PmcCaps::READ.bits();
    a.pm_count = count;
    s.allocate_raw(owner, &a).unwrap()
}

/// [`ts`] for an owner whose log is configured already.
fn ts_more(s: &Sim, owner: P, target: P, count: u64) -> PmcId {
    let id = ts_alloc(s, owner, count);
    s.attach(owner, id, target.pid as i32).unwrap();
    s.start(owner, id).unwrap();
    id
}

/// A sampling PMC attached on the row another one was detached from
/// inherits none of its per-thread counts: the thread starts from the new
/// PMC's reload count (FreeBSD's unlink clears them). A counting PMC keeps
/// the target tracked, with its thread descriptors, in between.
#[test]
fn a_detached_sampler_leaves_no_thread_count_on_its_row() {
    let s = sim(&[]);
    let (owner, target) = (s.root(), s.root());
    let keep = s.soft_tc(owner);
    s.attach(owner, keep, target.pid as i32).unwrap();
    let (first, fd) = ts(&s, owner, target, 10);
    s.m.set_location(target.tid, user_loc());
    // 9 of the 11 events to the first sample: 2 left in the thread's
    // descriptor at the switch-out.
    s.run(target, 1, 9);
    s.detach(owner, first, target.pid as i32).unwrap();
    s.release(owner, first).unwrap();
    let second = ts_more(&s, owner, target, 5);
    assert_eq!(
        uapi::pmc::pmc_id_to_rowindex(second),
        uapi::pmc::pmc_id_to_rowindex(first),
        "the same row"
    );
    s.run(target, 1, 5);
    s.flushlog(owner).unwrap();
    assert_eq!(chains(&s.file(owner, fd)).len(), 0, "5 of the 6 events");
    s.run(target, 1, 1);
    s.flushlog(owner).unwrap();
    assert_eq!(chains(&s.file(owner, fd)).len(), 1, "the 6th");
    s.finish();
}

/// A thread that an attach finds already linked into its process, before
/// its creation hook runs, has one descriptor after the hook, not two
/// (FreeBSD's pmc_process_thread_add looks first); its exit frees it.
#[test]
fn a_thread_created_during_an_attach_gets_one_descriptor() {
    let s = sim(&[]);
    let (owner, target) = (s.root(), s.root());
    let fd = s.open(owner, FileKind::Regular, true);
    s.configurelog(owner, fd, 0).unwrap();
    let mut id = None;
    let tid = s.m.thread_create_interleaved(target.pid, |_| {
        id = Some(ts_more(&s, owner, target, 5));
    });
    let driver = s.module().driver();
    assert_eq!(driver.thread_descriptors(target.pid, tid), 1);
    assert_eq!(driver.thread_descriptors(target.pid, target.tid), 1);
    let free = driver.thread_freelist_entries();
    s.m.thread_exit(tid);
    assert_eq!(s.module().driver().thread_descriptors(target.pid, tid), 0);
    assert_eq!(s.module().driver().thread_freelist_entries(), free + 1);
    assert!(id.is_some());
    s.finish();
}

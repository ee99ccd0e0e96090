//! Sequences the harness found failing, shrunk, kept so that they stay
//! fixed. Each names what was wrong.

use hwpmc_random::{Op, run};

/// CLOSELOG queued the CPUs' buffers, released the log's lock, then
/// marked the log closed: a sample another CPU logged in between went
/// into a buffer nobody wrote (counted as logged, missing from the file).
#[test]
fn a_sample_logged_while_the_log_closes_is_not_lost() {
    let ops = vec![
        Op::Exit { proc: 64651 },
        Op::Fork { proc: 22552 },
        Op::Exit { proc: 11468 },
        Op::Profile {
            proc: 24515,
            system: false,
            cpu: 3,
            target: 26631,
            chains: false,
        },
        Op::Spawn { root: true },
        Op::SwitchIn {
            cpu: 2,
            proc: 27340,
            thread: 10059,
        },
        Op::Race {
            seed: 3655466050,
            proc: 59123,
            pmc: 5253,
            call: 9,
            cpu: 1,
            faults: true,
            writers: false,
        },
        Op::Profile {
            proc: 56479,
            system: false,
            cpu: 2,
            target: 1173,
            chains: true,
        },
        Op::Race {
            seed: 3992437308,
            proc: 49413,
            pmc: 46281,
            call: 2,
            cpu: 3,
            faults: true,
            writers: false,
        },
        Op::Race {
            seed: 2019008861,
            proc: 32684,
            pmc: 63066,
            call: 7,
            cpu: 1,
            faults: false,
            writers: true,
        },
    ];
    if let Err(f) = run(&ops) {
        panic!("{f}");
    }
}

/// A process PMC whose row stalled on a full ring while the PMC was
/// stopped lost its stalled mark at the next sweep without being re-armed;
/// started again, it stayed dead on that CPU until its thread switched out.
/// (Seed 1005964's 500 steps; a sequence of 47 races and profiles that the
/// shrinker could not cut further.)
#[test]
fn a_restarted_pmc_whose_row_stalled_while_stopped_counts_again() {
    if let Err(f) = run(&hwpmc_random::sequence(1005964, 500)) {
        panic!("{f}");
    }
}

/// The harness itself: a WRITELOG among the garbage, with fewer than four
/// bytes given, made the harness read past them (the driver reads four,
/// the rest from the memory around them).
#[test]
fn a_short_garbage_writelog_is_accounted() {
    let ops = vec![
        Op::Profile {
            proc: 64854,
            system: true,
            cpu: 2,
            target: 31077,
            chains: false,
        },
        Op::FaultNext { readonly: false },
        Op::Garbage {
            proc: 61410,
            op: 16,
            bytes: vec![],
        },
    ];
    if let Err(f) = run(&ops) {
        panic!("{f}");
    }
}

/// A SOFT PMC's start and stop take no lock of the driver's (only the
/// kernel's soft-event lock, as FreeBSD's): a system sampler stopped while
/// its CPU's interrupt path found the ring full was left with its row
/// stalled, since the interrupt path set the mark after the stop cleared
/// it. (Seed 3313's 200 steps, shrunk.)
#[test]
fn a_sampler_stopped_while_its_ring_fills_is_not_left_stalled() {
    let ops = vec![
        Op::Race {
            seed: 699102405,
            proc: 50825,
            pmc: 40150,
            call: 3,
            cpu: 0,
            faults: false,
            writers: false,
        },
        Op::Spawn { root: true },
        Op::Fork { proc: 17888 },
        Op::Exit { proc: 61711 },
        Op::Fork { proc: 36283 },
        Op::Fork { proc: 9339 },
        Op::Race {
            seed: 97450537,
            proc: 40602,
            pmc: 25885,
            call: 2,
            cpu: 0,
            faults: true,
            writers: true,
        },
        Op::Exit { proc: 6903 },
        Op::Spawn { root: false },
        Op::Allocate {
            proc: 31450,
            event: 2,
            mode: 2,
            cpu: 4,
            flags: 0,
            count: 14045260461902713475,
            class: 6,
        },
        Op::Profile {
            proc: 18542,
            system: true,
            cpu: 1,
            target: 19882,
            chains: false,
        },
        Op::Profile {
            proc: 30738,
            system: false,
            cpu: 3,
            target: 59962,
            chains: false,
        },
        Op::Fork { proc: 26127 },
        Op::Fork { proc: 7 },
        Op::PageFault { cpu: 1, n: 4 },
        Op::Race {
            seed: 3697649029,
            proc: 12179,
            pmc: 52386,
            call: 8,
            cpu: 0,
            faults: true,
            writers: false,
        },
    ];
    if let Err(f) = run(&ops) {
        panic!("{f}");
    }
}

/// The switch-out visits only the rows a switch-in loaded (a mask per
/// CPU). Releasing a PMC cleared its row's bit on every CPU, also where
/// the row held another process's PMC, which then stayed loaded past its
/// switch-out (found by the mask check while the mask was being written;
/// seed 1's first 200 steps, shrunk).
#[test]
fn releasing_a_pmc_keeps_another_pmc_loaded_on_its_row() {
    use hwpmc_random::PmcCall;
    let ops = vec![
        Op::Profile {
            proc: 50796,
            system: false,
            cpu: 3,
            target: 63212,
            chains: false,
        },
        Op::Allocate {
            proc: 1640,
            event: 0,
            mode: 2,
            cpu: 4,
            flags: 384,
            count: 0,
            class: 4,
        },
        Op::Pmc {
            proc: 64781,
            pmc: 46911,
            what: PmcCall::Release,
        },
        Op::Allocate {
            proc: 38109,
            event: 1,
            mode: 3,
            cpu: 0,
            flags: 128,
            count: 2,
            class: 6,
        },
        Op::Pmc {
            proc: 40878,
            pmc: 57516,
            what: PmcCall::Start,
        },
        Op::SwitchIn {
            cpu: 2,
            proc: 27427,
            thread: 65347,
        },
        Op::Exec {
            proc: 51552,
            setid: false,
        },
    ];
    if let Err(f) = run(&ops) {
        panic!("{f}");
    }
}

/// A process sampler's soft event fired on its target's CPU while the
/// owner stopped it: the sample was refused, the row stalled (giving the
/// event back), and the hook then cleared the stall because the PMC was
/// no longer running. But a process PMC's stop leaves its rows alone, so
/// the row, still loaded, was neither armed nor stalled: restarted before
/// its target's next switch-out, the PMC counted nothing there, and no
/// sweep re-armed it.
#[test]
fn a_restarted_soft_sampler_of_a_running_target_is_armed() {
    let ops = vec![
        Op::Profile {
            proc: 33340,
            system: false,
            cpu: 1,
            target: 17759,
            chains: true,
        },
        Op::SwitchIn {
            cpu: 3,
            proc: 52635,
            thread: 18143,
        },
        Op::Fork { proc: 13271 },
        Op::Race {
            seed: 2415456811,
            proc: 35771,
            pmc: 48809,
            call: 1,
            cpu: 2,
            faults: true,
            writers: true,
        },
        Op::PageFault { cpu: 3, n: 1 },
        Op::Fork { proc: 19616 },
        Op::Race {
            seed: 1749559240,
            proc: 1263,
            pmc: 28464,
            call: 1,
            cpu: 2,
            faults: true,
            writers: false,
        },
        Op::Race {
            seed: 3083916796,
            proc: 17369,
            pmc: 63630,
            call: 0,
            cpu: 2,
            faults: true,
            writers: true,
        },
    ];
    run(&ops).unwrap();
}

//! Process control on the simulated machine: a command is forked held,
//! runs only once started, for its time, and is found by name; attach
//! failures are told apart as pmcstat needs.

use std::time::Duration;

use libpmcstat::{
    AttachError, CreateError, StartError, attach_pmcs, find_targets, process_control,
};
use pmc::libpmc_sim::{SimConfig, SimTransport};
use pmc::pmc::Pmc;
use pmc::regcomp::Regex;
use uapi::pmc::{PMC_CPU_ANY, PmcMode};

fn machine(cpus: u32) -> Pmc {
    let sim = SimTransport::boot(SimConfig {
        cpus,
        comm: "sim_process".into(),
        ..SimConfig::default()
    })
    .expect("the simulated machine boots");
    Pmc::init(Box::new(sim)).expect("pmc_init")
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

fn clock_counter(pmc: &Pmc) -> u32 {
    pmc.allocate(
        "SOFT-CLOCK.HARD",
        PmcMode::Tc.raw(),
        0,
        PMC_CPU_ANY as i32,
        0,
    )
    .unwrap()
}

#[test]
fn a_command_runs_only_once_started_and_for_its_time() {
    let pmc = machine(2);
    let procs = process_control(&pmc);
    let pid = procs.create_process(&argv(&["work", "0.5", "2"])).unwrap();
    let id = clock_counter(&pmc);
    assert_eq!(attach_pmcs(&pmc, [(id, "clock")], &[pid]), Ok(1));
    pmc.start(id).unwrap();
    procs.wait(Duration::from_millis(100));
    assert!(!procs.exited(pid));
    assert_eq!(pmc.read(id).unwrap(), 0, "a held command does not run");
    procs.start_process(pid).unwrap();
    procs.wait(Duration::from_millis(200));
    assert!(!procs.exited(pid));
    assert_eq!(
        pmc.read(id).unwrap(),
        400,
        "two threads on two CPUs for 200 ticks"
    );
    procs.wait(Duration::from_millis(400));
    assert!(procs.exited(pid), "the command ends after its 0.5 s");
    assert_eq!(pmc.read(id).unwrap(), 1000, "2 threads for 500 ticks");
}

#[test]
fn targets_are_found_by_command_name() {
    let pmc = machine(1);
    let procs = process_control(&pmc);
    let pid = procs.create_process(&argv(&["work", "5"])).unwrap();
    procs.start_process(pid).unwrap();
    let by = |re: &str| find_targets(&*procs, &[Regex::new(re).unwrap()]).unwrap();
    assert_eq!(by("^work$"), vec![pid]);
    let program = pmc.transport().simulator().unwrap().program_pid() as i32;
    // The command's process took its name at its exec.
    assert_eq!(by("^sim_proc"), vec![program]);
    assert!(by("^nosuch$").is_empty());
}

#[test]
fn an_unknown_command_fails_as_a_failed_exec() {
    let pmc = machine(1);
    let procs = process_control(&pmc);
    let e = procs.create_process(&argv(&["nosuch"])).unwrap_err();
    assert_eq!(e, CreateError::Exec(libc::ENOENT));
    assert_eq!(e.message("nosuch"), "ERROR: execvp \"nosuch\" failed");
    for bad in [
        &["work", "0"][..],
        &["work", "1", "65"],
        &["work", "1", "2", "3"],
    ] {
        assert_eq!(
            procs.create_process(&argv(bad)),
            Err(CreateError::Exec(libc::ENOENT)),
            "{bad:?}"
        );
    }
    assert_eq!(
        procs.start_process(12345),
        Err(StartError::Token(libc::ESRCH))
    );
}

#[test]
fn an_interrupted_command_ends_at_once() {
    let pmc = machine(1);
    let procs = process_control(&pmc);
    let pid = procs.create_process(&argv(&["work", "100"])).unwrap();
    procs.start_process(pid).unwrap();
    procs.wait(Duration::from_millis(10));
    assert!(!procs.exited(pid));
    procs.kill_process(pid).unwrap();
    assert!(procs.exited(pid));
    assert_eq!(procs.kill_process(pid), Err(libc::ESRCH));
    // A held command can be interrupted too.
    let held = procs.create_process(&argv(&["work"])).unwrap();
    procs.kill_process(held).unwrap();
    assert!(procs.exited(held));
}

#[test]
fn attach_failures_are_told_apart() {
    let pmc = machine(1);
    let procs = process_control(&pmc);
    let id = clock_counter(&pmc);
    // A target that is gone is passed over; with no other, none attached.
    let pid = procs.create_process(&argv(&["work"])).unwrap();
    procs.kill_process(pid).unwrap();
    assert_eq!(
        attach_pmcs(&pmc, [(id, "clock")], &[pid]),
        Err(AttachError::NoneAttached)
    );
    assert_eq!(
        AttachError::NoneAttached.to_string(),
        "ERROR: No processes were attached to."
    );
    // A running PMC cannot be attached: that ends the attaching.
    let live = procs.create_process(&argv(&["work"])).unwrap();
    pmc.start(id).unwrap();
    let e = attach_pmcs(&pmc, [(id, "clock")], &[live]).unwrap_err();
    assert_eq!(
        e,
        AttachError::Failed {
            name: "clock".into(),
            pid: live,
            errno: libc::EBUSY
        }
    );
    assert_eq!(
        e.to_string(),
        format!("ERROR: cannot attach pmc \"clock\" to process {live}")
    );
}

#[test]
fn a_command_may_name_one_of_the_machines_programs() {
    let pmc = machine(1);
    let procs = process_control(&pmc);
    let pid = procs
        .create_process(&argv(&["/usr/bin/calls", "10"]))
        .expect("calls is a program of the machine");
    assert!(!procs.exited(pid), "held until started");
    procs.start_process(pid).unwrap();
    for _ in 0..1000 {
        if procs.exited(pid) {
            return;
        }
        procs.wait(std::time::Duration::from_millis(10));
    }
    panic!("calls 10 did not end");
}

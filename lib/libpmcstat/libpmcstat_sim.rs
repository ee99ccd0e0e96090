//! Process control on the simulated machine of libpmc's simulator
//! transport (feature `sim`).
//!
//! Commands name the machine's programs: `work [SECONDS [THREADS]]` runs
//! the work program with THREADS threads (default 1, at most 64) for
//! SECONDS seconds of simulated time (default 1), then exits; each of
//! ksim's real workload programs (`calls`, `sort`, ...) runs with its
//! arguments until it exits; any other name fails as a failed exec. A
//! command is a child of this program's simulated process, forked at once
//! and held before its exec until it is started, as pmcstat's command is
//! on FreeBSD.

use core::ffi::c_int;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use pmc::libpmc_sim::SimTransport;

use crate::libpmcstat_process::{CreateError, StartError};
use crate::{Pid, ProcessControl};

/// A command of the simulated machine, as parsed from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    /// Clock ticks it runs before it exits.
    pub ticks: u64,
    /// Threads of its process.
    pub threads: u32,
}

/// What a held child will run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// The work program.
    Work(Command),
    /// One of the machine's real programs, by name, with its arguments.
    Program(String, Vec<String>),
}

impl Command {
    /// Parses `work [SECONDS [THREADS]]` (`work` may have a directory in
    /// front); None for anything else, at `hz` clock ticks a second.
    pub fn parse(argv: &[String], hz: u64) -> Option<Command> {
        let name = argv.first()?;
        if name.rsplit('/').next()? != "work" || argv.len() > 3 {
            return None;
        }
        let seconds: f64 = argv.get(1).map_or(Some(1.0), |s| {
            s.parse().ok().filter(|v: &f64| *v > 0.0 && v.is_finite())
        })?;
        let threads: u32 = argv
            .get(2)
            .map_or(Some(1), |s| s.parse().ok().filter(|n| (1..=64).contains(n)))?;
        Some(Command {
            ticks: ((seconds * hz as f64) as u64).max(1),
            threads,
        })
    }
}

/// Process control on the simulated machine behind `sim`.
#[derive(Debug)]
pub struct SimProcesses<'a> {
    sim: &'a SimTransport,
    /// Commands created and not started yet, by pid.
    held: Mutex<BTreeMap<Pid, Held>>,
}

impl<'a> SimProcesses<'a> {
    /// Process control on the machine of `sim`.
    pub fn new(sim: &'a SimTransport) -> SimProcesses<'a> {
        SimProcesses {
            sim,
            held: Mutex::new(BTreeMap::new()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<Pid, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ProcessControl for SimProcesses<'_> {
    fn create_process(&self, argv: &[String]) -> Result<Pid, CreateError> {
        let what = match Command::parse(argv, SimTransport::hz()) {
            Some(cmd) => Held::Work(cmd),
            // Else one of the machine's real programs; any other name
            // fails as a failed exec.
            None => {
                let name = argv.first().ok_or(CreateError::Exec(libc::ENOENT))?;
                let base = name.rsplit('/').next().unwrap_or(name);
                if !pmc::libpmc_sim::PROGRAMS.contains(&base) {
                    return Err(CreateError::Exec(libc::ENOENT));
                }
                Held::Program(base.to_string(), argv[1..].to_vec())
            }
        };
        // The child of the program, held before its exec: not runnable.
        let pid = self.sim.fork_held().map_err(CreateError::Fork)? as Pid;
        self.held().insert(pid, what);
        Ok(pid)
    }

    fn start_process(&self, pid: Pid) -> Result<(), StartError> {
        let what = self
            .held()
            .remove(&pid)
            .ok_or(StartError::Token(libc::ESRCH))?;
        match what {
            Held::Work(cmd) => self.sim.run_work(pid as u32, cmd.threads, cmd.ticks),
            Held::Program(name, args) => self.sim.run_program(pid as u32, &name, &args),
        }
        .map_err(StartError::Token)
    }

    fn exited(&self, pid: Pid) -> bool {
        if self.held().contains_key(&pid) {
            return false;
        }
        // A process the scheduler never ran is not one of ours: gone.
        self.sim.job_exited(pid as u32).unwrap_or(true)
    }

    fn kill_process(&self, pid: Pid) -> Result<(), c_int> {
        // The work program does not catch SIGINT: it exits at once.
        let held = self.held().remove(&pid).is_some();
        self.sim.kill(pid as u32, held)
    }

    fn wait(&self, duration: Duration) {
        self.sim.sleep(duration);
    }

    fn processes(&self) -> Result<Vec<(Pid, String)>, c_int> {
        Ok(self
            .sim
            .processes()?
            .into_iter()
            .map(|(p, c)| (p as Pid, c))
            .collect())
    }
}

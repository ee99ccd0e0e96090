//! libpmcstat: the helpers of pmcstat(8), as FreeBSD keeps them apart
//! from the program (`lib/libpmcstat`, an internal library).
//!
//! So far this holds pmcstat's process control ([`libpmcstat_process`]):
//! the command that pmcstat creates held before its exec and then
//! starts, the target processes that `-t` names, attaching the process
//! PMCs to the targets, and the wait for the command's exit. It happens
//! through a [`ProcessControl`]: the machine pmcstat runs on (fork(2),
//! execvp(3), kill(2), the process table), or, with the feature `sim`,
//! the simulated machine behind libpmc's simulator transport
//! ([`libpmcstat_sim`]). [`process_control`] picks the one that goes with
//! the pmc(3) connection.
//!
//! pmc(3) needs none of this, which is why libpmc's transport has none
//! of it.
//!
//! The analysis side turns a log into profiles: [`libpmcstat_logging`]
//! follows the log's processes and what each has mapped where, reads the
//! images those mappings name ([`libpmcstat_image`], with their symbols,
//! [`libpmcstat_symbol`], and DWARF line tables), and hands each call
//! chain sample to the analysis plugins of pmcstat (`-G`, `-g`, ...).
//! FreeBSD's C sources beside these files stay in C for the C programs
//! that link them (usr.sbin/pmc).

use core::ffi::c_int;
use std::time::Duration;

pub mod libpmcstat_image;
pub mod libpmcstat_logging;
pub mod libpmcstat_process;
pub mod libpmcstat_string;
pub mod libpmcstat_symbol;

#[cfg(feature = "sim")]
pub mod libpmcstat_sim;

pub use libpmcstat_process::{
    AttachError, CreateError, HostProcesses, StartError, attach_pmcs, find_targets,
};

/// A process id.
pub type Pid = i32;

/// What pmcstat does with processes, on the machine it measures.
pub trait ProcessControl: Send + Sync {
    /// `pmcstat_create_process`: creates a process for the command `argv`
    /// (`argv[0]` looked up in `PATH`), held before its exec so that PMCs
    /// can be attached to it first; returns its pid.
    fn create_process(&self, argv: &[String]) -> Result<Pid, CreateError>;

    /// `pmcstat_start_process`: lets a process made by
    /// [`ProcessControl::create_process`] exec its command.
    fn start_process(&self, pid: Pid) -> Result<(), StartError>;

    /// Whether a process made by [`ProcessControl::create_process`] has
    /// exited (FreeBSD's `EVFILT_PROC` `NOTE_EXIT`); it is reaped then.
    fn exited(&self, pid: Pid) -> bool;

    /// `pmcstat_kill_process`: interrupts the command (SIGINT), as pmcstat
    /// does when it is interrupted itself.
    fn kill_process(&self, pid: Pid) -> Result<(), c_int>;

    /// Lets `duration` pass: the real clock here, simulated clock ticks on
    /// the simulated machine (which runs in the meantime).
    fn wait(&self, duration: Duration);

    /// The machine's processes as (pid, command name), as
    /// `kvm_getprocs(KERN_PROC_PROC)` lists them.
    fn processes(&self) -> Result<Vec<(Pid, String)>, c_int>;
}

/// The process control of the machine behind `pmc`'s connection: the
/// simulated one when the connection is libpmc's simulator transport
/// (feature `sim`), else this machine.
pub fn process_control(pmc: &pmc::pmc::Pmc) -> Box<dyn ProcessControl + '_> {
    #[cfg(feature = "sim")]
    if let Some(sim) = pmc.transport().simulator() {
        return Box::new(libpmcstat_sim::SimProcesses::new(sim));
    }
    let _ = pmc;
    Box::new(HostProcesses::new())
}

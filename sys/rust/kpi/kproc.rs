//! Kernel processes (kproc(9)) that sleep until woken and then run one
//! pass of their work.

use crate::malloc::KBox;

use crate::errno::KResult;
use crate::proc::Pid;

/// One pass of a kernel process's loop.
pub type KprocFn = KBox<dyn Fn() + Send + Sync>;

/// A kernel process; dropping it without [`Kproc::stop`] leaves it asleep.
#[derive(Debug)]
pub struct Kproc(u64);

/// `kproc_create` of a process named `name` running `body` whenever it is
/// woken. EAGAIN when the system cannot create a process.
pub fn kproc_create(name: &str, body: KprocFn) -> KResult<Kproc> {
    crate::backend::kproc_create(name, body).map(Kproc)
}

impl Kproc {
    /// `wakeup`: run a pass soon.
    pub fn wakeup(&self) {
        crate::backend::kproc_wakeup(self.0);
    }
    /// Runs a last pass and waits for the process to exit.
    pub fn stop(self) {
        crate::backend::kproc_stop(self.0);
    }
    /// Its pid.
    pub fn pid(&self) -> Option<Pid> {
        crate::backend::kproc_pid(self.0)
    }
}

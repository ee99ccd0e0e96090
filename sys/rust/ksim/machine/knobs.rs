//! The kernel environment and sysctls, and what tests may read of the
//! machine: the console, signals, the witness, the allocation ledger and
//! fault injection, soft events, clocks, system calls and kernel processes.

use super::*;

impl Machine {
    /// Sets a kernel environment variable (a loader tunable).
    pub fn kenv_set(&self, name: &str, value: &str) {
        self.st().kenv.insert(name.into(), value.into());
    }

    /// Sets an integer sysctl such as `security.bsd.unprivileged_syspmcs`.
    pub fn sysctl_set(&self, name: &str, value: i64) {
        self.st().sysctl.insert(name.into(), value);
    }

    /// sysctl(8) writing a string sysctl: its handler validates the value
    /// (an errno for a bad one) and the value is kept.
    pub fn sysctl_write_str(&self, name: &str, value: &str) -> Result<(), i32> {
        let handler = self.0.handlers().sysctl_str.get(name).cloned();
        let handler = handler.ok_or(2)?; // ENOENT
        let (_, tid) = self.spawn(Cred::root(), "sysctl");
        self.in_thread(tid, || handler(value))?;
        self.st().sysctl_str.insert(name.into(), value.into());
        Ok(())
    }

    /// Reads a string sysctl. `kern.hwpmc.cpuid` is the kernel's own
    /// (kern_pmc.c, present with `options HWPMC_HOOKS`).
    pub fn sysctl_str(&self, name: &str) -> Option<String> {
        let st = self.0.st();
        if name == "kern.hwpmc.cpuid" && st.cfg.kernel_pmc_version != 0 {
            return Some(st.cfg.cpuid.clone());
        }
        st.sysctl_str.get(name).cloned()
    }

    /// The ktr(4) trace buffer.
    pub fn ktr(&self) -> Vec<String> {
        self.0.st().ktr.clone()
    }

    /// Reads an integer sysctl.
    pub fn sysctl_get(&self, name: &str) -> Option<i64> {
        self.0.st().sysctl.get(name).copied()
    }

    /// Lines the kernel printed.
    pub fn console(&self) -> Vec<String> {
        self.0.st().console.clone()
    }

    /// Signals sent, as (pid, signal), in order.
    pub fn signals(&self) -> Vec<(u32, i32)> {
        self.0.st().signals.clone()
    }

    /// Rule violations the witness saw.
    pub fn violations(&self) -> Vec<Violation> {
        self.0.st().witness.violations.clone()
    }

    /// Kernel allocations still live, and their bytes.
    pub fn kmem_live(&self) -> (usize, usize) {
        let st = self.0.st();
        (st.kmem.live.len(), st.kmem.live.values().sum())
    }

    /// Lock acquisitions so far, per lock class (the driver's kpi locks
    /// and the kernel's own that the simulator models, such as
    /// `pmc-softs`), whether or not the witness checks them.
    pub fn lock_acquisitions(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.0
            .st()
            .witness
            .acquired
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    /// Kernel allocation calls so far.
    pub fn kmem_calls(&self) -> u64 {
        self.0.st().kmem.calls
    }

    /// Makes the `n`th kernel allocation from now (1 = the next) fail.
    pub fn fail_alloc_in(&self, n: u64) {
        let mut st = self.st();
        st.kmem.fail_at = Some(st.kmem.calls + n);
    }

    /// Stops failing allocations.
    pub fn clear_alloc_failure(&self) {
        self.st().kmem.fail_at = None;
    }

    /// The software events and their users.
    pub fn soft_events(&self) -> Vec<SoftEvent> {
        self.0.st().soft_events.clone()
    }

    /// The TSC of `cpu`.
    pub fn tsc(&self, cpu: u32) -> u64 {
        self.0.st().cpus[cpu as usize].tsc
    }

    /// Registered system call numbers.
    pub fn syscalls(&self) -> Vec<u32> {
        self.0.handlers().syscalls.keys().copied().collect()
    }

    /// Kernel processes alive, by name.
    pub fn kprocs(&self) -> Vec<String> {
        let st = self.0.st();
        st.kprocs
            .values()
            .filter_map(|k| st.procs.get(&k.pid).map(|p| p.info.comm.clone()))
            .collect()
    }
}

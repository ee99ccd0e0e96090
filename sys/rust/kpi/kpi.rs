//! kpi: the only door from hwpmc, hwt and the trace backends to the kernel.
//!
//! Each module offers a small safe type or function over a FreeBSD KPI
//! (named in its documentation). Two backends serve the same API, chosen at
//! compile time: the simulated machine of `ksim` (feature `sim`) and, with
//! the build integration, the FreeBSD kernel itself. Kernel crates use only
//! `core`, `alloc`, `uapi` and this crate, and carry no `#[cfg]` for the
//! simulator.
//!
//! Conventions that mirror the kernel: allocation is fallible and says
//! whether it may sleep ([`malloc::Wait`]); locks are spin or sleep locks
//! with guards, checked by the simulator's witness; errors are FreeBSD
//! errno values ([`Errno`]).
#![no_std]

extern crate alloc;
#[cfg(feature = "sim")]
extern crate std;

#[cfg(not(any(feature = "sim", feature = "freebsd")))]
compile_error!("kpi: no backend selected (feature sim or freebsd)");
#[cfg(all(feature = "sim", feature = "freebsd"))]
compile_error!("kpi: features sim and freebsd exclude each other");

#[cfg(feature = "sim")]
#[path = "kpi_sim.rs"]
mod backend;

#[cfg(all(feature = "freebsd", not(feature = "sim")))]
#[path = "kpi_freebsd.rs"]
mod backend;

/// panic(9): for the kernel module's panic handler.
#[cfg(all(feature = "freebsd", not(feature = "sim")))]
pub fn kernel_panic(msg: &str) -> ! {
    backend::panic(msg)
}

pub mod cpu;
pub mod errno;
pub mod file;
pub mod hooks;
pub mod kproc;
pub mod malloc;
pub mod proc;
pub mod stack;
pub mod sync;
pub mod sysctl;
pub mod time;
pub mod uio;

pub use errno::{Errno, KResult};

/// Text formatted into a fixed buffer, without allocating: for trace
/// points and panics, which may run in interrupt context. Longer text is
/// cut at a character boundary.
#[derive(Debug)]
pub struct LineBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> LineBuf<N> {
    /// An empty line.
    pub const fn new() -> Self {
        LineBuf {
            buf: [0; N],
            len: 0,
        }
    }
    /// The text so far.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Default for LineBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Write for LineBuf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let mut n = s.len().min(N - self.len);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// `printf(9)`: one console line.
pub fn printf(line: &str) {
    backend::printf(line);
}

/// A system call handler: raw arguments in, a value or an errno out.
pub type SyscallFn = alloc::sync::Arc<dyn Fn(&[u64]) -> KResult<i64> + Send + Sync>;

/// `syscall_register` with a dynamic slot: the handler gets the raw
/// arguments and returns a value or an errno. Returns the slot number.
pub fn syscall_register(handler: SyscallFn) -> u32 {
    backend::syscall_register(handler)
}

/// `syscall_deregister`.
pub fn syscall_deregister(num: u32) {
    backend::syscall_deregister(num);
}

/// Facts about the running kernel that kern_pmc.c provides.
pub mod kern_pmc {
    use alloc::string::String;
    use alloc::vec::Vec;

    /// `pmc_kernel_version`: the PMC ABI the kernel was built with, or 0
    /// when it lacks `options HWPMC_HOOKS`.
    pub fn pmc_kernel_version() -> u32 {
        super::backend::pmc_kernel_version()
    }
    /// `pmc_cpuid`: the CPU identification string.
    pub fn pmc_cpuid() -> String {
        super::backend::pmc_cpuid()
    }
    /// The registered software events (`pmc_soft_ev_register`), as
    /// (name, event code).
    pub fn soft_events() -> Vec<(String, u32)> {
        super::backend::soft_events()
    }
    /// Whether a software event with `code` is registered
    /// (`pmc_soft_ev_acquire`); allocates nothing.
    pub fn soft_event_registered(code: u32) -> bool {
        super::backend::soft_event_registered(code)
    }
    /// Marks a software event used (`delta` +1) or unused (-1): its probe
    /// calls the hook only while used (`ps_running`).
    pub fn soft_event_running(code: u32, delta: i32) {
        super::backend::soft_event_running(code, delta);
    }
    /// The kernel and its loaded modules (`linker_hwpmc_list_objects`).
    pub fn kernel_objects() -> Vec<crate::proc::Mapping> {
        super::backend::kernel_objects()
    }
    /// Tells hardclock that `cpu` has samples to process
    /// (`DPCPU_SET(pmc_sampled, 1)`), which makes it call the hook with
    /// [`crate::hooks::Hook::DoSamples`].
    pub fn set_cpu_sampled(cpu: u32) {
        super::backend::set_cpu_sampled(cpu);
    }
}

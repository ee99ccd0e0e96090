//! kpi: the only door from hwpmc, hwt and the trace backends to the kernel.
//!
//! Each module offers a small safe type or function over a FreeBSD KPI
//! (named in its documentation). Two backends serve the same API, chosen at
//! compile time: the simulated machine of `ksim` (feature `sim`) and, with
//! the build integration, the FreeBSD kernel itself. Kernel crates use only
//! `core`, `alloc`, `uapi` and this crate, and carry no `#[cfg]` for the
//! simulator.
//!
//! # The kernel's rules, and what enforces them
//!
//! | rule | from | enforced by |
//! |---|---|---|
//! | no malloc or free, `M_NOWAIT` included, with a spin lock held or in a critical section | malloc(9); kern_malloc.c asserts `td_critnest == 0` | witness: `AllocUnderSpin`, `AllocInCriticalSection`, `FreeUnderSpin`, `FreeInCriticalSection` |
//! | no allocation in interrupt (filter) or NMI context | malloc(9) | witness: `AllocInInterrupt`, `FreeInInterrupt` |
//! | no sleep (an `M_WAITOK` allocation, an sx lock, a sleep, a wait) with a spin lock held, in a critical section or an interrupt | locking(9), mutex(9) | witness: `SleepInAtomicContext` |
//! | no sleep with a default mutex held | mutex(9), `WITNESS_WARN(WARN_SLEEPOK)` | witness: `SleepWithMutexHeld` |
//! | an sx lock is not taken with a mutex held; a default mutex is not taken under a spin lock or in an interrupt filter | locking(9)'s table | witness: `SleepableUnderMutex`, `SleepLockUnderSpin`, `SleepLockInInterrupt` |
//! | one global order of lock classes, all kinds together | witness(4) | witness: `LockOrderReversal` (transitive over the order graph) |
//! | no lock at all in NMI context | the NMI handler can interrupt any holder | witness: `LockInNmi`; NMI producers hand data over through [`spsc`], whose producer takes none (model-checked with loom) |
//! | no recursion on non-recursive locks, no release of a lock not held, nothing held at the return to user mode | mutex(9), sx(9), `userret` | witness: `Recursion`, `NotHeld`, `LockHeldAtReturn` |
//! | a lock does not move once initialised; its name outlives it | mutex(9) keeps `lo_name` | types: locks exist only pinned ([`sync`]), names are `&'static CStr` |
//! | a lock is released by the thread that took it | mutex(9) | types: guards are not `Send` |
//! | sx readers share the data | sx(9) | types: `Sx<T>` is `Sync` only for `T: Send + Sync` |
//! | allocation is fallible and says whether it may sleep | malloc(9) `M_WAITOK`/`M_NOWAIT` | types: [`malloc`]'s `KBox`, `KVec`, `KArc` take a [`malloc::Wait`] and pass it on; lints (`clippy.toml` in sys/) forbid `String`, `Vec`, `Box`, `Arc`, `format!` and `vec!` in kernel crates |
//! | invariants are checked on INVARIANTS kernels | `KASSERT(9)` | [`kassert!`]: always in the simulator, with feature `invariants` on FreeBSD |
//! | the hooks of an exiting thread neither sleep, nor allocate, nor free | thread_exit() calls them with the process's spin lock held | ksim calls them in a critical section; the witness |
//! | `selwakeup`, `KNOTE` and `tdsendsignal` take default mutexes (the notification file's, the process's): not under a spin lock, not in an interrupt | selinfo, kqueue(9), signal(9) | the simulator's [`file::NotifyFile::post`], `hangup` and [`proc::tdsignal`] take a default mutex of the witness's: `SleepLockUnderSpin`, `SleepLockInInterrupt` |
//! | the kernel calls each hook only under its own condition (P_HWPMC; `pmc_ss_count` for the *_LOG hooks), so the driver keeps `pmc_ss_count` | sys/kern, pmckern.h | ksim tests the same conditions on the kernel's count (`tests/hooks.rs`) |
//!
//! Errors are FreeBSD errno values ([`Errno`], never 0).
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

pub mod atomic;
pub mod cdev;
pub mod cpu;
pub mod errno;
pub mod exterr;
pub mod file;
pub mod hooks;
pub mod intr;
pub mod kmod;
pub mod kproc;
pub mod malloc;
pub mod nmi;
pub mod proc;
pub mod spsc;
pub mod stack;
pub mod sync;
pub mod sysctl;
pub mod time;
pub mod uio;
#[cfg(any(feature = "sim", target_arch = "x86_64"))]
pub mod x86;

pub use errno::{Errno, KResult};

/// Whether [`kassert!`] checks its condition: always in the simulator, and
/// on FreeBSD in kernels with `options INVARIANTS` (feature `invariants`).
pub const INVARIANTS: bool = cfg!(any(feature = "sim", feature = "invariants"));

/// `KASSERT(9)`: panics with the message when `cond` is false, where
/// [`INVARIANTS`] is on; compiles to nothing (but still type-checks) where
/// it is off.
#[macro_export]
macro_rules! kassert {
    ($cond:expr, $($msg:tt)+) => {
        if $crate::INVARIANTS && !$cond {
            $crate::kassert_failed(format_args!($($msg)+));
        }
    };
}

/// The failure of a [`kassert!`]: panic(9) on FreeBSD, a Rust panic in the
/// simulator (so that tests and the random harness see it).
#[cold]
#[track_caller]
pub fn kassert_failed(args: core::fmt::Arguments<'_>) -> ! {
    let mut line = LineBuf::<256>::new();
    let _ = core::fmt::Write::write_fmt(&mut line, format_args!("KASSERT failed: {args}"));
    #[cfg(feature = "sim")]
    {
        panic!("{}", line.as_str());
    }
    #[cfg(not(feature = "sim"))]
    {
        backend::panic(line.as_str())
    }
}

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
pub type SyscallFn = malloc::KBox<dyn Fn(&[u64]) -> KResult<i64> + Send + Sync>;

/// `syscall_register` with a dynamic slot: the handler gets the raw
/// arguments and returns a value or an errno. Returns the slot number.
pub fn syscall_register(handler: SyscallFn) -> KResult<u32> {
    backend::syscall_register(handler)
}

/// `syscall_deregister`.
pub fn syscall_deregister(num: u32) {
    backend::syscall_deregister(num);
}

/// Facts about the running kernel that kern_pmc.c provides.
pub mod kern_pmc {
    use crate::KResult;
    use crate::malloc::{KVec, Wait};

    /// `pmc_kernel_version`: the PMC ABI the kernel was built with, or 0
    /// when it lacks `options HWPMC_HOOKS`.
    pub fn pmc_kernel_version() -> u32 {
        super::backend::pmc_kernel_version()
    }
    /// The PMC ABI of the tree the module is built in: `PMC_VERSION` of
    /// that tree's `sys/sys/pmc.h`, which the glue also declares as the
    /// module's version (`MODULE_VERSION(pmc, PMC_VERSION)`).  FreeBSD's
    /// hwpmc loads only on a kernel whose `pmc_kernel_version` equals it.
    /// On the simulator the tree is this one (`uapi`'s `PMC_VERSION`).
    pub fn pmc_module_version() -> u32 {
        super::backend::pmc_module_version()
    }
    /// `pmc_cpuid`: the CPU identification string.
    pub fn pmc_cpuid(wait: Wait) -> KResult<KVec<u8>> {
        super::backend::pmc_cpuid(wait)
    }
    /// Longest soft event name the kernel keeps (`PMC_NAME_MAX`).
    pub const SOFT_EVENT_NAME_MAX: usize = 64;

    /// A registered software event.
    #[derive(Debug, Clone, Copy)]
    pub struct SoftEvent {
        /// The event code.
        pub code: u32,
        name: [u8; SOFT_EVENT_NAME_MAX],
        len: usize,
    }

    impl SoftEvent {
        /// An event with `name`, cut to [`SOFT_EVENT_NAME_MAX`] bytes.
        pub fn new(name: &[u8], code: u32) -> SoftEvent {
            let len = name.len().min(SOFT_EVENT_NAME_MAX);
            let mut buf = [0; SOFT_EVENT_NAME_MAX];
            buf[..len].copy_from_slice(&name[..len]);
            SoftEvent {
                code,
                name: buf,
                len,
            }
        }
        /// The event's name.
        pub fn name(&self) -> &[u8] {
            &self.name[..self.len]
        }
    }

    /// The registered software events (`pmc_soft_ev_register`).
    pub fn soft_events(wait: Wait) -> KResult<KVec<SoftEvent>> {
        super::backend::soft_events(wait)
    }
    /// Whether a software event with `code` is registered
    /// (`pmc_soft_ev_acquire`); allocates nothing.
    #[inline]
    pub fn soft_event_registered(code: u32) -> bool {
        super::backend::soft_event_registered(code)
    }
    /// Marks a software event used (`delta` +1) or unused (-1): its probe
    /// calls the hook only while used (`ps_running`). False, and nothing
    /// changed, when no event with `code` is registered. One acquisition
    /// of the kernel's soft-event lock, as `soft_start_pmc` makes;
    /// allocates nothing.
    #[inline]
    pub fn soft_event_running(code: u32, delta: i32) -> bool {
        super::backend::soft_event_running(code, delta)
    }
    /// The kernel and its loaded modules (`linker_hwpmc_list_objects`).
    pub fn kernel_objects(wait: Wait) -> KResult<KVec<crate::proc::Mapping>> {
        super::backend::kernel_objects(wait)
    }
    /// `atomic_add_rel_int(&pmc_ss_count, delta)`: hwpmc counts in the
    /// kernel's `pmc_ss_count` the owners of running system-wide sampling
    /// PMCs (+1 at an owner's first, -1 after its last); the kernel calls
    /// the *_LOG hooks and PMC_FN_PROCESS_EXEC for every process while it
    /// is non-zero (`PMC_SYSTEM_SAMPLING_ACTIVE()`).
    pub fn pmc_ss_count_add(delta: i32) {
        super::backend::pmc_ss_count_add(delta);
    }
    /// `pmc_ss_count`, read now.
    pub fn pmc_ss_count() -> i32 {
        super::backend::pmc_ss_count()
    }
    /// `pmc_ss_count = 0`, as hwpmc's load does.
    pub fn pmc_ss_count_reset() {
        super::backend::pmc_ss_count_reset();
    }
    /// Tells hardclock that `cpu` has samples to process
    /// (`DPCPU_SET(pmc_sampled, 1)`), which makes it call the hook with
    /// [`crate::hooks::Hook::DoSamples`].
    #[inline]
    pub fn set_cpu_sampled(cpu: u32) {
        super::backend::set_cpu_sampled(cpu);
    }
}

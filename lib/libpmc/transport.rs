//! How libpmc reaches hwpmc(4): one trait, two implementations.
//!
//! - [`Syscall`] (FreeBSD): the module's dynamic system call, found with
//!   modfind("hwpmc") and modstat(2), called as `syscall(num, op, arg)`.
//! - [`crate::libpmc_sim::SimTransport`] (feature `sim`): the real hwpmc
//!   driver running on a simulated machine in this process.
//!
//! [`from_environment`] picks one: the simulator when `LIBPMC_TRANSPORT`
//! is `sim` (the simulator runner sets it), else the system call.

use core::ffi::c_int;

/// A way to issue hwpmc operations.
pub trait Transport: Send + Sync {
    /// Issues `op` with `arg` as its argument block (an empty block is a
    /// NULL argument) and returns the errno of a failure.
    fn call(&self, op: u32, arg: &mut [u8]) -> Result<(), c_int>;

    /// Lets time pass on a simulated machine: the calling program runs for
    /// `ticks` clock ticks. On a real machine time passes by itself.
    fn advance(&self, _ticks: u32) {}

    /// Waits for `duration`: the real clock on a real machine, simulated
    /// clock ticks (the program running) on a simulated one.
    fn sleep(&self, duration: std::time::Duration) {
        std::thread::sleep(duration);
    }
}

/// Environment variable naming the transport (`sim` or `syscall`).
pub const TRANSPORT_ENV: &str = "LIBPMC_TRANSPORT";

/// The transport the environment asks for.
pub fn from_environment() -> Result<Box<dyn Transport>, c_int> {
    let chosen = std::env::var(TRANSPORT_ENV);
    if let Err(std::env::VarError::NotUnicode(_)) = chosen {
        return Err(libc::EINVAL);
    }
    match chosen.as_deref() {
        #[cfg(feature = "sim")]
        Ok("sim") => Ok(Box::new(
            crate::libpmc_sim::SimTransport::from_environment()?
        )),
        Ok("syscall") | Err(_) => Syscall::find().map(|s| Box::new(s) as Box<dyn Transport>),
        // An unknown transport is a configuration error, not a missing
        // module.
        Ok(_) => Err(libc::EINVAL),
    }
}

/// The hwpmc system call of the running FreeBSD kernel.
#[derive(Debug, Clone, Copy)]
pub struct Syscall {
    #[cfg_attr(not(target_os = "freebsd"), allow(dead_code))]
    number: c_int,
}

#[cfg(target_os = "freebsd")]
mod freebsd {
    use core::ffi::{c_char, c_int, c_long};

    /// `MAXMODNAME`.
    const MAXMODNAME: usize = 32;

    /// `struct module_stat` of `<sys/module.h>`.
    #[repr(C)]
    pub struct ModuleStat {
        pub version: c_int,
        pub name: [c_char; MAXMODNAME],
        pub refs: c_int,
        pub id: c_int,
        /// `modspecific_t`: the system call number is its `intval`.
        pub data: c_long,
    }

    unsafe extern "C" {
        pub fn modfind(name: *const c_char) -> c_int;
        pub fn modstat(modid: c_int, stat: *mut ModuleStat) -> c_int;
    }
}

impl Syscall {
    /// Finds the hwpmc module's system call; the errno of modfind(2) (ENOENT
    /// when hwpmc is not loaded) on failure.
    #[cfg(target_os = "freebsd")]
    pub fn find() -> Result<Syscall, c_int> {
        let errno = || {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        // SAFETY: the name is a NUL-terminated string that lives through
        // the call.
        let id = unsafe { freebsd::modfind(c"hwpmc".as_ptr()) };
        if id < 0 {
            return Err(errno());
        }
        let mut stat = freebsd::ModuleStat {
            version: core::mem::size_of::<freebsd::ModuleStat>() as c_int,
            name: [0; 32],
            refs: 0,
            id: 0,
            data: 0,
        };
        // SAFETY: `stat` is a writable struct module_stat whose version
        // field carries its size, as modstat(2) requires.
        if unsafe { freebsd::modstat(id, &mut stat) } < 0 {
            return Err(errno());
        }
        // The system call number is the union's int member, which sits at
        // its start on every FreeBSD architecture (little endian).
        Ok(Syscall {
            number: stat.data as c_int,
        })
    }

    /// hwpmc exists only on FreeBSD: elsewhere there is no module to find.
    #[cfg(not(target_os = "freebsd"))]
    pub fn find() -> Result<Syscall, c_int> {
        Err(libc::ENOENT)
    }
}

impl Transport for Syscall {
    #[cfg(target_os = "freebsd")]
    fn call(&self, op: u32, arg: &mut [u8]) -> Result<(), c_int> {
        let ptr = if arg.is_empty() {
            core::ptr::null_mut()
        } else {
            arg.as_mut_ptr()
        };
        // SAFETY: the kernel reads and writes at most the argument block of
        // `op`, which the caller sized for it; a NULL argument is what the
        // ops that take none expect.
        let r = unsafe { libc::syscall(self.number, op as c_int, ptr) };
        if r < 0 {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        } else {
            Ok(())
        }
    }

    #[cfg(not(target_os = "freebsd"))]
    fn call(&self, _op: u32, _arg: &mut [u8]) -> Result<(), c_int> {
        Err(libc::ENOSYS)
    }
}

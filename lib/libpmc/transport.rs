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

/// A way to issue hwpmc operations: what pmc(3) needs of the machine.
/// (pmcstat's process control is libpmcstat's.)
pub trait Transport: Send + Sync {
    /// Issues `op` with `arg` as its argument block (an empty block is a
    /// NULL argument) and returns the errno of a failure.
    fn call(&self, op: u32, arg: &mut [u8]) -> Result<(), c_int>;

    /// Reads a string sysctl (sysctlbyname(3)), such as the CPU key
    /// `kern.hwpmc.cpuid`; ENOENT when the machine has no such node.
    fn sysctl_string(&self, name: &str) -> Result<String, c_int> {
        let _ = name;
        Err(libc::ENOENT)
    }

    /// The kernel's number of host signal `sig` (the simulator's kernel
    /// numbers signals as FreeBSD does); None for one it does not have.
    fn kernel_signal(&self, sig: c_int) -> Option<c_int> {
        Some(sig)
    }

    /// The simulated machine behind this transport, if it is one: what
    /// lets time pass and processes run there (libpmcstat's simulator
    /// process control, the tests).
    #[cfg(feature = "sim")]
    fn simulator(&self) -> Option<&crate::libpmc_sim::SimTransport> {
        None
    }
}

/// FreeBSD's strerror(3) text for the errno values FreeBSD has and this
/// host lacks (those [`host_errno`] turns into a near value), so that a
/// tool can say what FreeBSD would say; None for the values both have.
pub const fn freebsd_only_text(freebsd: c_int) -> Option<&'static str> {
    if cfg!(target_os = "freebsd") {
        return None;
    }
    Some(match freebsd {
        67 => "Too many processes",
        72 => "RPC struct is bad",
        73 => "RPC version wrong",
        74 => "RPC program not available",
        75 => "Program version wrong",
        76 => "Bad procedure for program",
        79 => "Inappropriate file type or format",
        80 => "Authentication error",
        81 => "Need authenticator",
        87 => "Attribute not found",
        88 => "Programming error",
        93 => "Capabilities insufficient",
        94 => "Not permitted in capability mode",
        97 => "Integrity check failed",
        _ => return None,
    })
}

std::thread_local! {
    /// The FreeBSD errno of this thread's last failed request, when the
    /// host has no such value (see [`freebsd_only_text`]).
    static LAST_FREEBSD_ONLY: core::cell::Cell<c_int> = const { core::cell::Cell::new(0) };
}

/// Notes that this thread's last request failed with FreeBSD errno
/// `freebsd` (a transport that sees FreeBSD's numbers calls it).
pub fn note_freebsd_errno(freebsd: c_int) {
    let only = if freebsd_only_text(freebsd).is_some() {
        freebsd
    } else {
        0
    };
    LAST_FREEBSD_ONLY.with(|c| c.set(only));
}

/// FreeBSD's text for host errno `host` when it stands for a FreeBSD-only
/// value this thread's last request failed with: what strerror(3) says on
/// FreeBSD for the error the driver gave (e.g. "Programming error" for
/// EDOOFUS, which this host calls EINVAL).
pub fn freebsd_text_of(host: c_int) -> Option<&'static str> {
    let last = LAST_FREEBSD_ONLY.with(|c| c.get());
    if last != 0 && host_errno(last) == host {
        freebsd_only_text(last)
    } else {
        None
    }
}

/// The host's errno value for a FreeBSD errno value (`sys/errno.h`).
///
/// The simulated machine's driver answers with FreeBSD's numbers; its
/// transport passes them through this function, so that the host's
/// strerror(3) and errno constants mean what FreeBSD's do. On FreeBSD it
/// is the identity. On Linux the numbers that differ are renumbered, and
/// the values that Linux lacks become the nearest it has:
/// EPROCLIM becomes EAGAIN; the RPC errors, EPROGMISMATCH among them,
/// EPROTO; EFTYPE and EDOOFUS ("Programming error") EINVAL; EAUTH and
/// ENEEDAUTH EACCES; ENOATTR ENODATA; ENOTCAPABLE and ECAPMODE EPERM;
/// EINTEGRITY EIO. A value FreeBSD does not define becomes EIO.
pub const fn host_errno(freebsd: c_int) -> c_int {
    #[cfg(target_os = "linux")]
    {
        use libc::*;
        match freebsd {
            // 1 to 34 are the same on both, but for 11.
            11 => EDEADLK,
            1..=34 => freebsd,
            35 => EAGAIN,
            36 => EINPROGRESS,
            37 => EALREADY,
            38 => ENOTSOCK,
            39 => EDESTADDRREQ,
            40 => EMSGSIZE,
            41 => EPROTOTYPE,
            42 => ENOPROTOOPT,
            43 => EPROTONOSUPPORT,
            44 => ESOCKTNOSUPPORT,
            45 => EOPNOTSUPP,
            46 => EPFNOSUPPORT,
            47 => EAFNOSUPPORT,
            48 => EADDRINUSE,
            49 => EADDRNOTAVAIL,
            50 => ENETDOWN,
            51 => ENETUNREACH,
            52 => ENETRESET,
            53 => ECONNABORTED,
            54 => ECONNRESET,
            55 => ENOBUFS,
            56 => EISCONN,
            57 => ENOTCONN,
            58 => ESHUTDOWN,
            59 => ETOOMANYREFS,
            60 => ETIMEDOUT,
            61 => ECONNREFUSED,
            62 => ELOOP,
            63 => ENAMETOOLONG,
            64 => EHOSTDOWN,
            65 => EHOSTUNREACH,
            66 => ENOTEMPTY,
            67 => EAGAIN, // EPROCLIM
            68 => EUSERS,
            69 => EDQUOT,
            70 => ESTALE,
            71 => EREMOTE,
            72..=76 => EPROTO, // EBADRPC ... EPROCUNAVAIL
            77 => ENOLCK,
            78 => ENOSYS,
            79 => EINVAL,      // EFTYPE
            80 | 81 => EACCES, // EAUTH, ENEEDAUTH
            82 => EIDRM,
            83 => ENOMSG,
            84 => EOVERFLOW,
            85 => ECANCELED,
            86 => EILSEQ,
            87 => ENODATA, // ENOATTR
            88 => EINVAL,  // EDOOFUS
            89 => EBADMSG,
            90 => EMULTIHOP,
            91 => ENOLINK,
            92 => EPROTO,
            93 | 94 => EPERM, // ENOTCAPABLE, ECAPMODE
            95 => ENOTRECOVERABLE,
            96 => EOWNERDEAD,
            97 => EIO, // EINTEGRITY
            _ => EIO,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        freebsd
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
        #[cfg(not(feature = "sim"))]
        Ok("sim") => {
            eprintln!(
                "libpmc: {TRANSPORT_ENV}=sim, but this libpmc was built without the \
                 simulator (the Cargo feature `sim`)"
            );
            Err(libc::EINVAL)
        }
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

    // SAFETY: modfind(2) and modstat(2) of FreeBSD's libc, declared with
    // their C signatures.
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

    #[cfg(target_os = "freebsd")]
    fn sysctl_string(&self, name: &str) -> Result<String, c_int> {
        let cname = std::ffi::CString::new(name).map_err(|_| libc::EINVAL)?;
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: `buf` has `len` writable bytes, the name is
        // NUL-terminated, and nothing is written to the node.
        let r = unsafe {
            libc::sysctlbyname(
                cname.as_ptr(),
                buf.as_mut_ptr().cast(),
                &mut len,
                core::ptr::null(),
                0,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        buf.truncate(len);
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8(buf[..end].to_vec()).map_err(|_| libc::EINVAL)
    }
}
